/* tests/gpu/test_attn.c - GPU gate: the attention prep and the paged attention core
 * (kernels/attn_prep.cu, attn.cu, attn_window.cu, attn_mma.cuh) against their CPU twins
 * ref_attn_prep and ref_attention, on fresh random inputs over a paged KV store with shuffled page
 * tables.
 *
 * The store has two layers (the ops use layer 1; layer 0 stays NaN, so a wrong layer stride
 * shows), page_tokens 16, and three sequences: A with a decode row at position 3000, B with
 * prefill rows 0..20, C with a decode row at position 100. Physical pages are a random
 * permutation, with a few spare pages never mapped. For attention, table entries of pages that
 * lie wholly before every window of their sequence are -1, and the K/V slots outside every
 * row's window (before the earliest window start, after the last position) are NaN: a kernel
 * that reads past the window or the causal edge turns its output NaN.
 *
 * Pass rule (docs/gates.md, op vs reference): ||out - ref|| / ||ref|| <= 1e-2 for bf16
 * outputs, for q and for the written K/V pages alike. Both sides round at the same points and
 * differ only in fp32 summation orders (and the last ulp of the device powf/cosf/sinf/expf), so
 * single elements may differ by one bf16 ulp (2^-8 relative) and the norm ratio stays well
 * under 1e-2. Outputs are poisoned with NaN first: no NaN may remain where the reference wrote,
 * and nothing may be written where it did not. */
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "tests/gpu/attn_case.h"
#include "tests/gpu/gpu_rand.h"
#include "tests/harness.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Two row sets. The first: B's prefill 0..20, A's decode at 3000, C's decode at 100 (ragged on
 * purpose). The second, a later prefill chunk: B's rows 980..1079 in two pieces, A's decode row
 * between them and C's after: a hundred rows on both sides of the window's edge (W = 1024) in
 * one launch, the shape of a prefill step. (The CPU reference's cost grows with rows x keys: a
 * longer chunk would add seconds, not cases.) */
/* chunk 0: decode-like rows; 1: a prefill chunk across the window's edge; 2: rows of 32
 * tiles (2,048 keys, a split a tile) beside the row at 3,000 (47 tiles, 24 splits of two), so
 * the grid must hold more splits than the longest row has; 3: a prompt of 300 rows (B's 0..299)
 * after C's row at 100, max_pos 299 (every grid of at most 5 splits, so the query tiles fold at
 * every window): blocks of several tiles of one sequence (serve.attn_flash), the first block
 * mixed, the last one ragged, a tile of fewer rows at its end */
static void make_rows(int chunk) {
    n_rows = 0;
    rows_max_pos = 0;
    rows_name = chunk == 1 ? " chunk" : chunk == 2 ? " 32-split rows" : "";
    seq_len[0] = 3001;
    seq_len[1] = chunk == 3 ? 300 : chunk == 2 ? 2048 : chunk ? 1080 : 21;
    seq_len[2] = 101;
    if (chunk == 3) {
        rows_max_pos = 299;
        rows_name = " prompt";
        add_row(2, 100);
        for (int p = 0; p < seq_len[1]; p++)
            add_row(1, p);
        return;
    }
    int first = chunk == 2 ? 2040 : chunk ? 980 : 0, mid = chunk == 2 ? 2044 : chunk ? 1010 : 21;
    for (int p = first; p < mid; p++)
        add_row(1, p);
    add_row(0, 3000);
    for (int p = mid; chunk && p < seq_len[1]; p++)
        add_row(1, p);
    add_row(2, 100);
}

/* ---- prep ---- */

/* The fp8 layout gates for the prep (docs/gates.md "fp8 layout"), after a bf16 prep run left
 * its K/V pages in kv_bf16: the same inputs through a one-byte store must write, in every slot
 * the bf16 run wrote, exactly the e4m3 of that bf16 value (round to nearest even, saturating),
 * nothing elsewhere (the poison 0x7f stays), and q exactly as the bf16 run. Against the CPU
 * reference's own e4m3 store the decoded values stay within the 1e-2 norm bound: a one-ulp bf16
 * difference (see the file comment) can move an e4m3 code by one step now and then. */
