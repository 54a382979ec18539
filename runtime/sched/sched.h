/* runtime/sched/sched.h - the scheduler: which requests run, and what each step carries.
 *
 * Owns: the KV pool (the budget: made from engine_kv_shape, each step's pages reserved in it
 * and handed to the engine with the batch), the FIFO queue of admitted-later requests,
 * admission (a request starts only when both KV families can hold its worst case next to
 * every running request's, so a started request never stalls for pages), the step's batch
 * (prefill chunks up to serve.prefill_chunk tokens plus one decode row per running request),
 * sampling, and ending requests (their slots and pages given back). Does not own: reading
 * stdin or parsing lines (runtime/edge/serve.c), the forward pass (engine), what a token adds to
 * the answer, when it ends it, and the answer's lines (runtime/sched/answer.c: each request holds
 * one answer).
 *
 * A request's answer depends only on its own prompt and parameters: the engine computes each
 * row independently of its batch mates and the random stream is a function of (seed, index). */
#ifndef G4_SCHED_H
#define G4_SCHED_H

#include "runtime/sched/answer.h"
#include "runtime/engine/engine.h"
#include "runtime/proto/proto.h"
#include "runtime/text/tokenizer.h"

#include <stdio.h>

typedef struct sched sched;

/* out receives the answer lines. tk may be NULL (token requests only). */
sched *sched_create(engine *e, const tokenizer *tk, const g4_config *cfg, FILE *out);
void sched_destroy(sched *s);

/* --text: every answer goes to sink (copied) instead of JSON lines on out; set before the
 * first sched_submit. */
void sched_set_sink(sched *s, const answer_sink *sink);

/* Takes req (ownership moves to the scheduler, even on error) with its prompt ids (ownership
 * moves too). The caller has checked the ids and the length. Returns 0, or -1 when out of
 * memory (an internal error line was written). An answer that runs out of memory later ends the
 * same way, its pages given back. */
int sched_submit(sched *s, proto_request *req, int32_t *prompt, int n_prompt, double t_arrive);

/* 1 when a request with this id is queued or running. */
int sched_in_flight(const sched *s, const char *id_json);

/* Ends the request with this id with finish_reason "cancelled". Returns 0, or -1 if none. */
int sched_cancel(sched *s, const char *id_json);

/* Ends every queued (not yet started) request with "cancelled" (shutdown). */
void sched_cancel_queued(sched *s);

/* Ends every running request with "cancelled", its pages given back (a second signal). */
void sched_cancel_running(sched *s);

/* 1 if a request of n_tokens positions in all (prompt and answer) could run in an empty KV
 * pool: 0 means it must be refused, as waiting cannot help (kv_pool_could_ever_fit at
 * serve.prefill_chunk). */
int sched_could_ever_fit(const sched *s, int n_tokens);

/* 1 when every usable page of both KV families is free (nothing holds KV). */
int sched_pages_all_free(const sched *s);

/* The KV pool the scheduler owns (for its stats and the tests' page accounting). */
const kv_pool *sched_kv_pool(const sched *s);

/* Rows in the last step (the stats line's last_step_rows). */
long sched_last_step_rows(const sched *s);

/* Requests waiting to start, and running. */
int sched_queued(const sched *s);
int sched_running(const sched *s);

/* Runs one engine step when there is work. Returns 1 after a step, 0 when idle, -1 when the
 * engine step failed: then no token of it was sent, every request with rows in it got an
 * internal error line naming the cause (its terminal line) and gave its pages back, and the
 * queued requests and prompts the step left out go on at the next call. A request whose out
 * row's logits are not finite (NaN or infinity) ends the same way, alone. */
int sched_step(sched *s);

/* Writes a {"event":"stats", ...} line (proto_write_stats). */
void sched_write_stats(sched *s);

/* Monotonic clock in milliseconds. */
double sched_now_ms(void);

#endif
