/* runtime/proto/proto.c - see proto.h.
 *
 * Owns: turning one stdin line into a validated proto_request (jansson does the JSON; this
 * file does every field's type, range and the cross-field rules), and building each answer
 * line with jansson and writing it with one fwrite. Does not own: reading lines (the caller
 * counts them and truncates long ones), tokenising, the id-in-flight rule, max_context.
 *
 * Why the shape: validation walks the object's keys in the order they appear on the line
 * (jansson keeps insertion order), so the first bad field of a line is the one reported and
 * the same line always gets the same message. Answer lines are spliced as
 * {"id":<id_json>,<rest>} where <rest> is a jansson object dumped with JSON_EMBED: the id
 * keeps the exact text it had on the request line (a float id keeps all 17 digits, so jq's
 * == still matches), while the rest is printed with 15 significant digits so that rounded
 * timings and shortest-form fp32 logprobs print as "18.2" and "-2.3025851". Every message
 * that quotes user text is cut on a UTF-8 boundary, because an error line must be valid
 * UTF-8 too. */
#include "runtime/proto/proto.h"

#include <jansson.h>

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROTO_MAX_STOP 16
#define PROTO_MAX_STOP_BYTES 256
#define PROTO_MAX_MAX_TOKENS 1000000
#define PROTO_DEFAULT_MAX_TOKENS 256
#define PROTO_QUOTE_MAX 64 /* bytes of a user's key or value quoted in a message */
#define PROTO_LOAD_FLAGS (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL)
#define PROTO_DUMP_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_EMBED | JSON_REAL_PRECISION(15))

/* ---- UTF-8 ------------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (n bytes available), or 0 when it is invalid:
 * overlong forms, surrogates and code points above U+10FFFF are refused, as jansson does. */
static size_t proto_utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
    if (len == 0 || c > 0xf4 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (c == 0xe0 && s[1] < 0xa0) return 0;  /* overlong 3-byte */
    if (c == 0xed && s[1] >= 0xa0) return 0; /* UTF-16 surrogate */
    if (c == 0xf0 && s[1] < 0x90) return 0;  /* overlong 4-byte */
    if (c == 0xf4 && s[1] >= 0x90) return 0; /* above U+10FFFF */
    return len;
}

/* Length of the longest prefix of s[0..n) that is whole, valid UTF-8. */
static size_t proto_utf8_prefix(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = proto_utf8_seq((const unsigned char *)s + i, n - i);
        if (k == 0) break;
        i += k;
    }
    return i;
}

/* A JSON string of s[0..n); invalid UTF-8 (which the protocol never sends, but a caller bug
 * might) becomes U+FFFD per bad byte rather than losing the whole line. NULL when out of
 * memory. */
static json_t *proto_json_text(const char *s, size_t n) {
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j || !s) return j;
    char *fixed = malloc(n * 3 + 1);
    if (!fixed) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = proto_utf8_seq((const unsigned char *)s + i, n - i);
        if (k == 0) { /* U+FFFD, the replacement character */
            fixed[o++] = (char)0xef;
            fixed[o++] = (char)0xbf;
            fixed[o++] = (char)0xbd;
            i++;
        } else {
            memcpy(fixed + o, s + i, k);
            o += k;
            i += k;
        }
    }
    j = json_stringn(fixed, o);
    free(fixed);
    return j;
}

/* A malloc'ed copy of s, or NULL when out of memory. */
static char *proto_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *copy = malloc(n);
    if (copy) memcpy(copy, s, n);
    return copy;
}

/* ---- errors ----------------------------------------------------------------------------- */

static const char *const proto_code_names[] = {"ok", "bad_json", "bad_request", "too_long",
                                               "internal"};

const char *proto_code_name(enum proto_code code) {
    if ((unsigned)code > PROTO_INTERNAL) return "internal";
    return proto_code_names[code];
}

__attribute__((format(printf, 3, 4))) static int proto_fail(proto_error *err, enum proto_code code,
                                                            const char *fmt, ...) {
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    if (n < 0) err->message[0] = '\0';
    /* vsnprintf may cut a multi-byte character: keep the message valid UTF-8 */
    err->message[proto_utf8_prefix(err->message, strlen(err->message))] = '\0';
    return -1;
}

