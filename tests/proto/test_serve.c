/* tests/proto/test_serve.c - the line protocol end to end on the CPU backend, in process:
 * serve_run reads a temporary file as stdin and writes to another as stdout.
 *
 * usage: test_serve FIXTURES_DIR PROTO_TEST_DIR
 * Gates: protocol transcripts (lines in, lines out, timing masked); the bad-input corpus in a
 * stream with good requests, which must answer byte-identically to running alone; 10,000
 * piped requests with max_queue 8; id reuse, cancel, shutdown and stats; stop strings; --text. */
#include "runtime/base/config.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/kv_pool.h"
#include "runtime/base/log.h"
#include "runtime/sched/sched.h"
#include "runtime/edge/serve.h"
#include "runtime/text/tokenizer.h"
#include "tests/harness.h"

#include <fcntl.h>
#include <math.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct ctx {
    engine *e;
    tokenizer *tk;
    g4_config cfg;
} ctx;

/* Runs serve_run on input (len bytes) and returns its stdout, NUL-terminated (caller frees). */
static char *serve_text_of(ctx *c, const g4_config *cfg, const char *input, size_t len,
                           int text_mode) {
    FILE *in = tmpfile(), *out = tmpfile();
    if (!in || !out) return NULL;
    fwrite(input, 1, len, in);
    fflush(in);
    lseek(fileno(in), 0, SEEK_SET);
    if (text_mode)
        serve_text(c->e, c->tk, cfg, fileno(in), out);
    else
        serve_run(c->e, c->tk, cfg, fileno(in), out);
    fflush(out);
    long n = ftell(out);
    char *buf = malloc((size_t)n + 1);
    rewind(out);
    size_t got = buf ? fread(buf, 1, (size_t)n, out) : 0;
    if (buf) buf[got] = '\0';
    fclose(in);
    fclose(out);
    return buf;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    *len = b ? fread(b, 1, (size_t)n, f) : 0;
    if (b) b[*len] = '\0';
    fclose(f);
    return b;
}

/* Replaces every "timing":{...} object's contents by "timing":{} so outputs compare. */
static void mask_timing(char *s) {
    char *p = s;
    while ((p = strstr(p, "\"timing\":{")) != NULL) {
        char *open = p + 10, *close = strchr(open, '}');
        if (!close) break;
        memmove(open, close, strlen(close) + 1);
        p = open;
    }
}

/* The lines of out whose "id" equals id_json (as compact JSON), joined, timing masked. */
static char *lines_of(const char *out, const char *id_json) {
    size_t cap = strlen(out) + 1, n = 0;
    char *res = calloc(cap, 1);
    const char *line = out;
    char key[128];
    snprintf(key, sizeof key, "{\"id\":%s,", id_json);
    while (res && *line) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
        if (strncmp(line, key, strlen(key)) == 0) {
            memcpy(res + n, line, len);
            n += len;
        }
        line += len;
    }
    if (res) mask_timing(res);
    return res;
}

