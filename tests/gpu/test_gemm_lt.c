/* tests/gpu/test_gemm_lt.c - GPU gate: the projections of kernels/gemm_lt.cu (cuBLASLt, and
 * the plain and mma kernels of debug.gemm) against their CPU twin ref_gemm on fresh random
 * inputs, at the shapes of real Gemma 4 projections and
 * at ragged ones, output poisoned first; and batch invariance of a row's result.
 *
 * Pass rule (docs/gates.md, op vs reference): ||out - ref|| / ||ref|| <= 1e-2 for bf16
 * outputs. Both sides accumulate in fp32 and round once to bf16, so they differ only by
 * summation order: an element is mostly at most one bf16 ulp apart (relative 2^-8 = 3.9e-3),
 * which bounds the norm ratio well under 1e-2; we also require that every element was written
 * (no NaN from the poison left). The count of elements over one ulp is printed, not gated: where
 * a sum cancels to near zero, the same absolute fp32 rounding is many ulps of the small result
 * (the mma kernel's 130-row shape had 12 of 532,480 on the H200). */
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "tests/gpu/gpu_rand.h"
#include "tests/harness.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One shape: returns 0 on pass and prints the gate line. */
static void run_shape(const char *name, int m, int n, int k, int max_m, uint64_t seed) {
    char gate[128];
    snprintf(gate, sizeof gate, "%s[m%d n%d k%d max_m %d]", name, m, n, k, max_m);
    rng_state = seed;
    size_t xs = (size_t)m * k, ws = (size_t)n * k, ys = (size_t)m * n;
    bf16_t *x = malloc(xs * 2), *w = malloc(ws * 2), *y = malloc(ys * 2), *r = malloc(ys * 2);
    fill_uniform(x, xs, 1.0f, 0.0f);
    fill_uniform(w, ws, 1.0f / sqrtf((float)k), 0.0f);
    void *dx = k_device_alloc(xs * 2), *dw = k_device_alloc(ws * 2), *dy = k_device_alloc(ys * 2);
    k_gemm_plan *plan = NULL;
    int rc = k_gemm_plan_create(&plan, max_m, n, k);
    for (size_t i = 0; i < ys; i++)
        y[i] = 0x7fc0; /* NaN poison */
    rc |= k_copy_to_device(dx, x, xs * 2) | k_copy_to_device(dw, w, ws * 2) |
          k_copy_to_device(dy, y, ys * 2);
    k_gemm_args a = {.y = dy, .x = dx, .w = dw, .m = m, .n = n, .k = k, .plan = plan};
    rc |= k_gemm(&a, NULL) | k_sync() | k_copy_to_host(y, dy, ys * 2);
    k_gemm_args ra = {.y = r, .x = x, .w = w, .m = m, .n = n, .k = k};
    ref_gemm(&ra, NULL);
    double num = 0, den = 0;
    int unwritten = 0, far = 0;
    for (size_t i = 0; i < ys; i++) {
        float o = ref_bf16_to_f32(y[i]), e = ref_bf16_to_f32(r[i]);
        if (isnan(o)) unwritten++;
        num += (double)(o - e) * (o - e);
        den += (double)e * e;
        int d = (int)y[i] - (int)r[i];
        if (d > 1 || d < -1) far += !(o == 0 && e == 0);
    }
    /* batch invariance: row 0 alone equals row 0 of the batch, bit for bit */
    int variant = 0;
    if (m > 1 && rc == 0) {
        bf16_t *row = malloc((size_t)n * 2);
        k_gemm_args one = {.y = dy, .x = dx, .w = dw, .m = 1, .n = n, .k = k, .plan = plan};
        rc |= k_gemm(&one, NULL) | k_sync() | k_copy_to_host(row, dy, (size_t)n * 2);
        variant = memcmp(row, y, (size_t)n * 2) != 0;
        free(row);
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    TEST_CHECK(gate, rc == 0 && unwritten == 0 && rel <= 1e-2 && !variant,
               "rel err %.2e (limit 1e-2), unwritten %d, elements over 1 ulp %d, row 0 alone %s; "
               "plan asked at m = %d, workspace %zu MB",
               rel, unwritten, far, variant ? "DIFFERS" : "identical", k_gemm_plan_heur_m(plan),
               k_gemm_plan_workspace(plan) >> 20);
    k_gemm_plan_destroy(plan);
    k_device_free(dx);
    k_device_free(dw);
    k_device_free(dy);
    free(x);
    free(w);
    free(y);
    free(r);
}

/* The plan's largest step and the sizes between: the plan exists without falling back to an
 * algorithm asked at max_m (want_heur: the m it must be asked at), m = max_m runs and writes
 * every element, its first, middle and last rows equal the CPU reference within 1e-2, and row 0
 * of steps of 2, 63, 64, 65, 528 and max_m rows, and the last row of the max_m step, equal the
 * same row computed alone, bit for bit. No full reference: max_m rows of a large weight are
 * hundreds of GFLOP on the CPU. */
/* A case's buffers: x [m, k] and w [n, k] drawn (x on [-1, 1), w scaled by 1/sqrt(k)) and
 * copied to the device, y [m, n] on both sides for the caller. */
typedef struct gemm_bufs {
    bf16_t *dx, *dw, *dy, *x, *w, *y;
} gemm_bufs;

static void gemm_bufs_free(gemm_bufs *b) {
    k_device_free(b->dx);
    k_device_free(b->dw);
    k_device_free(b->dy);
    free(b->x);
    free(b->w);
    free(b->y);
}

static int gemm_bufs_make(gemm_bufs *b, int m, int n, int k, uint64_t seed) {
    size_t xs = (size_t)m * k, ws = (size_t)n * k, ys = (size_t)m * n;
    *b = (gemm_bufs){k_device_alloc(xs * 2), k_device_alloc(ws * 2), k_device_alloc(ys * 2),
                     malloc(xs * 2),         malloc(ws * 2),         malloc(ys * 2)};
    if (!b->dx || !b->dw || !b->dy || !b->x || !b->w || !b->y) return -1;
    rng_state = seed;
    fill_uniform(b->x, xs, 1.0f, 0.0f);
    fill_uniform(b->w, ws, 1.0f / sqrtf((float)k), 0.0f);
    return k_copy_to_device(b->dx, b->x, xs * 2) | k_copy_to_device(b->dw, b->w, ws * 2);
}

static void run_max_m(int n, int k, int max_m, int want_heur, uint64_t seed) {
    char gate[128];
    snprintf(gate, sizeof gate, "gemm_lt_max_m[n%d k%d max_m %d]", n, k, max_m);
    size_t ys = (size_t)max_m * n;
    gemm_bufs g;
    int rc = gemm_bufs_make(&g, max_m, n, k, seed) != 0;
    bf16_t *dx = g.dx, *dw = g.dw, *dy = g.dy, *x = g.x, *w = g.w, *y = g.y;
    bf16_t *row = malloc((size_t)n * 2), *ref = malloc((size_t)n * 2);
    k_gemm_plan *plan = NULL;
    rc = rc || !row || !ref || k_gemm_plan_create(&plan, max_m, n, k) != 0;
    long unwritten = 0, variant = 0;
    double num = 0, den = 0;
    if (!rc) {
        for (size_t i = 0; i < ys; i++)
            y[i] = 0x7fc0; /* NaN poison */
        rc |= k_copy_to_device(dy, y, ys * 2);
        k_gemm_args a = {.y = dy, .x = dx, .w = dw, .m = max_m, .n = n, .k = k, .plan = plan};
        rc |= k_gemm(&a, NULL) | k_sync() | k_copy_to_host(y, dy, ys * 2);
        for (size_t i = 0; !rc && i < ys; i++)
            unwritten += isnan(ref_bf16_to_f32(y[i])) != 0;
        const int rows[] = {0, max_m / 2, max_m - 1};
        for (size_t t = 0; !rc && t < sizeof rows / sizeof rows[0]; t++) {
            k_gemm_args ra = {
                .y = ref, .x = x + (size_t)rows[t] * k, .w = w, .m = 1, .n = n, .k = k};
            ref_gemm(&ra, NULL);
            for (int j = 0; j < n; j++) {
                float o = ref_bf16_to_f32(y[(size_t)rows[t] * n + j]), e = ref_bf16_to_f32(ref[j]);
                num += (double)(o - e) * (o - e);
                den += (double)e * e;
            }
        }
        /* the last row alone against the last row of the max_m step */
        k_gemm_args one = {.y = dy,
                           .x = dx + (size_t)(max_m - 1) * k,
                           .w = dw,
                           .m = 1,
                           .n = n,
                           .k = k,
                           .plan = plan};
        rc |= k_gemm(&one, NULL) | k_sync() | k_copy_to_host(row, dy, (size_t)n * 2);
        variant += !rc && memcmp(row, y + (size_t)(max_m - 1) * n, (size_t)n * 2) != 0;
        /* row 0 of steps of several sizes against row 0 of the max_m step */
        const int ms[] = {1, 2, 63, 64, 65, 528};
        for (size_t t = 0; !rc && t < sizeof ms / sizeof ms[0]; t++) {
            if (ms[t] > max_m) continue;
            k_gemm_args step = {
                .y = dy, .x = dx, .w = dw, .m = ms[t], .n = n, .k = k, .plan = plan};
            rc |= k_gemm(&step, NULL) | k_sync() | k_copy_to_host(row, dy, (size_t)n * 2);
            variant += !rc && memcmp(row, y, (size_t)n * 2) != 0;
        }
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    int heur = k_gemm_plan_heur_m(plan);
    TEST_CHECK(gate, rc == 0 && unwritten == 0 && variant == 0 && rel <= 1e-2 && heur == want_heur,
               "rc %d, unwritten %ld, rows 0 / middle / last rel err %.2e (limit 1e-2), rows "
               "differing from the same row in other steps %ld; plan asked at m = %d (want %d), "
               "its workspace %zu MB",
               rc, unwritten, rel, variant, heur, want_heur, k_gemm_plan_workspace(plan) >> 20);
    k_gemm_plan_destroy(plan);
    gemm_bufs_free(&g);
    free(row);
    free(ref);
}

/* Batch invariance at prefill sizes: a weight planned for the engine's largest step (2,064
 * rows), a step of 2,047 rows, then rows 0, 510 and 2,046 of it computed again as the first row
 * of steps of 1, 511 and 1,025 rows (the same x rows, a step starting at each): every output
 * bit equal (docs/gates.md). On the H200 a 26B-A4B prompt's first token once differed
 * between serve.prefill_chunk 2048 and 512 with cuBLASLt and not with debug.gemm = plain
 * (docs/perf-notes.md, ninth session): this is that check on one op. */
static void run_invariant(const char *name, int n, int k, uint64_t seed) {
    enum { MAX_M = 2064, BIG = 2047 };
    char gate[128];
    snprintf(gate, sizeof gate, "gemm_lt_batch_invariant[%s n%d k%d]", name, n, k);
    gemm_bufs g;
    int rc = gemm_bufs_make(&g, MAX_M, n, k, seed) != 0;
    bf16_t *row = malloc((size_t)n * 2);
    k_gemm_plan *plan = NULL;
    rc = rc || !row || k_gemm_plan_create(&plan, MAX_M, n, k) != 0;
    long differ = 0, compared = 0;
    char first[160] = "";
    if (!rc) {
        k_gemm_args a = {.y = g.dy, .x = g.dx, .w = g.dw, .m = BIG, .n = n, .k = k, .plan = plan};
        rc |= k_gemm(&a, NULL) | k_sync() | k_copy_to_host(g.y, g.dy, (size_t)BIG * n * 2);
        const int rows[] = {0, 510, BIG - 1}, ms[] = {1, 511, 1025};
        for (size_t r = 0; !rc && r < sizeof rows / sizeof rows[0]; r++)
            for (size_t t = 0; !rc && t < sizeof ms / sizeof ms[0]; t++) {
                if (rows[r] + ms[t] > MAX_M) continue;
                k_gemm_args step = {.y = g.dy,
                                    .x = g.dx + (size_t)rows[r] * k,
                                    .w = g.dw,
                                    .m = ms[t],
                                    .n = n,
                                    .k = k,
                                    .plan = plan};
                rc |= k_gemm(&step, NULL) | k_sync() | k_copy_to_host(row, g.dy, (size_t)n * 2);
                compared++;
                if (!rc && memcmp(row, g.y + (size_t)rows[r] * n, (size_t)n * 2) != 0) {
                    if (!differ)
                        snprintf(first, sizeof first,
                                 "; first: row %d of the %d-row step against a %d-row step",
                                 rows[r], BIG, ms[t]);
                    differ++;
                }
            }
    }
    TEST_CHECK(gate, rc == 0 && differ == 0 && compared > 0,
               "rc %d, %ld of %ld rows differ in some bit from the same row of the %d-row step "
               "(exact rule)%s; plan asked at m = %d",
               rc, differ, compared, BIG, first, k_gemm_plan_heur_m(plan));
    k_gemm_plan_destroy(plan);
    gemm_bufs_free(&g);
    free(row);
}

/* A speed switch of the tensor-core kernel against its off state, outputs poisoned first so an
 * unwritten one cannot pass: every output bit equal (the same mma operands in the same order).
 * serve.wide_loads: the lo form at m <= 8; at m = 9 it is inert. */
#define SWITCH_MS_MAX 6
typedef struct speed_switch {
    const char *name;
    void (*set)(int on);
    int with_wide; /* wide_loads on for both runs */
    int ms[SWITCH_MS_MAX];
    int n_ms;
} speed_switch;

static const speed_switch wide_switch = {"wide_loads", k_set_wide_loads, 0, {1, 2, 8, 9}, 4};

/* Both runs take x from a kernel launched just before the gemm, no synchronisation between them
 * (x poisoned with NaN before that kernel), as a step's projections take theirs: a switch that
 * read x before its grid dependency would meet the NaN, and no output of the switch-off run may
 * be NaN. */
static void run_switch(const speed_switch *sw, const char *name, int n, int k, uint64_t seed) {
    for (int t = 0; t < sw->n_ms; t++) {
        const int m = sw->ms[t];
        char gate[128];
        snprintf(gate, sizeof gate, "gemm_%s[%s m%d n%d k%d]", sw->name, name, m, n, k);
        gemm_bufs g;
        int rc = gemm_bufs_make(&g, m, n, k, seed + (uint64_t)t) != 0;
        const size_t ys = (size_t)m * n, xs = (size_t)m * k;
        bf16_t *off = malloc(ys * 2), *poison = malloc((ys > xs ? ys : xs) * 2);
        bf16_t *dsrc = k_device_alloc(xs * 2);
        k_gemm_plan *plan = NULL;
        rc =
            rc || !off || !poison || !dsrc || k_gemm_plan_create(&plan, m < 64 ? 64 : m, n, k) != 0;
        for (size_t j = 0; !rc && j < (ys > xs ? ys : xs); j++)
            poison[j] = 0x7fc0;
        if (!rc) rc |= k_copy_to_device(dsrc, g.x, xs * 2);
        k_gemm_args a = {.y = g.dy, .x = g.dx, .w = g.dw, .m = m, .n = n, .k = k, .plan = plan};
        /* x = bf(src * 1.0): src exactly */
        const k_scale_add_args produce = {.out = g.dx, .a = dsrc, .n = xs, .scale = 1.0f};
        for (int on = 0; on < 2 && !rc; on++) {
            k_set_wide_loads(sw->with_wide);
            sw->set(on);
            rc |= k_copy_to_device(g.dy, poison, ys * 2) | k_copy_to_device(g.dx, poison, xs * 2) |
                  k_scale_add(&produce, NULL) | k_gemm(&a, NULL) | k_sync() |
                  k_copy_to_host(on ? g.y : off, g.dy, ys * 2);
            sw->set(0);
            k_set_wide_loads(0);
        }
        long differ = 0, nan_off = 0;
        for (size_t j = 0; !rc && j < ys; j++) {
            differ += g.y[j] != off[j];
            nan_off += (off[j] & 0x7f80) == 0x7f80 && (off[j] & 0x7f);
        }
        const char *kernel = plan ? k_gemm_plan_kernel(plan) : NULL;
        TEST_CHECK(gate,
                   rc == 0 && differ == 0 && nan_off == 0 && kernel && strcmp(kernel, "mma") == 0,
                   "rc %d, %ld of %zu outputs differ from the switch off's (exact rule), %ld NaN "
                   "in the switch off's (want none); on %s (want mma)",
                   rc, differ, ys, nan_off, kernel ? kernel : "(no plan)");
        k_gemm_plan_destroy(plan);
        gemm_bufs_free(&g);
        k_device_free(dsrc);
        free(off);
        free(poison);
    }
}

/* y with a row stride past n (the fused gate|up halves): the first n columns of each row equal
 * ref_gemm's within 1e-2, the columns between n and ldy are never written. */
static void run_ldy(const char *name, int m, uint64_t seed) {
    const int n = 64, k = 128, ldy = 160;
    char gate[96];
    snprintf(gate, sizeof gate, "%s[m%d n%d k%d ldy %d]", name, m, n, k, ldy);
    rng_state = seed;
    const size_t xs = (size_t)m * k * 2, ws = (size_t)n * k * 2, ys = (size_t)m * ldy * 2;
    bf16_t *x = malloc(xs), *w = malloc(ws), *y = malloc(ys), *r = malloc((size_t)m * n * 2);
    void *dx = k_device_alloc(xs), *dw = k_device_alloc(ws), *dy = k_device_alloc(ys);
    k_gemm_plan *plan = NULL;
    int rc = !x || !w || !y || !r || !dx || !dw || !dy ||
             k_gemm_plan_create(&plan, m < 16 ? 16 : m, n, k) != 0;
    if (!rc) {
        fill_uniform(x, xs / 2, 1.0f, 0.0f);
        fill_uniform(w, ws / 2, 1.0f / sqrtf((float)k), 0.0f);
        for (size_t i = 0; i < ys / 2; i++)
            y[i] = 0x7fc0; /* NaN poison */
        rc |=
            k_copy_to_device(dx, x, xs) | k_copy_to_device(dw, w, ws) | k_copy_to_device(dy, y, ys);
        k_gemm_args a = {
            .y = dy, .x = dx, .w = dw, .m = m, .n = n, .k = k, .ldy = ldy, .plan = plan};
        rc |= k_gemm(&a, NULL) | k_sync() | k_copy_to_host(y, dy, ys);
    }
    double num = 0, den = 0;
    int written_past = 0;
    if (!rc) {
        k_gemm_args ra = {.y = r, .x = x, .w = w, .m = m, .n = n, .k = k};
        ref_gemm(&ra, NULL);
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < n; j++) {
                float o = ref_bf16_to_f32(y[i * ldy + j]), e = ref_bf16_to_f32(r[i * n + j]);
                num += (double)(o - e) * (o - e);
                den += (double)e * e;
            }
            for (int j = n; j < ldy; j++)
                written_past += y[i * ldy + j] != 0x7fc0;
        }
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    TEST_CHECK(gate, rc == 0 && rel <= 1e-2 && written_past == 0,
               "rel err %.2e (limit 1e-2), elements written past n %d, rc %d", rel, written_past,
               rc);
    k_gemm_plan_destroy(plan);
    k_device_free(dx);
    k_device_free(dw);
    k_device_free(dy);
    free(x);
    free(w);
    free(y);
    free(r);
}

/* ---- gemm groups (q|k|v, gate|up: kernels/kernels.h, k_gemm_group_args) ---- */

/* The twin on the CPU (no GPU needed): a group of three equals its members' ref_gemm calls bit
 * for bit, and a group with no members, too many, or members that differ in x, m or k is
 * refused by both backends' check. */
static void run_group_ref(void) {
    enum { M = 3, K = 64, N0 = 40, N1 = 24 };
    rng_state = 4242;
    bf16_t x[M * K], x2[M * K], w0[N0 * K], w1[N1 * K], y0[M * N0], y1[M * 2 * N1], r0[M * N0],
        r1[M * 2 * N1];
    fill_uniform(x, M * K, 1.0f, 0.0f);
    memcpy(x2, x, sizeof x);
    fill_uniform(w0, N0 * K, 0.125f, 0.0f);
    fill_uniform(w1, N1 * K, 0.125f, 0.0f);
    memset(y1, 0, sizeof y1);
    memset(r1, 0, sizeof r1);
    /* member 1 writes the second half of rows twice its width, as up_proj does */
    k_gemm_group_args g = {.n_gemms = 3};
    g.g[0] = (k_gemm_args){.y = y0, .x = x, .w = w0, .m = M, .n = N0, .k = K};
    g.g[1] = (k_gemm_args){.y = y1, .x = x, .w = w1, .m = M, .n = N1, .k = K, .ldy = 2 * N1};
    g.g[2] = (k_gemm_args){.y = y1 + N1, .x = x, .w = w1, .m = M, .n = N1, .k = K, .ldy = 2 * N1};
    int rc = ref_gemm_group(&g, NULL);
    k_gemm_args c0 = g.g[0], c1 = g.g[1], c2 = g.g[2];
    c0.y = r0, c1.y = r1, c2.y = r1 + N1;
    rc |= ref_gemm(&c0, NULL) | ref_gemm(&c1, NULL) | ref_gemm(&c2, NULL);
    int same = memcmp(y0, r0, sizeof y0) == 0 && memcmp(y1, r1, sizeof y1) == 0;
    int bad = 0;
    k_gemm_group_args e = g;
    e.n_gemms = 0;
    bad += ref_gemm_group(&e, NULL) != K_ERR_SHAPE;
    e.n_gemms = K_GEMM_GROUP_MAX + 1;
    bad += ref_gemm_group(&e, NULL) != K_ERR_SHAPE;
    e = g;
    e.g[2].x = x2; /* the same values elsewhere: still another input */
    bad += ref_gemm_group(&e, NULL) != K_ERR_SHAPE;
    e = g;
    e.g[1].m = M - 1;
    bad += ref_gemm_group(&e, NULL) != K_ERR_SHAPE;
    e = g;
    e.g[1].k = K / 2;
    bad += k_gemm_group_check(&e) != K_ERR_SHAPE;
    e = g; /* members that disagree on their prompt rows */
    e.g[1].prompt_rows = 1;
    bad += ref_gemm_group(&e, NULL) != K_ERR_SHAPE;
    e = g; /* more prompt rows than rows */
    for (int i = 0; i < 3; i++)
        e.g[i].prompt_rows = M + 1;
    bad += ref_gemm_group(&e, NULL) != K_ERR_SHAPE;
    TEST_CHECK("gemm_group_ref", rc == 0 && same && bad == 0,
               "rc %d, group %s its members' calls, %d of 7 bad groups accepted", rc,
               same ? "equals" : "DIFFERS from", bad);
}

/* On the GPU with serve.fuse_projections on: q|k|v and gate|up (into the halves of rows 2 x d_ff
 * wide) of the 26B-A4B's sliding shapes, or ragged ones (n % 8 != 0: the members' block runs
 * of uneven length), as k_gemm_group against the same plans called one by one, outputs
 * poisoned first: every output bit equal. k_gemm_group_fuses must say one launch at m = 1, 16
 * and 24 (two row tiles) and separate calls at 130 (past the decode form) and when one member is
 * on cuBLASLt. */
static void run_group(int m, int mixed, int ragged, int wide, uint64_t seed) {
    enum { K = 2816 };
    const int Q = ragged ? 1004 : 4096, KV = ragged ? 518 : 2048, FF = ragged ? 2110 : 2112;
    const int want_fused = !mixed && m <= 32;
    char gate[96];
    snprintf(gate, sizeof gate, "gemm_group_vs_calls[m%d%s%s%s]", m, mixed ? " mixed" : "",
             ragged ? " ragged" : "", wide ? " wide_loads" : "");
    const int ns[5] = {Q, KV, KV, FF, FF};
    gemm_bufs b[5] = {0};
    int rc = 0;
    for (int i = 0; i < 5; i++)
        rc |= gemm_bufs_make(&b[i], m, ns[i], K, seed + (uint64_t)i) != 0;
    for (int i = 1; i < 5 && !rc; i++) /* one input for all: member 0's x */
        rc |= k_copy_to_device(b[i].dx, b[0].x, (size_t)m * K * 2);
    const size_t gu_elems = (size_t)m * 2 * FF,
                 out_elems[3] = {(size_t)m * Q, (size_t)m * KV, (size_t)m * KV};
    bf16_t *gu = k_device_alloc(gu_elems * 2), *gu_sep = k_device_alloc(gu_elems * 2);
    bf16_t *sep[3] = {k_device_alloc(out_elems[0] * 2), k_device_alloc(out_elems[1] * 2),
                      k_device_alloc(out_elems[2] * 2)};
    rc |= !gu || !gu_sep || !sep[0] || !sep[1] || !sep[2];
    bf16_t *poison = malloc(gu_elems > out_elems[0] ? gu_elems * 2 : out_elems[0] * 2);
    rc |= !poison;
    if (!rc) { /* NaN in every output, so an unwritten element cannot pass */
        size_t most = gu_elems > out_elems[0] ? gu_elems : out_elems[0];
        for (size_t j = 0; j < most; j++)
            poison[j] = 0x7fc0;
        rc |= k_copy_to_device(gu, poison, gu_elems * 2);
        for (int i = 0; i < 3; i++)
            rc |= k_copy_to_device(b[i].dy, poison, out_elems[i] * 2);
    }
    k_gemm_plan *plan[5] = {0};
    k_gemm_auto(1);
    for (int i = 0; i < 5 && !rc; i++) {
        if (mixed && i == 1) k_gemm_auto(0); /* k on cuBLASLt: the group falls back */
        rc |= k_gemm_plan_create(&plan[i], 2064, ns[i], K) != 0;
        k_gemm_auto(1);
    }
    k_gemm_auto(0);
    const bf16_t *x = b[0].dx;
    k_gemm_group_args qkv = {.n_gemms = 3}, gup = {.n_gemms = 2};
    for (int i = 0; i < 3; i++)
        qkv.g[i] = (k_gemm_args){
            .y = b[i].dy, .x = x, .w = b[i].dw, .m = m, .n = ns[i], .k = K, .plan = plan[i]};
    gup.g[0] = (k_gemm_args){
        .y = gu, .x = x, .w = b[3].dw, .m = m, .n = FF, .k = K, .ldy = 2 * FF, .plan = plan[3]};
    gup.g[1] = (k_gemm_args){.y = gu + FF,
                             .x = x,
                             .w = b[4].dw,
                             .m = m,
                             .n = FF,
                             .k = K,
                             .ldy = 2 * FF,
                             .plan = plan[4]};
    k_gemm_fuse(1);
    k_set_wide_loads(wide); /* the group's launch only: the members' own calls keep 8 a group */
    const int fused_qkv = k_gemm_group_fuses(&qkv), fused_gu = k_gemm_group_fuses(&gup);
    if (!rc) rc |= k_gemm_group(&qkv, NULL) | k_gemm_group(&gup, NULL);
    k_set_wide_loads(0);
    k_gemm_fuse(0);
    for (int i = 0; i < 3 && !rc; i++) {
        k_gemm_args one = qkv.g[i];
        one.y = sep[i];
        rc |= k_gemm(&one, NULL);
    }
    for (int i = 0; i < 2 && !rc; i++) {
        k_gemm_args one = gup.g[i];
        one.y = gu_sep + (i ? FF : 0);
        rc |= k_gemm(&one, NULL);
    }
    rc |= k_sync();
    long differ = 0, total = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        bf16_t *h = malloc(out_elems[i] * 2);
        rc |= !h || k_copy_to_host(b[i].y, b[i].dy, out_elems[i] * 2) ||
              k_copy_to_host(h, sep[i], out_elems[i] * 2);
        for (size_t j = 0; !rc && j < out_elems[i]; j++)
            differ += b[i].y[j] != h[j];
        total += (long)out_elems[i];
        free(h);
    }
    if (!rc) {
        bf16_t *h = malloc(gu_elems * 2), *h2 = malloc(gu_elems * 2);
        rc |= !h || !h2 || k_copy_to_host(h, gu, gu_elems * 2) ||
              k_copy_to_host(h2, gu_sep, gu_elems * 2);
        for (size_t j = 0; !rc && j < gu_elems; j++)
            differ += h[j] != h2[j];
        total += (long)gu_elems;
        free(h);
        free(h2);
    }
    const int path_ok = fused_qkv == want_fused && fused_gu == (m <= 32);
    TEST_CHECK(gate, rc == 0 && differ == 0 && total > 0 && path_ok,
               "rc %d, %ld of %ld outputs differ from the members' own calls (exact rule); "
               "q|k|v %s, gate|up %s (want %s, %s); k on %s",
               rc, differ, total, fused_qkv ? "one launch" : "separate calls",
               fused_gu ? "one launch" : "separate calls",
               want_fused ? "one launch" : "separate calls",
               m <= 32 ? "one launch" : "separate calls",
               plan[1] ? k_gemm_plan_kernel(plan[1]) : "(no plan)");
    for (int i = 0; i < 5; i++) {
        k_gemm_plan_destroy(plan[i]);
        gemm_bufs_free(&b[i]);
    }
    for (int i = 0; i < 3; i++)
        k_device_free(sep[i]);
    k_device_free(gu);
    k_device_free(gu_sep);
    free(poison);
}

