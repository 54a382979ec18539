/* kernels/attn_common.cuh - what the attention family's files share: the split plan (a row's
 * keys cut into tiles and splits by its own length), the loads that turn bf16 or e4m3 K/V into
 * fp32, the score and softmax helpers both attention kernels use, the launch checks of a KV
 * view, and the window kernels' entry for attn.cu's launcher.
 *
 * Owns: nothing with state. Does not own: the kernels (attn_prep.cu: the per-family prep;
 * attn.cu: split-KV attention, its combine and the launcher; attn_window.cu: the windowed
 * layers' shared-memory kernels). Every function here is inlined into its caller, so a kernel's
 * code is the same whichever file launches it. */
#ifndef G4_ATTN_COMMON_CUH
#define G4_ATTN_COMMON_CUH

#include "kernels/cp_async.cuh"
#include "kernels/bf16.cuh"
#include "kernels/common.cuh"
#include "kernels/kv_offset.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>

/* fp32 rounded through bf16 by the conversion instruction (cvt.rn.bf16.f32): round to nearest
 * even as k_round_bf16, in about a third of its instructions. The two part only on a NaN input
 * (k_round_bf16 keeps its sign and upper payload, the instruction gives 0x7fff), so for a value
 * that an fp32 add or multiply produced they give the same bits: the GPU's fp32 arithmetic
 * yields the one canonical NaN (0x7fffffff), which both take to 0x7fff. */
