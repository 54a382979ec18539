/* kernels/ref/bf16_ref.h - the scalar conversions of the CPU reference (kernels/ref/bf16_ref.c),
 * apart from the ops, for code outside the CPU backend that reads a checkpoint value (a
 * layer's scalar) the way the reference rounds it.
 *
 * Owns: bf16 <-> fp32, e4m3 <-> fp32 and GELU on one value. Does not own: any op. */
#ifndef G4_BF16_REF_H
#define G4_BF16_REF_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* bf16 <-> fp32 with round-to-nearest-even, NaN kept quiet (torch's conversion). */
float ref_bf16_to_f32(bf16_t v);
bf16_t ref_f32_to_bf16(float f);
/* fp32 rounded through bf16: bf(x). */
float ref_round_bf16(float f);
/* e4m3 (OCP fp8 "E4M3FN": bias 7, no infinities, 0x7f NaN, largest finite 448) at scale
 * 1.0: round to nearest even, saturating to +-448 as __nv_cvt_float_to_fp8(x, __NV_SATFINITE,
 * __NV_E4M3) does. Every e4m3 value is exact in bf16 and fp32. */
uint8_t ref_f32_to_e4m3(float f);
float ref_e4m3_to_f32(uint8_t v);
/* gelu_pytorch_tanh in fp32. */
float ref_gelu_tanh(float x);

#ifdef __cplusplus
}
#endif

#endif
