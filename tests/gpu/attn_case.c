/* tests/gpu/attn_case.c - test_attn's cases (tests/gpu/attn_case.h says what they are). The
 * random draws of a case all happen here, from the seed attn_case_setup is given, in one order:
 * the store, q, the K/V values. */
#include "tests/gpu/attn_case.h"
#include "kernels/ref/ref.h"
#include "tests/gpu/gpu_rand.h"
#include "tests/gpu/row_slices.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int n_rows;
int32_t row_pos[MAX_ROWS], row_seq[MAX_ROWS];
int seq_len[N_SEQ];
int rows_max_pos;
const char *rows_name = "";
int attn_mma;

void add_row(int seq, int pos) {
    row_seq[n_rows] = seq;
    row_pos[n_rows++] = pos;
}

int window_start(int pos, int window) {
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

/* Shuffled physical pages for every logical page; with window >= 0, pages wholly before lo of
 * their sequence are unmapped (-1). window < 0: every page mapped. */
void make_store(store *s, const cfg *c, int window) {
    s->max_pages = 0;
    int logical = 0;
    for (int q = 0; q < N_SEQ; q++) {
        int np = (seq_len[q] + PAGE_TOKENS - 1) / PAGE_TOKENS;
        if (np > s->max_pages) s->max_pages = np;
        logical += np;
    }
    s->max_pages += 2; /* a stride larger than any sequence needs */
    s->n_phys = logical + SPARE_PAGES;
    int *perm = malloc(sizeof(int) * (size_t)s->n_phys);
    for (int i = 0; i < s->n_phys; i++)
        perm[i] = i;
    for (int i = s->n_phys - 1; i > 0; i--) {
        int k = rnd_int(i + 1), t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
    }
    s->tables = malloc(sizeof(int32_t) * (size_t)(N_SEQ * s->max_pages));
    int next = 0;
    for (int q = 0; q < N_SEQ; q++) {
        s->lo[q] = seq_len[q];
        for (int r = 0; r < n_rows; r++)
            if (row_seq[r] == q && window_start(row_pos[r], window) < s->lo[q])
                s->lo[q] = window_start(row_pos[r], window);
        int np = (seq_len[q] + PAGE_TOKENS - 1) / PAGE_TOKENS;
        for (int p = 0; p < s->max_pages; p++) {
            int32_t *t = &s->tables[q * s->max_pages + p];
            *t = -1;
            if (p < np) *t = perm[next++];
            if (window >= 0 && (p + 1) * PAGE_TOKENS - 1 < s->lo[q]) *t = -1;
        }
    }
    free(perm);
    s->per_slot = (size_t)c->n_kv * (size_t)c->d;
    s->per_kv = PAGE_TOKENS * s->per_slot;
    s->per_page = N_LAYER * 2 * s->per_kv;
    s->elems = (size_t)s->n_phys * s->per_page;
}

k_kv_view view_of(const store *s, const cfg *c, void *base, const int32_t *tables) {
    k_kv_view v = {.base = base,
                   .page_tokens = PAGE_TOKENS,
                   .n_layer = N_LAYER,
                   .n_kv_head = c->n_kv,
                   .head_dim = c->d,
                   .elem_bytes = 2, /* the e4m3 runs set 1 */
                   .tables = tables,
                   .max_pages = s->max_pages};
    return v;
}

void compare(cmp *m, const bf16_t *out, const bf16_t *ref, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float o = ref_bf16_to_f32(out[i]), e = ref_bf16_to_f32(ref[i]);
        if (isnan(e)) {
            m->stray += !isnan(o);
            continue;
        }
        if (isnan(o)) {
            m->unwritten++;
            continue;
        }
        m->num += (double)(o - e) * (o - e);
        m->den += (double)e * e;
    }
}

double rel_of(const cmp *m) { return sqrt(m->num / (m->den > 0 ? m->den : 1)); }

const char *tag_of(const cfg *c, char *buf, size_t len) {
    snprintf(buf, len, "hd%d g%d%s%s", c->d, c->n_head / c->n_kv, c->k_eq_v ? " k=v" : "",
             attn_mma ? " mma" : "");
    return buf;
}

/* Random K/V where a row may read them, NaN everywhere else (layer 0, spare pages, slots
 * outside [lo, len) of each sequence). */
void fill_store(bf16_t *kv, const store *s, const cfg *c) {
    for (size_t i = 0; i < s->elems; i++)
        kv[i] = BF16_NAN;
    for (int q = 0; q < N_SEQ; q++)
        for (int p = 0; p < s->max_pages; p++) {
            int32_t page = s->tables[q * s->max_pages + p];
            if (page < 0) continue;
            for (int slot = 0; slot < PAGE_TOKENS; slot++) {
                int pos = p * PAGE_TOKENS + slot;
                if (pos < s->lo[q] || pos >= seq_len[q]) continue;
                for (int which = 0; which < 2; which++) {
                    size_t off = (size_t)page * s->per_page +
                                 (size_t)(KV_LAYER * 2 + which) * s->per_kv +
                                 (size_t)slot * s->per_slot;
                    fill_uniform(kv + off, s->per_slot, 1.7f,
                                 0.0f); /* rms ~1, as after the norms */
                }
            }
        }
    (void)c;
}

/* The case for seed over the current rows, uploaded with the store's tables. The draws go the
 * store, q, the K/V values: another order would give every seed another case. Nonzero if an
 * allocation or a copy failed; attn_case_free frees whatever exists. */
