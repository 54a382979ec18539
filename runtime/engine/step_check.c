/* runtime/engine/step_check.c - see step_check.h. */
#include "runtime/engine/step_check.h"

#include "runtime/base/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The buffer a named step writes and its row width, or NULL for steps this check skips (the
 * KV writes of attn_prep are checked through the attention that reads them). */
static const bf16_t *written(const g4_state *s, const g4_model_desc *m, int layer, const char *step,
                             size_t *width) {
    int full = layer >= 0 && m->layer_kind[layer] == G4_LAYER_FULL;
    size_t hd = (size_t)(full ? m->head_dim_global : m->head_dim_local);
    size_t kv = hd * (size_t)(full ? m->n_kv_head_global : m->n_kv_head_local);
    size_t H = (size_t)m->d_model, ff = layer >= 0 ? (size_t)g4_model_d_ff(m, layer) : 0;
    static const char *const to_xn[] = {"input_norm", "next_input_norm", "pre_ff_norm",
                                        "router_norm", "router_scale"};
    static const char *const to_t[] = {"o_proj", "down_proj", "experts", "post_ff_norm_2"};
    static const char *const to_x[] = {"post_attn_norm", "post_ff_norm", "layer_scalar", "embed"};
    for (size_t i = 0; i < sizeof to_xn / sizeof *to_xn; i++)
        if (!strcmp(step, to_xn[i])) return *width = H, s->xn;
    for (size_t i = 0; i < sizeof to_t / sizeof *to_t; i++)
        if (!strcmp(step, to_t[i])) return *width = H, s->t;
    for (size_t i = 0; i < sizeof to_x / sizeof *to_x; i++)
        if (!strcmp(step, to_x[i])) return *width = H, s->x;
    if (!strcmp(step, "q_proj") || !strcmp(step, "attn_prep"))
        return *width = (size_t)m->n_head * hd, s->q;
    if (!strcmp(step, "k_proj")) return *width = kv, s->k;
    if (!strcmp(step, "v_proj")) return *width = kv, s->v;
    if (!strcmp(step, "attention")) return *width = (size_t)m->n_head * hd, s->attn;
    if (!strcmp(step, "gate_proj") || !strcmp(step, "up_proj")) return *width = 2 * ff, s->gu;
    if (!strcmp(step, "geglu")) return *width = ff, s->act;
    if (!strcmp(step, "post_ff_norm_1")) return *width = H, s->m1;
    if (!strcmp(step, "pre_ff_norm_2")) return *width = H, s->xn2;
    if (!strcmp(step, "router_proj")) return *width = (size_t)m->n_expert, s->router_logits;
    return NULL;
}

static int bf16_finite(uint16_t v) { return (v & 0x7f80u) != 0x7f80u; }

static int check_one(g4_state *s, int layer, const char *step) {
    step_check *c = s->hook_ctx;
    size_t width = 0;
    const bf16_t *buf = written(s, c->model, layer, step, &width);
    int rows = s->rows;
    if (!strcmp(step, "lm_head") || !strcmp(step, "softcap")) {
        buf = s->logits;
        width = (size_t)c->model->n_vocab;
        rows = s->out_rows;
    }
    if (!buf || width == 0 || rows <= 0) return 0;
    size_t n = (size_t)rows * width;
    const uint16_t *v = buf;
    if (c->copy_to_host) {
        if (n > c->host_elems) {
            uint16_t *h = realloc(c->host, n * sizeof *h);
            if (!h) return K_ERR_NO_MEMORY;
            c->host = h;
            c->host_elems = n;
        }
        if (c->copy_to_host(c->host, buf, n * sizeof *c->host, s->stream) != 0) return K_ERR_DEVICE;
        v = c->host;
    }
    for (size_t i = 0; i < n; i++) {
        if (bf16_finite(v[i])) continue;
        int r = (int)(i / width), row = rows == s->rows ? r : c->out_src[r];
        int bad = 0;
        for (size_t j = (size_t)r * width; j < (size_t)(r + 1) * width; j++)
            bad += !bf16_finite(v[j]);
        int rows_bad = 0;
        for (int q = r; q < rows; q++)
            for (size_t j = 0; j < width; j++)
                if (!bf16_finite(v[(size_t)q * width + j])) {
                    rows_bad++;
                    break;
                }
        log_msg(LOG_ERROR, "engine",
                "debug.check_finite: L%02d.%s wrote a non-finite value: row %d of %d (slot %d, "
                "position %d), element %zu of %zu, %d non-finite in the row, %d rows from it on",
                layer, step, r, rows, c->seq[row], c->pos[row], i % width, width, bad, rows_bad);
        return K_ERR_NONFINITE;
    }
    return 0;
}

/* A fused step ("a+b+c": a row_ops or a projection group) is checked member by member, each
 * member's buffer as the step left it, so the log names the member whose output holds the
 * value (a row op's buffer may have been rewritten by a later op of its group: then the later
 * op's value is what is found there). */
int step_check_finite(g4_state *s, int layer, const char *step) {
    if (!strchr(step, '+')) return check_one(s, layer, step);
    char name[64];
    for (const char *p = step; *p;) {
        const char *end = strchr(p, '+');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= sizeof name) return check_one(s, layer, step); /* no member this long */
        memcpy(name, p, len);
        name[len] = '\0';
        int rc = check_one(s, layer, name);
        if (rc != 0) return rc;
        p += len + (end != NULL);
    }
    return 0;
}
