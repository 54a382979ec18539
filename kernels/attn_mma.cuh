/* kernels/attn_mma.cuh - the split-KV passes with their products on tensor cores (serve.attn_mma):
 * the scores S = Q K^T and the P.V sums by mma.sync m16n8k16 (bf16 in, fp32 accumulate), K and V
 * brought into shared memory by cp.async a chunk of keys ahead. Everything around the products is
 * attn.cu's: the split plan, the (max, sum) per split and its merge, the kept scores of windowed
 * layers, p = k_round_bf16(exp(s - m) / l), the partials and their combine (launched or folded),
 * the scratch layout and the NaN answers. docs/attention-design.md says why and what changes.
 *
 * The products and their order. A block serves one row and one KV head, as the split kernels
 * do: the M side of every mma is the group's G query heads (rows G..15 zero), so a row's sums
 * are the same instructions whatever else the step holds (batch invariance, docs/gates.md).
 *   scores  s = k_round_bf16(q . k): per key, D / 16 mmas in ascending k order, each adding its
 *           16 products to the fp32 accumulator; q and k are bf16, so every product is exact.
 *   P.V     per split, o[d] = sum over the split's keys of p . v: an mma per 16 keys in key
 *           order into the same accumulator, tile after tile; p is the bf16 weight itself.
 * So the sums are fp32 over exact products, as the reference's (HF eager on a GPU runs the same
 * bf16 GEMMs); only their order differs from the CUDA-core kernels, which is why the switch
 * moves bits and the pinned recordings with it.
 *
 * The pipeline. A pass walks its keys in units: a chunk of CK keys of K (scores) or of V (P.V);
 * the P.V pass of unkept layers walks K and V of each chunk in turn (it recomputes the scores).
 * A unit's copies go out two units ahead into the stage the unit before last used, so while one
 * unit is computed the next is in flight. Keys that are unmapped, or past the block's last key,
 * get a zero row instead of a copy: their weight is 0 (and their score -inf), and a zero row
 * keeps 0 x (whatever the slot held) out of the sums. The e4m3 pool's units are widened to bf16
 * in shared memory once landed (exact: every e4m3 value is a bf16 value), then take the same
 * path.
 *
 * Where it is compiled. This header is the family's code; each kernels/attn_mma_d*.cu part
 * includes it and instantiates one (head dim, pool, kept scores) set of it through
 * ATTN_MMA_PART below, so nvcc builds the parts side by side (one file of ~70 instantiations took
 * minutes alone, the longest step of every build). kernels/attn_mma.cu holds the switches and
 * counters they share and the start-up that calls each part's. No kernel of one set is launched
 * by another's launchers, so each kernel lives in exactly one part. */
#ifndef G4_ATTN_MMA_CUH
#define G4_ATTN_MMA_CUH

#include "kernels/attn_common.cuh"
#include "kernels/attn_frag.cuh"

#define MMA_STAGES 2 /* units in shared memory: the one in use and the one landing */
#define MMA_SLOTS 3  /* key offsets: in use, landing, and being looked up */

/* Keys a unit holds: a 64-key tile at head dim 256, half of one at 512 (so a stage is ~33 KB
 * either way and three blocks of the windowed layers fit an SM). */
template <int D> static __host__ __device__ constexpr int mma_chunk() { return D == 256 ? 64 : 32; }
/* A bf16 key row's stride in shared memory: 16 bytes over the row, so the 8 rows an ldmatrix
 * reads start 4 banks apart and do not conflict. */
template <int D> static __host__ __device__ constexpr int mma_bf_stride() { return D * 2 + 16; }
/* A staged key row's stride: bf16 rows are used where they land; e4m3 rows are widened first. */
template <int D, bool FP8> static __host__ __device__ constexpr int mma_stage_stride() {
    return FP8 ? D + 16 : mma_bf_stride<D>();
}
/* The queries' row stride in bf16 elements: 8 over the row, so the fragment loads of 8 heads x
 * 4 lanes fall in distinct banks. */
template <int D> static __host__ __device__ constexpr int mma_q_stride() { return D + 8; }

/* Keys a unit holds in a block of NW warps that each take MT m16 tiles of query heads: the
 * one-tile blocks' mma_chunk; the wide blocks (serve.attn_pair_tiles, MT = 2) 8 keys a warp,
 * one n tile each, so that every warp's two score chains share their key operands. */
template <int D, int MT, int NW> static __host__ __device__ constexpr int mma_unit_keys() {
    return MT == 1 ? mma_chunk<D>() : NW * 8;
}

/* Dynamic shared memory: the stages, the widened unit (e4m3 without FRAG8), the queries (passes
 * that score), then the tile's scores or weights ps[R x G][ATTN_TILE] (R rows a block). MT, NW:
 * as mma_unit_keys. */
template <int D, int G, bool FP8, bool PV, bool KEEP, int R, bool FRAG8 = false, int MT = 1,
          int NW = ATTN_WARPS>
static __host__ __device__ constexpr size_t mma_smem_bytes() {
    return (size_t)MMA_STAGES * mma_unit_keys<D, MT, NW>() * mma_stage_stride<D, FP8>() +
           (FP8 && !FRAG8 ? (size_t)mma_unit_keys<D, MT, NW>() * mma_bf_stride<D>() : 0) +
           (PV && KEEP ? 0 : (size_t)R * G * mma_q_stride<D>() * 2) +
           sizeof(float) * R * G * ATTN_TILE;
}

/* PV = false: the stats pass (ml per split; KEEP: the scores kept too). PV = true: the P.V pass
 * (part per split; the combine folded where done is set). Arguments as attn_split_kernel's.
 * FRAG8 (the e4m3 pool, serve.attn_fp8_frags): the mmas' key and value operands are converted
 * from the staged e4m3 rows as they are loaded, not widened into a bf16 unit first: no widening
 * pass, no barrier after it, no widened unit in shared memory (more blocks an SM). The keys'
 * operand registers are the widened path's; the values' are spread over other n tiles (even and
 * odd dims), but each dim's mma column gets the same values in the same k slots, and a column's
 * sums depend only on its own operands, so the bits are the same (test_attn's gates). */
