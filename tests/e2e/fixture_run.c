/* tests/e2e/fixture_run.c - a fixture's prompts through the engine (see fixture_run.h). */
#include "tests/e2e/fixture_run.h"

#include "kernels/ref/ref.h"
#include "runtime/base/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 8192 /* the geometry fixtures' 4W prompts are 4096 tokens */
#define MAX_ENGINES 8 /* engines open at once in one test program */

static struct {
    const engine *e;
    kv_pool *pool;
} pools[MAX_ENGINES];

kv_pool *fx_pool(const engine *e) {
    int free_slot = -1;
    for (int i = 0; i < MAX_ENGINES; i++) {
        if (pools[i].e == e) return pools[i].pool;
        if (!pools[i].e && free_slot < 0) free_slot = i;
    }
    if (free_slot < 0) {
        fprintf(stderr, "fixture_run: more than %d engines with a pool\n", MAX_ENGINES);
        return NULL;
    }
    kv_pool_shape sh;
    engine_kv_shape(e, &sh);
    kv_pool *p = kv_pool_create_shape(&sh);
    if (p) {
        pools[free_slot].e = e;
        pools[free_slot].pool = p;
    }
    return p;
}

void fx_close_engine(engine *e) {
    for (int i = 0; e && i < MAX_ENGINES; i++)
        if (pools[i].e == e) {
            kv_pool_destroy(pools[i].pool);
            pools[i].e = NULL;
            pools[i].pool = NULL;
        }
    engine_close(e);
}

engine *fx_open_engine(const char *dir, int max_context, int chunk, int fp8,
                       enum g4_backend backend, int graphs) {
    g4_config c;
    config_defaults(&c);
    snprintf(c.model.path, sizeof c.model.path, "%s", dir);
    c.kv.page_tokens = 4; /* small pages: the window of 8 spans several, releases happen */
    c.serve.max_context = max_context;
    c.serve.prefill_chunk = chunk;
    c.serve.max_batch = 4;
    c.debug.backend = backend;
    c.kv.local = fp8 ? G4_KV_LOCAL_FP8 : G4_KV_LOCAL_BF16;
    c.serve.cuda_graphs = graphs;
    /* G4_FIXTURE_GEMM: debug.gemm (plain: the projections without cuBLASLt, for
     * sanitize_fixtures.sh), through the config's own parser so a bad value is refused */
    const char *gemm = getenv("G4_FIXTURE_GEMM");
    if (gemm && *gemm) {
        char set[64];
        snprintf(set, sizeof set, "debug.gemm=%s", gemm);
        if (config_set(&c, set) != 0) {
            fprintf(stderr, "fixture_run: G4_FIXTURE_GEMM: %s\n", config_last_error());
            return NULL;
        }
    }
    /* G4_FIXTURE_SET: further settings, "key=value ..." (serve.attn_mma=1: the engine gates on
     * the tensor-core attention), through the same parser */
    const char *sets = getenv("G4_FIXTURE_SET");
    if (sets && *sets) {
        char buf[512], *save = NULL;
        snprintf(buf, sizeof buf, "%s", sets);
        for (char *kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save))
            if (config_set(&c, kv) != 0) {
                fprintf(stderr, "fixture_run: G4_FIXTURE_SET: %s\n", config_last_error());
                return NULL;
            }
    }
    if (config_finish(&c) != 0) return NULL;
    engine *e = NULL;
    if (engine_open(&c, chunk, &e) != 0) return NULL;
    return e;
}

int fx_step_range(engine *e, const int32_t *ids, int begin, int end, int prompt, bf16_t *out,
                  int (*hook)(g4_state *, int, const char *), void *ctx) {
    int32_t pos[MAX_ROWS], seq[MAX_ROWS], src[MAX_ROWS];
    uint8_t kind[MAX_ROWS];
    int rows = end - begin;
    if (rows > MAX_ROWS) return -1;
    for (int r = 0; r < rows; r++) {
        pos[r] = begin + r;
        seq[r] = 0;
        src[r] = r;
        kind[r] = prompt != 0;
    }
    kv_pool *pool = fx_pool(e);
    if (!pool) return -1;
    kv_pool_release_front(pool, 0, begin);
    if (kv_pool_reserve(pool, 0, begin, end) != 0) return -1;
    engine_batch b = {.pool = pool,
                      .rows = rows,
                      .ids = ids + begin,
                      .pos = pos,
                      .seq = seq,
                      .out_rows = rows,
                      .out_src = src,
                      .prompt = kind};
    return engine_step(e, &b, out, hook, ctx);
}

int fx_run_case(engine *e, const int32_t *ids, int n, int prefill, int chunk, fx_run *r,
                int (*hook)(g4_state *, int, const char *), void *ctx) {
    int V = engine_model(e)->n_vocab;
    r->n = n;
    r->vocab = V;
    r->logits = malloc((size_t)n * (size_t)V * sizeof(bf16_t));
    if (!r->logits) return -1;
    int rc = 0;
    for (int b = 0; b < prefill && rc == 0; b += chunk) {
        int end = b + chunk < prefill ? b + chunk : prefill;
        rc = fx_step_range(e, ids, b, end, 1, r->logits + (size_t)b * (size_t)V, hook, ctx);
    }
    for (int p = prefill; p < n && rc == 0; p++)
        rc = fx_step_range(e, ids, p, p + 1, 0, r->logits + (size_t)p * (size_t)V, hook, ctx);
    kv_pool_free_seq(fx_pool(e), 0);
    return rc;
}

void fx_log_softmax_row(const bf16_t *logits, int V, float *lp) {
    float mx = -INFINITY;
    for (int i = 0; i < V; i++)
        mx = fmaxf(mx, ref_bf16_to_f32(logits[i]));
    double sum = 0.0;
    for (int i = 0; i < V; i++)
        sum += exp((double)(ref_bf16_to_f32(logits[i]) - mx));
    float lse = mx + (float)log(sum);
    for (int i = 0; i < V; i++)
        lp[i] = ref_bf16_to_f32(logits[i]) - lse;
}

int fx_argmax_row(const bf16_t *logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (ref_bf16_to_f32(logits[i]) > ref_bf16_to_f32(logits[best])) best = i;
    return best; /* strict > keeps the lowest id among ties, as torch.argmax */
}
