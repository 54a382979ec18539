/* kernels/attn.cu - attention on the paged KV store: the split-KV core, its combine and the
 * launcher k_attention (the prep that writes K/V into the pages is attn_prep.cu; the e4m3 pool's
 * windowed kernels are attn_window.cu; what they share is attn_common.cuh).
 *
 * It computes the function of its CPU twin kernels/ref/attn_ref.c with the same rounding
 * points; only fp32 summation orders differ (the q.k dot product, the softmax denominator, the
 * P.V accumulation), which docs/gates.md's 1e-2 bound covers.
 *
 * Unmapped pages (table entry -1): the reference returns K_ERR_SHAPE; a kernel cannot, so
 * k_attention writes NaN for every head of a row whose window touches one (loud rather than
 * silently wrong). The engine never passes unmapped positions. Likewise a position outside
 * [0, max_pages * page_tokens). */
#include "kernels/attn_common.cuh"
#include "kernels/attn_split_choice.h"

/* Split-KV attention, one kernel family for decode and prefill rows alike. The keys of a row are
 * cut into tiles of ATTN_TILE and the tiles into at most ATTN_MAX_SPLIT splits; both counts are
 * a function of the row's own key count only (plan_split), so a row's arithmetic never depends
 * on its batch mates (docs/gates.md, batch invariance). A block per (KV head, row) and run of
 * consecutive splits serves all G query heads of the group, so each K/V element is read once per
 * group per pass. It takes its splits in turn, each computed as a block of its own would (its
 * own (max, sum) or partial, from fresh sums), so how many splits a block takes is the
 * launcher's choice by the step's size (attn_splits_per_block) and changes no bit: a step of
 * many rows pays a block's fixed costs once per several tiles, with each tile's loads issued
 * before the previous tile's arithmetic ends, and one of few rows keeps a block per split.
 *
 * The reference (HF eager) rounds each weight after normalising, p = k_round_bf16(exp(s - max) /
 * sum), so the max and the sum over all keys must be known before P.V. Two passes keep that
 * rounding: stats  per split, the scores' max m_s and sum l_s of exp(s - m_s) (online over tiles);
 *   pv     every block first merges all splits' (m_s, l_s) in split order into the row's (m, l),
 *          the same values in every block; then takes its scores (windowed layers: those the
 *          stats pass kept in scratch; global layers: recomputed), p = k_round_bf16(exp(s - m) /
 * l), and sums p * v into its split's partial; combine out = k_round_bf16(sum of the partials in
 * split order). Windowed layers read K once (W x 4 bytes of kept scores per head and row instead);
 * global layers, whose rows may hold the whole context, read K twice rather than keep a scratch
 * sized by it (1.5x the KV bytes of one pass). The rounding matches the reference, so the engine
 * tracks HF eager as the first version did (an fp32 p, FlashAttention-style, drifted past the tiny
 * fixtures' HF gap limit). Inside a block: scores - each warp takes four keys at a time, 8 lanes to
 * a key, each lane D/8 dims in 8-dim chunks (quad_score), rounded to bf16 as the reference's q.k;
 * P.V - thread t owns D/128 consecutive dims of every head, V rows read coalesced, except the
 * kept-score pass of head dim 256 and groups up to ATTN_WARP_PV_MAX_G, which splits keys across
 * warps (pv_warp_keys).
 *
 * e4m3 KV (the fp8 local pool): the same kernels with the loads converting e4m3 pairs to fp32
 * in registers (cvt e4m3x2 -> f16x2 is exact, then f16 -> f32); arithmetic is unchanged.
 *
 * The windowed layers of head dim 256 with groups up to 4 (every Gemma 4 sliding layer) in the
 * e4m3 pool run attn_window_kernel instead: the same arithmetic, with K and V tiles brought
 * into shared memory by cp.async, the next tile in flight while one is computed (below). The
 * bf16 pool stays on attn_split_kernel: its 32 KB tiles, two stages, leave 3 window blocks an SM
 * against the split kernel's 4, which made bf16 attention slower in the window kernel while
 * e4m3's 17 KB tiles made it faster (see docs/perf-notes.md, "Measurements behind the code",
 * attention). */