/* Copies user text for quoting into a message: at most PROTO_QUOTE_MAX bytes, whole UTF-8
 * characters only, "..." appended when cut. */
static void proto_quote(char *out, size_t cap, const char *s, size_t n) {
    size_t keep = n > PROTO_QUOTE_MAX ? PROTO_QUOTE_MAX : n;
    keep = proto_utf8_prefix(s, keep);
    if (keep + 4 > cap) keep = proto_utf8_prefix(s, cap > 4 ? cap - 4 : 0);
    memcpy(out, s, keep);
    (void)snprintf(out + keep, cap - keep, "%s", keep < n ? "..." : "");
}

/* "a string", "an array", or the number itself: what a message says it got. */
static void proto_describe(const json_t *v, char *out, size_t cap) {
    if (!v) { /* a field read from an absent key */
        (void)snprintf(out, cap, "nothing");
        return;
    }
    switch (json_typeof(v)) {
    case JSON_INTEGER:
        (void)snprintf(out, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return;
    case JSON_REAL:
        (void)snprintf(out, cap, "%.15g", json_real_value(v));
        return;
    case JSON_STRING:
        (void)snprintf(out, cap, "a string");
        return;
    case JSON_ARRAY:
        (void)snprintf(out, cap, "an array");
        return;
    case JSON_OBJECT:
        (void)snprintf(out, cap, "an object");
        return;
    case JSON_TRUE:
        (void)snprintf(out, cap, "true");
        return;
    case JSON_FALSE:
        (void)snprintf(out, cap, "false");
        return;
    case JSON_NULL:
        (void)snprintf(out, cap, "null");
        return;
    }
    (void)snprintf(out, cap, "something else");
}

static int proto_fail_value(proto_error *err, const char *field, const char *expect,
                            const json_t *got) {
    char what[64];
    proto_describe(got, what, sizeof what);
    return proto_fail(err, PROTO_BAD_REQUEST, "%s must be %s (got %s)", field, expect, what);
}

/* ---- field readers ---------------------------------------------------------------------- */

static int proto_get_int(const json_t *v, const char *field, json_int_t lo, json_int_t hi,
                         const char *expect, json_int_t *out, proto_error *err) {
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return proto_fail_value(err, field, expect, v);
    *out = json_integer_value(v);
    return 0;
}

/* A number (integer or real) in lo..hi; lo excluded when lo_open. */
static int proto_get_num(const json_t *v, const char *field, double lo, int lo_open, double hi,
                         const char *expect, double *out, proto_error *err) {
    if (!json_is_number(v)) return proto_fail_value(err, field, expect, v);
    double x = json_number_value(v);
    if (!(x <= hi) || x < lo || (lo_open && x <= lo))
        return proto_fail_value(err, field, expect, v);
    *out = x;
    return 0;
}

static int proto_get_bool(const json_t *v, const char *field, int *out, proto_error *err) {
    if (!json_is_boolean(v)) return proto_fail_value(err, field, "true or false", v);
    *out = json_is_true(v);
    return 0;
}

/* A copy of a JSON string that may not hold NUL (the request keeps C strings). */
static int proto_get_text(const json_t *v, const char *field, char **out, proto_error *err) {
    if (!json_is_string(v)) return proto_fail_value(err, field, "a string", v);
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (memchr(s, '\0', n))
        return proto_fail(err, PROTO_BAD_REQUEST, "%s must not contain \\u0000", field);
    char *copy = malloc(n + 1);
    if (!copy) return proto_fail(err, PROTO_INTERNAL, "out of memory");
    memcpy(copy, s, n + 1);
    *out = copy;
    return 0;
}

/* ---- request fields --------------------------------------------------------------------- */

static int proto_field_prompt(const json_t *v, proto_request *r, proto_error *err) {
    return proto_get_text(v, "prompt", &r->prompt, err);
}

static int proto_read_message(const json_t *m, int i, proto_message *out, proto_error *err) {
    char field[64];
    (void)snprintf(field, sizeof field, "messages[%d]", i);
    if (!json_is_object(m)) return proto_fail_value(err, field, "an object {role, content}", m);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)m, key, val) {
        if (strcmp(key, "role") != 0 && strcmp(key, "content") != 0) {
            char q[PROTO_QUOTE_MAX + 4];
            proto_quote(q, sizeof q, key, strlen(key));
            return proto_fail(err, PROTO_BAD_REQUEST,
                              "%s has unknown field \"%s\" (only role and content)", field, q);
        }
    }
    const json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
    if (!role || !content)
        return proto_fail(err, PROTO_BAD_REQUEST, "%s needs both role and content", field);
    static const char *const roles[] = {"system", "user", "model", "assistant"};
    const char *rs = json_is_string(role) ? json_string_value(role) : "";
    size_t ri = 0;
    while (ri < 4 && !(strlen(rs) == json_string_length(role) && strcmp(rs, roles[ri]) == 0))
        ri++;
    if (!json_is_string(role) || ri == 4) {
        char what[PROTO_QUOTE_MAX + 8] = "a non-string";
        if (json_is_string(role)) proto_quote(what, sizeof what, rs, json_string_length(role));
        return proto_fail(err, PROTO_BAD_REQUEST,
                          "%s.role must be system, user, model or assistant (got \"%s\")", field,
                          what);
    }
    (void)snprintf(field, sizeof field, "messages[%d].content", i);
    if (proto_get_text(content, field, &out->content, err)) return -1;
    const char *stored = ri == 3 ? "model" : roles[ri];
    out->role = proto_strdup(stored);
    if (!out->role) return proto_fail(err, PROTO_INTERNAL, "out of memory");
    return 0;
}

