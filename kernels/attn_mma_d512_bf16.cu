/* kernels/attn_mma_d512_bf16.cu - a part of kernels/attn_mma.cuh's tensor-core passes:
 * at head dim 512 (the global layers), bf16 pool. */
#include "kernels/attn_mma.cuh"

ATTN_MMA_PART(d512_bf16, 512, false, false)