template <int D, int G, bool FP8, bool PV, bool KEEP, bool FRAG8 = false>
static __global__ void __launch_bounds__(ATTN_THREADS)
    attn_mma_kernel(k_attention_args a, int row0, int max_split, int spb, float *part, float2 *ml,
                    float *keep, unsigned *done, int early) {
    /* early (serve.attn_early_lookup): the first two units' page-table look-ups go before the
     * wait on the grid before. Positions, sequences and page tables are the step's inputs,
     * copied in before its first kernel and written by none (kernels.h), so those two dependent
     * loads overlap the producer's tail instead of following it; everything a kernel of the step
     * writes (queries, keys, statistics, kept scores) is read after the wait, and nothing global
     * is written before it. */
#ifdef G4_KERNEL_TRACE
    early = 0; /* the trace build stamps at every wait: one wait a kernel, or some spill */
#endif
    if (!early) K_GRID_DEPENDENCY();
    static_assert(G <= 16, "a group's heads are the M rows of one mma");
    static_assert(FP8 || !FRAG8, "operands from e4m3 rows: the e4m3 pool");
    constexpr bool WIDEN = FP8 && !FRAG8; /* the unit widened to bf16 rows first */
    static_assert(!KEEP || D == 256, "kept scores: windowed layers of head dim 256");
    constexpr int CK = mma_chunk<D>();
    constexpr int CPT = ATTN_TILE / CK;            /* units of a tile */
    constexpr bool SCORES = !(PV && KEEP);         /* the pass computes scores from K */
    constexpr int UPC = SCORES && PV ? 2 : 1;      /* units a chunk: K, then V */
    constexpr int EB = FP8 ? 1 : 2;                /* bytes per stored element */
    constexpr int SEGS = D * EB / 16;              /* 16-byte copies per key row */
    constexpr int RS = mma_stage_stride<D, FP8>(); /* a staged row's stride */
    constexpr int BS = mma_bf_stride<D>();         /* a bf16 row's stride */
    constexpr int STAGE = CK * RS;
    constexpr int QS = mma_q_stride<D>();
    constexpr int KW = CK / ATTN_WARPS; /* keys a warp scores in a unit: 16 or 8 */
    constexpr int NTS = KW / 8;         /* their n tiles */
    constexpr int DW = D / ATTN_WARPS;  /* dims a warp sums in P.V */
    constexpr int NTO = DW / 8;         /* their n tiles */
    constexpr int KP = (G * ATTN_TILE + ATTN_THREADS - 1) / ATTN_THREADS; /* kept scores/thread */
    extern __shared__ __align__(16) unsigned char mma_smem[];
    unsigned char *stages = mma_smem;
    unsigned char *wide = stages + MMA_STAGES * STAGE; /* the e4m3 unit widened */
    bf16_t *qsb = (bf16_t *)(wide + (WIDEN ? CK * BS : 0));
    float *ps = (float *)((unsigned char *)qsb + (SCORES ? G * QS * 2 : 0)); /* [G][ATTN_TILE] */
    __shared__ long long koff[MMA_SLOTS][CK]; /* element offsets; -1: unmapped or past */
    __shared__ float m_run[G], l_run[G];
    __shared__ int bad[ATTN_MAX_SPB];
    const int kvh = blockIdx.y, rl = blockIdx.z, r = row0 + rl;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int g0 = lane >> 2, qd = lane & 3; /* the lane's fragment row and column pair */
    const int i = a.pos[r], seq = a.seq[r];
    const split_plan sp = plan_split(i, a.window);
    const int s_first = blockIdx.x * spb;
    if constexpr (PV && G * D <= ATTN_FOLD_HEAD_ELEMS)
        if (done && (i < 0 || sp.n_split > max_split)) { /* folded: the combine's NaN here */
            if (early) K_GRID_DEPENDENCY();              /* before its writes */
            pv_fold_nan<D, G>(a, r, rl, kvh);
            return;
        }
    if (i < 0 || s_first >= sp.n_split || sp.n_split > max_split) { /* combine: NaN */
        /* a grid whose blocks all ended here would otherwise end before the grid before it */
        if (early) K_GRID_DEPENDENCY();
        return;
    }
    const int s_last = min(s_first + spb, sp.n_split);
    const int k_begin = sp.j0 + s_first * sp.per_split;
    const int k_end = min(sp.j0 + s_last * sp.per_split, i + 1);
    const int n_chunks = (k_end - k_begin + CK - 1) / CK;
    const int n_units = n_chunks * UPC;
    const size_t base = ((size_t)rl * a.n_head + (size_t)kvh * G) * max_split;
    float *keep_row = KEEP ? keep + ((size_t)rl * a.n_head + (size_t)kvh * G) * a.window : NULL;

    /* unit u's store plane: K (0) or V (1) */
    auto plane_of = [&](int u) -> int { return UPC == 2 ? u % 2 : (SCORES ? 0 : 1); };
    /* the offset of key kk of unit u (-1: unmapped, or past the block's keys) */
    auto offset_of = [&](int u, int kk) -> long long {
        const int k0 = k_begin + (u / UPC) * CK;
        return kk >= 0 && kk < CK && u < n_units && k0 + kk < k_end
                   ? kv_view_offset(&a.kv, seq, k0 + kk, a.kv_layer, plane_of(u), kvh)
                   : -1;
    };
    auto look_up = [&](int u, int first) {
        const int kk = tid - first;
        if (kk >= 0 && kk < CK) koff[u % MMA_SLOTS][kk] = offset_of(u, kk);
    };
    /* unit u's copies into stage u % MMA_STAGES (zero rows for keys without one), then a group */
    auto copy = [&](int u) {
        if (u < n_units) {
            unsigned char *st = stages + (u % MMA_STAGES) * STAGE;
            const long long *ko = koff[u % MMA_SLOTS];
            for (int c = tid; c < CK * SEGS; c += ATTN_THREADS) {
                const int kk = c / SEGS, seg = c % SEGS;
                const long long o = ko[kk];
                if (o >= 0)
                    cp_async16(st + kk * RS + seg * 16,
                               (const unsigned char *)a.kv.base + o * EB + seg * 16);
                else
                    *reinterpret_cast<uint4 *>(st + kk * RS + seg * 16) = make_uint4(0, 0, 0, 0);
            }
        }
        cp_async_commit();
    };
    float kp[KP]; /* the kept scores of the next tile (KEEP's P.V pass) */
    auto load_kept = [&](int ti) {
        const int t0 = k_begin + ti * ATTN_TILE, nk = min(ATTN_TILE, k_end - t0);
#pragma unroll
        for (int k = 0; k < KP; k++) {
            const int e = tid + k * ATTN_THREADS, g = e / ATTN_TILE, kk = e % ATTN_TILE;
            kp[k] = ti * CPT < n_chunks && e < G * ATTN_TILE && kk < nk
                        ? keep_row[(size_t)g * a.window + (t0 - sp.j0) + kk]
                        : 0.0f;
        }
    };

    look_up(0, 0);
    look_up(1, CK);
    if (early) K_GRID_DEPENDENCY();
    if constexpr (PV && KEEP) load_kept(0);
    if constexpr (SCORES) { /* the group's queries, bf16 as stored */
        const bf16_t *q = a.q + ((size_t)r * a.n_head + (size_t)kvh * G) * D;
        for (int e8 = tid; e8 < G * D / 8; e8 += ATTN_THREADS) {
            const int g = e8 / (D / 8), d = e8 % (D / 8) * 8;
            *reinterpret_cast<uint4 *>(qsb + g * QS + d) =
                *reinterpret_cast<const uint4 *>(q + (size_t)g * D + d);
        }
    }
    if (tid < ATTN_MAX_SPB) bad[tid] = 0;
    start_stats_block<G, PV>(ml + base, max_split, sp.n_split, m_run, l_run, tid);
    float o[NTO][4]; /* P.V: rows g0, g0 + 8 of the warp's dims */
#pragma unroll
    for (int n = 0; n < NTO; n++)
#pragma unroll
        for (int t = 0; t < 4; t++)
            o[n][t] = 0.0f;
    __syncthreads(); /* slots 0 and 1, the queries, m_run / l_run */
    copy(0);
    copy(1);

    for (int u = 0; u < n_units; u++) {
        const int c = u / UPC, plane = plane_of(u);
        const int ti = c / CPT, t0 = k_begin + ti * ATTN_TILE;
        const int nk = min(ATTN_TILE, k_end - t0);           /* the tile's keys */
        const int kc = (c % CPT) * CK;                       /* the unit's first key in the tile */
        const int nkc = min(CK, k_end - (k_begin + c * CK)); /* the unit's keys */
        const bool tile_end = c % CPT == CPT - 1 || c == n_chunks - 1;
        const bool unit_end = !PV || plane == 1; /* the chunk's last unit */
        const int split = (t0 - sp.j0) / sp.per_split;
        /* the split's place in the block's run, from blockIdx again: s_first held across the
         * loop cost a spill (ptxas) */
        const int split_rel = split - (int)blockIdx.x * spb;
        const bool split_done =
            tile_end && unit_end &&
            (t0 + ATTN_TILE >= k_end || (t0 + ATTN_TILE - sp.j0) % sp.per_split == 0);
        const unsigned char *st = stages + (u % MMA_STAGES) * STAGE;
        const long long *ko = koff[u % MMA_SLOTS];
        const long long off_next = offset_of(u + 2, tid); /* stored before the second barrier */
        cp_async_wait_one(); /* this thread's copies of unit u have landed */
        if constexpr (PV &&
                      KEEP) { /* p = k_round_bf16(exp(s - m) / l) as the reference rounds it */
#pragma unroll
            for (int k = 0; k < KP; k++) {
                const int e = tid + k * ATTN_THREADS, g = e / ATTN_TILE, kk = e % ATTN_TILE;
                if (e < G * ATTN_TILE)
                    ps[e] = kk < nk ? softmax_p(kp[k], m_run[g], l_run[g]) : 0.0f;
            }
        }
        __syncthreads(); /* every thread's copies of unit u, and p */
        const unsigned char *tile = st;
        if constexpr (WIDEN) { /* widen the unit to bf16 rows */
            for (int e = tid; e < CK * D / 8; e += ATTN_THREADS) {
                const int kk = e / (D / 8), d = e % (D / 8) * 8;
                *reinterpret_cast<uint4 *>(wide + kk * BS + d * 2) =
                    widen_e4m3x8(*reinterpret_cast<const uint2 *>(st + kk * RS + d));
            }
            __syncthreads();
            tile = wide;
        }
        if (plane == 0) { /* scores of the warp's KW keys: D / 16 mmas each, in k order */
            float s[NTS][4];
#pragma unroll
            for (int n = 0; n < NTS; n++)
#pragma unroll
                for (int t = 0; t < 4; t++)
                    s[n][t] = 0.0f;
            /* ldmatrix rows: lane l reads key (l / 16) * 8 + l % 8 of the warp's, dims + 8 for
             * lanes 8-15 and 24-31: matrices (keys 0-7, dims 0-7), (0-7, 8-15), (8-15, 0-7),
             * (8-15, 8-15), the b0 b1 pairs of the warp's two n tiles */
            const unsigned char *kb =
                tile + (warp * KW + (NTS == 2 ? (lane >> 4) * 8 : 0) + (lane & 7)) * BS +
                ((lane >> 3) & 1) * 16;
#pragma unroll 4
            for (int ks = 0; ks < D / 16; ks++) {
                uint32_t af[4];
                af[0] = g0 < G
                            ? *reinterpret_cast<const uint32_t *>(qsb + g0 * QS + ks * 16 + 2 * qd)
                            : 0u;
                af[2] =
                    g0 < G
                        ? *reinterpret_cast<const uint32_t *>(qsb + g0 * QS + ks * 16 + 8 + 2 * qd)
                        : 0u;
                af[1] = g0 + 8 < G ? *reinterpret_cast<const uint32_t *>(qsb + (g0 + 8) * QS +
                                                                         ks * 16 + 2 * qd)
                                   : 0u;
                af[3] = g0 + 8 < G ? *reinterpret_cast<const uint32_t *>(qsb + (g0 + 8) * QS +
                                                                         ks * 16 + 8 + 2 * qd)
                                   : 0u;
                if constexpr (FRAG8) {
                    /* key warp * KW + n * 8 + g0, dims 2 qd, 2 qd + 1 and those + 8: what
                     * ldmatrix gives from the widened rows */
#pragma unroll
                    for (int n = 0; n < NTS; n++) {
                        const unsigned char *kr = st + (warp * KW + n * 8 + g0) * RS + ks * 16;
                        mma_bf16(
                            s[n], af,
                            widen_e4m3x2(*reinterpret_cast<const uint16_t *>(kr + 2 * qd)),
                            widen_e4m3x2(*reinterpret_cast<const uint16_t *>(kr + 8 + 2 * qd)));
                    }
                } else if constexpr (NTS == 2) {
                    uint32_t b[4];
                    ldsm_x4(b, kb + ks * 32);
                    mma_bf16(s[0], af, b[0], b[1]);
                    mma_bf16(s[1], af, b[2], b[3]);
                } else {
                    uint32_t b[2];
                    ldsm_x2(b, kb + ks * 32);
                    mma_bf16(s[0], af, b[0], b[1]);
                }
            }
            /* s[n][t]: head g0 (t < 2) or g0 + 8, key warp * KW + n * 8 + 2 qd + t % 2 */
#pragma unroll
            for (int n = 0; n < NTS; n++)
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    const int g = g0 + (t >> 1) * 8, kk = warp * KW + n * 8 + 2 * qd + (t & 1);
                    if (g >= G) continue;
                    const bool mapped = ko[kk] >= 0, in = kk < nkc;
                    const float sc = k_round_bf16(s[n][t]);
                    if constexpr (PV) /* the weight itself, 0 for a key without one */
                        ps[g * ATTN_TILE + kc + kk] =
                            in && mapped ? softmax_p(sc, m_run[g], l_run[g]) : 0.0f;
                    else
                        ps[g * ATTN_TILE + kc + kk] = in && mapped ? sc : -INFINITY;
                    if (!PV && in && !mapped) bad[split_rel] = 1; /* an unmapped key */
                }
        }
        if (plane == 1) { /* (the K unit that wrote these weights ended in a barrier) */
            /* P.V over the unit's keys, 16 a step in key order, for the warp's DW dims. The
             * ldmatrix.trans rows: lane l reads key ((l / 8) % 2) * 8 + l % 8 of the step, dims
             * + 8 for lanes 16-31: the b0 b1 pairs of two n tiles. */
            const unsigned char *vb = tile + (((lane >> 3) & 1) * 8 + (lane & 7)) * BS +
                                      (warp * DW + (lane >> 4) * 8) * 2;
            /* FRAG8's e4m3 rows: the same keys, 16 dims (bytes) a matrix */
            const unsigned char *vb8 =
                st + (((lane >> 3) & 1) * 8 + (lane & 7)) * RS + warp * DW + (lane >> 4) * 16;
#pragma unroll
            for (int ks = 0; ks < CK / 16; ks++) {
                const float *p0 = ps + g0 * ATTN_TILE + kc + ks * 16 + 2 * qd;
                const float *p1 = p0 + 8 * ATTN_TILE;
                uint32_t af[4];
                af[0] = g0 < G ? pack_bf16_exact(p0[0], p0[1]) : 0u;
                af[2] = g0 < G ? pack_bf16_exact(p0[8], p0[9]) : 0u;
                af[1] = g0 + 8 < G ? pack_bf16_exact(p1[0], p1[1]) : 0u;
                af[3] = g0 + 8 < G ? pack_bf16_exact(p1[8], p1[9]) : 0u;
                if constexpr (FRAG8) {
                    /* 16 dims a 16-byte column: o[2 bb] their even dims, o[2 bb + 1] the odd */
#pragma unroll
                    for (int bb = 0; bb < DW / 16; bb += 2) {
                        uint32_t b[4];
                        ldsm_x4_trans(b, vb8 + ks * 16 * RS + bb * 16);
                        mma_bf16(o[2 * bb], af, frag8_even(b[0]), frag8_even(b[1]));
                        mma_bf16(o[2 * bb + 1], af, frag8_odd(b[0]), frag8_odd(b[1]));
                        mma_bf16(o[2 * bb + 2], af, frag8_even(b[2]), frag8_even(b[3]));
                        mma_bf16(o[2 * bb + 3], af, frag8_odd(b[2]), frag8_odd(b[3]));
                    }
                } else {
#pragma unroll
                    for (int n = 0; n < NTO; n += 2) {
                        uint32_t b[4];
                        ldsm_x4_trans(b, vb + ks * 16 * BS + n * 16);
                        mma_bf16(o[n], af, b[0], b[1]);
                        mma_bf16(o[n + 1], af, b[2], b[3]);
                    }
                }
            }
            if constexpr (PV && KEEP)
                if (tile_end) load_kept(ti + 1);
        }
        /* slot (u + 2) % MMA_SLOTS was last read before the previous unit's second barrier */
        if (tid < CK) koff[(u + 2) % MMA_SLOTS][tid] = off_next;
        __syncthreads(); /* the stage, the widened unit, ps and the looked-up slot */
        copy(u + 2);     /* into the stage just read */
        if constexpr (!PV) {
            if (tile_end) {
                if constexpr (KEEP) keep_scores<G>(keep_row, a.window, t0 - sp.j0, ps, nk, tid);
                /* the next unit's scores overwrite ps only after its first barrier */
                tile_stats<G>(ps, nk, m_run, l_run, warp, lane);
            }
            if (split_done) {
                __syncthreads(); /* every head's (max, sum) */
                if (tid < G) {   /* this split's, then fresh ones for the next */
                    ml[base + (size_t)tid * max_split + split] =
                        make_float2(m_run[tid], bad[split_rel] ? NAN : l_run[tid]);
                    m_run[tid] = -INFINITY;
                    l_run[tid] = 0.0f;
                }
            }
        } else if (split_done && FRAG8) { /* o[2 bb], o[2 bb + 1]: the even and odd dims */
#pragma unroll
            for (int bb = 0; bb < DW / 16; bb++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int g = g0 + h * 8, d = warp * DW + bb * 16 + 4 * qd;
                    if (g < G)
                        *reinterpret_cast<float4 *>(
                            part + (base + (size_t)g * max_split + split) * D + d) =
                            make_float4(o[2 * bb][2 * h], o[2 * bb + 1][2 * h],
                                        o[2 * bb][2 * h + 1], o[2 * bb + 1][2 * h + 1]);
#pragma unroll
                    for (int p = 0; p < 2; p++) {
                        o[2 * bb + p][2 * h] = 0.0f;
                        o[2 * bb + p][2 * h + 1] = 0.0f;
                    }
                }
        } else if (split_done) { /* this split's partial from the accumulators, then fresh ones */
#pragma unroll
            for (int n = 0; n < NTO; n++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int g = g0 + h * 8, d = warp * DW + n * 8 + 2 * qd;
                    if (g < G)
                        *reinterpret_cast<float2 *>(
                            part + (base + (size_t)g * max_split + split) * D + d) =
                            make_float2(o[n][2 * h], o[n][2 * h + 1]);
                    o[n][2 * h] = 0.0f;
                    o[n][2 * h + 1] = 0.0f;
                }
        }
    }
    if constexpr (PV && G * D <= ATTN_FOLD_HEAD_ELEMS)
        if (done)
            pv_fold<D, G>(a, r, rl, kvh, max_split, sp.n_split, (sp.n_split + spb - 1) / spb, part,
                          ml, done);
}