static void check_prep_fp8(const cfg *c, const store *s, const k_attn_prep_args *bf16_run,
                           const bf16_t *q0, const bf16_t *kv_bf16, k_attn_prep_args ra) {
    char gate[128], tag[48];
    snprintf(gate, sizeof gate, "fp8_layout_prep[gpu %s]", tag_of(c, tag, sizeof tag));
    size_t qn = (size_t)n_rows * (size_t)c->n_head * (size_t)c->d;
    uint8_t *kv8 = malloc(s->elems), *kv8_ref = malloc(s->elems);
    bf16_t *q8 = malloc(qn * 2), *q_bf16 = malloc(qn * 2), *q_ref = malloc(qn * 2);
    memset(kv8, 0x7f, s->elems);
    memset(kv8_ref, 0x7f, s->elems);
    void *dkv8 = k_device_alloc(s->elems);
    k_attn_prep_args a = *bf16_run;
    int rc = !dkv8 || k_copy_to_host(q_bf16, a.q, qn * 2) ||
             k_copy_to_device((void *)a.q, q0, qn * 2) || k_copy_to_device(dkv8, kv8, s->elems);
    a.kv.base = dkv8;
    a.kv.elem_bytes = 1;
    if (!rc)
        rc = k_attn_prep(&a, NULL) | k_sync() | k_copy_to_host(kv8, dkv8, s->elems) |
             k_copy_to_host(q8, a.q, qn * 2);
    long mismatch = 0, written = 0, stray = 0, q_diff = 0;
    for (size_t i = 0; i < s->elems; i++) {
        float b = ref_bf16_to_f32(kv_bf16[i]);
        if (isnan(b)) {
            stray += kv8[i] != 0x7f;
            continue;
        }
        written++;
        mismatch += kv8[i] != ref_f32_to_e4m3(b);
    }
    for (size_t i = 0; i < qn; i++)
        q_diff += q8[i] != q_bf16[i];
    memcpy(q_ref, q0, qn * 2);
    ra.q = q_ref;
    ra.kv.base = kv8_ref;
    ra.kv.elem_bytes = 1;
    int rrc = ref_attn_prep(&ra, NULL);
    double num = 0, den = 0;
    for (size_t i = 0; i < s->elems; i++) {
        float o = ref_e4m3_to_f32(kv8[i]), e = ref_e4m3_to_f32(kv8_ref[i]);
        if (isnan(o) || isnan(e)) continue;
        num += (double)(o - e) * (o - e);
        den += (double)e * e;
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    TEST_CHECK(
        gate,
        rc == 0 && rrc == 0 && written > 0 && mismatch == 0 && stray == 0 && q_diff == 0 &&
            rel <= 1e-2,
        "%ld K/V elements written, %ld not the e4m3 of the bf16 run (exact rule), %ld stray, "
        "q differing %ld; vs the CPU e4m3 store rel err %.2e (limit 1e-2); rc %d/%d",
        written, mismatch, stray, q_diff, rel, rc, rrc);
    k_device_free(dkv8);
    free(kv8);
    free(kv8_ref);
    free(q8);
    free(q_bf16);
    free(q_ref);
}

/* A prep case: random q, k, v and norm weights on the rows make_rows chose, over a store for a
 * window of 1,024, their device copies and the args; the caller uploads q and the K/V store
 * (each gate starts them its own way). rc != 0 when an allocation or a copy failed. */
typedef struct prep_case {
    store s;
    size_t qn, kn, tb, rb;
    bf16_t *q, *k, *v, *qw, *kw; /* v is k where k = v */
    void *dq, *dk, *dv, *dqw, *dkw, *dkv, *dt, *dpos, *dseq;
    k_attn_prep_args a;
} prep_case;

static int prep_case_setup(prep_case *t, const cfg *c, int write_kv, int kv_width, uint64_t seed) {
    const size_t d = (size_t)c->d;
    rng_state = seed;
    make_store(&t->s, c, 1024);
    t->qn = (size_t)n_rows * (size_t)c->n_head * d;
    t->kn = (size_t)n_rows * (size_t)c->n_kv * d;
    t->tb = sizeof(int32_t) * (size_t)(N_SEQ * t->s.max_pages);
    t->rb = sizeof(int32_t) * (size_t)n_rows;
    t->q = malloc(t->qn * 2);
    t->k = malloc(t->kn * 2);
    t->v = c->k_eq_v ? t->k : malloc(t->kn * 2);
    t->qw = malloc(d * 2);
    t->kw = malloc(d * 2);
    int rc = !t->q || !t->k || !t->v || !t->qw || !t->kw;
    if (!rc) {
        fill_uniform(t->q, t->qn, 3.0f, 0.0f);
        fill_uniform(t->k, t->kn, 3.0f, 0.0f);
        if (!c->k_eq_v) fill_uniform(t->v, t->kn, 3.0f, 0.5f);
        fill_uniform(t->qw, d, 0.5f, 1.0f);
        fill_uniform(t->kw, d, 0.5f, 1.0f);
    }
    t->dq = k_device_alloc(t->qn * 2);
    t->dk = k_device_alloc(t->kn * 2);
    t->dv = k_device_alloc(t->kn * 2);
    t->dqw = k_device_alloc(d * 2);
    t->dkw = k_device_alloc(d * 2);
    t->dkv = k_device_alloc(t->s.elems * (size_t)kv_width); /* 2: bf16 pool, 1: e4m3 */
    t->dt = k_device_alloc(t->tb);
    t->dpos = k_device_alloc(t->rb);
    t->dseq = k_device_alloc(t->rb);
    rc = rc || !t->dq || !t->dk || !t->dv || !t->dqw || !t->dkw || !t->dkv || !t->dt || !t->dpos ||
         !t->dseq;
    if (!rc)
        rc = k_copy_to_device(t->dk, t->k, t->kn * 2) | k_copy_to_device(t->dv, t->v, t->kn * 2) |
             k_copy_to_device(t->dqw, t->qw, d * 2) | k_copy_to_device(t->dkw, t->kw, d * 2) |
             k_copy_to_device(t->dt, t->s.tables, t->tb) |
             k_copy_to_device(t->dpos, row_pos, t->rb) | k_copy_to_device(t->dseq, row_seq, t->rb);
    t->a = (k_attn_prep_args){.q = t->dq,
                              .k_raw = t->dk,
                              .v_raw = c->k_eq_v ? t->dk : t->dv,
                              .q_norm = t->dqw,
                              .k_norm = t->dkw,
                              .pos = t->dpos,
                              .seq = t->dseq,
                              .kv = view_of(&t->s, c, t->dkv, t->dt),
                              .rows = n_rows,
                              .n_head = c->n_head,
                              .kv_layer = KV_LAYER,
                              .write_kv = write_kv,
                              .n_rot = c->n_rot,
                              .rope_base = c->base,
                              .eps = 1e-6f};
    return rc;
}

static void prep_case_free(prep_case *t) {
    void *dev[] = {t->dq, t->dk, t->dv, t->dqw, t->dkw, t->dkv, t->dt, t->dpos, t->dseq};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        k_device_free(dev[i]);
    if (t->v != t->k) free(t->v);
    free(t->q), free(t->k), free(t->qw), free(t->kw), free(t->s.tables);
}

static void run_prep(const cfg *c, int write_kv, uint64_t seed) {
    char gate[128], tag[48];
    snprintf(gate, sizeof gate, "op_vs_ref[attn_prep %s kv%d]", tag_of(c, tag, sizeof tag),
             write_kv);
    prep_case t;
    int rc = prep_case_setup(&t, c, write_kv, 2, seed);
    const size_t qn = t.qn, elems = t.s.elems;
    bf16_t *q = malloc(qn * 2), *q_ref = malloc(qn * 2), *q0 = malloc(qn * 2);
    bf16_t *kv = malloc(elems * 2), *kv_ref = malloc(elems * 2);
    rc = rc || !q || !q_ref || !q0 || !kv || !kv_ref;
    if (!rc) {
        memcpy(q, t.q, qn * 2);
        memcpy(q_ref, t.q, qn * 2);
        memcpy(q0, t.q, qn * 2);
        for (size_t i = 0; i < elems; i++)
            kv[i] = kv_ref[i] = BF16_NAN;
        rc = k_copy_to_device(t.dq, q, qn * 2) | k_copy_to_device(t.dkv, kv, elems * 2);
    }
    k_attn_prep_args a = t.a;
    if (!rc)
        rc = k_attn_prep(&a, NULL) | k_sync() | k_copy_to_host(q, t.dq, qn * 2) |
             k_copy_to_host(kv, t.dkv, elems * 2);
    k_attn_prep_args ra = a;
    ra.q = q_ref;
    ra.k_raw = t.k;
    ra.v_raw = t.v;
    ra.q_norm = t.qw;
    ra.k_norm = t.kw;
    ra.pos = row_pos;
    ra.seq = row_seq;
    ra.kv = view_of(&t.s, c, kv_ref, t.s.tables);
    int rrc = rc ? -1 : ref_attn_prep(&ra, NULL); /* not on inputs that failed to exist */

    cmp mq = {0}, mkv = {0};
    if (!rc) {
        compare(&mq, q, q_ref, qn);
        compare(&mkv, kv, kv_ref, elems);
    }
    double rq = rel_of(&mq), rkv = rel_of(&mkv);
    TEST_CHECK(gate,
               rc == 0 && rrc == 0 && rq <= 1e-2 && rkv <= 1e-2 && mq.unwritten == 0 &&
                   mkv.unwritten == 0 && mkv.stray == 0,
               "q rel err %.2e, K/V rel err %.2e (limit 1e-2), unwritten q %ld K/V %ld, stray "
               "K/V writes %ld, rc %d ref rc %d",
               rq, rkv, mq.unwritten, mkv.unwritten, mkv.stray, rc, rrc);
    if (write_kv && rc == 0) check_prep_fp8(c, &t.s, &a, q0, kv, ra);
    free(q0), free(q), free(q_ref), free(kv), free(kv_ref);
    prep_case_free(&t);
}

/* serve.attn_prep_rows: the warp form against the block form, every bit of q and of the K/V
 * store (poison where neither writes), on a 301-row prompt (launches under 64 rows keep the block
 * form), both pools, and q alone (write_kv 0: the layers that read another layer's K/V). */
static void run_prep_rows(const cfg *c, int write_kv, int fp8, uint64_t seed) {
    char gate[128], tag[48];
    make_rows(3);
    snprintf(gate, sizeof gate, "attn_prep_rows[%s%s kv%d %d rows]", tag_of(c, tag, sizeof tag),
             fp8 ? " e4m3" : "", write_kv, n_rows);
    prep_case t;
    int rc = prep_case_setup(&t, c, write_kv, fp8 ? 1 : 2, seed);
    const size_t qn = t.qn, kv_bytes = fp8 ? t.s.elems : t.s.elems * 2;
    bf16_t *q_out[2] = {malloc(qn * 2), malloc(qn * 2)};
    uint8_t *kv0 = malloc(kv_bytes), *kv_out[2] = {malloc(kv_bytes), malloc(kv_bytes)};
    rc = rc || !q_out[0] || !q_out[1] || !kv0 || !kv_out[0] || !kv_out[1];
    if (kv0) memset(kv0, 0x7f, kv_bytes); /* a NaN in either width: what no slot written keeps */
    k_attn_prep_args a = t.a;
    a.kv.elem_bytes = fp8 ? 1 : 2;
    for (int form = 0; form < 2 && !rc; form++) { /* 0: a block a head; 1: the warp form */
        k_set_attn_prep_rows(form);
        rc = k_copy_to_device(t.dq, t.q, qn * 2) | k_copy_to_device(t.dkv, kv0, kv_bytes);
        if (!rc)
            rc = k_attn_prep(&a, NULL) | k_sync() | k_copy_to_host(q_out[form], t.dq, qn * 2) |
                 k_copy_to_host(kv_out[form], t.dkv, kv_bytes);
    }
    k_set_attn_prep_rows(1); /* the default */
    long q_diff = 0, kv_diff = 0, written = 0;
    if (!rc) {
        q_diff = (long)qn;
        for (size_t i = 0; i < qn; i++)
            q_diff -= q_out[0][i] == q_out[1][i];
        for (size_t i = 0; i < kv_bytes; i++) {
            kv_diff += kv_out[0][i] != kv_out[1][i];
            written += kv_out[0][i] != 0x7f;
        }
    }
    TEST_CHECK(gate, rc == 0 && q_diff == 0 && kv_diff == 0 && (written > 0) == (write_kv != 0),
               "%ld q elements and %ld K/V bytes differ between a block a head and the warp form "
               "(must be bit-identical; %ld K/V bytes written, none without write_kv), rc %d",
               q_diff, kv_diff, written, rc);
    free(q_out[0]), free(q_out[1]), free(kv0), free(kv_out[0]), free(kv_out[1]);
    prep_case_free(&t);
}

/* ---- attention ---- */

/* Output elements of four launches of *a with a speed-only switch on (set(1) before, set(0)
 * after) that differ from out: at the launcher's choice of splits a block, at 1 and at 16, and at
 * the launcher's choice with the combine in a launch of its own. Each launch's output is
 * poisoned first; *rc gets the calls' status (a failed launch ends the run). */
static long differ_with_switch(const k_attention_args *a, void (*set)(int), void *dout,
                               bf16_t *again, const bf16_t *out, size_t qn, int *rc) {
    static const int spb[] = {0, 1, 16, 0};
    long differ = 0;
    set(1);
    for (size_t f = 0; f < sizeof spb / sizeof spb[0] && !*rc; f++) {
        k_attention_args sa = *a;
        sa.splits_per_block = spb[f];
        for (size_t i = 0; i < qn; i++)
            again[i] = BF16_NAN;
        if (f == 3) k_set_attn_fold(0);
        *rc = k_copy_to_device(dout, again, qn * 2) | k_attention(&sa, NULL) | k_sync() |
              k_copy_to_host(again, dout, qn * 2);
        k_set_attn_fold(1);
        for (size_t i = 0; i < qn; i++)
            differ += again[i] != out[i];
    }
    set(0);
    return differ;
}

/* serve.attn_flash with what it runs under: the query tiles from one row, folded (off: all
 * three off, as main leaves them) */
static void set_flash_tiles(int on) {
    k_set_attn_query_tiles(on ? 1 : 0);
    k_set_attn_tile_fold(on);
    k_set_attn_flash(on);
}

static void run_attention(const cfg *c, int window, uint64_t seed, int fp8) {
    char gate[128], tag[48];
    snprintf(gate, sizeof gate, "op_vs_ref[attention %s w%d%s%s]", tag_of(c, tag, sizeof tag),
             window, fp8 ? " e4m3" : "", rows_name);
    attn_case t;
    int rc = attn_case_setup(&t, c, window, fp8, seed);
    const size_t qn = t.qn;
    void *const dout = t.dout;
    bf16_t *out = malloc(qn * 2), *ref = malloc(qn * 2);
    for (size_t i = 0; i < qn; i++)
        out[i] = ref[i] = BF16_NAN;
    if (!rc) rc = k_copy_to_device(dout, out, qn * 2);
    k_attention_args a = t.a;
    /* the host's bound on pos (3000 is the largest row), or the table's */
    a.max_pos = rows_max_pos ? rows_max_pos : window == 1024 ? 3000 : 0;
    if (!rc) rc = k_attention(&a, NULL) | k_sync() | k_copy_to_host(out, dout, qn * 2);
    k_attention_args ra = ref_args_of(&t, c, &a, ref);
    int rrc = t.q && t.kv ? ref_attention_rows(&ra) : -1;

    /* the same launch with a block per split (the layout before blocks took several), then
     * with 2, 3 and 16 splits a block: every output bit must equal the launcher's own choice
     * (which varies with the card's SM count and these shapes, 1 to 16) */
    static const int forced[] = {1, 2, 3, 16};
    long differ = 0;
    bf16_t *again = malloc(qn * 2);
    if (!again) rc = 1;
    for (size_t f = 0; f < sizeof forced / sizeof forced[0] && !rc; f++) {
        k_attention_args fa = a;
        fa.splits_per_block = forced[f];
        for (size_t i = 0; i < qn; i++)
            again[i] = BF16_NAN;
        rc = k_copy_to_device(dout, again, qn * 2) | k_attention(&fa, NULL) | k_sync() |
             k_copy_to_host(again, dout, qn * 2);
        for (size_t i = 0; i < qn; i++)
            differ += again[i] != out[i];
    }
    char sgate[160];
    snprintf(sgate, sizeof sgate, "%s splits per block", gate);
    TEST_CHECK(sgate, rc == 0 && differ == 0,
               "%ld output elements differ between the launcher's choice and 1, 2, 3 or 16 "
               "splits a block (must be bit-identical), rc %d",
               differ, rc);
    /* the combine in a launch of its own (serve.attn_fold = 0) against the launches above,
     * which fold it into the P.V pass where the launch is decode-sized (with 1 to 16 splits a
     * block, so 1 to 32 blocks counting into a row's counter): the same bits */
    long fold_differ = 0;
    const int folded = (long long)n_rows * c->n_kv <= K_ATTN_FOLD_PAIRS &&
                       c->n_head / c->n_kv * c->d <= K_ATTN_FOLD_HEAD_ELEMS;
    if (!rc && again) {
        for (size_t i = 0; i < qn; i++)
            again[i] = BF16_NAN;
        k_set_attn_fold(0);
        rc = k_copy_to_device(dout, again, qn * 2) | k_attention(&a, NULL) | k_sync() |
             k_copy_to_host(again, dout, qn * 2);
        k_set_attn_fold(1);
        for (size_t i = 0; i < qn; i++)
            fold_differ += again[i] != out[i];
    }
    snprintf(sgate, sizeof sgate, "%s combine folded", gate);
    TEST_CHECK(sgate, rc == 0 && fold_differ == 0,
               "%ld output elements differ between the combine folded into the P.V pass "
               "(%s for these %d rows and this group) and its own launch (must be "
               "bit-identical), rc %d",
               fold_differ, folded ? "taken" : "not taken", n_rows, rc);
    /* query tiles (serve.attn_query_tiles, the tensor-core passes only): consecutive rows of one
     * sequence whose key tiles start at key 0 share a block, the others take theirs in turn; every
     * output bit must equal the one-row blocks' above */
    long tiles_differ = 0;
    if (!rc && again && attn_mma) {
        for (size_t i = 0; i < qn; i++)
            again[i] = BF16_NAN;
        k_set_attn_query_tiles(1);
        rc = k_copy_to_device(dout, again, qn * 2) | k_attention(&a, NULL) | k_sync() |
             k_copy_to_host(again, dout, qn * 2);
        k_set_attn_query_tiles(0);
        for (size_t i = 0; i < qn; i++)
            tiles_differ += again[i] != out[i];
        snprintf(sgate, sizeof sgate, "%s query tiles", gate);
        TEST_CHECK(sgate, rc == 0 && tiles_differ == 0,
                   "%ld output elements differ between query tiles of %d rows and a block per row "
                   "(must be bit-identical), rc %d",
                   tiles_differ, 16 / (c->n_head / c->n_kv), rc);
        /* the query tiles' speed-only forms, each and together: the blocks in reverse order
         * (serve.attn_longest_first), a warp's rows' statistics side by side
         * (serve.attn_stats_together) and the splits combined in the P.V pass
         * (serve.attn_tile_fold: where the grid's splits are at most 16, as on the windowed
         * cases, whose row at 3,000 has 16; the others keep the combine launch, which the fold
         * count checks); the same bits as the one-row blocks */
        /* serve.attn_flash: the folded passes of head dim 256 as one launch of several tiles a
         * block (the blocks whose rows do not all share, the folded passes tile after tile) */
        static const struct {
            const char *name;
            int longest, together, fold, flash;
        } tile_forms[] = {
            {"longest first", 1, 0, 0, 0},   {"stats together", 0, 1, 0, 0},
            {"tile fold", 0, 0, 1, 0},       {"longest first stats together tile fold", 1, 1, 1, 0},
            {"tile fold flash", 0, 0, 1, 1}, {"longest first tile fold flash", 1, 0, 1, 1}};
        /* a.max_pos 3000, or the prompt's 299 */
        const int grid_splits16 = rows_max_pos > 0 || (window > 0 && window <= 1024);
        /* a launch takes the tiles from 16 rows (k_attention): the 10 rows of the 32-split
         * case never do, so there the forms have nothing to show */
        const int want_tiles = n_rows >= 16 && c->n_head / c->n_kv < 16;
        for (size_t f = 0; f < sizeof tile_forms / sizeof tile_forms[0]; f++) {
            snprintf(sgate, sizeof sgate, "%s %s", gate, tile_forms[f].name);
            if (!want_tiles) {
                test_skip(sgate, "skipped: %d rows or group %d: no query tiles to run", n_rows,
                          c->n_head / c->n_kv);
                continue;
            }
            const long long launches0 = k_attn_tile_launches();
            const long long flashes0 = k_attn_flash_launches();
            long form_differ = 0;
            for (size_t i = 0; i < qn; i++)
                again[i] = BF16_NAN;
            const long long folds0 = k_attn_tile_folds();
            k_set_attn_query_tiles(1);
            k_set_attn_longest_first(tile_forms[f].longest);
            k_set_attn_stats_together(tile_forms[f].together);
            k_set_attn_tile_fold(tile_forms[f].fold);
            k_set_attn_flash(tile_forms[f].flash);
            if (!rc)
                rc = k_copy_to_device(dout, again, qn * 2) | k_attention(&a, NULL) | k_sync() |
                     k_copy_to_host(again, dout, qn * 2);
            k_set_attn_longest_first(0);
            k_set_attn_stats_together(0);
            k_set_attn_tile_fold(0);
            k_set_attn_flash(0);
            k_set_attn_query_tiles(0);
            const int tiles_folded = k_attn_tile_folds() > folds0;
            const int tiled = k_attn_tile_launches() > launches0;
            const int flashed = k_attn_flash_launches() > flashes0;
            const int want_fold = tile_forms[f].fold && grid_splits16;
            const int want_flash = tile_forms[f].flash && want_fold && c->d == 256;
            for (size_t i = 0; i < qn; i++)
                form_differ += again[i] != out[i];
            TEST_CHECK(sgate,
                       rc == 0 && form_differ == 0 && tiled && tiles_folded == want_fold &&
                           flashed == want_flash,
                       "%ld output elements differ between query tiles (%s) and a block per row "
                       "(must be bit-identical); tiles ran %d; folded %d where %d was expected; "
                       "flash launches %d where %d was expected, rc %d",
                       form_differ, tile_forms[f].name, tiled, tiles_folded, want_fold, flashed,
                       want_flash, rc);
        }
        /* the fold where every case can take it: the leading rows of sequence 1 alone (30 rows
         * below position 1,024 in the prefill-chunk case), max_pos their last, so that the global
         * layers' grid has 16 splits too; a padding row (pos -1) among them */
        int lead = 0;
        while (lead < n_rows && row_seq[lead] == 1)
            lead++;
        if (!rc && lead >= 4 && row_pos[lead - 1] < 1024 && c->n_head / c->n_kv < 16) {
            const size_t ln = (size_t)lead * (size_t)c->n_head * (size_t)c->d;
            int32_t pad = -1, keep_pos = row_pos[2];
            k_attention_args b = a;
            b.rows = lead;
            b.max_pos = row_pos[lead - 1];
            long lead_differ = 0, pad_bad = 0;
            bf16_t *res[2] = {malloc(ln * 2), malloc(ln * 2)}; /* the combine launch's, folded */
            long long folds[2] = {0, 0};
            for (int fold = 0; fold < 2 && !rc && res[0] && res[1]; fold++) {
                for (size_t i = 0; i < ln; i++)
                    res[fold][i] = (bf16_t)(BF16_NAN | 1u); /* a NaN the kernels never write */
                const long long folds0 = k_attn_tile_folds();
                k_set_attn_query_tiles(1);
                k_set_attn_tile_fold(fold);
                /* row 2 a padding row: its tile takes its rows in turn, row 2 written NaN */
                rc = k_copy_to_device((int32_t *)a.pos + 2, &pad, 4) |
                     k_copy_to_device(dout, res[fold], ln * 2) | k_attention(&b, NULL) | k_sync() |
                     k_copy_to_host(res[fold], dout, ln * 2);
                k_set_attn_tile_fold(0);
                k_set_attn_query_tiles(0);
                folds[fold] = k_attn_tile_folds() - folds0;
                rc |= k_copy_to_device((int32_t *)a.pos + 2, &keep_pos, 4);
            }
            if (!res[0] || !res[1]) rc = -1;
            const size_t row = (size_t)c->n_head * (size_t)c->d;
            for (size_t i = 0; !rc && i < ln; i++) {
                lead_differ += res[1][i] != res[0][i];
                pad_bad += i >= 2 * row && i < 3 * row && res[1][i] != (bf16_t)BF16_NAN;
            }
            free(res[0]);
            free(res[1]);
            const int ran = folds[0] == 0 && folds[1] > 0; /* the fold ran where asked, only */
            snprintf(sgate, sizeof sgate, "%s tile fold lead rows", gate);
            TEST_CHECK(sgate, rc == 0 && lead_differ == 0 && pad_bad == 0 && ran,
                       "%ld output elements differ between the folded tiles and the combine "
                       "launch over the %d leading rows, %ld of the padding row's not NaN, fold "
                       "launches %lld unfolded / %lld folded, rc %d",
                       lead_differ, lead, pad_bad, folds[0], folds[1], rc);
        }
    }
    /* the tensor-core passes' speed-only forms (differ_with_switch): every output bit must
     * equal the launches' above, at the launcher's choice, at 1 and 16 splits a block, and with
     * the combine in a launch of its own.
     * - e4m3: the mma operands built from the staged rows as loaded (serve.attn_fp8_frags)
     *   against units widened first;
     * - every case: the first units' page-table look-ups before the wait on the grid before
     *   (serve.attn_early_lookup), with the stats pass still running under programmatic
     *   dependent launch, against after it;
     * - every case: the folded query tiles of head dim 256 as one launch (serve.attn_flash,
     *   set_flash_tiles), which must have run where the launch takes folded tiles (at least 16
     *   rows, a group under 16, at most 16 splits in the grid: at 1 split a block the grid is
     *   wider and keeps the two passes) against the one-row blocks. */
    const int flash_runs = c->d == 256 && n_rows >= 16 && c->n_head / c->n_kv < 16 &&
                           (rows_max_pos > 0 || (window > 0 && window <= 1024));
    const struct {
        const char *name, *what;
        void (*set)(int);
        int applies;
        long long (*count)(void); /* launches that took the form, where it must have run */
        int want;
    } forms[] = {
        {"fp8 fragments", "e4m3 operands built as loaded and units widened first",
         k_set_attn_fp8_frags, fp8, NULL, 0},
        {"early lookup", "page-table look-ups before the wait on the grid before and after it",
         k_set_attn_early_lookup, 1, NULL, 0},
        {"flash",
         "the folded query tiles in one launch of several tiles a block and a block per "
         "row",
         set_flash_tiles, 1, k_attn_flash_launches, flash_runs},
    };
    for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++) {
        if (rc || !again || !attn_mma || !forms[k].applies) continue;
        const long long ran0 = forms[k].count ? forms[k].count() : 0;
        const long form_differ = differ_with_switch(&a, forms[k].set, dout, again, out, qn, &rc);
        const int ran = forms[k].count && forms[k].count() > ran0;
        snprintf(sgate, sizeof sgate, "%s %s", gate, forms[k].name);
        TEST_CHECK(sgate, rc == 0 && form_differ == 0 && (!forms[k].count || ran == forms[k].want),
                   "%ld output elements differ between %s, over 4 launches (must be "
                   "bit-identical); ran %d where %d was expected, rc %d",
                   form_differ, forms[k].what, ran, forms[k].count ? forms[k].want : 0, rc);
    }
    free(again);

    cmp m = {0};
    compare(&m, out, ref, qn);
    long ref_nan = 0;
    for (size_t i = 0; i < qn; i++)
        ref_nan += isnan(ref_bf16_to_f32(ref[i]));
    double rel = rel_of(&m);
    TEST_CHECK(gate, rc == 0 && rrc == 0 && rel <= 1e-2 && m.unwritten == 0 && ref_nan == 0,
               "rel err %.2e (limit 1e-2), unwritten %ld, NaN in ref %ld, rc %d ref rc %d", rel,
               m.unwritten, ref_nan, rc, rrc);
    attn_case_free(&t);
    free(out);
    free(ref);
}

