/* kernels/moe.cu - the mixture of experts on the GPU: routing after the router's logits
 * (k_moe_route) and the routed experts (k_moe_experts). The router's projection and its input
 * norm/scale are ordinary ops elsewhere; this file owns only what follows the logits.
 *
 * Both ops compute the same function as their CPU twins in kernels/ref/moe_ref.c, with the
 * same bf16 roundings (HF's grouped_mm, docs/gemma4-numerics.md 2.9):
 *
 *   route:   p = softmax_fp32(logits) (max-subtracted exp), top_k by p descending, ties to
 *            the lower id; w_k = p_k / sum(chosen p) * per_expert_scale[idx_k].
 *   experts: gu = bf(x @ gate_up[e]^T); h = bf(bf(gelu_tanh(g)) * u); y = bf(h @ down[e]^T);
 *            out = bf(sum_k y_k * w_k), the k terms summed in fp32 in rank order.
 *
 * Shape of the expert path: a single-block kernel buckets the (row, rank) items by expert and
 * lists the active experts (with serve.moe_bucket_in_up at decode sizes, each block of the
 * tensor-core up kernel buckets the few items itself instead, bucket_in_block); an up kernel
 * (grid: output tile x active expert) computes
 * h = bf(gelu(g)) * u for every item of the expert with gate and up fused; a down kernel does
 * the same for y into an fp32 workspace; one block per row then sums its top_k terms in rank
 * order. The projections run on tensor cores (mma.sync, 16 items to a tile, the same
 * instructions for decode and prefill) where d_model and d_expert are multiples of 32, and on
 * CUDA cores otherwise (each weight row read once per group of up to 8 items). At one decode row
 * the two projection grids have ~350 and ~700 blocks, so all SMs stream the 8 chosen experts' 95 MB
 * per layer with 16-byte loads. The workspace is what keeps the rank-order sum exact and every row
 * independent of its batch mates (docs/gates.md, batch invariance): no item's arithmetic depends
 * on which other items exist, how they were grouped or in which order they were bucketed. */
#include "kernels/common.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/bf16.cuh"
#include "kernels/gemm_batched.h"
#include "kernels/moe_bucket.cuh"
#include "kernels/moe_stream.h"
#include "kernels/mma.cuh"

#include <math.h>

#define ROUTE_THREADS 32     /* one warp per row */
#define ROUTE_MAX_EXPERT 256 /* p of a row lives in shared memory */
#define ROUTE_MAX_TOP_K 16

#define BUCKET_THREADS 1024
#define EXPERT_THREADS 256 /* 8 warps, each one output at a time */
#define EXPERT_WARPS (EXPERT_THREADS / 32)
#define EXPERT_ROWS 8 /* rows of a bucket sharing one pass over a weight row */
#define UP_OUTS 16    /* h outputs per up block: 2 per warp, ~350 blocks at one decode row */
#define DOWN_OUTS 32  /* d_model outputs per down block: 4 per warp */
#define COMBINE_THREADS 256

static __device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, off);
    return v;
}

/* ---- routing ---- */

/* One warp per row. The exponentials are evaluated in double and rounded once: that is the
 * correctly rounded fp32 exp, which glibc's and musl's expf (double evaluation, 0.502 ulp) also
 * return in all but vanishingly rare cases, whereas CUDA's expf may be 2 ulp off. The sum over
 * experts and the sum of the chosen p are taken by lane 0 in the reference's order, so p and w
 * match the CPU twin bit for bit whenever the exponentials do. */
__global__ static void __launch_bounds__(ROUTE_THREADS) moe_route_kernel(k_moe_route_args a) {
    K_GRID_DEPENDENCY();
    __shared__ float p[ROUTE_MAX_EXPERT];
    __shared__ unsigned char taken[ROUTE_MAX_EXPERT];
    __shared__ float chosen[ROUTE_MAX_TOP_K];
    const int r = blockIdx.x, lane = threadIdx.x, n = a.n_expert;
    const bf16_t *lg = a.logits + (size_t)r * (size_t)n;

    float mx = -INFINITY;
    for (int e = lane; e < n; e += 32) {
        p[e] = k_bf16_to_f32(lg[e]);
        taken[e] = 0;
        mx = fmaxf(mx, p[e]);
    }
    for (int off = 16; off > 0; off >>= 1) /* max is exact: any order gives the same value */
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, off));
    for (int e = lane; e < n; e += 32)
        p[e] = (float)exp((double)(p[e] - mx));
    __syncwarp();
    float sum = 0.0f;
    if (lane == 0)
        for (int e = 0; e < n; e++)
            sum += p[e];
    sum = __shfl_sync(FULL_MASK, sum, 0);
    for (int e = lane; e < n; e += 32)
        p[e] = p[e] / sum;
    __syncwarp();

    int32_t *idx = a.idx + (size_t)r * (size_t)a.top_k;
    for (int k = 0; k < a.top_k; k++) {
        /* each lane scans its experts in ascending id, keeping the first of equal p */
        int be = -1;
        float bp = 0.0f;
        for (int e = lane; e < n; e += 32)
            if (!taken[e] && (be < 0 || p[e] > bp)) {
                be = e;
                bp = p[e];
            }
        for (int off = 16; off > 0; off >>= 1) {
            int oe = __shfl_xor_sync(FULL_MASK, be, off);
            float op = __shfl_xor_sync(FULL_MASK, bp, off);
            if (oe >= 0 && (be < 0 || op > bp || (op == bp && oe < be))) {
                be = oe;
                bp = op;
            }
        }
        /* lane 0's answer is the answer, even if a NaN p made the lanes disagree */
        be = __shfl_sync(FULL_MASK, be, 0);
        if (lane == 0) {
            taken[be] = 1;
            idx[k] = be;
            chosen[k] = p[be];
        }
        __syncwarp();
    }
    if (lane == 0) {
        float wsum = 0.0f;
        for (int k = 0; k < a.top_k; k++)
            wsum += chosen[k];
        float *w = a.weight + (size_t)r * (size_t)a.top_k;
        for (int k = 0; k < a.top_k; k++)
            w[k] = chosen[k] / wsum * k_bf16_to_f32(a.per_expert_scale[idx[k]]);
    }
}

/* moe_route_kernel's function, the same bits, in a form with fewer round trips one after another
 * (serve.moe_route_lanes): the per-expert scales (model constants) are read before the wait on
 * the grid before; a lane loads its logits all at once and keeps its experts' p and taken flags
 * in registers (the top-k scan only ever reads a lane's own experts); and the chosen weights
 * are written by lanes 0..top_k-1 at once, each summing the chosen p in the same order lane 0
 * did, where lane 0 wrote them one after another, each behind a load of its expert's scale
 * that could not pass the store before it. The exponentials, the sum over experts (lane 0, in
 * order), the butterfly and its tie rule are moe_route_kernel's. */
#define ROUTE_PER_LANE (ROUTE_MAX_EXPERT / 32)
__global__ static void __launch_bounds__(ROUTE_THREADS) moe_route_lanes_kernel(k_moe_route_args a) {
    __shared__ float p[ROUTE_MAX_EXPERT];
    __shared__ float scale[ROUTE_MAX_EXPERT];
    __shared__ float chosen[ROUTE_MAX_TOP_K];
    __shared__ int sel[ROUTE_MAX_TOP_K];
    const int r = blockIdx.x, lane = threadIdx.x, n = a.n_expert;
    for (int e = lane; e < n; e += 32) /* a model constant: before the wait */
        scale[e] = k_bf16_to_f32(a.per_expert_scale[e]);
    K_GRID_DEPENDENCY();
    const bf16_t *lg = a.logits + (size_t)r * (size_t)n;
    float v[ROUTE_PER_LANE];
#pragma unroll
    for (int i = 0; i < ROUTE_PER_LANE; i++) {
        const int e = lane + 32 * i;
        v[i] = e < n ? k_bf16_to_f32(lg[e]) : 0.0f;
    }
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < ROUTE_PER_LANE; i++)
        if (lane + 32 * i < n) mx = fmaxf(mx, v[i]);
    for (int off = 16; off > 0; off >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, off));
#pragma unroll
    for (int i = 0; i < ROUTE_PER_LANE; i++) {
        const int e = lane + 32 * i;
        v[i] = (float)exp((double)(v[i] - mx));
        if (e < n) p[e] = v[i];
    }
    __syncwarp();
    float sum = 0.0f;
    if (lane == 0)
        for (int e = 0; e < n; e++)
            sum += p[e];
    sum = __shfl_sync(FULL_MASK, sum, 0);
#pragma unroll
    for (int i = 0; i < ROUTE_PER_LANE; i++)
        v[i] = v[i] / sum;

    unsigned taken = 0; /* bit i: expert lane + 32 * i chosen */
    for (int k = 0; k < a.top_k; k++) {
        int be = -1;
        float bp = 0.0f;
#pragma unroll
        for (int i = 0; i < ROUTE_PER_LANE; i++)
            if (lane + 32 * i < n && !(taken >> i & 1u) && (be < 0 || v[i] > bp)) {
                be = lane + 32 * i;
                bp = v[i];
            }
        for (int off = 16; off > 0; off >>= 1) {
            int oe = __shfl_xor_sync(FULL_MASK, be, off);
            float op = __shfl_xor_sync(FULL_MASK, bp, off);
            if (oe >= 0 && (be < 0 || op > bp || (op == bp && oe < be))) {
                be = oe;
                bp = op;
            }
        }
        /* lane 0's pair is the answer (its p moved with its id through the butterfly) */
        be = __shfl_sync(FULL_MASK, be, 0);
        bp = __shfl_sync(FULL_MASK, bp, 0);
        if ((be & 31) == lane) taken |= 1u << (be >> 5);
        if (lane == 0) {
            sel[k] = be;
            chosen[k] = bp;
        }
    }
    __syncwarp();
    if (lane < a.top_k) {
        float wsum = 0.0f;
        for (int k = 0; k < a.top_k; k++)
            wsum += chosen[k];
        const size_t o = (size_t)r * (size_t)a.top_k + (size_t)lane;
        a.idx[o] = sel[lane];
        a.weight[o] = chosen[lane] / wsum * scale[sel[lane]];
    }
}

/* ---- experts ---- */

/* One block: list = the item ids i = r * top_k + k sorted into buckets by expert, ascending
 * expert; the active experts (those with items) listed in ascending id with their bucket's start
 * and size; *n_active their number. Items with an id outside [0, n_expert) are left out
 * (moe_combine_kernel turns their rows into NaN). The order inside a bucket depends on atomic
 * timing and does not matter: every item writes only its own workspace rows, and no item's
 * arithmetic depends on which other items share its bucket. */
