/* tests/unit/test_sampler.c - runtime/sampler through its header.
 *
 * Owns: greedy ties, the (seed, index) determinism of the random stream, the sampled
 * distribution against softmax (chi-square), temperature, top-k, top-p and min-p, logprobs,
 * every pick against a full-sort twin of the sampler's definition, and a speed figure at n_vocab =
 * 262,144 (printed, never judged). Logits are built from floats that bf16 holds exactly, so the
 * expected probabilities are exact too. */
#include "kernels/ref/ref.h"
#include "runtime/text/sampler.h"
#include "tests/harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BIG_VOCAB 262144
#define DRAWS 200000 /* draws per distribution check: ~450 per cell for a 0.2% token */

static sampler_work *work; /* for BIG_VOCAB ids, enough for every row here */

static uint16_t to_bf16(float f) { /* round to nearest even; the test inputs are finite */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void fill(uint16_t *out, const float *in, int n) {
    for (int i = 0; i < n; i++)
        out[i] = to_bf16(in[i]);
}

/* softmax(l / t) in double, the reference the sampler's fp32 must match to ~1e-6 */
static void softmax_ref(const float *l, int n, double t, double *p) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, l[i]);
    for (int i = 0; i < n; i++)
        s += p[i] = exp((l[i] - m) / t);
    for (int i = 0; i < n; i++)
        p[i] /= s;
}

/* Draws DRAWS tokens (indices 0..DRAWS) and returns the chi-square statistic against p,
 * summed over cells with p > 0; a token drawn where p == 0 sets *stray. */
static double chi_square(const sampler_params *sp, const uint16_t *logits, int n, const double *p,
                         int *stray) {
    long *count = calloc((size_t)n, sizeof *count);
    *stray = 0;
    for (int i = 0; i < DRAWS && work && count; i++) {
        int32_t t = sampler_pick(sp, logits, n, i, work);
        if (t >= 0 && t < n) count[t]++;
    }
    double chi = 0;
    for (int i = 0; i < n && count; i++) {
        if (p[i] > 0) {
            double want = p[i] * DRAWS;
            double d = (double)count[i] - want;
            chi += d * d / want;
        } else if (count[i] > 0) {
            (*stray)++;
        }
    }
    free(count);
    return chi;
}

/* The 1e-6 upper tail of chi-square with k-1 degrees of freedom (Wilson-Hilferty), so a
 * correct sampler fails this by chance about once in a million seeds; the draws are fixed, so
 * a failure is a real bias, and a 2% error in any cell of 8 already exceeds it. */
static double chi_bound(int cells) {
    double k = cells - 1, z = 4.753;
    return k * pow(1 - 2 / (9 * k) + z * sqrt(2 / (9 * k)), 3);
}

static const float eight[8] = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -2.0f};

static void test_greedy(void) {
    float l[6] = {1, 3, 3, 2, -5, 3};
    uint16_t b[6];
    fill(b, l, 6);
    sampler_params g = {.temperature = 0};
    int32_t t0 = sampler_pick(&g, b, 6, 0, work), t1 = sampler_pick(&g, b, 6, 99, NULL);
    sampler_params k1 = {.temperature = 1.5f, .top_k = 1, .seed = 5};
    int32_t t2 = sampler_pick(&k1, b, 6, 3, work);
    uint16_t nan_first[3] = {0x7fc0, to_bf16(-1), to_bf16(-1)}; /* NaN counts as -inf */
    int32_t t3 = sampler_pick(&g, nan_first, 3, 0, work);
    TEST_CHECK("sampler_greedy_ties", t0 == 1 && t1 == 1 && t2 == 1 && t3 == 1,
               "ties to lowest id: greedy %d, greedy any index %d, top_k=1 %d, NaN skipped %d", t0,
               t1, t2, t3);
}

