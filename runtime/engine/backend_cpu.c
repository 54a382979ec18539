/* runtime/engine/backend_cpu.c - the CPU reference backend (backend.h): the checkpoint's tensors
 * read where the loader mapped them, zeroed host buffers, the generated ref_ schedule, and the
 * argmax and top-k of kernels/ref. Always available; it is what runs without a GPU and what
 * the GPU kernels are judged against. */
#include "runtime/engine/backend.h"

#include "kernels/ref/ref.h"
#include "runtime/base/log.h"
#include "runtime/model/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct backend {
    char device[256];        /* why the CPU runs (no GPU, or debug.backend = cpu) */
    backend_buffers buffers; /* every alloc, freed by destroy */
    int32_t *spare_ids;      /* [max_out_rows] argmax target when only the flags are wanted */
    int n_vocab;
};

static int cpu_probe(char *why, size_t why_len) {
    (void)why;
    (void)why_len;
    return 0;
}

static backend *cpu_create(const g4_config *cfg, const char *device) {
    (void)cfg;
    backend *bk = calloc(1, sizeof *bk);
    if (!bk) {
        log_msg(LOG_ERROR, "engine", "out of host memory for the CPU backend");
        return NULL;
    }
    snprintf(bk->device, sizeof bk->device, "%s", device);
    return bk;
}

static void cpu_destroy(backend *bk) {
    if (!bk) return;
    for (int i = 0; i < bk->buffers.n; i++)
        free(bk->buffers.p[i]);
    free(bk->buffers.p);
    free(bk);
}

static void *cpu_alloc(backend *bk, size_t bytes) {
    if (backend_buffers_room(&bk->buffers) != 0) return NULL;
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) bk->buffers.p[bk->buffers.n++] = p;
    return p;
}

static double cpu_free_bytes(backend *bk) {
    (void)bk;
    return HUGE_VAL;
}

static int cpu_bind_weights(backend *bk, loader *ld, const g4_model_desc *m, uint64_t seed,
                            const backend_sizes *z, g4_weights *w) {
    (void)seed;
    (void)z;
    if (!ld) {
        log_msg(LOG_ERROR, "engine",
                "model.weights = dummy fills random weights on the GPU, and there is none "
                "(%s); the CPU reference backend needs a checkpoint (model.path)",
                bk->device);
        return -1;
    }
    return weights_bind(ld, m, w);
}

static const g4_schedule *cpu_find_schedule(const char *model, const char *variant) {
    return g4_schedule_find(ref_schedules, ref_n_schedules, model, variant);
}

static int cpu_open_step(backend *bk, const backend_sizes *z, g4_state *s) {
    (void)s;
    bk->n_vocab = z->model->n_vocab;
    bk->spare_ids = cpu_alloc(bk, sizeof(int32_t) * (size_t)z->max_out_rows);
    return bk->spare_ids ? 0 : -1;
}

/* The kernels read the step's pool's own tables (cpu_step points the views at them). */
static int cpu_bind_tables(backend *bk, k_kv_view *local, k_kv_view *global) {
    (void)bk;
    (void)local;
    (void)global;
    return 0;
}

static int cpu_outputs(backend *bk, const engine_batch *b, const g4_state *s, bf16_t *logits) {
    if ((b->argmax || b->nonfinite) && b->out_rows > 0) {
        k_argmax_args am = {.id = b->argmax ? b->argmax : bk->spare_ids,
                            .logits = s->logits,
                            .rows = b->out_rows,
                            .n_vocab = bk->n_vocab,
                            .nonfinite = b->nonfinite};
        int rc = ref_argmax(&am, NULL);
        if (rc != 0) return rc;
    }
    if (engine_batch_wants_topk(b)) {
        k_topk_args a = {.logits = s->logits,
                         .rows = b->out_rows,
                         .n_vocab = bk->n_vocab,
                         .k_max = K_TOPK_MAX,
                         .k = b->topk,
                         .ids = b->topk_ids,
                         .vals = b->topk_vals};
        int rc = ref_topk(&a, NULL);
        if (rc != 0) return rc;
    }
    size_t row = (size_t)bk->n_vocab;
    for (int o = 0; o < b->out_rows; o++)
        if (!b->need_logits || b->need_logits[o])
            memcpy(logits + (size_t)o * row, s->logits + (size_t)o * row, row * sizeof(bf16_t));
    return 0;
}

static int cpu_step(backend *bk, const engine_batch *b, const g4_schedule *sch, g4_state *s,
                    bf16_t *logits, backend_failure *where) {
    s->kv_local.tables = kv_pool_table(b->pool, KV_LOCAL, 0);
    s->kv_global.tables = kv_pool_table(b->pool, KV_GLOBAL, 0);
    int rc = sch->forward(s);
    if (rc != 0) {
        where->at = BACKEND_AT_FORWARD;
        return rc;
    }
    rc = cpu_outputs(bk, b, s, logits);
    if (rc != 0) where->at = BACKEND_AT_OUTPUTS;
    return rc;
}

static int cpu_sync(backend *bk) {
    (void)bk;
    return 0;
}

static void cpu_log_ready(const backend *bk, const g4_model_desc *m, const char *variant,
                          double seconds) {
    (void)seconds;
    log_msg(LOG_INFO, "engine", "model %s, schedule %s, CPU reference backend (%s)", m->name,
            variant, bk->device);
}

const backend_ops backend_cpu_ops = {
    .probe = cpu_probe,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free_bytes = cpu_free_bytes,
    .bind_weights = cpu_bind_weights,
    .find_schedule = cpu_find_schedule,
    .open_step = cpu_open_step,
    .bind_tables = cpu_bind_tables,
    .step = cpu_step,
    .sync = cpu_sync,
    .copy_to_host = NULL,
    .log_ready = cpu_log_ready,
    .on_gpu = 0,
    .memory = "host",
};
