/* tests/unit/test_kv_pool.c - runtime/kv_pool through its header.
 *
 * Owns: checks of the layout arithmetic (sizes, kernels/kv_offset.h's element offsets), of
 * both-or-neither admission, of front release against a brute-force count over positions, of
 * the local footprint bound during chunked prefill and decode, and of page conservation (every
 * page back after free_seq, padding page 0 never handed out, no page mapped twice). */
#include "kernels/kv_offset.h"
#include "runtime/engine/kv_pool.h"
#include "tests/harness.h"

#include <stdlib.h>
#include <string.h>

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

static size_t layout_offset(const kv_layout *l, int page, int layer, int kv, int slot, int head) {
    return (size_t)kv_elem_offset(page, l->n_layer, l->page_tokens, l->n_kv_head, l->head_dim,
                                  layer, kv, slot, head);
}

static void test_layout(void) {
    kv_layout bf = {
        .page_tokens = 16, .n_layer = 5, .n_kv_head = 2, .head_dim = 8, .elem_bytes = 2};
    kv_layout f8 = bf;
    f8.elem_bytes = 1;
    size_t elems = 5u * 2u * 16u * 2u * 8u;
    TEST_CHECK("kv_layout.page_size",
               kv_layout_page_bytes(&bf) == 2 * elems && kv_layout_page_bytes(&f8) == elems,
               "bytes bf16 %zu, e4m3 %zu for %zu elements", kv_layout_page_bytes(&bf),
               kv_layout_page_bytes(&f8), elems);

    /* Walk [page][layer][kv][slot][head] in order: each head vector must start exactly
     * head_dim after the previous one, so kernels/kv_offset.h's offsets tile the store with no
     * gap or overlap (the same element offsets serve bf16 and e4m3 stores). */
    int n_pages = 3, ok = 1;
    size_t expect = 0;
    for (int pg = 0; pg < n_pages; pg++)
        for (int l = 0; l < bf.n_layer; l++)
            for (int kv = 0; kv < 2; kv++)
                for (int s = 0; s < bf.page_tokens; s++)
                    for (int h = 0; h < bf.n_kv_head; h++) {
                        ok &= layout_offset(&bf, pg, l, kv, s, h) == expect;
                        expect += (size_t)bf.head_dim;
                    }
    TEST_CHECK("kv_layout.offsets_tile_store", ok && expect == (size_t)n_pages * elems,
               "%zu elements over %d pages", expect, n_pages);
    size_t v_off = layout_offset(&bf, 1, 2, 1, 3, 1);
    size_t by_hand = elems + (((2u * 2u + 1u) * 16u + 3u) * 2u + 1u) * 8u;
    TEST_CHECK("kv_layout.offset_example", v_off == by_hand, "offset %zu, by hand %zu", v_off,
               by_hand);

    /* Through a page table, as the attention kernels read it: seq 1's logical page 1 is
     * physical page 2, its page 0 unmapped, and positions past the table's reach are -1. */
    int32_t tables[2 * 3] = {1, -1, -1, -1, 2, -1};
    k_kv_view v = {.page_tokens = 16,
                   .n_layer = 5,
                   .n_kv_head = 2,
                   .head_dim = 8,
                   .elem_bytes = 2,
                   .tables = tables,
                   .max_pages = 3};
    long long mapped = kv_view_offset(&v, 1, 16 + 3, 2, 1, 1);
    int view_ok =
        mapped == (long long)layout_offset(&bf, 2, 2, 1, 3, 1) &&
        kv_view_offset(&v, 1, 3, 0, 0, 0) == -1 && kv_view_offset(&v, 0, 48, 0, 0, 0) == -1 &&
        kv_view_offset(&v, 0, -1, 0, 0, 0) == -1 &&
        kv_view_offset(&v, 0, 15, 4, 1, 1) == (long long)layout_offset(&bf, 1, 4, 1, 15, 1);
    TEST_CHECK("kv_layout.view_offset", view_ok,
               "mapped %lld; unmapped, past the reach and negative positions give -1", mapped);

    /* kv_v_of_k: V found from K's offset, as attention does instead of a second table read,
     * equal to the table's own answer at every position, layer and head of the view, mapped
     * or not */
    int v_ok = 1, n_mapped = 0;
    for (int seq = 0; seq < 2; seq++)
        for (int pos = -1; pos <= 3 * 16; pos++)
            for (int l = 0; l < v.n_layer; l++)
                for (int h = 0; h < v.n_kv_head; h++) {
                    long long k = kv_view_offset(&v, seq, pos, l, 0, h);
                    v_ok &= kv_v_of_k(&v, k) == kv_view_offset(&v, seq, pos, l, 1, h);
                    n_mapped += k >= 0;
                }
    TEST_CHECK("kv_layout.v_of_k", v_ok && n_mapped == 2 * 16 * 5 * 2,
               "%d mapped (position, layer, head) triples and the unmapped ones", n_mapped);
}

