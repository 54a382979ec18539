/* tests/proto/test_proto.c - runtime/proto through its header.
 *
 * Owns: the bad-input corpus (each line with the error code it must get, a piece of the
 * message that names the field, and the id the answer must carry), the good lines parsed to
 * their values (defaults, assistant -> model, id echo), and the writers (each line read back
 * with jansson: fields, key order, one line per call, UTF-8 including NUL). No GPU, no
 * model: this is the protocol alone. */
#include "runtime/proto/proto.h"
#include "tests/harness.h"

#include <jansson.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_NO 7            /* the line number every case is parsed as */
#define LINE_ID "\"line-7\"" /* the id of a line that has none */

typedef struct bad_case {
    const char *line;
    size_t len; /* 0: strlen(line) */
    enum proto_code code;
    const char *needle; /* must appear in the message */
    const char *id;     /* the answer's id; NULL: "line-N" */
} bad_case;

#define S17                                                                                        \
    "\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\","   \
    "\"a\",\"a\""
#define X64 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"

static const bad_case bad_cases[] = {
    /* not JSON, or not an object */
    {"hello", 0, PROTO_BAD_JSON, "not JSON", NULL},
    {"{\"prompt\":\"hi\"", 0, PROTO_BAD_JSON, "not JSON", NULL},
    {"{\"prompt\":}", 0, PROTO_BAD_JSON, "not JSON", NULL},
    {"{\"prompt\":\"hi\"} x", 0, PROTO_BAD_JSON, "not JSON", NULL},
    {"{\"prompt\":\"hi\"}{}", 0, PROTO_BAD_JSON, "not JSON", NULL},
    {"{'prompt':'hi'}", 0, PROTO_BAD_JSON, "not JSON", NULL},
    {"{\"prompt\":NaN}", 0, PROTO_BAD_JSON, "not JSON", NULL},
    {"{\"prompt\":\"a\0b\"}", 17, PROTO_BAD_JSON, "not JSON", NULL},
    {"[1,2]", 0, PROTO_BAD_JSON, "got an array", NULL},
    {"\"prompt\"", 0, PROTO_BAD_JSON, "got a string", NULL},
    {"42", 0, PROTO_BAD_JSON, "got 42", NULL},
    {"null", 0, PROTO_BAD_JSON, "got null", NULL},
    /* invalid UTF-8: raw bytes, overlong, encoded surrogate, escaped lone surrogate */
    {"{\"prompt\":\"\xff\"}", 0, PROTO_BAD_JSON, "invalid UTF-8", NULL},
    {"{\"prompt\":\"\xc0\xaf\"}", 0, PROTO_BAD_JSON, "invalid UTF-8", NULL},
    {"{\"prompt\":\"\xe0\x80\xaf\"}", 0, PROTO_BAD_JSON, "invalid UTF-8", NULL},
    {"{\"prompt\":\"\xed\xa0\x80\"}", 0, PROTO_BAD_JSON, "invalid UTF-8", NULL},
    {"{\"prompt\":\"\\ud800\"}", 0, PROTO_BAD_JSON, "invalid UTF-8", NULL},
    {"{\"prompt\":\"\\udc00x\"}", 0, PROTO_BAD_JSON, "invalid UTF-8", NULL},
    {"{\"\xfe\":1}", 0, PROTO_BAD_JSON, "invalid UTF-8", NULL},
    /* empty */
    {"", 0, PROTO_BAD_REQUEST, "empty line", NULL},
    {"   \t\r", 0, PROTO_BAD_REQUEST, "empty line", NULL},
    /* unknown fields */
    {"{\"prompt\":\"x\",\"foo\":1}", 0, PROTO_BAD_REQUEST, "unknown field \"foo\"", NULL},
    {"{\"id\":\"q\",\"Prompt\":\"x\"}", 0, PROTO_BAD_REQUEST, "unknown field \"Prompt\"", "\"q\""},
    {"{\"prompt\":\"x\",\"model\":\"g\"}", 0, PROTO_BAD_REQUEST, "unknown field \"model\"", NULL},
    {"{\"prompt\":\"x\",\"" X64 X64 "\":1}", 0, PROTO_BAD_REQUEST, "unknown field \"xxx", NULL},
    /* wrong types, one per field */
    {"{\"prompt\":1}", 0, PROTO_BAD_REQUEST, "prompt must be a string (got 1)", NULL},
    {"{\"messages\":\"hi\"}", 0, PROTO_BAD_REQUEST, "messages must be", NULL},
    {"{\"tokens\":\"1,2\"}", 0, PROTO_BAD_REQUEST, "tokens must be", NULL},
    {"{\"prompt\":\"x\",\"max_tokens\":\"5\"}", 0, PROTO_BAD_REQUEST,
     "max_tokens must be an integer", NULL},
    {"{\"prompt\":\"x\",\"max_tokens\":1.5}", 0, PROTO_BAD_REQUEST, "max_tokens must be", NULL},
    {"{\"prompt\":\"x\",\"max_tokens\":8.0}", 0, PROTO_BAD_REQUEST, "(got 8)", NULL},
    {"{\"prompt\":\"x\",\"temperature\":\"hot\"}", 0, PROTO_BAD_REQUEST,
     "temperature must be a number", NULL},
    {"{\"prompt\":\"x\",\"top_k\":2.5}", 0, PROTO_BAD_REQUEST, "top_k must be", NULL},
    {"{\"prompt\":\"x\",\"top_p\":\"0.5\"}", 0, PROTO_BAD_REQUEST, "top_p must be", NULL},
    {"{\"prompt\":\"x\",\"min_p\":true}", 0, PROTO_BAD_REQUEST, "min_p must be", NULL},
    {"{\"prompt\":\"x\",\"seed\":\"1\"}", 0, PROTO_BAD_REQUEST, "seed must be", NULL},
    {"{\"prompt\":\"x\",\"seed\":1.0}", 0, PROTO_BAD_REQUEST, "seed must be", NULL},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"thinking\":1}", 0, PROTO_BAD_REQUEST,
     "thinking must be true or false", NULL},
    {"{\"prompt\":\"x\",\"stop\":\"x\"}", 0, PROTO_BAD_REQUEST, "stop must be an array", NULL},
    {"{\"prompt\":\"x\",\"ignore_eos\":\"yes\"}", 0, PROTO_BAD_REQUEST, "ignore_eos must be", NULL},
    {"{\"prompt\":\"x\",\"stream\":0}", 0, PROTO_BAD_REQUEST, "stream must be", NULL},
    {"{\"prompt\":\"x\",\"logprobs\":true}", 0, PROTO_BAD_REQUEST, "logprobs must be", NULL},
    {"{\"prompt\":\"x\",\"logprobs\":null}", 0, PROTO_BAD_REQUEST, "(got null)", NULL},
    /* out of range, one or two per numeric field */
    {"{\"prompt\":\"x\",\"max_tokens\":-3}", 0, PROTO_BAD_REQUEST,
     "max_tokens must be an integer in 1..1000000 (got -3)", NULL},
    {"{\"prompt\":\"x\",\"max_tokens\":0}", 0, PROTO_BAD_REQUEST, "max_tokens", NULL},
    {"{\"prompt\":\"x\",\"max_tokens\":1000001}", 0, PROTO_BAD_REQUEST, "max_tokens", NULL},
    {"{\"prompt\":\"x\",\"temperature\":-0.1}", 0, PROTO_BAD_REQUEST, "temperature", NULL},
    {"{\"prompt\":\"x\",\"temperature\":100.5}", 0, PROTO_BAD_REQUEST, "temperature", NULL},
    {"{\"prompt\":\"x\",\"top_k\":-1}", 0, PROTO_BAD_REQUEST, "top_k", NULL},
    {"{\"prompt\":\"x\",\"top_k\":2147483648}", 0, PROTO_BAD_REQUEST, "top_k", NULL},
    {"{\"prompt\":\"x\",\"top_p\":0}", 0, PROTO_BAD_REQUEST, "top_p must be a number in (0, 1]",
     NULL},
    {"{\"prompt\":\"x\",\"top_p\":1.01}", 0, PROTO_BAD_REQUEST, "top_p", NULL},
    {"{\"prompt\":\"x\",\"min_p\":-0.5}", 0, PROTO_BAD_REQUEST, "min_p", NULL},
    {"{\"prompt\":\"x\",\"min_p\":2}", 0, PROTO_BAD_REQUEST, "min_p", NULL},
    {"{\"prompt\":\"x\",\"seed\":-1}", 0, PROTO_BAD_REQUEST, "seed", NULL},
    {"{\"prompt\":\"x\",\"seed\":18446744073709551615}", 0, PROTO_BAD_REQUEST, "out of range",
     NULL},
    {"{\"prompt\":\"x\",\"temperature\":1e400}", 0, PROTO_BAD_REQUEST, "out of range", NULL},
    {"{\"prompt\":\"x\",\"logprobs\":21}", 0, PROTO_BAD_REQUEST, "logprobs", NULL},
    {"{\"prompt\":\"x\",\"logprobs\":-1}", 0, PROTO_BAD_REQUEST, "logprobs", NULL},
    /* exactly one of prompt, messages, tokens */
    {"{\"prompt\":\"x\",\"tokens\":[1]}", 0, PROTO_BAD_REQUEST, "exactly one of", NULL},
    {"{\"prompt\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tokens\":[1]}", 0,
     PROTO_BAD_REQUEST, "(got prompt messages tokens)", NULL},
    {"{\"id\":3,\"max_tokens\":5}", 0, PROTO_BAD_REQUEST, "one of prompt, messages, tokens", "3"},
    {"{}", 0, PROTO_BAD_REQUEST, "is required", NULL},
    /* messages */
    {"{\"messages\":[]}", 0, PROTO_BAD_REQUEST, "messages must be a non-empty array", NULL},
    {"{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 0, PROTO_BAD_REQUEST,
     "messages[0].role must be", NULL},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"User\",\"content\":\"y\"}]}",
     0, PROTO_BAD_REQUEST, "messages[1].role", NULL},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":\"b\"}]}", 0, PROTO_BAD_REQUEST,
     "unknown field \"name\"", NULL},
    {"{\"messages\":[{\"role\":\"user\",\"content\":7}]}", 0, PROTO_BAD_REQUEST,
     "messages[0].content must be a string", NULL},
    {"{\"messages\":[{\"role\":\"user\"}]}", 0, PROTO_BAD_REQUEST, "needs both role and content",
     NULL},
    {"{\"messages\":[\"hi\"]}", 0, PROTO_BAD_REQUEST, "messages[0] must be an object", NULL},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", 0, PROTO_BAD_REQUEST,
     "messages[0].content must not contain", NULL},
    {"{\"messages\":[{\"role\":1,\"content\":\"x\"}]}", 0, PROTO_BAD_REQUEST, "messages[0].role",
     NULL},
    /* tokens */
    {"{\"tokens\":[]}", 0, PROTO_BAD_REQUEST, "tokens must be a non-empty array", NULL},
    {"{\"tokens\":[-1]}", 0, PROTO_BAD_REQUEST, "tokens[0] must be", NULL},
    {"{\"tokens\":[1,2147483648]}", 0, PROTO_BAD_REQUEST, "tokens[1] must be", NULL},
    {"{\"tokens\":[1.5]}", 0, PROTO_BAD_REQUEST, "tokens[0]", NULL},
    {"{\"tokens\":[\"1\"]}", 0, PROTO_BAD_REQUEST, "tokens[0]", NULL},
    /* stop */
    {"{\"prompt\":\"x\",\"stop\":[\"\"]}", 0, PROTO_BAD_REQUEST, "stop[0] must be 1..256 bytes",
     NULL},
    {"{\"prompt\":\"x\",\"stop\":[" S17 "]}", 0, PROTO_BAD_REQUEST, "at most 16", NULL},
    {"{\"prompt\":\"x\",\"stop\":[\"a\",1]}", 0, PROTO_BAD_REQUEST, "stop[1] must be a string",
     NULL},
    {"{\"prompt\":\"x\",\"stop\":[\"" X64 X64 X64 X64 "y\"]}", 0, PROTO_BAD_REQUEST,
     "(got 257 bytes)", NULL},
    {"{\"prompt\":\"a\\u0000b\"}", 0, PROTO_BAD_REQUEST, "prompt must not contain", NULL},
    /* thinking */
    {"{\"prompt\":\"x\",\"thinking\":true}", 0, PROTO_BAD_REQUEST,
     "thinking is only allowed with messages", NULL},
    {"{\"tokens\":[1],\"thinking\":true}", 0, PROTO_BAD_REQUEST, "thinking", NULL},
    /* control lines */
    {"{\"cmd\":\"cancel\"}", 0, PROTO_BAD_REQUEST, "cancel needs an id", NULL},
    {"{\"cmd\":\"restart\"}", 0, PROTO_BAD_REQUEST, "unknown cmd \"restart\"", NULL},
    {"{\"cmd\":\"stats\",\"prompt\":\"x\"}", 0, PROTO_BAD_REQUEST,
     "field \"prompt\" is not allowed with \"cmd\"", NULL},
    {"{\"prompt\":\"x\",\"cmd\":\"stats\"}", 0, PROTO_BAD_REQUEST, "not allowed with \"cmd\"",
     NULL},
    {"{\"cmd\":\"stats\",\"bogus\":1}", 0, PROTO_BAD_REQUEST, "unknown field \"bogus\"", NULL},
    {"{\"cmd\":5}", 0, PROTO_BAD_REQUEST, "cmd must be a string", NULL},
    {"{\"cmd\":\"cancel\",\"id\":[1]}", 0, PROTO_BAD_REQUEST, "id must be", NULL},
    /* id of a wrong type: the answer falls back to "line-N" */
    {"{\"id\":{},\"prompt\":\"x\"}", 0, PROTO_BAD_REQUEST,
     "id must be a string or a number (got an object)", NULL},
    {"{\"id\":[],\"prompt\":\"x\"}", 0, PROTO_BAD_REQUEST, "(got an array)", NULL},
    {"{\"id\":true,\"prompt\":\"x\"}", 0, PROTO_BAD_REQUEST, "(got true)", NULL},
    {"{\"id\":null,\"prompt\":\"x\"}", 0, PROTO_BAD_REQUEST, "(got null)", NULL},
    /* a valid id is echoed on every error that follows it */
    {"{\"id\":\"r1\",\"prompt\":\"x\",\"top_k\":-1}", 0, PROTO_BAD_REQUEST, "top_k", "\"r1\""},
    {"{\"prompt\":\"x\",\"top_k\":-1,\"id\":17}", 0, PROTO_BAD_REQUEST, "top_k", "17"},
    /* duplicate keys: named; the id still found unless it is the duplicate */
    {"{\"id\":\"d\",\"prompt\":\"a\",\"prompt\":\"b\"}", 0, PROTO_BAD_REQUEST,
     "duplicate key \"prompt\"", "\"d\""},
    {"{\"id\":1,\"id\":2,\"prompt\":\"x\"}", 0, PROTO_BAD_REQUEST, "duplicate key \"id\"", NULL},
    {"{\"messages\":[{\"role\":\"user\",\"role\":\"user\",\"content\":\"x\"}]}", 0,
     PROTO_BAD_REQUEST, "duplicate key \"role\"", NULL},
};

