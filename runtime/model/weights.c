/* runtime/model/weights.c - binds a checkpoint's tensors to the weight map of its compiled-in
 * model.
 *
 * Owns: the list of text tensors a Gemma 4 decoder needs, with the dtype and shape each must
 * have for the matched model (docs/gemma4-numerics.md 1.3), fetched through the loader so a
 * wrong checkpoint fails here, before any compute. Pointers stay inside the loader's read-only
 * mappings; nothing is copied. Does not own: uploading to the GPU or building plans. */
#include "runtime/model/weights.h"

#include "kernels/ref/bf16_ref.h"
#include "runtime/base/log.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Fetches one bf16 tensor of the given shape (ndim 1..3) from src or fails the bind. */
#define GET(dst, d0, d1, d2, ...)                                                                  \
    do {                                                                                           \
        int64_t shape_[3] = {(d0), (d1), (d2)};                                                    \
        int ndim_ = shape_[2] != 0 ? 3 : shape_[1] != 0 ? 2 : 1;                                   \
        char name_[160];                                                                           \
        snprintf(name_, sizeof name_, __VA_ARGS__);                                                \
        (dst) = src->get(src->ctx, name_, ndim_, shape_);                                          \
        if (!(dst)) return -1;                                                                     \
    } while (0)

/* The loader as a source: exact dtype and shape, or the loader's error. */
static const void *from_loader(void *ctx, const char *name, int ndim, const int64_t *shape) {
    return loader_get(ctx, "BF16", ndim, shape, "%s", name);
}

static int bind_attention(const weights_source *src, const g4_model_desc *m, int l,
                          g4_layer_weights *L) {
    int full = m->layer_kind[l] == G4_LAYER_FULL;
    int hd = full ? m->head_dim_global : m->head_dim_local;
    int nkv = full ? m->n_kv_head_global : m->n_kv_head_local;
    int owns = g4_model_kv_donor(m, l) == l;
    GET(L->input_norm, m->d_model, 0, 0, "layers.%d.input_layernorm.weight", l);
    GET(L->q, (int64_t)m->n_head * hd, m->d_model, 0, "layers.%d.self_attn.q_proj.weight", l);
    GET(L->q_norm, hd, 0, 0, "layers.%d.self_attn.q_norm.weight", l);
    GET(L->o, m->d_model, (int64_t)m->n_head * hd, 0, "layers.%d.self_attn.o_proj.weight", l);
    GET(L->post_attn_norm, m->d_model, 0, 0, "layers.%d.post_attention_layernorm.weight", l);
    if (!owns) return 0; /* KV-shared: the donor's K/V; its own k/v weights are skipped */
    GET(L->k, (int64_t)nkv * hd, m->d_model, 0, "layers.%d.self_attn.k_proj.weight", l);
    GET(L->k_norm, hd, 0, 0, "layers.%d.self_attn.k_norm.weight", l);
    if (!(full && m->k_eq_v))
        GET(L->v, (int64_t)nkv * hd, m->d_model, 0, "layers.%d.self_attn.v_proj.weight", l);
    return 0;
}

static int bind_ffn(const weights_source *src, const g4_model_desc *m, int l, g4_layer_weights *L) {
    int ff = g4_model_d_ff(m, l);
    GET(L->pre_ff_norm, m->d_model, 0, 0, "layers.%d.pre_feedforward_layernorm.weight", l);
    GET(L->gate, ff, m->d_model, 0, "layers.%d.mlp.gate_proj.weight", l);
    GET(L->up, ff, m->d_model, 0, "layers.%d.mlp.up_proj.weight", l);
    GET(L->down, m->d_model, ff, 0, "layers.%d.mlp.down_proj.weight", l);
    GET(L->post_ff_norm, m->d_model, 0, 0, "layers.%d.post_feedforward_layernorm.weight", l);
    if (m->n_expert) {
        int64_t E = m->n_expert, H = m->d_model, I = m->d_expert;
        GET(L->pre_ff_norm_2, H, 0, 0, "layers.%d.pre_feedforward_layernorm_2.weight", l);
        GET(L->post_ff_norm_1, H, 0, 0, "layers.%d.post_feedforward_layernorm_1.weight", l);
        GET(L->post_ff_norm_2, H, 0, 0, "layers.%d.post_feedforward_layernorm_2.weight", l);
        GET(L->router, E, H, 0, "layers.%d.router.proj.weight", l);
        GET(L->router_scale, H, 0, 0, "layers.%d.router.scale", l);
        GET(L->per_expert_scale, E, 0, 0, "layers.%d.router.per_expert_scale", l);
        GET(L->experts_gate_up, E, 2 * I, H, "layers.%d.experts.gate_up_proj", l);
        GET(L->experts_down, E, H, I, "layers.%d.experts.down_proj", l);
    }
    if (m->d_ple) {
        GET(L->ple_gate, m->d_ple, m->d_model, 0, "layers.%d.per_layer_input_gate.weight", l);
        GET(L->ple_proj, m->d_model, m->d_ple, 0, "layers.%d.per_layer_projection.weight", l);
        GET(L->ple_post_norm, m->d_model, 0, 0, "layers.%d.post_per_layer_input_norm.weight", l);
    }
    const bf16_t *scalar;
    GET(scalar, 1, 0, 0, "layers.%d.layer_scalar", l);
    L->layer_scalar = ref_bf16_to_f32(scalar[0]);
    return 0;
}

int weights_bind(loader *ld, const g4_model_desc *m, g4_weights *w) {
    weights_source src = {from_loader, ld};
    if (weights_bind_source(&src, m, w) != 0) return -1;
    return loader_finish(ld, m->n_layer - m->n_kv_shared);
}

int weights_bind_source(const weights_source *src, const g4_model_desc *m, g4_weights *w) {
    memset(w, 0, sizeof *w);
    GET(w->embed, m->n_vocab, m->d_model, 0, "embed_tokens.weight");
    GET(w->final_norm, m->d_model, 0, 0, "norm.weight");
    if (m->d_ple) {
        int64_t lp = (int64_t)m->n_layer * m->d_ple;
        GET(w->ple_embed, m->n_vocab_ple, lp, 0, "embed_tokens_per_layer.weight");
        GET(w->ple_model_proj, lp, m->d_model, 0, "per_layer_model_projection.weight");
        GET(w->ple_proj_norm, m->d_ple, 0, 0, "per_layer_projection_norm.weight");
    }
    for (int l = 0; l < m->n_layer; l++) {
        if (bind_attention(src, m, l, &w->layer[l]) != 0) return -1;
        if (bind_ffn(src, m, l, &w->layer[l]) != 0) return -1;
    }
    return 0;
}
