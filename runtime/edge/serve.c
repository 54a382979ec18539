/* runtime/edge/serve.c - see serve.h. One thread: it reads stdin only when a step would not wait
 * on it (poll with no timeout while requests run), so a slow pipe never stalls a batch, and a
 * full queue stops the reading, which is the backpressure a shell pipe understands. */
#include "runtime/edge/serve.h"

#include "runtime/text/chat.h"
#include "runtime/engine/kv_pool.h"
#include "runtime/base/log.h"
#include "runtime/proto/proto.h"
#include "runtime/sched/sched.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct line_reader {
    int fd, eof;
    int read_errno; /* the errno of a failed read (then eof is set too), else 0 */
    char *buf;
    size_t len, cap, scan; /* bytes held; bytes already searched for a newline */
    int discarding;        /* inside a line already answered as too_long */
    long line_no;
} line_reader;

/* Reads what is available (waiting up to wait_ms, -1 = until data). Returns bytes read, 0 at
 * EOF or when nothing came, -1 on a read error. */
static long reader_fill(line_reader *lr, int wait_ms) {
    struct pollfd p = {.fd = lr->fd, .events = POLLIN};
    if (poll(&p, 1, wait_ms) <= 0) return 0;
    if (lr->cap - lr->len < 65536) {
        size_t cap = lr->cap ? 2 * lr->cap : 1 << 20;
        char *b = realloc(lr->buf, cap);
        if (!b) return -1;
        lr->buf = b;
        lr->cap = cap;
    }
    ssize_t n = read(lr->fd, lr->buf + lr->len, lr->cap - lr->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
    if (n <= 0) {
        lr->eof = 1;
        if (n < 0) {
            lr->read_errno = errno;
            log_msg(LOG_ERROR, "serve",
                    "reading stdin failed (%s): answering what was read, then exiting with "
                    "status 1",
                    strerror(errno));
        }
        return n < 0 ? -1 : 0;
    }
    lr->len += (size_t)n;
    return n;
}

/* Returns 1 with the next whole line (no newline) in line and len; 0 when none is complete. A
 * line past PROTO_MAX_LINE comes back once with len > PROTO_MAX_LINE (the parser answers
 * too_long) and its rest is skipped. At EOF a last line without a newline counts. */
static int reader_next(line_reader *lr, char **line, size_t *len, size_t *consumed) {
    if (!lr->buf) return 0;
    char *nl = memchr(lr->buf + lr->scan, '\n', lr->len - lr->scan);
    if (!nl) {
        lr->scan = lr->len;
        if (lr->len > PROTO_MAX_LINE && !lr->discarding) {
            lr->discarding = 1;
            lr->line_no++;
            *line = lr->buf;
            *len = lr->len;
            *consumed = lr->len;
            return 1;
        }
        if (lr->discarding && lr->len) { /* drop what we have of the over-long line */
            lr->len = lr->scan = 0;
            return 0;
        }
        if (!lr->eof || lr->len == 0) return 0;
        nl = lr->buf + lr->len; /* the last line has no newline */
    }
    *consumed = (size_t)(nl - lr->buf) + (nl < lr->buf + lr->len);
    if (lr->discarding) { /* the end of an over-long line: nothing to answer */
        lr->discarding = 0;
        memmove(lr->buf, lr->buf + *consumed, lr->len - *consumed);
        lr->len -= *consumed;
        lr->scan = 0;
        return reader_next(lr, line, len, consumed);
    }
    lr->line_no++;
    *line = lr->buf;
    *len = (size_t)(nl - lr->buf);
    if (*len && (*line)[*len - 1] == '\r') (*len)--;
    return 1;
}

static void reader_consume(line_reader *lr, size_t n) {
    memmove(lr->buf, lr->buf + n, lr->len - n);
    lr->len -= n;
    lr->scan = 0;
}

typedef struct server {
    engine *e;
    const tokenizer *tk;
    const g4_config *cfg;
    sched *s;
    FILE *out;
    int shutdown;
} server;

/* The prompt ids of a request; -1 with err filled when it cannot have any. */
static int prompt_ids(server *sv, const proto_request *req, int32_t **ids, char *err, size_t n) {
    int V = engine_model(sv->e)->n_vocab;
    if (req->tokens) {
        for (int i = 0; i < req->n_tokens; i++)
            if (req->tokens[i] >= V) {
                snprintf(err, n, "tokens[%d] = %d is outside the vocabulary (%d ids)", i,
                         req->tokens[i], V);
                return -1;
            }
        *ids = malloc(sizeof **ids * (size_t)req->n_tokens);
        if (*ids) memcpy(*ids, req->tokens, sizeof **ids * (size_t)req->n_tokens);
        return *ids ? req->n_tokens : -1;
    }
    if (!sv->tk) {
        snprintf(err, n, "no tokenizer is loaded (model.tokenizer): only \"tokens\" requests");
        return -1;
    }
    if (req->messages) {
        chat_message *m = calloc((size_t)req->n_messages, sizeof *m);
        if (!m) return -1;
        for (int i = 0; i < req->n_messages; i++)
            m[i] = (chat_message){req->messages[i].role, req->messages[i].content};
        int k = chat_render(sv->tk, m, req->n_messages, req->thinking, ids, err, n);
        free(m);
        return k;
    }
    int32_t *text = NULL;
    int k = tokenizer_encode(sv->tk, req->prompt, strlen(req->prompt), 1, &text);
    *ids = k >= 0 ? malloc(sizeof **ids * (size_t)(k + 1)) : NULL;
    if (*ids) {
        (*ids)[0] = CHAT_BOS; /* exactly one BOS: Gemma 4 degrades badly without it */
        memcpy(*ids + 1, text, sizeof **ids * (size_t)k);
    }
    free(text);
    return *ids ? k + 1 : -1;
}

/* The checks that need a prompt's length n: PROTO_OK, or PROTO_TOO_LONG with err filled. A
 * request that passes can start once the scheduler is empty. */
static enum proto_code fits(const sched *sc, const g4_config *cfg, int n, int max_tokens, char *err,
                            size_t cap) {
    int max_ctx = cfg->serve.max_context;
    int total = n + max_tokens < max_ctx ? n + max_tokens : max_ctx;
    if (n > max_ctx) {
        snprintf(err, cap, "the prompt is %d tokens; serve.max_context is %d", n, max_ctx);
        return PROTO_TOO_LONG;
    }
    if (!sched_could_ever_fit(sc, total)) {
        snprintf(err, cap, "%d tokens could not fit even the empty KV budget", total);
        return PROTO_TOO_LONG;
    }
    return PROTO_OK;
}

static void handle_request(server *sv, proto_request *req, double t_arrive) {
    char err[256] = "out of memory";
    if (sched_in_flight(sv->s, req->id_json)) {
        proto_write_error(sv->out, req->id_json, PROTO_BAD_REQUEST,
                          "id is already in flight: an id may be reused only after its answer");
        proto_request_free(req);
        return;
    }
    int32_t *ids = NULL;
    int n = prompt_ids(sv, req, &ids, err, sizeof err);
    enum proto_code code =
        n < 0 ? PROTO_BAD_REQUEST : fits(sv->s, sv->cfg, n, req->max_tokens, err, sizeof err);
    if (code != PROTO_OK) {
        proto_write_error(sv->out, req->id_json, code, err);
        proto_request_free(req);
        free(ids);
        return;
    }
    sched_submit(sv->s, req, ids, n, t_arrive);
}

static void handle_line(server *sv, const char *line, size_t len, long line_no) {
    double t = sched_now_ms();
    proto_request req;
    proto_error perr;
    if (proto_parse_line(line, len, line_no, &req, &perr) != 0) {
        proto_write_error(sv->out, perr.id_json, perr.code, perr.message);
        proto_error_free(&perr);
        return;
    }
    switch (req.kind) {
    case PROTO_STATS:
        sched_write_stats(sv->s);
        break;
    case PROTO_CANCEL:
        if (sched_cancel(sv->s, req.cancel_id_json) != 0)
            proto_write_error(sv->out, req.cancel_id_json, PROTO_BAD_REQUEST,
                              "cancel: no request with this id is in flight");
        break;
    case PROTO_SHUTDOWN: /* a drain: what was read finishes, as at the end of input */
        sv->shutdown = 1;
        break;
    case PROTO_ABORT: /* everything in flight ends now */
        sv->shutdown = 1;
        sched_cancel_queued(sv->s);
        sched_cancel_running(sv->s);
        break;
    case PROTO_REQUEST:
        handle_request(sv, &req, t);
        return; /* req is owned by the scheduler or freed */
    }
    proto_request_free(&req);
}

volatile sig_atomic_t serve_signal;
static volatile sig_atomic_t serve_signals;

static void on_signal(int sig) {
    serve_signal = sig;
    serve_signals++;
}

void serve_catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: poll and read return at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a closed stdout is a write error, answered below */
}