/* Rows of a query tile: RR rows share a block when they hold one sequence's keys on one tile
 * grid (tile_rows_share), the M side of every mma their G heads each, row after row. Per row,
 * tiles, units and splits are the ones the row's own block would take (the same keys at the
 * same positions), and rows are independent in an mma, so a row's results are the same bits
 * alone or in a tile: a unit past a row's last key has weight 0 (and score -inf) for it, which
 * leaves its sums and statistics as they were (up to an fp32 accumulator of exactly -0, which
 * a nonzero weight never leaves). The grid's rows are cut into tiles of RR consecutive ones. */
/* Whether the nrow rows from r0 may share a block: one sequence, every row's key tiles starting
 * at key 0 (the global layers, and windowed rows before the window fills: plan_split's j0), the
 * same split size, and no row the grid cannot hold. Every thread computes the same answer. */
static __device__ __forceinline__ bool tile_rows_share(const k_attention_args &a, int r0, int nrow,
                                                       int max_split) {
    if (nrow < 2) return false;
    const int seq = a.seq[r0];
    const int per_split = plan_split(a.pos[r0], a.window).per_split;
    for (int k = 0; k < nrow; k++) {
        const int i = a.pos[r0 + k];
        const split_plan p = plan_split(i, a.window);
        if (i < 0 || a.seq[r0 + k] != seq || p.j0 != 0 || p.per_split != per_split ||
            p.n_split > max_split)
            return false;
    }
    return true;
}

/* Whether the nrow rows r0, r0 + ATTN_TILE, r0 + 2 ATTN_TILE, ... may share a block as a strided
 * tile (serve.attn_strided_tiles): one sequence at positions ATTN_TILE apart, every row past the
 * window's first fill (j0 > 0: each sees exactly `window` keys, so every row has the same split
 * plan) and a split a tile (per_split = ATTN_TILE: windows up to ATTN_MAX_SPLIT tiles). Row k's
 * key tiles are then row 0's shifted by k whole tiles, so its tile t is row 0's tile t + k and
 * the rows can share K and V units with each row's own splits: the same keys at the same
 * positions of each unit and split as the row's own block takes. */
static __device__ __forceinline__ bool strided_rows_share(const k_attention_args &a, int r0,
                                                          int nrow, int max_split) {
    if (nrow < 2 || a.window <= 0) return false;
    const int seq = a.seq[r0], i0 = a.pos[r0];
    for (int k = 0; k < nrow; k++) {
        const int i = a.pos[r0 + k * ATTN_TILE];
        const split_plan p = plan_split(i, a.window);
        if (i != i0 + k * ATTN_TILE || a.seq[r0 + k * ATTN_TILE] != seq || p.j0 <= 0 ||
            p.per_split != ATTN_TILE || p.n_split > max_split)
            return false;
    }
    return true;
}

/* A query tile's pass: rows rl0 .. rl0 + nrow - 1 of the launch (nrow <= RR), which
 * tile_rows_share, or one row alone (nrow = 1). attn_mma_kernel's pass with M = nrow x G rows
 * (row k's heads at k x G ..), each row's keys masked at its own position and its (max, sum)
 * and partials stored only for its own splits. PV = false: the stats pass (ml per split; KEEP:
 * the scores kept too); PV = true: the P.V pass (part per split; FOLD, where one block holds
 * every split of its rows: the splits summed here and the output written, the combine's work). */
