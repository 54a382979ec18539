/* kernels/ref/attn_ref.c - CPU reference of attention: the per-family prep (q/k norms, the
 * weightless v norm, RoPE, the write into the paged KV layout) and the attention core over
 * those pages.
 *
 * Follows HF's eager attention (docs/gemma4-numerics.md 2.5-2.6): scale 1.0, scores rounded
 * to bf16, softmax in fp32, probabilities rounded to bf16, P.V accumulated in fp32 and
 * rounded once. The window rule is i - W < j <= i. A one-byte layout (the fp8 local pool)
 * stores e4m3 at scale 1.0 of exactly the bf16 value the bf16 pool would store, and reads it
 * back exactly (every e4m3 value is a bf16 value); queries and outputs stay bf16. */
#include "kernels/kv_offset.h"
#include "kernels/ref/ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define BF(x) ref_round_bf16(x)
#define F(x) ref_bf16_to_f32(x)

static int kv_check(const k_kv_view *kv, const char *op) {
    if (kv->elem_bytes != 2 && kv->elem_bytes != 1) {
        fprintf(stderr, "g4pipe: error %s: refusing a %d-byte KV layout\n", op, kv->elem_bytes);
        return K_ERR_DTYPE;
    }
    return K_OK;
}

/* One KV element at element offset o, as fp32, from either width. */
static float kv_load(const k_kv_view *kv, long o) {
    if (kv->elem_bytes == 1) return ref_e4m3_to_f32(((const uint8_t *)kv->base)[o]);
    return ref_bf16_to_f32(((const bf16_t *)kv->base)[o]);
}

/* Stores the bf16 value v (already rounded) at element offset o in the family's width. */
static void kv_store(const k_kv_view *kv, long o, float v) {
    if (kv->elem_bytes == 1)
        ((uint8_t *)kv->base)[o] = ref_f32_to_e4m3(v);
    else
        ((bf16_t *)kv->base)[o] = ref_f32_to_bf16(v);
}

/* RMS(x; w) over one head vector, rounded to bf16, in place into out. */
static void head_norm(float *out, const bf16_t *x, const bf16_t *w, int d, float eps) {
    float ss = 0.0f;
    for (int j = 0; j < d; j++)
        ss += F(x[j]) * F(x[j]);
    float inv = powf(ss / (float)d + eps, -0.5f);
    for (int j = 0; j < d; j++)
        out[j] = BF(F(x[j]) * inv * (w ? F(w[j]) : 1.0f));
}

/* Rotate-half RoPE in bf16 arithmetic: bf(bf(x*cos) + bf(rot*sin)), cos/sin rounded to bf16. */
static void rope(float *x, int d, int n_rot, int pos, float base) {
    int half = d / 2;
    for (int j = 0; j < n_rot; j++) {
        float inv_freq = 1.0f / powf(base, (float)(2 * j) / (float)d);
        float angle = inv_freq * (float)pos;
        float c = BF(cosf(angle)), s = BF(sinf(angle));
        float a = x[j], b = x[j + half];
        x[j] = BF(BF(a * c) + BF(-b * s));
        x[j + half] = BF(BF(b * c) + BF(a * s));
    }
}