__global__ static void __launch_bounds__(BUCKET_THREADS)
    moe_bucket_kernel(const int32_t *idx, int n_items, int n_expert, int32_t *list, int32_t *active,
                      int32_t *n_active) {
    K_GRID_DEPENDENCY();
    __shared__ int count[EXPERTS_MAX_EXPERT];
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x)
        count[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n_items; i += blockDim.x) {
        int e = idx[i];
        if (e >= 0 && e < n_expert) atomicAdd(&count[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0, n = 0;
        for (int e = 0; e < n_expert; e++) {
            int c = count[e];
            if (c > 0) {
                active[3 * n] = e;
                active[3 * n + 1] = run;
                active[3 * n + 2] = c;
                n++;
            }
            count[e] = run; /* becomes the bucket's write cursor */
            run += c;
        }
        *n_active = n;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n_items; i += blockDim.x) {
        int e = idx[i];
        if (e >= 0 && e < n_expert) list[atomicAdd(&count[e], 1)] = i;
    }
}

/* 8 bf16 of a 16-byte word into fp32. */
static __device__ __forceinline__ void unpack8(uint4 v, float *f) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        f[2 * j] = __uint_as_float(w[j] << 16);
        f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
}

/* The expert projections read each active expert's weights once for all the rows that chose it
 * (the decode case: a few rows per expert) and re-read them per group of EXPERT_ROWS rows from
 * L2 otherwise (prefill). Grid: x = a tile of outputs, y = an active-expert slot. Each output is
 * one warp's dot product over k: lane l takes the 8 consecutive weights at l*8 + 256*c (one
 * 16-byte load each), multiplies them with the same elements of each of the group's input rows,
 * and the warp sums with a fixed butterfly. The sum order per (output, row) is the same whatever
 * the group holds, so a row's result is independent of its batch mates (docs/gates.md). */
template <int ROWS>
static __device__ __forceinline__ void dot_rows(const bf16_t *wrow, const bf16_t *const *in,
                                                int n_in, int k, float *acc) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < ROWS; r++)
        acc[r] = 0.0f;
#pragma unroll 4
    for (int t = lane * 8; t < k; t += 32 * 8) {
        float w[8];
        unpack8(__ldg((const uint4 *)(wrow + t)), w);
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            if (r >= n_in) break;
            float x[8];
            unpack8(__ldg((const uint4 *)(in[r] + t)), x);
#pragma unroll
            for (int j = 0; j < 8; j++)
                acc[r] += x[j] * w[j];
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++)
        acc[r] = warp_sum(acc[r]);
}

/* h[item, o] = bf(bf(gelu(g)) * u) with g = bf(x[r] . gate_up[e, o]), u = bf(x[r] .
 * gate_up[e, de + o]), for the UP_OUTS outputs o of this block's tile; h is bf16. */
__global__ static void __launch_bounds__(EXPERT_THREADS)
    moe_up_kernel(k_moe_experts_args a, const int32_t *list, const int32_t *active,
                  const int32_t *n_active, bf16_t *h) {
    K_GRID_DEPENDENCY();
    if ((int)blockIdx.y >= *n_active) return;
    const int e = active[3 * blockIdx.y], first = active[3 * blockIdx.y + 1],
              n = active[3 * blockIdx.y + 2];
    const int dm = a.d_model, de = a.d_expert;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const bf16_t *wgu = a.gate_up + (size_t)e * 2 * (size_t)de * (size_t)dm;
    for (int o = blockIdx.x * UP_OUTS + warp; o < de && o < (int)(blockIdx.x + 1) * UP_OUTS;
         o += EXPERT_WARPS) {
        for (int g0 = 0; g0 < n; g0 += EXPERT_ROWS) {
            const bf16_t *in[EXPERT_ROWS];
            int items[EXPERT_ROWS];
            int cnt = n - g0 < EXPERT_ROWS ? n - g0 : EXPERT_ROWS;
#pragma unroll
            for (int r = 0; r < EXPERT_ROWS; r++) { /* unrolled: the arrays stay in registers */
                items[r] = r < cnt ? list[first + g0 + r] : 0;
                in[r] = a.x + (size_t)(items[r] / a.top_k) * (size_t)dm;
            }
            float g[EXPERT_ROWS], u[EXPERT_ROWS];
            dot_rows<EXPERT_ROWS>(wgu + (size_t)o * (size_t)dm, in, cnt, dm, g);
            dot_rows<EXPERT_ROWS>(wgu + (size_t)(de + o) * (size_t)dm, in, cnt, dm, u);
            if (lane == 0)
#pragma unroll
                for (int r = 0; r < EXPERT_ROWS; r++)
                    if (r < cnt)
                        h[(size_t)items[r] * (size_t)de + (size_t)o] = k_f32_to_bf16(
                            k_round_bf16(k_gelu_tanh(k_round_bf16(g[r]))) * k_round_bf16(u[r]));
        }
    }
}

/* ys[item, t] = bf(h[item] . down[e, t]) as fp32, for the DOWN_OUTS outputs t of this tile. */
__global__ static void __launch_bounds__(EXPERT_THREADS)
    moe_down_kernel(k_moe_experts_args a, const int32_t *list, const int32_t *active,
                    const int32_t *n_active, const bf16_t *h, float *ys) {
    K_GRID_DEPENDENCY();
    if ((int)blockIdx.y >= *n_active) return;
    const int e = active[3 * blockIdx.y], first = active[3 * blockIdx.y + 1],
              n = active[3 * blockIdx.y + 2];
    const int dm = a.d_model, de = a.d_expert;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const bf16_t *wd = a.down + (size_t)e * (size_t)dm * (size_t)de;
    for (int t = blockIdx.x * DOWN_OUTS + warp; t < dm && t < (int)(blockIdx.x + 1) * DOWN_OUTS;
         t += EXPERT_WARPS) {
        for (int g0 = 0; g0 < n; g0 += EXPERT_ROWS) {
            const bf16_t *in[EXPERT_ROWS];
            int items[EXPERT_ROWS];
            int cnt = n - g0 < EXPERT_ROWS ? n - g0 : EXPERT_ROWS;
#pragma unroll
            for (int r = 0; r < EXPERT_ROWS; r++) {
                items[r] = r < cnt ? list[first + g0 + r] : 0;
                in[r] = h + (size_t)items[r] * (size_t)de;
            }
            float s[EXPERT_ROWS];
            dot_rows<EXPERT_ROWS>(wd + (size_t)t * (size_t)de, in, cnt, de, s);
            if (lane == 0)
#pragma unroll
                for (int r = 0; r < EXPERT_ROWS; r++)
                    if (r < cnt) ys[(size_t)items[r] * (size_t)dm + (size_t)t] = k_round_bf16(s[r]);
        }
    }
}

/* ---- the expert projections on tensor cores ----
 *
 * mma.sync m16n8k16 (bf16 in, fp32 accumulate): a warp owns 16 items of an expert (rows, zero
 * past the bucket) against NT tiles of 8 weight rows, over the whole of k. Each lane loads 16
 * bytes of its item rows and of its weight rows per 32 k (k0 + 8q .. 8q + 7, q = lane % 4): the
 * mma's k positions are a fixed permutation of the real ones, the same for A and B, so every
 * product meets its partner. Each item's output depends only on its own row, the weights and
 * the fixed k order, not on the other 15 rows of the tile (rows are independent in an mma), so
 * a row's result is the same in any batch (docs/gates.md); prefill (many items per expert) and
 * decode (one or two) run the same instructions. Needs k % 32 == 0 (the Gemma 4 shapes are). */
#define MMA_THREADS 128 /* 4 warps */
#define MMA_WARPS (MMA_THREADS / 32)
/* n8 tiles per warp and projection: one, so that one decode row's 8 experts still fill the
 * card (the down projection's 2,816 outputs make 88 blocks an expert; the up projection's 704
 * make 44 of MMA_UP_THREADS below) */
#define MMA_NT 1
#define MMA_OUTS (MMA_WARPS * MMA_NT * 8) /* outputs per block */
/* The up kernel: blocks of 2 warps, so one decode row's 8 experts make 352 blocks (2 or 3 an SM
 * of 132, where 176 blocks of 4 warps left 44 SMs with twice the others' work), and groups of 8
 * 32-k blocks of loads a warp (the bytes in flight twice mma_rows' default for two weight
 * tiles); the mma sequence of every output is the same, so the bits are (docs/perf-notes.md,
 * "Experts"). */
#define MMA_UP_THREADS 64
#define MMA_UP_OUTS (MMA_UP_THREADS / 32 * MMA_NT * 8)
#define MMA_UP_GROUP 8
/* serve.wide_loads (kernels.h): an expert's bucket of at most 8 items (its tile's hi rows all
 * padding) loads WIDE_U (up) or WIDE_DOWN_U (down) 32-k blocks a group through mma_rows_lo: the
 * up kernel's k loop at one 26B-A4B row in 6 round trips instead of 11, the down kernel's (k =
 * 704) in 2 instead of 3 at the registers that keep four of its blocks an SM. Launched for calls
 * of at most WIDE_MAX_ITEMS items (one 26B-A4B decode row): the wide up kernel's registers leave
 * four blocks an SM, where one row's 352 blocks fit in one wave and two rows' 704 would not (six
 * an SM at the narrow groups' registers); the bits are the same either way. */
#define WIDE_U 16
#define WIDE_DOWN_U 12
#define WIDE_MAX_ITEMS 8

/* The lane's weight rows of NT tiles of 8 outputs from o0 (row o0 + 8 t + g of w, rows of k
 * elements) into rows[0 .. NT); NULL past the n_out outputs (zero in the mma). */
template <int NT>
static __device__ __forceinline__ void weight_rows(const bf16_t *w, int o0, int n_out, int k,
                                                   const bf16_t **rows) {
    const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const int o = o0 + 8 * t + g;
        rows[t] = o < n_out ? w + (size_t)o * (size_t)k : NULL;
    }
}

/* As moe_up_kernel, on tensor cores: warp w of block x owns outputs
 * [x * MMA_UP_OUTS + w * MMA_NT * 8, + MMA_NT * 8) of the gate (and the same of up). INBLOCK:
 * the block buckets the items itself (bucket_in_block), and the blocks of x = 0 write their
 * slot's bucket where moe_bucket_kernel would (block (0, 0) the active count too) for the down
 * kernel, which runs after this grid has ended. */
