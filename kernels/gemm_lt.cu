/* kernels/gemm_lt.cu - projections through cuBLASLt: y[m,n] = bf(x[m,k] @ w[n,k]^T) with bf16
 * operands and fp32 accumulation.
 *
 * Our shapes are fixed by the model, so each weight gets a plan built once at load: the matmul
 * descriptor, the weight's layout and one algorithm (see plan_m_for), checked for the smallest
 * and the largest batch. Every batch size then runs the same algorithm, hence the same reduction
 * order per output element: a row's result does not depend on its batch mates
 * (docs/gates.md, batch invariance); the algorithm fixes its split-K too, so the K
 * reduction order of an output element never changes with m.
 *
 * Row-major x, w, y are column-major X^T, W^T, Y^T to cuBLAS, so the call computes
 * Y^T (n x m) = op(W^T) X^T with op = transpose: A = w (k x n, ld k), B = x (k x m, ld k),
 * C = D = y (n x m, ld ldy). */
#include "kernels/common.cuh"
#include "kernels/bf16.cuh"
#include "kernels/gemm_batched.h"
#include "kernels/mma.cuh"

#include <stdlib.h>

#define GEMM_WORKSPACE_BYTES (32ull << 20)
/* The cap of the second try for a weight that no algorithm asked at its heur_m runs at max_m
 * within GEMM_WORKSPACE_BYTES: split-K algorithms keep fp32 partials of max_m x n per split
 * (the 31B's down projection at a 2,064-row step: 44 MB a split). The workspace grows to what
 * such a plan needs, once, at load. */
#define GEMM_WORKSPACE_LARGE (1ull << 30)

struct k_gemm_plan {
    int max_m, heur_m, n, k;
    size_t ws_cap;  /* the workspace the heuristic was offered */
    size_t ws_need; /* the most its algorithm asks for, at 1, heur_m and max_m rows */
    int plain;      /* k_gemm_plain: the CUDA-core kernel below, no cuBLASLt */
    int mma;        /* k_gemm_mma: the tensor-core kernel below, no cuBLASLt */
    int natural;    /* a prompt plan: its algorithm held to split-k 1 (choose_algo) */
    int shares;     /* a prompt plan: the weights holding it, less one (prompt_plan_create) */
    struct k_gemm_plan *next_prompt; /* the list of live prompt plans */
    /* k_gemm_batched_plan: batch same-shape products a call, operands stride_w, stride_x and
     * stride_y elements apart (0: one product) */
    int batch;
    long long stride_w, stride_x, stride_y;
    /* k_gemm_ptrs_plan: the operands named by device arrays of pointers, batch set a call */
    int ptrs;
    /* k_gemm_prompt_plans: the cuBLASLt plan an mma plan's prompt rows run on (NULL: none) */
    struct k_gemm_plan *prompt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a;
    cublasLtMatmulAlgo_t algo;
};

static bool plain_plans;  /* k_gemm_plain: plans made from now on are plain */
static bool mma_plans;    /* k_gemm_mma: plans made from now on run gemm_mma_kernel */
static bool auto_plans;   /* k_gemm_auto: small weights gemm_mma_kernel, the rest cuBLASLt */
static bool prompt_plans; /* k_gemm_prompt_plans: auto's mma plans get a prompt plan */
static cublasLtHandle_t lt_handle;
static void *lt_workspace;
static size_t lt_workspace_bytes;
static bool lt_launched; /* a k_gemm has run: its buffer may be in a captured graph */
/* serve.moe_branches: the second stream's cuBLASLt calls get a workspace of their own, so that
 * the two branches of a layer never share one (k_gemm_side_stream) */
static cudaStream_t side_stream;
static void *side_workspace;

/* The workspace of a call on st that asks for need bytes; NULL where st is the side stream and
 * its workspace is too small (the large-workspace plans are the 31B's, which never branch) */
static void *workspace_for(cudaStream_t st, size_t need) {
    if (side_stream && st == side_stream)
        return need <= GEMM_WORKSPACE_BYTES ? side_workspace : NULL;
    return lt_workspace;
}

extern "C" int k_gemm_side_stream(g4_stream st) {
    if (!side_workspace) CUDA_CHECK(cudaMalloc(&side_workspace, GEMM_WORKSPACE_BYTES));
    side_stream = (cudaStream_t)st;
    return K_OK;
}

static int lt_init(void) {
    if (lt_handle) return K_OK;
    CUBLAS_CHECK(cublasLtCreate(&lt_handle));
    CUDA_CHECK(cudaMalloc(&lt_workspace, GEMM_WORKSPACE_BYTES));
    lt_workspace_bytes = GEMM_WORKSPACE_BYTES;
    return K_OK;
}

/* Grows the shared workspace to bytes: the new buffer first, so a failed allocation leaves the
 * old one in place (and the plan asking for it fails as out of memory). The old buffer is freed
 * only while no k_gemm has run: once one has, a captured CUDA graph may hold its address (a
 * second engine opened in the same process), so it stays allocated. */
static int lt_workspace_reserve(size_t bytes) {
    if (bytes <= lt_workspace_bytes) return K_OK;
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr, "g4pipe: error kernels: no %zu MB for a cuBLASLt workspace\n", bytes >> 20);
        return K_ERR_NO_MEMORY;
    }
    if (!lt_launched) CUDA_CHECK(cudaFree(lt_workspace)); /* waits for the device */
    lt_workspace = p;
    lt_workspace_bytes = bytes;
    return K_OK;
}