static int proto_field_messages(const json_t *v, proto_request *r, proto_error *err) {
    if (!json_is_array(v) || json_array_size(v) == 0)
        return proto_fail_value(err, "messages", "a non-empty array of {role, content}", v);
    size_t n = json_array_size(v);
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages) return proto_fail(err, PROTO_INTERNAL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        r->n_messages = (int)i + 1; /* counted first so proto_request_free sees partial ones */
        if (proto_read_message(json_array_get(v, i), (int)i, &r->messages[i], err)) return -1;
    }
    return 0;
}

static int proto_field_tokens(const json_t *v, proto_request *r, proto_error *err) {
    if (!json_is_array(v) || json_array_size(v) == 0)
        return proto_fail_value(err, "tokens", "a non-empty array of token ids", v);
    size_t n = json_array_size(v);
    r->tokens = malloc(n * sizeof *r->tokens);
    if (!r->tokens) return proto_fail(err, PROTO_INTERNAL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char field[48];
        json_int_t t = 0;
        (void)snprintf(field, sizeof field, "tokens[%zu]", i);
        if (proto_get_int(json_array_get(v, i), field, 0, INT32_MAX, "an integer in 0..2147483647",
                          &t, err))
            return -1;
        r->tokens[i] = (int32_t)t;
    }
    r->n_tokens = (int)n;
    return 0;
}

static int proto_field_stop(const json_t *v, proto_request *r, proto_error *err) {
    if (!json_is_array(v)) return proto_fail_value(err, "stop", "an array of strings", v);
    size_t n = json_array_size(v);
    if (n > PROTO_MAX_STOP)
        return proto_fail(err, PROTO_BAD_REQUEST, "stop has %zu strings (at most %d)", n,
                          PROTO_MAX_STOP);
    if (n == 0) return 0;
    r->stop = calloc(n, sizeof *r->stop);
    if (!r->stop) return proto_fail(err, PROTO_INTERNAL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_array_get(v, i);
        char field[32];
        (void)snprintf(field, sizeof field, "stop[%zu]", i);
        r->n_stop = (int)i + 1;
        if (proto_get_text(s, field, &r->stop[i], err)) return -1;
        size_t len = json_string_length(s);
        if (len == 0 || len > PROTO_MAX_STOP_BYTES)
            return proto_fail(err, PROTO_BAD_REQUEST, "%s must be 1..%d bytes long (got %zu bytes)",
                              field, PROTO_MAX_STOP_BYTES, len);
    }
    return 0;
}