/* The NaN paths of the folded combine against the combine's own launch (serve.attn_fold 1 and
 * 0), and of the other speed forms below:
 * a padding row (pos -1, present in every case), a row past the grid the host sized (max_pos
 * 500 without a window: a grid of 8 splits, where the row at 3,000 has 24; max_pos 700 at a
 * window of 1,024: 11 splits against its 16; not at the window of 8, where every row has one
 * split) and a row that meets an unmapped page. The engine never passes the last two; the
 * kernels answer them with NaN rather than wrong numbers. Outputs are poisoned with 48.5 (beyond
 * any weighted mean of these V values), so a row left unwritten shows. Rule: every launch
 * bit-identical to the combine's own; the padding row and the row named all NaN, every other
 * row written and free of NaN. */
static void run_fold_nan_paths(const cfg *c, int window, int fp8, uint64_t seed) {
    static const char *const names[] = {"padding row", "row past the grid", "unmapped page"};
    const bf16_t poison = 0x4242u;
    make_rows(0);
    add_row(2, -1);
    attn_case t;
    int setup = attn_case_setup(&t, c, window, fp8, seed);
    const size_t qn = t.qn, per_row = (size_t)c->n_head * (size_t)c->d;
    void *const dout = t.dout;
    bf16_t *out[5] = {malloc(qn * 2), malloc(qn * 2), malloc(qn * 2), malloc(qn * 2),
                      malloc(qn * 2)};
    if (!setup) setup = !out[0] || !out[1] || !out[2] || !out[3] || !out[4];
    for (int kase = 0; kase < 3; kase++) {
        if (kase == 1 && window && window < 1024) continue;
        int named = -1, pad = -1;
        for (int r = 0; r < n_rows; r++) {
            if (row_pos[r] < 0) pad = r;
            if ((kase == 0 && row_pos[r] < 0) || (kase == 1 && row_pos[r] == 3000) ||
                (kase == 2 && row_seq[r] == 2 && row_pos[r] == 100))
                named = r;
        }
        int rc = setup;
        if (!rc && kase == 2) { /* the last case: the store's tables need not come back */
            t.s.tables[2 * t.s.max_pages + 2] = -1; /* C's keys 32..47 */
            rc = k_copy_to_device(t.dt, t.s.tables, t.tb);
        }
        k_attention_args a = t.a;
        /* the grid's splits: 8 without a window, 11 at W 1,024, where the row at 3,000 has 24
         * or 16 */
        a.max_pos = kase == 1 ? (window ? 700 : 500) : 0;
        /* f: 0 the combine's own launch, 1 folded, 2 folded with the mma operands built as
         * loaded (e4m3: serve.attn_fp8_frags) and with the page-table look-ups before the grid
         * wait (serve.attn_early_lookup: the NaN paths' early ends wait too), which only the
         * tensor-core passes read; 3 on the query tiles with their splits combined in the P.V
         * pass (serve.attn_tile_fold), which must fold where the grid has at most 16 splits (the
         * row past the grid's case, and the window of 1,024); 4 as 3 with the folded passes in
         * one launch (serve.attn_flash), which must run where 3 folds at head dim 256 */
        const int nf = 5;
        long long tile_folds = 0, flashes = 0;
        for (int f = 0; f < nf && !rc; f++) {
            for (size_t i = 0; i < qn; i++)
                out[f][i] = poison;
            const long long folds0 = k_attn_tile_folds(), flashes0 = k_attn_flash_launches();
            k_set_attn_query_tiles(f >= 3 ? 1 : 0);
            k_set_attn_tile_fold(f >= 3);
            k_set_attn_flash(f == 4);
            k_set_attn_fold(f > 0);
            k_set_attn_fp8_frags(f == 2 && fp8);
            k_set_attn_early_lookup(f == 2);
            rc = k_copy_to_device(dout, out[f], qn * 2) | k_attention(&a, NULL) | k_sync() |
                 k_copy_to_host(out[f], dout, qn * 2);
            if (f == 3) tile_folds = k_attn_tile_folds() - folds0;
            if (f == 4) flashes = k_attn_flash_launches() - flashes0;
        }
        k_set_attn_query_tiles(0);
        k_set_attn_tile_fold(0);
        k_set_attn_flash(0);
        /* the query tiles run on the tensor-core passes only: with attn_mma off the fourth
         * variant takes the one-row blocks, and nothing folds */
        const int want_fold = attn_mma && (kase == 1 || window == 1024) && c->n_head / c->n_kv < 16;
        const int want_flash = want_fold && c->d == 256;
        k_set_attn_fold(1);
        k_set_attn_fp8_frags(0);
        k_set_attn_early_lookup(0);
        long differ = 0, named_number = 0, other_bad = 0;
        for (size_t i = 0; i < qn && !rc; i++)
            for (int f = 1; f < nf; f++) {
                differ += out[0][i] != out[f][i];
                const float v = ref_bf16_to_f32(out[f][i]);
                const int row = (int)(i / per_row);
                if (row == named || row == pad)
                    named_number += !isnan(v);
                else
                    other_bad += isnan(v) || out[f][i] == poison;
            }
        char gate[160], tag[48];
        snprintf(gate, sizeof gate, "attn_fold_nan_paths[gpu %s w%d%s %s]",
                 tag_of(c, tag, sizeof tag), window, fp8 ? " e4m3" : "", names[kase]);
        TEST_CHECK(gate,
                   rc == 0 && named >= 0 && differ == 0 && named_number == 0 && other_bad == 0 &&
                       (tile_folds > 0) == want_fold && (flashes > 0) == want_flash,
                   "%ld elements differ folded, with the operands built as loaded (e4m3) and "
                   "the look-ups before the grid wait, or on folded query tiles, in two launches "
                   "or one, vs own launch (must be bit-identical); row %d and the padding row: "
                   "%ld elements not NaN (must all be); other rows: %ld NaN or unwritten; tiles "
                   "folded %lld times where %d was expected, flash launches %lld where %d; rc %d",
                   differ, named, named_number, other_bad, tile_folds, want_fold, flashes,
                   want_flash, rc);
    }
    attn_case_free(&t);
    for (int f = 0; f < 5; f++)
        free(out[f]);
}

