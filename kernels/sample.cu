/* kernels/sample.cu - the greedy token on the device (k_argmax), so a greedy decode step
 * copies 4 bytes per row to the host instead of a 512 KB row of logits and the host's scan of
 * 262,144 values. Twin: kernels/ref/sample_ref.c.
 *
 * One block per row: thread t scans ids t, t + 1024, ... with a strict greater-than (its own
 * ties go to its lowest id), then the block reduces (value, id) pairs with "larger value, or the
 * same value and a lower id" - a total order, so the result is the reference's exactly, whatever
 * the reduction's shape. */
#include "kernels/common.cuh"
#include "kernels/bf16.cuh"

#include <math.h>

#define ARGMAX_THREADS 1024

static __device__ __forceinline__ float logit_value(bf16_t v) {
    float f = k_bf16_to_f32(v);
    return isnan(f) ? -INFINITY : f;
}

static __device__ __forceinline__ bool beats(float v, int id, float bv, int bid) {
    return v > bv || (v == bv && id < bid);
}

__global__ static void __launch_bounds__(ARGMAX_THREADS) argmax_kernel(k_argmax_args a) {
    K_GRID_DEPENDENCY();
    __shared__ float sv[ARGMAX_THREADS / 32];
    __shared__ int si[ARGMAX_THREADS / 32];
    __shared__ int any_bad;
    const bf16_t *row = a.logits + (size_t)blockIdx.x * (size_t)a.n_vocab;
    float bv = -INFINITY;
    int bid = INT_MAX; /* a thread without ids loses every tie */
    int bad = 0;       /* a NaN or an infinity seen (exponent all ones) */
    if (threadIdx.x == 0) any_bad = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < a.n_vocab; i += ARGMAX_THREADS) {
        bad |= (row[i] & 0x7f80u) == 0x7f80u;
        float v = logit_value(row[i]);
        if (bid == INT_MAX || v > bv) {
            bv = v;
            bid = i;
        }
    }
    for (int m = 16; m > 0; m >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, m);
        int oi = __shfl_xor_sync(0xffffffffu, bid, m);
        if (beats(ov, oi, bv, bid)) {
            bv = ov;
            bid = oi;
        }
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bid;
    }
    if (bad) any_bad = 1; /* every writer stores the same value */
    __syncthreads();
    if (threadIdx.x == 0) {
        if (a.nonfinite) a.nonfinite[blockIdx.x] = any_bad;
        for (int w = 1; w < ARGMAX_THREADS / 32; w++)
            if (beats(sv[w], si[w], bv, bid)) {
                bv = sv[w];
                bid = si[w];
            }
        a.id[blockIdx.x] = bid;
    }
}

extern "C" int k_argmax(const k_argmax_args *a, g4_stream st) {
    if (a->rows < 0 || a->n_vocab <= 0) return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->id || !a->logits) return K_ERR_SHAPE;
    CUDA_CHECK(k_launch(argmax_kernel, (unsigned)a->rows, ARGMAX_THREADS, 0, (cudaStream_t)st, *a));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* ---- top-k candidates (k_topk) ----
 * One block per row. The order "larger logit, then lower id" is a threshold on a 16-bit key
 * (the bf16 bits made unsigned-monotone) plus an id rule for the keys equal to it: two
 * 256-bin histograms (high byte, then low byte within the chosen high byte) find the
 * threshold t with fewer than k keys above it; then each thread takes a contiguous range of
 * ids, and two block scans give every thread its share of the keys equal to t (lowest ids
 * first) and its place in the output, so the output comes out in id order, as the twin's. */
#define TOPK_THREADS 1024

static __device__ __forceinline__ unsigned topk_key(bf16_t v) {
    if ((v & 0x7f80u) == 0x7f80u && (v & 0x7fu)) v = 0xff80u; /* NaN: -inf */
    if (v == 0x8000u) v = 0;                                  /* -0 equals +0 */
    return v & 0x8000u ? (unsigned)(~v & 0xffffu) : (unsigned)(v | 0x8000u);
}

/* Exclusive prefix sum of v over the block (in thread order), and the total. */
static __device__ int block_exclusive_scan(int v, int *total, int *warp_sums) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = v;
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, x, m);
        if (lane >= m) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int w = lane < TOPK_THREADS / 32 ? warp_sums[lane] : 0;
