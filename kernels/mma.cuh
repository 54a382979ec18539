/* kernels/mma.cuh - the tensor-core inner loop the projections share (kernels/moe.cu's routed
 * experts, kernels/gemm_lt.cu's mma projections): mma.sync m16n8k16, bf16 in, fp32 accumulate,
 * a warp's 16 rows against NB tiles of 8 weight rows over a run of k.
 *
 * The k order of every output is fixed by the instruction sequence alone: 32-k blocks in
 * ascending order, two mmas each, each lane's 16 bytes at k0 + 8q .. 8q + 7 (q = lane % 4), a
 * fixed permutation of the k positions that A and B share, so every product meets its partner.
 * Rows are independent in an mma: a row's sums do not depend on the other 15 rows of its tile,
 * which is what makes a row's result the same in any batch (docs/gates.md). Needs k % 32 == 0
 * and 16-byte aligned rows. */
#ifndef G4_MMA_CUH
#define G4_MMA_CUH

#include "kernels/kernels.h"

#include <cuda_runtime.h>
#include <stdint.h>

static __device__ __forceinline__ void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1,
                                                 uint32_t a2, uint32_t a3, uint32_t b0,
                                                 uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* acc[t] += rows (lo: the lane's row, hi: row + 8; NULL: a padding row) . w[t] over k, for the
 * NB weight row pointers w[t] (each the lane's row of tile t; NULL: past the outputs).
 * The k loop goes in groups of U 32-k blocks whose loads are all issued, in program order,
 * before the group's first mma: with the loads and the (volatile) mma asm interleaved per
 * block, as first written, nothing guaranteed more than one block's loads in flight, and at one
 * or two items an expert (decode) the weight stream is all there is, and the first version's
 * decode experts ran slower than the CUDA-core kernel's (see docs/perf-notes.md, "Measurements
 * behind the code", experts). The mmas run in the same k order with the same operands, so the sums
 * are the same bits. */
/* U: 32-k blocks a group, the loads' registers (16 bytes each of a, a8 and NB weight rows) */
template <int NB, int U = NB == 1 ? 8 : 4>
static __device__ __forceinline__ void mma_rows(const bf16_t *lo, const bf16_t *hi,
                                                const bf16_t *const (&w)[NB], int k,
                                                float (&acc)[NB][4]) {
    const int q = threadIdx.x & 3;
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int t = 0; t < NB; t++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[t][j] = 0.0f;
    for (int g0 = 0; g0 < k; g0 += 32 * U) {
        uint4 a[U], a8[U], b[U][NB];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int o = g0 + 32 * u + 8 * q;
            const bool in = g0 + 32 * u < k; /* warp-uniform */
            a[u] = in && lo ? __ldg((const uint4 *)(lo + o)) : zero;
            a8[u] = in && hi ? __ldg((const uint4 *)(hi + o)) : zero;
#pragma unroll
            for (int t = 0; t < NB; t++)
                b[u][t] = in && w[t] ? __ldg((const uint4 *)(w[t] + o)) : zero;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (g0 + 32 * u >= k) break; /* warp-uniform */
#pragma unroll
            for (int t = 0; t < NB; t++) {
                mma_16816(acc[t], a[u].x, a8[u].x, a[u].y, a8[u].y, b[u][t].x, b[u][t].y);
                mma_16816(acc[t], a[u].z, a8[u].z, a[u].w, a8[u].w, b[u][t].z, b[u][t].w);
            }
        }
    }
}

/* mma_rows for a tile whose rows past the 8th are all padding (hi NULL: a tile of at most 8
 * rows, as a decode step's are), written without hi's registers so that a group can hold U
 * 32-k blocks of loads in the registers mma_rows spends on hi: at one decode row
 * a warp's k loop is a chain of groups, each one round trip of loads, and more bytes a group
 * means fewer of them (serve.wide_loads). Every mma gets mma_rows' operands (hi's zero) in
 * mma_rows' order, so the sums are the same bits. */
template <int NB, int U>
static __device__ __forceinline__ void mma_rows_lo(const bf16_t *lo, const bf16_t *const (&w)[NB],
                                                   int k, float (&acc)[NB][4]) {
    const int q = threadIdx.x & 3;
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int t = 0; t < NB; t++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[t][j] = 0.0f;
    for (int g0 = 0; g0 < k; g0 += 32 * U) {
        uint4 a[U], b[U][NB];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int o = g0 + 32 * u + 8 * q;
            const bool in = g0 + 32 * u < k; /* warp-uniform */
            a[u] = in && lo ? __ldg((const uint4 *)(lo + o)) : zero;
#pragma unroll
            for (int t = 0; t < NB; t++)
                b[u][t] = in && w[t] ? __ldg((const uint4 *)(w[t] + o)) : zero;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (g0 + 32 * u >= k) break; /* warp-uniform */
#pragma unroll
            for (int t = 0; t < NB; t++) {
                mma_16816(acc[t], a[u].x, 0u, a[u].y, 0u, b[u][t].x, b[u][t].y);
                mma_16816(acc[t], a[u].z, 0u, a[u].w, 0u, b[u][t].z, b[u][t].w);
            }
        }
    }
}

/* acc[i][t] += rows of m tile i (lo[i]: the lane's row, hi[i]: row + 8; NULL: padding) . w[t]
 * over k: mma_rows for MT row tiles at once, each weight fragment loaded once for all of them
 * (the large-m form of the projections). Every (i, t) pair gets exactly mma_rows' instruction
 * sequence, operands and k order, so its sums are the same bits as mma_rows<NB> on that tile
 * alone: which form ran never shows in an output. Loads go in groups of U 32-k blocks as
 * there. mma_rows stays its own function: written as mma_tiles<1, NB, U> the experts' kernels
 * compile to other PTX, and theirs is what the H200 gates ran. */
template <int MT, int NB, int U>
static __device__ __forceinline__ void
mma_tiles(const bf16_t *const (&lo)[MT], const bf16_t *const (&hi)[MT],
          const bf16_t *const (&w)[NB], int k, float (&acc)[MT][NB][4]) {
    const int q = threadIdx.x & 3;
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int t = 0; t < NB; t++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                acc[i][t][j] = 0.0f;
    for (int g0 = 0; g0 < k; g0 += 32 * U) {
        uint4 a[U][MT], a8[U][MT], b[U][NB];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int o = g0 + 32 * u + 8 * q;
            const bool in = g0 + 32 * u < k; /* warp-uniform */
#pragma unroll
            for (int i = 0; i < MT; i++) {
                a[u][i] = in && lo[i] ? __ldg((const uint4 *)(lo[i] + o)) : zero;
                a8[u][i] = in && hi[i] ? __ldg((const uint4 *)(hi[i] + o)) : zero;
            }
#pragma unroll
            for (int t = 0; t < NB; t++)
                b[u][t] = in && w[t] ? __ldg((const uint4 *)(w[t] + o)) : zero;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (g0 + 32 * u >= k) break; /* warp-uniform */
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int t = 0; t < NB; t++) {
                    mma_16816(acc[i][t], a[u][i].x, a8[u][i].x, a[u][i].y, a8[u][i].y, b[u][t].x,
                              b[u][t].y);
                    mma_16816(acc[i][t], a[u][i].z, a8[u][i].z, a[u][i].w, a8[u][i].w, b[u][t].z,
                              b[u][t].w);
                }
        }
    }
}

#endif
