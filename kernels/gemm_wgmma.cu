/* kernels/gemm_wgmma.cu - the mma projections at prefill sizes on Hopper's wgmma, with the tile
 * form's bits (serve.gemm_wgmma; launched by kernels/gemm_lt.cu's k_gemm).
 *
 * A block of two warpgroups computes a 128-row x 128-output tile of y = x w^T: each warpgroup
 * 64 rows against all 128 weight rows, one wgmma m64n128k16 per 16 k, both operands read from
 * shared memory. The tile form (gemm_mma_kernel) and the staged form reach 135-185 TFLOP/s on
 * the H200 where cuBLASLt reaches up to ~500 (docs/perf-notes.md, ST): mma.sync issues one
 * m16n8k16 a warp at a time from registers, wgmma a 64 x 128 x 16 product a warpgroup.
 *
 * The bits are the tile form's. mma_tiles gives every output two mma.sync a 32-k block, the first
 * over k {0-3, 8-11, 16-19, 24-27} of the block and the second over {4-7, ...} (each lane's
 * 16-byte load split across them), accumulating from zero over a quarter of k, and the quarters'
 * sums are added in order. The H200 measured that a wgmma chain whose shared-memory tiles hold
 * those k sets in mma.sync's slots gives mma.sync's bits (tests/gpu/probe_tc_order.cu, `wgmma
 * project`). So a lane loads its natural 16 bytes of a row (k 8q .. 8q + 7 of a 32-k block, as
 * mma_tiles does) and one stmatrix puts its four 4-byte words where those slots are: words 0 and
 * 1 in the block's first instruction (k cores 0 and 1), words 2 and 3 in its second. The k loop
 * keeps the quarters: the accumulators restart from zero at each quarter's first 32-k block (nb *
 * w / 4, as gemm_warp_rows cuts them, empty quarters included) and each quarter's sums are added
 * into a running total in quarter order with __fadd_rn, as the staged form does. Rows and outputs
 * past m and n are zero operands and are never stored. So every output is the same bits as the
 * tile form gives it at any m (test_gemm_lt's `gemm_wgmma` gates), and batch invariance holds.
 *
 * Loads go through registers (stmatrix must write the permuted words) into three shared-memory
 * stages: while a chunk's wgmmas run, the next chunk's registers go into the next stage and the
 * loads of the chunk after it are issued, so each load has a chunk's products to land; each chunk
 * waits only for the one before it (wgmma.wait_group 1), so the tensor cores have a chunk queued
 * across the barrier. KB 32-k blocks a chunk: 2 (96 KB of shared memory, 32 load registers a
 * thread) or 4 (192 KB, 64). One block an SM. */
#include "kernels/common.cuh"
#include "kernels/bf16.cuh"
#include "kernels/gemm_wgmma.h"
#include "kernels/wgmma.cuh"

#define WG_BM 128 /* rows of x a block: 64 a warpgroup */
#define WG_BN 128 /* weight rows (outputs) a block */
#define WG_THREADS 256
#define WG_SIDE_BYTES (WG_BM * 32) /* one instruction's tile of x's rows (or w's): 16 k of each */
#define WG_INSTR_BYTES (2 * WG_SIDE_BYTES)

template <int KB> struct wg_shape {
    static constexpr int STAGE = 2 * KB * WG_INSTR_BYTES; /* two instructions a 32-k block */
    static constexpr size_t SMEM = 3 * (size_t)STAGE;     /* three stages in a ring */
    /* a chunk's loads: (32-k block, side, row group of 8) units, a warp's 8 rows x 64 bytes each */
    static constexpr int UNITS = KB * 2 * (WG_BM / 8), PER_WARP = UNITS / (WG_THREADS / 32);
};

/* Chunk c's loads of this warp's units into v (zero past m, n and k). */
template <int KB>
static __device__ __forceinline__ void wg_load(uint4 (&v)[wg_shape<KB>::PER_WARP], int c,
                                               const bf16_t *x, const bf16_t *w, int m, int n,
                                               int k, int r0, int o0) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, q = lane & 3;
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < wg_shape<KB>::PER_WARP; j++) {
        const int u = warp + (WG_THREADS / 32) * j;
        const int kb = u / (2 * (WG_BM / 8)), side = u / (WG_BM / 8) % 2, rg = u % (WG_BM / 8);
        const int row = 8 * rg + g, kk = (c * KB + kb) * 32 + 8 * q;
        const bf16_t *src = NULL;
        if (kk < k) {
            if (side == 0 && r0 + row < m) src = x + (size_t)(r0 + row) * (size_t)k + kk;
            if (side == 1 && o0 + row < n) src = w + (size_t)(o0 + row) * (size_t)k + kk;
        }
        v[j] = src ? __ldg((const uint4 *)src) : zero;
    }
}

/* v (a chunk's loads) into stage st. Matrix j of a stmatrix is word j of every lane's load (k
 * 8q + 2j and + 1 of the lane's row), and lane 8j + r gives the address of its row r: words 0
 * and 1 go to the 32-k block's first instruction's k cores 0 and 1, words 2 and 3 to its
 * second's, which puts k 8q + 2j + e in slot 8 (j % 2) + 2q + e, mma_tiles' slot for it. */
template <int KB>
static __device__ __forceinline__ void wg_store(const uint4 (&v)[wg_shape<KB>::PER_WARP],
                                                unsigned char *st) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, j = lane / 8, r = lane % 8;