/* ---- prompt plans (serve.prompt_gemm: k_gemm_prompt_plans, docs/prompt-rows.md) ---- */

/* One weight planned under auto with prompt plans for the engine's largest step (2,064 rows),
 * on the tensor-core kernel or (the 31B's large weights) on a cuBLASLt plan asked at 64 rows:
 * it must have a prompt plan (a shape without one is said here, not found in a prefill's
 * speed). Then, outputs poisoned before each call, every bit compared:
 * - prompt rows alone: a 2,047-row all-prompt step, and rows 0, 510 and 2,046 of it again as the
 *   first of all-prompt steps of 1, 511 and 1,025 rows: the prompt plan's bits do not depend on
 *   m (split-k 1: one chain of 16-k steps an output);
 * - mixed steps: d generated rows then p prompt rows (d of 1, 16 and 40: the decode form, its
 *   largest, the tile form; p of 1 and 300): the generated rows equal the same rows in a step of
 *   generated rows alone, the prompt rows the same rows of the all-prompt step;
 * - the prompt rows against the CPU twin (rows 0, 1,000 and 2,046; the rule of run_shape);
 * - an impossible prompt_rows (m + 1, -1) refused. */
static void run_prompt(const char *name, int n, int k, uint64_t seed) {
    enum { MAX_M = 2064, BIG = 2047 };
    char gate[128];
    snprintf(gate, sizeof gate, "gemm_prompt[%s n%d k%d]", name, n, k);
    gemm_bufs g;
    int rc = gemm_bufs_make(&g, MAX_M, n, k, seed) != 0;
    const size_t row_bytes = (size_t)n * 2;
    bf16_t *part = malloc((size_t)MAX_M * row_bytes), *ref = malloc(row_bytes);
    bf16_t *poison = malloc((size_t)MAX_M * row_bytes);
    k_gemm_plan *plan = NULL;
    k_gemm_auto(1);
    k_gemm_prompt_plans(1);
    rc = rc || !part || !ref || !poison || k_gemm_plan_create(&plan, MAX_M, n, k) != 0;
    k_gemm_prompt_plans(0);
    k_gemm_auto(0);
    const int has_prompt = k_gemm_plan_has_prompt(plan);
    long differ = 0, compared = 0, refused = 0;
    double num = 0, den = 0;
    char first[160] = "";
    for (size_t i = 0; poison && i < (size_t)MAX_M * n; i++)
        poison[i] = 0x7fc0; /* NaN: an unwritten output differs from any result */
    /* one step: x rows [x0, x0 + m), the last p of them prompt rows, into part */
    int step_rc = 0;
#define PROMPT_STEP(x0, m_, p_)                                                                    \
    do {                                                                                           \
        k_gemm_args a_ = {.y = g.dy,                                                               \
                          .x = g.dx + (size_t)(x0)*k,                                              \
                          .w = g.dw,                                                               \
                          .m = (m_),                                                               \
                          .n = n,                                                                  \
                          .k = k,                                                                  \
                          .plan = plan,                                                            \
                          .prompt_rows = (p_)};                                                    \
        step_rc = k_copy_to_device(g.dy, poison, (size_t)(m_)*row_bytes) | k_gemm(&a_, NULL) |     \
                  k_sync() | k_copy_to_host(part, g.dy, (size_t)(m_)*row_bytes);                   \
    } while (0)
    if (!rc && has_prompt) {
        PROMPT_STEP(0, BIG, BIG);
        rc |= step_rc;
        if (!rc) memcpy(g.y, part, (size_t)BIG * row_bytes);
        const int rows[] = {0, 510, BIG - 1}, ms[] = {1, 511, 1025};
        for (size_t r = 0; !rc && r < 3; r++)
            for (size_t t = 0; !rc && t < 3; t++) {
                if (rows[r] + ms[t] > MAX_M) continue;
                PROMPT_STEP(rows[r], ms[t], ms[t]);
                rc |= step_rc;
                compared++;
                if (!rc && memcmp(part, g.y + (size_t)rows[r] * n, row_bytes) != 0) {
                    if (!differ)
                        snprintf(first, sizeof first,
                                 "; first: prompt row %d of the %d-row step against a %d-row one",
                                 rows[r], BIG, ms[t]);
                    differ++;
                }
            }
        const int ds[] = {1, 16, 40}, ps[] = {1, 300};
        bf16_t *gen = malloc((size_t)40 * row_bytes);
        rc |= !gen;
        for (size_t a = 0; !rc && a < 3; a++) {
            PROMPT_STEP(0, ds[a], 0); /* the generated rows alone */
            rc |= step_rc;
            if (!rc) memcpy(gen, part, (size_t)ds[a] * row_bytes);
            for (size_t b = 0; !rc && b < 2; b++) {
                PROMPT_STEP(0, ds[a] + ps[b], ps[b]);
                rc |= step_rc;
                compared += ds[a] + ps[b];
                long bad = 0;
                for (int r = 0; !rc && r < ds[a]; r++)
                    bad += memcmp(part + (size_t)r * n, gen + (size_t)r * n, row_bytes) != 0;
                for (int r = ds[a]; !rc && r < ds[a] + ps[b]; r++)
                    bad += memcmp(part + (size_t)r * n, g.y + (size_t)r * n, row_bytes) != 0;
                if (bad && !differ)
                    snprintf(first, sizeof first,
                             "; first: the step of %d generated and %d prompt rows", ds[a], ps[b]);
                differ += bad;
            }
        }
        free(gen);
        const int twin[] = {0, 1000, BIG - 1};
        for (size_t t = 0; !rc && t < 3; t++) {
            k_gemm_args ra = {
                .y = ref, .x = g.x + (size_t)twin[t] * k, .w = g.w, .m = 1, .n = n, .k = k};
            rc |= ref_gemm(&ra, NULL);
            for (int j = 0; j < n; j++) {
                float o = ref_bf16_to_f32(g.y[(size_t)twin[t] * n + j]);
                float e = ref_bf16_to_f32(ref[j]);
                num += isnan(o) ? 1e30 : (double)(o - e) * (o - e);
                den += (double)e * e;
            }
        }
        k_gemm_args over = {.y = g.dy, .x = g.dx, .w = g.dw, .m = 4, .n = n, .k = k, .plan = plan};
        over.prompt_rows = 5;
        refused += k_gemm(&over, NULL) == K_ERR_SHAPE;
        over.prompt_rows = -1;
        refused += k_gemm(&over, NULL) == K_ERR_SHAPE;
    }
#undef PROMPT_STEP
    const double rel = sqrt(num / (den > 0 ? den : 1));
    TEST_CHECK(gate,
               rc == 0 && has_prompt && differ == 0 && compared > 0 && rel <= 1e-2 && refused == 2,
               "rc %d, prompt plan %s, %ld of %ld rows differ in some bit from the same row in "
               "another step (exact rule)%s; prompt rows against the CPU twin rel err %.2e (limit "
               "1e-2); %ld of 2 impossible prompt_rows refused",
               rc, has_prompt ? "made" : "MISSING", differ, compared, first, rel, refused);
    k_gemm_plan_destroy(plan);
    gemm_bufs_free(&g);
    free(part);
    free(ref);
    free(poison);
}

