/* runtime/text/tokenizer.h - a Hugging Face tokenizer.json of Gemma's kind, in C: BPE with byte
 * fallback, the space-to-U+2581 normaliser, merges by rank, added and special tokens.
 *
 * Owns: loading tokenizer.json, encoding text to ids, decoding ids to bytes, and incremental
 * detokenisation that never emits a broken UTF-8 character. Does not own: BOS (the caller
 * adds id 2 exactly once), the chat template (runtime/text/chat.h), stop handling. */
#ifndef G4_TOKENIZER_H
#define G4_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

/* Loads tokenizer.json at path. Returns 0 and *out, or -1 after logging the cause (file,
 * JSON path of the bad field). */
int tokenizer_load(const char *path, tokenizer **out);

/* The same from JSON text in memory (len bytes, need not be NUL-terminated). */
int tokenizer_load_json(const char *json, size_t len, tokenizer **out);

void tokenizer_free(tokenizer *t);

/* Number of ids (the largest id + 1). */
int tokenizer_vocab_size(const tokenizer *t);

/* The id whose piece or added-token content is exactly piece (e.g. "<|turn>"), or -1. */
int32_t tokenizer_piece_id(const tokenizer *t, const char *piece);

/* Encodes len bytes of text; no BOS is added. With special != 0, added tokens written in the
 * text (e.g. "<|turn>") become their ids, as HF's tokenizer does by default ("prompt"); with
 * special == 0 all text is ordinary text ("messages" content: no message can forge a turn).
 * Merging is O(n log n) in the length of a piece (Gemma's whole prompt is one piece).
 * Returns the number of ids and stores a malloc'ed array in *ids (caller frees), or -1 when
 * out of memory. Invalid UTF-8 is encoded byte by byte through byte fallback. */
int tokenizer_encode(const tokenizer *t, const char *text, size_t len, int special, int32_t **ids);

/* The bytes id decodes to (U+2581 becomes a space, <0xAB> the byte 0xAB, an added token its
 * content), in *bytes (owned by t) with *len bytes. Returns 0, or -1 for an unknown id. */
int tokenizer_token_bytes(const tokenizer *t, int32_t id, const char **bytes, size_t *len);

/* 1 when id is an added token marked special (pad, eos, bos, unk, control tokens). */
int tokenizer_is_special(const tokenizer *t, int32_t id);

/* Incremental detokenisation of one stream: bytes of a token that end inside a multi-byte
 * UTF-8 character are held until the character completes. */
typedef struct detok {
    unsigned char held[8];
    int n_held;
} detok;

/* Appends the complete UTF-8 of id (with any bytes held before) to out (cap bytes; at most
 * the token's bytes + 8 are written) and returns the count written; held bytes stay in d.
 * A byte sequence that can never become valid UTF-8 is written as U+FFFD. */
size_t detok_push(detok *d, const tokenizer *t, int32_t id, char *out, size_t cap);

/* Writes what is still held (as U+FFFD per incomplete character) at the end of a stream. */
size_t detok_flush(detok *d, char *out, size_t cap);

#endif
