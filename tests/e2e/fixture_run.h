/* tests/e2e/fixture_run.h - running a fixture's prompts through the engine for the e2e gates
 * (test_fixtures, test_trained): an engine opened on a fixture, one sequence's rows as steps,
 * every position's logits kept.
 *
 * Owns: the engine configuration the fixture gates use (small pages, every row wanting logits).
 * Does not own: the gates' rules or the HF dumps (fixture_dump.h). */
#ifndef G4_FIXTURE_RUN_H
#define G4_FIXTURE_RUN_H

#include "runtime/base/config.h"
#include "runtime/engine/engine.h"

#include <stdint.h>

typedef struct fx_run {
    int first; /* the position of logits row 0 (a waypoint keeps only its tail) */
    int n;     /* positions with logits */
    int vocab;
    bf16_t *logits; /* [n, vocab] */
} fx_run;

/* An engine on the fixture in dir of max_context tokens whose steps take up to `chunk` rows,
 * all wanting logits; kv.local fp8 when fp8; serve.cuda_graphs = graphs. The environment's
 * G4_FIXTURE_GEMM, when set, is its debug.gemm. NULL after logging why. */
engine *fx_open_engine(const char *dir, int max_context, int chunk, int fp8,
                       enum g4_backend backend, int graphs);

/* The KV pool of an engine from fx_open_engine (made from engine_kv_shape at the first call,
 * the caller side of the KV budget that the scheduler holds when serving), or NULL when out
 * of memory. */
kv_pool *fx_pool(const engine *e);

/* Frees e's pool (if one was made) and closes e. NULL is fine. */
void fx_close_engine(engine *e);

/* Runs tokens [begin, end) of ids on slot 0 as one step, the logits of every row to out;
 * prompt: 1 when the rows are prompt tokens, 0 when generated ones (engine_batch.prompt: they
 * may take other projection kernels, docs/prompt-rows.md). */
int fx_step_range(engine *e, const int32_t *ids, int begin, int end, int prompt, bf16_t *out,
                  int (*hook)(g4_state *, int, const char *), void *ctx);

/* Prefills the first `prefill` tokens (prompt rows) in chunks of `chunk`, then decodes the rest
 * one token at a time (generated rows, teacher-forced): the logits of every position land in r
 * (freed by the caller). */
int fx_run_case(engine *e, const int32_t *ids, int n, int prefill, int chunk, fx_run *r,
                int (*hook)(g4_state *, int, const char *), void *ctx);

/* fp32 log-softmax of one row of bf16 logits (the sum in double). */
void fx_log_softmax_row(const bf16_t *logits, int V, float *lp);

/* The row's argmax, the lowest id among ties (torch.argmax's rule). */
int fx_argmax_row(const bf16_t *logits, int V);

#endif
