/* runtime/text/sampler.c - see sampler.h.
 *
 * Owns: the host sampler (greedy, temperature, top-k, top-p, min-p), its counter-based random
 * stream and the top-n logprobs of a row. Does not own: stop rules, logits, batching.
 *
 * Why the shape: one total order, "larger unnormalised probability first, then lower id",
 * defines everything, so the answer is a pure function of (logits, params, seed, index).
 * Under that order top-k, top-p and min-p each keep a prefix, so the kept set is the
 * shortest of three prefixes and the inverse CDF walks it in the same order. Probabilities
 * are fp32 expf((logit - max) / T), the kept mass is summed in double in id order, and the
 * walks sum in the sampler's order. Speed (a row of 262,144 ids is drawn for every sampled
 * token): e comes from a memo by logit bit pattern (a row has a few thousand distinct
 * bf16 values, so a few thousand expf calls, not 262,144); only the prefix the pick can need
 * is sorted, found from coarse mass buckets of e's top bits, then put in order by a counting
 * sort on e's bits, which keeps equal values in id order; a walk that outruns it (rounding,
 * or a min-p cut) sorts the rest and goes on, so the answer never depends on the prefix
 * chosen. A heap popped lazily did this before, several times slower on peaked rows and an
 * order of magnitude on flat ones (test_sampler prints the figures; see docs/perf-notes.md,
 * "Host sampler: only the prefix a draw needs is sorted").
 * expf is glibc's or musl's, which share the same implementation (ARM optimized-routines),
 * so the two builds agree; another libm may differ in the last ulp. NaN logits count as
 * -inf. */
#include "runtime/text/sampler.h"

#include <math.h>
#include <stdlib.h>
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

/* ---- the work buffer ---------------------------------------------------------------------- */

#define SAMPLER_SMALL 4096     /* kept sets up to this size are heap-sorted whole */
#define SAMPLER_DIGITS 65536   /* the radix of the two counting-sort passes (16 bits) */
#define SAMPLER_COARSE 4096    /* coarse mass buckets: e's top 12 bits (sign, exponent, 3 bits) */
#define SAMPLER_EXP_MEMO 65536 /* e of every bf16 logit pattern, filled as patterns appear */
#define SAMPLER_MEMO_MIN 4096  /* shorter rows call expf directly: clearing the memo costs more */

struct sampler_work {
    int cap;         /* the largest row it serves */
    float *e;        /* (cap) unnormalised probabilities, by id */
    int32_t *kept;   /* (cap) the kept candidates, ascending id */
    int32_t *sorted; /* (cap) a prefix of the kept in the sampler's order */
    int32_t *tmp;    /* (cap) the counting sort's first pass */
    float *memo;     /* (SAMPLER_EXP_MEMO) e by logit bit pattern; NaN: not yet computed */
    uint32_t *count; /* (2 * SAMPLER_DIGITS) digit counts of both passes */
    double *coarse;  /* (SAMPLER_COARSE) kept mass by coarse bucket */
};

sampler_work *sampler_work_new(int n_vocab) {
    if (n_vocab < 1) return NULL;
    sampler_work *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    size_t n = (size_t)n_vocab;
    w->cap = n_vocab;
    w->e = malloc(n * sizeof *w->e);
    w->kept = malloc(n * sizeof *w->kept);
    w->sorted = malloc(n * sizeof *w->sorted);
    w->tmp = malloc(n * sizeof *w->tmp);
    w->memo = malloc(SAMPLER_EXP_MEMO * sizeof *w->memo);
    w->count = malloc((size_t)2 * SAMPLER_DIGITS * sizeof *w->count);
    w->coarse = malloc(SAMPLER_COARSE * sizeof *w->coarse);
    if (!w->e || !w->kept || !w->sorted || !w->tmp || !w->memo || !w->count || !w->coarse) {
        sampler_work_free(w);
        return NULL;
    }
    return w;
}

void sampler_work_free(sampler_work *w) {
    if (!w) return;
    free(w->e);
    free(w->kept);
    free(w->sorted);
    free(w->tmp);
    free(w->memo);
    free(w->count);
    free(w->coarse);
    free(w);
}

static uint32_t sampler_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float sampler_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- the sampler's order: larger e first, then lower id ---------------------------------- */

