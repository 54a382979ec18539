/* kernels/attn_mma_d256_bf16_keep.cu - a part of kernels/attn_mma.cuh's tensor-core passes:
 * at head dim 256, bf16 pool, windowed layers keeping their scores. */
#include "kernels/attn_mma.cuh"

ATTN_MMA_PART(d256_bf16_keep, 256, false, true)
