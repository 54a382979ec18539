/* runtime/engine/kv_pool.h - paged KV-cache bookkeeping for the two families (local and global).
 *
 * Owns: the page arithmetic of one family (kv_layout: sizes and element offsets inside the
 * backing store), the free lists of physical pages, and one page table per sequence slot and
 * family (logical page = position / page_tokens -> physical page). Does not own: any KV data
 * (the backend allocates n_pages * kv_layout_page_bytes() per family and hands the tables to
 * the attention kernels), the choice of how many pages fit the memory budget, or which
 * request gets which sequence slot (sched).
 *
 * Shape: the local family (sliding-window layers) keeps only the pages that intersect the
 * window of a future query, so a sequence holds at most ceil((W-1+C)/page)+1 local pages while
 * prefilling a chunk of C tokens and ceil(W/page)+1 while decoding; the global family (full
 * layers) grows with the context. A chunk reserves in both families or in neither, so a
 * sequence never runs with half its KV. Physical page 0 of each family is the padding page:
 * never handed out, it absorbs the unused rows of a padded batch. Not thread-safe: the
 * scheduler thread owns the pool. */
#ifndef G4_KV_POOL_H
#define G4_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

/* ---- one family's page layout ---- */

/* A page holds page_tokens consecutive positions for every layer of the family, K and V.
 * Backing store layout, page-major: [page][layer][kv (0=K,1=V)][slot][head][dim]. */
typedef struct kv_layout {
    int page_tokens; /* positions per page */
    int n_layer;     /* layers of this family (sliding or full) that own their KV */
    int n_kv_head;
    int head_dim;
    int elem_bytes; /* 2 = bf16, 1 = e4m3 (fp8 local pool, scale 1.0) */
} kv_layout;

/* Bytes in one page: n_layer * 2 * page_tokens * n_kv_head * head_dim * elem_bytes. The
 * backend allocates n_pages * kv_layout_page_bytes(l) bytes for the family; where a head
 * vector sits in them is kernels/kv_offset.h's formula. */
size_t kv_layout_page_bytes(const kv_layout *l);

/* ---- the pool ---- */

enum kv_family { KV_LOCAL = 0, KV_GLOBAL = 1 };

typedef struct kv_pool kv_pool;

/* What a pool is made of: the engine sizes its stores for one (engine_kv_shape), the
 * scheduler creates the pool from it. */
typedef struct kv_pool_shape {
    kv_layout layout[2]; /* indexed by enum kv_family */
    int n_pages[2];      /* physical pages, padding page 0 included */
    int window;
    int max_seqs;
    int max_pages_per_seq;
} kv_pool_shape;

/* The most physical pages of one family: page ids are int32 in the page tables, and the free
 * lists and counts are ints; 2^30 keeps every count and sum of counts in range. */
#define KV_POOL_MAX_PAGES (1 << 30)

/* Creates the bookkeeping for n_pages_local / n_pages_global physical pages (page 0 of each
 * is the padding page, so n_pages - 1 are usable; n_pages >= 1), a sliding window of `window`
 * positions (W >= 1: a query at position t attends to [t-W+1, t]), max_seqs sequence slots
 * and page tables of max_pages_per_seq entries per family (a sequence may use positions
 * [0, max_pages_per_seq * page_tokens) of each family). The layouts are copied. Returns NULL
 * after logging on bad arguments or when out of memory. Free with kv_pool_destroy. */
kv_pool *kv_pool_create(const kv_layout *local, int n_pages_local, const kv_layout *global,
                        int n_pages_global, int window, int max_seqs, int max_pages_per_seq);

/* kv_pool_create with the shape's fields. */
kv_pool *kv_pool_create_shape(const kv_pool_shape *sh);

/* 1 when p was made from a shape equal to sh (its tables and pages index sh's stores). */
int kv_pool_has_shape(const kv_pool *p, const kv_pool_shape *sh);

/* Frees the pool and its tables (not any backing store). NULL is fine. */
void kv_pool_destroy(kv_pool *p);