static int cand_before(const float *e, int32_t a, int32_t b) {
    float ea = e[a], eb = e[b];
    return ea > eb || (ea == eb && a < b);
}

/* Sifts slot i down a heap of n ids whose root is the last in the sampler's order. */
static void cand_sift(const float *e, int32_t *h, int n, int i) {
    int32_t v = h[i];
    for (;;) {
        int child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && cand_before(e, h[child], h[child + 1])) child++;
        if (!cand_before(e, v, h[child])) break;
        h[i] = h[child];
        i = child;
    }
    h[i] = v;
}

static void cand_heapify(const float *e, int32_t *h, int n) {
    for (int i = n / 2 - 1; i >= 0; i--)
        cand_sift(e, h, n, i);
}

/* Heapsort into the sampler's order: the root, the last, goes to the end each step. */
static void cand_sort_small(const float *e, int32_t *h, int n) {
    cand_heapify(e, h, n);
    for (int m = n - 1; m > 0; m--) {
        int32_t last = h[0];
        h[0] = h[m];
        h[m] = last;
        cand_sift(e, h, m, 0);
    }
}

/* Leaves the k first candidates (in the sampler's order) of h[0..n) in h[0..k). */
static void cand_select_top_k(const float *e, int32_t *h, int n, int k) {
    cand_heapify(e, h, k);
    for (int i = k; i < n; i++) {
        if (cand_before(e, h[i], h[0])) {
            h[0] = h[i];
            cand_sift(e, h, k, 0);
        }
    }
}

static int cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* ---- sampling ----------------------------------------------------------------------------- */

/* Fills e[] (through the memo: a row's e is a function of its logit's 16 bits, and a row holds
 * far fewer distinct patterns than ids) and the kept list (ids with e > 0, ascending); returns
 * their count and their mass, summed in id order. */
static float sampler_weight(uint16_t logit, float temperature, float max) {
    float x = (sampler_bf16(logit) - max) / temperature;
    return x < SAMPLER_EXP_FLOOR ? 0.0f : expf(x);
}

static int sampler_weights(const uint16_t *logits, int n_vocab, float temperature, float max,
                           const sampler_work *w, double *mass) {
    const int memo = n_vocab > SAMPLER_MEMO_MIN;
    if (memo) memset(w->memo, 0xff, SAMPLER_EXP_MEMO * sizeof(float)); /* all NaN */
    int n = 0;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) {
        float v = memo ? w->memo[logits[i]] : sampler_weight(logits[i], temperature, max);
        if (memo && isnan(v)) /* the first time this pattern is seen */
            v = w->memo[logits[i]] = sampler_weight(logits[i], temperature, max);
        w->e[i] = v;
        if (v > 0.0f) {
            w->kept[n++] = i;
            sum += v;
        }
    }
    *mass = sum;
    return n;
}

/* The floor (e's bits) of the coarse buckets that, taken from the top, hold more than need;
 * 0 (everything) if none do. The bucket sums round differently from the in-order sums that
 * decide, so need carries a margin; a prefix that still falls short is extended (cursor). */
static uint32_t sampler_floor(const sampler_work *w, int n, double need) {
    memset(w->coarse, 0, SAMPLER_COARSE * sizeof(double));
    for (int i = 0; i < n; i++) {
        float v = w->e[w->kept[i]];
        w->coarse[sampler_bits(v) >> 20] += v;
    }
    /* the two sums of n terms differ by at most ~n * 2^-53 of the mass: 3e-11 at 262,144 ids
     * (past 2^23 ids the margin can fall short, which costs only the extension) */
    need *= 1.0 + 1e-9;
    double acc = 0;
    for (int b = SAMPLER_COARSE - 1; b > 0; b--) {
        acc += w->coarse[b];
        if (acc > need) return (uint32_t)b << 20;
    }
    return 0;
}

/* Every kept candidate whose e has bits >= floor, in the sampler's order, into sorted; returns
 * their count. A stable counting sort on e's low then high 16 bits (descending) of the kept
 * list (ascending id), so equal e keep id order; small sets are heap-sorted. */
