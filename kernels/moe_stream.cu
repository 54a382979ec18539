/* kernels/moe_stream.cu - the routed experts' down projection at decode sizes
 * (serve.expert_stream), its weights streamed into shared memory by bulk copies, the first of
 * them before the kernel waits for the up kernel.
 *
 * At one 26B-A4B row the experts' up and down kernels take ~31 and ~17-19 us a layer on the H100
 * (ncu, thirty-eighth session) for 63 and 32 MB: ~62% and ~55% of DRAM throughput, with the same
 * figures whether a warp keeps 16 KB in flight (moe.cu's register groups) or ~35 KB (a ring of
 * bulk copies; that up kernel measured no faster and was taken out): what a launch of 15-30 us
 * loses is its start and its end, not its depth (docs/decode-design.md, "Experts streamed through
 * bulk copies"). The down kernel's weights depend only on which expert a grid row serves, and
 * that follows from the router's ids, written two kernels back. So here each block buckets the
 * items itself from those ids (bucket_in_block, the up kernel's own form), and copies its first
 * stages of weights into the ring before griddepcontrol.wait: under programmatic dependent launch
 * the block is resident while the up kernel still runs, and its weights arrive during the up
 * kernel's end instead of after it. After the wait it reads h and runs the mmas.
 *
 * A block is one warp owning 4 tiles of 8 outputs; each lane owns a weight row and copies its
 * piece of each stage with one bulk copy, completed on the stage's mbarrier. The warp reads each
 * 32-k block's 16 bytes a lane from the stage where moe.cu's kernel loads them from global memory
 * and runs the same two mmas on them in the same order (mma.cuh's k order: 32-k blocks
 * ascending, two mmas each, the lane's 16 bytes at 8q), so every output has that kernel's bits,
 * which test_moe's `expert_stream` gates compare byte for byte. */
#include "kernels/common.cuh"
#include "kernels/bf16.cuh"
#include "kernels/bulk_copy.cuh"
#include "kernels/moe_bucket.cuh"
#include "kernels/moe_stream.h"
#include "kernels/mma.cuh"

/* k a stage: 7 32-k blocks (the 26B-A4B's 704 in 4 stages, 3 of 224 and one of 32). A row's
 * piece sits at a pitch of 448 bytes, 28 16-byte units, 4 mod 8: the 8 lanes of a quarter warp
 * (rows g and g + 1, q = 0..3) read 8 distinct 16-byte bank groups. */
#define STREAM_KC 224
#define STREAM_BLOCKS (STREAM_KC / 32)
#define STREAM_PITCH (2 * STREAM_KC)
static_assert((STREAM_PITCH / 16) % 8 == 4, "a quarter warp's reads would share banks");
/* 4 tiles of 8 outputs a warp, 2 stages: 28 KB of ring and 1 KB of buckets, so one 26B-A4B row's
 * 704 blocks fit beside the up kernel's (7 an SM by shared memory, 5 by registers beside its
 * blocks), each with 28 KB of its 44 in flight before the wait. */
#define STREAM_ROWS 32
#define STREAM_STAGES 2

struct stream_ring {
    alignas(128) unsigned char buf[STREAM_STAGES][STREAM_ROWS * STREAM_PITCH];
    uint64_t bar[STREAM_STAGES];
};

/* Lane r < STREAM_ROWS copies row r (wrow; NULL: past the outputs, a zero operand) of stage s
 * (k from s * STREAM_KC) into slot s % STREAM_STAGES, valid rows in the warp. The lanes meet
 * first, so that every read of the slot's last stage is done before the copy unit writes it. */
static __device__ __forceinline__ void stream_issue(stream_ring &ring, const bf16_t *wrow,
                                                    unsigned valid, int k, int s) {
    const int lane = threadIdx.x & 31;
    const unsigned slot = (unsigned)s % STREAM_STAGES;
    const int k0 = s * STREAM_KC, kc = min(STREAM_KC, k - k0);
    __syncwarp();
    if (wrow) bulk_fence_reads();
    if (lane == 0) bulk_bar_expect(&ring.bar[slot], valid * (unsigned)kc * 2u);
    __syncwarp(); /* the expectation before any copy completes */
    if (wrow)
        bulk_copy(ring.buf[slot] + lane * STREAM_PITCH, wrow + k0, (unsigned)kc * 2u,
                  &ring.bar[slot]);
}

