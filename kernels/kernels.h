/* kernels/kernels.h - the one header runtime/ sees of kernels/: op argument structs and the
 * C launchers.
 *
 * Every op has a trio (docs/style.md): a static __global__ kernel in kernels/<family>.cu,
 * its C launcher k_<op>, and the CPU reference ref_<op> in kernels/ref/ (declared in
 * kernels/ref/ref.h). Launcher and reference take the same argument struct and a stream, and
 * return 0 or a negative K_ERR_* code; they never exit. Tensors are bf16 (uint16_t bit
 * patterns) unless a field says otherwise; shapes are given outermost first. Plain C: every
 * kernels/<family>.cu includes this header so the compiler checks each definition against it. */
#ifndef G4_KERNELS_H
#define G4_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t bf16_t; /* bf16 bit pattern: the top half of an IEEE fp32 */
typedef void *g4_stream; /* cudaStream_t on the GPU; ignored by the CPU reference */

enum k_err {
    K_OK = 0,
    K_ERR_SHAPE = -1,     /* a size or alignment precondition failed */
    K_ERR_DTYPE = -2,     /* an element width this op has no twin for (e.g. e4m3 KV) */
    K_ERR_DEVICE = -3,    /* a CUDA or cuBLASLt call failed (logged with the statement) */
    K_ERR_NO_MEMORY = -4, /* a workspace allocation failed */
    K_ERR_NONFINITE = -5  /* debug.check_finite: an op wrote a NaN or an infinity */
};

/* One KV family as the kernels see it: a paged store plus per-row page tables. Page-major
 * layout [page][layer][kv: 0=K,1=V][slot][head][dim]; strides are in elements, the backing
 * store's size is in bytes (elem_bytes: 2 = bf16, 1 = e4m3). */
typedef struct k_kv_view {
    void *base;            /* backing store of the family */
    int page_tokens;       /* tokens per page */
    int n_layer;           /* layers of this family that own KV */
    int n_kv_head;         /* KV heads */
    int head_dim;          /* 256 (local family) or 512 (global family) */
    int elem_bytes;        /* 2 or 1 */
    const int32_t *tables; /* [n_seq][max_pages] physical page of each logical page, -1 none */
    int max_pages;         /* row stride of tables */
} k_kv_view;

/* out[r, :] = bf(table[ids[r], :] * scale); scale is used as given (the caller rounds it to
 * bf16 where HF does, e.g. the embedding's bf16(sqrt(d_model))). */
typedef struct k_embed_args {
    bf16_t *out;         /* [rows, width] */
    const bf16_t *table; /* [n_vocab, width] */
    const int32_t *ids;  /* [rows] */
    int rows, width, n_vocab;
    float scale;
} k_embed_args;

/* out = bf(residual + bf(in * (mean(in^2) + eps)^-0.5 * w)) per row of width; residual NULL
 * gives the plain norm, w NULL the weightless norm (v_norm, the router's input norm). out may
 * alias in or residual. */
typedef struct k_rmsnorm_args {
    bf16_t *out;            /* [rows, width] */
    const bf16_t *in;       /* [rows, width] */
    const bf16_t *w;        /* [width] or NULL */
    const bf16_t *residual; /* [rows, width] or NULL */
    int rows, width;
    float eps;
} k_rmsnorm_args;

/* y[m, 0:n] (row stride ldy, 0 = n) = bf(x[m, k] @ w[n, k]^T), fp32 accumulation. plan is the
 * backend's prepared algorithm for this weight (cuBLASLt plan on the GPU, unused on the CPU).
 * prompt_rows: the last prompt_rows of the m rows are prompt tokens, the rows before them
 * generated ones (0: every row counts as generated); on the GPU a weight with a prompt plan
 * runs each kind on its own kernel (docs/prompt-rows.md), the CPU computes both alike. */
typedef struct k_gemm_args {
    bf16_t *y;
    const bf16_t *x; /* [m, k] */
    const bf16_t *w; /* [n, k] */
    int m, n, k, ldy;
    void *plan;
    int prompt_rows;
} k_gemm_args;

/* A few projections of one input run as one op (kernels/gemm_lt.cu): q, k and v of a layer,
 * or its gate and up. Each member computes exactly what it computes alone, so the bits are
 * those of separate calls; every member has the same x, m and k (and its own w, y, n, ldy,
 * plan). On the GPU the members run in one launch where k_gemm_group_fuses says so, as
 * separate calls otherwise. */
#define K_GEMM_GROUP_MAX 3
typedef struct k_gemm_group_args {
    int n_gemms; /* 1..K_GEMM_GROUP_MAX */
    k_gemm_args g[K_GEMM_GROUP_MAX];
} k_gemm_group_args;