template <bool INBLOCK, bool WIDE = false>
__global__ static void __launch_bounds__(MMA_UP_THREADS)
    moe_up_mma_kernel(k_moe_experts_args a, int32_t *list, int32_t *active, int32_t *n_active,
                      bf16_t *h) {
    K_GRID_DEPENDENCY();
    int e, first, n;
    const int32_t *items;
    if constexpr (INBLOCK) {
        __shared__ moe_inblock_smem s;
        if (!moe_up_bucket_inblock(a, list, active, n_active, s, &e, &first, &n)) return;
        items = s.list;
    } else {
        if (!moe_up_bucket_listed(active, n_active, &e, &first, &n)) return;
        items = list;
    }
    const int dm = a.d_model, de = a.d_expert;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, q = lane & 3;
    const int o0 = blockIdx.x * MMA_UP_OUTS + warp * MMA_NT * 8; /* the warp's first output */
    if (o0 >= de) return;                                        /* warp-uniform */
    const bf16_t *wgu = a.gate_up + (size_t)e * 2 * (size_t)de * (size_t)dm;
    const bf16_t *w[2 * MMA_NT]; /* gate tiles, then up tiles: the lane's weight row of each */
    weight_rows<MMA_NT>(wgu, o0, de, dm, w);
    weight_rows<MMA_NT>(wgu + (size_t)de * (size_t)dm, o0, de, dm, w + MMA_NT);
    for (int r0 = 0; r0 < n; r0 += 16) {
        const int rlo = r0 + g, rhi = r0 + g + 8;
        const int ilo = rlo < n ? items[first + rlo] : -1, ihi = rhi < n ? items[first + rhi] : -1;
        const bf16_t *lo = ilo >= 0 ? a.x + (size_t)(ilo / a.top_k) * (size_t)dm : NULL;
        const bf16_t *hi = ihi >= 0 ? a.x + (size_t)(ihi / a.top_k) * (size_t)dm : NULL;
        float acc[2 * MMA_NT][4];
        if (WIDE && n <= 8) { /* hi is NULL in every lane */
            mma_rows_lo<2 * MMA_NT, WIDE_U>(lo, w, dm, acc);
        } else {
            mma_rows<2 * MMA_NT, MMA_UP_GROUP>(lo, hi, w, dm, acc);
        }
        /* d[0], d[1]: the lane's row, outputs 2q and 2q + 1 of the tile; d[2], d[3]: row + 8 */
#pragma unroll
        for (int t = 0; t < MMA_NT; t++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int item = j < 2 ? ilo : ihi, o = o0 + 8 * t + 2 * q + (j & 1);
                if (item >= 0 && o < de)
                    h[(size_t)item * (size_t)de + (size_t)o] =
                        k_f32_to_bf16(k_round_bf16(k_gelu_tanh(k_round_bf16(acc[t][j]))) *
                                      k_round_bf16(acc[MMA_NT + t][j]));
            }
    }
}

/* As moe_down_kernel, on tensor cores: warp w of block x owns outputs
 * [x * MMA_OUTS + w * MMA_NT * 8, + MMA_NT * 8) of d_model. */
template <bool WIDE = false>
__global__ static void __launch_bounds__(MMA_THREADS)
    moe_down_mma_kernel(k_moe_experts_args a, const int32_t *list, const int32_t *active,
                        const int32_t *n_active, const bf16_t *h, float *ys) {
    K_GRID_DEPENDENCY();
    if ((int)blockIdx.y >= *n_active) return;
    const int e = active[3 * blockIdx.y], first = active[3 * blockIdx.y + 1],
              n = active[3 * blockIdx.y + 2];
    const int dm = a.d_model, de = a.d_expert;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, q = lane & 3;
    const int t0 = blockIdx.x * MMA_OUTS + warp * MMA_NT * 8;
    if (t0 >= dm) return; /* warp-uniform */
    const bf16_t *wd = a.down + (size_t)e * (size_t)dm * (size_t)de;
    const bf16_t *w[MMA_NT];
    weight_rows<MMA_NT>(wd, t0, dm, de, w);
    for (int r0 = 0; r0 < n; r0 += 16) {
        const int rlo = r0 + g, rhi = r0 + g + 8;
        const int ilo = rlo < n ? list[first + rlo] : -1, ihi = rhi < n ? list[first + rhi] : -1;
        const bf16_t *lo = ilo >= 0 ? h + (size_t)ilo * (size_t)de : NULL;
        const bf16_t *hi = ihi >= 0 ? h + (size_t)ihi * (size_t)de : NULL;
        float acc[MMA_NT][4];
        if (WIDE && n <= 8) /* hi is NULL in every lane */
            mma_rows_lo<MMA_NT, WIDE_DOWN_U>(lo, w, de, acc);
        else
            mma_rows<MMA_NT>(lo, hi, w, de, acc);
#pragma unroll
        for (int t = 0; t < MMA_NT; t++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int item = j < 2 ? ilo : ihi, o = t0 + 8 * t + 2 * q + (j & 1);
                if (item >= 0 && o < dm)
                    ys[(size_t)item * (size_t)dm + (size_t)o] = k_round_bf16(acc[t][j]);
            }
    }
}

/* ---- prefill-sized buckets: several item tiles a warp (serve.moe_prefill_tiles) ----
 *
 * With tens of items an expert (a prefill chunk), the kernels above re-read an expert's weight
 * tile from L2 for every 16 items and every item row for every 8 (down) or 8 + 8 (up) outputs:
 * ~8 and ~5.5 flops a byte of L2 traffic, which bounds them far below the tensor cores' rate
 * (docs/perf-notes.md, nineteenth session). Here a warp takes TILES_MT tiles of 16 items against
 * TILES_NT tiles of 8 outputs (gate and up alike in the up kernel) through mma_tiles, which
 * loads each weight fragment once for all its item tiles: 2.7x (up) and 2.5x (down) less L2
 * traffic a flop. Every (item tile, output tile) pair gets mma_rows' instruction sequence,
 * operands and k order (mma.cuh), so every output is the same bits as in the kernels above
 * (test_moe's `moe_prefill_tiles` gates, byte for byte). Decode-sized calls keep those kernels:
 * at a few items an expert the extra tiles would be padding. */
#define TILES_THREADS 128 /* 4 warps */
#define TILES_WARPS (TILES_THREADS / 32)
#define TILES_MT 4 /* 16-item tiles a warp */
#define TILES_NT 2 /* 8-output tiles a warp (of gate, and as many of up) */
#define TILES_U 2  /* 32-k blocks of loads in flight (registers: a, a8 for MT tiles) */
#define TILES_OUTS (TILES_WARPS * TILES_NT * 8) /* outputs per block */

/* The lane's rows of MT item tiles from the bucket's items[0 .. n), starting at r0: tile i's
 * rows r0 + 16 i + g (lo) and + 8 (hi), their item ids (-1 past the bucket) and input rows
 * (base + item / per_row * stride; NULL past the bucket: zero rows in the mma). */
template <int MT>
static __device__ __forceinline__ void
item_tiles(const int32_t *items, int n, int r0, const bf16_t *base, int per_row, int stride,
           int (&ilo)[MT], int (&ihi)[MT], const bf16_t *(&lo)[MT], const bf16_t *(&hi)[MT]) {
    const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
    for (int i = 0; i < MT; i++) {
        const int rlo = r0 + 16 * i + g, rhi = rlo + 8;
        ilo[i] = rlo < n ? items[rlo] : -1;
        ihi[i] = rhi < n ? items[rhi] : -1;
        lo[i] = ilo[i] >= 0 ? base + (size_t)(ilo[i] / per_row) * (size_t)stride : NULL;
        hi[i] = ihi[i] >= 0 ? base + (size_t)(ihi[i] / per_row) * (size_t)stride : NULL;
    }
}

/* As moe_up_mma_kernel<false>, TILES_MT item tiles at a time. */
__global__ static void __launch_bounds__(TILES_THREADS)
    moe_up_tiles_kernel(k_moe_experts_args a, const int32_t *list, const int32_t *active,
                        const int32_t *n_active, bf16_t *h) {
    K_GRID_DEPENDENCY();
    if ((int)blockIdx.y >= *n_active) return;
    const int e = active[3 * blockIdx.y], first = active[3 * blockIdx.y + 1],
              n = active[3 * blockIdx.y + 2];
    const int dm = a.d_model, de = a.d_expert;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, q = lane & 3;
    const int o0 = blockIdx.x * TILES_OUTS + warp * TILES_NT * 8;
    if (o0 >= de) return; /* warp-uniform */
    const bf16_t *wgu = a.gate_up + (size_t)e * 2 * (size_t)de * (size_t)dm;
    const bf16_t *w[2 * TILES_NT]; /* gate tiles, then up tiles: the lane's weight row of each */
    weight_rows<TILES_NT>(wgu, o0, de, dm, w);
    weight_rows<TILES_NT>(wgu + (size_t)de * (size_t)dm, o0, de, dm, w + TILES_NT);
    for (int r0 = 0; r0 < n; r0 += 16 * TILES_MT) {
        int ilo[TILES_MT], ihi[TILES_MT];
        const bf16_t *lo[TILES_MT], *hi[TILES_MT];
        item_tiles<TILES_MT>(list + first, n, r0, a.x, a.top_k, dm, ilo, ihi, lo, hi);
        float acc[TILES_MT][2 * TILES_NT][4];
        mma_tiles<TILES_MT, 2 * TILES_NT, TILES_U>(lo, hi, w, dm, acc);
#pragma unroll
        for (int i = 0; i < TILES_MT; i++)
#pragma unroll
            for (int t = 0; t < TILES_NT; t++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int item = j < 2 ? ilo[i] : ihi[i], o = o0 + 8 * t + 2 * q + (j & 1);
                    if (item >= 0 && o < de)
                        h[(size_t)item * (size_t)de + (size_t)o] =
                            k_f32_to_bf16(k_round_bf16(k_gelu_tanh(k_round_bf16(acc[i][t][j]))) *
                                          k_round_bf16(acc[i][TILES_NT + t][j]));
                }
    }
}

/* As moe_down_mma_kernel, TILES_MT item tiles at a time. */
__global__ static void __launch_bounds__(TILES_THREADS)
    moe_down_tiles_kernel(k_moe_experts_args a, const int32_t *list, const int32_t *active,
                          const int32_t *n_active, const bf16_t *h, float *ys) {
    K_GRID_DEPENDENCY();
    if ((int)blockIdx.y >= *n_active) return;
    const int e = active[3 * blockIdx.y], first = active[3 * blockIdx.y + 1],
              n = active[3 * blockIdx.y + 2];
    const int dm = a.d_model, de = a.d_expert;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, q = lane & 3;
    const int t0 = blockIdx.x * TILES_OUTS + warp * TILES_NT * 8;
    if (t0 >= dm) return; /* warp-uniform */
    const bf16_t *wd = a.down + (size_t)e * (size_t)dm * (size_t)de;
    const bf16_t *w[TILES_NT];
    weight_rows<TILES_NT>(wd, t0, dm, de, w);
    for (int r0 = 0; r0 < n; r0 += 16 * TILES_MT) {
        int ilo[TILES_MT], ihi[TILES_MT];
        const bf16_t *lo[TILES_MT], *hi[TILES_MT];
        item_tiles<TILES_MT>(list + first, n, r0, h, 1, de, ilo, ihi, lo, hi);
        float acc[TILES_MT][TILES_NT][4];
        mma_tiles<TILES_MT, TILES_NT, TILES_U>(lo, hi, w, de, acc);
#pragma unroll
        for (int i = 0; i < TILES_MT; i++)
#pragma unroll
            for (int t = 0; t < TILES_NT; t++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int item = j < 2 ? ilo[i] : ihi[i], o = t0 + 8 * t + 2 * q + (j & 1);
                    if (item >= 0 && o < dm)
                        ys[(size_t)item * (size_t)dm + (size_t)o] = k_round_bf16(acc[i][t][j]);
                }
    }
}

