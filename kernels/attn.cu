/* kernels/attn.cu - attention on the paged KV store: the per-family prep (q/k head norms, the
 * weightless v norm, rotate-half RoPE, the write of K/V into the pages) and the attention core.
 *
 * Both compute the function of their CPU twin kernels/ref/attn_ref.c with the same rounding
 * points; only fp32 summation orders differ (the sum of squares of a head norm, the q.k dot
 * product, the softmax denominator, the P.V accumulation), which docs/gates.md's 1e-2 bound covers.
 *
 *   k_attn_prep: one block per (row, head), head_dim/2 threads; thread j owns the RoPE pair
 *     (j, j + head_dim/2), so the in-place q update needs no shared copy of the head. With a
 *     one-byte layout (the fp8 local pool) K and V are stored as e4m3 of the bf16 value the
 *     bf16 pool would hold: round to nearest even, saturating at +-448 (docs/gates.md "fp8
 *     layout"), q stays bf16.
 *   k_attention: split-KV, described below.
 *
 * Unmapped pages (table entry -1): the reference returns K_ERR_SHAPE; a kernel cannot, so
 * k_attn_prep skips the write of such a row's K/V and k_attention writes NaN for every head of
 * a row whose window touches one (loud rather than silently wrong). The engine never passes
 * unmapped positions. Likewise a position outside [0, max_pages * page_tokens). */
#include "kernels/common.cuh"
#include "kernels/bf16.cuh"
#include "kernels/kv_offset.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>

#define PREP_MAX_THREADS 256 /* head_dim / 2 threads: 128 (hd 256) or 256 (hd 512) */
#define BF16_NAN 0x7fc0u

/* Sum over the block, the same value in every thread; red holds one float per warp. */
static __device__ __forceinline__ float block_sum(float v, float *red) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, m);
    int warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    if ((threadIdx.x & 31) == 0) red[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < n_warp; w++)
        s += red[w];
    return s;
}

/* ---- prep ---- */

/* blockIdx.x = row; blockIdx.y < n_head: query head (q_norm, RoPE, in place); then n_kv_head
 * K heads (k_norm, RoPE, into the pages) and n_kv_head V heads (weightless norm, into the
 * pages). Thread j handles elements j and j + D/2. */
template <int D, bool FP8>
static __global__ void __launch_bounds__(D / 2) attn_prep_kernel(k_attn_prep_args a) {
    constexpr int half = D / 2;
    __shared__ float red[PREP_MAX_THREADS / 32];
    const int r = blockIdx.x, y = blockIdx.y, j = threadIdx.x;
    const int n_kv = a.kv.n_kv_head;
    const bf16_t *src;
    bf16_t *dst;
    uint8_t *dst8 = NULL; /* the e4m3 store's K or V head */
    const bf16_t *w = NULL;
    bool rotate = true;
    if (y < a.n_head) {
        dst = a.q + ((size_t)r * a.n_head + y) * D;
        src = dst;
        w = a.q_norm;
    } else {
        int h = (y - a.n_head) % n_kv, which = (y - a.n_head) / n_kv; /* 0 = K, 1 = V */
        long long off = kv_view_offset(&a.kv, a.seq[r], a.pos[r], a.kv_layer, which, h);
        if (off < 0) return; /* unmapped: the reference's K_ERR_SHAPE; block-uniform */
        dst = (bf16_t *)a.kv.base + off;
        if (FP8) dst8 = (uint8_t *)a.kv.base + off;
        src = (which ? a.v_raw : a.k_raw) + ((size_t)r * n_kv + h) * D;
        if (!which) w = a.k_norm;
        rotate = which == 0;
    }
    float xa = k_bf16_to_f32(src[j]), xb = k_bf16_to_f32(src[j + half]);
    float ss = block_sum(__fadd_rn(__fmul_rn(xa, xa), __fmul_rn(xb, xb)), red);
    float inv = powf(ss / (float)D + a.eps, -0.5f);
    /* y = k_round_bf16(x * inv * w), left to right as the reference; __fmul_rn keeps each product
     * rounded on its own (no FMA contraction anywhere below). */
    float ya = w ? k_round_bf16(__fmul_rn(__fmul_rn(xa, inv), k_bf16_to_f32(w[j])))
                 : k_round_bf16(__fmul_rn(xa, inv));
    float yb = w ? k_round_bf16(__fmul_rn(__fmul_rn(xb, inv), k_bf16_to_f32(w[j + half])))
                 : k_round_bf16(__fmul_rn(xb, inv));
    if (rotate && j < a.n_rot) {
        float inv_freq = 1.0f / powf(a.rope_base, (float)(2 * j) / (float)D);
        float angle = __fmul_rn(inv_freq, (float)a.pos[r]);
        float c = k_round_bf16(cosf(angle)), s = k_round_bf16(sinf(angle));
        float na = k_round_bf16(
            __fadd_rn(k_round_bf16(__fmul_rn(ya, c)), k_round_bf16(__fmul_rn(-yb, s))));
        float nb =
            k_round_bf16(__fadd_rn(k_round_bf16(__fmul_rn(yb, c)), k_round_bf16(__fmul_rn(ya, s))));
        ya = na;
        yb = nb;
    }
    if (FP8 && dst8) {
        dst8[j] = k_f32_to_e4m3(ya);
        dst8[j + half] = k_f32_to_e4m3(yb);
        return;
    }
    dst[j] = k_f32_to_bf16(ya);
    dst[j + half] = k_f32_to_bf16(yb);
}

