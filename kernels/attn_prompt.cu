/* kernels/attn_prompt.cu - prompt rows' attention (serve.attn_prompt): a block of 64 M rows of
 * one KV head walks its keys once for the statistics and once for the weights and P.V, in one
 * launch, with no splits, no partials and no scratch. docs/attention-design.md, "Prompt rows on
 * their own pass", says why and what it gives up.
 *
 * Rows and M rows. The launch takes the step's last n rows (k_attention_args.prompt_rows: each
 * sequence's rows contiguous, ascending). A block takes AP_TILES m16 tiles of consecutive rows,
 * M row m of a tile being row m / G's query head m % G (16 / G rows a tile); each tile belongs to
 * AP_WPT warps, warp w of them owning the output's dims [128 w, 128 w + 128).
 *
 * The order, per row, fixed by its own position and keys alone:
 *   units   keys in units of N at absolute positions ([N u, N u + N)), walked in ascending u;
 *           a row's keys [lo, i] (lo = i - W + 1 or 0) lie in units lo / N .. i / N.
 *   scores  s = bf(q . k): per 8-key n tile, each warp sums its 128 dims by 8 mmas in ascending
 *           k steps from 0; the tile's warps' sums are added in warp order (w = 0, 1, ...) from
 *           shared memory, then rounded to bf16. Keys outside the row's range: -inf.
 *   (m, l)  online over the row's units: per unit the max (order-free) and, with m' = max(m,
 *           unit max), l = l exp(m - m') + sum of exp(s - m') over the unit's keys (a lane's
 *           keys in n tile order, then the quad's lanes xor 1, then xor 2).
 *   P.V     p = bf(exp(s - m) x (1 / l)) (0 outside the range), o += P V by mma per 16 keys in
 *           order, unit after unit, into one fp32 accumulator; out = bf(o).
 * exp(x) is 2^(x log2 e) by ex2.approx (ap_exp2) and 1 / l is computed once a row: HF eager's
 * rounding points, with fp32 values a few ulps from expf's and a division's (why: the exact
 * forms made the pass instruction-bound; docs/attention-design.md).
 * A unit that holds none of a row's keys changes nothing of it: its scores are all -inf, so the
 * statistics skip it, and its weights are all 0, so each mma adds exact zeros (V rows of keys
 * outside every row's range are zero rows, never NaN). An accumulator that is -0 could turn +0
 * that way, so the output writes zero as +0. Hence a row's bits do not depend on the rows beside
 * it in its block, nor on how its prompt was cut into launches or what else its step holds
 * (batch and slicing invariance, test_attn's attn_prompt_bits gates). Rows of several sequences
 * in one block: the block walks each sequence's units in turn, the other rows masked.
 *
 * NaN: a row whose range holds an unmapped key, or at a negative position, gets NaN in every
 * dim (as the split passes' combine gives).
 *
 * The pipeline: the units' copies (K of each unit for the statistics, then K and V of each in
 * turn) go through a ring of AP_RING stages by cp.async, two ahead of the one in use, their key
 * offsets looked up one unit earlier still; one block barrier a unit. The e4m3 pool's units are
 * widened to bf16 rows (exact) after landing. Rows in shared memory are unpadded, their 16-byte
 * chunks swizzled (chunk c of row x at (c & ~7) | ((c ^ x) & 7)), so the 8 rows an ldmatrix
 * reads fall in distinct banks. */
#include "kernels/attn_common.cuh"
#include "kernels/attn_frag.cuh"

#include <limits.h>

#define AP_WARPS 8
#define AP_THREADS (AP_WARPS * 32)
#define AP_RING 3             /* units in shared memory: in use, landing, in flight */
#define AP_OFFS (AP_RING + 1) /* key offsets: the ring's and the unit being looked up */

template <int D> static __host__ __device__ constexpr int ap_keys() { return D == 256 ? 64 : 32; }
template <int D> static __host__ __device__ constexpr int ap_wpt() { return D / 128; }
template <int D> static __host__ __device__ constexpr int ap_tiles() {
    return AP_WARPS / ap_wpt<D>();
}
/* rows a block: its tiles' M rows over the group */
template <int D, int G> static __host__ __device__ constexpr int ap_rows() {
    return ap_tiles<D>() * 16 / G;
}

/* Dynamic shared memory: the ring of staged units, the widened unit (e4m3), the queries, and
 * each warp's partial scores ([warp][n tile x 4 + element][lane]). */
