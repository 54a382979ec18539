/* kernels/ref/moe_ref.c - CPU reference of the mixture of experts: routing after the router's
 * logits, and the routed experts with HF's grouped_mm rounding (docs/gemma4-numerics.md 2.9):
 * each expert's down projection rounded to bf16, weighted in fp32, the top-k terms summed in
 * fp32 in rank order, one final rounding. */
#include "kernels/ref/ref.h"

#include <math.h>
#include <stdlib.h>

#define BF(x) ref_round_bf16(x)
#define F(x) ref_bf16_to_f32(x)

int ref_moe_route(const k_moe_route_args *a, g4_stream st) {
    (void)st;
    if (a->top_k <= 0 || a->top_k > a->n_expert) return K_ERR_SHAPE;
    float *p = calloc((size_t)a->n_expert, sizeof(float));
    if (!p) return K_ERR_NO_MEMORY;
    for (int r = 0; r < a->rows; r++) {
        const bf16_t *lg = a->logits + (size_t)r * (size_t)a->n_expert;
        float mx = -INFINITY, sum = 0.0f;
        for (int e = 0; e < a->n_expert; e++)
            mx = fmaxf(mx, F(lg[e]));
        for (int e = 0; e < a->n_expert; e++)
            sum += (p[e] = expf(F(lg[e]) - mx));
        for (int e = 0; e < a->n_expert; e++)
            p[e] /= sum;
        int32_t *idx = a->idx + (size_t)r * (size_t)a->top_k;
        float *w = a->weight + (size_t)r * (size_t)a->top_k;
        float wsum = 0.0f;
        for (int k = 0; k < a->top_k; k++) {
            int best = -1;
            for (int e = 0; e < a->n_expert; e++) {
                int taken = 0;
                for (int t = 0; t < k; t++)
                    taken |= idx[t] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e; /* ties: lower id */
            }
            idx[k] = best;
            w[k] = p[best];
            wsum += p[best];
        }
        for (int k = 0; k < a->top_k; k++)
            w[k] = w[k] / wsum * F(a->per_expert_scale[idx[k]]);
    }
    free(p);
    return K_OK;
}

int ref_moe_experts(const k_moe_experts_args *a, g4_stream st) {
    (void)st;
    int dm = a->d_model, de = a->d_expert;
    float *gu = calloc(2 * (size_t)de, sizeof(float));
    float *acc = calloc((size_t)dm, sizeof(float));
    if (!gu || !acc) {
        free(gu);
        free(acc);
        return K_ERR_NO_MEMORY;
    }
    for (int r = 0; r < a->rows; r++) {
        const bf16_t *x = a->x + (size_t)r * (size_t)dm;
        for (int t = 0; t < dm; t++)
            acc[t] = 0.0f;
        for (int k = 0; k < a->top_k; k++) {
            int e = a->idx[(size_t)r * (size_t)a->top_k + (size_t)k];
            if (e < 0 || e >= a->n_expert) {
                free(gu);
                free(acc);
                return K_ERR_SHAPE;
            }
            const bf16_t *wgu = a->gate_up + (size_t)e * 2 * (size_t)de * (size_t)dm;
            for (int o = 0; o < 2 * de; o++) {
                float s = 0.0f;
                for (int t = 0; t < dm; t++)
                    s += F(x[t]) * F(wgu[(size_t)o * (size_t)dm + (size_t)t]);
                gu[o] = BF(s);
            }
            for (int o = 0; o < de; o++)
                gu[o] = BF(BF(ref_gelu_tanh(gu[o])) * gu[de + o]);
            const bf16_t *wd = a->down + (size_t)e * (size_t)dm * (size_t)de;
            float wk = a->weight[(size_t)r * (size_t)a->top_k + (size_t)k];
            for (int t = 0; t < dm; t++) {
                float s = 0.0f;
                for (int o = 0; o < de; o++)
                    s += gu[o] * F(wd[(size_t)t * (size_t)de + (size_t)o]);
                acc[t] += BF(s) * wk;
            }
        }
        for (int t = 0; t < dm; t++)
            a->out[(size_t)r * (size_t)dm + (size_t)t] = ref_f32_to_bf16(acc[t]);
    }
    free(gu);
    free(acc);
    return K_OK;
}