static int sampler_collect(const sampler_work *w, int n, uint32_t floor) {
    int k = 0;
    uint32_t *lo = w->count, *hi = w->count + SAMPLER_DIGITS;
    if (n > SAMPLER_SMALL) memset(w->count, 0, (size_t)2 * SAMPLER_DIGITS * sizeof *w->count);
    for (int i = 0; i < n; i++) {
        int32_t id = w->kept[i];
        uint32_t b = sampler_bits(w->e[id]);
        if (b < floor) continue;
        w->tmp[k++] = id;
        if (n > SAMPLER_SMALL) {
            lo[0xffffu - (b & 0xffffu)]++;
            hi[0xffffu - (b >> 16)]++;
        }
    }
    if (n <= SAMPLER_SMALL || k <= SAMPLER_SMALL) {
        memcpy(w->sorted, w->tmp, (size_t)k * sizeof(int32_t));
        cand_sort_small(w->e, w->sorted, k);
        return k;
    }
    uint32_t at_lo = 0, at_hi = 0;
    for (int d = 0; d < SAMPLER_DIGITS; d++) { /* counts -> first slots */
        uint32_t c = lo[d];
        lo[d] = at_lo;
        at_lo += c;
        c = hi[d];
        hi[d] = at_hi;
        at_hi += c;
    }
    for (int j = 0; j < k; j++) { /* tmp (id order) -> sorted, by the low digit */
        int32_t id = w->tmp[j];
        w->sorted[lo[0xffffu - (sampler_bits(w->e[id]) & 0xffffu)]++] = id;
    }
    for (int j = 0; j < k; j++) { /* sorted -> tmp, by the high digit */
        int32_t id = w->sorted[j];
        w->tmp[hi[0xffffu - (sampler_bits(w->e[id]) >> 16)]++] = id;
    }
    memcpy(w->sorted, w->tmp, (size_t)k * sizeof(int32_t));
    return k;
}

/* Walks the kept candidates in the sampler's order: sorted holds a prefix of them (all with e
 * at or above a floor); past its end the whole kept list is sorted, whose first entries are
 * that prefix again. */
typedef struct sampler_cursor {
    const sampler_work *w;
    int n, len;     /* kept candidates; entries of sorted */
    uint32_t floor; /* every kept candidate past sorted[len - 1] has e's bits below this */
} sampler_cursor;

static sampler_cursor cursor_start(const sampler_work *w, int n, uint32_t floor) {
    sampler_cursor c = {.w = w, .n = n, .floor = floor};
    c.len = sampler_collect(w, n, floor);
    if (c.len == n) c.floor = 0;
    return c;
}

/* The j-th kept candidate in the sampler's order (j < n). */
static int32_t cursor_at(sampler_cursor *c, int j) {
    if (j >= c->len) {
        c->len = sampler_collect(c->w, c->n, 0);
        c->floor = 0;
    }
    return c->w->sorted[j];
}

/* Inverse CDF with no top-p/min-p: sorts only as far as the pick needs. */
static int32_t sampler_pick_lazy(const sampler_work *w, int n, double mass, double u) {
    double target = u * mass, cum = 0;
    sampler_cursor c = cursor_start(w, n, sampler_floor(w, n, target));
    int32_t id = -1;
    for (int j = 0; j < n; j++) {
        id = cursor_at(&c, j);
        cum += w->e[id];
        if (cum > target) break;
    }
    return id; /* rounding left target unreached: the last candidate */
}