static kv_layout mk(int page, int elem_bytes) {
    kv_layout l = {
        .page_tokens = page, .n_layer = 2, .n_kv_head = 1, .head_dim = 4, .elem_bytes = elem_bytes};
    return l;
}

/* Each non-padding physical page appears at most once across all tables of all sequences,
 * page 0 never, and mapped + free = usable. Returns 1 if consistent. */
static int pool_consistent(const kv_pool *p, int n_seqs, int max_pages, const int n_pages[2]) {
    for (int fam = 0; fam < 2; fam++) {
        char *seen = calloc((size_t)n_pages[fam], 1);
        int mapped = 0, ok = seen != NULL;
        for (int s = 0; ok && s < n_seqs; s++) {
            const int32_t *t = kv_pool_table(p, (enum kv_family)fam, s);
            for (int k = 0; k < max_pages; k++) {
                if (t[k] < 0) continue;
                if (t[k] == 0 || t[k] >= n_pages[fam] || seen[t[k]])
                    ok = 0;
                else
                    seen[t[k]] = 1;
                mapped++;
            }
        }
        free(seen);
        if (!ok || mapped + kv_pool_free_pages(p, (enum kv_family)fam) != n_pages[fam] - 1)
            return 0;
    }
    return 1;
}

static void test_both_or_neither(void) {
    kv_layout l = mk(16, 2), g = mk(16, 2);
    /* global: 2 pages, i.e. one usable page of 16 positions; local: plenty */
    kv_pool *p = kv_pool_create(&l, 64, &g, 2, 32, 4, 64);
    int r0 = kv_pool_reserve(p, 0, 0, 16);
    int local_free = kv_pool_free_pages(p, KV_LOCAL);
    int r1 = kv_pool_reserve(p, 1, 0, 16);
    int r2 = kv_pool_reserve(p, 0, 16, 17); /* seq 0 growing into a second global page */
    const int32_t *t1 = kv_pool_table(p, KV_LOCAL, 1);
    int untouched = kv_pool_seq_pages(p, KV_LOCAL, 1) == 0 && t1[0] == -1 &&
                    kv_pool_seq_pages(p, KV_LOCAL, 0) == 1 &&
                    kv_pool_table(p, KV_LOCAL, 0)[1] == -1;
    TEST_CHECK("kv_pool.both_or_neither_global_short",
               r0 == 0 && r1 == -1 && r2 == -1 && untouched &&
                   kv_pool_free_pages(p, KV_LOCAL) == local_free,
               "reserves %d/%d/%d, local free %d -> %d", r0, r1, r2, local_free,
               kv_pool_free_pages(p, KV_LOCAL));
    kv_pool_destroy(p);

    /* and the mirror image: local short, global must stay untouched */
    p = kv_pool_create(&l, 3, &g, 64, 64, 4, 64);
    r0 = kv_pool_reserve(p, 0, 0, 32);
    int global_free = kv_pool_free_pages(p, KV_GLOBAL);
    r1 = kv_pool_reserve(p, 1, 0, 1);
    TEST_CHECK("kv_pool.both_or_neither_local_short",
               r0 == 0 && r1 == -1 && kv_pool_free_pages(p, KV_GLOBAL) == global_free &&
                   kv_pool_seq_pages(p, KV_GLOBAL, 1) == 0,
               "reserves %d/%d, global free %d -> %d", r0, r1, global_free,
               kv_pool_free_pages(p, KV_GLOBAL));
    int bad = kv_pool_reserve(p, 4, 0, 1) == -2 && kv_pool_reserve(p, 0, 5, 4) == -2 &&
              kv_pool_reserve(p, 0, 0, 64 * 16 + 1) == -2;
    TEST_CHECK("kv_pool.reserve_bad_args", bad, "bad seq / reversed / out-of-table give -2");
    kv_pool_destroy(p);
}

