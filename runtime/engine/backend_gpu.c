/* runtime/engine/backend_gpu.c - the CUDA backend (backend.h): device weights with their GEMM
 * plans, device step buffers, KV stores and page tables, the generated k_ schedule, and
 * serve.cuda_graphs' captured decode steps. In a build without nvcc the k_ calls are
 * kernels/no_gpu.c's, whose k_device_init says why there is no GPU, so probe fails and the
 * engine takes the CPU backend. */
#include "runtime/engine/backend.h"

#include "runtime/model/device_weights.h"
#include "runtime/base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAPH_SIZES 12 /* padded decode sizes 1, 2, 4, ..., max_batch */

struct backend {
    const g4_config *cfg;
    char device[256];
    backend_buffers buffers; /* every alloc (device memory), freed by destroy */
    device_weights *dw;
    backend_sizes z;
    int32_t *d_meta;      /* ids, pos, seq [max_rows each], out_src [max_out_rows] */
    int32_t *d_tables[2]; /* device copies of the page tables, plus the padding slot's row */
    int32_t *d_argmax;    /* [max_out_rows] greedy tokens, then [max_out_rows] non-finite flags */
    int32_t *d_topk;      /* k [max_out_rows], then ids [max_out_rows, K_TOPK_MAX] */
    bf16_t *d_topk_vals;  /* [max_out_rows, K_TOPK_MAX] */
    int *changed;         /* [max_batch] table rows to send, from kv_pool_take_changed */
    int32_t *spare_ids;   /* [max_out_rows] host target when only the flags are wanted */
    size_t table_bytes;   /* one family's tables without the padding row */
    const kv_pool *mirrored; /* the pool whose tables d_tables hold (another: send them all) */
    /* serve.cuda_graphs: decode-only steps replay a graph captured per padded size */
    int graphs;
    g4_stream stream;     /* the backend's stream; NULL (legacy stream) without graphs */
    g4_stream side;       /* serve.moe_branches: the router's and experts' stream */
    int32_t *h_meta;      /* pinned twin of d_meta, the graphs' copy source */
    int32_t *h_argmax;    /* pinned twin of d_argmax, the graphs' copy target */
    int32_t *h_tables[2]; /* pinned twins of d_tables (the padding slot's row is zero) */
    k_graph *graph[GRAPH_SIZES];
    int graph_rows[GRAPH_SIZES];
    int n_graph_sizes;
};

static int gpu_probe(char *why, size_t why_len) {
    if (k_device_init(why, why_len) != 0) return -1;
    if (k_n_schedules == 0) {
        snprintf(why, why_len, "this build has no GPU schedules");
        return -1;
    }
    return 0;
}

static backend *gpu_create(const g4_config *cfg, const char *device) {
    backend *bk = calloc(1, sizeof *bk);
    if (!bk) {
        log_msg(LOG_ERROR, "engine", "out of host memory for the GPU backend");
        return NULL;
    }
    bk->cfg = cfg;
    snprintf(bk->device, sizeof bk->device, "%s", device);
    /* a graph replays a fixed sequence of launches; debug.sync's per-step synchronisation
     * cannot be captured, so it turns graphs off */
    bk->graphs = cfg->serve.cuda_graphs && !cfg->debug.sync;
    k_set_pdl(cfg->serve.pdl);                /* process-wide; the bits are the same either way */
    k_gemm_fuse(cfg->serve.fuse_projections); /* likewise */
    k_set_attn_fold(cfg->serve.attn_fold);    /* likewise */
    k_set_moe_bucket_in_up(cfg->serve.moe_bucket_in_up);   /* likewise */
    k_set_moe_prefill_tiles(cfg->serve.moe_prefill_tiles); /* likewise */
    k_set_moe_ring_zfill(cfg->serve.moe_ring_zfill);       /* likewise */
    k_set_moe_half_tiles(cfg->serve.moe_half_tiles);       /* likewise */
    k_set_moe_weights_a(cfg->serve.moe_weights_a);         /* likewise */
    k_set_row_chain(cfg->serve.row_chain);                 /* likewise */
    k_set_moe_route_lanes(cfg->serve.moe_route_lanes);     /* likewise */
    k_set_wide_loads(cfg->serve.wide_loads);               /* likewise */
    k_set_attn_mma(cfg->serve.attn_mma); /* process-wide; other sums, so other bits */
    k_set_attn_query_tiles(cfg->serve.attn_query_tiles);   /* process-wide; the bits are the same */
    k_set_attn_fp8_frags(cfg->serve.attn_fp8_frags);       /* process-wide; the bits are the same */
    k_set_attn_early_lookup(cfg->serve.attn_early_lookup); /* likewise */
    k_set_attn_longest_first(cfg->serve.attn_longest_first);   /* likewise */
    k_set_attn_stats_together(cfg->serve.attn_stats_together); /* likewise */
    k_set_attn_tile_fold(cfg->serve.attn_tile_fold);           /* likewise */
    k_set_attn_strided_tiles(cfg->serve.attn_strided_tiles);   /* likewise */
    k_set_attn_pair_tiles(cfg->serve.attn_pair_tiles);         /* likewise */
    k_set_attn_flash(cfg->serve.attn_flash);                   /* likewise */
    k_set_attn_prep_rows(cfg->serve.attn_prep_rows);           /* likewise */
    k_set_attn_prompt(cfg->serve.attn_prompt);                 /* other bits for prompt rows */
    k_set_moe_prompt_experts(cfg->serve.prompt_experts);       /* other bits for prompt rows */
    k_set_moe_expert_stream(cfg->serve.expert_stream);         /* the same bits */
    (void)k_set_moe_prompt_tile(cfg->serve.prompt_tile);       /* in range: the config's */
    return bk;
}

