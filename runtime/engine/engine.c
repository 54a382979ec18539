/* runtime/engine/engine.c - see engine.h. Opens a model on one of two backends
 * (runtime/engine/backend.h), picked once here: the GPU when a usable device is present, else the
 * CPU reference. Sizes the step buffers and both KV families once for the largest step, and checks
 * and names every step's failure; the backend holds the memory and runs the step. */
#include "runtime/engine/engine.h"

#include "runtime/engine/backend.h"
#include "runtime/model/hfconfig.h"
#include "runtime/engine/kv_pool.h"
#include "runtime/model/loader.h"
#include "runtime/base/log.h"
#include "runtime/engine/step_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct engine {
    g4_config cfg;
    int branches; /* serve.moe_branches in force: a MoE model, and the backend can */
    const g4_model_desc *model;
    const g4_schedule *schedule;
    const backend_ops *ops;
    backend *bk;
    char device[256]; /* the device, or why there is none */
    loader *ld;
    g4_weights w;
    kv_pool_shape kv; /* what the KV stores hold; the scheduler's pool is made from it */
    int max_rows, max_out_rows;
    int32_t *order;          /* order_rows' rows: ids, pos, seq, where each went; the out rows */
    unsigned char *seq_kind; /* order_rows: [max_batch] the kind of a slot's rows this step */
    g4_state s;
    step_check check; /* debug.check_finite */
    long n_steps;     /* engine_step calls, for debug.fail_step */
    int fault_armed;  /* debug.fail_step: this step fails at its first attention */
    int nan_armed;    /* debug.nan_step: this step's first logits row gets a NaN */
    char last_error[256];
};

static int max_d_ff(const g4_model_desc *m) {
    int mx = 0;
    for (int l = 0; l < m->n_layer; l++)
        if (g4_model_d_ff(m, l) > mx) mx = g4_model_d_ff(m, l);
    return mx;
}

/* Activation buffers for the largest step (see g4_state for each shape). */
static int alloc_state(engine *e) {
    const g4_model_desc *m = e->model;
    size_t R = (size_t)e->max_rows, H = (size_t)m->d_model, B = sizeof(bf16_t);
    size_t q_w = (size_t)m->n_head * (size_t)m->head_dim_global;
    size_t kv_w = (size_t)m->head_dim_global * (size_t)(m->n_kv_head_local > m->n_kv_head_global
                                                            ? m->n_kv_head_local
                                                            : m->n_kv_head_global);
    if ((size_t)m->head_dim_local * (size_t)m->n_kv_head_local > kv_w)
        kv_w = (size_t)m->head_dim_local * (size_t)m->n_kv_head_local;
    size_t ff = (size_t)max_d_ff(m), lp = (size_t)m->n_layer * (size_t)m->d_ple;
    size_t top_k = (size_t)(m->top_k ? m->top_k : 1), out = (size_t)e->max_out_rows;
    g4_state *s = &e->s;
    s->attn_splits_per_block = e->cfg.serve.attn_splits_per_block; /* speed only: same bits */
    struct {
        void **p;
        size_t bytes;
    } bufs[] = {
        {(void **)&s->x, R * H * B},
        {(void **)&s->xn, R * H * B},
        {(void **)&s->xn2, R * (m->n_expert ? H : 1) * B},
        {(void **)&s->xr, R * (m->n_expert ? H : 1) * B},
        {(void **)&s->t2, R * (m->n_expert ? H : 1) * B},
        {(void **)&s->q, R * q_w * B},
        {(void **)&s->k, R * kv_w * B},
        {(void **)&s->v, R * kv_w * B},
        {(void **)&s->attn, R * q_w * B},
        {(void **)&s->t, R * H * B},
        {(void **)&s->gu, R * 2 * ff * B},
        {(void **)&s->act, R * ff * B},
        {(void **)&s->m1, R * H * B},
        {(void **)&s->router_logits, R * (size_t)(m->n_expert ? m->n_expert : 1) * B},
        {(void **)&s->moe_idx, R * top_k * sizeof(int32_t)},
        {(void **)&s->moe_w, R * top_k * sizeof(float)},
        {(void **)&s->ple, R * (lp ? lp : 1) * B},
        {(void **)&s->ple_tok, R * (lp ? lp : 1) * B},
        {(void **)&s->ple_g, R * (size_t)(m->d_ple ? m->d_ple : 1) * B},
        {(void **)&s->xo, out * H * B},
        {(void **)&s->logits, out * (size_t)m->n_vocab * B},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i].p = e->ops->alloc(e->bk, bufs[i].bytes))) {
            log_msg(LOG_ERROR, "engine",
                    "out of %s memory for the step buffers (%d rows: buffer %zu of %zu, %zu bytes)",
                    e->ops->memory, e->max_rows, i + 1, sizeof bufs / sizeof bufs[0],
                    bufs[i].bytes);
            return -1;
        }
    s->w = &e->w;
    return 0;
}