/* The group's own preconditions, shared by both backends: K_OK or K_ERR_SHAPE. */
static inline int k_gemm_group_check(const k_gemm_group_args *a) {
    if (a->n_gemms < 1 || a->n_gemms > K_GEMM_GROUP_MAX) return K_ERR_SHAPE;
    if (a->g[0].prompt_rows < 0 || a->g[0].prompt_rows > a->g[0].m) return K_ERR_SHAPE;
    for (int i = 1; i < a->n_gemms; i++)
        if (a->g[i].x != a->g[0].x || a->g[i].m != a->g[0].m || a->g[i].k != a->g[0].k ||
            a->g[i].prompt_rows != a->g[0].prompt_rows)
            return K_ERR_SHAPE;
    return K_OK;
}

/* Per row r at position pos[r] of sequence seq[r]: q heads get q_norm then RoPE in place;
 * when write_kv, K = RoPE(RMS(k_raw; k_norm)) and V = RMS0(v_raw) go into the family's pages
 * at slot pos % page_tokens of logical page pos / page_tokens, layer kv_layer. RoPE is
 * rotate-half over pairs (j, j + head_dim/2) for j < n_rot with inv_freq = base^(-2j/head_dim):
 * n_rot = head_dim/2 for the default RoPE, 64 of 256 pairs for the proportional one. */
typedef struct k_attn_prep_args {
    bf16_t *q;            /* [rows, n_head, head_dim], normed and rotated in place */
    const bf16_t *k_raw;  /* [rows, n_kv_head, head_dim] */
    const bf16_t *v_raw;  /* [rows, n_kv_head, head_dim]; == k_raw for k_eq_v layers */
    const bf16_t *q_norm; /* [head_dim] */
    const bf16_t *k_norm; /* [head_dim] */
    const int32_t *pos;   /* [rows] */
    const int32_t *seq;   /* [rows] row of kv.tables */
    k_kv_view kv;
    int rows, n_head, kv_layer, write_kv, n_rot;
    float rope_base, eps;
} k_attn_prep_args;

/* out[r, h, :] = softmax_j(q[r,h]·K[j]) V[j] over the keys j of seq[r] with
 * pos[r] - window < j <= pos[r] (window 0: all j <= pos[r]); scale 1.0; GQA: query head h
 * reads KV head h / (n_head / n_kv_head). max_pos bounds pos[r] from the host's side so the GPU
 * grid is sized to the step (0: the table's reach, max_pages * page_tokens - 1); no pos may
 * exceed it (the GPU writes NaN for a row whose keys its grid cannot hold). The CPU reference
 * ignores it. */
typedef struct k_attention_args {
    bf16_t *out;        /* [rows, n_head, head_dim] */
    const bf16_t *q;    /* [rows, n_head, head_dim] */
    const int32_t *pos; /* [rows] */
    const int32_t *seq; /* [rows] */
    k_kv_view kv;
    int rows, n_head, kv_layer, window;
    int max_pos;
    /* splits of a row's keys one GPU block takes in turn, 1..16; 0 lets the launcher choose by
     * the step's size. The results are the same bits whatever it is (tests force it). */
    int splits_per_block;
    /* the step's last prompt_rows rows are prompt rows (docs/prompt-rows.md: a request's prompt
     * tokens, each sequence's rows contiguous and ascending), the rows before them generated;
     * with serve.attn_prompt on, the prompt rows take their own pass (k_set_attn_prompt) */
    int prompt_rows;
} k_attention_args;

/* out[r, j] = bf(bf(gelu_tanh(a[r*lda + j])) * b[r*ldb + j]) for j < width; b NULL drops
 * the product. out has row stride width. Launches of at least K_GELU_VEC_MIN_ROWS rows whose
 * rows all start on 16 bytes take 8 elements a thread in 16-byte pieces (the same bits);
 * decode-sized ones keep an element a thread, which measured faster there. */
#define K_GELU_VEC_MIN_ROWS 64
typedef struct k_gelu_mul_args {
    bf16_t *out;
    const bf16_t *a;
    const bf16_t *b;
    int rows, width, lda, ldb;
} k_gelu_mul_args;

/* out[i] = bf(bf(a[i] + b[i]) * scale), or bf(a[i] * scale) with b NULL; scale is applied in
 * fp32 and rounded once (HF's Python-float multiplies and the bf16 layer_scalar alike). */
typedef struct k_scale_add_args {
    bf16_t *out;
    const bf16_t *a;
    const bf16_t *b;
    size_t n;
    float scale;
} k_scale_add_args;

/* out[r, j] = bf(bf(a[r, j] * v[j]) * scale): the router's input scale (a bf16 vector multiply,
 * then HF's Python-float d_model^-0.5 applied in fp32 and rounded once). */
typedef struct k_mul_vec_scale_args {
    bf16_t *out;
    const bf16_t *a; /* [rows, width] */
    const bf16_t *v; /* [width] */
    int rows, width;
    float scale;
} k_mul_vec_scale_args;

