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
 * These ops move few bytes; what they cost is latency (docs/perf-notes.md, "Row ops"), so a
 * norm holds its row in registers with every load in flight at once, and consecutive row ops
 * of a layer run as one kernel (k_row_ops). Their loads stay 2-byte, the elements a thread
 * visits and their order those of the strided loop: no alignment precondition beyond the bf16
 * element's own, and the same bits whichever path runs. (A warp a row with 16-byte loads
 * measured slower at prefill: docs/perf-notes.md, forty-seventh session.) The GeGLU takes
 * 16-byte loads where its rows align, each element's arithmetic unchanged. */
#include "kernels/common.cuh"
#include "kernels/bf16.cuh"

#include <cuda_bf16.h>
#include <string.h>

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
    K_GRID_DEPENDENCY();
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

/* RMSNorm's scale: HF's pow(mean + eps, -0.5) in fp32, not rsqrt (the twin does the same). */
static __device__ __forceinline__ float rms_inv(float ss, int width, float eps) {
    return powf(__fadd_rn(__fdiv_rn(ss, (float)width), eps), -0.5f);
}

/* One RMSNorm output: bf(res + bf(x * inv * w)), the weight and the residual optional. */
static __device__ __forceinline__ bf16_t rms_out(float x, float inv, bool has_w, float w,
                                                 bool has_res, float res) {
    float y = __fmul_rn(x, inv);
    if (has_w) y = __fmul_rn(y, w);
    y = k_round_bf16(y);
    if (has_res) y = __fadd_rn(res, y);
    return k_f32_to_bf16(y);
}

/* One mul_vec_scale output: bf(bf(a * v) * scale). */
static __device__ __forceinline__ bf16_t mul_vec_scale_of(float a, float v, float scale) {
    return k_f32_to_bf16(__fmul_rn(k_round_bf16(__fmul_rn(a, v)), scale));
}

/* One scale_add output: bf(bf(a + b) * scale), or bf(a * scale) without b. */
static __device__ __forceinline__ bf16_t scale_add_of(float a, bool has_b, float b, float scale) {
    if (has_b) a = k_round_bf16(__fadd_rn(a, b));
    return k_f32_to_bf16(__fmul_rn(a, scale));
}

/* The row of in, w and residual a thread holds in registers: elements threadIdx.x + i *
 * RMS_THREADS for i < RMS_HELD, so rows up to RMS_THREADS * RMS_HELD = 6,144 wide (every d_model
 * and head dim of Gemma 4) are loaded with all their loads in flight at once, before the first
 * add; a wider row takes the strided loop. Both paths visit the elements in the same order. */
#define RMS_HELD 24

/* out may alias in or residual: the whole row's sum of squares is reduced (with a barrier)
 * before any store, and in the second pass element j is read and written by the same thread,
 * so no element is overwritten before it is read. Hence no __restrict__ here. The held path
 * exists because the strided loop waited on one load's latency per element a thread visits
 * (docs/perf-notes.md, "Row ops"); its arithmetic is the loop's, so the bits are the same. */
static __device__ __forceinline__ void rmsnorm_row(const k_rmsnorm_args &a, int r) {
    size_t o = (size_t)r * (size_t)a.width;
    const bf16_t *in = a.in + o;
    float ss = 0.0f;
    if (a.width <= RMS_THREADS * RMS_HELD) {
        float x[RMS_HELD], w[RMS_HELD], res[RMS_HELD];
#pragma unroll
        for (int i = 0; i < RMS_HELD; i++) {
            int j = threadIdx.x + i * RMS_THREADS;
            bool in_row = j < a.width;
            x[i] = in_row ? k_bf16_to_f32(in[j]) : 0.0f;
            w[i] = in_row && a.w ? k_bf16_to_f32(a.w[j]) : 0.0f;
            res[i] = in_row && a.residual ? k_bf16_to_f32(a.residual[o + j]) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < RMS_HELD; i++)
            if (threadIdx.x + i * RMS_THREADS < a.width) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
        float inv = rms_inv(block_sum(ss), a.width, a.eps);
#pragma unroll
        for (int i = 0; i < RMS_HELD; i++) {
            int j = threadIdx.x + i * RMS_THREADS;
            if (j < a.width) a.out[o + j] = rms_out(x[i], inv, a.w, w[i], a.residual, res[i]);
        }
        return;
    }
    for (int j = threadIdx.x; j < a.width; j += RMS_THREADS) {
        float x = k_bf16_to_f32(in[j]);
        ss = __fadd_rn(ss, __fmul_rn(x, x));
    }
    float inv = rms_inv(block_sum(ss), a.width, a.eps);
    for (int j = threadIdx.x; j < a.width; j += RMS_THREADS) {
        float y = __fmul_rn(k_bf16_to_f32(in[j]), inv);
        if (a.w) y = __fmul_rn(y, k_bf16_to_f32(a.w[j]));
        y = k_round_bf16(y);
        if (a.residual) y = __fadd_rn(k_bf16_to_f32(a.residual[o + j]), y);
        a.out[o + j] = k_f32_to_bf16(y);
    }
}

