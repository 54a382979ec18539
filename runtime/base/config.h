/* runtime/base/config.h - the INI configuration (read with inih) and its command-line overrides.
 *
 * Owns: the g4_config struct with every key and its default, parsing of the INI file and of
 * `--set section.key=value` assignments, per-key validation (strict numbers, ranges, enums,
 * length limits), path resolution, and the cross-key checks run once everything is read.
 * Does not own: acting on the values (main applies log.level, the loader checks model.name
 * against the compiled-in models, the backend turns kv.budget_gb = auto into bytes), and the
 * command-line syntax itself (main turns `--model DIR` into config_set("model.path=DIR")).
 *
 * Shape: one flat struct of fixed-size fields, nested by INI section, so a config can be
 * copied by assignment and needs no freeing. Loading parses into a copy and commits only on
 * success, so a failed load or --set leaves the caller's config as it was. Not thread-safe
 * (config_last_error is one static buffer); configuration happens once, at start-up. */
#ifndef G4_CONFIG_H
#define G4_CONFIG_H

#include "runtime/base/log.h"

#define G4_CONFIG_NAME_MAX 128  /* bytes, NUL included: model.name */
#define G4_CONFIG_PATH_MAX 4096 /* bytes, NUL included: model.path, model.tokenizer */

enum g4_weights_source { G4_WEIGHTS_FILE = 0, G4_WEIGHTS_DUMMY = 1 };
enum g4_kv_local { G4_KV_LOCAL_BF16 = 0, G4_KV_LOCAL_FP8 = 1 };
/* debug.backend: auto = the GPU when one is usable, else the CPU reference */
enum g4_backend { G4_BACKEND_AUTO = 0, G4_BACKEND_CPU = 1, G4_BACKEND_GPU = 2 };