/* top-p and/or min-p: the kept prefix, then the inverse CDF over it. */
static int32_t sampler_pick_filtered(const sampler_work *w, int n, double mass,
                                     const sampler_params *p, double u) {
    int top_p_on = p->top_p > 0.0f && p->top_p<1.0f, min_p_on = p->min_p> 0.0f;
    /* the nucleus is measured against the mass at fp32 resolution, as HF's fp32 softmax sees
     * it: a tail too small to move a float sum (262,140 logits 35 below four tied ones) must
     * not make top_p 0.5 of the four ties need a third */
    double p_target = (double)p->top_p * (double)(float)mass, min_e = 0, cum = 0;
    /* min-p keeps nothing below min_p * the largest e, and the largest is expf(0) = 1 (a
     * min_p past 1 keeps the largest alone: the floor of 1 then suffices) */
    uint32_t floor = sampler_floor(w, n, top_p_on ? p_target : mass);
    uint32_t min_floor = sampler_bits(p->min_p < 1.0f ? p->min_p : 1.0f) >> 20 << 20;
    if (min_p_on && min_floor > floor) floor = min_floor;
    sampler_cursor c = cursor_start(w, n, floor);
    int kept = 0;
    for (int j = 0; j < n; j++) {
        /* top-p first: reached at the prefix's last entry, it must not fetch (sort) more */
        if (kept > 0 && top_p_on && cum >= p_target) break;
        /* past the prefix every candidate is below its floor: at or under min_e, min-p stops */
        if (kept > 0 && j >= c.len && c.floor > 0 && (double)sampler_float(c.floor) <= min_e) break;
        float e_next = w->e[cursor_at(&c, j)];
        if (kept > 0 && (double)e_next < min_e) break;                /* min-p */
        if (kept == 0 && min_p_on) min_e = (double)p->min_p * e_next; /* e_next is the largest */
        cum += e_next;
        kept++;
    }
    double target = u * cum, acc = 0;
    int32_t id = w->sorted[0];
    for (int j = 0; j < kept; j++) {
        id = w->sorted[j];
        acc += w->e[id];
        if (acc > target) break;
    }
    return id;
}

int32_t sampler_pick(const sampler_params *p, const uint16_t *logits, int n_vocab, int index,
                     sampler_work *work) {
    if (!p || !logits || n_vocab < 1 || (work && n_vocab > work->cap)) return -1;
    /* greedy; top-k = 1 is greedy too, and taking this path makes it so exactly */
    if (!(p->temperature > 0.0f) || p->top_k == 1 || !work) return sampler_argmax(logits, n_vocab);
    int32_t best = sampler_argmax(logits, n_vocab);
    float max = sampler_bf16(logits[best]);
    if (!isfinite(max)) return best; /* no distribution to sample: all -inf, or a +inf */
    const sampler_work *w = work;
    double mass;
    int n = sampler_weights(logits, n_vocab, p->temperature, max, w, &mass);
    if (p->top_k > 0 && p->top_k < n) {
        cand_select_top_k(w->e, w->kept, n, p->top_k);
        n = p->top_k;
        qsort(w->kept, (size_t)n, sizeof *w->kept, cmp_id); /* back to id order */
        mass = 0;
        for (int i = 0; i < n; i++)
            mass += w->e[w->kept[i]];
    }
    double u = sampler_uniform(p->seed, (uint64_t)(int64_t)index);
    int filtered = (p->top_p > 0.0f && p->top_p < 1.0f) || p->min_p > 0.0f;
    return filtered ? sampler_pick_filtered(w, n, mass, p, u) : sampler_pick_lazy(w, n, mass, u);
}

/* ---- logprobs ----------------------------------------------------------------------------- */

/* Log-softmax pieces of a row: the largest logit and log(sum exp(logit - max)). A row whose
 * largest value is not finite is treated as if its largest entries were 0 and the rest -inf
 * (all -inf: a uniform row; some +inf: uniform over those). */
static void sampler_log_norm(const uint16_t *logits, int n_vocab, float *max, float *log_sum,
                             const sampler_work *w) {
    float m = sampler_bf16(logits[sampler_argmax(logits, n_vocab)]);
    double sum = 0;
    if (w && isfinite(m) && n_vocab > SAMPLER_MEMO_MIN) { /* expf once per distinct pattern */
        memset(w->memo, 0xff, SAMPLER_EXP_MEMO * sizeof(float)); /* all NaN */
        for (int i = 0; i < n_vocab; i++) {
            float v = w->memo[logits[i]];
            if (isnan(v)) v = w->memo[logits[i]] = expf(sampler_bf16(logits[i]) - m);
            sum += (double)v;
        }
    }
    for (int i = 0; !(w && isfinite(m) && n_vocab > SAMPLER_MEMO_MIN) && i < n_vocab; i++) {
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
                      float *lps, float *chosen_lp, sampler_work *work) {
    if (!logits || n_vocab < 1) {
        if (chosen_lp) *chosen_lp = -INFINITY;
        return;
    }
    float max, log_sum;
    sampler_log_norm(logits, n_vocab, &max, &log_sum, work);
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
                                int n, int index, sampler_work *work) {
    if (!ids || n < 1) return -1;
    int32_t j = sampler_pick(p, vals, n, index, work);
    return j >= 0 && j < n ? ids[j] : -1;
}
