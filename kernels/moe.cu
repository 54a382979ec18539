/* kernels/moe.cu - the mixture of experts on the GPU: routing after the router's logits
 * (k_moe_route) and the routed experts (k_moe_experts). The router's projection and its input
 * norm/scale are ordinary ops elsewhere; this file owns only what follows the logits.
 *
 * Both ops compute the same function as their CPU twins in kernels/ref/moe_ref.c, with the
 * same bf16 roundings (HF's grouped_mm, gemma4/ARCHITECTURE.md 2.9):
 *
 *   route:   p = softmax_fp32(logits) (max-subtracted exp), top_k by p descending, ties to
 *            the lower id; w_k = p_k / sum(chosen p) * per_expert_scale[idx_k].
 *   experts: gu = bf(x @ gate_up[e]^T); h = bf(bf(gelu_tanh(g)) * u); y = bf(h @ down[e]^T);
 *            out = bf(sum_k y_k * w_k), the k terms summed in fp32 in rank order.
 *
 * Shape of the expert path (correct first; design/KERNELS.md asks for a grouped tensor-core
 * path later): one small single-block kernel buckets the (row, rank) items by expert, one block
 * per item then computes that item's expert output y into an fp32 workspace, and one block per
 * row sums its top_k terms in rank order. Blocks are dispatched in bucket order, so the blocks
 * that share an expert run side by side and read its 6 MB of weights through L2 rather than
 * once per item from HBM. The fp32 workspace is what keeps the rank-order sum exact and the
 * result of every row independent of its batch mates (design/GATES.md, batch invariance): no
 * item's arithmetic depends on which other items exist or in which order they were bucketed. */
#include "kernels/common.cuh"

#include <math.h>

#define ROUTE_THREADS 32     /* one warp per row */
#define ROUTE_MAX_EXPERT 256 /* p of a row lives in shared memory */
#define ROUTE_MAX_TOP_K 16

#define BUCKET_THREADS 1024
#define EXPERTS_MAX_EXPERT 1024 /* bucket counters live in shared memory */
#define EXPERT_THREADS 256      /* 8 warps per (row, rank) item */
#define EXPERT_WARPS (EXPERT_THREADS / 32)
#define EXPERT_SMEM_MAX (48u << 10) /* default dynamic shared memory limit, no opt-in needed */
#define COMBINE_THREADS 256

#define FULL_MASK 0xffffffffu

/* bf16 <-> fp32 bit for bit as kernels/ref/bf16_ref.c (round to nearest even, NaN kept quiet),
 * so both sides round identically. */
static __device__ __forceinline__ float bf2f(bf16_t v) {
    return __uint_as_float((uint32_t)v << 16);
}

static __device__ __forceinline__ bf16_t f2bf(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

static __device__ __forceinline__ float round_bf(float f) { return bf2f(f2bf(f)); }

static __device__ __forceinline__ float gelu_tanh(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

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
    __shared__ float p[ROUTE_MAX_EXPERT];
    __shared__ unsigned char taken[ROUTE_MAX_EXPERT];
    __shared__ float chosen[ROUTE_MAX_TOP_K];
    const int r = blockIdx.x, lane = threadIdx.x, n = a.n_expert;
    const bf16_t *lg = a.logits + (size_t)r * (size_t)n;

    float mx = -INFINITY;
    for (int e = lane; e < n; e += 32) {
        p[e] = bf2f(lg[e]);
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
            w[k] = chosen[k] / wsum * bf2f(a.per_expert_scale[idx[k]]);
    }
}

/* ---- experts ---- */

/* One block: list = the item ids i = r * top_k + k sorted into buckets by expert, ascending
 * expert; *n_valid = the number listed. Items with an id outside [0, n_expert) are left out
 * (moe_combine_kernel turns their rows into NaN). The order inside a bucket depends on atomic
 * timing and does not matter: every item writes only its own workspace slot. */
__global__ static void __launch_bounds__(BUCKET_THREADS)
    moe_bucket_kernel(const int32_t *idx, int n_items, int n_expert, int32_t *list,
                      int32_t *n_valid) {
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
        int run = 0;
        for (int e = 0; e < n_expert; e++) {
            int c = count[e];
            count[e] = run; /* becomes the bucket's write cursor */
            run += c;
        }
        *n_valid = run;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n_items; i += blockDim.x) {
        int e = idx[i];
        if (e >= 0 && e < n_expert) list[atomicAdd(&count[e], 1)] = i;
    }
}

