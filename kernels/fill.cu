/* kernels/fill.cu - seeded random weights on the device for model.weights = dummy: a
 * counter hash per element, so any element's value is known without the others and the CPU
 * twin (kernels/ref/fill_ref.c) reproduces every bit. Bandwidth-bound: one 2-byte store per
 * element, a grid-stride loop over all of it. */
#include "kernels/common.cuh"

#include <cuda_bf16.h>

#define FILL_THREADS 256
#define FILL_MAX_BLOCKS 4096

static __device__ float fill_u(uint64_t seed, uint64_t i) {
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

static __global__ __launch_bounds__(FILL_THREADS) void fill_uniform_kernel(k_fill_args a) {
    K_GRID_DEPENDENCY();
    __nv_bfloat16 *out = (__nv_bfloat16 *)a.out;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(__fmaf_rn(a.hi - a.lo, fill_u(a.seed, i), a.lo));
}

/* ---- launchers ---- */

extern "C" int k_fill_uniform(const k_fill_args *a, g4_stream st) {
    if (!a->out && a->n) return K_ERR_SHAPE;
    if (a->n == 0) return K_OK;
    size_t blocks = (a->n + FILL_THREADS - 1) / FILL_THREADS;
    if (blocks > FILL_MAX_BLOCKS) blocks = FILL_MAX_BLOCKS;
    CUDA_CHECK(
        k_launch(fill_uniform_kernel, (unsigned)blocks, FILL_THREADS, 0, (cudaStream_t)st, *a));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

K_TRACE_UNIT(fill) /* the kernel trace build's binder (common.cuh) */