static int layout_bf16(cublasLtMatrixLayout_t *l, int rows, int cols, int ld) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(l, CUDA_R_16BF, (uint64_t)rows, (uint64_t)cols, ld));
    return K_OK;
}

/* layout_bf16 of one of a batched plan's operands (stride its elements apart; batch 0 or 1: a
 * plain layout) */
static int layout_batch(const k_gemm_plan *p, cublasLtMatrixLayout_t *l, int rows, int cols, int ld,
                        long long stride, int batch) {
    int rc = layout_bf16(l, rows, cols, ld);
    if (rc != K_OK || (batch <= 1 && !p->ptrs)) return rc;
    const int32_t count = batch;
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                  sizeof count));
    if (p->ptrs) {
        const uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode,
                                                      sizeof mode));
        return K_OK;
    }
    const int64_t offset = stride;
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                  &offset, sizeof offset));
    return K_OK;
}

static int layout_of(const k_gemm_plan *p, cublasLtMatrixLayout_t *l, int rows, int cols, int ld,
                     long long stride) {
    return layout_batch(p, l, rows, cols, ld, stride, p->batch);
}

/* 1 when algo sums k in one pass: split-k 1 (or unset) and no reduction scheme. */
static bool algo_unsplit(const cublasLtMatmulAlgo_t *algo) {
    uint32_t splits = 0, scheme = 0;
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                             sizeof splits, &got) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                             sizeof scheme, &got) != CUBLAS_STATUS_SUCCESS)
        return false;
    return splits <= 1 && scheme == CUBLASLT_REDUCTION_SCHEME_NONE;
}

/* The heuristic's best algorithm at m = heur_m, verified to also run m = 1 and m = max_m within
 * the workspace p->ws_cap; *need gets the most workspace it asks for at those m. */
static int choose_algo(k_gemm_plan *p, size_t *need) {
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = p->ws_cap;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    if (p->natural) {
        /* a prompt plan: no split-k at all, so that each output is one chain of 16-k steps
         * over k whatever m is (docs/prompt-rows.md); checked again on the algorithm below */
        uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE;
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes));
    } else if (p->ws_cap > GEMM_WORKSPACE_BYTES) {
        /* the second try: split-K partials summed in fp32 in the workspace, or none; not in
         * the bf16 output (INPLACE, OUTPUT_TYPE), which would round between the splits */
        uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes));
    }
    cublasLtMatrixLayout_t b, c;
    int rc = layout_of(p, &b, p->k, p->heur_m, p->k, p->stride_x);
    if (rc == K_OK) rc = layout_of(p, &c, p->n, p->heur_m, p->n, p->stride_y);
    cublasLtMatmulHeuristicResult_t res[8];
    int found = 0;
    if (rc == K_OK && cublasLtMatmulAlgoGetHeuristic(lt_handle, p->desc, p->a, b, c, c, pref, 8,
                                                     res, &found) != CUBLAS_STATUS_SUCCESS)
        found = 0;
    cublasLtMatrixLayout_t b1, c1, bm, cm;
    int ok = -1;
    if (rc == K_OK && layout_of(p, &b1, p->k, 1, p->k, p->stride_x) == K_OK &&
        layout_of(p, &c1, p->n, 1, p->n, p->stride_y) == K_OK &&
        layout_of(p, &bm, p->k, p->max_m, p->k, p->stride_x) == K_OK &&
        layout_of(p, &cm, p->n, p->max_m, p->n, p->stride_y) == K_OK) {
        for (int i = 0; i < found && ok < 0; i++) {
            cublasLtMatmulHeuristicResult_t chk, chk_m;
            if (p->natural && !algo_unsplit(&res[i].algo)) continue;
            if (cublasLtMatmulAlgoCheck(lt_handle, p->desc, p->a, b1, c1, c1, &res[i].algo, &chk) ==
                    CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulAlgoCheck(lt_handle, p->desc, p->a, bm, cm, cm, &res[i].algo,
                                        &chk_m) == CUBLAS_STATUS_SUCCESS &&
                chk.workspaceSize <= p->ws_cap && chk_m.workspaceSize <= p->ws_cap) {
                ok = i;
                *need = chk.workspaceSize > chk_m.workspaceSize ? chk.workspaceSize
                                                                : chk_m.workspaceSize;
                if (res[i].workspaceSize > *need) *need = res[i].workspaceSize;
            }
        }
        cublasLtMatrixLayoutDestroy(b1);
        cublasLtMatrixLayoutDestroy(c1);
        cublasLtMatrixLayoutDestroy(bm);
        cublasLtMatrixLayoutDestroy(cm);
    }
    if (rc == K_OK) {
        cublasLtMatrixLayoutDestroy(b);
        cublasLtMatrixLayoutDestroy(c);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (ok < 0) { /* k_gemm_plan_create then asks at max_m; only that failure is an error */
        if (!p->natural && p->heur_m == p->max_m && p->ws_cap == GEMM_WORKSPACE_BYTES)
            fprintf(stderr, "g4pipe: error kernels: no cuBLASLt algorithm for %d x %d x %d\n",
                    p->max_m, p->n, p->k);
        return K_ERR_SHAPE;
    }
    p->algo = res[ok].algo;
    return K_OK;
}