/* ---- prefill-sized buckets through shared memory (serve.moe_prefill_tiles = 2) ----
 *
 * The tiles kernels above still read every item row from L2 once a warp (every 16 outputs of
 * gate and up, or of down) and every weight row once a warp's 64 items. Here a block of 8 warps
 * stages a tile of STAGED_BM items and STAGED_BN outputs (gate's and up's rows in the up kernel)
 * into shared memory by cp.async, STAGED_KB 32-k blocks a stage, two stages in turn, and its
 * warps (2 item halves x 4 output quarters) read their operands there: item rows come from L2
 * once a block of 64 outputs (4x fewer than the tiles kernels), weight rows once a block of 128
 * items (2x). Each lane reads the 16 bytes at k0 + 8q of its rows, exactly what mma_tiles loads
 * from global memory (zero for padding rows and outputs past the end), and every (item tile,
 * output tile) pair gets mma_tiles' mmas in its order, so every output is the same bits
 * (test_moe's `moe_prefill_staged` gates). A stage's rows are 64 bytes (one 32-k block), so the
 * 8 lanes of a 16-byte load phase read two whole consecutive rows: no bank conflicts. */
#define STAGED_THREADS 256            /* 8 warps */
#define STAGED_BM (2 * 16 * TILES_MT) /* items a block: two warps' TILES_MT tiles of 16 */
#define STAGED_BN (4 * 8 * TILES_NT)  /* outputs a block: four warps' TILES_NT tiles of 8 */
#define STAGED_KB 2                   /* 32-k blocks a stage */
#define HALF_UP_BN 96                 /* outputs an up block of at most 64 items (HALF) */
#define STAGED_A_BYTES (STAGED_KB * STAGED_BM * 64)
template <bool UP> static __host__ __device__ constexpr int staged_weight_rows() {
    return UP ? 2 * STAGED_BN : STAGED_BN; /* gate's rows, then up's */
}
template <bool UP> static __host__ __device__ constexpr int staged_stage_bytes() {
    return STAGED_A_BYTES + STAGED_KB * staged_weight_rows<UP>() * 64;
}
template <bool UP, int STAGES = 2> static __host__ __device__ constexpr size_t staged_smem_bytes() {
    return STAGES * (size_t)staged_stage_bytes<UP>();
}

/* UP: gate|up of x's rows into h (GeGLU), as moe_up_tiles_kernel; else h's rows through down
 * into ys, as moe_down_tiles_kernel.
 * RING (serve.moe_prefill_tiles = 3): three stages in a ring instead of two in turn, so two
 * chunks' copies are in flight while one is read (one barrier a chunk, not two), and a warp
 * whose 64 items are all padding skips its mmas: a 128-item tile of an expert with ~64 items (a
 * 1,024-token 26B-A4B chunk spreads 8,192 items over 128 experts) is half padding, whose rows
 * are never stored. Every (item tile, output tile) pair a warp computes gets its mmas in order,
 * so the same bits. (Finer skips cost registers past two blocks an SM: 16-item tiles skipped
 * inside the warp's loops, or warps of 32 items x 32 outputs, each spilled.)
 * ZFILL (serve.moe_ring_zfill, with RING): the same copies into the same places, each thread's
 * a fixed count (its trip count known at compile time) and padding rows, outputs past n_out and
 * k past the end zero-filled by the copy itself (source size 0) instead of a branch to a store.
 * ncu put the ring at ~13 instructions a mma with the copies' issue most of them (the loop's
 * remainder code and a branch a copy; docs/perf-notes.md, forty-fourth and forty-fifth
 * sessions). The stages' bytes are the same, so the same bits.
 * HALF (serve.moe_half_tiles, with ZFILL): a bucket of at most half a tile (64 items; a
 * 1,024-token 26B-A4B chunk leaves about half its experts so) would leave 4 of the 8 warps
 * without items. Instead the block takes more outputs on those warps: in the down kernel the
 * even block of each pair takes its odd neighbour's 64 outputs too and the odd block returns;
 * in the up kernel (at 2) a block takes 96 outputs of gate and of up on 6 warps, so 8 blocks
 * cover what 11 did, and the rest return. The extra weight rows go where the padding item rows
 * would have gone (the item part's rows 64..127: down's outputs 64..127, or up's gate rows 64..95
 * then up rows 64..95), so a stage is the same bytes and each thread makes the same copies; each
 * output still gets its (item tile, output tile) mmas in k order, so the same bits (test_moe's
 * `moe_half_tiles` gates).
 * WA (serve.moe_weights_a, with ZFILL; the up kernel's at 2, without HALF): the weight rows are
 * the mma's A operand (16 rows on its M side) and the items its B operand (8 items on N), the
 * transpose of the product above. The A operand interleaves rows g and g + 8 a register at a
 * time, which a 16-byte load of one row cannot fill, so ptxas assembles it from two row loads
 * with register moves, twice over for each item tile: 64 moves a 32-k block and warp in either
 * kernel (docs/perf-notes.md, forty-ninth session). With the weights on A a warp makes one
 * operand pair a block, and a B operand (two consecutive words of one row) is the load's own
 * registers. The down kernel's warp keeps its 16 outputs and 64 items; the up kernel's warp takes
 * 8 outputs over all 128 items of the tile, its A tile's rows g and g + 8 being output g's gate
 * and up rows, so that GeGLU's two operands meet in one lane's accumulators (with two A tiles, of
 * gate and of up, its loop spilled), and skips the second 64 items where they are all padding.
 * The up kernel's half tiles (HALF) do not apply: a bucket of at most 64 items runs 64 outputs a
 * block on all 8 warps. Each mma still gets, in each of its k slots, the same item word and weight
 * word as before, in the same order over k, and a product does not depend on which operand
 * carries which factor, so the sums are the same bits (test_moe's `moe_weights_a` gates, byte for
 * byte against the zero-fill ring). The copies and the stage are unchanged. */
