/* kernels/mbarrier.cuh - shared-memory mbarriers (sm_80 and later), for kernels whose warps hand
 * stages to each other without a block barrier: a phase completes when its count of arrivals has
 * come (and, for the bulk copies, their bytes), and a waiter names the phase by its parity. */
#ifndef G4_MBARRIER_CUH
#define G4_MBARRIER_CUH

#include <stdint.h>

static __device__ __forceinline__ unsigned mbar_addr(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

/* A phase completes after count arrivals; made visible to the block by a barrier after it. */
static __device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(mbar_addr(bar)), "r"(count)
                 : "memory");
}

/* One arrival, releasing this thread's earlier reads and writes to whoever sees the phase end. */
static __device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(mbar_addr(bar)) : "memory");
}

/* Spin until the phase of the given parity (0 for the first, 1 for the second, ...) completes;
 * what its arrivals released is then visible to this thread. */
static __device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity) {
    const unsigned b = mbar_addr(bar);
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

#endif