/* PV = false: the stats pass, writes ml[rl][h][split] = (max, sum of exp(s - max)), the sum NaN
 * when a key was unmapped. PV = true: the P.V pass, writes part[rl][h][split][D]. rl is the row
 * within this launch's chunk (the scratch holds one chunk), row0 + rl the row of the step.
 * KEEP (windowed layers, whose keys per row are at most the window W): the stats pass also
 * writes each score to keep[rl][h][key - j0] (W floats per head), and the P.V pass reads them
 * back instead of loading K again: K read once, the same scores bit for bit. */
template <int D, int G, bool FP8, bool PV, bool KEEP>
static __global__ void __launch_bounds__(ATTN_THREADS, ATTN_MIN_BLOCKS(G, D))
    attn_split_kernel(k_attention_args a, int row0, int max_split, int spb, float *part, float2 *ml,
                      float *keep, unsigned *done) {
    K_GRID_DEPENDENCY();
    constexpr int DPT = D / ATTN_THREADS; /* dims per thread in P.V: 2 or 4 */
    /* the kept-score P.V pass of small groups splits the keys across warps (pv_warp_keys) */
    constexpr bool WARP_PV = KEEP && PV && D == 256 && G <= ATTN_WARP_PV_MAX_G;
    extern __shared__ float smem[];
    float *qs = smem;         /* [G][D] the group's queries */
    float *ps = smem + G * D; /* [G][ATTN_TILE] scores, then p */
    __shared__ long long voff[ATTN_TILE];
    __shared__ float m_run[G], l_run[G];
    __shared__ int bad[ATTN_MAX_SPB]; /* per split of the block: a key was unmapped */
    const int kvh = blockIdx.y, rl = blockIdx.z, r = row0 + rl;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int i = a.pos[r], seq = a.seq[r];
    const split_plan sp = plan_split(i, a.window);
    /* the block's splits [s_first, s_last), taken in turn, each with its own statistics or
     * partial exactly as a block of its own would compute them (attn_splits_per_block) */
    const int s_first = blockIdx.x * spb;
    if constexpr (PV && G * D <= ATTN_FOLD_HEAD_ELEMS)
        if (done && (i < 0 || sp.n_split > max_split)) { /* folded: the combine's NaN here */
            pv_fold_nan<D, G>(a, r, rl, kvh);
            return;
        }
    if (i < 0 || s_first >= sp.n_split || sp.n_split > max_split) return; /* combine: NaN */
    const int s_last = min(s_first + spb, sp.n_split);
    const int k_begin = sp.j0 + s_first * sp.per_split;
    /* the splits' tiles in order: a split is per_split keys (a multiple of ATTN_TILE) from j0,
     * the last one cut at the row's own key, so the tiles of consecutive splits run on */
    const int k_end = min(sp.j0 + s_last * sp.per_split, i + 1);
    const size_t base = ((size_t)rl * a.n_head + (size_t)kvh * G) * max_split; /* + g*max_split */

    /* Loads that depend on nothing but the row go out first, so their latencies overlap the
     * queries' load, the merge of the row's (max, sum) and the barrier instead of following
     * them: the first tile's K (quad scores) or kept scores and V (WARP_PV). Within each tile
     * the next tile's first batch goes out before the barrier that ends it. The arithmetic and
     * its order are unchanged. */
    constexpr bool QUAD = quad_scores<D, G>() && !(KEEP && PV);
    constexpr int KP = (G * ATTN_TILE + ATTN_THREADS - 1) / ATTN_THREADS; /* kept scores/thread */
    float *keep_row = KEEP ? keep + ((size_t)rl * a.n_head + (size_t)kvh * G) * a.window : NULL;
    quad_batch<D, FP8> kb;
    v_batch<G, FP8> vb;
    float kp[KP];
    if constexpr (QUAD)
        quad_issue<D, FP8>(a, seq, kvh, k_begin, min(ATTN_TILE, k_end - k_begin), 0, kb);
    if constexpr (WARP_PV) {
        const int nk0 = min(ATTN_TILE, k_end - k_begin);
        pv_issue<G, FP8>(a, seq, kvh, k_begin, nk0, warp, vb);
#pragma unroll
        for (int k = 0; k < KP; k++) {
            const int e = tid + k * ATTN_THREADS, g = e / ATTN_TILE, kk = e % ATTN_TILE;
            kp[k] = e < G * ATTN_TILE && kk < nk0
                        ? keep_row[(size_t)g * a.window + (k_begin - sp.j0) + kk]
                        : 0.0f;
        }
    }

    if (!(KEEP && PV)) load_queries<D, G>(a, r, kvh, qs, tid); /* the kept-score pass: no q.k */
    if (tid < ATTN_MAX_SPB) bad[tid] = 0;
    start_stats_block<G, PV>(ml + base, max_split, sp.n_split, m_run, l_run, tid);
    /* P.V accumulators: DPT dims of every head per thread, or (WARP_PV) 8 dims of every head
     * per lane over the keys of its warp */
    constexpr int NACC = WARP_PV ? 8 : DPT;
    float acc[G][NACC];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int t = 0; t < NACC; t++)
            acc[g][t] = 0.0f;
    __syncthreads();

    for (int t0 = k_begin; t0 < k_end; t0 += ATTN_TILE) {
        const int nk = min(ATTN_TILE, k_end - t0);
        const int t1 = t0 + ATTN_TILE, nk1 = min(ATTN_TILE, k_end - t1); /* the next tile */
        const int split = (t0 - sp.j0) / sp.per_split;
        /* this tile ends its split: the next starts a split, or there is none */
        const bool split_done = t1 >= k_end || (t1 - sp.j0) % sp.per_split == 0;
        int *split_bad = &bad[split - s_first];
        if constexpr (WARP_PV) {
            /* p = k_round_bf16(exp(s - m) / l) as the reference rounds it, from the prefetched kept
             * scores (m_run, l_run were set before the barrier above) */
#pragma unroll
            for (int k = 0; k < KP; k++) {
                const int e = tid + k * ATTN_THREADS, g = e / ATTN_TILE, kk = e % ATTN_TILE;
                if (e < G * ATTN_TILE && kk < nk) ps[e] = softmax_p(kp[k], m_run[g], l_run[g]);
            }
            __syncthreads();
            pv_warp_keys<G, FP8>(a, seq, kvh, t0, nk, ps, vb, acc);
            if (t1 < k_end) { /* the next tile's kept scores and first V batch */
                pv_issue<G, FP8>(a, seq, kvh, t1, nk1, warp, vb);
#pragma unroll
                for (int k = 0; k < KP; k++) {
                    const int e = tid + k * ATTN_THREADS, g = e / ATTN_TILE, kk = e % ATTN_TILE;
                    kp[k] = e < G * ATTN_TILE && kk < nk1
                                ? keep_row[(size_t)g * a.window + (t1 - sp.j0) + kk]
                                : 0.0f;
                }
            }
            __syncthreads(); /* ps is rewritten by the next tile */
            if (split_done) {
                warp_pv_store<D, G>(smem, acc, part + (base * D), max_split, split);
                __syncthreads(); /* red is smem: the next tile's p goes there */
            }
            continue;
        }
        if (KEEP && PV) { /* the stats pass's scores, and the V offsets */
            for (int e = tid; e < G * ATTN_TILE; e += ATTN_THREADS) {
                int g = e / ATTN_TILE, kk = e % ATTN_TILE;
                if (kk < nk) ps[e] = keep_row[(size_t)g * a.window + (t0 - sp.j0) + kk];
            }
            for (int kk = tid; kk < nk; kk += ATTN_THREADS)
                voff[kk] = kv_view_offset(&a.kv, seq, t0 + kk, a.kv_layer, 1, kvh);
        } else if constexpr (QUAD) {
            tile_scores_quad<D, G, FP8>(a, seq, kvh, t0, nk, qs, ps, voff, split_bad, kb);
            if (t1 < k_end) quad_issue<D, FP8>(a, seq, kvh, t1, nk1, 0, kb);
        } else {
            tile_scores_butterfly<D, G, FP8, PV ? 1 : (G < 4 ? G : 4)>(a, seq, kvh, t0, nk, qs, ps,
                                                                       voff, split_bad);
        }
        __syncthreads();
        if (KEEP && !PV) /* for the P.V pass (read-only use of ps below: no barrier needed) */
            keep_scores<G>(keep_row, a.window, t0 - sp.j0, ps, nk, tid);
        if (!PV) {
            tile_stats<G>(ps, nk, m_run, l_run, warp, lane);
        } else {
            /* p = k_round_bf16(exp(s - m) / l) as the reference rounds it, then P.V */
            for (int e = tid; e < G * ATTN_TILE; e += ATTN_THREADS) {
                int g = e / ATTN_TILE, kk = e % ATTN_TILE;
                if (kk < nk) ps[e] = softmax_p(ps[e], m_run[g], l_run[g]);
            }
            __syncthreads();
            /* VB keys' V loads in flight before the first product, then the products in key
             * order as one key at a time would add them: a load waited on before the next
             * (behind each key's unmapped-key branch) made the global layers' P.V pass a chain
             * of 64 memory latencies a tile. A key without V (unmapped, or past the tile) reads
             * element tid * DPT of the store, in bounds, and is skipped. */
            constexpr int VB = G * DPT >= 32 ? 4 : 8;
            for (int k0 = 0; k0 < nk; k0 += VB) {
                raw_n<FP8, DPT> vr[VB];
                bool has_v[VB];
#pragma unroll
                for (int u = 0; u < VB; u++) {
                    const long long vo = k0 + u < nk ? voff[k0 + u] : -1;
                    has_v[u] = vo >= 0; /* block-uniform */
                    vr[u] = load_raw_n<FP8, DPT>(a.kv.base, (has_v[u] ? vo : 0) + tid * DPT);
                }
#pragma unroll
                for (int u = 0; u < VB; u++) {
                    if (!has_v[u]) continue;
                    float v[DPT];
                    cvt_n<FP8, DPT>(vr[u], v);
#pragma unroll
                    for (int g = 0; g < G; g++) {
                        const float p = ps[g * ATTN_TILE + k0 + u];
#pragma unroll
                        for (int t = 0; t < DPT; t++)
                            acc[g][t] += p * v[t];
                    }
                }
            }
        }
        __syncthreads(); /* ps and voff are rewritten by the next tile (WARP_PV ends its tiles
                            above) */
        if (!split_done) continue;
        if constexpr (PV && !WARP_PV) { /* this split's partial: each thread its own dims, then
                                           a fresh sum */
#pragma unroll
            for (int g = 0; g < G; g++) {
                float *dst = part + (base + (size_t)g * max_split + split) * D + tid * DPT;
#pragma unroll
                for (int t = 0; t < NACC; t++) {
                    dst[t] = acc[g][t];
                    acc[g][t] = 0.0f;
                }
            }
        } else if (!PV && tid < G) { /* this split's (max, sum), then fresh ones: the barrier
                                        that ends the next tile's scores orders them before use */
            ml[base + (size_t)tid * max_split + split] =
                make_float2(m_run[tid], *split_bad ? NAN : l_run[tid]);
            m_run[tid] = -INFINITY;
            l_run[tid] = 0.0f;
        }
    }
    if constexpr (PV && G * D <= ATTN_FOLD_HEAD_ELEMS)
        if (done)
            pv_fold<D, G>(a, r, rl, kvh, max_split, sp.n_split, (sp.n_split + spb - 1) / spb, part,
                          ml, done);
}

