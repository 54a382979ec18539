/* runtime/sampler.c - see sampler.h.
 *
 * Owns: the host sampler (greedy, temperature, top-k, top-p, min-p), its counter-based random
 * stream and the top-n logprobs of a row. Does not own: stop rules, logits, batching.
 *
 * Why the shape: one total order, "larger unnormalised probability first, then lower id",
 * defines everything, so the answer is a pure function of (logits, params, seed, index).
 * Under that order top-k, top-p and min-p each keep a prefix, so the kept set is the
 * shortest of three prefixes and the inverse CDF walks it in the same order. A full sort of
 * 262,144 entries per token would dominate, so candidates go through a heap: top-k is a
 * size-k selection, and the sorted prefix is popped lazily, only as far as the filters and
 * the pick need. Probabilities are fp32 expf((logit - max) / T) summed in double; expf is
 * glibc's or musl's, which share the same implementation (ARM optimized-routines), so the
 * two builds agree; another libm may differ in the last ulp. NaN logits count as -inf. */
#include "runtime/sampler.h"

#include <math.h>
#include <string.h>

#define SAMPLER_GOLDEN 0x9e3779b97f4a7c15ull /* 2^64 / golden ratio, splitmix64's step */
#define SAMPLER_EXP_FLOOR (-104.0f)          /* expf(x) rounds to 0 below this */
#define SAMPLER_MAX_TOP 20

static float sampler_bf16(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return isnan(f) ? -INFINITY : f;
}

/* splitmix64's finaliser: a bijection of 64-bit words with full avalanche. */
static uint64_t sampler_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The seed picks a splitmix64 stream; index is the position in it, so every (seed, index)
 * has its number without any state carried between tokens. */
double sampler_uniform(uint64_t seed, uint64_t index) {
    uint64_t start = sampler_mix(seed + SAMPLER_GOLDEN);
    uint64_t z = sampler_mix(start + (index + 1) * SAMPLER_GOLDEN);
    return (double)(z >> 11) * 0x1.0p-53;
}

static int32_t sampler_argmax(const uint16_t *logits, int n_vocab) {
    int32_t best = 0;
    float best_v = sampler_bf16(logits[0]);
    for (int i = 1; i < n_vocab; i++) {
        float v = sampler_bf16(logits[i]);
        if (v > best_v) { /* strict: an equal value later never wins, so ties go low */
            best_v = v;
            best = i;
        }
    }
    return best;
}

/* ---- candidates: ids kept in the second half of work, ordered through a heap ------------ */

typedef struct sampler_cands {
    const float *e; /* (n_vocab) unnormalised probabilities */
    float *slots;   /* (n_vocab) candidate ids, stored bitwise with memcpy */
} sampler_cands;

static int32_t cand_get(const sampler_cands *c, int i) {
    int32_t id;
    memcpy(&id, &c->slots[i], sizeof id);
    return id;
}

static void cand_put(const sampler_cands *c, int i, int32_t id) {
    memcpy(&c->slots[i], &id, sizeof id);
}

/* The sampler's order: a before b. */
static int cand_before(const sampler_cands *c, int32_t a, int32_t b) {
    float ea = c->e[a], eb = c->e[b];
    return ea > eb || (ea == eb && a < b);
}

/* Sifts slot i down a heap of n slots. worst_on_top builds the size-k selection heap (its
 * root is the candidate to evict); otherwise the root is the first in the sampler's order. */
static void cand_sift(const sampler_cands *c, int n, int i, int worst_on_top) {
    int32_t v = cand_get(c, i);
    for (;;) {
        int child = 2 * i + 1;
        if (child >= n) break;
        int32_t a = cand_get(c, child);
        if (child + 1 < n) {
            int32_t b = cand_get(c, child + 1);
            if (worst_on_top ? cand_before(c, a, b) : cand_before(c, b, a)) {
                child++;
                a = b;
            }
        }
        if (worst_on_top ? !cand_before(c, v, a) : !cand_before(c, a, v)) break;
        cand_put(c, i, a);
        i = child;
    }
    cand_put(c, i, v);
}

static void cand_heapify(const sampler_cands *c, int n, int worst_on_top) {
    for (int i = n / 2 - 1; i >= 0; i--)
        cand_sift(c, n, i, worst_on_top);
}

/* Leaves the k first candidates (in the sampler's order) of n in slots 0..k). */
static void cand_select_top_k(const sampler_cands *c, int n, int k) {
    cand_heapify(c, k, 1);
    for (int i = k; i < n; i++) {
        int32_t id = cand_get(c, i);
        if (cand_before(c, id, cand_get(c, 0))) {
            cand_put(c, 0, id);
            cand_sift(c, k, 0, 1);
        }
    }
}

/* Pops the first candidate of the heap in slots 0..h) into slot h-1 (heapsort's step, so
 * the popped ones sit at the end in order: first at n-1, second at n-2, ...). */
static int32_t cand_pop(const sampler_cands *c, int h) {
    int32_t top = cand_get(c, 0);
    cand_put(c, 0, cand_get(c, h - 1));
    cand_put(c, h - 1, top);
    cand_sift(c, h - 1, 0, 0);
    return top;
}

/* ---- sampling ----------------------------------------------------------------------------- */

/* Fills e[] and the candidate list (ids with e > 0, in id order); returns their count. */
static int sampler_weights(const uint16_t *logits, int n_vocab, float temperature, float max,
                           const sampler_cands *c, float *e) {
    int n = 0;
    for (int i = 0; i < n_vocab; i++) {
        float x = (sampler_bf16(logits[i]) - max) / temperature;
        e[i] = x < SAMPLER_EXP_FLOOR ? 0.0f : expf(x);
        if (e[i] > 0.0f) cand_put(c, n++, i);
    }
    return n;
}

