/* kernels/attn_mma_d256_e4m3.cu - a part of kernels/attn_mma.cuh's tensor-core passes:
 * at head dim 256, e4m3 pool, without kept scores. */
#include "kernels/attn_mma.cuh"

ATTN_MMA_PART(d256_e4m3, 256, true, false)