/* One block per (query head, row): out = k_round_bf16(sum of the row's partials in split order);
 * NaN for a row without keys, past the grid, or with an unmapped key (a NaN sum in any split).
 * Launched when the combine is not folded into the P.V pass (k_attention says when). */
template <int D>
static __global__ void __launch_bounds__(ATTN_THREADS)
    attn_combine_kernel(k_attention_args a, int row0, int max_split, const float *part,
                        const float2 *ml) {
    K_GRID_DEPENDENCY();
    const int h = blockIdx.x, rl = blockIdx.y, r = row0 + rl;
    const int i = a.pos[r];
    const split_plan sp = plan_split(i, a.window);
    combine_heads<D>(a, r, rl, h, 1, max_split, sp.n_split, i < 0 || sp.n_split > max_split, part,
                     ml);
}

/* The folded combine's counters, one per (row, KV head) of a launch: zero at load, and set back
 * to zero by the block that uses one (pv_fold). One attention launch at a time uses them, as
 * it does the scratch. */
static __device__ unsigned attn_fold_done[ATTN_FOLD_MAX];

unsigned *attn_fold_counters(void) {
    static unsigned *p = NULL;
    if (!p) {
        void *q = NULL;
        if (cudaGetSymbolAddress(&q, attn_fold_done) == cudaSuccess)
            p = (unsigned *)q;
        else
            (void)cudaGetLastError(); /* no fold: the combine keeps its launch */
    }
    return p;
}

