/* graph/schedule.h - what the generated schedule code is written against.
 *
 * Owns: the weight map of a model (g4_weights, one g4_layer_weights per layer, with a shape
 * comment on every field), the constant layer table entry, the per-step state a backend
 * fills (g4_state), the STEP macro, and the binding of op_* calls to one backend.
 * Does not own: buffer allocation (runtime/engine/engine.c), weight loading
 * (runtime/model/weights.c) or the ops themselves (kernels/).
 *
 * The op_* calls the schedule makes are bound to a backend in graph/ops.h. */
#ifndef G4_SCHEDULE_H
#define G4_SCHEDULE_H

#include "graph/model_desc.h"
#include "kernels/kernels.h"

#include "graph/ops.h"

/* Weights of one decoder layer; NULL where the layer has no such tensor. Checkpoint names in
 * the comments (prefix model.layers.N.), shapes outermost first, H = d_model. */
typedef struct g4_layer_weights {
    const bf16_t *input_norm;       /* input_layernorm [H] */
    const bf16_t *q;                /* self_attn.q_proj [n_head*hd, H] */
    const bf16_t *q_norm;           /* self_attn.q_norm [hd] */
    const bf16_t *k;                /* self_attn.k_proj [n_kv*hd, H]; NULL on KV-shared layers */
    const bf16_t *k_norm;           /* self_attn.k_norm [hd] */
    const bf16_t *v;                /* self_attn.v_proj [n_kv*hd, H]; NULL with k_eq_v */
    const bf16_t *o;                /* self_attn.o_proj [H, n_head*hd] */
    const bf16_t *post_attn_norm;   /* post_attention_layernorm [H] */
    const bf16_t *pre_ff_norm;      /* pre_feedforward_layernorm [H] */
    const bf16_t *gate;             /* mlp.gate_proj [d_ff, H] */
    const bf16_t *up;               /* mlp.up_proj [d_ff, H] */
    const bf16_t *down;             /* mlp.down_proj [H, d_ff] */
    const bf16_t *post_ff_norm;     /* post_feedforward_layernorm [H] */
    const bf16_t *pre_ff_norm_2;    /* pre_feedforward_layernorm_2 [H] (MoE) */
    const bf16_t *post_ff_norm_1;   /* post_feedforward_layernorm_1 [H] (MoE) */
    const bf16_t *post_ff_norm_2;   /* post_feedforward_layernorm_2 [H] (MoE) */
    const bf16_t *router;           /* router.proj [E, H] */
    const bf16_t *router_scale;     /* router.scale [H] */
    const bf16_t *per_expert_scale; /* router.per_expert_scale [E] */
    const bf16_t *experts_gate_up;  /* experts.gate_up_proj [E, 2*d_expert, H] */
    const bf16_t *experts_down;     /* experts.down_proj [E, H, d_expert] */
    const bf16_t *ple_gate;         /* per_layer_input_gate [Dp, H] (PLE) */
    const bf16_t *ple_proj;         /* per_layer_projection [H, Dp] (PLE) */
    const bf16_t *ple_post_norm;    /* post_per_layer_input_norm [H] (PLE) */
    float layer_scalar;             /* layer_scalar [1], read once at load */
    /* backend plans of the projections (cuBLASLt on the GPU, NULL on the CPU) */
    void *plan_q, *plan_k, *plan_v, *plan_o, *plan_gate, *plan_up, *plan_down, *plan_router;
    void *plan_ple_gate, *plan_ple_proj;
} g4_layer_weights;

typedef struct g4_weights {
    const bf16_t *embed;          /* embed_tokens [V, H], also the tied LM head */
    const bf16_t *final_norm;     /* norm [H] */
    const bf16_t *ple_embed;      /* embed_tokens_per_layer [V_ple, L*Dp] (PLE) */
    const bf16_t *ple_model_proj; /* per_layer_model_projection [L*Dp, H] (PLE) */
    const bf16_t *ple_proj_norm;  /* per_layer_projection_norm [Dp] (PLE) */
    void *plan_head, *plan_ple_model_proj;
    g4_layer_weights layer[G4_MAX_LAYERS];
} g4_weights;

/* One entry of a model's constant layer table (generated). */
typedef struct g4_layer_info {
    int kind;     /* enum g4_layer_kind */
    int owns_kv;  /* 0 on KV-shared layers */
    int kv_donor; /* the layer whose K/V this layer reads (itself when it owns them) */
    int kv_layer; /* the donor's index among its family's KV-owning layers */
    int d_ff;     /* dense MLP width (doubled on double-wide shared layers) */
} g4_layer_info;