static int count_owning(const g4_model_desc *m, int kind) {
    int n = 0;
    for (int l = 0; l < m->n_layer; l++)
        if (m->layer_kind[l] == kind && g4_model_kv_donor(m, l) == l) n++;
    return n;
}

/* Both families sized for serve.max_batch sequences at serve.max_context (the local family
 * only ever holds a window plus one prefill chunk), or split from kv.budget_gb, or (auto)
 * from what the backend's memory has left when that is less; then their stores. */
static int size_kv(engine *e) {
    const g4_model_desc *m = e->model;
    const g4_config *c = &e->cfg;
    int pt = c->kv.page_tokens;
    kv_pool_shape *sh = &e->kv;
    sh->layout[KV_LOCAL] = (kv_layout){pt, count_owning(m, G4_LAYER_SLIDING), m->n_kv_head_local,
                                       m->head_dim_local, e->schedule->local_elem_bytes};
    sh->layout[KV_GLOBAL] =
        (kv_layout){pt, count_owning(m, G4_LAYER_FULL), m->n_kv_head_global, m->head_dim_global, 2};
    /* a sequence's most pages, as the scheduler will commit them; + 1: the padding page */
    int ctx = c->serve.max_context, chunk = c->serve.prefill_chunk;
    int max_pages = kv_pages_worst(KV_GLOBAL, pt, m->window, ctx, chunk); /* the whole context */
    long n_local =
        (long)c->serve.max_batch * kv_pages_worst(KV_LOCAL, pt, m->window, ctx, chunk) + 1;
    long n_global = (long)c->serve.max_batch * max_pages + 1;
    double budget = c->kv.budget_gb * 1e9;
    double lb = (double)kv_layout_page_bytes(&sh->layout[KV_LOCAL]);
    double gb = (double)kv_layout_page_bytes(&sh->layout[KV_GLOBAL]);
    if (budget <= 0) {
        double free_b = e->ops->free_bytes(e->bk);
        if (free_b < (double)n_local * lb + (double)n_global * gb) budget = free_b;
    }
    if (budget > 0) {
        if ((double)n_local * lb > budget / 2) n_local = (long)(budget / 2 / lb);
        n_global = (long)((budget - (double)n_local * lb) / gb);
        if (n_local < 2 || n_global < 2) {
            log_msg(LOG_ERROR, "engine", "kv.budget_gb = %g holds no page of a family",
                    c->kv.budget_gb);
            return -1;
        }
        /* an absurd budget (the key takes up to 1 PB) must not wrap the page counts */
        if (n_global > KV_POOL_MAX_PAGES) {
            log_msg(LOG_ERROR, "engine",
                    "kv.budget_gb = %g asks for %.3g pages of the global KV family, more than "
                    "the %d one pool can index; lower it, or leave it auto",
                    c->kv.budget_gb, (double)n_global, KV_POOL_MAX_PAGES);
            return -1;
        }
    }
    sh->n_pages[KV_LOCAL] = (int)n_local;
    sh->n_pages[KV_GLOBAL] = (int)n_global;
    sh->window = m->window;
    sh->max_seqs = c->serve.max_batch;
    sh->max_pages_per_seq = max_pages;
    if (e->ops->bind_tables(e->bk, &e->s.kv_local, &e->s.kv_global) != 0) {
        log_msg(LOG_ERROR, "engine", "out of %s memory for the KV page tables", e->ops->memory);
        return -1;
    }
    for (int f = 0; f < 2; f++) {
        const kv_layout *l = &sh->layout[f];
        long n = sh->n_pages[f];
        void *store = e->ops->alloc(e->bk, (size_t)n * kv_layout_page_bytes(l));
        if (!store) {
            char budget_text[32] = "auto";
            if (c->kv.budget_gb > 0)
                (void)snprintf(budget_text, sizeof budget_text, "%g", c->kv.budget_gb);
            log_msg(LOG_ERROR, "engine",
                    "out of %s memory for the %s KV family: %ld pages, %.2f GB (kv.budget_gb = %s)",
                    e->ops->memory, f == KV_LOCAL ? "local" : "global", n,
                    (double)n * (double)kv_layout_page_bytes(l) / 1e9, budget_text);
            return -1;
        }
        k_kv_view *v = f == KV_LOCAL ? &e->s.kv_local : &e->s.kv_global;
        v->base = store;
        v->page_tokens = pt;
        v->n_layer = l->n_layer;
        v->n_kv_head = l->n_kv_head;
        v->head_dim = l->head_dim;
        v->elem_bytes = l->elem_bytes;
        v->max_pages = max_pages;
        log_msg(LOG_INFO, "engine", "KV %s family: %ld pages of %d tokens, %.1f MB",
                f == KV_LOCAL ? "local" : "global", n, pt,
                (double)n * (double)kv_layout_page_bytes(l) / 1e6);
    }
    return 0;
}