static __global__ __launch_bounds__(RMS_THREADS) void rmsnorm_kernel(k_rmsnorm_args a) {
    K_GRID_DEPENDENCY();
    rmsnorm_row(a, blockIdx.x);
}

/* Row r of mul_vec_scale_kernel's function, element for element the same expression. A row
 * up to the held width has all its loads issued before the first multiply (a block walking the
 * row in a chain of dependent loads was most of a fused group's time, docs/perf-notes.md). */
static __device__ __forceinline__ void mul_vec_scale_row(const k_mul_vec_scale_args &a, int r) {
    const size_t o = (size_t)r * (size_t)a.width;
    if (a.width <= RMS_THREADS * RMS_HELD) {
        float x[RMS_HELD], v[RMS_HELD];
#pragma unroll
        for (int i = 0; i < RMS_HELD; i++) {
            int j = threadIdx.x + i * RMS_THREADS;
            x[i] = j < a.width ? k_bf16_to_f32(a.a[o + j]) : 0.0f;
            v[i] = j < a.width ? k_bf16_to_f32(a.v[j]) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < RMS_HELD; i++) {
            int j = threadIdx.x + i * RMS_THREADS;
            if (j < a.width) a.out[o + j] = mul_vec_scale_of(x[i], v[i], a.scale);
        }
        return;
    }
    for (int j = threadIdx.x; j < a.width; j += RMS_THREADS)
        a.out[o + j] = mul_vec_scale_of(k_bf16_to_f32(a.a[o + j]), k_bf16_to_f32(a.v[j]), a.scale);
}

/* Row r (of width elements) of scale_add_kernel's function, the same expression, held as
 * above. */
static __device__ __forceinline__ void scale_add_row(const k_scale_add_args &a, size_t width,
                                                     int r) {
    const size_t o = (size_t)r * width;
    if (width <= (size_t)(RMS_THREADS * RMS_HELD)) {
        float x[RMS_HELD], y[RMS_HELD];
#pragma unroll
        for (int i = 0; i < RMS_HELD; i++) {
            size_t j = threadIdx.x + (size_t)i * RMS_THREADS;
            x[i] = j < width ? k_bf16_to_f32(a.a[o + j]) : 0.0f;
            y[i] = j < width && a.b ? k_bf16_to_f32(a.b[o + j]) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < RMS_HELD; i++) {
            size_t j = threadIdx.x + (size_t)i * RMS_THREADS;
            if (j < width) a.out[o + j] = scale_add_of(x[i], a.b, y[i], a.scale);
        }
        return;
    }
    for (size_t i = o + threadIdx.x; i < o + width; i += RMS_THREADS) {
        float v = k_bf16_to_f32(a.a[i]);
        if (a.b) v = k_round_bf16(__fadd_rn(v, k_bf16_to_f32(a.b[i])));
        a.out[i] = k_f32_to_bf16(__fmul_rn(v, a.scale));
    }
}

/* The fused kernel calls each op through one of these, compiled once each: inlined four times
 * over, the held rows of every op kind would compete for the same registers and spill. The
 * arguments go by value, so no kernel parameter needs a local copy. */
static __device__ __noinline__ void rmsnorm_row_call(k_rmsnorm_args a, int r) { rmsnorm_row(a, r); }
static __device__ __noinline__ void mul_vec_scale_row_call(k_mul_vec_scale_args a, int r) {
    mul_vec_scale_row(a, r);
}
static __device__ __noinline__ void scale_add_row_call(k_scale_add_args a, size_t width, int r) {
    scale_add_row(a, width, r);
}

/* One block per row runs the ops in order. The barrier between two ops makes the row an op
 * wrote visible to every thread of the next (which may read any element of it, as a norm does)
 * and keeps block_sum's partials of one norm from being overwritten by the next norm's. */
static __global__ __launch_bounds__(RMS_THREADS) void row_ops_kernel(k_row_ops_args a) {
    K_GRID_DEPENDENCY();
    const int r = blockIdx.x;
#pragma unroll
    for (int i = 0; i < K_ROW_OPS_MAX; i++) {
        if (i >= a.n_ops) break;
        if (i) __syncthreads();
        const k_row_op &op = a.op[i];
        if (op.kind == K_ROW_RMSNORM)
            rmsnorm_row_call(op.u.rmsnorm, r);
        else if (op.kind == K_ROW_MUL_VEC_SCALE)
            mul_vec_scale_row_call(op.u.mul_vec_scale, r);
        else
            scale_add_row_call(op.u.scale_add, op.u.scale_add.n / (size_t)a.rows, r);
    }
}