/* The state of one engine step: rows of tokens (prefill chunks and decode rows together),
 * their metadata, the KV views and the activation buffers. Pointers are device pointers on
 * the GPU backend and host pointers on the CPU backend. Sizes are for rows <= max_rows. */
typedef struct g4_state {
    const g4_weights *w;
    g4_stream stream;
    /* serve.moe_branches: a MoE layer's router and experts run on side, beside the dense MLP on
     * stream (the layer functions' _branches form); set per step by the engine, 0 off */
    int branches;
    g4_stream side;
    int branch_veto;    /* set by a backend that cannot run branches (why: said in its log) */
    int rows;           /* tokens in this step */
    int decode_rows;    /* the leading rows that are generated tokens; prompt rows follow */
    const int32_t *ids; /* [rows] token ids */
    const int32_t *pos; /* [rows] position of each token in its sequence */
    const int32_t *seq; /* [rows] sequence slot (row of the KV page tables) */
    int max_pos;        /* the largest of pos (host-side; sizes the attention grid) */
    int attn_splits_per_block; /* serve.attn_splits_per_block: 0 lets the launcher choose */
    int out_rows;              /* rows that need logits */
    const int32_t *out_src;    /* [out_rows] which rows */
    k_kv_view kv_local;        /* sliding family */
    k_kv_view kv_global;       /* full family */
    bf16_t *x;                 /* [rows, H] residual stream */
    bf16_t *xn;                /* [rows, H] normed input of a block */
    bf16_t *xn2;               /* [rows, H] the experts' normed input (MoE) */
    bf16_t *xr;                /* [rows, H] the router's input, under branches (MoE) */
    bf16_t *t2;                /* [rows, H] the experts' output, under branches (MoE) */
    bf16_t *q;                 /* [rows, n_head*512] */
    bf16_t *k, *v;             /* [rows, n_kv*hd] raw projections */
    bf16_t *attn;              /* [rows, n_head*hd] attention output */
    bf16_t *t;                 /* [rows, H] block output before its post-norm */
    bf16_t *gu;                /* [rows, 2*d_ff_max] gate | up */
    bf16_t *act;               /* [rows, d_ff_max] */
    bf16_t *m1;                /* [rows, H] dense branch after post_feedforward_layernorm_1 */
    bf16_t *router_logits;     /* [rows, E] */
    int32_t *moe_idx;          /* [rows, top_k] */
    float *moe_w;              /* [rows, top_k] */
    bf16_t *ple;               /* [rows, L*Dp] per-layer inputs */
    bf16_t *ple_tok;           /* [rows, L*Dp] */
    bf16_t *ple_g;             /* [rows, Dp] */
    bf16_t *xo;                /* [out_rows, H] */
    bf16_t *logits;            /* [out_rows, V] */
    /* called after every step when set (timing, dumps, debug.sync) */
    int (*hook)(struct g4_state *s, int layer, const char *step);
    void *hook_ctx;
    int failed_layer; /* where the last failing step was */
    const char *failed_step;
} g4_state;

/* Runs one step name; on failure records where and returns the op's code. */
#define STEP(il, name, call)                                                                       \
    do {                                                                                           \
        int step_rc_ = (call);                                                                     \
        if (step_rc_ == 0 && s->hook) step_rc_ = s->hook(s, (il), (name));                         \
        if (step_rc_ != 0) {                                                                       \
            s->failed_layer = (il);                                                                \
            s->failed_step = (name);                                                               \
            return step_rc_;                                                                       \
        }                                                                                          \
    } while (0)

/* Runs decoder layer il through fn, returning on the first failing step. */
#define LAYER(il, fn)                                                                              \
    do {                                                                                           \
        int layer_rc_ = fn(s, (il));                                                               \
        if (layer_rc_ != 0) return layer_rc_;                                                      \
    } while (0)

/* One compiled-in schedule: a model in one local-pool variant. */
typedef struct g4_schedule {
    const g4_model_desc *model;
    const char *variant;         /* "local_bf16" or "local_fp8" */
    int local_elem_bytes;        /* 2 or 1 */
    const g4_layer_info *layers; /* [model->n_layer] */
    int (*forward)(g4_state *s); /* embed, every layer, final norm, head, softcap */
} g4_schedule;

/* The compiled-in schedules of each backend (build/gen/schedules.c, compiled per backend). */
extern const g4_schedule *const ref_schedules[];
extern const int ref_n_schedules;
extern const g4_schedule *const k_schedules[];
extern const int k_n_schedules;

/* The schedule of model name in variant ("local_bf16"/"local_fp8") from table, or NULL. */
const g4_schedule *g4_schedule_find(const g4_schedule *const *table, int n, const char *name,
                                    const char *variant);

#endif