/* A few row ops of one layer run by one kernel (kernels/norm.cu), in order, each computing
 * exactly what it computes alone: the same elements per thread, the same reduction order and
 * rounding points, so the bits are those of the separate launches. An op may read what an
 * earlier op of the group wrote (a barrier separates them). Every op covers the same rows:
 * scale_add's n must be rows times its row width. */
enum k_row_kind { K_ROW_RMSNORM = 1, K_ROW_MUL_VEC_SCALE, K_ROW_SCALE_ADD };
#define K_ROW_OPS_MAX 4
typedef struct k_row_op {
    int kind; /* enum k_row_kind */
    union {
        k_rmsnorm_args rmsnorm;
        k_mul_vec_scale_args mul_vec_scale;
        k_scale_add_args scale_add;
    } u;
} k_row_op;
typedef struct k_row_ops_args {
    int rows, n_ops; /* n_ops 1..K_ROW_OPS_MAX; each op's own rows field must equal rows */
    k_row_op op[K_ROW_OPS_MAX];
} k_row_ops_args;

/* The MoE router after its logits: p = softmax_fp32(logits[r]) over n_expert, the top_k
 * largest (ties to the lower id), renormalised, times per_expert_scale. */
typedef struct k_moe_route_args {
    int32_t *idx;                   /* [rows, top_k] expert ids, best first */
    float *weight;                  /* [rows, top_k] */
    const bf16_t *logits;           /* [rows, n_expert] */
    const bf16_t *per_expert_scale; /* [n_expert] */
    int rows, n_expert, top_k;
} k_moe_route_args;

/* out[r] = bf(sum_k weight[r,k] * bf(down[e] @ bf(bf(gelu(g)) * u))), g|u = bf(x[r] @
 * gate_up[e]^T), e = idx[r,k]; the k terms summed in fp32 in rank order (HF's grouped_mm). */
typedef struct k_moe_experts_args {
    bf16_t *out;           /* [rows, d_model] */
    const bf16_t *x;       /* [rows, d_model] */
    const bf16_t *gate_up; /* [n_expert, 2*d_expert, d_model] */
    const bf16_t *down;    /* [n_expert, d_model, d_expert] */
    const int32_t *idx;    /* [rows, top_k] */
    const float *weight;   /* [rows, top_k] */
    int rows, d_model, d_expert, n_expert, top_k;
    /* the last prompt_rows rows are prompt tokens (k_gemm_args.prompt_rows): on the GPU with
     * serve.prompt_experts they run on batched cuBLASLt products (docs/prompt-rows.md) */
    int prompt_rows;
} k_moe_experts_args;

/* out[r, :] = in[src[r], :] for r < rows. */
typedef struct k_gather_rows_args {
    bf16_t *out;
    const bf16_t *in;
    const int32_t *src;
    int rows, width;
} k_gather_rows_args;

/* x = bf(bf(tanh(bf(x / cap))) * cap), elementwise in place (three bf16 ops, as HF). */
typedef struct k_softcap_args {
    bf16_t *x;
    size_t n;
    float cap;
} k_softcap_args;

/* id[r] = the index of the largest of logits[r, 0..n_vocab) (NaN counts as -inf), the lowest
 * index among equals: the greedy token, as runtime/text/sampler.c picks it. */
typedef struct k_argmax_args {
    int32_t *id;          /* [rows] */
    const bf16_t *logits; /* [rows, n_vocab] */
    int rows, n_vocab;
    /* optional out: [rows] 1 where the row holds a NaN or an infinity, else 0. Softcapped
     * logits of finite inputs are finite, so such a row is a failed computation */
    int32_t *nonfinite;
} k_argmax_args;

/* The k[r] best ids of logits row r (larger logit first, ties to the lower id, NaN as -inf),
 * written in ascending id order into ids[r, 0..k[r]) with their logits in vals; entries past
 * k[r] (up to k_max) are -1 / 0. k[r] = 0 skips row r. A sampled row with top-k then needs
 * k[r] values on the host instead of its whole row, and the host sampler picks the same token
 * from them (runtime/sched/sched.c). */
#define K_TOPK_MAX 1024
typedef struct k_topk_args {
    int32_t *ids;             /* [rows, k_max] */
    bf16_t *vals;             /* [rows, k_max] */
    const bf16_t *logits;     /* [rows, n_vocab] */
    const int32_t *k;         /* [rows], each 0..min(k_max, n_vocab) (device memory on the GPU) */
    int rows, n_vocab, k_max; /* k_max <= K_TOPK_MAX */
} k_topk_args;

/* out[i] = bf(fma(hi - lo, u(seed, i), lo)) with u a counter hash in [0, 1): seeded random
 * weights at the real geometry (model.weights = dummy), the same bits on CPU and GPU. */
typedef struct k_fill_args {
    bf16_t *out;
    size_t n;
    uint64_t seed;
    float lo, hi;
} k_fill_args;

/* ---- GPU launchers (kernels/<family>.cu) ---- */