/* The flash pass's NaN path (serve.attn_flash): the 300-row prompt with B's keys 64..79
 * unmapped, so that blocks on the flash pass meet an unmapped key in their second split. Rule:
 * bit-identical to the one-row blocks and their combine; B's rows from position 64 all NaN, every
 * other row written and free of NaN; the flash pass ran (head dim 256). */
static void run_flash_unmapped(const cfg *c, int window, int fp8, uint64_t seed) {
    const bf16_t poison = 0x4242u;
    make_rows(3);
    attn_case t;
    int rc = attn_case_setup(&t, c, window, fp8, seed);
    const size_t qn = t.qn, per_row = (size_t)c->n_head * (size_t)c->d;
    void *const dout = t.dout;
    bf16_t *out[2] = {malloc(qn * 2), malloc(qn * 2)};
    if (!rc) rc = !out[0] || !out[1];
    if (!rc) { /* after the draws: the page's keys are drawn as if it were mapped */
        t.s.tables[1 * t.s.max_pages + 64 / PAGE_TOKENS] = -1; /* B's keys 64..79 */
        rc = k_copy_to_device(t.dt, t.s.tables, t.tb);
    }
    k_attention_args a = t.a;
    a.max_pos = rows_max_pos;
    long long flashes = 0;
    for (int f = 0; f < 2 && !rc; f++) { /* 0: a block per row; 1: the flash pass */
        for (size_t i = 0; i < qn; i++)
            out[f][i] = poison;
        const long long flashes0 = k_attn_flash_launches();
        set_flash_tiles(f);
        rc = k_copy_to_device(dout, out[f], qn * 2) | k_attention(&a, NULL) | k_sync() |
             k_copy_to_host(out[f], dout, qn * 2);
        set_flash_tiles(0);
        if (f == 1) flashes = k_attn_flash_launches() - flashes0;
    }
    long differ = 0, nan_number = 0, other_bad = 0;
    for (size_t i = 0; i < qn && !rc; i++) {
        const int row = (int)(i / per_row);
        const int nan_row = row_seq[row] == 1 && row_pos[row] >= 64;
        differ += out[0][i] != out[1][i];
        const float v = ref_bf16_to_f32(out[1][i]);
        if (nan_row)
            nan_number += !isnan(v);
        else
            other_bad += isnan(v) || out[1][i] == poison;
    }
    char gate[160], tag[48];
    snprintf(gate, sizeof gate, "attn_flash_unmapped[gpu %s w%d%s]", tag_of(c, tag, sizeof tag),
             window, fp8 ? " e4m3" : "");
    const int want_flash = c->d == 256 && c->n_head / c->n_kv < 16;
    TEST_CHECK(gate,
               rc == 0 && differ == 0 && nan_number == 0 && other_bad == 0 &&
                   (flashes > 0) == want_flash,
               "%ld elements differ between the flash pass and a block per row (must be "
               "bit-identical); rows from position 64: %ld elements not NaN (must all be); other "
               "rows: %ld NaN or unwritten; flash launches %lld where %d was expected; rc %d",
               differ, nan_number, other_bad, flashes, want_flash, rc);
    attn_case_free(&t);
    free(out[0]);
    free(out[1]);
}

