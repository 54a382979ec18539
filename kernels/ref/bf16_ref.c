/* kernels/ref/bf16_ref.c - the scalar conversions every reference op rounds through.
 *
 * bf16 is the top half of an fp32; rounding is to nearest, ties to even, as torch's
 * float->bfloat16 cast does. GELU is the tanh approximation HF's gelu_pytorch_tanh uses. */
#include "kernels/ref/ref.h"

#include <math.h>
#include <string.h>

float ref_bf16_to_f32(bf16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

bf16_t ref_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u); /* quiet NaN */
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return (bf16_t)(u >> 16);
}

float ref_round_bf16(float f) { return ref_bf16_to_f32(ref_f32_to_bf16(f)); }

float ref_gelu_tanh(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