#ifdef G4_KERNEL_TRACE
/* The trace build only (docs/benchmarks.md): cuBLASLt's kernels carry no stamp, so their time
 * would be counted to the stamped kernel before them (the 31B's row chain showed 87 us a call).
 * This one-thread kernel, launched just before each cuBLASLt call, takes it instead: its gap runs
 * past the cuBLASLt kernel to the next stamped one. */
static __global__ void cublaslt_matmul_stamp_kernel(void) { K_GRID_DEPENDENCY(); }
#endif

/* ---- the plain kernel (debug.gemm = plain) ----
 *
 * One thread per output, its dot product in k order in fp32, rounded once to bf16: no shared
 * memory, so compute-sanitizer's racecheck of the engine's gate runs meets only our kernels
 * (cuBLASLt's draw reports of their own on every launch, and their shared-memory pipelines
 * made racecheck too slow to finish the batch-invariance gate inside a device call). Each
 * output depends only on its own row and weight row, so a row's result is the same in any
 * batch. Slow (weight rows read uncoalesced): for sanitizer and debug runs only. */
#define PLAIN_THREADS 128

static __global__ void __launch_bounds__(PLAIN_THREADS)
    gemm_plain_kernel(bf16_t *y, const bf16_t *x, const bf16_t *w, int n, int k, int ldy) {
    K_GRID_DEPENDENCY();
    /* rows on grid.x (up to 2^31 - 1), output blocks on grid.y (65,535 x 128 outputs) */
    const int j = blockIdx.y * PLAIN_THREADS + threadIdx.x, r = blockIdx.x;
    if (j >= n) return;
    const bf16_t *xr = x + (size_t)r * (size_t)k, *wj = w + (size_t)j * (size_t)k;
    float acc = 0.0f;
    for (int i = 0; i < k; i++)
        acc = fmaf(k_bf16_to_f32(xr[i]), k_bf16_to_f32(wj[i]), acc);
    y[(size_t)r * (size_t)ldy + j] = k_f32_to_bf16(acc);
}

extern "C" void k_gemm_plain(int on) { plain_plans = on != 0; }

/* ---- the tensor-core kernel (debug.gemm = mma, and auto's small weights) ----
 *
 * Rows on the M side of the mma (tiles of 16, padding past m), weights on N. A block's 4 warps
 * each take a fixed quarter of k (32-k blocks nb*w/4 .. nb*(w+1)/4) for the block's whole
 * output tile, MT row tiles x NB weight tiles of 8 (mma_tiles); the four fp32 partials of an
 * output are added in warp order, ((0 + 1) + 2) + 3, then rounded once to bf16. The split of k
 * depends on k alone, and every (row tile, weight tile) pair runs mma_rows' instruction
 * sequence whatever MT and NB are (kernels/mma.cuh), so an output's arithmetic is the same at
 * every m and in every batch: batch invariance by construction, for decode rows and prefill
 * chunks alike, and the launcher may pick the tile shape by m. Decode (m <= 32) takes MT = NB =
 * 1: ~n/8 blocks whose warps keep 4 KB of weight loads each in flight, where cuBLASLt's m = 16
 * plans ran the 26B-A4B's projections at ~1 TB/s (docs/perf-notes.md, twelfth session).
 * Larger m take 64 x 32 tiles, so x and w are read from L2 n/32 and m/64 times rather than n/8
 * and m/16 times. Needs k % 32 == 0 (the plan falls back to the plain kernel otherwise) and
 * 16-byte aligned x and w (checked at each call). */
#define MMA_GEMM_WARPS 4
#define MMA_GEMM_THREADS (32 * MMA_GEMM_WARPS)
#define MMA_GEMM_ROW_BLOCKS 16 /* grid.y of the decode form: bits do not depend on it */
#define MMA_GEMM_DECODE_M 32   /* the most rows the decode form (MT = 1) takes */
/* serve.wide_loads: at most 8 rows (a tile's lo half) take the lo form, 12 32-k blocks a group:
 * a warp's quarter of k in two round trips at k = 2,816 (three in groups of 8) at the registers
 * that keep four blocks of 128 threads an SM, as the narrow form has (at 16 a group, three: the
 * fused q|k|v and gate|up grids would take a wave more) */
#define MMA_GEMM_LO_M 8
#define MMA_GEMM_LO_U 12

/* This warp's quarter of k, 32-k blocks [*kb0, *kb1), and the lane's row of each of block bx's NB
 * weight tiles from there (NULL past n). */
template <int NB>
static __device__ __forceinline__ void gemm_warp_rows(int bx, const bf16_t *w, int n, int k,
                                                      const bf16_t *(&wrow)[NB], int *kb0,
                                                      int *kb1) {
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) >> 2;
    const int o0 = bx * (8 * NB), nb = k / 32;
    *kb0 = nb * warp / MMA_GEMM_WARPS, *kb1 = nb * (warp + 1) / MMA_GEMM_WARPS;
    const size_t off = (size_t)*kb0 * 32;
#pragma unroll
    for (int t = 0; t < NB; t++) {
        const int o = o0 + 8 * t + g;
        wrow[t] = o < n ? w + (size_t)o * (size_t)k + off : NULL;
    }
}

/* Block bx's outputs of one projection: the body of both kernels below. LO (MT = 1, m <= 8: the
 * tile's rows past the 8th are padding) takes the k loop through mma_rows_lo, U 32-k blocks a
 * group, which gives every output mma_tiles<1, NB, U>'s sums (mma.cuh). */
