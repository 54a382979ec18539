/* runtime/sched/answer.c - see answer.h. A token's bytes go to the reasoning or through held: held
 * keeps the longest tail that could still start a stop string, and everything before it is
 * released into text, which is what the token line carries. */
#include "runtime/sched/answer.h"

#include <stdlib.h>
#include <string.h>

void answer_init(answer *a, const proto_request *req, const tokenizer *tk, int n_prompt,
                 int max_context, FILE *out, const answer_sink *sink) {
    memset(a, 0, sizeof *a);
    a->req = req;
    a->tk = tk;
    a->out = out;
    a->sink = sink;
    a->n_prompt = n_prompt;
    a->max_context = max_context;
}

void answer_free(answer *a) {
    free(a->text.p);
    free(a->held.p);
    free(a->reasoning.p);
    a->text = a->held = a->reasoning = (answer_buf){0};
}

/* Appends n bytes to b, one of a's buffers. -1 when memory (or a->max_bytes) runs out: b is
 * then as it was, and the caller must end the answer, since a part of it is lost. */
static int add(answer *a, answer_buf *b, const char *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        size_t total = a->text.cap + a->held.cap + a->reasoning.cap - b->cap + cap;
        if (a->max_bytes && total > a->max_bytes) return -1;
        char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

/* The longest suffix of held that is a proper prefix of a stop string: it must stay held. */
static size_t stop_prefix_len(const answer *a) {
    size_t keep = 0;
    for (int i = 0; i < a->req->n_stop; i++) {
        size_t sl = strlen(a->req->stop[i]);
        for (size_t k = sl - 1; k > keep; k--)
            if (k <= a->held.len && memcmp(a->held.p + a->held.len - k, a->req->stop[i], k) == 0) {
                keep = k;
                break;
            }
    }
    return keep;
}

/* Moves text into held and releases what can no longer start a stop string into a->text.
 * Returns 1 when a stop string matched (held is cut just before it), 0, or -1 when out of
 * memory. */
static int release_text(answer *a, const char *p, size_t n) {
    if (add(a, &a->held, p, n) != 0) return -1;
    size_t cut = (size_t)-1;
    for (int i = 0; i < a->req->n_stop; i++) {
        size_t sl = strlen(a->req->stop[i]);
        for (size_t at = 0; at + sl <= a->held.len && at < cut; at++)
            if (memcmp(a->held.p + at, a->req->stop[i], sl) == 0) cut = at;
    }
    if (cut != (size_t)-1) {
        if (add(a, &a->text, a->held.p, cut) != 0) return -1;
        a->held.len = 0;
        return 1;
    }
    size_t keep = stop_prefix_len(a);
    if (add(a, &a->text, a->held.p, a->held.len - keep) != 0) return -1;
    memmove(a->held.p, a->held.p + a->held.len - keep, keep);
    a->held.len = keep;
    return 0;
}

void answer_fail(answer *a, const char *message) {
    if (a->sink)
        a->sink->end(a->sink->ctx, NULL, message);
    else
        proto_write_error(a->out, a->req->id_json, PROTO_INTERNAL, message);
}

int answer_is_stop_token(const answer *a, int32_t tok) {
    return chat_is_stop_token(tok) && !a->req->ignore_eos;
}

enum answer_end answer_token(answer *a, int32_t tok, const proto_logprob *lp) {
    a->n_out++;
    char bytes[512];
    size_t n = 0, skip = 0;
    int thought = 0;
    if (a->tk && !tokenizer_is_special(a->tk, tok))
        n = detok_push(&a->dt, a->tk, tok, bytes, sizeof bytes);
    if (a->tk) thought = chat_stream_route(&a->cs, tok, bytes, n, &skip);
    size_t from = a->text.len; /* where this token's released bytes begin */
    int rc = thought ? add(a, &a->reasoning, bytes + skip, n - skip) : release_text(a, bytes, n);
    if (rc < 0) {
        answer_fail(a, ANSWER_OUT_OF_MEMORY);
        return ANSWER_FAILED;
    }
    const char *rel = a->text.p ? a->text.p + from : "";
    if (a->sink && a->text.len > from)
        a->sink->text(a->sink->ctx, rel, a->text.len - from);
    else if (!a->sink && a->req->stream)
        proto_write_token(a->out, a->req->id_json, a->n_out - 1, tok, rel, a->text.len - from,
                          a->req->logprobs > 0 ? lp : NULL);
    if (rc == 1) return ANSWER_STOP;
    if (a->n_out >= a->req->max_tokens) return ANSWER_LENGTH;
    if (a->n_prompt + a->n_out >= a->max_context) return ANSWER_CONTEXT;
    return ANSWER_MORE;
}

static const char *reason_name(enum answer_end why) {
    switch (why) {
    case ANSWER_LENGTH:
        return "length";
    case ANSWER_CONTEXT:
        return "context";
    case ANSWER_CANCELLED:
        return "cancelled";
    default:
        return "stop";
    }
}

int answer_finish(answer *a, enum answer_end why, const answer_timing *t) {
    char tail[16];
    size_t n = detok_flush(&a->dt, tail, sizeof tail), from = a->text.len;
    /* held text that never became a stop string is part of the answer (a matched stop string
     * has already emptied held) */
    if (add(a, &a->text, a->held.p, a->held.len) != 0 || add(a, &a->text, tail, n) != 0) {
        answer_fail(a, ANSWER_OUT_OF_MEMORY);
        return -1;
    }
    a->held.len = 0;
    if (a->sink) {
        if (a->text.len > from) a->sink->text(a->sink->ctx, a->text.p + from, a->text.len - from);
        a->sink->end(a->sink->ctx, reason_name(why), NULL);
        return 0;
    }
    proto_done d = {
        .text = a->text.p ? a->text.p : "",
        .text_len = a->text.len,
        .reasoning = a->reasoning.len ? a->reasoning.p : NULL,
        .reasoning_len = a->reasoning.len,
        .finish_reason = reason_name(why),
        .prompt_tokens = a->n_prompt,
        .completion_tokens = a->n_out,
        .queue_ms = t->queue_ms,
        .ttft_ms = t->ttft_ms,
        .decode_ms_per_token = t->decode_ms_per_token,
    };
    proto_write_done(a->out, a->req->id_json, &d);
    return 0;
}
