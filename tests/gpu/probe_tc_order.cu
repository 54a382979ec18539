/* tests/gpu/probe_tc_order.cu - what a tensor-core instruction's sum depends on, measured.
 *
 * The project's projections and experts run mma.sync m16n8k16 (kernels/mma.cuh), and their bits
 * are pinned: decode and prefill rows get the same mma sequence, so a row's bits never depend on
 * its batch mates or on which form ran. Hopper's fast path is wgmma (a warpgroup's m64nNk16 from
 * shared memory), which a prefill kernel at the matrix rate needs (docs/perf-notes.md, ST). Whether
 * a wgmma kernel could keep today's bits depends on facts no document states, so this program
 * measures them on the card, on random operands with spread exponents (where the order of
 * rounding shows):
 *
 *   mma natural       the reference: one m16n8k16 a 16-k step, k in its natural slots
 *   mma halves        the same 16 k a step, slots 0-7 and 8-15 exchanged in both operands
 *   mma pairs         the same 16 k a step, the two halves of each 32-bit register exchanged
 *   mma k8            two m16n8k8 a 16-k step instead of one m16n8k16
 *   mma project       mma_tiles' sets: per 32-k block, k {0-3, 8-11, 16-19, 24-27} in one
 *                     instruction and {4-7, ...} in the next (each lane's 16-byte load split)
 *   wgmma natural     m64n64k16 from shared memory, the natural 16 k an instruction
 *   wgmma project     m64n64k16 with shared memory holding mma_tiles' sets in mma_tiles' slots
 *   wgmma n128        m64n128k16 as the projections' and experts' wgmma kernels ran it
 *                     (kernels/wgmma.cuh; the kernels were taken out, measured slower),
 *                     mma_tiles' sets, each trial's 64 weight rows twice: both column halves
 *                     against mma project
 *
 * Each variant's outputs are first held to a double-precision CPU sum (a wrong fragment or
 * descriptor layout fails there, so a "bits differ" line is never a layout bug), then compared
 * bit for bit with the reference it could match. The comparisons print as INFO lines: they are
 * facts for the design (docs/perf-notes.md), not pass/fail properties of the engine. The wgmma
 * descriptors' two byte offsets are tried both ways round (their roles in the no-swizzle
 * K-major layout are documented tersely); the one that holds to the CPU sum is reported.
 *
 * Built by ./build.sh tests where nvcc exists (compile-checked in CI), run by the plans'
 * `probe` step: build/tests/probe_tc_order. Needs sm_90a. */
#include "kernels/mma.cuh"
#include "tests/gpu/probe_operands.h"
#include "kernels/wgmma.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define M 64      /* rows of a trial: one warpgroup's m64 */
#define N 64      /* outputs of a trial */
#define K 256     /* the k of a trial: 16 instructions of 16 */
#define TRIALS 32 /* blocks, each on its own operands */

enum { MMA_NATURAL, MMA_HALVES, MMA_PAIRS, MMA_K8, MMA_PROJECT, MMA_MODES };
static const char *mma_names[MMA_MODES] = {"mma natural", "mma halves", "mma pairs", "mma k8",
                                           "mma project"};

/* the k that slot s (0..15) of 16-k instruction i holds in the project's order: within a 32-k
 * block, lane quad q's 16 bytes are k 8q..8q+7; the first instruction takes 8q..8q+3 (slots 2q,
 * 2q+1 and 2q+8, 2q+9), the second 8q+4..8q+7 */
static __device__ int project_k(int i, int s) {
    const int blk = i / 2, h = i % 2, q = (s % 8) / 2, hi = s / 8, e = s % 2;
    return 32 * blk + 8 * q + 4 * h + 2 * hi + e;
}

static __device__ __forceinline__ void mma1688(float (&d)[4], uint32_t a0, uint32_t a1,
                                               uint32_t b0) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0));
}