/* q|k|v of the 26B-A4B as one group with prompt plans, 8 generated rows and 12 prompt rows: it
 * must not claim one launch (k_gemm_group_fuses), and every output bit must equal the members'
 * calls: the generated rows as a group of their own (fused), the prompt rows as all-prompt
 * calls. k and v share a prompt plan, dropped and planned again in turn before the calls. */
static void run_prompt_group(uint64_t seed) {
    enum { K = 2816, M = 20, P = 12, N_MAX = 4096 };
    const int ns[3] = {4096, 2048, 2048};
    gemm_bufs g;
    int rc = gemm_bufs_make(&g, M, N_MAX, K, seed) != 0;
    k_gemm_plan *plan[3] = {0};
    const size_t bytes = (size_t)M * N_MAX * 2;
    bf16_t *dy[3] = {0}, *got = malloc(bytes), *want = malloc(bytes), *poison = malloc(bytes);
    if (poison) memset(poison, 0xff, bytes); /* NaN in every output */
    k_gemm_auto(1);
    k_gemm_prompt_plans(1);
    k_gemm_fuse(1);
    for (int i = 0; i < 3; i++) {
        rc |= k_gemm_plan_create(&plan[i], 2064, ns[i], K) != 0;
        dy[i] = k_device_alloc((size_t)M * ns[i] * 2);
        rc |= !dy[i] || !k_gemm_plan_has_prompt(plan[i]);
    }
    /* k and v share one prompt plan (one shape): v's weight dropped and planned again, the
     * shared plan must outlive the drop and serve both */
    k_gemm_plan_destroy(plan[2]);
    plan[2] = NULL;
    rc |= k_gemm_plan_create(&plan[2], 2064, ns[2], K) != 0 || !k_gemm_plan_has_prompt(plan[2]);
    k_gemm_plan_destroy(plan[1]);
    plan[1] = NULL;
    rc |= k_gemm_plan_create(&plan[1], 2064, ns[1], K) != 0 || !k_gemm_plan_has_prompt(plan[1]);
    k_gemm_prompt_plans(0);
    k_gemm_auto(0);
    long differ = 0;
    int fused = -1;
    rc |= !got || !want || !poison;
    for (int i = 0; !rc && i < 3; i++)
        rc |= k_copy_to_device(dy[i], poison, (size_t)M * ns[i] * 2);
    if (!rc) {
        k_gemm_group_args grp = {.n_gemms = 3};
        for (int i = 0; i < 3; i++)
            grp.g[i] = (k_gemm_args){.y = dy[i],
                                     .x = g.dx,
                                     .w = g.dw,
                                     .m = M,
                                     .n = ns[i],
                                     .k = K,
                                     .plan = plan[i],
                                     .prompt_rows = P};
        fused = k_gemm_group_fuses(&grp);
        rc |= k_gemm_group(&grp, NULL) | k_sync();
        for (int i = 0; !rc && i < 3; i++) {
            rc |= k_copy_to_host(got, dy[i], (size_t)M * ns[i] * 2);
            k_gemm_args dec = grp.g[i], pr = grp.g[i];
            dec.m = M - P;
            dec.prompt_rows = 0;
            pr.x = g.dx + (size_t)(M - P) * K;
            pr.y = dy[i] + (size_t)(M - P) * ns[i];
            pr.m = pr.prompt_rows = P;
            rc |= k_copy_to_device(dy[i], poison, (size_t)M * ns[i] * 2) | k_gemm(&dec, NULL) |
                  k_gemm(&pr, NULL) | k_sync() | k_copy_to_host(want, dy[i], (size_t)M * ns[i] * 2);
            for (int r = 0; !rc && r < M; r++)
                differ += memcmp(got + (size_t)r * ns[i], want + (size_t)r * ns[i],
                                 (size_t)ns[i] * 2) != 0;
        }
    }
    k_gemm_fuse(0);
    TEST_CHECK("gemm_prompt_group[26B-A4B q|k|v, 8 generated + 12 prompt rows]",
               rc == 0 && fused == 0 && differ == 0,
               "rc %d, one launch claimed %d (want 0), %ld of %d member rows differ from the "
               "members' own calls (exact rule)",
               rc, fused, differ, 3 * M);
    for (int i = 0; i < 3; i++) {
        k_gemm_plan_destroy(plan[i]);
        k_device_free(dy[i]);
    }
    gemm_bufs_free(&g);
    free(got);
    free(want);
    free(poison);
}