static int proto_field_max_tokens(const json_t *v, proto_request *r, proto_error *err) {
    json_int_t x = 0;
    if (proto_get_int(v, "max_tokens", 1, PROTO_MAX_MAX_TOKENS, "an integer in 1..1000000", &x,
                      err))
        return -1;
    r->max_tokens = (int)x;
    return 0;
}

static int proto_field_temperature(const json_t *v, proto_request *r, proto_error *err) {
    return proto_get_num(v, "temperature", 0, 0, 100, "a number in 0..100", &r->temperature, err);
}

static int proto_field_top_k(const json_t *v, proto_request *r, proto_error *err) {
    json_int_t x = 0;
    if (proto_get_int(v, "top_k", 0, INT_MAX, "an integer in 0..2147483647", &x, err)) return -1;
    r->top_k = (int)x;
    return 0;
}

static int proto_field_top_p(const json_t *v, proto_request *r, proto_error *err) {
    return proto_get_num(v, "top_p", 0, 1, 1, "a number in (0, 1]", &r->top_p, err);
}

static int proto_field_min_p(const json_t *v, proto_request *r, proto_error *err) {
    return proto_get_num(v, "min_p", 0, 0, 1, "a number in [0, 1]", &r->min_p, err);
}

static int proto_field_seed(const json_t *v, proto_request *r, proto_error *err) {
    json_int_t x = 0;
    if (proto_get_int(v, "seed", 0, LLONG_MAX, "an integer in 0..9223372036854775807", &x, err))
        return -1;
    r->seed = (uint64_t)x;
    return 0;
}

static int proto_field_thinking(const json_t *v, proto_request *r, proto_error *err) {
    return proto_get_bool(v, "thinking", &r->thinking, err);
}

static int proto_field_ignore_eos(const json_t *v, proto_request *r, proto_error *err) {
    return proto_get_bool(v, "ignore_eos", &r->ignore_eos, err);
}

static int proto_field_stream(const json_t *v, proto_request *r, proto_error *err) {
    return proto_get_bool(v, "stream", &r->stream, err);
}

static int proto_field_logprobs(const json_t *v, proto_request *r, proto_error *err) {
    json_int_t x = 0;
    if (proto_get_int(v, "logprobs", 0, PROTO_MAX_LOGPROBS, "an integer in 0..20", &x, err))
        return -1;
    r->logprobs = (int)x;
    return 0;
}

/* id was read before the walk; the table lists it so it is not an unknown field. */
static int proto_field_id(const json_t *v, proto_request *r, proto_error *err) {
    (void)v, (void)r, (void)err;
    return 0;
}

typedef int (*proto_field_fn)(const json_t *v, proto_request *r, proto_error *err);

static const struct proto_field {
    const char *name;
    proto_field_fn read;
} proto_fields[] = {
    {"id", proto_field_id},
    {"prompt", proto_field_prompt},
    {"messages", proto_field_messages},
    {"tokens", proto_field_tokens},
    {"max_tokens", proto_field_max_tokens},
    {"temperature", proto_field_temperature},
    {"top_k", proto_field_top_k},
    {"top_p", proto_field_top_p},
    {"min_p", proto_field_min_p},
    {"seed", proto_field_seed},
    {"thinking", proto_field_thinking},
    {"stop", proto_field_stop},
    {"ignore_eos", proto_field_ignore_eos},
    {"stream", proto_field_stream},
    {"logprobs", proto_field_logprobs},
};
#define PROTO_N_FIELDS (sizeof proto_fields / sizeof proto_fields[0])

static const struct proto_field *proto_find_field(const char *key) {
    for (size_t i = 0; i < PROTO_N_FIELDS; i++)
        if (strcmp(key, proto_fields[i].name) == 0) return &proto_fields[i];
    return NULL;
}

static int proto_fail_unknown(proto_error *err, const char *key) {
    char q[PROTO_QUOTE_MAX + 4];
    proto_quote(q, sizeof q, key, strlen(key));
    return proto_fail(err, PROTO_BAD_REQUEST, "unknown field \"%s\"", q);
}

/* ---- whole lines ------------------------------------------------------------------------ */