static void test_stream(void) {
    double a = sampler_uniform(42, 7), b = sampler_uniform(42, 7), c = sampler_uniform(43, 7);
    double sum = 0, lo = 1, hi = 0;
    for (uint64_t i = 0; i < 1000000; i++) {
        double u = sampler_uniform(1, i);
        sum += u;
        lo = fmin(lo, u);
        hi = fmax(hi, u);
    }
    float l[8];
    memcpy(l, eight, sizeof l);
    uint16_t bl[8];
    fill(bl, l, 8);
    sampler_params sp = {.temperature = 1, .seed = 9};
    int same = 1, distinct = 0, seen[8] = {0};
    for (int i = 0; i < 200; i++) {
        int32_t t = sampler_pick(&sp, bl, 8, i, work);
        same &= t == sampler_pick(&sp, bl, 8, i, work);
        if (t >= 0 && t < 8 && !seen[t]++) distinct++;
    }
    /* the mean of 1e6 uniforms has sd 2.9e-4: 0.002 is ~7 sd */
    int ok = a == b && a != c && lo >= 0 && hi < 1 && fabs(sum / 1e6 - 0.5) < 0.002 && same &&
             distinct >= 6;
    TEST_CHECK("sampler_seed_index_stream", ok,
               "u(42,7) repeatable, seed changes it; 1e6 draws mean %.5f in [%.2g, %.6f]; same "
               "(seed, index) same token; %d distinct tokens over 200 indices",
               sum / 1e6, lo, hi, distinct);
}

static void test_distribution(void) {
    uint16_t b[8];
    fill(b, eight, 8);
    double p[8];
    int stray;
    const float temps[3] = {1.0f, 2.0f, 0.5f};
    for (int k = 0; k < 3; k++) {
        softmax_ref(eight, 8, temps[k], p);
        sampler_params sp = {.temperature = temps[k], .seed = 1234};
        double chi = chi_square(&sp, b, 8, p, &stray);
        char gate[64];
        (void)snprintf(gate, sizeof gate, "sampler_softmax_T%g", (double)temps[k]);
        TEST_CHECK(gate, chi < chi_bound(8) && stray == 0,
                   "%d draws over 8 tokens: chi-square %.2f (bound %.1f at 1e-6)", DRAWS, chi,
                   chi_bound(8));
    }
}

static void test_filters(void) {
    uint16_t b[8];
    fill(b, eight, 8);
    double p[8], q[8];
    int stray;
    softmax_ref(eight, 8, 1.0, p);
    /* top-k = 3: the three largest, renormalised */
    double s = p[0] + p[1] + p[2];
    for (int i = 0; i < 8; i++)
        q[i] = i < 3 ? p[i] / s : 0;
    sampler_params k3 = {.temperature = 1, .top_k = 3, .seed = 77};
    double chi = chi_square(&k3, b, 8, q, &stray);
    TEST_CHECK("sampler_top_k", chi < chi_bound(3) && stray == 0,
               "top_k=3: chi-square %.2f (bound %.1f), %d draws outside the top 3", chi,
               chi_bound(3), stray);
    /* top-p = 0.7: p = .403 .244 .148 ...: two reach .647, so the prefix reaching .7 is 3 */
    sampler_params p6 = {.temperature = 1, .top_p = 0.7f, .seed = 78};
    chi = chi_square(&p6, b, 8, q, &stray);
    int ok = chi < chi_bound(3) && stray == 0;
    sampler_params tiny = {.temperature = 5, .top_p = 1e-6f, .seed = 3};
    int argmax = 1;
    for (int i = 0; i < 1000; i++)
        argmax &= sampler_pick(&tiny, b, 8, i, work) == 0;
    TEST_CHECK("sampler_top_p", ok && argmax,
               "top_p=0.7 keeps 3: chi-square %.2f, %d strays; top_p=1e-6 always argmax: %s", chi,
               stray, argmax ? "yes" : "NO");
    /* min-p = 0.3: keeps p >= 0.3 * p_max = e^-1.2: logits 2, 1.5, 1.0 (e^-1.0 >= e^-1.2) */
    sampler_params m3 = {.temperature = 1, .min_p = 0.3f, .seed = 79};
    chi = chi_square(&m3, b, 8, q, &stray);
    TEST_CHECK("sampler_min_p", chi < chi_bound(3) && stray == 0,
               "min_p=0.3 keeps logits >= max - 1.2: chi-square %.2f, %d strays", chi, stray);
}