/* One block per listed item (r, k) with expert e: ys[i, :] = bf(down[e] @ h), h =
 * bf(bf(gelu(g)) * u), g|u = bf(gate_up[e] @ x[r]), values kept as bf16-rounded fp32. Each
 * output is a warp's dot product: lanes take 8 consecutive weights (one 16-byte load) at a
 * stride of 256 elements and the warp sums with a fixed butterfly. bf16 x bf16 products are
 * exact in fp32, so contraction into FMA changes nothing. Dynamic shared memory: x as fp32
 * [d_model], then gu [2 * d_expert] (h overwrites its first half in place). */
__global__ static void __launch_bounds__(EXPERT_THREADS)
    moe_expert_kernel(k_moe_experts_args a, const int32_t *list, const int32_t *n_valid,
                      float *ys) {
    extern __shared__ float smem[];
    if ((int)blockIdx.x >= *n_valid) return;
    const int dm = a.d_model, de = a.d_expert;
    const int item = list[blockIdx.x];
    const int r = item / a.top_k, e = a.idx[item];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *xs = smem, *gu = smem + dm;

    const bf16_t *x = a.x + (size_t)r * (size_t)dm;
    for (int t = threadIdx.x; t < dm; t += blockDim.x)
        xs[t] = bf2f(x[t]);
    __syncthreads();

    const bf16_t *wgu = a.gate_up + (size_t)e * 2 * (size_t)de * (size_t)dm;
    for (int o = warp; o < 2 * de; o += EXPERT_WARPS) {
        const bf16_t *row = wgu + (size_t)o * (size_t)dm;
        float s = 0.0f;
        for (int t = lane * 8; t < dm; t += 32 * 8) {
            uint4 v = *(const uint4 *)(row + t);
            const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                s += xs[t + 2 * j] * __uint_as_float(wv[j] << 16);
                s += xs[t + 2 * j + 1] * __uint_as_float(wv[j] & 0xffff0000u);
            }
        }
        s = warp_sum(s);
        if (lane == 0) gu[o] = round_bf(s);
    }
    __syncthreads();
    for (int o = threadIdx.x; o < de; o += blockDim.x)
        gu[o] = round_bf(round_bf(gelu_tanh(gu[o])) * gu[de + o]);
    __syncthreads();

    const bf16_t *wd = a.down + (size_t)e * (size_t)dm * (size_t)de;
    float *y = ys + (size_t)item * (size_t)dm;
    for (int t = warp; t < dm; t += EXPERT_WARPS) {
        const bf16_t *row = wd + (size_t)t * (size_t)de;
        float s = 0.0f;
        for (int o = lane * 8; o < de; o += 32 * 8) {
            uint4 v = *(const uint4 *)(row + o);
            const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                s += gu[o + 2 * j] * __uint_as_float(wv[j] << 16);
                s += gu[o + 2 * j + 1] * __uint_as_float(wv[j] & 0xffff0000u);
            }
        }
        s = warp_sum(s);
        if (lane == 0) y[t] = round_bf(s);
    }
}

/* One block per row: out[r, t] = bf(sum_k ys[r*top_k + k, t] * w[r, k]) in rank order. The
 * product and the sum are rounded separately (__fmul_rn, __fadd_rn), as the C reference does:
 * y_k * w_k is not exact in fp32, so an FMA would round differently. */
__global__ static void __launch_bounds__(COMBINE_THREADS)
    moe_combine_kernel(k_moe_experts_args a, const float *ys) {
    const int r = blockIdx.x, dm = a.d_model;
    for (int t = threadIdx.x; t < dm; t += blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < a.top_k; k++) {
            size_t item = (size_t)r * (size_t)a.top_k + (size_t)k;
            int e = a.idx[item];
            if (e < 0 || e >= a.n_expert) {
                acc = NAN; /* a bad id was never computed: make it visible */
                continue;
            }
            acc = __fadd_rn(acc, __fmul_rn(ys[item * (size_t)dm + (size_t)t], a.weight[item]));
        }
        a.out[(size_t)r * (size_t)dm + (size_t)t] = f2bf(acc);
    }
}