template <int D, bool FP8> struct ap_layout {
    static constexpr int N = ap_keys<D>();
    static constexpr int ROW = D * 2;          /* a bf16 row */
    static constexpr int SROW = FP8 ? D : ROW; /* a staged row */
    static constexpr size_t STAGE = (size_t)N * SROW;
    static constexpr size_t WIDE = (size_t)AP_RING * STAGE;
    static constexpr size_t Q = WIDE + (FP8 ? (size_t)N * ROW : 0);
    static constexpr size_t PART = Q + (size_t)ap_tiles<D>() * 16 * ROW;
    static constexpr size_t BYTES = PART + (size_t)AP_WARPS * (N / 8) * 4 * 32 * sizeof(float);
};

/* The byte offset of 16-byte chunk c in swizzled bf16 row x. */
static __device__ __forceinline__ int ap_chunk(int x, int c) {
    return ((c & ~7) | ((c ^ x) & 7)) << 4;
}

/* A warp's partial scores of its tile's 16 M rows against the unit kt's N keys over its dims
 * [128 wd, 128 wd + 128): per n tile, 8 mmas in ascending k steps from 0. s[n][e]: M row g0
 * (e < 2) or g0 + 8, key 8 n + 2 qd + e % 2. */
template <int D>
static __device__ __forceinline__ void ap_partial_scores(const unsigned char *qw,
                                                         const unsigned char *kt, int wd,
                                                         float (&s)[ap_keys<D>() / 8][4]) {
    constexpr int NT = ap_keys<D>() / 8, ROW = D * 2;
    const int lane = threadIdx.x & 31, x = lane & 7;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            s[n][e] = 0.0f;
    /* A: lane l gives M row l % 16, dims + 8 for lanes 16-31; B: lane l gives key (l / 16) * 8
     * + l % 8 of each 16 keys, dims + 8 for lanes 8-15 and 24-31 */
    const unsigned char *qa = qw + (lane & 15) * ROW;
    const unsigned char *kb = kt + ((lane >> 4) * 8 + x) * ROW;
    const int qc = lane >> 4, kc = (lane >> 3) & 1;
#pragma unroll
    for (int ks = 0; ks < 8; ks++) {
        const int c = 16 * wd + 2 * ks;
        uint32_t af[4];
        ldsm_x4(af, qa + ap_chunk(x, c + qc));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldsm_x4(b, kb + np * 16 * ROW + ap_chunk(x, c + kc));
            mma_bf16(s[2 * np], af, b[0], b[1]);
            mma_bf16(s[2 * np + 1], af, b[2], b[3]);
        }
    }
}

/* 2^x by the special function unit (ex2.approx: relative error ~2^-22, far under the bf16
 * rounding of the weights it feeds); the pass's exponentials are exp(x) = 2^(x log2 e). */
static __device__ __forceinline__ float ap_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#define AP_LOG2E 1.4426950408889634f

/* fp32 rounded through bf16 by the conversion instruction (attn_round_bf16; a NaN may come out
 * with another payload, still a NaN). */
static __device__ __forceinline__ float ap_round_bf16(float f) { return attn_round_bf16(f); }
/* Two fp32 values rounded to bf16 as an A operand's pair, the lower k in the low half. */
static __device__ __forceinline__ uint32_t ap_pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
}

/* The tile's warps meet at their named barrier (1 + tile). */
static __device__ __forceinline__ void ap_tile_sync(int tile, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(1 + tile), "r"(threads) : "memory");
}