static int attn_fold_on = 1; /* serve.attn_fold's default */
extern "C" void k_set_attn_fold(int on) { attn_fold_on = on ? 1 : 0; }
static int attn_mma_on = 1; /* serve.attn_mma's default */
extern "C" void k_set_attn_mma(int on) { attn_mma_on = on ? 1 : 0; }
static int attn_tile_min_rows = 64; /* serve.attn_query_tiles' default */
extern "C" void k_set_attn_query_tiles(int rows) { attn_tile_min_rows = rows > 0 ? rows : 0; }
static int attn_tile_fold_on = 1; /* serve.attn_tile_fold's default */
extern "C" void k_set_attn_tile_fold(int on) { attn_tile_fold_on = on ? 1 : 0; }
static long long attn_tile_folds; /* launches whose tiles combined their splits themselves */
extern "C" long long k_attn_tile_folds(void) { return attn_tile_folds; }
static long long attn_tile_launches; /* launches on the query tiles */
extern "C" long long k_attn_tile_launches(void) { return attn_tile_launches; }

/* ---- the launcher ---- */

/* The stats and P.V passes of one (KEEP or not) instantiation. The kept-score P.V pass of a
 * small group sums its warps' partials in shared memory (pv_warp_keys), which sizes it; in the
 * e4m3 pool the windowed layers of head dim 256 and small groups run the window kernels instead. */
