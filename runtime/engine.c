/* runtime/engine.c - see engine.h. Owns a loaded model on one of two backends: the GPU (device
 * weights and plans, device KV stores and step buffers, the generated k_ schedule) when a
 * usable device is present, else the CPU reference (the checkpoint's mapping, host buffers,
 * the ref_ schedule). Everything is sized once at open for the largest step. */
#include "runtime/engine.h"

#include "kernels/ref/ref.h"
#include "runtime/device_weights.h"
#include "runtime/hfconfig.h"
#include "runtime/kv_pool.h"
#include "runtime/loader.h"
#include "runtime/log.h"
#include "runtime/step_check.h"
#include "runtime/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAPH_SIZES 12 /* padded decode sizes 1, 2, 4, ..., max_batch */

struct engine {
    g4_config cfg;
    const g4_model_desc *model;
    const g4_schedule *schedule;
    loader *ld;
    g4_weights w;
    kv_pool *pool;
    kv_layout layout[2];
    long n_pages[2];
    void *kv_store[2];
    int max_rows, max_out_rows;
    g4_state s;
    void *buffers[32];
    int n_buffers;
    int gpu;              /* 1: GPU backend, buffers and KV stores are device memory */
    char device[256];     /* the device, or why there is none */
    device_weights *dw;   /* GPU: the weights and plans */
    int32_t *d_meta;      /* GPU: ids, pos, seq [max_rows each], out_src [max_out_rows] */
    int32_t *d_tables[2]; /* GPU: device copies of the page tables */
    int32_t *d_argmax; /* GPU: [max_out_rows] greedy tokens, then [max_out_rows] non-finite flags */
    int32_t *d_topk;   /* GPU: k [max_out_rows], then ids [max_out_rows, K_TOPK_MAX] */
    bf16_t *d_topk_vals; /* GPU: [max_out_rows, K_TOPK_MAX] */
    int *changed;        /* GPU: [max_batch] table rows to send, from kv_pool_take_changed */
    /* serve.cuda_graphs (GPU): decode-only steps replay a graph captured per padded size */
    int graphs;
    g4_stream stream;     /* the engine's stream; NULL (legacy stream) without graphs */
    int32_t *h_meta;      /* pinned twin of d_meta, the graphs' copy source */
    int32_t *h_argmax;    /* pinned twin of d_argmax, the graphs' copy target */
    int32_t *h_tables[2]; /* pinned twins of d_tables (the padding slot's row is zero) */
    k_graph *graph[GRAPH_SIZES];
    int graph_rows[GRAPH_SIZES];
    int n_graph_sizes;
    size_t table_bytes;
    step_check check;   /* debug.check_finite */
    int32_t *spare_ids; /* [max_out_rows] argmax target when the caller wants only the flags */
    long n_steps;       /* engine_step calls, for debug.fail_step */
    int fault_armed;    /* debug.fail_step: this step fails at its first attention */
    char last_error[256];
};

