/* kernels/ref/sample_ref.c - CPU reference of the device's greedy pick: a strict-greater scan
 * in ascending id, so an equal value later never wins and ties go to the lowest id; NaN reads
 * as -inf, so a row of NaN picks id 0 (the host sampler's rule, runtime/sampler.c). */
#include "kernels/ref/ref.h"

#include <math.h>

static float value_of(bf16_t v) {
    float f = ref_bf16_to_f32(v);
    return isnan(f) ? -INFINITY : f;
}

int ref_argmax(const k_argmax_args *a, g4_stream st) {
    (void)st;
    if (a->rows < 0 || a->n_vocab <= 0) return K_ERR_SHAPE;
    for (int r = 0; r < a->rows; r++) {
        const bf16_t *row = a->logits + (size_t)r * (size_t)a->n_vocab;
        int32_t best = 0;
        float best_v = value_of(row[0]);
        for (int i = 1; i < a->n_vocab; i++) {
            float v = value_of(row[i]);
            if (v > best_v) {
                best_v = v;
                best = i;
            }
        }
        a->id[r] = best;
    }
    return K_OK;
}
