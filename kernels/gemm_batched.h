/* kernels/gemm_batched.h - a batch of same-shape projections as one cuBLASLt call, for
 * kernels/moe.cu's prompt experts (docs/prompt-rows.md): product i is
 * y + i * stride_y = bf(x + i * stride_x @ (w + i * stride_w)^T), each [m, k] x [n, k] -> [m, n]
 * with rows k, k and n elements long, fp32 accumulation. The plan's algorithm is held to split-k
 * 1, so every output row's bits are those of one chain of 16-k steps whatever m is. Run a plan
 * with k_gemm (kernels/kernels.h): .m rows of every product, .ldy = 0 or n, .prompt_rows = 0. */
#ifndef G4_GEMM_BATCHED_H
#define G4_GEMM_BATCHED_H

#include "kernels/kernels.h"

/* A plan for batch products of up to max_m rows; NULL, said on stderr, where cuBLASLt has no
 * split-k-1 algorithm for the shape. Freed with k_gemm_plan_destroy. */
k_gemm_plan *k_gemm_batched_plan(int batch, int max_m, int n, int k, long long stride_w,
                                 long long stride_x, long long stride_y);

/* A plan for batches of products of exactly m rows, each product's w, x and y named by device
 * arrays of pointers (cuBLASLt's pointer-array batch mode): product i is
 * y[i] = bf(x[i] @ w[i]^T), [m, k] x [n, k] -> [m, n], rows k, k and n elements long. The
 * heuristic is asked at `batch` products; k_gemm_ptrs sets each call's count. Held to split-k 1
 * as above. NULL, said on stderr, where no such algorithm runs the shape. Freed with
 * k_gemm_plan_destroy; k_gemm refuses it. */
k_gemm_plan *k_gemm_ptrs_plan(int batch, int m, int n, int k);
/* Runs batch products of plan p; w, x, y: device arrays of batch pointers (16-byte aligned
 * operands). K_ERR_SHAPE for a plan of another kind. */
int k_gemm_ptrs(const k_gemm_plan *p, int batch, const void *w, const void *x, void *y,
                g4_stream st);

#endif