static void gpu_destroy(backend *bk) {
    if (!bk) return;
    for (int i = 0; i < bk->n_graph_sizes; i++)
        k_graph_destroy(bk->graph[i]);
    if (bk->stream) k_stream_sync(bk->stream);
    k_stream_destroy(bk->stream);
    k_stream_destroy(bk->side);
    k_host_free_pinned(bk->h_meta);
    k_host_free_pinned(bk->h_argmax);
    k_host_free_pinned(bk->h_tables[0]);
    k_host_free_pinned(bk->h_tables[1]);
    for (int i = 0; i < bk->buffers.n; i++)
        k_device_free(bk->buffers.p[i]);
    free(bk->buffers.p);
    free(bk->changed);
    free(bk->spare_ids);
    device_weights_free(bk->dw);
    free(bk);
}

static void *gpu_alloc(backend *bk, size_t bytes) {
    if (backend_buffers_room(&bk->buffers) != 0) return NULL;
    void *p = k_device_alloc(bytes ? bytes : 1);
    if (p) bk->buffers.p[bk->buffers.n++] = p;
    return p;
}

/* What the device has left after weights and step buffers, less 1 GB for cuBLASLt and the
 * CUDA context. */
static double gpu_free_bytes(backend *bk) {
    (void)bk;
    return (double)k_device_free_bytes() - 1e9;
}

static int gpu_bind_weights(backend *bk, loader *ld, const g4_model_desc *m, uint64_t seed,
                            const backend_sizes *z, g4_weights *w) {
    /* debug.gemm: the switch is process-wide, so it is on only while this engine's plans are
     * made */
    if (bk->cfg->debug.gemm == 1) {
        log_msg(LOG_INFO, "engine", "debug.gemm = plain: projections on the CUDA-core kernel");
        k_gemm_plain(1);
    }
    if (bk->cfg->debug.gemm == 2) {
        log_msg(LOG_INFO, "engine", "debug.gemm = mma: projections on the tensor-core kernel");
        k_gemm_mma(1);
    }
    if (bk->cfg->debug.gemm == 3) k_gemm_auto(1);    /* the default: said at the ready line */
    k_gemm_prompt_plans(bk->cfg->serve.prompt_gemm); /* other bits for prompt rows */
    int rc = device_weights_bind(ld, m, seed, w, &bk->dw) != 0 ||
             device_weights_plans(bk->dw, m, w, z->max_rows, z->max_out_rows) != 0;
    k_gemm_plain(0);
    k_gemm_mma(0);
    k_gemm_auto(0);
    k_gemm_prompt_plans(0);
    return rc ? -1 : 0;
}

static const g4_schedule *gpu_find_schedule(const char *model, const char *variant) {
    return g4_schedule_find(k_schedules, k_n_schedules, model, variant);
}

/* The ops' workspaces at their largest, before the KV budget takes what is left: no step
 * allocates after this, which graph capture needs and serving likes. */
