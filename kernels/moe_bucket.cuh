/* kernels/moe_bucket.cuh - an expert's bucket of items as the experts' kernels read it
 * (kernels/moe.cu, kernels/moe_stream.cu): which expert a grid row serves, found by the bucket
 * kernel's list or by the decode up kernels themselves, that expert's weights, and one tile's input
 * rows. */
#ifndef G4_MOE_BUCKET_CUH
#define G4_MOE_BUCKET_CUH

#include "kernels/kernels.h"

#define EXPERTS_MAX_EXPERT 1024 /* bucket counters live in shared memory */
/* the most items (rows x top_k) the up kernel buckets itself: 16 decode rows at top 8 */
#define INBLOCK_MAX_ITEMS 128
#define FULL_MASK 0xffffffffu

/* The bucket of expert slot `slot` (the slot-th active expert in ascending id) from idx alone,
 * by one block, into shared memory: s_list[0 .. n) its items in ascending item id, and s_info
 * = {e, first, n, n_active} with first the bucket's start in moe_bucket_kernel's list (the
 * valid items of lower experts) and e = -1 past the active experts. The same buckets and
 * active list as moe_bucket_kernel (its order inside a bucket, atomic timing there, is
 * ascending here), so every item's arithmetic is unchanged: a launch and a dependency fewer
 * per layer where items are few enough for one block to scan them all. Ids outside [0,
 * n_expert) are left out, as there. Every thread of the block calls it. L2_ONLY: the ids are
 * read past L1 (ld.global.cg), for a caller that reads them before its grid dependency, where no
 * wait has made this SM's L1 current (kernels/moe_stream.cu). */
template <bool L2_ONLY = false>
static __device__ void bucket_in_block(const int32_t *idx, int items, int n_expert, int slot,
                                       int32_t *s_idx, unsigned *s_mask, int32_t *s_list,
                                       int *s_info) {
    const int tid = threadIdx.x, lane = tid & 31, words = (n_expert + 31) / 32;
    for (int w = tid; w < words; w += blockDim.x)
        s_mask[w] = 0u;
    __syncthreads();
    for (int i = tid; i < items; i += blockDim.x) {
        const int e = L2_ONLY ? __ldcg(idx + i) : idx[i];
        s_idx[i] = e;
        if (e >= 0 && e < n_expert) atomicOr(&s_mask[e >> 5], 1u << (e & 31));
    }
    __syncthreads();
    if (tid < 32) {
        /* lane l holds experts 32 l .. 32 l + 31: the active ones before its word, then the
         * slot-th active expert where it falls in a lane's word */
        const unsigned m = lane < words ? s_mask[lane] : 0u;
        const int cnt = __popc(m);
        int inc = cnt;
        for (int off = 1; off < 32; off <<= 1) {
            const int v = __shfl_up_sync(FULL_MASK, inc, off);
            if (lane >= off) inc += v;
        }
        const int total = __shfl_sync(FULL_MASK, inc, 31), pre = inc - cnt;
        int e = -1;
        if (slot >= pre && slot < inc) {
            unsigned mm = m;
            for (int k = pre; k < slot; k++)
                mm &= mm - 1u; /* drop the lowest active expert of the word */
            e = lane * 32 + __ffs((int)mm) - 1;
        }
        const unsigned who = __ballot_sync(FULL_MASK, e >= 0);
        e = who ? __shfl_sync(FULL_MASK, e, __ffs((int)who) - 1) : -1;
        int n = 0, first = 0;
        for (int i0 = 0; e >= 0 && i0 < items; i0 += 32) { /* warp-uniform */
            const int i = i0 + lane, v = i < items ? s_idx[i] : -1;
            const unsigned hit = __ballot_sync(FULL_MASK, v == e);
            const unsigned below = __ballot_sync(FULL_MASK, v >= 0 && v < e);
            if (v == e) s_list[n + __popc(hit & ((1u << lane) - 1u))] = i;
            n += __popc(hit);
            first += __popc(below);
        }
        if (lane == 0) {
            s_info[0] = e;
            s_info[1] = first;
            s_info[2] = n;
            s_info[3] = total;
        }
    }
    __syncthreads();
}

/* bucket_in_block's shared memory */
typedef struct moe_inblock_smem {
    int32_t idx[INBLOCK_MAX_ITEMS], list[INBLOCK_MAX_ITEMS];
    unsigned mask[EXPERTS_MAX_EXPERT / 32];
    int info[4];
} moe_inblock_smem;

/* The bucket of grid row blockIdx.y of a decode up kernel that buckets its items itself: the
 * expert, its first item in moe_bucket_kernel's list and its count, the items in s.list (from
 * s.list[0]: *first is where the bucket would start in that list). The blocks of x = 0 write
 * their slot's bucket where moe_bucket_kernel would (block (0, 0) the active count too), for the
 * down kernel, which runs after this grid has ended. False past the active experts. */
static __device__ __forceinline__ bool moe_up_bucket_inblock(const k_moe_experts_args &a,
                                                             int32_t *list, int32_t *active,
                                                             int32_t *n_active, moe_inblock_smem &s,
                                                             int *e_out, int *first_out,
                                                             int *n_out) {
    const int slot = (int)blockIdx.y;
    bucket_in_block(a.idx, a.rows * a.top_k, a.n_expert, slot, s.idx, s.mask, s.list, s.info);
    const int e = s.info[0], first = s.info[1], n = s.info[2];
    if (blockIdx.x == 0) {
        if (slot == 0 && threadIdx.x == 0) *n_active = s.info[3];
        if (e >= 0) {
            if (threadIdx.x == 0) {
                active[3 * slot] = e;
                active[3 * slot + 1] = first;
                active[3 * slot + 2] = n;
            }
            for (int j = threadIdx.x; j < n; j += blockDim.x)
                list[first + j] = s.list[j];
        }
    }
    *e_out = e;
    *first_out = 0; /* s.list holds this bucket alone */
    *n_out = n;
    return e >= 0;
}

/* The same from moe_bucket_kernel's list and active triples. */
static __device__ __forceinline__ bool
moe_up_bucket_listed(const int32_t *active, const int32_t *n_active, int *e, int *first, int *n) {
    if ((int)blockIdx.y >= *n_active) return false;
    *e = active[3 * blockIdx.y];
    *first = active[3 * blockIdx.y + 1];
    *n = active[3 * blockIdx.y + 2];
    return true;
}

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
