/* runtime/text/tokenizer_load.c - reading tokenizer.json into the tables (see tokenizer.h and
 * tokenizer_tables.h): the normaliser, pre-tokeniser, decoder and model options Gemma's file
 * uses, the vocabulary, added tokens (and their trie), merges and each id's decoded bytes.
 * Anything the file asks for that encoding does not implement is refused here, with its JSON
 * path named (the shape of the whole tokenizer is described in tokenizer.c). */
#include "runtime/text/tokenizer_tables.h"

#include "runtime/base/log.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    *off = tok_arena_put(&t->arena, json_string_value(s), *len);
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
    t->rep_to_off = tok_arena_put(&t->arena, json_string_value(content), t->rep_to_len);
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
        s->to_off = tok_arena_put(&t->arena, json_string_value(content), s->to_len);
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
    uint32_t h = tok_hash_bytes(key, n);
    tok_sslot *e = tok_smap_slot(m, t->arena.buf, key, n, h);
    if (e->val >= 0) {
        e->val = id;
        return e->off;
    }
    uint32_t off = tok_arena_put(&t->arena, key, n);
    if (off == TOK_NONE) return TOK_NONE;
    *e = (tok_sslot){.off = off, .len = (uint32_t)n, .hash = h, .val = id};
    return off;
}

static int tok_read_vocab(tokenizer *t, json_t *vocab) {
    if (tok_smap_init(&t->vocab, json_object_size(vocab))) return TOK_ERR(t, "out of memory");
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
    int32_t id = tok_smap_get(&t->vocab, t->arena.buf, s, n);
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
        tok_qslot *e = tok_qmap_slot(&t->trie, ((uint64_t)node << 8) | c);
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
    if (!t->added || !t->trie_term || tok_smap_init(&t->added_map, n) ||
        tok_qmap_init(&t->trie, bytes))
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
    if (tok_qmap_init(&t->merges, json_array_size(list))) return TOK_ERR(t, "out of memory");
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
        int32_t ia = tok_smap_get(&t->vocab, t->arena.buf, a, na);
        int32_t ib = tok_smap_get(&t->vocab, t->arena.buf, b, nb);
        int32_t ic = tok_smap_get(&t->vocab, t->arena.buf, *cat, na + nb);
        if (ia < 0 || ib < 0 || ic < 0)
            return TOK_ERR(t, "model.merges[%zu]: a piece or the merged piece is not in the vocab",
                           i);
        uint64_t key = ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib;
        *tok_qmap_slot(&t->merges, key) = (tok_qslot){.key = key, .a = rank++, .b = ic};
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
    uint32_t off = tok_arena_put(&t->arena, buf, n);
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
        t->byte_ids[b] = tok_smap_get(&t->vocab, t->arena.buf, name, 6);
    }
    t->unk_id = -1;
    json_t *unk = tok_get(model, "unk_token");
    if (unk) {
        if (!json_is_string(unk)) return TOK_ERR(t, "model.unk_token: not a string");
        t->unk_id =
            tok_smap_get(&t->vocab, t->arena.buf, json_string_value(unk), json_string_length(unk));
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
        log_msg(LOG_ERROR, "tokenizer", "%s: cannot open: %s", path, strerror(errno));
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