/* ---- the row-op chain (serve.row_chain) ----
 *
 * The same ops as row_ops_kernel, element for element the same arithmetic, in a form made for
 * what a decode step's row ops wait on (docs/perf-notes.md, "Row ops"): the held kernels above
 * compile to 50-65 KB of code, held slots for the widest row behind per-element branches, which
 * every launch fetches afresh (the weights streaming through L2 evict it between layers); each
 * op loads back the row the op before it stored; each waits on its weights after its producer.
 * Here a thread holds HELD elements, the row's own count rounded up to one of a few sizes (a
 * template per size, so a launch runs only the slots its row has), the ops run in a rolled
 * loop over the parameters (__grid_constant__: indexed without a local copy), an op whose
 * input is the previous op's output takes it from the registers that held the stored values,
 * and the weight vectors (norm weights, mul_vec_scale's v: model constants) are read before
 * the wait on the grid before, while it runs, into shared memory.
 *
 * serve.row_chain = 1 holds rows of at most CHAIN_NARROW_MAX_HELD x RMS_THREADS = 3,072 elements
 * (E2B, E4B, the 26B-A4B); 2 also rows up to 6,144 (12B, 31B) with three ops'
 * weights in shared memory (the wide groups of Gemma 4 have two or three ops), in groups of at
 * most CHAIN_WIDE_MAX_ROWS rows. A first form of the wide rows loaded the weights inside each
 * op's output loop and measured slower: the compiler cannot move a weight load above the store
 * to out before it (out may alias w), so those loads ran one round trip at a time
 * (docs/perf-notes.md, twenty-first and twenty-second sessions); 3 (the default) is 2 with the
 * operands of decode-sized groups loaded at once (chain_pre, below).
 *
 * Every op of a chain has one width and every activation operand is a [rows, width] buffer the
 * ops either share exactly or do not overlap (the launcher checks both), so element j of a row
 * is read and written by one thread in every op: no barrier between ops is needed, only the
 * block sums', whose partials alternate between two buffers so a norm's cannot overwrite the
 * previous norm's before every thread has read them. */

/* The held sizes a chain is compiled for: the first at least the row's elements per thread.
 * The weights' shared memory is chain_slots(HELD) x HELD x RMS_THREADS bf16, 36 KB at most. */
#define CHAIN_SIZES(X) X(1) X(2) X(4) X(6) X(8) X(10) X(11) X(12) X(16) X(21) X(24)
#define CHAIN_NARROW_MAX_HELD 12 /* serve.row_chain = 1 */
#define CHAIN_MAX_HELD 24        /* serve.row_chain = 2 */
/* The most rows the wide sizes (HELD over CHAIN_NARROW_MAX_HELD) take: at ~154 registers a thread
 * one block fits an SM, so past about one wave the held kernels, several blocks an SM, run a
 * prefill chunk's rows faster (docs/perf-notes.md, twenty-second session). Bits do not depend on
 * the path, so the choice by row count keeps batch invariance. */
#define CHAIN_WIDE_MAX_ROWS 128

/* How many ops' weight vectors a chain of HELD elements a thread keeps in shared memory. */
static constexpr __host__ __device__ int chain_slots(int held) {
    return held <= CHAIN_NARROW_MAX_HELD ? K_ROW_OPS_MAX : 3;
}

static int row_chain = 3; /* serve.row_chain's default: 0 off, 1 narrow rows, 2 all it holds, 3
                             2 with the operands loaded at once (chain_pre) */
extern "C" void k_set_row_chain(int mode) { row_chain = mode < 0 ? 0 : mode > 3 ? 3 : mode; }

/* serve.row_chain = 3: in decode-sized launches (at most CHAIN_PRE_MAX_ROWS rows of a narrow
 * size) every operand that no earlier op of the chain writes is loaded right after the grid
 * dependency, all at once, instead of when its op comes: an op that read a buffer other than
 * its predecessor's output waited a round trip of its own after the previous op's block sum
 * (the router group two, the layer's end one; docs/perf-notes.md, twenty-third session). The
 * same values (no op before it wrote the buffer), the same arithmetic. src per op and operand
 * (0: in or a, 1: residual or b): CHAIN_SRC_LOAD loads it when its op comes (the existing rule:
 * the previous op's output from the registers, else from memory), CHAIN_SRC_EXT + k takes
 * buffer ext[k] as loaded at the start. The launcher fills it (chain_plan_pre). */
#define CHAIN_PRE_MAX_ROWS 64
#define CHAIN_PRE_EXT 3 /* distinct buffers loaded at the start */
enum { CHAIN_SRC_LOAD = 0, CHAIN_SRC_EXT = 1 };
typedef struct chain_pre {
    const bf16_t *ext[CHAIN_PRE_EXT];
    signed char src[K_ROW_OPS_MAX][2];
} chain_pre;

/* block_sum with its partials in buffer `parity` of two (see above). */
static __device__ float block_sum2(float v, int parity) {
    __shared__ float part[2][RMS_WARPS];
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31) == 0) part[parity][threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < RMS_WARPS; w++)
        s += part[parity][w];
    return s;
}

template <int HELD>
static __device__ __forceinline__ void chain_load(float (&v)[HELD], const bf16_t *row, int width) {
#pragma unroll
    for (int i = 0; i < HELD; i++) {
        const int j = threadIdx.x + i * RMS_THREADS;
        v[i] = j < width ? k_bf16_to_f32(row[j]) : 0.0f;
    }
}

