/* runtime/text/tokenizer_tables.h - inside the tokenizer (runtime/tokenizer*.c only): the loaded
 * tokenizer's layout, its byte arena and open-addressing hash maps, and the load-time error
 * report. Split out so that loading (tokenizer_load.c) and encoding/decoding (tokenizer.c) share
 * one definition; nothing outside the tokenizer includes it. */
#ifndef G4_TOKENIZER_TABLES_H
#define G4_TOKENIZER_TABLES_H

#include "runtime/text/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

#define TOK_NONE UINT32_MAX /* no piece / no decoded bytes for this id */
#define TOK_MAX_DECODE_STEPS 8
#define TOK_MAX_PIECE 4096 /* bytes of one decoded token; Gemma's longest is under 100 */

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

/* Appends n bytes and returns their offset, or TOK_NONE when out of memory or past 4 GiB. */
uint32_t tok_arena_put(tok_arena *a, const char *s, size_t n);
uint32_t tok_hash_bytes(const char *s, size_t n);
/* A map for about n keys; 0, or -1 when out of memory. */
int tok_smap_init(tok_smap *m, size_t n);
/* The slot holding s (hash h), or the empty slot where it would go. */
tok_sslot *tok_smap_slot(const tok_smap *m, const char *arena, const char *s, size_t n, uint32_t h);
/* The id of s, or -1. */
int32_t tok_smap_get(const tok_smap *m, const char *arena, const char *s, size_t n);
int tok_qmap_init(tok_qmap *m, size_t n);
/* The slot holding key, or the empty slot where it would go. */
tok_qslot *tok_qmap_slot(const tok_qmap *m, uint64_t key);
/* The slot holding key, or NULL. */
const tok_qslot *tok_qmap_get(const tok_qmap *m, uint64_t key);

#endif
