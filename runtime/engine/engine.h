/* runtime/engine/engine.h - one loaded model ready to run steps: its weights, its compiled-in
 * schedule, its two KV families and the activation buffers of a step.
 *
 * The engine runs what it is told: a step is a batch of rows (prefill chunks and decode rows
 * together), each a token at a position of a sequence slot whose KV pages the caller reserved
 * first in its pool (the caller owns the KV budget: engine_kv_shape). Which requests make a step is
 * the scheduler's business, not the engine's. The step runs on the GPU backend when there is a
 * usable device, else on the CPU reference; both sit behind runtime/engine/backend.h and give the
 * same answers to these calls. */
#ifndef G4_ENGINE_H
#define G4_ENGINE_H

#include "graph/schedule.h"
#include "runtime/base/config.h"
#include "runtime/engine/kv_pool.h"

typedef struct engine engine;

/* Opens the model cfg describes: reads <path>/config.json (either layout), matches it against
 * the compiled-in models (refusing with the first differing field and both values), maps and
 * binds the weights, picks the schedule of cfg->kv.local, sizes both KV families and the step
 * buffers. max_out_rows is how many rows of one step may ask for logits (0: serve.max_batch;
 * tests ask for every position of a prompt). Returns 0 and *out, or -1 after logging why. */
int engine_open(const g4_config *cfg, int max_out_rows, engine **out);

void engine_close(engine *e);

const g4_model_desc *engine_model(const engine *e);
const g4_weights *engine_weights(const engine *e);
const char *engine_variant(const engine *e);
/* 1 when the engine runs on the GPU backend. */
int engine_on_gpu(const engine *e);

/* Largest rows a step may carry (serve.prefill_chunk + serve.max_batch). */
int engine_max_rows(const engine *e);

/* The KV pool this engine's stores were sized for: both families' layouts and page counts,
 * the window, serve.max_batch sequence slots and tables of serve.max_context positions. The
 * caller (the scheduler) creates the pool from it (kv_pool_create_shape), owns it, reserves
 * each row's pages in it before a step and hands it over with every batch. */
void engine_kv_shape(const engine *e, kv_pool_shape *out);

typedef struct engine_batch {
    kv_pool *pool;          /* made from engine_kv_shape; every row's positions reserved */
    int rows;               /* tokens in the step, <= engine_max_rows */
    const int32_t *ids;     /* [rows] */
    const int32_t *pos;     /* [rows] */
    const int32_t *seq;     /* [rows] slots, each with its positions reserved */
    int out_rows;           /* rows that want logits, <= max_out_rows */
    const int32_t *out_src; /* [out_rows] indices into the rows */
    /* optional: [rows] 1 where the row's token is a prompt token, 0 where it is a generated one
     * (the token sampled last, a decode row); NULL: every row counts as generated. The engine
     * runs the generated rows first and the prompt rows after them (out rows keep their order),
     * and a projection may run each kind on its own kernel (docs/prompt-rows.md): a row's kind is
     * its request's, never its batch mates', so batch invariance holds. A sequence's rows of one
     * step must be of one kind (the step is refused otherwise). */
    const uint8_t *prompt;
    /* optional: need_logits[o] = 0 skips copying out row o's logits to the host (a greedy row
     * without logprobs needs only its argmax); NULL copies every row */
    const uint8_t *need_logits;
    int32_t *argmax; /* optional out: [out_rows] the greedy token of each out row */
    /* optional out: [out_rows] 1 where the row's logits hold a NaN or an infinity (softcapped
     * logits of a sound computation are finite: such a row's answer must stop), else 0 */
    int32_t *nonfinite;
    /* optional: topk[o] in 0..K_TOPK_MAX asks for out row o's topk[o] best ids in id order and
     * their logits (kernels.h k_topk), into topk_ids / topk_vals [out_rows, K_TOPK_MAX]: a
     * sampled top-k row then needs a few KB instead of its whole row of logits */
    const int32_t *topk;
    int32_t *topk_ids;
    bf16_t *topk_vals;
} engine_batch;

/* 1 when an out row of b asks for top-k candidates (b->topk[o] > 0). */
int engine_batch_wants_topk(const engine_batch *b);

/* Runs one step and copies the bf16 logits (after softcap) of the out rows into logits
 * [out_rows, n_vocab] (row o at o * n_vocab, rows with need_logits[o] = 0 left as they were),
 * and, when b->argmax is set, each out row's greedy token (computed on the device on the GPU
 * backend). hook, when set, runs after every named step (see g4_state). Returns 0, or a
 * negative code after logging the layer and step that failed. */
int engine_step(engine *e, const engine_batch *b, bf16_t *logits,
                int (*hook)(g4_state *s, int layer, const char *step), void *hook_ctx);

/* Why the last engine_step failed, in words ("step failed at L05.attention: a CUDA call
 * failed"); empty after a step that succeeded. */
const char *engine_last_error(const engine *e);

#endif