/* Local pages wholly before pos-W+1, counted position by position. */
static int brute_releasable(int mapped_pages, int page, int window, int pos) {
    int n = 0;
    for (int k = 0; k < mapped_pages; k++) {
        int all_before = 1;
        for (int t = k * page; t < (k + 1) * page; t++)
            all_before &= t < pos - (window - 1);
        n += all_before;
    }
    return n;
}

static void test_release_front(void) {
    const int windows[] = {1, 2, 7, 16, 17, 100};
    const int pages[] = {1, 4, 16};
    int cases = 0, bad = 0;
    for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++) {
        for (size_t pi = 0; pi < sizeof pages / sizeof pages[0]; pi++) {
            int W = windows[wi], P = pages[pi];
            int probes[] = {0,     1,         W - 1, W,         W + 1, 2 * W,    4 * W - 1,
                            4 * W, 4 * W + 1, P,     W + P - 1, W + P, W + P + 1};
            for (size_t qi = 0; qi < sizeof probes / sizeof probes[0]; qi++) {
                int pos = probes[qi], n = 4 * W + 2 * P + 8; /* positions held: [0, n) */
                kv_layout l = mk(P, 2), g = mk(P, 2);
                int mp = ceil_div(n, P);
                kv_pool *p = kv_pool_create(&l, mp + 1, &g, mp + 1, W, 1, mp);
                int ok = kv_pool_reserve(p, 0, 0, n) == 0;
                int before = kv_pool_free_pages(p, KV_LOCAL);
                kv_pool_release_front(p, 0, pos);
                int freed = kv_pool_free_pages(p, KV_LOCAL) - before;
                int want = brute_releasable(mp, P, W, pos);
                const int32_t *t = kv_pool_table(p, KV_LOCAL, 0);
                for (int k = 0; k < mp; k++)
                    ok &= (t[k] == -1) == (k < want); /* exactly the front ones go */
                ok &= freed == want && kv_pool_seq_pages(p, KV_GLOBAL, 0) == mp;
                /* releasing again at the same pos frees nothing more */
                kv_pool_release_front(p, 0, pos);
                ok &= kv_pool_free_pages(p, KV_LOCAL) - before == want;
                if (!ok && bad++ < 3)
                    test_fail("kv_pool.release_front_case", "W=%d P=%d pos=%d freed %d want %d", W,
                              P, pos, freed, want);
                cases++;
                kv_pool_destroy(p);
            }
        }
    }
    TEST_CHECK("kv_pool.release_front_brute", bad == 0, "%d cases, %d wrong", cases, bad);
}

/* Prefill n tokens in chunks of C, then decode d tokens, the way sched drives the pool:
 * release_front(next query) then reserve(chunk). Checks the local bound at every step, that
 * every page a query of the chunk can see is mapped, that the pages taken match
 * kv_pool_pages_needed, and that free_seq gives every page back. */