template <int D, int G, bool FP8, bool PV, bool KEEP, int RR, bool FOLD, bool STR = false,
          int MT = 1, int NW = ATTN_WARPS>
static __device__ __forceinline__ void mma_pass(const k_attention_args &a, int row0, int max_split,
                                                int spb, float *part, float2 *ml, float *keep,
                                                int rl0, int nrow, bool together) {
    static_assert(G * RR <= 16 * MT, "a tile's heads are the M rows of a warp's MT mmas");
    static_assert(!KEEP || D == 256, "kept scores: windowed layers of head dim 256");
    static_assert(MT == 1 || MT == 2, "one m16 tile a warp, or two (serve.attn_pair_tiles)");
    constexpr int NT = NW * 32; /* the block's threads */
    constexpr int M = RR * G;   /* M rows: G heads of each row */
    constexpr int CK = mma_unit_keys<D, MT, NW>();
    constexpr int CPT = ATTN_TILE / CK;            /* units of a tile */
    constexpr bool SCORES = !(PV && KEEP);         /* the pass computes scores from K */
    constexpr int UPC = SCORES && PV ? 2 : 1;      /* units a chunk: K, then V */
    constexpr int EB = FP8 ? 1 : 2;                /* bytes per stored element */
    constexpr int SEGS = D * EB / 16;              /* 16-byte copies per key row */
    constexpr int RS = mma_stage_stride<D, FP8>(); /* a staged row's stride */
    constexpr int BS = mma_bf_stride<D>();         /* a bf16 row's stride */
    constexpr int STAGE = CK * RS;
    constexpr int QS = mma_q_stride<D>();
    constexpr int KW = CK / NW; /* keys a warp scores in a unit: 16 or 8 */
    constexpr int NTS = KW / 8; /* their n tiles */
    constexpr int DW = D / NW;  /* dims a warp sums in P.V */
    constexpr int NTO = DW / 8; /* their n tiles */
    static_assert(KW % 8 == 0 && DW % 16 == 0, "whole n tiles a warp");
    constexpr int KP = (M * ATTN_TILE + NT - 1) / NT; /* kept scores/thread */
    /* STR (strided_rows_share): tile row k is launch row rl + k * ATTN_TILE, its keys and splits
     * one tile (a split) after row k - 1's; else row k is rl + k, every row's splits on one grid */
    constexpr int RSTEP = STR ? ATTN_TILE : 1; /* launch rows from one tile row to the next */
    constexpr int TSH = STR ? 1 : 0;           /* splits from one tile row's first to the next's */
    extern __shared__ __align__(16) unsigned char mma_smem[];
    unsigned char *stages = mma_smem;
    unsigned char *wide = stages + MMA_STAGES * STAGE; /* the e4m3 unit widened */
    bf16_t *qsb = (bf16_t *)(wide + (FP8 ? CK * BS : 0));
    float *ps = (float *)((unsigned char *)qsb + (SCORES ? M * QS * 2 : 0)); /* [M][ATTN_TILE] */
    __shared__ long long koff[MMA_SLOTS][CK]; /* element offsets; -1: unmapped or past */
    __shared__ float m_run[M], l_run[M];
    __shared__ int bad[RR][ATTN_MAX_SPB];
    __shared__ int row_end[RR], row_splits[RR]; /* a tile row's key end (i + 1) and splits */
    __shared__ int row_lo[STR ? RR : 1];        /* STR: a tile row's first key in the block */
    const int kvh = blockIdx.y, rl = rl0, r = row0 + rl;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int g0 = lane >> 2, qd = lane & 3; /* the lane's fragment row and column pair */
    const int mv = nrow * G;                 /* the M rows in use */
    /* every warp takes all MT m16 tiles (M rows 16 t + g0, 16 t + g0 + 8) of its keys and dims */
    int i = a.pos[r];
    const int seq = a.seq[r];
    split_plan sp = plan_split(i, a.window);
    const int s_first = blockIdx.x * spb;
    if constexpr (STR) { /* the tile's reach: its last row's keys; splits, row 0's plan */
        i = a.pos[r + (nrow - 1) * RSTEP];
    } else { /* the tile's reach: its longest row (the rows share j0 and split size) */
#pragma unroll
        for (int k = 1; k < RR; k++)
            if (k < nrow) {
                const int ik = a.pos[r + k];
                if (ik > i) i = ik;
            }
        sp = plan_split(i, a.window);
    }
    if (i < 0 || s_first >= sp.n_split || sp.n_split > max_split) { /* combine: NaN */
        /* folded (one block holds every split, s_first = 0): a row the combine would write NaN;
         * a shared tile never comes here (tile_rows_share) */
        if constexpr (PV && FOLD)
            for (int e = tid; e < nrow * G * D / 2; e += NT)
                reinterpret_cast<uint32_t *>(
                    a.out + ((size_t)(r + e / (G * D / 2) * RSTEP) * a.n_head + (size_t)kvh * G) *
                                D)[e % (G * D / 2)] = BF16_NAN | (BF16_NAN << 16);
        return;
    }
    const int s_last = min(s_first + spb, sp.n_split);
    const int k_begin = sp.j0 + s_first * sp.per_split;
    const int k_end = min(sp.j0 + (s_last + (nrow - 1) * TSH) * sp.per_split, i + 1);
    const int n_chunks = (k_end - k_begin + CK - 1) / CK;
    const int n_units = n_chunks * UPC;
    /* a tile row's first (max, sum) or partial (row k, head g at base_of(k) + g * max_split),
     * and its kept scores */
    auto base_of = [&](int k) -> size_t {
        return ((size_t)(rl + k * RSTEP) * a.n_head + (size_t)kvh * G) * max_split;
    };
    auto keep_of = [&](int k) -> float * {
        return KEEP ? keep + ((size_t)(rl + k * RSTEP) * a.n_head + (size_t)kvh * G) * a.window
                    : NULL;
    };
    /* M row m's keys in the tile at t0 (of nk): none in a tile before the row's first (STR) */
    auto nk_row = [&](int m, int t0, int nk) -> int {
        if constexpr (STR)
            if (t0 < row_lo[m / G]) return 0;
        return max(0, min(nk, row_end[m / G] - t0));
    };
    /* the split of tile row k that grid split s (row 0's numbering) is */
    auto split_of = [&](int k, int s) -> int { return s - k * TSH; };
    /* whether this block holds tile row k's split sk: STR rows' ranges are shifted, so a block's
     * tiles include splits of other blocks (or past the row's) that it must not store */
    auto holds = [&](int k, int sk) -> bool {
        if constexpr (STR)
            return sk >= (int)blockIdx.x * spb &&
                   sk < min((int)blockIdx.x * spb + spb, row_splits[k]);
        else
            return sk < row_splits[k];
    };

    /* unit u's store plane: K (0) or V (1) */
    auto plane_of = [&](int u) -> int { return UPC == 2 ? u % 2 : (SCORES ? 0 : 1); };
    /* the offset of key kk of unit u (-1: unmapped, or past the block's keys) */
    auto offset_of = [&](int u, int kk) -> long long {
        const int k0 = k_begin + (u / UPC) * CK;
        return kk >= 0 && kk < CK && u < n_units && k0 + kk < k_end
                   ? kv_view_offset(&a.kv, seq, k0 + kk, a.kv_layer, plane_of(u), kvh)
                   : -1;
    };
    auto look_up = [&](int u, int first) {
        const int kk = tid - first;
        if (kk >= 0 && kk < CK) koff[u % MMA_SLOTS][kk] = offset_of(u, kk);
    };
    /* unit u's copies into stage u % MMA_STAGES (zero rows for keys without one), then a group */
    auto copy = [&](int u) {
        if (u < n_units) {
            unsigned char *st = stages + (u % MMA_STAGES) * STAGE;
            const long long *ko = koff[u % MMA_SLOTS];
            for (int c = tid; c < CK * SEGS; c += NT) {
                const int kk = c / SEGS, seg = c % SEGS;
                const long long o = ko[kk];
                if (o >= 0)
                    cp_async16(st + kk * RS + seg * 16,
                               (const unsigned char *)a.kv.base + o * EB + seg * 16);
                else
                    *reinterpret_cast<uint4 *>(st + kk * RS + seg * 16) = make_uint4(0, 0, 0, 0);
            }
        }
        cp_async_commit();
    };
    float kp[KP]; /* the kept scores of the next tile (KEEP's P.V pass) */
    auto load_kept = [&](int ti) {
        const int t0 = k_begin + ti * ATTN_TILE, nk = min(ATTN_TILE, k_end - t0);
#pragma unroll
        for (int k = 0; k < KP; k++) {
            const int e = tid + k * NT, m = e / ATTN_TILE, kk = e % ATTN_TILE;
            kp[k] = ti * CPT < n_chunks && m < mv && kk < nk_row(m, t0, nk)
                        ? keep_of(m / G)[(size_t)(m % G) * a.window +
                                         (t0 - sp.j0 - (m / G) * TSH * ATTN_TILE) + kk]
                        : 0.0f;
        }
    };

    if (tid < nrow) { /* every row's key end and splits, for the per-row masks and stores */
        const int ik = a.pos[r + tid * RSTEP];
        row_end[tid] = ik + 1;
        row_splits[tid] = plan_split(ik, a.window).n_split;
        if constexpr (STR) { /* its first key here, and its end at its block's last split */
            row_lo[tid] = k_begin + tid * TSH * sp.per_split;
            row_end[tid] = min(ik + 1, row_lo[tid] + (s_last - s_first) * sp.per_split);
        }
    }
    __syncthreads();
    look_up(0, 0);
    look_up(1, CK);
    if constexpr (PV && KEEP) load_kept(0);
    if constexpr (SCORES) { /* the rows' queries, bf16 as stored, row after row */
        for (int e8 = tid; e8 < mv * D / 8; e8 += NT) {
            const int m = e8 / (D / 8), d = e8 % (D / 8) * 8;
            const bf16_t *q = a.q + ((size_t)(r + m / G * RSTEP) * a.n_head + (size_t)kvh * G) * D;
            *reinterpret_cast<uint4 *>(qsb + m * QS + d) =
                *reinterpret_cast<const uint4 *>(q + (size_t)(m % G) * D + d);
        }
    }
    for (int e = tid; e < RR * ATTN_MAX_SPB; e += NT) /* 256 flags at 16 rows */
        bad[e / ATTN_MAX_SPB][e % ATTN_MAX_SPB] = 0;
#pragma unroll
    for (int k = 0; k < RR; k++) {        /* each row's statistics: its own splits' merge (P.V) */
        if (k > 0 && PV) __syncthreads(); /* start_stats_block's staging is shared */
        if (k < nrow)
            start_stats_block<G, PV, NT>(ml + base_of(k), max_split, row_splits[k], m_run + k * G,
                                         l_run + k * G, tid);
    }
    float o[MT][NTO][4]; /* P.V: M rows 16 t + g0, 16 t + g0 + 8 of the warp's dims */
    /* folded: the splits' sums of o so far, 0 + split 0 + split 1 + ... in split order, the
     * combine's sum (sum_split_pairs) */
    float tot[MT][PV && FOLD ? NTO : 1][4];
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int n = 0; n < NTO; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                o[t][n][e] = 0.0f;
                if constexpr (PV && FOLD) tot[t][n][e] = 0.0f;
            }
    __syncthreads(); /* slots 0 and 1, the queries, m_run / l_run */
    copy(0);
    copy(1);

    for (int u = 0; u < n_units; u++) {
        const int c = u / UPC, plane = plane_of(u);
        const int ti = c / CPT, t0 = k_begin + ti * ATTN_TILE;
        const int nk = min(ATTN_TILE, k_end - t0);           /* the tile's keys */
        const int kc = (c % CPT) * CK;                       /* the unit's first key in the tile */
        const int nkc = min(CK, k_end - (k_begin + c * CK)); /* the unit's keys */
        const bool tile_end = c % CPT == CPT - 1 || c == n_chunks - 1;
        const bool unit_end = !PV || plane == 1; /* the chunk's last unit */
        const int split = (t0 - sp.j0) / sp.per_split;
        /* the split's place in the block's run, from blockIdx again: s_first held across the
         * loop cost a spill (ptxas) */
        const int split_rel = split - (int)blockIdx.x * spb;
        const bool split_done =
            tile_end && unit_end &&
            (t0 + ATTN_TILE >= k_end || (t0 + ATTN_TILE - sp.j0) % sp.per_split == 0);
        const unsigned char *st = stages + (u % MMA_STAGES) * STAGE;
        const long long *ko = koff[u % MMA_SLOTS];
        const long long off_next = offset_of(u + 2, tid); /* stored before the second barrier */
        cp_async_wait_one(); /* this thread's copies of unit u have landed */
        if constexpr (PV &&
                      KEEP) { /* p = k_round_bf16(exp(s - m) / l) as the reference rounds it */
#pragma unroll
            for (int k = 0; k < KP; k++) {
                const int e = tid + k * NT, m = e / ATTN_TILE, kk = e % ATTN_TILE;
                if (e < M * ATTN_TILE)
                    ps[e] = m < mv && kk < nk_row(m, t0, nk) ? softmax_p(kp[k], m_run[m], l_run[m])
                                                             : 0.0f;
            }
        }
        __syncthreads(); /* every thread's copies of unit u, and p */
        const unsigned char *tile = st;
        if constexpr (FP8) { /* widen the unit to bf16 rows */
            for (int e = tid; e < CK * D / 8; e += NT) {
                const int kk = e / (D / 8), d = e % (D / 8) * 8;
                *reinterpret_cast<uint4 *>(wide + kk * BS + d * 2) =
                    widen_e4m3x8(*reinterpret_cast<const uint2 *>(st + kk * RS + d));
            }
            __syncthreads();
            tile = wide;
        }
        if (plane == 0) { /* scores of the warp's KW keys: D / 16 mmas each, in k order */
            float s[MT][NTS][4];
#pragma unroll
            for (int t = 0; t < MT; t++)
#pragma unroll
                for (int n = 0; n < NTS; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        s[t][n][e] = 0.0f;
            /* ldmatrix rows: lane l reads key (l / 16) * 8 + l % 8 of the warp's, dims + 8 for
             * lanes 8-15 and 24-31: matrices (keys 0-7, dims 0-7), (0-7, 8-15), (8-15, 0-7),
             * (8-15, 8-15), the b0 b1 pairs of the warp's two n tiles */
            const unsigned char *kb =
                tile + (warp * KW + (NTS == 2 ? (lane >> 4) * 8 : 0) + (lane & 7)) * BS +
                ((lane >> 3) & 1) * 16;
#pragma unroll 4
            for (int ks = 0; ks < D / 16; ks++) {
                uint32_t af[MT][4];
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    const int m0 = 16 * t + g0, m1 = m0 + 8;
                    const bf16_t *q0 = qsb + m0 * QS + ks * 16 + 2 * qd;
                    const bf16_t *q1 = qsb + m1 * QS + ks * 16 + 2 * qd;
                    af[t][0] = m0 < mv ? *reinterpret_cast<const uint32_t *>(q0) : 0u;
                    af[t][2] = m0 < mv ? *reinterpret_cast<const uint32_t *>(q0 + 8) : 0u;
                    af[t][1] = m1 < mv ? *reinterpret_cast<const uint32_t *>(q1) : 0u;
                    af[t][3] = m1 < mv ? *reinterpret_cast<const uint32_t *>(q1 + 8) : 0u;
                }
                if constexpr (NTS == 2) {
                    uint32_t b[4];
                    ldsm_x4(b, kb + ks * 32);
#pragma unroll
                    for (int t = 0; t < MT; t++) {
                        mma_bf16(s[t][0], af[t], b[0], b[1]);
                        mma_bf16(s[t][1], af[t], b[2], b[3]);
                    }
                } else {
                    uint32_t b[2];
                    ldsm_x2(b, kb + ks * 32);
#pragma unroll
                    for (int t = 0; t < MT; t++)
                        mma_bf16(s[t][0], af[t], b[0], b[1]);
                }
            }
            /* s[t][n][e]: M row 16 t + g0 (e < 2) or + 8, key warp * KW + n * 8 + 2 qd + e % 2 */
#pragma unroll
            for (int t = 0; t < MT; t++)
#pragma unroll
                for (int n = 0; n < NTS; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int m = 16 * t + g0 + (e >> 1) * 8,
                                  kk = warp * KW + n * 8 + 2 * qd + (e & 1);
                        if (m >= mv) continue;
                        /* the key is the row's (a tile row's keys end at its own position; STR:
                         * they start at its own first) */
                        const int key = k_begin + c * CK + kk;
                        const bool own = key < row_end[m / G] && (!STR || key >= row_lo[m / G]);
                        const bool mapped = ko[kk] >= 0, in = kk < nkc && own;
                        const float sc = k_round_bf16(s[t][n][e]);
                        if constexpr (PV) /* the weight itself, 0 for a key without one */
                            ps[m * ATTN_TILE + kc + kk] =
                                in && mapped ? softmax_p(sc, m_run[m], l_run[m]) : 0.0f;
                        else
                            ps[m * ATTN_TILE + kc + kk] = in && mapped ? sc : -INFINITY;
                        if (!PV && in && !mapped) /* an unmapped key */
                            bad[m / G][split_rel - (m / G) * TSH] = 1;
                    }
        }
        if (plane == 1) { /* (the K unit that wrote these weights ended in a barrier) */
            /* P.V over the unit's keys, 16 a step in key order, for the warp's DW dims. The
             * ldmatrix.trans rows: lane l reads key ((l / 8) % 2) * 8 + l % 8 of the step, dims
             * + 8 for lanes 16-31: the b0 b1 pairs of two n tiles. */
            const unsigned char *vb = tile + (((lane >> 3) & 1) * 8 + (lane & 7)) * BS +
                                      (warp * DW + (lane >> 4) * 8) * 2;
#pragma unroll
            for (int ks = 0; ks < CK / 16; ks++) {
                uint32_t af[MT][4];
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    const int m0 = 16 * t + g0, m1 = m0 + 8;
                    const float *p0 = ps + m0 * ATTN_TILE + kc + ks * 16 + 2 * qd;
                    const float *p1 = p0 + 8 * ATTN_TILE;
                    af[t][0] = m0 < mv ? pack_bf16_exact(p0[0], p0[1]) : 0u;
                    af[t][2] = m0 < mv ? pack_bf16_exact(p0[8], p0[9]) : 0u;
                    af[t][1] = m1 < mv ? pack_bf16_exact(p1[0], p1[1]) : 0u;
                    af[t][3] = m1 < mv ? pack_bf16_exact(p1[8], p1[9]) : 0u;
                }
#pragma unroll
                for (int n = 0; n < NTO; n += 2) {
                    uint32_t b[4];
                    ldsm_x4_trans(b, vb + ks * 16 * BS + n * 16);
#pragma unroll
                    for (int t = 0; t < MT; t++) {
                        mma_bf16(o[t][n], af[t], b[0], b[1]);
                        mma_bf16(o[t][n + 1], af[t], b[2], b[3]);
                    }
                }
            }
            if constexpr (PV && KEEP)
                if (tile_end) load_kept(ti + 1);
        }
        /* slot (u + 2) % MMA_SLOTS was last read before the previous unit's second barrier */
        if (tid < CK) koff[(u + 2) % MMA_SLOTS][tid] = off_next;
        __syncthreads(); /* the stage, the widened unit, ps and the looked-up slot */
        copy(u + 2);     /* into the stage just read */
        if constexpr (!PV) {
            if (tile_end) {
                if constexpr (KEEP)
                    for (int k = 0; k < nrow; k++)
                        keep_scores<G, NT>(keep_of(k), a.window, t0 - sp.j0 - k * TSH * ATTN_TILE,
                                           ps + k * G * ATTN_TILE, nk_row(k * G, t0, nk), tid);
                /* the next unit's scores overwrite ps only after its first barrier */
                const auto nk_of = [&](int m) { return nk_row(m, t0, nk); };
                if (together) /* serve.attn_stats_together: the same bits */
                    tile_stats_rows_together<M, NW>(ps, mv, nk_of, m_run, l_run, warp, lane);
                else
                    tile_stats_rows<M, NW>(ps, mv, nk_of, m_run, l_run, warp, lane);
            }
            if (split_done) {
                __syncthreads(); /* every head's (max, sum) */
                if (tid < mv) {  /* this split's, then fresh ones for the next */
                    const int k = tid / G, g = tid % G, sk = split_of(k, split);
                    if (holds(k, sk))
                        ml[base_of(k) + (size_t)g * max_split + sk] =
                            make_float2(m_run[tid], bad[k][split_rel - k * TSH] ? NAN : l_run[tid]);
                    m_run[tid] = -INFINITY;
                    l_run[tid] = 0.0f;
                }
            }
        } else if (split_done) { /* this split's partial from the accumulators, then fresh ones */
#pragma unroll
            for (int t = 0; t < MT; t++)
#pragma unroll
                for (int n = 0; n < NTO; n++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int m = 16 * t + g0 + h * 8, d = warp * DW + n * 8 + 2 * qd;
                        const int sk = split_of(m / G, split);
                        if (m < mv && holds(m / G, sk)) {
                            if constexpr (FOLD) {
                                tot[t][n][2 * h] += o[t][n][2 * h];
                                tot[t][n][2 * h + 1] += o[t][n][2 * h + 1];
                            } else {
                                *reinterpret_cast<float2 *>(
                                    part + (base_of(m / G) + (size_t)(m % G) * max_split + sk) * D +
                                    d) = make_float2(o[t][n][2 * h], o[t][n][2 * h + 1]);
                            }
                        }
                        o[t][n][2 * h] = 0.0f;
                        o[t][n][2 * h + 1] = 0.0f;
                    }
        }
    }
    if constexpr (PV && FOLD) { /* the combine's work: a head NaN where any of its splits'
                                 * sums is (an unmapped key), else each sum rounded to bf16 */
        __shared__ int head_nan[M];
        if (tid < mv) {
            const int k = tid / G, g = tid % G;
            int nan = 0;
            for (int s = 0; s < row_splits[k]; s++)
                nan |= isnan(ml[base_of(k) + (size_t)g * max_split + s].y);
            head_nan[tid] = nan;
        }
        __syncthreads();
#pragma unroll
        for (int t = 0; t < MT; t++)
#pragma unroll
            for (int n = 0; n < NTO; n++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int m = 16 * t + g0 + h * 8, d = warp * DW + n * 8 + 2 * qd;
                    if (m >= mv) continue;
                    bf16_t *out =
                        a.out +
                        ((size_t)(r + m / G * RSTEP) * a.n_head + (size_t)kvh * G + m % G) * D + d;
                    const bool nan = head_nan[m];
                    out[0] = nan ? (bf16_t)BF16_NAN : k_f32_to_bf16(tot[t][n][2 * h]);
                    out[1] = nan ? (bf16_t)BF16_NAN : k_f32_to_bf16(tot[t][n][2 * h + 1]);
                }
    }
}