template <bool UP, bool RING = false, bool ZFILL = false, bool HALF = false, bool WA = false>
__global__ static void __launch_bounds__(STAGED_THREADS, 2)
    moe_staged_kernel(k_moe_experts_args a, const int32_t *list, const int32_t *active,
                      const int32_t *n_active, bf16_t *h, float *ys) {
    static_assert(!ZFILL || RING, "the zero-fill copies are the ring's");
    static_assert(!HALF || ZFILL, "half tiles are the zero-fill ring's");
    static_assert(!WA || (ZFILL && !(UP && HALF)),
                  "weights on A is a form of the zero-fill ring (the up kernel's whole tiles)");
    static_assert(TILES_NT == 2, "a warp's 16 outputs are one A tile of 16 rows");
    constexpr int STAGES = RING ? 3 : 2;
    K_GRID_DEPENDENCY();
    if ((int)blockIdx.y >= *n_active) return;
    const moe_bucket b = moe_bucket_at(active, (int)blockIdx.y);
    const int n = b.n;
    const int dm = a.d_model, de = a.d_expert;
    const int n_out = UP ? de : dm, k = UP ? dm : de; /* k % 32 == 0 (the tensor-core path) */
    constexpr int NB = UP ? 2 * TILES_NT : TILES_NT;  /* weight tiles a warp */
    constexpr int BR = staged_weight_rows<UP>();
    constexpr int STAGE = staged_stage_bytes<UP>();
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, q = lane & 3;
    /* HALF: one item tile of at most 64 items, more outputs a block (block-uniform) */
    const bool half = HALF && n <= STAGED_BM / 2;
    if (!UP && half && blockIdx.x % 2 == 1) return; /* its outputs are the even block's */
    /* the warp's item half and its 16 outputs of the block's (UP: of gate's and of up's) */
    const int wm = half ? 0 : warp / 4, wn = warp % 4, wo = half ? warp : wn;
    /* where the warp's weight rows are in a stage: the weight part, or (HALF, outputs past 64)
     * the item part's rows 64..127; rows a 32-k block there; UP: up's rows after gate's */
    const bool w_in_items = half && warp >= 4;
    const int w_part = w_in_items ? 0 : STAGED_A_BYTES, w_kb_rows = w_in_items ? STAGED_BM : BR;
    const int w_row0 = (w_in_items ? STAGED_BM / 2 : 0) + wn * 8 * TILES_NT;
    const int w_up = w_in_items ? HALF_UP_BN - STAGED_BN : STAGED_BN;
    /* UP, HALF: warps 6 and 7 hold no outputs */
    const bool w_idle = UP && half && warp >= HALF_UP_BN / (8 * TILES_NT);
    /* the block's first output */
    const int ob = (UP && half ? HALF_UP_BN : STAGED_BN) * (int)blockIdx.x;
    if (ob >= n_out) return; /* block-uniform */
    const bf16_t *wbase = moe_bucket_weights<UP>(a, b.expert);
    extern __shared__ __align__(16) unsigned char staged_smem[];
    __shared__ const bf16_t *s_row[STAGED_BM]; /* the tile's input rows; NULL: padding */
    __shared__ int s_item[STAGED_BM];          /* their item ids; -1: padding */
    const int nkb = k / 32, n_chunks = (nkb + STAGED_KB - 1) / STAGED_KB;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    /* ZFILL: this thread's row and 16-byte part of every stage */
    const int r4 = tid / 4, q4 = tid % 4;
    /* chunk c's 32-k blocks of the item rows and the weight rows into stage c % STAGES, then a
     * group (an empty one past the last chunk, so that the waits below still count right) */
    auto issue = [&](int c) {
        if constexpr (ZFILL) {
            /* the cp.async form's copies, each thread's the same (part q4 of rows r4 and
             * r4 + 64, both 32-k blocks), so four lanes still read a row's 64 bytes and write
             * them side by side; one address a row, the rest immediate offsets */
            static_assert(STAGED_KB == 2 && STAGED_BM == 128 && STAGED_BN == 64 &&
                              STAGED_THREADS == 256,
                          "the zero-fill copies' thread map is this tile's");
            if (c < n_chunks) {
                unsigned char *st = staged_smem + (c % STAGES) * STAGE + r4 * 64 + q4 * 16;
                const int kk = c * 64 + q4 * 8;  /* the chunk's first k, this part */
                const bool hi = c * 2 + 1 < nkb; /* its second 32-k block is inside k */
#pragma unroll
                for (int h2 = 0; h2 < 2; h2++) { /* rows r4 and r4 + 64 */
                    const bf16_t *src = s_row[r4 + 64 * h2];
                    if (HALF && h2 == 1 && half) { /* a weight row past the first 64 outputs */
                        /* down: output 64 + r4; up: gate's row 64 + r4, then up's 64 + r4 - 32 */
                        const int o2 = ob + STAGED_BN + (UP ? r4 % 32 : r4);
                        const size_t up_rows = UP && r4 >= 32 ? (size_t)de * (size_t)k : 0;
                        src = o2 < n_out ? wbase + up_rows + (size_t)o2 * (size_t)k : NULL;
                    }
                    const bf16_t *from = src ? src + kk : wbase;
                    unsigned char *to = st + h2 * 64 * 64;
                    cp_async16_or_zero(to, from, src != NULL);
                    cp_async16_or_zero(to + STAGED_BM * 64, from + 32, src && hi);
                }
                int o = ob + r4; /* output r4 of the block (gate's, up's) */
                /* made anew each chunk: held across the chunk loop, the weight rows' addresses
                 * spilled the up kernel */
                asm volatile("" : "+r"(o));
                const bool w_ok = o < n_out;
                const bf16_t *w = w_ok ? wbase + (size_t)o * (size_t)k + kk : wbase;
                unsigned char *to = st + STAGED_A_BYTES;
#pragma unroll
                for (int h2 = 0; h2 < (UP ? 2 : 1); h2++) { /* UP: gate's row, then up's */
                    const bf16_t *from = w + (h2 && w_ok ? (size_t)de * (size_t)k : 0);
                    cp_async16_or_zero(to + h2 * 64 * 64, from, w_ok);
                    cp_async16_or_zero(to + h2 * 64 * 64 + BR * 64, from + 32, w_ok && hi);
                }
            }
            cp_async_commit();
            return;
        }
        if (c < n_chunks) {
            unsigned char *st = staged_smem + (c % STAGES) * STAGE;
            for (int x = tid; x < STAGED_KB * STAGED_BM * 4; x += STAGED_THREADS) {
                const int kb = x / (STAGED_BM * 4), row = x / 4 % STAGED_BM, part = x % 4;
                const int kk = (c * STAGED_KB + kb) * 32 + part * 8;
                unsigned char *dst = st + (kb * STAGED_BM + row) * 64 + part * 16;
                const bf16_t *src = s_row[row];
                if (src && kk < k)
                    cp_async16(dst, src + kk);
                else
                    *reinterpret_cast<uint4 *>(dst) = zero;
            }
            for (int x = tid; x < STAGED_KB * BR * 4; x += STAGED_THREADS) {
                const int kb = x / (BR * 4), row = x / 4 % BR, part = x % 4;
                const int kk = (c * STAGED_KB + kb) * 32 + part * 8;
                const int o = ob + row % STAGED_BN; /* up's rows follow gate's */
                unsigned char *dst = st + STAGED_A_BYTES + (kb * BR + row) * 64 + part * 16;
                if (o < n_out && kk < k)
                    cp_async16(dst, wbase +
                                        ((UP && row >= STAGED_BN ? (size_t)de : 0) + (size_t)o) *
                                            (size_t)k +
                                        kk);
                else
                    *reinterpret_cast<uint4 *>(dst) = zero;
            }
        }
        cp_async_commit();
    };

    /* WA: one weight tile of 16 rows by item tiles of 8 (the down kernel: the warp's 16 outputs
     * and 64 items; the up kernel: its 8 outputs' gate and up rows, and all 128 items); else
     * item tiles of 16 by weight tiles of 8 */
    constexpr int WA_TILES = (UP ? 4 : 2) * TILES_MT;
    float acc[WA ? 1 : TILES_MT][WA ? WA_TILES : NB][4];
    /* 32-k block kb of the stage at st into this warp's accumulators: each (item tile, weight
     * tile) pair gets the block's two mmas in order */
    /* items_hi: the tile's second 64 items hold one that is not padding (the up kernel's WA) */
    auto kblock = [&](const unsigned char *st, int kb, bool items_hi) {
        if constexpr (WA) {
            /* the warp's A tile as two operands, rows g and g + 8 a word at a time; each word
             * passed through an exclusive or with a zero ptxas cannot see, so that the operands
             * are made once a block: as plain copies of the loaded words, ptxas rebuilt them
             * with moves before every mma, as it does the item operands below */
            const uint32_t opaque_zero = (uint32_t)(a.d_model < 0);
            /* the A tile's rows g and g + 8: the down kernel's outputs w_row0 + g and + 8; the up
             * kernel's output warp * 8 + g of gate and of up (so GeGLU's two operands meet in
             * one lane's accumulators) */
            const int lo_row = UP ? warp * 8 + g : w_row0 + g;
            const int hi_row = UP ? STAGED_BN + warp * 8 + g : w_row0 + g + 8;
            const unsigned char *wr = st + w_part + kb * w_kb_rows * 64 + q * 16;
            const uint4 lo = *reinterpret_cast<const uint4 *>(wr + lo_row * 64);
            const uint4 hi = *reinterpret_cast<const uint4 *>(wr + hi_row * 64);
            const uint32_t f[8] = {lo.x, hi.x, lo.y, hi.y, lo.z, hi.z, lo.w, hi.w};
            uint32_t wa[8];
#pragma unroll
            for (int j = 0; j < 8; j++)
                wa[j] = f[j] ^ opaque_zero;
#pragma unroll
            for (int n = 0; n < WA_TILES; n++) {                 /* item tiles of 8 */
                if (UP && n == WA_TILES / 2 && !items_hi) break; /* warp-uniform */
                const int row = (UP ? 0 : wm * 16 * TILES_MT) + 8 * n + g;
                const uint4 xv =
                    *reinterpret_cast<const uint4 *>(st + (kb * STAGED_BM + row) * 64 + q * 16);
                mma_16816(acc[0][n], wa[0], wa[1], wa[2], wa[3], xv.x, xv.y);
                mma_16816(acc[0][n], wa[4], wa[5], wa[6], wa[7], xv.z, xv.w);
            }
        } else {
            uint4 av[TILES_MT], a8v[TILES_MT];
#pragma unroll
            for (int i = 0; i < TILES_MT; i++) {
                const int row = wm * 16 * TILES_MT + 16 * i + g;
                av[i] = *reinterpret_cast<const uint4 *>(st + (kb * STAGED_BM + row) * 64 + q * 16);
                a8v[i] =
                    *reinterpret_cast<const uint4 *>(st + (kb * STAGED_BM + row + 8) * 64 + q * 16);
            }
            /* a weight tile at a time (the registers for two blocks an SM) */
#pragma unroll
            for (int t = 0; t < NB; t++) { /* gate's tiles, then up's (UP) */
                const int row = (t >= TILES_NT ? w_up : 0) + w_row0 + 8 * (t % TILES_NT) + g;
                const uint4 bv = *reinterpret_cast<const uint4 *>(
                    st + w_part + (kb * w_kb_rows + row) * 64 + q * 16);
#pragma unroll
                for (int i = 0; i < TILES_MT; i++) {
                    mma_16816(acc[i][t], av[i].x, a8v[i].x, av[i].y, a8v[i].y, bv.x, bv.y);
                    mma_16816(acc[i][t], av[i].z, a8v[i].z, av[i].w, a8v[i].w, bv.z, bv.w);
                }
            }
        }
    };

    for (int r0 = 0; r0 < n; r0 += STAGED_BM) {
        if (r0 > 0) __syncthreads(); /* the last tile's s_row, s_item and epilogue reads */
        moe_bucket bt = b;
        /* the up kernel's WA form: the bucket's first item read again each tile (a volatile
         * load), not held across the tile's k loop, where it was the register that spilled */
        if constexpr (UP && WA)
            bt.first = *(reinterpret_cast<const volatile int32_t *>(active) + 3 * blockIdx.y + 1);
        moe_bucket_rows<UP, STAGED_BM, STAGED_THREADS>(a, list, bt, r0, h, s_row, s_item);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < (WA ? 1 : TILES_MT); i++)
#pragma unroll
            for (int t = 0; t < (WA ? WA_TILES : NB); t++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][t][j] = 0.0f;
        /* RING: whether this warp's items hold one that is not padding (warp-uniform) */
        const bool live = (!RING || (UP && WA) || r0 + wm * 16 * TILES_MT < n) && !w_idle;
        if constexpr (RING)
            for (int c = 0; c < STAGES - 1; c++)
                issue(c);
        else
            issue(0);
        for (int c = 0; c < n_chunks; c++) {
            if constexpr (RING) {
                cp_async_wait_all_but<STAGES - 2>(); /* this thread's copies of chunk c */
                __syncthreads();       /* everyone's, and chunk c - 1's stage is read by all */
                issue(c + STAGES - 1); /* into that stage */
            } else {
                issue(c + 1);        /* into the stage the previous chunk used */
                cp_async_wait_one(); /* this thread's copies of chunk c have landed */
                __syncthreads();     /* everyone's */
            }
            const unsigned char *st = staged_smem + (c % STAGES) * STAGE;
            if (live) {
#pragma unroll 1 /* unrolled, the next block's operands came early and spilled */
                for (int kb = 0; kb < STAGED_KB; kb++) {
                    if (c * STAGED_KB + kb >= nkb) break; /* block-uniform */
                    kblock(st, kb, r0 + STAGED_BM / 2 < n);
                }
            }
            if constexpr (!RING)
                __syncthreads(); /* the stage is read before the next issue overwrites it */
        }
        /* RING: the groups past the last chunk are empty; the barrier at the next item tile's
         * start keeps its first copies from a stage a warp still reads */
        if constexpr (RING) cp_async_wait_all_but<0>();
        if constexpr (WA && UP) {
            /* acc[0][n][j]: item 2q + j % 2 of tile n; j < 2 its gate, j >= 2 its up of output
             * warp * 8 + g */
#pragma unroll
            for (int n = 0; n < WA_TILES; n++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int item = s_item[8 * n + 2 * q + j];
                    const int o = ob + warp * 8 + g;
                    if (item >= 0 && o < n_out)
                        h[(size_t)item * (size_t)de + (size_t)o] =
                            k_f32_to_bf16(k_round_bf16(k_gelu_tanh(k_round_bf16(acc[0][n][j]))) *
                                          k_round_bf16(acc[0][n][2 + j]));
                }
        } else if constexpr (WA) {
            /* acc[0][n][j]: output g + 8 (j / 2) of the warp's 16, item 2q + j % 2 of tile n */
#pragma unroll
            for (int n = 0; n < 2 * TILES_MT; n++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int item = s_item[wm * 16 * TILES_MT + 8 * n + 2 * q + (j & 1)];
                    const int o = ob + wo * 8 * TILES_NT + g + 8 * (j >> 1);
                    if (item >= 0 && o < n_out)
                        ys[(size_t)item * (size_t)dm + (size_t)o] = k_round_bf16(acc[0][n][j]);
                }
        } else {
#pragma unroll
            for (int i = 0; i < TILES_MT; i++) {
                const int row = wm * 16 * TILES_MT + 16 * i + g;
                const int ilo = s_item[row], ihi = s_item[row + 8];
#pragma unroll
                for (int t = 0; t < TILES_NT; t++)
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const int item = j < 2 ? ilo : ihi;
                        const int o = ob + wo * 8 * TILES_NT + 8 * t + 2 * q + (j & 1);
                        if (item < 0 || o >= n_out || w_idle) continue;
                        if constexpr (UP)
                            h[(size_t)item * (size_t)de + (size_t)o] = k_f32_to_bf16(
                                k_round_bf16(k_gelu_tanh(k_round_bf16(acc[i][t][j]))) *
                                k_round_bf16(acc[i][TILES_NT + t][j]));
                        else
                            ys[(size_t)item * (size_t)dm + (size_t)o] = k_round_bf16(acc[i][t][j]);
                    }
            }
        }
    }
}

