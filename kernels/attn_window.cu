/* kernels/attn_window.cu - the windowed layers of head dim 256 on shared-memory tiles: the
 * kernels attn.cu's launcher runs for the e4m3 pool's sliding layers of groups up to 4, the same
 * arithmetic as attn_split_kernel (attn.cu) with K and V brought in by cp.async. */
#include "kernels/attn_common.cuh"

/* ---- windowed layers of head dim 256: tiles through shared memory ----
 *
 * attn_window_kernel is attn_split_kernel's KEEP instantiation for the e4m3 pool, head dim 256
 * and groups up to ATTN_WARP_PV_MAX_G (every Gemma 4 sliding layer), with the K tiles (stats pass)
 * or V tiles (P.V pass) brought into shared memory by cp.async: a tile's copies go out as soon as
 * the stage it lands in is free, so while a block computes one tile the next is in flight: the
 * register-batch kernel kept its loads in flight only while it waited on them (ncu: the stats
 * pass far from the DRAM bandwidth, the e4m3 pool's half bytes no faster; docs/perf-notes.md,
 * "Measurements behind the code", attention). The arithmetic is
 * attn_split_kernel's, lane for lane and in the same order (dot8, the quad layout's shuffles, pv's
 * key order per warp, the per-split resets), so its results are the same bits; only where the
 * elements wait differs. Per tile: the copies' completion and a barrier, the scores or P.V from
 * shared memory, a barrier, then the copies of the tile after next into the stage just read. */
#define WIN_STAGES 2 /* tiles in shared memory: the one in use and the one landing */
#define WIN_SLOTS 3  /* key offsets: in use, landing, and being looked up */

/* A key row's stride in a stage: its 256 elements, plus 16 bytes for e4m3, whose 8-byte score
 * reads put two rows in one half-warp phase (rows 256 bytes apart would share banks). */
template <bool FP8> static __host__ __device__ constexpr int win_row_stride() {
    return FP8 ? 256 + 16 : 512;
}

/* Dynamic shared memory of a window pass: the stages, then (stats) the queries, the scores or
 * p, and (P.V) the warps' partial sums. */
template <int G, bool FP8, bool PV> static __host__ __device__ constexpr size_t win_smem_bytes() {
    return (size_t)WIN_STAGES * ATTN_TILE * win_row_stride<FP8>() +
           sizeof(float) * ((PV ? 0 : G * 256) + G * ATTN_TILE + (PV ? ATTN_WARPS * G * 256 : 0));
}