/* ---- attention ---- */

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
#define ATTN_TILE 64
#define ATTN_MAX_SPLIT 32
#define ATTN_THREADS 128
#define ATTN_WARPS (ATTN_THREADS / 32)
/* partials per launch; larger steps go in row chunks. 512 MB holds a 1,024-row prefill chunk of
 * the 26B-A4B's windowed layers in one launch (799 rows of the 31B's); at 64 MB (203 and 97
 * rows) a chunk took 6 and 11 launches of each pass, each ending in a partly idle wave, and
 * prefill attention was measurably slower (see docs/perf-notes.md, "Measurements behind the code",
 * attention). */
#define ATTN_SCRATCH_MAX (512u << 20)
#define ATTN_WARP_PV_MAX_G 4 /* kept-score P.V splits keys across warps up to this group */
#define ATTN_MAX_SPB 16      /* splits one block may take in turn (attn_splits_per_block) */
/* resident blocks per SM the split kernels are built for: 4, except the group of 16 at head dim
 * 512 (no Gemma 4 model; 64 P.V accumulators a thread), which would spill under 128 registers */
#define ATTN_MIN_BLOCKS(G, D) ((G) * (D) >= 8192 ? 3 : 4)

/* Keys of row at position i: [j0, i]. Tiles per split and splits, from the key count alone. */
struct split_plan {
    int j0, len, per_split, n_split; /* per_split in keys, a multiple of ATTN_TILE */
};

static __host__ __device__ __forceinline__ split_plan plan_split(int i, int window) {
    split_plan p;
    p.j0 = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
    p.len = i < 0 ? 0 : i - p.j0 + 1;
    int tiles = (p.len + ATTN_TILE - 1) / ATTN_TILE;
    int tps = (tiles + ATTN_MAX_SPLIT - 1) / ATTN_MAX_SPLIT;
    if (tps < 1) tps = 1;
    p.per_split = tps * ATTN_TILE;
    p.n_split = (tiles + tps - 1) / tps;
    return p;
}

/* The most splits any row at a position up to max_pos can have: the grid's split count. Not
 * plan_split(max_pos).n_split: past ATTN_MAX_SPLIT tiles a split takes several tiles, so a row
 * of 2,049 keys (33 tiles, 17 splits of two) has fewer splits than one of 2,048 (32 of one);
 * sized by the longest row alone, a step holding both left the shorter row's splits 18-32
 * outside the grid, and its output NaN. Up to ATTN_MAX_SPLIT tiles a row has a split a tile,
 * so the count grows with the key count, which grows with the position. */
static __host__ __forceinline__ int grid_splits(int max_pos, int window) {
    const split_plan p = plan_split(max_pos, window);
    const int tiles = (p.len + ATTN_TILE - 1) / ATTN_TILE;
    return tiles < ATTN_MAX_SPLIT ? p.n_split : ATTN_MAX_SPLIT;
}

/* A lane's 8 KV elements as loaded (16 bytes of bf16, 8 of e4m3), converted to fp32 only at
 * use (cvt8): a batch of keys in flight costs 4 (bf16) or 2 (e4m3) registers a key rather than
 * 8, so the e4m3 path keeps twice the keys in flight for the same registers: in the
 * latency-bound regime, where a batch costs one memory latency, that is what turns half the
 * bytes into less time. */
template <bool FP8> struct raw8 { uint4 w; };
template <> struct raw8<true> { uint2 w; };

/* Element offset o of the store. */
template <bool FP8>
static __device__ __forceinline__ raw8<FP8> load_raw8(const void *base, long long o) {
    raw8<FP8> r;
    if constexpr (FP8)
        r.w = *reinterpret_cast<const uint2 *>((const uint8_t *)base + o);
    else
        r.w = *reinterpret_cast<const uint4 *>((const bf16_t *)base + o);
    return r;
}

template <bool FP8> static __device__ __forceinline__ void cvt8(const raw8<FP8> &r, float *x) {
    if constexpr (FP8) {
        uint32_t w[2] = {r.w.x, r.w.y};
#pragma unroll
        for (int k = 0; k < 2; k++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                __half2_raw c = __nv_cvt_fp8x2_to_halfraw2(
                    (__nv_fp8x2_storage_t)((w[k] >> (16 * h)) & 0xffffu), __NV_E4M3);
                float2 f = __half22float2(*reinterpret_cast<__half2 *>(&c));
                x[4 * k + 2 * h] = f.x;
                x[4 * k + 2 * h + 1] = f.y;
            }
        }
    } else {
        uint32_t w[4] = {r.w.x, r.w.y, r.w.z, r.w.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            x[2 * k] = __uint_as_float(w[k] << 16);
            x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
    }
}

