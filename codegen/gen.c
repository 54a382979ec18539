/* codegen/gen.c - the schedule generator: graph/models/<name>.ini in, build/gen/ out.
 *
 * Owns: turning each model description into (1) <model>_shape.h, its constants prefixed by
 * the model's name, (2) schedule_<model>.c, a constant layer table plus one straight-line
 * function per layer kind of named STEP()s against op_* calls, one forward function, and per
 * local-pool variant (local_bf16, local_fp8) only what differs: the pool width the forward
 * checks and the schedule entry, and (3) models.c and schedules.c,
 * the tables of every compiled-in model and schedule.
 * Does not own: what an op computes (kernels/) or how state is allocated (runtime/).
 *
 * Output is deterministic (no timestamps, models in command-line order, which build.sh sorts)
 * and already in the project's clang-format style: argument structs are written as local
 * designated initializers with one field per line and a trailing comma, which clang-format
 * leaves exactly as written. tests/golden/ holds a copy that the tests diff. */
#include "graph/model_desc.h"
#include "kernels/ref/ref.h"

#include <ctype.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gen_model {
    g4_model_desc d;
    char name[64];
    char lower[64]; /* C identifier prefix: tiny_moe */
    char upper[64]; /* constant prefix: TINY_MOE */
    char source[256];
    char title[256];
} gen_model;

static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("codegen: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

static int parse_int(const char *v, int *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || x < 0 || x > 1 << 30) return -1;
    *out = (int)x;
    return 0;
}

static int parse_float(const char *v, float *out) {
    char *end;
    double x = strtod(v, &end);
    if (*v == '\0' || *end != '\0') return -1;
    *out = (float)x;
    return 0;
}

static int parse_kinds(const char *v, g4_model_desc *d) {
    int n = 0;
    for (const char *p = v; *p; p++) {
        if (*p == ' ') continue;
        if (n >= G4_MAX_LAYERS || (*p != 'S' && *p != 'F')) return -1;
        d->layer_kind[n++] = *p;
    }
    return n == d->n_layer ? 0 : -1;
}

static int on_key(void *user, const char *section, const char *key, const char *value) {
    gen_model *m = user;
    g4_model_desc *d = &m->d;
    if (strcmp(section, "model") != 0) return 0;
    struct {
        const char *key;
        int *dst;
    } ints[] = {{"d_model", &d->d_model},
                {"n_layer", &d->n_layer},
                {"n_head", &d->n_head},
                {"n_kv_head_local", &d->n_kv_head_local},
                {"n_kv_head_global", &d->n_kv_head_global},
                {"head_dim_local", &d->head_dim_local},
                {"head_dim_global", &d->head_dim_global},
                {"k_eq_v", &d->k_eq_v},
                {"window", &d->window},
                {"d_ff", &d->d_ff},
                {"double_wide", &d->double_wide},
                {"n_kv_shared", &d->n_kv_shared},
                {"d_ple", &d->d_ple},
                {"n_vocab", &d->n_vocab},
                {"n_vocab_ple", &d->n_vocab_ple},
                {"n_expert", &d->n_expert},
                {"top_k", &d->top_k},
                {"d_expert", &d->d_expert}};
    struct {
        const char *key;
        float *dst;
    } floats[] = {{"rope_base_local", &d->rope_base_local},
                  {"rope_base_global", &d->rope_base_global},
                  {"rope_partial_global", &d->rope_partial_global},
                  {"softcap", &d->softcap},
                  {"eps", &d->eps}};
    if (strcmp(key, "name") == 0) {
        return snprintf(m->name, sizeof m->name, "%s", value) < (int)sizeof m->name;
    }
    if (strcmp(key, "layer_kinds") == 0) return parse_kinds(value, d) == 0;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (strcmp(key, ints[i].key) == 0) return parse_int(value, ints[i].dst) == 0;
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        if (strcmp(key, floats[i].key) == 0) return parse_float(value, floats[i].dst) == 0;
    return 0;
}

static int read_title(const char *path, char *title, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256] = "";
    if (fgets(line, sizeof line, f) && line[0] == ';') {
        line[strcspn(line, "\n")] = '\0';
        snprintf(title, len, "%s", line[1] == ' ' ? line + 2 : line + 1);
    }
    fclose(f);
    return 0;
}

static int load_model(const char *path, gen_model *m) {
    memset(m, 0, sizeof *m);
    /* layer_kinds needs n_layer first: read twice, the second pass sees it */
    for (int pass = 0; pass < 2; pass++) {
        int rc = ini_parse(path, on_key, m);
        if (rc != 0 && pass == 1) return fail("%s:%d: bad or unknown key", path, rc);
    }
    if (m->name[0] == '\0' || m->d.n_layer <= 0) return fail("%s: name or n_layer missing", path);
    const char *base = strrchr(path, '/');
    snprintf(m->source, sizeof m->source, "graph/models/%s", base ? base + 1 : path);
    read_title(path, m->title, sizeof m->title);
    for (size_t i = 0; m->name[i]; i++) {
        char c = m->name[i];
        m->lower[i] = c == '-' ? '_' : c;
        m->upper[i] = c == '-' ? '_' : (char)toupper((unsigned char)c);
    }
    m->d.name = m->name;
    for (int l = 0; l < m->d.n_layer; l++)
        if (g4_model_kv_donor(&m->d, l) < 0) return fail("%s: layer %d has no KV donor", path, l);
    return 0;
}

/* A float literal that reads back exactly and is valid C (a dot or an exponent, then f). */
static const char *flit(float v, char *buf) {
    char digits[24];
    snprintf(digits, sizeof digits, "%.9g", (double)v);
    snprintf(buf, 32, "%s%sf", digits, strpbrk(digits, ".eEn") ? "" : ".0");
    return buf;
}

static FILE *open_out(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) fail("cannot write %s", path);
    return f;
}

/* ---- <model>_shape.h ---- */

static int n_rot_global(const g4_model_desc *d) {
    return (int)(d->rope_partial_global * (float)d->head_dim_global) / 2;
}