static int count_str(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static const char *const transcripts[] = {"basic", "chat", "sampling", "errors"};
#define N_TRANSCRIPTS (sizeof transcripts / sizeof transcripts[0])

/* Each transcript's answers, timing masked, equal the committed .expected file. */
static void gate_transcripts(ctx *c, const char *dir) {
    for (size_t i = 0; i < N_TRANSCRIPTS; i++) {
        char path[1024], gate[96];
        size_t in_len, exp_len;
        snprintf(gate, sizeof gate, "proto_transcript[%s]", transcripts[i]);
        snprintf(path, sizeof path, "%s/transcripts/%s.jsonl", dir, transcripts[i]);
        char *in = read_file(path, &in_len);
        snprintf(path, sizeof path, "%s/transcripts/%s.expected", dir, transcripts[i]);
        char *exp = read_file(path, &exp_len);
        char *out = in ? serve_text_of(c, &c->cfg, in, in_len, 0) : NULL;
        if (out) mask_timing(out);
        if (out && !exp) { /* first run: leave the answer beside it for review */
            snprintf(path, sizeof path, "%s/transcripts/%s.actual", dir, transcripts[i]);
            FILE *f = fopen(path, "w");
            if (f) fputs(out, f), fclose(f);
        }
        TEST_CHECK(gate, in && out && exp && strcmp(out, exp) == 0,
                   "%d request lines, %d answer lines%s", in ? count_str(in, "\n") : 0,
                   out ? count_str(out, "\n") : 0,
                   exp ? (out && strcmp(out, exp) == 0 ? ", equal to the recording" : ", DIFFER")
                       : ", no .expected recording");
        free(in);
        free(exp);
        free(out);
    }
}

/* The id a bad line's error must echo: its id when it is an object with a string or integer
 * id, else "line-N" (N its line number). */
static void expected_id(const char *line, int line_no, char *out, size_t n) {
    json_t *j = json_loads(line, JSON_DECODE_ANY, NULL);
    json_t *id = json_is_object(j) ? json_object_get(j, "id") : NULL;
    if (json_is_string(id) || json_is_integer(id)) {
        char *s = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
        snprintf(out, n, "%s", s ? s : "");
        free(s);
    } else {
        snprintf(out, n, "\"line-%d\"", line_no);
    }
    json_decref(j);
}

static const char *const good[3] = {
    "{\"id\":\"good-a\",\"tokens\":[2,500,600,700],\"max_tokens\":6}",
    "{\"id\":\"good-b\",\"prompt\":\"the city of the river\",\"max_tokens\":5,"
    "\"temperature\":0.8,\"top_p\":0.9,\"seed\":7,\"logprobs\":2}",
    "{\"id\":\"good-c\",\"messages\":[{\"role\":\"user\",\"content\":\"open the window\"}],"
    "\"max_tokens\":5,\"temperature\":1.2,\"top_k\":20,\"min_p\":0.05,\"seed\":3}"};

/* Bad lines (tests/proto/bad_lines.txt: "<code>\t<line>") mixed with good requests. */
static void gate_bad_stream(ctx *c, const char *dir) {
    char path[1024];
    size_t len;
    snprintf(path, sizeof path, "%s/bad_lines.txt", dir);
    char *corpus = read_file(path, &len);
    if (!corpus) {
        test_fail("proto_bad_input_stream", "cannot read %s", path);
        return;
    }
    size_t cap = len + 4096;
    char *in = calloc(cap, 1), *codes[256], *lines[256];
    int n = 0;
    for (char *save = NULL, *l = strtok_r(corpus, "\n", &save); l && n < 256;
         l = strtok_r(NULL, "\n", &save)) {
        char *tab = strchr(l, '\t');
        if (!tab || l[0] == '#') continue;
        *tab = '\0';
        codes[n] = l;
        lines[n] = tab + 1;
        /* markers for lines a text file cannot show */
        if (strcmp(lines[n], "<empty>") == 0) lines[n] = "";
        if (strcmp(lines[n], "<spaces>") == 0) lines[n] = "  \t ";
        n++;
    }
    /* stream: good-a, half the bad lines, good-b, the rest, good-c */
    int line_no = 0, bad_line_no[256];
    strcat(in, good[0]), strcat(in, "\n"), line_no++;
    for (int i = 0; i < n; i++) {
        if (i == n / 2) strcat(in, good[1]), strcat(in, "\n"), line_no++;
        strcat(in, lines[i]), strcat(in, "\n");
        bad_line_no[i] = ++line_no;
    }
    strcat(in, good[2]), strcat(in, "\n");
    char *out = serve_text_of(c, &c->cfg, in, strlen(in), 0);
    int wrong = 0;
    for (int i = 0; out && i < n; i++) {
        char id[256], want[512];
        expected_id(lines[i], bad_line_no[i], id, sizeof id);
        snprintf(want, sizeof want, "{\"id\":%s,\"event\":\"error\",\"error\":{\"code\":\"%s\"", id,
                 codes[i]);
        if (count_str(out, want) != 1 && wrong++ < 5)
            test_fail("proto_bad_input_case", "line %d (%s) expected one %s", bad_line_no[i],
                      lines[i], want);
    }
    int same = 0;
    for (int g = 0; out && g < 3; g++) {
        char *alone = serve_text_of(c, &c->cfg, good[g], strlen(good[g]), 0);
        char idj[32];
        snprintf(idj, sizeof idj, "\"good-%c\"", 'a' + g);
        char *a = alone ? lines_of(alone, idj) : NULL, *b = lines_of(out, idj);
        same += a && b && strlen(a) > 0 && strcmp(a, b) == 0;
        free(alone);
        free(a);
        free(b);
    }
    TEST_CHECK("proto_bad_input_stream", out && wrong == 0 && same == 3 && n >= 50,
               "%d bad lines each answered once with its code (%d wrong); %d of 3 good requests "
               "byte-identical (less timing) to running alone",
               n, wrong, same);
    free(out);
    free(in);
    free(corpus);
}

/* 10,000 requests piped in with serve.max_queue = 8: every one answered, none refused. */
static void gate_many(ctx *c) {
    enum { N = 10000 };
    char *in = malloc((size_t)N * 64);
    size_t len = 0;
    for (int i = 0; i < N; i++)
        len += (size_t)sprintf(in + len, "{\"id\":%d,\"tokens\":[2,%d],\"max_tokens\":1}\n", i,
                               400 + i % 3000);
    g4_config cfg = c->cfg;
    cfg.serve.max_queue = 8;
    char *out = serve_text_of(c, &cfg, in, len, 0);
    int done = out ? count_str(out, "\"event\":\"done\"") : 0;
    int err = out ? count_str(out, "\"event\":\"error\"") : 0;
    TEST_CHECK("proto_10k_piped", done == N && err == 0,
               "%d requests with max_queue 8: %d done, %d errors", N, done, err);
    free(in);
    free(out);
}

/* Id reuse while in flight, cancel (unknown and queued), stats, shutdown. */
static void gate_control(ctx *c) {
    const char *in = "{\"id\":\"x\",\"tokens\":[2,9,10],\"max_tokens\":40}\n"
                     "{\"cmd\":\"stats\"}\n"
                     "{\"id\":\"x\",\"tokens\":[2,11],\"max_tokens\":2}\n"
                     "{\"cmd\":\"cancel\",\"id\":\"nope\"}\n"
                     "{\"id\":\"y\",\"tokens\":[2,12],\"max_tokens\":40}\n"
                     "{\"cmd\":\"cancel\",\"id\":\"y\"}\n"
                     "{\"id\":\"z\",\"tokens\":[2,13],\"max_tokens\":3}\n"
                     "{\"cmd\":\"shutdown\"}\n"
                     "{\"id\":\"after\",\"tokens\":[2,14],\"max_tokens\":3}\n";
    char *out = serve_text_of(c, &c->cfg, in, strlen(in), 0);
    int ok_stats = out && strstr(out, "{\"event\":\"stats\",") != NULL;
    int ok_reuse = out && strstr(out, "{\"id\":\"x\",\"event\":\"error\",\"error\":{\"code\":"
                                      "\"bad_request\"") != NULL;
    int ok_x = out && count_str(out, "{\"id\":\"x\",\"event\":\"done\"") == 1;
    int ok_nope = out && strstr(out, "{\"id\":\"nope\",\"event\":\"error\"") != NULL;
    int ok_y = out && strstr(out, "\"finish_reason\":\"cancelled\"") != NULL &&
               count_str(out, "{\"id\":\"y\",\"event\":\"done\"") == 1;
    int ok_z = out && count_str(out, "{\"id\":\"z\",\"event\":\"done\"") == 1;
    int ok_after = out && strstr(out, "\"after\"") == NULL;
    TEST_CHECK("proto_control", ok_stats && ok_reuse && ok_x && ok_nope && ok_y && ok_z && ok_after,
               "stats %d, id reuse refused %d, x done once %d, cancel unknown refused %d, y "
               "cancelled %d, z ended at shutdown %d, nothing read after shutdown %d",
               ok_stats, ok_reuse, ok_x, ok_nope, ok_y, ok_z, ok_after);
    free(out);
}

/* The collision: an explicit integer id 2 and, on line 2, a request without an id
 * ("line-2") are two requests, each answered once. Then shutdown drains (a request still
 * queued behind a one-slot batch finishes) and abort cancels (running and queued end
 * "cancelled"); neither reads the line after it. */
static void gate_ids_and_ends(ctx *c) {
    const char *ids = "{\"id\":2,\"tokens\":[2,3],\"max_tokens\":5}\n"
                      "{\"tokens\":[2,3],\"max_tokens\":1}\n";
    char *out = serve_text_of(c, &c->cfg, ids, strlen(ids), 0);
    int two = out && count_str(out, "{\"id\":2,\"event\":\"done\"") == 1 &&
              count_str(out, "{\"id\":\"line-2\",\"event\":\"done\"") == 1 &&
              !strstr(out, "\"event\":\"error\"");
    TEST_CHECK("proto_default_id_apart", two,
               "id 2 and the id-less line 2 (\"line-2\") each end with one done line, no error");
    free(out);
    g4_config one = c->cfg;
    one.serve.max_batch = 1; /* q2 waits in the queue while q1 runs */
    static const char *const ends[2] = {"shutdown", "abort"};
    int ok[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        char in[512];
        snprintf(in, sizeof in,
                 "{\"id\":\"q1\",\"tokens\":[2,9],\"max_tokens\":6}\n"
                 "{\"id\":\"q2\",\"tokens\":[2,10],\"max_tokens\":6}\n"
                 "{\"cmd\":\"%s\"}\n{\"id\":\"q3\",\"tokens\":[2,11],\"max_tokens\":2}\n",
                 ends[k]);
        out = serve_text_of(c, &one, in, strlen(in), 0);
        const char *want =
            k == 0 ? "\"finish_reason\":\"length\"" : "\"finish_reason\":\"cancelled\"";
        ok[k] = out && count_str(out, want) == 2 &&
                count_str(out, "{\"id\":\"q1\",\"event\":\"done\"") == 1 &&
                count_str(out, "{\"id\":\"q2\",\"event\":\"done\"") == 1 && !strstr(out, "\"q3\"");
        free(out);
    }
    TEST_CHECK("proto_shutdown_drains", ok[0],
               "shutdown: the running and the queued request both finish (length), nothing read "
               "after it");
    TEST_CHECK(
        "proto_abort_cancels", ok[1],
        "abort: the running and the queued request both end cancelled, nothing read after it");
}

/* Submits text's request lines to s (line numbers from *line_no on); 0 when all went in. */
static int submit_lines(sched *s, const char *text, long *line_no) {
    for (const char *l = text; *l; l = strchr(l, '\n') + 1) {
        proto_request req;
        proto_error perr;
        if (proto_parse_line(l, (size_t)(strchr(l, '\n') - l), ++*line_no, &req, &perr) != 0) {
            proto_error_free(&perr);
            return -1;
        }
        int32_t *ids = malloc(sizeof *ids * (size_t)req.n_tokens);
        int n = req.n_tokens;
        if (ids) memcpy(ids, req.tokens, sizeof *ids * (size_t)n);
        if (!ids || sched_submit(s, &req, ids, n, sched_now_ms()) != 0) {
            if (!ids) proto_request_free(&req);
            return -1;
        }
    }
    return 0;
}

/* Runs in's request lines through a scheduler on e under cfg, and later's (NULL: none) once two
 * steps have run; returns the answer lines (timing masked, owned by the caller) and the most
 * rows any step carried. */
static char *sched_run(engine *e, const g4_config *cfg, const char *in, const char *later,
                       long *max_rows) {
    FILE *out = tmpfile();
    sched *s = out ? sched_create(e, NULL, cfg, out) : NULL;
    long line_no = 0;
    int ok = s != NULL && submit_lines(s, in, &line_no) == 0;
    *max_rows = 0;
    for (int step = 0; ok && step < 10000 && (later || sched_queued(s) || sched_running(s));
         step++) {
        if (step == 2 && later) {
            ok = submit_lines(s, later, &line_no) == 0;
            later = NULL;
            if (!ok) break;
        }
        ok = sched_step(s) >= 0;
        if (sched_last_step_rows(s) > *max_rows) *max_rows = sched_last_step_rows(s);
    }
    sched_destroy(s);
    char *text = NULL;
    if (ok && out) {
        long n = ftell(out);
        text = malloc((size_t)n + 1);
        rewind(out);
        size_t got = text ? fread(text, 1, (size_t)n, out) : 0;
        if (text) text[got] = '\0';
        if (text) mask_timing(text);
    }
    if (out) fclose(out);
    return text;
}

/* serve.step_tokens: with a budget of 8 rows a step, two decoding requests and a 60-token prompt
 * that arrives beside them never make a step of more than 8 rows (the prompt goes in slices
 * of 6, then fewer as it finishes), and every answer is byte-equal to the run at the default
 * budget (prefill_chunk + max_batch: the prompt whole in one step). While nothing decodes (the
 * three sent at once, or the long prompt alone) the prompts go in whole at either budget. */
static void gate_step_tokens(ctx *c) {
    char in[2048] = "{\"id\":\"d1\",\"tokens\":[2,5,6],\"max_tokens\":24,\"ignore_eos\":true}\n"
                    "{\"id\":\"d2\",\"tokens\":[2,7],\"max_tokens\":24,\"temperature\":0.9,"
                    "\"seed\":3,\"ignore_eos\":true}\n{\"id\":\"long\",\"tokens\":[2";
    for (int i = 0; i < 59; i++)
        snprintf(in + strlen(in), sizeof in - strlen(in), ",%d", 100 + 13 * i);
    strcat(in, "],\"max_tokens\":6}\n");
    char *lone = strstr(in, "{\"id\":\"long\"");
    char first[256]; /* d1 and d2, the long prompt two steps later */
    snprintf(first, sizeof first, "%.*s", (int)(lone - in), in);
    g4_config whole = c->cfg, sliced = c->cfg;
    whole.serve.max_batch = sliced.serve.max_batch = 3;
    sliced.serve.step_tokens = 8;
    long rows_whole = 0, rows_sliced = 0, rows_burst = 0, rows_burst_whole = 0;
    char *a = sched_run(c->e, &whole, first, lone, &rows_whole);
    char *b = sched_run(c->e, &sliced, first, lone, &rows_sliced);
    char *d = sched_run(c->e, &sliced, in, NULL, &rows_burst);
    char *dw = sched_run(c->e, &whole, in, NULL, &rows_burst_whole);
    free(dw);
    /* per request: the steps differ, so the runs interleave their lines differently */
    int equal = a && b && count_str(a, "\"event\":\"done\"") == 3, burst_equal = equal && d;
    static const char *const ids[] = {"\"d1\"", "\"d2\"", "\"long\""};
    for (size_t i = 0; equal && i < sizeof ids / sizeof *ids; i++) {
        char *x = lines_of(a, ids[i]), *y = lines_of(b, ids[i]),
             *z = d ? lines_of(d, ids[i]) : NULL;
        equal = x && y && strcmp(x, y) == 0;
        burst_equal = burst_equal && x && z && strcmp(x, z) == 0;
        free(x);
        free(y);
        free(z);
    }
    TEST_CHECK("proto_step_tokens", equal && rows_sliced <= 8 && rows_whole > 8,
               "serve.step_tokens = 8: at most %ld rows a step (default budget: %ld); the three "
               "answers byte-equal to the default run: %s",
               rows_sliced, rows_whole, equal ? "yes" : "no");
    TEST_CHECK("proto_step_tokens_burst",
               burst_equal && rows_burst == rows_burst_whole && rows_burst > 8,
               "serve.step_tokens = 8, the three prompts at once on an idle scheduler: %ld rows "
               "at most a step (the default budget's %ld wanted: whole chunks while nothing "
               "decodes); answers equal to the default run's: %s",
               rows_burst, rows_burst_whole, burst_equal ? "yes" : "no");
    free(a);
    free(b);
    free(d);
    /* the long prompt alone: no one to stall, so its 60 tokens go in one step at either budget,
     * and its answer is the one it gave beside the others */
    long rows_lone = 0;
    char *l = sched_run(c->e, &sliced, lone, NULL, &rows_lone);
    char *w = sched_run(c->e, &whole, lone, NULL, &rows_whole);
    char *x = l ? lines_of(l, "\"long\"") : NULL, *y = w ? lines_of(w, "\"long\"") : NULL;
    TEST_CHECK("proto_step_tokens_alone", x && y && strcmp(x, y) == 0 && rows_lone == 60,
               "serve.step_tokens = 8, the 60-token prompt alone: %ld rows at most a step (60 "
               "wanted: whole chunks when nothing else runs); answer equal to the default "
               "run's: %s",
               rows_lone, x && y && strcmp(x, y) == 0 ? "yes" : "no");
    free(x);
    free(y);
    free(l);
    free(w);
}

/* A stop string taken from the middle of a solo answer: the answer ends just before it and
 * the streamed pieces never show any of it. */
static void gate_stop_string(ctx *c) {
    /* sampled, so the answer varies and the stop string's first match is deep inside it */
    const char *solo = "{\"id\":1,\"prompt\":\"the river\",\"max_tokens\":24,"
                       "\"temperature\":4.0,\"seed\":5,\"stream\":false}";
    char *out = serve_text_of(c, &c->cfg, solo, strlen(solo), 0);
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    const char *text = json_string_value(json_object_get(j, "text"));
    size_t tl = text ? strlen(text) : 0;
    if (tl < 8) {
        test_fail("proto_stop_string", "the solo answer is too short to cut (%zu bytes)", tl);
        json_decref(j);
        free(out);
        return;
    }
    char stop[8] = {0}, line[256];
    size_t at = tl / 2;
    while (at < tl && (text[at] & 0xC0) == 0x80)
        at++; /* start on a character */
    memcpy(stop, text + at, 3);
    json_t *sj = json_string(stop);
    char *sq = json_dumps(sj, JSON_ENCODE_ANY);
    snprintf(line, sizeof line,
             "{\"id\":2,\"prompt\":\"the river\",\"max_tokens\":24,\"temperature\":4.0,"
             "\"seed\":5,\"stop\":[%s]}",
             sq ? sq : "\"\"");
    char *out2 = serve_text_of(c, &c->cfg, line, strlen(line), 0);
    /* concatenate the streamed texts, and read the done line */
    size_t streamed_len = 0;
    char streamed[4096] = "";
    const char *done_text = NULL, *reason = NULL;
    json_t *done = NULL;
    for (char *save = NULL, *l = out2 ? strtok_r(out2, "\n", &save) : NULL; l;
         l = strtok_r(NULL, "\n", &save)) {
        json_t *e = json_loads(l, 0, NULL);
        const char *ev = json_string_value(json_object_get(e, "event"));
        if (ev && strcmp(ev, "token") == 0) {
            const char *t = json_string_value(json_object_get(e, "text"));
            size_t n = t ? strlen(t) : 0;
            if (streamed_len + n < sizeof streamed) memcpy(streamed + streamed_len, t, n);
            streamed_len += n;
            json_decref(e);
        } else {
            json_decref(done);
            done = e;
        }
    }
    done_text = json_string_value(json_object_get(done, "text"));
    reason = json_string_value(json_object_get(done, "finish_reason"));
    const char *first = strstr(text, stop);
    size_t want = first ? (size_t)(first - text) : 0;
    int ok = want > 0 && done_text && reason && strcmp(reason, "stop") == 0 &&
             strlen(done_text) == want && strncmp(done_text, text, want) == 0 &&
             streamed_len == want && strstr(streamed, stop) == NULL;
    TEST_CHECK("proto_stop_string", ok,
               "stop string of %zu bytes cut the answer at byte %zu of %zu; streamed %zu bytes, "
               "finish_reason %s",
               strlen(stop), want, tl, streamed_len, reason ? reason : "none");
    json_decref(done);
    json_decref(sj);
    free(sq);
    json_decref(j);
    free(out);
    free(out2);
}

/* --text: stdin is one user message; stdout is only the answer text and a newline. */
static void gate_text(ctx *c) {
    const char *in = "Tell me about the river.\n";
    char *out = serve_text_of(c, &c->cfg, in, strlen(in), 1);
    size_t n = out ? strlen(out) : 0;
    TEST_CHECK("proto_text_mode", out && n > 0 && out[n - 1] == '\n' && !strstr(out, "\"event\""),
               "%zu bytes of answer text, newline-terminated, no protocol lines", n);
    /* serve.text_max_tokens: 4 tokens answer a prefix of what 12 answer (greedy), and less */
    g4_config cfg = c->cfg;
    cfg.serve.text_max_tokens = 4;
    char *four = serve_text_of(c, &cfg, in, strlen(in), 1);
    cfg.serve.text_max_tokens = 12;
    char *twelve = serve_text_of(c, &cfg, in, strlen(in), 1);
    size_t n4 = four ? strlen(four) : 0, n12 = twelve ? strlen(twelve) : 0;
    TEST_CHECK("proto_text_max_tokens",
               four && twelve && n4 > 1 && n4 < n12 && strncmp(four, twelve, n4 - 1) == 0,
               "text_max_tokens 4: %zu bytes, a prefix of the %zu bytes of 12", n4, n12);
    /* stdin with no text: no answer at all, an error (never an unprompted generation) */
    const char *blank = " \n\t\n";
    FILE *bin = tmpfile(), *bout = tmpfile();
    int rc = -1;
    long wrote = -1;
    if (bin && bout) {
        fputs(blank, bin);
        fflush(bin);
        lseek(fileno(bin), 0, SEEK_SET);
        rc = serve_text(c->e, c->tk, &c->cfg, fileno(bin), bout);
        fflush(bout);
        wrote = ftell(bout);
    }
    TEST_CHECK("proto_text_empty_stdin", rc == 1 && wrote == 0,
               "whitespace-only stdin: serve_text returned %d (want 1), wrote %ld bytes (want 0)",
               rc, wrote);
    if (bin) fclose(bin);
    if (bout) fclose(bout);
    free(four);
    free(twelve);
    free(out);
}

/* The same lines through the scheduler itself, which owns the KV pool: 1 when want_failed steps
 * failed and, once every request has ended, every usable page of both families is free again. */
static int pages_back_after(engine *e, const g4_config *cfg, const char *in, int want_failed) {
    FILE *out = tmpfile();
    sched *s = out ? sched_create(e, NULL, cfg, out) : NULL;
    int ok = s != NULL, failed = 0;
    long line_no = 0;
    for (const char *l = in; ok && *l; l = strchr(l, '\n') + 1) {
        proto_request req;
        proto_error perr;
        size_t len = (size_t)(strchr(l, '\n') - l);
        if (proto_parse_line(l, len, ++line_no, &req, &perr) != 0) {
            proto_error_free(&perr);
            ok = 0;
            break;
        }
        int32_t *ids = malloc(sizeof *ids * (size_t)req.n_tokens);
        if (!ids) {
            proto_request_free(&req);
            ok = 0;
            break;
        }
        memcpy(ids, req.tokens, sizeof *ids * (size_t)req.n_tokens);
        int n = req.n_tokens;
        ok = sched_submit(s, &req, ids, n, sched_now_ms()) == 0;
    }
    for (int step = 0; ok && step < 1000 && (sched_queued(s) || sched_running(s)); step++)
        failed += sched_step(s) < 0;
    const kv_pool *p = ok ? sched_kv_pool(s) : NULL;
    ok = ok && failed == want_failed && !sched_queued(s) && !sched_running(s) &&
         kv_pool_free_pages(p, KV_LOCAL) == kv_pool_usable_pages(p, KV_LOCAL) &&
         kv_pool_free_pages(p, KV_GLOBAL) == kv_pool_usable_pages(p, KV_GLOBAL);
    sched_destroy(s);
    if (out) fclose(out);
    return ok;
}

/* debug.fail_step: engine step 4 fails after layer 0 wrote its K/V, with a prompt of several
 * chunks in it beside requests that decode. Checked: no token line of that step; each request
 * with rows in it (and only those) ends with exactly one line, an error naming the cause;
 * the others (one that finished before, one still queued, one admitted after) answer
 * byte-equal to a run without the fault; every KV page is back at the end; the engine serves
 * requests after it. */
static void gate_step_failure(ctx *c, const char *fixtures) {
    const char *in =
        "{\"id\":\"early\",\"tokens\":[2,11,12],\"max_tokens\":2}\n"
        "{\"id\":\"dec\",\"tokens\":[2,13,14,15],\"max_tokens\":30}\n"
        "{\"id\":\"long\",\"tokens\":[2,"
        "20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,"
        "46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,69,70,71"
        "],\"max_tokens\":5}\n"
        "{\"id\":\"late\",\"tokens\":[2,16,17],\"max_tokens\":6}\n"
        "{\"id\":\"later\",\"tokens\":[2,18,19,20,21],\"max_tokens\":4}\n";
    g4_config cfg = c->cfg;
    cfg.serve.max_batch = 3; /* "late" and "later" wait for a slot */
    cfg.serve.prefill_chunk = 16;
    snprintf(cfg.model.path, sizeof cfg.model.path, "%s/tiny-moe", fixtures);
    engine *clean = NULL, *faulty = NULL;
    g4_config fcfg = cfg;
    fcfg.debug.fail_step = 4;
    if (engine_open(&cfg, 0, &clean) != 0 || engine_open(&fcfg, 0, &faulty) != 0) {
        test_fail("proto_step_failure", "cannot open the tiny-moe engines");
        engine_close(clean);
        return;
    }
    ctx cc = {clean, c->tk, cfg}, fc = {faulty, c->tk, fcfg};
    char *want = serve_text_of(&cc, &cfg, in, strlen(in), 0);
    char *got = serve_text_of(&fc, &fcfg, in, strlen(in), 0);
    int ok = want && got;
    if (ok) {
        mask_timing(want);
        mask_timing(got);
    }
    /* step 1: early + dec + long's first chunk; 2-3: decode and long's chunks; step 4 fails
     * with dec and long in it ("early" ended at step 2, "late" took its slot at step 3) */
    static const char *const failed[] = {"\"dec\"", "\"long\"", "\"late\""};
    static const char *const same[] = {"\"early\"", "\"later\""};
    char why[512] = "";
    for (size_t i = 0; ok && i < sizeof failed / sizeof *failed; i++) {
        char *l = lines_of(got, failed[i]);
        const char *last = NULL; /* the request's last line */
        for (const char *q = l; q && *q; q = strchr(q, '\n') ? strchr(q, '\n') + 1 : "")
            last = q;
        int n_err = l ? count_str(l, "\"event\":\"error\"") : 0;
        int n_done = l ? count_str(l, "\"event\":\"done\"") : 0;
        if (!l || n_err != 1 || n_done != 0 || !last || !strstr(last, "\"event\":\"error\"") ||
            !strstr(last, "the engine step failed (step failed at L00.attention")) {
            ok = 0;
            snprintf(why, sizeof why, "%s: %d errors, %d done lines; last line %.200s", failed[i],
                     n_err, n_done, last ? last : "(none)");
        }
        free(l);
    }
    for (size_t i = 0; ok && i < sizeof same / sizeof *same; i++) {
        char *a = lines_of(want, same[i]), *b = lines_of(got, same[i]);
        if (!a || !b || strcmp(a, b) != 0 || !strstr(b, "\"event\":\"done\"")) {
            ok = 0;
            snprintf(why, sizeof why, "%s answers differently from the run without the fault",
                     same[i]);
        }
        free(a);
        free(b);
    }
    engine *again = NULL; /* a fresh engine: debug.fail_step counts an engine's steps */
    int pages_back = engine_open(&fcfg, 0, &again) == 0 && pages_back_after(again, &fcfg, in, 1);
    engine_close(again);
    TEST_CHECK("proto_step_failure", ok && pages_back,
               "step 4 failed on purpose (debug.fail_step): dec, long (mid-prefill) and late "
               "ended with one error line each naming the cause, early and later byte-equal to "
               "the run without the fault, KV pages all back: %s%s%s",
               pages_back ? "yes" : "no", why[0] ? "; " : "", why);
    free(want);
    free(got);
    engine_close(clean);
    engine_close(faulty);
}

/* debug.nan_step: engine step 3's first logits row gets a NaN (as a failed computation would
 * leave it), with three requests decoding in that step. Checked: exactly one request ends, with
 * one `internal` error line saying its logits were not finite, and nothing after it; every
 * other request answers byte-equal to a run without the fault; every KV page is back. */
static void gate_nonfinite_logits(ctx *c, const char *fixtures) {
    const char *in = "{\"id\":\"a\",\"tokens\":[2,11,12],\"max_tokens\":6}\n"
                     "{\"id\":\"b\",\"tokens\":[2,13,14,15],\"max_tokens\":6,\"logprobs\":2}\n"
                     "{\"id\":\"c\",\"tokens\":[2,16,17],\"max_tokens\":6,"
                     "\"temperature\":0.9,\"seed\":5}\n"
                     "{\"id\":\"d\",\"tokens\":[2,18,19,20,21],\"max_tokens\":4}\n";
    g4_config cfg = c->cfg;
    cfg.serve.max_batch = 3;            /* "d" waits for a slot */
    cfg.debug.backend = G4_BACKEND_CPU; /* debug.nan_step writes into host logits */
    snprintf(cfg.model.path, sizeof cfg.model.path, "%s/tiny-moe", fixtures);
    g4_config ncfg = cfg;
    ncfg.debug.nan_step = 3;
    engine *clean = NULL, *faulty = NULL;
    if (engine_open(&cfg, 0, &clean) != 0 || engine_open(&ncfg, 0, &faulty) != 0) {
        test_fail("proto_nonfinite_logits", "cannot open the tiny-moe engines");
        engine_close(clean);
        return;
    }
    ctx cc = {clean, c->tk, cfg}, fc = {faulty, c->tk, ncfg};
    char *want = serve_text_of(&cc, &cfg, in, strlen(in), 0);
    char *got = serve_text_of(&fc, &ncfg, in, strlen(in), 0);
    int ok = want && got;
    if (ok) {
        mask_timing(want);
        mask_timing(got);
    }
    static const char *const ids[] = {"\"a\"", "\"b\"", "\"c\"", "\"d\""};
    int ended = 0, same = 0;
    char why[512] = "";
    for (size_t i = 0; ok && i < sizeof ids / sizeof *ids; i++) {
        char *a = lines_of(want, ids[i]), *b = lines_of(got, ids[i]);
        if (a && b && strcmp(a, b) == 0 && strstr(b, "\"event\":\"done\"")) {
            same++;
        } else if (b) {
            const char *last = NULL;
            for (const char *q = b; *q; q = strchr(q, '\n') ? strchr(q, '\n') + 1 : "")
                last = q;
            if (count_str(b, "\"event\":\"error\"") == 1 && !strstr(b, "\"event\":\"done\"") &&
                last && strstr(last, "\"code\":\"internal\"") &&
                strstr(last, "logits were not finite"))
                ended++;
            else
                snprintf(why, sizeof why, "%s: %.300s", ids[i], last ? last : "(no lines)");
        }
        free(a);
        free(b);
    }
    engine *again = NULL; /* a fresh engine: debug.nan_step counts an engine's steps */
    int pages_back = engine_open(&ncfg, 0, &again) == 0 && pages_back_after(again, &ncfg, in, 0);
    engine_close(again);
    TEST_CHECK("proto_nonfinite_logits", ok && ended == 1 && same == 3 && pages_back,
               "a NaN in step 3's first logits row (debug.nan_step): %d request ended with an "
               "internal error saying so (want 1), %d of 4 byte-equal to the run without it "
               "(want 3), KV pages all back: %s%s%s",
               ended, same, pages_back ? "yes" : "no", why[0] ? "; " : "", why);
    free(want);
    free(got);
    engine_close(clean);
    engine_close(faulty);
}

/* One HF dump's len40 case: its ids and, per position, the top ids' logprobs and the top-1 /
 * top-2 logits (tests/fixtures/make_fixtures.py's format). */
typedef struct hf_case {
    int n, ids[64];
    int top_id[64][8];
    double top_lp[64][8], top1[64], top2[64];
} hf_case;

static int read_len40(const char *path, hf_case *c) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int in = 0;
    c->n = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "case ", 5)) {
            in = !strncmp(line, "case len40 ", 11);
            if (!in) continue;
            char *p = line + 11;
            c->n = (int)strtol(p, &p, 10);
            for (int i = 0; i < c->n && i < 64; i++)
                c->ids[i] = (int)strtol(p, &p, 10);
        } else if (in && !strncmp(line, "lp ", 3)) {
            char *p = line + 3;
            int pos = (int)strtol(p, &p, 10);
            if (pos < 0 || pos >= 64) continue;
            c->top1[pos] = strtod(p, &p);
            c->top2[pos] = strtod(p, &p);
            for (int k = 0; k < 8; k++) {
                c->top_id[pos][k] = (int)strtol(p, &p, 10);
                if (*p == ':') p++;
                c->top_lp[pos][k] = strtod(p, &p);
            }
        }
    }
    fclose(f);
    return c->n == 40 ? 0 : -1;
}

