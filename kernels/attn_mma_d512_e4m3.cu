/* kernels/attn_mma_d512_e4m3.cu - a part of kernels/attn_mma.cuh's tensor-core passes:
 * at head dim 512 (the global layers), e4m3 pool. */
#include "kernels/attn_mma.cuh"

ATTN_MMA_PART(d512_e4m3, 512, true, false)
