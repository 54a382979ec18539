/* kernels/norm.cu - the row-wise and elementwise ops: embedding lookup, RMSNorm (with the
 * optional fused residual add), GeGLU, scaled adds, the router's input scale, row gather and
 * the final logit softcap. Their CPU twins are kernels/ref/norm_ref.c.
 *
 * Every kernel computes the twin's function with the twin's rounding points: fp32 math,
 * rounded to bf16 (nearest, ties to even) exactly where the reference rounds. The fp32 steps
 * are written with __fmul_rn/__fadd_rn/__fdiv_rn so nvcc cannot contract a multiply and an
 * add into one FMA the host code does not do; the elementwise ops without a transcendental
 * (embed, scale_add, mul_vec_scale, gather_rows) therefore match the twin bit for bit. Where
 * tanhf/powf enter, device and glibc may differ by a few fp32 ulps, which can move a bf16
 * rounding by one ulp; RMSNorm also sums its squares in a different order (a block tree
 * instead of the twin's left-to-right loop). NaN inputs give a NaN whose payload may differ
 * from the twin's (the hardware conversion returns the canonical NaN).
 *
 * These ops are bandwidth-trivial next to the projections, so the kernels stay scalar:
 * 2-byte loads, no alignment precondition beyond the bf16 element's own. */
#include "kernels/common.cuh"
#include "kernels/bf16.cuh"

#include <cuda_bf16.h>

/* RMSNorm: one block per row. 256 threads cover the widest row (5376) in 21 strided steps
 * and still leave the head norms (width 16..512) one block each; the fixed block shape fixes
 * the reduction order, so a row's result never depends on how many rows run beside it. */
#define RMS_THREADS 256
#define RMS_WARPS (RMS_THREADS / 32)
/* Row kernels (embed, gather_rows): one block per row, threads stride along the row. */
#define ROW_THREADS 256
/* Elementwise kernels: a grid-stride loop; enough blocks to fill an H200 (132 SMs x 8 blocks
 * of 256) several times over, capped so huge n does not need a huge grid. */
#define EW_THREADS 256
#define EW_MAX_BLOCKS 4096

/* Grid-stride launch size for n elements (n > 0). */
static unsigned ew_blocks(size_t n) {
    size_t blocks = (n + EW_THREADS - 1) / EW_THREADS;
    return (unsigned)(blocks > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : blocks);
}

/* An id outside [0, n_vocab) writes a row of zeros instead of reading outside the table: the
 * twin returns K_ERR_SHAPE there, but ids live on the device and the launcher cannot see
 * them; the engine validates ids before the step, so this only keeps a bug in bounds. */
static __global__ __launch_bounds__(ROW_THREADS) void embed_kernel(k_embed_args a) {
    int r = blockIdx.x;
    int id = a.ids[r];
    bf16_t *dst = a.out + (size_t)r * (size_t)a.width;
    if (id < 0 || id >= a.n_vocab) {
        for (int j = threadIdx.x; j < a.width; j += ROW_THREADS)
            dst[j] = 0;
        return;
    }
    const bf16_t *src = a.table + (size_t)id * (size_t)a.width;
    for (int j = threadIdx.x; j < a.width; j += ROW_THREADS)
        dst[j] = k_f32_to_bf16(__fmul_rn(k_bf16_to_f32(src[j]), a.scale));
}

/* Sum of v over the block, the same value returned to every thread. Every thread adds the
 * per-warp partials in the same fixed order, so the result is deterministic. Called once
 * per kernel (the shared partials are not reused). */
static __device__ float block_sum(float v) {
    __shared__ float part[RMS_WARPS];
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < RMS_WARPS; w++)
        s += part[w];
    return s;
}

/* out may alias in or residual: the whole row's sum of squares is reduced (with a barrier)
 * before any store, and in the second pass element j is read and written by the same thread,
 * so no element is overwritten before it is read. Hence no __restrict__ here. */
static __global__ __launch_bounds__(RMS_THREADS) void rmsnorm_kernel(k_rmsnorm_args a) {
    size_t o = (size_t)blockIdx.x * (size_t)a.width;
    const bf16_t *in = a.in + o;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < a.width; j += RMS_THREADS) {
        float x = k_bf16_to_f32(in[j]);
        ss = __fadd_rn(ss, __fmul_rn(x, x));
    }
    ss = block_sum(ss);
    /* HF: pow(mean + eps, -0.5) in fp32, not rsqrt (the twin does the same) */
    float inv = powf(__fadd_rn(__fdiv_rn(ss, (float)a.width), a.eps), -0.5f);
    for (int j = threadIdx.x; j < a.width; j += RMS_THREADS) {
        float y = __fmul_rn(k_bf16_to_f32(in[j]), inv);
        if (a.w) y = __fmul_rn(y, k_bf16_to_f32(a.w[j]));
        y = k_round_bf16(y);
        if (a.residual) y = __fadd_rn(k_bf16_to_f32(a.residual[o + j]), y);
        a.out[o + j] = k_f32_to_bf16(y);
    }
}

static __global__ __launch_bounds__(EW_THREADS) void gelu_mul_kernel(k_gelu_mul_args a) {
    size_t n = (size_t)a.rows * (size_t)a.width;
    for (size_t i = (size_t)blockIdx.x * EW_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * EW_THREADS) {
        size_t r = i / (size_t)a.width, j = i % (size_t)a.width;
        float g = k_round_bf16(k_gelu_tanh(k_bf16_to_f32(a.a[r * (size_t)a.lda + j])));
        if (a.b) g = __fmul_rn(g, k_bf16_to_f32(a.b[r * (size_t)a.ldb + j]));
        a.out[i] = k_f32_to_bf16(g);
    }
}

