/* tests/unit/test_answer.c - a request's answer (runtime/sched/answer.h) fed tokens directly: text
 * and reasoning apart, stop strings, the limits, --text's sink, and above all that running out of
 * memory ends the answer with an error line, never with a done line of shortened text.
 *
 * usage: test_answer TOKENIZER_JSON (the tiny fixtures' tokenizer carries Gemma 4's control
 * tokens at their ids). Out of memory is reached through answer.max_bytes, at every limit from
 * one byte up to more than the answer needs, so each append's check is crossed. */
#include "runtime/sched/answer.h"
#include "runtime/text/chat.h"
#include "tests/harness.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_PROMPT 5
#define TEXT "The river runs down the valley, past the old mill and on to the sea"
#define HELD "and on to the sea" /* a prefix of the stop string STOP: held to the end */
#define STOP HELD "?"
#define REASON "A reason."

typedef struct run {
    char *lines; /* what the answer wrote */
    size_t len;
    enum answer_end end; /* how it ended; ANSWER_FAILED when an error line ended it */
    int n_out;
} run;

/* Feeds ids to a fresh answer for req until it ends, else ends it as a stop token would. */
static void feed(const tokenizer *t, const proto_request *req, const int32_t *ids, int n,
                 int max_context, size_t max_bytes, const answer_sink *sink, run *r) {
    memset(r, 0, sizeof *r);
    FILE *f = open_memstream(&r->lines, &r->len);
    if (!f) {
        r->end = ANSWER_FAILED;
        return;
    }
    answer a;
    answer_init(&a, req, t, N_PROMPT, max_context, f, sink);
    a.max_bytes = max_bytes;
    enum answer_end end = ANSWER_MORE;
    for (int i = 0; i < n && end == ANSWER_MORE; i++)
        end = answer_token(&a, ids[i], NULL);
    if (end == ANSWER_MORE && answer_is_stop_token(&a, CHAT_EOS)) end = ANSWER_STOP;
    const answer_timing tm = {0};
    if (end != ANSWER_FAILED && answer_finish(&a, end, &tm) != 0) end = ANSWER_FAILED;
    r->end = end;
    r->n_out = a.n_out;
    answer_free(&a);
    fclose(f);
}

/* The run's lines parsed: the concatenated token texts, and the last line. */
typedef struct lines {
    char streamed[512];
    json_t *last;
    int n_lines, n_terminal; /* lines, and done or error lines among them */
} lines;

static void parse(const run *r, lines *l) {
    memset(l, 0, sizeof *l);
    const char *p = r->lines ? r->lines : "";
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        json_t *j = json_loadb(p, n, 0, NULL);
        const char *ev = json_string_value(json_object_get(j, "event"));
        l->n_lines++;
        if (ev && strcmp(ev, "token") == 0) {
            const char *tx = json_string_value(json_object_get(j, "text"));
            size_t have = strlen(l->streamed);
            if (tx && have + strlen(tx) < sizeof l->streamed) strcat(l->streamed, tx);
        } else if (ev) {
            l->n_terminal++;
        }
        json_decref(l->last);
        l->last = j;
        p += n + (nl != NULL);
    }
}

static const char *field(const json_t *j, const char *key) {
    const char *s = json_string_value(json_object_get(j, key));
    return s ? s : "";
}

static int is_event(const lines *l, const char *ev) {
    return strcmp(field(l->last, "event"), ev) == 0;
}

/* The run ended with its one terminal line an internal error naming out of memory. */
static int is_oom_error(const lines *l) {
    const json_t *e = json_object_get(l->last, "error");
    return l->n_terminal == 1 && is_event(l, "error") &&
           strcmp(field(e, "code"), "internal") == 0 &&
           strstr(field(e, "message"), "out of memory") != NULL;
}

typedef struct sunk {
    char text[512];
    int ends;
    const char *reason, *error;
} sunk;

static void sink_text(void *ctx, const char *p, size_t n) {
    sunk *s = ctx;
    size_t have = strlen(s->text);
    if (have + n >= sizeof s->text) return;
    memcpy(s->text + have, p, n);
    s->text[have + n] = '\0';
}

static void sink_end(void *ctx, const char *finish_reason, const char *error) {
    sunk *s = ctx;
    s->ends++;
    s->reason = finish_reason;
    s->error = error;
}