/* Makes a chunk of positions [pos_begin, pos_end) of sequence slot seq ready to run: maps
 * every unmapped global page intersecting [0, pos_end) and every unmapped local page
 * intersecting [max(0, pos_begin-W+1), pos_end) (the window of the chunk's first query
 * onward). Both families or neither: returns 0 when every page was mapped; -1 when either
 * family lacks free pages, with nothing changed; -2 (logged) for a bad seq or a range
 * outside 0 <= pos_begin <= pos_end <= the table's reach, with nothing changed. */
int kv_pool_reserve(kv_pool *p, int seq, int pos_begin, int pos_end);

/* Frees the local pages of seq that lie wholly before pos-W+1, where pos is the position of
 * the next query: no later query can see them. Their table entries become -1. Global pages
 * are never released here. Call it before kv_pool_reserve for the next chunk to keep the local
 * footprint at its bound. pos <= W-1 frees nothing; a bad seq is ignored. */
void kv_pool_release_front(kv_pool *p, int seq, int pos);

/* Returns every page of seq to the free lists and resets its tables to -1. A bad seq or an
 * empty slot is fine. */
void kv_pool_free_seq(kv_pool *p, int seq);

/* The page table of seq for family: max_pages_per_seq int32 entries, logical page ->
 * physical page, -1 where not mapped or released. Valid until kv_pool_destroy; contents
 * change with reserve/release/free. NULL for a bad seq or family. */
const int32_t *kv_pool_table(const kv_pool *p, enum kv_family family, int seq);

/* The sequence slots whose table of family changed (a page mapped or unmapped) since the last
 * call, all of them on the first call, into seqs (room for max_seqs entries); clears the
 * marks. Returns their number. A backend that mirrors the tables sends only these rows. */
int kv_pool_take_changed(kv_pool *p, enum kv_family family, int *seqs);

/* Physical pages of family on the free list (the padding page never counts). */
int kv_pool_free_pages(const kv_pool *p, enum kv_family family);

/* Physical pages of family that seq holds now (0 for a bad seq). */
int kv_pool_seq_pages(const kv_pool *p, enum kv_family family, int seq);

/* Pages of family that can ever be handed out (the padding page never counts). */
int kv_pool_usable_pages(const kv_pool *p, enum kv_family family);

/* The family's layout (a copy of the one given at create), or NULL for a bad family. */
const kv_layout *kv_pool_layout(const kv_pool *p, enum kv_family family);

/* Pages of family that kv_pool_reserve(seq, pos_begin, pos_end) takes from the free list,
 * for a sequence that holds [0, pos_begin) as earlier reserves left it (local front released
 * up to at most pos_begin, or not): ceil(pos_end/page) - ceil(pos_begin/page), 0 when
 * pos_end <= pos_begin. Pure
 * arithmetic, for the scheduler's fit check; it does not mutate. */
int kv_pool_pages_needed(const kv_pool *p, enum kv_family family, int pos_begin, int pos_end);

/* The most pages of family that one sequence of n_tokens positions holds at once while it is
 * prefilled in chunks of at most `chunk` tokens (release_front before each) and then decoded:
 * global ceil(n/page) (kv_pool_pages_needed from 0), local at most that and
 * ceil((W-1+C)/page)+1 with C = min(chunk, n). What the scheduler commits at admission. */
int kv_pool_pages_worst(const kv_pool *p, enum kv_family family, int n_tokens, int chunk);

/* The same count before any pool exists, from the page size and the window (the engine sizes
 * the pool by it; kv_pool_pages_worst is this with the pool's own figures). */
int kv_pages_worst(enum kv_family family, int page_tokens, int window, int n_tokens, int chunk);

/* 1 if a request of n_tokens positions in all, prefilled in chunks of at most `chunk` tokens,
 * fits an EMPTY pool and the page tables (kv_pool_pages_worst of each family at most its
 * usable pages). 0 otherwise: such a request must be refused, as waiting cannot help. */
int kv_pool_could_ever_fit(const kv_pool *p, int n_tokens, int chunk);

#endif