static void emit_shape(FILE *f, const gen_model *m) {
    const g4_model_desc *d = &m->d;
    char b[32];
    const char *u = m->upper;
    fprintf(f, "/* GENERATED by codegen/gen.c from %s; do not edit. */\n", m->source);
    fprintf(f, "/* %s */\n", m->title);
    fprintf(f, "#ifndef G4_GEN_%s_SHAPE_H\n#define G4_GEN_%s_SHAPE_H\n\n", u, u);
    fprintf(f, "#include \"graph/model_desc.h\"\n\n");
    fprintf(f, "#define %s_D_MODEL %d\n", u, d->d_model);
    fprintf(f, "#define %s_N_LAYER %d\n", u, d->n_layer);
    fprintf(f, "#define %s_N_HEAD %d\n", u, d->n_head);
    fprintf(f, "#define %s_N_KV_HEAD_LOCAL %d\n", u, d->n_kv_head_local);
    fprintf(f, "#define %s_N_KV_HEAD_GLOBAL %d\n", u, d->n_kv_head_global);
    fprintf(f, "#define %s_HEAD_DIM_LOCAL %d\n", u, d->head_dim_local);
    fprintf(f, "#define %s_HEAD_DIM_GLOBAL %d\n", u, d->head_dim_global);
    fprintf(f, "#define %s_WINDOW %d\n", u, d->window);
    fprintf(f, "#define %s_D_FF %d\n", u, d->d_ff);
    fprintf(f, "#define %s_N_VOCAB %d\n", u, d->n_vocab);
    fprintf(f, "#define %s_N_EXPERT %d\n", u, d->n_expert);
    fprintf(f, "#define %s_TOP_K %d\n", u, d->top_k);
    fprintf(f, "#define %s_D_EXPERT %d\n", u, d->d_expert);
    fprintf(f, "#define %s_D_PLE %d\n", u, d->d_ple);
    fprintf(f, "#define %s_N_VOCAB_PLE %d\n", u, d->n_vocab_ple);
    fprintf(f, "#define %s_N_ROT_LOCAL %d\n", u, d->head_dim_local / 2);
    fprintf(f, "#define %s_N_ROT_GLOBAL %d\n", u, n_rot_global(d));
    fprintf(f, "#define %s_ROPE_BASE_LOCAL %s\n", u, flit(d->rope_base_local, b));
    fprintf(f, "#define %s_ROPE_BASE_GLOBAL %s\n", u, flit(d->rope_base_global, b));
    fprintf(f, "#define %s_EPS %s\n", u, flit(d->eps, b));
    fprintf(f, "#define %s_SOFTCAP %s\n", u, flit(d->softcap, b));
    fprintf(f, "/* bf16(sqrt(d_model)): HF casts the embedding scale to bf16 */\n");
    fprintf(f, "#define %s_EMBED_SCALE %s\n", u,
            flit(ref_round_bf16((float)sqrt((double)d->d_model)), b));
    fprintf(f, "/* d_model^-0.5 as HF's Python float, applied in fp32 */\n");
    fprintf(f, "#define %s_INV_SQRT_D_MODEL %s\n", u,
            flit((float)pow((double)d->d_model, -0.5), b));
    if (d->d_ple) {
        fprintf(f, "#define %s_PLE_EMBED_SCALE %s\n", u,
                flit(ref_round_bf16((float)sqrt((double)d->d_ple)), b));
        fprintf(f, "#define %s_PLE_COMBINE_SCALE %s\n", u, flit((float)pow(2.0, -0.5), b));
    }
    fprintf(f, "\nextern const g4_model_desc g4_model_%s;\n\n#endif\n", m->lower);
}

/* ---- models.c ---- */

