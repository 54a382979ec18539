/* tests/unit/test_loader.c - runtime/model/loader.h and runtime/model/hfconfig.h through their
 * headers.
 *
 * Owns: writing tiny safetensors checkpoints and config.json files into a mkdtemp directory
 * and checking that good ones load byte-exactly and bad ones (wrong dtype or shape, missing
 * tensor, truncated file, offsets past the end, stale index, stray tensors) are refused;
 * that both config.json layouts and both full-layer spellings give the same desc; and that
 * a mismatch names the config.json field.
 * Does not own: the generated model table. It defines its own g4_models[] (one tiny model
 * shaped like tests/fixtures' tiny-moe, one decoy) so it links without build/gen/. */
#include "graph/model_desc.h"
#include "runtime/model/hfconfig.h"
#include "runtime/model/loader.h"
#include "tests/harness.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the test's own model table ---- */

/* tiny-moe's fields; the PLE variant below changes two of them */
#define TEST_TINY_FIELDS                                                                           \
    .d_model = 64, .n_layer = 6, .n_head = 4, .n_kv_head_local = 2, .n_kv_head_global = 1,         \
    .head_dim_local = 256, .head_dim_global = 512, .k_eq_v = 1, .window = 8, .d_ff = 96,           \
    .double_wide = 0, .n_kv_shared = 0, .n_vocab = 4096, .n_expert = 16, .top_k = 4,               \
    .d_expert = 32, .rope_base_local = 1e4f, .rope_base_global = 1e6f,                             \
    .rope_partial_global = 0.25f, .softcap = 30.0f, .eps = 1e-6f, .layer_kind = "SSFSSF"

static const g4_model_desc test_tiny = {
    .name = "tiny-moe", TEST_TINY_FIELDS, .d_ple = 0, .n_vocab_ple = 0};

/* A decoy far from the tiny model, so "closest model" has something to skip. */
static const g4_model_desc test_decoy = {
    .name = "decoy",
    .d_model = 128,
    .n_layer = 4,
    .n_head = 8,
    .n_kv_head_local = 8,
    .n_kv_head_global = 8,
    .head_dim_local = 64,
    .head_dim_global = 64,
    .window = 16,
    .d_ff = 256,
    .n_vocab = 1000,
    .rope_base_local = 1e4f,
    .rope_base_global = 1e6f,
    .rope_partial_global = 1.0f,
    .eps = 1e-5f,
    .layer_kind = "SFSF",
};

/* tiny-moe with per-layer embeddings, for the fields that matter only where a PLE table exists */
static const g4_model_desc test_tiny_ple = {
    .name = "tiny-moe-ple", TEST_TINY_FIELDS, .d_ple = 16, .n_vocab_ple = 4096};

const g4_model_desc *const g4_models[] = {&test_decoy, &test_tiny, &test_tiny_ple};
const int g4_n_models = 3;

const g4_model_desc *g4_model_find(const char *name) {
    for (int i = 0; i < g4_n_models; i++)
        if (strcmp(g4_models[i]->name, name) == 0) return g4_models[i];
    return NULL;
}

/* ---- scratch files ---- */

static char test_root[64];
static char test_created[128][320]; /* removed at exit, newest first */
static int test_n_created;

static const char *test_path(const char *sub, const char *file) {
    static char buf[8][320];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s%s%s", test_root, sub, file ? "/" : "", file ? file : "");
    return p;
}

static void test_remember(const char *path) {
    if (test_n_created < 128) snprintf(test_created[test_n_created++], 320, "%s", path);
}

static const char *test_mkdir(const char *sub) {
    const char *p = test_path(sub, NULL);
    if (mkdir(p, 0700) == 0) test_remember(p);
    return p;
}

static int test_write(const char *path, const void *a, size_t alen, const void *b, size_t blen) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    test_remember(path);
    int ok = fwrite(a, 1, alen, f) == alen && (!blen || fwrite(b, 1, blen, f) == blen);
    return fclose(f) == 0 && ok ? 0 : -1;
}

typedef struct test_tensor {
    const char *name;
    const char *dtype;
    int ndim;
    int64_t shape[4];
    size_t nbytes;
} test_tensor;

/* Writes a safetensors file whose tensor i holds bytes (i*16 + k) & 0xff, so a test can
 * recompute any tensor's content. drop_tail bytes are cut off the end (truncation). */
