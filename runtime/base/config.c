/* runtime/base/config.c - see config.h.
 *
 * Owns: the key table, value validation, the inih callbacks, path resolution and the
 * cross-key checks. Does not own: what the values mean to the rest of the engine.
 *
 * Why a custom inih reader (ini_parse_stream) instead of ini_parse(): Debian's inih is built
 * without INI_HANDLER_LINENO, so the handler never learns its line; counting lines in our own
 * reader gives exact "file:line" errors. The reader also strips leading whitespace, because
 * inih otherwise reads any indented line as a continuation of the previous value (so
 * "  page_tokens = 16" under "local = fp8" would silently set local to "page_tokens = 16"),
 * and it refuses lines longer than inih's buffer, which inih would silently split in two. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* getline */
#endif
#include "runtime/base/config.h"

#include <ini.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define CFG_WHY_MAX 512
#define CFG_BUDGET_GB_MAX 1048576.0 /* a typo guard, far above any machine */

/* The keys with a setter of their own; every other key is a plain int in a range (CFG_INT) or
 * a 0/1 switch (CFG_FLAG), set through its field's offset in g4_config. */
enum cfg_key_id {
    CFG_INT,
    CFG_FLAG,
    CFG_MODEL_NAME,
    CFG_MODEL_PATH,
    CFG_MODEL_TOKENIZER,
    CFG_MODEL_WEIGHTS,
    CFG_KV_LOCAL,
    CFG_KV_PAGE_TOKENS,
    CFG_KV_BUDGET_GB,
    CFG_SERVE_ATTN_PAIR_TILES,
    CFG_LOG_LEVEL,
    CFG_DEBUG_BACKEND,
    CFG_DEBUG_GEMM,
    CFG_DEBUG_FAIL_STEP,
    CFG_DEBUG_NAN_STEP,
};