/* Checks one case; returns 1 when it holds, else prints a FAIL line and returns 0. */
static int check_bad(int i, const bad_case *c) {
    proto_request req;
    proto_error err;
    size_t len = c->len ? c->len : strlen(c->line);
    char expect_id[64];
    (void)snprintf(expect_id, sizeof expect_id, "%s", c->id ? c->id : LINE_ID);
    int rc = proto_parse_line(c->line, len, LINE_NO, &req, &err);
    int ok = rc == -1 && err.code == c->code && strstr(err.message, c->needle) && err.id_json &&
             strcmp(err.id_json, expect_id) == 0 && req.prompt == NULL && req.id_json == NULL;
    if (!ok)
        test_fail("proto_bad_input_corpus",
                  "case %d (%.60s): rc %d code %s message \"%s\" id %s; "
                  "want %s with \"%s\" id %s",
                  i, c->line, rc, rc ? proto_code_name(err.code) : "-", rc ? err.message : "",
                  rc && err.id_json ? err.id_json : "-", proto_code_name(c->code), c->needle,
                  expect_id);
    if (rc == 0)
        proto_request_free(&req);
    else
        proto_error_free(&err);
    return ok;
}

/* A too-long line arrives truncated with its true length: too_long, "line-N" as id. */
static int check_too_long(void) {
    const char *cut = "{\"id\":\"x\",\"prompt\":\"aaaa";
    proto_request req;
    proto_error err;
    int rc = proto_parse_line(cut, (size_t)PROTO_MAX_LINE + 1, LINE_NO, &req, &err);
    int ok = rc == -1 && err.code == PROTO_TOO_LONG && strstr(err.message, "8 MiB") &&
             strcmp(err.id_json, LINE_ID) == 0;
    if (!ok) test_fail("proto_bad_input_corpus", "too_long case: rc %d code %d", rc, err.code);
    if (rc == 0)
        proto_request_free(&req);
    else
        proto_error_free(&err);
    return ok;
}