/* A cuBLASLt plan for y[m,n] = x[m,k] @ w[n,k]^T at m <= max_m, built once at load: the same
 * algorithm for every m, so a row's result never depends on its batch (docs/gates.md). */
typedef struct k_gemm_plan k_gemm_plan;
int k_gemm_plan_create(k_gemm_plan **out, int max_m, int n, int k);
/* The same with the algorithm the heuristic picks for m = heur_m (still checked at 1 and max_m);
 * k_gemm_plan_create picks heur_m by the weight's size (kernels/gemm_lt.cu, plan_m_for). */
int k_gemm_plan_create_at(k_gemm_plan **out, int max_m, int heur_m, int n, int k);
/* What a plan was made with: the m its algorithm was asked at (heur_m; max_m after both
 * workspace tries at the smaller m failed), and the workspace bytes its algorithm needs (up to
 * 32 MB, or up to 1 GB for a plan only a larger workspace lets run at max_m). */
int k_gemm_plan_heur_m(const k_gemm_plan *plan);
size_t k_gemm_plan_workspace(const k_gemm_plan *plan);
/* Which kernel a plan runs: "cublaslt", "plain" or "mma" (NULL: no plan). */
const char *k_gemm_plan_kernel(const k_gemm_plan *plan);
void k_gemm_plan_destroy(k_gemm_plan *plan);
/* on: plans made from now on run a plain CUDA-core kernel instead of cuBLASLt (debug.gemm =
 * plain; for compute-sanitizer runs). One kernel for every m, so still batch-invariant. */
void k_gemm_plain(int on);
/* on: plans made from now on run the project's tensor-core kernel (debug.gemm = mma, on trial:
 * issue 21 step 3), weights with k % 32 != 0 the plain kernel. One kernel for every m, so
 * batch-invariant; its bits differ from cuBLASLt's. */
void k_gemm_mma(int on);
/* on: plans made from now on take the tensor-core kernel for weights of at most
 * K_GEMM_AUTO_MMA_MAX elements with k % 32 == 0 and cuBLASLt for the rest (debug.gemm = auto,
 * the default): at those sizes the tensor-core kernel was the faster one at decode and at
 * prefill, above them cuBLASLt (kernels/gemm_lt.cu, docs/perf-notes.md). The choice depends on
 * the weight's shape alone, so every m of a weight runs one kernel: batch-invariant. */
#define K_GEMM_AUTO_MMA_MAX (32ll << 20)
void k_gemm_auto(int on);
/* on: plans that auto makes on the tensor-core kernel, and cuBLASLt plans asked at less than
 * their max_m, also get a prompt plan, cuBLASLt asked at max_m and held to split-k 1, which
 * k_gemm runs a call's prompt rows on (k_gemm_args.prompt_rows): prefill at cuBLASLt's
 * prefill-sized rate, decode rows on their own kernel, each kind batch-invariant on its own
 * (serve.prompt_gemm, docs/prompt-rows.md). Read while plans are made. */
void k_gemm_prompt_plans(int on);
/* 1 when plan has a prompt plan (k_gemm_prompt_plans; none where no split-k-1 algorithm runs
 * its shape) */
int k_gemm_plan_has_prompt(const k_gemm_plan *plan);
/* on (the default): the kernels of kernels/ launch with programmatic dependent launch, each
 * grid released to start while the one before it finishes (serve.pdl; speed only, the same
 * bits). Process-wide; kernels/common.cuh, k_launch. */
void k_set_pdl(int on);
/* on: the decode projections (k_gemm, k_gemm_group at m <= 8) and the routed experts (k_moe_experts
 * with at most 8 items) load their k loop in groups of 16 (the experts' up) or 12 32-k blocks
 * through mma_rows_lo (kernels/mma.cuh) instead of 8 with registers for 16 rows: fewer
 * round trips of loads one after another at one decode row. The same mma operands in the same
 * order, so the same bits (serve.wide_loads, default on). Process-wide. */
void k_set_wide_loads(int on);
int k_gemm(const k_gemm_args *a, g4_stream st);
int k_gemm_group(const k_gemm_group_args *a, g4_stream st);
/* 1 when k_gemm_group would run this group as one launch: fusing on, more than one member, a
 * decode step (m <= 32), every member's plan on the tensor-core kernel, x and w 16-byte
 * aligned. */
int k_gemm_group_fuses(const k_gemm_group_args *a);
/* on: a k_gemm_group of a decode step (m <= 32) whose members all run the tensor-core kernel is
 * one launch (serve.fuse_projections; the same bits either way, kernels/gemm_lt.cu).
 * Process-wide, read at each call: the last engine opened sets it for all. */
void k_gemm_fuse(int on);

/* kernels/fill.cu: seeded random fill */
int k_fill_uniform(const k_fill_args *a, g4_stream st);

