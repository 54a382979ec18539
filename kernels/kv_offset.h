/* kernels/kv_offset.h - where a token's K or V head vector sits in a family's backing store:
 * the one formula that the CUDA attention (attn.cu, attn_prep.cu, attn_window.cu), its CPU
 * reference (ref/attn_ref.c) and the page bookkeeping (runtime/engine/kv_pool.c) all use, so a
 * change of layout cannot reach one of them and not the others.
 *
 * Layout, page-major: [page][layer][kv (0 = K, 1 = V)][slot][head][dim], offsets in elements
 * (the same for bf16 and e4m3 stores; multiply by the element width for bytes). */
#ifndef G4_KV_OFFSET_H
#define G4_KV_OFFSET_H

#include "kernels/kernels.h"

#ifdef __CUDACC__
#define KV_OFFSET_FN static __host__ __device__ __forceinline__
#else
#define KV_OFFSET_FN static inline
#endif

/* Element 0 of head `head` of slot `slot` of (layer, which) in physical page `page`; head_dim
 * elements follow contiguously. Not range-checked (hot path). */
KV_OFFSET_FN long long kv_elem_offset(long long page, int n_layer, int page_tokens, int n_kv_head,
                                      int head_dim, int layer, int which, int slot, int head) {
    long long per_slot = (long long)n_kv_head * head_dim;
    long long per_kv = (long long)page_tokens * per_slot;
    long long per_page = (long long)n_layer * 2 * per_kv;
    return page * per_page + ((long long)layer * 2 + which) * per_kv + slot * per_slot +
           (long long)head * head_dim;
}

/* The same for token pos of sequence slot seq through the view's page table, or -1 when the
 * position is unmapped or outside the table's reach [0, max_pages * page_tokens). */
KV_OFFSET_FN long long kv_view_offset(const k_kv_view *kv, int seq, int pos, int layer, int which,
                                      int head) {
    if (pos < 0 || pos / kv->page_tokens >= kv->max_pages) return -1;
    int32_t page = kv->tables[(long long)seq * kv->max_pages + pos / kv->page_tokens];
    if (page < 0) return -1;
    return kv_elem_offset(page, kv->n_layer, kv->page_tokens, kv->n_kv_head, kv->head_dim, layer,
                          which, pos % kv->page_tokens, head);
}

/* The V vector beside the K vector at element offset k_off (kv_view_offset's which = 0 result)
 * of the same token, layer and head: V is the next plane of the page's layer (the layout above),
 * page_tokens x n_kv_head x head_dim elements on; -1 stays -1. Lets attention find V without a
 * second page-table read. */
KV_OFFSET_FN long long kv_v_of_k(const k_kv_view *kv, long long k_off) {
    return k_off < 0 ? -1 : k_off + (long long)kv->page_tokens * kv->n_kv_head * kv->head_dim;
}

#endif
