/* runtime/engine/kv_pool.c - see kv_pool.h.
 *
 * Owns: the free lists (a stack of physical page ids per family) and the per-sequence page
 * tables with a small summary per sequence (pages held, and the [lo, hi) span of logical pages
 * that may be mapped) so that reserve, release and free touch only the pages near the window
 * instead of scanning a whole table every decode step. Does not own: KV data, budgets, slots.
 *
 * Invariants, per sequence and family: every logical page < lo and >= hi is unmapped; for the
 * global family the mapped pages are exactly the prefix [0, hi) (it is never released from the
 * front, and reserve maps from 0), so its new-page count is plain arithmetic. */
#include "runtime/engine/kv_pool.h"
#include "runtime/base/log.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

size_t kv_layout_page_bytes(const kv_layout *l) {
    return (size_t)l->n_layer * 2u * (size_t)l->page_tokens * (size_t)l->n_kv_head *
           (size_t)l->head_dim * (size_t)l->elem_bytes;
}

typedef struct kv_fam {
    kv_layout layout;
    int n_pages;         /* physical pages, padding page 0 included */
    int32_t *free_stack; /* [n_pages - 1] page ids; the top is handed out next */
    int n_free;
    int32_t *tables;        /* [max_seqs][max_pages_per_seq] logical -> physical, -1 unmapped */
    int *held;              /* [max_seqs] pages mapped now */
    int *lo, *hi;           /* [max_seqs] logical pages outside [lo, hi) are unmapped */
    unsigned char *changed; /* [max_seqs] 1: the table row changed since kv_pool_take_changed */
} kv_fam;

struct kv_pool {
    kv_fam fam[2]; /* indexed by enum kv_family */
    int window;
    int max_seqs;
    int max_pages_per_seq;
};

static int kv_layout_valid(const kv_layout *l) {
    return l && l->page_tokens >= 1 && l->n_layer >= 1 && l->n_kv_head >= 1 && l->head_dim >= 1 &&
           (l->elem_bytes == 1 || l->elem_bytes == 2);
}

static int kv_fam_init(kv_fam *f, const kv_layout *l, int n_pages, int max_seqs,
                       int max_pages_per_seq) {
    f->layout = *l;
    f->n_pages = n_pages;
    size_t n_entries = (size_t)max_seqs * (size_t)max_pages_per_seq;
    f->free_stack = malloc(sizeof(int32_t) * (size_t)(n_pages > 1 ? n_pages - 1 : 1));
    f->tables = malloc(sizeof(int32_t) * n_entries);
    f->held = calloc((size_t)max_seqs, sizeof(int));
    f->lo = calloc((size_t)max_seqs, sizeof(int));
    f->hi = calloc((size_t)max_seqs, sizeof(int));
    f->changed = malloc((size_t)max_seqs);
    if (!f->free_stack || !f->tables || !f->held || !f->lo || !f->hi || !f->changed) return -1;
    memset(f->changed, 1, (size_t)max_seqs); /* a backend's copy starts out unknown */
    /* pushed high to low so that a fresh pool hands out 1, 2, 3, ... (easier to read in dumps) */
    f->n_free = 0;
    for (int32_t page = n_pages - 1; page >= 1; page--)
        f->free_stack[f->n_free++] = page;
    for (size_t i = 0; i < n_entries; i++)
        f->tables[i] = -1;
    return 0;
}

static void kv_fam_fini(kv_fam *f) {
    free(f->free_stack);
    free(f->tables);
    free(f->held);
    free(f->lo);
    free(f->hi);
    free(f->changed);
}

kv_pool *kv_pool_create(const kv_layout *local, int n_pages_local, const kv_layout *global,
                        int n_pages_global, int window, int max_seqs, int max_pages_per_seq) {
    if (!kv_layout_valid(local) || !kv_layout_valid(global) || n_pages_local < 1 ||
        n_pages_global < 1 || window < 1 || max_seqs < 1 || max_pages_per_seq < 1) {
        log_msg(LOG_ERROR, "kv_pool",
                "bad arguments: n_pages %d/%d, window %d, max_seqs %d, max_pages_per_seq %d "
                "(or a layout field < 1, or elem_bytes not 1 or 2)",
                n_pages_local, n_pages_global, window, max_seqs, max_pages_per_seq);
        return NULL;
    }
    /* positions are int everywhere; the furthest a table reaches must be one */
    if ((long long)max_pages_per_seq * local->page_tokens > INT_MAX ||
        (long long)max_pages_per_seq * global->page_tokens > INT_MAX) {
        log_msg(LOG_ERROR, "kv_pool", "max_pages_per_seq %d * page_tokens exceeds INT_MAX",
                max_pages_per_seq);
        return NULL;
    }
    kv_pool *p = calloc(1, sizeof *p);
    if (!p) goto oom;
    p->window = window;
    p->max_seqs = max_seqs;
    p->max_pages_per_seq = max_pages_per_seq;
    if (kv_fam_init(&p->fam[KV_LOCAL], local, n_pages_local, max_seqs, max_pages_per_seq) ||
        kv_fam_init(&p->fam[KV_GLOBAL], global, n_pages_global, max_seqs, max_pages_per_seq))
        goto oom;
    return p;
oom:
    log_msg(LOG_ERROR, "kv_pool", "out of memory for %d sequences x %d pages", max_seqs,
            max_pages_per_seq);
    kv_pool_destroy(p);
    return NULL;
}

