/* kernels/attn_mma_d256_e4m3_keep.cu - a part of kernels/attn_mma.cuh's tensor-core passes:
 * at head dim 256, e4m3 pool, windowed layers keeping their scores. */
#include "kernels/attn_mma.cuh"

ATTN_MMA_PART(d256_e4m3_keep, 256, true, true)
