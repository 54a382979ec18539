/* runtime/proto/proto.h - the JSON Lines protocol of docs/protocol.md: request lines in, answer
 * lines out.
 *
 * Owns: parsing and validating one stdin line into a request or a control command (every
 * field's type and range, unknown fields, exactly one of prompt/messages/tokens), with a
 * stable error code and a message naming the field; and writing answer lines (token, done,
 * error, stats) each as one whole line with one write. Does not own: tokenising, scheduling,
 * the id-in-flight rule (the scheduler knows what is in flight), max_context (the scheduler
 * knows the prompt's length once tokenised). */
#ifndef G4_PROTO_H
#define G4_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PROTO_MAX_LINE (8u << 20) /* 8 MiB: longer lines are too_long */
#define PROTO_MAX_LOGPROBS 20

/* shutdown: read no more, let every request finish (drain); abort: read no more, end every
 * request "cancelled" at once. */
enum proto_kind { PROTO_REQUEST, PROTO_STATS, PROTO_CANCEL, PROTO_SHUTDOWN, PROTO_ABORT };

enum proto_code { PROTO_OK = 0, PROTO_BAD_JSON, PROTO_BAD_REQUEST, PROTO_TOO_LONG, PROTO_INTERNAL };

typedef struct proto_message {
    char *role;    /* "system", "user", "model" ("assistant" is stored as "model") */
    char *content; /* UTF-8, plain text */
} proto_message;

typedef struct proto_request {
    enum proto_kind kind;
    char *id_json; /* the id as compact JSON ("\"a\"" or "12"); the line number if absent */
    char *prompt;  /* exactly one of prompt, messages, tokens is set */
    proto_message *messages;
    int n_messages;
    int32_t *tokens;
    int n_tokens;
    int max_tokens;     /* default 256, >= 1 */
    double temperature; /* default 0, 0..100 */
    int top_k;          /* default 0 (off), >= 0 */
    double top_p;       /* default 1 (off), (0, 1] */
    double min_p;       /* default 0 (off), [0, 1] */
    uint64_t seed;      /* default 0, a non-negative integer */
    int thinking;       /* default 0; only with messages */
    char **stop;        /* stop strings, non-empty, at most 16 */
    int n_stop;
    int ignore_eos;       /* default 0 */
    int stream;           /* default 1 */
    int logprobs;         /* default 0, 0..20 */
    char *cancel_id_json; /* PROTO_CANCEL: the id to cancel, as compact JSON */
} proto_request;

typedef struct proto_error {
    enum proto_code code;
    char message[512];
    char *id_json; /* the line's id as compact JSON when readable, else "line-N" */
} proto_error;

/* Parses one line (len bytes, no newline) read as line number line_no (1-based). Returns 0
 * and fills *req (free with proto_request_free), or -1 and fills *err (free its id_json with
 * proto_error_free). A line without an id is given "line-N" (N = line_no), a string a
 * request's own id may not take; on error, err->id_json is the line's id when one could be
 * read, else that "line-N", so every bad line still gets an answer that names it. Empty and
 * whitespace-only lines are bad_request ("empty line"); a line over PROTO_MAX_LINE is too_long (the
 * reader passes such lines truncated with len > PROTO_MAX_LINE). */
int proto_parse_line(const char *line, size_t len, long line_no, proto_request *req,
                     proto_error *err);
void proto_request_free(proto_request *req);
void proto_error_free(proto_error *err);

/* The code's protocol name: "bad_json", "bad_request", "too_long", "internal". */
const char *proto_code_name(enum proto_code code);

/* One logprobs entry of a token line. */
typedef struct proto_logprob {
    float chosen; /* logprob of the chosen token */
    int n;        /* top entries */
    int32_t ids[PROTO_MAX_LOGPROBS];
    float lps[PROTO_MAX_LOGPROBS];
} proto_logprob;

/* Each writer builds the whole line and writes it with one fwrite, then flushes; returns 0 or
 * -1 on a write error. text is UTF-8 of text_len bytes (may contain NUL). */
int proto_write_token(FILE *f, const char *id_json, int index, int32_t token, const char *text,
                      size_t text_len, const proto_logprob *lp);

typedef struct proto_done {
    const char *text; /* the whole answer text (stream: false) or NULL to omit */
    size_t text_len;
    const char *reasoning; /* thought channel text, or NULL to omit */
    size_t reasoning_len;
    const char *finish_reason; /* "stop", "length", "context", "cancelled" */
    int prompt_tokens, completion_tokens;
    double queue_ms, ttft_ms, decode_ms_per_token;
} proto_done;

int proto_write_done(FILE *f, const char *id_json, const proto_done *d);
int proto_write_error(FILE *f, const char *id_json, enum proto_code code, const char *message);

/* One KV family's pages in a stats line. */
typedef struct proto_kv_family {
    int free_pages, total_pages;
    double mb; /* the family's budget */
    int elem_bytes;
} proto_kv_family;

typedef struct proto_stats {
    int queued, running;
    long last_step_rows, steps;
    proto_kv_family kv[2]; /* local, global */
    long tokens_out;
    double tokens_per_s;
} proto_stats;

/* {"event":"stats", ...} with its fields in a fixed order, MB and rates to one decimal. */
int proto_write_stats(FILE *f, const proto_stats *st);

#endif