static int reserve_workspaces(const g4_model_desc *m, int max_rows) {
    if (m->n_expert && k_moe_prompt_prepare(m->d_model, m->d_expert, m->n_expert) != K_OK)
        log_msg(LOG_WARN, "engine",
                "serve.prompt_experts: no cuBLASLt plan for the experts' shape (%d x %d: no "
                "split-k-1 pointer-array algorithm, or a device error above); prompt rows' "
                "experts stay on the other kernels",
                m->d_model, m->d_expert);
    size_t moe = m->n_expert ? k_moe_experts_workspace(max_rows, m->d_model, m->d_expert,
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

/* serve.cuda_graphs: the backend's own stream, pinned staging for the graphs' copies, and the
 * padded decode sizes (powers of two up to serve.max_batch, and max_batch itself). */
static int open_graphs(backend *bk, size_t meta_bytes, g4_state *s) {
    int out = bk->z.max_out_rows;
    if (k_stream_create(&bk->stream) != 0 || !(bk->h_meta = k_host_alloc_pinned(meta_bytes)) ||
        !(bk->h_argmax = k_host_alloc_pinned(2 * sizeof(int32_t) * (size_t)out))) {
        log_msg(LOG_ERROR, "engine", "serve.cuda_graphs: no stream or pinned host memory");
        return -1;
    }
    int mb = bk->z.max_batch < out ? bk->z.max_batch : out;
    for (int p = 1; p < mb && bk->n_graph_sizes < GRAPH_SIZES - 1; p *= 2)
        bk->graph_rows[bk->n_graph_sizes++] = p;
    bk->graph_rows[bk->n_graph_sizes++] = mb;
    s->stream = bk->stream;
    return 0;
}

/* serve.moe_branches: the side stream the router and experts run on, its events and its own
 * cuBLASLt workspace (the two branches' prompt-row projections may run on cuBLASLt at once).
 * Vetoed where any is missing: the layers then run in one stream, as with the switch off. */
static void open_branches(backend *bk, g4_state *s) {
    if ((!bk->side && k_stream_create(&bk->side) != 0) || k_stream_branch_setup() != 0 ||
        k_gemm_side_stream(bk->side) != 0) {
        log_msg(LOG_WARN, "engine",
                "serve.moe_branches: off (no second stream, its events or its workspace)");
        s->branch_veto = 1;
        return;
    }
    s->side = bk->side;
}

static int gpu_open_step(backend *bk, const backend_sizes *z, g4_state *s) {
    bk->z = *z;
    size_t out = (size_t)z->max_out_rows;
    size_t meta = sizeof(int32_t) * (3 * (size_t)z->max_rows + out);
    char *topk = NULL;
    if (!(bk->spare_ids = calloc(out, sizeof *bk->spare_ids)) ||
        !(bk->changed = calloc((size_t)z->max_batch, sizeof *bk->changed)) ||
        !(bk->d_meta = gpu_alloc(bk, meta)) ||
        !(bk->d_argmax = gpu_alloc(bk, 2 * sizeof(int32_t) * out)) ||
        !(topk = gpu_alloc(
              bk, out * (sizeof(int32_t) * (1 + K_TOPK_MAX) + sizeof(bf16_t) * K_TOPK_MAX))) ||
        reserve_workspaces(z->model, z->max_rows) != 0 ||
        (bk->graphs && open_graphs(bk, meta, s) != 0))
        return -1;
    bk->d_topk = (int32_t *)topk;
    bk->d_topk_vals = (bf16_t *)(topk + out * sizeof(int32_t) * (1 + K_TOPK_MAX));
    if (bk->cfg->serve.moe_branches > 0 && z->model->n_expert) open_branches(bk, s);
    return 0;
}

/* One more row on the device than the pool has: the padding slot (seq = max_batch) of padded
 * graph steps, every entry physical page 0, the padding page of kv_pool. */
static int gpu_bind_tables(backend *bk, k_kv_view *local, k_kv_view *global) {
    size_t pad_row = (size_t)bk->z.max_pages * sizeof(int32_t);
    bk->table_bytes = (size_t)bk->z.max_batch * pad_row;
    int32_t *zeros = calloc(1, pad_row);
    int ok = zeros != NULL;
    for (int f = 0; ok && f < 2; f++) {
        bk->d_tables[f] = gpu_alloc(bk, bk->table_bytes + pad_row);
        ok = bk->d_tables[f] &&
             k_copy_to_device((char *)bk->d_tables[f] + bk->table_bytes, zeros, pad_row) == 0 &&
             (!bk->graphs || (bk->h_tables[f] = k_host_alloc_pinned(bk->table_bytes + pad_row)));
        if (ok && bk->graphs) memset(bk->h_tables[f], 0, bk->table_bytes + pad_row);
    }
    free(zeros);
    local->tables = bk->d_tables[KV_LOCAL];
    global->tables = bk->d_tables[KV_GLOBAL];
    return ok ? 0 : -1;
}

/* Copies of the step path. With serve.cuda_graphs the kernels run on the backend's
 * non-blocking stream, which the legacy synchronous copies would not wait for, so every copy
 * goes on that stream (device-to-host ones then wait for it). */
static int to_device(backend *bk, void *dst, const void *src, size_t bytes) {
    return bk->stream ? k_copy_to_device_async(dst, src, bytes, bk->stream)
                      : k_copy_to_device(dst, src, bytes);
}

static int to_host(backend *bk, void *dst, const void *src, size_t bytes) {
    if (!bk->stream) return k_copy_to_host(dst, src, bytes);
    return k_copy_to_host_async(dst, src, bytes, bk->stream) != 0 || k_stream_sync(bk->stream) != 0
               ? K_ERR_DEVICE
               : 0;
}

/* The step's row metadata and the rows of both families' page tables that changed since the
 * last step (kv_pool_take_changed: every row at a pool's first step) go to the device; every
 * row when the step brings another pool than the last. */
static int stage_step(backend *bk, const engine_batch *b, g4_state *s) {
    kv_pool *pool = b->pool;
    int max_rows = bk->z.max_rows;
    int32_t *ids = bk->d_meta, *pos = ids + max_rows, *seq = pos + max_rows;
    int32_t *src = seq + max_rows;
    size_t r = sizeof(int32_t) * (size_t)b->rows;
    if (to_device(bk, ids, b->ids, r) || to_device(bk, pos, b->pos, r) ||
        to_device(bk, seq, b->seq, r) ||
        to_device(bk, src, b->out_src, sizeof(int32_t) * (size_t)b->out_rows))
        return -1;
    size_t row = bk->table_bytes / (size_t)bk->z.max_batch;
    int all = pool != bk->mirrored;
    for (int f = 0; f < 2; f++) {
        int n = kv_pool_take_changed(pool, (enum kv_family)f, bk->changed);
        if (all)
            for (n = 0; n < bk->z.max_batch; n++)
                bk->changed[n] = n;
        for (int i = 0; i < n; i++)
            if (to_device(bk, (char *)bk->d_tables[f] + (size_t)bk->changed[i] * row,
                          kv_pool_table(pool, (enum kv_family)f, bk->changed[i]), row))
                return -1;
    }
    bk->mirrored = pool;
    s->ids = ids;
    s->pos = pos;
    s->seq = seq;
    s->out_src = src;
    return 0;
}

/* The out rows' logits (all, or those need_logits asks for) to the host. */
static int fetch_logits(backend *bk, const engine_batch *b, const g4_state *s, bf16_t *logits) {
    size_t row = (size_t)bk->z.model->n_vocab;
    if (!b->need_logits)
        return to_host(bk, logits, s->logits, (size_t)b->out_rows * row * sizeof(bf16_t)) == 0
                   ? 0
                   : K_ERR_DEVICE;
    for (int o = 0; o < b->out_rows; o++) {
        size_t off = (size_t)o * row;
        if (b->need_logits[o] && to_host(bk, logits + off, s->logits + off, row * sizeof(bf16_t)))
            return K_ERR_DEVICE;
    }
    return 0;
}

/* The sampled rows' top-k candidates (b->topk) to the host. */
static int fetch_candidates(backend *bk, const engine_batch *b, const g4_state *s) {
    if (!engine_batch_wants_topk(b)) return 0; /* greedy rows: no launch, no copies */
    k_topk_args a = {.logits = s->logits,
                     .rows = b->out_rows,
                     .n_vocab = bk->z.model->n_vocab,
                     .k_max = K_TOPK_MAX,
                     .k = bk->d_topk,
                     .ids = bk->d_topk + bk->z.max_out_rows,
                     .vals = bk->d_topk_vals};
    size_t n = (size_t)b->out_rows * K_TOPK_MAX;
    if (to_device(bk, bk->d_topk, b->topk, sizeof(int32_t) * (size_t)b->out_rows) != 0 ||
        k_topk(&a, bk->stream) != 0 || to_host(bk, b->topk_ids, a.ids, n * sizeof(int32_t)) != 0 ||
        to_host(bk, b->topk_vals, a.vals, n * sizeof(bf16_t)) != 0)
        return K_ERR_DEVICE;
    return 0;
}

/* The out rows' greedy tokens and flags (when asked for), candidates and logits to the host. */
static int fetch_outputs(backend *bk, const engine_batch *b, const g4_state *s, bf16_t *logits) {
    size_t ids = sizeof(int32_t) * (size_t)b->out_rows;
    if ((b->argmax || b->nonfinite) && b->out_rows > 0) {
        k_argmax_args am = {.id = bk->d_argmax,
                            .logits = s->logits,
                            .rows = b->out_rows,
                            .n_vocab = bk->z.model->n_vocab,
                            .nonfinite = bk->d_argmax + bk->z.max_out_rows};
        int32_t *host_ids = b->argmax ? b->argmax : bk->spare_ids;
        if (k_argmax(&am, s->stream) != 0 || to_host(bk, host_ids, bk->d_argmax, ids) != 0 ||
            (b->nonfinite && to_host(bk, b->nonfinite, am.nonfinite, ids) != 0))
            return K_ERR_DEVICE;
    }
    if (fetch_candidates(bk, b, s) != 0) return K_ERR_DEVICE;
    return fetch_logits(bk, b, s, logits);
}

/* ---- CUDA-graph steps (serve.cuda_graphs) ---- */

/* The padded size index a step can replay at, or -1. A graph step has every row a generated
 * one and an out row in row order (decode steps) and no per-step hook; it is padded to the next
 * captured size with rows of the padding slot. Prompt rows may run on other kernels
 * (k_gemm_args.prompt_rows), which a decode graph does not hold. */
static int graph_index(const backend *bk, const engine_batch *b, const g4_state *s) {
    if (!bk->graphs || s->hook || b->out_rows != b->rows || s->decode_rows != b->rows) return -1;
    for (int r = 0; r < b->rows; r++)
        if (b->out_src[r] != r) return -1;
    for (int i = 0; i < bk->n_graph_sizes; i++)
        if (bk->graph_rows[i] >= b->rows) return i;
    return -1;
}

/* Enqueues what a graph step replays: the staged rows and tables from pinned memory, the
 * forward pass, the argmax and its copy back. rows = the padded size. */
static int enqueue_graph_step(backend *bk, const g4_schedule *sch, g4_state *s, int rows) {
    size_t r = sizeof(int32_t) * (size_t)rows, stride = (size_t)bk->z.max_rows;
    int32_t *d = bk->d_meta, *h = bk->h_meta;
    for (size_t part = 0; part < 4; part++) /* ids, pos, seq, out_src: max_rows apart */
        if (k_copy_to_device_async(d + part * stride, h + part * stride, r, bk->stream))
            return K_ERR_DEVICE;
    for (int f = 0; f < 2; f++)
        if (k_copy_to_device_async(bk->d_tables[f], bk->h_tables[f], bk->table_bytes, bk->stream))
            return K_ERR_DEVICE;
    s->rows = s->out_rows = s->decode_rows = rows;
    s->ids = d;
    s->pos = d + stride;
    s->seq = d + 2 * stride;
    s->out_src = d + 3 * stride;
    s->max_pos = 0; /* the grid at the tables' reach: the same launches whatever the positions */
    int rc = sch->forward(s);
    if (rc != 0) return rc;
    int32_t *flags = bk->d_argmax + bk->z.max_out_rows;
    k_argmax_args am = {.id = bk->d_argmax,
                        .logits = s->logits,
                        .rows = rows,
                        .n_vocab = bk->z.model->n_vocab,
                        .nonfinite = flags};
    if (k_argmax(&am, bk->stream) != 0 ||
        k_copy_to_host_async(bk->h_argmax, bk->d_argmax, r, bk->stream) != 0 ||
        k_copy_to_host_async(bk->h_argmax + bk->z.max_out_rows, flags, r, bk->stream) != 0)
        return K_ERR_DEVICE;
    return 0;
}

/* Runs b through the graph of size index gi, capturing it on first use. */
static int graph_step(backend *bk, const engine_batch *b, const g4_schedule *sch, g4_state *s,
                      int gi, bf16_t *logits) {
    int rows = bk->graph_rows[gi], pad_seq = bk->z.max_batch, max_rows = bk->z.max_rows;
    int32_t *ids = bk->h_meta, *pos = ids + max_rows, *seq = pos + max_rows;
    int32_t *src = seq + max_rows;
    for (int r = 0; r < rows; r++) {
        int real = r < b->rows;
        ids[r] = real ? b->ids[r] : 0;
        pos[r] = real ? b->pos[r] : 0;
        seq[r] = real ? b->seq[r] : pad_seq; /* the padding slot: every page is page 0 */
        src[r] = r;
    }
    for (int f = 0; f < 2; f++)
        memcpy(bk->h_tables[f], kv_pool_table(b->pool, (enum kv_family)f, 0), bk->table_bytes);
    if (!bk->graph[gi]) {
        if (k_capture_begin(bk->stream) != 0) return K_ERR_DEVICE;
        int rc = enqueue_graph_step(bk, sch, s, rows);
        k_graph *g = NULL;
        int end = k_capture_end(bk->stream, &g); /* ends the capture even after a failure */
        if (rc != 0 || end != 0) {
            k_graph_destroy(g);
            log_msg(LOG_ERROR, "engine", "capturing the %d-row decode graph failed (code %d/%d)",
                    rows, rc, end);
            return rc ? rc : K_ERR_DEVICE;
        }
        bk->graph[gi] = g;
        log_msg(LOG_DEBUG, "engine", "captured the %d-row decode graph", rows);
    }
    if (k_graph_launch(bk->graph[gi], bk->stream) != 0 || k_stream_sync(bk->stream) != 0)
        return K_ERR_DEVICE;
    size_t n = sizeof(int32_t) * (size_t)b->rows;
    if (b->argmax) memcpy(b->argmax, bk->h_argmax, n);
    if (b->nonfinite) memcpy(b->nonfinite, bk->h_argmax + bk->z.max_out_rows, n);
    if (fetch_candidates(bk, b, s) != 0) return K_ERR_DEVICE;
    return fetch_logits(bk, b, s, logits);
}

static int gpu_step(backend *bk, const engine_batch *b, const g4_schedule *sch, g4_state *s,
                    bf16_t *logits, backend_failure *where) {
    int gi = graph_index(bk, b, s), rc;
    if (gi >= 0) {
        rc = graph_step(bk, b, sch, s, gi, logits);
        if (rc != 0) *where = (backend_failure){BACKEND_AT_GRAPH, bk->graph_rows[gi]};
        return rc;
    }
    if (stage_step(bk, b, s) != 0) {
        where->at = BACKEND_AT_STAGE;
        return K_ERR_DEVICE;
    }
    rc = sch->forward(s);
    if (rc != 0) {
        /* a step that failed between a fork and its join leaves work on the side stream: what
         * the main stream runs next waits for it */
        if (s->branches) (void)k_stream_join(s->stream, s->side);
        where->at = BACKEND_AT_FORWARD;
        return rc;
    }
    rc = fetch_outputs(bk, b, s, logits);
    if (rc != 0) where->at = BACKEND_AT_OUTPUTS;
    return rc;
}

static int gpu_sync(backend *bk) {
    (void)bk;
    return k_sync();
}

/* The backend's stream (serve.cuda_graphs) does not wait for the legacy stream's copy. */
static int gpu_copy_to_host(void *dst, const void *src, size_t n, g4_stream st) {
    return (st && k_stream_sync(st) != 0) || k_copy_to_host(dst, src, n) != 0 ? K_ERR_DEVICE : 0;
}

static void gpu_log_ready(const backend *bk, const g4_model_desc *m, const char *variant,
                          double seconds) {
    log_msg(LOG_INFO, "engine",
            "device %s; model %s (%s weights, %.2f GB), schedule %s; ready in %.1f s", bk->device,
            m->name, bk->cfg->model.weights == G4_WEIGHTS_DUMMY ? "dummy" : "checkpoint",
            (double)device_weights_bytes(bk->dw) / 1e9, variant, seconds);
}

const backend_ops backend_gpu_ops = {
    .probe = gpu_probe,
    .create = gpu_create,
    .destroy = gpu_destroy,
    .alloc = gpu_alloc,
    .free_bytes = gpu_free_bytes,
    .bind_weights = gpu_bind_weights,
    .find_schedule = gpu_find_schedule,
    .open_step = gpu_open_step,
    .bind_tables = gpu_bind_tables,
    .step = gpu_step,
    .sync = gpu_sync,
    .copy_to_host = gpu_copy_to_host,
    .log_ready = gpu_log_ready,
    .on_gpu = 1,
    .memory = "device",
};