static __global__ __launch_bounds__(EW_THREADS) void scale_add_kernel(k_scale_add_args a) {
    for (size_t i = (size_t)blockIdx.x * EW_THREADS + threadIdx.x; i < a.n;
         i += (size_t)gridDim.x * EW_THREADS) {
        float v = k_bf16_to_f32(a.a[i]);
        if (a.b) v = k_round_bf16(__fadd_rn(v, k_bf16_to_f32(a.b[i])));
        a.out[i] = k_f32_to_bf16(__fmul_rn(v, a.scale));
    }
}

static __global__ __launch_bounds__(EW_THREADS) void mul_vec_scale_kernel(k_mul_vec_scale_args a) {
    size_t n = (size_t)a.rows * (size_t)a.width;
    for (size_t i = (size_t)blockIdx.x * EW_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * EW_THREADS) {
        size_t j = i % (size_t)a.width;
        float p = k_round_bf16(__fmul_rn(k_bf16_to_f32(a.a[i]), k_bf16_to_f32(a.v[j])));
        a.out[i] = k_f32_to_bf16(__fmul_rn(p, a.scale));
    }
}

/* A negative src writes zeros (a bug kept in bounds); the upper bound of src is the
 * caller's to keep, the struct does not carry in's row count. */
static __global__ __launch_bounds__(ROW_THREADS) void gather_rows_kernel(k_gather_rows_args a) {
    int r = blockIdx.x;
    int s = a.src[r];
    bf16_t *dst = a.out + (size_t)r * (size_t)a.width;
    if (s < 0) {
        for (int j = threadIdx.x; j < a.width; j += ROW_THREADS)
            dst[j] = 0;
        return;
    }
    const bf16_t *src = a.in + (size_t)s * (size_t)a.width;
    for (int j = threadIdx.x; j < a.width; j += ROW_THREADS)
        dst[j] = src[j];
}

static __global__ __launch_bounds__(EW_THREADS) void softcap_kernel(k_softcap_args a) {
    for (size_t i = (size_t)blockIdx.x * EW_THREADS + threadIdx.x; i < a.n;
         i += (size_t)gridDim.x * EW_THREADS) {
        float t = k_round_bf16(tanhf(k_round_bf16(__fdiv_rn(k_bf16_to_f32(a.x[i]), a.cap))));
        a.x[i] = k_f32_to_bf16(__fmul_rn(t, a.cap));
    }
}

/* ---- launchers ---- */

extern "C" int k_embed(const k_embed_args *a, g4_stream st) {
    if (a->rows < 0 || a->width <= 0 || a->n_vocab <= 0) return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->out || !a->table || !a->ids) return K_ERR_SHAPE;
    embed_kernel<<<(unsigned)a->rows, ROW_THREADS, 0, (cudaStream_t)st>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

extern "C" int k_rmsnorm(const k_rmsnorm_args *a, g4_stream st) {
    if (a->rows < 0 || a->width <= 0) return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->out || !a->in) return K_ERR_SHAPE;
    rmsnorm_kernel<<<(unsigned)a->rows, RMS_THREADS, 0, (cudaStream_t)st>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* out must not overlap a or b unless it is exactly that operand with lda (ldb) == width:
 * with a wider stride (the gate half of a packed gate|up row) element i's store could land
 * on an element another thread has yet to read. */
extern "C" int k_gelu_mul(const k_gelu_mul_args *a, g4_stream st) {
    if (a->rows < 0 || a->width <= 0 || a->lda < a->width) return K_ERR_SHAPE;
    if (a->b && a->ldb < a->width) return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->out || !a->a) return K_ERR_SHAPE;
    size_t n = (size_t)a->rows * (size_t)a->width;
    gelu_mul_kernel<<<ew_blocks(n), EW_THREADS, 0, (cudaStream_t)st>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* out may alias a or b (each element is read and written by one thread). */
extern "C" int k_scale_add(const k_scale_add_args *a, g4_stream st) {
    if (a->n == 0) return K_OK;
    if (!a->out || !a->a) return K_ERR_SHAPE;
    scale_add_kernel<<<ew_blocks(a->n), EW_THREADS, 0, (cudaStream_t)st>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* out may alias a. */
extern "C" int k_mul_vec_scale(const k_mul_vec_scale_args *a, g4_stream st) {
    if (a->rows < 0 || a->width <= 0) return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->out || !a->a || !a->v) return K_ERR_SHAPE;
    size_t n = (size_t)a->rows * (size_t)a->width;
    mul_vec_scale_kernel<<<ew_blocks(n), EW_THREADS, 0, (cudaStream_t)st>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* out must not overlap in (rows move). */
extern "C" int k_gather_rows(const k_gather_rows_args *a, g4_stream st) {
    if (a->rows < 0 || a->width <= 0) return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->out || !a->in || !a->src) return K_ERR_SHAPE;
    gather_rows_kernel<<<(unsigned)a->rows, ROW_THREADS, 0, (cudaStream_t)st>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

extern "C" int k_softcap(const k_softcap_args *a, g4_stream st) {
    if (a->n == 0) return K_OK;
    if (!a->x) return K_ERR_SHAPE;
    softcap_kernel<<<ew_blocks(a->n), EW_THREADS, 0, (cudaStream_t)st>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}