/* kernels/norm.cu: the row-wise and elementwise ops */
int k_embed(const k_embed_args *a, g4_stream st);
int k_rmsnorm(const k_rmsnorm_args *a, g4_stream st);
int k_gelu_mul(const k_gelu_mul_args *a, g4_stream st);
int k_scale_add(const k_scale_add_args *a, g4_stream st);
int k_mul_vec_scale(const k_mul_vec_scale_args *a, g4_stream st);
int k_gather_rows(const k_gather_rows_args *a, g4_stream st);
int k_softcap(const k_softcap_args *a, g4_stream st);
int k_row_ops(const k_row_ops_args *a, g4_stream st);
/* 2: k_rmsnorm and k_row_ops run in the compact chain kernel (kernels/norm.cu,
 * row_chain_kernel) where its preconditions hold: rows of at most 3,072 elements, or of at most
 * 6,144 in groups of at most three ops and 128 rows (1: only the first; 0: never), one width for
 * every op of a group, activation buffers that coincide or do not overlap; 3 as 2, with a
 * decode-sized group's operands from outside the group loaded at once (the default). It reads the
 * norm weights and mul_vec_scale's v before it waits on the kernel before it, so those must be
 * constants no kernel of the step writes (model weights are). The same bits either way
 * (serve.row_chain; test_ops' `row_chain` gates). Process-wide, read at each call. */
void k_set_row_chain(int mode);
/* 1 when k_row_ops would run this group (a k_rmsnorm: a group of that one op) in the chain kernel
 * at the current serve.row_chain, 0 when on the held kernels: for the gates, which must know the
 * path they test. */
int k_row_ops_chained(const k_row_ops_args *a);

/* kernels/attn_prep.cu, attn.cu, attn_window.cu, attn_mma*.cu: the per-family prep and the paged
 * attention (head dims 256 and 512) */
int k_attn_prep(const k_attn_prep_args *a, g4_stream st);
/* On: a launch of prompt rows (64 or more) runs the prep a block a row, a warp a head, each lane
 * holding the elements a thread of the one-block-a-head form held and reducing them in its
 * order, and the RoPE angles computed once a warp rather than once a head (serve.attn_prep_rows;
 * speed only: the same bits, by test_attn's `attn_prep_rows` gates). Decode steps keep the
 * block form either way. Process-wide. */
void k_set_attn_prep_rows(int on);
int k_attention(const k_attention_args *a, g4_stream st);
/* On: an attention launch of at most K_ATTN_FOLD_PAIRS (row, KV head) pairs (a decode step) of
 * a layer whose group holds at most K_ATTN_FOLD_HEAD_ELEMS outputs (heads x head dim) sums its
 * splits' partials in the P.V pass's last block of each row and KV head, not in a combine
 * launch of its own (serve.attn_fold, default on; speed only: the same sums in the same order).
 * Process-wide. */
#define K_ATTN_FOLD_PAIRS 4096
#define K_ATTN_FOLD_HEAD_ELEMS 1024
void k_set_attn_fold(int on);
/* On: every attention launch takes its products on tensor cores (kernels/attn_mma.cuh,
 * serve.attn_mma): the same rounding points, other fp32 summation orders, so other bits than the
 * CUDA-core kernels' (both within the op gate's bound of the reference). Process-wide. */
void k_set_attn_mma(int on);
/* With attn_mma on, attention launches of at least this many rows (prefill chunks; 0: none) let
 * consecutive rows of one sequence whose key tiles start at key 0 share a block, 16 / group rows
 * a block (serve.attn_query_tiles; speed only: each row's products and order are its own block's,
 * so the same bits). Process-wide. */
void k_set_attn_query_tiles(int rows);
/* The e4m3 pool's tensor-core attention builds its mma operands from the staged e4m3 rows as it
 * loads them, instead of widening each unit to bf16 rows in shared memory first
 * (serve.attn_fp8_frags, default on; speed only: the operands, so the bits, are the same). */
void k_set_attn_fp8_frags(int on);
/* With attn_mma on, the one-row attention passes (launches the query tiles do not take) look up
 * their first two units' keys in the page tables (from the rows' positions and sequences: the
 * step's inputs, which no kernel of a step writes) before they wait on the kernel before them,
 * instead of after (serve.attn_early_lookup, default on; speed only: the same offsets).
 * Process-wide. */
void k_set_attn_early_lookup(int on);
/* The query-tile attention passes (prefill-sized launches) hand the tiles of the most keys to
 * the card first (the launch's last rows, in a chunk of one prompt), so that the longest blocks
 * do not make the passes' tail (serve.attn_longest_first, default on; speed only: each tile's
 * block computes the same rows the same way, only the blocks' order changes). Process-wide. */
void k_set_attn_longest_first(int on);
/* The query-tile stats pass computes a warp's rows' online max and sum side by side, each step
 * of their reductions for all of them before the next, instead of row after row
 * (serve.attn_stats_together, default on; speed only: each row's arithmetic and order are the
 * same). Process-wide. */
