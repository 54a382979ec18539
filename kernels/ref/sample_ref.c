/* kernels/ref/sample_ref.c - CPU references of the device's greedy pick and top-k candidates.
 * argmax: a strict-greater scan in ascending id, so an equal value later never wins and ties
 * go to the lowest id; NaN reads as -inf, so a row of NaN picks id 0 (the host sampler's rule,
 * runtime/text/sampler.c). top-k: the same order, as a threshold on a 16-bit key found by counting,
 * then one pass in id order. */
#include "kernels/ref/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
        if (a->nonfinite) {
            int bad = 0;
            for (int i = 0; i < a->n_vocab && !bad; i++)
                bad = (row[i] & 0x7f80u) == 0x7f80u;
            a->nonfinite[r] = bad;
        }
    }
    return K_OK;
}

/* A 16-bit key whose unsigned order is the logit order (NaN as -inf). */
static unsigned order_key(bf16_t v) {
    if ((v & 0x7f80u) == 0x7f80u && (v & 0x7fu)) v = 0xff80u; /* NaN: -inf */
    if (v == 0x8000u) v = 0;                                  /* -0 equals +0 */
    return v & 0x8000u ? (unsigned)(~v & 0xffffu) : (unsigned)(v | 0x8000u);
}

int ref_topk(const k_topk_args *a, g4_stream st) {
    (void)st;
    if (a->rows < 0 || a->n_vocab <= 0 || a->k_max <= 0 || a->k_max > K_TOPK_MAX)
        return K_ERR_SHAPE;
    unsigned *count = calloc(65536, sizeof *count);
    if (!count) return K_ERR_DEVICE;
    for (int r = 0; r < a->rows; r++) {
        const bf16_t *row = a->logits + (size_t)r * (size_t)a->n_vocab;
        int32_t *ids = a->ids + (size_t)r * (size_t)a->k_max;
        bf16_t *vals = a->vals + (size_t)r * (size_t)a->k_max;
        int k = a->k[r] < a->n_vocab ? a->k[r] : a->n_vocab, n = 0;
        for (int j = 0; j < a->k_max; j++) {
            ids[j] = -1;
            vals[j] = 0;
        }
        if (k <= 0) continue;
        memset(count, 0, 65536 * sizeof *count);
        for (int i = 0; i < a->n_vocab; i++)
            count[order_key(row[i])]++;
        /* threshold t: fewer than k keys above it, at least k at or above it */
        unsigned t = 65535, above = 0;
        while (above + count[t] < (unsigned)k && t > 0)
            above += count[t--];
        unsigned ties = (unsigned)k - above; /* keys equal to t, lowest ids first */
        for (int i = 0; i < a->n_vocab && n < k; i++) {
            unsigned key = order_key(row[i]);
            if (key > t || (key == t && ties > 0)) {
                if (key == t) ties--;
                ids[n] = i;
                vals[n++] = row[i];
            }
        }
    }
    free(count);
    return K_OK;
}