/* The launchers refuse what they have no kernel for, before touching the device. */
static void run_refusals(void) {
    int32_t table = 0, pos = 0;
    k_attention_args a = {.out = (bf16_t *)16,
                          .q = (const bf16_t *)16,
                          .pos = &pos,
                          .seq = &pos,
                          .kv = {.base = (void *)16,
                                 .page_tokens = PAGE_TOKENS,
                                 .n_layer = 1,
                                 .n_kv_head = 1,
                                 .head_dim = 256,
                                 .elem_bytes = 3,
                                 .tables = &table,
                                 .max_pages = 1},
                          .rows = 1,
                          .n_head = 1};
    int width3 = k_attention(&a, NULL);
    a.kv.elem_bytes = 2;
    a.kv.head_dim = 128;
    int hd128 = k_attention(&a, NULL);
    a.kv.head_dim = 256;
    a.n_head = 3;
    a.kv.n_kv_head = 2;
    int ragged_group = k_attention(&a, NULL);
    k_attn_prep_args p = {.q = (bf16_t *)16,
                          .q_norm = (const bf16_t *)16,
                          .pos = &pos,
                          .kv = a.kv,
                          .rows = 1,
                          .n_head = 1,
                          .n_rot = 64};
    p.kv.elem_bytes = 3;
    int prep_width3 = k_attn_prep(&p, NULL);
    p.kv.elem_bytes = 2;
    p.kv.head_dim = 384;
    int prep_hd384 = k_attn_prep(&p, NULL);
    TEST_CHECK("attn_refuses_unsupported",
               width3 == K_ERR_DTYPE && hd128 == K_ERR_SHAPE && ragged_group == K_ERR_SHAPE &&
                   prep_width3 == K_ERR_DTYPE && prep_hd384 == K_ERR_SHAPE,
               "attention 3-byte KV %d hd128 %d group 3/2 %d; prep 3-byte KV %d hd384 %d", width3,
               hd128, ragged_group, prep_width3, prep_hd384);
}

/* The attention cases: the first row set over every window and pool, the later prefill chunk,
 * rows of 32 splits, and the folded combine's NaN paths. */