static void test_bad_corpus(void) {
    int n = (int)(sizeof bad_cases / sizeof bad_cases[0]), good = 0;
    for (int i = 0; i < n; i++)
        good += check_bad(i, &bad_cases[i]);
    good += check_too_long();
    n++;
    if (good == n)
        test_pass("proto_bad_input_corpus", "%d cases, each with its code, field and id", n);
    else
        test_fail("proto_bad_input_corpus", "%d of %d cases wrong", n - good, n);
}

/* ---- good lines --------------------------------------------------------------------------- */

static int parse_ok(const char *line, proto_request *req) {
    proto_error err;
    if (proto_parse_line(line, strlen(line), LINE_NO, req, &err) == 0) return 1;
    test_fail("proto_good_lines", "%.60s: %s %s", line, proto_code_name(err.code), err.message);
    proto_error_free(&err);
    return 0;
}

static int check_defaults(void) {
    proto_request r;
    if (!parse_ok("{\"prompt\":\"hi\"}", &r)) return 0;
    int ok = r.kind == PROTO_REQUEST && strcmp(r.id_json, LINE_ID) == 0 &&
             strcmp(r.prompt, "hi") == 0 && !r.messages && !r.tokens && r.max_tokens == 256 &&
             r.temperature == 0 && r.top_k == 0 && r.top_p == 1 && r.min_p == 0 && r.seed == 0 &&
             !r.thinking && r.n_stop == 0 && !r.stop && !r.ignore_eos && r.stream == 1 &&
             r.logprobs == 0 && !r.cancel_id_json;
    proto_request_free(&r);
    return ok;
}