/* one staged form's dynamic shared memory allowance (the ring forms hold three stages) */
template <bool UP, bool RING = false, bool ZFILL = false, bool HALF = false, bool WA = false>
static int staged_allow_form(void) {
    constexpr int STAGES = RING ? 3 : 2;
    CUDA_CHECK(cudaFuncSetAttribute(moe_staged_kernel<UP, RING, ZFILL, HALF, WA>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)staged_smem_bytes<UP, STAGES>()));
    return K_OK;
}

/* every form k_moe_experts launches, of one direction (the weights-on-A forms are the down
 * kernel's only) */
template <bool UP> static int staged_allow_direction(void) {
    const int rc[] = {staged_allow_form<UP>(), staged_allow_form<UP, true>(),
                      staged_allow_form<UP, true, true>(),
                      staged_allow_form<UP, true, true, true>()};
    for (int r : rc)
        if (r != K_OK) return r;
    const int rc_wa[] = {staged_allow_form<UP, true, true, false, true>(),
                         staged_allow_form<UP, true, true, !UP, true>()};
    for (int r : rc_wa)
        if (r != K_OK) return r;
    return K_OK;
}

/* The staged kernels' shared-memory limit (64 KB for up, 48 KB for down; in the ring 96 and 72),
 * raised once: at
 * start-up (k_moe_setup, before any graph capture) and, for callers that skip it (the tests),
 * before the first launch. */
static int staged_allow(void) {
    static bool set = false;
    if (!set) {
        int rc = staged_allow_direction<true>();
        if (rc == K_OK) rc = staged_allow_direction<false>();
        if (rc != K_OK) return rc;
        set = true;
    }
    return K_OK;
}
extern "C" int k_moe_setup(void) {
    const int rc = staged_allow();
    return rc != K_OK ? rc : k_moe_stream_setup();
}

/* out[r, t] = bf(sum_k ys[r*top_k + k, t] * w[r, k]) in rank order (SLAB: the item's row of the
 * prompt path's down products, yb[pos[item]], in place of ys; the same values). Grid: (rows,
 * d_model tiles of COMBINE_THREADS), one output per thread. The row's ids and weights go to shared
 * memory first, then every thread issues its top_k loads before the first add, so a block waits on
 * one load's latency rather than top_k in a chain (docs/perf-notes.md, "Experts"). The product and
 * the sum are rounded separately (__fmul_rn, __fadd_rn), as the C reference does: y_k * w_k is
 * not exact in fp32, so an FMA would round differently. */
template <bool SLAB = false>
__global__ static void __launch_bounds__(COMBINE_THREADS)
    moe_combine_kernel(k_moe_experts_args a, const float *ys, const bf16_t *yb = NULL,
                       const int32_t *pos = NULL) {
    K_GRID_DEPENDENCY();
    __shared__ int bad;
    __shared__ float wk[ROUTE_MAX_TOP_K];
    const int r = blockIdx.x, dm = a.d_model, t = blockIdx.y * COMBINE_THREADS + threadIdx.x;
    const size_t item0 = (size_t)r * (size_t)a.top_k;
    if (threadIdx.x == 0) bad = 0;
    __syncthreads();
    if (threadIdx.x < a.top_k) {
        int e = a.idx[item0 + threadIdx.x];
        if (e < 0 || e >= a.n_expert) atomicOr(&bad, 1);
        wk[threadIdx.x] = a.weight[item0 + threadIdx.x];
    }
    __syncthreads();
    if (t >= dm) return;
    float y[ROUTE_MAX_TOP_K];
    if constexpr (SLAB) {
        if (bad) { /* a bad id's item has no slab row */
            a.out[(size_t)r * (size_t)dm + (size_t)t] = k_f32_to_bf16(NAN);
            return;
        }
#pragma unroll
        for (int k = 0; k < ROUTE_MAX_TOP_K; k++)
            if (k < a.top_k)
                y[k] = k_bf16_to_f32(yb[(size_t)pos[item0 + (size_t)k] * (size_t)dm + (size_t)t]);
    } else {
#pragma unroll
        for (int k = 0; k < ROUTE_MAX_TOP_K; k++)
            if (k < a.top_k) y[k] = ys[(item0 + (size_t)k) * (size_t)dm + (size_t)t];
    }
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < ROUTE_MAX_TOP_K; k++)
        if (k < a.top_k) acc = __fadd_rn(acc, __fmul_rn(y[k], wk[k]));
    /* a bad id was never computed: make it visible */
    a.out[(size_t)r * (size_t)dm + (size_t)t] = k_f32_to_bf16(bad ? NAN : acc);
}

/* ---- launchers ---- */

static int bucket_in_up = 1; /* serve.moe_bucket_in_up's default */
extern "C" void k_set_moe_bucket_in_up(int on) { bucket_in_up = on ? 1 : 0; }
static int prefill_tiles = 3; /* serve.moe_prefill_tiles' default */
extern "C" void k_set_moe_prefill_tiles(int mode) {
    prefill_tiles = mode >= 3 ? 3 : mode > 0 ? mode : 0;
}
static int ring_zfill = 1; /* serve.moe_ring_zfill's default */
extern "C" void k_set_moe_ring_zfill(int on) { ring_zfill = on ? 1 : 0; }
static int half_tiles = 2; /* serve.moe_half_tiles' default */
extern "C" void k_set_moe_half_tiles(int mode) { half_tiles = mode >= 2 ? 2 : mode > 0 ? 1 : 0; }
static int weights_a = 0; /* serve.moe_weights_a's default: off until measured */
extern "C" void k_set_moe_weights_a(int mode) { weights_a = mode >= 2 ? 2 : mode > 0 ? 1 : 0; }

static int stream_items = 0; /* serve.expert_stream's default: off until measured */
extern "C" void k_set_moe_expert_stream(int max_items) {
    stream_items = max_items < 0                   ? 0
                   : max_items > INBLOCK_MAX_ITEMS ? INBLOCK_MAX_ITEMS
                                                   : max_items;
}
static int route_lanes = 1; /* serve.moe_route_lanes' default */
extern "C" void k_set_moe_route_lanes(int on) { route_lanes = on ? 1 : 0; }

extern "C" int k_moe_route(const k_moe_route_args *a, g4_stream st) {
    if (a->rows < 0 || a->n_expert <= 0 || a->n_expert > ROUTE_MAX_EXPERT || a->top_k <= 0 ||
        a->top_k > ROUTE_MAX_TOP_K || a->top_k > a->n_expert)
        return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->idx || !a->weight || !a->logits || !a->per_expert_scale) return K_ERR_SHAPE;
    CUDA_CHECK(k_launch(route_lanes ? moe_route_lanes_kernel : moe_route_kernel, a->rows,
                        ROUTE_THREADS, 0, (cudaStream_t)st, *a));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* ys [items, d_model] fp32, h [items, d_expert] bf16 (16-byte aligned end), then list [items],
 * active [3 * n_expert] and n_active, int32. */
/* ---- prompt rows' experts as batched cuBLASLt products (serve.prompt_experts) ----
 *
 * A prompt chunk's items (rows x top_k, ~64 an expert at 1,024 rows of the 26B-A4B) are bucketed
 * as the other paths do, then each active expert's bucket is cut into tiles of prompt_tile items
 * (the last one partial). Every tile's items are gathered into a slab of prompt_tile rows; gate|up
 * runs as one pointer-array batched cuBLASLt call over every tile (each tile's product reads its
 * own expert's weights), GeGLU, down likewise, and the combine reads each item's row of the down
 * products where its tile put it. So each expert's weights are read about once a call (its tiles
 * are neighbours in the batch), whatever the largest bucket holds: the strided form this replaced
 * ran every expert's product over the largest bucket's rounds. cuBLASLt's split-k-1 algorithms
 * sum an output row as one chain of 16-k steps at any m (docs/prompt-rows.md), so an item's bits
 * do not depend on its tile, its place in it or how many items share its expert: batch
 * invariance holds for prompt rows, which are of another kind than generated rows (those keep the
 * other paths). Rounding points as there: gate and up to bf16 (cuBLASLt's output),
 * h = bf(bf(gelu(g)) * u), the down products to bf16, the weighted fp32 sum in rank order. A
 * tile's rows past its items compute on whatever the slab holds; nothing reads them. */
#define PROMPT_THREADS 128
#define PROMPT_TILE_THREADS 1024 /* the tiles kernel: one thread an active expert */
#define PROMPT_PTRS 6            /* pointer arrays: up's w, x, y, then down's */

static int prompt_experts; /* serve.prompt_experts */
extern "C" void k_set_moe_prompt_experts(int on) { prompt_experts = on != 0; }
/* items a tile: the products' rows (serve.prompt_tile; an expert's padding below one tile) */
static int prompt_tile = K_PROMPT_TILE_DEFAULT;
extern "C" int k_set_moe_prompt_tile(int items) {
    if (items < K_PROMPT_TILE_MIN || items > K_PROMPT_TILE_MAX) return K_ERR_SHAPE;
    prompt_tile = items;
    return K_OK;
}

/* The most tiles a call of items items can cut: every active expert's last tile partial */
static size_t prompt_max_tiles(size_t items, int n_expert) {
    const size_t active = items < (size_t)n_expert ? items : (size_t)n_expert;
    return (items + (size_t)prompt_tile - 1) / (size_t)prompt_tile + active;
}

