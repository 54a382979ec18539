/* kernels/wgmma.cuh - Hopper's warpgroup matrix multiply (wgmma) from shared memory: the
 * instruction and descriptors of the probe that measured it (tests/gpu/probe_tc_order.cu). The
 * prefill projections' and experts' kernels that ran on it held the tile form's bits but
 * measured slower and were taken out (docs/perf-notes.md, thirtieth session). Needs sm_90a.
 *
 * Operands are K-major without swizzle: a matrix of R rows x 16 k is 8 x 16-byte core matrices
 * (8 rows, 8 k each, 128 contiguous bytes), the two k cores of a row group 128 bytes apart and
 * the row groups 256 bytes apart (core_off). The probe found this convention of the descriptor's
 * two offsets the one that holds to a CPU sum on the H200 (docs/perf-notes.md, the twenty-ninth
 * session), and that an m64n64k16 chain from such tiles gives the bits of mma.sync m16n8k16's
 * chain over the same 16 k an instruction, in the natural sets and in mma_tiles' sets. */
#ifndef G4_WGMMA_CUH
#define G4_WGMMA_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#define WG_CORE_K_BYTES 128   /* between the two k cores of a row group */
#define WG_CORE_ROW_BYTES 256 /* between row groups of 8 */

/* byte offset of (row r, slot s) in an R x 16 operand tile of one instruction */
static __host__ __device__ __forceinline__ int wg_core_off(int r, int s) {
    return (r / 8) * WG_CORE_ROW_BYTES + (s / 8) * WG_CORE_K_BYTES + (r % 8) * 16 + (s % 8) * 2;
}

/* the shared-memory matrix descriptor of a tile laid out as wg_core_off says: start address,
 * leading byte offset (k cores), stride byte offset (row groups), no swizzle */
static __device__ __forceinline__ uint64_t wg_desc(const void *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a >> 4) & 0x3fff) | ((uint64_t)((WG_CORE_K_BYTES >> 4) & 0x3fff) << 16) |
           ((uint64_t)((WG_CORE_ROW_BYTES >> 4) & 0x3fff) << 32);
}

static __device__ __forceinline__ void wg_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> static __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* stores made by threads (generic proxy) become visible to wgmma's reads (async proxy): each
 * writer fences, then the block meets at a barrier */
static __device__ __forceinline__ void wg_fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* d (64 x 128, fp32, the warpgroup's accumulator fragment) += A (64 x 16) B (128 x 16)^T, both
 * from shared memory. Fragment: warp v of the warpgroup holds rows 16v + g (d[4j], d[4j + 1]:
 * columns 8j + 2q and + 1) and 16v + g + 8 (d[4j + 2], d[4j + 3]). */
static __device__ __forceinline__ void wg_m64n128k16(float (&d)[64], uint64_t da, uint64_t db) {
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%"
                 "22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%"
                 "42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%"
                 "62,%63}, %64, %65, p, 1, 1, 0, 0;\n\t}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
                   "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
                   "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db));
}

#endif