void k_set_attn_stats_together(int on);
/* The query-tile passes (prefill-sized launches) on a grid one block wide along the splits
 * where the rows' splits allow (at most 16: windowed layers, and global ones up to 1,024 keys),
 * so that each block holds every split of its rows and its P.V pass adds them in split order and
 * writes the output, with the combine launch's arithmetic and NaN rule, instead of storing fp32
 * partials for a combine launch (serve.attn_tile_fold, default on; speed only: the same bits).
 * Process-wide. k_attn_tile_folds counts the launches that folded (the gates check it ran). */
void k_set_attn_tile_fold(int on);
long long k_attn_tile_folds(void);
/* Launches that ran on the query tiles, for the gates of their speed-only forms. */
long long k_attn_tile_launches(void);
/* The query-tile passes of windowed layers take a launch's rows in groups of 64 x (16 / group)
 * whose first and last rows are past the window's first fill as strided tiles: rows 64 apart,
 * whose key tiles and splits are each other's shifted by whole tiles, share a block's K and V
 * units (serve.attn_strided_tiles; speed only: each row's units, products and order are its own
 * block's). Before it those rows, every row of a long prompt's later chunks, took their blocks
 * one row after another. Process-wide; k_attn_strided_launches counts the launches (the gates
 * check they ran). */
void k_set_attn_strided_tiles(int on);
long long k_attn_strided_launches(void);
/* The query-tile passes take two tiles a block, every warp both tiles' 16 M rows of its keys and
 * dims: each staged unit serves twice the rows, and each warp's scores are two independent mma
 * chains on one key operand (serve.attn_pair_tiles: 0 off; 2 four warps and 32-key units, head
 * dim 512's unfolded grids only; any other form is off (form 1, eight warps, was taken out);
 * groups of 2 to 8; speed only: each row's units, products and order are its own block's;
 * docs/attention-design.md). Process-wide; k_attn_pair_launches counts the launches that took
 * the pair form (the gates check they ran). */
void k_set_attn_pair_tiles(int form);
long long k_attn_pair_launches(void);
/* The folded query-tile passes of head dim 256 (the windowed layers) as one launch whose block
 * takes several consecutive tiles of one KV head, K and V staged once for all of them, a warp a
 * tile against every key of a unit, scores and weights kept in registers, the splits' (max, sum)
 * in shared memory (serve.attn_flash, default 0; speed only: every operation of a row and split
 * in the folded passes' order, so the same bits; docs/attention-design.md). Blocks whose rows
 * do not all share one sequence's tiles from key 0 run the two folded passes in turn. Head dim
 * 512 and unfolded grids keep their passes. Process-wide. k_attn_flash_launches counts the
 * launches that took it (the gates check it ran). */
void k_set_attn_flash(int on);
long long k_attn_flash_launches(void);
/* Prompt rows (k_attention_args.prompt_rows) take attn_prompt.cu's pass: a block holds 64 M
 * rows (positions x query heads) of one KV head and walks their keys in units at absolute
 * positions (64 keys at head dim 256, 32 at 512), both passes in one launch: the statistics
 * (online max and sum), then p = bf(exp(s - m) / l) and P.V into one fp32 sum a row, unit after
 * unit (serve.attn_prompt, default 1). Other bits than the split plan's (no splits), the same
 * rounding points; a row's bits depend only on its own position and keys, so a prompt row gives
 * the same bits however the prompt is sliced and whatever shares its step
 * (docs/attention-design.md, "Prompt rows on their own pass"). Generated rows, and every row of
 * a head dim or group it is not built for, keep the split-KV passes. Process-wide;
 * k_attn_prompt_launches counts its launches (the gates check it ran). */
void k_set_attn_prompt(int on);
long long k_attn_prompt_launches(void);

/* kernels/sample.cu: the greedy token on the device */
int k_argmax(const k_argmax_args *a, g4_stream st);
int k_topk(const k_topk_args *a, g4_stream st);

/* kernels/moe.cu: routing and the routed experts */
int k_moe_route(const k_moe_route_args *a, g4_stream st);
int k_moe_experts(const k_moe_experts_args *a, g4_stream st);
/* on: a k_moe_experts call's prompt rows (prompt_rows) run their experts as two pointer-array
 * batched cuBLASLt products over tiles of serve.prompt_tile items (each tile one expert's; split-k
 * 1: an item's bits do not depend on its tile or how many share its expert), GeGLU between them,
 * the same rounding points and combine as the other paths; generated rows keep those
 * (serve.prompt_experts, default off: it gives prompt rows other bits than off, so it waits for a
 * re-made GPU pinned recording and the full step). One host synchronisation a call (the tile count
 * sets the batch). Process-wide; read by k_moe_experts_workspace too, so set it before the
 * workspace is reserved. */