/* two bf16 at k and k + 1 of a row as one register (low half first) */
static __device__ __forceinline__ uint32_t pair_at(const __nv_bfloat16 *row, int k0, int k1) {
    const uint16_t lo = *reinterpret_cast<const uint16_t *>(row + k0);
    const uint16_t hi = *reinterpret_cast<const uint16_t *>(row + k1);
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* x: TRIALS x M x K, w: TRIALS x N x K (k contiguous in both), y: TRIALS x M x N. 4 warps, warp
 * v the rows 16v..16v+15, every 8-output tile, 16 k an instruction in ascending order. */
__global__ void mma_chain(const __nv_bfloat16 *x, const __nv_bfloat16 *w, float *y, int mode) {
    const int t = blockIdx.x, v = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4,
              q = lane % 4;
    const __nv_bfloat16 *xa = x + ((size_t)t * M + 16 * v + g) * K, *xb = xa + 8 * K;
    for (int nt = 0; nt < N / 8; nt++) {
        const __nv_bfloat16 *wr = w + ((size_t)t * N + 8 * nt + g) * K;
        float d[4] = {0, 0, 0, 0};
        for (int i = 0; i < K / 16; i++) {
            /* slot s of instruction i holds k = kof(s); the lane's registers hold slots 2q, 2q+1
             * (a0, a1 for rows g, g+8; b0) and 2q+8, 2q+9 (a2, a3; b1) */
            int s0 = 2 * q, s8 = 2 * q + 8;
            if (mode == MMA_HALVES) {
                s0 = 2 * q + 8;
                s8 = 2 * q;
            }
            int k00, k01, k80, k81;
            if (mode == MMA_PROJECT) {
                k00 = project_k(i, s0);
                k01 = project_k(i, s0 + 1);
                k80 = project_k(i, s8);
                k81 = project_k(i, s8 + 1);
            } else {
                k00 = 16 * i + s0;
                k01 = k00 + 1;
                k80 = 16 * i + s8;
                k81 = k80 + 1;
            }
            if (mode == MMA_PAIRS) { /* slot 2q holds k + 1 and 2q + 1 holds k */
                int tmp = k00;
                k00 = k01;
                k01 = tmp;
                tmp = k80;
                k80 = k81;
                k81 = tmp;
            }
            const uint32_t a0 = pair_at(xa, k00, k01), a1 = pair_at(xb, k00, k01),
                           a2 = pair_at(xa, k80, k81), a3 = pair_at(xb, k80, k81),
                           b0 = pair_at(wr, k00, k01), b1 = pair_at(wr, k80, k81);
            if (mode == MMA_K8) { /* k 0-7 of the step, then 8-15: an m16n8k8 each */
                mma1688(d, a0, a1, b0);
                mma1688(d, a2, a3, b1);
            } else {
                mma_16816(d, a0, a1, a2, a3, b0, b1); /* the projections' own wrapper */
            }
        }
        float *yr = y + ((size_t)t * M + 16 * v + g) * N + 8 * nt + 2 * q;
        yr[0] = d[0];
        yr[1] = d[1];
        yr[8 * N] = d[2];
        yr[8 * N + 1] = d[3];
    }
}

/* ---- wgmma ---- */

/* A shared-memory matrix descriptor, no swizzle: start address, the two byte offsets between
 * 8 x 16-byte core matrices (which one steps along k and which along rows is what the probe
 * tries both ways), base offset 0, layout 0. */
static __device__ __forceinline__ uint64_t smem_desc(const void *p, uint32_t lbo, uint32_t sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a >> 4) & 0x3fff) | ((uint64_t)((lbo >> 4) & 0x3fff) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3fff) << 32);
}

/* Instruction i's operand tile in shared memory: R rows x 16 slots as core matrices of 8 rows x
 * 8 slots (128 bytes, a row's 8 slots contiguous), core (r / 8, s / 8) at (r / 8) * 256 +
 * (s / 8) * 128: 128 bytes between the two k cores of a row group, 256 between row groups. */
static __device__ __forceinline__ int core_off(int r, int s) {
    return (r / 8) * 256 + (s / 8) * 128 + (r % 8) * 16 + (s % 8) * 2;
}

