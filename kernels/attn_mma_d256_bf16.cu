/* kernels/attn_mma_d256_bf16.cu - a part of kernels/attn_mma.cuh's tensor-core passes:
 * at head dim 256, bf16 pool, without kept scores. */
#include "kernels/attn_mma.cuh"

ATTN_MMA_PART(d256_bf16, 256, false, false)