/* The expert path's workspace: ys [items, d_model] fp32, then list [items] and n_valid, int32.
 * One static device buffer grown on demand and reused by every call. Not thread-safe and for
 * one stream: two calls in flight on different streams would share it. Growing synchronises
 * the stream first because kernels queued earlier may still read the old buffer. Growing uses
 * cudaMalloc, so it must not happen during graph capture: warm up once at the largest rows. */
static void *ws_buf;
static size_t ws_bytes;

static int ws_reserve(size_t bytes, cudaStream_t st) {
    if (bytes <= ws_bytes) return K_OK;
    CUDA_CHECK(cudaStreamSynchronize(st));
    if (ws_buf) CUDA_CHECK(cudaFree(ws_buf));
    ws_buf = NULL;
    ws_bytes = 0;
    if (cudaMalloc(&ws_buf, bytes) != cudaSuccess) {
        cudaGetLastError(); /* clear the error so later launches do not report it */
        ws_buf = NULL;
        fprintf(stderr, "g4pipe: error kernels: moe workspace of %zu bytes: out of memory\n",
                bytes);
        return K_ERR_NO_MEMORY;
    }
    ws_bytes = bytes;
    return K_OK;
}

/* ---- launchers ---- */

extern "C" int k_moe_route(const k_moe_route_args *a, g4_stream st) {
    if (a->rows < 0 || a->n_expert <= 0 || a->n_expert > ROUTE_MAX_EXPERT || a->top_k <= 0 ||
        a->top_k > ROUTE_MAX_TOP_K || a->top_k > a->n_expert)
        return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->idx || !a->weight || !a->logits || !a->per_expert_scale) return K_ERR_SHAPE;
    moe_route_kernel<<<a->rows, ROUTE_THREADS, 0, (cudaStream_t)st>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

extern "C" int k_moe_experts(const k_moe_experts_args *a, g4_stream st) {
    /* 16-byte weight loads: rows of gate_up and down start on 16 bytes when the base does
     * and d_model, d_expert are multiples of 8 */
    size_t smem = ((size_t)a->d_model + 2 * (size_t)a->d_expert) * sizeof(float);
    if (a->rows < 0 || a->d_model <= 0 || a->d_expert <= 0 || a->d_model % 8 != 0 ||
        a->d_expert % 8 != 0 || a->n_expert <= 0 || a->n_expert > EXPERTS_MAX_EXPERT ||
        a->top_k <= 0 || smem > EXPERT_SMEM_MAX)
        return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->out || !a->x || !a->gate_up || !a->down || !a->idx || !a->weight ||
        (uintptr_t)a->gate_up % 16 != 0 || (uintptr_t)a->down % 16 != 0)
        return K_ERR_SHAPE;
    size_t items = (size_t)a->rows * (size_t)a->top_k;
    if (items > (size_t)INT32_MAX) return K_ERR_SHAPE;
    size_t ys_bytes = items * (size_t)a->d_model * sizeof(float);
    cudaStream_t s = (cudaStream_t)st;
    int rc = ws_reserve(ys_bytes + (items + 1) * sizeof(int32_t), s);
    if (rc != K_OK) return rc;
    float *ys = (float *)ws_buf;
    int32_t *list = (int32_t *)((char *)ws_buf + ys_bytes);
    int32_t *n_valid = list + items;

    moe_bucket_kernel<<<1, BUCKET_THREADS, 0, s>>>(a->idx, (int)items, a->n_expert, list, n_valid);
    CUDA_CHECK(cudaGetLastError());
    moe_expert_kernel<<<(unsigned)items, EXPERT_THREADS, smem, s>>>(*a, list, n_valid, ys);
    CUDA_CHECK(cudaGetLastError());
    moe_combine_kernel<<<a->rows, COMBINE_THREADS, 0, s>>>(*a, ys);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}
