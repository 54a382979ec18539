/* kernels/attn_flash.cuh - the flash pass of the query-tile attention (serve.attn_flash): a
 * block of FLASH_TILES query tiles of one KV head at head dim 256, both passes in one launch.
 * Part of kernels/attn_mma.cuh, split out for its size: included there once,
 * after the mma helpers it uses (ldsm_x4, ldsm_x4_trans, mma_bf16, pack_bf16_exact,
 * widen_e4m3x8) and tile_rows_share; attn_flash_kernel and its launcher live there, beside the
 * folded passes it falls back on.
 *
 * The folded query-tile passes of attn_mma.cuh (a 16-row tile a block, stats then P.V as two
 * launches) spend most of their time waiting: each unit of 64 keys is a copy waited for behind a
 * barrier pair and used for 32 mmas a warp. Here a block takes FLASH_TILES consecutive tiles of
 * one KV head, so a staged unit serves both, and two warps own each tile's 16 M rows against
 * every key of a unit, 128 of the output's 256 dims each: the scores stay in registers and
 * become the P.V pass's A fragments there (the accumulator layout of S is the A layout of P),
 * and the splits' (max, sum) stay in shared memory, so both passes run in one launch. Head dim
 * 256 only (the windowed layers): a split there is one unit (a tile of 64 keys; the fold's grids
 * have at most 16 splits, so per_split is 64), so the split's own sums o live 32 dims at a time
 * beside the running total (64 registers). One warp a tile with all 256 dims (the total in 128
 * registers) spilled; both warps of a tile compute its scores, as the design has it
 * (docs/attention-design.md, "What was built (thirty-sixth session)").
 *
 * The bits are the folded passes', operation for operation, per row and split:
 *   scores  s = k_round_bf16(q . k), the same mma over the head dim in ascending k steps (an
 *           output element's sums depend only on its own row and column operands);
 *   (m, l)  per split, the max (order-free) and tile_stats_rows' butterfly rebuilt on the
 *           accumulator layout: lane l of it holds keys l and l + 32, summed over xor 16, 8, 4,
 *           2, 1; here key 8n + 2qd + b of n tile n lies in lane (g0, qd), so key l + 32 is n
 *           tile n + 4 of the same lane (the leaves), xor 16 pairs n tiles n and n + 2, xor 8
 *           n and n + 1, xor 4 and 2 are the lane shuffles xor 2 and 1, xor 1 is b. Each
 *           addition gets the two partial sums today's gets (fp32 addition is commutative), so
 *           each is the same value; unmapped keys mark the split NaN, keys past a row's position
 *           count nothing, as there;
 *   merge   the row's splits' (m, l) in split order (start_stats_block's loop);
 *   P.V     p = softmax_p(s, m, l) (0 for a key not the row's), o from 0 through the split's
 *           four k steps in order, tot += o for the row's own splits in split order, out =
 *           k_f32_to_bf16(tot), a head NaN where any of its splits' sums is (mma_pass FOLD).
 * Keys past a tile's own longest row but inside the block's are real rows here (zero rows in
 * the tile's own block): weight 0 for every row of the tile, as keys past a row's position are
 * inside a shared tile today (mma_pass's comment on -0 says why that leaves the sums as they
 * were). A block whose rows are not all one sequence's tiles from key 0 (tile_rows_share over
 * the block, and a split of one tile) runs the folded passes tile after tile instead, the same
 * code as attn_mma_tile_kernel's, so every block of a launch gives the folded passes' bits. */
#ifndef G4_ATTN_FLASH_CUH
#define G4_ATTN_FLASH_CUH

#include "kernels/attn_common.cuh"

#define FLASH_TILES 2 /* query tiles a block, two warps each (128 dims of the output a warp) */
#define FLASH_KEYS 64 /* keys a unit: one tile of the split plan, one split */
#define FLASH_SLOTS 3 /* key offsets: in use, landing, being looked up */
#define FLASH_OT 4    /* n tiles of a split's P.V sums a warp holds at once (o) */
static_assert(2 * FLASH_TILES == ATTN_WARPS && FLASH_KEYS == ATTN_TILE,
              "two warps a tile, a unit a split");