template <int D, int G, bool FP8>
static __global__ void __launch_bounds__(AP_THREADS, 1)
    attn_prompt_kernel(k_attention_args a, int row0, int n_rows) {
    K_GRID_DEPENDENCY();
    using L = ap_layout<D, FP8>;
    constexpr int N = L::N, NT = N / 8, WPT = ap_wpt<D>(), R = ap_rows<D, G>();
    constexpr int EB = FP8 ? 1 : 2;
    constexpr int CPR = L::SROW / 16;            /* 16-byte copies a staged row */
    constexpr int COPIES = N * CPR / AP_THREADS; /* a thread's copies a unit */
    static_assert(N * CPR % AP_THREADS == 0 && N <= 64, "whole copies a thread");
    extern __shared__ __align__(16) unsigned char ap_smem[];
    __shared__ long long koff[AP_OFFS][N]; /* element offsets; -1: no row */
    __shared__ int rpos[R], rseqs[R];      /* the block's rows' positions and sequences */
    static_assert(R <= AP_THREADS, "a thread a row");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int g0 = lane >> 2, qd = lane & 3;
    const int tile = warp / WPT, wd = warp % WPT;
    const int kvh = blockIdx.y;
    const int nb = (n_rows + R - 1) / R;
    const int b = nb - 1 - (int)blockIdx.x; /* the rows of the most keys first */
    const int r = row0 + b * R, nrow = min(R, n_rows - b * R);
    unsigned char *qs = ap_smem + L::Q;
    float *part = reinterpret_cast<float *>(ap_smem + L::PART);
    if (tid < nrow) {
        rpos[tid] = a.pos[r + tid];
        rseqs[tid] = a.seq[r + tid];
    }

    /* the queries, bf16 as stored; M rows past the block's rows zero */
    for (int e = tid; e < ap_tiles<D>() * 16 * (D / 8); e += AP_THREADS) {
        const int c = e % (D / 8), mm = e / (D / 8), k = (mm / 16) * (16 / G) + (mm % 16) / G;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (k < nrow)
            v = *reinterpret_cast<const uint4 *>(
                a.q + ((size_t)(r + k) * a.n_head + (size_t)kvh * G + (mm % 16) % G) * D + c * 8);
        *reinterpret_cast<uint4 *>(qs + mm * L::ROW + ap_chunk(mm, c)) = v;
    }

    __syncthreads(); /* rpos, rseqs */
    /* the lane's M rows g0 and g0 + 8: their block row, sequence and key range */
    int rk[2], rseq[2], lo[2], hi[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        rk[h] = tile * (16 / G) + (g0 + 8 * h) / G;
        const int i = rk[h] < nrow ? rpos[rk[h]] : -1;
        rseq[h] = rk[h] < nrow ? rseqs[rk[h]] : -1;
        hi[h] = i;
        lo[h] = i < 0 ? 1 : a.window > 0 ? max(0, i - a.window + 1) : 0;
    }
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    float mb_run[2] = {0.0f, 0.0f}, rl_run[2] = {0.0f, 0.0f}; /* the P.V steps' m log2 e, 1 / l */
    bool bad[2] = {hi[0] < 0, hi[1] < 0};
    float o[16][4]; /* the warp's 128 dims of its tile's M rows */
#pragma unroll
    for (int n = 0; n < 16; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[n][e] = 0.0f;
    uint32_t pf_hold[NT / 2][4]; /* a K step's weights, the next V step's A fragments */
    const unsigned char *qw = qs + tile * 16 * L::ROW;
    float *wpart = part + (size_t)warp * NT * 4 * 32 + lane;
    const float *tpart = part + (size_t)tile * WPT * NT * 4 * 32 + lane;

    /* each sequence's rows of the block in turn (a block holds one, but at a prompt's edge) */
    for (int seg0 = 0; seg0 < nrow;) {
        const int sq = rseqs[seg0];
        int seg1 = seg0 + 1, blo = INT_MAX, bhi = -1;
        while (seg1 < nrow && rseqs[seg1] == sq)
            seg1++;
        for (int k = seg0; k < seg1; k++) {
            const int i = rpos[k];
            if (i < 0) continue;
            blo = min(blo, a.window > 0 ? max(0, i - a.window + 1) : 0);
            bhi = max(bhi, i);
        }
        seg0 = seg1;
        if (bhi < 0) continue; /* block-uniform */
        int elo[2], ehi[2];    /* the lane's rows' ranges in this sequence's walk */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const bool in = rseq[h] == sq && hi[h] >= 0;
            elo[h] = in ? lo[h] : INT_MAX;
            ehi[h] = in ? hi[h] : -1;
        }
        /* the keys every row of the warp's tile holds: a unit inside them (and wholly mapped)
         * needs no per-key range test, the same values either way */
        const int tile_lo = __reduce_max_sync(0xffffffffu, (unsigned)max(elo[0], elo[1]));
        const int tile_hi =
            (int)__reduce_min_sync(0xffffffffu, (unsigned)(min(ehi[0], ehi[1]) + 1)) - 1;
        const int uf = blo / N, nu = bhi / N - uf + 1, steps = 3 * nu;
        /* step j: the statistics' K of unit uf + j (j < nu), then K and V of each unit in turn */
        auto unit_of = [&](int j) { return uf + (j < nu ? j : (j - nu) >> 1); };
        auto plane_of = [&](int j) { return j < nu ? 0 : (j - nu) & 1; };
        auto offset_of = [&](int j, int kk) -> long long {
            if (j >= steps || kk >= N) return -1;
            const int key = unit_of(j) * N + kk;
            return key >= blo && key <= bhi
                       ? kv_view_offset(&a.kv, sq, key, a.kv_layer, plane_of(j), kvh)
                       : -1;
        };
        auto copy =
            [&](int j) { /* step j's unit into stage j % AP_RING; zero rows for none */
                         if (j < steps) {
                             unsigned char *st = ap_smem + (j % AP_RING) * L::STAGE;
                             const long long *ko = koff[j % AP_OFFS];
#pragma unroll
                             for (int t = 0; t < COPIES; t++) {
                                 const int e = tid + t * AP_THREADS, kk = e / CPR, c = e % CPR;
                                 const long long off = ko[kk];
                                 unsigned char *dst =
                                     st + kk * L::SROW + (FP8 ? c * 16 : ap_chunk(kk, c));
                                 if (off >= 0)
                                     cp_async16(dst, (const unsigned char *)a.kv.base + off * EB +
                                                         c * 16);
                                 else
                                     *reinterpret_cast<uint4 *>(dst) = make_uint4(0, 0, 0, 0);
                             }
                         }
                         cp_async_commit();
            };
        for (int j = 0; j < AP_RING; j++)
            if (tid < N) koff[j][tid] = offset_of(j, tid);
        __syncthreads(); /* the offsets; the queries (first sequence) */
        for (int j = 0; j < AP_RING - 1; j++)
            copy(j);

        for (int j = 0; j < steps; j++) {
            const long long off_next = tid < N ? offset_of(j + AP_RING, tid) : -1;
            cp_async_wait_all_but<AP_RING - 2>();
            __syncthreads(); /* step j's unit landed; every warp done with step j - 1's */
            copy(j + AP_RING - 1);
            const unsigned char *ut = ap_smem + (j % AP_RING) * L::STAGE;
            if constexpr (FP8) { /* widened into bf16 rows, each thread 8 values at a time */
                unsigned char *wide = ap_smem + L::WIDE;
                for (int e = tid; e < N * (D / 8); e += AP_THREADS) {
                    const int kk = e / (D / 8), c = e % (D / 8);
                    *reinterpret_cast<uint4 *>(wide + kk * L::ROW + ap_chunk(kk, c)) =
                        widen_e4m3x8(*reinterpret_cast<const uint2 *>(ut + kk * L::SROW + c * 8));
                }
                __syncthreads();
                ut = wide;
            }
            const int kbase = unit_of(j) * N;
            const bool stats = j < nu, is_k = plane_of(j) == 0;
            if (j == nu) /* the statistics are final: each row's m log2 e and 1 / l */
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    mb_run[h] = m_run[h] == -INFINITY ? 0.0f : m_run[h] * AP_LOG2E;
                    rl_run[h] = l_run[h] > 0.0f ? 1.0f / l_run[h] : 0.0f;
                }
            if (is_k) {
                float s[NT][4];
                ap_partial_scores<D>(qw, ut, wd, s);
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        wpart[(n * 4 + e) * 32] = s[n][e];
                ap_tile_sync(tile, WPT * 32);
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float v = tpart[(n * 4 + e) * 32];
#pragma unroll
                        for (int w = 1; w < WPT; w++)
                            v += tpart[(size_t)w * NT * 4 * 32 + (n * 4 + e) * 32];
                        s[n][e] = v;
                    }
                /* the unit's mapped keys (offsets >= 0) as a mask, from the warp's lanes */
                const long long *ko = koff[j % AP_OFFS];
                unsigned long long mapped = __ballot_sync(0xffffffffu, ko[lane] >= 0);
                if constexpr (N == 64)
                    mapped |= (unsigned long long)__ballot_sync(0xffffffffu, ko[lane + 32] >= 0)
                              << 32;
                const bool inside = kbase >= tile_lo && kbase + N - 1 <= tile_hi &&
                                    mapped == (N == 64 ? ~0ull : 0xffffffffull);
                if (inside) {
#pragma unroll
                    for (int n = 0; n < NT; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            s[n][e] = ap_round_bf16(s[n][e]);
                } else {
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int n = 0; n < NT; n++)
#pragma unroll
                            for (int e2 = 0; e2 < 2; e2++) {
                                const int kk = 8 * n + 2 * qd + e2, key = kbase + kk;
                                const bool in = key >= elo[h] && key <= ehi[h];
                                const bool has = (mapped >> kk) & 1ull;
                                if (stats && in && !has) bad[h] = true;
                                float &v = s[n][2 * h + e2];
                                v = in && has ? ap_round_bf16(v) : -INFINITY;
                            }
                }
                if (stats) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        float mt = -INFINITY;
#pragma unroll
                        for (int n = 0; n < NT; n++)
                            mt = fmaxf(mt, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
                        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
                        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
                        /* none of the row's keys (quad-uniform): the unit changes nothing */
                        const bool any = mt != -INFINITY;
                        const float m_new = any ? fmaxf(m_run[h], mt) : 0.0f;
                        const float mb = m_new * AP_LOG2E; /* exp(s - m) = 2^(s log2 e - mb) */
                        float x = 0.0f;
#pragma unroll
                        for (int n = 0; n < NT; n++) {
                            x += any ? ap_exp2(fmaf(s[n][2 * h], AP_LOG2E, -mb)) : 0.0f;
                            x += any ? ap_exp2(fmaf(s[n][2 * h + 1], AP_LOG2E, -mb)) : 0.0f;
                        }
                        x += __shfl_xor_sync(0xffffffffu, x, 1);
                        x += __shfl_xor_sync(0xffffffffu, x, 2);
                        if (any) {
                            l_run[h] = l_run[h] * ap_exp2(fmaf(m_run[h], AP_LOG2E, -mb)) + x;
                            m_run[h] = m_new;
                        }
                    }
                } else {
                    /* the weights as the next V unit's A fragments: k step t holds n tiles
                     * 2t and 2t + 1 (the accumulator layout is the A layout) */
                    /* p = exp(s - m) / l as 2^(s log2 e - m log2 e) x (1 / l), rounded to bf16
                     * as packed below; a key not the row's (-inf) gives 2^-inf = 0 */
#pragma unroll
                    for (int n = 0; n < NT; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int h = e >> 1;
                            s[n][e] = ap_exp2(fmaf(s[n][e], AP_LOG2E, -mb_run[h])) * rl_run[h];
                        }
                }
                if (!stats) {
#pragma unroll
                    for (int t = 0; t < NT / 2; t++) {
                        pf_hold[t][0] = ap_pack_bf16(s[2 * t][0], s[2 * t][1]);
                        pf_hold[t][1] = ap_pack_bf16(s[2 * t][2], s[2 * t][3]);
                        pf_hold[t][2] = ap_pack_bf16(s[2 * t + 1][0], s[2 * t + 1][1]);
                        pf_hold[t][3] = ap_pack_bf16(s[2 * t + 1][2], s[2 * t + 1][3]);
                    }
                }
            } else {
                /* P.V: the unit's V rows by ldmatrix.trans: lane l gives key ((l / 8) % 2) * 8
                 * + l % 8 of the k step, dims + 8 for lanes 16-31 */
                const int x = lane & 7, vc = lane >> 4;
                const unsigned char *vb = ut + (((lane >> 3) & 1) * 8 + x) * L::ROW;
#pragma unroll
                for (int t = 0; t < NT / 2; t++)
#pragma unroll
                    for (int np = 0; np < 8; np++) {
                        uint32_t bv[4];
                        ldsm_x4_trans(bv,
                                      vb + t * 16 * L::ROW + ap_chunk(x, 16 * wd + 2 * np + vc));
                        mma_bf16(o[2 * np], pf_hold[t], bv[0], bv[1]);
                        mma_bf16(o[2 * np + 1], pf_hold[t], bv[2], bv[3]);
                    }
            }
            if (tid < N) koff[(j + AP_RING) % AP_OFFS][tid] = off_next;
        }
        cp_async_wait_all_but<0>();
        __syncthreads(); /* the stages and offsets are the next sequence's */
    }

    /* the output: each sum rounded to bf16 (zero as +0), a row NaN where its range held an
     * unmapped key or it has no position */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int nan = bad[h];
        nan |= __shfl_xor_sync(0xffffffffu, nan, 1);
        nan |= __shfl_xor_sync(0xffffffffu, nan, 2);
        const int m = g0 + 8 * h;
        if (rk[h] >= nrow) continue;
        bf16_t *out = a.out + ((size_t)(r + rk[h]) * a.n_head + (size_t)kvh * G + m % G) * D +
                      128 * wd + 2 * qd;
