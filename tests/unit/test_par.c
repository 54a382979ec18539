/* tests/unit/test_par.c - runtime/par through its header.
 *
 * Owns: par_for runs every piece exactly once whatever the thread count (more threads than
 * pieces, none, one), hands out worker ids below the count it returns, and the sampler's draws
 * and logprobs of many rows made side by side (one work buffer per worker, as runtime/sched/sched.c
 * does) equal the same draws made one after another: nothing in the sampler is shared between
 * calls. */
#include "runtime/text/par.h"
#include "runtime/text/sampler.h"
#include "tests/harness.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PIECES 1000
#define VOCAB 65536
#define ROWS 24
#define WORKERS 4

typedef struct count_ctx {
    atomic_int runs[MAX_PIECES];
    atomic_int bad_worker;
    int workers;
} count_ctx;

static void count_piece(void *ctx, int i, int worker) {
    count_ctx *c = ctx;
    atomic_fetch_add(&c->runs[i], 1);
    if (worker < 0 || worker >= c->workers) atomic_store(&c->bad_worker, 1);
}

static void test_every_piece_once(void) {
    static const int ns[] = {0, 1, 5, 64, MAX_PIECES};
    static const int threads[] = {0, 1, 2, 4, 100};
    int bad = 0;
    char where[96] = "";
    static count_ctx c;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof threads / sizeof threads[0]; b++) {
            for (int i = 0; i < MAX_PIECES; i++)
                atomic_init(&c.runs[i], 0);
            atomic_init(&c.bad_worker, 0);
            c.workers = threads[b] < 1 ? 1 : threads[b]; /* ids below the threads asked for */
            int w = par_for(ns[a], threads[b], count_piece, &c);
            int ok = atomic_load(&c.bad_worker) == 0 && (ns[a] == 0 ? w == 0 : w >= 1);
            int most = threads[b] < 1 ? 1 : threads[b];
            if (ns[a] > 0 && (w > most || w > ns[a])) ok = 0;
            for (int i = 0; i < MAX_PIECES; i++)
                ok &= atomic_load(&c.runs[i]) == (i < ns[a] ? 1 : 0);
            if (!ok && !bad) {
                bad = 1;
                snprintf(where, sizeof where, "n %d threads %d: %d workers", ns[a], threads[b], w);
            }
        }
    TEST_CHECK("par_for_every_piece_once", !bad,
               "n of 0..1000 pieces on 0..100 threads: each piece once, workers within the "
               "count%s%s",
               bad ? "; first failure: " : "", where);
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

typedef struct draw_ctx {
    const uint16_t *logits;
    const sampler_params *params;
    sampler_work *work[WORKERS];
    int32_t tok[ROWS];
    float chosen[ROWS];
    int32_t ids[ROWS][8];
    float lps[ROWS][8];
} draw_ctx;

static void draw(void *ctx, int r, int worker) {
    draw_ctx *d = ctx;
    const uint16_t *row = d->logits + (size_t)r * VOCAB;
    d->tok[r] = sampler_pick(&d->params[r], row, VOCAB, 7 * r + 3, d->work[worker]);
    sampler_logprobs(row, VOCAB, 8, d->tok[r], d->ids[r], d->lps[r], &d->chosen[r],
                     d->work[worker]);
}

static void test_draws_side_by_side(void) {
    uint16_t *logits = malloc(sizeof(uint16_t) * (size_t)ROWS * VOCAB);
    static draw_ctx seq, par;
    sampler_params params[ROWS];
    int ok = logits != NULL;
    for (int w = 0; ok && w < WORKERS; w++)
        ok = (seq.work[w] = sampler_work_new(VOCAB)) != NULL &&
             (par.work[w] = sampler_work_new(VOCAB)) != NULL;
    if (!ok) {
        test_fail("par_draws_equal_sequential", "out of memory");
        return;
    }
    srand(12345);
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < VOCAB; i++) {
            float g = 0;
            for (int j = 0; j < 4; j++)
                g += (float)rand() / (float)RAND_MAX;
            logits[(size_t)r * VOCAB + i] = to_bf16((g - 2.0f) * 3.0f);
        }
        /* temperatures, top-p, min-p and seeds vary by row; top_k 0: the whole row */
        params[r] = (sampler_params){.temperature = 0.5f + 0.1f * (float)(r % 7),
                                     .top_k = 0,
                                     .top_p = r % 3 == 0 ? 0.9f : 1.0f,
                                     .min_p = r % 4 == 1 ? 0.05f : 0.0f,
                                     .seed = 1000u + (uint64_t)r};
    }
    seq.logits = par.logits = logits;
    seq.params = par.params = params;
    for (int r = 0; r < ROWS; r++)
        draw(&seq, r, 0);
    int workers = par_for(ROWS, WORKERS, draw, &par);
    int differ = 0;
    for (int r = 0; r < ROWS; r++)
        differ += seq.tok[r] != par.tok[r] || memcmp(seq.ids[r], par.ids[r], sizeof seq.ids[r]) ||
                  memcmp(seq.lps[r], par.lps[r], sizeof seq.lps[r]) ||
                  memcmp(&seq.chosen[r], &par.chosen[r], sizeof(float));
    TEST_CHECK("par_draws_equal_sequential", differ == 0 && workers >= 1,
               "%d rows of %d ids drawn on %d workers: %d differ from the same draws in turn "
               "(tokens, top-8 logprobs, chosen logprob)",
               ROWS, VOCAB, workers, differ);
    for (int w = 0; w < WORKERS; w++) {
        sampler_work_free(seq.work[w]);
        sampler_work_free(par.work[w]);
    }
    free(logits);
}

int main(void) {
    test_every_piece_once();
    test_draws_side_by_side();
    return harness_exit();
}
