/* runtime/text/tokenizer_tables.c - see tokenizer_tables.h: the byte arena and the two hash maps
 * (string -> id, 64-bit key -> two values) every tokenizer table is built from. */
#include "runtime/text/tokenizer_tables.h"

#include <stdlib.h>
#include <string.h>

uint32_t tok_arena_put(tok_arena *a, const char *s, size_t n) {
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

uint32_t tok_hash_bytes(const char *s, size_t n) {
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

int tok_smap_init(tok_smap *m, size_t n) {
    size_t cap = map_cap(n);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++)
        m->slots[i].val = -1;
    m->mask = cap - 1;
    return 0;
}

/* The slot holding s, or the empty slot where it would go. */
tok_sslot *tok_smap_slot(const tok_smap *m, const char *arena, const char *s, size_t n,
                         uint32_t h) {
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        tok_sslot *e = &m->slots[i];
        if (e->val < 0) return e;
        if (e->hash == h && e->len == n && memcmp(arena + e->off, s, n) == 0) return e;
    }
}

int32_t tok_smap_get(const tok_smap *m, const char *arena, const char *s, size_t n) {
    if (!m->slots) return -1;
    return tok_smap_slot(m, arena, s, n, tok_hash_bytes(s, n))->val;
}

int tok_qmap_init(tok_qmap *m, size_t n) {
    size_t cap = map_cap(n);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++)
        m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    return 0;
}

tok_qslot *tok_qmap_slot(const tok_qmap *m, uint64_t key) {
    for (size_t i = hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
        tok_qslot *e = &m->slots[i];
        if (e->key == key || e->key == UINT64_MAX) return e;
    }
}

const tok_qslot *tok_qmap_get(const tok_qmap *m, uint64_t key) {
    if (!m->slots) return NULL;
    const tok_qslot *e = tok_qmap_slot(m, key);
    return e->key == key ? e : NULL;
}
