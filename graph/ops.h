/* graph/ops.h - the op vocabulary of the generated schedule, and its binding to a backend.
 *
 * The schedule is emitted once by codegen/gen.c and compiled once per backend: with
 * G4_BACKEND_PREFIX=ref_ every op_x(args, stream) becomes ref_x(args, stream), the CPU
 * reference (kernels/ref/); with k_ it becomes the GPU launcher k_x (kernels/<family>.cu).
 * Generated function names carry the same prefix through G4_FN, so both backends can live in
 * one binary. Each op's argument struct, with what it computes and where it rounds, is in
 * kernels/kernels.h:
 *
 *   op_embed          out = bf(table[id] * scale)                      embedding, PLE table
 *   op_rmsnorm        out = bf(residual + bf(x * rms^-0.5 * w))        every norm, fused add
 *   op_gemm           y = bf(x @ w^T), fp32 accumulation                 every projection
 *   op_attn_prep      q/k norm, v norm, RoPE, K/V into the paged family  one per family
 *   op_attention      softmax(q.K) V over the window or the context     scale 1.0, GQA
 *   op_gelu_mul       out = bf(bf(gelu_tanh(a)) * b)                     GeGLU, PLE gate
 *   op_scale_add      out = bf(bf(a + b) * scale)                        layer_scalar, PLE
 *   op_mul_vec_scale  out = bf(bf(a * v) * scale)                        router input scale
 *   op_moe_route      softmax, top-k, renormalise, per-expert scale      MoE router
 *   op_moe_experts    routed experts, weighted fp32 sum                  MoE experts
 *   op_gather_rows    the rows that need logits
 *   op_softcap        x = bf(bf(tanh(bf(x / c))) * c)                    final logits
 *   op_row_ops        consecutive rmsnorm/mul_vec_scale/scale_add ops    one kernel, same bits
 *   op_gemm_group     consecutive projections of one input (q|k|v, gate|up)  each as alone
 *   op_stream_fork    what `to` runs next waits for what `from` has run     serve.moe_branches
 *   op_stream_join    what `main` runs next waits for what `side` has run   (no-ops on the CPU) */
#ifndef G4_OPS_H
#define G4_OPS_H

#include "kernels/kernels.h"
#include "kernels/ref/ref.h"

#define G4_CAT2(a, b) a##b
#define G4_CAT(a, b) G4_CAT2(a, b)
#ifdef G4_BACKEND_PREFIX
/* A backend-specific name: G4_FN(x) is ref_x or k_x. */
#define G4_FN(name) G4_CAT(G4_BACKEND_PREFIX, name)

/* The op vocabulary. */
#define op_embed(a, st) G4_FN(embed)(a, st)
#define op_rmsnorm(a, st) G4_FN(rmsnorm)(a, st)
#define op_gemm(a, st) G4_FN(gemm)(a, st)
#define op_attn_prep(a, st) G4_FN(attn_prep)(a, st)
#define op_attention(a, st) G4_FN(attention)(a, st)
#define op_gelu_mul(a, st) G4_FN(gelu_mul)(a, st)
#define op_scale_add(a, st) G4_FN(scale_add)(a, st)
#define op_mul_vec_scale(a, st) G4_FN(mul_vec_scale)(a, st)
#define op_moe_route(a, st) G4_FN(moe_route)(a, st)
#define op_moe_experts(a, st) G4_FN(moe_experts)(a, st)
#define op_gather_rows(a, st) G4_FN(gather_rows)(a, st)
#define op_softcap(a, st) G4_FN(softcap)(a, st)
#define op_row_ops(a, st) G4_FN(row_ops)(a, st)
#define op_gemm_group(a, st) G4_FN(gemm_group)(a, st)
#define op_stream_fork(from, to) G4_FN(stream_fork)(from, to)
#define op_stream_join(main, side) G4_FN(stream_join)(main, side)
#endif

#endif