static int match_model(engine *e) {
    char path[sizeof e->cfg.model.path + 16];
    snprintf(path, sizeof path, "%s/config.json", e->cfg.model.path);
    g4_model_desc ckpt;
    if (hfconfig_read(path, &ckpt) != 0) return -1;
    char why[512];
    const char *wanted = e->cfg.model.name[0] ? e->cfg.model.name : NULL;
    e->model = hfconfig_match(&ckpt, wanted, why, sizeof why);
    if (!e->model) {
        log_msg(LOG_ERROR, "engine", "%s matches no compiled-in model: %s", path, why);
        return -1;
    }
    return 0;
}

/* The model and its weights: from the checkpoint (CPU: mapped; GPU: uploaded) or, with
 * model.weights = dummy, seeded random at the compiled-in geometry of model.name (GPU only). */
static int open_weights(engine *e, const backend_sizes *z) {
    const g4_config *c = &e->cfg;
    if (c->model.weights == G4_WEIGHTS_DUMMY) {
        e->model = g4_model_find(c->model.name);
        if (!e->model) {
            log_msg(LOG_ERROR, "engine", "model.name = %s is not a compiled-in model",
                    c->model.name);
            return -1;
        }
    } else if (match_model(e) != 0 || loader_open(c->model.path, &e->ld) != 0) {
        return -1;
    }
    const uint64_t dummy_seed = 0x67347069706eull; /* fixed: dummy runs repeat exactly */
    backend_sizes zm = *z;
    zm.model = e->model;
    return e->ops->bind_weights(e->bk, e->ld, e->model, dummy_seed, &zm, &e->w);
}

/* The GPU unless debug.backend = cpu or there is none (then the CPU reference, or with
 * debug.backend = gpu a refusal). */