/* acc[t] = the tile's item rows (lo: the lane's, g; hi: g + 8; NULL: padding; HI false: every
 * lane's hi is NULL) . weight row 8 t + g over k, for the 4 tiles whose rows come through the
 * ring, stage s in slot s % STREAM_STAGES. Stages 0 .. STREAM_STAGES - 1 are issued by the caller
 * (stream_prefill) before the call; every stage a tile issues, it reads, so a slot has completed
 * its uses a tile times `tiles` (the item tiles before this one) phases before this tile's.
 * Each tile gets mma_rows' instruction sequence and operands (mma_rows_lo's where HI is false:
 * hi's zero), so the same bits. */
template <bool HI>
static __device__ __forceinline__ void
stream_tile(stream_ring &ring, const bf16_t *wrow, unsigned valid, int k, const bf16_t *lo,
            const bf16_t *hi, float (&acc)[STREAM_ROWS / 8][4], unsigned tiles) {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const int n_stages = (k + STREAM_KC - 1) / STREAM_KC;
#pragma unroll
    for (int t = 0; t < STREAM_ROWS / 8; t++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[t][j] = 0.0f;
    for (int s = 0; s < n_stages; s++) {
        const unsigned slot = (unsigned)s % STREAM_STAGES,
                       uses = (unsigned)(n_stages - (int)slot + STREAM_STAGES - 1) / STREAM_STAGES,
                       parity = (tiles * uses + (unsigned)s / STREAM_STAGES) & 1u;
        const int k0 = s * STREAM_KC, kc = min(STREAM_KC, k - k0);
        uint4 a[STREAM_BLOCKS], a8[STREAM_BLOCKS];
#pragma unroll
        for (int u = 0; u < STREAM_BLOCKS; u++) { /* the rows' loads before the stage's wait */
            const bool in = 32 * u < kc;          /* warp-uniform */
            const int o = k0 + 32 * u + 8 * q;
            a[u] = in && lo ? __ldg((const uint4 *)(lo + o)) : zero;
            a8[u] = HI && in && hi ? __ldg((const uint4 *)(hi + o)) : zero;
        }
        bulk_bar_wait(&ring.bar[slot], parity);
        const unsigned char *stage = ring.buf[slot];
#pragma unroll
        for (int u = 0; u < STREAM_BLOCKS; u++) {
            if (32 * u >= kc) break; /* warp-uniform */
#pragma unroll
            for (int t = 0; t < STREAM_ROWS / 8; t++) {
                const uint4 b =
                    *(const uint4 *)(stage + (8 * t + g) * STREAM_PITCH + (32 * u + 8 * q) * 2);
                if constexpr (HI) {
                    mma_16816(acc[t], a[u].x, a8[u].x, a[u].y, a8[u].y, b.x, b.y);
                    mma_16816(acc[t], a[u].z, a8[u].z, a[u].w, a8[u].w, b.z, b.w);
                } else {
                    mma_16816(acc[t], a[u].x, 0u, a[u].y, 0u, b.x, b.y);
                    mma_16816(acc[t], a[u].z, 0u, a[u].w, 0u, b.z, b.w);
                }
            }
        }
        if (s + STREAM_STAGES < n_stages) stream_issue(ring, wrow, valid, k, s + STREAM_STAGES);
    }
}

/* The first STREAM_STAGES stages of a tile's k loop. */
static __device__ __forceinline__ void stream_prefill(stream_ring &ring, const bf16_t *wrow,
                                                      unsigned valid, int k) {
    const int n_stages = (k + STREAM_KC - 1) / STREAM_KC;
    for (int s = 0; s < STREAM_STAGES && s < n_stages; s++)
        stream_issue(ring, wrow, valid, k, s);
}

/* As moe.cu's moe_down_mma_kernel, one warp a block: block x owns d_model's outputs
 * [32 x, 32 x + 32), four tiles of 8, for the expert of grid row y, which the block finds from
 * the router's ids itself (bucket_in_block: the buckets of moe_bucket_kernel and of the up
 * kernel's own; an item's place in its bucket moves none of its bits) before it waits for the up
 * kernel, and whose first stages of weights it copies then too. The ids were written by
 * k_moe_route's kernel, which had ended before the up kernel passed its own wait and so before this
 * grid could be launched (common.cuh); the weights are model constants. h, which the up kernel
 * writes, is read after the wait. Every block waits, those with nothing to do too, so that no grid
 * ends before the one before it. */
__global__ static void __launch_bounds__(32)
    moe_down_stream_kernel(k_moe_experts_args a, const bf16_t *h, float *ys) {
    __shared__ stream_ring ring;
    __shared__ moe_inblock_smem bk;
    bucket_in_block<true>(a.idx, a.rows * a.top_k, a.n_expert, (int)blockIdx.y, bk.idx, bk.mask,
                          bk.list, bk.info);
    const int e = bk.info[0], n = bk.info[2];
    const int dm = a.d_model, de = a.d_expert, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3,
              t0 = (int)blockIdx.x * STREAM_ROWS;
    const bool work = e >= 0 && t0 < dm; /* block-uniform */
    const bf16_t *wrow = NULL;
    unsigned valid = 0;
    if (work) {
        const bf16_t *wd = moe_bucket_weights<false>(a, e);
        wrow = t0 + lane < dm ? wd + (size_t)(t0 + lane) * (size_t)de : NULL;
        valid = (unsigned)__popc(__ballot_sync(FULL_MASK, wrow != NULL));
        if (lane == 0) {
#pragma unroll
            for (int s = 0; s < STREAM_STAGES; s++)
                bulk_bar_init(&ring.bar[s]);
            bulk_bar_init_fence();
        }
        __syncwarp();
        stream_prefill(ring, wrow, valid, de);
    }
    K_GRID_DEPENDENCY();
    if (!work) return;
    for (int r0 = 0; r0 < n; r0 += 16) {
        if (r0 > 0) stream_prefill(ring, wrow, valid, de); /* the ring is empty between tiles */
        const int rlo = r0 + g, rhi = r0 + g + 8;
        const int ilo = rlo < n ? bk.list[rlo] : -1, ihi = rhi < n ? bk.list[rhi] : -1;
        const bf16_t *lo = ilo >= 0 ? h + (size_t)ilo * (size_t)de : NULL;
        const bf16_t *hi = ihi >= 0 ? h + (size_t)ihi * (size_t)de : NULL;
        float acc[STREAM_ROWS / 8][4];
        if (n - r0 <= 8) /* warp-uniform: every hi is NULL */
            stream_tile<false>(ring, wrow, valid, de, lo, NULL, acc, (unsigned)(r0 / 16));
        else
            stream_tile<true>(ring, wrow, valid, de, lo, hi, acc, (unsigned)(r0 / 16));
#pragma unroll
        for (int t = 0; t < STREAM_ROWS / 8; t++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int item = j < 2 ? ilo : ihi, o = t0 + 8 * t + 2 * q + (j & 1);
                if (item >= 0 && o < dm)
                    ys[(size_t)item * (size_t)dm + (size_t)o] = k_round_bf16(acc[t][j]);
            }
    }
}

/* The most shared memory an SM can give: the kernel's blocks an SM are counted on it. Once, at
 * start-up (k_moe_setup) or before the first launch. */
static int stream_allow(void) {
    static bool set = false;
    if (!set) {
        CUDA_CHECK(cudaFuncSetAttribute(moe_down_stream_kernel,
                                        cudaFuncAttributePreferredSharedMemoryCarveout,
                                        (int)cudaSharedmemCarveoutMaxShared));
        set = true;
    }
    return K_OK;
}

int k_moe_stream_setup(void) { return stream_allow(); }

int k_moe_stream_down(const k_moe_experts_args *a, const bf16_t *h, float *ys, unsigned slots,
                      cudaStream_t s) {
    /* bulk copies move multiples of 16 bytes from 16-byte addresses: rows of k % 32 == 0 from
     * 16-byte aligned bases (k_moe_experts checks both); bucket_in_block holds at most
     * INBLOCK_MAX_ITEMS items */
    if (a->d_model % 32 != 0 || a->d_expert % 32 != 0 ||
        (size_t)a->rows * (size_t)a->top_k > INBLOCK_MAX_ITEMS)
        return K_ERR_SHAPE;
    const int rc = stream_allow();
    if (rc != K_OK) return rc;
    const dim3 grid((unsigned)((a->d_model + STREAM_ROWS - 1) / STREAM_ROWS), slots);
    CUDA_CHECK(k_launch(moe_down_stream_kernel, grid, 32, 0, s, *a, h, ys));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

K_TRACE_UNIT(moe_stream) /* the kernel trace build's binder (common.cuh) */
