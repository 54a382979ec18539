/* tests/tokenizer/bench_tokenizer.c - how fast runtime/tokenizer loads and encodes.
 *
 * Owns: timing of tokenizer_load on the Gemma 3 file, of encoding the test corpus, and of
 * one ~128K-token prompt (corpus strings concatenated until the prompt holds 128K tokens,
 * so it mixes scripts, code, whitespace and control tokens). A benchmark, not a gate: it
 * prints plain lines, and says whether load < 1.5 s and the long prompt < 1 s.
 *
 * Usage: bench_tokenizer SHARED_TOKENIZER_JSON TESTS_TOKENIZER_DIR */
#include "runtime/text/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Appends every corpus string to *buf (the corpus as one stream); returns strings read. */
static int read_corpus(const char *dir, char **buf, size_t *len, size_t **ends) {
    char path[1024], line[1 << 16];
    (void)snprintf(path, sizeof path, "%s/corpus.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t cap = 1 << 20, n = 0, ecap = 4096;
    *buf = malloc(cap);
    *ends = malloc(ecap * sizeof **ends);
    *len = 0;
    while (fgets(line, sizeof line, f)) {
        json_error_t err;
        json_t *j = json_loads(line, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
        size_t k = json_string_length(j);
        while (*len + k > cap)
            *buf = realloc(*buf, cap *= 2);
        if (n == ecap) *ends = realloc(*ends, (ecap *= 2) * sizeof **ends);
        if (k) memcpy(*buf + *len, json_string_value(j), k);
        *len += k;
        (*ends)[n++] = *len;
        json_decref(j);
    }
    fclose(f);
    return (int)n;
}

static void bench_corpus(const tokenizer *t, const char *text, const size_t *ends, int n) {
    int reps = 20;
    long tokens = 0;
    double t0 = now_s();
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < n; i++) {
            size_t start = i ? ends[i - 1] : 0;
            int32_t *ids;
            int k = tokenizer_encode(t, text + start, ends[i] - start, 1, &ids);
            tokens += k > 0 ? k : 0;
            free(ids);
        }
    }
    double s = now_s() - t0, mb = (double)ends[n - 1] * reps / 1e6;
    printf("corpus: %d strings x %d, %.2f MB, %ld tokens in %.3f s: %.1f MB/s, %.2f M tokens/s\n",
           n, reps, mb, tokens, s, mb / s, (double)tokens / s / 1e6);
}

static void bench_long(const tokenizer *t, const char *corpus, size_t len) {
    /* tokens per byte of the corpus, to size a prompt of ~128K tokens */
    int32_t *ids;
    int n = tokenizer_encode(t, corpus, len, 1, &ids);
    free(ids);
    size_t want = (size_t)((double)len * 131072.0 / (double)n), plen = 0;
    char *prompt = malloc(want + len + 500000);
    while (plen < want) {
        size_t k = want - plen < len ? want - plen : len;
        while (k < len && ((unsigned char)corpus[k] & 0xC0) == 0x80)
            k--; /* whole characters */
        memcpy(prompt + plen, corpus, k);
        plen += k;
        if (k < len) break;
    }
    for (int special = 1; special >= 0; special--) {
        double t0 = now_s();
        n = tokenizer_encode(t, prompt, plen, special, &ids);
        double s = now_s() - t0;
        free(ids);
        printf("long prompt (special=%d): %zu bytes -> %d tokens in %.3f s (%.1f MB/s): %s 1 s\n",
               special, plen, n, s, (double)plen / s / 1e6, s < 1.0 ? "under" : "NOT under");
    }
    /* the worst case for merging: one piece of 500K characters with no added tokens */
    memset(prompt, 'a', 500000);
    double t0 = now_s();
    n = tokenizer_encode(t, prompt, 500000, 0, &ids);
    free(ids);
    printf("one 500000-byte run of 'a': %d tokens in %.3f s\n", n, now_s() - t0);
    free(prompt);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SHARED_TOKENIZER_JSON TESTS_TOKENIZER_DIR\n", argv[0]);
        return 2;
    }
    tokenizer *t;
    double t0 = now_s();
    if (tokenizer_load(argv[1], &t) != 0) {
        printf("no tokenizer at %s: nothing to measure\n", argv[1]);
        return 0;
    }
    double s = now_s() - t0;
    printf("load: %s, %d ids in %.3f s: %s 1.5 s\n", argv[1], tokenizer_vocab_size(t), s,
           s < 1.5 ? "under" : "NOT under");
    char *text;
    size_t len, *ends;
    int n = read_corpus(argv[2], &text, &len, &ends);
    if (n > 0) {
        bench_corpus(t, text, ends, n);
        bench_long(t, text, len);
    }
    free(text);
    free(ends);
    tokenizer_free(t);
    return 0;
}