static int pick_backend(engine *e) {
    const g4_config *c = &e->cfg;
    if (c->debug.backend == G4_BACKEND_CPU) {
        snprintf(e->device, sizeof e->device, "debug.backend = cpu");
        e->ops = &backend_cpu_ops;
    } else if (backend_gpu_ops.probe(e->device, sizeof e->device) == 0) {
        e->ops = &backend_gpu_ops;
    } else if (c->debug.backend == G4_BACKEND_GPU) {
        log_msg(LOG_ERROR, "engine", "debug.backend = gpu, but no GPU backend: %s", e->device);
        return -1;
    } else {
        e->ops = &backend_cpu_ops;
    }
    if (c->debug.nan_step > 0 && e->ops->on_gpu) {
        log_msg(LOG_ERROR, "engine",
                "debug.nan_step writes into host logits: it needs debug.backend = cpu");
        return -1;
    }
    e->bk = e->ops->create(&e->cfg, e->device);
    return e->bk ? 0 : -1;
}

int engine_open(const g4_config *cfg, int max_out_rows, engine **out) {
    *out = NULL;
    double t_open = log_clock_s();
    engine *e = calloc(1, sizeof *e);
    if (!e) return -1;
    e->cfg = *cfg;
    const char *variant = cfg->kv.local == G4_KV_LOCAL_FP8 ? "local_fp8" : "local_bf16";
    e->max_rows = cfg->serve.prefill_chunk + cfg->serve.max_batch;
    e->max_out_rows = max_out_rows > 0 ? max_out_rows : cfg->serve.max_batch;
    e->order = malloc(sizeof(int32_t) * (4 * (size_t)e->max_rows + (size_t)e->max_out_rows));
    e->seq_kind = malloc((size_t)cfg->serve.max_batch + 1);
    if (!e->order || !e->seq_kind) {
        log_msg(LOG_ERROR, "engine", "out of host memory for the step's row order");
        engine_close(e);
        return -1;
    }
    int pt = cfg->kv.page_tokens;
    backend_sizes z = {.max_rows = e->max_rows,
                       .max_out_rows = e->max_out_rows,
                       .max_batch = cfg->serve.max_batch,
                       .max_pages = (cfg->serve.max_context + pt - 1) / pt};
    if (pick_backend(e) != 0 || open_weights(e, &z) != 0) {
        engine_close(e);
        return -1;
    }
    z.model = e->model;
    e->schedule = e->ops->find_schedule(e->model->name, variant);
    if (!e->schedule)
        log_msg(LOG_ERROR, "engine", "this build has no %s schedule of %s", variant,
                e->model->name);
    if (!e->schedule || alloc_state(e) != 0 || e->ops->open_step(e->bk, &z, &e->s) != 0 ||
        size_kv(e) != 0) {
        engine_close(e);
        return -1;
    }
    e->branches = e->cfg.serve.moe_branches > 0 && e->model->n_expert && !e->s.branch_veto;
    if (e->branches)
        log_msg(LOG_INFO, "engine",
                "serve.moe_branches: steps of at most %d rows run the router and experts beside "
                "the dense MLP",
                e->cfg.serve.moe_branches);
    e->ops->log_ready(e->bk, e->model, variant, log_clock_s() - t_open);
    *out = e;
    return 0;
}

void engine_close(engine *e) {
    if (!e) return;
    if (e->ops) e->ops->destroy(e->bk);
    free(e->check.host);
    free(e->order);
    free(e->seq_kind);
    loader_close(e->ld);
    free(e);
}

const g4_model_desc *engine_model(const engine *e) { return e->model; }
const g4_weights *engine_weights(const engine *e) { return &e->w; }
const char *engine_variant(const engine *e) { return e->schedule->variant; }
int engine_on_gpu(const engine *e) { return e->ops->on_gpu; }
int engine_max_rows(const engine *e) { return e->max_rows; }

void engine_kv_shape(const engine *e, kv_pool_shape *out) { *out = e->kv; }

/* The engine's own hook, for the debug switches: debug.fail_step's injected failure (at the
 * step's first attention, after layer 0 wrote its K/V, as a device error mid-step would),
 * debug.check_finite's search, debug.sync's synchronisation. */
