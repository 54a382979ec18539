/* tests/unit/test_config.c - runtime/config through its header.
 *
 * Owns: checks of defaults, a full INI, path resolution, every kind of bad value, --set and
 * the cross-key checks. INI files are written into a fresh mkdtemp folder and removed at the
 * end. The errors config logs to stderr are expected noise; the verdicts are the PASS/FAIL
 * lines on stdout. */
#include "runtime/base/config.h"
#include "tests/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char test_dir[256];
#define TEST_FILES_MAX 48
static char test_files[TEST_FILES_MAX][512];
static int test_n_files;

/* Writes text to <test_dir>/<name> and returns the path (static storage, one per file). */
static const char *write_ini(const char *name, const char *text) {
    if (test_n_files == TEST_FILES_MAX) /* more files than slots: reuse the last */
        test_n_files = TEST_FILES_MAX - 1;
    char *path = test_files[test_n_files++];
    (void)snprintf(path, sizeof test_files[0], "%s/%s", test_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        test_fail("setup", "cannot write %s", path);
        return path;
    }
    fputs(text, f);
    fclose(f);
    return path;
}

static int has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* Loads text as an INI from a fresh file and expects failure whose message holds all of
 * want1..want3 (NULL = skip) and leaves the config unchanged. */
static void expect_load_error(const char *gate, const char *text, const char *want1,
                              const char *want2, const char *want3) {
    char name[64];
    (void)snprintf(name, sizeof name, "bad%d.ini", test_n_files);
    const char *path = write_ini(name, text);
    g4_config c, before;
    config_defaults(&c);
    before = c;
    int rc = config_load(&c, path);
    const char *e = config_last_error();
    int ok = rc == -1 && has(e, path) && (!want1 || has(e, want1)) && (!want2 || has(e, want2)) &&
             (!want3 || has(e, want3)) && memcmp(&c, &before, sizeof c) == 0;
    TEST_CHECK(gate, ok, "rc=%d error='%s'", rc, e);
}

static void expect_set_error(const char *gate, const char *assignment, const char *want) {
    g4_config c, before;
    config_defaults(&c);
    before = c;
    int rc = config_set(&c, assignment);
    const char *e = config_last_error();
    char head[41]; /* long assignments are quoted shortened */
    (void)snprintf(head, sizeof head, "--set %s", assignment);
    int ok = rc == -1 && has(e, head) && has(e, want) && memcmp(&c, &before, sizeof c) == 0;
    TEST_CHECK(gate, ok, "rc=%d error='%s'", rc, e);
}

static void test_defaults(void) {
    g4_config c;
    config_defaults(&c);
    int ok =
        c.model.name[0] == 0 && c.model.path[0] == 0 && c.model.tokenizer[0] == 0 &&
        c.model.weights == G4_WEIGHTS_FILE && c.kv.local == G4_KV_LOCAL_BF16 &&
        c.kv.page_tokens == 16 && c.kv.budget_gb == 0.0 && c.serve.max_batch == 16 &&
        c.serve.max_context == 32768 && c.serve.prefill_chunk == 2048 && c.serve.max_queue == 256 &&
        c.serve.attn_splits_per_block == 0 && c.serve.pdl == 1 && c.serve.fuse_projections == 1 &&
        c.serve.attn_fold == 1 && c.serve.moe_bucket_in_up == 1 && c.serve.moe_prefill_tiles == 3 &&
        c.serve.moe_ring_zfill == 1 && c.serve.moe_half_tiles == 2 && c.serve.moe_weights_a == 0 &&
        c.serve.row_chain == 3 && c.serve.moe_route_lanes == 1 && c.serve.wide_loads == 1 &&
        c.serve.attn_mma == 1 && c.serve.attn_query_tiles == 64 && c.serve.attn_fp8_frags == 1 &&
        c.serve.attn_early_lookup == 1 && c.serve.attn_longest_first == 1 &&
        c.serve.attn_stats_together == 1 && c.serve.attn_tile_fold == 1 &&
        c.serve.attn_strided_tiles == 1 && c.serve.attn_flash == 0 && c.serve.prompt_gemm == 1 &&
        c.serve.attn_pair_tiles == 2 && c.serve.attn_prep_rows == 1 && c.serve.attn_prompt == 1 &&
        c.serve.prompt_experts == 0 && c.serve.prompt_tile == 96 && c.serve.moe_branches == 64 &&
        c.serve.expert_stream == 8 && c.serve.sample_threads == 0 && c.log.level == LOG_INFO &&
        c.debug.sync == 0 && c.debug.gemm == 3;
    TEST_CHECK("config.defaults", ok, "page_tokens=%d max_context=%d", c.kv.page_tokens,
               c.serve.max_context);
}