/* The answer line of id in out (its first token line), parsed; NULL when absent. */
static json_t *first_token_of(const char *out, const char *id) {
    char key[64];
    snprintf(key, sizeof key, "{\"id\":\"%s\",\"event\":\"token\",\"index\":0,", id);
    const char *l = strstr(out, key);
    if (!l) return NULL;
    const char *nl = strchr(l, '\n');
    return json_loadb(l, nl ? (size_t)(nl - l) : strlen(l), 0, NULL);
}

/* The prefill chunk's edges through the scheduler: prompts of chunk-1, chunk, chunk+1 and three
 * chunks + 1 tokens (the first tokens of the fixture's 40-token prompt, whose logits at
 * position n-1 HF's dump holds: a causal model's logits there see only those tokens) at
 * serve.prefill_chunk 4, 8 and 16, each alone and all at once beside a request that decodes.
 * Three checks a prompt: the answers alone and mixed byte-equal; the chunked answer byte-equal
 * to the same prompt prefilled in one chunk (the sharp check of the chunk edges: a row's bits
 * never depend on how its prompt is sliced); and the first token against HF eager under
 * cpu_vs_hf's rule: the gap at most max(0.02, 2 x the case's sdpa floor), the argmax equal
 * unless HF itself could flip it there (top-1/top-2 margin under 2 bf16 ulps, or under twice
 * that position's sdpa move: random weights put sdpa's own ties on such positions). */