static int run_sequence(int W, int P, int C, int n, int d, int *peak_out) {
    kv_layout l = mk(P, 1), g = mk(P, 2); /* an e4m3 local family, as with kv.local = fp8 */
    int mp = ceil_div(n + d, P);
    int n_pages[2] = {ceil_div(W - 1 + C, P) + 2, mp + 1};
    kv_pool *p = kv_pool_create(&l, n_pages[0], &g, n_pages[1], W, 2, mp);
    int ok = p != NULL, peak = 0;
    for (int b = 0; ok && b < n + d;) {
        int e = b < n ? (b + C < n ? b + C : n) : b + 1;
        int bound = b < n ? ceil_div(W - 1 + C, P) + 1 : ceil_div(W, P) + 1;
        kv_pool_release_front(p, 0, b);
        int need[2], had[2];
        for (int f = 0; f < 2; f++) {
            need[f] = kv_pool_pages_needed(p, (enum kv_family)f, b, e);
            had[f] = kv_pool_free_pages(p, (enum kv_family)f);
        }
        ok &= kv_pool_reserve(p, 0, b, e) == 0;
        for (int f = 0; f < 2; f++)
            ok &= had[f] - kv_pool_free_pages(p, (enum kv_family)f) == need[f];
        int held = kv_pool_seq_pages(p, KV_LOCAL, 0);
        peak = held > peak ? held : peak;
        ok &= held <= bound;
        const int32_t *tl = kv_pool_table(p, KV_LOCAL, 0), *tg = kv_pool_table(p, KV_GLOBAL, 0);
        for (int t = b - W + 1 > 0 ? b - W + 1 : 0; t < e; t++)
            ok &= tl[t / P] > 0;
        for (int t = 0; t < e; t++)
            ok &= tg[t / P] > 0;
        ok &= pool_consistent(p, 2, mp, n_pages);
        b = e;
    }
    kv_pool_free_seq(p, 0);
    ok &= kv_pool_free_pages(p, KV_LOCAL) == n_pages[0] - 1 &&
          kv_pool_free_pages(p, KV_GLOBAL) == n_pages[1] - 1 &&
          kv_pool_seq_pages(p, KV_LOCAL, 0) == 0 && kv_pool_seq_pages(p, KV_GLOBAL, 0) == 0;
    for (int k = 0; k < mp; k++)
        ok &= kv_pool_table(p, KV_LOCAL, 0)[k] == -1 && kv_pool_table(p, KV_GLOBAL, 0)[k] == -1;
    kv_pool_destroy(p);
    *peak_out = peak;
    return ok;
}

static void test_prefill_decode_bound(void) {
    const int windows[] = {1, 5, 16, 33, 128};
    const int pages[] = {1, 4, 16};
    const int chunks[] = {1, 16, 48, 64};
    int cases = 0, bad = 0, tight = 0;
    for (size_t wi = 0; wi < 5; wi++)
        for (size_t pi = 0; pi < 3; pi++)
            for (size_t ci = 0; ci < 4; ci++) {
                int W = windows[wi], P = pages[pi], C = chunks[ci], peak = 0;
                int n = 3 * W + 2 * C + 7;
                int ok = run_sequence(W, P, C, n, 2 * W + P + 3, &peak);
                tight += peak == ceil_div(W - 1 + C, P) + 1;
                if (!ok && bad++ < 3)
                    test_fail("kv_pool.chunk_bound_case", "W=%d P=%d C=%d peak %d", W, P, C, peak);
                cases++;
            }
    TEST_CHECK("kv_pool.chunk_bound_and_free_seq", bad == 0,
               "%d cases, %d wrong, %d reach the bound exactly", cases, bad, tight);
}