template <int G, bool FP8, bool PV>
static __global__ void __launch_bounds__(ATTN_THREADS)
    attn_window_kernel(k_attention_args a, int row0, int max_split, int spb, float *part,
                       float2 *ml, float *keep, unsigned *done) {
    K_GRID_DEPENDENCY();
    constexpr int D = 256;
    constexpr int EB = FP8 ? 1 : 2;           /* bytes per element */
    constexpr int ROW = D * EB;               /* bytes per key row */
    constexpr int SEGS = ROW / 16;            /* 16-byte copies per key row */
    constexpr int RS = win_row_stride<FP8>(); /* a key row's stride in the stage */
    constexpr int STAGE = ATTN_TILE * RS;     /* bytes per tile */
    constexpr int CH = D / 64;                /* 8-dim chunks per lane (quad layout) */
    constexpr int STEP = ATTN_WARPS * 4;      /* keys the block's warps score per step */
    constexpr int KP = (G * ATTN_TILE + ATTN_THREADS - 1) / ATTN_THREADS; /* p per thread */
    extern __shared__ __align__(16) unsigned char win_smem[];
    unsigned char *stages = win_smem;
    float *qs = (float *)(win_smem + WIN_STAGES * STAGE); /* [G][D], stats pass */
    float *ps = qs + (PV ? 0 : G * D);                    /* [G][ATTN_TILE] */
    float *red = ps + G * ATTN_TILE;                      /* [ATTN_WARPS][G][D], P.V pass */
    __shared__ long long koff[WIN_SLOTS][ATTN_TILE]; /* element offsets; -1: unmapped or past */
    __shared__ float m_run[G], l_run[G];
    __shared__ int bad[ATTN_MAX_SPB];
    const int kvh = blockIdx.y, rl = blockIdx.z, r = row0 + rl;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int grp = lane >> 3, sub = lane & 7;
    const int i = a.pos[r], seq = a.seq[r];
    const split_plan sp = plan_split(i, a.window);
    const int s_first = blockIdx.x * spb;
    if constexpr (PV && G * D <= ATTN_FOLD_HEAD_ELEMS)
        if (done && (i < 0 || sp.n_split > max_split)) { /* folded: the combine's NaN here */
            pv_fold_nan<D, G>(a, r, rl, kvh);
            return;
        }
    if (i < 0 || s_first >= sp.n_split || sp.n_split > max_split) return; /* combine: NaN */
    const int s_last = min(s_first + spb, sp.n_split);
    const int k_begin = sp.j0 + s_first * sp.per_split;
    const int k_end = min(sp.j0 + s_last * sp.per_split, i + 1);
    const int n_tiles = (k_end - k_begin + ATTN_TILE - 1) / ATTN_TILE;
    const size_t base = ((size_t)rl * a.n_head + (size_t)kvh * G) * max_split;
    float *keep_row = keep + ((size_t)rl * a.n_head + (size_t)kvh * G) * a.window;
    const int which = PV ? 1 : 0; /* V or K */

    /* the offset of key kk of tile ti (-1: unmapped, or past the block's keys) */
    auto offset_of = [&](int ti, int kk) -> long long {
        const int t0 = k_begin + ti * ATTN_TILE;
        return kk >= 0 && kk < ATTN_TILE && ti < n_tiles && t0 + kk < k_end
                   ? kv_view_offset(&a.kv, seq, t0 + kk, a.kv_layer, which, kvh)
                   : -1;
    };
    /* tile ti's key offsets into slot ti % WIN_SLOTS, by the block's first ATTN_TILE threads
     * (first = 0), or by threads ATTN_TILE.. (first = ATTN_TILE) */
    auto look_up = [&](int ti, int first) {
        const int kk = tid - first;
        if (kk >= 0 && kk < ATTN_TILE) koff[ti % WIN_SLOTS][kk] = offset_of(ti, kk);
    };
    /* tile ti's copies into stage ti % WIN_STAGES (none past the last tile), then a group */
    auto copy = [&](int ti) {
        if (ti < n_tiles) {
            unsigned char *st = stages + (ti % WIN_STAGES) * STAGE;
            const long long *ko = koff[ti % WIN_SLOTS];
            for (int c = tid; c < ATTN_TILE * SEGS; c += ATTN_THREADS) {
                const int kk = c / SEGS, seg = c % SEGS;
                const long long o = ko[kk];
                if (o >= 0)
                    cp_async16(st + kk * RS + seg * 16,
                               (const unsigned char *)a.kv.base + o * EB + seg * 16);
            }
        }
        cp_async_commit();
    };
    /* the kept scores of tile ti's keys this thread turns into p (P.V pass) */
    float kp[KP];
    auto load_kept = [&](int ti) {
        const int t0 = k_begin + ti * ATTN_TILE, nk = min(ATTN_TILE, k_end - t0);
#pragma unroll
        for (int k = 0; k < KP; k++) {
            const int e = tid + k * ATTN_THREADS, g = e / ATTN_TILE, kk = e % ATTN_TILE;
            kp[k] = ti < n_tiles && e < G * ATTN_TILE && kk < nk
                        ? keep_row[(size_t)g * a.window + (t0 - sp.j0) + kk]
                        : 0.0f;
        }
    };

    look_up(0, 0);
    look_up(1, ATTN_TILE);
    if (PV) load_kept(0);
    if (!PV) load_queries<D, G>(a, r, kvh, qs, tid);
    if (tid < ATTN_MAX_SPB) bad[tid] = 0;
    start_stats_block<G, PV>(ml + base, max_split, sp.n_split, m_run, l_run, tid);
    float acc[G][8];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int t = 0; t < 8; t++)
            acc[g][t] = 0.0f;
    __syncthreads(); /* slots 0 and 1, qs, m_run / l_run */
    copy(0);
    copy(1);

    for (int ti = 0; ti < n_tiles; ti++) {
        const int t0 = k_begin + ti * ATTN_TILE, nk = min(ATTN_TILE, k_end - t0);
        const int t1 = t0 + ATTN_TILE;
        const int split = (t0 - sp.j0) / sp.per_split;
        const bool split_done = t1 >= k_end || (t1 - sp.j0) % sp.per_split == 0;
        const unsigned char *st = stages + (ti % WIN_STAGES) * STAGE;
        const long long *ko = koff[ti % WIN_SLOTS];
        /* tile ti + 2's page-table reads go out now and are stored only before the second
         * barrier, so no thread waits on them ahead of this tile's work */
        const long long off_next = offset_of(ti + 2, tid);
        cp_async_wait_one(); /* this thread's copies of tile ti have landed */
        if (PV) {            /* p = k_round_bf16(exp(s - m) / l) as the reference rounds it */
#pragma unroll
            for (int k = 0; k < KP; k++) {
                const int e = tid + k * ATTN_THREADS, g = e / ATTN_TILE, kk = e % ATTN_TILE;
                if (e < G * ATTN_TILE && kk < nk) ps[e] = softmax_p(kp[k], m_run[g], l_run[g]);
            }
        }
        __syncthreads(); /* every thread's copies of tile ti, and p */
        if (!PV) {       /* the quad layout's scores (quad_score), K from the stage */
            for (int b0 = 0; b0 < nk; b0 += STEP) {
                const int kk = b0 + warp * 4 + grp;
                const long long o = kk < nk ? ko[kk] : -1;
                float sum[G];
#pragma unroll
                for (int g = 0; g < G; g++)
                    sum[g] = 0.0f;
                if (o >= 0) /* uniform in the 8-lane group */
#pragma unroll
                    for (int c = 0; c < CH; c++) {
                        const raw8<FP8> rk = *reinterpret_cast<const raw8<FP8> *>(
                            st + kk * RS + (c * 8 + sub) * 8 * EB);
                        float k8[8];
                        cvt8<FP8>(rk, k8);
#pragma unroll
                        for (int g = 0; g < G; g++)
                            sum[g] += dot8(qs + g * D + (c * 8 + sub) * 8, k8);
                    }
#pragma unroll
                for (int g = 0; g < G; g++)
#pragma unroll
                    for (int m = 4; m > 0; m >>= 1)
                        sum[g] += __shfl_xor_sync(0xffffffffu, sum[g], m);
                if (sub == 0 && kk < nk) {
                    if (o < 0) { /* an unmapped key */
                        bad[split - s_first] = 1;
#pragma unroll
                        for (int g = 0; g < G; g++)
                            ps[g * ATTN_TILE + kk] = -INFINITY;
                    } else {
#pragma unroll
                        for (int g = 0; g < G; g++)
                            ps[g * ATTN_TILE + kk] = k_round_bf16(sum[g]);
                    }
                }
            }
        } else { /* P.V over the warp's keys warp, warp + 4, ... (pv_warp_keys), V from the stage */
            for (int kk = warp; kk < nk; kk += ATTN_WARPS) {
                if (ko[kk] < 0) continue; /* an unmapped key: warp-uniform */
                const raw8<FP8> rv =
                    *reinterpret_cast<const raw8<FP8> *>(st + kk * RS + lane * 8 * EB);
                float vf[8];
                cvt8<FP8>(rv, vf);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const float p = ps[g * ATTN_TILE + kk];
#pragma unroll
                    for (int t = 0; t < 8; t++)
                        acc[g][t] += p * vf[t];
                }
            }
            load_kept(ti + 1);
        }
        /* slot (ti + 2) % WIN_SLOTS was last read before the previous tile's second barrier */
        if (tid < ATTN_TILE) koff[(ti + 2) % WIN_SLOTS][tid] = off_next;
        __syncthreads(); /* the stage, ps (P.V) and the looked-up slot */
        copy(ti + 2);    /* into the stage just read */
        if (!PV) {
            keep_scores<G>(keep_row, a.window, t0 - sp.j0, ps, nk, tid);
            /* the next tile's scores overwrite ps only after its first barrier */
            tile_stats<G>(ps, nk, m_run, l_run, warp, lane);
            if (split_done) {
                __syncthreads(); /* every head's (max, sum) */
                if (tid < G) {   /* this split's, then fresh ones for the next */
                    ml[base + (size_t)tid * max_split + split] =
                        make_float2(m_run[tid], bad[split - s_first] ? NAN : l_run[tid]);
                    m_run[tid] = -INFINITY;
                    l_run[tid] = 0.0f;
                }
            }
        } else if (split_done) {
            warp_pv_store<D, G>(red, acc, part + base * D, max_split, split);
            /* red is read by the reduction until the next split's end, a tile's barriers on */
        }
    }
    if constexpr (PV && G * D <= ATTN_FOLD_HEAD_ELEMS)
        if (done)
            pv_fold<D, G>(a, r, rl, kvh, max_split, sp.n_split, (sp.n_split + spb - 1) / spb, part,
                          ml, done);
}