/* N (2 or 4) consecutive KV elements at element offset o as fp32. */
template <bool FP8, int N>
static __device__ __forceinline__ void load_n(const void *base, long long o, float *x) {
    if (FP8) {
        const uint8_t *p = (const uint8_t *)base + o;
        uint32_t w = N == 4 ? *reinterpret_cast<const uint32_t *>(p)
                            : (uint32_t) * reinterpret_cast<const uint16_t *>(p);
#pragma unroll
        for (int h = 0; h < N / 2; h++) {
            __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(
                (__nv_fp8x2_storage_t)((w >> (16 * h)) & 0xffffu), __NV_E4M3);
            float2 f = __half22float2(*reinterpret_cast<__half2 *>(&r));
            x[2 * h] = f.x;
            x[2 * h + 1] = f.y;
        }
    } else {
        const bf16_t *p = (const bf16_t *)base + o;
        uint32_t w[2];
        if (N == 4) {
            uint2 u = *reinterpret_cast<const uint2 *>(p);
            w[0] = u.x;
            w[1] = u.y;
        } else {
            w[0] = *reinterpret_cast<const uint32_t *>(p);
        }
#pragma unroll
        for (int k = 0; k < N / 2; k++) {
            x[2 * k] = __uint_as_float(w[k] << 16);
            x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
    }
}

/* The scores of one tile for large groups (G x D over 1024: the global layers' group of 8 at head
 * dim 512), where the quad layout's per-key sums would not fit beside the P.V accumulators: warp w
 * takes keys w, w + 4, ..., lanes own 8 dims per 256 and a butterfly sums each head's dot product.
 * A warp's keys go in batches of KB: the batch's page-table reads, then its
 * K loads, all issued before the first dot product, so a warp waits on one memory latency per
 * batch rather than two per key (the table read and the load it addresses). Each key's
 * arithmetic is the one-key-at-a-time version's: the same dims per lane, the same butterfly. */
template <int D, int G, bool FP8>
static __device__ __forceinline__ void
tile_scores_butterfly(const k_attention_args &a, int seq, int kvh, int t0, int nk, const float *qs,
                      float *ps, long long *voff, int *bad) {
    constexpr int SL = D / 256; /* 8-dim slices per lane */
    /* keys in flight per warp: K's registers (KB x SL x 8) next to the P.V pass's G x D/128
     * accumulators, sized so that no instantiation spills (-Xptxas -warn-spills) */
    constexpr int ACC = G * D / 128;
    constexpr int KB = (SL == 1 ? (ACC < 32 ? 8 : 4) : (ACC < 64 ? 4 : 2)) * (FP8 ? 2 : 1);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int b0 = warp; b0 < nk; b0 += ATTN_WARPS * KB) {
        long long ko[KB];
        raw8<FP8> kr[KB][SL];
#pragma unroll
        for (int u = 0; u < KB; u++) {
            const int kk = b0 + u * ATTN_WARPS;
            ko[u] = kk < nk ? kv_view_offset(&a.kv, seq, t0 + kk, a.kv_layer, 0, kvh) : -1;
        }
#pragma unroll
        for (int u = 0; u < KB; u++)
            if (ko[u] >= 0) /* warp-uniform */
#pragma unroll
                for (int c = 0; c < SL; c++)
                    kr[u][c] = load_raw8<FP8>(a.kv.base, ko[u] + c * 256 + lane * 8);
#pragma unroll
        for (int u = 0; u < KB; u++) {
            const int kk = b0 + u * ATTN_WARPS;
            if (kk >= nk) break; /* warp-uniform */
            if (ko[u] < 0) {     /* warp-uniform */
                if (lane == 0) *bad = 1;
                for (int g = lane; g < G; g += 32)
                    ps[g * ATTN_TILE + kk] = -INFINITY;
                if (lane == 0) voff[kk] = -1;
                continue;
            }
            float kf[SL * 8];
#pragma unroll
            for (int c = 0; c < SL; c++)
                cvt8<FP8>(kr[u][c], kf + c * 8);
#pragma unroll
            for (int g = 0; g < G; g++) {
                float sum = 0.0f;
#pragma unroll
                for (int c = 0; c < SL; c++) {
                    const float4 *q4 =
                        reinterpret_cast<const float4 *>(qs + g * D + c * 256 + lane * 8);
                    const float *k8 = kf + c * 8;
                    float4 qa = q4[0], qb = q4[1];
                    sum += qa.x * k8[0] + qa.y * k8[1] + qa.z * k8[2] + qa.w * k8[3] +
                           qb.x * k8[4] + qb.y * k8[5] + qb.z * k8[6] + qb.w * k8[7];
                }
#pragma unroll
                for (int m = 16; m > 0; m >>= 1)
                    sum += __shfl_xor_sync(0xffffffffu, sum, m);
                if (lane == 0) ps[g * ATTN_TILE + kk] = k_round_bf16(sum);
            }
            if (lane == 0) voff[kk] = kv_view_offset(&a.kv, seq, t0 + kk, a.kv_layer, 1, kvh);
        }
    }
}

/* The scores of one tile into ps[g][kk] (-inf for an unmapped key, with *bad set) and the V
 * offsets into voff. A warp takes four keys at a time, one per group of 8 lanes: lane sub of a
 * group owns the dims (c * 8 + sub) * 8 .. + 8 of chunks c < D / 64 (so each load instruction
 * reads 128 bytes of bf16, 64 of e4m3, contiguous per key), sums them in chunk order, and three
 * shuffles within the group finish the dot product. One warp-wide butterfly per key and head
 * (five dependent shuffles, the whole warp on one key) made this pass latency-bound, far from
 * the DRAM bandwidth, and e4m3's half bytes ran no faster (ncu; see docs/perf-notes.md,
 * "Measurements behind the code", attention). KB such quads are in flight per warp: their
 * page-table reads, then their K loads, all issued before the first product, so a warp waits on one
 * memory latency per batch. The sum order is fixed by the head dim alone, the same for every row
 * and batch (batch invariance). */
/* q . k over one lane's 8 dims: q the group's fp32 queries at those dims (shared memory), k8 the
 * key's 8 elements as fp32. One expression for both score paths of the quad layout (registers,
 * attn_split_kernel; shared memory, attn_window_kernel), so they contract to the same FMAs. */