static int debug_hook(g4_state *s, int layer, const char *step) {
    engine *e = s->hook_ctx;
    if (e->fault_armed && strcmp(step, "attention") == 0) {
        e->fault_armed = 0;
        log_msg(LOG_WARN, "engine", "debug.fail_step = %ld: step %ld fails here on purpose",
                (long)e->cfg.debug.fail_step, e->n_steps);
        return K_ERR_DEVICE;
    }
    if (e->nan_armed && strcmp(step, "lm_head") == 0 && s->out_rows > 0) {
        e->nan_armed = 0; /* the CPU backend's logits are host memory (engine_open checks) */
        log_msg(LOG_WARN, "engine", "debug.nan_step = %ld: step %ld's first logits row gets a NaN",
                (long)e->cfg.debug.nan_step, e->n_steps);
        s->logits[0] = 0x7fc0;
    }
    if (e->cfg.debug.check_finite) {
        s->hook_ctx = &e->check;
        int rc = step_check_finite(s, layer, step);
        s->hook_ctx = e;
        if (rc != 0) return rc;
    }
    return e->cfg.debug.sync ? e->ops->sync(e->bk) : 0;
}

static const char *err_name(int rc) {
    switch (rc) {
    case K_ERR_SHAPE:
        return "a size or alignment precondition failed";
    case K_ERR_DTYPE:
        return "an element width the op has no kernel for";
    case K_ERR_DEVICE:
        return "a CUDA or cuBLASLt call failed";
    case K_ERR_NO_MEMORY:
        return "out of device memory for a workspace";
    case K_ERR_NONFINITE:
        return "debug.check_finite: an op wrote a NaN or an infinity";
    default:
        return "an unknown failure";
    }
}

const char *engine_last_error(const engine *e) { return e->last_error; }

int engine_batch_wants_topk(const engine_batch *b) {
    for (int o = 0; b->topk && o < b->out_rows; o++)
        if (b->topk[o] > 0) return 1;
    return 0;
}

/* *ob = b with its generated rows first and its prompt rows after them, each kind in its order,
 * out_src following (b's own arrays where it is already so); *decode_rows = the generated
 * rows. Speed and kernel choice only: a row's bits do not depend on where it sits in the step
 * (docs/gates.md). Returns -1, with last_error set, when b->prompt mixes the two kinds in one
 * sequence or an out row names no row. */
static int order_rows(engine *e, const engine_batch *b, engine_batch *ob, int *decode_rows) {
    *ob = *b;
    ob->prompt = NULL;
    *decode_rows = b->rows;
    for (int o = 0; o < b->out_rows; o++)
        if (b->out_src[o] < 0 || b->out_src[o] >= b->rows) {
            snprintf(e->last_error, sizeof e->last_error,
                     "out row %d asks for row %d of a %d-row step", o, b->out_src[o], b->rows);
            return -1;
        }
    if (!b->prompt) return 0;
    const int slots = e->cfg.serve.max_batch + 1; /* the slots and the graphs' padding slot */
    int n_dec = 0, sorted = 1;
    memset(e->seq_kind, 0, (size_t)slots);
    for (int r = 0; r < b->rows; r++) {
        const unsigned char kind = b->prompt[r] ? 2 : 1;
        const int q = b->seq[r];
        if (q >= 0 && q < slots) {
            if (e->seq_kind[q] && e->seq_kind[q] != kind) {
                snprintf(e->last_error, sizeof e->last_error,
                         "slot %d has prompt and generated rows in one step", q);
                return -1;
            }
            e->seq_kind[q] = kind;
        }
        if (kind == 1) sorted &= n_dec++ == r;
    }
    *decode_rows = n_dec;
    if (sorted) return 0;
    const size_t R = (size_t)e->max_rows;
    int32_t *ids = e->order, *pos = ids + R, *seq = pos + R, *to = seq + R, *src = to + R;
    int next_dec = 0, next_prompt = n_dec;
    for (int r = 0; r < b->rows; r++) {
        const int t = b->prompt[r] ? next_prompt++ : next_dec++;
        ids[t] = b->ids[r];
        pos[t] = b->pos[r];
        seq[t] = b->seq[r];
        to[r] = t;
    }
    for (int o = 0; o < b->out_rows; o++)
        src[o] = to[b->out_src[o]];
    ob->ids = ids;
    ob->pos = pos;
    ob->seq = seq;
    ob->out_src = src;
    return 0;
}