/* What the prompt path adds to the workspace, in this order: the pointer arrays
 * [PROMPT_PTRS][tiles], the slab x gathered (then the down products) [tiles * prompt_tile,
 * d_model], gate|up [.., 2 * d_expert] and h [.., d_expert], then int32 tiles' table
 * [tiles][3], the tile count and each item's slab row [items] */
static size_t prompt_ws_bytes(size_t items, int d_model, int d_expert, int n_expert) {
    const size_t tiles = prompt_max_tiles(items, n_expert), rows = tiles * (size_t)prompt_tile;
    return PROMPT_PTRS * tiles * sizeof(void *) +
           ((rows * ((size_t)d_model + 3 * (size_t)d_expert) * sizeof(bf16_t) + 15) & ~(size_t)15) +
           (((3 * tiles + 1 + items) * sizeof(int32_t) + 15) & ~(size_t)15);
}

extern "C" size_t k_moe_experts_workspace(int rows, int d_model, int d_expert, int n_expert,
                                          int top_k) {
    size_t items = (size_t)rows * (size_t)top_k;
    size_t ys_bytes = items * (size_t)d_model * sizeof(float);
    size_t h_bytes = (items * (size_t)d_expert * sizeof(bf16_t) + 15) & ~(size_t)15;
    size_t lists = ((items + 3 * (size_t)n_expert + 1) * sizeof(int32_t) + 15) & ~(size_t)15;
    return ys_bytes + h_bytes + lists +
           (prompt_experts ? prompt_ws_bytes(items, d_model, d_expert, n_expert) : 0);
}

/* The prompt path's parts of the workspace (prompt_ws_bytes) */
typedef struct {
    const void **ptrs; /* [PROMPT_PTRS][max_tiles] */
    bf16_t *xb, *gu, *h;
    int32_t *tiles, *n_tiles, *pos;
    int max_tiles, tile; /* tile: items a tile (prompt_tile when the workspace was cut) */
} prompt_ws;

static prompt_ws prompt_ws_at(void *base, size_t items, int d_model, int d_expert, int n_expert) {
    prompt_ws w;
    const size_t tiles = prompt_max_tiles(items, n_expert), rows = tiles * (size_t)prompt_tile;
    w.max_tiles = (int)tiles;
    w.tile = prompt_tile;
    w.ptrs = (const void **)base;
    w.xb = (bf16_t *)((char *)base + PROMPT_PTRS * tiles * sizeof(void *));
    w.gu = w.xb + rows * (size_t)d_model;
    w.h = w.gu + rows * 2 * (size_t)d_expert;
    w.tiles = (int32_t *)((char *)w.xb +
                          ((rows * ((size_t)d_model + 3 * (size_t)d_expert) * sizeof(bf16_t) + 15) &
                           ~(size_t)15));
    w.n_tiles = w.tiles + 3 * tiles;
    w.pos = w.n_tiles + 1;
    return w;
}

/* One block: the active experts' buckets (moe_bucket_kernel) cut into tiles of w.tile
 * items in expert order, tile t = (expert, its first item's place in list, its items), and the
 * pointers the batched products read: up w = the expert's gate|up, x = the tile's slab rows,
 * y = its gate|up rows; down w = the expert's down, x = its h rows, y = its slab rows again. */
__global__ static void __launch_bounds__(PROMPT_TILE_THREADS)
    moe_prompt_tiles_kernel(k_moe_experts_args a, const int32_t *active, const int32_t *n_active,
                            prompt_ws w) {
    K_GRID_DEPENDENCY();
    __shared__ int first[EXPERTS_MAX_EXPERT + 1];
    const int n = *n_active, i = threadIdx.x;
    const int count = i < n ? active[3 * i + 2] : 0;
    const int tile = w.tile;
    if (i < EXPERTS_MAX_EXPERT) first[i + 1] = (count + tile - 1) / tile;
    __syncthreads();
    if (i == 0) { /* at most n_expert adds: a few microseconds, once a call */
        first[0] = 0;
        for (int j = 1; j <= n; j++)
            first[j] += first[j - 1];
        *w.n_tiles = first[n];
    }
    __syncthreads();
    if (i >= n) return;
    const int e = active[3 * i], start = active[3 * i + 1];
    const size_t dm = (size_t)a.d_model, de = (size_t)a.d_expert, mt = (size_t)w.max_tiles;
    for (int t = first[i]; t < first[i + 1]; t++) {
        const int j = t - first[i];
        const size_t row = (size_t)t * tile;
        w.tiles[3 * t] = e;
        w.tiles[3 * t + 1] = start + j * tile;
        w.tiles[3 * t + 2] = min(tile, count - j * tile);
        w.ptrs[0 * mt + t] = a.gate_up + (size_t)e * 2 * de * dm;
        w.ptrs[1 * mt + t] = w.xb + row * dm;
        w.ptrs[2 * mt + t] = w.gu + row * 2 * de;
        w.ptrs[3 * mt + t] = a.down + (size_t)e * dm * de;
        w.ptrs[4 * mt + t] = w.h + row * de;
        w.ptrs[5 * mt + t] = w.xb + row * dm;
    }
}

/* Whether slot blockIdx.x of tile blockIdx.y holds an item; *item its place in list */
static __device__ __forceinline__ bool prompt_slot(const prompt_ws &w, int *place) {
    const int *t = w.tiles + 3 * blockIdx.y;
    *place = t[1] + (int)blockIdx.x;
    return (int)blockIdx.x < t[2];
}

/* xb[tile, slot] = x[row of the slot's item]; pos[item] = that slab row. Grid (w.tile,
 * tiles). */
__global__ static void __launch_bounds__(PROMPT_THREADS)
    moe_prompt_gather_kernel(k_moe_experts_args a, const int32_t *list, prompt_ws w) {
    K_GRID_DEPENDENCY();
    int place;
    if (!prompt_slot(w, &place)) return;
    const int item = list[place];
    const size_t row = (size_t)blockIdx.y * (size_t)w.tile + blockIdx.x;
    if (threadIdx.x == 0) w.pos[item] = (int32_t)row;
    const uint4 *src = (const uint4 *)(a.x + (size_t)(item / a.top_k) * (size_t)a.d_model);
    uint4 *dst = (uint4 *)(w.xb + row * (size_t)a.d_model);
    for (int i = threadIdx.x; i < a.d_model / 8; i += PROMPT_THREADS)
        dst[i] = src[i];
}

/* h[row] = bf(bf(gelu(g)) * u) of the gate|up products' row (gate first, then up) */
__global__ static void __launch_bounds__(PROMPT_THREADS)
    moe_prompt_geglu_kernel(int de, prompt_ws w) {
    K_GRID_DEPENDENCY();
    int place;
    if (!prompt_slot(w, &place)) return;
    const size_t row = (size_t)blockIdx.y * (size_t)w.tile + blockIdx.x;
    const bf16_t *g = w.gu + row * 2 * (size_t)de;
    bf16_t *o = w.h + row * (size_t)de;
    for (int i = threadIdx.x; i < de; i += PROMPT_THREADS)
        o[i] = k_f32_to_bf16(k_round_bf16(k_gelu_tanh(k_bf16_to_f32(g[i]))) *
                             k_bf16_to_f32(g[de + i]));
}

/* The batched plans of one expert shape, made on first use (prompt steps are never captured in
 * a graph) and kept for the process, as the other kernels' attributes are */
static struct {
    int n_expert, d_model, d_expert, tile;
    k_gemm_plan *up, *down;
    int32_t *host;                     /* pinned: the tile count, read back each call */
    long long calls, items, tile_rows; /* k_moe_prompt_stats */
} pp;

extern "C" void k_moe_prompt_stats(long long *calls, long long *items, long long *tile_rows) {
    *calls = pp.calls;
    *items = pp.items;
    *tile_rows = pp.tile_rows;
}

static int prompt_plans_for(int d_model, int d_expert, int n_expert) {
    if (pp.up && pp.n_expert == n_expert && pp.d_model == d_model && pp.d_expert == d_expert &&
        pp.tile == prompt_tile)
        return K_OK;
    pp.tile = -1; /* matches no setting until both plans below are made */
    k_gemm_plan_destroy(pp.up);
    k_gemm_plan_destroy(pp.down);
    pp.up = pp.down = NULL;
    /* the heuristic asked at a chunk's usual count: one or two tiles an expert */
    const int typical = 2 * n_expert;
    pp.up = k_gemm_ptrs_plan(typical, prompt_tile, 2 * d_expert, d_model);
    pp.down = k_gemm_ptrs_plan(typical, prompt_tile, d_model, d_expert);
    if (!pp.host) CUDA_CHECK(cudaMallocHost(&pp.host, sizeof(int32_t)));
    if (!pp.up || !pp.down) return K_ERR_SHAPE;
    pp.n_expert = n_expert;
    pp.d_model = d_model;
    pp.d_expert = d_expert;
    pp.tile = prompt_tile;
    return K_OK;
}

extern "C" int k_moe_prompt_prepare(int d_model, int d_expert, int n_expert) {
    if (!prompt_experts) return K_OK;
    const int rc = prompt_plans_for(d_model, d_expert, n_expert);
    if (rc != K_OK) prompt_experts = 0;
    return rc;
}

/* The prompt path of k_moe_experts (a: the prompt rows alone), on its bucketed lists; the
 * combine reads the down products through w.pos */
