/* runtime/text/sampler.h - choosing the next token from a row of logits, on the host.
 *
 * Owns: greedy (ties to the lowest id), temperature, top-k, top-p and min-p sampling with a
 * random stream that is a function of (seed, token index) only, so a request's answer never
 * depends on what shares its batch; the same pick from a row's top-k candidates (what the
 * engine hands back for sampled top-k rows instead of the whole row); and the top-n logprobs
 * of a row. Does not own: stop tokens or strings (runtime/sched/answer.c), logits (the engine). */
#ifndef G4_SAMPLER_H
#define G4_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct sampler_params {
    float temperature; /* 0: greedy */
    int top_k;         /* 0: off */
    float top_p;       /* 1 (or 0): off */
    float min_p;       /* 0 (or NaN): off */
    uint64_t seed;
} sampler_params;

/* A sampler's scratch for rows of up to n_vocab logits (~4.8 MB at 262,144), one per thread
 * that draws at a time. sampler_work_new returns NULL when out of memory. */
typedef struct sampler_work sampler_work;
sampler_work *sampler_work_new(int n_vocab);
void sampler_work_free(sampler_work *w);

/* Picks a token from logits[0..n_vocab) (bf16 bit patterns, after softcap) for the token at
 * position index of the answer. work: from sampler_work_new(>= n_vocab), or NULL for the
 * greedy pick whatever the params; -1 for bad arguments. Greedy returns the lowest id among the
 * largest logits; otherwise softmax(logits / temperature) is filtered by top-k, then top-p
 * (smallest set whose mass reaches p, by descending probability, ties by id), then min-p
 * (probability >= min_p * the largest), renormalised, and sampled with the uniform number u(seed,
 * index). */
int32_t sampler_pick(const sampler_params *p, const uint16_t *logits, int n_vocab, int index,
                     sampler_work *work);

/* sampler_pick from candidates instead of a whole row, for a request with 0 < top_k: ids[0..n)
 * in ascending id order and their logits vals, the top_k best of the row (larger logit, ties
 * to the lower id: kernels' k_topk / ref_topk, with n = min(top_k, n_vocab)). Returns the id
 * sampler_pick would return over the whole row: its top-k set is the same (ordering by logit
 * or by probability agrees wherever probabilities differ, and distinct bf16 logits give
 * distinct fp32 probabilities above the underflow range, unless a large temperature folds
 * logits a few ulps apart into one probability: at T = 100, logits near 1e-4 one bf16 step
 * apart; there the whole row breaks the tie by id and the candidates were cut by logit), and
 * every later step (maximum, weights, top-p, min-p, the draw) sees the same values in the
 * same order. work as above. */
int32_t sampler_pick_candidates(const sampler_params *p, const int32_t *ids, const uint16_t *vals,
                                int n, int index, sampler_work *work);

/* The uniform number in [0, 1) of (seed, index): a counter-based generator (no state). */
double sampler_uniform(uint64_t seed, uint64_t index);

/* The n (<= 20) largest log-softmax values of logits (ties by lower id) into ids/lps, and the
 * log-probability of chosen into *chosen_lp. Log-softmax is over the raw logits (temperature
 * 1), in fp32 with a double-precision sum. work (from sampler_work_new, any size; NULL: slower)
 * only speeds it up: the same bits either way. */
void sampler_logprobs(const uint16_t *logits, int n_vocab, int n, int32_t chosen, int32_t *ids,
                      float *lps, float *chosen_lp, sampler_work *work);

#endif