typedef struct g4_config {
    struct {
        char name[G4_CONFIG_NAME_MAX];      /* compiled-in model name; "" = not given */
        char path[G4_CONFIG_PATH_MAX];      /* checkpoint folder, resolved; "" = not given */
        char tokenizer[G4_CONFIG_PATH_MAX]; /* resolved; "" until config_finish defaults it */
        enum g4_weights_source weights;     /* default G4_WEIGHTS_FILE */
    } model;
    struct {
        enum g4_kv_local local; /* element type of the sliding-window family; default bf16 */
        int page_tokens;        /* tokens per page, power of two in 1..1024; default 16 */
        double budget_gb;       /* KV budget in GB (1e9 bytes); 0 = auto (the default) */
    } kv;
    struct {
        int max_batch;     /* 1..1024, default 16 */
        int max_context;   /* tokens, 16..1048576, default 32768 */
        int prefill_chunk; /* tokens, 1..65536, default 2048 */
        /* rows a step may carry, decode rows first, the rest prompt tokens (at most
         * prefill_chunk): 0 (default) = prefill_chunk + max_batch, else max_batch+1..that */
        int step_tokens;
        int max_queue;         /* 1..1000000, default 256 */
        int cuda_graphs;       /* 0/1, default 1: replay decode-only steps from CUDA graphs */
        int pdl;               /* 0/1, default 1: programmatic dependent launch; speed only */
        int fuse_projections;  /* 0/1, default 1: q|k|v, gate|up one launch; speed only */
        int attn_fold;         /* 0/1, default 1: attention's combine in its P.V pass; speed only */
        int moe_bucket_in_up;  /* 0/1, default 1: experts bucketed in the up kernel; speed only */
        int moe_prefill_tiles; /* 0..3, default 3: prefill experts staged in a ring (2: in turn, 1:
                                  item tiles) */
        int moe_ring_zfill;    /* 0 or 1, default 1: the ring's copies zero-fill; speed only */
        int moe_half_tiles;    /* 0..2, default 2: half-empty tiles take more outputs; speed only */
        int moe_weights_a;     /* 0..2, default 0: the ring's weights on A (1 down, 2 up too) */
        int row_chain;         /* 0..3, default 3: row ops in the compact chain kernel */
        int moe_route_lanes;   /* 0/1, default 1: the router kernel's lanes form */
        int wide_loads;        /* 0/1, default 1: decode k loops in wider load groups */
        int attn_mma;          /* 0/1, default 1: attention's products on tensor cores */
        int attn_query_tiles;  /* 0..65535, default 64: launches of these rows share key loads */
        int attn_fp8_frags;    /* 0/1, default 1: e4m3 keys into mma operands without widening */
        int attn_early_lookup; /* 0/1, default 1: attention's page look-ups before the wait */
        int attn_longest_first;  /* 0/1, default 1: query tiles of the most keys start first */
        int attn_stats_together; /* 0/1, default 1: a warp's tile rows' statistics side by side */
        int attn_tile_fold; /* 0/1, default 1: query tiles combine their splits in the P.V pass */
        int attn_strided_tiles; /* 0/1, default 1: windowed rows past the fill in strided tiles */
        int attn_pair_tiles;    /* 0 or 2, default 2: query tiles two a block (kernels.h) */
        int attn_flash;     /* 0/1, default 0: folded query tiles of head dim 256 in one launch */
        int attn_prep_rows; /* 0/1, default 1: attention's prep a warp a head, angles once a row */
        int attn_prompt;    /* 0/1, default 1: prompt rows' attention on their own pass */
        int prompt_gemm;    /* 0/1, default 1: prompt rows' projections on split-k-1 cuBLASLt */
        int prompt_experts; /* 0/1, default 0: prompt rows' experts as batched cuBLASLt products */
        int prompt_tile;    /* 16..256, default 96: items a tile of those products */
        int moe_branches;   /* default 64: steps of at most this many rows run the router and
                             * experts beside the dense MLP (0 off) */
        int expert_stream;  /* 0..128, default 0 (off): experts calls of at most this many items
                             * stream their weights through bulk copies; speed only */
        int attn_splits_per_block; /* 0..16, default 0 (the launcher's choice): speed only */
        int sample_threads;        /* 0..256, default 0 (a thread per CPU): host draws */
        int text_max_tokens;       /* --text's answer limit, 1..1000000, default 512 */
    } serve;
    struct {
        enum log_level level; /* default LOG_INFO */
    } log;
    struct {
        int sync;                /* 0 or 1, default 0 */
        enum g4_backend backend; /* auto, cpu or gpu; default auto */
        int gemm;                /* debug.gemm: 0 cublaslt, 1 plain, 2 mma, 3 auto (default) */
        int check_finite;        /* 0 or 1, default 0: fail a step whose op writes NaN/inf */
        long fail_step;          /* 0 (off) or N: engine step N fails mid-forward (tests) */
        long nan_step;           /* 0 (off) or N: step N's first logits row gets a NaN (tests) */
    } debug;
} g4_config;

/* Fills *c with every default (see the field comments). Never fails. */
void config_defaults(g4_config *c);

/* Reads the INI file at ini_path over the values already in *c (call config_defaults first).
 * Relative model.path / model.tokenizer values resolve against the folder of ini_path. A key
 * given twice is an error naming both lines (--set may still override a file's value). Keys are
 * case-sensitive; lines may be indented (inih's multi-line continuation is deliberately not
 * supported); a line may hold at most inih's line limit (198 bytes with Debian's build), longer
 * lines are an error rather than truncated. Returns 0, or -1 after logging "config: <file>:<line>:
 * <section>.<key>: <why>" (unknown section or key, bad value with what is accepted, syntax error,
 * unreadable file); on -1, *c is unchanged. */
int config_load(g4_config *c, const char *ini_path);

/* Applies one command-line assignment "section.key=value" (spaces around key and value are
 * trimmed) with the same validation as config_load. Relative paths stay relative, i.e. they
 * resolve against the current directory when opened. Returns 0, or -1 after logging
 * "config: --set <assignment>: <why>"; on -1, *c is unchanged. */
int config_set(g4_config *c, const char *assignment);

/* Cross-key checks and derived defaults, once the INI and every --set are applied:
 * weights = dummy needs model.name; weights = file needs model.path; model.tokenizer defaults
 * to "<path>/tokenizer.json" when a path is given; prefill_chunk must be a multiple of
 * page_tokens and at most max_context.
 * Returns 0, or -1 after logging "config: <why>" naming the keys involved. */
int config_finish(g4_config *c);

/* The text of the last error logged by this module (without the "config: " prefix), or ""
 * if none yet. The buffer is static and overwritten by the next error. */
const char *config_last_error(void);

#endif