/* A block per query tile of R consecutive rows of the launch (R > 1), which share it where
 * tile_rows_share says they may and otherwise take it in turn, each as a tile of one row (the
 * same units, mmas and order as attn_mma_kernel's block of its own); the launch's row count is a
 * multiple of R except the step's last.
 * STRIDED (serve.attn_strided_tiles): the launch's rows in whole groups of ATTN_TILE x R (the z
 * tiles 64 s .. 64 s + 63) whose first row is past its window's first fill go as strided tiles
 * instead: tile 64 s + l takes rows 64 R s + l + 64 k, k < R, which strided_rows_share or take
 * it in turn. Both ways the group's tiles cover its rows once each; every block of a group
 * decides from the group's first row alone, so they agree. Windowed rows past the fill, every
 * row of a long prompt's later chunks, took their blocks row after row before.
 * MT = 2 (serve.attn_pair_tiles): R is two tiles' rows, and every warp takes both m16 tiles of
 * its keys and dims (mma_pass; docs/attention-design.md, "Two tiles a block"). */
template <int D, int G, bool FP8, bool PV, bool KEEP, int R, bool FOLD = false,
          bool STRIDED = false, int MT = 1, int NW = ATTN_WARPS>
static __global__ void __launch_bounds__(NW * 32, 1)
    attn_mma_tile_kernel(k_attention_args a, int row0, int max_split, int spb, float *part,
                         float2 *ml, float *keep, int longest_first, int together) {
    K_GRID_DEPENDENCY();
    static_assert(R > 1, "one-row blocks are attn_mma_kernel's");
    /* longest_first: the card starts blocks in blockIdx order, z last, and a prompt's later
     * rows see more keys, so in order the longest blocks start last and make the tail; reversed,
     * they start first and the short ones fill in around them. Which block computes a tile never
     * shows in its outputs. */
    const int tile = longest_first ? (int)(gridDim.z - 1 - blockIdx.z) : (int)blockIdx.z;
    if constexpr (STRIDED) {
        constexpr int GROUP = ATTN_TILE * R; /* a group's rows */
        /* the launch's rows: a row chunk's (k_attention), whole tiles but for the step's last */
        const int rows = min(a.rows - row0, (int)gridDim.z * R);
        const int g0 = tile / ATTN_TILE * GROUP;
        /* strided where the group is whole and its first and last rows are past the fill (a group
         * across the fill keeps consecutive tiles: its rows before the fill share those) */
        const bool whole = a.window > 0 && g0 + GROUP <= rows;
        const int first = whole ? a.pos[row0 + g0] : -1;
        const int last = whole ? a.pos[row0 + g0 + GROUP - 1] : -1;
        if (first >= 0 && last >= 0 && plan_split(first, a.window).j0 > 0 &&
            plan_split(last, a.window).j0 > 0) {
            const int rl0 = g0 + tile % ATTN_TILE;
            if (strided_rows_share(a, row0 + rl0, R, max_split)) {
                mma_pass<D, G, FP8, PV, KEEP, R, FOLD, true, MT, NW>(a, row0, max_split, spb, part,
                                                                     ml, keep, rl0, R, together);
            } else {
                for (int k = 0; k < R; k++) {
                    if (k > 0) __syncthreads(); /* shared memory reused row after row */
                    mma_pass<D, G, FP8, PV, KEEP, R, FOLD, false, MT, NW>(
                        a, row0, max_split, spb, part, ml, keep, rl0 + k * ATTN_TILE, 1, together);
                }
            }
            return;
        }
    }
    const int rl0 = tile * R, nrow = min(R, a.rows - row0 - rl0);
    if (tile_rows_share(a, row0 + rl0, nrow, max_split)) {
        mma_pass<D, G, FP8, PV, KEEP, R, FOLD, false, MT, NW>(a, row0, max_split, spb, part, ml,
                                                              keep, rl0, nrow, together);
        return;
    }
    /* rows that may not share: each one-tile part of the block's rows where its rows do (a pair
     * block across two sequences), else row after row */
    constexpr int RT = R / MT; /* a tile's rows */
    bool first = true;
    for (int t = 0; t < MT; t++) {
        const int tl0 = rl0 + t * RT, tn = min(RT, nrow - t * RT);
        if (tn <= 0) break; /* block-uniform */
        const bool share = MT > 1 && tile_rows_share(a, row0 + tl0, tn, max_split);
        for (int k = 0; k < (share ? 1 : tn); k++) {
            if (!first) __syncthreads(); /* shared memory reused */
            first = false;
            mma_pass<D, G, FP8, PV, KEEP, R, FOLD, false, MT, NW>(a, row0, max_split, spb, part, ml,
                                                                  keep, share ? tl0 : tl0 + k,
                                                                  share ? tn : 1, together);
        }
    }
}

