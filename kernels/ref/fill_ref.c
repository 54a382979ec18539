/* kernels/ref/fill_ref.c - CPU twin of the seeded random fill (kernels/fill.cu): the same
 * integer hash and one fused multiply-add, so both produce the same bits. */
#include "kernels/ref/ref.h"

#include <math.h>

float ref_fill_u(uint64_t seed, uint64_t i) {
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f); /* exact: 24 bits into a float */
}

int ref_fill_uniform(const k_fill_args *a, g4_stream st) {
    (void)st;
    for (size_t i = 0; i < a->n; i++)
        a->out[i] = ref_f32_to_bf16(fmaf(a->hi - a->lo, ref_fill_u(a->seed, i), a->lo));
    return K_OK;
}