static __device__ __forceinline__ float dot8(const float *q, const float (&k8)[8]) {
    const float4 *q4 = reinterpret_cast<const float4 *>(q);
    const float4 qa = q4[0], qb = q4[1];
    return qa.x * k8[0] + qa.y * k8[1] + qa.z * k8[2] + qa.w * k8[3] + qb.x * k8[4] + qb.y * k8[5] +
           qb.z * k8[6] + qb.w * k8[7];
}

/* A batch of the quad layout's keys in flight: KB quads per warp, their K offsets and loads. */
template <int D, bool FP8> struct quad_batch {
    static constexpr int CH = D / 64; /* 8-dim chunks per lane */
    static constexpr int QUAD = 4;    /* keys per warp step, one per 8-lane group */
    /* quads in flight per warp: K's registers (KB x CH x 4 or 2), sized so that no
     * instantiation spills (-Xptxas -warn-spills); e4m3 holds twice the keys for the same */
    static constexpr int KB = (CH == 4 ? 2 : 1) * (FP8 ? 2 : 1);
    static constexpr int STEP = ATTN_WARPS * QUAD; /* keys the block's warps take per quad */
    long long ko[KB];
    raw8<FP8> kr[KB][CH];
};

/* Issues the batch of keys [b0, b0 + STEP x KB) of the tile at t0 (nk keys): the page-table
 * reads, then the K loads. Nothing waits on them until quad_score uses the registers, so a
 * caller can issue a batch before other work (the queries' load, the previous tile's softmax). */
template <int D, bool FP8>
static __device__ __forceinline__ void quad_issue(const k_attention_args &a, int seq, int kvh,
                                                  int t0, int nk, int b0, quad_batch<D, FP8> &kb) {
    using QB = quad_batch<D, FP8>;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int grp = lane >> 3, sub = lane & 7;
#pragma unroll
    for (int u = 0; u < QB::KB; u++) {
        const int kk = b0 + u * QB::STEP + warp * QB::QUAD + grp;
        kb.ko[u] = kk < nk ? kv_view_offset(&a.kv, seq, t0 + kk, a.kv_layer, 0, kvh) : -1;
    }
#pragma unroll
    for (int u = 0; u < QB::KB; u++)
#pragma unroll
        for (int c = 0; c < QB::CH; c++)
            if (kb.ko[u] >= 0) /* uniform in the 8-lane group */
                kb.kr[u][c] = load_raw8<FP8>(a.kv.base, kb.ko[u] + (c * 8 + sub) * 8);
}

/* The scores of an issued batch into ps and its V offsets into voff (see tile_scores_quad). */
template <int D, int G, bool FP8>
static __device__ __forceinline__ void
quad_score(const k_attention_args &a, int seq, int kvh, int t0, int nk, int b0,
           const quad_batch<D, FP8> &kb, const float *qs, float *ps, long long *voff, int *bad) {
    using QB = quad_batch<D, FP8>;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int grp = lane >> 3, sub = lane & 7;
    float sum[QB::KB][G];
#pragma unroll
    for (int u = 0; u < QB::KB; u++)
#pragma unroll
        for (int g = 0; g < G; g++)
            sum[u][g] = 0.0f;
#pragma unroll
    for (int c = 0; c < QB::CH; c++)
#pragma unroll
        for (int u = 0; u < QB::KB; u++) {
            if (kb.ko[u] < 0) continue; /* its sums stay 0 and are not written */
            float k8[8];
            cvt8<FP8>(kb.kr[u][c], k8);
#pragma unroll
            for (int g = 0; g < G; g++)
                sum[u][g] += dot8(qs + g * D + (c * 8 + sub) * 8, k8);
        }
        /* the group's partial sums: every lane takes part (the mask is the whole warp) */
#pragma unroll
    for (int u = 0; u < QB::KB; u++)
#pragma unroll
        for (int g = 0; g < G; g++)
#pragma unroll
            for (int m = 4; m > 0; m >>= 1)
                sum[u][g] += __shfl_xor_sync(0xffffffffu, sum[u][g], m);
#pragma unroll
    for (int u = 0; u < QB::KB; u++) {
        const int kk = b0 + u * QB::STEP + warp * QB::QUAD + grp;
        if (sub != 0 || kk >= nk) continue;
        if (kb.ko[u] < 0) { /* an unmapped key */
            *bad = 1;
#pragma unroll
            for (int g = 0; g < G; g++)
                ps[g * ATTN_TILE + kk] = -INFINITY;
            voff[kk] = -1;
            continue;
        }
#pragma unroll
        for (int g = 0; g < G; g++)
            ps[g * ATTN_TILE + kk] = k_round_bf16(sum[u][g]);
        voff[kk] = kv_view_offset(&a.kv, seq, t0 + kk, a.kv_layer, 1, kvh);
    }
}

/* One tile's scores in the quad layout; kb holds the tile's first batch, already issued (the
 * kernel issues it ahead of other work), and is free when this returns. */
template <int D, int G, bool FP8>
static __device__ __forceinline__ void
tile_scores_quad(const k_attention_args &a, int seq, int kvh, int t0, int nk, const float *qs,
                 float *ps, long long *voff, int *bad, quad_batch<D, FP8> &kb) {
    using QB = quad_batch<D, FP8>;
    for (int b0 = 0; b0 < nk; b0 += QB::STEP * QB::KB) { /* warp-uniform */
        if (b0 > 0) quad_issue<D, FP8>(a, seq, kvh, t0, nk, b0, kb);
        quad_score<D, G, FP8>(a, seq, kvh, t0, nk, b0, kb, qs, ps, voff, bad);
    }
}