kv_pool *kv_pool_create_shape(const kv_pool_shape *sh) {
    return kv_pool_create(&sh->layout[KV_LOCAL], sh->n_pages[KV_LOCAL], &sh->layout[KV_GLOBAL],
                          sh->n_pages[KV_GLOBAL], sh->window, sh->max_seqs, sh->max_pages_per_seq);
}

static int same_layout(const kv_layout *a, const kv_layout *b) {
    return a->page_tokens == b->page_tokens && a->n_layer == b->n_layer &&
           a->n_kv_head == b->n_kv_head && a->head_dim == b->head_dim &&
           a->elem_bytes == b->elem_bytes;
}

int kv_pool_has_shape(const kv_pool *p, const kv_pool_shape *sh) {
    if (!p || !sh || p->window != sh->window || p->max_seqs != sh->max_seqs ||
        p->max_pages_per_seq != sh->max_pages_per_seq)
        return 0;
    for (int f = 0; f < 2; f++)
        if (p->fam[f].n_pages != sh->n_pages[f] || !same_layout(&p->fam[f].layout, &sh->layout[f]))
            return 0;
    return 1;
}

void kv_pool_destroy(kv_pool *p) {
    if (!p) return;
    kv_fam_fini(&p->fam[KV_LOCAL]);
    kv_fam_fini(&p->fam[KV_GLOBAL]);
    free(p);
}

static int kv_seq_valid(const kv_pool *p, int seq) { return p && seq >= 0 && seq < p->max_seqs; }

static int32_t *kv_row(const kv_pool *p, const kv_fam *f, int seq) {
    return f->tables + (size_t)seq * (size_t)p->max_pages_per_seq;
}

static int kv_ceil_div(int a, int b) { return (int)(((long long)a + b - 1) / b); }

/* Logical pages [*k0, *k1) that a chunk [pos_begin, pos_end) needs mapped in family f. The
 * global range starts at hi, not 0: [0, hi) is mapped already (file comment). */
static void kv_chunk_span(const kv_pool *p, enum kv_family family, int seq, int pos_begin,
                          int pos_end, int *k0, int *k1) {
    const kv_fam *f = &p->fam[family];
    int page = f->layout.page_tokens;
    *k1 = kv_ceil_div(pos_end, page);
    if (family == KV_GLOBAL) {
        *k0 = f->hi[seq];
    } else {
        int first = pos_begin - (p->window - 1);
        *k0 = first > 0 ? first / page : 0;
    }
}

static int kv_count_unmapped(const kv_pool *p, const kv_fam *f, int seq, int k0, int k1) {
    const int32_t *row = kv_row(p, f, seq);
    int n = 0;
    for (int k = k0; k < k1; k++)
        n += row[k] < 0;
    return n;
}

static void kv_map(const kv_pool *p, kv_fam *f, int seq, int k0, int k1) {
    int32_t *row = kv_row(p, f, seq);
    for (int k = k0; k < k1; k++) {
        if (row[k] >= 0) continue;
        row[k] = f->free_stack[--f->n_free];
        f->held[seq]++;
        f->changed[seq] = 1;
    }
    if (k0 < k1) {
        if (k0 < f->lo[seq]) f->lo[seq] = k0;
        if (k1 > f->hi[seq]) f->hi[seq] = k1;
    }
}

/* Unmaps logical pages [k0, k1) of seq that are mapped, pushing them back on the free list. */
static void kv_unmap(const kv_pool *p, kv_fam *f, int seq, int k0, int k1) {
    int32_t *row = kv_row(p, f, seq);
    for (int k = k0; k < k1; k++) {
        if (row[k] < 0) continue;
        f->free_stack[f->n_free++] = row[k];
        row[k] = -1;
        f->held[seq]--;
        f->changed[seq] = 1;
    }
}

int kv_pool_reserve(kv_pool *p, int seq, int pos_begin, int pos_end) {
    if (!kv_seq_valid(p, seq) || pos_begin < 0 || pos_end < pos_begin) {
        log_msg(LOG_ERROR, "kv_pool", "reserve: bad seq %d or range [%d, %d)", seq, pos_begin,
                pos_end);
        return -2;
    }
    for (int fi = 0; fi < 2; fi++) {
        long long reach = (long long)p->max_pages_per_seq * p->fam[fi].layout.page_tokens;
        if (pos_end > reach) {
            log_msg(LOG_ERROR, "kv_pool", "reserve: seq %d position %d beyond the table (%lld)",
                    seq, pos_end, reach);
            return -2;
        }
    }
    if (pos_end == pos_begin) return 0;
    int k0[2], k1[2];
    /* count first, map second: that is what makes it both-or-neither */
    for (int fi = 0; fi < 2; fi++) {
        kv_chunk_span(p, (enum kv_family)fi, seq, pos_begin, pos_end, &k0[fi], &k1[fi]);
        if (kv_count_unmapped(p, &p->fam[fi], seq, k0[fi], k1[fi]) > p->fam[fi].n_free) return -1;
    }
    for (int fi = 0; fi < 2; fi++)
        kv_map(p, &p->fam[fi], seq, k0[fi], k1[fi]);
    return 0;
}