/* Step buffers and KV stores: device memory on the GPU backend, zeroed host memory on the CPU. */
static void *engine_alloc(engine *e, size_t bytes) {
    if (e->n_buffers >= (int)(sizeof e->buffers / sizeof e->buffers[0])) return NULL;
    void *p = e->gpu ? k_device_alloc(bytes ? bytes : 1) : calloc(1, bytes ? bytes : 1);
    if (p) e->buffers[e->n_buffers++] = p;
    return p;
}

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
    size_t top_k = (size_t)(m->top_k ? m->top_k : 1);
    g4_state *s = &e->s;
    s->attn_splits_per_block = e->cfg.serve.attn_splits_per_block; /* speed only: same bits */
    s->x = engine_alloc(e, R * H * B);
    s->xn = engine_alloc(e, R * H * B);
    s->q = engine_alloc(e, R * q_w * B);
    s->k = engine_alloc(e, R * kv_w * B);
    s->v = engine_alloc(e, R * kv_w * B);
    s->attn = engine_alloc(e, R * q_w * B);
    s->t = engine_alloc(e, R * H * B);
    s->gu = engine_alloc(e, R * 2 * ff * B);
    s->act = engine_alloc(e, R * ff * B);
    s->m1 = engine_alloc(e, R * H * B);
    s->router_logits = engine_alloc(e, R * (size_t)(m->n_expert ? m->n_expert : 1) * B);
    s->moe_idx = engine_alloc(e, R * top_k * sizeof(int32_t));
    s->moe_w = engine_alloc(e, R * top_k * sizeof(float));
    s->ple = engine_alloc(e, R * (lp ? lp : 1) * B);
    s->ple_tok = engine_alloc(e, R * (lp ? lp : 1) * B);
    s->ple_g = engine_alloc(e, R * (size_t)(m->d_ple ? m->d_ple : 1) * B);
    s->xo = engine_alloc(e, (size_t)e->max_out_rows * H * B);
    s->logits = engine_alloc(e, (size_t)e->max_out_rows * (size_t)m->n_vocab * B);
    /* any one may have failed: a later success does not make up for an earlier NULL */
    const void *const got[] = {s->x,   s->xn,      s->q,     s->k,  s->v,       s->attn,
                               s->t,   s->gu,      s->act,   s->m1, s->moe_idx, s->moe_w,
                               s->ple, s->ple_tok, s->ple_g, s->xo, s->logits,  s->router_logits};
    for (size_t i = 0; i < sizeof got / sizeof got[0]; i++)
        if (!got[i]) {
            log_msg(LOG_ERROR, "engine", "out of host memory for the step buffers (%d rows)",
                    e->max_rows);
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
 * only ever holds a window plus one prefill chunk), or split from kv.budget_gb. */