static int test_write_st(const char *path, const test_tensor *t, int n, size_t drop_tail) {
    json_t *hdr = json_object();
    json_object_set_new(hdr, "__metadata__", json_pack("{s:s}", "format", "pt"));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++)
            json_array_append_new(shape, json_integer(t[i].shape[d]));
        json_object_set_new(hdr, t[i].name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", t[i].dtype, "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + t[i].nbytes)));
        off += t[i].nbytes;
    }
    char *text = json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    size_t hlen = strlen(text), padded = (hlen + 7) & ~(size_t)7; /* spaces, as HF pads */
    uint8_t *buf = calloc(1, 8 + padded + off);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(padded >> (8 * i));
    memcpy(buf + 8, text, hlen);
    memset(buf + 8 + hlen, ' ', padded - hlen);
    size_t at = 8 + padded;
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < t[i].nbytes; k++)
            buf[at++] = (uint8_t)((i * 16 + (int)k) & 0xff);
    free(text);
    int rc = test_write(path, buf, at - drop_tail, NULL, 0);
    free(buf);
    return rc;
}

static int test_bytes_ok(const void *p, int index, size_t nbytes) {
    const uint8_t *b = p;
    for (size_t k = 0; k < nbytes; k++)
        if (b[k] != (uint8_t)((index * 16 + (int)k) & 0xff)) return 0;
    return 1;
}

/* ---- loader ---- */

static const test_tensor test_lm[] = {
    {"model.embed_tokens.weight", "BF16", 2, {4, 2}, 16},
    {"model.layers.0.self_attn.q_proj.weight", "F32", 2, {2, 2}, 16},
    {"model.norm.weight", "F32", 1, {2}, 8},
};

static void test_single_file(void) {
    const char *dir = test_mkdir("single");
    test_write_st(test_path("single", "model.safetensors"), test_lm, 3, 0);
    loader *ld = NULL;
    int rc = loader_open(dir, &ld);
    TEST_CHECK("loader_opens_single_file", rc == 0 && ld, "loader_open rc %d", rc);
    if (!ld) return;
    const void *e = loader_get(ld, "BF16", 2, (const int64_t[]){4, 2}, "embed_tokens.weight");
    const void *q = loader_get(ld, "F32", 2, (const int64_t[]){2, 2},
                               "layers.%d.self_attn.%s.weight", 0, "q_proj");
    TEST_CHECK("loader_returns_tensor_bytes",
               e && q && test_bytes_ok(e, 0, 16) && test_bytes_ok(q, 1, 16), "embed %p q_proj %p",
               e, q);
    TEST_CHECK("loader_has", loader_has(ld, "norm.weight") && !loader_has(ld, "nope.weight"),
               "norm.weight present, nope.weight absent");
    const void *p = loader_get(ld, "F32", 1, (const int64_t[]){3}, "norm.weight");
    TEST_CHECK("loader_refuses_wrong_shape", p == NULL, "norm.weight as [3] gave %p", p);
    p = loader_get(ld, "BF16", 1, (const int64_t[]){2}, "norm.weight");
    TEST_CHECK("loader_refuses_wrong_dtype", p == NULL, "norm.weight as BF16 gave %p", p);
    p = loader_get(ld, "F32", 1, (const int64_t[]){2}, "layers.1.input_layernorm.weight");
    TEST_CHECK("loader_refuses_missing_tensor", p == NULL, "missing tensor gave %p", p);
    rc = loader_finish(ld, 1);
    TEST_CHECK("loader_finish_all_used", rc == 0, "loader_finish rc %d", rc);
    loader_close(ld);
}