/* ---- the query tiles at the matrix rate (serve.attn_flash) ---- */

#include "kernels/attn_flash.cuh"

/* A block per FLASH_TILES query tiles of R rows: the flash pass where the block's rows allow
 * it, else each tile's folded passes in turn (attn_mma_tile_kernel's stats pass, then its
 * folded P.V pass reading the statistics and kept scores the block has just written). The
 * grid: one block along x (every split of its rows), the KV heads along y, the blocks along z. */
template <int G, bool FP8, bool KEEP>
static __global__ void __launch_bounds__(ATTN_THREADS, 2)
    attn_flash_kernel(k_attention_args a, int row0, int nr, int max_split, float *part, float2 *ml,
                      float *keep, int longest_first, int together) {
    K_GRID_DEPENDENCY();
    constexpr int R = attn_tile_rows<G>();
    static_assert(R > 1, "tiles of one row are attn_mma_kernel's");
    const int blk = longest_first ? (int)(gridDim.z - 1 - blockIdx.z) : (int)blockIdx.z;
    /* nr, the launch's rows: a launch of 16 or more rows but not the step's last is whole
     * 16-row chunks, which a block of 2 tiles of 16 rows (the group of 1) may overhang */
    const int rl0 = blk * FLASH_TILES * R, nrow = min(FLASH_TILES * R, nr - rl0);
    if (flash_block_shares(a, row0 + rl0, nrow, max_split)) {
        flash_pass<G, FP8>(a, row0, rl0, nrow);
        return;
    }
    for (int t = 0; t < FLASH_TILES; t++) {
        const int tl0 = rl0 + t * R, tn = min(R, nr - tl0);
        if (tn <= 0) break; /* block-uniform */
        const bool share = tile_rows_share(a, row0 + tl0, tn, max_split);
        for (int k = 0; k < (share ? 1 : tn); k++) {
            const int rl = share ? tl0 : tl0 + k, n = share ? tn : 1;
            if (t > 0 || k > 0) __syncthreads(); /* shared memory reused */
            mma_pass<256, G, FP8, false, KEEP, R, false>(a, row0, max_split, max_split, part, ml,
                                                         keep, rl, n, together);
            __syncthreads(); /* the statistics and kept scores it wrote, for this block's reads */
            mma_pass<256, G, FP8, true, KEEP, R, true>(a, row0, max_split, max_split, part, ml,
                                                       keep, rl, n, together);
        }
    }
}