int engine_step(engine *e, const engine_batch *b, bf16_t *logits,
                int (*hook)(g4_state *s, int layer, const char *step), void *hook_ctx) {
    if (b->rows <= 0 || b->rows > e->max_rows || b->out_rows < 0 || b->out_rows > e->max_out_rows) {
        log_msg(LOG_ERROR, "engine", "step of %d rows (%d with logits) exceeds %d (%d)", b->rows,
                b->out_rows, e->max_rows, e->max_out_rows);
        return K_ERR_SHAPE;
    }
    if (!kv_pool_has_shape(b->pool, &e->kv)) {
        snprintf(e->last_error, sizeof e->last_error,
                 "the step's KV pool was not made from this engine's shape (engine_kv_shape)");
        log_msg(LOG_ERROR, "engine", "%s", e->last_error);
        return K_ERR_SHAPE;
    }
    e->last_error[0] = '\0';
    engine_batch ordered;
    int decode_rows = 0;
    if (order_rows(e, b, &ordered, &decode_rows) != 0) {
        log_msg(LOG_ERROR, "engine", "step refused: %s", e->last_error);
        return K_ERR_SHAPE;
    }
    b = &ordered;
    g4_state *s = &e->s;
    s->rows = b->rows;
    s->decode_rows = decode_rows;
    s->ids = b->ids;
    s->pos = b->pos;
    s->seq = b->seq;
    s->max_pos = 0;
    for (int r = 0; r < b->rows; r++)
        if (b->pos[r] > s->max_pos) s->max_pos = b->pos[r];
    s->out_rows = b->out_rows;
    s->out_src = b->out_src;
    s->hook = hook;
    s->hook_ctx = hook_ctx;
    e->n_steps++;
    e->last_error[0] = '\0';
    e->fault_armed = e->cfg.debug.fail_step > 0 && e->n_steps == e->cfg.debug.fail_step;
    e->nan_armed = e->cfg.debug.nan_step > 0 && e->n_steps == e->cfg.debug.nan_step;
    if (!hook &&
        (e->cfg.debug.sync || e->cfg.debug.check_finite || e->fault_armed || e->nan_armed)) {
        e->check = (step_check){.model = e->model,
                                .copy_to_host = e->ops->copy_to_host,
                                .pos = b->pos,
                                .seq = b->seq,
                                .out_src = b->out_src,
                                .host = e->check.host,
                                .host_elems = e->check.host_elems};
        s->hook = debug_hook;
        s->hook_ctx = e;
    }
    /* serve.moe_branches: steps of at most that many rows, never under a per-step hook (it reads
     * buffers by step name in order). Speed only: the bits are the same either way. */
    s->branches = e->branches && !s->hook && b->rows <= e->cfg.serve.moe_branches;
    backend_failure where = {BACKEND_AT_FORWARD, 0};
    int rc = e->ops->step(e->bk, b, e->schedule, s, logits, &where);
    if (rc == 0) return 0;
    switch (where.at) {
    case BACKEND_AT_GRAPH:
        snprintf(e->last_error, sizeof e->last_error, "the %d-row decode graph failed: %s",
                 where.graph_rows, err_name(rc));
        break;
    case BACKEND_AT_STAGE:
        snprintf(e->last_error, sizeof e->last_error, "staging the step's rows failed: %s",
                 err_name(rc));
        break;
    case BACKEND_AT_FORWARD:
        snprintf(e->last_error, sizeof e->last_error, "step failed at L%02d.%s: %s",
                 s->failed_layer, s->failed_step ? s->failed_step : "?", err_name(rc));
        log_msg(LOG_ERROR, "engine", "%s (code %d)", e->last_error, rc);
        break;
    case BACKEND_AT_OUTPUTS:
        snprintf(e->last_error, sizeof e->last_error, "copying the step's outputs failed: %s",
                 err_name(rc));
        break;
    }
    return rc;
}