static int check_all_fields(void) {
    proto_request r;
    if (!parse_ok("{\"id\":\"a\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                  "{\"role\":\"assistant\",\"content\":\"m\"},{\"role\":\"user\",\"content\":"
                  "\"u\\n\"},{\"role\":\"model\",\"content\":\"\"}],\"thinking\":true,"
                  "\"max_tokens\":1000000,\"temperature\":0.7,\"top_k\":40,\"top_p\":0.9,"
                  "\"min_p\":0.05,\"seed\":9223372036854775807,\"stop\":[\"\\n\\n\",\"END\"],"
                  "\"ignore_eos\":true,\"stream\":false,\"logprobs\":20}",
                  &r))
        return 0;
    int ok = strcmp(r.id_json, "\"a\"") == 0 && r.n_messages == 4 &&
             strcmp(r.messages[0].role, "system") == 0 &&
             strcmp(r.messages[1].role, "model") == 0 && strcmp(r.messages[1].content, "m") == 0 &&
             strcmp(r.messages[2].role, "user") == 0 && strcmp(r.messages[2].content, "u\n") == 0 &&
             strcmp(r.messages[3].role, "model") == 0 && r.thinking == 1 &&
             r.max_tokens == 1000000 && r.temperature == 0.7 && r.top_k == 40 && r.top_p == 0.9 &&
             r.min_p == 0.05 && r.seed == 9223372036854775807ull && r.n_stop == 2 &&
             strcmp(r.stop[0], "\n\n") == 0 && strcmp(r.stop[1], "END") == 0 && r.ignore_eos == 1 &&
             r.stream == 0 && r.logprobs == 20 && !r.prompt && !r.tokens;
    proto_request_free(&r);
    return ok;
}

static int check_tokens_and_ids(void) {
    proto_request r;
    int ok = 1;
    if (parse_ok("{\"id\":12,\"tokens\":[2,0,2147483647]}", &r)) {
        ok &= strcmp(r.id_json, "12") == 0 && r.n_tokens == 3 && r.tokens[0] == 2 &&
              r.tokens[1] == 0 && r.tokens[2] == 2147483647;
        proto_request_free(&r);
    } else
        ok = 0;
    static const char *const lines[][2] = {
        {"{\"id\":1.5,\"prompt\":\"\"}", "1.5"},
        {"{\"id\":-3,\"prompt\":\"x\"}", "-3"},
        {"{\"id\":\"12\",\"prompt\":\"x\"}", "\"12\""},
        {"{\"id\":\"\xc3\xa9\xf0\x9f\x98\x80\",\"prompt\":\"x\"}", "\"\xc3\xa9\xf0\x9f\x98\x80\""},
        {"{\"id\":\"a\\\"b\",\"prompt\":\"x\"}", "\"a\\\"b\""},
        {"  {\"prompt\":\"x\"}\r", LINE_ID},
        {"{\"prompt\":\"x\",\"thinking\":false}", LINE_ID},
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        if (!parse_ok(lines[i][0], &r)) {
            ok = 0;
            continue;
        }
        if (strcmp(r.id_json, lines[i][1]) != 0) {
            test_fail("proto_good_lines", "%s: id_json %s, want %s", lines[i][0], r.id_json,
                      lines[i][1]);
            ok = 0;
        }
        proto_request_free(&r);
    }
    return ok;
}

static int check_cmds(void) {
    proto_request r;
    int ok = 1;
    if (parse_ok("{\"cmd\":\"stats\"}", &r)) {
        ok &= r.kind == PROTO_STATS && strcmp(r.id_json, LINE_ID) == 0;
        proto_request_free(&r);
    } else
        ok = 0;
    if (parse_ok("{\"cmd\":\"cancel\",\"id\":\"a\"}", &r)) {
        ok &= r.kind == PROTO_CANCEL && strcmp(r.cancel_id_json, "\"a\"") == 0;
        proto_request_free(&r);
    } else
        ok = 0;
    if (parse_ok("{\"id\":5,\"cmd\":\"shutdown\"}", &r)) {
        ok &= r.kind == PROTO_SHUTDOWN && strcmp(r.id_json, "5") == 0;
        proto_request_free(&r);
    } else
        ok = 0;
    if (parse_ok("{\"cmd\":\"abort\"}", &r)) {
        ok &= r.kind == PROTO_ABORT;
        proto_request_free(&r);
    } else
        ok = 0;
    return ok;
}

/* A line of exactly PROTO_MAX_LINE bytes is still served; the text survives (UTF-8 too). */
static int check_max_line(void) {
    size_t n = PROTO_MAX_LINE;
    char *line = malloc(n);
    if (!line) return 0;
    memcpy(line, "{\"prompt\":\"\xf0\x9f\x98\x80", 15);
    memset(line + 15, 'a', n - 17);
    memcpy(line + n - 2, "\"}", 2);
    proto_request r;
    proto_error err;
    int rc = proto_parse_line(line, n, LINE_NO, &r, &err);
    int ok = rc == 0 && strlen(r.prompt) == n - 13 && memcmp(r.prompt, "\xf0\x9f\x98\x80", 4) == 0;
    if (rc == 0)
        proto_request_free(&r);
    else
        proto_error_free(&err);
    free(line);
    return ok;
}

static void test_good_lines(void) {
    int d = check_defaults(), a = check_all_fields(), t = check_tokens_and_ids(), c = check_cmds(),
        m = check_max_line();
    TEST_CHECK("proto_good_lines", d && a && t && c && m,
               "defaults %s, all fields %s, tokens and id echo %s, cmds %s, 8 MiB line %s",
               d ? "ok" : "WRONG", a ? "ok" : "WRONG", t ? "ok" : "WRONG", c ? "ok" : "WRONG",
               m ? "ok" : "WRONG");
}

/* The id of a line without one is "line-N", a string form a request may not take itself;
 * a cancel may name it. */
static void test_ids(void) {
    proto_request r;
    proto_error err;
    int own = 0, reserved = 0, cancel = 0, lookalike = 0;
    if (proto_parse_line("{\"tokens\":[2]}", 14, 3, &r, &err) == 0) {
        own = strcmp(r.id_json, "\"line-3\"") == 0;
        proto_request_free(&r);
    } else
        proto_error_free(&err);
    const char *taken = "{\"id\":\"line-3\",\"tokens\":[2]}";
    if (proto_parse_line(taken, strlen(taken), 9, &r, &err) == 0) {
        proto_request_free(&r);
    } else {
        reserved = err.code == PROTO_BAD_REQUEST && strstr(err.message, "reserved") &&
                   strcmp(err.id_json, "\"line-3\"") == 0;
        proto_error_free(&err);
    }
    const char *cl = "{\"cmd\":\"cancel\",\"id\":\"line-3\"}";
    if (proto_parse_line(cl, strlen(cl), 9, &r, &err) == 0) {
        cancel = r.kind == PROTO_CANCEL && strcmp(r.cancel_id_json, "\"line-3\"") == 0;
        proto_request_free(&r);
    } else
        proto_error_free(&err);
    /* only the exact form is reserved: "line-", "line-3a" and "Line-3" stay a client's */
    static const char *const free_ids[] = {"{\"id\":\"line-\",\"tokens\":[2]}",
                                           "{\"id\":\"line-3a\",\"tokens\":[2]}",
                                           "{\"id\":\"Line-3\",\"tokens\":[2]}"};
    lookalike = 1;
    for (size_t i = 0; i < sizeof free_ids / sizeof *free_ids; i++) {
        if (proto_parse_line(free_ids[i], strlen(free_ids[i]), 9, &r, &err) == 0)
            proto_request_free(&r);
        else {
            lookalike = 0;
            proto_error_free(&err);
        }
    }
    TEST_CHECK("proto_default_ids", own && reserved && cancel && lookalike,
               "no id: \"line-N\" %s; a request's \"line-3\" refused %s; cancel of \"line-3\" %s; "
               "look-alike ids accepted %s",
               own ? "ok" : "WRONG", reserved ? "ok" : "WRONG", cancel ? "ok" : "WRONG",
               lookalike ? "ok" : "WRONG");
}

/* ---- writers ------------------------------------------------------------------------------ */

typedef struct capture {
    char *buf;
    size_t len;
    FILE *f;
} capture;

/* The keys of object o, comma-joined, in the order they came on the line. */
static void key_order(const json_t *o, char *out, size_t cap) {
    const char *key;
    json_t *v;
    out[0] = '\0';
    json_object_foreach((json_t *)o, key, v) {
        size_t n = strlen(out);
        (void)snprintf(out + n, cap - n, "%s%s", n ? "," : "", key);
    }
}

/* Parses the last line written; checks it is one whole line. NULL when not. */
static json_t *last_line(capture *c, size_t *start) {
    fflush(c->f);
    const char *line = c->buf + *start;
    size_t n = c->len - *start;
    const char *nl = memchr(line, '\n', n);
    if (!nl || (size_t)(nl - line) != n - 1) return NULL; /* exactly one '\n', at the end */
    json_t *j = json_loadb(line, n - 1, JSON_ALLOW_NUL, NULL);
    *start = c->len;
    return j;
}

static int check_token_lines(capture *c, size_t *at) {
    int ok = proto_write_token(c->f, "\"a\"", 0, 818, "The", 3, NULL) == 0;
    json_t *j = last_line(c, at);
    char keys[256] = "";
    if (j) key_order(j, keys, sizeof keys);
    ok &= j && strcmp(keys, "id,event,index,token,text") == 0 &&
          strcmp(json_string_value(json_object_get(j, "id")), "a") == 0 &&
          json_integer_value(json_object_get(j, "token")) == 818 &&
          strcmp(json_string_value(json_object_get(j, "text")), "The") == 0;
    json_decref(j);
    /* text with NUL, emoji and a quote; an integer id; logprobs */
    const char text[] = "a\0\xf0\x9f\x98\x80\"\n";
    proto_logprob lp = {.chosen = -0.1f, .n = 2, .ids = {5, 9}, .lps = {-0.1f, -2.3025851f}};
    ok &= proto_write_token(c->f, "12", 3, 5, text, sizeof text - 1, &lp) == 0;
    j = last_line(c, at);
    const json_t *t = json_object_get(j, "text"), *l = json_object_get(j, "logprobs");
    const json_t *top = json_object_get(l, "top");
    if (j) key_order(j, keys, sizeof keys);
    ok &= j && strcmp(keys, "id,event,index,token,text,logprobs") == 0 &&
          json_is_integer(json_object_get(j, "id")) &&
          json_integer_value(json_object_get(j, "id")) == 12 &&
          json_string_length(t) == sizeof text - 1 &&
          memcmp(json_string_value(t), text, sizeof text - 1) == 0 &&
          (float)json_real_value(json_object_get(l, "chosen")) == -0.1f &&
          json_array_size(top) == 2 &&
          json_integer_value(json_object_get(json_array_get(top, 1), "id")) == 9 &&
          (float)json_real_value(json_object_get(json_array_get(top, 1), "logprob")) == -2.3025851f;
    json_decref(j);
    /* the shortest form of each float, not 17 digits of its binary value */
    ok &= strstr(c->buf, "\"chosen\":-0.1,") != NULL;
    /* invalid UTF-8 from a caller bug still gives a valid line (U+FFFD) */
    ok &= proto_write_token(c->f, "1", 0, 1, "x\xff", 2, NULL) == 0;
    j = last_line(c, at);
    ok &= j && strcmp(json_string_value(json_object_get(j, "text")), "x\xef\xbf\xbd") == 0;
    json_decref(j);
    return ok;
}

static int check_done_lines(capture *c, size_t *at) {
    proto_done d = {.text = "The sky\xe2\x80\xa6",
                    .text_len = 10,
                    .reasoning = "hm",
                    .reasoning_len = 2,
                    .finish_reason = "stop",
                    .prompt_tokens = 12,
                    .completion_tokens = 57,
                    .queue_ms = 0.12345,
                    .ttft_ms = 18.2,
                    .decode_ms_per_token = 2.1};
    size_t from = *at;
    int ok = proto_write_done(c->f, "\"a\"", &d) == 0;
    json_t *j = last_line(c, at);
    char keys[256] = "", sub[128] = "", tim[128] = "";
    if (j) {
        key_order(j, keys, sizeof keys);
        key_order(json_object_get(j, "usage"), sub, sizeof sub);
        key_order(json_object_get(j, "timing"), tim, sizeof tim);
    }
    ok &=
        j && strcmp(keys, "id,event,text,reasoning,finish_reason,usage,timing") == 0 &&
        strcmp(sub, "prompt_tokens,completion_tokens") == 0 &&
        strcmp(tim, "queue_ms,ttft_ms,decode_ms_per_token") == 0 &&
        strcmp(json_string_value(json_object_get(j, "text")), "The sky\xe2\x80\xa6") == 0 &&
        json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")) == 57;
    json_decref(j);
    ok &= strstr(c->buf + from, "\"timing\":{\"queue_ms\":0.123,\"ttft_ms\":18.2,"
                                "\"decode_ms_per_token\":2.1}}\n") != NULL;
    /* streamed: no text, no reasoning */
    proto_done s = {.finish_reason = "length", .prompt_tokens = 1, .completion_tokens = 2};
    ok &= proto_write_done(c->f, "3", &s) == 0;
    j = last_line(c, at);
    if (j) key_order(j, keys, sizeof keys);
    ok &= j && strcmp(keys, "id,event,finish_reason,usage,timing") == 0 &&
          strcmp(json_string_value(json_object_get(j, "finish_reason")), "length") == 0;
    json_decref(j);
    return ok;
}

static int check_error_lines(capture *c, size_t *at) {
    int ok = proto_write_error(c->f, "\"b\"", PROTO_BAD_REQUEST,
                               "max_tokens must be \xe2\x89\xa5 1 (got -3)") == 0;
    json_t *j = last_line(c, at);
    const json_t *e = json_object_get(j, "error");
    char keys[64] = "", sub[64] = "";
    if (j) {
        key_order(j, keys, sizeof keys);
        key_order(e, sub, sizeof sub);
    }
    ok &= j && strcmp(keys, "id,event,error") == 0 && strcmp(sub, "code,message") == 0 &&
          strcmp(json_string_value(json_object_get(e, "code")), "bad_request") == 0 &&
          strcmp(json_string_value(json_object_get(e, "message")),
                 "max_tokens must be \xe2\x89\xa5 1 (got -3)") == 0;
    json_decref(j);
    return ok;
}

/* The stats line, byte for byte: docs/protocol.md shows it, and scripts read it. */
static int check_stats_line(capture *c, size_t *at) {
    proto_stats st = {.queued = 0,
                      .running = 3,
                      .last_step_rows = 3,
                      .steps = 812,
                      .kv = {{60, 72, 76.04, 2}, {500, 512, 8.4, 1}},
                      .tokens_out = 2411,
                      .tokens_per_s = 380.21};
    int ok = proto_write_stats(c->f, &st) == 0;
    fflush(c->f);
    const char *want =
        "{\"event\":\"stats\",\"queued\":0,\"running\":3,\"last_step_rows\":3,\"steps\":812,"
        "\"kv_pages\":{\"local\":{\"free\":60,\"total\":72,\"mb\":76.0,\"elem_bytes\":2},"
        "\"global\":{\"free\":500,\"total\":512,\"mb\":8.4,\"elem_bytes\":1}},"
        "\"tokens_out\":2411,\"tokens_per_s\":380.2}\n";
    ok &= c->len - *at == strlen(want) && memcmp(c->buf + *at, want, strlen(want)) == 0;
    *at = c->len;
    return ok;
}

/* Every error the parser makes becomes a line that reads back with its id. */
static int check_parse_to_error_line(capture *c, size_t *at) {
    int ok = 1;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        proto_request r;
        proto_error err;
        const bad_case *b = &bad_cases[i];
        if (proto_parse_line(b->line, b->len ? b->len : strlen(b->line), LINE_NO, &r, &err) == 0) {
            proto_request_free(&r);
            continue;
        }
        ok &= proto_write_error(c->f, err.id_json, err.code, err.message) == 0;
        json_t *j = last_line(c, at);
        ok &= j != NULL && json_object_get(j, "id") != NULL;
        json_decref(j);
        proto_error_free(&err);
    }
    return ok;
}