#pragma unroll
        for (int n = 0; n < 16; n++) {
            const float v0 = o[n][2 * h], v1 = o[n][2 * h + 1];
            const uint32_t w = nan ? (BF16_NAN | BF16_NAN << 16)
                                   : (uint32_t)k_f32_to_bf16(v0 == 0.0f ? 0.0f : v0) |
                                         (uint32_t)k_f32_to_bf16(v1 == 0.0f ? 0.0f : v1) << 16;
            *reinterpret_cast<uint32_t *>(out + n * 8) = w;
        }
    }
}

/* ---- the launcher ---- */

static int attn_prompt_on = 1; /* serve.attn_prompt's default */
extern "C" void k_set_attn_prompt(int on) { attn_prompt_on = on ? 1 : 0; }
static long long attn_prompt_launches;
extern "C" long long k_attn_prompt_launches(void) { return attn_prompt_launches; }

template <int D, int G, bool FP8> static int ap_allow(void) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_prompt_kernel<D, G, FP8>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)ap_layout<D, FP8>::BYTES));
    return K_OK;
}

template <int D, int G, bool FP8>
static int ap_launch(const k_attention_args *a, int row0, int n, cudaStream_t s) {
    constexpr int R = ap_rows<D, G>();
    static bool allowed = false; /* start-up raised it, unless the caller skipped start-up */
    if (!allowed) {
        const int rc = ap_allow<D, G, FP8>();
        if (rc != K_OK) return rc;
        allowed = true;
    }
    const dim3 grid((unsigned)((n + R - 1) / R), (unsigned)a->kv.n_kv_head);
    CUDA_CHECK(k_launch(attn_prompt_kernel<D, G, FP8>, grid, AP_THREADS, ap_layout<D, FP8>::BYTES,
                        s, *a, row0, n));
    CUDA_CHECK(cudaGetLastError());
    attn_prompt_launches++;
    return K_OK;
}