/* A key set twice in one file is refused, naming both lines; the config is left unchanged. */
static void test_duplicate_key(void) {
    const char *path = write_ini("dup.ini", "[kv]\nbudget_gb = 7\n[serve]\nmax_batch = 8\n"
                                            "[kv]\nbudget_gb = 12.5\n");
    g4_config c;
    config_defaults(&c);
    int rc = config_load(&c, path);
    const char *why = config_last_error();
    TEST_CHECK("config.duplicate_key",
               rc == -1 && strstr(why, "dup.ini:6") && strstr(why, "kv.budget_gb") &&
                   strstr(why, "first on line 2") && c.kv.budget_gb == 0,
               "rc %d: %s", rc, why);
}

static void test_full_ini(void) {
    /* every key, comments of both kinds, an indented key after a key (inih would glue it to
     * the previous value) and a relative path */
    const char *path = write_ini("full.ini", "; g4pipe test config\n"
                                             "# hash comment\n"
                                             "[model]\n"
                                             "name = gemma4-26b-a4b\n"
                                             "path = ../models/gemma   ; inline comment\n"
                                             "weights = dummy\n"
                                             "[kv]\n"
                                             "local = fp8\n"
                                             "    page_tokens = 32\n"
                                             "budget_gb = 12.5\n"
                                             "\n"
                                             "[serve]\n"
                                             "max_batch = 8\n"
                                             "max_context = 65536\n"
                                             "prefill_chunk = 1024\n"
                                             "max_queue = 1000000\n"
                                             "attn_splits_per_block = 4\n"
                                             "pdl = 0\n"
                                             "fuse_projections = 0\n"
                                             "attn_fold = 0\n"
                                             "moe_bucket_in_up = 0\n"
                                             "moe_prefill_tiles = 0\n"
                                             "moe_ring_zfill = 0\n"
                                             "moe_half_tiles = 1\n"
                                             "moe_weights_a = 2\n"
                                             "row_chain = 1\n"
                                             "moe_route_lanes = 0\n"
                                             "wide_loads = 0\n"
                                             "attn_mma = 0\n"
                                             "attn_query_tiles = 0\n"
                                             "attn_fp8_frags = 0\n"
                                             "attn_early_lookup = 0\n"
                                             "attn_longest_first = 0\n"
                                             "attn_stats_together = 0\n"
                                             "attn_tile_fold = 0\n"
                                             "attn_strided_tiles = 0\n"
                                             "attn_flash = 1\n"
                                             "attn_pair_tiles = 0\n"
                                             "attn_prep_rows = 0\n"
                                             "attn_prompt = 0\n"
                                             "prompt_gemm = 0\n"
                                             "prompt_experts = 1\n"
                                             "prompt_tile = 128\n"
                                             "moe_branches = 16\n"
                                             "expert_stream = 16\n"
                                             "sample_threads = 3\n"
                                             "[log]\n"
                                             "level = debug\n"
                                             "[debug]\n"
                                             "sync = 1\n"
                                             "gemm = plain\n");
    g4_config c;
    config_defaults(&c);
    int rc = config_load(&c, path);
    char want_path[600];
    (void)snprintf(want_path, sizeof want_path, "%s/../models/gemma", test_dir);
    int ok =
        rc == 0 && strcmp(c.model.name, "gemma4-26b-a4b") == 0 &&
        strcmp(c.model.path, want_path) == 0 && c.model.weights == G4_WEIGHTS_DUMMY &&
        c.kv.local == G4_KV_LOCAL_FP8 && c.kv.page_tokens == 32 && c.kv.budget_gb == 12.5 &&
        c.serve.max_batch == 8 && c.serve.max_context == 65536 && c.serve.prefill_chunk == 1024 &&
        c.serve.max_queue == 1000000 && c.serve.attn_splits_per_block == 4 && c.serve.pdl == 0 &&
        c.serve.fuse_projections == 0 && c.serve.attn_fold == 0 && c.serve.moe_bucket_in_up == 0 &&
        c.serve.moe_prefill_tiles == 0 && c.serve.moe_ring_zfill == 0 &&
        c.serve.moe_half_tiles == 1 && c.serve.moe_weights_a == 2 && c.serve.row_chain == 1 &&
        c.serve.moe_route_lanes == 0 && c.serve.wide_loads == 0 && c.serve.attn_mma == 0 &&
        c.serve.attn_query_tiles == 0 && c.serve.attn_fp8_frags == 0 &&
        c.serve.attn_early_lookup == 0 && c.serve.attn_longest_first == 0 &&
        c.serve.attn_stats_together == 0 && c.serve.attn_tile_fold == 0 &&
        c.serve.attn_strided_tiles == 0 && c.serve.attn_flash == 1 &&
        c.serve.attn_pair_tiles == 0 && c.serve.attn_prep_rows == 0 && c.serve.attn_prompt == 0 &&
        c.serve.prompt_gemm == 0 && c.serve.prompt_experts == 1 && c.serve.prompt_tile == 128 &&
        c.serve.moe_branches == 16 && c.serve.expert_stream == 16 && c.serve.sample_threads == 3 &&
        c.log.level == LOG_DEBUG && c.debug.sync == 1 && c.debug.gemm == 1;
    TEST_CHECK("config.full_ini", ok, "rc=%d path='%s' page_tokens=%d budget=%g error='%s'", rc,
               c.model.path, c.kv.page_tokens, c.kv.budget_gb, rc ? config_last_error() : "");

    rc = config_finish(&c);
    char want_tok[640];
    (void)snprintf(want_tok, sizeof want_tok, "%s/tokenizer.json", want_path);
    TEST_CHECK("config.tokenizer_default", rc == 0 && strcmp(c.model.tokenizer, want_tok) == 0,
               "rc=%d tokenizer='%s'", rc, c.model.tokenizer);
}

