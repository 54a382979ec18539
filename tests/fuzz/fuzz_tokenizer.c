/* tests/fuzz/fuzz_tokenizer.c - libFuzzer target for runtime/tokenizer's JSON loader.
 *
 * Owns: feeding arbitrary bytes to tokenizer_load_json and, when they load, encoding a fixed
 * string and the input itself in both modes, decoding every id and streaming it through
 * detok_push, so the encoder and decoder see whatever vocab, merges and added tokens the
 * fuzzer invents. It must never crash or leak (ASan/UBSan/LeakSanitizer). Seeds are small
 * valid tokenizer.json files in tests/fuzz/corpus_tokenizer/.
 *
 * Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -I. runtime/text/tokenizer.c
 *        runtime/base/log.c tests/fuzz/fuzz_tokenizer.c -ljansson -o /tmp/fuzz_tok
 * Run:   /tmp/fuzz_tok -max_total_time=60 -close_fd_mask=2 tests/fuzz/corpus_tokenizer
 *        (-close_fd_mask=2 silences the refusals every bad input logs to stderr) */
#include "runtime/text/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(const tokenizer *t, const char *text, size_t len) {
    for (int special = 0; special <= 1; special++) {
        int32_t *ids = NULL;
        int n = tokenizer_encode(t, text, len, special, &ids);
        detok d = {0};
        for (int k = 0; k < n; k++) {
            const char *bytes;
            size_t blen;
            (void)tokenizer_is_special(t, ids[k]);
            if (tokenizer_token_bytes(t, ids[k], &bytes, &blen) != 0) abort(); /* own ids */
            char out[4096 + 8];
            if (blen <= 4096) (void)detok_push(&d, t, ids[k], out, blen + 8);
        }
        char tail[8];
        (void)detok_flush(&d, tail, sizeof tail);
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tokenizer *t = NULL;
    if (tokenizer_load_json((const char *)data, size, &t) != 0) return 0;
    static const char fixed[] = "Hello  world\t\n<bos><|turn>user\nhi<turn|> caf\xC3\xA9 "
                                "\xF0\x9F\x98\x80 \xFF\xFE <unk> ab ab";
    exercise(t, fixed, sizeof fixed - 1);
    exercise(t, (const char *)data, size);
    (void)tokenizer_piece_id(t, "<bos>");
    (void)tokenizer_vocab_size(t);
    tokenizer_free(t);
    return 0;
}