/* the switches and counters (kernels.h), one of each for every part: kernels/attn_mma.cu */
extern int attn_fp8_frags_on, attn_early_lookup_on, attn_longest_first_on, attn_stats_together_on;
extern int attn_flash_on, attn_strided_tiles_on, attn_pair_tiles_on;
extern long long attn_flash_launches, attn_strided_launches, attn_pair_launches;

template <int D, int G, bool FP8, bool PV, bool KEEP, bool FR> static int mma_smem_allow(void) {
    static bool set = false;
    if (!set) {
        CUDA_CHECK(cudaFuncSetAttribute(attn_mma_kernel<D, G, FP8, PV, KEEP, FR>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)mma_smem_bytes<D, G, FP8, PV, KEEP, 1, FR>()));
        set = true;
    }
    return K_OK;
}

/* Blocks of one instantiation's passes the card holds at once (the fewer of its two kernels'),
 * asked once, at start-up through mma_allow_both, so that no query runs inside a graph capture. */
template <int D, int G, bool FP8, bool KEEP, bool FR> static int &mma_slots_cached(void) {
    static int slots = 0;
    return slots;
}

template <int D, int G, bool FP8, bool PV, bool KEEP, bool FR> static int mma_blocks_per_sm(void) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &n, attn_mma_kernel<D, G, FP8, PV, KEEP, FR>, ATTN_THREADS,
            mma_smem_bytes<D, G, FP8, PV, KEEP, 1, FR>()) != cudaSuccess ||
        n <= 0) {
        (void)cudaGetLastError(); /* the query's failure is not a launch's: assume one */
        n = 1;
    }
    return n;
}

template <int D, int G, bool FP8, bool KEEP, bool FR> static int mma_allow_both_of(void) {
    int rc = mma_smem_allow<D, G, FP8, false, KEEP, FR>();
    if (rc == K_OK) rc = mma_smem_allow<D, G, FP8, true, KEEP, FR>();
    int &slots = mma_slots_cached<D, G, FP8, KEEP, FR>();
    if (rc == K_OK && slots == 0) {
        int dev = 0, sms = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            sms <= 0) {
            (void)cudaGetLastError();
            sms = 132;
        }
        const int a = mma_blocks_per_sm<D, G, FP8, false, KEEP, FR>();
        const int b = mma_blocks_per_sm<D, G, FP8, true, KEEP, FR>();
        slots = (a < b ? a : b) * sms;
    }
    return rc;
}

/* Both forms of the e4m3 kernels (widened units, FRAG8) are set up: the switch may change after
 * start-up (test_attn turns it). */
template <int D, int G, bool FP8, bool KEEP> static int mma_allow_both(void) {
    int rc = mma_allow_both_of<D, G, FP8, KEEP, false>();
    if constexpr (FP8)
        if (rc == K_OK) rc = mma_allow_both_of<D, G, FP8, KEEP, true>();
    return rc;
}

template <int D, int G, bool FP8, bool KEEP> int attn_mma_slots(void) {
    int slots = mma_slots_cached<D, G, FP8, KEEP, false>();
    if constexpr (FP8)
        if (attn_fp8_frags_on) slots = mma_slots_cached<D, G, FP8, KEEP, true>();
    return slots > 0 ? slots : 132; /* before start-up's query: a block an SM */
}

