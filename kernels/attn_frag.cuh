/* kernels/attn_frag.cuh - the tensor-core attention's operand helpers: ldmatrix loads of
 * shared-memory rows, the m16n8k16 bf16 mma with a fragment, bf16 weights packed as an A
 * operand, and e4m3 rows widened to bf16 exactly. Shared by the split-KV passes
 * (kernels/attn_mma.cuh) and the prompt rows' pass (kernels/attn_prompt.cu); every function is
 * inlined, so a kernel's code is the same whichever file includes it. */
#ifndef G4_ATTN_FRAG_CUH
#define G4_ATTN_FRAG_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

static __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
static __device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(s));
}
static __device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

static __device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two weights that are bf16 values already (p, or 0) as the A operand's pair: the lower k in
 * the low half. Exact: the top 16 bits of such a float are the value. */
static __device__ __forceinline__ uint32_t pack_bf16_exact(float lo, float hi) {
    return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}

/* Eight e4m3 values to eight bf16 (16 bytes), exactly: e4m3 -> f16 is exact, f16 -> f32 too, and
 * every such value is a bf16 value. */
static __device__ __forceinline__ uint4 widen_e4m3x8(uint2 w) {
    uint32_t in[2] = {w.x, w.y}, out[4];
#pragma unroll
    for (int k = 0; k < 2; k++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            __half2_raw c = __nv_cvt_fp8x2_to_halfraw2(
                (__nv_fp8x2_storage_t)((in[k] >> (16 * h)) & 0xffffu), __NV_E4M3);
            const float2 f = __half22float2(*reinterpret_cast<__half2 *>(&c));
            out[2 * k + h] = pack_bf16_exact(f.x, f.y);
        }
    return make_uint4(out[0], out[1], out[2], out[3]);
}

/* Two e4m3 values (the lower address in the low byte) as a bf16 pair, exactly as widen_e4m3x8
 * gives them: for keys, the register an ldmatrix of the widened rows would have loaded. */
static __device__ __forceinline__ uint32_t widen_e4m3x2(uint32_t w) {
    __half2_raw c = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
    const float2 f = __half22float2(*reinterpret_cast<__half2 *>(&c));
    return pack_bf16_exact(f.x, f.y);
}

/* The P.V pass's B operands straight from e4m3 rows (FRAG8). An ldmatrix.trans of 8 keys x 16
 * bytes gives a lane, per 16-bit element, two adjacent dims (2 g0, 2 g0 + 1) of keys 2 qd and
 * 2 qd + 1: the even dim's pair of keys is bytes 0 and 2, the odd dim's bytes 1 and 3. So one
 * load feeds two n tiles, the even and the odd dims of 16; each dim's column of the mma gets
 * the same keys in the same k slots, hence the same products and sums, as from widened rows. */
static __device__ __forceinline__ uint32_t frag8_even(uint32_t m) {
    return widen_e4m3x2(__byte_perm(m, 0u, 0x4420));
}
static __device__ __forceinline__ uint32_t frag8_odd(uint32_t m) {
    return widen_e4m3x2(__byte_perm(m, 0u, 0x4431));
}

#endif