/* A failed write of an answer (stdout closed, a full disk): logged once; serving stops, since
 * nothing more can reach the reader. */
static int output_lost(FILE *out) {
    if (!ferror(out)) return 0;
    log_msg(LOG_ERROR, "serve",
            "writing an answer to stdout failed (the reader closed it, or the disk is full); "
            "stopping, exit status 1");
    return 1;
}

/* The signals so far: the first stops the reading and cancels what waits, the running requests
 * finish; the second cancels them too. Returns 1 once serving should end now. */
static int handle_signals(server *sv, int *seen) {
    if (serve_signals == *seen) return 0;
    *seen = serve_signals;
    if (!sv->shutdown) {
        log_msg(LOG_WARN, "serve",
                "signal %d: no more requests are read; queued ones are cancelled, running ones "
                "finish (a second signal cancels them)",
                (int)serve_signal);
        sv->shutdown = 1;
        sched_cancel_queued(sv->s);
        return 0;
    }
    log_msg(LOG_WARN, "serve", "signal %d again: cancelling the running requests",
            (int)serve_signal);
    sched_cancel_running(sv->s);
    return 1;
}

int serve_run(engine *e, const tokenizer *tk, const g4_config *cfg, int in_fd, FILE *out) {
    server sv = {e, tk, cfg, sched_create(e, tk, cfg, out), out, 0};
    line_reader lr = {.fd = in_fd};
    if (!sv.s) return 1;
    int rc = 0, signals_seen = serve_signals;
    for (;;) {
        if (handle_signals(&sv, &signals_seen)) break;
        /* read while the queue has room; wait for input only when nothing runs */
        while (!sv.shutdown && sched_queued(sv.s) < cfg->serve.max_queue) {
            char *line;
            size_t len, used;
            if (reader_next(&lr, &line, &len, &used)) {
                handle_line(&sv, line, len, lr.line_no);
                reader_consume(&lr, used);
                continue;
            }
            if (lr.eof) break;
            int idle = sched_running(sv.s) == 0 && sched_queued(sv.s) == 0;
            if (reader_fill(&lr, idle ? -1 : 0) <= 0 && !lr.eof) break;
        }
        if (output_lost(out)) {
            rc = 1;
            break;
        }
        if (handle_signals(&sv, &signals_seen)) break;
        int st = sched_step(sv.s);
        if (st < 0) rc = 1;
        if (output_lost(out)) {
            rc = 1;
            break;
        }
        if (st == 0 && sched_queued(sv.s) == 0 && sched_running(sv.s) == 0 &&
            (sv.shutdown || (lr.eof && lr.len == 0)))
            break;
    }
    fflush(out);
    if (lr.read_errno) rc = 1;
    if (serve_signals && rc == 0) rc = 128 + (int)serve_signal;
    if (!sched_running(sv.s) && !sched_pages_all_free(sv.s)) {
        /* every request has ended, so every page must be back: anything else is a bug in the
         * accounting, which a long run would turn into a budget that shrinks until it stalls */
        log_msg(LOG_ERROR, "serve", "KV pages still held after every request ended");
        rc = 1;
    }
    sched_destroy(sv.s);
    free(lr.buf);
    return rc;
}