template <int D, int G, bool FP8, bool KEEP, bool FR>
static int mma_launch_both(const k_attention_args *a, dim3 grid, int max_split, int spb,
                           float *part, float2 *ml, float *keep, unsigned *done, int row0,
                           cudaStream_t s) {
    CUDA_CHECK(k_launch(attn_mma_kernel<D, G, FP8, false, KEEP, FR>, grid, ATTN_THREADS,
                        mma_smem_bytes<D, G, FP8, false, KEEP, 1, FR>(), s, *a, row0, max_split,
                        spb, part, ml, keep, (unsigned *)NULL, attn_early_lookup_on));
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(k_launch(attn_mma_kernel<D, G, FP8, true, KEEP, FR>, grid, ATTN_THREADS,
                        mma_smem_bytes<D, G, FP8, true, KEEP, 1, FR>(), s, *a, row0, max_split, spb,
                        part, ml, keep, done, attn_early_lookup_on));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

template <int D, int G, bool FP8, bool KEEP>
int attn_mma_passes(const k_attention_args *a, dim3 grid, int max_split, int spb, float *part,
                    float2 *ml, float *keep, unsigned *done, int row0, cudaStream_t s) {
    int rc = mma_allow_both<D, G, FP8, KEEP>();
    if (rc != K_OK) return rc;
    if constexpr (FP8)
        if (attn_fp8_frags_on)
            return mma_launch_both<D, G, FP8, KEEP, true>(a, grid, max_split, spb, part, ml, keep,
                                                          done, row0, s);
    return mma_launch_both<D, G, FP8, KEEP, false>(a, grid, max_split, spb, part, ml, keep, done,
                                                   row0, s);
}

/* The tile kernels' forms (serve.attn_pair_tiles): 0 one tile a block; 2 two tiles a block,
 * 32-key units; four warps both. (Form 1, two tiles on eight warps, measured slower at both head
 * dims and was taken out: docs/attention-design.md, "Two tiles a block".) */
template <int F> struct tile_form {
    static constexpr int MT = F ? 2 : 1;  /* m16 tiles a warp */
    static constexpr int NW = ATTN_WARPS; /* warps a block */
};
/* Whether form F has a folded P.V pass: form 2's has no room for the fold's sums (2 x 64
 * accumulators a thread at head dim 512); its folded grids keep form 0. */
template <int F> static constexpr bool form_folds() { return F == 0; }
/* Groups whose tiles may pair: two tiles' rows (32 / G) must divide the launches' row chunks
 * (multiples of 16 rows but for the step's last) */
template <int G> static constexpr bool pair_group() { return G >= 2 && G < 16; }
/* The head dim that pairs, on its consecutive kernels: form 2 at head dim 256 spills (the kept
 * scores' P.V pass holds 16 of them a thread beside its 2 x 32 accumulators), so there the
 * tiles stay one a block, strided or not */
template <int D> static constexpr bool pair_dim() { return D == 512; }

/* serve.attn_strided_tiles (kernels.h): the windowed head dim's tile kernels take the launch's
 * rows in strided groups where they may (attn_mma_tile_kernel); the other head dim has no
 * windowed layer in any Gemma 4 model, and keeps the consecutive tiles only. */
template <int D> static constexpr bool strided_dim() { return D == 256; }

template <int D, int G, bool FP8, bool PV, bool KEEP, bool FOLD, bool STRIDED, int F>
static int mma_tile_smem_allow(void) {
    using TF = tile_form<F>;
    constexpr int R = attn_tile_rows<G>() * TF::MT;
    static bool set = false;
    if (!set) {
        CUDA_CHECK(cudaFuncSetAttribute(
            attn_mma_tile_kernel<D, G, FP8, PV, KEEP, R, FOLD, STRIDED, TF::MT, TF::NW>,
            cudaFuncAttributeMaxDynamicSharedMemorySize,
            (int)mma_smem_bytes<D, G, FP8, PV, KEEP, R, false, TF::MT, TF::NW>()));
        set = true;
    }
    return K_OK;
}

template <int D, int G, bool FP8, bool KEEP, bool STRIDED, int F>
static int mma_tile_allow_three(void) {
    int rc = mma_tile_smem_allow<D, G, FP8, false, KEEP, false, STRIDED, F>();
    if (rc == K_OK) rc = mma_tile_smem_allow<D, G, FP8, true, KEEP, false, STRIDED, F>();
    /* the folded P.V pass (serve.attn_tile_fold) too: set at start-up, never first inside a
     * graph's capture */
    if constexpr (form_folds<F>())
        if (rc == K_OK) rc = mma_tile_smem_allow<D, G, FP8, true, KEEP, true, STRIDED, F>();
    return rc;
}

template <int D, int G, bool FP8, bool KEEP> static int mma_tile_allow_both(void) {
    int rc = mma_tile_allow_three<D, G, FP8, KEEP, false, 0>();
    if constexpr (strided_dim<D>())
        if (rc == K_OK) rc = mma_tile_allow_three<D, G, FP8, KEEP, true, 0>();
    if constexpr (pair_group<G>() && pair_dim<D>()) /* serve.attn_pair_tiles may turn on later */
        if (rc == K_OK) rc = mma_tile_allow_three<D, G, FP8, KEEP, false, 2>();
    return rc;
}

/* The stats pass and the P.V pass (folded where the grid is one block wide) on the tile
 * kernels, consecutive or (STRIDED) strided where they may, in form F. grid: one block a tile
 * along z; the pair forms take two tiles a block. */
template <int D, int G, bool FP8, bool KEEP, bool STRIDED, int F>
static int mma_tile_launch(const k_attention_args *a, dim3 grid, int max_split, int spb,
                           float *part, float2 *ml, float *keep, int row0, bool fold,
                           cudaStream_t s) {
    using TF = tile_form<F>;
    constexpr int R = attn_tile_rows<G>() * TF::MT, T = TF::NW * 32;
    if constexpr (TF::MT == 2) grid.z = (grid.z + 1) / 2;
    CUDA_CHECK(k_launch(
        attn_mma_tile_kernel<D, G, FP8, false, KEEP, R, false, STRIDED, TF::MT, TF::NW>, grid, T,
        mma_smem_bytes<D, G, FP8, false, KEEP, R, false, TF::MT, TF::NW>(), s, *a, row0, max_split,
        spb, part, ml, keep, attn_longest_first_on, attn_stats_together_on));
    CUDA_CHECK(cudaGetLastError());
    bool folded = false;
    if constexpr (form_folds<F>()) /* its own kernel: the default P.V pass unchanged */
        if (fold && grid.x == 1) {
            CUDA_CHECK(k_launch(
                attn_mma_tile_kernel<D, G, FP8, true, KEEP, R, true, STRIDED, TF::MT, TF::NW>, grid,
                T, mma_smem_bytes<D, G, FP8, true, KEEP, R, false, TF::MT, TF::NW>(), s, *a, row0,
                max_split, spb, part, ml, keep, attn_longest_first_on, attn_stats_together_on));
            folded = true;
        }
    if (!folded)
        CUDA_CHECK(k_launch(
            attn_mma_tile_kernel<D, G, FP8, true, KEEP, R, false, STRIDED, TF::MT, TF::NW>, grid, T,
            mma_smem_bytes<D, G, FP8, true, KEEP, R, false, TF::MT, TF::NW>(), s, *a, row0,
            max_split, spb, part, ml, keep, attn_longest_first_on, attn_stats_together_on));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* The flash kernel's dynamic shared memory: its own layout, or the folded passes' it runs for
 * blocks whose rows do not share, whichever is larger. */
template <int G, bool FP8, bool KEEP> static constexpr size_t flash_smem_bytes(void) {
    constexpr int R = attn_tile_rows<G>();
    constexpr size_t f = flash_layout<FP8>::BYTES,
                     st = mma_smem_bytes<256, G, FP8, false, KEEP, R>(),
                     pv = mma_smem_bytes<256, G, FP8, true, KEEP, R>();
    return f > st ? (f > pv ? f : pv) : (st > pv ? st : pv);
}

template <int G, bool FP8, bool KEEP> static int flash_smem_allow(void) {
    static bool set = false;
    if (!set) {
        CUDA_CHECK(cudaFuncSetAttribute(attn_flash_kernel<G, FP8, KEEP>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)flash_smem_bytes<G, FP8, KEEP>()));
        set = true;
    }
    return K_OK;
}

/* The folded query-tile passes as one launch (serve.attn_flash): FLASH_TILES of the grid's
 * tiles a block. */
template <int G, bool FP8, bool KEEP>
static int flash_launch(const k_attention_args *a, dim3 grid, int max_split, float *part,
                        float2 *ml, float *keep, int row0, cudaStream_t s) {
    const int rc = flash_smem_allow<G, FP8, KEEP>();
    if (rc != K_OK) return rc;
    const dim3 fgrid(1, grid.y, (grid.z + FLASH_TILES - 1) / FLASH_TILES);
    /* the launch's rows: grid.z tiles of R, the step's last launch ending at its last row */
    const int rows_left = a->rows - row0, tile_rows = (int)grid.z * attn_tile_rows<G>();
    const int nr = rows_left < tile_rows ? rows_left : tile_rows;
    CUDA_CHECK(k_launch(attn_flash_kernel<G, FP8, KEEP>, fgrid, ATTN_THREADS,
                        flash_smem_bytes<G, FP8, KEEP>(), s, *a, row0, nr, max_split, part, ml,
                        keep, attn_longest_first_on, attn_stats_together_on));
    CUDA_CHECK(cudaGetLastError());
    attn_flash_launches++;
    return K_OK;
}

/* Query tiles: the grid's z counts tiles of attn_tile_rows<G>() rows (the launcher's rows, a
 * multiple of it but for the step's last launch). fold (serve.attn_tile_fold, a grid of one block
 * along x: every split of a tile's rows in its block): the P.V pass sums the splits and writes
 * the output itself, and the caller launches no combine. A group of 16 has tiles of one row:
 * attn_mma_passes (never folded here). */
template <int D, int G, bool FP8, bool KEEP>
int attn_mma_tile_passes(const k_attention_args *a, dim3 grid, int max_split, int spb, float *part,
                         float2 *ml, float *keep, int row0, bool fold, cudaStream_t s) {
    constexpr int R = attn_tile_rows<G>();
    if constexpr (R == 1) {
        (void)fold;
        return attn_mma_passes<D, G, FP8, KEEP>(a, grid, max_split, spb, part, ml, keep, NULL, row0,
                                                s);
    } else {
        (void)R;
        int rc = mma_tile_allow_both<D, G, FP8, KEEP>();
        if (rc != K_OK) return rc;
        if constexpr (D == 256) /* serve.attn_flash: the folded passes in one launch */
            if (attn_flash_on && fold && grid.x == 1)
                return flash_launch<G, FP8, KEEP>(a, grid, max_split, part, ml, keep, row0, s);
        if constexpr (strided_dim<D>())
            if (attn_strided_tiles_on && a->window > 0) {
                rc = mma_tile_launch<D, G, FP8, KEEP, true, 0>(a, grid, max_split, spb, part, ml,
                                                               keep, row0, fold, s);
                if (rc == K_OK) attn_strided_launches++;
                return rc;
            }
        /* serve.attn_pair_tiles: form 2 where it is built; folded grids keep form 0 */
        if constexpr (pair_group<G>() && pair_dim<D>())
            if (attn_pair_tiles_on == 2 && !(fold && grid.x == 1)) {
                attn_pair_launches++;
                return mma_tile_launch<D, G, FP8, KEEP, false, 2>(a, grid, max_split, spb, part, ml,
                                                                  keep, row0, fold, s);
            }
        return mma_tile_launch<D, G, FP8, KEEP, false, 0>(a, grid, max_split, spb, part, ml, keep,
                                                          row0, fold, s);
    }
}

#define ATTN_MMA_PASSES(D, G, FP8, KEEP)                                                           \
    template int attn_mma_passes<D, G, FP8, KEEP>(const k_attention_args *, dim3, int, int,        \
                                                  float *, float2 *, float *, unsigned *, int,     \
                                                  cudaStream_t);                                   \
    template int attn_mma_slots<D, G, FP8, KEEP>(void);                                            \
    template int attn_mma_tile_passes<D, G, FP8, KEEP>(const k_attention_args *, dim3, int, int,   \
                                                       float *, float2 *, float *, int, bool,      \
                                                       cudaStream_t);

/* Every instantiation's shared-memory limit raised at start-up (k_attention_setup), so that no
 * first launch happens inside a CUDA graph capture with the attribute unset. */
template <int D, int G, bool FP8, bool KEEP> static int mma_allow_group(void) {
    int rc = mma_allow_both<D, G, FP8, KEEP>();
    if constexpr (attn_tile_rows<G>() > 1)
        if (rc == K_OK) rc = mma_tile_allow_both<D, G, FP8, KEEP>();
    if constexpr (D == 256 && attn_tile_rows<G>() > 1) /* serve.attn_flash may turn on later */
        if (rc == K_OK) rc = flash_smem_allow<G, FP8, KEEP>();
    return rc;
}

template <int D, bool FP8, bool KEEP> static int mma_allow_groups(void) {
    int rc = mma_allow_group<D, 1, FP8, KEEP>();
    if (rc == K_OK) rc = mma_allow_group<D, 2, FP8, KEEP>();
    if (rc == K_OK) rc = mma_allow_group<D, 4, FP8, KEEP>();
    if (rc == K_OK) rc = mma_allow_group<D, 8, FP8, KEEP>();
    if (rc == K_OK) rc = mma_allow_group<D, 16, FP8, KEEP>();
    return rc;
}

/* One part: the set's launchers for every group (1, 2, 4, 8, 16), its start-up
 * (attn_mma_setup_<part>, called by attn_mma_setup) and its binder for the kernel trace build
 * (each part's kernels stamp through their own unit's pointer, common.cuh). */
#define ATTN_MMA_PART(part, D, FP8, KEEP)                                                          \
    ATTN_MMA_PASSES(D, 1, FP8, KEEP)                                                               \
    ATTN_MMA_PASSES(D, 2, FP8, KEEP)                                                               \
    ATTN_MMA_PASSES(D, 4, FP8, KEEP)                                                               \
    ATTN_MMA_PASSES(D, 8, FP8, KEEP)                                                               \
    ATTN_MMA_PASSES(D, 16, FP8, KEEP)                                                              \
    int attn_mma_setup_##part(void) { return mma_allow_groups<D, FP8, KEEP>(); }                   \
    K_TRACE_UNIT(attn_mma_##part)

#endif