/* The quad layout where its sums fit beside the P.V accumulators (G x D up to 1024), else the
 * butterfly. Both fix their sum order by G and D alone (batch invariance). */
template <int D, int G> __host__ __device__ constexpr bool quad_scores() { return G * D <= 1024; }

/* P.V of one tile with the keys split across warps, for head dim 256: warp w takes keys w,
 * w + 4, ..., each lane 8 dims of V (one 16-byte bf16 or 8-byte e4m3
 * load), a batch of KBV keys' loads in flight before the first product. The per-thread layout
 * loads 2 elements a key in a loop over the tile and waits on every load's latency; this one
 * waits once a batch, so halving the bytes (e4m3) shows in the time. acc[g][t] sums dim
 * lane * 8 + t of head g over the warp's keys in key order, tile after tile; the kernel adds the
 * warps' sums in warp order, so the order is fixed by the row's own keys (batch invariance). */
template <int G, bool FP8> struct v_batch {
    /* keys in flight per warp: no spills with G x 8 accumulators beside */
    static constexpr int KBV = (G <= 2 ? 8 : 4) * (FP8 ? 2 : 1);
    long long vo[KBV];
    raw8<FP8> vr[KBV];
};

/* Issues the V loads of the warp's batch starting at key b0 of the tile at t0 (nk keys): the
 * page-table reads, then one load per lane and key. An unmapped key or one past the tile gets
 * offset -1 and no load. */
template <int G, bool FP8>
static __device__ __forceinline__ void pv_issue(const k_attention_args &a, int seq, int kvh, int t0,
                                                int nk, int b0, v_batch<G, FP8> &vb) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int u = 0; u < v_batch<G, FP8>::KBV; u++) {
        const int kk = b0 + u * ATTN_WARPS;
        vb.vo[u] = kk < nk ? kv_view_offset(&a.kv, seq, t0 + kk, a.kv_layer, 1, kvh) : -1;
    }
#pragma unroll
    for (int u = 0; u < v_batch<G, FP8>::KBV; u++)
        if (vb.vo[u] >= 0) /* warp-uniform */
            vb.vr[u] = load_raw8<FP8>(a.kv.base, vb.vo[u] + lane * 8);
}

/* One tile's P.V; vb holds the warp's first batch (keys warp, warp + 4, ...), already issued,
 * and is free when this returns. */
template <int G, bool FP8>
static __device__ __forceinline__ void pv_warp_keys(const k_attention_args &a, int seq, int kvh,
                                                    int t0, int nk, const float *ps,
                                                    v_batch<G, FP8> &vb, float (&acc)[G][8]) {
    constexpr int KBV = v_batch<G, FP8>::KBV;
    const int warp = threadIdx.x >> 5;
    for (int b0 = warp; b0 < nk; b0 += ATTN_WARPS * KBV) {
        if (b0 > warp) pv_issue<G, FP8>(a, seq, kvh, t0, nk, b0, vb);
#pragma unroll
        for (int u = 0; u < KBV; u++) {
            if (vb.vo[u] < 0) continue; /* past the tile or an unmapped key: warp-uniform */
            const int kk = b0 + u * ATTN_WARPS;
            float vf[8];
            cvt8<FP8>(vb.vr[u], vf);
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float p = ps[g * ATTN_TILE + kk];
#pragma unroll
                for (int t = 0; t < 8; t++)
                    acc[g][t] += p * vf[t];
            }
        }
    }
}

/* The end of a split in the kept-score P.V pass (pv_warp_keys): the four warps' sums added in
 * warp order into part[g][split] (part at the row and KV head's first partial), through
 * red[w][g][d] over the whole of smem (the host sizes it for this; the caller's barrier has
 * freed ps), and the accumulators zeroed for the block's next split. The caller puts a barrier
 * after it before smem is written again. */
template <int D, int G>
static __device__ __forceinline__ void warp_pv_store(float *smem, float (&acc)[G][8], float *part,
                                                     int max_split, int split) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    float *red = smem;
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int t = 0; t < 8; t++) {
            red[((size_t)warp * G + g) * D + lane * 8 + t] = acc[g][t];
            acc[g][t] = 0.0f;
        }
    __syncthreads();
    for (int e = tid; e < G * D; e += ATTN_THREADS) {
        const int g = e / D, d = e % D;
        float sum = red[e];
#pragma unroll
        for (int w = 1; w < ATTN_WARPS; w++)
            sum += red[(size_t)w * G * D + e];
        part[((size_t)g * max_split + split) * D + d] = sum;
    }
}

/* A tile's scores into the row's kept scores (windowed layers), key kk of head g at
 * keep_row[g * window + off + kk], so the P.V pass reads them instead of loading K again. */
template <int G>
static __device__ __forceinline__ void keep_scores(float *keep_row, int window, int off,
                                                   const float *ps, int nk, int tid) {
    for (int e = tid; e < G * ATTN_TILE; e += ATTN_THREADS) {
        const int g = e / ATTN_TILE, kk = e % ATTN_TILE;
        if (kk < nk) keep_row[(size_t)g * window + off + kk] = ps[e];
    }
}