template <int MT, int NB, int U, bool LO = false>
static __device__ __forceinline__ void
gemm_mma_block(int bx, bf16_t *y, const bf16_t *x, const bf16_t *w, int m, int n, int k, int ldy) {
    static_assert(!LO || MT == 1, "the lo form holds one row tile");
    constexpr int VALS = MT * NB * 4; /* a lane's accumulators */
    __shared__ float part[MMA_GEMM_WARPS][VALS][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, q = lane & 3;
    const int o0 = bx * (8 * NB);
    const bf16_t *wrow[NB];
    int kb0, kb1;
    gemm_warp_rows<NB>(bx, w, n, k, wrow, &kb0, &kb1);
    const size_t off = (size_t)kb0 * 32;
    for (int r0 = blockIdx.y * 16 * MT; r0 < m; r0 += gridDim.y * 16 * MT) {
        const bf16_t *lo[MT], *hi[MT];
#pragma unroll
        for (int i = 0; i < MT; i++) {
            const int rlo = r0 + 16 * i + g, rhi = rlo + 8;
            lo[i] = rlo < m ? x + (size_t)rlo * (size_t)k + off : NULL;
            hi[i] = rhi < m ? x + (size_t)rhi * (size_t)k + off : NULL;
        }
        float acc[MT][NB][4];
        if constexpr (LO)
            mma_rows_lo<NB, U>(lo[0], wrow, (kb1 - kb0) * 32, acc[0]);
        else
            mma_tiles<MT, NB, U>(lo, hi, wrow, (kb1 - kb0) * 32, acc);
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int t = 0; t < NB; t++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    part[warp][(i * NB + t) * 4 + j][lane] = acc[i][t][j];
        __syncthreads();
        /* value e = (i * NB + t) * 4 + j of lane (g, q): d[0], d[1] are row g of tile i,
         * outputs 2q and 2q + 1 of weight tile t; d[2], d[3] row g + 8 */
        for (int e = warp; e < VALS; e += MMA_GEMM_WARPS) {
            float s = part[0][e][lane];
#pragma unroll
            for (int v = 1; v < MMA_GEMM_WARPS; v++)
                s = __fadd_rn(s, part[v][e][lane]);
            const int i = e / (NB * 4), t = e / 4 % NB, j = e % 4;
            const int r = r0 + 16 * i + g + (j < 2 ? 0 : 8), o = o0 + 8 * t + 2 * q + (j & 1);
            if (r < m && o < n) y[(size_t)r * (size_t)ldy + (size_t)o] = k_f32_to_bf16(s);
        }
        __syncthreads(); /* part is reused by the next row tile */
    }
}

template <int MT, int NB, int U, bool LO = false>
static __global__ void __launch_bounds__(MMA_GEMM_THREADS)
    gemm_mma_kernel(bf16_t *y, const bf16_t *x, const bf16_t *w, int m, int n, int k, int ldy) {
    K_GRID_DEPENDENCY();
    gemm_mma_block<MT, NB, U, LO>(blockIdx.x, y, x, w, m, n, k, ldy);
}

/* The members of a k_gemm_group in one grid: member i owns blocks first[i] .. first[i + 1] - 1
 * along x, each block exactly the block it is in the member's own launch (the same tile and
 * mma sequence), so the bits are the separate calls'. One launch instead of up to three, and
 * the small weights' blocks fill the card together (docs/perf-notes.md). */
typedef struct mma_group_table {
    int n_members;
    int first[K_GEMM_GROUP_MAX + 1];
    const bf16_t *w[K_GEMM_GROUP_MAX];
    bf16_t *y[K_GEMM_GROUP_MAX];
    int n[K_GEMM_GROUP_MAX], ldy[K_GEMM_GROUP_MAX];
} mma_group_table;

template <int MT, int NB, int U, bool LO = false>
static __global__ void __launch_bounds__(MMA_GEMM_THREADS)
    gemm_mma_group_kernel(mma_group_table t, const bf16_t *x, int m, int k) {
    /* the member by compares, and each member's fields read at constant offsets (an index into
     * the parameters would copy them to local memory) */
    const int b = blockIdx.x;
    K_GRID_DEPENDENCY();
    if (t.n_members > 2 && b >= t.first[2])
        gemm_mma_block<MT, NB, U, LO>(b - t.first[2], t.y[2], x, t.w[2], m, t.n[2], k, t.ldy[2]);
    else if (t.n_members > 1 && b >= t.first[1])
        gemm_mma_block<MT, NB, U, LO>(b - t.first[1], t.y[1], x, t.w[1], m, t.n[1], k, t.ldy[1]);
    else
        gemm_mma_block<MT, NB, U, LO>(b, t.y[0], x, t.w[0], m, t.n[0], k, t.ldy[0]);
}

static bool fuse_groups; /* k_gemm_fuse */

extern "C" void k_gemm_fuse(int on) { fuse_groups = on != 0; }

extern "C" void k_gemm_mma(int on) { mma_plans = on != 0; }

extern "C" void k_gemm_auto(int on) { auto_plans = on != 0; }

/* ---- launchers ---- */

/* Which m the heuristic is asked at, measured on the H200 (tests/bench/bench_gemm.c; figures in
 * docs/perf-notes.md, "Measurements behind the code", cuBLASLt plans): asked at the prefill
 * chunk, cuBLASLt picks large tiles that leave most SMs idle at one decode row (several times
 * the weight's byte time); asked at 16 it runs m = 1..16 fastest but a 528-row chunk several
 * times slower; at 64 it sits between. So weights up to 16M elements (every 26B-A4B layer weight
 * but global q) plan at m = 16, larger ones at 64. When no algorithm asked at that m also runs
 * max_m within the 32 MB workspace, the heuristic is asked again with up to 1 GB (the 31B's down
 * projection, whose max_m plan ran m = 16 far slower than an m = 64 plan for the same bytes), and
 * only then at max_m. Deterministic: the heuristic's answer depends only on the shapes and the
 * offered workspace, so every run of the binary uses the same algorithms. */
static int plan_m_for(int max_m, int n, int k) {
    int m = (long long)n * k <= (16ll << 20) ? 16 : 64;
    return m < max_m ? m : max_m;
}

extern "C" int k_gemm_plan_create(k_gemm_plan **out, int max_m, int n, int k) {
    const int heur = plan_m_for(max_m, n, k);
    int rc = k_gemm_plan_create_at(out, max_m, heur, n, k);
    if (rc == K_ERR_SHAPE && heur < max_m && max_m > 0 && n > 0 && k > 0 && k % 8 == 0)
        rc = k_gemm_plan_create_at(out, max_m, max_m, n, k);
    return rc;
}

static int plan_create(k_gemm_plan **out, int max_m, int heur_m, int n, int k, size_t ws_cap);
static int lt_plan_fill(k_gemm_plan *p);
static k_gemm_plan *prompt_plan_create(int max_m, int n, int k);

/* At heur_m within the usual workspace; failing that, within GEMM_WORKSPACE_LARGE (the plans
 * that succeed the first time, every weight but the 31B's down projection when this was
 * written, are the same as before the second try existed). */
extern "C" int k_gemm_plan_create_at(k_gemm_plan **out, int max_m, int heur_m, int n, int k) {
    int rc = plan_create(out, max_m, heur_m, n, k, GEMM_WORKSPACE_BYTES);
    if (rc == K_ERR_SHAPE && heur_m < max_m && max_m > 0 && heur_m > 0 && n > 0 && k > 0 &&
        k % 8 == 0)
        rc = plan_create(out, max_m, heur_m, n, k, GEMM_WORKSPACE_LARGE);
    return rc;
}

extern "C" size_t k_gemm_plan_workspace(const k_gemm_plan *p) { return p ? p->ws_need : 0; }

extern "C" int k_gemm_plan_heur_m(const k_gemm_plan *p) { return p ? p->heur_m : 0; }

extern "C" const char *k_gemm_plan_kernel(const k_gemm_plan *p) {
    return !p ? NULL : p->mma ? "mma" : p->plain ? "plain" : "cublaslt";
}

static int plan_create(k_gemm_plan **out, int max_m, int heur_m, int n, int k, size_t ws_cap) {
    *out = NULL;
    if (max_m <= 0 || heur_m <= 0 || heur_m > max_m || n <= 0 || k <= 0 || k % 8 != 0)
        return K_ERR_SHAPE;
    k_gemm_plan *p = (k_gemm_plan *)calloc(1, sizeof *p);
    if (!p) return K_ERR_NO_MEMORY;
    p->max_m = max_m;
    p->heur_m = heur_m;
    p->n = n;
    p->k = k;
    p->ws_cap = ws_cap;
    /* debug.gemm = auto takes the tensor-core kernel where it measured faster than cuBLASLt:
     * every 26B-A4B projection but the LM head, the 31B's k and v; the larger weights (the
     * 31B's q, o and MLP, the LM heads) run at 3.0-3.6 TB/s at one row and near the matrix rate
     * at prefill on cuBLASLt, which gemm_mma_kernel does not reach (docs/perf-notes.md,
     * thirteenth session) */
    const bool small = (long long)n * k <= K_GEMM_AUTO_MMA_MAX;
    if ((mma_plans || (auto_plans && small)) && k % 32 == 0) {
        /* no cuBLASLt object; under debug.gemm = mma other k take the plain kernel */
        p->mma = 1;
        if (auto_plans && prompt_plans && !mma_plans) p->prompt = prompt_plan_create(max_m, n, k);
        *out = p;
        return K_OK;
    }
    if (plain_plans ||
        mma_plans) { /* no cuBLASLt object at all, not even its handle and workspace */
        if ((n + PLAIN_THREADS - 1) / PLAIN_THREADS > 65535) { /* the kernel's grid.y */
            free(p);
            return K_ERR_SHAPE;
        }
        p->plain = 1;
        *out = p;
        return K_OK;
    }
    int rc = lt_plan_fill(p);
    if (rc != K_OK) return rc;
    /* a plan asked at a decode size (plan_m_for) runs a prefill chunk with a decode-sized
     * tile; prompt rows get a plan asked at max_m instead */
    if (prompt_plans && heur_m < max_m) p->prompt = prompt_plan_create(max_m, n, k);
    *out = p;
    return K_OK;
}

/* p's cuBLASLt objects and algorithm (its shape, heur_m, ws_cap and natural set); frees p on
 * failure. */
static int lt_plan_fill(k_gemm_plan *p) {
    const int n = p->n, k = p->k;
    int rc = lt_init();
    if (rc != K_OK) {
        free(p);
        return rc;
    }
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) !=
            CUBLAS_STATUS_SUCCESS ||
        layout_of(p, &p->a, k, n, k, p->stride_w) != K_OK) {
        k_gemm_plan_destroy(p);
        return K_ERR_DEVICE;
    }
    int rc_algo = choose_algo(p, &p->ws_need);
    if (rc_algo == K_OK) rc_algo = lt_workspace_reserve(p->ws_need);
    if (rc_algo != K_OK) {
        k_gemm_plan_destroy(p);
        return rc_algo;
    }
    return K_OK;
}