/* Equal logits: the order puts lower ids first, so top-k and top-p keep the low ids. */
static void test_tie_order(void) {
    float l[5] = {3, 3, 3, 3, 0};
    uint16_t b[5];
    fill(b, l, 5);
    sampler_params k2 = {.temperature = 1, .top_k = 2, .seed = 1};
    sampler_params p2 = {.temperature = 1, .top_p = 0.3f, .seed = 1}; /* each tie is ~.245 */
    int ok = 1, seen[5] = {0};
    for (int i = 0; i < 2000; i++) {
        int32_t t = sampler_pick(&k2, b, 5, i, work);
        ok &= t == 0 || t == 1;
        if (t >= 0 && t < 5) seen[t]++;
        t = sampler_pick(&p2, b, 5, i, work);
        ok &= t == 0 || t == 1;
    }
    TEST_CHECK("sampler_tie_order", ok && seen[0] > 800 && seen[1] > 800,
               "four equal logits: top_k=2 and top_p=0.3 keep ids 0 and 1 (%d / %d draws)", seen[0],
               seen[1]);
}

static void test_logprobs(void) {
    enum { N = 1000 };
    float l[N];
    uint16_t b[N];
    for (int i = 0; i < N; i++) /* the sampler's own stream: the same rows under glibc and musl */
        l[i] = (float)((int)(sampler_uniform(5, (uint64_t)i) * 4000) - 2000) / 256.0f; /* ties */
    fill(b, l, N);
    for (int i = 0; i < N; i++)
        l[i] = from_bf16(b[i]);
    double p[N];
    softmax_ref(l, N, 1.0, p);
    int32_t ids[20];
    float lps[20], chosen;
    sampler_logprobs(b, N, 20, 17, ids, lps, &chosen, work);
    /* the memo (work, rows past 4,096 ids) changes no bit: the same expf values summed in the
     * same order; a row of 20,000 ids from the same stream, with and without it */
    enum { NB = 20000 };
    uint16_t *big = malloc(sizeof(uint16_t) * NB);
    int same = big != NULL;
    for (int i = 0; same && i < NB; i++)
        big[i] = to_bf16((float)((int)(sampler_uniform(6, (uint64_t)i) * 4000) - 2000) / 256.0f);
    int32_t ids_m[20], ids_plain[20];
    float lps_m[20], lps_plain[20], chosen_m, chosen_plain;
    if (same) {
        sampler_logprobs(big, NB, 20, 17, ids_m, lps_m, &chosen_m, work);
        sampler_logprobs(big, NB, 20, 17, ids_plain, lps_plain, &chosen_plain, NULL);
        same = memcmp(ids_m, ids_plain, sizeof ids_m) == 0 &&
               memcmp(lps_m, lps_plain, sizeof lps_m) == 0 &&
               memcmp(&chosen_m, &chosen_plain, sizeof chosen_m) == 0;
    }
    free(big);
    int sorted = 1;
    for (int i = 1; i < 20; i++)
        sorted &= lps[i] < lps[i - 1] || (lps[i] == lps[i - 1] && ids[i] > ids[i - 1]);
    int top_ok = 1; /* nothing outside the list beats its last entry */
    for (int i = 0; i < N; i++) {
        int in = 0;
        for (int j = 0; j < 20; j++)
            in |= ids[j] == i;
        if (!in) top_ok &= log(p[i]) <= lps[19] + 1e-5;
    }
    double sum = 0, worst = 0;
    for (int i = 0; i < N; i++) {
        float lp;
        sampler_logprobs(b, N, 0, i, NULL, NULL, &lp, i % 2 ? work : NULL);
        sum += exp((double)lp);
        worst = fmax(worst, fabs(lp - log(p[i])));
    }
    /* fp32 log-softmax of values within ~16 of the max: ~1e-6 absolute; 1e-5 leaves room */
    int ok = sorted && top_ok && same && fabs(sum - 1) < 1e-4 && worst < 1e-5 &&
             fabs(chosen - log(p[17])) < 1e-5;
    TEST_CHECK("sampler_logprobs", ok,
               "top-20 sorted (ties by id) %s, is the top %s, 20,000 ids with and without the "
               "memo bit-identical %s, sum of exp over %d = %.7f, worst |lp - ref| %.2g",
               sorted ? "yes" : "NO", top_ok ? "yes" : "NO", same ? "yes" : "NO", N, sum, worst);
}