/* An operand: the previous op's output from the registers when it is that buffer, else loaded. */
template <int HELD>
static __device__ __forceinline__ void
chain_operand(float (&v)[HELD], const bf16_t *buf, const bf16_t *prev_out, const float (&cur)[HELD],
              size_t o, int width) {
    if (buf == prev_out) {
#pragma unroll
        for (int i = 0; i < HELD; i++)
            v[i] = cur[i];
    } else {
        chain_load<HELD>(v, buf + o, width);
    }
}

/* Operand k of op s: from the buffers loaded at the start (PRE, where the plan says so), else as
 * chain_operand takes it. */
template <int HELD, bool PRE>
static __device__ __forceinline__ void
chain_source(float (&v)[HELD], const chain_pre &p, const float (&ext)[CHAIN_PRE_EXT][HELD], int s,
             int k, const bf16_t *buf, const bf16_t *prev_out, const float (&cur)[HELD], size_t o,
             int width) {
    if constexpr (PRE) {
        const int src = p.src[s][k];
        if (src != CHAIN_SRC_LOAD) { /* selects, not an index: ext stays in registers */
#pragma unroll
            for (int i = 0; i < HELD; i++) {
                float x = ext[0][i];
#pragma unroll
                for (int e = 1; e < CHAIN_PRE_EXT; e++)
                    x = src == CHAIN_SRC_EXT + e ? ext[e][i] : x;
                v[i] = x;
            }
            return;
        }
    }
    chain_operand<HELD>(v, buf, prev_out, cur, o, width);
}

/* The op's weight vector (a norm's w, mul_vec_scale's v): NULL for none. */
static __host__ __device__ __forceinline__ const bf16_t *chain_weight(const k_row_op &op) {
    return op.kind == K_ROW_RMSNORM         ? op.u.rmsnorm.w
           : op.kind == K_ROW_MUL_VEC_SCALE ? op.u.mul_vec_scale.v
                                            : nullptr;
}

/* Element i of slot s's weight vector as this thread will use it (from shared memory). */
template <int HELD>
static __device__ __forceinline__ float chain_w(const bf16_t (*wsm)[HELD][RMS_THREADS], int s,
                                                int i) {
    return k_bf16_to_f32(wsm[s][i][threadIdx.x]);
}

/* A norm's outputs: stored, and kept in cur for the next op. */
template <int HELD, bool HAS_W, bool HAS_RES>
static __device__ __forceinline__ void
chain_norm_out(float (&cur)[HELD], const float (&x)[HELD], const float (&res)[HELD], float inv,
               const bf16_t (*wsm)[HELD][RMS_THREADS], int s, const k_rmsnorm_args &n, size_t o,
               int width) {
#pragma unroll
    for (int i = 0; i < HELD; i++) {
        const float w = HAS_W ? chain_w<HELD>(wsm, s, i) : 0.0f;
        const bf16_t y = rms_out(x[i], inv, HAS_W, w, HAS_RES, HAS_RES ? res[i] : 0.0f);
        cur[i] = k_bf16_to_f32(y);
        const int j = threadIdx.x + i * RMS_THREADS;
        if (j < width) n.out[o + j] = y;
    }
}