static void test_paths(void) {
    const char *path = write_ini("paths.ini", "[model]\n"
                                              "path = /abs/model\n"
                                              "tokenizer = tok/t.json\n");
    g4_config c;
    config_defaults(&c);
    int rc = config_load(&c, path);
    char want_tok[600];
    (void)snprintf(want_tok, sizeof want_tok, "%s/tok/t.json", test_dir);
    int ok = rc == 0 && strcmp(c.model.path, "/abs/model") == 0 &&
             strcmp(c.model.tokenizer, want_tok) == 0 && config_finish(&c) == 0 &&
             strcmp(c.model.tokenizer, want_tok) == 0;
    TEST_CHECK("config.paths_ini", ok, "path='%s' tokenizer='%s'", c.model.path, c.model.tokenizer);

    /* an INI named without a folder resolves against the current directory, i.e. unchanged */
    char cwd[512];
    int moved = getcwd(cwd, sizeof cwd) != NULL && chdir(test_dir) == 0;
    write_ini("here.ini", "[model]\npath = rel/m\n");
    config_defaults(&c);
    rc = moved ? config_load(&c, "here.ini") : -1;
    if (moved && chdir(cwd) != 0) test_fail("config.paths_bare_ini", "cannot chdir back");
    TEST_CHECK("config.paths_bare_ini", rc == 0 && strcmp(c.model.path, "rel/m") == 0,
               "rc=%d path='%s'", rc, c.model.path);

    config_defaults(&c);
    rc = config_set(&c, "model.path=some/dir");
    TEST_CHECK("config.paths_set_relative", rc == 0 && strcmp(c.model.path, "some/dir") == 0,
               "path='%s'", c.model.path);
}

