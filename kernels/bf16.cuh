/* kernels/bf16.cuh - the number formats on the device, each bit for bit its CPU twin in
 * kernels/ref/bf16_ref.c (same names, k_ for ref_): bf16 <-> fp32 with round to nearest even
 * and NaN kept quiet, fp32 rounded through bf16, e4m3 at scale 1.0 saturating at +-448, and
 * gelu_pytorch_tanh in the twin's evaluation order. Every kernels/<family>.cu takes these from
 * here, so a rounding rule lives in one place on each side. */
#ifndef G4_BF16_CUH
#define G4_BF16_CUH

#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>

static __device__ __forceinline__ float k_bf16_to_f32(uint16_t v) {
    return __uint_as_float((uint32_t)v << 16);
}

/* Round to nearest even on the bit pattern (exact for every finite value and overflow to
 * infinity); a NaN keeps its sign and payload with the quiet bit set, as the twin does. */
static __device__ __forceinline__ uint16_t k_f32_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* fp32 rounded through bf16: the twins' BF(x). */
static __device__ __forceinline__ float k_round_bf16(float f) {
    return k_bf16_to_f32(k_f32_to_bf16(f));
}

/* e4m3 of f: round to nearest even, saturating at +-448 (infinities too), NaN to 0x7f with
 * f's sign. */
static __device__ __forceinline__ uint8_t k_f32_to_e4m3(float f) {
    uint8_t sign = (__float_as_uint(f) >> 24) & 0x80u;
    if (isnan(f)) return (uint8_t)(sign | 0x7fu);
    return (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
}

/* gelu_pytorch_tanh in ref_gelu_tanh's order (C's left to right, each step rounded: no
 * multiply-add contraction). */
static __device__ __forceinline__ float k_gelu_tanh(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    float u = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x);
    u = __fmul_rn(k, __fadd_rn(x, u));
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(u)));
}

#endif