/* A header written by hand, so offsets and dtypes can be wrong on purpose. */
static int test_raw_st(const char *path, const char *header, size_t data_len) {
    uint8_t lenb[8], data[64] = {0};
    size_t hlen = strlen(header);
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)(hlen >> (8 * i));
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    test_remember(path);
    int ok = fwrite(lenb, 1, 8, f) == 8 && fwrite(header, 1, hlen, f) == hlen &&
             fwrite(data, 1, data_len, f) == data_len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static void test_bad_files(void) {
    static const struct {
        const char *gate, *sub, *header;
        size_t data_len;
    } bad[] = {
        {"loader_refuses_offset_out_of_range", "oob",
         "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 8},
        {"loader_refuses_size_mismatch", "size",
         "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8},
        {"loader_refuses_unknown_dtype", "dtype",
         "{\"model.norm.weight\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
        {"loader_refuses_bad_header_json", "json", "{\"model.norm.weight\":", 8},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *dir = test_mkdir(bad[i].sub);
        test_raw_st(test_path(bad[i].sub, "model.safetensors"), bad[i].header, bad[i].data_len);
        loader *ld = NULL;
        int rc = loader_open(dir, &ld);
        TEST_CHECK(bad[i].gate, rc == -1 && ld == NULL, "loader_open rc %d", rc);
        loader_close(ld);
    }
    const char *dir = test_mkdir("trunc");
    test_write_st(test_path("trunc", "model.safetensors"), test_lm, 3, 3);
    loader *ld = NULL;
    int rc = loader_open(dir, &ld);
    TEST_CHECK("loader_refuses_truncated_file", rc == -1, "3 bytes short: rc %d", rc);
    loader_close(ld);
    /* a header length bigger than the file */
    dir = test_mkdir("hlen");
    uint8_t big[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    test_write(test_path("hlen", "model.safetensors"), big, sizeof big, NULL, 0);
    rc = loader_open(dir, &ld);
    TEST_CHECK("loader_refuses_header_past_end", rc == -1, "rc %d", rc);
    loader_close(ld);
    rc = loader_open(test_path("nowhere", NULL), &ld);
    TEST_CHECK("loader_refuses_missing_dir", rc == -1, "rc %d", rc);
}

static const test_tensor test_shard1[] = {
    {"model.language_model.embed_tokens.weight", "BF16", 2, {4, 2}, 16},
    {"model.language_model.layers.0.self_attn.k_proj.weight", "BF16", 2, {2, 2}, 8},
    {"model.language_model.layers.1.self_attn.q_proj.weight", "BF16", 2, {2, 2}, 8},
};
static const test_tensor test_shard2[] = {
    {"model.language_model.layers.1.self_attn.k_proj.weight", "BF16", 2, {2, 2}, 8},
    {"model.language_model.layers.1.self_attn.k_norm.weight", "F32", 1, {2}, 8},
    {"model.vision_tower.patch_embedder.input_proj.weight", "BF16", 2, {2, 2}, 8},
    {"lm_head.weight", "BF16", 2, {4, 2}, 16},
    {"model.language_model.layers.1.extra.weight", "F32", 1, {2}, 8},
};

/* Writes a two-shard checkpoint; n2 limits shard 2 (5 adds the stray text tensor). */
static const char *test_write_sharded(const char *sub, int n2, const char *stale) {
    const char *dir = test_mkdir(sub);
    test_write_st(test_path(sub, "a.safetensors"), test_shard1, 3, 0);
    test_write_st(test_path(sub, "b.safetensors"), test_shard2, n2, 0);
    json_t *map = json_object();
    for (int i = 0; i < 3; i++)
        json_object_set_new(map, test_shard1[i].name, json_string("a.safetensors"));
    for (int i = 0; i < n2; i++)
        json_object_set_new(map, test_shard2[i].name,
                            json_string(stale && i == 0 ? stale : "b.safetensors"));
    json_t *idx = json_pack("{s:{s:i},s:o}", "metadata", "total_size", 0, "weight_map", map);
    char *text = json_dumps(idx, JSON_INDENT(2));
    test_write(test_path(sub, "model.safetensors.index.json"), text, strlen(text), NULL, 0);
    free(text);
    json_decref(idx);
    return dir;
}

static void test_sharded(void) {
    const char *dir = test_write_sharded("sharded", 4, NULL);
    loader *ld = NULL;
    int rc = loader_open(dir, &ld);
    TEST_CHECK("loader_opens_sharded_vlm_prefix", rc == 0, "loader_open rc %d", rc);
    if (!ld) return;
    const int64_t s22[] = {2, 2};
    const void *e = loader_get(ld, "BF16", 2, (const int64_t[]){4, 2}, "embed_tokens.weight");
    const void *k0 = loader_get(ld, "BF16", 2, s22, "layers.0.self_attn.k_proj.weight");
    const void *q1 = loader_get(ld, "BF16", 2, s22, "layers.1.self_attn.q_proj.weight");
    TEST_CHECK("loader_sharded_bytes", e && k0 && q1 && test_bytes_ok(q1, 2, 8),
               "embed %p k0 %p q1 %p", e, k0, q1);
    loader_unused u = loader_count_unused(ld, 1);
    TEST_CHECK("loader_counts_skipped",
               u.vision_audio == 1 && u.kv_shared == 2 && u.tied_lm_head == 1 && u.unexpected == 0,
               "vision %d kv_shared %d tied %d unexpected %d", u.vision_audio, u.kv_shared,
               u.tied_lm_head, u.unexpected);
    rc = loader_finish(ld, 1);
    TEST_CHECK("loader_finish_skips_expected", rc == 0, "loader_finish rc %d", rc);
    /* with no shared layers the k/v of layer 1 are real weights nobody fetched */
    rc = loader_finish(ld, 2);
    TEST_CHECK("loader_finish_counts_unshared_kv", rc == -1, "loader_finish rc %d", rc);
    loader_close(ld);

    dir = test_write_sharded("stray", 5, NULL);
    rc = loader_open(dir, &ld);
    if (ld) {
        loader_get(ld, "BF16", 2, (const int64_t[]){4, 2}, "embed_tokens.weight");
        loader_get(ld, "BF16", 2, s22, "layers.0.self_attn.k_proj.weight");
        loader_get(ld, "BF16", 2, s22, "layers.1.self_attn.q_proj.weight");
        u = loader_count_unused(ld, 1);
        rc = loader_finish(ld, 1);
    }
    TEST_CHECK("loader_refuses_unexpected_tensor",
               ld && rc == -1 && u.unexpected == 1 &&
                   strcmp(u.first_unexpected, "model.language_model.layers.1.extra.weight") == 0,
               "loader_finish rc %d, unexpected %d", rc, u.unexpected);
    loader_close(ld);

    dir = test_write_sharded("stale", 4, "a.safetensors");
    rc = loader_open(dir, &ld);
    TEST_CHECK("loader_refuses_stale_index", rc == -1, "loader_open rc %d", rc);
    loader_close(ld);
}

/* ---- hfconfig ---- */

static const char test_text_fields[] =
    "\"attention_k_eq_v\": true, \"enable_moe_block\": true, \"final_logit_softcapping\": 30.0,"
    "\"head_dim\": 256, \"hidden_size\": %s, \"hidden_size_per_layer_input\": 0,"
    "\"intermediate_size\": 96, \"layer_types\": [\"sliding_attention\", \"sliding_attention\","
    "\"%s\", \"sliding_attention\", \"sliding_attention\", \"full_attention\"],"
    "\"model_type\": \"gemma4_text\", \"moe_intermediate_size\": 32, \"num_attention_heads\": 4,"
    "\"num_experts\": 16, \"num_hidden_layers\": %d, \"num_key_value_heads\": 2,"
    "\"num_kv_shared_layers\": 0, \"rms_norm_eps\": 1e-06, \"rope_parameters\": {"
    "\"full_attention\": {\"partial_rotary_factor\": 0.25, \"rope_theta\": 1000000.0,"
    "\"rope_type\": \"proportional\"}, \"sliding_attention\": {\"rope_theta\": 10000.0,"
    "\"rope_type\": \"default\"}}, \"sliding_window\": %d, \"top_k_experts\": 4,"
    "\"use_double_wide_mlp\": false, \"vocab_size\": 4096, \"vocab_size_per_layer_input\": 4096,"
    "%s";

static const char test_plc[] = "\"per_layer_config\": {\"2\": {\"head_dim\": 512, "
                               "\"num_key_value_heads\": 1}, \"5\": {\"head_dim\": 512, "
                               "\"num_key_value_heads\": 1}}";
/* num_key_value_heads left out: full layers keep num_key_value_heads (2 here) */
static const char test_plc_hd[] = "\"per_layer_config\": {\"2\": {\"head_dim\": 512}, "
                                  "\"5\": {\"head_dim\": 512}}";
static const char test_legacy[] = "\"global_head_dim\": 512, \"num_global_key_value_heads\": 1";

typedef struct test_cfg {
    const char *hidden; /* JSON text of hidden_size ("64", "\"64\"") */
    const char *kind2;  /* layer_types[2] */
    int n_layer, window, nested;
    const char *geom; /* test_plc or test_legacy */
} test_cfg;

/* Writes config.json for c into sub/ and reads it; returns hfconfig_read's result. */
static int test_config(const char *sub, const test_cfg *c, g4_model_desc *out) {
    char text[4096], body[3072];
    snprintf(body, sizeof body, test_text_fields, c->hidden, c->kind2, c->n_layer, c->window,
             c->geom);
    if (c->nested)
        snprintf(text, sizeof text,
                 "{\"architectures\": [\"Gemma4ForConditionalGeneration\"],"
                 "\"model_type\": \"gemma4\", \"vision_config\": {\"hidden_size\": 8},"
                 "\"text_config\": {%s}}",
                 body);
    else
        snprintf(text, sizeof text, "{%s}", body);
    test_mkdir(sub);
    const char *path = test_path(sub, "config.json");
    test_write(path, text, strlen(text), NULL, 0);
    return hfconfig_read(path, out);
}

static void test_hfconfig(void) {
    g4_model_desc a, b, d;
    char why[256];
    int ra = test_config("cfg_plc", &(test_cfg){"64", "full_attention", 6, 8, 0, test_plc}, &a);
    int rb =
        test_config("cfg_nested", &(test_cfg){"64", "full_attention", 6, 8, 1, test_legacy}, &b);
    const g4_model_desc *ma = ra ? NULL : hfconfig_match(&a, NULL, why, sizeof why);
    const g4_model_desc *mb = rb ? NULL : hfconfig_match(&b, "tiny-moe", why, sizeof why);
    TEST_CHECK("hfconfig_both_layouts_match", ma == &test_tiny && mb == &test_tiny,
               "per_layer_config rc %d -> %s, nested global_head_dim rc %d -> %s", ra,
               ma ? ma->name : "none", rb, mb ? mb->name : "none");
    TEST_CHECK("hfconfig_fields",
               ra == 0 && a.head_dim_global == 512 && a.n_kv_head_global == 1 &&
                   a.n_vocab_ple == 0 && a.name == NULL,
               "head_dim_global %d n_kv_head_global %d n_vocab_ple %d", a.head_dim_global,
               a.n_kv_head_global, a.n_vocab_ple);

    int rc = test_config("cfg_window", &(test_cfg){"64", "full_attention", 6, 16, 1, test_plc}, &d);
    const g4_model_desc *m = rc ? &test_tiny : hfconfig_match(&d, NULL, why, sizeof why);
    TEST_CHECK("hfconfig_mismatch_names_field",
               !m && strstr(why, "sliding_window") && strstr(why, "tiny-moe"), "%s", why);
    m = rc ? &test_tiny : hfconfig_match(&d, "tiny-moe", why, sizeof why);
    TEST_CHECK("hfconfig_mismatch_named_model", !m && strstr(why, "sliding_window is 16"), "%s",
               why);
    rc = test_config("cfg_kinds", &(test_cfg){"64", "sliding_attention", 6, 8, 0, test_legacy}, &d);
    m = rc ? &test_tiny : hfconfig_match(&d, NULL, why, sizeof why);
    TEST_CHECK("hfconfig_mismatch_layer_types", !m && strstr(why, "layer_types[2]"), "rc %d: %s",
               rc, why);
    rc = test_config("cfg_plc_hd", &(test_cfg){"64", "full_attention", 6, 8, 0, test_plc_hd}, &d);
    m = rc ? &test_tiny : hfconfig_match(&d, NULL, why, sizeof why);
    TEST_CHECK("hfconfig_per_layer_kv_default",
               rc == 0 && d.n_kv_head_global == 2 && !m &&
                   strstr(why, "num_global_key_value_heads"),
               "n_kv_head_global %d: %s", d.n_kv_head_global, why);
    m = hfconfig_match(&a, "no-such-model", why, sizeof why);
    TEST_CHECK("hfconfig_unknown_name", !m && strstr(why, "no-such-model"), "%s", why);

    rc = test_config("cfg_type", &(test_cfg){"\"64\"", "full_attention", 6, 8, 0, test_plc}, &d);
    TEST_CHECK("hfconfig_refuses_wrong_type", rc == -1, "hidden_size \"64\": rc %d", rc);
    rc = test_config("cfg_big", &(test_cfg){"64", "full_attention", 65, 8, 0, test_legacy}, &d);
    TEST_CHECK("hfconfig_refuses_too_many_layers", rc == -1, "65 layers: rc %d", rc);
    const char *path = test_path("cfg_type", "config.json");
    const char missing[] = "{\"model_type\": \"gemma4_text\", \"num_hidden_layers\": 2}";
    test_write(path, missing, strlen(missing), NULL, 0);
    rc = hfconfig_read(path, &d);
    TEST_CHECK("hfconfig_refuses_missing_field", rc == -1, "no hidden_size: rc %d", rc);
}

/* Every config.json field that changes the arithmetic, changed one at a time in a config that
 * matches tiny-moe: each is refused, at read time or by the match (which names the field). */
static void test_hfconfig_fields_refused(void) {
    static const struct {
        const char *field, *from, *to;
    } cases[] = {
        {"final_logit_softcapping", "\"final_logit_softcapping\": 30.0",
         "\"final_logit_softcapping\": 50.0"},
        {"final_logit_softcapping", "\"final_logit_softcapping\": 30.0",
         "\"final_logit_softcapping\": null"},
        {"rms_norm_eps", "\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": 1e-05"},
        {"rope_parameters.sliding_attention.rope_theta", "\"rope_theta\": 10000.0",
         "\"rope_theta\": 20000.0"},
        {"rope_parameters.full_attention.rope_theta", "\"rope_theta\": 1000000.0",
         "\"rope_theta\": 500000.0"},
        {"rope_parameters.full_attention.partial_rotary_factor", "\"partial_rotary_factor\": 0.25",
         "\"partial_rotary_factor\": 0.5"},
        {"rope_parameters.full_attention.rope_type", "\"rope_type\": \"proportional\"",
         "\"rope_type\": \"default\""},
        {"rope_parameters.sliding_attention.rope_type", "\"rope_type\": \"default\"}",
         "\"rope_type\": \"linear\"}"},
        {"hidden_activation", "\"model_type\": \"gemma4_text\"",
         "\"model_type\": \"gemma4_text\", \"hidden_activation\": \"silu\""},
        {"attention_bias", "\"model_type\": \"gemma4_text\"",
         "\"model_type\": \"gemma4_text\", \"attention_bias\": true"},
        {"tie_word_embeddings", "\"model_type\": \"gemma4_text\"",
         "\"model_type\": \"gemma4_text\", \"tie_word_embeddings\": false"},
        {"use_bidirectional_attention", "\"model_type\": \"gemma4_text\"",
         "\"model_type\": \"gemma4_text\", \"use_bidirectional_attention\": \"all\""},
        {"attention_k_eq_v", "\"attention_k_eq_v\": true", "\"attention_k_eq_v\": false"},
        {"head_dim", "\"head_dim\": 256,", "\"head_dim\": 128,"},
        {"intermediate_size", "\"intermediate_size\": 96", "\"intermediate_size\": 128"},
        {"num_key_value_heads", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 1"},
        {"num_experts", "\"num_experts\": 16", "\"num_experts\": 8"},
        {"top_k_experts", "\"top_k_experts\": 4", "\"top_k_experts\": 2"},
        {"moe_intermediate_size", "\"moe_intermediate_size\": 32", "\"moe_intermediate_size\": 64"},
        {"vocab_size", "\"vocab_size\": 4096,", "\"vocab_size\": 8192,"},
        {"num_attention_heads", "\"num_attention_heads\": 4", "\"num_attention_heads\": 8"},
        {"hidden_size", "\"hidden_size\": 64,", "\"hidden_size\": 128,"},
        {"num_hidden_layers", "\"num_hidden_layers\": 6,", "\"num_hidden_layers\": 5,"},
        {"head_dim", "{\"head_dim\": 512, ", "{\"head_dim\": 256, "}, /* a full layer's */
        {"use_double_wide_mlp", "\"use_double_wide_mlp\": false", "\"use_double_wide_mlp\": true"},
        {"num_kv_shared_layers", "\"num_kv_shared_layers\": 0", "\"num_kv_shared_layers\": 2"},
        {"hidden_size_per_layer_input", "\"hidden_size_per_layer_input\": 0",
         "\"hidden_size_per_layer_input\": 16"},
        /* without the MoE block the model has no experts: the match names the count it reads */
        {"num_experts", "\"enable_moe_block\": true", "\"enable_moe_block\": false"},
        /* vocab_size_per_layer_input is matched where a PLE table exists (hfconfig.c zeroes it
         * without one): test_hfconfig_ple_vocab_refused changes it on a PLE model */
    };
    char base[3072];
    snprintf(base, sizeof base, test_text_fields, "64", "full_attention", 6, 8, test_plc);
    int refused = 0, n = (int)(sizeof cases / sizeof cases[0]);
    char why[256], first_bad[300] = "";
    for (int i = 0; i < n; i++) {
        const char *at = strstr(base, cases[i].from);
        char text[4096];
        if (!at) {
            snprintf(first_bad, sizeof first_bad, "%s: the base config lacks %s", cases[i].field,
                     cases[i].from);
            continue;
        }
        snprintf(text, sizeof text, "{%.*s%s%s}", (int)(at - base), base, cases[i].to,
                 at + strlen(cases[i].from));
        const char *path = test_path("cfg_field", "config.json");
        test_mkdir("cfg_field");
        test_write(path, text, strlen(text), NULL, 0);
        g4_model_desc d;
        why[0] = '\0';
        int rc = hfconfig_read(path, &d);
        /* matched against tiny-moe by name: tiny-moe-ple is one field away */
        const g4_model_desc *m = rc ? NULL : hfconfig_match(&d, "tiny-moe", why, sizeof why);
        /* read-time refusals log the field; a match refusal must name it */
        if (rc != 0 || (!m && strstr(why, cases[i].field)))
            refused++;
        else if (!first_bad[0])
            snprintf(first_bad, sizeof first_bad, "%s -> %s: %s", cases[i].field, cases[i].to,
                     m ? "accepted" : why);
    }
    TEST_CHECK("hfconfig_refuses_each_arithmetic_field", refused == n,
               "%d of %d one-field changes refused%s%s", refused, n, first_bad[0] ? "; " : "",
               first_bad);
}

/* vocab_size_per_layer_input on a model with a PLE table: the config as written matches
 * tiny-moe-ple, and the one-field change is refused naming the field. */
static void test_hfconfig_ple_vocab_refused(void) {
    char base[3072], text[4096], why[256] = "", why2[256] = "";
    snprintf(base, sizeof base, test_text_fields, "64", "full_attention", 6, 8, test_plc);
    const char from[] = "\"hidden_size_per_layer_input\": 0";
    const char vfrom[] = "\"vocab_size_per_layer_input\": 4096";
    char *at = strstr(base, from), *vat = strstr(base, vfrom);
    if (!at || !vat) {
        test_fail("hfconfig_refuses_ple_vocab", "the base config lacks the PLE fields");
        return;
    }
    /* hidden_size_per_layer_input 16 (its digits "16" replace "0 " less one byte: rebuild) */
    snprintf(text, sizeof text, "{%.*s\"hidden_size_per_layer_input\": 16%s}", (int)(at - base),
             base, at + strlen(from));
    const char *path = test_path("cfg_ple", "config.json");
    test_mkdir("cfg_ple");
    test_write(path, text, strlen(text), NULL, 0);
    g4_model_desc d;
    int rc = hfconfig_read(path, &d);
    const g4_model_desc *m = rc ? NULL : hfconfig_match(&d, NULL, why, sizeof why);
    char *v = strstr(text, vfrom), text2[4096];
    snprintf(text2, sizeof text2, "%.*s\"vocab_size_per_layer_input\": 8192%s", (int)(v - text),
             text, v + strlen(vfrom));
    test_write(path, text2, strlen(text2), NULL, 0);
    int rc2 = hfconfig_read(path, &d);
    const g4_model_desc *m2 = rc2 ? NULL : hfconfig_match(&d, NULL, why2, sizeof why2);
    TEST_CHECK("hfconfig_refuses_ple_vocab",
               m == &test_tiny_ple && !m2 && strstr(why2, "vocab_size_per_layer_input"),
               "as written: %s; vocab_size_per_layer_input 8192: %s", m ? m->name : why,
               m2 ? "accepted" : why2);
}

int main(void) {
    snprintf(test_root, sizeof test_root, "/tmp/g4_test_loader_XXXXXX");
    if (!mkdtemp(test_root)) {
        test_fail("loader_tmpdir", "mkdtemp failed");
        return harness_exit();
    }
    test_single_file();
    test_bad_files();
    test_sharded();
    test_hfconfig();
    test_hfconfig_fields_refused();
    test_hfconfig_ple_vocab_refused();
    for (int i = test_n_created - 1; i >= 0; i--)
        remove(test_created[i]);
    rmdir(test_root);
    return harness_exit();
}
