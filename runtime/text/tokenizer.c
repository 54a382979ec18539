/* runtime/text/tokenizer.c - see tokenizer.h.
 *
 * Owns: encoding (added-token matching, the normaliser and pre-tokeniser of Gemma's file, BPE
 * merging), the queries, and the UTF-8-safe incremental detokeniser. Reading tokenizer.json
 * (jansson) into the tables is tokenizer_load.c's; the tables themselves tokenizer_tables.c's.
 * Does not own: BOS, chat templates, stop handling.
 *
 * Why it is shaped this way: the semantics are those of HF `tokenizers` (0.23) for the
 * subset Gemma uses: added tokens are matched leftmost-longest in the raw text (a byte trie),
 * the text between them is normalised (Replace), split (Split, MergedWithPrevious) and each
 * piece is merged by rank with a binary heap over a linked list of symbols, which is HF's
 * Word::merge_all step for step (so ties and stale entries resolve the same way). Gemma's
 * normaliser turns every space into U+2581, so a whole prompt is one piece: anything
 * quadratic in a piece would be fatal. Everything the files could ask for that we do not
 * implement (other normalisers, lstrip/rstrip flags, dropout, ...) is refused at load with the
 * JSON path named, rather than silently encoding differently. All tables are open-addressing
 * hash maps over one byte arena; the tokenizer is immutable after load, so one instance may
 * serve several threads. */
#include "runtime/text/tokenizer_tables.h"

#include "runtime/base/log.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 ------------------------------------------------------------------------------- */

/* The length of the character a lead byte starts (1 for ASCII), or 0 if none can start. */
static int utf8_need(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Whether c may be byte k (1..3) of a character starting with lead: the second byte carries
 * the overlong, surrogate and above-U+10FFFF exclusions. */
static int utf8_cont_ok(unsigned char lead, int k, unsigned char c) {
    if (k == 1) {
        if (lead == 0xE0) return c >= 0xA0 && c <= 0xBF;
        if (lead == 0xED) return c >= 0x80 && c <= 0x9F;
        if (lead == 0xF0) return c >= 0x90 && c <= 0xBF;
        if (lead == 0xF4) return c >= 0x80 && c <= 0x8F;
    }
    return c >= 0x80 && c <= 0xBF;
}

/* Bytes of the valid character at s (n > 0 bytes available), or 0 when none starts there. */
static size_t utf8_char_len(const unsigned char *s, size_t n) {
    int need = utf8_need(s[0]);
    if (need == 0 || (size_t)need > n) return 0;
    for (int k = 1; k < need; k++)
        if (!utf8_cont_ok(s[0], k, s[k])) return 0;
    return (size_t)need;
}

int tokenizer_vocab_size(const tokenizer *t) { return t->n_ids; }

int32_t tokenizer_piece_id(const tokenizer *t, const char *piece) {
    size_t n = strlen(piece);
    int32_t id = tok_smap_get(&t->added_map, t->arena.buf, piece, n);
    return id >= 0 ? id : tok_smap_get(&t->vocab, t->arena.buf, piece, n);
}

int tokenizer_token_bytes(const tokenizer *t, int32_t id, const char **bytes, size_t *len) {
    if (id < 0 || id >= t->n_ids || t->ids[id].dec_len == TOK_NONE) return -1;
    *bytes = t->arena.buf + t->ids[id].dec_off;
    *len = t->ids[id].dec_len;
    return 0;
}

int tokenizer_is_special(const tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_ids || t->ids[id].added < 0) return 0;
    return t->added[t->ids[id].added].special;
}

/* ---- encode ------------------------------------------------------------------------------ */

/* One symbol of a piece being merged: a doubly linked list in an array, as HF's Word. */
typedef struct {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    int32_t alive;      /* 0 once merged into its left neighbour */
} tok_sym;

typedef struct {
    uint32_t rank, pos;
    int32_t new_id;
} tok_cand;