void k_set_moe_prompt_experts(int on);
/* Items a tile of the prompt path (serve.prompt_tile): each tile reads its expert's weights, so a
 * tile past an expert's usual bucket reads them once where a smaller one reads them again; rows
 * past a tile's items are computed and dropped. In [K_PROMPT_TILE_MIN, K_PROMPT_TILE_MAX], else
 * K_ERR_SHAPE and nothing changes. An item's bits do not depend on it.
 * Set it before the workspace is reserved, as the switch. */
#define K_PROMPT_TILE_MIN 16
#define K_PROMPT_TILE_MAX 256
#define K_PROMPT_TILE_DEFAULT 96
int k_set_moe_prompt_tile(int items);
/* With the switch on, makes the prompt path's cuBLASLt plans for the model's expert shape now
 * (at load: otherwise the first prompt pays ~10 ms for them). Where cuBLASLt has no split-k-1
 * pointer-array algorithm for the shape, turns the switch off (prompt rows keep the other paths)
 * and returns K_ERR_SHAPE for the caller to say so; K_OK otherwise. Call before the workspace is
 * sized (k_moe_experts_workspace). */
int k_moe_prompt_prepare(int d_model, int d_expert, int n_expert);
/* What the prompt path has run since the process began: calls, items (rows x top_k) and tile
 * rows computed (items plus each tile's padding), for benchmarks */
void k_moe_prompt_stats(long long *calls, long long *items, long long *tile_rows);
/* On: a k_moe_experts call of at most 128 items (rows x top_k) on the tensor-core path lets
 * each block of its up kernel bucket the items itself, without the bucket kernel's launch
 * (serve.moe_bucket_in_up, default on; speed only: every item's arithmetic is the same).
 * Process-wide. */
void k_set_moe_bucket_in_up(int on);
/* on: k_moe_route runs its lanes form (kernels/moe.cu, moe_route_lanes_kernel: the same bits,
 * fewer round trips in a row; serve.moe_route_lanes, default on: measured faster). It reads
 * per_expert_scale before it waits on the kernel before it: a model constant no kernel of the
 * step writes. Process-wide, read at each call. */
void k_set_moe_route_lanes(int on);
/* max_items > 0: a k_moe_experts call of at most that many items (rows x top_k; clamped to 128)
 * on the tensor-core path runs its down projection as one warp a block that finds its expert from
 * the router's ids and copies its first weights into shared memory by bulk copies before it
 * waits for the up kernel (kernels/moe_stream.cu; serve.expert_stream, default 0: off until
 * measured). It reads idx before its grid dependency: written by k_moe_route's kernel, which has
 * ended before the up kernel between them passed its own wait (common.cuh). Speed only: the same
 * mmas on the same operands in the same order, so every item's bits are the same (test_moe's
 * `expert_stream` gates). Process-wide, read at each call. */
void k_set_moe_expert_stream(int max_items);
/* 1: a k_moe_experts call of more than 128 items (prefill) on the tensor-core path runs its
 * projections with 4 tiles of 16 items a warp, each weight fragment loaded once for all of them;
 * 2: through blocks that stage 128 items and 64 outputs in shared memory; 3: as 2, with three
 * stages in a ring and the mmas of warps that hold only padding items skipped (larger values are
 * taken as 3); 0: none of these (serve.moe_prefill_tiles, default 3; speed only: every output's
 * mma sequence is the same). Process-wide. */
void k_set_moe_prefill_tiles(int mode);
/* 1: at moe_prefill_tiles 3, the ring's copies a fixed count a thread, padding zero-filled by the
 * copy instead of a branch to a store (serve.moe_ring_zfill, default 1; speed only: the stages get
 * the same bytes, so the same bits). Process-wide, read at each call. */
void k_set_moe_ring_zfill(int on);
/* 1: with the zero-fill ring, a down block whose expert holds at most 64 items takes its odd
 * neighbour's 64 outputs too, on the 4 warps that would hold only padding, and the odd block
 * returns; 2: also an up block of at most 64 items takes 96 outputs (of gate's and of up's) on
 * 6 warps where it took 64 on 4 (serve.moe_half_tiles, default 2; larger values are taken as 2;
 * speed only: every output's mmas and their order are the same). Process-wide, read at each
 * call. */
void k_set_moe_half_tiles(int mode);
/* 1: with the zero-fill ring, the experts' down kernel puts its weight rows on the mma's A operand
 * and the items on B (the transposed product), so that a warp assembles one pair of A operands a
 * 32-k block instead of one for every item tile; 2: the up kernel too, each warp 8 outputs' gate
 * and up rows on A over all 128 items of a tile, in place of the half tiles' form
 * (serve.moe_weights_a, default 0; larger values are taken as 2; speed only: every k slot of
 * every mma multiplies the same two words in the same order, so the same bits). Process-wide,
 * read at each call. */
void k_set_moe_weights_a(int mode);

/* Device management: 0 when a usable sm_90 device is present. A build without nvcc links
 * kernels/no_gpu.c instead, whose k_device_init says so and whose other launchers refuse. */