/* the folded combine's NaN paths: groups of 2 and 4 at head dim 256 (the sliding layers),
 * the split kernel (bf16, with and without a window) and the window kernel (e4m3, W 1024) */
static void run_fold_nan_cases(const cfg *cfgs, uint64_t *seed) {
    for (size_t i = 0; i <= 2; i += 2) {
        run_fold_nan_paths(&cfgs[i], 0, 0, (*seed)++);
        run_fold_nan_paths(&cfgs[i], 1024, 0, (*seed)++);
        run_fold_nan_paths(&cfgs[i], 1024, 1, (*seed)++);
    }
    /* and the global layers' group of 8 at head dim 512 (no fold: the combine keeps its launch),
     * whose third variant looks its first units up before the grid wait */
    run_fold_nan_paths(&cfgs[4], 0, 0, (*seed)++);
}

/* ---- strided query tiles (serve.attn_strided_tiles) ----
 *
 * A long prompt's chunk: rows of one sequence at consecutive positions, cut by a decode row of
 * another sequence (a strided set holding it takes its rows in turn, and every later row's
 * launch index moves by one), with a third sequence's row at the end. shape 0: every prompt
 * row past the window's first fill, from `from`; shape 1: the chunk starts before the fill, so
 * its first group keeps consecutive tiles and a later one goes strided. No reference run: every
 * output bit is compared with the one-row blocks' (query tiles off), which the op gates above
 * hold to the reference. */
static void make_strided_rows(int window, int shape, int n_prompt) {
    n_rows = 0;
    const int from = shape == 0 ? window + 276 : window > 324 ? window - 324 : 0;
    seq_len[0] = 3001;
    seq_len[1] = from + n_prompt;
    seq_len[2] = 101;
    for (int k = 0; k < n_prompt; k++) {
        if (k == 5) add_row(0, 3000);
        add_row(1, from + k);
    }
    add_row(2, 100);
}

/* A case of the bit-for-bit gates: attn_case_setup's (its result in *rc), and the two output
 * buffers (the one-row blocks' bits and a form's). 0 (the gate failed, nothing left allocated)
 * if the host ran out of memory. */
static int bits_case_setup(attn_case *t, const cfg *c, int window, int fp8, uint64_t seed,
                           const char *gate, bf16_t **want, bf16_t **got, int *rc) {
    *rc = attn_case_setup(t, c, window, fp8, seed);
    *want = malloc(t->qn * 2);
    *got = malloc(t->qn * 2);
    if (!t->q || !t->kv || !*want || !*got) {
        TEST_CHECK(gate, 0, "host allocation failed");
        attn_case_free(t), free(*want), free(*got);
        return 0;
    }
    return 1;
}

/* The query tiles' speed forms the bit-for-bit gates below run: the order, the statistics
 * together, the fold, and forced splits a block (1, 2, 3: a strided block's split range shifted
 * row by row; folding only where one block holds every split). */
typedef struct tile_form_case {
    const char *name;
    int longest, together, fold, spb;
} tile_form_case;
static const tile_form_case tile_forms6[] = {
    {"", 0, 0, 0, 0},
    {" tile fold", 0, 0, 1, 0},
    {" longest first stats together tile fold", 1, 1, 1, 0},
    {" 1 split a block", 0, 0, 1, 1},
    {" 2 splits a block", 1, 0, 0, 2},
    {" 3 splits a block", 0, 1, 1, 3}};
#define N_TILE_FORMS6 (sizeof tile_forms6 / sizeof tile_forms6[0])

/* One launch on the query tiles from one row in form fc, the strided tiles and the pair form as
 * given, every switch put back after; the elements that differ from want (strided_run). */
static long tiles_run(const k_attention_args *a, const tile_form_case *fc, int strided, int pair,
                      void *dout, bf16_t *got, const bf16_t *want, size_t qn, int *rc) {
    if (*rc) return (long)qn;
    k_set_attn_query_tiles(1);
    k_set_attn_strided_tiles(strided);
    k_set_attn_pair_tiles(pair);
    k_set_attn_longest_first(fc->longest);
    k_set_attn_stats_together(fc->together);
    k_set_attn_tile_fold(fc->fold);
    const long differ = strided_run(a, fc->spb, dout, got, want, qn, rc);
    k_set_attn_tile_fold(0);
    k_set_attn_stats_together(0);
    k_set_attn_longest_first(0);
    k_set_attn_pair_tiles(0);
    k_set_attn_strided_tiles(0);
    k_set_attn_query_tiles(0);
    return differ;
}

static void run_strided_tiles(const cfg *c, int window, int shape, int fp8, uint64_t seed) {
    char gate[160], tag[48];
    const int group = c->n_head / c->n_kv;
    /* two whole groups of 64 x (16 / group) rows and a ragged tail; four at the group of 8 (32
     * heads), whose window of 2,048 makes a row's scratch ~1.3 MB: the launch is cut into row
     * chunks of 384 (k_attention cuts them at whole groups), so groups start past row 0 of a
     * chunk and the last chunk holds one whole group and a partial one */
    const int n_prompt = (group == 8 ? 4 : 2) * 64 * (16 / group) + 76;
    snprintf(gate, sizeof gate, "attn_strided_tiles[%s w%d%s %s]", tag_of(c, tag, sizeof tag),
             window, fp8 ? " e4m3" : "", shape ? "across the fill" : "past the fill");
    if (n_prompt + 2 > MAX_ROWS) {
        test_skip(gate, "skipped: group %d needs %d rows, the test holds %d", group, n_prompt + 2,
                  MAX_ROWS);
        return;
    }
    make_strided_rows(window, shape, n_prompt);
    attn_case t;
    bf16_t *want, *got;
    int rc;
    if (!bits_case_setup(&t, c, window, fp8, seed, gate, &want, &got, &rc)) return;
    const size_t qn = t.qn;
    void *const dout = t.dout;
    const k_attention_args a = t.a;
    const long base_nan = one_row_bits(&a, dout, want, qn, &rc);
    /* the six tile forms, then the first of them with the pair form on (serve.attn_pair_tiles:
     * head dim 512's only, so the one-tile kernels' here) */
    for (int f = 0; f <= (int)N_TILE_FORMS6; f++) {
        const int pair = f == (int)N_TILE_FORMS6 ? 2 : 0;
        const tile_form_case *fc = &tile_forms6[pair ? 0 : f];
        char sgate[220];
        snprintf(sgate, sizeof sgate, "%s%s%s", gate, pair ? " pair 4 warps" : "", fc->name);
        const long long launches0 = k_attn_strided_launches(), pairs0 = k_attn_pair_launches();
        const long differ = tiles_run(&a, fc, 1, pair, dout, got, want, qn, &rc);
        const long long strided = k_attn_strided_launches() - launches0;
        const long long pairs = k_attn_pair_launches() - pairs0; /* none at this head dim */
        TEST_CHECK(sgate, rc == 0 && differ == 0 && strided > 0 && pairs == 0 && base_nan == 0,
                   "%ld of %zu output elements differ between strided query tiles and a block "
                   "per row (must be bit-identical); strided launches %lld (must be > 0); pair "
                   "launches %lld (must be 0); NaN in the one-row blocks' output %ld; rc %d",
                   differ, qn, strided, pairs, base_nan, rc);
    }
    attn_case_free(&t);
    free(want);
    free(got);
}

/* Windows of 1,024 (16 splits), 1,000 (a partial last tile), 256 (4 splits) and 2,048 (32
 * splits: no fold, two blocks at 16 a block); 2,500 (two tiles a split) may not go strided
 * and takes its sets' rows in turn: the same bits either way. Head dim 256 only (the windowed
 * families); both pools. */
static void run_strided_cases(const cfg *cfgs, size_t n_cfg, uint64_t *seed) {
    static const int windows[] = {1024, 1000, 256, 2048, 2500};
    for (size_t i = 0; i < n_cfg; i++) {
        if (cfgs[i].d != 256) continue;
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
            for (int shape = 0; shape <= 1; shape++)
                run_strided_tiles(&cfgs[i], windows[w], shape, 0, (*seed)++);
        run_strided_tiles(&cfgs[i], 1024, 0, 1, (*seed)++);
        run_strided_tiles(&cfgs[i], 1000, 1, 1, (*seed)++);
    }
}

/* ---- two query tiles a block (serve.attn_pair_tiles) ----
 *
 * A prompt's chunk: B's rows at consecutive positions, cut by a decode row of A after B's fifth
 * (the blocks holding it take their tiles, or rows, in turn) and ending with C's row, the last
 * block ragged. shape 0: positions 0..149 with the grid at 16 splits (max_pos 1,023), where the
 * tile fold applies: a global layer (window 0) at head dim 512, or a windowed one (window 1,024,
 * every row before the fill: the strided kernels' consecutive tiles) at 256; shape 1 (head dim
 * 512): positions 1,990..2,139, across 2,048 keys (32 splits of one tile, then 17 of two: rows
 * of both split sizes may not share a block), the grid unfolded. The windowed rows past the
 * fill are the strided gates' (run_strided_tiles, the pair form among them). No reference run:
 * every output bit is compared with the one-row blocks' (query tiles off). */