static void test_padding_and_exhaustion(void) {
    kv_layout l = mk(4, 2), g = mk(4, 2);
    int n_pages[2] = {9, 9};
    kv_pool *p = kv_pool_create(&l, n_pages[0], &g, n_pages[1], 1000, 8, 16);
    /* W = 1000: local never releases, so both families run dry together */
    int admitted = 0;
    for (int s = 0; s < 8; s++)
        admitted += kv_pool_reserve(p, s, 0, 5) == 0; /* two pages each */
    int ok = admitted == 4 && kv_pool_free_pages(p, KV_LOCAL) == 0 &&
             kv_pool_free_pages(p, KV_GLOBAL) == 0 && pool_consistent(p, 8, 16, n_pages);
    TEST_CHECK("kv_pool.padding_never_handed_out", ok, "%d of 8 admitted, 8 usable pages each",
               admitted);
    for (int s = 0; s < 8; s++)
        kv_pool_free_seq(p, s);
    kv_pool_free_seq(p, 0); /* twice is harmless */
    TEST_CHECK("kv_pool.all_back_after_free",
               kv_pool_free_pages(p, KV_LOCAL) == 8 && kv_pool_free_pages(p, KV_GLOBAL) == 8 &&
                   pool_consistent(p, 8, 16, n_pages),
               "free %d/%d", kv_pool_free_pages(p, KV_LOCAL), kv_pool_free_pages(p, KV_GLOBAL));
    kv_pool_destroy(p);
}

static void test_could_ever_fit(void) {
    kv_layout l = mk(16, 2), g = mk(16, 2);
    /* local: 5 usable pages; W=32, C=32: ceil(63/16)+1 = 5 -> fits; C=48 -> 6 does not */
    kv_pool *p = kv_pool_create(&l, 6, &g, 101, 32, 2, 100);
    int ok = kv_pool_could_ever_fit(p, 1600, 32) == 1 && kv_pool_could_ever_fit(p, 1600, 48) == 0 &&
             kv_pool_could_ever_fit(p, 1601, 32) == 0 && /* beyond global pages and table */
             kv_pool_could_ever_fit(p, 80, 1000) == 1 && /* short: 5 local pages in all */
             kv_pool_could_ever_fit(p, 81, 1000) == 0 && kv_pool_could_ever_fit(p, 10, 0) == 0;
    TEST_CHECK("kv_pool.could_ever_fit", ok, "window bound, global bound, short request");
    int w[6] = {
        kv_pool_pages_worst(p, KV_GLOBAL, 1600, 32), kv_pool_pages_worst(p, KV_LOCAL, 1600, 32),
        kv_pool_pages_worst(p, KV_LOCAL, 1600, 48),  kv_pool_pages_worst(p, KV_LOCAL, 10, 32),
        kv_pool_pages_worst(p, KV_GLOBAL, 17, 32),   kv_pool_pages_worst(p, KV_LOCAL, 0, 32)};
    TEST_CHECK("kv_pool.pages_worst",
               w[0] == 100 && w[1] == 5 && w[2] == 6 && w[3] == 1 && w[4] == 2 && w[5] == 0 &&
                   kv_pool_usable_pages(p, KV_LOCAL) == 5 &&
                   kv_pool_usable_pages(p, KV_GLOBAL) == 100,
               "global 1600: %d, local 1600 at C=32: %d, at C=48: %d, local 10: %d, global 17: %d, "
               "none: %d",
               w[0], w[1], w[2], w[3], w[4], w[5]);
    /* the engine sizes the pool with kv_pages_worst before the pool exists: the same counts */
    int same = 0, cases = 0;
    for (int fam = 0; fam < 2; fam++)
        for (int n = 0; n <= 1700; n += 17)
            for (int c = 1; c <= 2048; c = c * 3 + 1, cases++)
                same += kv_pages_worst((enum kv_family)fam, 16, 32, n, c) ==
                        kv_pool_pages_worst(p, (enum kv_family)fam, n, c);
    TEST_CHECK("kv_pool.pages_worst_before_pool", same == cases && cases > 0,
               "%d of %d (family, tokens, chunk) cases equal to the pool's own count", same, cases);
    kv_pool_shape sh = {.layout = {l, g},
                        .n_pages = {6, 101},
                        .window = 32,
                        .max_seqs = 2,
                        .max_pages_per_seq = 100};
    kv_pool *q = kv_pool_create_shape(&sh);
    kv_pool_shape other = sh;
    other.n_pages[KV_GLOBAL] = 100;
    TEST_CHECK("kv_pool.shape",
               q && kv_pool_has_shape(q, &sh) && kv_pool_has_shape(p, &sh) &&
                   !kv_pool_has_shape(q, &other) && !kv_pool_has_shape(NULL, &sh) &&
                   kv_pool_layout(q, KV_LOCAL)->page_tokens == 16,
               "a pool made from a shape has it; one page fewer does not match");
    kv_pool_destroy(q);
    kv_layout badl = mk(16, 3);
    TEST_CHECK("kv_pool.create_rejects",
               !kv_pool_create(&badl, 4, &g, 4, 8, 1, 4) &&
                   !kv_pool_create(&l, 0, &g, 4, 8, 1, 4) && !kv_pool_create(&l, 4, &g, 4, 0, 1, 4),
               "elem_bytes 3, zero pages, zero window refused");
    kv_pool_destroy(p);
}