static const struct cfg_key {
    const char *section;
    const char *key;
    enum cfg_key_id id;
    size_t field; /* CFG_INT, CFG_FLAG: the int's offset in g4_config */
    long lo, hi;  /* CFG_INT: the accepted range */
} cfg_keys[] = {
/* the field's offset, and a compile error unless it is an int (the controlling expression of
 * _Generic is not evaluated); sec.name is a member designator, which parentheses would break */
// NOLINTBEGIN(bugprone-macro-parentheses)
#define CFG_INT_FIELD(sec, name)                                                                   \
    _Generic(((g4_config *)0)->sec.name, int : offsetof(g4_config, sec.name))
// NOLINTEND(bugprone-macro-parentheses)
#define CFG_SPECIAL(sec, name, id)                                                                 \
    { #sec, #name, id, 0, 0, 0 }
#define CFG_RANGE(sec, name, lo, hi)                                                               \
    { #sec, #name, CFG_INT, CFG_INT_FIELD(sec, name), lo, hi }
#define CFG_SWITCH(sec, name)                                                                      \
    { #sec, #name, CFG_FLAG, CFG_INT_FIELD(sec, name), 0, 1 }
    CFG_SPECIAL(model, name, CFG_MODEL_NAME),
    CFG_SPECIAL(model, path, CFG_MODEL_PATH),
    CFG_SPECIAL(model, tokenizer, CFG_MODEL_TOKENIZER),
    CFG_SPECIAL(model, weights, CFG_MODEL_WEIGHTS),
    CFG_SPECIAL(kv, local, CFG_KV_LOCAL),
    CFG_SPECIAL(kv, page_tokens, CFG_KV_PAGE_TOKENS),
    CFG_SPECIAL(kv, budget_gb, CFG_KV_BUDGET_GB),
    CFG_RANGE(serve, max_batch, 1, 1024),
    CFG_RANGE(serve, max_context, 16, 1048576),
    CFG_RANGE(serve, prefill_chunk, 1, 65536),
    CFG_RANGE(serve, step_tokens, 0, 65536 + 1024), /* 0: prefill_chunk + max_batch; the rest
                                                     * is checked in config_finish */
    CFG_RANGE(serve, max_queue, 1, 1000000),
    CFG_SWITCH(serve, cuda_graphs),
    CFG_SWITCH(serve, pdl),
    CFG_SWITCH(serve, fuse_projections),
    CFG_SWITCH(serve, attn_fold),
    CFG_SWITCH(serve, moe_bucket_in_up),
    CFG_RANGE(serve, moe_prefill_tiles, 0, 3), /* 0 off, 1 item tiles, 2 staged, 3 a ring */
    CFG_SWITCH(serve, moe_ring_zfill),         /* the ring's copies zero-fill padding */
    CFG_RANGE(serve, moe_half_tiles, 0, 2),    /* half-empty tiles take more outputs a block */
    CFG_RANGE(serve, moe_weights_a, 0, 2),     /* the ring's weights on A: 1 down, 2 up and down */
    CFG_RANGE(serve, row_chain, 0, 3), /* 0 off, 1 rows up to 3,072, 2 up to 6,144, 3 2 loaded */
    CFG_SWITCH(serve, moe_route_lanes),
    CFG_SWITCH(serve, wide_loads),
    CFG_SWITCH(serve, attn_mma),
    CFG_RANGE(serve, attn_query_tiles, 0, 65535), /* a launch's rows: the grid's z */
    CFG_SWITCH(serve, attn_fp8_frags),
    CFG_SWITCH(serve, attn_early_lookup),
    CFG_SWITCH(serve, attn_longest_first),
    CFG_SWITCH(serve, attn_stats_together),
    CFG_SWITCH(serve, attn_tile_fold),
    CFG_SWITCH(serve, attn_strided_tiles),
    CFG_SWITCH(serve, attn_flash),
    CFG_SPECIAL(serve, attn_pair_tiles, CFG_SERVE_ATTN_PAIR_TILES), /* 0 off, 2 the pair form */
    CFG_SWITCH(serve, attn_prep_rows),
    CFG_SWITCH(serve, attn_prompt),
    CFG_SWITCH(serve, prompt_gemm),
    CFG_SWITCH(serve, prompt_experts),
    CFG_RANGE(serve, prompt_tile, 16, 256),  /* kernels.h K_PROMPT_TILE_MIN..MAX */
    CFG_RANGE(serve, moe_branches, 0, 4096), /* the most rows of a step that branches; 0 off */
    CFG_RANGE(serve, expert_stream, 0, 128), /* the most items (rows x top_k) a call; 0 off */
    CFG_RANGE(serve, attn_splits_per_block, 0, 16), /* kernels/attn_common.cuh's ATTN_MAX_SPB */
    CFG_RANGE(serve, sample_threads, 0, 256),
    CFG_RANGE(serve, text_max_tokens, 1, 1000000), /* the protocol's max_tokens range */
    CFG_SPECIAL(log, level, CFG_LOG_LEVEL),
    CFG_SWITCH(debug, sync),
    CFG_SPECIAL(debug, backend, CFG_DEBUG_BACKEND),
    CFG_SPECIAL(debug, gemm, CFG_DEBUG_GEMM),
    CFG_SWITCH(debug, check_finite),
    CFG_SPECIAL(debug, fail_step, CFG_DEBUG_FAIL_STEP),
    CFG_SPECIAL(debug, nan_step, CFG_DEBUG_NAN_STEP),
#undef CFG_INT_FIELD
#undef CFG_SPECIAL
#undef CFG_RANGE
#undef CFG_SWITCH
};
#define CFG_N_KEYS (sizeof cfg_keys / sizeof cfg_keys[0])

static const char *const cfg_sections[] = {"model", "kv", "serve", "log", "debug"};
#define CFG_N_SECTIONS (sizeof cfg_sections / sizeof cfg_sections[0])

/* Index order matches the enums they parse into. */
static const char *const cfg_weights_names[] = {"file", "dummy"};
static const char *const cfg_kv_local_names[] = {"bf16", "fp8"};
static const char *const cfg_level_names[] = {"error", "warn", "info", "debug"};
static const char *const cfg_sync_names[] = {"0", "1"};
static const char *const cfg_backend_names[] = {"auto", "cpu", "gpu"};
static const char *const cfg_gemm_names[] = {"cublaslt", "plain", "mma", "auto"};

static char cfg_error[1024];

const char *config_last_error(void) { return cfg_error; }

__attribute__((format(printf, 1, 2))) static void cfg_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(cfg_error, sizeof cfg_error, fmt, ap);
    va_end(ap);
    log_msg(LOG_ERROR, "config", "%s", cfg_error);
}

void config_defaults(g4_config *c) {
    memset(c, 0, sizeof *c);
    c->model.weights = G4_WEIGHTS_FILE;
    c->kv.local = G4_KV_LOCAL_BF16;
    c->kv.page_tokens = 16;
    c->kv.budget_gb = 0.0;
    c->serve.max_batch = 16;
    c->serve.max_context = 32768;
    c->serve.prefill_chunk = 2048;
    c->serve.max_queue = 256;
    c->serve.cuda_graphs = 1; /* gpu:cuda_graphs_equal passed on the H200 (docs/testing.md) */
    c->serve.pdl = 1;
    c->serve.fuse_projections = 1;
    c->serve.attn_fold = 1;           /* measured on the H200 (docs/configuration.md) */
    c->serve.moe_bucket_in_up = 1;    /* measured faster (docs/configuration.md) */
    c->serve.moe_prefill_tiles = 3;   /* measured faster (docs/configuration.md) */
    c->serve.moe_ring_zfill = 1;      /* measured faster (docs/configuration.md) */
    c->serve.moe_half_tiles = 2;      /* measured faster (docs/configuration.md) */
    c->serve.moe_weights_a = 0;       /* off until measured */
    c->serve.row_chain = 3;           /* measured faster (docs/configuration.md) */
    c->serve.moe_route_lanes = 1;     /* measured faster (docs/configuration.md) */
    c->serve.wide_loads = 1;          /* measured faster (docs/configuration.md) */
    c->serve.attn_mma = 1;            /* measured faster (docs/configuration.md) */
    c->serve.attn_query_tiles = 64;   /* prefill-sized launches (docs/configuration.md) */
    c->serve.attn_fp8_frags = 1;      /* measured faster (docs/configuration.md) */
    c->serve.attn_early_lookup = 1;   /* measured faster (docs/configuration.md) */
    c->serve.attn_longest_first = 1;  /* measured faster (docs/configuration.md) */
    c->serve.attn_stats_together = 1; /* measured faster (docs/configuration.md) */
    c->serve.attn_tile_fold = 1;      /* measured faster (docs/configuration.md) */
    c->serve.attn_strided_tiles = 1;  /* measured faster (docs/configuration.md) */
    c->serve.attn_flash = 0;          /* not yet measured (docs/attention-design.md) */
    c->serve.attn_pair_tiles = 2;     /* measured faster (docs/configuration.md) */
    c->serve.attn_prep_rows = 1;      /* the same bits, fewer blocks (docs/configuration.md) */
    c->serve.attn_prompt = 1;         /* measured faster (docs/configuration.md) */
    c->serve.prompt_gemm = 1;         /* prompt rows at cuBLASLt's rate (docs/prompt-rows.md) */
    c->serve.prompt_experts = 0;      /* moves prompt rows' bits (docs/prompt-rows.md) */
    c->serve.prompt_tile = 96;        /* K_PROMPT_TILE_DEFAULT (docs/prompt-rows.md) */
    c->serve.moe_branches = 64;       /* measured faster (docs/decode-design.md) */
    c->serve.expert_stream = 8;       /* one-row steps, measured faster (docs/decode-design.md) */
    c->serve.attn_splits_per_block = 0;
    c->serve.sample_threads = 0;
    c->serve.text_max_tokens = 512;
    c->log.level = LOG_INFO;
    c->debug.sync = 0;
    c->debug.backend = G4_BACKEND_AUTO;
    c->debug.gemm = 3;
}

/* ---- the key table ---- */

static int cfg_section_known(const char *section, size_t len) {
    for (size_t i = 0; i < CFG_N_SECTIONS; i++) {
        if (strlen(cfg_sections[i]) == len && strncmp(cfg_sections[i], section, len) == 0) return 1;
    }
    return 0;
}

static const struct cfg_key *cfg_find_key(const char *section, const char *key) {
    for (size_t i = 0; i < CFG_N_KEYS; i++) {
        if (strcmp(cfg_keys[i].section, section) == 0 && strcmp(cfg_keys[i].key, key) == 0)
            return &cfg_keys[i];
    }
    return NULL;
}

/* Writes why a section/key pair is not in the table, listing what is accepted there. */
static void cfg_unknown(const char *section, char *why, size_t n) {
    size_t used;
    if (!cfg_section_known(section, strlen(section))) {
        used = (size_t)snprintf(why, n, "unknown section [%.64s] (known:", section);
        for (size_t i = 0; i < CFG_N_SECTIONS && used < n; i++)
            used += (size_t)snprintf(why + used, n - used, "%s %s", i ? "," : "", cfg_sections[i]);
    } else {
        const char *sep = "";
        used = (size_t)snprintf(why, n, "unknown key (known in [%s]:", section);
        for (size_t i = 0; i < CFG_N_KEYS && used < n; i++) {
            if (strcmp(cfg_keys[i].section, section) != 0) continue;
            used += (size_t)snprintf(why + used, n - used, "%s %s", sep, cfg_keys[i].key);
            sep = ",";
        }
    }
    if (used < n) (void)snprintf(why + used, n - used, ")");
}

/* ---- values ---- */

/* Strict base-10 integer in [lo, hi]: no blanks, no trailing junk, no overflow. */
static int cfg_int(const char *v, long lo, long hi, int *out, char *why, size_t n) {
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (v[0] == '\0' || isspace((unsigned char)v[0]) || *end != '\0') {
        (void)snprintf(why, n, "'%.64s' is not an integer (expected %ld..%ld)", v, lo, hi);
        return -1;
    }
    if (errno == ERANGE || x < lo || x > hi) {
        (void)snprintf(why, n, "%.64s is out of range %ld..%ld", v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* "auto" (stored as 0) or a finite number in (0, CFG_BUDGET_GB_MAX]. */
static int cfg_budget(const char *v, double *out, char *why, size_t n) {
    if (strcmp(v, "auto") == 0) {
        *out = 0.0;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (v[0] == '\0' || isspace((unsigned char)v[0]) || *end != '\0' || errno == ERANGE ||
        !isfinite(x) || x <= 0.0 || x > CFG_BUDGET_GB_MAX) {
        (void)snprintf(why, n, "'%.64s' is not 'auto' or a number in (0, %.0f]", v,
                       CFG_BUDGET_GB_MAX);
        return -1;
    }
    *out = x;
    return 0;
}

static int cfg_choice(const char *v, const char *const *names, int count, int *out, char *why,
                      size_t n) {
    for (int i = 0; i < count; i++) {
        if (strcmp(v, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    size_t used = (size_t)snprintf(why, n, "'%.64s' is not one of:", v);
    for (int i = 0; i < count && used < n; i++)
        used += (size_t)snprintf(why + used, n - used, "%s %s", i ? "," : "", names[i]);
    return -1;
}

static int cfg_string(char *dst, size_t cap, const char *v, char *why, size_t n) {
    size_t len = strlen(v);
    if (len >= cap) {
        (void)snprintf(why, n, "value is %zu bytes, longer than the %zu allowed", len, cap - 1);
        return -1;
    }
    memcpy(dst, v, len + 1);
    return 0;
}

/* A relative path is joined to base (the INI's folder, or "" for the current directory),
 * lexically: the target need not exist yet, and "" stays "" (= not given). */
static int cfg_path(char *dst, const char *v, const char *base, char *why, size_t n) {
    if (v[0] == '\0' || v[0] == '/' || base[0] == '\0')
        return cfg_string(dst, G4_CONFIG_PATH_MAX, v, why, n);
    char joined[G4_CONFIG_PATH_MAX];
    size_t blen = strlen(base);
    const char *sep = base[blen - 1] == '/' ? "" : "/";
    int len = snprintf(joined, sizeof joined, "%s%s%s", base, sep, v);
    if (len < 0 || (size_t)len >= sizeof joined) {
        (void)snprintf(why, n,
                       "'%.64s...' resolved against the INI's folder is longer than the %d "
                       "bytes allowed",
                       v, G4_CONFIG_PATH_MAX - 1);
        return -1;
    }
    memcpy(dst, joined, (size_t)len + 1);
    return 0;
}

/* Sets one key of *c from its text value; on -1, *c is untouched and why says what is wrong. */
static int cfg_apply(g4_config *c, const struct cfg_key *k, const char *v, const char *base,
                     char *why, size_t n) {
    int x = 0;
    switch (k->id) {
    case CFG_INT:
        return cfg_int(v, k->lo, k->hi, (int *)((char *)c + k->field), why, n);
    case CFG_FLAG:
        return cfg_choice(v, cfg_sync_names, 2, (int *)((char *)c + k->field), why, n);
    case CFG_MODEL_NAME:
        return cfg_string(c->model.name, sizeof c->model.name, v, why, n);
    case CFG_MODEL_PATH:
        return cfg_path(c->model.path, v, base, why, n);
    case CFG_MODEL_TOKENIZER:
        return cfg_path(c->model.tokenizer, v, base, why, n);
    case CFG_MODEL_WEIGHTS:
        if (cfg_choice(v, cfg_weights_names, 2, &x, why, n)) return -1;
        c->model.weights = (enum g4_weights_source)x;
        return 0;
    case CFG_KV_LOCAL:
        if (cfg_choice(v, cfg_kv_local_names, 2, &x, why, n)) return -1;
        c->kv.local = (enum g4_kv_local)x;
        return 0;
    case CFG_KV_PAGE_TOKENS:
        if (cfg_int(v, 1, 1024, &x, why, n)) return -1;
        if ((x & (x - 1)) != 0) {
            (void)snprintf(why, n, "%d is not a power of two in 1..1024", x);
            return -1;
        }
        c->kv.page_tokens = x;
        return 0;
    case CFG_KV_BUDGET_GB:
        return cfg_budget(v, &c->kv.budget_gb, why, n);
    case CFG_SERVE_ATTN_PAIR_TILES:
        /* not a range: form 1 was measured slower and taken out (docs/perf-notes.md), and a
         * file that still asks for it is refused rather than run at another form */
        if (cfg_int(v, 0, 2, &x, why, n) || x == 1) {
            (void)snprintf(why, n, "'%.64s' is not 0 or 2 (form 1 was taken out)", v);
            return -1;
        }
        c->serve.attn_pair_tiles = x;
        return 0;
    case CFG_LOG_LEVEL:
        if (cfg_choice(v, cfg_level_names, 4, &x, why, n)) return -1;
        c->log.level = (enum log_level)x;
        return 0;
    case CFG_DEBUG_BACKEND:
        if (cfg_choice(v, cfg_backend_names, 3, &x, why, n)) return -1;
        c->debug.backend = (enum g4_backend)x;
        return 0;
    case CFG_DEBUG_GEMM:
        return cfg_choice(v, cfg_gemm_names, 4, &c->debug.gemm, why, n);
    case CFG_DEBUG_FAIL_STEP:
        if (cfg_int(v, 0, 1000000000, &x, why, n)) return -1;
        c->debug.fail_step = x;
        return 0;
    case CFG_DEBUG_NAN_STEP:
        if (cfg_int(v, 0, 1000000000, &x, why, n)) return -1;
        c->debug.nan_step = x;
        return 0;
    }
    (void)snprintf(why, n, "key has no setter (a bug in config.c)");
    return -1;
}

/* ---- the INI file ---- */

typedef struct cfg_parse {
    g4_config cfg; /* working copy, committed only on success */
    const char *file;
    char base[G4_CONFIG_PATH_MAX]; /* folder of the INI file, "" when it has none */
    FILE *fp;
    char *line; /* getline buffer */
    size_t cap;
    int lineno;           /* of the line last handed to inih */
    int read_err;         /* errno of a failed read, 0 if none */
    int err_line;         /* of the first error we found, 0 if none */
    int seen[CFG_N_KEYS]; /* the line each key was set on, 0: not yet */
    char err[CFG_WHY_MAX + 256];
} cfg_parse;

__attribute__((format(printf, 2, 3))) static void cfg_parse_error(cfg_parse *ps, const char *fmt,
                                                                  ...) {
    if (ps->err_line) return; /* the first error explains the rest */
    ps->err_line = ps->lineno;
    int used = snprintf(ps->err, sizeof ps->err, "%s:%d: ", ps->file, ps->lineno);
    if (used < 0 || (size_t)used >= sizeof ps->err) return;
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(ps->err + used, sizeof ps->err - (size_t)used, fmt, ap);
    va_end(ap);
}

/* inih's fgets-style reader: exactly one file line per call, so our count is inih's count. */
static char *cfg_reader(char *str, int num, void *stream) {
    cfg_parse *ps = stream;
    errno = 0;
    ssize_t got = getline(&ps->line, &ps->cap, ps->fp);
    if (got < 0) {
        if (ferror(ps->fp)) ps->read_err = errno ? errno : EIO;
        return NULL;
    }
    ps->lineno++;
    const char *s = ps->line;
    if (strlen(s) != (size_t)got) {
        cfg_parse_error(ps, "line contains a NUL byte");
        s = "\n";
    }
    while (*s == ' ' || *s == '\t')
        s++; /* no indented line may become a continuation (see the file comment) */
    if (strlen(s) + 1 > (size_t)num) {
        cfg_parse_error(ps, "line is longer than %d bytes (inih's line limit)", num - 2);
        s = "\n";
    }
    if (s[0] == '[') {
        /* inih reports sections to nobody, so an unknown one is caught here, even if empty */
        const char *end = strchr(s, ']');
        if (end && !cfg_section_known(s + 1, (size_t)(end - s - 1))) {
            char why[CFG_WHY_MAX], name[64];
            (void)snprintf(name, sizeof name, "%.*s", (int)(end - s - 1), s + 1);
            cfg_unknown(name, why, sizeof why);
            cfg_parse_error(ps, "[%s]: %s", name, why);
        }
    }
    memcpy(str, s, strlen(s) + 1);
    return str;
}

static int cfg_handler(void *user, const char *section, const char *name, const char *value) {
    cfg_parse *ps = user;
    if (ps->err_line) return 0;
    if (!value) { /* only with INI_ALLOW_NO_VALUE builds */
        cfg_parse_error(ps, "%s.%s: expected key = value", section, name);
        return 0;
    }
    if (section[0] == '\0') {
        cfg_parse_error(ps, "%s: key outside any [section]", name);
        return 0;
    }
    char why[CFG_WHY_MAX];
    const struct cfg_key *k = cfg_find_key(section, name);
    if (!k) {
        cfg_unknown(section, why, sizeof why);
        cfg_parse_error(ps, "%s.%s: %s", section, name, why);
        return 0;
    }
    size_t ki = (size_t)(k - cfg_keys);
    if (ps->seen[ki]) { /* "last one wins" would hide a mistake in a long file */
        cfg_parse_error(ps, "%s.%s: set again (first on line %d); a key is set once per file",
                        section, name, ps->seen[ki]);
        return 0;
    }
    ps->seen[ki] = ps->lineno;
    if (cfg_apply(&ps->cfg, k, value, ps->base, why, sizeof why)) {
        cfg_parse_error(ps, "%s.%s: %s", section, name, why);
        return 0;
    }
    return 1;
}

/* The folder part of path ("" when it has none, "/" for a file at the root). */
static int cfg_dirname(char *dst, size_t cap, const char *path) {
    const char *slash = strrchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) : 0;
    if (slash && len == 0) len = 1;
    if (len >= cap) return -1;
    memcpy(dst, path, len);
    dst[len] = '\0';
    return 0;
}

int config_load(g4_config *c, const char *ini_path) {
    cfg_parse *ps = calloc(1, sizeof *ps); /* ~13 KB: heap, not stack */
    if (!ps) {
        cfg_fail("%s: out of memory", ini_path);
        return -1;
    }
    ps->cfg = *c;
    ps->file = ini_path;
    int rc = -1;
    if (cfg_dirname(ps->base, sizeof ps->base, ini_path)) {
        cfg_fail("%s: path longer than %d bytes", ini_path, G4_CONFIG_PATH_MAX - 1);
        goto out;
    }
    ps->fp = fopen(ini_path, "r");
    if (!ps->fp) {
        cfg_fail("%s: cannot open: %s", ini_path, strerror(errno));
        goto out;
    }
    int bad = ini_parse_stream(cfg_reader, ps, cfg_handler, ps);
    if (ps->read_err) {
        cfg_fail("%s:%d: read error: %s", ini_path, ps->lineno + 1, strerror(ps->read_err));
    } else if (bad > 0 && (ps->err_line == 0 || bad < ps->err_line)) {
        cfg_fail("%s:%d: syntax error: expected [section], key = value, or a ; comment", ini_path,
                 bad);
    } else if (ps->err_line) {
        cfg_fail("%s", ps->err);
    } else if (bad != 0) {
        cfg_fail("%s: inih failed (%d)", ini_path, bad);
    } else {
        *c = ps->cfg;
        rc = 0;
    }
out:
    if (ps->fp) fclose(ps->fp);
    free(ps->line);
    free(ps);
    return rc;
}

/* ---- the command line ---- */

static char *cfg_trim(char *s) {
    while (isspace((unsigned char)*s))
        s++;
    size_t len = strlen(s);
    while (len > 0 && isspace((unsigned char)s[len - 1]))
        s[--len] = '\0';
    return s;
}

int config_set(g4_config *c, const char *assignment) {
    char buf[G4_CONFIG_PATH_MAX + 256];
    char why[CFG_WHY_MAX];
    /* errors quote at most 200 bytes of the assignment, so the reason always fits the line */
    const char *more = strlen(assignment) > 200 ? "..." : "";
    if (strlen(assignment) >= sizeof buf) {
        cfg_fail("--set %.200s%s: longer than %zu bytes", assignment, more, sizeof buf - 1);
        return -1;
    }
    memcpy(buf, assignment, strlen(assignment) + 1);
    char *eq = strchr(buf, '=');
    char *dot = eq ? memchr(buf, '.', (size_t)(eq - buf)) : NULL;
    if (!dot) {
        cfg_fail("--set %.200s%s: expected section.key=value", assignment, more);
        return -1;
    }
    *eq = '\0';
    *dot = '\0';
    const char *section = cfg_trim(buf), *key = cfg_trim(dot + 1), *value = cfg_trim(eq + 1);
    const struct cfg_key *k = cfg_find_key(section, key);
    if (!k) {
        cfg_unknown(section, why, sizeof why);
        cfg_fail("--set %.200s%s: %s", assignment, more, why);
        return -1;
    }
    /* base "": a relative path from the command line means the current directory */
    if (cfg_apply(c, k, value, "", why, sizeof why)) {
        cfg_fail("--set %.200s%s: %s", assignment, more, why);
        return -1;
    }
    return 0;
}

/* ---- cross-key checks ---- */

int config_finish(g4_config *c) {
    if (c->model.weights == G4_WEIGHTS_DUMMY && c->model.name[0] == '\0') {
        cfg_fail("model.weights = dummy needs model.name (a compiled-in model) to know the "
                 "geometry");
        return -1;
    }
    if (c->model.weights == G4_WEIGHTS_FILE && c->model.path[0] == '\0') {
        cfg_fail("model.weights = file needs model.path (the checkpoint folder): set it in the "
                 "INI, with --model DIR, or use model.weights = dummy");
        return -1;
    }
    if (c->serve.prefill_chunk % c->kv.page_tokens != 0) {
        cfg_fail("serve.prefill_chunk = %d is not a multiple of kv.page_tokens = %d",
                 c->serve.prefill_chunk, c->kv.page_tokens);
        return -1;
    }
    if (c->serve.prefill_chunk > c->serve.max_context) {
        cfg_fail("serve.prefill_chunk = %d exceeds serve.max_context = %d", c->serve.prefill_chunk,
                 c->serve.max_context);
        return -1;
    }
    /* a step holds every running request's decode row and at least one prompt token */
    if (c->serve.step_tokens != 0 &&
        (c->serve.step_tokens <= c->serve.max_batch ||
         c->serve.step_tokens > c->serve.prefill_chunk + c->serve.max_batch)) {
        cfg_fail("serve.step_tokens = %d must be 0 (prefill_chunk + max_batch) or in %d..%d "
                 "(more than serve.max_batch = %d, at most prefill_chunk + max_batch)",
                 c->serve.step_tokens, c->serve.max_batch + 1,
                 c->serve.prefill_chunk + c->serve.max_batch, c->serve.max_batch);
        return -1;
    }
    if (c->model.tokenizer[0] == '\0' && c->model.path[0] != '\0') {
        int len = snprintf(c->model.tokenizer, sizeof c->model.tokenizer, "%s/tokenizer.json",
                           c->model.path);
        if (len < 0 || (size_t)len >= sizeof c->model.tokenizer) {
            c->model.tokenizer[0] = '\0';
            cfg_fail("model.tokenizer: default '<model.path>/tokenizer.json' is longer than %d "
                     "bytes; set model.tokenizer",
                     G4_CONFIG_PATH_MAX - 1);
            return -1;
        }
    }
    return 0;
}