#define WG_TILE_A (M * 16 * 2) /* bytes of one instruction's A tile */
#define WG_TILE_B (N * 16 * 2)

__global__ void __launch_bounds__(128) wgmma_chain(const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                                                   float *y, int project, int swap_offsets) {
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char *sa = smem, *sb = smem + (K / 16) * WG_TILE_A;
    const int t = blockIdx.x, tid = threadIdx.x;
    /* every instruction's tiles, slot s of instruction i holding k = kof(i, s) */
    for (int e = tid; e < (K / 16) * M * 16; e += 128) {
        const int i = e / (M * 16), r = e / 16 % M, s = e % 16;
        const int k = project ? project_k(i, s) : 16 * i + s;
        *reinterpret_cast<__nv_bfloat16 *>(sa + i * WG_TILE_A + core_off(r, s)) =
            x[((size_t)t * M + r) * K + k];
    }
    for (int e = tid; e < (K / 16) * N * 16; e += 128) {
        const int i = e / (N * 16), r = e / 16 % N, s = e % 16;
        const int k = project ? project_k(i, s) : 16 * i + s;
        *reinterpret_cast<__nv_bfloat16 *>(sb + i * WG_TILE_B + core_off(r, s)) =
            w[((size_t)t * N + r) * K + k];
    }
    /* generic-proxy stores, read by the async proxy */
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    float d[N / 2];
    for (int j = 0; j < N / 2; j++)
        d[j] = 0.0f;
    const uint32_t lbo = swap_offsets ? 256 : 128, sbo = swap_offsets ? 128 : 256;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int i = 0; i < K / 16; i++) {
        const uint64_t da = smem_desc(sa + i * WG_TILE_A, lbo, sbo),
                       db = smem_desc(sb + i * WG_TILE_B, lbo, sbo);
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                     "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
                     "%32, %33, p, 1, 1, 0, 0;\n\t}"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                       "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                       "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                       "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                       "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                       "+f"(d[30]), "+f"(d[31])
                     : "l"(da), "l"(db));
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    /* the accumulator fragment: warp v rows 16v + g and + 8, columns 8j + 2q and + 1 */
    const int v = tid / 32, g = tid % 32 / 4, q = tid % 4;
    for (int j = 0; j < N / 8; j++) {
        float *yr = y + ((size_t)t * M + 16 * v + g) * N + 8 * j + 2 * q;
        yr[0] = d[4 * j];
        yr[1] = d[4 * j + 1];
        yr[8 * N] = d[4 * j + 2];
        yr[8 * N + 1] = d[4 * j + 3];
    }
}

/* The wgmma kernels' instruction and descriptors (kernels/wgmma.cuh): m64n128k16 on mma_tiles'
 * sets, B's rows 64..127 a copy of rows 0..63, so both halves of y's 128 columns must be the
 * m64n64 chain's (and mma.sync's) bits. y: TRIALS x M x 2N. */
__global__ void __launch_bounds__(128)
    wgmma_n128(const __nv_bfloat16 *x, const __nv_bfloat16 *w, float *y) {
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char *sa = smem, *sb = smem + (K / 16) * WG_TILE_A;
    const int t = blockIdx.x, tid = threadIdx.x;
    for (int e = tid; e < (K / 16) * M * 16; e += 128) {
        const int i = e / (M * 16), r = e / 16 % M, s = e % 16;
        *reinterpret_cast<__nv_bfloat16 *>(sa + i * WG_TILE_A + wg_core_off(r, s)) =
            x[((size_t)t * M + r) * K + project_k(i, s)];
    }
    for (int e = tid; e < (K / 16) * 2 * N * 16; e += 128) {
        const int i = e / (2 * N * 16), r = e / 16 % (2 * N), s = e % 16;
        *reinterpret_cast<__nv_bfloat16 *>(sb + i * 2 * WG_TILE_B + wg_core_off(r, s)) =
            w[((size_t)t * N + r % N) * K + project_k(i, s)];
    }
    wg_fence_proxy_async();
    __syncthreads();
    float d[64];
    for (int j = 0; j < 64; j++)
        d[j] = 0.0f;
    wg_fence();
    for (int i = 0; i < K / 16; i++)
        wg_m64n128k16(d, wg_desc(sa + i * WG_TILE_A), wg_desc(sb + i * 2 * WG_TILE_B));
    wg_commit();
    wg_wait<0>();
    const int v = tid / 32, g = tid % 32 / 4, q = tid % 4;
    for (int j = 0; j < 16; j++) {
        float *yr = y + ((size_t)t * M + 16 * v + g) * 2 * N + 8 * j + 2 * q;
        yr[0] = d[4 * j];
        yr[1] = d[4 * j + 1];
        yr[16 * N] = d[4 * j + 2];
        yr[16 * N + 1] = d[4 * j + 3];
    }
}