template <int D, int G, bool FP8, bool KEEP>
static int launch_passes(const k_attention_args *a, dim3 grid, int max_split, int spb, float *part,
                         float2 *ml, float *keep, unsigned *done, int row0, cudaStream_t s) {
    if constexpr (KEEP && FP8 && D == 256 && G <= ATTN_WARP_PV_MAX_G) /* tiles in shared memory */
        return attn_window_passes<G, FP8>(a, grid, max_split, spb, part, ml, keep, done, row0, s);
    const size_t smem = (size_t)G * (D + ATTN_TILE) * sizeof(float);
    size_t pv_smem = smem;
    if constexpr (KEEP && D == 256 && G <= ATTN_WARP_PV_MAX_G)
        pv_smem = (size_t)ATTN_WARPS * G * D * sizeof(float);
    CUDA_CHECK(k_launch(attn_split_kernel<D, G, FP8, false, KEEP>, grid, ATTN_THREADS, smem, s, *a,
                        row0, max_split, spb, part, ml, keep, (unsigned *)NULL));
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(k_launch(attn_split_kernel<D, G, FP8, true, KEEP>, grid, ATTN_THREADS, pv_smem, s,
                        *a, row0, max_split, spb, part, ml, keep, done));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* Splits a block takes in turn: a power of two up to ATTN_MAX_SPB, the largest that still
 * leaves the grid about one wave of resident blocks (4 per SM, __launch_bounds__), so that a
 * step of many rows pays each block's fixed costs (queries' load, barriers, the (max, sum)
 * merge, the launch) once per several tiles and overlaps a tile's loads with the previous
 * tile's arithmetic, while a step of few rows keeps a block per split to fill the card. Every
 * split's arithmetic is the same whichever block takes it, so a row's results do not depend
 * on this choice, nor therefore on its batch mates (batch invariance). The grid is counted from
 * the longest row's splits; in a step whose rows are mostly short, blocks of the short rows exit
 * at once, so a few blocks may carry the long row's splits in turn (a speed question only). */