/* Scratch of one encode call; reused across the pieces of that call. */
typedef struct {
    int32_t *out;
    size_t n_out, cap_out;
    tok_sym *syms;
    tok_cand *heap;
    size_t cap_syms; /* heap holds 3 * cap_syms: each merge pushes at most two candidates */
    char *norm;      /* the normalised text of one stretch; room for the whole text */
} tok_enc;

static int enc_push(tok_enc *e, int32_t id) {
    if (e->n_out == e->cap_out) {
        size_t cap = e->cap_out ? 2 * e->cap_out : 256;
        int32_t *no = realloc(e->out, cap * sizeof *no);
        if (!no) return -1;
        e->out = no;
        e->cap_out = cap;
    }
    e->out[e->n_out++] = id;
    return 0;
}

static int cand_less(const tok_cand *a, const tok_cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(tok_cand *h, size_t *n, tok_cand c) {
    size_t i = (*n)++;
    while (i > 0 && cand_less(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static tok_cand heap_pop(tok_cand *h, size_t *n) {
    tok_cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(&h[c + 1], &h[c])) c++;
        if (!cand_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* Pushes the merge of symbol pos with its right neighbour, if one exists. */
static void tok_offer(const tokenizer *t, tok_enc *e, size_t *hn, int32_t pos) {
    if (pos < 0 || e->syms[pos].next < 0) return;
    uint64_t key =
        ((uint64_t)(uint32_t)e->syms[pos].id << 32) | (uint32_t)e->syms[e->syms[pos].next].id;
    const tok_qslot *m = tok_qmap_get(&t->merges, key);
    if (m) heap_push(e->heap, hn, (tok_cand){.rank = m->a, .pos = (uint32_t)pos, .new_id = m->b});
}

/* Merges the symbol list by rank, lowest rank first and leftmost among equal ranks; an entry
 * whose pair changed since it was pushed is skipped (HF's Word::merge_all). */
static void tok_merge_all(const tokenizer *t, tok_enc *e, int32_t n) {
    size_t hn = 0;
    for (int32_t i = 0; i + 1 < n; i++)
        tok_offer(t, e, &hn, i);
    while (hn > 0) {
        tok_cand c = heap_pop(e->heap, &hn);
        tok_sym *s = &e->syms[c.pos];
        if (!s->alive || s->next < 0) continue;
        tok_sym *r = &e->syms[s->next];
        const tok_qslot *m =
            tok_qmap_get(&t->merges, ((uint64_t)(uint32_t)s->id << 32) | (uint32_t)r->id);
        if (!m || m->b != c.new_id) continue;
        s->id = c.new_id;
        r->alive = 0;
        s->next = r->next;
        if (s->next >= 0) e->syms[s->next].prev = (int32_t)c.pos;
        tok_offer(t, e, &hn, s->prev);
        tok_offer(t, e, &hn, (int32_t)c.pos);
    }
}

static int tok_grow_syms(tok_enc *e, size_t n) {
    if (n <= e->cap_syms) return 0;
    free(e->syms);
    free(e->heap);
    e->syms = malloc(n * sizeof *e->syms);
    e->heap = malloc(3 * n * sizeof *e->heap);
    e->cap_syms = e->syms && e->heap ? n : 0;
    return e->cap_syms ? 0 : -1;
}

static void sym_add(tok_enc *e, int32_t *n, int32_t id) {
    e->syms[*n] = (tok_sym){.id = id, .prev = *n - 1, .next = -1, .alive = 1};
    if (*n > 0) e->syms[*n - 1].next = *n;
    (*n)++;
}

/* The initial symbols of a piece: one per character in the vocab, else its <0xNN> bytes,
 * else unk (fused when fuse_unk). HF's quirk is kept: byte-fallback symbols do not flush a
 * pending unk first (only matters when some <0xNN> is missing). */
static int32_t tok_initial_syms(const tokenizer *t, tok_enc *e, const char *s, size_t n) {
    int32_t ns = 0, pending_unk = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = utf8_char_len((const unsigned char *)s + i, n - i);
        if (cl == 0) cl = 1; /* invalid UTF-8: one byte at a time (never in vocab) */
        int32_t id = tok_smap_get(&t->vocab, t->arena.buf, s + i, cl);
        int all_bytes = t->byte_fallback;
        for (size_t k = 0; k < cl && all_bytes; k++)
            all_bytes = t->byte_ids[(unsigned char)s[i + k]] >= 0;
        if (id >= 0) {
            if (pending_unk) sym_add(e, &ns, t->unk_id);
            pending_unk = 0;
            sym_add(e, &ns, id);
        } else if (all_bytes) {
            for (size_t k = 0; k < cl; k++)
                sym_add(e, &ns, t->byte_ids[(unsigned char)s[i + k]]);
        } else if (t->unk_id >= 0) {
            if (pending_unk && !t->fuse_unk) sym_add(e, &ns, t->unk_id);
            pending_unk = 1;
        }
        i += cl;
    }
    if (pending_unk) sym_add(e, &ns, t->unk_id);
    return ns;
}

static int tok_bpe_piece(const tokenizer *t, tok_enc *e, const char *s, size_t n) {
    if (t->ignore_merges) {
        int32_t whole = tok_smap_get(&t->vocab, t->arena.buf, s, n);
        if (whole >= 0) return enc_push(e, whole);
    }
    if (n > INT32_MAX / 4 || tok_grow_syms(e, n + 1)) return -1;
    int32_t ns = tok_initial_syms(t, e, s, n);
    tok_merge_all(t, e, ns);
    for (int32_t i = ns > 0 ? 0 : -1; i >= 0; i = e->syms[i].next)
        if (enc_push(e, e->syms[i].id)) return -1;
    return 0;
}

/* Position of the first occurrence of pat at or after from, or n. */
static size_t tok_find(const char *s, size_t n, size_t from, const char *pat, size_t np) {
    for (size_t i = from; i + np <= n; i++) {
        const char *p = memchr(s + i, pat[0], n - i - np + 1);
        if (!p) return n;
        i = (size_t)(p - s);
        if (memcmp(p, pat, np) == 0) return i;
    }
    return n;
}

/* The Replace normaliser into e->norm, which tokenizer_encode sized for the whole text. */
static void tok_normalize(const tokenizer *t, tok_enc *e, const char *s, size_t n, size_t *out_n) {
    const char *from = t->arena.buf + t->rep_from_off, *to = t->arena.buf + t->rep_to_off;
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t j = tok_find(s, n, i, from, t->rep_from_len);
        memcpy(e->norm + w, s + i, j - i);
        w += j - i;
        if (j == n) break;
        memcpy(e->norm + w, to, t->rep_to_len);
        w += t->rep_to_len;
        i = j + t->rep_from_len;
    }
    *out_n = w;
}

/* Splits (each piece ends after a pattern match) and merges normalised text. */
static int tok_split_merge(const tokenizer *t, tok_enc *e, const char *s, size_t n) {
    if (!t->has_split) return tok_bpe_piece(t, e, s, n);
    const char *pat = t->arena.buf + t->split_off;
    for (size_t start = 0; start < n;) {
        size_t j = tok_find(s, n, start, pat, t->split_len);
        size_t end = j == n ? n : j + t->split_len;
        if (tok_bpe_piece(t, e, s + start, end - start)) return -1;
        start = end;
    }
    return 0;
}

/* Normalises, splits and merges one stretch of text that holds no added token. */
static int tok_encode_text(const tokenizer *t, tok_enc *e, const char *s, size_t n) {
    if (!t->has_replace) return tok_split_merge(t, e, s, n);
    size_t nn;
    tok_normalize(t, e, s, n, &nn);
    /* e->norm stays owned by e and tokenizer_encode frees it; clang-tidy 14's analyzer loses
     * track of it inside the merge and reports a leak that ASan and the fuzzer do not see */
    return tok_split_merge(t, e, e->norm, nn); // NOLINT(clang-analyzer-unix.Malloc)
}

/* Length of the longest added token at s, with its id in *id; 0 if none starts there. */
static size_t tok_match_added(const tokenizer *t, const unsigned char *s, size_t n, int32_t *id) {
    uint32_t node = 0;
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        const tok_qslot *q = tok_qmap_get(&t->trie, ((uint64_t)node << 8) | s[i]);
        if (!q) break;
        node = q->a;
        if (t->trie_term[node] >= 0) {
            best = i + 1;
            *id = t->trie_term[node];
        }
    }
    return best;
}

static int tok_encode_all(const tokenizer *t, tok_enc *e, const char *text, size_t len,
                          int special) {
    if (!special || t->n_added == 0) return tok_encode_text(t, e, text, len);
    const unsigned char *u = (const unsigned char *)text;
    size_t seg = 0;
    for (size_t i = 0; i < len;) {
        int32_t id = -1;
        size_t m = t->added_first[u[i]] ? tok_match_added(t, u + i, len - i, &id) : 0;
        if (m == 0) {
            i++;
            continue;
        }
        if (i > seg && tok_encode_text(t, e, text + seg, i - seg)) return -1;
        if (enc_push(e, id)) return -1;
        i += m;
        seg = i;
    }
    return seg < len ? tok_encode_text(t, e, text + seg, len - seg) : 0;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, int special, int32_t **ids) {
    *ids = NULL;
    tok_enc e = {0};
    int rc = enc_push(&e, 0); /* allocates, so an empty result is still a malloc'ed array */
    e.n_out = 0;
    if (t->has_replace) {
        /* every match may grow from rep_from_len to rep_to_len bytes */
        size_t grow = t->rep_to_len / t->rep_from_len + 1;
        e.norm = len < SIZE_MAX / (grow + 1) ? malloc(len * grow + 1) : NULL;
        if (!e.norm) rc = -1;
    }
    if (rc == 0 && len > 0) rc = tok_encode_all(t, &e, text, len, special);
    free(e.syms);
    free(e.heap);
    free(e.norm);
    if (rc != 0 || e.n_out > INT_MAX) {
        free(e.out);
        log_msg(LOG_ERROR, "tokenizer", "encode: out of memory (%zu bytes of text)", len);
        return -1;
    }
    *ids = e.out;
    return (int)e.n_out;
}

/* ---- incremental detokenisation ---------------------------------------------------------- */

static void detok_put(char *out, size_t cap, size_t *w, const void *s, size_t n) {
    if (*w + n > cap)
        return; /* the caller gave less than the contract's room: drop, never
                   overflow */
    memcpy(out + *w, s, n);
    *w += n;
}

size_t detok_push(detok *d, const tokenizer *t, int32_t id, char *out, size_t cap) {
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    const char *b;
    size_t n, w = 0;
    if (tokenizer_token_bytes(t, id, &b, &n) != 0) n = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)b[i];
        if (d->n_held > 0) {
            if (utf8_cont_ok(d->held[0], d->n_held, c)) {
                d->held[d->n_held++] = c;
                if (d->n_held == utf8_need(d->held[0])) {
                    detok_put(out, cap, &w, d->held, (size_t)d->n_held);
                    d->n_held = 0;
                }
                continue;
            }
            /* the held prefix can never complete: one U+FFFD, then c starts afresh */
            detok_put(out, cap, &w, fffd, 3);
            d->n_held = 0;
        }
        int need = utf8_need(c);
        if (need == 1)
            detok_put(out, cap, &w, &c, 1);
        else if (need == 0)
            detok_put(out, cap, &w, fffd, 3);
        else
            d->held[d->n_held++] = c;
    }
    return w;
}

size_t detok_flush(detok *d, char *out, size_t cap) {
    size_t w = 0;
    if (d->n_held > 0) detok_put(out, cap, &w, "\xEF\xBF\xBD", 3);
    d->n_held = 0;
    return w;
}
