/* runtime/model/hfconfig.c - see hfconfig.h.
 *
 * Owns: the mapping from config.json field names to g4_model_desc fields (one table, used
 * both to read and to name the field in a mismatch), defaults, and range checks.
 * Does not own: the compiled-in table (build/gen/models.c), tensors, the tokenizer.
 *
 * Why it is shaped this way: the reader is split by topic (dimensions, layer types,
 * full-layer geometry, PLE/MoE, RoPE), each a short function over a small set of typed
 * getters that treat JSON null as absent (HF writes null for unset optionals) and log the
 * field name on any type error. The comparison walks a field table, so adding a desc field
 * means adding one row, and the message always uses the config.json spelling. */
#include "runtime/model/hfconfig.h"

#include "runtime/base/log.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* JSON null means "not set" in HF configs, so it is treated like an absent key. */
static json_t *hf_get(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* Reads a non-negative int. field is the name used in messages (may be a dotted path). */
static int hf_int(const char *path, json_t *obj, const char *key, const char *field, int required,
                  int dflt, int *out) {
    json_t *v = hf_get(obj, key);
    if (!v) {
        if (!required) {
            *out = dflt;
            return 0;
        }
        log_msg(LOG_ERROR, "hfconfig", "%s: missing required field %s", path, field);
        return -1;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT_MAX) {
        log_msg(LOG_ERROR, "hfconfig", "%s: field %s must be a non-negative integer", path, field);
        return -1;
    }
    *out = (int)json_integer_value(v);
    return 0;
}

static int hf_bool(const char *path, json_t *obj, const char *key, int dflt, int *out) {
    json_t *v = hf_get(obj, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v)) {
        log_msg(LOG_ERROR, "hfconfig", "%s: field %s must be true or false", path, key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

static int hf_float(const char *path, json_t *obj, const char *key, const char *field, float dflt,
                    float *out) {
    json_t *v = hf_get(obj, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_number(v)) {
        log_msg(LOG_ERROR, "hfconfig", "%s: field %s must be a number", path, field);
        return -1;
    }
    *out = (float)json_number_value(v);
    return 0;
}

/* Plain dimensions and scalars; the seven geometry fields are required because a silent
 * class default there would describe a different model. */
static int hf_read_dims(const char *path, json_t *tc, g4_model_desc *m) {
    static const struct {
        const char *key;
        size_t off;
    } req[] = {
        {"hidden_size", offsetof(g4_model_desc, d_model)},
        {"num_hidden_layers", offsetof(g4_model_desc, n_layer)},
        {"num_attention_heads", offsetof(g4_model_desc, n_head)},
        {"num_key_value_heads", offsetof(g4_model_desc, n_kv_head_local)},
        {"head_dim", offsetof(g4_model_desc, head_dim_local)},
        {"intermediate_size", offsetof(g4_model_desc, d_ff)},
        {"vocab_size", offsetof(g4_model_desc, n_vocab)},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        int *dst = (int *)(void *)((char *)m + req[i].off);
        if (hf_int(path, tc, req[i].key, req[i].key, 1, 0, dst) != 0) return -1;
        if (*dst == 0) {
            log_msg(LOG_ERROR, "hfconfig", "%s: field %s must be positive", path, req[i].key);
            return -1;
        }
    }
    if (m->n_layer > G4_MAX_LAYERS) {
        log_msg(LOG_ERROR, "hfconfig", "%s: field num_hidden_layers is %d, more than %d", path,
                m->n_layer, G4_MAX_LAYERS);
        return -1;
    }
    if (hf_int(path, tc, "sliding_window", "sliding_window", 0, 512, &m->window) != 0 ||
        hf_int(path, tc, "num_kv_shared_layers", "num_kv_shared_layers", 0, 0, &m->n_kv_shared) !=
            0 ||
        hf_bool(path, tc, "use_double_wide_mlp", 0, &m->double_wide) != 0 ||
        hf_bool(path, tc, "attention_k_eq_v", 0, &m->k_eq_v) != 0 ||
        hf_float(path, tc, "rms_norm_eps", "rms_norm_eps", 1e-6f, &m->eps) != 0 ||
        hf_float(path, tc, "final_logit_softcapping", "final_logit_softcapping", 0.0f,
                 &m->softcap) != 0)
        return -1;
    if (m->n_kv_shared >= m->n_layer) {
        log_msg(LOG_ERROR, "hfconfig", "%s: field num_kv_shared_layers is %d of %d layers", path,
                m->n_kv_shared, m->n_layer);
        return -1;
    }
    return 0;
}

/* layer_types, or the class default (every 6th layer full) when absent; HF forces the last
 * layer to full either way, so we do too rather than disagree with the reference. */
static int hf_read_layer_types(const char *path, json_t *tc, g4_model_desc *m) {
    json_t *lt = hf_get(tc, "layer_types");
    if (lt && (!json_is_array(lt) || json_array_size(lt) != (size_t)m->n_layer)) {
        log_msg(LOG_ERROR, "hfconfig", "%s: field layer_types must be a list of %d strings", path,
                m->n_layer);
        return -1;
    }
    for (int l = 0; l < m->n_layer; l++) {
        if (!lt) {
            m->layer_kind[l] = (uint8_t)((l + 1) % 6 == 0 ? G4_LAYER_FULL : G4_LAYER_SLIDING);
            continue;
        }
        const char *s = json_string_value(json_array_get(lt, (size_t)l));
        if (s && strcmp(s, "sliding_attention") == 0) {
            m->layer_kind[l] = G4_LAYER_SLIDING;
        } else if (s && strcmp(s, "full_attention") == 0) {
            m->layer_kind[l] = G4_LAYER_FULL;
        } else {
            log_msg(LOG_ERROR, "hfconfig",
                    "%s: field layer_types[%d] is not sliding_attention "
                    "or full_attention",
                    path, l);
            return -1;
        }
    }
    if (m->layer_kind[m->n_layer - 1] != G4_LAYER_FULL) {
        log_msg(LOG_WARN, "hfconfig",
                "%s: layer_types[%d] is sliding; HF makes the last layer "
                "full",
                path, m->n_layer - 1);
        m->layer_kind[m->n_layer - 1] = G4_LAYER_FULL;
    }
    return 0;
}

/* transformers 5.17 form: per_layer_config {"<layer>": {head_dim, num_key_value_heads}}.
 * The desc holds one geometry per layer kind, so overrides must agree within a kind. */
static int hf_read_per_layer(const char *path, json_t *plc, g4_model_desc *m) {
    int hd[G4_MAX_LAYERS], kv[G4_MAX_LAYERS];
    for (int l = 0; l < m->n_layer; l++) {
        hd[l] = m->head_dim_local;
        kv[l] = m->n_kv_head_local;
    }
    const char *key;
    json_t *v;
    json_object_foreach(plc, key, v) {
        char *end, field[96];
        long l = strtol(key, &end, 10);
        if (*end || end == key || l < 0 || l >= m->n_layer || !json_is_object(v)) {
            log_msg(LOG_ERROR, "hfconfig", "%s: per_layer_config key %s is not a layer object",
                    path, key);
            return -1;
        }
        snprintf(field, sizeof field, "per_layer_config[%ld].head_dim", l);
        if (hf_int(path, v, "head_dim", field, 0, hd[l], &hd[l]) != 0) return -1;
        snprintf(field, sizeof field, "per_layer_config[%ld].num_key_value_heads", l);
        if (hf_int(path, v, "num_key_value_heads", field, 0, kv[l], &kv[l]) != 0) return -1;
    }
    int first_full = -1;
    for (int l = 0; l < m->n_layer; l++) {
        int full = m->layer_kind[l] == G4_LAYER_FULL;
        if (full && first_full < 0) first_full = l;
        int ref_hd = full ? hd[first_full] : m->head_dim_local;
        int ref_kv = full ? kv[first_full] : m->n_kv_head_local;
        if (hd[l] != ref_hd || kv[l] != ref_kv) {
            log_msg(LOG_ERROR, "hfconfig",
                    "%s: per_layer_config[%d] differs from other %s "
                    "layers; unsupported",
                    path, l, full ? "full" : "sliding");
            return -1;
        }
    }
    if (first_full >= 0) {
        m->head_dim_global = hd[first_full];
        m->n_kv_head_global = kv[first_full];
    }
    return 0;
}

/* Full-layer head dim and KV heads, from per_layer_config when present, else from
 * global_head_dim / num_global_key_value_heads (the latter only counts with k_eq_v). */
static int hf_read_global(const char *path, json_t *tc, g4_model_desc *m) {
    int n_global_kv = 0;
    if (hf_int(path, tc, "global_head_dim", "global_head_dim", 0, 512, &m->head_dim_global) != 0 ||
        hf_int(path, tc, "num_global_key_value_heads", "num_global_key_value_heads", 0, 0,
               &n_global_kv) != 0)
        return -1;
    m->n_kv_head_global = m->k_eq_v && n_global_kv > 0 ? n_global_kv : m->n_kv_head_local;
    json_t *plc = hf_get(tc, "per_layer_config");
    if (!plc) return 0;
    if (!json_is_object(plc)) {
        log_msg(LOG_ERROR, "hfconfig", "%s: field per_layer_config must be an object", path);
        return -1;
    }
    return hf_read_per_layer(path, plc, m);
}

static int hf_read_ple_moe(const char *path, json_t *tc, g4_model_desc *m) {
    int moe = 0;
    if (hf_int(path, tc, "hidden_size_per_layer_input", "hidden_size_per_layer_input", 0, 256,
               &m->d_ple) != 0 ||
        hf_int(path, tc, "vocab_size_per_layer_input", "vocab_size_per_layer_input", 0, 262144,
               &m->n_vocab_ple) != 0 ||
        hf_bool(path, tc, "enable_moe_block", 0, &moe) != 0)
        return -1;
    if (m->d_ple == 0) m->n_vocab_ple = 0; /* no PLE table exists, whatever the field says */
    m->n_expert = m->top_k = m->d_expert = 0;
    if (!moe) return 0;
    if (hf_int(path, tc, "num_experts", "num_experts", 1, 0, &m->n_expert) != 0 ||
        hf_int(path, tc, "top_k_experts", "top_k_experts", 1, 0, &m->top_k) != 0 ||
        hf_int(path, tc, "moe_intermediate_size", "moe_intermediate_size", 1, 0, &m->d_expert) != 0)
        return -1;
    if (m->top_k == 0 || m->top_k > m->n_expert || m->d_expert == 0) {
        log_msg(LOG_ERROR, "hfconfig",
                "%s: field top_k_experts or moe_intermediate_size out of "
                "range for %d experts",
                path, m->n_expert);
        return -1;
    }
    return 0;
}

/* A string field with one value g4pipe implements (absent: HF's class default, that value). */
static int hf_only(const char *path, json_t *obj, const char *key, const char *field,
                   const char *only, const char *what) {
    json_t *v = hf_get(obj, key);
    if (!v) return 0;
    const char *s = json_string_value(v);
    if (s && strcmp(s, only) == 0) return 0;
    log_msg(LOG_ERROR, "hfconfig", "%s: field %s is %s%s%s; g4pipe implements %s only (%s)", path,
            field, s ? "\"" : "", s ? s : "not a string", s ? "\"" : "", only, what);
    return -1;
}

/* A boolean field with one value g4pipe implements (absent: HF's class default, that value). */
static int hf_only_bool(const char *path, json_t *obj, const char *key, int only,
                        const char *what) {
    json_t *v = hf_get(obj, key);
    if (!v || (json_is_boolean(v) && json_is_true(v) == only)) return 0;
    log_msg(LOG_ERROR, "hfconfig", "%s: field %s is %s; g4pipe implements %s only (%s)", path, key,
            json_is_boolean(v) ? (json_is_true(v) ? "true" : "false") : "not a boolean",
            only ? "true" : "false", what);
    return -1;
}

/* Fields that change the arithmetic but have one value in every Gemma 4 checkpoint, so the
 * compiled-in graph has no variant for the others: refused at read time, naming the field. */
static int hf_read_fixed(const char *path, json_t *tc) {
    json_t *rp = hf_get(tc, "rope_parameters");
    json_t *sl = rp ? hf_get(rp, "sliding_attention") : NULL;
    json_t *fu = rp ? hf_get(rp, "full_attention") : NULL;
    json_t *bi = hf_get(tc, "use_bidirectional_attention");
    const char *bis = json_string_value(bi);
    if (bi && !(bis && strcmp(bis, "vision") == 0)) { /* "vision": no effect on text input */
        log_msg(LOG_ERROR, "hfconfig",
                "%s: field use_bidirectional_attention is %s; g4pipe implements causal text "
                "attention (null or \"vision\") only",
                path, bis ? bis : "not a string");
        return -1;
    }
    return hf_only(path, tc, "hidden_activation", "hidden_activation", "gelu_pytorch_tanh",
                   "the tanh-approximated GELU of every MLP") ||
                   hf_only(path, sl, "rope_type", "rope_parameters.sliding_attention.rope_type",
                           "default", "plain RoPE on sliding layers") ||
                   hf_only(path, fu, "rope_type", "rope_parameters.full_attention.rope_type",
                           "proportional", "partial RoPE on full layers") ||
                   hf_only_bool(path, tc, "attention_bias", 0, "no q/k/v/o biases") ||
                   hf_only_bool(path, tc, "tie_word_embeddings", 1, "the LM head is embed_tokens")
               ? -1
               : 0;
}

static int hf_read_rope(const char *path, json_t *tc, g4_model_desc *m) {
    json_t *rp = hf_get(tc, "rope_parameters");
    if (rp && !json_is_object(rp)) {
        log_msg(LOG_ERROR, "hfconfig", "%s: field rope_parameters must be an object", path);
        return -1;
    }
    json_t *sl = hf_get(rp, "sliding_attention"), *fu = hf_get(rp, "full_attention");
    if ((sl && !json_is_object(sl)) || (fu && !json_is_object(fu))) {
        log_msg(LOG_ERROR, "hfconfig", "%s: rope_parameters entries must be objects", path);
        return -1;
    }
    if (hf_float(path, sl, "rope_theta", "rope_parameters.sliding_attention.rope_theta", 1e4f,
                 &m->rope_base_local) != 0 ||
        hf_float(path, fu, "rope_theta", "rope_parameters.full_attention.rope_theta", 1e6f,
                 &m->rope_base_global) != 0 ||
        hf_float(path, fu, "partial_rotary_factor",
                 "rope_parameters.full_attention.partial_rotary_factor", 0.25f,
                 &m->rope_partial_global) != 0)
        return -1;
    return 0;
}

/* Picks the object holding the text fields: text_config when present (published layout),
 * else the top level (Gemma4ForCausalLM). A non-Gemma-4 model_type is refused so that, say,
 * a Gemma 3 config is not misread through class defaults. */
static json_t *hf_text_object(const char *path, json_t *root) {
    json_t *tc = hf_get(root, "text_config");
    if (tc && !json_is_object(tc)) {
        log_msg(LOG_ERROR, "hfconfig", "%s: field text_config must be an object", path);
        return NULL;
    }
    if (!tc) tc = root;
    const char *mt = json_string_value(hf_get(tc, "model_type"));
    if (mt && strncmp(mt, "gemma4", 6) != 0) {
        log_msg(LOG_ERROR, "hfconfig", "%s: field model_type is %s, not a Gemma 4 text model", path,
                mt);
        return NULL;
    }
    return tc;
}

int hfconfig_read(const char *path, g4_model_desc *out) {
    memset(out, 0, sizeof *out);
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_object(root)) {
        log_msg(LOG_ERROR, "hfconfig", "%s:%d: %s", path, err.line,
                root ? "not a JSON object" : err.text);
        json_decref(root);
        return -1;
    }
    json_t *tc = hf_text_object(path, root);
    int rc = tc ? 0 : -1;
    if (rc == 0) rc = hf_read_dims(path, tc, out);
    if (rc == 0) rc = hf_read_layer_types(path, tc, out);
    if (rc == 0) rc = hf_read_global(path, tc, out);
    if (rc == 0) rc = hf_read_ple_moe(path, tc, out);
    if (rc == 0) rc = hf_read_rope(path, tc, out);
    if (rc == 0) rc = hf_read_fixed(path, tc);
    json_decref(root);
    out->name = NULL;
    return rc;
}

/* ---- matching ---- */

enum hf_kind { HF_INT, HF_FLOAT, HF_LAYER_TYPES };

/* Desc fields in the order a reader checks them, with their config.json spelling. */
static const struct {
    const char *json;
    size_t off;
    enum hf_kind kind;
} hf_fields[] = {
    {"hidden_size", offsetof(g4_model_desc, d_model), HF_INT},
    {"num_hidden_layers", offsetof(g4_model_desc, n_layer), HF_INT},
    {"layer_types", offsetof(g4_model_desc, layer_kind), HF_LAYER_TYPES},
    {"num_attention_heads", offsetof(g4_model_desc, n_head), HF_INT},
    {"num_key_value_heads", offsetof(g4_model_desc, n_kv_head_local), HF_INT},
    {"num_global_key_value_heads", offsetof(g4_model_desc, n_kv_head_global), HF_INT},
    {"head_dim", offsetof(g4_model_desc, head_dim_local), HF_INT},
    {"global_head_dim", offsetof(g4_model_desc, head_dim_global), HF_INT},
    {"attention_k_eq_v", offsetof(g4_model_desc, k_eq_v), HF_INT},
    {"sliding_window", offsetof(g4_model_desc, window), HF_INT},
    {"intermediate_size", offsetof(g4_model_desc, d_ff), HF_INT},
    {"use_double_wide_mlp", offsetof(g4_model_desc, double_wide), HF_INT},
    {"num_kv_shared_layers", offsetof(g4_model_desc, n_kv_shared), HF_INT},
    {"hidden_size_per_layer_input", offsetof(g4_model_desc, d_ple), HF_INT},
    {"vocab_size", offsetof(g4_model_desc, n_vocab), HF_INT},
    {"vocab_size_per_layer_input", offsetof(g4_model_desc, n_vocab_ple), HF_INT},
    {"num_experts", offsetof(g4_model_desc, n_expert), HF_INT},
    {"top_k_experts", offsetof(g4_model_desc, top_k), HF_INT},
    {"moe_intermediate_size", offsetof(g4_model_desc, d_expert), HF_INT},
    {"rope_parameters.sliding_attention.rope_theta", offsetof(g4_model_desc, rope_base_local),
     HF_FLOAT},
    {"rope_parameters.full_attention.rope_theta", offsetof(g4_model_desc, rope_base_global),
     HF_FLOAT},
    {"rope_parameters.full_attention.partial_rotary_factor",
     offsetof(g4_model_desc, rope_partial_global), HF_FLOAT},
    {"final_logit_softcapping", offsetof(g4_model_desc, softcap), HF_FLOAT},
    {"rms_norm_eps", offsetof(g4_model_desc, eps), HF_FLOAT},
};

static const char *hf_kind_name(int k) {
    return k == G4_LAYER_FULL ? "full_attention" : "sliding_attention";
}

/* Writes the mismatch sentence for field i into why; returns 1 when field i differs. */
static int hf_field_differs(size_t i, const g4_model_desc *a, const g4_model_desc *b, char *why,
                            size_t whylen) {
    const char *pa = (const char *)a + hf_fields[i].off, *pb = (const char *)b + hf_fields[i].off;
    const char *js = hf_fields[i].json, *name = b->name ? b->name : "(unnamed)";
    if (hf_fields[i].kind == HF_INT) {
        int va = *(const int *)(const void *)pa, vb = *(const int *)(const void *)pb;
        if (va == vb) return 0;
        if (whylen)
            snprintf(why, whylen, "config.json field %s is %d but model %s has %d", js, va, name,
                     vb);
        return 1;
    }
    if (hf_fields[i].kind == HF_FLOAT) {
        float va = *(const float *)(const void *)pa, vb = *(const float *)(const void *)pb;
        /* relative 1e-6: JSON round trips of 1e-6 or 1e6 through float and double differ in
         * the last bits, which is not a different model */
        if (fabsf(va - vb) <= 1e-6f * fmaxf(fabsf(va), fabsf(vb))) return 0;
        if (whylen)
            snprintf(why, whylen, "config.json field %s is %g but model %s has %g", js, (double)va,
                     name, (double)vb);
        return 1;
    }
    int n = a->n_layer < b->n_layer ? a->n_layer : b->n_layer;
    for (int l = 0; l < n && l < G4_MAX_LAYERS; l++) {
        if (a->layer_kind[l] == b->layer_kind[l]) continue;
        if (whylen)
            snprintf(why, whylen,
                     "config.json field layer_types[%d] is %s but model %s "
                     "has %s",
                     l, hf_kind_name(a->layer_kind[l]), name, hf_kind_name(b->layer_kind[l]));
        return 1;
    }
    return 0;
}

/* Number of differing fields; the first one's sentence goes into why. */
static int hf_count_diffs(const g4_model_desc *a, const g4_model_desc *b, char *why,
                          size_t whylen) {
    int n = 0;
    for (size_t i = 0; i < sizeof hf_fields / sizeof hf_fields[0]; i++)
        n += hf_field_differs(i, a, b, n == 0 ? why : NULL, n == 0 ? whylen : 0);
    return n;
}

const g4_model_desc *hfconfig_match(const g4_model_desc *ckpt, const char *wanted_name, char *why,
                                    size_t whylen) {
    if (whylen) why[0] = '\0';
    int best = -1, best_diffs = INT_MAX;
    for (int i = 0; i < g4_n_models; i++) {
        const g4_model_desc *m = g4_models[i];
        if (wanted_name && (!m->name || strcmp(m->name, wanted_name) != 0)) continue;
        int d = hf_count_diffs(ckpt, m, NULL, 0);
        if (d == 0) return m;
        if (d < best_diffs) {
            best = i;
            best_diffs = d;
        }
    }
    if (best < 0) {
        if (whylen && wanted_name)
            snprintf(why, whylen, "no compiled-in model named %s", wanted_name);
        else if (whylen)
            snprintf(why, whylen, "no compiled-in models");
        return NULL;
    }
    hf_count_diffs(ckpt, g4_models[best], why, whylen);
    return NULL;
}