static int moe_prompt_experts(const k_moe_experts_args *a, const int32_t *list,
                              const int32_t *active, const int32_t *n_active, const prompt_ws &w,
                              cudaStream_t s) {
    int rc = prompt_plans_for(a->d_model, a->d_expert, a->n_expert);
    if (rc != K_OK) return rc;
    CUDA_CHECK(
        k_launch(moe_prompt_tiles_kernel, 1, PROMPT_TILE_THREADS, 0, s, *a, active, n_active, w));
    CUDA_CHECK(cudaGetLastError());
    /* the tile count sets the products' batch: read back once */
    CUDA_CHECK(cudaMemcpyAsync(pp.host, w.n_tiles, sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    const int n = pp.host[0];
    if (n < 0 || n > w.max_tiles) return K_ERR_SHAPE;
    pp.calls++;
    pp.items += (long long)a->rows * a->top_k;
    pp.tile_rows += (long long)n * w.tile;
    if (n == 0) return K_OK; /* every id bad: the combine says so */
    const dim3 grid((unsigned)w.tile, (unsigned)n);
    const size_t mt = (size_t)w.max_tiles;
    CUDA_CHECK(k_launch(moe_prompt_gather_kernel, grid, PROMPT_THREADS, 0, s, *a, list, w));
    CUDA_CHECK(cudaGetLastError());
    rc = k_gemm_ptrs(pp.up, n, w.ptrs, w.ptrs + mt, (void *)(w.ptrs + 2 * mt), s);
    if (rc != K_OK) return rc;
    CUDA_CHECK(k_launch(moe_prompt_geglu_kernel, grid, PROMPT_THREADS, 0, s, a->d_expert, w));
    CUDA_CHECK(cudaGetLastError());
    return k_gemm_ptrs(pp.down, n, w.ptrs + 3 * mt, w.ptrs + 4 * mt, (void *)(w.ptrs + 5 * mt), s);
}

extern "C" int k_moe_experts(const k_moe_experts_args *a, g4_stream st) {
    /* 16-byte loads: rows of x, gate_up, down and h start on 16 bytes when the bases do and
     * d_model, d_expert are multiples of 8 */
    if (a->rows < 0 || a->d_model <= 0 || a->d_expert <= 0 || a->d_model % 8 != 0 ||
        a->d_expert % 8 != 0 || a->n_expert <= 0 || a->n_expert > EXPERTS_MAX_EXPERT ||
        a->top_k <= 0 || a->top_k > ROUTE_MAX_TOP_K)
        return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->out || !a->x || !a->gate_up || !a->down || !a->idx || !a->weight ||
        (uintptr_t)a->gate_up % 16 != 0 || (uintptr_t)a->down % 16 != 0 ||
        (uintptr_t)a->x % 16 != 0 || a->prompt_rows < 0 || a->prompt_rows > a->rows)
        return K_ERR_SHAPE;
    const bool prompt_path = prompt_experts && a->prompt_rows > 0;
    if (prompt_path && a->prompt_rows < a->rows) { /* the generated rows first, as before */
        k_moe_experts_args gen = *a, pr = *a;
        gen.rows = a->rows - a->prompt_rows;
        gen.prompt_rows = 0;
        int rc = k_moe_experts(&gen, st);
        if (rc != K_OK) return rc;
        const size_t r0 = (size_t)gen.rows;
        pr.rows = pr.prompt_rows = a->prompt_rows;
        pr.out += r0 * (size_t)a->d_model;
        pr.x += r0 * (size_t)a->d_model;
        pr.idx += r0 * (size_t)a->top_k;
        pr.weight += r0 * (size_t)a->top_k;
        return k_moe_experts(&pr, st);
    }
    size_t items = (size_t)a->rows * (size_t)a->top_k;
    if (items > (size_t)INT32_MAX / (size_t)a->d_model) return K_ERR_SHAPE;
    size_t ys_bytes = items * (size_t)a->d_model * sizeof(float);
    size_t h_bytes = (items * (size_t)a->d_expert * sizeof(bf16_t) + 15) & ~(size_t)15;
    cudaStream_t s = (cudaStream_t)st;
    void *ws_buf = NULL;
    int rc =
        k_scratch(K_SCRATCH_MOE,
                  k_moe_experts_workspace(a->rows, a->d_model, a->d_expert, a->n_expert, a->top_k),
                  s, &ws_buf);
    if (rc != K_OK) return rc;
    float *ys = (float *)ws_buf;
    bf16_t *h = (bf16_t *)((char *)ws_buf + ys_bytes);
    int32_t *list = (int32_t *)((char *)ws_buf + ys_bytes + h_bytes);
    int32_t *active = list + items;
    int32_t *n_active = active + 3 * a->n_expert;
    const size_t lists =
        ((items + 3 * (size_t)a->n_expert + 1) * sizeof(int32_t) + 15) & ~(size_t)15;
    /* one grid row per possible active expert; the rows past *n_active return at once */
    unsigned slots = (unsigned)(items < (size_t)a->n_expert ? items : (size_t)a->n_expert);

    const bool tensor_cores = a->d_model % 32 == 0 && a->d_expert % 32 == 0;
    const bool inblock = bucket_in_up && tensor_cores && items <= INBLOCK_MAX_ITEMS;
    if (!inblock || prompt_path) {
        CUDA_CHECK(k_launch(moe_bucket_kernel, 1, BUCKET_THREADS, 0, s, a->idx, (int)items,
                            a->n_expert, list, active, n_active));
        CUDA_CHECK(cudaGetLastError());
    }
    dim3 combine((unsigned)a->rows,
                 (unsigned)((a->d_model + COMBINE_THREADS - 1) / COMBINE_THREADS));
    if (prompt_path) {
        const prompt_ws w = prompt_ws_at((char *)ws_buf + ys_bytes + h_bytes + lists, items,
                                         a->d_model, a->d_expert, a->n_expert);
        rc = moe_prompt_experts(a, list, active, n_active, w, s);
        if (rc != K_OK) return rc;
        CUDA_CHECK(k_launch(moe_combine_kernel<true>, combine, COMBINE_THREADS, 0, s, *a, ys,
                            (const bf16_t *)w.xb, (const int32_t *)w.pos));
        CUDA_CHECK(cudaGetLastError());
        return K_OK;
    }
    if (tensor_cores && prefill_tiles == 3 && items > INBLOCK_MAX_ITEMS) {
        rc = staged_allow();
        if (rc != K_OK) return rc;
        dim3 up((unsigned)((a->d_expert + STAGED_BN - 1) / STAGED_BN), slots);
        dim3 down((unsigned)((a->d_model + STAGED_BN - 1) / STAGED_BN), slots);
        CUDA_CHECK(k_launch(!ring_zfill       ? moe_staged_kernel<true, true>
                            : weights_a == 2  ? moe_staged_kernel<true, true, true, false, true>
                            : half_tiles == 2 ? moe_staged_kernel<true, true, true, true>
                                              : moe_staged_kernel<true, true, true>,
                            up, STAGED_THREADS, staged_smem_bytes<true, 3>(), s, *a, list, active,
                            n_active, h, (float *)NULL));
        CUDA_CHECK(cudaGetLastError());
        const bool wa = ring_zfill && weights_a;
        CUDA_CHECK(k_launch(!ring_zfill  ? moe_staged_kernel<false, true>
                            : half_tiles ? (wa ? moe_staged_kernel<false, true, true, true, true>
                                               : moe_staged_kernel<false, true, true, true>)
                                         : (wa ? moe_staged_kernel<false, true, true, false, true>
                                               : moe_staged_kernel<false, true, true>),
                            down, STAGED_THREADS, staged_smem_bytes<false, 3>(), s, *a, list,
                            active, n_active, h, ys));
        CUDA_CHECK(cudaGetLastError());
    } else if (tensor_cores && prefill_tiles == 2 && items > INBLOCK_MAX_ITEMS) {
        rc = staged_allow();
        if (rc != K_OK) return rc;
        dim3 up((unsigned)((a->d_expert + STAGED_BN - 1) / STAGED_BN), slots);
        CUDA_CHECK(k_launch(moe_staged_kernel<true>, up, STAGED_THREADS, staged_smem_bytes<true>(),
                            s, *a, list, active, n_active, h, (float *)NULL));
        CUDA_CHECK(cudaGetLastError());
        dim3 down((unsigned)((a->d_model + STAGED_BN - 1) / STAGED_BN), slots);
        CUDA_CHECK(k_launch(moe_staged_kernel<false>, down, STAGED_THREADS,
                            staged_smem_bytes<false>(), s, *a, list, active, n_active, h, ys));
        CUDA_CHECK(cudaGetLastError());
    } else if (tensor_cores && prefill_tiles && items > INBLOCK_MAX_ITEMS) {
        dim3 up((unsigned)((a->d_expert + TILES_OUTS - 1) / TILES_OUTS), slots);
        CUDA_CHECK(
            k_launch(moe_up_tiles_kernel, up, TILES_THREADS, 0, s, *a, list, active, n_active, h));
        CUDA_CHECK(cudaGetLastError());
        dim3 down((unsigned)((a->d_model + TILES_OUTS - 1) / TILES_OUTS), slots);
        CUDA_CHECK(k_launch(moe_down_tiles_kernel, down, TILES_THREADS, 0, s, *a, list, active,
                            n_active, h, ys));
        CUDA_CHECK(cudaGetLastError());
    } else if (tensor_cores) {
        dim3 up((unsigned)((a->d_expert + MMA_UP_OUTS - 1) / MMA_UP_OUTS), slots);
        const bool wide = k_wide_loads && items <= WIDE_MAX_ITEMS;
        if (inblock && wide)
            CUDA_CHECK(k_launch(moe_up_mma_kernel<true, true>, up, MMA_UP_THREADS, 0, s, *a, list,
                                active, n_active, h));
        else if (inblock)
            CUDA_CHECK(k_launch(moe_up_mma_kernel<true>, up, MMA_UP_THREADS, 0, s, *a, list, active,
                                n_active, h));
        else if (wide)
            CUDA_CHECK(k_launch(moe_up_mma_kernel<false, true>, up, MMA_UP_THREADS, 0, s, *a, list,
                                active, n_active, h));
        else
            CUDA_CHECK(k_launch(moe_up_mma_kernel<false>, up, MMA_UP_THREADS, 0, s, *a, list,
                                active, n_active, h));
        CUDA_CHECK(cudaGetLastError());
        dim3 down((unsigned)((a->d_model + MMA_OUTS - 1) / MMA_OUTS), slots);
        if (items <= (size_t)stream_items) {
            rc = k_moe_stream_down(a, h, ys, slots, s);
            if (rc != K_OK) return rc;
        } else if (wide)
            CUDA_CHECK(k_launch(moe_down_mma_kernel<true>, down, MMA_THREADS, 0, s, *a, list,
                                active, n_active, h, ys));
        else
            CUDA_CHECK(k_launch(moe_down_mma_kernel<>, down, MMA_THREADS, 0, s, *a, list, active,
                                n_active, h, ys));
        CUDA_CHECK(cudaGetLastError());
    } else {
        dim3 up((unsigned)((a->d_expert + UP_OUTS - 1) / UP_OUTS), slots);
        CUDA_CHECK(
            k_launch(moe_up_kernel, up, EXPERT_THREADS, 0, s, *a, list, active, n_active, h));
        CUDA_CHECK(cudaGetLastError());
        dim3 down((unsigned)((a->d_model + DOWN_OUTS - 1) / DOWN_OUTS), slots);
        CUDA_CHECK(k_launch(moe_down_kernel, down, EXPERT_THREADS, 0, s, *a, list, active, n_active,
                            h, ys));
        CUDA_CHECK(cudaGetLastError());
    }
    CUDA_CHECK(k_launch(moe_combine_kernel<>, combine, COMBINE_THREADS, 0, s, *a, ys,
                        (const bf16_t *)NULL, (const int32_t *)NULL));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

K_TRACE_UNIT(moe) /* the kernel trace build's binder (common.cuh) */