static void test_load_errors(void) {
    expect_load_error("config.unknown_key", "[kv]\nlocal = bf16\npage_size = 16\n",
                      ":3:", "kv.page_size", "unknown key");
    expect_load_error("config.unknown_section", "[model]\nname = x\n\n[kvv]\n", ":4:", "[kvv]",
                      "unknown section");
    expect_load_error("config.key_outside_section", "local = fp8\n", ":1:", "local", "outside any");
    expect_load_error("config.syntax_error", "[kv]\nlocal = fp8\njust words\n", ":3:", "syntax",
                      NULL);
    expect_load_error("config.bad_int_junk", "[serve]\nmax_batch = 16x\n", ":2:", "serve.max_batch",
                      "not an integer");
    expect_load_error("config.bad_debug_gemm", "[debug]\ngemm = fast\n", ":2:", "debug.gemm",
                      "cublaslt, plain, mma");
    expect_load_error("config.bad_splits_per_block", "[serve]\nattn_splits_per_block = 17\n",
                      ":2:", "serve.attn_splits_per_block", "out of range 0..16");
    expect_load_error("config.bad_row_chain", "[serve]\nrow_chain = 4\n", ":2:", "serve.row_chain",
                      "out of range 0..3");
    expect_load_error("config.bad_pdl", "[serve]\npdl = yes\n", ":2:", "serve.pdl", NULL);
    expect_load_error("config.bad_int_overflow", "[serve]\nmax_queue = 99999999999999999999\n",
                      ":2:", "serve.max_queue", "out of range 1..1000000");
    expect_load_error("config.bad_int_range", "[serve]\nmax_context = 8\n",
                      ":2:", "serve.max_context", "16..1048576");
    expect_load_error("config.bad_int_empty", "[serve]\nprefill_chunk =\n",
                      ":2:", "serve.prefill_chunk", "not an integer");
    expect_load_error("config.bad_pow2", "[kv]\npage_tokens = 24\n", ":2:", "kv.page_tokens",
                      "power of two");
    expect_load_error("config.bad_enum", "[kv]\nlocal = fp16\n", ":2:", "kv.local", "bf16, fp8");
    expect_load_error("config.bad_weights", "[model]\nweights = random\n", ":2:", "model.weights",
                      "file, dummy");
    expect_load_error("config.bad_budget_negative", "[kv]\nbudget_gb = -1\n", ":2:", "kv.budget_gb",
                      "'auto'");
    expect_load_error("config.bad_budget_nan", "[kv]\nbudget_gb = nan\n", ":2:", "kv.budget_gb",
                      NULL);
    expect_load_error("config.bad_budget_junk", "[kv]\nbudget_gb = 12GB\n", ":2:", "kv.budget_gb",
                      NULL);
    expect_load_error("config.bad_level", "[log]\nlevel = verbose\n", ":2:", "log.level",
                      "error, warn, info, debug");
    expect_load_error("config.bad_sync", "[debug]\nsync = 2\n", ":2:", "debug.sync", "0, 1");
    /* 4, the experts on wgmma, was taken out (measured slower: docs/perf-notes.md) */
    expect_load_error("config.bad_moe_prefill_tiles", "[serve]\nmoe_prefill_tiles = 4\n",
                      ":2:", "serve.moe_prefill_tiles", "out of range 0..3");
    expect_load_error("config.bad_moe_ring_zfill", "[serve]\nmoe_ring_zfill = 2\n",
                      ":2:", "serve.moe_ring_zfill", NULL);
    expect_load_error("config.bad_moe_half_tiles", "[serve]\nmoe_half_tiles = 3\n",
                      ":2:", "serve.moe_half_tiles", NULL);
    expect_load_error("config.bad_moe_weights_a", "[serve]\nmoe_weights_a = 3\n",
                      ":2:", "serve.moe_weights_a", NULL);
    /* the bulk-copy forms of the ring lost (docs/perf-notes.md) and went: the key is unknown */
    expect_load_error("config.gone_moe_ring_bulk", "[serve]\nmoe_ring_bulk = 1\n",
                      ":2:", "serve.moe_ring_bulk", "unknown");
    /* 1, the pair form on eight warps, was taken out (measured slower: docs/perf-notes.md) */
    expect_load_error("config.bad_attn_pair_tiles", "[serve]\nattn_pair_tiles = 3\n",
                      ":2:", "serve.attn_pair_tiles", "not 0 or 2");
    expect_load_error("config.bad_attn_pair_tiles_form1", "[serve]\nattn_pair_tiles = 1\n",
                      ":2:", "serve.attn_pair_tiles", "form 1 was taken out");
    /* form 2 (four-warp blocks) measured slower and went; a file that asks for it is refused */
    expect_load_error("config.bad_attn_prompt", "[serve]\nattn_prompt = 2\n",
                      ":2:", "serve.attn_prompt", "0, 1");
    /* the experts' streamed form reaches decode-sized calls only (kernels.h) */
    expect_load_error("config.bad_expert_stream", "[serve]\nexpert_stream = 129\n",
                      ":2:", "serve.expert_stream", "out of range 0..128");
    expect_load_error("config.later_error_after_good",
                      "[kv]\nlocal = fp8\n[serve]\nmax_batch = "
                      "0\n",
                      ":4:", "serve.max_batch", NULL);

    char longline[400];
    (void)snprintf(longline, sizeof longline, "[model]\npath = /%0300d\n", 0);
    expect_load_error("config.line_too_long", longline, ":2:", "longer than", NULL);

    g4_config c;
    config_defaults(&c);
    int rc = config_load(&c, "/nonexistent/dir/g4.ini");
    TEST_CHECK("config.missing_file",
               rc == -1 && has(config_last_error(), "/nonexistent/dir/g4.ini") &&
                   has(config_last_error(), "cannot open"),
               "error='%s'", config_last_error());
}