/* Candidates (ref_topk, the device kernel's twin) then sampler_pick_candidates must give the
 * token sampler_pick gives over the whole row, for every request shape: logits in quarter
 * steps (long runs of ties at every top-k cut), with NaN and -inf sprinkled in, temperatures
 * from 0.05 to 50, top-k 2..1024, top-p and min-p on or off, many seeds and indexes. */
static void test_candidates(void) {
    enum { V = 5000 };
    uint16_t *row = malloc(sizeof(uint16_t) * V), vals[K_TOPK_MAX];
    int32_t ids[K_TOPK_MAX];
    int cases = 0, differ = 0;
    uint64_t z = 99;
    for (int c = 0; c < 3000 && row && work; c++) {
        for (int i = 0; i < V; i++) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t r = (uint32_t)(z >> 33);
            row[i] = to_bf16((float)((int)(r % 160) - 80) / 4.0f);
            if (r % 997 == 0) row[i] = 0x7fc0; /* NaN: -inf to both */
            if (r % 991 == 0) row[i] = 0xff80;
        }
        sampler_params sp = {.temperature = 0.05f * (float)(1 + (c * 7) % 1000),
                             .top_k = 2 + (c * 37) % (K_TOPK_MAX - 1),
                             .top_p = c % 3 == 0 ? 1.0f : 0.3f + 0.1f * (float)(c % 7),
                             .min_p = c % 4 == 0 ? 0.02f * (float)(c % 5) : 0.0f,
                             .seed = (uint64_t)c * 2654435761u};
        int32_t k = sp.top_k;
        k_topk_args a = {.ids = ids,
                         .vals = vals,
                         .logits = row,
                         .k = &k,
                         .rows = 1,
                         .n_vocab = V,
                         .k_max = K_TOPK_MAX};
        if (ref_topk(&a, NULL) != K_OK) {
            differ++;
            continue;
        }
        int index = c % 50;
        int32_t full = sampler_pick(&sp, row, V, index, work);
        int32_t cand = sampler_pick_candidates(&sp, ids, vals, k, index, work);
        cases++;
        if (full != cand && differ++ == 0)
            printf("# case %d: whole row %d, candidates %d (T %.2f, top_k %d, top_p %.2f, min_p "
                   "%.2f)\n",
                   c, full, cand, (double)sp.temperature, sp.top_k, (double)sp.top_p,
                   (double)sp.min_p);
    }
    TEST_CHECK("sampler_candidates_equal_whole_row", cases == 3000 && differ == 0,
               "%d sampled requests (top-k 2..1024, top-p / min-p on and off, T 0.05..50): %d "
               "tokens differ between the whole row and its top-k candidates",
               cases, differ);
    free(row);
}

/* ---- the reference twin: the sampler's definition, with a full sort ----------------------- */

static const float *twin_e; /* qsort's comparator reads the row's e through this */

static int twin_order(const void *a, const void *b) { /* larger e first, then lower id */
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float ex = twin_e[x], ey = twin_e[y];
    if (ex != ey) return ex > ey ? -1 : 1;
    return (x > y) - (x < y);
}