static void test_writers(void) {
    capture c = {0};
    c.f = open_memstream(&c.buf, &c.len);
    if (!c.f) {
        test_fail("proto_writers", "open_memstream failed");
        return;
    }
    size_t at = 0;
    int t = check_token_lines(&c, &at), d = check_done_lines(&c, &at),
        e = check_error_lines(&c, &at) & check_stats_line(&c, &at),
        p = check_parse_to_error_line(&c, &at);
    fclose(c.f);
    size_t lines = 0;
    for (size_t i = 0; i < c.len; i++)
        lines += c.buf[i] == '\n';
    free(c.buf);
    FILE *ro = fopen("/dev/null", "r"); /* a stream that refuses writes */
    int w = ro && proto_write_error(ro, "1", PROTO_INTERNAL, "x") == -1;
    if (ro) fclose(ro);
    TEST_CHECK("proto_writers", t && d && e && p && w,
               "token %s, done %s, error/stats %s, every parse error as a line %s, write error %s; "
               "%zu lines read back",
               t ? "ok" : "WRONG", d ? "ok" : "WRONG", e ? "ok" : "WRONG", p ? "ok" : "WRONG",
               w ? "ok" : "WRONG", lines);
}

int main(void) {
    test_bad_corpus();
    test_good_lines();
    test_ids();
    test_writers();
    return harness_exit();
}