static int attn_splits_per_block(int max_split, long long pairs) {
    static int slots = 0; /* resident blocks on the card */
    if (slots == 0) {
        int dev = 0, sms = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            sms <= 0) {
            (void)cudaGetLastError(); /* the query's failure is not the launch's */
            sms = 132;
        }
        slots = 4 * sms;
    }
    return attn_split_choice(max_split, pairs, slots, 9, ATTN_MAX_SPB);
}

/* The tensor-core passes' choice: waves counted in the blocks their shared memory lets the card
 * hold (attn_mma_slots: 3 an SM at head dim 256, 2 at 512, not the CUDA-core kernels' 4). The
 * windowed layers keep at least 1.5 waves, the global ones 0.9: the choices that measured
 * fastest in paired graphed steps at 1, 4 and 16 rows of the 26B-A4B and 16 of the 31B (16
 * 26B-A4B rows: 2 splits a block at both head dims, where counting 4 blocks an SM took 4 and 1;
 * docs/perf-notes.md, "Attention"). */
template <int D, int G, bool FP8>
static int attn_mma_splits_per_block(int max_split, long long pairs, bool keep) {
    const int slots = D == 256 && keep ? attn_mma_slots<D, G, FP8, D == 256>()
                                       : attn_mma_slots<D, G, FP8, false>();
    return attn_split_choice(max_split, pairs, slots, D == 256 ? 15 : 9, ATTN_MAX_SPB);
}