/* ---- host ---- */

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            printf("FAIL probe_tc_order: %s: %s\n", #call, cudaGetErrorString(e_));                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Outputs off the double-precision sum: |y - ref| > 2^-16 x sum |x w|. A tensor core's fp32
 * sum may truncate where it aligns its terms, ~2^-23 of the largest a step, so 16 steps stay
 * well under 2^-18 of the mass; a wrong fragment or descriptor layout errs by the mass itself. */
static int off_sum(const float *y, const uint16_t *x, const uint16_t *w) {
    int bad = 0;
    for (int t = 0; t < TRIALS; t++)
        for (int r = 0; r < M; r++)
            for (int o = 0; o < N; o++) {
                double s = 0, mass = 0;
                for (int k = 0; k < K; k++) {
                    const double p = bf16_value(x[((size_t)t * M + r) * K + k]) *
                                     bf16_value(w[((size_t)t * N + o) * K + k]);
                    s += p;
                    mass += fabs(p);
                }
                const double got = y[((size_t)t * M + r) * N + o];
                if (!(fabs(got - s) <= ldexp(mass, -16))) bad++;
            }
    return bad;
}

static int holds(const char *name, const float *y, const uint16_t *x, const uint16_t *w) {
    const int bad = off_sum(y, x, w);
    printf("%s probe_valid[%s]: %d of %d outputs off the double sum\n", bad ? "FAIL" : "PASS", name,
           bad, TRIALS * M * N);
    return bad == 0;
}

static void compare(const char *a_name, const float *a, const char *b_name, const float *b) {
    int differ = 0;
    for (int i = 0; i < TRIALS * M * N; i++)
        differ += memcmp(&a[i], &b[i], 4) != 0;
    printf("INFO tc_order[%s vs %s]: %d of %d outputs differ in their bits\n", a_name, b_name,
           differ, TRIALS * M * N);
}

int main(void) {
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        printf("SKIP probe_tc_order: skipped: no GPU\n");
        return 0;
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9) {
        printf("SKIP probe_tc_order: skipped: sm_%d%d, wgmma needs sm_90a\n", prop.major,
               prop.minor);
        return 0;
    }
    const size_t nx = (size_t)TRIALS * M * K, nw = (size_t)TRIALS * N * K,
                 ny = (size_t)TRIALS * M * N;
    uint16_t *x = (uint16_t *)malloc(nx * 2), *w = (uint16_t *)malloc(nw * 2);
    float *ys[MMA_MODES + 2];
    for (int i = 0; i < MMA_MODES + 2; i++)
        ys[i] = (float *)malloc(ny * 4);
    /* alignment and truncation inside an instruction's sum show in the low bits */
    srand(20261205);
    probe_fill(x, nx, w, nw);
    void *dx, *dw;
    float *dy;
    CHECK(cudaMalloc(&dx, nx * 2));
    CHECK(cudaMalloc(&dw, nw * 2));
    CHECK(cudaMalloc(&dy, ny * 4));
    CHECK(cudaMemcpy(dx, x, nx * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dw, w, nw * 2, cudaMemcpyHostToDevice));
    int ok = 1;
    for (int mode = 0; mode < MMA_MODES; mode++) {
        CHECK(cudaMemset(dy, 0xff, ny * 4));
        mma_chain<<<TRIALS, 128>>>((const __nv_bfloat16 *)dx, (const __nv_bfloat16 *)dw, dy, mode);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(ys[mode], dy, ny * 4, cudaMemcpyDeviceToHost));
        ok &= holds(mma_names[mode], ys[mode], x, w);
    }
    for (int mode = 1; mode < MMA_MODES; mode++)
        compare(mma_names[mode], ys[mode], mma_names[MMA_NATURAL], ys[MMA_NATURAL]);

    const size_t smem = (size_t)(K / 16) * (WG_TILE_A + WG_TILE_B);
    CHECK(
        cudaFuncSetAttribute(wgmma_chain, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    static const char *wg_names[2] = {"wgmma natural", "wgmma project"};
    for (int project = 0; project < 2; project++) {
        int found = -1;
        for (int swap = 0; swap < 2 && found < 0; swap++) {
            CHECK(cudaMemset(dy, 0xff, ny * 4));
            wgmma_chain<<<TRIALS, 128, smem>>>((const __nv_bfloat16 *)dx, (const __nv_bfloat16 *)dw,
                                               dy, project, swap);
            CHECK(cudaGetLastError());
            CHECK(cudaMemcpy(ys[MMA_MODES + project], dy, ny * 4, cudaMemcpyDeviceToHost));
            const int bad = off_sum(ys[MMA_MODES + project], x, w);
            printf("INFO wgmma descriptor[%s, k-step offset %d, row-step offset %d]: %d of %d "
                   "outputs off the double sum\n",
                   wg_names[project], swap ? 256 : 128, swap ? 128 : 256, bad, TRIALS * M * N);
            if (bad == 0) found = swap;
        }
        printf("%s probe_valid[%s]: %s\n", found >= 0 ? "PASS" : "FAIL", wg_names[project],
               found >= 0 ? "one descriptor convention held to the double sum"
                          : "neither descriptor convention held to the double sum");
        if (found < 0) {
            ok = 0;
            continue;
        }
        compare(wg_names[project], ys[MMA_MODES + project],
                project ? mma_names[MMA_PROJECT] : mma_names[MMA_NATURAL],
                project ? ys[MMA_PROJECT] : ys[MMA_NATURAL]);
    }
    /* the kernels' m64n128k16: both column halves against mma project, bit for bit (the
     * m64n64 run above held to the double sum with this descriptor convention, or failed) */
    const size_t smem128 = (size_t)(K / 16) * (WG_TILE_A + 2 * WG_TILE_B);
    float *dy2, *y2 = (float *)malloc(2 * ny * 4);
    CHECK(cudaMalloc(&dy2, 2 * ny * 4));
    CHECK(cudaFuncSetAttribute(wgmma_n128, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)smem128));
    CHECK(cudaMemset(dy2, 0xff, 2 * ny * 4));
    wgmma_n128<<<TRIALS, 128, smem128>>>((const __nv_bfloat16 *)dx, (const __nv_bfloat16 *)dw, dy2);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(y2, dy2, 2 * ny * 4, cudaMemcpyDeviceToHost));
    for (int half = 0; half < 2; half++) {
        float *yh = (float *)malloc(ny * 4);
        for (size_t i = 0; i < ny; i++)
            yh[i] = y2[(i / N) * 2 * N + (size_t)half * N + i % N];
        const char *name = half ? "wgmma n128 columns 64-127" : "wgmma n128 columns 0-63";
        ok &= holds(name, yh, x, w);
        compare(name, yh, mma_names[MMA_PROJECT], ys[MMA_PROJECT]);
        free(yh);
    }
    printf("probe_tc_order: %s\n", ok ? "every variant held to the double sum"
                                      : "a variant failed its double-sum check (FAIL above)");
    return ok ? 0 : 1;
}