template <int HELD, bool PRE = false>
static __global__ __launch_bounds__(RMS_THREADS) void row_chain_kernel(
    const __grid_constant__ k_row_ops_args a, int width, const __grid_constant__ chain_pre p) {
    constexpr int SLOTS = chain_slots(HELD);
    __shared__ bf16_t wsm[SLOTS][HELD][RMS_THREADS];
    /* model constants: read while the grid before still runs; a chain has at most SLOTS ops
     * (chain_fits) */
#pragma unroll
    for (int s = 0; s < SLOTS; s++) {
        const bf16_t *w = s < a.n_ops ? chain_weight(a.op[s]) : nullptr;
        if (!w) continue;
        bf16_t v[HELD]; /* all loads issued before the first store */
#pragma unroll
        for (int i = 0; i < HELD; i++) {
            const int j = threadIdx.x + i * RMS_THREADS;
            v[i] = j < width ? w[j] : (bf16_t)0;
        }
#pragma unroll
        for (int i = 0; i < HELD; i++)
            wsm[s][i][threadIdx.x] = v[i];
    }
    K_GRID_DEPENDENCY();
    const size_t o = (size_t)blockIdx.x * (size_t)width;
    float ext[CHAIN_PRE_EXT][HELD]; /* PRE: the buffers loaded at the start */
    if constexpr (PRE) {
#pragma unroll
        for (int e = 0; e < CHAIN_PRE_EXT; e++)
            if (p.ext[e])
                chain_load<HELD>(ext[e], p.ext[e] + o, width);
            else
#pragma unroll
                for (int i = 0; i < HELD; i++)
                    ext[e][i] = 0.0f; /* never taken (chain_plan_pre fills ext from 0) */
    }
    float cur[HELD]; /* the previous op's output, as stored */
    const bf16_t *prev_out = nullptr;
    int norms = 0;
#pragma unroll 1
    for (int s = 0; s < a.n_ops; s++) {
        const k_row_op &op = a.op[s];
        float x[HELD];
        if (op.kind == K_ROW_RMSNORM) {
            const k_rmsnorm_args &n = op.u.rmsnorm;
            chain_source<HELD, PRE>(x, p, ext, s, 0, n.in, prev_out, cur, o, width);
            float res[HELD];
            if (n.residual)
                chain_source<HELD, PRE>(res, p, ext, s, 1, n.residual, prev_out, cur, o, width);
            float ss = 0.0f;
#pragma unroll
            for (int i = 0; i < HELD; i++)
                if (threadIdx.x + i * RMS_THREADS < width)
                    ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
            const float inv = rms_inv(block_sum2(ss, norms++ & 1), width, n.eps);
            /* the weight and residual tests once, not per element */
            if (n.w && n.residual)
                chain_norm_out<HELD, true, true>(cur, x, res, inv, wsm, s, n, o, width);
            else if (n.w)
                chain_norm_out<HELD, true, false>(cur, x, res, inv, wsm, s, n, o, width);
            else if (n.residual)
                chain_norm_out<HELD, false, true>(cur, x, res, inv, wsm, s, n, o, width);
            else
                chain_norm_out<HELD, false, false>(cur, x, res, inv, wsm, s, n, o, width);
            prev_out = n.out;
        } else if (op.kind == K_ROW_MUL_VEC_SCALE) {
            const k_mul_vec_scale_args &m = op.u.mul_vec_scale;
            chain_source<HELD, PRE>(x, p, ext, s, 0, m.a, prev_out, cur, o, width);
#pragma unroll
            for (int i = 0; i < HELD; i++) {
                const bf16_t y = mul_vec_scale_of(x[i], chain_w<HELD>(wsm, s, i), m.scale);
                cur[i] = k_bf16_to_f32(y);
                const int j = threadIdx.x + i * RMS_THREADS;
                if (j < width) m.out[o + j] = y;
            }
            prev_out = m.out;
        } else {
            const k_scale_add_args &sa = op.u.scale_add;
            chain_source<HELD, PRE>(x, p, ext, s, 0, sa.a, prev_out, cur, o, width);
            float b[HELD];
            if (sa.b) chain_source<HELD, PRE>(b, p, ext, s, 1, sa.b, prev_out, cur, o, width);
#pragma unroll
            for (int i = 0; i < HELD; i++) {
                const bf16_t y = scale_add_of(x[i], sa.b, sa.b ? b[i] : 0.0f, sa.scale);
                cur[i] = k_bf16_to_f32(y);
                const int j = threadIdx.x + i * RMS_THREADS;
                if (j < width) sa.out[o + j] = y;
            }
            prev_out = sa.out;
        }
    }
}

/* 8 bf16 of a 16-byte word as floats, low half first; and back. */
static __device__ __forceinline__ void unpack8(float (&f)[8], uint4 v) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        f[2 * k] = k_bf16_to_f32((uint16_t)(w[k] & 0xffffu));
        f[2 * k + 1] = k_bf16_to_f32((uint16_t)(w[k] >> 16));
    }
}
static __device__ __forceinline__ uint4 pack8(const bf16_t (&y)[8]) {
    return make_uint4((uint32_t)y[0] | (uint32_t)y[1] << 16, (uint32_t)y[2] | (uint32_t)y[3] << 16,
                      (uint32_t)y[4] | (uint32_t)y[5] << 16, (uint32_t)y[6] | (uint32_t)y[7] << 16);
}

static __device__ __forceinline__ bf16_t gelu_mul_of(float x, bool has_b, float b) {
    float g = k_round_bf16(k_gelu_tanh(x));
    return k_f32_to_bf16(has_b ? __fmul_rn(g, b) : g);
}

static __global__ __launch_bounds__(EW_THREADS) void gelu_mul_kernel(k_gelu_mul_args a) {
    K_GRID_DEPENDENCY();
    size_t n = (size_t)a.rows * (size_t)a.width;
    for (size_t i = (size_t)blockIdx.x * EW_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * EW_THREADS) {
        size_t r = i / (size_t)a.width, j = i % (size_t)a.width;
        a.out[i] = gelu_mul_of(k_bf16_to_f32(a.a[r * (size_t)a.lda + j]), a.b != nullptr,
                               a.b ? k_bf16_to_f32(a.b[r * (size_t)a.ldb + j]) : 0.0f);
    }
}

/* The same elements 8 a thread with 16-byte loads and stores, for operands whose rows all start
 * on 16 bytes (gelu_mul_vec_fits): each element's arithmetic is gelu_mul_of as above, so the
 * bits are the scalar kernel's; what changes is a 16-byte access and one row division per 8
 * elements instead of 2-byte accesses and a 64-bit division per element. */