static k_gemm_plan *live_prompts; /* prompt plans made and not yet destroyed */

/* The prompt plan of a weight: cuBLASLt asked at max_m (prompt rows come in chunks), held to
 * split-k 1, so every prompt row's output is one natural chain of 16-k steps whatever m is
 * (docs/prompt-rows.md). The layers' weights share a few shapes and the heuristic's answer
 * depends on the shape alone, so a live plan of the same shape is shared (k_gemm_plan_destroy
 * frees it with its last holder). It is a batched plan of one product. NULL, said on stderr
 * (k_gemm_batched_plan), where no such algorithm runs the shape: its prompt rows then stay on
 * the weight's own plan, which is as batch-invariant. */
static k_gemm_plan *prompt_plan_create(int max_m, int n, int k) {
    for (k_gemm_plan *q = live_prompts; q; q = q->next_prompt)
        if (q->max_m == max_m && q->n == n && q->k == k) {
            q->shares++;
            return q;
        }
    k_gemm_plan *p = k_gemm_batched_plan(1, max_m, n, k, 0, 0, 0);
    if (!p) return NULL;
    p->next_prompt = live_prompts;
    live_prompts = p;
    return p;
}

extern "C" void k_gemm_prompt_plans(int on) { prompt_plans = on != 0; }

