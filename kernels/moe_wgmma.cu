/* kernels/moe_wgmma.cu - the routed experts of prefill-sized calls on Hopper's wgmma, with the
 * tile kernels' bits (serve.moe_prefill_tiles = 4; launched by kernels/moe.cu's k_moe_experts).
 *
 * A block of two warpgroups takes one expert's bucket 64 items at a time (an expert holds ~64
 * items in a 1,024-token 26B-A4B chunk: 8,192 items over 128 experts) against 256 weight rows:
 * in the up kernel 64 gate rows and the same 64 outputs' up rows a warpgroup, so that one wgmma
 * m64n128k16 gives a warpgroup gate and up of 64 outputs side by side in its registers, and in
 * the down kernel 128 outputs a warpgroup. Both operands come from shared memory, laid out as
 * kernels/gemm_wgmma.cu lays them: each lane loads the 16 bytes mma_tiles loads and one stmatrix
 * puts its four words in the slots of mma_tiles' k sets, which gives mma.sync's bits on the H200
 * (tests/gpu/probe_tc_order.cu). Every (item, output) pair gets mma_tiles' chain over the whole of
 * k from zero (the experts keep no quarters), and the epilogues are the staged kernels' (GeGLU
 * rounded as the reference does; down's sums rounded to bf16 into ys), so every output is the
 * same bits (test_moe's `moe_prefill_wgmma` gates). Padding items are zero rows, never stored.
 *
 * Loads go through registers (stmatrix permutes 4-byte words) into three shared-memory stages of
 * 64 k, as in kernels/gemm_wgmma.cu: while a chunk's wgmmas run the next chunk's registers go into
 * the next stage and the loads of the one after are issued, and a chunk waits only for the one
 * before it. 120 KB of shared memory, one block an SM. */
#include "kernels/common.cuh"
#include "kernels/bf16.cuh"
#include "kernels/moe_bucket.cuh"
#include "kernels/moe_wgmma.h"
#include "kernels/wgmma.cuh"

#define MW_THREADS 256
#define MW_BM 64      /* items a block tile: both warpgroups' m64 */
#define MW_BR 256     /* weight rows a block: a warpgroup's n128 each */
#define MW_KB 2       /* 32-k blocks a load chunk */
#define MW_UP_OUTS 64 /* outputs a warpgroup in the up kernel (gate and up rows of each) */
#define MW_A_BYTES (MW_BM * 32) /* one instruction's item tile */
#define MW_INSTR_BYTES (MW_A_BYTES + MW_BR * 32)
#define MW_STAGE (2 * MW_KB * MW_INSTR_BYTES)
#define MW_SMEM (3 * MW_STAGE)  /* three stages in a ring */
#define MW_GROUPS_A (MW_BM / 8) /* row groups of 8 a 32-k block: items, then weight rows */
#define MW_GROUPS (MW_GROUPS_A + MW_BR / 8)
#define MW_PER_WARP (MW_KB * MW_GROUPS / (MW_THREADS / 32))
static_assert(MW_KB * MW_GROUPS % (MW_THREADS / 32) == 0, "whole units a warp");

/* outputs a block: up 2 x 64 (each warpgroup's gate and up rows of 64 outputs), down 2 x 128 */
template <bool UP> static __host__ __device__ constexpr int mw_block_outs() {
    return UP ? 2 * MW_UP_OUTS : MW_BR;
}

/* weight row rr (0..255) of the block at output ob: its row in the expert's matrix, or -1 */
template <bool UP>
static __device__ __forceinline__ long long mw_weight_row(int rr, int ob, int de, int dm) {
    if constexpr (UP) {
        const int wg = rr / 128, j = rr % 128, o = ob + MW_UP_OUTS * wg + j % MW_UP_OUTS;
        if (o >= de) return -1;
        return j < MW_UP_OUTS ? o : (long long)de + o; /* gate's rows, then up's */
    } else {
        const int o = ob + rr;
        return o < dm ? o : -1;
    }
}