#pragma unroll
        for (int m = 1; m < 32; m <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, w, m);
            if (lane >= m) w += y;
        }
        warp_sums[lane] = w; /* inclusive over warps */
    }
    __syncthreads();
    const int before = (warp > 0 ? warp_sums[warp - 1] : 0) + x - v;
    *total = warp_sums[TOPK_THREADS / 32 - 1];
    __syncthreads(); /* warp_sums is reused by the next scan */
    return before;
}

/* The bin b (searching down from 255) where the keys above reach k: fewer than k in bins
 * above b, at least k with b. Thread 0 of the block; *above gets the count above b. */
static __device__ void topk_pick_bin(const int *hist, int k, int *bin, int *above) {
    int acc = 0, b = 255;
    while (b > 0 && acc + hist[b] < k)
        acc += hist[b--];
    *bin = b;
    *above = acc;
}

__global__ static void __launch_bounds__(TOPK_THREADS) topk_kernel(k_topk_args a) {
    K_GRID_DEPENDENCY();
    __shared__ int hist[256];
    __shared__ int warp_sums[32];
    __shared__ int s_bin, s_above;
    const int tid = threadIdx.x;
    const bf16_t *row = a.logits + (size_t)blockIdx.x * (size_t)a.n_vocab;
    int32_t *ids = a.ids + (size_t)blockIdx.x * (size_t)a.k_max;
    bf16_t *vals = a.vals + (size_t)blockIdx.x * (size_t)a.k_max;
    const int k = min(a.k[blockIdx.x], a.n_vocab);
    for (int j = tid; j < a.k_max; j += TOPK_THREADS) {
        ids[j] = -1;
        vals[j] = 0;
    }
    if (k <= 0) return; /* block-uniform */

    /* threshold, high byte then low byte */
    for (int b = tid; b < 256; b += TOPK_THREADS)
        hist[b] = 0;
    __syncthreads();
    for (int i = tid; i < a.n_vocab; i += TOPK_THREADS)
        atomicAdd(&hist[topk_key(row[i]) >> 8], 1);
    __syncthreads();
    if (tid == 0) topk_pick_bin(hist, k, &s_bin, &s_above);
    __syncthreads();
    const unsigned hi = (unsigned)s_bin;
    const int above_hi = s_above;
    __syncthreads();
    for (int b = tid; b < 256; b += TOPK_THREADS)
        hist[b] = 0;
    __syncthreads();
    for (int i = tid; i < a.n_vocab; i += TOPK_THREADS) {
        unsigned key = topk_key(row[i]);
        if ((key >> 8) == hi) atomicAdd(&hist[key & 0xffu], 1);
    }
    __syncthreads();
    if (tid == 0) topk_pick_bin(hist, k - above_hi, &s_bin, &s_above);
    __syncthreads();
    const unsigned t = hi << 8 | (unsigned)s_bin;
    const int ties = k - above_hi - s_above; /* keys equal to t to take, lowest ids first */

    /* this thread's contiguous range of ids: its counts, then its places */
    const int per = (a.n_vocab + TOPK_THREADS - 1) / TOPK_THREADS;
    const int i0 = min(tid * per, a.n_vocab), i1 = min(i0 + per, a.n_vocab);
    int gt = 0, eq = 0;
    for (int i = i0; i < i1; i++) {
        unsigned key = topk_key(row[i]);
        gt += key > t;
        eq += key == t;
    }
    int total;
    const int eq_before = block_exclusive_scan(eq, &total, warp_sums);
    const int my_eq = max(0, min(eq, ties - eq_before));
    int out = block_exclusive_scan(gt + my_eq, &total, warp_sums);
    int eq_left = my_eq;
    for (int i = i0; i < i1; i++) {
        unsigned key = topk_key(row[i]);
        if (key > t || (key == t && eq_left > 0)) {
            if (key == t) eq_left--;
            ids[out] = i;
            vals[out++] = row[i];
        }
    }
}

extern "C" int k_topk(const k_topk_args *a, g4_stream st) {
    if (a->rows < 0 || a->n_vocab <= 0 || a->k_max <= 0 || a->k_max > K_TOPK_MAX)
        return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->ids || !a->vals || !a->logits || !a->k) return K_ERR_SHAPE;
    CUDA_CHECK(k_launch(topk_kernel, (unsigned)a->rows, TOPK_THREADS, 0, (cudaStream_t)st, *a));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

K_TRACE_UNIT(sample) /* the kernel trace build's binder (common.cuh) */