int ref_attn_prep(const k_attn_prep_args *a, g4_stream st) {
    (void)st;
    int rc = kv_check(&a->kv, "ref_attn_prep");
    if (rc) return rc;
    int d = a->kv.head_dim;
    float *tmp = calloc((size_t)d, sizeof(float));
    if (!tmp) return K_ERR_NO_MEMORY;
    for (int r = 0; r < a->rows; r++) {
        for (int h = 0; h < a->n_head; h++) {
            bf16_t *q = a->q + ((size_t)r * (size_t)a->n_head + (size_t)h) * (size_t)d;
            head_norm(tmp, q, a->q_norm, d, a->eps);
            rope(tmp, d, a->n_rot, a->pos[r], a->rope_base);
            for (int j = 0; j < d; j++)
                q[j] = ref_f32_to_bf16(tmp[j]);
        }
        if (!a->write_kv) continue;
        for (int h = 0; h < a->kv.n_kv_head; h++) {
            size_t in = ((size_t)r * (size_t)a->kv.n_kv_head + (size_t)h) * (size_t)d;
            long long ko = kv_view_offset(&a->kv, a->seq[r], a->pos[r], a->kv_layer, 0, h);
            long long vo = kv_view_offset(&a->kv, a->seq[r], a->pos[r], a->kv_layer, 1, h);
            if (ko < 0 || vo < 0) {
                free(tmp);
                return K_ERR_SHAPE;
            }
            head_norm(tmp, a->k_raw + in, a->k_norm, d, a->eps);
            rope(tmp, d, a->n_rot, a->pos[r], a->rope_base);
            for (int j = 0; j < d; j++)
                kv_store(&a->kv, ko + j, tmp[j]);
            head_norm(tmp, a->v_raw + in, NULL, d, a->eps);
            for (int j = 0; j < d; j++)
                kv_store(&a->kv, vo + j, tmp[j]);
        }
    }
    free(tmp);
    return K_OK;
}

/* One query head against its keys: eager attention's rounding. */
static int attend_head(const k_attention_args *a, int r, int h, float *p, float *acc) {
    int d = a->kv.head_dim;
    int group = a->n_head / a->kv.n_kv_head;
    int kvh = h / group;
    int i = a->pos[r];
    int j0 = a->window > 0 && i - a->window + 1 > 0 ? i - a->window + 1 : 0;
    const bf16_t *q = a->q + ((size_t)r * (size_t)a->n_head + (size_t)h) * (size_t)d;
    float mx = -INFINITY;
    for (int j = j0; j <= i; j++) {
        long long ko = kv_view_offset(&a->kv, a->seq[r], j, a->kv_layer, 0, kvh);
        if (ko < 0) return K_ERR_SHAPE;
        float s = 0.0f;
        for (int t = 0; t < d; t++)
            s += F(q[t]) * kv_load(&a->kv, ko + t);
        p[j - j0] = BF(s);
        if (p[j - j0] > mx) mx = p[j - j0];
    }
    float sum = 0.0f;
    for (int j = j0; j <= i; j++) {
        p[j - j0] = expf(p[j - j0] - mx);
        sum += p[j - j0];
    }
    for (int t = 0; t < d; t++)
        acc[t] = 0.0f;
    for (int j = j0; j <= i; j++) {
        float pj = BF(p[j - j0] / sum);
        long long vo = kv_view_offset(&a->kv, a->seq[r], j, a->kv_layer, 1, kvh);
        for (int t = 0; t < d; t++)
            acc[t] += pj * kv_load(&a->kv, vo + t);
    }
    bf16_t *out = a->out + ((size_t)r * (size_t)a->n_head + (size_t)h) * (size_t)d;
    for (int t = 0; t < d; t++)
        out[t] = ref_f32_to_bf16(acc[t]);
    return K_OK;
}

int ref_attention(const k_attention_args *a, g4_stream st) {
    (void)st;
    int rc = kv_check(&a->kv, "ref_attention");
    if (rc) return rc;
    if (a->kv.n_kv_head <= 0 || a->n_head % a->kv.n_kv_head) return K_ERR_SHAPE;
    int max_keys = 0;
    for (int r = 0; r < a->rows; r++)
        if (a->pos[r] + 1 > max_keys) max_keys = a->pos[r] + 1;
    float *p = malloc(sizeof(float) * (size_t)(max_keys + 1));
    float *acc = malloc(sizeof(float) * (size_t)a->kv.head_dim);
    rc = p && acc ? K_OK : K_ERR_NO_MEMORY;
    for (int r = 0; r < a->rows && rc == K_OK; r++)
        for (int h = 0; h < a->n_head && rc == K_OK; h++)
            rc = attend_head(a, r, h, p, acc);
    free(p);
    free(acc);
    return rc;
}