static __global__ __launch_bounds__(EW_THREADS) void gelu_mul_vec_kernel(k_gelu_mul_args a) {
    K_GRID_DEPENDENCY();
    const size_t per_row = (size_t)a.width / 8, n = (size_t)a.rows * per_row;
    const bool has_b = a.b != nullptr;
    for (size_t v = (size_t)blockIdx.x * EW_THREADS + threadIdx.x; v < n;
         v += (size_t)gridDim.x * EW_THREADS) {
        size_t r = v / per_row, j = (v - r * per_row) * 8;
        float fx[8], fb[8];
        unpack8(fx, *reinterpret_cast<const uint4 *>(a.a + r * (size_t)a.lda + j));
        unpack8(fb, has_b ? *reinterpret_cast<const uint4 *>(a.b + r * (size_t)a.ldb + j)
                          : make_uint4(0, 0, 0, 0));
        bf16_t y[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            y[k] = gelu_mul_of(fx[k], has_b, fb[k]);
        *reinterpret_cast<uint4 *>(a.out + r * (size_t)a.width + j) = pack8(y);
    }
}

/* A prompt-sized launch (K_GELU_VEC_MIN_ROWS rows or more: at one row the 8-wide form spread
 * ~2,100 elements over an eighth of the threads and measured +0.5 us a call, docs/perf-notes.md,
 * forty-seventh session) whose rows of out, a and b all start on 16 bytes and hold whole
 * 8-element pieces. */
static bool gelu_mul_vec_fits(const k_gelu_mul_args *a) {
    if (a->rows < K_GELU_VEC_MIN_ROWS || a->width % 8 != 0 || a->lda % 8 != 0 ||
        (uintptr_t)a->a % 16 != 0 || (uintptr_t)a->out % 16 != 0)
        return false;
    return !a->b || (a->ldb % 8 == 0 && (uintptr_t)a->b % 16 == 0);
}

static __global__ __launch_bounds__(EW_THREADS) void scale_add_kernel(k_scale_add_args a) {
    K_GRID_DEPENDENCY();
    for (size_t i = (size_t)blockIdx.x * EW_THREADS + threadIdx.x; i < a.n;
         i += (size_t)gridDim.x * EW_THREADS)
        a.out[i] =
            scale_add_of(k_bf16_to_f32(a.a[i]), a.b, a.b ? k_bf16_to_f32(a.b[i]) : 0.0f, a.scale);
}

static __global__ __launch_bounds__(EW_THREADS) void mul_vec_scale_kernel(k_mul_vec_scale_args a) {
    K_GRID_DEPENDENCY();
    size_t n = (size_t)a.rows * (size_t)a.width;
    for (size_t i = (size_t)blockIdx.x * EW_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * EW_THREADS) {
        size_t j = i % (size_t)a.width;
        a.out[i] = mul_vec_scale_of(k_bf16_to_f32(a.a[i]), k_bf16_to_f32(a.v[j]), a.scale);
    }
}

/* A negative src writes zeros (a bug kept in bounds); the upper bound of src is the
 * caller's to keep, the struct does not carry in's row count. */
static __global__ __launch_bounds__(ROW_THREADS) void gather_rows_kernel(k_gather_rows_args a) {
    K_GRID_DEPENDENCY();
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
    K_GRID_DEPENDENCY();
    for (size_t i = (size_t)blockIdx.x * EW_THREADS + threadIdx.x; i < a.n;
         i += (size_t)gridDim.x * EW_THREADS) {
        float t = k_round_bf16(tanhf(k_round_bf16(__fdiv_rn(k_bf16_to_f32(a.x[i]), a.cap))));
        a.x[i] = k_f32_to_bf16(__fmul_rn(t, a.cap));
    }
}

/* ---- the chain's launch ---- */

/* The held size of a chain over rows of width elements: the smallest compiled one with at
 * least a thread's elements, 0 when the row is wider than any. */
static int chain_held(int width) {
    static const int sizes[] = {
#define CHAIN_SIZE_ENTRY(h) h,
        CHAIN_SIZES(CHAIN_SIZE_ENTRY)
#undef CHAIN_SIZE_ENTRY
    };
    const int per_thread = (width + RMS_THREADS - 1) / RMS_THREADS;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] >= per_thread) return sizes[i];
    return 0;
}

/* An op's row width (scale_add's from n), its activation operands and its weight vector. */
static int chain_op_width(const k_row_op *op, int rows) {
    return op->kind == K_ROW_RMSNORM         ? op->u.rmsnorm.width
           : op->kind == K_ROW_MUL_VEC_SCALE ? op->u.mul_vec_scale.width
                                             : (int)(op->u.scale_add.n / (size_t)rows);
}
static int chain_op_buffers(const k_row_op *op, const void *buf[3]) {
    if (op->kind == K_ROW_RMSNORM) {
        buf[0] = op->u.rmsnorm.out, buf[1] = op->u.rmsnorm.in, buf[2] = op->u.rmsnorm.residual;
    } else if (op->kind == K_ROW_MUL_VEC_SCALE) {
        buf[0] = op->u.mul_vec_scale.out, buf[1] = op->u.mul_vec_scale.a, buf[2] = NULL;
    } else {
        buf[0] = op->u.scale_add.out, buf[1] = op->u.scale_add.a, buf[2] = op->u.scale_add.b;
    }
    return 3;
}