/* The speed switches taken out after their measurements lost (docs/perf-notes.md): a file that
 * still sets one is refused as any unknown key is, naming file, line and key, even at a value
 * it once accepted; so is a --set of one (the device plans set them that way). */
static void test_removed_keys(void) {
    static const char *const keys[] = {
        "attn_cluster_rows", "early_weights", "gemm_wgmma",      "gemm_staged",      "weight_tiles",
        "expert_ring",       "proj_ring",     "attn_half_units", "attn_global_keep", "row_warps"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char gate[96], text[96], key[64];
        (void)snprintf(gate, sizeof gate, "config.removed_key[serve.%s]", keys[i]);
        (void)snprintf(text, sizeof text, "[serve]\nmax_batch = 8\n%s = 1\n", keys[i]);
        (void)snprintf(key, sizeof key, "serve.%s", keys[i]);
        expect_load_error(gate, text, ":3:", key, "unknown key");
        (void)snprintf(gate, sizeof gate, "config.removed_key_set[serve.%s]", keys[i]);
        (void)snprintf(text, sizeof text, "serve.%s=1", keys[i]);
        expect_set_error(gate, text, "unknown key");
    }
}

static void test_set(void) {
    g4_config c;
    config_defaults(&c);
    int rc = config_set(&c, "kv.local=fp8") | config_set(&c, " serve.max_batch = 4 ") |
             config_set(&c, "kv.budget_gb=auto") | config_set(&c, "log.level=warn") |
             config_set(&c, "model.path=/m/x=y") | config_set(&c, "debug.gemm=mma");
    int between = c.debug.gemm == 2; /* the values set on the way */
    rc |= config_set(&c, "debug.gemm=auto") | config_set(&c, "debug.nan_step=3");
    between = between && c.debug.nan_step == 3 && config_set(&c, "debug.nan_step=-1") != 0;
    int ok = rc == 0 && c.kv.local == G4_KV_LOCAL_FP8 && c.serve.max_batch == 4 &&
             c.kv.budget_gb == 0.0 && c.log.level == LOG_WARN &&
             strcmp(c.model.path, "/m/x=y") == 0 && between && c.debug.gemm == 3;
    TEST_CHECK("config.set_overrides", ok, "rc=%d max_batch=%d path='%s'", rc, c.serve.max_batch,
               c.model.path);

    /* --set after an INI overrides the INI value */
    const char *path = write_ini("over.ini", "[kv]\npage_tokens = 64\n");
    config_defaults(&c);
    rc = config_load(&c, path);
    rc |= config_set(&c, "kv.page_tokens=8");
    TEST_CHECK("config.set_after_ini", rc == 0 && c.kv.page_tokens == 8, "page_tokens=%d",
               c.kv.page_tokens);

    expect_set_error("config.set_no_equals", "kv.local", "expected section.key=value");
    expect_set_error("config.set_no_dot", "local=fp8", "expected section.key=value");
    expect_set_error("config.set_unknown_key", "kv.foo=1", "unknown key");
    expect_set_error("config.set_unknown_section", "gpu.sync=1", "unknown section");
    expect_set_error("config.set_bad_value", "kv.page_tokens=17", "power of two");
    expect_set_error("config.set_bad_range", "serve.max_batch=1025", "1..1024");
    expect_set_error("config.set_attn_pair_tiles_form1", "serve.attn_pair_tiles=1",
                     "form 1 was taken out");

    char big[G4_CONFIG_PATH_MAX + 32];
    int n = snprintf(big, sizeof big, "model.path=/");
    memset(big + n, 'a', G4_CONFIG_PATH_MAX);
    big[n + G4_CONFIG_PATH_MAX] = '\0';
    expect_set_error("config.set_path_too_long", big, "longer than the 4095 allowed");
    char name[G4_CONFIG_NAME_MAX + 32];
    n = snprintf(name, sizeof name, "model.name=");
    memset(name + n, 'n', G4_CONFIG_NAME_MAX);
    name[n + G4_CONFIG_NAME_MAX] = '\0';
    expect_set_error("config.set_name_too_long", name, "longer than the 127 allowed");
}

typedef struct range_case {
    const char *value;
    int accepted;
} range_case;