static void gate_chunk_edges(ctx *c, const char *fixtures, const char *name) {
    char path[1024], gate[64];
    snprintf(gate, sizeof gate, "chunk_edges[%s]", name);
    hf_case *eager = calloc(1, sizeof *eager), *sdpa = calloc(1, sizeof *sdpa);
    snprintf(path, sizeof path, "%s/%s/hf_eager.txt", fixtures, name);
    int ok = eager && sdpa && read_len40(path, eager) == 0;
    snprintf(path, sizeof path, "%s/%s/hf_sdpa.txt", fixtures, name);
    ok = ok && read_len40(path, sdpa) == 0;
    if (!ok) {
        test_fail(gate, "cannot read the len40 case of %s", path);
        free(eager);
        free(sdpa);
        return;
    }
    static const int chunks[] = {4, 8, 16};
    int cases = 0, bad = 0;
    double worst = 0, case_floor = 0;
    char why[300] = "";
    for (int pos = 0; pos < eager->n; pos++) /* the case's floor, as cpu_vs_hf takes it */
        for (int k = 0; k < 8; k++)
            for (int j = 0; j < 8; j++)
                if (sdpa->top_id[pos][j] == eager->top_id[pos][k])
                    case_floor =
                        fmax(case_floor, fabs(sdpa->top_lp[pos][j] - eager->top_lp[pos][k]));
    g4_config whole_cfg = c->cfg; /* every prompt of the gate in one chunk */
    snprintf(whole_cfg.model.path, sizeof whole_cfg.model.path, "%s/%s", fixtures, name);
    whole_cfg.kv.page_tokens = 4;
    whole_cfg.serve.prefill_chunk = 64;
    engine *whole_e = NULL;
    if (engine_open(&whole_cfg, 0, &whole_e) != 0) {
        test_fail(gate, "no engine at prefill_chunk 64");
        free(eager);
        free(sdpa);
        return;
    }
    ctx whole = {whole_e, c->tk, whole_cfg};
    for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ci++) {
        int ch = chunks[ci], lens[4] = {ch - 1, ch, ch + 1, 3 * ch + 1};
        if (lens[3] > 40) lens[3] = 40; /* chunk 16: 16 + 16 + 8, still three chunks */
        g4_config cfg = c->cfg;
        snprintf(cfg.model.path, sizeof cfg.model.path, "%s/%s", fixtures, name);
        cfg.kv.page_tokens = 4;
        cfg.serve.prefill_chunk = ch;
        engine *e = NULL;
        if (engine_open(&cfg, 0, &e) != 0) {
            bad++;
            snprintf(why, sizeof why, "no engine at prefill_chunk %d", ch);
            continue;
        }
        ctx cc = {e, c->tk, cfg};
        char mixed[8192], alone_in[2048];
        size_t ml = (size_t)snprintf(
            mixed, sizeof mixed, "{\"id\":\"dec\",\"tokens\":[2,13,14,15],\"max_tokens\":30}\n");
        char *alone_out[4] = {0}, *whole_out[4] = {0};
        for (int li = 0; li < 4; li++) {
            int n = lens[li];
            size_t al = (size_t)snprintf(alone_in, sizeof alone_in,
                                         "{\"id\":\"n%d\",\"max_tokens\":3,\"logprobs\":20,"
                                         "\"ignore_eos\":true,\"tokens\":[",
                                         n);
            for (int i = 0; i < n; i++)
                al += (size_t)snprintf(alone_in + al, sizeof alone_in - al, "%s%d", i ? "," : "",
                                       eager->ids[i]);
            al += (size_t)snprintf(alone_in + al, sizeof alone_in - al, "]}\n");
            memcpy(mixed + ml, alone_in, al);
            ml += al;
            alone_out[li] = serve_text_of(&cc, &cfg, alone_in, al, 0);
            whole_out[li] = serve_text_of(&whole, &whole_cfg, alone_in, al, 0);
        }
        char *mixed_out = serve_text_of(&cc, &cfg, mixed, ml, 0);
        for (int li = 0; li < 4; li++) {
            int n = lens[li], pos = n - 1;
            char id[16];
            snprintf(id, sizeof id, "\"n%d\"", n);
            char *a = alone_out[li] ? lines_of(alone_out[li], id) : NULL;
            char *m = mixed_out ? lines_of(mixed_out, id) : NULL;
            cases++;
            char *w = whole_out[li] ? lines_of(whole_out[li], id) : NULL;
            if (!a || !m || strcmp(a, m) != 0) {
                bad++;
                snprintf(why, sizeof why, "chunk %d, %d tokens: alone and mixed answers differ", ch,
                         n);
            }
            if (!a || !w || strcmp(a, w) != 0) {
                bad++;
                snprintf(why, sizeof why,
                         "chunk %d, %d tokens: the answer differs from the prompt in one chunk", ch,
                         n);
            }
            snprintf(id, sizeof id, "n%d", n);
            json_t *t = alone_out[li] ? first_token_of(alone_out[li], id) : NULL;
            json_t *top = t ? json_object_get(json_object_get(t, "logprobs"), "top") : NULL;
            int tok = t ? (int)json_integer_value(json_object_get(t, "token")) : -1;
            /* 2 bf16 ulps of the top logit: 2^(exponent - 7) each */
            double ulp = ldexp(1.0, (int)floor(log2(fabs(eager->top1[pos]) + 1e-30)) - 7);
            double margin = eager->top1[pos] - eager->top2[pos];
            double floor_gap = 0, gap = 0;
            for (int k = 0; k < 8; k++) {
                for (int j = 0; j < 8; j++)
                    if (sdpa->top_id[pos][j] == eager->top_id[pos][k])
                        floor_gap =
                            fmax(floor_gap, fabs(sdpa->top_lp[pos][j] - eager->top_lp[pos][k]));
                int found = 0;
                double low = 0; /* the engine's 20th logprob */
                for (size_t j = 0; top && j < json_array_size(top); j++) {
                    json_t *x = json_array_get(top, j);
                    double lp = json_real_value(json_object_get(x, "logprob"));
                    low = fmin(low, lp);
                    if (json_integer_value(json_object_get(x, "id")) != eager->top_id[pos][k])
                        continue;
                    gap = fmax(gap, fabs(lp - eager->top_lp[pos][k]));
                    found = 1;
                }
                /* past the engine's top 20 its logprob is at most the 20th: the gap is at
                 * least how far HF's lies above that */
                if (!found) gap = fmax(gap, top ? fmax(0, eager->top_lp[pos][k] - low) : 99);
            }
            double lim = fmax(0.02, 2 * case_floor);
            int exempt = margin < 2 * ulp || margin < 2 * floor_gap;
            worst = fmax(worst, gap);
            if (!t || (!exempt && tok != eager->top_id[pos][0]) || gap > lim) {
                bad++;
                snprintf(why, sizeof why,
                         "chunk %d, %d tokens: token %d (HF %d%s), gap %.4f (limit %.4f)", ch, n,
                         tok, eager->top_id[pos][0], exempt ? ", exempt" : "", gap, lim);
            }
            json_decref(t);
            free(a);
            free(m);
            free(w);
            free(alone_out[li]);
            free(whole_out[li]);
        }
        free(mixed_out);
        engine_close(e);
    }
    TEST_CHECK(gate, bad == 0,
               "%d prompts of chunk-1, chunk, chunk+1 and 3 chunks+1 tokens at prefill_chunk 4, 8, "
               "16, alone, beside a decoding request and in one chunk: %d bad, max gap %.4f "
               "against HF eager (limit %.4f)%s%s",
               cases, bad, worst, fmax(0.02, 2 * case_floor), why[0] ? "; " : "", why);
    engine_close(whole_e);
    free(eager);
    free(sdpa);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_serve FIXTURES_DIR PROTO_TEST_DIR\n");
        return 2;
    }
    log_set_level(LOG_ERROR);
    /* the transcripts, then one line each: bad stream, control, default ids, shutdown, abort,
     * step tokens, stop string, three of --text, 10k piped, step failure, non-finite logits,
     * and chunk edges on three fixtures (a gate that vanishes fails run_test) */
    test_plan((int)N_TRANSCRIPTS + 17);
    ctx c = {0};
    config_defaults(&c.cfg);
    snprintf(c.cfg.model.path, sizeof c.cfg.model.path, "%s/tiny-moe", argv[1]);
    c.cfg.serve.max_context = 256;
    c.cfg.serve.prefill_chunk = 64;
    c.cfg.serve.max_batch = 8;
    if (config_finish(&c.cfg) != 0 || engine_open(&c.cfg, 0, &c.e) != 0 ||
        tokenizer_load(c.cfg.model.tokenizer, &c.tk) != 0) {
        test_fail("proto_setup", "cannot open the tiny-moe fixture and its tokenizer");
        return harness_exit();
    }
    gate_transcripts(&c, argv[2]);
    gate_bad_stream(&c, argv[2]);
    gate_control(&c);
    gate_ids_and_ends(&c);
    gate_step_tokens(&c);
    gate_stop_string(&c);
    gate_text(&c);
    gate_many(&c);
    gate_step_failure(&c, argv[1]);
    gate_nonfinite_logits(&c, argv[1]);
    /* every random tiny fixture: MoE, per-layer embeddings with KV sharing, dense k_eq_v */
    gate_chunk_edges(&c, argv[1], "tiny-moe");
    gate_chunk_edges(&c, argv[1], "tiny-ple");
    gate_chunk_edges(&c, argv[1], "tiny-dense");
    tokenizer_free(c.tk);
    engine_close(c.e);
    return harness_exit();
}
