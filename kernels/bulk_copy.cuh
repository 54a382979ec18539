/* kernels/bulk_copy.cuh - Hopper's bulk copies (cp.async.bulk, the TMA unit's one-dimensional
 * form) from global into shared memory, completed on an mbarrier by the bytes they carry. One
 * instruction moves a whole contiguous run (any multiple of 16 bytes), so a warp can keep tens of
 * KB in flight without holding them in registers or issuing a load a lane for every 16 bytes
 * (docs/decode-design.md, "Experts streamed through bulk copies"). Needs sm_90. */
#ifndef G4_BULK_COPY_CUH
#define G4_BULK_COPY_CUH

#include <stdint.h>

static __device__ __forceinline__ unsigned bulk_smem_addr(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

/* One arrival completes a phase (the issuing lane's expect below), once its bytes have landed. */
static __device__ __forceinline__ void bulk_bar_init(uint64_t *bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bulk_smem_addr(bar)) : "memory");
}

/* The inits visible to the copy unit before the first copy names the barrier. */
static __device__ __forceinline__ void bulk_bar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/* The phase's arrival, and the bytes its copies will bring (the phase completes when both have
 * happened, in either order). */
static __device__ __forceinline__ void bulk_bar_expect(uint64_t *bar, unsigned bytes) {
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bulk_smem_addr(bar)),
        "r"(bytes)
        : "memory");
}

/* Spin until the phase of the given parity (0 for the first, 1 for the second, ...) completes. */
static __device__ __forceinline__ void bulk_bar_wait(uint64_t *bar, unsigned parity) {
    const unsigned b = bulk_smem_addr(bar);
    unsigned done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(b), "r"(parity)
                     : "memory");
    } while (!done);
}

/* Reads of a buffer by ordinary loads ordered before the copy unit's next writes into it: the
 * lanes meet (__syncwarp or a barrier) first, then the issuing lane fences. */
static __device__ __forceinline__ void bulk_fence_reads() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* bytes (a multiple of 16; both addresses 16-byte aligned) from src into dst, counted on bar. */
static __device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes,
                                                 uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(bulk_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(bulk_smem_addr(bar))
                 : "memory");
}

#endif