static int twin_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* sampler.h's definition, written plainly: e = expf((logit - max) / T) (0 below -104), the
 * kept ids sorted whole, top-k their first k, the mass of the kept in id order, then top-p,
 * min-p and the inverse CDF walking the sampler's order. */
static int32_t twin_pick(const sampler_params *p, const uint16_t *l, int n, int index, float *e,
                         int32_t *ids) {
    int32_t best = 0;
    for (int i = 1; i < n; i++) {
        float v = from_bf16(l[i]), bv = from_bf16(l[best]);
        if ((isnan(v) ? -INFINITY : v) > (isnan(bv) ? -INFINITY : bv)) best = i;
    }
    float max = isnan(from_bf16(l[best])) ? -INFINITY : from_bf16(l[best]);
    if (!(p->temperature > 0.0f) || p->top_k == 1 || !isfinite(max)) return best;
    int k = 0;
    for (int i = 0; i < n; i++) {
        float v = isnan(from_bf16(l[i])) ? -INFINITY : from_bf16(l[i]);
        float x = (v - max) / p->temperature;
        e[i] = x < -104.0f ? 0.0f : expf(x);
        if (e[i] > 0.0f) ids[k++] = i;
    }
    twin_e = e;
    qsort(ids, (size_t)k, sizeof *ids, twin_order);
    if (p->top_k > 0 && p->top_k < k) k = p->top_k;
    qsort(ids, (size_t)k, sizeof *ids, twin_id);
    double mass = 0;
    for (int i = 0; i < k; i++)
        mass += e[ids[i]];
    qsort(ids, (size_t)k, sizeof *ids, twin_order);
    int kept = k;
    if ((p->top_p > 0.0f && p->top_p < 1.0f) || p->min_p > 0.0f) {
        int top_p_on = p->top_p > 0.0f && p->top_p < 1.0f;
        double p_target = (double)p->top_p * (double)(float)mass, cum = 0;
        double min_e = p->min_p > 0.0f ? (double)p->min_p * e[ids[0]] : 0.0; /* NaN: off */
        kept = 0;
        while (kept < k &&
               (kept == 0 || ((double)e[ids[kept]] >= min_e && !(top_p_on && cum >= p_target))))
            cum += e[ids[kept++]];
        mass = cum;
    }
    double target = sampler_uniform(p->seed, (uint64_t)(int64_t)index) * mass, cum = 0;
    for (int j = 0; j < kept; j++) {
        cum += e[ids[j]];
        if (cum > target) return ids[j];
    }
    return ids[kept - 1];
}

/* sampler_pick against twin_pick on fresh rows of every shape: flat rows (the inverse CDF walks
 * deep), peaked ones, quarter-step logits (long runs of ties), NaN and -inf, rows small enough
 * to be heap-sorted whole and large enough for the counting sort (its floors, its prefix
 * extended when a walk outruns it), each under every filter combination: exact. */