template <bool UP>
static __device__ __forceinline__ void mw_load(uint4 (&v)[MW_PER_WARP], int c,
                                               const bf16_t *const *s_row, const bf16_t *wbase,
                                               int k, int ob, int de, int dm) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, q = lane & 3;
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < MW_PER_WARP; j++) {
        const int u = warp + (MW_THREADS / 32) * j;
        const int kb = u / MW_GROUPS, rg = u % MW_GROUPS;
        const int kk = (c * MW_KB + kb) * 32 + 8 * q;
        const bf16_t *src = NULL;
        if (kk < k) {
            if (rg < MW_GROUPS_A) {
                const bf16_t *row = s_row[8 * rg + g];
                if (row) src = row + kk;
            } else {
                const long long wr = mw_weight_row<UP>(8 * (rg - MW_GROUPS_A) + g, ob, de, dm);
                if (wr >= 0) src = wbase + (size_t)wr * (size_t)k + kk;
            }
        }
        v[j] = src ? __ldg((const uint4 *)src) : zero;
    }
}

/* v into stage st: lane 8j + r names row r of matrix j (wg_stmatrix_x4); words 0 and 1 are the
 * 32-k block's first instruction's k cores, words 2 and 3 its second's */
static __device__ __forceinline__ void mw_store(const uint4 (&v)[MW_PER_WARP], unsigned char *st) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, j = lane / 8, r = lane % 8;
#pragma unroll
    for (int i = 0; i < MW_PER_WARP; i++) {
        const int u = warp + (MW_THREADS / 32) * i;
        const int kb = u / MW_GROUPS, rg = u % MW_GROUPS;
        const int side = rg < MW_GROUPS_A ? 0 : MW_A_BYTES;
        const int g8 = rg < MW_GROUPS_A ? rg : rg - MW_GROUPS_A;
        unsigned char *row = st + (2 * kb + j / 2) * MW_INSTR_BYTES + side +
                             g8 * WG_CORE_ROW_BYTES + (j % 2) * WG_CORE_K_BYTES + r * 16;
        wg_stmatrix_x4(row, v[i].x, v[i].y, v[i].z, v[i].w);
    }
}

/* instruction i of the chunk at st (the 32-k block i / 2's first or second) into acc */
static __device__ __forceinline__ void mw_instr(float (&acc)[64], const unsigned char *st, int i,
                                                int wg) {
    const unsigned char *t = st + i * MW_INSTR_BYTES;
    wg_m64n128k16(acc, wg_desc(t), wg_desc(t + MW_A_BYTES + wg * (128 / 8) * WG_CORE_ROW_BYTES));
}

/* UP: gate|up of x's rows into h (GeGLU); else h's rows through down into ys. Grid: (output
 * blocks, expert slots), as the staged kernels'. */
