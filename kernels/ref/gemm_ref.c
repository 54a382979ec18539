/* kernels/ref/gemm_ref.c - CPU reference of the projection: y = bf(x @ w^T) with an fp32
 * accumulator, the contract cuBLASLt's bf16 GEMM keeps (its summation order differs, so
 * results may differ by an ulp of bf16 after rounding; tests allow for that).
 *
 * The sum runs over k in order. The input row is widened to fp32 once and the weights are
 * widened inline: the CPU backend spends most of its time here, and a call per element was
 * most of that. */
#include "kernels/ref/ref.h"

#include <stdlib.h>
#include <string.h>

static inline float widen(bf16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Each member alone, in order: the group's contract is exactly that. */
int ref_gemm_group(const k_gemm_group_args *a, g4_stream st) {
    int rc = k_gemm_group_check(a);
    for (int i = 0; rc == K_OK && i < a->n_gemms; i++)
        rc = ref_gemm(&a->g[i], st);
    return rc;
}

int ref_gemm(const k_gemm_args *a, g4_stream st) {
    (void)st;
    /* prompt rows are computed as the others: the GPU's kernels for the two kinds differ only
     * in how each sums within the fp32 contract */
    if (a->m < 0 || a->n <= 0 || a->k <= 0 || a->prompt_rows < 0 || a->prompt_rows > a->m)
        return K_ERR_SHAPE;
    int ldy = a->ldy ? a->ldy : a->n;
    float *xf = malloc(sizeof(float) * (size_t)a->k);
    if (!xf) return K_ERR_NO_MEMORY;
    for (int i = 0; i < a->m; i++) {
        const bf16_t *x = a->x + (size_t)i * (size_t)a->k;
        for (int t = 0; t < a->k; t++)
            xf[t] = widen(x[t]);
        for (int o = 0; o < a->n; o++) {
            const bf16_t *w = a->w + (size_t)o * (size_t)a->k;
            float acc = 0.0f;
            for (int t = 0; t < a->k; t++)
                acc += xf[t] * widen(w[t]);
            a->y[(size_t)i * (size_t)ldy + (size_t)o] = ref_f32_to_bf16(acc);
        }
    }
    free(xf);
    return K_OK;
}

int ref_stream_fork(g4_stream from, g4_stream to) {
    (void)from, (void)to;
    return 0;
}

int ref_stream_join(g4_stream main, g4_stream side) {
    (void)main, (void)side;
    return 0;
}