/* The online max and sum over a tile's nk scores ps[G][ATTN_TILE], one warp per head: each
 * head's running (m_run, l_run) rescaled to the new max and the tile's exp-sum added. */
template <int G>
static __device__ __forceinline__ void tile_stats(const float *ps, int nk, float *m_run,
                                                  float *l_run, int warp, int lane) {
    for (int g = warp; g < G; g += ATTN_WARPS) {
        float s0 = lane < nk ? ps[g * ATTN_TILE + lane] : -INFINITY;
        float s1 = lane + 32 < nk ? ps[g * ATTN_TILE + lane + 32] : -INFINITY;
        float mt = fmaxf(s0, s1);
#pragma unroll
        for (int m = 16; m > 0; m >>= 1)
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, m));
        const float m_old = m_run[g], m_new = fmaxf(m_old, mt);
        float sum =
            (lane < nk ? expf(s0 - m_new) : 0.0f) + (lane + 32 < nk ? expf(s1 - m_new) : 0.0f);
#pragma unroll
        for (int m = 16; m > 0; m >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, m);
        __syncwarp(); /* every lane has read m_run[g] before lane 0 rewrites it */
        if (lane == 0) {
            l_run[g] = (m_old == -INFINITY ? 0.0f : l_run[g] * expf(m_old - m_new)) + sum;
            m_run[g] = m_new;
        }
    }
}

/* Row r's queries of KV head kvh's group, qs[g][d] as fp32, by the block's threads. */
template <int D, int G>
static __device__ __forceinline__ void load_queries(const k_attention_args &a, int r, int kvh,
                                                    float *qs, int tid) {
    for (int e = tid; e < G * D; e += ATTN_THREADS) {
        const int g = e / D, d = e % D;
        qs[e] = k_bf16_to_f32(a.q[((size_t)r * a.n_head + (size_t)kvh * G + g) * D + d]);
    }
}

/* A head's (max, sum) at the start of a pass. P.V: the row's, over its n_split splits'
 * statistics st[] merged in split order, the same in every block. Stats: none yet (-inf, 0). */
template <bool PV>
static __device__ __forceinline__ float2 start_stats(const float2 *st, int n_split) {
    float m = -INFINITY, l = 0.0f;
    if (PV) {
        for (int t = 0; t < n_split; t++)
            m = fmaxf(m, st[t].x);
        for (int t = 0; t < n_split; t++)
            l += st[t].y * expf(st[t].x - m);
    }
    return make_float2(m, l);
}

/* PV = false: the stats pass, writes ml[rl][h][split] = (max, sum of exp(s - max)), the sum NaN
 * when a key was unmapped. PV = true: the P.V pass, writes part[rl][h][split][D]. rl is the row
 * within this launch's chunk (the scratch holds one chunk), row0 + rl the row of the step.
 * KEEP (windowed layers, whose keys per row are at most the window W): the stats pass also
 * writes each score to keep[rl][h][key - j0] (W floats per head), and the P.V pass reads them
 * back instead of loading K again: K read once, the same scores bit for bit. */
template <int D, int G, bool FP8, bool PV, bool KEEP>
static __global__ void __launch_bounds__(ATTN_THREADS, ATTN_MIN_BLOCKS(G, D))
    attn_split_kernel(k_attention_args a, int row0, int max_split, int spb, float *part, float2 *ml,
                      float *keep) {
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
    if (tid < G) {
        const float2 st = start_stats<PV>(ml + base + (size_t)tid * max_split, sp.n_split);
        m_run[tid] = st.x;
        l_run[tid] = st.y;
    }
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
                if (e < G * ATTN_TILE && kk < nk)
                    ps[e] = k_round_bf16(expf(kp[k] - m_run[g]) / l_run[g]);
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
            tile_scores_butterfly<D, G, FP8>(a, seq, kvh, t0, nk, qs, ps, voff, split_bad);
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
                if (kk < nk) ps[e] = k_round_bf16(expf(ps[e] - m_run[g]) / l_run[g]);
            }
            __syncthreads();
#pragma unroll 4
            for (int kk = 0; kk < nk; kk++) {
                long long vo = voff[kk];
                if (vo < 0) continue; /* block-uniform */
                float v[DPT];
                load_n<FP8, DPT>(a.kv.base, vo + tid * DPT, v);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const float p = ps[g * ATTN_TILE + kk];
#pragma unroll
                    for (int t = 0; t < DPT; t++)
                        acc[g][t] += p * v[t];
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
}

/* One block per (query head, row): out = k_round_bf16(sum of the row's partials in split order);
 * NaN for a row without keys, past the grid, or with an unmapped key (a NaN sum in any split). */
template <int D>
static __global__ void __launch_bounds__(ATTN_THREADS)
    attn_combine_kernel(k_attention_args a, int row0, int max_split, const float *part,
                        const float2 *ml) {
    constexpr int DPT = D / ATTN_THREADS;
    const int h = blockIdx.x, rl = blockIdx.y, r = row0 + rl, tid = threadIdx.x;
    const int i = a.pos[r];
    const split_plan sp = plan_split(i, a.window);
    bf16_t *out = a.out + ((size_t)r * a.n_head + h) * D + tid * DPT;
    const size_t base = ((size_t)rl * a.n_head + h) * max_split;
    bool nan = i < 0 || sp.n_split > max_split;
    for (int s = 0; !nan && s < sp.n_split; s++)
        nan = isnan(ml[base + s].y);
    float o[DPT];
#pragma unroll
    for (int t = 0; t < DPT; t++)
        o[t] = 0.0f;
    for (int s = 0; !nan && s < sp.n_split; s++) {
        const float *src = part + (base + s) * D + tid * DPT;
#pragma unroll
        for (int t = 0; t < DPT; t++)
            o[t] += src[t];
    }
#pragma unroll
    for (int t = 0; t < DPT; t++)
        out[t] = nan ? (bf16_t)BF16_NAN : k_f32_to_bf16(o[t]);
}

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