template <bool UP>
__global__ static void __launch_bounds__(MW_THREADS)
    moe_wgmma_kernel(k_moe_experts_args a, const int32_t *list, const int32_t *active,
                     const int32_t *n_active, bf16_t *h, float *ys) {
    K_GRID_DEPENDENCY();
    if ((int)blockIdx.y >= *n_active) return;
    const moe_bucket b = moe_bucket_at(active, (int)blockIdx.y);
    const int n = b.n;
    const int dm = a.d_model, de = a.d_expert;
    const int n_out = UP ? de : dm, k = UP ? dm : de; /* k % 32 == 0 (the tensor-core path) */
    const int ob = blockIdx.x * mw_block_outs<UP>();
    if (ob >= n_out) return; /* block-uniform */
    const bf16_t *wbase = moe_bucket_weights<UP>(a, b.expert);
    extern __shared__ __align__(128) unsigned char mw_smem[];
    __shared__ const bf16_t *s_row[MW_BM]; /* the tile's input rows; NULL: padding */
    __shared__ int s_item[MW_BM];          /* their item ids; -1: padding */
    const int tid = threadIdx.x, wg = tid / 128, wv = tid % 128 / 32, lane = tid % 32;
    const int g = lane >> 2, q = lane & 3;
    const int nkb = k / 32, n_chunks = (nkb + MW_KB - 1) / MW_KB;

    for (int r0 = 0; r0 < n; r0 += MW_BM) {
        if (r0 > 0) __syncthreads(); /* the last tile's s_row, s_item and epilogue reads */
        moe_bucket_rows<UP, MW_BM, MW_THREADS>(a, list, b, r0, h, s_row, s_item);
        __syncthreads();
        float acc[64];
#pragma unroll
        for (int i = 0; i < 64; i++)
            acc[i] = 0.0f;
        uint4 v[MW_PER_WARP];
        mw_load<UP>(v, 0, s_row, wbase, k, ob, de, dm);
        mw_store(v, mw_smem);
        if (n_chunks > 1) mw_load<UP>(v, 1, s_row, wbase, k, ob, de, dm);
        wg_fence_proxy_async();
        __syncthreads();
        for (int c = 0; c < n_chunks; c++) {
            const unsigned char *st = mw_smem + (c % 3) * MW_STAGE;
            wg_fence();
            /* a chunk's wgmmas without a branch or a loop between them: a branch made ptxas wait
             * for each block's before the next, and a loop's register copies serialized them
             * all; the last chunk may hold one block (MW_KB = 2) */
            static_assert(MW_KB == 2, "the chunk's two forms below");
            if (c * MW_KB + 1 < nkb) {
                mw_instr(acc, st, 0, wg);
                mw_instr(acc, st, 1, wg);
                mw_instr(acc, st, 2, wg);
                mw_instr(acc, st, 3, wg);
            } else {
                mw_instr(acc, st, 0, wg);
                mw_instr(acc, st, 1, wg);
            }
            wg_commit();
            /* the next stage's readers (chunk c - 2) finished before the barrier ending c - 1 */
            if (c + 1 < n_chunks) mw_store(v, mw_smem + ((c + 1) % 3) * MW_STAGE);
            if (c + 2 < n_chunks) mw_load<UP>(v, c + 2, s_row, wbase, k, ob, de, dm);
            wg_wait<1>(); /* chunk c - 1's products are done; c's may run on */
            wg_fence_proxy_async();
            __syncthreads();
        }
        wg_wait<0>();
        /* fragment: rows 16 wv + g (d[4jj], d[4jj + 1]: columns 8 jj + 2q and + 1) and + 8 */
        const int ilo = s_item[16 * wv + g], ihi = s_item[16 * wv + g + 8];
        if constexpr (UP) {
#pragma unroll
            for (int i = 0; i < 32; i++) { /* gate's columns 0..63; up's are 64 further */
                const int item = i % 4 < 2 ? ilo : ihi;
                const int o = ob + MW_UP_OUTS * wg + 8 * (i / 4) + 2 * q + (i & 1);
                if (item >= 0 && o < de)
                    h[(size_t)item * (size_t)de + (size_t)o] =
                        k_f32_to_bf16(k_round_bf16(k_gelu_tanh(k_round_bf16(acc[i]))) *
                                      k_round_bf16(acc[32 + i]));
            }
        } else {
#pragma unroll
            for (int i = 0; i < 64; i++) {
                const int item = i % 4 < 2 ? ilo : ihi;
                const int o = ob + 128 * wg + 8 * (i / 4) + 2 * q + (i & 1);
                if (item >= 0 && o < dm)
                    ys[(size_t)item * (size_t)dm + (size_t)o] = k_round_bf16(acc[i]);
            }
        }
    }
}

int moe_wgmma_allow(void) {
    CUDA_CHECK(cudaFuncSetAttribute(moe_wgmma_kernel<true>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, MW_SMEM));
    CUDA_CHECK(cudaFuncSetAttribute(moe_wgmma_kernel<false>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, MW_SMEM));
    return K_OK;
}

int moe_wgmma_launch(const k_moe_experts_args *a, const int32_t *list, const int32_t *active,
                     const int32_t *n_active, bf16_t *h, float *ys, unsigned slots, g4_stream st) {
    const dim3 up((unsigned)((a->d_expert + mw_block_outs<true>() - 1) / mw_block_outs<true>()),
                  slots);
    CUDA_CHECK(k_launch(moe_wgmma_kernel<true>, up, MW_THREADS, (size_t)MW_SMEM, (cudaStream_t)st,
                        *a, list, active, n_active, h, (float *)NULL));
    CUDA_CHECK(cudaGetLastError());
    const dim3 down((unsigned)((a->d_model + mw_block_outs<false>() - 1) / mw_block_outs<false>()),
                    slots);
    CUDA_CHECK(k_launch(moe_wgmma_kernel<false>, down, MW_THREADS, (size_t)MW_SMEM,
                        (cudaStream_t)st, *a, list, active, n_active, h, ys));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

K_TRACE_UNIT(moe_wgmma) /* the kernel trace build's binder (common.cuh) */