/* The flash pass's dynamic shared memory (head dim 256): two stages of a unit's rows as stored,
 * the e4m3 unit widened to bf16, the block's queries (16 M rows a tile), and the splits' (max,
 * sum) of each tile's rows ([tile][split][m]). bf16 rows are 512 bytes with their 16-byte chunks
 * swizzled (chunk c of row k at c ^ (k & 7)), not padded as mma_pass's are: the 8 rows an
 * ldmatrix reads fall in distinct banks either way, and unpadded the block stays under half an
 * SM's shared memory (two blocks an SM, 8 warps). */
template <bool FP8> struct flash_layout {
    static constexpr int ROW = FP8 ? 256 : 512; /* a staged key row */
    static constexpr size_t STAGE = (size_t)FLASH_KEYS * ROW;
    static constexpr size_t WIDE = 2 * STAGE;
    static constexpr size_t Q = WIDE + (FP8 ? (size_t)FLASH_KEYS * 512 : 0);
    static constexpr size_t ML = Q + (size_t)FLASH_TILES * 16 * 512;
    static constexpr size_t BYTES = ML + (size_t)FLASH_TILES * ATTN_MAX_SPB * 16 * sizeof(float2);
};

/* The byte offset of 16-byte chunk c (0..31) in swizzled bf16 row x. Written as c's high bits
 * and its low three swizzled: the readers' c are constants after unrolling and their x the lane's,
 * so a lane holds four swizzled values a kind of read rather than one per chunk (which spilled). */
static __device__ __forceinline__ int flash_chunk(int x, int c) {
    return (c & ~7) << 4 | ((c & 7) ^ (x & 7)) << 4;
}

/* Whether the nrow rows from r0 may take the flash pass: tile_rows_share over all of them (one
 * sequence, key tiles from 0, the grid holds every split) and a split of one tile. */
static __device__ __forceinline__ bool flash_block_shares(const k_attention_args &a, int r0,
                                                          int nrow, int max_split) {
    return tile_rows_share(a, r0, nrow, max_split) &&
           plan_split(a.pos[r0], a.window).per_split == FLASH_KEYS;
}

/* S = Q K^T for the warp's tile against the unit kt (bf16 rows, swizzled): per 8-key n tile,
 * 16 mmas in ascending k order into s[n] from 0. s[n][t]: M row g0 (t < 2) or g0 + 8, key
 * 8n + 2qd + t % 2. */
static __device__ __forceinline__ void flash_scores(const unsigned char *qw,
                                                    const unsigned char *kt, float (&s)[8][4]) {
    const int lane = threadIdx.x & 31, x = lane & 7;
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int t = 0; t < 4; t++)
            s[n][t] = 0.0f;
    /* A by ldmatrix: lane l gives M row l % 16, dims + 8 for lanes 16-31, so the four matrices
     * are a0..a3 (mma_pass's fragment loads, the same registers). B: lane l gives key (l / 16)
     * * 8 + l % 8 of each 16, dims + 8 for lanes 8-15 and 24-31, as mma_pass's ldsm_x4. */
    const unsigned char *qa = qw + (lane & 15) * 512;
    const unsigned char *kb = kt + ((lane >> 4) * 8 + x) * 512;
    const int qc = lane >> 4, kc = (lane >> 3) & 1;
#pragma unroll 4
    for (int ks = 0; ks < 16; ks++) {
        uint32_t af[4];
        ldsm_x4(af, qa + flash_chunk(x, 2 * ks + qc));
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            ldsm_x4(b, kb + np * 16 * 512 + flash_chunk(x, 2 * ks + kc));
            mma_bf16(s[2 * np], af, b[0], b[1]);
            mma_bf16(s[2 * np + 1], af, b[2], b[3]);
        }
    }
}