/* Each value of key set on the defaults and finished: accepted, or refused naming the key. */
static int range_holds(const char *key, const range_case *cases, size_t n) {
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        g4_config c;
        config_defaults(&c);
        (void)config_set(&c, "model.path=/m");
        char set[96];
        (void)snprintf(set, sizeof set, "%s=%s", key, cases[i].value);
        const int rc = config_set(&c, set) == 0 ? config_finish(&c) : -1;
        ok &= cases[i].accepted ? rc == 0 : rc == -1 && has(config_last_error(), key);
    }
    return ok;
}

static void test_finish(void) {
    g4_config c;
    config_defaults(&c);
    (void)config_set(&c, "model.weights=dummy");
    int rc = config_finish(&c);
    TEST_CHECK("config.finish_dummy_needs_name", rc == -1 && has(config_last_error(), "model.name"),
               "rc=%d error='%s'", rc, config_last_error());
    (void)config_set(&c, "model.name=gemma4-26b-a4b");
    rc = config_finish(&c);
    TEST_CHECK("config.finish_dummy_with_name", rc == 0 && c.model.tokenizer[0] == '\0',
               "rc=%d tokenizer='%s'", rc, c.model.tokenizer);

    config_defaults(&c);
    rc = config_finish(&c);
    TEST_CHECK("config.finish_file_needs_path", rc == -1 && has(config_last_error(), "model.path"),
               "rc=%d error='%s'", rc, config_last_error());

    config_defaults(&c);
    (void)config_set(&c, "model.path=/m");
    (void)config_set(&c, "kv.page_tokens=64");
    (void)config_set(&c, "serve.prefill_chunk=96");
    rc = config_finish(&c);
    TEST_CHECK("config.finish_chunk_multiple",
               rc == -1 && has(config_last_error(), "serve.prefill_chunk") &&
                   has(config_last_error(), "kv.page_tokens"),
               "rc=%d error='%s'", rc, config_last_error());

    config_defaults(&c);
    (void)config_set(&c, "model.path=/m");
    (void)config_set(&c, "serve.max_context=1024");
    rc = config_finish(&c);
    TEST_CHECK("config.finish_chunk_vs_context",
               rc == -1 && has(config_last_error(), "serve.max_context"), "rc=%d error='%s'", rc,
               config_last_error());

    /* serve.step_tokens: 0 or more than max_batch (16), at most prefill_chunk + max_batch */
    static const range_case steps[] = {{"0", 1}, {"17", 1}, {"2064", 1}, {"16", 0}, {"2065", 0}};
    TEST_CHECK("config.step_tokens_range",
               range_holds("serve.step_tokens", steps, sizeof steps / sizeof *steps),
               "0, 17 and 2064 accepted at max_batch 16 and prefill_chunk 2048; 16 and 2065 "
               "refused naming the key");
    /* serve.prompt_tile: 16..256 (0, the size classes, was taken out after it measured slower) */
    static const range_case tiles[] = {{"16", 1}, {"256", 1}, {"0", 0}, {"8", 0},
                                       {"15", 0}, {"257", 0}, {"-1", 0}};
    TEST_CHECK("config.prompt_tile_range",
               range_holds("serve.prompt_tile", tiles, sizeof tiles / sizeof *tiles),
               "16 and 256 accepted; 0, 8, 15, 257 and -1 refused naming the key");
    /* serve.attn_pair_tiles: 0 or 2 (1, the eight-warp form, was taken out) */
    static const range_case forms[] = {{"0", 1}, {"2", 1}, {"1", 0}, {"3", 0}, {"-1", 0}, {"x", 0}};
    TEST_CHECK("config.attn_pair_tiles_values",
               range_holds("serve.attn_pair_tiles", forms, sizeof forms / sizeof *forms),
               "0 and 2 accepted; 1, 3, -1 and x refused naming the key");
}

int main(void) {
    (void)snprintf(test_dir, sizeof test_dir, "/tmp/g4pipe_test_config_XXXXXX");
    if (!mkdtemp(test_dir)) {
        test_fail("setup", "mkdtemp failed");
        return harness_exit();
    }
    test_defaults();
    test_full_ini();
    test_duplicate_key();
    test_paths();
    test_load_errors();
    test_removed_keys();
    test_set();
    test_finish();
    for (int i = 0; i < test_n_files; i++)
        (void)remove(test_files[i]);
    (void)rmdir(test_dir);
    return harness_exit();
}