static int proto_read_request(const json_t *root, proto_request *r, proto_error *err) {
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)root, key, val) {
        const struct proto_field *f = proto_find_field(key);
        if (!f) return proto_fail_unknown(err, key);
        if (f->read(val, r, err)) return -1;
    }
    int has_p = json_object_get(root, "prompt") != NULL;
    int has_m = json_object_get(root, "messages") != NULL;
    int has_t = json_object_get(root, "tokens") != NULL;
    if (has_p + has_m + has_t == 0)
        return proto_fail(err, PROTO_BAD_REQUEST, "one of prompt, messages, tokens is required");
    if (has_p + has_m + has_t > 1)
        return proto_fail(err, PROTO_BAD_REQUEST,
                          "exactly one of prompt, messages, tokens is allowed (got%s%s%s)",
                          has_p ? " prompt" : "", has_m ? " messages" : "", has_t ? " tokens" : "");
    if (r->thinking && !has_m)
        return proto_fail(err, PROTO_BAD_REQUEST, "thinking is only allowed with messages");
    return 0;
}

static int proto_read_cmd(const json_t *root, proto_request *r, proto_error *err) {
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)root, key, val) {
        if (strcmp(key, "cmd") == 0 || strcmp(key, "id") == 0) continue;
        if (!proto_find_field(key)) return proto_fail_unknown(err, key);
        return proto_fail(err, PROTO_BAD_REQUEST, "field \"%s\" is not allowed with \"cmd\"", key);
    }
    const json_t *cmd = json_object_get(root, "cmd");
    if (!json_is_string(cmd)) return proto_fail_value(err, "cmd", "a string", cmd);
    const char *c = json_string_value(cmd);
    size_t n = json_string_length(cmd);
    if (strlen(c) == n && strcmp(c, "stats") == 0) {
        r->kind = PROTO_STATS;
    } else if (strlen(c) == n && strcmp(c, "shutdown") == 0) {
        r->kind = PROTO_SHUTDOWN;
    } else if (strlen(c) == n && strcmp(c, "abort") == 0) {
        r->kind = PROTO_ABORT;
    } else if (strlen(c) == n && strcmp(c, "cancel") == 0) {
        if (!json_object_get(root, "id") || !r->id_json)
            return proto_fail(err, PROTO_BAD_REQUEST, "cancel needs an id (the request to end)");
        r->kind = PROTO_CANCEL;
        r->cancel_id_json = proto_strdup(r->id_json);
        if (!r->cancel_id_json) return proto_fail(err, PROTO_INTERNAL, "out of memory");
    } else {
        char q[PROTO_QUOTE_MAX + 4];
        proto_quote(q, sizeof q, c, n);
        return proto_fail(err, PROTO_BAD_REQUEST,
                          "unknown cmd \"%s\" (expected stats, cancel, shutdown or abort)", q);
    }
    return 0;
}

/* The id as compact JSON (its text on the request line), or NULL when root has none or an
 * invalid one (*bad set for the latter). */
static char *proto_id_json(const json_t *root, int *bad) {
    *bad = 0;
    const json_t *id = json_is_object(root) ? json_object_get(root, "id") : NULL;
    if (!id) return NULL;
    if (!json_is_string(id) && !json_is_number(id)) {
        *bad = 1;
        return NULL;
    }
    return json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
}

/* The id of a line without one: the string "line-N" (N its line number), a form a client's id
 * may not take (proto_reserved_id), so the two can never be the same request. */
static char *proto_line_id(long line_no) {
    char buf[48];
    (void)snprintf(buf, sizeof buf, "\"line-%ld\"", line_no);
    return proto_strdup(buf);
}