static __device__ __forceinline__ float attn_round_bf16(float f) {
    return __bfloat162float(__float2bfloat16_rn(f));
}
/* The same as stored bits: k_f32_to_bf16's for such a value. */
static __device__ __forceinline__ uint16_t attn_f32_to_bf16(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

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

/* N (2 or 4) consecutive KV elements as loaded (2N bytes of bf16, N of e4m3), converted to
 * fp32 only at use (cvt_n), so that a batch of keys in flight costs a register or two a key. */
template <bool FP8, int N> struct raw_n { uint32_t w[FP8 ? 1 : N / 2]; };

/* Element offset o of the store. */
template <bool FP8, int N>
static __device__ __forceinline__ raw_n<FP8, N> load_raw_n(const void *base, long long o) {
    raw_n<FP8, N> r;
    if constexpr (FP8) {
        const uint8_t *p = (const uint8_t *)base + o;
        r.w[0] = N == 4 ? *reinterpret_cast<const uint32_t *>(p)
                        : (uint32_t) * reinterpret_cast<const uint16_t *>(p);
    } else {
        const bf16_t *p = (const bf16_t *)base + o;
        if constexpr (N == 4) {
            uint2 u = *reinterpret_cast<const uint2 *>(p);
            r.w[0] = u.x;
            r.w[1] = u.y;
        } else {
            r.w[0] = *reinterpret_cast<const uint32_t *>(p);
        }
    }
    return r;
}

template <bool FP8, int N>
static __device__ __forceinline__ void cvt_n(const raw_n<FP8, N> &r, float *x) {
    if constexpr (FP8) {
#pragma unroll
        for (int h = 0; h < N / 2; h++) {
            __half2_raw c = __nv_cvt_fp8x2_to_halfraw2(
                (__nv_fp8x2_storage_t)((r.w[0] >> (16 * h)) & 0xffffu), __NV_E4M3);
            float2 f = __half22float2(*reinterpret_cast<__half2 *>(&c));
            x[2 * h] = f.x;
            x[2 * h + 1] = f.y;
        }
    } else {
#pragma unroll
        for (int k = 0; k < N / 2; k++) {
            x[2 * k] = __uint_as_float(r.w[k] << 16);
            x[2 * k + 1] = __uint_as_float(r.w[k] & 0xffff0000u);
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
template <int D, int G, bool FP8, int HG>
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
            /* V's offset from K's, no second page-table read (-1 for an unmapped key) */
            if (lane == 0 && kk < nk) voff[kk] = kv_v_of_k(&a.kv, ko[u]);
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
                continue; /* voff[kk] is -1 already */
            }
            float kf[SL * 8];
#pragma unroll
            for (int c = 0; c < SL; c++)
                cvt8<FP8>(kr[u][c], kf + c * 8);
            /* HG heads at a time (a divisor of G): their lane sums first, then their
             * butterflies a level at a time across them, then lane 0's stores. Each head's sum
             * is the same expression in the same order, but HG shuffle chains are in flight
             * together instead of one after another (a store between heads kept them apart).
             * The P.V pass, whose accumulators are live here, takes one head at a time: more
             * spilled (-Xptxas -warn-spills) */
            static_assert(G % HG == 0, "whole groups of heads");
#pragma unroll
            for (int g0 = 0; g0 < G; g0 += HG) {
                float sum[HG];
#pragma unroll
                for (int h = 0; h < HG; h++) {
                    sum[h] = 0.0f;
#pragma unroll
                    for (int c = 0; c < SL; c++) {
                        const float4 *q4 = reinterpret_cast<const float4 *>(qs + (g0 + h) * D +
                                                                            c * 256 + lane * 8);
                        const float *k8 = kf + c * 8;
                        float4 qa = q4[0], qb = q4[1];
                        sum[h] += qa.x * k8[0] + qa.y * k8[1] + qa.z * k8[2] + qa.w * k8[3] +
                                  qb.x * k8[4] + qb.y * k8[5] + qb.z * k8[6] + qb.w * k8[7];
                    }
                }
#pragma unroll
                for (int m = 16; m > 0; m >>= 1)
#pragma unroll
                    for (int h = 0; h < HG; h++)
                        sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], m);
                if (lane == 0)
#pragma unroll
                    for (int h = 0; h < HG; h++)
                        ps[(g0 + h) * ATTN_TILE + kk] = k_round_bf16(sum[h]);
            }
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
        voff[kk] = kv_v_of_k(&a.kv, kb.ko[u]); /* no second page-table read */
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
template <int G, int NT = ATTN_THREADS> /* NT: the block's threads */
static __device__ __forceinline__ void keep_scores(float *keep_row, int window, int off,
                                                   const float *ps, int nk, int tid) {
    for (int e = tid; e < G * ATTN_TILE; e += NT) {
        const int g = e / ATTN_TILE, kk = e % ATTN_TILE;
        if (kk < nk) keep_row[(size_t)g * window + off + kk] = ps[e];
    }
}

/* The online max and sum over a tile's scores ps[m][ATTN_TILE] for rows m < mv, one warp per
 * row: each row's running (m_run, l_run) rescaled to the new max and the tile's exp-sum added,
 * row m's keys the first nk_of(m) of the tile (keys past them count nothing; a row with none
 * keeps its (max, sum) as they were). */
template <int M, int NW = ATTN_WARPS, typename NK>
static __device__ __forceinline__ void
tile_stats_rows(const float *ps, int mv, NK nk_of, float *m_run, float *l_run, int warp, int lane) {
    for (int g = warp; g < mv; g += NW) { /* NW: the block's warps */
        const int nk = nk_of(g);
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

/* tile_stats_rows with a warp's rows (warp, warp + ATTN_WARPS, ...) side by side: each step of
 * each row's reduction issued for all of them before the next. Row after row,
 * a query tile's 16 rows were 4 chains of ~10 dependent shuffles and 3 expf a warp, the longest
 * path of the query tiles' stats pass (docs/perf-notes.md). Each row's arithmetic and its order
 * are tile_stats_rows', so the same bits (serve.attn_stats_together). */
template <int M, int NW = ATTN_WARPS, typename NK>
static __device__ __forceinline__ void tile_stats_rows_together(const float *ps, int mv, NK nk_of,
                                                                float *m_run, float *l_run,
                                                                int warp, int lane) {
    constexpr int RPW = (M + NW - 1) / NW; /* rows a warp, at most (NW: the block's warps) */
    int nk[RPW];
    float s0[RPW], s1[RPW], mt[RPW], m_old[RPW], m_new[RPW], sum[RPW];
#pragma unroll
    for (int j = 0; j < RPW; j++) {
        const int g = warp + j * NW;
        nk[j] = g < mv ? nk_of(g) : 0; /* a row past mv: no keys, and nothing stored */
        s0[j] = lane < nk[j] ? ps[g * ATTN_TILE + lane] : -INFINITY;
        s1[j] = lane + 32 < nk[j] ? ps[g * ATTN_TILE + lane + 32] : -INFINITY;
        mt[j] = fmaxf(s0[j], s1[j]);
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
#pragma unroll
        for (int j = 0; j < RPW; j++)
            mt[j] = fmaxf(mt[j], __shfl_xor_sync(0xffffffffu, mt[j], m));
#pragma unroll
    for (int j = 0; j < RPW; j++) {
        const int g = warp + j * NW;
        m_old[j] = g < mv ? m_run[g] : -INFINITY;
        m_new[j] = fmaxf(m_old[j], mt[j]);
        sum[j] = (lane < nk[j] ? expf(s0[j] - m_new[j]) : 0.0f) +
                 (lane + 32 < nk[j] ? expf(s1[j] - m_new[j]) : 0.0f);
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
#pragma unroll
        for (int j = 0; j < RPW; j++)
            sum[j] += __shfl_xor_sync(0xffffffffu, sum[j], m);
    __syncwarp(); /* every lane has read its rows' m_run before lane 0 rewrites them */
    if (lane == 0) {
#pragma unroll
        for (int j = 0; j < RPW; j++) {
            const int g = warp + j * NW;
            if (g < mv) {
                l_run[g] =
                    (m_old[j] == -INFINITY ? 0.0f : l_run[g] * expf(m_old[j] - m_new[j])) + sum[j];
                m_run[g] = m_new[j];
            }
        }
    }
}

/* The online max and sum over a tile's nk scores ps[G][ATTN_TILE], one warp per head (every head
 * the tile's nk keys). */
template <int G>
static __device__ __forceinline__ void tile_stats(const float *ps, int nk, float *m_run,
                                                  float *l_run, int warp, int lane) {
    tile_stats_rows<G>(
        ps, G, [nk](int) { return nk; }, m_run, l_run, warp, lane);
}

/* A key's softmax weight as the reference rounds it, p = k_round_bf16(exp(s - m) / l), from the
 * row's max m and sum l: one expression for every P.V path, so they round alike. */
static __device__ __forceinline__ float softmax_p(float s, float m, float l) {
    return k_round_bf16(expf(s - m) / l);
}

/* Row r's queries of KV head kvh's group, qs[g][d] as fp32, by the block's threads: 8 elements
 * a 16-byte load (k_attention checks q's alignment; D is a multiple of 8), every load of a
 * thread issued before its first store, so the block waits on one load latency rather than one
 * per few elements. The conversion is exact: the same values as element by element. */
template <int D, int G>
static __device__ __forceinline__ void load_queries(const k_attention_args &a, int r, int kvh,
                                                    float *qs, int tid) {
    constexpr int N8 = G * D / 8;                                         /* 16-byte pieces */
    constexpr int PER = (N8 + ATTN_THREADS - 1) / ATTN_THREADS;           /* pieces a thread */
    const bf16_t *q = a.q + ((size_t)r * a.n_head + (size_t)kvh * G) * D; /* the group's heads */
    uint4 w[PER];
#pragma unroll
    for (int k = 0; k < PER; k++) {
        const int e8 = tid + k * ATTN_THREADS;
        if (e8 < N8) w[k] = *reinterpret_cast<const uint4 *>(q + (size_t)e8 * 8);
    }
#pragma unroll
    for (int k = 0; k < PER; k++) {
        const int e8 = tid + k * ATTN_THREADS;
        if (e8 >= N8) continue;
        float x[8];
        cvt8<false>(raw8<false>{w[k]}, x);
        float4 *dst = reinterpret_cast<float4 *>(qs + (size_t)e8 * 8);
        dst[0] = make_float4(x[0], x[1], x[2], x[3]);
        dst[1] = make_float4(x[4], x[5], x[6], x[7]);
    }
}

/* Each head's (max, sum) at the start of a pass into m_run[g], l_run[g] (g < G). P.V: the row's,
 * head g's n_split splits' statistics ml[g * max_split + s] merged in split order, the same in
 * every block. Stats: none yet (-inf, 0). Called by every thread of the block (a barrier
 * inside); the caller's next barrier orders m_run and l_run before their use. The statistics
 * come in a load a thread, all in flight together, to shared memory, and thread g merges head
 * g's from there: a chain of loads per head (one latency per few splits) made most of a P.V
 * block's start. The same operations in the same order, so the same values. */
template <int G, bool PV, int NT = ATTN_THREADS> /* NT: the block's threads */
static __device__ __forceinline__ void start_stats_block(const float2 *ml, int max_split,
                                                         int n_split, float *m_run, float *l_run,
                                                         int tid) {
    if constexpr (PV) {
        /* n_split <= max_split <= ATTN_MAX_SPLIT. Static shared memory beside the launch's
         * dynamic part: with the split kernel's largest (G 16 at head dim 512, 36 KB) it must
         * stay under the 48 KB a launch gets without opting in */
        static_assert(G * ATTN_MAX_SPLIT * sizeof(float2) <= 4096, "see the launchers' smem");
        __shared__ float2 st[G * ATTN_MAX_SPLIT];
        for (int e = tid; e < G * n_split; e += NT) {
            const int g = e / n_split, s = e % n_split;
            st[g * ATTN_MAX_SPLIT + s] = ml[(size_t)g * max_split + s];
        }
        __syncthreads();
        if (tid < G) {
            const float2 *h = st + tid * ATTN_MAX_SPLIT;
            float m = -INFINITY, l = 0.0f;
            for (int t = 0; t < n_split; t++)
                m = fmaxf(m, h[t].x);
            for (int t = 0; t < n_split; t++)
                l += h[t].y * expf(h[t].x - m);
            m_run[tid] = m;
            l_run[tid] = l;
        }
    } else if (tid < G) {
        m_run[tid] = -INFINITY;
        l_run[tid] = 0.0f;
    }
}

/* ---- the combine, alone or folded into the P.V pass ---- */

#define BF16_NAN 0x7fc0u
/* (row, KV head) pairs a launch may fold its combine for: the done[] counters in attn.cu. A
 * decode step of up to 256 rows at 16 KV heads; larger launches (prefill chunks) keep the
 * combine's own launch, whose cost there is small beside the passes. */
#define ATTN_FOLD_MAX K_ATTN_FOLD_PAIRS
/* Outputs (G x D) one block sums when it folds the combine: groups past it (the global layers'
 * 8 heads of 512) keep the combine launch, whose blocks share that work a head each. Folding
 * 8 x 512 into one block was measured slower (docs/perf-notes.md, sixteenth session). */
#define ATTN_FOLD_HEAD_ELEMS K_ATTN_FOLD_HEAD_ELEMS
#define ATTN_COMBINE_BATCH 8 /* splits whose partials a thread has in flight at once */

/* An element pair's sum over n_split splits' partials, 0 + split 0 + split 1 + ... in split
 * order, with ATTN_COMBINE_BATCH of load(s)'s loads in flight at a time: the combine's sum
 * (combine_heads, partials in global memory). */
template <typename Load>
static __device__ __forceinline__ float2 sum_split_pairs(int n_split, Load load) {
    float2 o = make_float2(0.0f, 0.0f);
    for (int s0 = 0; s0 < n_split; s0 += ATTN_COMBINE_BATCH) {
        float2 x[ATTN_COMBINE_BATCH];
#pragma unroll
        for (int j = 0; j < ATTN_COMBINE_BATCH; j++)
            if (s0 + j < n_split) x[j] = load(s0 + j);
#pragma unroll
        for (int j = 0; j < ATTN_COMBINE_BATCH; j++)
            if (s0 + j < n_split) { /* no + 0.0f past the last: it would turn -0 into +0 */
                o.x += x[j].x;
                o.y += x[j].y;
            }
    }
    return o;
}

/* Heads h0 .. h0 + nh - 1 of row r (rl within the launch): out = k_round_bf16(each element's
 * partials added to 0.0f in split order), a head NaN when nan_row is set or any of its splits'
 * sums is NaN (an unmapped key). Called by every thread of the block: by the combine launch a
 * head a block, and by the folded combine a group of heads. The loads are independent of one
 * another, so they go out together: the splits' sums a thread each, then ATTN_COMBINE_BATCH
 * partials per element pair at a time, added in split order once they are in (a loop that
 * waited on each NaN test in turn was most of the combine launch's time). They go to L2
 * (__ldcg): other blocks wrote them. test_attn's `combine folded` gates hold the folded and the
 * launched combine to the same bits. */
template <int D>
static __device__ __forceinline__ void
combine_heads(const k_attention_args &a, int r, int rl, int h0, int nh, int max_split, int n_split,
              bool nan_row, const float *part, const float2 *ml) {
    __shared__ int head_nan[16];
    const int tid = threadIdx.x;
    if (tid < nh) head_nan[tid] = nan_row;
    __syncthreads();
    if (!nan_row)
        for (int e = tid; e < nh * n_split; e += ATTN_THREADS) {
            const int g = e / n_split, sp = e % n_split;
            if (isnan(__ldcg(ml + ((size_t)rl * a.n_head + h0 + g) * max_split + sp).y))
                head_nan[g] = 1;
        }
    __syncthreads();
    for (int pr = tid; pr < nh * D / 2; pr += ATTN_THREADS) {
        const int g = 2 * pr / D, d = 2 * pr % D;
        const size_t base = ((size_t)rl * a.n_head + h0 + g) * max_split;
        const bool nan = head_nan[g];
        const float2 o = sum_split_pairs(nan ? 0 : n_split, [&](int s) {
            return __ldcg(reinterpret_cast<const float2 *>(part + (base + s) * D + d));
        });
        bf16_t *out = a.out + ((size_t)r * a.n_head + h0 + g) * D + d;
        out[0] = nan ? (bf16_t)BF16_NAN : k_f32_to_bf16(o.x);
        out[1] = nan ? (bf16_t)BF16_NAN : k_f32_to_bf16(o.y);
    }
}

/* The end of a P.V block when the combine is folded (done != NULL): the block that finishes last
 * among the n_blocks blocks of its (row, KV head) combines the group's G heads, the combine
 * launch's work with the same arithmetic (combine_heads). Every thread fences its partial stores
 * before the block counts itself in done[], so the last to count sees every block's partials; it
 * sets the counter back to zero for the next launch, which every block of this one has counted
 * before (and griddepcontrol.wait orders the next launch after this one's end). */
template <int D, int G>
static __device__ __forceinline__ void
pv_fold(const k_attention_args &a, int r, int rl, int kvh, int max_split, int n_split, int n_blocks,
        const float *part, const float2 *ml, unsigned *done) {
    static_assert(G * D <= ATTN_FOLD_HEAD_ELEMS, "the launcher folds small groups only");
    __shared__ int fold_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *c = done + (size_t)rl * a.kv.n_kv_head + kvh;
        fold_last = atomicAdd(c, 1u) == (unsigned)n_blocks - 1;
        if (fold_last) atomicExch(c, 0u);
    }
    __syncthreads();
    if (!fold_last) return;
    __threadfence();
    combine_heads<D>(a, r, rl, kvh * G, G, max_split, n_split, false, part, ml);
}

/* A folded P.V launch's row that has no splits to run (no position, or more splits than the
 * grid holds): its first block writes the group's heads NaN, as the combine would. */
template <int D, int G>
static __device__ __forceinline__ void pv_fold_nan(const k_attention_args &a, int r, int rl,
                                                   int kvh) {
    if (blockIdx.x == 0) combine_heads<D>(a, r, rl, kvh * G, G, 0, 0, true, NULL, NULL);
}

/* The fold's counters (attn.cu), zero at load and between launches. */
unsigned *attn_fold_counters(void);

/* ---- launch checks ---- */

/* bf16 (2) and e4m3 (1) stores have kernels; anything else is refused. */
static inline int kv_dtype_check(const k_kv_view *kv) {
    return kv->elem_bytes == 2 || kv->elem_bytes == 1 ? K_OK : K_ERR_DTYPE;
}

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The view's shape as both ops need it (tables and base only when they are read). */
static inline bool kv_shape_ok(const k_kv_view *kv, int kv_layer) {
    return (kv->head_dim == 256 || kv->head_dim == 512) && kv->n_kv_head > 0 &&
           kv->page_tokens > 0 && kv->n_layer > 0 && kv_layer >= 0 && kv_layer < kv->n_layer &&
           kv->max_pages > 0 && kv->tables && kv->base && aligned16(kv->base);
}

/* The two passes with their products on tensor cores (attn_mma.cuh, serve.attn_mma): instantiated
 * by its parts (kernels/attn_mma_d*.cu) for head dims 256 (kept scores or not) and 512 (not),
 * groups 1 to 16, both pools; and their shared-memory limits raised at start-up. */
template <int D, int G, bool FP8, bool KEEP>
int attn_mma_passes(const k_attention_args *a, dim3 grid, int max_split, int spb, float *part,
                    float2 *ml, float *keep, unsigned *done, int row0, cudaStream_t s);
int attn_mma_setup(void);
/* serve.attn_strided_tiles (kernels.h, k_set_attn_strided_tiles): on or not */
int attn_strided_tiles(void);
/* kernels/attn_prompt.cu: the prompt rows' pass (serve.attn_prompt). attn_prompt_launch
 * launches it over the step's prompt rows when it is on and built for the layer (K_OK, or a
 * K_ERR_* code), or returns 1 having launched nothing; attn_prompt_setup raises its kernels'
 * shared-memory limits at start-up. */
int attn_prompt_launch(const k_attention_args *a, cudaStream_t s);
int attn_prompt_setup(void);
/* How many blocks of those passes the card holds at once (their shared memory allows 2 or 3 an
 * SM), known after attn_mma_setup: the launcher's splits-per-block choice counts waves by it. */
template <int D, int G, bool FP8, bool KEEP> int attn_mma_slots(void);
/* Query tiles (serve.attn_query_tiles): rows of one sequence sharing a block of the tensor-core
 * passes, attn_tile_rows<G>() of them (16 M rows of G heads each), the same bits per row as a
 * block of their own. The grid's z counts tiles; with fold and a grid of one block along x
 * (serve.attn_tile_fold) the P.V pass combines the splits itself. */
template <int G> static __host__ __device__ constexpr int attn_tile_rows() { return 16 / G; }
template <int D, int G, bool FP8, bool KEEP>
int attn_mma_tile_passes(const k_attention_args *a, dim3 grid, int max_split, int spb, float *part,
                         float2 *ml, float *keep, int row0, bool fold, cudaStream_t s);

/* The windowed layers' two passes on their shared-memory kernels (attn_window.cu; the e4m3
 * pool's head-dim-256 layers of groups up to ATTN_WARP_PV_MAX_G): instantiated there for the
 * groups 1, 2 and 4. */
template <int G, bool FP8>
int attn_window_passes(const k_attention_args *a, dim3 grid, int max_split, int spb, float *part,
                       float2 *ml, float *keep, unsigned *done, int row0, cudaStream_t s);

#endif