static void run_pair_tiles(const cfg *c, int shape, int fp8, uint64_t seed) {
    char gate[160], tag[48];
    const int n_prompt = 150, from = shape == 0 ? 0 : 1990;
    const int window = c->d == 256 ? 1024 : 0, group = c->n_head / c->n_kv;
    snprintf(gate, sizeof gate, "attn_pair_tiles[%s w%d%s %s]", tag_of(c, tag, sizeof tag), window,
             fp8 ? " e4m3" : "", shape ? "across 2,048 keys" : "16 splits");
    n_rows = 0;
    seq_len[0] = 3001;
    seq_len[1] = from + n_prompt;
    seq_len[2] = 101;
    for (int k = 0; k < n_prompt; k++) {
        if (k == 5) add_row(0, shape == 0 ? 700 : 3000);
        add_row(1, from + k);
    }
    add_row(2, 100);
    attn_case t;
    bf16_t *want, *got;
    int rc;
    if (!bits_case_setup(&t, c, window, fp8, seed, gate, &want, &got, &rc)) return;
    const size_t qn = t.qn;
    void *const dout = t.dout;
    k_attention_args a = t.a;
    a.max_pos = shape == 0 ? 1023 : 0;
    const long base_nan = one_row_bits(&a, dout, want, qn, &rc);
    for (size_t f = 0; f < N_TILE_FORMS6; f++) {
        const tile_form_case *fc = &tile_forms6[f];
        char sgate[220];
        snprintf(sgate, sizeof sgate, "%s 4 warps%s", gate, fc->name);
        /* the pair form (2) leaves folded grids, and head dim 256, to the one-tile kernel; a
         * group of one has no pair form (two tiles' 32 rows would not divide the launches'
         * chunks) */
        const int folds = fc->fold && fc->spb == 0 && shape == 0;
        const int expect = group >= 2 && c->d == 512 && !folds;
        const long long launches0 = k_attn_pair_launches();
        /* the windowed head dim on the strided kernels, its default */
        const long differ = tiles_run(&a, fc, window > 0, 2, dout, got, want, qn, &rc);
        const long long launched = k_attn_pair_launches() - launches0;
        TEST_CHECK(sgate, rc == 0 && differ == 0 && (launched > 0) == expect && base_nan == 0,
                   "%ld of %zu output elements differ between pair tiles and a block per row "
                   "(must be bit-identical); pair launches %lld (must be %s); NaN in the "
                   "one-row blocks' output %ld; rc %d",
                   differ, qn, launched, expect ? "> 0" : "0", base_nan, rc);
    }
    attn_case_free(&t);
    free(want);
    free(got);
}

/* Every config, both pools; both shapes at head dim 512, the first at 256. */
static void run_pair_cases(const cfg *cfgs, size_t n_cfg, uint64_t *seed) {
    for (size_t i = 0; i < n_cfg; i++) {
        for (int shape = 0; shape <= (cfgs[i].d == 512); shape++)
            for (int fp8 = 0; fp8 <= 1; fp8++)
                run_pair_tiles(&cfgs[i], shape, fp8, (*seed)++);
    }
}

/* ---- prompt rows on their own pass (serve.attn_prompt) ----
 * The rows as the engine orders a step: a generated row first (A's at 3,000), then the prompt
 * rows, B's from .. from + n - 1 and C's 60 .. 100 (another prompt's chunk right after B's, so a
 * block holds both sequences at their edge). */
static void make_prompt_rows(int from, int n) {
    n_rows = 0;
    seq_len[0] = 3001;
    seq_len[1] = from + n;
    seq_len[2] = 101;
    add_row(0, 3000);
    for (int k = 0; k < n; k++)
        add_row(1, from + k);
    for (int p = 60; p < seq_len[2]; p++)
        add_row(2, p);
}

/* The (head dim, group) pairs attn_prompt.cu is built for (its AP_EACH). */
static int prompt_pass_built(const cfg *c) {
    const int g = c->n_head / c->n_kv;
    return c->d == 256 ? g == 2 || g == 4 || g == 8 : g == 4 || g == 8 || g == 16;
}

/* Rows [r0, r0 + nr) of a as a launch of their own, the last `prompt` of them prompt rows, into
 * their rows of dout. */
static int prompt_slice(const k_attention_args *a, const cfg *c, int r0, int nr, int prompt) {
    const size_t row_bytes = (size_t)c->n_head * (size_t)c->d * 2;
    k_attention_args sa = *a;
    sa.out = (bf16_t *)((char *)a->out + (size_t)r0 * row_bytes);
    sa.q = (const bf16_t *)((const char *)a->q + (size_t)r0 * row_bytes);
    sa.pos = a->pos + r0;
    sa.seq = a->seq + r0;
    sa.rows = nr;
    sa.prompt_rows = prompt;
    return k_attention(&sa, NULL);
}

/* The prompt pass against the reference (the op gate's bound), its generated row against the
 * split passes' bits, and slicing: the prompt rows through launches of 1, 7, 33 and 100 rows
 * give every bit of the one launch. Where the pass is not built for the config, it must not run
 * and the launch must give the split passes' bits. */
static void run_prompt_pass(const cfg *c, int window, int from, int n, int fp8, uint64_t seed) {
    char gate[160], tag[48];
    snprintf(gate, sizeof gate, "attn_prompt[%s w%d%s rows %d..%d]", tag_of(c, tag, sizeof tag),
             window, fp8 ? " e4m3" : "", from, from + n - 1);
    make_prompt_rows(from, n);
    attn_case t;
    bf16_t *want, *got;
    int rc;
    if (!bits_case_setup(&t, c, window, fp8, seed, gate, &want, &got, &rc)) return;
    const size_t qn = t.qn, row = (size_t)c->n_head * (size_t)c->d;
    void *const dout = t.dout;
    bf16_t *ref = malloc(qn * 2);
    k_attention_args a = t.a;
    a.max_pos = 3000;
    /* the split passes' bits (the switch off), then the prompt pass's */
    (void)strided_run(&a, 0, dout, want, want, qn, &rc);
    const int built = prompt_pass_built(c);
    const long long launches0 = k_attn_prompt_launches();
    k_set_attn_prompt(1);
    a.prompt_rows = n_rows - 1;
    (void)strided_run(&a, 0, dout, got, got, qn, &rc);
    const long long launched = k_attn_prompt_launches() - launches0;
    long gen_differ = 0, off_differ = 0;
    for (size_t i = 0; i < qn && !rc; i++) {
        gen_differ += i < row && got[i] != want[i];
        off_differ += got[i] != want[i];
    }
    /* the reference over every row */
    k_attention_args ra = ref_args_of(&t, c, &a, ref);
    for (size_t i = 0; ref && i < qn; i++)
        ref[i] = BF16_NAN;
    const int rrc = ref ? ref_attention_rows(&ra) : -1;
    cmp m = {0};
    if (ref) compare(&m, got, ref, qn);
    const double rel = rel_of(&m);
    char sgate[220];
    snprintf(sgate, sizeof sgate, "%s vs reference", gate);
    TEST_CHECK(sgate,
               rc == 0 && rrc == 0 && rel <= 1e-2 && m.unwritten == 0 && m.stray == 0 &&
                   (launched > 0) == built && gen_differ == 0 && (built || off_differ == 0),
               "rel err %.2e (limit 1e-2), unwritten %ld, stray %ld; prompt launches %lld (must "
               "be %s); the generated row's elements differing from the split passes' %ld (must "
               "be 0); all rows' %ld (0 where the pass is not built); rc %d ref rc %d",
               rel, m.unwritten, m.stray, launched, built ? "> 0" : "0", gen_differ, off_differ, rc,
               rrc);
    /* slicing: the prompt rows in launches of sz rows, the generated row left poisoned */
    static const int sizes[] = {1, 7, 33, 100};
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        bf16_t *sl = want; /* the split passes' bits are no longer needed */
        for (size_t i = 0; i < qn; i++)
            sl[i] = BF16_NAN;
        if (!rc) rc = k_copy_to_device(dout, sl, qn * 2);
        for (int r0 = 1; r0 < n_rows && !rc; r0 += sizes[z]) {
            const int nr = n_rows - r0 < sizes[z] ? n_rows - r0 : sizes[z];
            rc = prompt_slice(&a, c, r0, nr, nr);
        }
        if (!rc) rc = k_sync() | k_copy_to_host(sl, dout, qn * 2);
        long differ = 0;
        for (size_t i = row; i < qn; i++)
            differ += rc || sl[i] != got[i];
        snprintf(sgate, sizeof sgate, "%s slices of %d", gate, sizes[z]);
        TEST_CHECK(sgate, rc == 0 && differ == 0,
                   "%ld prompt-row elements differ between launches of %d rows and one launch "
                   "(must be bit-identical), rc %d",
                   differ, sizes[z], rc);
    }
    k_set_attn_prompt(0);
    attn_case_free(&t);
    free(want);
    free(got);
    free(ref);
}

