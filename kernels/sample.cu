/* kernels/sample.cu - the greedy token on the device (k_argmax), so a greedy decode step
 * copies 4 bytes per row to the host instead of a 512 KB row of logits and the host's scan of
 * 262,144 values. Twin: kernels/ref/sample_ref.c.
 *
 * One block per row: thread t scans ids t, t + 1024, ... with a strict greater-than (its own
 * ties go to its lowest id), then the block reduces (value, id) pairs with "larger value, or the
 * same value and a lower id" - a total order, so the result is the reference's exactly, whatever
 * the reduction's shape. */
#include "kernels/common.cuh"

#include <math.h>

#define ARGMAX_THREADS 1024

static __device__ __forceinline__ float logit_value(bf16_t v) {
    float f = __uint_as_float((uint32_t)v << 16);
    return isnan(f) ? -INFINITY : f;
}

static __device__ __forceinline__ bool beats(float v, int id, float bv, int bid) {
    return v > bv || (v == bv && id < bid);
}

__global__ static void __launch_bounds__(ARGMAX_THREADS) argmax_kernel(k_argmax_args a) {
    __shared__ float sv[ARGMAX_THREADS / 32];
    __shared__ int si[ARGMAX_THREADS / 32];
    const bf16_t *row = a.logits + (size_t)blockIdx.x * (size_t)a.n_vocab;
    float bv = -INFINITY;
    int bid = INT_MAX; /* a thread without ids loses every tie */
    for (int i = threadIdx.x; i < a.n_vocab; i += ARGMAX_THREADS) {
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
    __syncthreads();
    if (threadIdx.x == 0) {
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
    argmax_kernel<<<(unsigned)a->rows, ARGMAX_THREADS, 0, (cudaStream_t)st>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}