int attn_case_setup(attn_case *t, const cfg *c, int window, int fp8, uint64_t seed) {
    rng_state = seed;
    make_store(&t->s, c, window);
    t->qn = (size_t)n_rows * (size_t)c->n_head * (size_t)c->d;
    t->tb = sizeof(int32_t) * (size_t)(N_SEQ * t->s.max_pages);
    t->rb = sizeof(int32_t) * (size_t)n_rows;
    t->kv_bytes = fp8 ? t->s.elems : t->s.elems * 2;
    t->q = malloc(t->qn * 2);
    t->kv = malloc(t->s.elems * 2);
    if (t->q && t->kv) {
        /* scores of std ~2.3: a softmax neither flat nor one-hot over thousands of keys */
        fill_uniform(t->q, t->qn, 4.0f / sqrtf((float)c->d), 0.0f);
        fill_store(t->kv, &t->s, c);
    }
    /* fp8: the store holds the e4m3 of the same random values (NaN slots as 0x7f), both sides
     * read it as e4m3; the pass rule is the bf16 one, since both convert the same bytes
     * exactly. The same buffer holds the e4m3 bytes in its first half. */
    if (fp8 && t->kv)
        for (size_t i = 0; i < t->s.elems; i++)
            ((uint8_t *)t->kv)[i] = ref_f32_to_e4m3(ref_bf16_to_f32(t->kv[i]));
    t->dq = k_device_alloc(t->qn * 2);
    t->dout = k_device_alloc(t->qn * 2);
    t->dkv = k_device_alloc(t->kv_bytes); /* its own size: a read past the pool can fault */
    t->dt = k_device_alloc(t->tb);
    t->dpos = k_device_alloc(t->rb);
    t->dseq = k_device_alloc(t->rb);
    int rc = !t->q || !t->kv || !t->dq || !t->dout || !t->dkv || !t->dt || !t->dpos || !t->dseq;
    if (!rc)
        rc = k_copy_to_device(t->dq, t->q, t->qn * 2) |
             k_copy_to_device(t->dkv, t->kv, t->kv_bytes) |
             k_copy_to_device(t->dt, t->s.tables, t->tb) |
             k_copy_to_device(t->dpos, row_pos, t->rb) | k_copy_to_device(t->dseq, row_seq, t->rb);
    t->a = (k_attention_args){.out = t->dout,
                              .q = t->dq,
                              .pos = t->dpos,
                              .seq = t->dseq,
                              .kv = view_of(&t->s, c, t->dkv, t->dt),
                              .rows = n_rows,
                              .n_head = c->n_head,
                              .kv_layer = KV_LAYER,
                              .window = window};
    t->a.kv.elem_bytes = fp8 ? 1 : 2;
    return rc;
}

void attn_case_free(attn_case *t) {
    k_device_free(t->dq);
    k_device_free(t->dout);
    k_device_free(t->dkv);
    k_device_free(t->dt);
    k_device_free(t->dpos);
    k_device_free(t->dseq);
    free(t->q);
    free(t->kv);
    free(t->s.tables);
}

/* The reference's arguments for launch a of case t: its host copies of q, the rows and the
 * store, the output into ref. */
k_attention_args ref_args_of(const attn_case *t, const cfg *c, const k_attention_args *a,
                             bf16_t *ref) {
    k_attention_args ra = *a;
    ra.out = ref;
    ra.q = t->q;
    ra.pos = row_pos;
    ra.seq = row_seq;
    ra.kv = view_of(&t->s, c, t->kv, t->s.tables);
    ra.kv.elem_bytes = a->kv.elem_bytes;
    return ra;
}

/* ref_attention over rows [r0, r1) of the reference's arguments ctx */
static int ref_rows(const void *ctx, int r0, int r1) {
    const k_attention_args *ra = ctx;
    const size_t row = (size_t)ra->n_head * (size_t)ra->kv.head_dim;
    k_attention_args a = *ra;
    a.rows = r1 - r0;
    a.out = ra->out + (size_t)r0 * row;
    a.q = ra->q + (size_t)r0 * row;
    a.pos = ra->pos + r0;
    a.seq = ra->seq + r0;
    return ref_attention(&a, NULL);
}

/* A prompt gate's 150 rows at a window of 1,024 took the reference 3-14 s on one core. */
int ref_attention_rows(const k_attention_args *ra) {
    return run_row_slices(ra->rows, ref_rows, ra);
}

/* The launch at the current switches, output poisoned first; returns the elements that differ
 * from want (all of them if a call failed, *rc set). */
long strided_run(const k_attention_args *a, int spb, void *dout, bf16_t *got, const bf16_t *want,
                 size_t qn, int *rc) {
    k_attention_args sa = *a;
    sa.splits_per_block = spb;
    for (size_t i = 0; i < qn; i++)
        got[i] = BF16_NAN;
    *rc = k_copy_to_device(dout, got, qn * 2) | k_attention(&sa, NULL) | k_sync() |
          k_copy_to_host(got, dout, qn * 2);
    if (*rc) return (long)qn;
    long differ = 0;
    for (size_t i = 0; i < qn; i++)
        differ += got[i] != want[i];
    return differ;
}

/* The one-row blocks' bits (query tiles off) into want, which the op gates above hold to the
 * reference; returns the NaN elements among them. */
long one_row_bits(const k_attention_args *a, void *dout, bf16_t *want, size_t qn, int *rc) {
    long nan = 0;
    if (*rc) return 0;
    k_set_attn_query_tiles(0);
    (void)strided_run(a, 0, dout, want, want, qn, rc);
    for (size_t i = 0; i < qn && !*rc; i++)
        nan += isnan(ref_bf16_to_f32(want[i]));
    return nan;
}
