/* kernels/ref/bf16_ref.c - the scalar conversions every reference op rounds through.
 *
 * bf16 is the top half of an fp32; rounding is to nearest, ties to even, as torch's
 * float->bfloat16 cast does. e4m3 is the fp8 local KV pool's element (kernels/kernels.h).
 * GELU is the tanh approximation HF's gelu_pytorch_tanh uses. */
#include "kernels/ref/bf16_ref.h"

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

uint8_t ref_f32_to_e4m3(float f) {
    uint8_t sign = signbit(f) ? 0x80 : 0;
    if (isnan(f)) return (uint8_t)(sign | 0x7f);
    float a = fabsf(f);
    if (a >= 448.0f) return (uint8_t)(sign | 0x7e); /* saturate, infinities too */
    if (a < 0.015625f) {                            /* below 2^-6: subnormal, step 2^-9 */
        float q = rintf(a * 512.0f);                /* exact scaling; rintf rounds to even */
        return (uint8_t)(sign | (uint8_t)q);        /* q == 8 is the smallest normal's code */
    }
    int e;
    (void)frexpf(a, &e);                  /* a in [2^(e-1), 2^e) */
    float step = ldexpf(1.0f, e - 1 - 3); /* 3 mantissa bits */
    float r = rintf(a / step) * step;     /* may carry into the next binade: still exact */
    (void)frexpf(r, &e);
    int E = e - 1; /* r = 1.m x 2^E, E in -6..8 */
    int mant = (int)(r / ldexpf(1.0f, E) * 8.0f) - 8;
    return (uint8_t)(sign | (uint8_t)((E + 7) << 3) | (uint8_t)mant);
}

float ref_e4m3_to_f32(uint8_t v) {
    int exp = (v >> 3) & 0xf, mant = v & 7;
    float sign = v & 0x80 ? -1.0f : 1.0f;
    if ((v & 0x7f) == 0x7f) return NAN;
    if (exp == 0) return sign * ldexpf((float)mant, -9);
    return sign * ldexpf(1.0f + (float)mant / 8.0f, exp - 7);
}
