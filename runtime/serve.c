/* runtime/serve.c - see serve.h. One thread: it reads stdin only when a step would not wait
 * on it (poll with no timeout while requests run), so a slow pipe never stalls a batch, and a
 * full queue stops the reading, which is the backpressure a shell pipe understands. */
#include "runtime/serve.h"

#include "runtime/chat.h"
#include "runtime/kv_pool.h"
#include "runtime/log.h"
#include "runtime/proto.h"
#include "runtime/sampler.h"
#include "runtime/sched.h"

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
    enum proto_code code = n < 0 ? PROTO_BAD_REQUEST : PROTO_OK;
    int max_ctx = sv->cfg->serve.max_context;
    int total = n + req->max_tokens < max_ctx ? n + req->max_tokens : max_ctx;
    if (code == PROTO_OK && n > max_ctx) {
        code = PROTO_TOO_LONG;
        snprintf(err, sizeof err, "the prompt is %d tokens; serve.max_context is %d", n, max_ctx);
    } else if (code == PROTO_OK && !sched_could_ever_fit(sv->s, total)) {
        code = PROTO_TOO_LONG;
        snprintf(err, sizeof err, "%d tokens could not fit even the empty KV budget", total);
    }
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
    case PROTO_SHUTDOWN:
        sv->shutdown = 1;
        sched_cancel_queued(sv->s);
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
    const g4_model_desc *md = engine_model(e);
    int max = cfg->serve.max_context;
    int32_t *all = n > 0 && n < max ? realloc(ids, sizeof *ids * (size_t)max) : NULL;
    bf16_t *logits = malloc(sizeof *logits * (size_t)md->n_vocab);
    kv_pool_shape shape;
    engine_kv_shape(e, &shape);
    kv_pool *pool = kv_pool_create_shape(&shape);
    if (!all || !logits || !pool) {
        kv_pool_destroy(pool);
        log_msg(LOG_ERROR, "serve", "--text: the prompt does not fit serve.max_context %d", max);
        free(all ? all : ids);
        free(logits);
        return 1;
    }
    detok dt = {0};
    chat_stream cs = {0};
    int rc = 0, begin = 0, seq = 0, first = n, limit = n + cfg->serve.text_max_tokens;
    while (rc == 0 && n < max && n < limit) {
        if (serve_signals) { /* --text has one request: a signal ends it where it is */
            log_msg(LOG_WARN, "serve", "signal %d: the answer stops here", (int)serve_signal);
            rc = 128 + (int)serve_signal;
            break;
        }
        int end = n - begin > cfg->serve.prefill_chunk ? begin + cfg->serve.prefill_chunk : n;
        int32_t *p = malloc(sizeof *p * (size_t)(end - begin)),
                *sq = calloc((size_t)(end - begin), sizeof *sq);
        for (int i = 0; p && i < end - begin; i++)
            p[i] = begin + i;
        int32_t last = end - begin - 1;
        kv_pool_release_front(pool, seq, begin);
        rc = p && sq && kv_pool_reserve(pool, seq, begin, end) == 0 ? 0 : -1;
        engine_batch b = {.pool = pool,
                          .rows = end - begin,
                          .ids = all + begin,
                          .pos = p,
                          .seq = sq,
                          .out_rows = 1,
                          .out_src = &last};
        if (rc == 0) rc = engine_step(e, &b, logits, NULL, NULL);
        free(p);
        free(sq);
        begin = end;
        if (rc != 0 || end < n) continue;
        sampler_params greedy = {0};
        int32_t tok = sampler_pick(&greedy, logits, md->n_vocab, 0, NULL); /* greedy: no work */
        if (chat_is_stop_token(tok)) break;
        all[n++] = tok;
        char bytes[512];
        size_t k = 0, skip = 0;
        if (!tokenizer_is_special(tk, tok)) k = detok_push(&dt, tk, tok, bytes, sizeof bytes);
        if (!chat_stream_route(&cs, tok, bytes, k, &skip) && k) {
            fwrite(bytes, 1, k, out);
            fflush(out);
        }
        if (output_lost(out)) rc = -1;
    }
    if (rc == 0 && n - first >= cfg->serve.text_max_tokens)
        log_msg(LOG_INFO, "serve", "--text: the answer stopped at serve.text_max_tokens = %d",
                cfg->serve.text_max_tokens);
    char tail[16];
    size_t k = detok_flush(&dt, tail, sizeof tail);
    fwrite(tail, 1, k, out);
    fputc('\n', out);
    fflush(out);
    kv_pool_destroy(pool);
    free(all);
    free(logits);
    if (output_lost(out)) return 1;
    return rc == 0 ? 0 : rc > 128 ? rc : 1;
}
