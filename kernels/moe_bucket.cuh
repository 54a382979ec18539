/* kernels/moe_bucket.cuh - an expert's bucket of items as the prefill experts' staged kernels
 * (kernels/moe.cu) read it: which expert a grid row serves, that expert's weights, and one tile's
 * input rows. */
#ifndef G4_MOE_BUCKET_CUH
#define G4_MOE_BUCKET_CUH

#include "kernels/kernels.h"

/* active holds a triple a slot: the expert, its first item in list, its item count */
typedef struct moe_bucket {
    int expert, first, n;
} moe_bucket;

static __device__ __forceinline__ moe_bucket moe_bucket_at(const int32_t *active, int slot) {
    moe_bucket b;
    b.expert = active[3 * slot];
    b.first = active[3 * slot + 1];
    b.n = active[3 * slot + 2];
    return b;
}

/* UP: the expert's gate rows, then its up rows ([2 d_expert, d_model]); else its down
 * ([d_model, d_expert]) */
template <bool UP>
static __device__ __forceinline__ const bf16_t *moe_bucket_weights(const k_moe_experts_args &a,
                                                                   int expert) {
    return UP ? a.gate_up + (size_t)expert * 2 * (size_t)a.d_expert * (size_t)a.d_model
              : a.down + (size_t)expert * (size_t)a.d_model * (size_t)a.d_expert;
}

/* The BM items of b from its r0-th on: each one's input row (UP: the token's row of x; else
 * its row of h) and its id, NULL and -1 past the bucket's end. The block's threads share the
 * work; the caller puts a barrier between this and the rows' readers. */
template <bool UP, int BM, int THREADS>
static __device__ __forceinline__ void
moe_bucket_rows(const k_moe_experts_args &a, const int32_t *list, moe_bucket b, int r0,
                const bf16_t *h, const bf16_t **s_row, int *s_item) {
    for (int j = (int)threadIdx.x; j < BM; j += THREADS) {
        const int item = r0 + j < b.n ? list[b.first + r0 + j] : -1;
        s_item[j] = item;
        s_row[j] = item < 0 ? NULL
                   : UP     ? a.x + (size_t)(item / a.top_k) * (size_t)a.d_model
                            : h + (size_t)item * (size_t)a.d_expert;
    }
}

#endif
