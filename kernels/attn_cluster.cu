/* kernels/attn_cluster.cu - decode-sized attention on the windowed layers of head dim 256 as one
 * launch: the two passes and the combine of attn.cu in one kernel whose blocks, one per split,
 * meet in a thread block cluster and trade their statistics and partials through one another's
 * shared memory instead of through global memory and two more launches.
 *
 * Why: at one row the split kernels move a few MB a layer in ~22 us of two launches, each a chain
 * of dependent round trips (the stats pass writes (max, sum) and scores; the P.V pass reads them
 * back, writes partials, counts itself done; the last block reads the partials) at one block of
 * four warps an SM (docs/perf-notes.md, eighteenth session). Here a block loads its K and V tiles
 * together at the start, and the cluster barrier replaces the launch boundary.
 *
 * The arithmetic is attn_split_kernel's kept-score path, the same helpers in the same order, so
 * the bits are those of the two-pass launches (test_attn's `cluster` gates, bit for bit):
 *   scores  quad layout (tile_scores_quad), each rounded to bf16;
 *   stats   tile_stats over the split's one tile from (-inf, 0), the sum NaN after an unmapped
 *           key; then every block merges the splits' (max, sum) in split order (start_stats_block's
 *           arithmetic), reading them from the cluster's shared memory;
 *   P.V     p = k_round_bf16(exp(s - m) / l) from the scores still in shared memory (the values
 *           the stats pass keeps), keys over warps (pv_warp_keys), warps summed in warp order
 *           (warp_pv_store's sum);
 *   combine out = k_round_bf16(0 + the splits' partials in split order) (combine_heads' sum),
 *           spread over the cluster's threads; a head NaN where a split's sum is, a row NaN
 *           without a position or with more splits than the grid.
 * It applies where every split is one tile: a window of at most ATTN_CLUSTER_MAX tiles (the
 * grid's split count), since a row with more than 32 tiles would have more than 16 splits and
 * is a NaN row in both forms. Which launches take it is the launcher's choice by step size
 * (serve.attn_cluster_rows) and changes no bit: batch invariance holds as for the split kernels. */
#include "kernels/attn_common.cuh"

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

template <int G, bool FP8>
static __global__ void __launch_bounds__(ATTN_THREADS)
    attn_cluster_kernel(k_attention_args a, int row0, int max_split) {
    K_GRID_DEPENDENCY();
    constexpr int D = 256;
    cg::cluster_group cluster = cg::this_cluster();
    __shared__ __align__(16) float qs[G * D];               /* the group's queries */
    __shared__ float ps[G * ATTN_TILE];                     /* scores, then p */
    __shared__ __align__(16) float red[ATTN_WARPS * G * D]; /* the warps' P.V sums */
    __shared__ __align__(16) float pv[G * D]; /* this split's partial: the cluster's */
    __shared__ float2 st[G];                  /* this split's (max, sum): likewise */
    __shared__ long long voff[ATTN_TILE];
    __shared__ float m_run[G], l_run[G];
    __shared__ int bad, head_nan[G];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int split = (int)cluster.block_rank(), kvh = blockIdx.y, r = row0 + blockIdx.z;
    const int i = a.pos[r], seq = a.seq[r];
    const split_plan sp = plan_split(i, a.window);
    const bool row_ok = i >= 0 && sp.n_split <= max_split;
    const int n_split = row_ok ? sp.n_split : 0;
    /* blocks past the row's splits do no work but meet every cluster barrier */
    const bool mine = split < n_split;
    const int t0 = sp.j0 + split * ATTN_TILE;
    const int nk = mine ? min(ATTN_TILE, i + 1 - t0) : 0;

    /* K and V of the tile go out first, together: nothing but the row decides them */
    quad_batch<D, FP8> kb;
    v_batch<G, FP8> vb;
    if (mine) {
        quad_issue<D, FP8>(a, seq, kvh, t0, nk, 0, kb);
        pv_issue<G, FP8>(a, seq, kvh, t0, nk, warp, vb);
        load_queries<D, G>(a, r, kvh, qs, tid);
    }
    if (tid == 0) bad = 0;
    if (tid < G) {
        m_run[tid] = -INFINITY;
        l_run[tid] = 0.0f;
    }
    __syncthreads();
    if (mine) tile_scores_quad<D, G, FP8>(a, seq, kvh, t0, nk, qs, ps, voff, &bad, kb);
    __syncthreads();
    if (mine) tile_stats<G>(ps, nk, m_run, l_run, warp, lane);
    __syncthreads();
    if (tid < G) st[tid] = make_float2(m_run[tid], bad ? NAN : l_run[tid]);
    cluster.sync(); /* every split's (max, sum) */

    if (tid < G) { /* the row's, merged in split order as start_stats_block does */
        float m = -INFINITY, l = 0.0f;
        int nan = !row_ok;
        for (int t = 0; t < n_split; t++)
            m = fmaxf(m, cluster.map_shared_rank(st, t)[tid].x);
        for (int t = 0; t < n_split; t++) {
            const float2 v = cluster.map_shared_rank(st, t)[tid];
            l += v.y * expf(v.x - m);
            nan |= isnan(v.y);
        }
        m_run[tid] = m;
        l_run[tid] = l;
        head_nan[tid] = nan;
    }
    __syncthreads();
    if (mine)
        for (int e = tid; e < G * ATTN_TILE; e += ATTN_THREADS) {
            const int g = e / ATTN_TILE, kk = e % ATTN_TILE;
            if (kk < nk) ps[e] = softmax_p(ps[e], m_run[g], l_run[g]);
        }
    __syncthreads();
    float acc[G][8];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int t = 0; t < 8; t++)
            acc[g][t] = 0.0f;
    if (mine) {
        pv_warp_keys<G, FP8>(a, seq, kvh, t0, nk, ps, vb, acc);
#pragma unroll
        for (int g = 0; g < G; g++)
#pragma unroll
            for (int t = 0; t < 8; t++)
                red[(warp * G + g) * D + lane * 8 + t] = acc[g][t];
    }
    __syncthreads();
    if (mine)
        for (int e = tid; e < G * D; e += ATTN_THREADS) {
            float sum = red[e];
#pragma unroll
            for (int w = 1; w < ATTN_WARPS; w++)
                sum += red[w * G * D + e];
            pv[e] = sum;
        }
    cluster.sync(); /* every split's partial */

    /* the combine: element pairs over the cluster's threads, partials in split order */
    const int threads = (int)cluster.num_blocks() * ATTN_THREADS;
    for (int pr = split * ATTN_THREADS + tid; pr < G * D / 2; pr += threads) {
        const int g = 2 * pr / D, d = 2 * pr % D;
        const bool nan = head_nan[g];
        const float2 o = sum_split_pairs(nan ? 0 : n_split, [&](int s) {
            return *reinterpret_cast<const float2 *>(cluster.map_shared_rank(pv, s) + g * D + d);
        });
        bf16_t *out = a.out + ((size_t)r * a.n_head + (size_t)kvh * G + g) * D + d;
        out[0] = nan ? (bf16_t)BF16_NAN : k_f32_to_bf16(o.x);
        out[1] = nan ? (bf16_t)BF16_NAN : k_f32_to_bf16(o.y);
    }
    cluster.sync(); /* no block leaves while another reads its shared memory */
}