static __device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
static __device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
static __device__ __forceinline__ void cp_async_wait_one() { /* all but the newest group */
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

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
                       float2 *ml, float *keep) {
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
    if (tid < G) {
        const float2 st = start_stats<PV>(ml + base + (size_t)tid * max_split, sp.n_split);
        m_run[tid] = st.x;
        l_run[tid] = st.y;
    }
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
                if (e < G * ATTN_TILE && kk < nk)
                    ps[e] = k_round_bf16(expf(kp[k] - m_run[g]) / l_run[g]);
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
}

/* ---- launchers ---- */

/* bf16 (2) and e4m3 (1) stores have kernels; anything else is refused. */
static int kv_dtype_check(const k_kv_view *kv) {
    return kv->elem_bytes == 2 || kv->elem_bytes == 1 ? K_OK : K_ERR_DTYPE;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The view's shape as both ops need it (tables and base only when they are read). */
static bool kv_shape_ok(const k_kv_view *kv, int kv_layer) {
    return (kv->head_dim == 256 || kv->head_dim == 512) && kv->n_kv_head > 0 &&
           kv->page_tokens > 0 && kv->n_layer > 0 && kv_layer >= 0 && kv_layer < kv->n_layer &&
           kv->max_pages > 0 && kv->tables && kv->base && aligned16(kv->base);
}

extern "C" int k_attn_prep(const k_attn_prep_args *a, g4_stream st) {
    int rc = kv_dtype_check(&a->kv);
    if (rc) return rc;
    int d = a->kv.head_dim;
    if ((d != 256 && d != 512) || a->rows < 0 || a->n_head <= 0 || a->kv.n_kv_head <= 0 ||
        a->n_rot < 0 || a->n_rot > d / 2 || !a->q || !a->pos)
        return K_ERR_SHAPE;
    if (a->write_kv && (!kv_shape_ok(&a->kv, a->kv_layer) || !a->k_raw || !a->v_raw || !a->seq))
        return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    int heads = a->n_head + (a->write_kv ? 2 * a->kv.n_kv_head : 0);
    if (heads > 65535) return K_ERR_SHAPE;
    dim3 grid((unsigned)a->rows, (unsigned)heads);
    cudaStream_t s = (cudaStream_t)st;
    bool fp8 = a->write_kv && a->kv.elem_bytes == 1;
    if (d == 256 && fp8)
        attn_prep_kernel<256, true><<<grid, 128, 0, s>>>(*a);
    else if (d == 256)
        attn_prep_kernel<256, false><<<grid, 128, 0, s>>>(*a);
    else if (fp8)
        attn_prep_kernel<512, true><<<grid, 256, 0, s>>>(*a);
    else
        attn_prep_kernel<512, false><<<grid, 256, 0, s>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* The window kernels' shared memory exceeds the default 48 KB: raised once per instantiation,
 * before its first launch (plain launches at load precede any graph capture). */
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

/* The stats and P.V passes of one (KEEP or not) instantiation. The kept-score P.V pass of a
 * small group sums its warps' partials in shared memory (pv_warp_keys), which sizes it; in the
 * e4m3 pool the windowed layers of head dim 256 and small groups run the window kernels instead. */
template <int D, int G, bool FP8, bool KEEP>
static int launch_passes(const k_attention_args *a, dim3 grid, int max_split, int spb, float *part,
                         float2 *ml, float *keep, int row0, cudaStream_t s) {
    if constexpr (KEEP && FP8 && D == 256 && G <= ATTN_WARP_PV_MAX_G) { /* tiles in shared memory */
        int rc = win_smem_allow<G, FP8, false>();
        if (rc == K_OK) rc = win_smem_allow<G, FP8, true>();
        if (rc != K_OK) return rc;
        attn_window_kernel<G, FP8, false>
            <<<grid, ATTN_THREADS, win_smem_bytes<G, FP8, false>(), s>>>(*a, row0, max_split, spb,
                                                                         part, ml, keep);
        CUDA_CHECK(cudaGetLastError());
        attn_window_kernel<G, FP8, true><<<grid, ATTN_THREADS, win_smem_bytes<G, FP8, true>(), s>>>(
            *a, row0, max_split, spb, part, ml, keep);
        CUDA_CHECK(cudaGetLastError());
        return K_OK;
    }
    const size_t smem = (size_t)G * (D + ATTN_TILE) * sizeof(float);
    size_t pv_smem = smem;
    if constexpr (KEEP && D == 256 && G <= ATTN_WARP_PV_MAX_G)
        pv_smem = (size_t)ATTN_WARPS * G * D * sizeof(float);
    attn_split_kernel<D, G, FP8, false, KEEP>
        <<<grid, ATTN_THREADS, smem, s>>>(*a, row0, max_split, spb, part, ml, keep);
    CUDA_CHECK(cudaGetLastError());
    attn_split_kernel<D, G, FP8, true, KEEP>
        <<<grid, ATTN_THREADS, pv_smem, s>>>(*a, row0, max_split, spb, part, ml, keep);
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
    int spb = 1;
    while (spb * 2 <= ATTN_MAX_SPB && spb * 2 <= max_split &&
           pairs * ((max_split + spb * 2 - 1) / (spb * 2)) * 10 >= (long long)slots * 9)
        spb *= 2;
    return spb;
}

template <int D, int G, bool FP8>
static int launch_group(const k_attention_args *a, int max_split, float *part, float2 *ml,
                        float *keep, int row0, int nr, cudaStream_t s) {
    const int spb = a->splits_per_block > 0
                        ? a->splits_per_block
                        : attn_splits_per_block(max_split, (long long)nr * a->kv.n_kv_head);
    dim3 grid((unsigned)((max_split + spb - 1) / spb), (unsigned)a->kv.n_kv_head, (unsigned)nr);
    int rc;
    if constexpr (D == 256) /* the windowed families keep their scores between the passes */
        rc = keep ? launch_passes<D, G, FP8, true>(a, grid, max_split, spb, part, ml, keep, row0, s)
                  : launch_passes<D, G, FP8, false>(a, grid, max_split, spb, part, ml, NULL, row0,
                                                    s);
    else
        rc = launch_passes<D, G, FP8, false>(a, grid, max_split, spb, part, ml, NULL, row0, s);
    if (rc != K_OK) return rc;
    attn_combine_kernel<D><<<dim3((unsigned)a->n_head, (unsigned)nr), ATTN_THREADS, 0, s>>>(
        *a, row0, max_split, part, ml);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

template <int D, bool FP8>
static int launch_attention(const k_attention_args *a, int group, int max_split, float *part,
                            float2 *ml, float *keep, int row0, int nr, cudaStream_t s) {
    switch (group) {
    case 1:
        return launch_group<D, 1, FP8>(a, max_split, part, ml, keep, row0, nr, s);
    case 2:
        return launch_group<D, 2, FP8>(a, max_split, part, ml, keep, row0, nr, s);
    case 4:
        return launch_group<D, 4, FP8>(a, max_split, part, ml, keep, row0, nr, s);
    case 8:
        return launch_group<D, 8, FP8>(a, max_split, part, ml, keep, row0, nr, s);
    default:
        return launch_group<D, 16, FP8>(a, max_split, part, ml, keep, row0, nr, s);
    }
}

/* The most k_attention asks of its scratch: row chunks keep the partials under
 * ATTN_SCRATCH_MAX, and one row's partials (32 heads x 32 splits x 514 floats) are far below. */
extern "C" size_t k_attention_workspace(void) { return ATTN_SCRATCH_MAX; }

/* Every window kernel's shared-memory limit raised at start-up (k_workspace_reserve), so no
 * first launch of one happens inside a CUDA graph capture with the attribute still unset. Only
 * the e4m3 pool runs them (launch_passes says why). */
extern "C" int k_attention_setup(void) {
    static_assert(ATTN_WARP_PV_MAX_G == 4, "the window kernels are the groups 1, 2 and 4");
    int rc = K_OK;
    if (rc == K_OK) rc = win_smem_allow<1, true, false>();
    if (rc == K_OK) rc = win_smem_allow<1, true, true>();
    if (rc == K_OK) rc = win_smem_allow<2, true, false>();
    if (rc == K_OK) rc = win_smem_allow<2, true, true>();
    if (rc == K_OK) rc = win_smem_allow<4, true, false>();
    if (rc == K_OK) rc = win_smem_allow<4, true, true>();
    return rc;
}

extern "C" int k_attention(const k_attention_args *a, g4_stream st) {
    int rc = kv_dtype_check(&a->kv);
    if (rc) return rc;
    if (!kv_shape_ok(&a->kv, a->kv_layer) || a->rows < 0 || a->n_head <= 0 ||
        a->n_head % a->kv.n_kv_head || a->window < 0 || a->max_pos < 0 || a->splits_per_block < 0 ||
        a->splits_per_block > ATTN_MAX_SPB || !a->out || !a->q || !a->pos || !a->seq ||
        !aligned16(a->q))
        return K_ERR_SHAPE;
    int group = a->n_head / a->kv.n_kv_head;
    if (group != 1 && group != 2 && group != 4 && group != 8 && group != 16) return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
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
    cudaStream_t s = (cudaStream_t)st;
    void *ws = NULL;
    rc = k_scratch(K_SCRATCH_ATTN, per_row * (size_t)chunk, s, &ws);
    if (rc) return rc;
    float *part = (float *)ws;
    float2 *ml = (float2 *)(part + (size_t)chunk * a->n_head * max_split * d);
    float *kept = keep ? (float *)(ml + (size_t)chunk * a->n_head * max_split) : NULL;
    bool fp8 = a->kv.elem_bytes == 1;
    for (int row0 = 0; row0 < a->rows && rc == K_OK; row0 += chunk) {
        int nr = a->rows - row0 < chunk ? a->rows - row0 : chunk;
        if (d == 256)
            rc = fp8 ? launch_attention<256, true>(a, group, max_split, part, ml, kept, row0, nr, s)
                     : launch_attention<256, false>(a, group, max_split, part, ml, kept, row0, nr,
                                                    s);
        else
            rc = fp8 ? launch_attention<512, true>(a, group, max_split, part, ml, kept, row0, nr, s)
                     : launch_attention<512, false>(a, group, max_split, part, ml, kept, row0, nr,
                                                    s);
    }
    return rc;
}
