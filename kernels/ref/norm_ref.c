/* kernels/ref/norm_ref.c - CPU reference of the row-wise and elementwise ops: embedding,
 * RMSNorm (with the optional fused residual add), GeGLU, scaled adds, the router's input
 * scale, row gather and the final softcap.
 *
 * Rounding follows docs/gemma4-numerics.md 2.2-2.4: RMSNorm works in fp32 with pow(., -0.5)
 * and the weight applied before the single rounding; residual adds and products round to
 * bf16 after each op, as HF's bf16 tensors do. */
#include "kernels/ref/ref.h"

#include <math.h>

#define BF(x) ref_round_bf16(x)
#define F(x) ref_bf16_to_f32(x)

int ref_embed(const k_embed_args *a, g4_stream st) {
    (void)st;
    for (int r = 0; r < a->rows; r++) {
        int id = a->ids[r];
        if (id < 0 || id >= a->n_vocab) return K_ERR_SHAPE;
        const bf16_t *src = a->table + (size_t)id * (size_t)a->width;
        bf16_t *dst = a->out + (size_t)r * (size_t)a->width;
        for (int j = 0; j < a->width; j++)
            dst[j] = ref_f32_to_bf16(F(src[j]) * a->scale);
    }
    return K_OK;
}

int ref_rmsnorm(const k_rmsnorm_args *a, g4_stream st) {
    (void)st;
    for (int r = 0; r < a->rows; r++) {
        size_t o = (size_t)r * (size_t)a->width;
        float ss = 0.0f;
        for (int j = 0; j < a->width; j++)
            ss += F(a->in[o + j]) * F(a->in[o + j]);
        /* HF: pow(mean + eps, -0.5) in fp32, not rsqrt */
        float inv = powf(ss / (float)a->width + a->eps, -0.5f);
        for (int j = 0; j < a->width; j++) {
            float y = F(a->in[o + j]) * inv;
            if (a->w) y *= F(a->w[j]);
            y = BF(y);
            if (a->residual) y = F(a->residual[o + j]) + y;
            a->out[o + j] = ref_f32_to_bf16(y);
        }
    }
    return K_OK;
}

int ref_gelu_mul(const k_gelu_mul_args *a, g4_stream st) {
    (void)st;
    for (int r = 0; r < a->rows; r++) {
        for (int j = 0; j < a->width; j++) {
            float g = BF(ref_gelu_tanh(F(a->a[(size_t)r * (size_t)a->lda + (size_t)j])));
            if (a->b) g *= F(a->b[(size_t)r * (size_t)a->ldb + (size_t)j]);
            a->out[(size_t)r * (size_t)a->width + (size_t)j] = ref_f32_to_bf16(g);
        }
    }
    return K_OK;
}

int ref_scale_add(const k_scale_add_args *a, g4_stream st) {
    (void)st;
    for (size_t i = 0; i < a->n; i++) {
        float v = F(a->a[i]);
        if (a->b) v = BF(v + F(a->b[i]));
        a->out[i] = ref_f32_to_bf16(v * a->scale);
    }
    return K_OK;
}

int ref_mul_vec_scale(const k_mul_vec_scale_args *a, g4_stream st) {
    (void)st;
    for (int r = 0; r < a->rows; r++) {
        for (int j = 0; j < a->width; j++) {
            size_t i = (size_t)r * (size_t)a->width + (size_t)j;
            a->out[i] = ref_f32_to_bf16(BF(F(a->a[i]) * F(a->v[j])) * a->scale);
        }
    }
    return K_OK;
}

/* Each op in turn over all rows: the rows are independent, so this is what the GPU's
 * row-at-a-time kernel computes. */
int ref_row_ops(const k_row_ops_args *a, g4_stream st) {
    if (a->rows < 0 || a->n_ops < 1 || a->n_ops > K_ROW_OPS_MAX) return K_ERR_SHAPE;
    for (int i = 0; i < a->n_ops; i++) {
        const k_row_op *op = &a->op[i];
        int ok = op->kind == K_ROW_RMSNORM         ? op->u.rmsnorm.rows == a->rows
                 : op->kind == K_ROW_MUL_VEC_SCALE ? op->u.mul_vec_scale.rows == a->rows
                 : op->kind == K_ROW_SCALE_ADD
                     ? (a->rows == 0
                            ? op->u.scale_add.n == 0
                            : op->u.scale_add.n != 0 && op->u.scale_add.n % (size_t)a->rows == 0)
                     : 0;
        if (!ok) return K_ERR_SHAPE;
    }
    for (int i = 0; i < a->n_ops; i++) {
        const k_row_op *op = &a->op[i];
        int rc = op->kind == K_ROW_RMSNORM         ? ref_rmsnorm(&op->u.rmsnorm, st)
                 : op->kind == K_ROW_MUL_VEC_SCALE ? ref_mul_vec_scale(&op->u.mul_vec_scale, st)
                                                   : ref_scale_add(&op->u.scale_add, st);
        if (rc != K_OK) return rc;
    }
    return K_OK;
}

int ref_gather_rows(const k_gather_rows_args *a, g4_stream st) {
    (void)st;
    for (int r = 0; r < a->rows; r++) {
        const bf16_t *src = a->in + (size_t)a->src[r] * (size_t)a->width;
        bf16_t *dst = a->out + (size_t)r * (size_t)a->width;
        for (int j = 0; j < a->width; j++)
            dst[j] = src[j];
    }
    return K_OK;
}

int ref_softcap(const k_softcap_args *a, g4_stream st) {
    (void)st;
    for (size_t i = 0; i < a->n; i++) {
        float t = BF(tanhf(BF(F(a->x[i]) / a->cap)));
        a->x[i] = ref_f32_to_bf16(t * a->cap);
    }
    return K_OK;
}