static void emit_models(FILE *f, const gen_model *ms, int n) {
    char b[32];
    fprintf(f, "/* GENERATED by codegen/gen.c from graph/models/<name>.ini, all of them; do not "
               "edit. */\n");
    fprintf(f, "#include \"graph/model_desc.h\"\n\n#include <string.h>\n\n");
    for (int i = 0; i < n; i++) {
        const g4_model_desc *d = &ms[i].d;
        fprintf(f, "/* %s */\nconst g4_model_desc g4_model_%s = {\n", ms[i].title, ms[i].lower);
        fprintf(f, "    .name = \"%s\",\n", d->name);
#define I(field) fprintf(f, "    ." #field " = %d,\n", d->field)
        I(d_model), I(n_layer), I(n_head), I(n_kv_head_local), I(n_kv_head_global);
        I(head_dim_local), I(head_dim_global), I(k_eq_v), I(window), I(d_ff), I(double_wide);
        I(n_kv_shared), I(d_ple), I(n_vocab), I(n_vocab_ple), I(n_expert), I(top_k), I(d_expert);
#undef I
#define FL(field) fprintf(f, "    ." #field " = %s,\n", flit(d->field, b))
        FL(rope_base_local), FL(rope_base_global), FL(rope_partial_global), FL(softcap), FL(eps);
#undef FL
        fprintf(f, "    .layer_kind = \"%s\",\n};\n\n", d->layer_kind);
    }
    fprintf(f, "const g4_model_desc *const g4_models[] = {\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "    /* %s */\n    &g4_model_%s,\n", ms[i].name, ms[i].lower);
    fprintf(f, "};\n\nconst int g4_n_models = %d;\n\n", n);
    fprintf(f, "const g4_model_desc *g4_model_find(const char *name) {\n");
    fprintf(f, "    for (int i = 0; i < g4_n_models; i++)\n");
    fprintf(f, "        if (strcmp(g4_models[i]->name, name) == 0) return g4_models[i];\n");
    fprintf(f, "    return NULL;\n}\n");
}

/* ---- schedule_<model>.c ---- */

/* Consecutive row ops of a layer (rmsnorm, mul_vec_scale, scale_add over s->rows) become one
 * op_row_ops step: one kernel instead of one per op, the same bits (kernels/kernels.h,
 * k_row_ops_args). Each op still gets its own argument struct; its STEP() waits here until the
 * next step that is not a row op, or the end of the layer, closes the group. Off outside the
 * layer functions, whose row ops run over other row counts. */
static struct {
    int on, n, groups; /* groups: so far in this layer function, for the struct's name */
    const char *layer;
    char op[K_ROW_OPS_MAX][32];
    char var[K_ROW_OPS_MAX][64];
} row_group;

/* The stream the steps emitted now run on: s->side for a MoE layer's router and experts under
 * serve.moe_branches (emit_ffn_branches), else s->stream. Groups are flushed before it changes. */
static const char *emit_stream = "s->stream";

static int is_row_op(const char *op) {
    return !strcmp(op, "rmsnorm") || !strcmp(op, "mul_vec_scale") || !strcmp(op, "scale_add");
}

/* A fused step's name ("a+b+c") and its members' initializer list ("a<suffix>, b<suffix>"). */
static void join_members(const char (*var)[64], int n, const char *suffix, char *step,
                         size_t step_size, char *list, size_t list_size) {
    step[0] = list[0] = 0;
    for (int i = 0; i < n; i++) {
        size_t ls = strlen(step), ll = strlen(list);
        snprintf(step + ls, step_size - ls, "%s%s", i ? "+" : "", var[i]);
        snprintf(list + ll, list_size - ll, "%s%s%s", i ? ", " : "", var[i], suffix);
    }
}

static void row_group_flush(FILE *f) {
    int n = row_group.n;
    row_group.n = 0;
    if (n == 0) return;
    if (n == 1) {
        fprintf(f, "    STEP(%s, \"%s\", op_%s(&%s, %s));\n", row_group.layer, row_group.var[0],
                row_group.op[0], row_group.var[0], emit_stream);
        return;
    }
    char var[32], step[K_ROW_OPS_MAX * 66], list[K_ROW_OPS_MAX * 70];
    snprintf(var, sizeof var, "row_ops_%d", ++row_group.groups);
    join_members(row_group.var, n, "_op", step, sizeof step, list, sizeof list);
    for (int i = 0; i < n; i++) {
        char kind[40];
        snprintf(kind, sizeof kind, "%s", row_group.op[i]);
        for (char *c = kind; *c; c++)
            *c = (char)toupper((unsigned char)*c);
        fprintf(f, "    const k_row_op %s_op = {\n", row_group.var[i]);
        fprintf(f, "        .kind = K_ROW_%s,\n", kind);
        fprintf(f, "        .u.%s = %s,\n", row_group.op[i], row_group.var[i]);
        fprintf(f, "    };\n");
    }
    fprintf(
        f, "    /* the %d row ops above in one kernel, each as alone (kernels/ref/norm_ref.c) */\n",
        n);
    fprintf(f, "    const k_row_ops_args %s = {\n", var);
    fprintf(f, "        .rows = s->rows,\n");
    fprintf(f, "        .n_ops = %d,\n", n);
    fprintf(f, "        .op = {%s},\n", list);
    fprintf(f, "    };\n");
    /* clang-format's break for a line past the column limit (100): after the name, the call
     * aligned under the first argument */
    char call[64];
    snprintf(call, sizeof call, "op_row_ops(&%s, %s));", var, emit_stream);
    if (strlen("    STEP(, \"\", ") + strlen(row_group.layer) + strlen(step) + strlen(call) <= 100)
        fprintf(f, "    STEP(%s, \"%s\", %s\n", row_group.layer, step, call);
    else
        fprintf(f, "    STEP(%s, \"%s\",\n         %s\n", row_group.layer, step, call);
}

/* Consecutive projections of a layer that read the same x with the same k (q, k and v; gate
 * and up) become one op_gemm_group step: each member computed as alone, in one launch where
 * the backend can (kernels/kernels.h, k_gemm_group_args). Grouped like the row ops above, and
 * only inside the layer functions. */
static struct {
    int n, groups;
    const char *layer;
    char var[K_GEMM_GROUP_MAX][64];
    char x[96], k[160], rows[96];
} gemm_group;

static void gemm_group_flush(FILE *f) {
    int n = gemm_group.n;
    gemm_group.n = 0;
    if (n == 0) return;
    if (n == 1) {
        fprintf(f, "    STEP(%s, \"%s\", op_gemm(&%s, %s));\n", gemm_group.layer, gemm_group.var[0],
                gemm_group.var[0], emit_stream);
        return;
    }
    char var[32], step[K_GEMM_GROUP_MAX * 66], list[K_GEMM_GROUP_MAX * 66];
    snprintf(var, sizeof var, "gemm_group_%d", ++gemm_group.groups);
    join_members(gemm_group.var, n, "", step, sizeof step, list, sizeof list);
    fprintf(
        f,
        "    /* the %d projections above of one input, each as alone (kernels/ref/gemm_ref.c) */\n",
        n);
    fprintf(f, "    const k_gemm_group_args %s = {\n", var);
    fprintf(f, "        .n_gemms = %d,\n", n);
    fprintf(f, "        .g = {%s},\n", list);
    fprintf(f, "    };\n");
    fprintf(f, "    STEP(%s, \"%s\", op_gemm_group(&%s, %s));\n", gemm_group.layer, step, var,
            emit_stream);
}

/* One named step is a local argument struct, one field per line, then its STEP() line. */
static void step_begin(FILE *f, const char *comment, const char *op, const char *var) {
    if (!is_row_op(op)) row_group_flush(f);
    if (strcmp(op, "gemm") != 0) gemm_group_flush(f);
    fprintf(f, "    /* %s */\n", comment);
    fprintf(f, "    const k_%s_args %s = {\n", op, var);
}

__attribute__((format(printf, 3, 4))) static void fld(FILE *f, const char *name, const char *fmt,
                                                      ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(f, "        .%s = ", name);
    vfprintf(f, fmt, ap);
    fprintf(f, ",\n");
    va_end(ap);
}

static void step_end(FILE *f, const char *layer, const char *op, const char *var) {
    fprintf(f, "    };\n");
    if (row_group.on && is_row_op(op)) {
        if (row_group.n == K_ROW_OPS_MAX) row_group_flush(f);
        row_group.layer = layer;
        snprintf(row_group.op[row_group.n], sizeof row_group.op[0], "%s", op);
        snprintf(row_group.var[row_group.n], sizeof row_group.var[0], "%s", var);
        row_group.n++;
        return;
    }
    fprintf(f, "    STEP(%s, \"%s\", op_%s(&%s, %s));\n", layer, var, op, var, emit_stream);
}

static void rmsnorm_step(FILE *f, const gen_model *m, const char *layer, const char *var,
                         const char *comment, const char *out, const char *in, const char *w,
                         const char *residual, const char *rows, const char *width) {
    step_begin(f, comment, "rmsnorm", var);
    fld(f, "out", "%s", out);
    fld(f, "in", "%s", in);
    if (w) fld(f, "w", "%s", w);
    if (residual) fld(f, "residual", "%s", residual);
    fld(f, "rows", "%s", rows);
    fld(f, "width", "%s", width);
    fld(f, "eps", "%s_EPS", m->upper);
    step_end(f, layer, "rmsnorm", var);
}

static void gemm_step(FILE *f, const char *layer, const char *var, const char *comment,
                      const char *y, const char *x, const char *w, const char *rows, const char *n,
                      const char *k, const char *ldy, const char *plan) {
    if (gemm_group.n && (strcmp(gemm_group.x, x) != 0 || strcmp(gemm_group.k, k) != 0 ||
                         strcmp(gemm_group.rows, rows) != 0 || gemm_group.n == K_GEMM_GROUP_MAX))
        gemm_group_flush(f);
    step_begin(f, comment, "gemm", var);
    fld(f, "y", "%s", y);
    fld(f, "x", "%s", x);
    fld(f, "w", "%s", w);
    fld(f, "m", "%s", rows);
    fld(f, "n", "%s", n);
    fld(f, "k", "%s", k);
    if (ldy) fld(f, "ldy", "%s", ldy);
    fld(f, "plan", "%s", plan);
    /* the step's prompt rows, last (engine_batch.prompt): a weight with a prompt plan runs
     * them on it; the out rows' projections (the LM head) take every row alike */
    if (strcmp(rows, "s->rows") == 0) fld(f, "prompt_rows", "s->rows - s->decode_rows");
    /* inside a layer function the group's STEP comes at its flush; a projection that wrote its
     * own input could not share a step with the ones reading that input */
    if (row_group.on && strcmp(y, x) != 0) {
        fprintf(f, "    };\n");
        gemm_group.layer = layer;
        snprintf(gemm_group.var[gemm_group.n], sizeof gemm_group.var[0], "%s", var);
        snprintf(gemm_group.x, sizeof gemm_group.x, "%s", x);
        snprintf(gemm_group.k, sizeof gemm_group.k, "%s", k);
        snprintf(gemm_group.rows, sizeof gemm_group.rows, "%s", rows);
        gemm_group.n++;
        return;
    }
    step_end(f, layer, "gemm", var);
}

enum { KIND_SLIDING_OWN, KIND_SLIDING_SHARED, KIND_FULL_OWN, KIND_FULL_SHARED, N_KINDS };
static const char *const kind_names[N_KINDS] = {"sliding", "sliding_shared", "full", "full_shared"};

static int layer_kind_of(const g4_model_desc *d, int l) {
    int shared = g4_model_kv_donor(d, l) != l;
    if (d->layer_kind[l] == G4_LAYER_FULL) return shared ? KIND_FULL_SHARED : KIND_FULL_OWN;
    return shared ? KIND_SLIDING_SHARED : KIND_SLIDING_OWN;
}

static void emit_attention(FILE *f, const gen_model *m, int kind) {
    const char *u = m->upper;
    int full = kind == KIND_FULL_OWN || kind == KIND_FULL_SHARED;
    int owns = kind == KIND_SLIDING_OWN || kind == KIND_FULL_OWN;
    const char *fam = full ? "GLOBAL" : "LOCAL";
    char dm[160], qn[320], kn[320], hd[160]; /* an upper name of up to 63 and its suffixes */
    snprintf(dm, sizeof dm, "%s_D_MODEL", u);
    snprintf(hd, sizeof hd, "%s_HEAD_DIM_%s", u, fam);
    snprintf(qn, sizeof qn, "%s_N_HEAD * %s", u, hd);
    snprintf(kn, sizeof kn, "%s_N_KV_HEAD_%s * %s", u, fam, hd);
    /* input_layernorm ran at the end of the layer before (emit_layer_fn; layer 0's after the
     * embedding, emit_forward), in that layer's last row-op group */
    gemm_step(f, "il", "q_proj", "self_attn.q_proj (kernels/ref/gemm_ref.c)", "s->q", "s->xn",
              "L->q", "s->rows", qn, dm, NULL, "L->plan_q");
    int own_v = owns && !(full && m->d.k_eq_v);
    if (owns)
        gemm_step(f, "il", "k_proj", "self_attn.k_proj (kernels/ref/gemm_ref.c)", "s->k", "s->xn",
                  "L->k", "s->rows", kn, dm, NULL, "L->plan_k");
    if (own_v)
        gemm_step(f, "il", "v_proj", "self_attn.v_proj (kernels/ref/gemm_ref.c)", "s->v", "s->xn",
                  "L->v", "s->rows", kn, dm, NULL, "L->plan_v");
    step_begin(f,
               owns ? "q_norm, k_norm, v_norm, RoPE, KV write (kernels/ref/attn_ref.c)"
                    : "q_norm and RoPE; K/V are the donor layer's (kernels/ref/attn_ref.c)",
               "attn_prep", "attn_prep");
    fld(f, "q", "s->q");
    if (owns) {
        fld(f, "k_raw", "s->k");
        fld(f, "v_raw", "%s", own_v ? "s->v" : "s->k /* k_eq_v: V from the raw K */");
        fld(f, "k_norm", "L->k_norm");
    }
    fld(f, "q_norm", "L->q_norm");
    fld(f, "pos", "s->pos");
    fld(f, "seq", "s->seq");
    fld(f, "kv", "s->kv_%s", full ? "global" : "local");
    fld(f, "rows", "s->rows");
    fld(f, "n_head", "%s_N_HEAD", u);
    fld(f, "kv_layer", "I->kv_layer");
    fld(f, "write_kv", "%d", owns);
    fld(f, "n_rot", "%s_N_ROT_%s", u, fam);
    fld(f, "rope_base", "%s_ROPE_BASE_%s", u, fam);
    fld(f, "eps", "%s_EPS", u);
    step_end(f, "il", "attn_prep", "attn_prep");
    step_begin(f,
               full ? "attention over the whole context (kernels/ref/attn_ref.c)"
                    : "attention over the window i-W < j <= i (kernels/ref/attn_ref.c)",
               "attention", "attention");
    fld(f, "out", "s->attn");
    fld(f, "q", "s->q");
    fld(f, "pos", "s->pos");
    fld(f, "seq", "s->seq");
    fld(f, "kv", "s->kv_%s", full ? "global" : "local");
    fld(f, "rows", "s->rows");
    fld(f, "n_head", "%s_N_HEAD", u);
    fld(f, "kv_layer", "I->kv_layer");
    fld(f, "max_pos", "s->max_pos");
    fld(f, "splits_per_block", "s->attn_splits_per_block");
    fld(f, "prompt_rows", "s->rows - s->decode_rows"); /* serve.attn_prompt */
    if (full)
        fld(f, "window", "0 /* full attention */");
    else
        fld(f, "window", "%s_WINDOW", u);
    step_end(f, "il", "attention", "attention");
    gemm_step(f, "il", "o_proj", "self_attn.o_proj (kernels/ref/gemm_ref.c)", "s->t", "s->attn",
              "L->o", "s->rows", dm, qn, NULL, "L->plan_o");
    rmsnorm_step(f, m, "il", "post_attn_norm",
                 "post_attention_layernorm, then the residual add (kernels/ref/norm_ref.c)", "s->x",
                 "s->t", "L->post_attn_norm", "s->x", "s->rows", dm);
}

/* The feed-forward's pieces, shared by emit_ffn and emit_ffn_branches. dm: "<MODEL>_D_MODEL". */

/* The dense MLP on xn (gate|up, GeGLU, down) into t */
static void emit_dense_mlp(FILE *f, const char *dm) {
    gemm_step(f, "il", "gate_proj", "mlp.gate_proj into the gate half (kernels/ref/gemm_ref.c)",
              "s->gu", "s->xn", "L->gate", "s->rows", "I->d_ff", dm, "2 * I->d_ff", "L->plan_gate");
    gemm_step(f, "il", "up_proj", "mlp.up_proj into the up half (kernels/ref/gemm_ref.c)",
              "s->gu + I->d_ff", "s->xn", "L->up", "s->rows", "I->d_ff", dm, "2 * I->d_ff",
              "L->plan_up");
    step_begin(f, "GeGLU: bf(bf(gelu_tanh(gate)) * up) (kernels/ref/norm_ref.c)", "gelu_mul",
               "geglu");
    fld(f, "out", "s->act");
    fld(f, "a", "s->gu");
    fld(f, "b", "s->gu + I->d_ff");
    fld(f, "rows", "s->rows");
    fld(f, "width", "I->d_ff");
    fld(f, "lda", "2 * I->d_ff");
    fld(f, "ldb", "2 * I->d_ff");
    step_end(f, "il", "gelu_mul", "geglu");
    gemm_step(f, "il", "down_proj", "mlp.down_proj (kernels/ref/gemm_ref.c)", "s->t", "s->act",
              "L->down", "s->rows", dm, "I->d_ff", NULL, "L->plan_down");
}

static void emit_post_ff_norm_1(FILE *f, const gen_model *m, const char *dm) {
    rmsnorm_step(f, m, "il", "post_ff_norm_1",
                 "post_feedforward_layernorm_1 on the dense branch (kernels/ref/norm_ref.c)",
                 "s->m1", "s->t", "L->post_ff_norm_1", NULL, "s->rows", dm);
}

/* The router's input into xr (router norm, then its scale) and the experts' into xn2: row ops */
static void emit_router_norms(FILE *f, const gen_model *m, const char *dm, const char *xr) {
    const char *u = m->upper;
    rmsnorm_step(f, m, "il", "router_norm",
                 "router.norm, weightless, on the residual r (kernels/ref/norm_ref.c)", xr, "s->x",
                 NULL, NULL, "s->rows", dm);
    step_begin(f, "router.scale, then d_model^-0.5 (kernels/ref/norm_ref.c)", "mul_vec_scale",
               "router_scale");
    fld(f, "out", "%s", xr);
    fld(f, "a", "%s", xr);
    fld(f, "v", "L->router_scale");
    fld(f, "rows", "s->rows");
    fld(f, "width", "%s", dm);
    fld(f, "scale", "%s_INV_SQRT_D_MODEL", u);
    step_end(f, "il", "mul_vec_scale", "router_scale");
    /* the experts' input, in the router's row-op group: it reads the residual as the router
     * norm does, into a buffer of its own (the router projection still reads xr) */
    rmsnorm_step(f, m, "il", "pre_ff_norm_2",
                 "pre_feedforward_layernorm_2 on the residual r (kernels/ref/norm_ref.c)", "s->xn2",
                 "s->x", "L->pre_ff_norm_2", NULL, "s->rows", dm);
}

/* The router projection of xr, the route, and the experts of xn2 into out */
static void emit_router_experts(FILE *f, const gen_model *m, const char *dm, const char *xr,
                                const char *out) {
    const char *u = m->upper;
    char ne[160];
    snprintf(ne, sizeof ne, "%s_N_EXPERT", u);
    gemm_step(f, "il", "router_proj", "router.proj (kernels/ref/gemm_ref.c)", "s->router_logits",
              xr, "L->router", "s->rows", ne, dm, NULL, "L->plan_router");
    step_begin(f, "softmax, top-k, renormalise, per_expert_scale (kernels/ref/moe_ref.c)",
               "moe_route", "moe_route");
    fld(f, "idx", "s->moe_idx");
    fld(f, "weight", "s->moe_w");
    fld(f, "logits", "s->router_logits");
    fld(f, "per_expert_scale", "L->per_expert_scale");
    fld(f, "rows", "s->rows");
    fld(f, "n_expert", "%s_N_EXPERT", u);
    fld(f, "top_k", "%s_TOP_K", u);
    step_end(f, "il", "moe_route", "moe_route");
    step_begin(f, "the routed experts (kernels/ref/moe_ref.c)", "moe_experts", "experts");
    fld(f, "out", "%s", out);
    fld(f, "x", "s->xn2");
    fld(f, "gate_up", "L->experts_gate_up");
    fld(f, "down", "L->experts_down");
    fld(f, "idx", "s->moe_idx");
    fld(f, "weight", "s->moe_w");
    fld(f, "rows", "s->rows");
    fld(f, "d_model", "%s", dm);
    fld(f, "d_expert", "%s_D_EXPERT", u);
    fld(f, "n_expert", "%s_N_EXPERT", u);
    fld(f, "top_k", "%s_TOP_K", u);
    fld(f, "prompt_rows", "s->rows - s->decode_rows"); /* serve.prompt_experts */
    step_end(f, "il", "moe_experts", "experts");
}

/* post_feedforward_layernorm_2 on the experts' output t (MoE: plus the dense branch m1), then
 * post_feedforward_layernorm on t and the residual add */
static void emit_ffn_tail(FILE *f, const gen_model *m, const char *dm, const char *t) {
    if (m->d.n_expert)
        rmsnorm_step(f, m, "il", "post_ff_norm_2",
                     "post_feedforward_layernorm_2, plus the dense branch (kernels/ref/norm_ref.c)",
                     t, t, "L->post_ff_norm_2", "s->m1", "s->rows", dm);
    rmsnorm_step(f, m, "il", "post_ff_norm",
                 "post_feedforward_layernorm, then the residual add (kernels/ref/norm_ref.c)",
                 "s->x", t, "L->post_ff_norm", "s->x", "s->rows", dm);
}

static void emit_pre_ff_norm(FILE *f, const gen_model *m, const char *dm) {
    rmsnorm_step(f, m, "il", "pre_ff_norm", "pre_feedforward_layernorm (kernels/ref/norm_ref.c)",
                 "s->xn", "s->x", "L->pre_ff_norm", NULL, "s->rows", dm);
}

static void emit_ffn(FILE *f, const gen_model *m) {
    char dm[160];
    snprintf(dm, sizeof dm, "%s_D_MODEL", m->upper);
    emit_pre_ff_norm(f, m, dm);
    emit_dense_mlp(f, dm);
    if (m->d.n_expert) {
        emit_post_ff_norm_1(f, m, dm);
        emit_router_norms(f, m, dm, "s->xn");
        emit_router_experts(f, m, dm, "s->xn", "s->t");
    }
    emit_ffn_tail(f, m, dm, "s->t");
}

/* serve.moe_branches (docs/decode-design.md, "The MoE branch beside the dense MLP"): a MoE
 * layer's feed-forward with the router and experts on s->side, beside the dense MLP on s->stream.
 * They read the same residual and meet only at post_feedforward_layernorm_2, so each op is the
 * same op on the same values as in emit_ffn, in another order: the same bits. What must differ
 * is the buffers the two branches would share: the router's input goes to xr (emit_ffn reuses
 * xn after the dense MLP has read it) and the experts' output to t2 (emit_ffn reuses t). */
static void emit_ffn_branches(FILE *f, const gen_model *m) {
    char dm[160];
    snprintf(dm, sizeof dm, "%s_D_MODEL", m->upper);
    /* the router's norms in the row-op group that writes r: the branch that waits on them is
     * the longer one */
    emit_router_norms(f, m, dm, "s->xr");
    gemm_group_flush(f);
    row_group_flush(f);
    fprintf(f, "    /* the router and experts from here on s->side, beside the dense MLP */\n");
    fprintf(f, "    STEP(il, \"fork\", op_stream_fork(s->stream, s->side));\n");
    emit_stream = "s->side";
    emit_router_experts(f, m, dm, "s->xr", "s->t2");
    gemm_group_flush(f);
    row_group_flush(f);
    fprintf(f, "    /* the dense MLP on s->stream */\n");
    emit_stream = "s->stream";
    emit_pre_ff_norm(f, m, dm);
    emit_dense_mlp(f, dm);
    emit_post_ff_norm_1(f, m, dm);
    gemm_group_flush(f);
    row_group_flush(f);
    fprintf(f, "    /* the branches meet */\n");
    fprintf(f, "    STEP(il, \"join\", op_stream_join(s->stream, s->side));\n");
    emit_ffn_tail(f, m, dm, "s->t2");
}

static void emit_ple_layer(FILE *f, const gen_model *m) {
    const char *u = m->upper;
    char dm[160], dp[160];
    snprintf(dm, sizeof dm, "%s_D_MODEL", u);
    snprintf(dp, sizeof dp, "%s_D_PLE", u);
    gemm_step(f, "il", "ple_gate", "per_layer_input_gate (kernels/ref/gemm_ref.c)", "s->ple_g",
              "s->x", "L->ple_gate", "s->rows", dp, dm, NULL, "L->plan_ple_gate");
    step_begin(f, "bf(bf(gelu_tanh(gate)) * per-layer input) (kernels/ref/norm_ref.c)", "gelu_mul",
               "ple_act");
    fld(f, "out", "s->ple_g");
    fld(f, "a", "s->ple_g");
    fld(f, "b", "s->ple + il * %s", dp);
    fld(f, "rows", "s->rows");
    fld(f, "width", "%s", dp);
    fld(f, "lda", "%s", dp);
    fld(f, "ldb", "%s_N_LAYER * %s", u, dp);
    step_end(f, "il", "gelu_mul", "ple_act");
    gemm_step(f, "il", "ple_proj", "per_layer_projection (kernels/ref/gemm_ref.c)", "s->t",
              "s->ple_g", "L->ple_proj", "s->rows", dm, dp, NULL, "L->plan_ple_proj");
    rmsnorm_step(f, m, "il", "ple_post_norm",
                 "post_per_layer_input_norm, then the residual add (kernels/ref/norm_ref.c)",
                 "s->x", "s->t", "L->ple_post_norm", "s->x", "s->rows", dm);
}

static const char *const variants[2] = {"local_bf16", "local_fp8"};

/* One function per layer kind, shared by both local-pool variants: the pool's element width
 * travels in the KV view (s->kv_local.elem_bytes) and the ops read it there, so the layers'
 * code is the same for both. */
static void emit_layer_fn(FILE *f, const gen_model *m, int kind, int branches) {
    const char *suffix = branches ? "_branches" : "";
    fprintf(f, "/* %s layer%s */\n", kind_names[kind],
            branches ? ", the router and experts beside the dense MLP (serve.moe_branches)" : "");
    fprintf(f, "static int G4_FN(%s_%s%s)(g4_state *s, int il) {\n", m->lower, kind_names[kind],
            suffix);
    fprintf(f, "    const g4_layer_weights *L = &s->w->layer[il];\n");
    fprintf(f, "    const g4_layer_info *I = &%s_layers[il];\n", m->lower);
    if (m->d.n_expert && !branches)
        fprintf(f, "    if (s->branches) return G4_FN(%s_%s_branches)(s, il);\n", m->lower,
                kind_names[kind]);
    row_group.on = 1;
    row_group.groups = 0;
    gemm_group.groups = 0;
    emit_attention(f, m, kind);
    if (branches)
        emit_ffn_branches(f, m);
    else
        emit_ffn(f, m);
    if (m->d.d_ple) emit_ple_layer(f, m);
    step_begin(f, "layer_scalar, a bf16 multiply (kernels/ref/norm_ref.c)", "scale_add",
               "layer_scalar");
    fld(f, "out", "s->x");
    fld(f, "a", "s->x");
    fld(f, "n", "(size_t)s->rows * %s_D_MODEL", m->upper);
    fld(f, "scale", "L->layer_scalar");
    step_end(f, "il", "scale_add", "layer_scalar");
    /* the next layer's input_layernorm, in this layer's last row-op group: one kernel fewer a
     * layer. The last layer's (on its own weights) is never read: one op of a group once a
     * step, against a branch in every layer function */
    char next_w[192];
    snprintf(next_w, sizeof next_w, "s->w->layer[il + 1 < %s_N_LAYER ? il + 1 : il].input_norm",
             m->upper);
    char dm[160];
    snprintf(dm, sizeof dm, "%s_D_MODEL", m->upper);
    rmsnorm_step(f, m, "il", "next_input_norm",
                 "input_layernorm of the layer after (kernels/ref/norm_ref.c)", "s->xn", "s->x",
                 next_w, NULL, "s->rows", dm);
    gemm_group_flush(f);
    row_group_flush(f);
    row_group.on = 0;
    fprintf(f, "    return 0;\n}\n\n");
}

static void emit_ple_prep(FILE *f, const gen_model *m) {
    const char *u = m->upper;
    char dm[160], lp[320], rows_lp[480], rows_l[320], dp[160];
    snprintf(rows_l, sizeof rows_l, "s->rows * %s_N_LAYER", u);
    snprintf(dp, sizeof dp, "%s_D_PLE", u);
    snprintf(dm, sizeof dm, "%s_D_MODEL", u);
    snprintf(lp, sizeof lp, "%s_N_LAYER * %s_D_PLE", u, u);
    snprintf(rows_lp, sizeof rows_lp, "(size_t)s->rows * %s", lp);
    step_begin(f, "embed_tokens_per_layer, scaled by bf16(sqrt(Dp)) (kernels/ref/norm_ref.c)",
               "embed", "ple_embed");
    fld(f, "out", "s->ple_tok");
    fld(f, "table", "s->w->ple_embed");
    fld(f, "ids", "s->ids");
    fld(f, "rows", "s->rows");
    fld(f, "width", "%s", lp);
    fld(f, "n_vocab", "%s_N_VOCAB_PLE", u);
    fld(f, "scale", "%s_PLE_EMBED_SCALE", u);
    step_end(f, "-1", "embed", "ple_embed");
    gemm_step(f, "-1", "ple_model_proj", "per_layer_model_projection (kernels/ref/gemm_ref.c)",
              "s->ple", "s->x", "s->w->ple_model_proj", "s->rows", lp, dm, NULL,
              "s->w->plan_ple_model_proj");
    step_begin(f, "times d_model^-0.5 (kernels/ref/norm_ref.c)", "scale_add", "ple_proj_scale");
    fld(f, "out", "s->ple");
    fld(f, "a", "s->ple");
    fld(f, "n", "%s", rows_lp);
    fld(f, "scale", "%s_INV_SQRT_D_MODEL", u);
    step_end(f, "-1", "scale_add", "ple_proj_scale");
    rmsnorm_step(f, m, "-1", "ple_proj_norm",
                 "per_layer_projection_norm over each Dp slice (kernels/ref/norm_ref.c)", "s->ple",
                 "s->ple", "s->w->ple_proj_norm", NULL, rows_l, dp);
    step_begin(f, "bf(bf(projection + token part) * 2^-0.5) (kernels/ref/norm_ref.c)", "scale_add",
               "ple_combine");
    fld(f, "out", "s->ple");
    fld(f, "a", "s->ple");
    fld(f, "b", "s->ple_tok");
    fld(f, "n", "%s", rows_lp);
    fld(f, "scale", "%s_PLE_COMBINE_SCALE", u);
    step_end(f, "-1", "scale_add", "ple_combine");
}

/* The step, for both variants: local_elem_bytes is the variant's pool width, which the engine's
 * KV view must carry. */
static void emit_forward(FILE *f, const gen_model *m) {
    const char *u = m->upper;
    char dm[160], nv[160];
    snprintf(dm, sizeof dm, "%s_D_MODEL", u);
    snprintf(nv, sizeof nv, "%s_N_VOCAB", u);
    fprintf(f, "/* One step of %s. */\n", m->name);
    fprintf(f, "static int G4_FN(%s_forward)(g4_state *s, int local_elem_bytes) {\n", m->lower);
    fprintf(f, "    if (s->kv_local.elem_bytes != local_elem_bytes) return K_ERR_DTYPE;\n");
    step_begin(f, "embed_tokens, scaled by bf16(sqrt(d_model)) (kernels/ref/norm_ref.c)", "embed",
               "embed");
    fld(f, "out", "s->x");
    fld(f, "table", "s->w->embed");
    fld(f, "ids", "s->ids");
    fld(f, "rows", "s->rows");
    fld(f, "width", "%s", dm);
    fld(f, "n_vocab", "%s_N_VOCAB", u);
    fld(f, "scale", "%s_EMBED_SCALE", u);
    step_end(f, "-1", "embed", "embed");
    if (m->d.d_ple) emit_ple_prep(f, m);
    /* layer 0's input_layernorm; every later layer's runs at the end of the one before */
    rmsnorm_step(f, m, "0", "input_norm", "input_layernorm (kernels/ref/norm_ref.c)", "s->xn",
                 "s->x", "s->w->layer[0].input_norm", NULL, "s->rows", dm);
    for (int l = 0; l < m->d.n_layer; l++)
        fprintf(f, "    LAYER(%d, G4_FN(%s_%s));\n", l, m->lower,
                kind_names[layer_kind_of(&m->d, l)]);
    step_begin(f, "the rows that need logits (kernels/ref/norm_ref.c)", "gather_rows", "gather");
    fld(f, "out", "s->xo");
    fld(f, "in", "s->x");
    fld(f, "src", "s->out_src");
    fld(f, "rows", "s->out_rows");
    fld(f, "width", "%s", dm);
    step_end(f, "-1", "gather_rows", "gather");
    rmsnorm_step(f, m, "-1", "final_norm", "norm (kernels/ref/norm_ref.c)", "s->xo", "s->xo",
                 "s->w->final_norm", NULL, "s->out_rows", dm);
    gemm_step(f, "-1", "lm_head", "the tied LM head, embed_tokens (kernels/ref/gemm_ref.c)",
              "s->logits", "s->xo", "s->w->embed", "s->out_rows", nv, dm, NULL, "s->w->plan_head");
    step_begin(f, "final_logit_softcapping (kernels/ref/norm_ref.c)", "softcap", "softcap");
    fld(f, "x", "s->logits");
    fld(f, "n", "(size_t)s->out_rows * %s_N_VOCAB", u);
    fld(f, "cap", "%s_SOFTCAP", u);
    step_end(f, "-1", "softcap", "softcap");
    fprintf(f, "    return 0;\n}\n\n");
}

static void emit_schedule(FILE *f, const gen_model *m) {
    const g4_model_desc *d = &m->d;
    fprintf(f, "/* GENERATED by codegen/gen.c from %s; do not edit. */\n", m->source);
    fprintf(f, "/* %s */\n", m->title);
    fprintf(f, "#include \"graph/schedule.h\"\n#include \"%s_shape.h\"\n\n", m->lower);
    fprintf(f, "static const g4_layer_info %s_layers[%s_N_LAYER] = {\n", m->lower, m->upper);
    int owned[2] = {0, 0}, kv_index[G4_MAX_LAYERS];
    for (int l = 0; l < d->n_layer; l++) {
        int donor = g4_model_kv_donor(d, l);
        if (donor == l) kv_index[l] = owned[d->layer_kind[l] == G4_LAYER_FULL]++;
        fprintf(f, "    {.kind = %s, .owns_kv = %d, .kv_donor = %d, .kv_layer = %d, .d_ff = %d},\n",
                d->layer_kind[l] == G4_LAYER_FULL ? "G4_LAYER_FULL" : "G4_LAYER_SLIDING",
                donor == l, donor, kv_index[donor], g4_model_d_ff(d, l));
    }
    fprintf(f, "};\n\n");
    int used[N_KINDS] = {0};
    for (int l = 0; l < d->n_layer; l++)
        used[layer_kind_of(d, l)] = 1;
    for (int k = 0; k < N_KINDS; k++)
        if (used[k]) { /* the branches' form first: the other hands its steps to it */
            if (m->d.n_expert) emit_layer_fn(f, m, k, 1);
            emit_layer_fn(f, m, k, 0);
        }
    emit_forward(f, m);
    for (int v = 0; v < 2; v++) {
        fprintf(f, "/* The %s local pool. */\n", variants[v]);
        char head[256], body[192];
        snprintf(head, sizeof head, "static int G4_FN(%s_%s_forward)(g4_state *s) {", m->lower,
                 variants[v]);
        snprintf(body, sizeof body, "return G4_FN(%s_forward)(s, %d);", m->lower, v ? 1 : 2);
        /* clang-format's rule for a short function: one line when it fits the column limit */
        if (strlen(head) + strlen(body) + 3 <= 100)
            fprintf(f, "%s %s }\n\n", head, body);
        else
            fprintf(f, "%s\n    %s\n}\n\n", head, body);
        fprintf(f, "const g4_schedule G4_FN(schedule_%s_%s) = {\n", m->lower, variants[v]);
        fprintf(f, "    .model = &g4_model_%s,\n", m->lower);
        fprintf(f, "    .variant = \"%s\",\n", variants[v]);
        fprintf(f, "    .local_elem_bytes = %d,\n", v ? 1 : 2);
        fprintf(f, "    .layers = %s_layers,\n", m->lower);
        fprintf(f, "    .forward = G4_FN(%s_%s_forward),\n};\n%s", m->lower, variants[v],
                v ? "" : "\n");
    }
}

static void emit_schedules(FILE *f, const gen_model *ms, int n) {
    fprintf(f, "/* GENERATED by codegen/gen.c from graph/models/<name>.ini, all of them; do not "
               "edit. */\n");
    fprintf(f, "#include \"graph/schedule.h\"\n\n");
    for (int i = 0; i < n; i++)
        for (int v = 0; v < 2; v++)
            fprintf(f, "extern const g4_schedule G4_FN(schedule_%s_%s);\n", ms[i].lower,
                    variants[v]);
    fprintf(f, "\nconst g4_schedule *const G4_FN(schedules)[] = {\n");
    for (int i = 0; i < n; i++)
        for (int v = 0; v < 2; v++)
            fprintf(f, "    /* %s, %s */\n    &G4_FN(schedule_%s_%s),\n", ms[i].name, variants[v],
                    ms[i].lower, variants[v]);
    fprintf(f, "};\n\nconst int G4_FN(n_schedules) = %d;\n", 2 * n);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: gen OUT_DIR graph/models/<name>.ini...\n");
        return 2;
    }
    int n = argc - 2;
    gen_model *ms = calloc((size_t)n, sizeof *ms);
    if (!ms) return 1;
    for (int i = 0; i < n; i++)
        if (load_model(argv[i + 2], &ms[i]) != 0) return 1;
    for (int i = 0; i < n; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s_shape.h", ms[i].lower);
        FILE *f = open_out(argv[1], name);
        if (!f) return 1;
        emit_shape(f, &ms[i]);
        fclose(f);
        snprintf(name, sizeof name, "schedule_%s.c", ms[i].lower);
        f = open_out(argv[1], name);
        if (!f) return 1;
        emit_schedule(f, &ms[i]);
        fclose(f);
    }
    FILE *f = open_out(argv[1], "models.c");
    if (!f) return 1;
    emit_models(f, ms, n);
    fclose(f);
    f = open_out(argv[1], "schedules.c");
    if (!f) return 1;
    emit_schedules(f, ms, n);
    fclose(f);
    free(ms);
    return 0;
}
