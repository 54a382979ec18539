/* kernels/cp_async.cuh - cp.async copies into shared memory, for the kernels that stage tiles
 * (attention's window and tensor-core passes, the experts' staged prefill kernels): 16 bytes a
 * copy, grouped, waited on by group. */
#ifndef G4_CP_ASYNC_CUH
#define G4_CP_ASYNC_CUH

static __device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
/* As cp_async16, but where ok is false no byte is read and the 16 bytes land as zeros (the copy's
 * source size 0): padding without a branch. src must still be a global address. */
static __device__ __forceinline__ void cp_async16_or_zero(void *dst, const void *src, bool ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(ok ? 16 : 0)
                 : "memory");
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