/* One split's (max, sum) of the lane's M row h (0: g0, 1: g0 + 8) from its scores: keys past
 * nk the row's none, unmapped ones (bit clear in mapped) -inf; m_run starts each split at -inf,
 * so its rescale term is tile_stats_rows' first-tile one. The sum's tree is tile_stats_rows'
 * (see the banner above). Every lane of the quad returns the same pair. */
static __device__ __forceinline__ float2 flash_split_stats(float (&s)[8][4], int h, int nk,
                                                           unsigned long long mapped) {
    const int qd = threadIdx.x & 3;
    float mt = -INFINITY;
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int b = 0; b < 2; b++) {
            const int kk = 8 * n + 2 * qd + b;
            float &v = s[n][2 * h + b];
            v = kk < nk && (mapped >> kk) & 1ull ? k_round_bf16(v) : -INFINITY;
            mt = fmaxf(mt, v);
        }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    const float m_old = -INFINITY, m_new = fmaxf(m_old, mt);
    float e[8][2];
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int b = 0; b < 2; b++)
            e[n][b] = 8 * n + 2 * qd + b < nk ? expf(s[n][2 * h + b] - m_new) : 0.0f;
    float x[2];
#pragma unroll
    for (int b = 0; b < 2; b++) {
        const float v0 = e[0][b] + e[4][b], v1 = e[1][b] + e[5][b]; /* keys l and l + 32 */
        const float v2 = e[2][b] + e[6][b], v3 = e[3][b] + e[7][b];
        x[b] = (v0 + v2) + (v1 + v3);                  /* xor 16, then xor 8 */
        x[b] += __shfl_xor_sync(0xffffffffu, x[b], 2); /* xor 4 */
        x[b] += __shfl_xor_sync(0xffffffffu, x[b], 1); /* xor 2 */
    }
    const float sum = x[0] + x[1];         /* xor 1 */
    return make_float2(m_new, 0.0f + sum); /* tile_stats_rows' l_run after m_old = -inf */
}

/* The unit's mapped keys as a mask (bit kk: key kk has a row), from its offsets: a warp's. */
static __device__ __forceinline__ unsigned long long flash_mapped(const long long *ko) {
    const int lane = threadIdx.x & 31;
    const unsigned lo = __ballot_sync(0xffffffffu, ko[lane] >= 0);
    const unsigned hi = __ballot_sync(0xffffffffu, ko[lane + 32] >= 0);
    return (unsigned long long)hi << 32 | lo;
}

/* The flash pass over rows rl0 .. rl0 + nrow - 1 of the launch (flash_block_shares): warps 2w
 * and 2w + 1 take tile w, rows rl0 + w * R .., M row m its row m / G's head m % G, and the
 * output's dims 0-127 and 128-255. Units: the K of every tile for the statistics (the tile's
 * even splits by its first warp, the odd by its second), then K and V of each tile in turn for
 * the weights (both warps, the same) and P.V. */
template <int G, bool FP8>
static __device__ __forceinline__ void flash_pass(const k_attention_args &a, int row0, int rl0,
                                                  int nrow) {
    using L = flash_layout<FP8>;
    constexpr int R = attn_tile_rows<G>();
    constexpr int EB = FP8 ? 1 : 2;
    constexpr int SEGS = 256 * EB / 16; /* 16-byte copies a key row */
    extern __shared__ __align__(16) unsigned char mma_smem[];
    unsigned char *wide = mma_smem + L::WIDE;
    unsigned char *qs = mma_smem + L::Q;
    float2 *mls = reinterpret_cast<float2 *>(mma_smem + L::ML);
    __shared__ long long fkoff[FLASH_SLOTS][FLASH_KEYS]; /* element offsets; -1: none */
    __shared__ float2 fmerged[ATTN_WARPS][16];           /* each M row's merged (max, sum) */
    const int kvh = blockIdx.y, r = row0 + rl0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int g0 = lane >> 2, qd = lane & 3;
    const int tw = warp >> 1, dh = warp & 1; /* the warp's tile and half of the dims */
    const int seq = a.seq[r];
    int k_end = 0; /* the block's keys: [0, its longest row's position] */
    for (int k = 0; k < nrow; k++)
        k_end = max(k_end, a.pos[r + k] + 1);
    const int nt = (k_end + FLASH_KEYS - 1) / FLASH_KEYS; /* tiles, each a split */
    const int n_units = 3 * nt;
    /* the lane's M rows g0 and g0 + 8: their key ends (0: no row), and the tile's splits */
    int row_end[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int k = tw * R + (g0 + 8 * h) / G;
        row_end[h] = k < nrow ? a.pos[r + k] + 1 : 0;
    }
    const int wsplits =
        (__reduce_max_sync(0xffffffffu, max(row_end[0], row_end[1])) + FLASH_KEYS - 1) / FLASH_KEYS;

    auto plane_of = [&](int u) { return u < nt ? 0 : (u - nt) & 1; };
    auto tile_of = [&](int u) { return u < nt ? u : (u - nt) >> 1; };
    auto offset_of = [&](int u, int kk) -> long long {
        if (kk >= FLASH_KEYS || u >= n_units) return -1;
        const int key = tile_of(u) * FLASH_KEYS + kk;
        return key < k_end ? kv_view_offset(&a.kv, seq, key, a.kv_layer, plane_of(u), kvh) : -1;
    };
    /* a thread's copies: chunk seg of keys k0, k0 + KPI, ...; bf16 rows' swizzle takes two
     * values along them (KPI is 4), held rather than recomputed per key (which spilled) */
    constexpr int KPI = ATTN_THREADS / SEGS;
    const int seg = tid % SEGS, k0 = tid / SEGS;
    const int sw[2] = {FP8 ? seg * 16 : flash_chunk(k0, seg),
                       FP8 ? seg * 16 : flash_chunk(k0 + KPI, seg)};
    auto copy = [&](int u) { /* unit u into stage u % 2 (zero rows for keys without one) */
                             if (u < n_units) {
                                 unsigned char *st = mma_smem + (u & 1) * L::STAGE;
                                 const long long *ko = fkoff[u % FLASH_SLOTS];
#pragma unroll 4
                                 for (int i = 0; i < FLASH_KEYS / KPI; i++) {
                                     const int kk = k0 + i * KPI;
                                     const long long o = ko[kk];
                                     unsigned char *dst = st + kk * L::ROW + sw[i & 1];
                                     if (o >= 0)
                                         cp_async16(dst, (const unsigned char *)a.kv.base + o * EB +
                                                             seg * 16);
                                     else
                                         *reinterpret_cast<uint4 *>(dst) = make_uint4(0, 0, 0, 0);
                                 }
                             }
                             cp_async_commit();
    };
    /* unit u landed and seen by every thread, the next one in flight, the e4m3 unit widened:
     * the rows to compute on */
    auto begin_unit = [&](int u) -> const unsigned char * {
        cp_async_wait_all_but<0>();
        __syncthreads(); /* every copy of unit u; every warp done with unit u - 1 */
        copy(u + 1);     /* into the stage unit u - 1 used */
        const unsigned char *st = mma_smem + (u & 1) * L::STAGE;
        if constexpr (FP8) { /* lane's chunk of keys warp, warp + 4, ...: two swizzles */
            const int w0 = flash_chunk(warp, lane), w1 = flash_chunk(warp + 4, lane);
#pragma unroll 4
            for (int kk = warp; kk < FLASH_KEYS; kk += ATTN_WARPS)
                *reinterpret_cast<uint4 *>(wide + kk * 512 + (kk & 4 ? w1 : w0)) =
                    widen_e4m3x8(*reinterpret_cast<const uint2 *>(st + kk * L::ROW + lane * 8));
            __syncthreads();
            return wide;
        }
        return st;
    };

    if (tid < FLASH_KEYS)
        fkoff[0][tid] = offset_of(0, tid);
    else
        fkoff[1][tid - FLASH_KEYS] = offset_of(1, tid - FLASH_KEYS);
    /* the queries, bf16 as stored; rows past the block's zero (the zero A rows of mma_pass) */
    for (int e = tid; e < FLASH_TILES * 16 * 32; e += ATTN_THREADS) {
        const int c = e % 32, mm = e / 32, m = mm % 16, k = (mm / 16) * R + m / G;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (k < nrow)
            v = *reinterpret_cast<const uint4 *>(
                a.q + ((size_t)(r + k) * a.n_head + (size_t)kvh * G + m % G) * 256 + c * 8);
        *reinterpret_cast<uint4 *>(qs + mm * 512 + flash_chunk(m, c)) = v;
    }
    __syncthreads(); /* slots 0 and 1 */
    copy(0);
    const unsigned char *qw = qs + tw * 16 * 512;
    float2 *wml = mls + tw * ATTN_MAX_SPB * 16; /* [split][m], the tile's */
    float s[8][4];

    /* the statistics: each tile's (max, sum) per M row, a split each */
    for (int t = 0; t < nt; t++) {
        const long long off_next = offset_of(t + 2, tid);
        const unsigned char *kt = begin_unit(t);
        /* warp-uniform: a tile past the warp's rows is no split of theirs */
        if (t < wsplits && (t & 1) == dh) {
            flash_scores(qw, kt, s);
            const unsigned long long mapped = flash_mapped(fkoff[t % FLASH_SLOTS]);
            const int first_unmapped =
                mapped == ~0ull ? FLASH_KEYS : __ffsll((long long)~mapped) - 1;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int nk = max(0, min(FLASH_KEYS, row_end[h] - t * FLASH_KEYS));
                const float2 ml = flash_split_stats(s, h, nk, mapped);
                if (qd == 0)
                    wml[t * 16 + g0 + 8 * h] = make_float2(ml.x, first_unmapped < nk ? NAN : ml.y);
            }
        }
        if (tid < FLASH_KEYS) fkoff[(t + 2) % FLASH_SLOTS][tid] = off_next;
    }

    /* each row's splits merged in split order (start_stats_block), by both warps of its tile
     * alike; the merged pair beside the splits' in shared memory, read where used (held in
     * registers through the P.V units they spilled) */
    __syncthreads(); /* the tile's statistics, from both of its warps */
    if (qd == 0)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int ns = (row_end[h] + FLASH_KEYS - 1) / FLASH_KEYS;
            const float2 *hm = wml + g0 + 8 * h;
            float m = -INFINITY, l = 0.0f;
            for (int t = 0; t < ns; t++)
                m = fmaxf(m, hm[t * 16].x);
            for (int t = 0; t < ns; t++)
                l += hm[t * 16].y * expf(hm[t * 16].x - m);
            fmerged[warp][g0 + 8 * h] = make_float2(m, l);
        }
    __syncwarp();

    /* the weights and P.V, tile after tile: tot the splits' sums so far in split order */
    float tot[16][4]; /* the warp's 128 dims */