static bool ranges_apart(const void *p, size_t pn, const void *q, size_t qn) {
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return a + pn <= b || b + qn <= a;
}

/* The chain's preconditions (see row_chain_kernel): rows > 0 of one width it is compiled for
 * (at most CHAIN_NARROW_MAX_HELD x RMS_THREADS elements, CHAIN_MAX_HELD x RMS_THREADS with
 * serve.row_chain = 2 over at most CHAIN_WIDE_MAX_ROWS rows), no more ops than it keeps weights
 * for,
 * every two activation buffers the same or apart, no weight vector inside a buffer an op
 * writes (the weights are read before the ops run). The width goes to *width. */
static bool chain_fits(const k_row_ops_args *a, int *width) {
    if (!row_chain || a->rows <= 0) return false;
    const int w0 = chain_op_width(&a->op[0], a->rows);
    const int held = w0 > 0 ? chain_held(w0) : 0;
    if (held == 0) return false;
    if (held > CHAIN_NARROW_MAX_HELD && (row_chain < 2 || a->rows > CHAIN_WIDE_MAX_ROWS))
        return false;
    if (a->n_ops > chain_slots(held)) return false;
    const size_t bytes = (size_t)a->rows * (size_t)w0 * sizeof(bf16_t);
    const void *buf[K_ROW_OPS_MAX * 3];
    int nb = 0;
    for (int i = 0; i < a->n_ops; i++) {
        if (chain_op_width(&a->op[i], a->rows) != w0) return false;
        nb += chain_op_buffers(&a->op[i], buf + nb);
    }
    for (int i = 0; i < nb; i++)
        for (int j = i + 1; j < nb; j++)
            if (buf[i] && buf[j] && buf[i] != buf[j] && !ranges_apart(buf[i], bytes, buf[j], bytes))
                return false;
    for (int i = 0; i < a->n_ops; i++) {
        const bf16_t *w = chain_weight(a->op[i]);
        if (!w) continue;
        for (int k = 0; k < a->n_ops; k++) {
            const void *kb[3];
            chain_op_buffers(&a->op[k], kb);
            if (!ranges_apart(w, (size_t)w0 * sizeof(bf16_t), kb[0], bytes)) return false;
        }
    }
    *width = w0;
    return true;
}

extern "C" int k_row_ops_chained(const k_row_ops_args *a) {
    int width;
    return chain_fits(a, &width) ? 1 : 0;
}

/* The chain_pre of a chain that chain_fits: an operand that no earlier op writes (the buffers are
 * the same or apart, so equality decides) and that is not the previous op's output is taken
 * from the start's loads, up to CHAIN_PRE_EXT distinct buffers; the rest keep CHAIN_SRC_LOAD.
 * Returns whether any operand is taken so. */
static bool chain_plan_pre(const k_row_ops_args *a, chain_pre *p) {
    memset(p, 0, sizeof *p);
    int n_ext = 0;
    bool any = false;
    for (int s = 0; s < a->n_ops; s++) {
        const void *buf[3];
        chain_op_buffers(&a->op[s], buf);
        for (int k = 0; k < 2; k++) {
            const bf16_t *b = (const bf16_t *)buf[1 + k];
            if (!b) continue;
            bool written = false; /* by an earlier op of the chain */
            for (int t = 0; t < s; t++) {
                const void *tb[3];
                chain_op_buffers(&a->op[t], tb);
                written |= tb[0] == b;
            }
            if (written) continue;
            int e = 0;
            while (e < n_ext && p->ext[e] != b)
                e++;
            if (e == n_ext) {
                if (n_ext == CHAIN_PRE_EXT) continue;
                p->ext[n_ext++] = b;
            }
            p->src[s][k] = (signed char)(CHAIN_SRC_EXT + e);
            any = true;
        }
    }
    return any;
}