static void test_twin(void) {
    enum { V_MAX = 70000 };
    uint16_t *row = malloc(sizeof(uint16_t) * V_MAX);
    float *e = malloc(sizeof(float) * V_MAX);
    int32_t *ids = malloc(sizeof(int32_t) * V_MAX);
    static const int sizes[] = {1, 7, 300, 4096, 4097, 20000, 70000};
    static const float spreads[] = {0.01f, 1.0f, 8.0f, 60.0f};
    const sampler_params shapes[] = {
        {.temperature = 1},
        {.temperature = 0.7f, .top_k = 50},
        {.temperature = 1.3f, .top_k = 5000},
        {.temperature = 1, .top_p = 0.9f},
        {.temperature = 0.5f, .top_p = 0.999999f},
        {.temperature = 1, .min_p = 0.05f},
        {.temperature = 2, .min_p = 0.9f},
        {.temperature = 1, .top_p = 0.5f, .min_p = 0.001f},
        {.temperature = 0.9f, .top_k = 300, .top_p = 0.8f, .min_p = 0.01f},
        {.temperature = 1, .top_p = 0.9f, .min_p = NAN}, /* NaN min_p: off */
    };
    int cases = 0, differ = 0;
    uint64_t z = 2026;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes && row && e && ids; si++) {
        int n = sizes[si];
        for (int r = 0; r < 8; r++) {
            float spread = spreads[r % 4];
            for (int i = 0; i < n; i++) {
                z = z * 6364136223846793005ull + 1442695040888963407ull;
                double u = (double)(z >> 11) * 0x1.0p-53;
                float v = r >= 4 ? (float)(int)(u * 40) / 4.0f * spread / 10.0f /* quarters */
                                 : (float)(u * spread);
                row[i] = to_bf16(v);
                if ((z >> 20) % 1009 == 0) row[i] = 0x7fc0; /* NaN */
                if ((z >> 20) % 1013 == 0) row[i] = 0xff80; /* -inf */
            }
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                for (int index = 0; index < 6; index++) {
                    sampler_params sp = shapes[s];
                    sp.seed = (uint64_t)(si * 131 + (size_t)r * 17 + s);
                    int32_t got = sampler_pick(&sp, row, n, index * 97 + r, work);
                    int32_t want = twin_pick(&sp, row, n, index * 97 + r, e, ids);
                    cases++;
                    if (got != want && differ++ < 3)
                        printf("# n %d row %d shape %zu index %d: sampler %d, twin %d\n", n, r, s,
                               index, got, want);
                }
            }
        }
    }
    TEST_CHECK("sampler_vs_twin", cases == 7 * 8 * 10 * 6 && differ == 0,
               "%d picks (rows of 1..70,000 ids: flat, peaked, tied, NaN and -inf; top-k, top-p, "
               "min-p alone and together): %d differ from the full-sort twin (exact rule)",
               cases, differ);
    free(row);
    free(e);
    free(ids);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void test_speed(void) {
    uint16_t *b = malloc(BIG_VOCAB * sizeof *b), *flat = malloc(BIG_VOCAB * sizeof *flat);
    if (!b || !flat) {
        test_fail("sampler_picks_262144", "out of memory");
        free(b);
        free(flat);
        return;
    }
    for (int i = 0; i < BIG_VOCAB; i++) { /* a peaked row: a few large logits, a long tail */
        b[i] = to_bf16((float)(int)(sampler_uniform(11, (uint64_t)i) * 2000) / 100.0f -
                       (i % 97 == 0 ? 0.0f : 8.0f));
        /* a flat row (random weights' logits): the draw walks half the vocabulary */
        flat[i] = to_bf16((float)sampler_uniform(12, (uint64_t)i));
    }
    const sampler_params cfg[4] = {{.temperature = 0},
                                   {.temperature = 1},
                                   {.temperature = 1, .top_k = 40},
                                   {.temperature = 1, .top_p = 0.9f, .min_p = 0.01f}};
    double ms[5];
    int valid = 1;
    uint64_t digest = 0; /* of every pick: equal under glibc and musl when expf agrees */
    for (int c = 0; c < 5; c++) {
        double t0 = now_ms();
        for (int i = 0; i < 20; i++) {
            int32_t t = sampler_pick(&cfg[c < 4 ? c : 1], c < 4 ? b : flat, BIG_VOCAB, i, work);
            valid &= t >= 0 && t < BIG_VOCAB;
            digest = digest * 1000003u + (uint64_t)t;
        }
        ms[c] = (now_ms() - t0) / 20;
    }
    double t0 = now_ms();
    int32_t ids[20];
    float lps[20], chosen;
    sampler_logprobs(b, BIG_VOCAB, 20, 0, ids, lps, &chosen, work);
    double lp_ms = now_ms() - t0;
    /* the picks are checked; the timings are figures (speed is never a pass/fail test) */
    TEST_CHECK("sampler_picks_262144", valid, "every pick a valid id; pick digest %016llx",
               (unsigned long long)digest);
    test_info("sampler_speed_262144",
              "ms per pick: greedy %.2f, T=1 %.2f (flat row %.2f), top_k=40 %.2f, top_p+min_p "
              "%.2f; logprobs %.2f",
              ms[0], ms[1], ms[4], ms[2], ms[3], lp_ms);
    free(b);
    free(flat);
}