/* Rows a launch may have and still take the cluster kernel (serve.attn_cluster_rows and its
 * default; 0: never). */
static int cluster_rows = 0;
extern "C" void k_set_attn_cluster_rows(int rows) { cluster_rows = rows > 0 ? rows : 0; }

/* Whether instantiation <G, FP8> can run clusters of ATTN_CLUSTER_MAX blocks on this card: the
 * size past the portable 8 allowed, and at least one such cluster resident. Asked once, outside
 * any graph capture when k_attention_setup runs first (the engine's start-up). */
template <int G, bool FP8> static bool cluster_ready(void) {
    static int state = -1; /* -1: not asked yet */
    if (state < 0) {
        state = 0;
        auto kern = attn_cluster_kernel<G, FP8>;
        if (cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
            cudaSuccess) {
            cudaLaunchAttribute attr;
            attr.id = cudaLaunchAttributeClusterDimension;
            attr.val.clusterDim.x = ATTN_CLUSTER_MAX;
            attr.val.clusterDim.y = 1;
            attr.val.clusterDim.z = 1;
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(ATTN_CLUSTER_MAX, 1, 1);
            cfg.blockDim = dim3(ATTN_THREADS);
            cfg.attrs = &attr;
            cfg.numAttrs = 1;
            int n = 0;
            if (cudaOccupancyMaxActiveClusters(&n, kern, &cfg) == cudaSuccess && n > 0) state = 1;
        }
        (void)cudaGetLastError(); /* a refusal means the split kernels, not an error */
    }
    return state == 1;
}

template <int G, bool FP8> bool attn_cluster_takes(int max_split, int rows) {
    return rows <= cluster_rows && max_split <= ATTN_CLUSTER_MAX && cluster_ready<G, FP8>();
}

template <int G, bool FP8>
int attn_cluster_launch(const k_attention_args *a, int max_split, int row0, int nr,
                        cudaStream_t s) {
    dim3 grid((unsigned)max_split, (unsigned)a->kv.n_kv_head, (unsigned)nr);
    CUDA_CHECK(k_launch_cluster(attn_cluster_kernel<G, FP8>, grid, ATTN_THREADS, 0, s,
                                (unsigned)max_split, *a, row0, max_split));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

#define ATTN_CLUSTER_INSTANCE(G, FP8)                                                              \
    template bool attn_cluster_takes<G, FP8>(int, int);                                            \
    template int attn_cluster_launch<G, FP8>(const k_attention_args *, int, int, int, cudaStream_t);
ATTN_CLUSTER_INSTANCE(1, false)
ATTN_CLUSTER_INSTANCE(2, false)
ATTN_CLUSTER_INSTANCE(4, false)
ATTN_CLUSTER_INSTANCE(1, true)
ATTN_CLUSTER_INSTANCE(2, true)
ATTN_CLUSTER_INSTANCE(4, true)

/* Whether the card runs every instantiation's clusters of ATTN_CLUSTER_MAX blocks (test_attn
 * asserts it, so the `cluster` gates cannot pass by comparing the split kernels with
 * themselves). */
extern "C" int k_attn_cluster_available(void) {
    return cluster_ready<1, false>() && cluster_ready<2, false>() && cluster_ready<4, false>() &&
           cluster_ready<1, true>() && cluster_ready<2, true>() && cluster_ready<4, true>();
}

/* Every instantiation's cluster attribute and check at start-up (k_attention_setup). */
int attn_cluster_setup(void) {
    (void)cluster_ready<1, false>();
    (void)cluster_ready<2, false>();
    (void)cluster_ready<4, false>();
    (void)cluster_ready<1, true>();
    (void)cluster_ready<2, true>();
    (void)cluster_ready<4, true>();
    return K_OK;
}

K_TRACE_UNIT(attn_cluster) /* the kernel trace build's binder (common.cuh) */