#pragma unroll
    for (int i = 0; i < wg_shape<KB>::PER_WARP; i++) {
        const int u = warp + (WG_THREADS / 32) * i;
        const int kb = u / (2 * (WG_BM / 8)), side = u / (WG_BM / 8) % 2, rg = u % (WG_BM / 8);
        unsigned char *row = st + (2 * kb + j / 2) * WG_INSTR_BYTES + side * WG_SIDE_BYTES +
                             rg * WG_CORE_ROW_BYTES + (j % 2) * WG_CORE_K_BYTES + r * 16;
        wg_stmatrix_x4(row, v[i].x, v[i].y, v[i].z, v[i].w);
    }
}

/* One quarter of k ends: the total takes its sums (the first quarter's as they are) and the
 * accumulators restart from zero. */
static __device__ __forceinline__ void wg_fold(int quarter, float (&acc)[64], float (&tot)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) {
        tot[i] = quarter == 0 ? acc[i] : __fadd_rn(tot[i], acc[i]);
        acc[i] = 0.0f;
    }
}

template <int KB>
static __global__ void __launch_bounds__(WG_THREADS, 1)
    gemm_wgmma_kernel(bf16_t *y, const bf16_t *x, const bf16_t *w, int m, int n, int k, int ldy) {
    using S = wg_shape<KB>;
    extern __shared__ __align__(128) unsigned char wg_smem[];
    const int tid = threadIdx.x, wg = tid / 128;
    const int r0 = blockIdx.y * WG_BM, o0 = blockIdx.x * WG_BN;
    const int nkb = k / 32, n_chunks = (nkb + KB - 1) / KB;
    K_GRID_DEPENDENCY();

    float acc[64], tot[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        acc[i] = tot[i] = 0.0f;
    uint4 v[S::PER_WARP];
    wg_load<KB>(v, 0, x, w, m, n, k, r0, o0);
    wg_store<KB>(v, wg_smem);
    if (n_chunks > 1) wg_load<KB>(v, 1, x, w, m, n, k, r0, o0);
    wg_fence_proxy_async();
    __syncthreads();
    int quarter = 0, quarter_end = nkb / 4; /* the first 32-k block past this quarter */
    for (int c = 0; c < n_chunks; c++) {
        const unsigned char *st = wg_smem + (c % 3) * S::STAGE;
        wg_fence();
#pragma unroll
        for (int kb = 0; kb < KB; kb++) {
            const int b = c * KB + kb;
            if (b >= nkb) break;       /* block-uniform */
            while (b == quarter_end) { /* block-uniform; the last quarter ends at nkb */
                wg_commit();
                wg_wait<0>();
                wg_fold(quarter, acc, tot);
                quarter++;
                quarter_end = nkb * (quarter + 1) / 4;
                wg_fence();
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const unsigned char *t = st + (2 * kb + h) * WG_INSTR_BYTES;
                wg_m64n128k16(acc, wg_desc(t + wg * (64 / 8) * WG_CORE_ROW_BYTES),
                              wg_desc(t + WG_SIDE_BYTES));
            }
        }
        wg_commit();
        /* the next stage's readers (chunk c - 2) finished before the barrier that ended c - 1 */
        if (c + 1 < n_chunks) wg_store<KB>(v, wg_smem + ((c + 1) % 3) * S::STAGE);
        if (c + 2 < n_chunks) wg_load<KB>(v, c + 2, x, w, m, n, k, r0, o0);
        wg_wait<1>(); /* chunk c - 1's products are done; c's may run on */
        wg_fence_proxy_async();
        __syncthreads();
    }
    wg_wait<0>();
    for (; quarter < 4; quarter++) /* the last quarter, and any empty ones before it */
        wg_fold(quarter, acc, tot);
    const int wv = tid % 128 / 32, lane = tid % 32, g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int i = 0; i < 64; i++) {
        const int r = r0 + 64 * wg + 16 * wv + g + (i % 4 < 2 ? 0 : 8);
        const int o = o0 + 8 * (i / 4) + 2 * q + (i & 1);
        if (r < m && o < n) y[(size_t)r * (size_t)ldy + (size_t)o] = k_f32_to_bf16(tot[i]);
    }
}

int gemm_wgmma_allow(void) {
    CUDA_CHECK(cudaFuncSetAttribute(
        gemm_wgmma_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)wg_shape<2>::SMEM));
    CUDA_CHECK(cudaFuncSetAttribute(
        gemm_wgmma_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)wg_shape<4>::SMEM));
    return K_OK;
}

long long gemm_wgmma_blocks(long long m, long long n) {
    return ((n + WG_BN - 1) / WG_BN) * ((m + WG_BM - 1) / WG_BM);
}

long long gemm_wgmma_row_tiles(long long m) { return (m + WG_BM - 1) / WG_BM; }

int gemm_wgmma_launch(bf16_t *y, const bf16_t *x, const bf16_t *w, int m, int n, int k, int ldy,
                      int kb, g4_stream st) {
    const dim3 grid((unsigned)((n + WG_BN - 1) / WG_BN), (unsigned)((m + WG_BM - 1) / WG_BM));
    if (kb == 4)
        CUDA_CHECK(k_launch(gemm_wgmma_kernel<4>, grid, WG_THREADS, wg_shape<4>::SMEM,
                            (cudaStream_t)st, y, x, w, m, n, k, ldy));
    else
        CUDA_CHECK(k_launch(gemm_wgmma_kernel<2>, grid, WG_THREADS, wg_shape<2>::SMEM,
                            (cudaStream_t)st, y, x, w, m, n, k, ldy));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

K_TRACE_UNIT(gemm_wgmma) /* the kernel trace build's binder (common.cuh) */
