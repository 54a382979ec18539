/* kernels/cp_async.cuh - cp.async copies into shared memory, for the kernels that stage tiles
 * (attention's window and tensor-core passes, the experts' staged prefill kernels): 16 bytes a
 * copy, grouped, waited on by group. */
#ifndef G4_CP_ASYNC_CUH
#define G4_CP_ASYNC_CUH

static __device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
static __device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
static __device__ __forceinline__ void cp_async_wait_one() { /* all but the newest group */
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}
template <int N> static __device__ __forceinline__ void cp_async_wait_all_but() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif
