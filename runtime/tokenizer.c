/* runtime/tokenizer.c - see tokenizer.h.
 *
 * Owns: reading tokenizer.json (jansson), the id tables, added-token matching, the
 * normaliser and pre-tokeniser of Gemma's file, BPE merging, per-id decoded bytes and the
 * UTF-8-safe incremental detokeniser. Does not own: BOS, chat templates, stop handling.
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
#include "runtime/tokenizer.h"

#include "runtime/log.h"

#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_NONE UINT32_MAX /* no piece / no decoded bytes for this id */
#define TOK_MAX_DECODE_STEPS 8
#define TOK_MAX_PIECE 4096 /* bytes of one decoded token; Gemma's longest is under 100 */

/* ---- byte arena and hash maps ------------------------------------------------------------ */

typedef struct {
    char *buf;
    size_t len, cap;
} tok_arena;

/* A string key (bytes in the arena) to an id. val < 0 marks an empty slot. */
typedef struct {
    uint32_t off, len, hash;
    int32_t val;
} tok_sslot;

typedef struct {
    tok_sslot *slots;
    size_t mask;
} tok_smap;

/* A 64-bit key to two values: merges ((left << 32) | right -> rank, result) and the trie's
 * transitions ((node << 8) | byte -> child). key UINT64_MAX marks an empty slot: ids and
 * nodes are below 2^31, so no real key has all bits set. */
typedef struct {
    uint64_t key;
    uint32_t a;
    int32_t b;
} tok_qslot;

typedef struct {
    tok_qslot *slots;
    size_t mask;
} tok_qmap;

/* What one id is: its vocab piece (for lookups), its decoded bytes, its added token. */
typedef struct {
    uint32_t voc_off, voc_len; /* voc_len TOK_NONE: not in model.vocab */
    uint32_t dec_off, dec_len; /* dec_len TOK_NONE: unknown id */
    int32_t added;             /* index into tokenizer.added, or -1 */
} tok_id;

typedef struct {
    uint32_t off, len;
    int32_t id;
    int special;
} tok_added;

enum tok_dec_kind { TOK_DEC_REPLACE, TOK_DEC_BYTE_FALLBACK, TOK_DEC_FUSE };

typedef struct {
    enum tok_dec_kind kind;
    uint32_t from_off, from_len, to_off, to_len; /* Replace only */
} tok_dec_step;

struct tokenizer {
    tok_arena arena;
    int32_t n_ids;
    tok_id *ids;
    tok_smap vocab;     /* model.vocab piece -> id */
    tok_smap added_map; /* added-token content -> id */
    tok_qmap merges;    /* (left, right) -> (rank, result) */
    tok_qmap trie;      /* added-token contents, for leftmost-longest matching */
    int32_t *trie_term; /* per trie node: the added token ending there, or -1 */
    uint32_t n_trie_nodes;
    unsigned char added_first[256]; /* 1 where some added token starts with that byte */
    tok_added *added;
    int32_t n_added;
    int32_t byte_ids[256]; /* id of <0xNN>, or -1 */
    int32_t unk_id;        /* -1: no unk token (unknown characters are dropped, as in HF) */
    int fuse_unk, byte_fallback, ignore_merges;
    int has_replace; /* normaliser Replace: rep_from -> rep_to */
    uint32_t rep_from_off, rep_from_len, rep_to_off, rep_to_len;
    int has_split; /* pre-tokeniser Split(MergedWithPrevious) on split pattern */
    uint32_t split_off, split_len;
    tok_dec_step dec[TOK_MAX_DECODE_STEPS];
    int n_dec;
    const char *src; /* file name for messages during load */
};

__attribute__((format(printf, 2, 3))) static void tok_log(const tokenizer *t, const char *fmt,
                                                          ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_msg(LOG_ERROR, "tokenizer", "%s: %s", t->src, msg);
}

/* Logs a load error and evaluates to -1 (a macro, so the -1 is visible to the analyzers). */
#define TOK_ERR(t, ...) (tok_log((t), __VA_ARGS__), -1)

/* Appends n bytes and returns their offset, or TOK_NONE when out of memory or past 4 GiB. */
static uint32_t arena_put(tok_arena *a, const char *s, size_t n) {
    if (a->len + n >= TOK_NONE) return TOK_NONE;
    if (a->len + n > a->cap) {
        size_t cap = a->cap ? a->cap : 1 << 16;
        while (cap < a->len + n)
            cap *= 2;
        char *nb = realloc(a->buf, cap);
        if (!nb) return TOK_NONE;
        a->buf = nb;
        a->cap = cap;
    }
    if (n) memcpy(a->buf + a->len, s, n);
    uint32_t off = (uint32_t)a->len;
    a->len += n;
    return off;
}

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a: pieces are short, so a simple hash is enough */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33; /* murmur3's finaliser: id pairs differ in few bits */
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Capacity: a power of two at least twice n, so probes stay short. */
static size_t map_cap(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

static int smap_init(tok_smap *m, size_t n) {
    size_t cap = map_cap(n);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++)
        m->slots[i].val = -1;
    m->mask = cap - 1;
    return 0;
}

/* The slot holding s, or the empty slot where it would go. */
static tok_sslot *smap_slot(const tok_smap *m, const char *arena, const char *s, size_t n,
                            uint32_t h) {
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        tok_sslot *e = &m->slots[i];
        if (e->val < 0) return e;
        if (e->hash == h && e->len == n && memcmp(arena + e->off, s, n) == 0) return e;
    }
}

static int32_t smap_get(const tok_smap *m, const char *arena, const char *s, size_t n) {
    if (!m->slots) return -1;
    return smap_slot(m, arena, s, n, hash_bytes(s, n))->val;
}

static int qmap_init(tok_qmap *m, size_t n) {
    size_t cap = map_cap(n);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++)
        m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    return 0;
}

static tok_qslot *qmap_slot(const tok_qmap *m, uint64_t key) {
    for (size_t i = hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
        tok_qslot *e = &m->slots[i];
        if (e->key == key || e->key == UINT64_MAX) return e;
    }
}

static const tok_qslot *qmap_get(const tok_qmap *m, uint64_t key) {
    if (!m->slots) return NULL;
    const tok_qslot *e = qmap_slot(m, key);
    return e->key == key ? e : NULL;
}

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

/* ---- load: configuration ----------------------------------------------------------------- */

/* JSON null means "not set" in HF files, so it reads as absent. */
static json_t *tok_get(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* Reads {"String": s} (HF's pattern form) into the arena. Regex patterns are refused. */
static int tok_pattern(tokenizer *t, json_t *pat, const char *path, uint32_t *off, uint32_t *len) {
    json_t *s = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
    if (!json_is_string(s) || json_string_length(s) == 0)
        return TOK_ERR(t, "%s: only a non-empty {\"String\": ...} pattern is supported", path);
    *len = (uint32_t)json_string_length(s);
    *off = arena_put(&t->arena, json_string_value(s), *len);
    return *off == TOK_NONE ? TOK_ERR(t, "out of memory") : 0;
}

static int tok_read_normalizer(tokenizer *t, json_t *root) {
    json_t *n = tok_get(root, "normalizer");
    if (!n) return 0;
    json_t *type = json_object_get(n, "type");
    json_t *content = json_object_get(n, "content");
    if (!json_is_string(type) || strcmp(json_string_value(type), "Replace") != 0)
        return TOK_ERR(t, "normalizer.type: only Replace (or null) is supported");
    if (!json_is_string(content)) return TOK_ERR(t, "normalizer.content: not a string");
    if (tok_pattern(t, json_object_get(n, "pattern"), "normalizer.pattern", &t->rep_from_off,
                    &t->rep_from_len))
        return -1;
    t->rep_to_len = (uint32_t)json_string_length(content);
    t->rep_to_off = arena_put(&t->arena, json_string_value(content), t->rep_to_len);
    if (t->rep_to_off == TOK_NONE) return TOK_ERR(t, "out of memory");
    t->has_replace = 1;
    return 0;
}

static int tok_read_pre_tokenizer(tokenizer *t, json_t *root) {
    json_t *p = tok_get(root, "pre_tokenizer");
    if (!p) return 0;
    json_t *type = json_object_get(p, "type");
    json_t *beh = json_object_get(p, "behavior");
    if (!json_is_string(type) || strcmp(json_string_value(type), "Split") != 0)
        return TOK_ERR(t, "pre_tokenizer.type: only Split (or null) is supported");
    if (!json_is_string(beh) || strcmp(json_string_value(beh), "MergedWithPrevious") != 0)
        return TOK_ERR(t, "pre_tokenizer.behavior: only MergedWithPrevious is supported");
    if (json_is_true(json_object_get(p, "invert")))
        return TOK_ERR(t, "pre_tokenizer.invert: true is not supported");
    if (tok_pattern(t, json_object_get(p, "pattern"), "pre_tokenizer.pattern", &t->split_off,
                    &t->split_len))
        return -1;
    t->has_split = 1;
    return 0;
}

static int tok_read_decode_step(tokenizer *t, json_t *d, const char *path) {
    json_t *type = json_object_get(d, "type");
    const char *ty = json_is_string(type) ? json_string_value(type) : "";
    if (t->n_dec == TOK_MAX_DECODE_STEPS) return TOK_ERR(t, "%s: too many decoders", path);
    tok_dec_step *s = &t->dec[t->n_dec];
    if (strcmp(ty, "ByteFallback") == 0) {
        s->kind = TOK_DEC_BYTE_FALLBACK;
    } else if (strcmp(ty, "Fuse") == 0) {
        s->kind = TOK_DEC_FUSE;
    } else if (strcmp(ty, "Replace") == 0) {
        json_t *content = json_object_get(d, "content");
        if (!json_is_string(content)) return TOK_ERR(t, "%s.content: not a string", path);
        s->kind = TOK_DEC_REPLACE;
        if (tok_pattern(t, json_object_get(d, "pattern"), path, &s->from_off, &s->from_len))
            return -1;
        s->to_len = (uint32_t)json_string_length(content);
        s->to_off = arena_put(&t->arena, json_string_value(content), s->to_len);
        if (s->to_off == TOK_NONE) return TOK_ERR(t, "out of memory");
    } else {
        return TOK_ERR(t, "%s.type: \"%s\" is not supported (Replace, ByteFallback, Fuse)", path,
                       ty);
    }
    t->n_dec++;
    return 0;
}

static int tok_read_decoder(tokenizer *t, json_t *root) {
    json_t *d = tok_get(root, "decoder");
    if (!d) return 0;
    json_t *type = json_object_get(d, "type");
    if (json_is_string(type) && strcmp(json_string_value(type), "Sequence") == 0) {
        json_t *list = json_object_get(d, "decoders");
        if (!json_is_array(list)) return TOK_ERR(t, "decoder.decoders: not an array");
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
            char path[48];
            (void)snprintf(path, sizeof path, "decoder.decoders[%zu]", i);
            if (tok_read_decode_step(t, v, path)) return -1;
        }
        return 0;
    }
    return tok_read_decode_step(t, d, "decoder");
}

/* The BPE options; every one that would change the output and is not implemented is refused. */
static int tok_read_model_options(tokenizer *t, json_t *model) {
    json_t *type = json_object_get(model, "type");
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "BPE") != 0))
        return TOK_ERR(t, "model.type: only BPE is supported");
    json_t *drop = tok_get(model, "dropout");
    if (drop && !(json_is_number(drop) && json_number_value(drop) == 0.0))
        return TOK_ERR(t, "model.dropout: only null is supported");
    const char *empty_only[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        json_t *v = tok_get(model, empty_only[i]);
        if (v && !(json_is_string(v) && json_string_length(v) == 0))
            return TOK_ERR(t, "model.%s: only null is supported", empty_only[i]);
    }
    const char *flags[] = {"fuse_unk", "byte_fallback", "ignore_merges"};
    int *dst[] = {&t->fuse_unk, &t->byte_fallback, &t->ignore_merges};
    for (int i = 0; i < 3; i++) {
        json_t *v = tok_get(model, flags[i]);
        if (v && !json_is_boolean(v)) return TOK_ERR(t, "model.%s: not a boolean", flags[i]);
        *dst[i] = json_is_true(v);
    }
    if (!json_is_object(json_object_get(model, "vocab")))
        return TOK_ERR(t, "model.vocab: not an object");
    if (!json_is_array(json_object_get(model, "merges")))
        return TOK_ERR(t, "model.merges: not an array");
    return 0;
}

/* ---- load: ids, vocab, added tokens, merges ---------------------------------------------- */

static int tok_check_id(const tokenizer *t, json_t *v, const char *what, int32_t *id) {
    /* ids index dense tables; 2^28 bounds what a hostile file can make us allocate */
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 28))
        return TOK_ERR(t, "%s: id is not an integer in [0, 2^28)", what);
    *id = (int32_t)json_integer_value(v);
    return 0;
}

/* Finds the largest id and allocates the per-id table. Sparse id spaces are refused: the
 * table is dense, and real files number their tokens 0..n-1. */
static int tok_alloc_ids(tokenizer *t, json_t *vocab, json_t *added) {
    int32_t max_id = -1, id = 0;
    const char *key;
    size_t klen, i;
    json_t *v;
    json_object_keylen_foreach(vocab, key, klen, v) {
        (void)klen;
        if (tok_check_id(t, v, "model.vocab", &id)) return -1;
        if (id > max_id) max_id = id;
    }
    json_array_foreach(added, i, v) {
        if (tok_check_id(t, json_object_get(v, "id"), "added_tokens[].id", &id)) return -1;
        if (id > max_id) max_id = id;
    }
    size_t n_entries = json_object_size(vocab) + json_array_size(added);
    if ((size_t)max_id >= 2 * n_entries + 256)
        return TOK_ERR(t, "largest id %d is far above the %zu entries: sparse ids unsupported",
                       (int)max_id, n_entries);
    t->n_ids = max_id + 1;
    t->ids = malloc((size_t)(t->n_ids ? t->n_ids : 1) * sizeof *t->ids);
    if (!t->ids) return TOK_ERR(t, "out of memory");
    for (int32_t k = 0; k < t->n_ids; k++)
        t->ids[k] = (tok_id){.voc_len = TOK_NONE, .dec_len = TOK_NONE, .added = -1};
    return 0;
}

/* Inserts key -> id into m, the key copied into the arena. A repeated key keeps the last id,
 * as HF's hash maps do. Returns the arena offset, or TOK_NONE when out of memory. */
static uint32_t tok_map_put(tokenizer *t, tok_smap *m, const char *key, size_t n, int32_t id) {
    uint32_t h = hash_bytes(key, n);
    tok_sslot *e = smap_slot(m, t->arena.buf, key, n, h);
    if (e->val >= 0) {
        e->val = id;
        return e->off;
    }
    uint32_t off = arena_put(&t->arena, key, n);
    if (off == TOK_NONE) return TOK_NONE;
    *e = (tok_sslot){.off = off, .len = (uint32_t)n, .hash = h, .val = id};
    return off;
}

static int tok_read_vocab(tokenizer *t, json_t *vocab) {
    if (smap_init(&t->vocab, json_object_size(vocab))) return TOK_ERR(t, "out of memory");
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach(vocab, key, klen, v) {
        int32_t id = (int32_t)json_integer_value(v); /* checked by tok_alloc_ids */
        uint32_t off = tok_map_put(t, &t->vocab, key, klen, id);
        if (off == TOK_NONE) return TOK_ERR(t, "out of memory");
        t->ids[id].voc_off = off;
        t->ids[id].voc_len = (uint32_t)klen;
    }
    return 0;
}

/* One added token: flags we do not implement are refused, not ignored. */
static int tok_read_added_one(tokenizer *t, json_t *a, size_t i) {
    json_t *content = json_object_get(a, "content");
    if (!json_is_string(content) || json_string_length(content) == 0)
        return TOK_ERR(t, "added_tokens[%zu].content: not a non-empty string", i);
    const char *unsupported[] = {"lstrip", "rstrip", "single_word", "normalized"};
    for (int k = 0; k < 4; k++)
        if (json_is_true(json_object_get(a, unsupported[k])))
            return TOK_ERR(t, "added_tokens[%zu].%s: true is not supported", i, unsupported[k]);
    const char *s = json_string_value(content);
    size_t n = json_string_length(content);
    /* HF gives an added token the id of its content in model.vocab when it has one */
    int32_t id = smap_get(&t->vocab, t->arena.buf, s, n);
    if (id < 0) id = (int32_t)json_integer_value(json_object_get(a, "id"));
    uint32_t off = tok_map_put(t, &t->added_map, s, n, id);
    if (off == TOK_NONE) return TOK_ERR(t, "out of memory");
    tok_added *ad = &t->added[t->n_added];
    *ad = (tok_added){.off = off, .len = (uint32_t)n, .id = id};
    ad->special = json_is_true(json_object_get(a, "special"));
    t->ids[id].added = t->n_added++;
    return 0;
}

/* Adds content to the trie of added tokens (node 0 is the root). */
static int tok_trie_add(tokenizer *t, const tok_added *ad) {
    uint32_t node = 0;
    for (uint32_t k = 0; k < ad->len; k++) {
        unsigned char c = (unsigned char)t->arena.buf[ad->off + k];
        tok_qslot *e = qmap_slot(&t->trie, ((uint64_t)node << 8) | c);
        if (e->key == UINT64_MAX) {
            *e = (tok_qslot){.key = ((uint64_t)node << 8) | c, .a = t->n_trie_nodes};
            t->trie_term[t->n_trie_nodes++] = -1;
        }
        node = e->a;
    }
    t->trie_term[node] = ad->id;
    t->added_first[(unsigned char)t->arena.buf[ad->off]] = 1;
    return 0;
}

static int tok_read_added(tokenizer *t, json_t *list) {
    size_t n = json_array_size(list), bytes = 0, i;
    json_t *a;
    json_array_foreach(list, i, a) {
        json_t *c = json_object_get(a, "content");
        bytes += json_is_string(c) ? json_string_length(c) : 0;
    }
    t->added = malloc((n ? n : 1) * sizeof *t->added);
    t->trie_term = malloc((bytes + 1) * sizeof *t->trie_term);
    if (!t->added || !t->trie_term || smap_init(&t->added_map, n) || qmap_init(&t->trie, bytes))
        return TOK_ERR(t, "out of memory");
    t->trie_term[0] = -1;
    t->n_trie_nodes = 1;
    json_array_foreach(list, i, a) {
        if (tok_read_added_one(t, a, i)) return -1;
    }
    for (int32_t k = 0; k < t->n_added; k++)
        tok_trie_add(t, &t->added[k]);
    return 0;
}

/* Splits merge i into its two pieces: ["a", "b"], or "a b" (older files; exactly one space). */
static int tok_merge_parts(tokenizer *t, json_t *m, size_t i, const char **a, size_t *na,
                           const char **b, size_t *nb) {
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *na = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *nb = json_string_length(json_array_get(m, 1));
        return 0;
    }
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = memchr(s, ' ', n);
        if (sp && !memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) {
            *a = s;
            *na = (size_t)(sp - s);
            *b = sp + 1;
            *nb = n - *na - 1;
            return 0;
        }
    }
    return TOK_ERR(t, "model.merges[%zu]: not [\"a\", \"b\"] nor \"a b\"", i);
}

/* Rank = position in the list (HF skips "#version" lines of the older format); a pair that
 * appears twice keeps its last rank, as HF's map does. */
static int tok_read_merges(tokenizer *t, json_t *list, char **cat, size_t *cat_cap) {
    if (qmap_init(&t->merges, json_array_size(list))) return TOK_ERR(t, "out of memory");
    uint32_t rank = 0;
    size_t i;
    json_t *m;
    json_array_foreach(list, i, m) {
        if (json_is_string(m) && strncmp(json_string_value(m), "#version", 8) == 0) continue;
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if (tok_merge_parts(t, m, i, &a, &na, &b, &nb)) return -1;
        if (!*cat || na + nb + 1 > *cat_cap) {
            char *nc = realloc(*cat, na + nb + 1);
            if (!nc) return TOK_ERR(t, "out of memory");
            *cat = nc;
            *cat_cap = na + nb + 1;
        }
        memcpy(*cat, a, na);
        memcpy(*cat + na, b, nb);
        int32_t ia = smap_get(&t->vocab, t->arena.buf, a, na);
        int32_t ib = smap_get(&t->vocab, t->arena.buf, b, nb);
        int32_t ic = smap_get(&t->vocab, t->arena.buf, *cat, na + nb);
        if (ia < 0 || ib < 0 || ic < 0)
            return TOK_ERR(t, "model.merges[%zu]: a piece or the merged piece is not in the vocab",
                           i);
        uint64_t key = ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib;
        *qmap_slot(&t->merges, key) = (tok_qslot){.key = key, .a = rank++, .b = ic};
    }
    return 0;
}

/* ---- load: decoded bytes ----------------------------------------------------------------- */

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Replaces every from with to in buf[0..*n) (cap bytes of room). Returns -1 if it overflows. */
static int tok_replace(char *buf, size_t *n, size_t cap, const char *from, size_t nf,
                       const char *to, size_t nt) {
    char tmp[TOK_MAX_PIECE];
    size_t w = 0;
    for (size_t i = 0; i < *n;) {
        int hit = i + nf <= *n && memcmp(buf + i, from, nf) == 0;
        size_t k = hit ? nt : 1;
        if (w + k > sizeof tmp) return -1;
        memcpy(tmp + w, hit ? to : buf + i, k);
        w += k;
        i += hit ? nf : 1;
    }
    if (w > cap) return -1;
    memcpy(buf, tmp, w);
    *n = w;
    return 0;
}

/* Runs the decoder steps over one token's string (HF decodes added tokens the same way). */
static int tok_decode_one(tokenizer *t, int32_t id, const char *s, size_t n) {
    char buf[TOK_MAX_PIECE];
    if (n > sizeof buf)
        return TOK_ERR(t, "token %d: piece longer than %zu bytes", (int)id, sizeof buf);
    memcpy(buf, s, n);
    for (int k = 0; k < t->n_dec; k++) {
        const tok_dec_step *st = &t->dec[k];
        if (st->kind == TOK_DEC_REPLACE &&
            tok_replace(buf, &n, sizeof buf, t->arena.buf + st->from_off, st->from_len,
                        t->arena.buf + st->to_off, st->to_len))
            return TOK_ERR(t, "token %d: decoded piece too long", (int)id);
        if (st->kind == TOK_DEC_BYTE_FALLBACK && n == 6 && memcmp(buf, "<0x", 3) == 0 &&
            buf[5] == '>' && hex_val(buf[3]) >= 0 && hex_val(buf[4]) >= 0) {
            buf[0] = (char)(hex_val(buf[3]) * 16 + hex_val(buf[4]));
            n = 1;
        }
    }
    uint32_t off = arena_put(&t->arena, buf, n);
    if (off == TOK_NONE) return TOK_ERR(t, "out of memory");
    t->ids[id].dec_off = off;
    t->ids[id].dec_len = (uint32_t)n;
    return 0;
}

static int tok_finish(tokenizer *t, json_t *model) {
    for (int32_t id = 0; id < t->n_ids; id++) {
        /* tok_decode_one copies its input before it grows the arena, so these may point in */
        const tok_id *e = &t->ids[id];
        if (e->added >= 0) {
            const tok_added *a = &t->added[e->added];
            if (tok_decode_one(t, id, t->arena.buf + a->off, a->len)) return -1;
        } else if (e->voc_len != TOK_NONE) {
            if (tok_decode_one(t, id, t->arena.buf + e->voc_off, e->voc_len)) return -1;
        }
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        (void)snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_ids[b] = smap_get(&t->vocab, t->arena.buf, name, 6);
    }
    t->unk_id = -1;
    json_t *unk = tok_get(model, "unk_token");
    if (unk) {
        if (!json_is_string(unk)) return TOK_ERR(t, "model.unk_token: not a string");
        t->unk_id =
            smap_get(&t->vocab, t->arena.buf, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0) return TOK_ERR(t, "model.unk_token: not in model.vocab");
    }
    return 0;
}

static int tok_build(tokenizer *t, json_t *root) {
    json_t *model = json_object_get(root, "model");
    json_t *added = tok_get(root, "added_tokens");
    if (!json_is_object(model)) return TOK_ERR(t, "model: not an object");
    if (added && !json_is_array(added)) return TOK_ERR(t, "added_tokens: not an array");
    json_t *no_added = json_array();
    if (!no_added) return TOK_ERR(t, "out of memory");
    if (!added) added = no_added;
    char *cat = NULL;
    size_t cat_cap = 0;
    int rc = -1;
    if (!tok_read_normalizer(t, root) && !tok_read_pre_tokenizer(t, root) &&
        !tok_read_decoder(t, root) && !tok_read_model_options(t, model) &&
        !tok_alloc_ids(t, json_object_get(model, "vocab"), added) &&
        !tok_read_vocab(t, json_object_get(model, "vocab")) && !tok_read_added(t, added) &&
        !tok_read_merges(t, json_object_get(model, "merges"), &cat, &cat_cap) &&
        !tok_finish(t, model))
        rc = 0;
    free(cat);
    json_decref(no_added);
    return rc;
}

/* ---- public: load and queries ------------------------------------------------------------ */

static int tok_load_named(const char *json, size_t len, const char *src, tokenizer **out) {
    *out = NULL;
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        log_msg(LOG_ERROR, "tokenizer", "%s: out of memory", src);
        return -1;
    }
    t->src = src;
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_ALLOW_NUL, &jerr);
    int rc;
    if (!root) {
        rc = TOK_ERR(t, "line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    } else {
        rc = json_is_object(root) ? tok_build(t, root) : TOK_ERR(t, "top level: not an object");
        json_decref(root);
    }
    t->src = NULL;
    if (rc) {
        tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int tokenizer_load_json(const char *json, size_t len, tokenizer **out) {
    return tok_load_named(json, len, "tokenizer.json (in memory)", out);
}

int tokenizer_load(const char *path, tokenizer **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        log_msg(LOG_ERROR, "tokenizer", "%s: cannot open", path);
        return -1;
    }
    size_t len = 0, cap = 1 << 20;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        log_msg(LOG_ERROR, "tokenizer", "%s: read failed or out of memory", path);
        return -1;
    }
    int rc = tok_load_named(buf, len, path, out);
    free(buf);
    return rc;
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    free(t->arena.buf);
    free(t->ids);
    free(t->vocab.slots);
    free(t->added_map.slots);
    free(t->merges.slots);
    free(t->trie.slots);
    free(t->trie_term);
    free(t->added);
    free(t);
}

int tokenizer_vocab_size(const tokenizer *t) { return t->n_ids; }

int32_t tokenizer_piece_id(const tokenizer *t, const char *piece) {
    size_t n = strlen(piece);
    int32_t id = smap_get(&t->added_map, t->arena.buf, piece, n);
    return id >= 0 ? id : smap_get(&t->vocab, t->arena.buf, piece, n);
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
    const tok_qslot *m = qmap_get(&t->merges, key);
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
            qmap_get(&t->merges, ((uint64_t)(uint32_t)s->id << 32) | (uint32_t)r->id);
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
        int32_t id = smap_get(&t->vocab, t->arena.buf, s + i, cl);
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
        int32_t whole = smap_get(&t->vocab, t->arena.buf, s, n);
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
        const tok_qslot *q = qmap_get(&t->trie, ((uint64_t)node << 8) | s[i]);
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