/* Reads all of fd into a NUL-terminated buffer. */
static char *read_all(int fd, size_t *len) {
    line_reader lr = {.fd = fd};
    while (!lr.eof)
        if (reader_fill(&lr, -1) < 0) break;
    if (!lr.buf || lr.len == lr.cap) {
        char *b = realloc(lr.buf, lr.len + 1);
        if (!b) {
            free(lr.buf);
            return NULL;
        }
        lr.buf = b;
    }
    lr.buf[lr.len] = '\0';
    *len = lr.len;
    return lr.buf;
}

/* --text's answer sink: the text straight to stdout, the end only logged. */
typedef struct text_out {
    FILE *out;
    int max_tokens;
    int failed;
} text_out;

static void text_write(void *ctx, const char *p, size_t n) {
    text_out *t = ctx;
    fwrite(p, 1, n, t->out);
    fflush(t->out);
}

static void text_end(void *ctx, const char *finish_reason, const char *error) {
    text_out *t = ctx;
    if (error) {
        log_msg(LOG_ERROR, "serve", "--text: %s", error);
        t->failed = 1;
    } else if (strcmp(finish_reason, "length") == 0) {
        log_msg(LOG_INFO, "serve", "--text: the answer stopped at serve.text_max_tokens = %d",
                t->max_tokens);
    }
}