/* 1 when a client's id is a string of the reserved form line-<digits>. */
static int proto_reserved_id(const json_t *id) {
    if (!json_is_string(id)) return 0;
    const char *s = json_string_value(id);
    if (strncmp(s, "line-", 5) != 0 || !s[5]) return 0;
    for (const char *p = s + 5; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

/* A duplicate key: name it, and still find the line's id by parsing again without the
 * duplicate check (unless "id" itself is the duplicate: then which one is ambiguous). */
static int proto_fail_duplicate(const char *line, size_t len, const json_error_t *je,
                                char **id_json, proto_error *err) {
    const char *near = strstr(je->text, "near '");
    char key[JSON_ERROR_TEXT_LENGTH] = "?";
    if (near) {
        (void)snprintf(key, sizeof key, "%s", near + 6);
        size_t k = strlen(key);
        if (k > 0 && key[k - 1] == '\'') key[k - 1] = '\0';
    }
    json_t *name = json_loads(key, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    int is_id = json_is_string(name) && strcmp(json_string_value(name), "id") == 0;
    json_decref(name);
    if (!is_id) {
        json_t *root = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        int bad;
        *id_json = proto_id_json(root, &bad);
        json_decref(root);
    }
    return proto_fail(err, PROTO_BAD_REQUEST, "duplicate key %s", key);
}

/* The error for a line jansson refused. */
static int proto_fail_json(const char *line, size_t len, const json_error_t *je, char **id_json,
                           proto_error *err) {
    enum json_error_code code = json_error_code(je);
    if (code == json_error_duplicate_key) return proto_fail_duplicate(line, len, je, id_json, err);
    if (code == json_error_numeric_overflow) /* valid JSON, but beyond what any field takes */
        return proto_fail(err, PROTO_BAD_REQUEST,
                          "number out of range at byte %d (integers must fit in 64 bits): %s",
                          je->position, je->text);
    if (code == json_error_out_of_memory)
        return proto_fail(err, PROTO_INTERNAL, "out of memory parsing the line");
    /* jansson reports a lone surrogate escape (\ud800) as "invalid Unicode '\uD800'" */
    if (code == json_error_invalid_utf8 || strncmp(je->text, "invalid Unicode", 15) == 0)
        return proto_fail(err, PROTO_BAD_JSON, "invalid UTF-8 at byte %d: %s", je->position,
                          je->text);
    return proto_fail(err, PROTO_BAD_JSON, "not JSON at byte %d: %s", je->position, je->text);
}

static int proto_is_blank(const char *line, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r' && line[i] != '\n') return 0;
    return 1;
}

static void proto_request_defaults(proto_request *req) {
    memset(req, 0, sizeof *req);
    req->kind = PROTO_REQUEST;
    req->max_tokens = PROTO_DEFAULT_MAX_TOKENS;
    req->top_p = 1;
    req->stream = 1;
}

/* Parses a non-blank line of at most PROTO_MAX_LINE bytes; *id_json gets the id found. */
static int proto_parse_json(const char *line, size_t len, char **id_json, proto_request *req,
                            proto_error *err) {
    json_error_t je;
    json_t *root = json_loadb(line, len, PROTO_LOAD_FLAGS, &je);
    if (!root) return proto_fail_json(line, len, &je, id_json, err);
    int rc = -1, bad_id;
    *id_json = proto_id_json(root, &bad_id);
    if (!json_is_object(root)) {
        char what[64];
        proto_describe(root, what, sizeof what);
        (void)proto_fail(err, PROTO_BAD_JSON, "a line must be a JSON object (got %s)", what);
    } else if (bad_id) {
        (void)proto_fail_value(err, "id", "a string or a number", json_object_get(root, "id"));
    } else if (json_object_get(root, "id") && !*id_json) {
        (void)proto_fail(err, PROTO_INTERNAL, "out of memory");
    } else if (!json_object_get(root, "cmd") && proto_reserved_id(json_object_get(root, "id"))) {
        /* a cancel may name "line-N"; a request may not take it */
        (void)proto_fail(err, PROTO_BAD_REQUEST,
                         "id: the form \"line-<number>\" is reserved for lines without an id");
    } else {
        req->id_json = *id_json; /* borrowed until success, so the cmd reader can copy it */
        rc = json_object_get(root, "cmd") ? proto_read_cmd(root, req, err)
                                          : proto_read_request(root, req, err);
        req->id_json = NULL;
    }
    json_decref(root);
    return rc;
}

int proto_parse_line(const char *line, size_t len, long line_no, proto_request *req,
                     proto_error *err) {
    proto_request_defaults(req);
    memset(err, 0, sizeof *err);
    char *id_json = NULL;
    int rc;
    if (len > PROTO_MAX_LINE)
        rc = proto_fail(err, PROTO_TOO_LONG, "line longer than 8 MiB (%u bytes)",
                        (unsigned)PROTO_MAX_LINE);
    else if (!line && len > 0)
        rc = proto_fail(err, PROTO_INTERNAL, "no line buffer");
    else if (!line || proto_is_blank(line, len))
        rc = proto_fail(err, PROTO_BAD_REQUEST, "empty line");
    else
        rc = proto_parse_json(line, len, &id_json, req, err);
    if (rc == 0 && !id_json) id_json = proto_line_id(line_no);
    if (rc == 0 && !id_json) rc = proto_fail(err, PROTO_INTERNAL, "out of memory");
    if (rc == 0) {
        req->id_json = id_json;
        return 0;
    }
    proto_request_free(req);
    proto_request_defaults(req);
    err->id_json = id_json ? id_json : proto_line_id(line_no);
    return -1;
}

void proto_request_free(proto_request *req) {
    if (!req) return;
    free(req->id_json);
    free(req->prompt);
    for (int i = 0; req->messages && i < req->n_messages; i++) {
        free(req->messages[i].role);
        free(req->messages[i].content);
    }
    free(req->messages);
    free(req->tokens);
    for (int i = 0; req->stop && i < req->n_stop; i++)
        free(req->stop[i]);
    free(req->stop);
    free(req->cancel_id_json);
    memset(req, 0, sizeof *req);
}

void proto_error_free(proto_error *err) {
    if (!err) return;
    free(err->id_json);
    err->id_json = NULL;
}

/* ---- writers ---------------------------------------------------------------------------- */

/* Writes {"id":<id_json>,<rest>}\n with one fwrite and flushes; takes rest's reference. */
static int proto_emit(FILE *f, const char *id_json, json_t *rest) {
    if (!rest) return -1;
    char *body = json_dumps(rest, PROTO_DUMP_FLAGS);
    json_decref(rest);
    if (!body) return -1;
    const char *id = id_json && *id_json ? id_json : "null";
    size_t cap = strlen(id) + strlen(body) + 16;
    char *line = malloc(cap);
    int rc = -1;
    if (line) {
        /* one buffer, one fwrite: concurrent answers never interleave inside a line */
        int n = snprintf(line, cap, "{\"id\":%s%s%s}\n", id, *body ? "," : "", body);
        rc = n > 0 && fwrite(line, 1, (size_t)n, f) == (size_t)n && fflush(f) == 0 ? 0 : -1;
    }
    free(line);
    free(body);
    return rc;
}

/* Sets key to a new value and reports whether both exist (json_object_set_new frees the
 * value on failure, so a NULL value only makes the answer fail). */
static int proto_set(json_t *obj, const char *key, json_t *value) {
    if (!obj) {
        json_decref(value);
        return -1;
    }
    return value && json_object_set_new(obj, key, value) == 0 ? 0 : -1;
}

/* The double whose shortest decimal form reads back as x: "-2.3025851", not the 15 digits
 * of the float's exact binary value. Non-finite values become null. */
static json_t *proto_json_float(float x) {
    if (!isfinite(x)) return json_null();
    char buf[32] = "0";
    for (int prec = 1; prec <= 9; prec++) {
        (void)snprintf(buf, sizeof buf, "%.*g", prec, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    return json_real(strtod(buf, NULL));
}

/* A timing in ms, rounded to 3 decimals (microseconds); non-finite becomes null. */
static json_t *proto_json_ms(double ms) {
    if (!isfinite(ms)) return json_null();
    return json_real(round(ms * 1000.0) / 1000.0);
}

static json_t *proto_json_logprobs(const proto_logprob *lp) {
    json_t *o = json_object(), *top = json_array();
    int bad = proto_set(o, "chosen", proto_json_float(lp->chosen));
    int n = lp->n < 0 ? 0 : lp->n > PROTO_MAX_LOGPROBS ? PROTO_MAX_LOGPROBS : lp->n;
    for (int i = 0; i < n && top; i++) {
        json_t *e = json_object();
        bad |= proto_set(e, "id", json_integer(lp->ids[i]));
        bad |= proto_set(e, "logprob", proto_json_float(lp->lps[i]));
        bad |= !e || json_array_append_new(top, e) != 0;
    }
    bad |= proto_set(o, "top", top);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int proto_write_token(FILE *f, const char *id_json, int index, int32_t token, const char *text,
                      size_t text_len, const proto_logprob *lp) {
    json_t *o = json_object();
    int bad = proto_set(o, "event", json_string("token"));
    bad |= proto_set(o, "index", json_integer(index));
    bad |= proto_set(o, "token", json_integer(token));
    bad |= proto_set(o, "text", proto_json_text(text, text_len));
    if (lp) bad |= proto_set(o, "logprobs", proto_json_logprobs(lp));
    if (bad) {
        json_decref(o);
        return -1;
    }
    return proto_emit(f, id_json, o);
}

int proto_write_done(FILE *f, const char *id_json, const proto_done *d) {
    json_t *o = json_object(), *usage = json_object(), *timing = json_object();
    int bad = proto_set(o, "event", json_string("done"));
    if (d->text) bad |= proto_set(o, "text", proto_json_text(d->text, d->text_len));
    if (d->reasoning)
        bad |= proto_set(o, "reasoning", proto_json_text(d->reasoning, d->reasoning_len));
    bad |= proto_set(o, "finish_reason",
                     proto_json_text(d->finish_reason ? d->finish_reason : "stop",
                                     d->finish_reason ? strlen(d->finish_reason) : 4));
    bad |= proto_set(usage, "prompt_tokens", json_integer(d->prompt_tokens));
    bad |= proto_set(usage, "completion_tokens", json_integer(d->completion_tokens));
    bad |= proto_set(timing, "queue_ms", proto_json_ms(d->queue_ms));
    bad |= proto_set(timing, "ttft_ms", proto_json_ms(d->ttft_ms));
    bad |= proto_set(timing, "decode_ms_per_token", proto_json_ms(d->decode_ms_per_token));
    bad |= proto_set(o, "usage", usage);
    bad |= proto_set(o, "timing", timing);
    if (bad) {
        json_decref(o);
        return -1;
    }
    return proto_emit(f, id_json, o);
}

int proto_write_error(FILE *f, const char *id_json, enum proto_code code, const char *message) {
    json_t *o = json_object(), *e = json_object();
    const char *msg = message ? message : "";
    int bad = proto_set(o, "event", json_string("error"));
    bad |= proto_set(e, "code", json_string(proto_code_name(code)));
    bad |= proto_set(e, "message", proto_json_text(msg, strlen(msg)));
    bad |= proto_set(o, "error", e);
    if (bad) {
        json_decref(o);
        return -1;
    }
    return proto_emit(f, id_json, o);
}

/* Built with printf, not jansson: the line holds only numbers, and one decimal for MB and
 * rates is what a reader wants (jansson would print every digit of the double). */
int proto_write_stats(FILE *f, const proto_stats *st) {
    char line[640];
    const proto_kv_family *l = &st->kv[0], *g = &st->kv[1];
    int n = snprintf(line, sizeof line,
                     "{\"event\":\"stats\",\"queued\":%d,\"running\":%d,\"last_step_rows\":%ld,"
                     "\"steps\":%ld,\"kv_pages\":{\"local\":{\"free\":%d,\"total\":%d,\"mb\":%.1f,"
                     "\"elem_bytes\":%d},\"global\":{\"free\":%d,\"total\":%d,\"mb\":%.1f,"
                     "\"elem_bytes\":%d}},\"tokens_out\":%ld,\"tokens_per_s\":%.1f}\n",
                     st->queued, st->running, st->last_step_rows, st->steps, l->free_pages,
                     l->total_pages, l->mb, l->elem_bytes, g->free_pages, g->total_pages, g->mb,
                     g->elem_bytes, st->tokens_out, st->tokens_per_s);
    if (n < 0 || (size_t)n >= sizeof line) return -1;
    return fwrite(line, 1, (size_t)n, f) == (size_t)n && fflush(f) == 0 ? 0 : -1;
}