static int launch_chain(const k_row_ops_args *a, int width, g4_stream st) {
    const int held = chain_held(width);
    chain_pre pre;
    const bool use_pre = row_chain == 3 && held <= CHAIN_NARROW_MAX_HELD &&
                         a->rows <= CHAIN_PRE_MAX_ROWS && chain_plan_pre(a, &pre);
    if (!use_pre) memset(&pre, 0, sizeof pre);
    switch (held) {
#define CHAIN_CASE(h)                                                                              \
    case h:                                                                                        \
        if (use_pre)                                                                               \
            CUDA_CHECK(k_launch(row_chain_kernel<h, h <= CHAIN_NARROW_MAX_HELD>,                   \
                                (unsigned)a->rows, RMS_THREADS, 0, (cudaStream_t)st, *a, width,    \
                                pre));                                                             \
        else                                                                                       \
            CUDA_CHECK(k_launch(row_chain_kernel<h>, (unsigned)a->rows, RMS_THREADS, 0,            \
                                (cudaStream_t)st, *a, width, pre));                                \
        break;
        CHAIN_SIZES(CHAIN_CASE)
#undef CHAIN_CASE
    default:
        return K_ERR_SHAPE;
    }
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* ---- launchers ---- */

extern "C" int k_embed(const k_embed_args *a, g4_stream st) {
    if (a->rows < 0 || a->width <= 0 || a->n_vocab <= 0) return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->out || !a->table || !a->ids) return K_ERR_SHAPE;
    CUDA_CHECK(k_launch(embed_kernel, (unsigned)a->rows, ROW_THREADS, 0, (cudaStream_t)st, *a));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

extern "C" int k_rmsnorm(const k_rmsnorm_args *a, g4_stream st) {
    if (a->rows < 0 || a->width <= 0) return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->out || !a->in) return K_ERR_SHAPE;
    const k_row_ops_args one = {
        .rows = a->rows, .n_ops = 1, .op = {{.kind = K_ROW_RMSNORM, .u = {.rmsnorm = *a}}}};
    int width;
    if (chain_fits(&one, &width)) return launch_chain(&one, width, st);
    CUDA_CHECK(k_launch(rmsnorm_kernel, (unsigned)a->rows, RMS_THREADS, 0, (cudaStream_t)st, *a));
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
    if (gelu_mul_vec_fits(a))
        CUDA_CHECK(
            k_launch(gelu_mul_vec_kernel, ew_blocks(n / 8), EW_THREADS, 0, (cudaStream_t)st, *a));
    else
        CUDA_CHECK(k_launch(gelu_mul_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)st, *a));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* out may alias a or b (each element is read and written by one thread). */
extern "C" int k_scale_add(const k_scale_add_args *a, g4_stream st) {
    if (a->n == 0) return K_OK;
    if (!a->out || !a->a) return K_ERR_SHAPE;
    CUDA_CHECK(k_launch(scale_add_kernel, ew_blocks(a->n), EW_THREADS, 0, (cudaStream_t)st, *a));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* out may alias a. */
extern "C" int k_mul_vec_scale(const k_mul_vec_scale_args *a, g4_stream st) {
    if (a->rows < 0 || a->width <= 0) return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->out || !a->a || !a->v) return K_ERR_SHAPE;
    size_t n = (size_t)a->rows * (size_t)a->width;
    CUDA_CHECK(k_launch(mul_vec_scale_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)st, *a));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* out must not overlap in (rows move). */
extern "C" int k_gather_rows(const k_gather_rows_args *a, g4_stream st) {
    if (a->rows < 0 || a->width <= 0) return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    if (!a->out || !a->in || !a->src) return K_ERR_SHAPE;
    CUDA_CHECK(
        k_launch(gather_rows_kernel, (unsigned)a->rows, ROW_THREADS, 0, (cudaStream_t)st, *a));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

extern "C" int k_softcap(const k_softcap_args *a, g4_stream st) {
    if (a->n == 0) return K_OK;
    if (!a->x) return K_ERR_SHAPE;
    CUDA_CHECK(k_launch(softcap_kernel, ew_blocks(a->n), EW_THREADS, 0, (cudaStream_t)st, *a));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* The preconditions of each op's own launcher, and the one row count (ref_row_ops checks the
 * same). */
extern "C" int k_row_ops(const k_row_ops_args *a, g4_stream st) {
    if (a->rows < 0 || a->n_ops < 1 || a->n_ops > K_ROW_OPS_MAX) return K_ERR_SHAPE;
    for (int i = 0; i < a->n_ops; i++) {
        const k_row_op *op = &a->op[i];
        if (op->kind == K_ROW_RMSNORM) {
            const k_rmsnorm_args *n = &op->u.rmsnorm;
            if (n->rows != a->rows || n->width <= 0) return K_ERR_SHAPE;
            if (a->rows && (!n->out || !n->in)) return K_ERR_SHAPE;
        } else if (op->kind == K_ROW_MUL_VEC_SCALE) {
            const k_mul_vec_scale_args *m = &op->u.mul_vec_scale;
            if (m->rows != a->rows || m->width <= 0) return K_ERR_SHAPE;
            if (a->rows && (!m->out || !m->a || !m->v)) return K_ERR_SHAPE;
        } else if (op->kind == K_ROW_SCALE_ADD) {
            const k_scale_add_args *sa = &op->u.scale_add;
            if (a->rows == 0 ? sa->n != 0 : sa->n % (size_t)a->rows != 0 || sa->n == 0)
                return K_ERR_SHAPE;
            if (a->rows && (!sa->out || !sa->a)) return K_ERR_SHAPE;
        } else {
            return K_ERR_SHAPE;
        }
    }
    if (a->rows == 0) return K_OK;
    int width;
    if (chain_fits(a, &width)) return launch_chain(a, width, st);
    CUDA_CHECK(k_launch(row_ops_kernel, (unsigned)a->rows, RMS_THREADS, 0, (cudaStream_t)st, *a));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

K_TRACE_UNIT(norm) /* the kernel trace build's binder (common.cuh) */
