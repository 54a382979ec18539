/* kernels/ref/ref.h - the CPU reference of every op: plain C11 fp32 loops that round to bf16
 * exactly where Hugging Face rounds (docs/gemma4-numerics.md section 2).
 *
 * Each ref_<op> takes the argument struct of its GPU twin k_<op> (kernels/kernels.h) and a
 * stream it ignores, and returns 0 or a negative K_ERR_* code. This is the executable spec the
 * GPU kernels are tested against, and the CPU backend that runs the generated schedule. */
#ifndef G4_REF_H
#define G4_REF_H

#include "kernels/kernels.h"
#include "kernels/ref/bf16_ref.h"

#ifdef __cplusplus
extern "C" {
#endif

int ref_embed(const k_embed_args *a, g4_stream st);
int ref_rmsnorm(const k_rmsnorm_args *a, g4_stream st);
int ref_gemm(const k_gemm_args *a, g4_stream st);
int ref_attn_prep(const k_attn_prep_args *a, g4_stream st);
int ref_attention(const k_attention_args *a, g4_stream st);
int ref_gelu_mul(const k_gelu_mul_args *a, g4_stream st);
int ref_scale_add(const k_scale_add_args *a, g4_stream st);
int ref_mul_vec_scale(const k_mul_vec_scale_args *a, g4_stream st);
int ref_moe_route(const k_moe_route_args *a, g4_stream st);
int ref_moe_experts(const k_moe_experts_args *a, g4_stream st);
int ref_gather_rows(const k_gather_rows_args *a, g4_stream st);
int ref_softcap(const k_softcap_args *a, g4_stream st);
int ref_row_ops(const k_row_ops_args *a, g4_stream st);
int ref_gemm_group(const k_gemm_group_args *a, g4_stream st);
/* serve.moe_branches' stream order: the CPU runs every op in turn, so nothing to do */
int ref_stream_fork(g4_stream from, g4_stream to);
int ref_stream_join(g4_stream main, g4_stream side);
int ref_fill_uniform(const k_fill_args *a, g4_stream st);
int ref_argmax(const k_argmax_args *a, g4_stream st);
int ref_topk(const k_topk_args *a, g4_stream st);

/* The counter hash both fills use: a uniform float in [0, 1) from 24 bits of a splitmix64
 * mix of (seed, i). Exposed so the GPU twin's test can check single values. */
float ref_fill_u(uint64_t seed, uint64_t i);

#ifdef __cplusplus
}
#endif

#endif