int main(int argc, char **argv) {
    test_plan(6);
    tokenizer *t = NULL;
    if (argc != 2 || tokenizer_load(argv[1], &t) != 0) {
        const char *gates[] = {
            "answer_text_and_reasoning",     "answer_stop_string", "answer_limits",
            "answer_out_of_memory_is_error", "answer_sink",        "answer_stop_token"};
        for (int i = 0; i < 6; i++)
            test_fail(gates[i], "cannot load the tokenizer (usage: test_answer TOKENIZER_JSON)");
        return harness_exit();
    }
    /* the thought channel, then the text; the text's last bytes stay held for STOP to the end,
     * so answer_finish grows the text buffer too (past its first 64 bytes) */
    const char *src = "<|channel>thought\n" REASON "<channel|>" TEXT;
    int32_t *ids = NULL;
    int n = tokenizer_encode(t, src, strlen(src), 1, &ids);
    char stop_held[] = STOP, stop_runs[] = "runs";
    char *stops[] = {stop_held};
    proto_request req = {.kind = PROTO_REQUEST,
                         .id_json = "\"a\"",
                         .max_tokens = 256,
                         .top_p = 1,
                         .stop = stops,
                         .n_stop = 1,
                         .stream = 1};

    run ref;
    lines lr;
    feed(t, &req, ids, n, 4096, 0, NULL, &ref);
    parse(&ref, &lr);
    const char *done_text = field(lr.last, "text"), *reasoning = field(lr.last, "reasoning");
    TEST_CHECK("answer_text_and_reasoning",
               n > 0 && ref.end == ANSWER_STOP && is_event(&lr, "done") &&
                   strcmp(done_text, TEXT) == 0 && strcmp(reasoning, REASON) == 0 &&
                   strncmp(lr.streamed, TEXT, strlen(lr.streamed)) == 0 &&
                   strlen(lr.streamed) == strlen(TEXT) - strlen(HELD) && lr.n_lines == n + 1,
               "%d tokens: done text \"%s\", reasoning \"%s\", streamed \"%s\" (\"" HELD
               "\" held for the stop string \"" STOP "\" until the end)",
               n, done_text, reasoning, lr.streamed);

    char *runs[] = {stop_runs};
    proto_request rq = req;
    rq.stop = runs;
    run rs;
    lines ls;
    feed(t, &rq, ids, n, 4096, 0, NULL, &rs);
    parse(&rs, &ls);
    TEST_CHECK("answer_stop_string",
               rs.end == ANSWER_STOP && rs.n_out < n &&
                   strcmp(field(ls.last, "text"), "The river ") == 0 &&
                   strcmp(field(ls.last, "finish_reason"), "stop") == 0 &&
                   strstr(ls.streamed, "runs") == NULL,
               "stop \"runs\": ended after %d of %d tokens, done text \"%s\"", rs.n_out, n,
               field(ls.last, "text"));

    rq = req;
    rq.max_tokens = 3;
    run rl, rc;
    lines ll, lc;
    feed(t, &rq, ids, n, 4096, 0, NULL, &rl);
    feed(t, &req, ids, n, N_PROMPT + 4, 0, NULL, &rc);
    parse(&rl, &ll);
    parse(&rc, &lc);
    TEST_CHECK("answer_limits",
               rl.end == ANSWER_LENGTH && rl.n_out == 3 &&
                   strcmp(field(ll.last, "finish_reason"), "length") == 0 &&
                   rc.end == ANSWER_CONTEXT && rc.n_out == 4 &&
                   strcmp(field(lc.last, "finish_reason"), "context") == 0,
               "max_tokens 3: %d tokens, \"%s\"; max_context %d after a %d-token prompt: %d "
               "tokens, \"%s\"",
               rl.n_out, field(ll.last, "finish_reason"), N_PROMPT + 4, N_PROMPT, rc.n_out,
               field(lc.last, "finish_reason"));

    /* every limit: either the very same lines as without one, or an out-of-memory error as the
     * one terminal line (after token lines that were all true) */
    int same = 0, errors = 0, at_finish = 0, wrong = 0;
    size_t first_wrong = 0;
    for (size_t cap = 1; cap <= 1024; cap++) {
        run r;
        lines l;
        feed(t, &req, ids, n, 4096, cap, NULL, &r);
        parse(&r, &l);
        int ok;
        if (r.end != ANSWER_FAILED) {
            ok = r.len == ref.len && memcmp(r.lines, ref.lines, r.len) == 0;
            same += ok;
        } else {
            ok = is_oom_error(&l) && strncmp(l.streamed, lr.streamed, strlen(l.streamed)) == 0;
            errors += ok;
            at_finish += ok && l.n_lines == n + 1; /* every token line, then the error */
        }
        if (!ok && !wrong++) first_wrong = cap;
        json_decref(l.last);
        free(r.lines);
    }
    TEST_CHECK("answer_out_of_memory_is_error", wrong == 0 && same > 0 && at_finish > 0,
               "limits of 1..1024 bytes: %d answered whole, %d ended with an internal \"out of "
               "memory\" error and no done line (%d of them in answer_finish), %d otherwise "
               "(first at %zu bytes)",
               same, errors, at_finish, wrong, first_wrong);

    sunk sw = {0}, so = {0};
    const answer_sink sink = {sink_text, sink_end, &sw}, sink_oom = {sink_text, sink_end, &so};
    run rw, ro;
    feed(t, &req, ids, n, 4096, 0, &sink, &rw);
    feed(t, &req, ids, n, 4096, 8, &sink_oom, &ro);
    TEST_CHECK("answer_sink",
               rw.len == 0 && strcmp(sw.text, TEXT) == 0 && sw.ends == 1 && sw.reason &&
                   strcmp(sw.reason, "stop") == 0 && !sw.error && ro.len == 0 && so.ends == 1 &&
                   !so.reason && so.error && strstr(so.error, "out of memory"),
               "sink: \"%s\", one end (%s); at 8 bytes one end with the error \"%s\"; nothing "
               "written to the stream",
               sw.text, sw.reason ? sw.reason : "none", so.error ? so.error : "none");

    answer a, b;
    rq = req;
    rq.ignore_eos = 1;
    answer_init(&a, &req, t, N_PROMPT, 4096, NULL, NULL);
    answer_init(&b, &rq, t, N_PROMPT, 4096, NULL, NULL);
    int eos = answer_is_stop_token(&a, CHAT_EOS), turn = answer_is_stop_token(&a, CHAT_TURN_CLOSE),
        word = answer_is_stop_token(&a, ids[n - 1]), ignored = answer_is_stop_token(&b, CHAT_EOS);
    TEST_CHECK("answer_stop_token", eos && turn && !word && !ignored,
               "<eos> %d, <turn|> %d, a word %d, <eos> under ignore_eos %d", eos, turn, word,
               ignored);

    json_decref(lr.last);
    json_decref(ls.last);
    json_decref(ll.last);
    json_decref(lc.last);
    free(ref.lines);
    free(rs.lines);
    free(rl.lines);
    free(rc.lines);
    free(rw.lines);
    free(ro.lines);
    free(ids);
    tokenizer_free(t);
    return harness_exit();
}