int k_device_init(char *desc, size_t desc_len);
void *k_device_alloc(size_t bytes);
void k_device_free(void *p);
int k_copy_to_device(void *dst, const void *src, size_t bytes);
int k_copy_to_host(void *dst, const void *src, size_t bytes);
int k_sync(void);
/* Device memory not yet allocated, in bytes (0 without a device). */
size_t k_device_free_bytes(void);
/* Streams, pinned host memory, asynchronous copies and CUDA graphs: the engine's replayed
 * decode steps (serve.cuda_graphs). A graph captured on a stream replays every launch and copy
 * enqueued between k_capture_begin and k_capture_end, with the same arguments and addresses. */
typedef struct k_graph k_graph;
int k_stream_create(g4_stream *out);
/* serve.moe_branches: the next work on `to` waits for the work enqueued on `from` so far
 * (k_stream_fork), the next work on `main` for that on `side` (k_stream_join); an event each, so
 * a capture on `main` takes `side` into its graph as a branch and back */
int k_stream_fork(g4_stream from, g4_stream to);
int k_stream_join(g4_stream main, g4_stream side);
/* Makes the two events now (the first fork may come inside a graph capture) */
int k_stream_branch_setup(void);
/* serve.moe_branches: cuBLASLt calls on st get a workspace of their own (32 MB, allocated here),
 * so that a layer's two branches never share one; a plan needing more refuses to run on st */
int k_gemm_side_stream(g4_stream st);
void k_stream_destroy(g4_stream st);
int k_stream_sync(g4_stream st);
void *k_host_alloc_pinned(size_t bytes);
void k_host_free_pinned(void *p);
int k_copy_to_device_async(void *dst, const void *src, size_t bytes, g4_stream st);
int k_copy_to_host_async(void *dst, const void *src, size_t bytes, g4_stream st);
int k_capture_begin(g4_stream st);
/* Ends the capture and instantiates it into *out (NULL after a failure, capture ended). */
int k_capture_end(g4_stream st, k_graph **out);
int k_graph_launch(k_graph *g, g4_stream st);
void k_graph_destroy(k_graph *g);

/* Workspaces the ops grow on demand (kernels/common.cuh, k_scratch); reserving their largest
 * sizes up front means no allocation happens later, which graph capture requires. */
size_t k_moe_experts_workspace(int rows, int d_model, int d_expert, int n_expert, int top_k);
size_t k_attention_workspace(void);
/* Kernel attributes the attention launchers need (the window kernels' shared memory), set once
 * at start-up before any CUDA graph capture (k_workspace_reserve calls it). GPU build only. */
int k_attention_setup(void);
/* Likewise the experts' staged prefill kernels' shared-memory limit. GPU build only. */
int k_moe_setup(void);
int k_workspace_reserve(size_t moe_bytes, size_t attn_bytes);

/* CUDA events for timing named steps without synchronising between them (bench_decode). */
typedef struct k_event k_event;
int k_event_create(k_event **out);
void k_event_destroy(k_event *ev);
int k_event_record(k_event *ev, g4_stream st);
/* Milliseconds from a to b, both recorded and complete (synchronises on b). */
int k_event_elapsed_ms(k_event *a, k_event *b, float *ms);
/* Opens (on = 1) or closes the range a profiler started with its collection off records
 * (ncu --profile-from-start off), so bench_decode can hand it one decode step. */
int k_profiler_range(int on);

/* The kernel trace of `./build.sh trace` (kernels/common.cuh, K_TRACE_MARK): two stamps per
 * kernel launch of kernels/, one when its first block reaches the wait on the grid before it (it
 * is resident, its loads before the wait issued) and one when that grid has finished and the
 * wait ends. k_trace_start binds a buffer of
 * K_TRACE_MAX - 1 stamps; k_trace_take copies the stamps since the last take into out (names
 * resolved to the kernels' function names) and empties the buffer; k_trace_stop unbinds and
 * frees. In a plain build k_trace_start answers K_ERR_SHAPE ("not a trace build"). */
#define K_TRACE_MAX 16384
typedef struct k_trace_rec {
    unsigned long long t_ns; /* the global timer; record 0: the count in its low 32 bits */
    const char *name;        /* a device address of the kernel's __PRETTY_FUNCTION__ */
    unsigned at_wait;        /* 1: reached the wait, 0: the wait ended */
} k_trace_rec;
typedef struct k_trace_stamp {
    unsigned long long t_ns;
    char name[96]; /* "attn_split_kernel D=256 G=2 FP8=false PV=true KEEP=true" */
    int at_wait;   /* 1: the kernel's first block reached its wait, 0: the wait ended */
} k_trace_stamp;
int k_trace_start(void);
int k_trace_take(k_trace_stamp *out, int max, int *n);
void k_trace_stop(void);

#ifdef __cplusplus
}
#endif

#endif