/* every projection shape of the 26B-A4B */
typedef struct proj_shape {
    const char *name;
    int n, k;
} proj_shape;
static const proj_shape proj[] = {
    {"q", 4096, 2816},        {"k_v", 2048, 2816},  {"q_global", 8192, 2816},
    {"k_global", 1024, 2816}, {"o", 2816, 4096},    {"o_global", 2816, 8192},
    {"gate_up", 2112, 2816},  {"down", 2816, 2112}, {"router", 128, 2816}};
#define N_PROJ (sizeof proj / sizeof proj[0])

/* A speed switch of the tensor-core kernel on every 26B-A4B projection shape, the 31B's k (a
 * k = 5,376 the mma kernel runs under auto) and a ragged shape (n = 1004 leaves the last weight
 * tile half empty, k = 288 cuts k's quarters into 2 and 3 blocks); the seeds from seed on. */
static void run_switch_shapes(const speed_switch *sw, uint64_t seed) {
    for (size_t i = 0; i < N_PROJ; i++)
        run_switch(sw, proj[i].name, proj[i].n, proj[i].k, seed + i);
    run_switch(sw, "31B k", 4096, 5376, seed + N_PROJ);
    run_switch(sw, "ragged", 1004, 288, seed + N_PROJ + 1);
}

int main(void) {
    char desc[256];
    run_group_ref(); /* the CPU twin: needs no GPU */
    if (k_device_init(desc, sizeof desc) != 0) {
        test_skip("gemm_lt_vs_ref", "no GPU (%s)", desc);
        test_skip("gemm_lt_max_m", "no GPU (%s)", desc);
        test_skip("gemm_plain_vs_ref", "no GPU (%s)", desc);
        test_skip("gemm_lt_batch_invariant", "no GPU (%s)", desc);
        test_skip("gemm_mma_vs_ref", "no GPU (%s)", desc);
        test_skip("gemm_auto_kernel", "no GPU (%s)", desc);
        test_skip("gemm_auto_vs_ref", "no GPU (%s)", desc);
        test_skip("gemm_group_vs_calls", "no GPU (%s)", desc);
        test_skip("gemm_wide_loads", "no GPU (%s)", desc);
        test_skip("gemm_prompt", "no GPU (%s)", desc);
        test_skip("gemm_prompt_group", "no GPU (%s)", desc);
        return 0;
    }
    printf("# device: %s\n", desc);
    /* 26B-A4B q_proj and o_proj, an expert's gate_up, a ragged shape, a tiny-fixture shape
     * (plans for up to 64 rows); the 31B's down projection planned for the engine's largest
     * step (prefill_chunk 2048 + max_batch 16): the weight whose plan needs more than the usual
     * workspace to run that step with an algorithm asked at 64 rows */
    int shapes[][4] = {{1, 4096, 2816, 64},    {16, 4096, 2816, 64}, {7, 2816, 4096, 64},
                       {64, 1408, 2816, 64},   {5, 1000, 264, 64},   {3, 64, 1024, 64},
                       {16, 5376, 21504, 2064}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        run_shape("gemm_lt_vs_ref", shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                  1234 + i);
    run_max_m(5376, 21504, 2064, 64, 99);
    run_ldy("gemm_lt_vs_ref", 5, 777);
    /* every projection shape of the 26B-A4B, planned for its largest step */
    for (size_t i = 0; i < N_PROJ; i++)
        run_invariant(proj[i].name, proj[i].n, proj[i].k, 555 + i);
    /* debug.gemm = plain: the same checks on the CUDA-core kernel */
    k_gemm_plain(1);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        run_shape("gemm_plain_vs_ref", shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                  4321 + i);
    run_ldy("gemm_plain_vs_ref", 5, 778);
    run_invariant("plain q", 4096, 2816, 666);
    k_gemm_plain(0);
    /* debug.gemm = mma: the same checks on the tensor-core kernel (the ragged k = 264 shape
     * takes the plain kernel), and batch invariance at every 26B-A4B projection shape, the
     * rows of one step of 2,047 against the same rows as the first of steps of 1, 511 and
     * 1,025: the k split and the instruction sequence do not depend on m */
    k_gemm_mma(1);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        run_shape("gemm_mma_vs_ref", shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                  5432 + i);
    /* past 32 rows the 64 x 32 tile form: a partial row tile (130 = 2 x 64 + 2) against the
     * twin, and row 0 of it alone (the decode form) bit for bit; n = 1004 leaves the last
     * weight tile half empty and k = 288 cuts into parts of 2 and 3 blocks */
    run_shape("gemm_mma_vs_ref", 130, 4096, 2816, 2064, 5500);
    run_shape("gemm_mma_vs_ref", 77, 1004, 288, 2064, 5501);
    run_ldy("gemm_mma_vs_ref", 5, 779);
    for (size_t i = 0; i < N_PROJ; i++) {
        char name[32];
        snprintf(name, sizeof name, "mma %s", proj[i].name);
        run_invariant(name, proj[i].n, proj[i].k, 888 + i);
    }
    k_gemm_mma(0);
    /* debug.gemm = auto (the default): the kernel follows the weight's shape, never m */
    k_gemm_auto(1);
    static const struct {
        const char *name, *want;
        int n, k;
    } pick[] = {{"26B-A4B q", "mma", 4096, 2816},
                {"26B-A4B o_global", "mma", 2816, 8192},
                {"31B k", "mma", 4096, 5376},
                {"31B q", "cublaslt", 8192, 5376},
                {"31B gate_up", "cublaslt", 2 * 21504, 5376},
                {"26B-A4B lm_head", "cublaslt", 262144, 2816},
                {"ragged k", "cublaslt", 1000, 264}};
    for (size_t i = 0; i < sizeof pick / sizeof pick[0]; i++) {
        char gate[96];
        snprintf(gate, sizeof gate, "gemm_auto_kernel[%s n%d k%d]", pick[i].name, pick[i].n,
                 pick[i].k);
        k_gemm_plan *plan = NULL;
        int rc = k_gemm_plan_create(&plan, 2064, pick[i].n, pick[i].k);
        const char *got = k_gemm_plan_kernel(plan);
        TEST_CHECK(gate, rc == 0 && got && strcmp(got, pick[i].want) == 0,
                   "rc %d, runs on %s, want %s", rc, got ? got : "(no plan)", pick[i].want);
        k_gemm_plan_destroy(plan);
    }
    run_shape("gemm_auto_vs_ref", 16, 4096, 2816, 64, 6001);
    run_shape("gemm_auto_vs_ref", 5, 1000, 264, 64, 6002);
    run_invariant("auto q", 4096, 2816, 6003);
    k_gemm_auto(0);
    run_group(1, 0, 0, 0, 7001);
    run_group(16, 0, 0, 0, 7011);
    run_group(24, 0, 1, 0, 7021);
    run_group(130, 0, 0, 0, 7031);
    run_group(16, 1, 0, 0, 7041);
    /* serve.wide_loads: the group's one launch in the lo form at up to 8 rows, against the
     * members' calls in the narrow groups; at 16 rows the switch is inert */
    run_group(1, 0, 0, 1, 7051);
    run_group(8, 0, 1, 1, 7061);
    run_group(16, 0, 0, 1, 7071);
    /* and k_gemm alone: every 26B-A4B projection shape and the 31B's mma ones, wide against
     * narrow at 1, 2 and 8 rows (the lo form) and 9 (inert), and the batch-invariance rule with
     * it on (the 1-row steps in the lo form against the 2,047-row step's tile form) */
    k_gemm_mma(1);
    run_switch_shapes(&wide_switch, 9001);
    k_set_wide_loads(1);
    run_invariant("mma wide_loads q", 4096, 2816, 9200);
    run_invariant("mma wide_loads o_global", 2816, 8192, 9201);
    k_set_wide_loads(0);
    k_gemm_mma(0);
    /* serve.prompt_gemm: every 26B-A4B projection shape and the 31B's k, then q|k|v as a group */
    for (size_t i = 0; i < N_PROJ; i++)
        run_prompt(proj[i].name, proj[i].n, proj[i].k, 9950 + i);
    run_prompt("31B k", 4096, 5376, 9970);
    run_prompt("31B q (cuBLASLt, asked at 64)", 8192, 5376, 9972);
    run_prompt("31B down (cuBLASLt, split-k at 64)", 5376, 21504, 9973);
    run_prompt_group(9971);
    return harness_exit();
}