/* Inverse CDF over the heap of n candidates with no top-p/min-p: pops only as far as the
 * pick needs. */
static int32_t sampler_pick_lazy(const sampler_cands *c, int n, double u) {
    double mass = 0;
    for (int i = 0; i < n; i++)
        mass += c->e[cand_get(c, i)];
    double target = u * mass, cum = 0;
    int32_t id = cand_get(c, 0);
    for (int h = n; h > 0; h--) {
        id = cand_pop(c, h);
        cum += c->e[id];
        if (cum > target) break;
    }
    return id; /* rounding left target unreached: the last candidate */
}

/* top-p and/or min-p: pop the kept prefix, then the inverse CDF over it. */
static int32_t sampler_pick_filtered(const sampler_cands *c, int n, const sampler_params *p,
                                     double u) {
    double mass = 0;
    for (int i = 0; i < n; i++)
        mass += c->e[cand_get(c, i)];
    int top_p_on = p->top_p > 0.0f && p->top_p < 1.0f;
    double p_target = (double)p->top_p * mass, min_e = 0, cum = 0;
    int kept = 0;
    for (int h = n; h > 0; h--) {
        float e_next = c->e[cand_get(c, 0)];
        if (kept > 0 && (double)e_next < min_e) break;      /* min-p */
        if (kept > 0 && top_p_on && cum >= p_target) break; /* top-p reached */
        if (kept == 0) min_e = (double)p->min_p * e_next;   /* e_next is the largest */
        cum += c->e[cand_pop(c, h)];
        kept++;
    }
    double target = u * cum, acc = 0;
    int32_t id = cand_get(c, n - 1);
    for (int j = 0; j < kept; j++) {
        id = cand_get(c, n - 1 - j);
        acc += c->e[id];
        if (acc > target) break;
    }
    return id;
}

int32_t sampler_pick(const sampler_params *p, const uint16_t *logits, int n_vocab, int index,
                     float *work) {
    if (!p || !logits || n_vocab < 1) return -1;
    /* greedy; top-k = 1 is greedy too, and taking this path makes it so exactly */
    if (!(p->temperature > 0.0f) || p->top_k == 1 || !work) return sampler_argmax(logits, n_vocab);
    int32_t best = sampler_argmax(logits, n_vocab);
    float max = sampler_bf16(logits[best]);
    if (!isfinite(max)) return best; /* no distribution to sample: all -inf, or a +inf */
    sampler_cands c = {.e = work, .slots = work + n_vocab};
    int n = sampler_weights(logits, n_vocab, p->temperature, max, &c, work);
    if (p->top_k > 0 && p->top_k < n) {
        cand_select_top_k(&c, n, p->top_k);
        n = p->top_k;
    }
    cand_heapify(&c, n, 0);
    double u = sampler_uniform(p->seed, (uint64_t)(int64_t)index);
    int filtered = (p->top_p > 0.0f && p->top_p < 1.0f) || p->min_p > 0.0f;
    return filtered ? sampler_pick_filtered(&c, n, p, u) : sampler_pick_lazy(&c, n, u);
}

/* ---- logprobs ----------------------------------------------------------------------------- */

/* Log-softmax pieces of a row: the largest logit and log(sum exp(logit - max)). A row whose
 * largest value is not finite is treated as if its largest entries were 0 and the rest -inf
 * (all -inf: a uniform row; some +inf: uniform over those). */
static void sampler_log_norm(const uint16_t *logits, int n_vocab, float *max, float *log_sum) {
    float m = sampler_bf16(logits[sampler_argmax(logits, n_vocab)]);
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) {
        float l = sampler_bf16(logits[i]);
        if (!isfinite(m))
            sum += l == m ? 1.0 : 0.0;
        else
            sum += (double)expf(l - m);
    }
    *max = m;
    *log_sum = sum > 0 ? (float)log(sum) : 0.0f; /* sum >= 1: the largest entry adds 1 */
}

static float sampler_lp(float l, float max, float log_sum) {
    if (!isfinite(max)) return l == max ? -log_sum : -INFINITY;
    return (l - max) - log_sum;
}

void sampler_logprobs(const uint16_t *logits, int n_vocab, int n, int32_t chosen, int32_t *ids,
                      float *lps, float *chosen_lp) {
    if (!logits || n_vocab < 1) {
        if (chosen_lp) *chosen_lp = -INFINITY;
        return;
    }
    float max, log_sum;
    sampler_log_norm(logits, n_vocab, &max, &log_sum);
    if (n > SAMPLER_MAX_TOP) n = SAMPLER_MAX_TOP;
    if (n > n_vocab) n = n_vocab;
    int have = 0;
    for (int i = 0; i < n_vocab && n > 0; i++) {
        float lp = sampler_lp(sampler_bf16(logits[i]), max, log_sum);
        /* ids arrive in increasing order, so an equal value never displaces an earlier id */
        if (have == n && !(lp > lps[n - 1])) continue;
        int j = have < n ? have++ : n - 1;
        while (j > 0 && lp > lps[j - 1]) {
            lps[j] = lps[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        lps[j] = lp;
        ids[j] = i;
    }
    if (chosen_lp)
        *chosen_lp = chosen >= 0 && chosen < n_vocab
                         ? sampler_lp(sampler_bf16(logits[chosen]), max, log_sum)
                         : -INFINITY;
}

int32_t sampler_pick_candidates(const sampler_params *p, const int32_t *ids, const uint16_t *vals,
                                int n, int index, float *work) {
    if (!ids || n < 1) return -1;
    int32_t j = sampler_pick(p, vals, n, index, work);
    return j >= 0 && j < n ? ids[j] : -1;
}