/* One cuBLASLt call of plan p, y = bf(x @ w^T) on the given layouts, with the workspace of st's
 * stream (workspace_for); the caller frees the layouts and checks the status. */
static cublasStatus_t lt_matmul(const k_gemm_plan *p, const void *w, cublasLtMatrixLayout_t la,
                                const void *x, cublasLtMatrixLayout_t lb, void *y,
                                cublasLtMatrixLayout_t lc, cudaStream_t st) {
#ifdef G4_KERNEL_TRACE
    if (k_launch(cublaslt_matmul_stamp_kernel, dim3(1), dim3(1), 0, st) != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
#endif
    const float one = 1.0f, zero = 0.0f;
    void *ws = workspace_for(st, p->ws_need);
    if (!ws) return CUBLAS_STATUS_NOT_SUPPORTED;
    lt_launched = true;
    return cublasLtMatmul(
        lt_handle, p->desc, &one, w, la, x, lb, &zero, y, lc, y, lc, &p->algo, ws,
        p->ws_cap > GEMM_WORKSPACE_BYTES ? lt_workspace_bytes : GEMM_WORKSPACE_BYTES, st);
}

/* A natural (split-k 1) plan of batch products, strided (ptrs 0: operands stride_* elements
 * apart) or by pointer arrays (ptrs 1); NULL, said on stderr, where none runs the shape */
static k_gemm_plan *natural_plan(int batch, int max_m, int n, int k, int ptrs, long long stride_w,
                                 long long stride_x, long long stride_y) {
    if (batch < 1 || max_m <= 0 || n <= 0 || k <= 0 || k % 8 != 0) return NULL;
    k_gemm_plan *p = (k_gemm_plan *)calloc(1, sizeof *p);
    if (!p) return NULL;
    p->max_m = p->heur_m = max_m;
    p->n = n;
    p->k = k;
    p->ws_cap = GEMM_WORKSPACE_BYTES;
    p->natural = 1;
    p->batch = batch;
    p->ptrs = ptrs;
    p->stride_w = stride_w;
    p->stride_x = stride_x;
    p->stride_y = stride_y;
    if (lt_plan_fill(p) != K_OK) {
        fprintf(stderr,
                "g4pipe: warning kernels: no split-k-1 cuBLASLt algorithm for %d %s product(s) "
                "of %d x %d x %d\n",
                batch, ptrs ? "pointer-array" : "strided", max_m, n, k);
        return NULL;
    }
    return p;
}

/* kernels/gemm_batched.h */
k_gemm_plan *k_gemm_batched_plan(int batch, int max_m, int n, int k, long long stride_w,
                                 long long stride_x, long long stride_y) {
    return natural_plan(batch, max_m, n, k, 0, stride_w, stride_x, stride_y);
}

/* kernels/gemm_batched.h */
k_gemm_plan *k_gemm_ptrs_plan(int batch, int m, int n, int k) {
    return natural_plan(batch, m, n, k, 1, 0, 0, 0);
}

/* kernels/gemm_batched.h */
int k_gemm_ptrs(const k_gemm_plan *p, int batch, const void *w, const void *x, void *y,
                g4_stream st) {
    if (!p || !p->ptrs || batch < 0 || !w || !x || !y) return K_ERR_SHAPE;
    if (batch == 0) return K_OK;
    cublasLtMatrixLayout_t la, lb, lc;
    int rc = layout_batch(p, &la, p->k, p->n, p->k, 0, batch);
    if (rc != K_OK) return rc;
    rc = layout_batch(p, &lb, p->k, p->max_m, p->k, 0, batch);
    if (rc != K_OK) {
        cublasLtMatrixLayoutDestroy(la);
        return rc;
    }
    rc = layout_batch(p, &lc, p->n, p->max_m, p->n, 0, batch);
    if (rc != K_OK) {
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        return rc;
    }
    cublasStatus_t s = lt_matmul(p, w, la, x, lb, y, lc, (cudaStream_t)st);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    CUBLAS_CHECK(s);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

extern "C" int k_gemm_plan_has_prompt(const k_gemm_plan *p) { return p && p->prompt; }

extern "C" void k_gemm_plan_destroy(k_gemm_plan *p) {
    if (!p) return;
    if (p->natural) { /* a shared prompt plan: freed with its last holder */
        if (p->shares > 0) {
            p->shares--;
            return;
        }
        for (k_gemm_plan **q = &live_prompts; *q; q = &(*q)->next_prompt)
            if (*q == p) {
                *q = p->next_prompt;
                break;
            }
    }
    k_gemm_plan_destroy(p->prompt);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    free(p);
}

/* A call with prompt rows on a plan that has a prompt plan: the leading (decode) rows on the
 * plan's own kernel, the trailing prompt rows on the prompt plan. Each row's bits are those of
 * its kind's kernel alone (both are batch-invariant). */
static int gemm_prompt_split(const k_gemm_args *a, int ldy, g4_stream st) {
    const k_gemm_plan *p = (const k_gemm_plan *)a->plan;
    k_gemm_args d = *a, pr = *a;
    d.m = a->m - a->prompt_rows;
    d.prompt_rows = 0;
    if (d.m > 0) {
        int rc = k_gemm(&d, st);
        if (rc != K_OK) return rc;
    }
    pr.plan = p->prompt;
    pr.m = a->prompt_rows;
    pr.prompt_rows = 0;
    pr.x = a->x + (size_t)d.m * (size_t)a->k;
    pr.y = a->y + (size_t)d.m * (size_t)ldy;
    pr.ldy = ldy;
    return k_gemm(&pr, st);
}

/* The decode form (m <= MMA_GEMM_DECODE_M) of gemm_mma_kernel or gemm_mma_group_kernel (GROUP),
 * one weight tile of 8 outputs a warp: the lo form with wide loads at m <= 8 (12 32-k blocks of
 * weights a group), else 8 blocks a group. */
template <bool GROUP, int U, bool LO> static constexpr auto decode_kernel() {
    if constexpr (GROUP)
        return gemm_mma_group_kernel<1, 1, U, LO>;
    else
        return gemm_mma_kernel<1, 1, U, LO>;
}

template <bool GROUP, typename... Args>
static cudaError_t decode_launch(int m, dim3 grid, cudaStream_t s, Args... args) {
    if (k_wide_loads && m <= MMA_GEMM_LO_M)
        return k_launch(decode_kernel<GROUP, MMA_GEMM_LO_U, true>(), grid, MMA_GEMM_THREADS, 0, s,
                        args...);
    return k_launch(decode_kernel<GROUP, 8, false>(), grid, MMA_GEMM_THREADS, 0, s, args...);
}

extern "C" int k_gemm(const k_gemm_args *a, g4_stream st) {
    k_gemm_plan *p = (k_gemm_plan *)a->plan;
    int ldy = a->ldy ? a->ldy : a->n;
    if (!p || p->ptrs || a->m < 0 || a->m > p->max_m || a->n != p->n || a->k != p->k ||
        ldy < a->n || a->prompt_rows < 0 || a->prompt_rows > a->m)
        return K_ERR_SHAPE;
    /* no rows: nothing to do, as ref_gemm (a prefill chunk that is not a prompt's last asks the
     * LM head for no logits) */
    if (a->m == 0) return K_OK;
    if (p->prompt && a->prompt_rows > 0) return gemm_prompt_split(a, ldy, st);
    if (p->mma) {
        /* 16-byte loads: x, w rows start on 16 bytes when the bases do (k % 32 == 0) */
        if (((uintptr_t)a->x | (uintptr_t)a->w) & 15) return K_ERR_SHAPE;
        if (a->m <= MMA_GEMM_DECODE_M) {
            const int tiles = (a->m + 15) / 16;
            dim3 grid((unsigned)((a->n + 7) / 8),
                      (unsigned)(tiles < MMA_GEMM_ROW_BLOCKS ? tiles : MMA_GEMM_ROW_BLOCKS));
            CUDA_CHECK(decode_launch<false>(a->m, grid, (cudaStream_t)st, (bf16_t *)a->y,
                                            (const bf16_t *)a->x, (const bf16_t *)a->w, a->m, a->n,
                                            a->k, ldy));
        } else {
            int tiles = (a->m + 63) / 64;
            dim3 grid((unsigned)((a->n + 31) / 32), (unsigned)(tiles < 65535 ? tiles : 65535));
            CUDA_CHECK(k_launch(gemm_mma_kernel<4, 4, 2>, grid, MMA_GEMM_THREADS, 0,
                                (cudaStream_t)st, (bf16_t *)a->y, (const bf16_t *)a->x,
                                (const bf16_t *)a->w, a->m, a->n, a->k, ldy));
        }
        CUDA_CHECK(cudaGetLastError());
        return K_OK;
    }
    if (p->plain) {
        if ((a->n + PLAIN_THREADS - 1) / PLAIN_THREADS > 65535) return K_ERR_SHAPE;
        dim3 grid((unsigned)a->m, (unsigned)((a->n + PLAIN_THREADS - 1) / PLAIN_THREADS));
        CUDA_CHECK(k_launch(gemm_plain_kernel, grid, PLAIN_THREADS, 0, (cudaStream_t)st,
                            (bf16_t *)a->y, (const bf16_t *)a->x, (const bf16_t *)a->w, a->n, a->k,
                            ldy));
        CUDA_CHECK(cudaGetLastError());
        return K_OK;
    }
    cublasLtMatrixLayout_t b, c;
    int rc = layout_of(p, &b, a->k, a->m, a->k, p->stride_x);
    if (rc != K_OK) return rc;
    rc = layout_of(p, &c, a->n, a->m, ldy, p->stride_y);
    if (rc != K_OK) {
        cublasLtMatrixLayoutDestroy(b);
        return rc;
    }
    cublasStatus_t s = lt_matmul(p, a->w, p->a, a->x, b, a->y, c, (cudaStream_t)st);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    CUBLAS_CHECK(s);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* One launch when every member runs the tensor-core kernel, the step is a decode step (m <= 32)
 * and fusing is on: the grid is the members' grids side by side along x, the row tiles along y
 * as in k_gemm. Otherwise each member through k_gemm, in order: a prefill chunk's launches are
 * long enough that one more costs little (and the tile form, inlined once per member, spills).
 * Either way each output is computed as in its own call. */
/* 1 when a member of a has prompt rows for a prompt plan of its own */
static bool group_splits(const k_gemm_group_args *a) {
    for (int i = 0; i < a->n_gemms; i++) {
        const k_gemm_plan *p = (const k_gemm_plan *)a->g[i].plan;
        if (p && p->prompt && a->g[i].prompt_rows > 0) return true;
    }
    return false;
}

extern "C" int k_gemm_group_fuses(const k_gemm_group_args *a) {
    if (k_gemm_group_check(a) != K_OK || !fuse_groups || a->n_gemms < 2 ||
        a->g[0].m > MMA_GEMM_DECODE_M || group_splits(a))
        return 0;
    for (int i = 0; i < a->n_gemms; i++) {
        const k_gemm_args *g = &a->g[i];
        const k_gemm_plan *p = (const k_gemm_plan *)g->plan;
        int ldy = g->ldy ? g->ldy : g->n;
        if (!p || !p->mma || g->m < 0 || g->m > p->max_m || g->n != p->n || g->k != p->k ||
            ldy < g->n || (((uintptr_t)g->x | (uintptr_t)g->w) & 15))
            return 0;
    }
    return 1;
}

extern "C" int k_gemm_group(const k_gemm_group_args *a, g4_stream st) {
    if (k_gemm_group_check(a) != K_OK) return K_ERR_SHAPE;
    if (group_splits(a)) { /* the decode rows as a group (fused where they may be), then each
                            * member's prompt rows through its own prompt split */
        k_gemm_group_args d = *a;
        const int pr = a->g[0].prompt_rows, dm = a->g[0].m - pr;
        for (int i = 0; i < a->n_gemms; i++) {
            d.g[i].m = dm;
            d.g[i].prompt_rows = 0;
        }
        if (dm > 0) {
            int rc = k_gemm_group(&d, st);
            if (rc != K_OK) return rc;
        }
        for (int i = 0; i < a->n_gemms; i++) {
            k_gemm_args g = a->g[i];
            const int ldy = g.ldy ? g.ldy : g.n;
            g.x += (size_t)dm * (size_t)g.k;
            g.y += (size_t)dm * (size_t)ldy;
            g.m = g.prompt_rows = pr;
            g.ldy = ldy;
            int rc = k_gemm(&g, st);
            if (rc != K_OK) return rc;
        }
        return K_OK;
    }
    if (!k_gemm_group_fuses(a)) { /* each member as its own call, its shape checked there */
        for (int i = 0; i < a->n_gemms; i++) {
            int rc = k_gemm(&a->g[i], st);
            if (rc != K_OK) return rc;
        }
        return K_OK;
    }
    const int m = a->g[0].m, k = a->g[0].k;
    if (m == 0) return K_OK;
    mma_group_table t = {};
    t.n_members = a->n_gemms;
    for (int i = 0; i < a->n_gemms; i++) {
        const k_gemm_args *g = &a->g[i];
        t.w[i] = (const bf16_t *)g->w;
        t.y[i] = (bf16_t *)g->y;
        t.n[i] = g->n;
        t.ldy[i] = g->ldy ? g->ldy : g->n;
        t.first[i + 1] = t.first[i] + (g->n + 7) / 8;
    }
    const bf16_t *x = (const bf16_t *)a->g[0].x;
    int tiles = (m + 15) / 16;
    dim3 grid((unsigned)t.first[a->n_gemms],
              (unsigned)(tiles < MMA_GEMM_ROW_BLOCKS ? tiles : MMA_GEMM_ROW_BLOCKS));
    CUDA_CHECK(decode_launch<true>(m, grid, (cudaStream_t)st, t, x, m, k));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

K_TRACE_UNIT(gemm_lt) /* the kernel trace build's binder (common.cuh) */