/* Exact boundaries. top-p: four tied logits under top_p 0.5 keep exactly two (the two lower
 * ids), alone and above a tail of 262,140 logits 35 lower (whose mass is below fp32 resolution
 * of the sum); 0.75 keeps three. min-p keeps a token whose weight equals min_p times the
 * largest exactly, and drops it at the next float above. Each against the twin too. */
static void test_exact_boundaries(void) {
    enum { N = 262144 };
    uint16_t *b = malloc(sizeof *b * N);
    float *te = malloc(sizeof *te * N);
    int32_t *tids = malloc(sizeof *tids * N);
    float four[4] = {5, 5, 5, 5};
    int ok = b && te && tids, draws[2][4] = {{0}};
    for (int tail = 0; ok && tail <= 1; tail++) {
        int n = tail ? N : 4;
        for (int i = 0; i < n; i++)
            b[i] = ref_f32_to_bf16(i < 4 ? four[i] : -30.0f);
        sampler_params p5 = {.temperature = 1, .top_p = 0.5f, .seed = 11};
        sampler_params p75 = {.temperature = 1, .top_p = 0.75f, .seed = 12};
        for (int i = 0; i < 400; i++) {
            int32_t t = sampler_pick(&p5, b, n, i, work), u = sampler_pick(&p75, b, n, i, work);
            ok &= (t == 0 || t == 1) && t == twin_pick(&p5, b, n, i, te, tids) && u >= 0 &&
                  u <= 2 && u == twin_pick(&p75, b, n, i, te, tids);
            if (t >= 0 && t < 4) draws[tail][t]++;
        }
    }
    ok &= draws[0][0] > 100 && draws[0][1] > 100 && draws[1][0] > 100 && draws[1][1] > 100;
    /* min-p: logits 0 and -1 (exact in bf16); weights 1 and expf(-1) */
    float l[3] = {0, -1, -30};
    uint16_t m[3];
    fill(m, l, 3);
    float at = expf(-1.0f);
    sampler_params keep = {.temperature = 1, .min_p = at, .seed = 21};
    sampler_params drop = {.temperature = 1, .min_p = nextafterf(at, 1.0f), .seed = 21};
    int kept1 = 0, dropped_ok = 1;
    for (int i = 0; i < 400; i++) {
        int32_t t = sampler_pick(&keep, m, 3, i, work), u = sampler_pick(&drop, m, 3, i, work);
        kept1 += t == 1;
        ok &= t != 2 && t == twin_pick(&keep, m, 3, i, te, tids) &&
              u == twin_pick(&drop, m, 3, i, te, tids);
        dropped_ok &= u == 0;
    }
    TEST_CHECK("sampler_exact_boundaries", ok && kept1 > 20 && dropped_ok,
               "top_p 0.5 over four ties keeps ids 0 and 1 (%d / %d draws alone, %d / %d above a "
               "tail), 0.75 keeps three; min_p = expf(-1) keeps the logit 1 below the top (%d of "
               "400 draws), the next float drops it: %s; the twin agrees: %s",
               draws[0][0], draws[0][1], draws[1][0], draws[1][1], kept1, dropped_ok ? "yes" : "no",
               ok ? "yes" : "no");
    free(b);
    free(te);
    free(tids);
}

int main(void) {
    work = sampler_work_new(BIG_VOCAB);
    if (!work) {
        test_fail("sampler_work", "out of memory");
        return harness_exit();
    }
    test_greedy();
    test_stream();
    test_distribution();
    test_filters();
    test_tie_order();
    test_exact_boundaries();
    test_logprobs();
    test_candidates();
    test_twin();
    test_speed();
    sampler_work_free(work);
    return harness_exit();
}