/* take_changed names exactly the rows that reserve, release_front and free_seq changed: all
 * rows at first, then none until a call maps or unmaps a page of that row and family. */
static void test_changed_rows(void) {
    kv_layout l = mk(4, 2), g = mk(4, 2);
    kv_pool *p = kv_pool_create(&l, 40, &g, 40, 8, 3, 16);
    int seqs[3], ok = p != NULL;
    if (!p) {
        TEST_CHECK("kv_pool.changed_rows", 0, "create failed");
        return;
    }
    ok &= kv_pool_take_changed(p, KV_LOCAL, seqs) == 3 &&
          kv_pool_take_changed(p, KV_GLOBAL, seqs) == 3;
    ok &= kv_pool_take_changed(p, KV_LOCAL, seqs) == 0 &&
          kv_pool_take_changed(p, KV_GLOBAL, seqs) == 0;
    ok &= kv_pool_reserve(p, 1, 0, 10) == 0; /* maps pages of both families */
    ok &= kv_pool_take_changed(p, KV_LOCAL, seqs) == 1 && seqs[0] == 1;
    ok &= kv_pool_take_changed(p, KV_GLOBAL, seqs) == 1 && seqs[0] == 1;
    ok &= kv_pool_reserve(p, 1, 9, 10) == 0; /* already mapped: nothing changes */
    ok &= kv_pool_take_changed(p, KV_LOCAL, seqs) == 0 &&
          kv_pool_take_changed(p, KV_GLOBAL, seqs) == 0;
    kv_pool_release_front(p, 1, 20); /* window 8: local pages before 13 go, global stay */
    ok &= kv_pool_take_changed(p, KV_LOCAL, seqs) == 1 && seqs[0] == 1;
    ok &= kv_pool_take_changed(p, KV_GLOBAL, seqs) == 0;
    ok &= kv_pool_reserve(p, 2, 0, 4) == 0;
    kv_pool_free_seq(p, 1); /* its local pages were already released: only global changes */
    ok &= kv_pool_take_changed(p, KV_LOCAL, seqs) == 1 && seqs[0] == 2;
    ok &= kv_pool_take_changed(p, KV_GLOBAL, seqs) == 2 && seqs[0] == 1 && seqs[1] == 2;
    kv_pool_free_seq(p, 0); /* holds nothing: no change */
    ok &= kv_pool_take_changed(p, KV_GLOBAL, seqs) == 0 &&
          kv_pool_take_changed(p, KV_LOCAL, seqs) == 0;
    TEST_CHECK("kv_pool.changed_rows", ok,
               "all rows at first; then only the rows a reserve, front release or free changed, "
               "per family");
    kv_pool_destroy(p);
}

int main(void) {
    test_changed_rows();
    test_layout();
    test_both_or_neither();
    test_release_front();
    test_prefill_decode_bound();
    test_padding_and_exhaustion();
    test_could_ever_fit();
    return harness_exit();
}