/* Head dim 256 at the window of 1,024 across its first fill and at 8; 512 at no window, from
 * key 0 and across 2,048 keys, and at 8; both pools. */
static void run_prompt_cfg(const cfg *c, uint64_t *seed) {
    for (int fp8 = 0; fp8 <= 1; fp8++) {
        if (c->d == 256) {
            run_prompt_pass(c, 1024, 950, 150, fp8, (*seed)++);
        } else {
            run_prompt_pass(c, 0, 0, 150, fp8, (*seed)++);
            run_prompt_pass(c, 0, 1990, 100, fp8, (*seed)++);
        }
        run_prompt_pass(c, 8, 0, 40, fp8, (*seed)++);
    }
}

/* The global layers' groups the shared configs lack, 4 (the E4B's and tiny-moe's) and 16 (the
 * 12B's, one position a tile), first (no GPU had run them when a device call's time ran out
 * before them), then every config. */
static void run_prompt_cases(const cfg *cfgs, size_t n_cfg, uint64_t *seed) {
    static const cfg global_groups[] = {
        {.d = 512, .n_rot = 64, .n_head = 8, .n_kv = 2, .base = 1e6f},
        {.d = 512, .n_rot = 64, .n_head = 16, .n_kv = 1, .base = 1e6f},
    };
    for (size_t i = 0; i < sizeof global_groups / sizeof global_groups[0]; i++)
        run_prompt_cfg(&global_groups[i], seed);
    for (size_t i = 0; i < n_cfg; i++)
        run_prompt_cfg(&cfgs[i], seed);
}

/* run_fold_nan_cases in the subsets' form (G4_ATTN_GATES=nan_paths) */
static void run_fold_nan_subset(const cfg *cfgs, size_t n_cfg, uint64_t *seed) {
    (void)n_cfg;
    run_fold_nan_cases(cfgs, seed);
}

static void run_attention_cases(const cfg *cfgs, size_t n_cfg, uint64_t *seed) {
    static const int windows[] = {0, 8, 1024, 2500};
    make_rows(0);
    for (size_t i = 0; i < n_cfg; i++) {
        for (size_t k = 0; k < sizeof windows / sizeof windows[0]; k++)
            run_attention(&cfgs[i], windows[k], (*seed)++, 0);
        run_attention(&cfgs[i], 0, (*seed)++, 1);
        run_attention(&cfgs[i], 1024, (*seed)++, 1);
        run_attention(&cfgs[i], 2500, (*seed)++, 1);
    }
    /* the later prefill chunk: windowed and full attention, both pools */
    make_rows(1);
    for (size_t i = 0; i < n_cfg; i++) {
        run_attention(&cfgs[i], 1024, (*seed)++, 0);
        run_attention(&cfgs[i], 0, (*seed)++, 0);
        run_attention(&cfgs[i], 1024, (*seed)++, 1);
    }
    /* rows of 32 splits beside a longer row of 24 (the grid's split count is not the longest
     * row's: a step of a 2,049-token prompt once wrote NaN for its rows of 1,088-2,048 keys) */
    make_rows(2);
    for (size_t i = 0; i < n_cfg; i++) {
        run_attention(&cfgs[i], 0, (*seed)++, 0);
        run_attention(&cfgs[i], 0, (*seed)++, 1);
    }
    run_fold_nan_cases(cfgs, seed);
    /* a 300-row prompt: blocks of several query tiles (serve.attn_flash), ragged at the end,
     * every window folding; and the flash pass meeting an unmapped page */
    make_rows(3);
    for (size_t i = 0; i < n_cfg; i++) {
        run_attention(&cfgs[i], 0, (*seed)++, 0);
        run_attention(&cfgs[i], 8, (*seed)++, 0);
        run_attention(&cfgs[i], 1024, (*seed)++, 0);
        run_attention(&cfgs[i], 0, (*seed)++, 1);
        run_attention(&cfgs[i], 1024, (*seed)++, 1);
    }
    if (attn_mma)
        for (size_t i = 0; i < n_cfg; i++) {
            run_flash_unmapped(&cfgs[i], 0, 0, (*seed)++);
            run_flash_unmapped(&cfgs[i], 1024, 1, (*seed)++);
        }
}

int main(void) {
    char desc[256];
    if (k_device_init(desc, sizeof desc) != 0) {
        test_skip("op_vs_ref_attn", "no GPU (%s)", desc);
        return 0;
    }
    printf("# device: %s\n", desc);
    /* every launch below folds the combine where it may, and each case also runs it unfolded */
    k_set_attn_fold(1);
    /* each case's own launch takes a block per row and widens e4m3 units; its `query tiles`
     * and `fp8 fragments` gates turn the others on */
    k_set_attn_query_tiles(0);
    k_set_attn_fp8_frags(0);
    k_set_attn_early_lookup(0);
    /* the query tiles' speed forms too (on by default): each has its own gates below */
    k_set_attn_longest_first(0);
    k_set_attn_stats_together(0);
    k_set_attn_tile_fold(0);
    k_set_attn_flash(0);         /* on in its own gates (set_flash_tiles) */
    k_set_attn_strided_tiles(0); /* on by default; on in its own gates (run_strided_tiles) */
    k_set_attn_pair_tiles(0);    /* on by default; on in its own gates (run_pair_tiles) */
    k_set_attn_prompt(0);        /* on in its own gates (run_prompt_pass) */
    make_rows(0);
    /* local family (hd 256, default RoPE) and global family (hd 512, proportional RoPE: 64 of
     * 256 pairs), GQA groups 1, 2, 4 and 8 (the kept-score P.V splits keys across warps up to
     * 4), one k_eq_v case. Window 2500: the row at 3000 reads 40 tiles, two to a split, so a
     * kept-score split sums over more than one tile. */
    static const cfg cfgs[] = {
        {.d = 256, .n_rot = 128, .n_head = 16, .n_kv = 8, .base = 10000.0f},
        {.d = 256, .n_rot = 128, .n_head = 32, .n_kv = 4, .base = 10000.0f},
        {.d = 256, .n_rot = 128, .n_head = 8, .n_kv = 2, .base = 10000.0f},
        {.d = 256, .n_rot = 128, .n_head = 4, .n_kv = 4, .base = 10000.0f},
        {.d = 512, .n_rot = 64, .n_head = 16, .n_kv = 2, .k_eq_v = 1, .base = 1e6f},
        {.d = 512, .n_rot = 64, .n_head = 8, .n_kv = 4, .base = 1e6f},
    };
    uint64_t seed = 4242;
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
        for (int w = 0; w <= 1; w++)
            run_prep(&cfgs[i], w, seed++);
    uint64_t prep_seed = 9100; /* its own draws: the cases after it keep theirs */
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
        for (int kind = 0; kind < 3; kind++) /* q alone; then q and K/V, bf16 and e4m3 pools */
            run_prep_rows(&cfgs[i], kind > 0, kind == 2, prep_seed++);
    make_rows(0);
    /* every attention case twice: on the CUDA-core kernels, then with their products on tensor
     * cores (serve.attn_mma), each against the reference and its own speed switches */
    /* G4_ATTN_GATES=<name>: only that subset's gates, on the tensor-core passes (a short device
     * call's subset; every gate above and below runs without it) */
    static const struct {
        const char *name;
        void (*run)(const cfg *, size_t, uint64_t *);
    } subsets[] = {{"strided", run_strided_cases},
                   {"pair", run_pair_cases},
                   {"prompt", run_prompt_cases},
                   {"nan_paths", run_fold_nan_subset}};
    const char *only = getenv("G4_ATTN_GATES");
    for (size_t k = 0; only && k < sizeof subsets / sizeof subsets[0]; k++) {
        if (strcmp(only, subsets[k].name) != 0) continue;
        attn_mma = 1;
        k_set_attn_mma(1);
        subsets[k].run(cfgs, sizeof cfgs / sizeof cfgs[0], &seed);
        k_set_attn_mma(0);
        return harness_exit();
    }
    for (attn_mma = 0; attn_mma <= 1; attn_mma++) {
        k_set_attn_mma(attn_mma);
        run_attention_cases(cfgs, sizeof cfgs / sizeof cfgs[0], &seed);
    }
    /* the strided tiles run on the tensor-core passes only */
    attn_mma = 1;
    k_set_attn_mma(1);
    run_strided_cases(cfgs, sizeof cfgs / sizeof cfgs[0], &seed);
    run_pair_cases(cfgs, sizeof cfgs / sizeof cfgs[0], &seed);
    run_prompt_cases(cfgs, sizeof cfgs / sizeof cfgs[0], &seed);
    k_set_attn_mma(0);
    run_refusals();
    return harness_exit();
}
