/* tests/fuzz/fuzz_chat.c - libFuzzer target for runtime/text/chat: the chat template's input
 * (roles and contents a request's messages carry) and the thought-channel splitter.
 *
 * Owns: cutting the input at NUL bytes into up to 8 messages (each piece's first byte picks
 * a role, among them invalid ones; the rest is the content), rendering them with the bundled
 * tiny tokenizer with and without thinking, and routing the rendered ids' bytes through
 * chat_stream_route as an answer's stream would be. A crash, leak or overflow under
 * ASan/UBSan is a finding; a refusal is fine. Run from the repository root (the tokenizer is
 * tests/fixtures/tiny-moe/tokenizer.json). Seeds: tests/fuzz/corpus_chat/. */
#include "runtime/base/log.h"
#include "runtime/text/chat.h"
#include "runtime/text/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MESSAGES 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const tokenizer *tk;
    static int tried;
    if (!tried) {
        tried = 1;
        log_set_level(LOG_ERROR);
        tokenizer *t = NULL;
        if (tokenizer_load("tests/fixtures/tiny-moe/tokenizer.json", &t) == 0) tk = t;
    }
    if (!tk) return 0;
    static const char *const roles[] = {"system", "user", "model", "assistant", "tool", ""};
    char *copy = malloc(size + 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    chat_message m[MAX_MESSAGES];
    int n = 0;
    for (size_t at = 0; at <= size && n < MAX_MESSAGES;) {
        size_t len = strlen(copy + at);
        const char *piece = copy + at;
        m[n].role = roles[len ? (unsigned char)piece[0] % 6 : 1];
        m[n].content = len ? piece + 1 : piece;
        n++;
        at += len + 1;
    }
    for (int thinking = 0; thinking <= 1; thinking++) {
        int32_t *ids = NULL;
        char err[256];
        int k = chat_render(tk, m, n, thinking, &ids, err, sizeof err);
        chat_stream cs = {0};
        for (int i = 0; i < k; i++) {
            const char *bytes;
            size_t blen, skip = 0;
            if (tokenizer_token_bytes(tk, ids[i], &bytes, &blen) == 0)
                (void)chat_stream_route(&cs, ids[i], bytes, blen, &skip);
        }
        free(ids);
    }
    free(copy);
    return 0;
}