/* The (head dim, group) pairs Gemma 4 has: 256 with groups 2, 4 and 8 (the windowed layers),
 * 512 with 4, 8 and 16 (the global ones); ap_take launches one (K_OK or a K_ERR_* code), or
 * returns 1 for a pair it is not built for. */
template <bool FP8> static int ap_allow_pool(void) {
    int rc = ap_allow<256, 2, FP8>();
    if (rc == K_OK) rc = ap_allow<256, 4, FP8>();
    if (rc == K_OK) rc = ap_allow<256, 8, FP8>();
    if (rc == K_OK) rc = ap_allow<512, 4, FP8>();
    if (rc == K_OK) rc = ap_allow<512, 8, FP8>();
    if (rc == K_OK) rc = ap_allow<512, 16, FP8>();
    return rc;
}

template <bool FP8>
static int ap_take(const k_attention_args *a, int d, int g, int row0, int n, cudaStream_t s) {
    if (d == 256) {
        if (g == 2) return ap_launch<256, 2, FP8>(a, row0, n, s);
        if (g == 4) return ap_launch<256, 4, FP8>(a, row0, n, s);
        if (g == 8) return ap_launch<256, 8, FP8>(a, row0, n, s);
    } else if (d == 512) {
        if (g == 4) return ap_launch<512, 4, FP8>(a, row0, n, s);
        if (g == 8) return ap_launch<512, 8, FP8>(a, row0, n, s);
        if (g == 16) return ap_launch<512, 16, FP8>(a, row0, n, s);
    }
    return 1;
}

/* Start-up: every kernel's shared-memory limit raised, outside any graph capture. */
int attn_prompt_setup(void) {
    int rc = ap_allow_pool<false>();
    if (rc == K_OK) rc = ap_allow_pool<true>();
    return rc;
}

/* The step's prompt rows on the prompt pass, when it is on and built for the layer: K_OK, or 1
 * with nothing launched (the caller's split passes take every row). */
int attn_prompt_launch(const k_attention_args *a, cudaStream_t s) {
    if (!attn_prompt_on || a->prompt_rows <= 0 || a->prompt_rows > a->rows) return 1;
    const int d = a->kv.head_dim, g = a->n_head / a->kv.n_kv_head;
    const int row0 = a->rows - a->prompt_rows;
    return a->kv.elem_bytes == 1 ? ap_take<true>(a, d, g, row0, a->prompt_rows, s)
                                 : ap_take<false>(a, d, g, row0, a->prompt_rows, s);
}

K_TRACE_UNIT(attn_prompt) /* the kernel trace build's binder (common.cuh) */
