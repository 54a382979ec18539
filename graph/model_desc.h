/* graph/model_desc.h - the geometry of one compiled-in Gemma 4 text decoder.
 *
 * Owns: the struct that codegen fills from graph/models/<name>.ini and that the loader
 * fills from a checkpoint's config.json, so the two can be compared field by field.
 * Does not own: weights, schedules, or anything that changes at run time.
 * Vocabulary follows docs/style.md: d_model, n_head, n_kv_head, head_dim, d_ff, n_vocab. */
#ifndef G4_MODEL_DESC_H
#define G4_MODEL_DESC_H

#include <stdint.h>

#define G4_MAX_LAYERS 64

/* Layer kinds are letters so a model's layers read as a string: "SSSSSF". */
enum g4_layer_kind { G4_LAYER_SLIDING = 'S', G4_LAYER_FULL = 'F' };

typedef struct g4_model_desc {
    const char *name;       /* compiled-in name, e.g. "gemma4-26b-a4b" */
    int d_model;            /* hidden_size */
    int n_layer;            /* num_hidden_layers */
    int n_head;             /* num_attention_heads (every layer) */
    int n_kv_head_local;    /* num_key_value_heads (sliding layers) */
    int n_kv_head_global;   /* KV heads of full layers (num_global_key_value_heads with k_eq_v) */
    int head_dim_local;     /* head_dim: 256 */
    int head_dim_global;    /* global_head_dim: 512 */
    int k_eq_v;             /* attention_k_eq_v: full layers take V from the raw K */
    int window;             /* sliding_window W: key j visible to i iff i-W < j <= i */
    int d_ff;               /* intermediate_size (dense GeGLU) */
    int double_wide;        /* use_double_wide_mlp: KV-shared layers use 2*d_ff */
    int n_kv_shared;        /* num_kv_shared_layers */
    int d_ple;              /* hidden_size_per_layer_input (0: no per-layer embeddings) */
    int n_vocab;            /* vocab_size */
    int n_vocab_ple;        /* vocab_size_per_layer_input (0 when d_ple is 0) */
    int n_expert;           /* num_experts (0: dense) */
    int top_k;              /* top_k_experts */
    int d_expert;           /* moe_intermediate_size */
    float rope_base_local;  /* rope_theta of sliding layers (default RoPE) */
    float rope_base_global; /* rope_theta of full layers (proportional RoPE) */
    float rope_partial_global;          /* partial_rotary_factor of full layers */
    float softcap;                      /* final_logit_softcapping */
    float eps;                          /* rms_norm_eps */
    char layer_kind[G4_MAX_LAYERS + 1]; /* enum g4_layer_kind per layer, NUL-terminated */
} g4_model_desc;

/* The table of every compiled-in model, written by codegen into build/gen/models.c. */
extern const g4_model_desc *const g4_models[];
extern const int g4_n_models;

/* Returns the compiled-in model called name, or NULL. */
const g4_model_desc *g4_model_find(const char *name);

/* Layer l's KV donor: l itself when it owns its KV, else the last layer before the first
 * shared layer with the same kind (docs/gemma4-numerics.md section 2.7). */
int g4_model_kv_donor(const g4_model_desc *m, int l);

/* Width of layer l's dense MLP (2*d_ff on KV-shared layers of double-wide models). */
int g4_model_d_ff(const g4_model_desc *m, int l);

#endif