template <int D, int G, bool FP8>
static int launch_group(const k_attention_args *a, int max_split, float *part, float2 *ml,
                        float *keep, unsigned *done, int row0, int nr, bool tiles, cudaStream_t s) {
    if constexpr (G * D > ATTN_FOLD_HEAD_ELEMS) done = NULL; /* the combine keeps its launch */
    const long long pairs = (long long)nr * a->kv.n_kv_head;
    int spb = a->splits_per_block;
    if (spb <= 0) {
        spb = attn_mma_on && !tiles
                  ? attn_mma_splits_per_block<D, G, FP8>(max_split, pairs, keep != NULL)
                  : attn_splits_per_block(max_split, pairs);
    }
    dim3 grid((unsigned)((max_split + spb - 1) / spb), (unsigned)a->kv.n_kv_head, (unsigned)nr);
    int rc;
    if (attn_mma_on && tiles) { /* query tiles: rows of one sequence share a block where they may */
        constexpr int R = attn_tile_rows<G>();
        done = NULL; /* the folded combine's counters are the decode launches' */
        const long long tiles_n = (nr + R - 1) / R;
        int tspb = a->splits_per_block > 0
                       ? a->splits_per_block
                       : attn_splits_per_block(max_split, tiles_n * a->kv.n_kv_head);
        /* serve.attn_tile_fold: a block per tile along x, so that it holds every split of its
         * rows and sums them itself (prefill launches have tiles enough to fill the card); a
         * forced split count keeps its grid, folded only where it is one block wide */
        if (attn_tile_fold_on && a->splits_per_block <= 0 && max_split <= ATTN_MAX_SPB)
            tspb = max_split;
        const dim3 tgrid((unsigned)((max_split + tspb - 1) / tspb), (unsigned)a->kv.n_kv_head,
                         (unsigned)tiles_n);
        const bool fold = attn_tile_fold_on && G < 16 && tgrid.x == 1;
        if constexpr (D == 256)
            rc = keep ? attn_mma_tile_passes<D, G, FP8, true>(a, tgrid, max_split, tspb, part, ml,
                                                              keep, row0, fold, s)
                      : attn_mma_tile_passes<D, G, FP8, false>(a, tgrid, max_split, tspb, part, ml,
                                                               NULL, row0, fold, s);
        else
            rc = attn_mma_tile_passes<D, G, FP8, false>(a, tgrid, max_split, tspb, part, ml, NULL,
                                                        row0, fold, s);
        if (rc == K_OK) attn_tile_launches++;
        if (rc == K_OK && fold) {
            attn_tile_folds++;
            return K_OK; /* the P.V pass wrote the output */
        }
    } else if (attn_mma_on) { /* the products on tensor cores: every row of the layer, any launch */
        if constexpr (D == 256)
            rc = keep ? attn_mma_passes<D, G, FP8, true>(a, grid, max_split, spb, part, ml, keep,
                                                         done, row0, s)
                      : attn_mma_passes<D, G, FP8, false>(a, grid, max_split, spb, part, ml, NULL,
                                                          done, row0, s);
        else
            rc = attn_mma_passes<D, G, FP8, false>(a, grid, max_split, spb, part, ml, NULL, done,
                                                   row0, s);
    } else if constexpr (D == 256) /* the windowed families keep their scores between the passes */
        rc = keep ? launch_passes<D, G, FP8, true>(a, grid, max_split, spb, part, ml, keep, done,
                                                   row0, s)
                  : launch_passes<D, G, FP8, false>(a, grid, max_split, spb, part, ml, NULL, done,
                                                    row0, s);
    else
        rc =
            launch_passes<D, G, FP8, false>(a, grid, max_split, spb, part, ml, NULL, done, row0, s);
    if (rc != K_OK || done) return rc; /* folded: the P.V pass's last blocks combined */
    CUDA_CHECK(k_launch(attn_combine_kernel<D>, dim3((unsigned)a->n_head, (unsigned)nr),
                        ATTN_THREADS, 0, s, *a, row0, max_split, part, ml));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

template <int D, bool FP8>
static int launch_attention(const k_attention_args *a, int group, int max_split, float *part,
                            float2 *ml, float *keep, unsigned *done, int row0, int nr, bool tiles,
                            cudaStream_t s) {
    switch (group) {
    case 1:
        return launch_group<D, 1, FP8>(a, max_split, part, ml, keep, done, row0, nr, tiles, s);
    case 2:
        return launch_group<D, 2, FP8>(a, max_split, part, ml, keep, done, row0, nr, tiles, s);
    case 4:
        return launch_group<D, 4, FP8>(a, max_split, part, ml, keep, done, row0, nr, tiles, s);
    case 8:
        return launch_group<D, 8, FP8>(a, max_split, part, ml, keep, done, row0, nr, tiles, s);
    default:
        return launch_group<D, 16, FP8>(a, max_split, part, ml, keep, done, row0, nr, tiles, s);
    }
}

/* The most k_attention asks of its scratch: row chunks keep the partials under
 * ATTN_SCRATCH_MAX, and one row's partials (32 heads x 32 splits x 514 floats) are far below. */
extern "C" size_t k_attention_workspace(void) { return ATTN_SCRATCH_MAX; }

extern "C" int k_attention(const k_attention_args *a_in, g4_stream st) {
    int rc = kv_dtype_check(&a_in->kv);
    if (rc) return rc;
    if (!kv_shape_ok(&a_in->kv, a_in->kv_layer) || a_in->rows < 0 || a_in->n_head <= 0 ||
        a_in->n_head % a_in->kv.n_kv_head || a_in->window < 0 || a_in->max_pos < 0 ||
        a_in->splits_per_block < 0 || a_in->splits_per_block > ATTN_MAX_SPB || !a_in->out ||
        !a_in->q || !a_in->pos || !a_in->seq || !aligned16(a_in->q) || a_in->prompt_rows < 0 ||
        a_in->prompt_rows > a_in->rows)
        return K_ERR_SHAPE;
    int group = a_in->n_head / a_in->kv.n_kv_head;
    if (group != 1 && group != 2 && group != 4 && group != 8 && group != 16) return K_ERR_SHAPE;
    if (a_in->rows == 0) return K_OK;
    /* the prompt rows on their own pass where it takes them; the split passes below get the
     * generated rows before them (all rows otherwise) */
    k_attention_args rest = *a_in;
    rc = attn_prompt_launch(a_in, (cudaStream_t)st);
    if (rc < 0) return rc;
    if (rc == K_OK) rest.rows -= a_in->prompt_rows;
    rest.prompt_rows = 0;
    if (rest.rows == 0) return K_OK;
    rc = K_OK;
    const k_attention_args *a = &rest;
    /* the grid's splits: those of the longest row the step can hold */
    int reach = a->kv.max_pages * a->kv.page_tokens - 1;
    int max_pos = a->max_pos > 0 && a->max_pos < reach ? a->max_pos : reach;
    int max_split = grid_splits(max_pos, a->window);
    int d = a->kv.head_dim;
    /* windowed head-dim-256 layers keep their scores between the passes (W floats per head) */
    bool keep = d == 256 && a->window > 0;
    size_t per_row = (size_t)a->n_head * (size_t)max_split * ((size_t)d + 2) * sizeof(float) +
                     (keep ? (size_t)a->n_head * (size_t)a->window * sizeof(float) : 0);
    int chunk = (int)(ATTN_SCRATCH_MAX / per_row);
    if (chunk < 1) chunk = 1;
    if (chunk > a->rows) chunk = a->rows;
    if (chunk > 65535) chunk = 65535;
    /* query tiles: a prefill-sized launch on the tensor-core passes, its row chunks whole tiles
     * (every chunk but the step's last a multiple of 16 rows) */
    const bool tiles = attn_mma_on && attn_tile_min_rows > 0 && a->rows >= attn_tile_min_rows &&
                       chunk >= 16 && group < 16;
    if (tiles && chunk < a->rows) chunk -= chunk % 16;
    /* strided tiles (attn_mma_tile_kernel) take whole groups of 64 tiles: chunks of whole
     * groups where the scratch holds one, so a long prompt's chunk is not cut mid-group */
    const int group_rows = ATTN_TILE * (16 / (group < 16 ? group : 16));
    if (tiles && attn_strided_tiles() && a->window > 0 && chunk < a->rows && chunk >= group_rows)
        chunk -= chunk % group_rows;
    cudaStream_t s = (cudaStream_t)st;
    void *ws = NULL;
    rc = k_scratch(K_SCRATCH_ATTN, per_row * (size_t)chunk, s, &ws);
    if (rc) return rc;
    float *part = (float *)ws;
    float2 *ml = (float2 *)(part + (size_t)chunk * a->n_head * max_split * d);
    float *kept = keep ? (float *)(ml + (size_t)chunk * a->n_head * max_split) : NULL;
    bool fp8 = a->kv.elem_bytes == 1;
    /* the combine folded into the P.V pass where the counters cover the launch (decode steps);
     * the same bits either way (test_attn's `combine folded` gates) */
    unsigned *done = !tiles && attn_fold_on &&
                             (long long)chunk * a->kv.n_kv_head <= ATTN_FOLD_MAX &&
                             group * d <= ATTN_FOLD_HEAD_ELEMS
                         ? attn_fold_counters()
                         : NULL;
    for (int row0 = 0; row0 < a->rows && rc == K_OK; row0 += chunk) {
        int nr = a->rows - row0 < chunk ? a->rows - row0 : chunk;
        if (d == 256)
            rc = fp8 ? launch_attention<256, true>(a, group, max_split, part, ml, kept, done, row0,
                                                   nr, tiles, s)
                     : launch_attention<256, false>(a, group, max_split, part, ml, kept, done, row0,
                                                    nr, tiles, s);
        else
            rc = fp8 ? launch_attention<512, true>(a, group, max_split, part, ml, kept, done, row0,
                                                   nr, tiles, s)
                     : launch_attention<512, false>(a, group, max_split, part, ml, kept, done, row0,
                                                    nr, tiles, s);
    }
    return rc;
}

K_TRACE_UNIT(attn) /* the kernel trace build's binder (common.cuh) */