int serve_text(engine *e, const tokenizer *tk, const g4_config *cfg, int in_fd, FILE *out) {
    size_t len;
    char *text = read_all(in_fd, &len);
    if (!text || !tk) {
        log_msg(LOG_ERROR, "serve", "%s", tk ? "out of memory" : "--text needs model.tokenizer");
        free(text);
        return 1;
    }
    size_t lead = strspn(text, " \t\r\n");
    if (lead == len) { /* nothing to answer: an error, not an unprompted generation */
        log_msg(LOG_ERROR, "serve", "--text: stdin holds no text");
        free(text);
        return 1;
    }
    chat_message m = {"user", text};
    int32_t *ids = NULL;
    char err[256];
    int n = chat_render(tk, &m, 1, 0, &ids, err, sizeof err);
    free(text);
    int max = cfg->serve.max_context;
    if (n <= 0 || n >= max) {
        log_msg(LOG_ERROR, "serve", "--text: the prompt does not fit serve.max_context %d", max);
        free(ids);
        return 1;
    }
    /* one greedy request with the protocol's defaults; no id, since nothing names it */
    proto_request req = {
        .kind = PROTO_REQUEST, .max_tokens = cfg->serve.text_max_tokens, .top_p = 1, .stream = 1};
    text_out to = {out, cfg->serve.text_max_tokens, 0};
    const answer_sink sink = {text_write, text_end, &to};
    sched *s = sched_create(e, tk, cfg, out);
    if (!s) {
        log_msg(LOG_ERROR, "serve", "--text: out of memory");
        free(ids);
        return 1;
    }
    if (fits(s, cfg, n, cfg->serve.text_max_tokens, err, sizeof err) != PROTO_OK) {
        log_msg(LOG_ERROR, "serve", "--text: %s", err);
        sched_destroy(s);
        free(ids);
        return 1;
    }
    sched_set_sink(s, &sink);
    int rc = sched_submit(s, &req, ids, n, sched_now_ms()) == 0 ? 0 : 1;
    for (int st = 1; rc == 0 && st > 0;) {
        if (serve_signals) { /* --text has one request: a signal ends it where it is */
            log_msg(LOG_WARN, "serve", "signal %d: the answer stops here", (int)serve_signal);
            rc = 128 + (int)serve_signal;
            break;
        }
        st = sched_step(s);
        if (st < 0 || output_lost(out)) rc = 1;
    }
    sched_cancel_queued(s); /* a signal or a lost stdout: the answer ends where it is */
    sched_cancel_running(s);
    sched_destroy(s);
    fputc('\n', out);
    fflush(out);
    if (output_lost(out)) return 1;
    return rc == 0 && to.failed ? 1 : rc;
}