template <int G, bool FP8, bool PV> static int win_smem_allow(void) {
    static bool done = false;
    if (!done) {
        CUDA_CHECK(cudaFuncSetAttribute(attn_window_kernel<G, FP8, PV>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)win_smem_bytes<G, FP8, PV>()));
        done = true;
    }
    return K_OK;
}

template <int G, bool FP8>
int attn_window_passes(const k_attention_args *a, dim3 grid, int max_split, int spb, float *part,
                       float2 *ml, float *keep, unsigned *done, int row0, cudaStream_t s) {
    int rc = win_smem_allow<G, FP8, false>();
    if (rc == K_OK) rc = win_smem_allow<G, FP8, true>();
    if (rc != K_OK) return rc;
    CUDA_CHECK(k_launch(attn_window_kernel<G, FP8, false>, grid, ATTN_THREADS,
                        win_smem_bytes<G, FP8, false>(), s, *a, row0, max_split, spb, part, ml,
                        keep, (unsigned *)NULL));
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(k_launch(attn_window_kernel<G, FP8, true>, grid, ATTN_THREADS,
                        win_smem_bytes<G, FP8, true>(), s, *a, row0, max_split, spb, part, ml, keep,
                        done));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

template int attn_window_passes<1, true>(const k_attention_args *, dim3, int, int, float *,
                                         float2 *, float *, unsigned *, int, cudaStream_t);
template int attn_window_passes<2, true>(const k_attention_args *, dim3, int, int, float *,
                                         float2 *, float *, unsigned *, int, cudaStream_t);
template int attn_window_passes<4, true>(const k_attention_args *, dim3, int, int, float *,
                                         float2 *, float *, unsigned *, int, cudaStream_t);

/* Every window kernel's shared-memory limit raised at start-up (k_workspace_reserve), so no
 * first launch of one happens inside a CUDA graph capture with the attribute still unset. Only
 * the e4m3 pool runs them (launch_passes says why). */
extern "C" int k_attention_setup(void) {
    static_assert(ATTN_WARP_PV_MAX_G == 4, "the window kernels are the groups 1, 2 and 4");
    int rc = K_OK;
    (void)attn_fold_counters(); /* the symbol looked up here, outside any graph capture */
    if (rc == K_OK) rc = attn_mma_setup();
    if (rc == K_OK) rc = attn_prompt_setup();
    if (rc == K_OK) rc = win_smem_allow<1, true, false>();
    if (rc == K_OK) rc = win_smem_allow<1, true, true>();
    if (rc == K_OK) rc = win_smem_allow<2, true, false>();
    if (rc == K_OK) rc = win_smem_allow<2, true, true>();
    if (rc == K_OK) rc = win_smem_allow<4, true, false>();
    if (rc == K_OK) rc = win_smem_allow<4, true, true>();
    return rc;
}

K_TRACE_UNIT(attn_window) /* the kernel trace build's binder (common.cuh) */