void kv_pool_release_front(kv_pool *p, int seq, int pos) {
    if (!kv_seq_valid(p, seq)) return;
    kv_fam *f = &p->fam[KV_LOCAL];
    int first = pos - (p->window - 1); /* oldest position the query at pos still sees */
    if (first <= 0) return;
    int cut = first / f->layout.page_tokens; /* pages < cut end at or before first */
    if (cut <= f->lo[seq]) return;
    kv_unmap(p, f, seq, f->lo[seq], cut < f->hi[seq] ? cut : f->hi[seq]);
    f->lo[seq] = cut;
}

void kv_pool_free_seq(kv_pool *p, int seq) {
    if (!kv_seq_valid(p, seq)) return;
    for (int fi = 0; fi < 2; fi++) {
        kv_fam *f = &p->fam[fi];
        kv_unmap(p, f, seq, f->lo[seq], f->hi[seq]);
        f->lo[seq] = 0;
        f->hi[seq] = 0;
    }
}

static int kv_family_valid(enum kv_family family) {
    return family == KV_LOCAL || family == KV_GLOBAL;
}

int kv_pool_take_changed(kv_pool *p, enum kv_family family, int *seqs) {
    if (!p || !kv_family_valid(family)) return 0;
    kv_fam *f = &p->fam[family];
    int n = 0;
    for (int seq = 0; seq < p->max_seqs; seq++)
        if (f->changed[seq]) {
            f->changed[seq] = 0;
            seqs[n++] = seq;
        }
    return n;
}

const int32_t *kv_pool_table(const kv_pool *p, enum kv_family family, int seq) {
    if (!kv_seq_valid(p, seq) || !kv_family_valid(family)) return NULL;
    return kv_row(p, &p->fam[family], seq);
}

int kv_pool_free_pages(const kv_pool *p, enum kv_family family) {
    if (!p || !kv_family_valid(family)) return 0;
    return p->fam[family].n_free;
}

int kv_pool_seq_pages(const kv_pool *p, enum kv_family family, int seq) {
    if (!kv_seq_valid(p, seq) || !kv_family_valid(family)) return 0;
    return p->fam[family].held[seq];
}

int kv_pool_usable_pages(const kv_pool *p, enum kv_family family) {
    return p && kv_family_valid(family) ? p->fam[family].n_pages - 1 : 0;
}

const kv_layout *kv_pool_layout(const kv_pool *p, enum kv_family family) {
    return p && kv_family_valid(family) ? &p->fam[family].layout : NULL;
}

int kv_pool_pages_needed(const kv_pool *p, enum kv_family family, int pos_begin, int pos_end) {
    if (!p || !kv_family_valid(family) || pos_end <= pos_begin) return 0;
    int page = p->fam[family].layout.page_tokens;
    if (pos_begin < 0) pos_begin = 0;
    return kv_ceil_div(pos_end, page) - kv_ceil_div(pos_begin, page);
}

int kv_pages_worst(enum kv_family family, int page_tokens, int window, int n_tokens, int chunk) {
    if (!kv_family_valid(family) || n_tokens <= 0 || page_tokens <= 0) return 0;
    int all = kv_ceil_div(n_tokens, page_tokens);
    if (family == KV_GLOBAL) return all;
    long long c = chunk < n_tokens ? chunk : n_tokens;
    /* the window of a chunk's first query plus the chunk: W-1+C positions */
    long long span = ((long long)window - 1 + c + page_tokens - 1) / page_tokens + 1;
    return span < all ? (int)span : all;
}

int kv_pool_pages_worst(const kv_pool *p, enum kv_family family, int n_tokens, int chunk) {
    if (!p || !kv_family_valid(family)) return 0;
    return kv_pages_worst(family, p->fam[family].layout.page_tokens, p->window, n_tokens, chunk);
}

int kv_pool_could_ever_fit(const kv_pool *p, int n_tokens, int chunk) {
    if (!p || chunk < 1) return 0;
    if (n_tokens <= 0) return 1;
    for (int fi = 0; fi < 2; fi++) {
        const kv_fam *f = &p->fam[fi];
        if ((long long)n_tokens > (long long)p->max_pages_per_seq * f->layout.page_tokens) return 0;
        if (kv_pool_pages_worst(p, (enum kv_family)fi, n_tokens, chunk) > f->n_pages - 1) return 0;
    }
    return 1;
}