static int open_pool(engine *e) {
    const g4_model_desc *m = e->model;
    const g4_config *c = &e->cfg;
    int pt = c->kv.page_tokens;
    e->layout[KV_LOCAL] = (kv_layout){pt, count_owning(m, G4_LAYER_SLIDING), m->n_kv_head_local,
                                      m->head_dim_local, e->schedule->local_elem_bytes};
    e->layout[KV_GLOBAL] =
        (kv_layout){pt, count_owning(m, G4_LAYER_FULL), m->n_kv_head_global, m->head_dim_global, 2};
    int max_pages = (c->serve.max_context + pt - 1) / pt;
    int local_per_seq = (m->window - 1 + c->serve.prefill_chunk + pt - 1) / pt + 1;
    if (local_per_seq > max_pages) local_per_seq = max_pages;
    long n_local = (long)c->serve.max_batch * local_per_seq + 1;
    long n_global = (long)c->serve.max_batch * max_pages + 1;
    double budget = c->kv.budget_gb * 1e9;
    if (e->gpu && budget <= 0) {
        /* auto: what the device has left after weights and step buffers, less 1 GB for
         * cuBLASLt and the CUDA context, but no more than max_batch full contexts need */
        double free_b = (double)k_device_free_bytes() - 1e9;
        double lb = (double)kv_layout_page_bytes(&e->layout[KV_LOCAL]);
        double gb = (double)kv_layout_page_bytes(&e->layout[KV_GLOBAL]);
        if (free_b < (double)n_local * lb + (double)n_global * gb) budget = free_b;
    }
    if (budget > 0) {
        double lb = (double)kv_layout_page_bytes(&e->layout[KV_LOCAL]);
        double gb = (double)kv_layout_page_bytes(&e->layout[KV_GLOBAL]);
        if ((double)n_local * lb > budget / 2) n_local = (long)(budget / 2 / lb);
        n_global = (long)((budget - (double)n_local * lb) / gb);
        if (n_local < 2 || n_global < 2) {
            log_msg(LOG_ERROR, "engine", "kv.budget_gb = %g holds no page of a family",
                    c->kv.budget_gb);
            return -1;
        }
    }
    e->n_pages[KV_LOCAL] = n_local;
    e->n_pages[KV_GLOBAL] = n_global;
    e->pool = kv_pool_create(&e->layout[KV_LOCAL], (int)n_local, &e->layout[KV_GLOBAL],
                             (int)n_global, m->window, c->serve.max_batch, max_pages);
    e->table_bytes = (size_t)c->serve.max_batch * (size_t)max_pages * sizeof(int32_t);
    if (e->gpu && !(e->changed = calloc((size_t)c->serve.max_batch, sizeof *e->changed))) return -1;
    /* one more row on the device: the padding slot (seq = max_batch) of padded graph steps,
     * every entry physical page 0, the padding page of kv_pool */
    size_t pad_row = (size_t)max_pages * sizeof(int32_t);
    int32_t *zeros = calloc(1, pad_row);
    for (int f = 0; e->gpu && f < 2; f++) {
        e->d_tables[f] = engine_alloc(e, e->table_bytes + pad_row);
        if (!zeros || !e->d_tables[f] ||
            k_copy_to_device((char *)e->d_tables[f] + e->table_bytes, zeros, pad_row) != 0 ||
            (e->graphs && !(e->h_tables[f] = k_host_alloc_pinned(e->table_bytes + pad_row)))) {
            free(zeros);
            return -1;
        }
        if (e->graphs) memset(e->h_tables[f], 0, e->table_bytes + pad_row);
    }
    free(zeros);
    for (int f = 0; f < 2; f++) {
        long n = f == KV_LOCAL ? n_local : n_global;
        e->kv_store[f] = engine_alloc(e, (size_t)n * kv_layout_page_bytes(&e->layout[f]));
        if (!e->kv_store[f] || !e->pool) {
            log_msg(LOG_ERROR, "engine", "out of %s memory for %ld KV pages",
                    e->gpu ? "device" : "host", n);
            return -1;
        }
        k_kv_view *v = f == KV_LOCAL ? &e->s.kv_local : &e->s.kv_global;
        *v = (k_kv_view){.base = e->kv_store[f],
                         .page_tokens = pt,
                         .n_layer = e->layout[f].n_layer,
                         .n_kv_head = e->layout[f].n_kv_head,
                         .head_dim = e->layout[f].head_dim,
                         .elem_bytes = e->layout[f].elem_bytes,
                         .tables =
                             e->gpu ? e->d_tables[f] : kv_pool_table(e->pool, (enum kv_family)f, 0),
                         .max_pages = max_pages};
        log_msg(LOG_INFO, "engine", "KV %s family: %ld pages of %d tokens, %.1f MB",
                f == KV_LOCAL ? "local" : "global", n, pt,
                (double)n * (double)kv_layout_page_bytes(&e->layout[f]) / 1e6);
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

/* The model and its weights: from the checkpoint (CPU: mapped; GPU: uploaded) or, on the GPU
 * with model.weights = dummy, seeded random at the compiled-in geometry of model.name. */
static int open_weights(engine *e) {
    const g4_config *c = &e->cfg;
    if (c->model.weights == G4_WEIGHTS_DUMMY) {
        e->model = g4_model_find(c->model.name);
        if (!e->model) {
            log_msg(LOG_ERROR, "engine", "model.name = %s is not a compiled-in model",
                    c->model.name);
            return -1;
        }
        if (!e->gpu) {
            log_msg(LOG_ERROR, "engine",
                    "model.weights = dummy fills random weights on the GPU, and there is none "
                    "(%s); the CPU reference backend needs a checkpoint (model.path)",
                    e->device);
            return -1;
        }
        return device_weights_bind(NULL, e->model, 0x67347069706eull, &e->w, &e->dw);
    }
    if (match_model(e) != 0 || loader_open(c->model.path, &e->ld) != 0) return -1;
    if (e->gpu) return device_weights_bind(e->ld, e->model, 0, &e->w, &e->dw);
    return weights_bind(e->ld, e->model, &e->w);
}

/* The ops' workspaces at their largest, before the KV budget takes what is left: no step
 * allocates after this, which graph capture needs and serving likes. */
static int reserve_workspaces(engine *e) {
    const g4_model_desc *m = e->model;
    size_t moe = m->n_expert ? k_moe_experts_workspace(e->max_rows, m->d_model, m->d_expert,
                                                       m->n_expert, m->top_k)
                             : 0;
    if (k_workspace_reserve(moe, k_attention_workspace()) != 0) {
        log_msg(LOG_ERROR, "engine",
                "could not set up the ops' device workspaces and kernel attributes (out of device "
                "memory, or a device error logged above)");
        return -1;
    }
    return 0;
}

/* serve.cuda_graphs: the engine's own stream, pinned staging for the graphs' copies, and the
 * padded decode sizes (powers of two up to serve.max_batch, and max_batch itself). */
static int open_graphs(engine *e, size_t meta_bytes) {
    if (k_stream_create(&e->stream) != 0 || !(e->h_meta = k_host_alloc_pinned(meta_bytes)) ||
        !(e->h_argmax = k_host_alloc_pinned(2 * sizeof(int32_t) * (size_t)e->max_out_rows))) {
        log_msg(LOG_ERROR, "engine", "serve.cuda_graphs: no stream or pinned host memory");
        return -1;
    }
    int mb = e->cfg.serve.max_batch < e->max_out_rows ? e->cfg.serve.max_batch : e->max_out_rows;
    for (int p = 1; p < mb && e->n_graph_sizes < GRAPH_SIZES - 1; p *= 2)
        e->graph_rows[e->n_graph_sizes++] = p;
    e->graph_rows[e->n_graph_sizes++] = mb;
    e->s.stream = e->stream;
    return 0;
}

/* GPU: one buffer for the top-k requests, ids and logits of max_out_rows rows. */
static int alloc_topk(engine *e) {
    size_t rows = (size_t)e->max_out_rows;
    char *p =
        engine_alloc(e, rows * (sizeof(int32_t) * (1 + K_TOPK_MAX) + sizeof(bf16_t) * K_TOPK_MAX));
    if (!p) return -1;
    e->d_topk = (int32_t *)p;
    e->d_topk_vals = (bf16_t *)(p + rows * sizeof(int32_t) * (1 + K_TOPK_MAX));
    return 0;
}

int engine_open(const g4_config *cfg, int max_out_rows, engine **out) {
    *out = NULL;
    double t_open = log_clock_s();
    engine *e = calloc(1, sizeof *e);
    if (!e) return -1;
    e->cfg = *cfg;
    if (cfg->debug.backend == G4_BACKEND_CPU)
        snprintf(e->device, sizeof e->device, "debug.backend = cpu");
    else
        e->gpu = k_device_init(e->device, sizeof e->device) == 0 && k_n_schedules > 0;
    if (cfg->debug.backend == G4_BACKEND_GPU && !e->gpu) {
        log_msg(LOG_ERROR, "engine", "debug.backend = gpu, but no GPU backend: %s", e->device);
        free(e);
        return -1;
    }
    const char *variant = cfg->kv.local == G4_KV_LOCAL_FP8 ? "local_fp8" : "local_bf16";
    e->max_rows = cfg->serve.prefill_chunk + cfg->serve.max_batch;
    e->max_out_rows = max_out_rows > 0 ? max_out_rows : cfg->serve.max_batch;
    /* a graph replays a fixed sequence of launches; debug.sync's per-step synchronisation
     * cannot be captured, so it turns graphs off */
    e->graphs = e->gpu && cfg->serve.cuda_graphs && !cfg->debug.sync;
    /* debug.gemm: the switch is process-wide, so it is on only while this engine's plans are
     * made */
    if (e->gpu && cfg->debug.gemm_plain) {
        log_msg(LOG_INFO, "engine", "debug.gemm = plain: projections on the CUDA-core kernel");
        k_gemm_plain(1);
    }
    int load_rc =
        open_weights(e) != 0 ||
        (e->gpu && device_weights_plans(e->dw, e->model, &e->w, e->max_rows, e->max_out_rows));
    if (e->gpu) k_gemm_plain(0);
    if (load_rc) {
        engine_close(e);
        return -1;
    }
    e->schedule = e->gpu
                      ? g4_schedule_find(k_schedules, k_n_schedules, e->model->name, variant)
                      : g4_schedule_find(ref_schedules, ref_n_schedules, e->model->name, variant);
    size_t meta = sizeof(int32_t) * (3 * (size_t)e->max_rows + (size_t)e->max_out_rows);
    e->spare_ids = calloc((size_t)e->max_out_rows, sizeof *e->spare_ids);
    if (!e->schedule || !e->spare_ids || alloc_state(e) != 0 ||
        (e->gpu && !(e->d_meta = engine_alloc(e, meta))) ||
        (e->gpu &&
         !(e->d_argmax = engine_alloc(e, 2 * sizeof(int32_t) * (size_t)e->max_out_rows))) ||
        (e->gpu && alloc_topk(e) != 0) || (e->gpu && reserve_workspaces(e) != 0) ||
        (e->graphs && open_graphs(e, meta) != 0) || open_pool(e) != 0) {
        engine_close(e);
        return -1;
    }
    if (e->gpu)
        log_msg(LOG_INFO, "engine",
                "device %s; model %s (%s weights, %.2f GB), schedule %s; ready in %.1f s",
                e->device, e->model->name,
                cfg->model.weights == G4_WEIGHTS_DUMMY ? "dummy" : "checkpoint",
                (double)device_weights_bytes(e->dw) / 1e9, variant, log_clock_s() - t_open);
    else
        log_msg(LOG_INFO, "engine", "model %s, schedule %s, CPU reference backend (%s)",
                e->model->name, variant, e->device);
    *out = e;
    return 0;
}

void engine_close(engine *e) {
    if (!e) return;
    for (int i = 0; i < e->n_graph_sizes; i++)
        k_graph_destroy(e->graph[i]);
    if (e->stream) k_stream_sync(e->stream);
    k_stream_destroy(e->stream);
    k_host_free_pinned(e->h_meta);
    k_host_free_pinned(e->h_argmax);
    k_host_free_pinned(e->h_tables[0]);
    k_host_free_pinned(e->h_tables[1]);
    for (int i = 0; i < e->n_buffers; i++) {
        if (e->gpu)
            k_device_free(e->buffers[i]);
        else
            free(e->buffers[i]);
    }
    free(e->changed);
    free(e->check.host);
    free(e->spare_ids);
    device_weights_free(e->dw);
    kv_pool_destroy(e->pool);
    loader_close(e->ld);
    free(e);
}

const g4_model_desc *engine_model(const engine *e) { return e->model; }
const g4_weights *engine_weights(const engine *e) { return &e->w; }
const char *engine_variant(const engine *e) { return e->schedule->variant; }
int engine_on_gpu(const engine *e) { return e->gpu; }
int engine_max_rows(const engine *e) { return e->max_rows; }

int engine_seq_reserve(engine *e, int seq, int pos_begin, int pos_end) {
    return kv_pool_reserve(e->pool, seq, pos_begin, pos_end);
}

void engine_seq_release_front(engine *e, int seq, int pos) {
    kv_pool_release_front(e->pool, seq, pos);
}

void engine_seq_free(engine *e, int seq) { kv_pool_free_seq(e->pool, seq); }

int engine_free_pages(const engine *e, int family) {
    return kv_pool_free_pages(e->pool, (enum kv_family)family);
}

int engine_usable_pages(const engine *e, int family) {
    return (int)e->n_pages[family == KV_LOCAL ? KV_LOCAL : KV_GLOBAL] - 1;
}

double engine_family_bytes(const engine *e, int family) {
    int f = family == KV_LOCAL ? KV_LOCAL : KV_GLOBAL;
    return (double)e->n_pages[f] * (double)kv_layout_page_bytes(&e->layout[f]);
}

int engine_elem_bytes(const engine *e, int family) {
    return e->layout[family == KV_LOCAL ? KV_LOCAL : KV_GLOBAL].elem_bytes;
}

int engine_pages_worst(const engine *e, int family, int n_tokens) {
    int pt = e->cfg.kv.page_tokens;
    int all = (n_tokens + pt - 1) / pt;
    if (family == KV_GLOBAL) return all;
    int chunk = e->cfg.serve.prefill_chunk < n_tokens ? e->cfg.serve.prefill_chunk : n_tokens;
    int window = (e->model->window - 1 + chunk + pt - 1) / pt + 1;
    return window < all ? window : all;
}

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
    if (e->cfg.debug.check_finite) {
        s->hook_ctx = &e->check;
        int rc = step_check_finite(s, layer, step);
        s->hook_ctx = e;
        if (rc != 0) return rc;
    }
    return e->cfg.debug.sync ? k_sync() : 0;
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

/* Copies of the step path. With serve.cuda_graphs the kernels run on the engine's non-blocking
 * stream, which the legacy synchronous copies would not wait for, so every copy goes on that
 * stream (device-to-host ones then wait for it). */
static int to_device(engine *e, void *dst, const void *src, size_t bytes) {
    return e->stream ? k_copy_to_device_async(dst, src, bytes, e->stream)
                     : k_copy_to_device(dst, src, bytes);
}

static int to_host(engine *e, void *dst, const void *src, size_t bytes) {
    if (!e->stream) return k_copy_to_host(dst, src, bytes);
    return k_copy_to_host_async(dst, src, bytes, e->stream) != 0 || k_stream_sync(e->stream) != 0
               ? K_ERR_DEVICE
               : 0;
}

/* GPU: the step's row metadata and the rows of both families' page tables that changed since
 * the last step (kv_pool_take_changed: every row at the first step) go to the device. */
static int stage_step(engine *e, const engine_batch *b) {
    int32_t *ids = e->d_meta, *pos = ids + e->max_rows, *seq = pos + e->max_rows;
    int32_t *src = seq + e->max_rows;
    size_t r = sizeof(int32_t) * (size_t)b->rows;
    if (to_device(e, ids, b->ids, r) || to_device(e, pos, b->pos, r) ||
        to_device(e, seq, b->seq, r) ||
        to_device(e, src, b->out_src, sizeof(int32_t) * (size_t)b->out_rows))
        return -1;
    size_t row = e->table_bytes / (size_t)e->cfg.serve.max_batch;
    for (int f = 0; f < 2; f++) {
        int n = kv_pool_take_changed(e->pool, (enum kv_family)f, e->changed);
        for (int i = 0; i < n; i++)
            if (to_device(e, (char *)e->d_tables[f] + (size_t)e->changed[i] * row,
                          kv_pool_table(e->pool, (enum kv_family)f, e->changed[i]), row))
                return -1;
    }
    e->s.ids = ids;
    e->s.pos = pos;
    e->s.seq = seq;
    e->s.out_src = src;
    return 0;
}

/* The out rows' logits (all, or those need_logits asks for) to the host. */
static int fetch_logits(engine *e, const engine_batch *b, bf16_t *logits) {
    const bf16_t *dev = e->s.logits;
    size_t row = (size_t)e->model->n_vocab;
    if (!b->need_logits) {
        size_t bytes = (size_t)b->out_rows * row * sizeof(bf16_t);
        if (e->gpu) return to_host(e, logits, dev, bytes) == 0 ? 0 : K_ERR_DEVICE;
        memcpy(logits, dev, bytes);
        return 0;
    }
    for (int o = 0; o < b->out_rows; o++) {
        if (!b->need_logits[o]) continue;
        size_t off = (size_t)o * row, bytes = row * sizeof(bf16_t);
        if (e->gpu) {
            if (to_host(e, logits + off, dev + off, bytes) != 0) return K_ERR_DEVICE;
        } else {
            memcpy(logits + off, dev + off, bytes);
        }
    }
    return 0;
}

/* The sampled rows' top-k candidates (b->topk) to the host. */
static int fetch_candidates(engine *e, const engine_batch *b) {
    int wanted = 0; /* a step of greedy rows skips the launch and the copies */
    for (int o = 0; b->topk && o < b->out_rows; o++)
        wanted |= b->topk[o] > 0;
    if (!wanted) return 0;
    k_topk_args a = {.logits = e->s.logits,
                     .rows = b->out_rows,
                     .n_vocab = e->model->n_vocab,
                     .k_max = K_TOPK_MAX};
    if (!e->gpu) {
        a.ids = b->topk_ids;
        a.vals = b->topk_vals;
        a.k = b->topk;
        return ref_topk(&a, NULL) == K_OK ? 0 : K_ERR_SHAPE;
    }
    size_t n = (size_t)b->out_rows * K_TOPK_MAX;
    a.k = e->d_topk;
    a.ids = e->d_topk + e->max_out_rows;
    a.vals = e->d_topk_vals;
    if (to_device(e, e->d_topk, b->topk, sizeof(int32_t) * (size_t)b->out_rows) != 0 ||
        k_topk(&a, e->stream) != 0 || to_host(e, b->topk_ids, a.ids, n * sizeof(int32_t)) != 0 ||
        to_host(e, b->topk_vals, a.vals, n * sizeof(bf16_t)) != 0)
        return K_ERR_DEVICE;
    return 0;
}

/* The out rows' greedy tokens (when asked for) and logits to the host. */
static int fetch_outputs(engine *e, const engine_batch *b, bf16_t *logits) {
    g4_state *s = &e->s;
    size_t ids = sizeof(int32_t) * (size_t)b->out_rows;
    k_argmax_args am = {.id = e->gpu ? e->d_argmax : b->argmax,
                        .logits = s->logits,
                        .rows = b->out_rows,
                        .n_vocab = e->model->n_vocab,
                        .nonfinite = e->gpu ? e->d_argmax + e->max_out_rows : b->nonfinite};
    if ((b->argmax || b->nonfinite) && b->out_rows > 0) {
        int32_t *host_ids = b->argmax ? b->argmax : e->spare_ids;
        if (!e->gpu) am.id = host_ids;
        int rc = e->gpu ? k_argmax(&am, s->stream) : ref_argmax(&am, NULL);
        if (rc == 0 && e->gpu) rc = to_host(e, host_ids, e->d_argmax, ids);
        if (rc == 0 && e->gpu && b->nonfinite)
            rc = to_host(e, b->nonfinite, e->d_argmax + e->max_out_rows, ids);
        if (rc != 0) return K_ERR_DEVICE;
    }
    if (fetch_candidates(e, b) != 0) return K_ERR_DEVICE;
    return fetch_logits(e, b, logits);
}

/* ---- CUDA-graph steps (serve.cuda_graphs) ---- */

/* The padded size index a step can replay at, or -1. A graph step has every row as an out row
 * in row order (decode steps; also a short prompt whose every position wants logits) and no
 * per-step hook; it is padded to the next captured size with rows of the padding slot. */
static int graph_index(const engine *e, const engine_batch *b) {
    if (!e->graphs || e->s.hook || b->out_rows != b->rows) return -1;
    for (int r = 0; r < b->rows; r++)
        if (b->out_src[r] != r) return -1;
    for (int i = 0; i < e->n_graph_sizes; i++)
        if (e->graph_rows[i] >= b->rows) return i;
    return -1;
}

/* Enqueues what a graph step replays: the staged rows and tables from pinned memory, the
 * forward pass, the argmax and its copy back. rows = the padded size. */
static int enqueue_graph_step(engine *e, int rows) {
    g4_state *s = &e->s;
    size_t r = sizeof(int32_t) * (size_t)rows, stride = (size_t)e->max_rows;
    int32_t *d = e->d_meta, *h = e->h_meta;
    for (size_t part = 0; part < 4; part++) /* ids, pos, seq, out_src: max_rows apart */
        if (k_copy_to_device_async(d + part * stride, h + part * stride, r, e->stream))
            return K_ERR_DEVICE;
    for (int f = 0; f < 2; f++)
        if (k_copy_to_device_async(e->d_tables[f], e->h_tables[f], e->table_bytes, e->stream))
            return K_ERR_DEVICE;
    s->rows = s->out_rows = rows;
    s->ids = d;
    s->pos = d + stride;
    s->seq = d + 2 * stride;
    s->out_src = d + 3 * stride;
    s->max_pos = 0; /* the grid at the tables' reach: the same launches whatever the positions */
    int rc = e->schedule->forward(s);
    if (rc != 0) return rc;
    k_argmax_args am = {.id = e->d_argmax,
                        .logits = s->logits,
                        .rows = rows,
                        .n_vocab = e->model->n_vocab,
                        .nonfinite = e->d_argmax + e->max_out_rows};
    if (k_argmax(&am, e->stream) != 0 ||
        k_copy_to_host_async(e->h_argmax, e->d_argmax, r, e->stream) != 0 ||
        k_copy_to_host_async(e->h_argmax + e->max_out_rows, e->d_argmax + e->max_out_rows, r,
                             e->stream) != 0)
        return K_ERR_DEVICE;
    return 0;
}

/* Runs b through the graph of size index gi, capturing it on first use. */
static int graph_step(engine *e, const engine_batch *b, int gi, bf16_t *logits) {
    int rows = e->graph_rows[gi], pad_seq = e->cfg.serve.max_batch;
    int32_t *ids = e->h_meta, *pos = ids + e->max_rows, *seq = pos + e->max_rows;
    int32_t *src = seq + e->max_rows;
    for (int r = 0; r < rows; r++) {
        int real = r < b->rows;
        ids[r] = real ? b->ids[r] : 0;
        pos[r] = real ? b->pos[r] : 0;
        seq[r] = real ? b->seq[r] : pad_seq; /* the padding slot: every page is page 0 */
        src[r] = r;
    }
    for (int f = 0; f < 2; f++)
        memcpy(e->h_tables[f], kv_pool_table(e->pool, (enum kv_family)f, 0), e->table_bytes);
    if (!e->graph[gi]) {
        if (k_capture_begin(e->stream) != 0) return K_ERR_DEVICE;
        int rc = enqueue_graph_step(e, rows);
        k_graph *g = NULL;
        int end = k_capture_end(e->stream, &g); /* ends the capture even after a failure */
        if (rc != 0 || end != 0) {
            k_graph_destroy(g);
            log_msg(LOG_ERROR, "engine", "capturing the %d-row decode graph failed (code %d/%d)",
                    rows, rc, end);
            return rc ? rc : K_ERR_DEVICE;
        }
        e->graph[gi] = g;
        log_msg(LOG_DEBUG, "engine", "captured the %d-row decode graph", rows);
    }
    if (k_graph_launch(e->graph[gi], e->stream) != 0 || k_stream_sync(e->stream) != 0)
        return K_ERR_DEVICE;
    if (b->argmax) memcpy(b->argmax, e->h_argmax, sizeof(int32_t) * (size_t)b->rows);
    if (b->nonfinite)
        memcpy(b->nonfinite, e->h_argmax + e->max_out_rows, sizeof(int32_t) * (size_t)b->rows);
    if (fetch_candidates(e, b) != 0) return K_ERR_DEVICE;
    return fetch_logits(e, b, logits);
}

int engine_step(engine *e, const engine_batch *b, bf16_t *logits,
                int (*hook)(g4_state *s, int layer, const char *step), void *hook_ctx) {
    if (b->rows <= 0 || b->rows > e->max_rows || b->out_rows < 0 || b->out_rows > e->max_out_rows) {
        log_msg(LOG_ERROR, "engine", "step of %d rows (%d with logits) exceeds %d (%d)", b->rows,
                b->out_rows, e->max_rows, e->max_out_rows);
        return K_ERR_SHAPE;
    }
    g4_state *s = &e->s;
    s->rows = b->rows;
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
    if (!hook && (e->cfg.debug.sync || e->cfg.debug.check_finite || e->fault_armed)) {
        e->check = (step_check){.model = e->model,
                                .gpu = e->gpu,
                                .pos = b->pos,
                                .seq = b->seq,
                                .out_src = b->out_src,
                                .host = e->check.host,
                                .host_elems = e->check.host_elems};
        s->hook = debug_hook;
        s->hook_ctx = e;
    }
    int gi = graph_index(e, b), rc;
    if (gi >= 0) {
        rc = graph_step(e, b, gi, logits);
        if (rc != 0)
            snprintf(e->last_error, sizeof e->last_error, "the %d-row decode graph failed: %s",
                     e->graph_rows[gi], err_name(rc));
        return rc;
    }
    if (e->gpu && stage_step(e, b) != 0) {
        snprintf(e->last_error, sizeof e->last_error, "staging the step's rows failed: %s",
                 err_name(K_ERR_DEVICE));
        return K_ERR_DEVICE;
    }
    rc = e->schedule->forward(s);
    if (rc != 0) {
        snprintf(e->last_error, sizeof e->last_error, "step failed at L%02d.%s: %s",
                 s->failed_layer, s->failed_step ? s->failed_step : "?", err_name(rc));
        log_msg(LOG_ERROR, "engine", "%s (code %d)", e->last_error, rc);
        return rc;
    }
    rc = fetch_outputs(e, b, logits);
    if (rc != 0)
        snprintf(e->last_error, sizeof e->last_error, "copying the step's outputs failed: %s",
                 err_name(rc));
    return rc;
}
