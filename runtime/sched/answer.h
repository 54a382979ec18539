/* runtime/sched/answer.h - one request's answer: the text its tokens make, and the lines that carry
 * it.
 *
 * Owns: incremental detokenisation of the request's sampled tokens, the thought channel (kept
 * apart from the text as reasoning), stop tokens and stop strings (text that could still become
 * a stop string is held back; a match ends the answer just before it), the finish reasons a
 * token decides ("stop", "length" at max_tokens, "context" at serve.max_context), and writing
 * the request's token lines and its one terminal line (done, or an internal error) as JSON lines
 * or, for --text, to a sink. Every append to the answer is checked: running out of memory ends
 * the request with an error that says so, never with a shortened answer.
 * Does not own: choosing tokens, queueing, timing, KV pages (runtime/sched/sched.c); the line
 * formats (runtime/proto/proto.c). */
#ifndef G4_ANSWER_H
#define G4_ANSWER_H

#include "runtime/text/chat.h"
#include "runtime/proto/proto.h"
#include "runtime/text/tokenizer.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The error message of an answer that ran out of memory. */
#define ANSWER_OUT_OF_MEMORY                                                                       \
    "out of memory holding the answer text; this request's answer ends here"

/* Where --text sends an answer instead of JSON lines: the released text as it comes (never the
 * reasoning), then once the end: its finish reason, or NULL and the error that ended it. */
typedef struct answer_sink {
    void (*text)(void *ctx, const char *p, size_t n);
    void (*end)(void *ctx, const char *finish_reason, const char *error);
    void *ctx;
} answer_sink;

typedef struct answer_buf {
    char *p; /* NUL-terminated once anything was added; NULL before */
    size_t len, cap;
} answer_buf;

typedef struct answer {
    const proto_request *req; /* id, stop strings, max_tokens, stream, logprobs, ignore_eos */
    const tokenizer *tk;      /* NULL: token requests only, the answer has no text */
    FILE *out;
    const answer_sink *sink; /* NULL: JSON lines on out */
    int n_prompt, max_context;
    int n_out; /* tokens in the answer so far (the caller reads it, never writes it) */
    /* The most bytes the three buffers may hold together, 0 for no limit but memory's: the
     * tests' way onto the out-of-memory path. */
    size_t max_bytes;
    detok dt;
    chat_stream cs;
    answer_buf text, held, reasoning; /* released text, text held for stop strings, thoughts */
} answer;

/* Why an answer ended, or ANSWER_MORE while it goes on. */
enum answer_end {
    ANSWER_MORE,
    ANSWER_STOP,      /* a stop token or a stop string */
    ANSWER_LENGTH,    /* max_tokens */
    ANSWER_CONTEXT,   /* prompt and answer reached max_context */
    ANSWER_CANCELLED, /* a cancel line, shutdown or a signal */
    ANSWER_FAILED     /* its error line is written */
};

/* Starts an empty answer for req (which must outlive it) after a prompt of n_prompt ids.
 * Allocates nothing, so it cannot fail. */
void answer_init(answer *a, const proto_request *req, const tokenizer *tk, int n_prompt,
                 int max_context, FILE *out, const answer_sink *sink);
void answer_free(answer *a);

/* 1 when tok ends the answer without joining it (<eos>, <turn|>, ...; never with ignore_eos):
 * then the caller ends it with answer_finish(a, ANSWER_STOP, ...). */
int answer_is_stop_token(const answer *a, int32_t tok);

/* Adds tok (not a stop token) as the answer's next token: its text is released or held, its
 * token line written when streaming (lp is used when the request asks for logprobs). Returns
 * why the answer ends now (the caller then calls answer_finish), ANSWER_MORE, or ANSWER_FAILED
 * when out of memory: the error line is written and the caller ends the request. */
enum answer_end answer_token(answer *a, int32_t tok, const proto_logprob *lp);

/* The done line's figures that are the scheduler's. */
typedef struct answer_timing {
    double queue_ms, ttft_ms, decode_ms_per_token;
} answer_timing;

/* Ends the answer for why (not ANSWER_MORE or ANSWER_FAILED): the held text and the last
 * bytes of an incomplete character join the text, then the done line. Returns 0, or -1 when
 * out of memory (the error line was written instead). */
int answer_finish(answer *a, enum answer_end why, const answer_timing *t);

/* Ends the answer with an internal error line naming message (its terminal line). */
void answer_fail(answer *a, const char *message);

#endif