#pragma unroll
    for (int n = 0; n < 16; n++)
#pragma unroll
        for (int t = 0; t < 4; t++)
            tot[n][t] = 0.0f;
    for (int t = 0; t < nt; t++) {
        const int u = nt + 2 * t;
        long long off_next = offset_of(u + 2, tid);
        const unsigned char *kt = begin_unit(u);
        uint32_t pf[4][4]; /* k step j's A fragments: n tiles 2j and 2j + 1 of the weights */
        if (t < wsplits) {
            flash_scores(qw, kt, s);
            const unsigned long long mapped = flash_mapped(fkoff[u % FLASH_SLOTS]);
            const float2 ml[2] = {fmerged[warp][g0], fmerged[warp][g0 + 8]};
            float p[8][4];
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int h = e >> 1, kk = 8 * n + 2 * qd + (e & 1);
                    const bool in = t * FLASH_KEYS + kk < row_end[h] && (mapped >> kk) & 1ull;
                    p[n][e] = in ? softmax_p(k_round_bf16(s[n][e]), ml[h].x, ml[h].y) : 0.0f;
                }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                pf[j][0] = pack_bf16_exact(p[2 * j][0], p[2 * j][1]);
                pf[j][1] = pack_bf16_exact(p[2 * j][2], p[2 * j][3]);
                pf[j][2] = pack_bf16_exact(p[2 * j + 1][0], p[2 * j + 1][1]);
                pf[j][3] = pack_bf16_exact(p[2 * j + 1][2], p[2 * j + 1][3]);
            }
        }
        if (tid < FLASH_KEYS) fkoff[(u + 2) % FLASH_SLOTS][tid] = off_next;

        off_next = offset_of(u + 3, tid);
        const unsigned char *vt = begin_unit(u + 1);
        if (t < wsplits) {
            /* ldmatrix.trans rows: lane l gives key ((l / 8) % 2) * 8 + l % 8 of the k step,
             * dims + 8 for lanes 16-31: mma_pass's b0 b1 pairs of two n tiles */
            const unsigned char *vb = vt + (((lane >> 3) & 1) * 8 + (lane & 7)) * 512 + dh * 256;
            const int x = lane & 7, vc = lane >> 4;
            const bool add0 = t * FLASH_KEYS < row_end[0], add1 = t * FLASH_KEYS < row_end[1];
#pragma unroll
            for (int dc = 0; dc < 16 / FLASH_OT; dc++) { /* FLASH_OT n tiles: o from 0 */
                float o[FLASH_OT][4];
#pragma unroll
                for (int n = 0; n < FLASH_OT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        o[n][e] = 0.0f;
#pragma unroll
                for (int ks = 0; ks < 4; ks++)
#pragma unroll
                    for (int np = 0; np < FLASH_OT / 2; np++) {
                        uint32_t b[4];
                        ldsm_x4_trans(b, vb + ks * 16 * 512 +
                                             flash_chunk(x, dc * FLASH_OT + np * 2 + vc));
                        mma_bf16(o[2 * np], pf[ks], b[0], b[1]);
                        mma_bf16(o[2 * np + 1], pf[ks], b[2], b[3]);
                    }
#pragma unroll
                for (int n = 0; n < FLASH_OT; n++) {
                    if (add0) {
                        tot[dc * FLASH_OT + n][0] += o[n][0];
                        tot[dc * FLASH_OT + n][1] += o[n][1];
                    }
                    if (add1) {
                        tot[dc * FLASH_OT + n][2] += o[n][2];
                        tot[dc * FLASH_OT + n][3] += o[n][3];
                    }
                }
            }
        }
        if (tid < FLASH_KEYS) fkoff[(u + 3) % FLASH_SLOTS][tid] = off_next;
    }

    /* the output: each sum rounded to bf16, a head NaN where any of its splits' sums is */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int m = g0 + 8 * h, k = tw * R + m / G;
        if (k >= nrow) continue;
        bool nan = false;
        for (int t = 0; t * FLASH_KEYS < row_end[h]; t++)
            nan |= isnan(wml[t * 16 + m].y);
        bf16_t *out =
            a.out + ((size_t)(r + k) * a.n_head + (size_t)kvh * G + m % G) * 256 + dh * 128;
#pragma unroll
        for (int n = 0; n < 16; n++) {
            bf16_t *o2 = out + n * 8 + 2 * qd;
            o2[0] = nan ? (bf16_t)BF16_NAN : k_f32_to_bf16(tot[n][2 * h]);
            o2[1] = nan ? (bf16_t)BF16_NAN : k_f32_to_bf16(tot[n][2 * h + 1]);
        }
    }
}

#endif
