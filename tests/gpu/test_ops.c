/* tests/gpu/test_ops.c - GPU gate: the row-wise and elementwise ops of kernels/norm.cu
 * (embed, rmsnorm, gelu_mul, scale_add, mul_vec_scale, gather_rows, softcap) against their
 * CPU twins in kernels/ref/norm_ref.c, on fresh seeded random inputs at the model's widths
 * (16..512 head and PLE norms, 2816 and 5376 hidden sizes) and ragged ones, with the output
 * poisoned with NaN first (except where the op is in place or the case aliases out on an
 * input), plus the launchers' precondition answers.
 *
 * Pass rule (docs/gates.md, op vs reference): ||out - ref|| / ||ref|| <= 1e-2 for bf16
 * outputs, no poison left, and a tighter per-element rule for each op, stated with its reason
 * where it is chosen. Distances are counted in bf16 ulps along the ordered bit patterns. */
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "tests/gpu/gpu_rand.h"
#include "tests/harness.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define POISON 0x7fc0 /* bf16 quiet NaN */
#define REL_LIMIT 1e-2
#define EPS 1e-6f /* Gemma's rms_norm_eps */

/* ~N(0,1)-ish: three uniforms on [-1,1) sum to variance 1; one value in 32 is scaled by 8 so
 * the tails (saturated tanh, gelu's flat negative side, large norms) are exercised. */
static float rnd_act(void) {
    float v = rnd() + rnd() + rnd();
    if (rnd_int(32) == 0) v *= 8.0f;
    return v;
}

static void fill(bf16_t *p, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        p[i] = ref_f32_to_bf16(rnd_act() * scale);
}

static bf16_t *hbuf(size_t n) {
    bf16_t *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) {
        fprintf(stderr, "test_ops: out of host memory\n");
        exit(1);
    }
    return p;
}

static bf16_t *poisoned(size_t n) {
    bf16_t *p = hbuf(n);
    for (size_t i = 0; i < n; i++)
        p[i] = POISON;
    return p;
}

/* A device copy of host memory; a failure sets *rc (later launches then refuse NULL). */
static void *dcopy(const void *h, size_t bytes, int *rc) {
    void *d = k_device_alloc(bytes ? bytes : 1);
    if (!d) {
        *rc |= K_ERR_NO_MEMORY;
        return NULL;
    }
    *rc |= k_copy_to_device(d, h, bytes);
    return d;
}

/* ---- comparison ---- */

typedef struct cmp {
    double num, den;  /* sum of (out - ref)^2 and of ref^2 */
    size_t unwritten; /* NaN out where ref is a number: poison left */
    size_t far;       /* elements outside the op's element rule */
    size_t worst;     /* index of the largest ulp distance */
    int worst_ulps;
    float worst_o, worst_e;
} cmp;

/* Sign-magnitude bf16 bits on one monotone integer line: +0 and -0 both 0, neighbours 1. */
static int ord(bf16_t v) { return (v & 0x8000) ? -(int)(v & 0x7fff) : (int)(v & 0x7fff); }

/* One ulp of a bf16 value of v's magnitude (8 significant bits). */
static float ulp_bf16(float v) {
    if (v == 0.0f || !isfinite(v)) return 0x1p-133f;
    float u = ldexpf(1.0f, ilogbf(v) - 7);
    return u > 0x1p-133f ? u : 0x1p-133f;
}

/* Element i passes when out is within max_ulps of ref, or within atol of it. */
static void cmp_elem(cmp *c, size_t i, bf16_t o, bf16_t e, int max_ulps, float atol) {
    float fo = ref_bf16_to_f32(o), fe = ref_bf16_to_f32(e);
    if (isnan(fo) || isnan(fe)) {
        if (isnan(fo) && !isnan(fe)) c->unwritten++;
        if (!isnan(fo) && isnan(fe)) c->far++;
        return;
    }
    double d = (double)fo - (double)fe;
    c->num += d * d;
    c->den += (double)fe * (double)fe;
    int u = abs(ord(o) - ord(e));
    if (u > c->worst_ulps) {
        c->worst_ulps = u;
        c->worst = i;
        c->worst_o = fo;
        c->worst_e = fe;
    }
    if (u > max_ulps && fabs(d) > (double)atol) c->far++;
}

static void report(const char *gate, int rc, const cmp *c, const char *rule, const char *extra) {
    double rel = sqrt(c->num / (c->den > 0 ? c->den : 1));
    TEST_CHECK(gate, rc == 0 && c->unwritten == 0 && c->far == 0 && rel <= REL_LIMIT,
               "rc %d, rel err %.2e (limit %.0e), unwritten %zu, outside %s: %zu, worst %d ulp "
               "at %zu (got %g want %g)%s",
               rc, rel, REL_LIMIT, c->unwritten, rule, c->far, c->worst_ulps, c->worst,
               (double)c->worst_o, (double)c->worst_e, extra);
}

/* Exact ops (embed, scale_add, mul_vec_scale, gather_rows) apply the same IEEE fp32
 * multiplies and adds as the twin (the kernels forbid FMA contraction) and round at the same
 * points, so they must match bit for bit. */
static void cmp_exact(cmp *c, const bf16_t *out, const bf16_t *ref, size_t n) {
    for (size_t i = 0; i < n; i++)
        cmp_elem(c, i, out[i], ref[i], 0, 0.0f);
}

/* ---- embed ---- */

static void run_embed(int rows, int width, int bad_ids, uint64_t seed) {
    char gate[128];
    snprintf(gate, sizeof gate, "op_vs_ref[embed w=%d rows=%d%s]", width, rows,
             bad_ids ? " bad ids" : "");
    rng_state = seed;
    const int n_vocab = 300;
    size_t n = (size_t)rows * (size_t)width, tn = (size_t)n_vocab * (size_t)width;
    bf16_t *table = hbuf(tn), *out = poisoned(n), *ref = hbuf(n);
    int32_t *ids = malloc((size_t)rows * sizeof *ids), *good = malloc((size_t)rows * sizeof *good);
    if (!ids || !good) exit(1);
    fill(table, tn, 1.0f);
    for (int r = 0; r < rows; r++)
        ids[r] = good[r] = rnd_int(n_vocab);
    /* bad ids: the kernel writes a zero row instead of reading outside the table */
    if (bad_ids) {
        ids[0] = -1;
        if (rows > 1) ids[rows - 1] = n_vocab;
    }
    float scale = ref_round_bf16(sqrtf((float)width)); /* HF's bf16(sqrt(d_model)) */
    k_embed_args ra = {.out = ref,
                       .table = table,
                       .ids = good,
                       .rows = rows,
                       .width = width,
                       .n_vocab = n_vocab,
                       .scale = scale};
    ref_embed(&ra, NULL);
    for (int r = 0; r < rows; r++)
        if (ids[r] < 0 || ids[r] >= n_vocab) memset(ref + (size_t)r * width, 0, (size_t)width * 2);
    int rc = 0;
    void *dt = dcopy(table, tn * 2, &rc), *di = dcopy(ids, (size_t)rows * 4, &rc);
    void *dout = dcopy(out, n * 2, &rc);
    k_embed_args a = ra;
    a.out = dout;
    a.table = dt;
    a.ids = di;
    rc |= k_embed(&a, NULL);
    rc |= k_sync();
    rc |= k_copy_to_host(out, dout, n * 2);
    cmp c = {0};
    cmp_exact(&c, out, ref, n);
    report(gate, rc, &c, "exact", "");
    k_device_free(dt);
    k_device_free(di);
    k_device_free(dout);
    free(table);
    free(out);
    free(ref);
    free(ids);
    free(good);
}

/* ---- rmsnorm ---- */

enum { ALIAS_NONE, ALIAS_IN, ALIAS_RES };

/* An rmsnorm case's gate name: family[rmsnorm w=.. rows=.. and its variant]. */
static void rmsnorm_gate(char *gate, size_t size, const char *family, int rows, int width,
                         int has_w, int has_res, int alias) {
    snprintf(gate, size, "%s[rmsnorm w=%d rows=%d%s%s%s]", family, width, rows,
             has_w ? "" : " unweighted", has_res ? " res" : "",
             alias == ALIAS_IN    ? " out=in"
             : alias == ALIAS_RES ? " out=res"
                                  : "");
}

static void run_rmsnorm(int rows, int width, int has_w, int has_res, int alias, uint64_t seed) {
    char gate[128];
    rmsnorm_gate(gate, sizeof gate, "op_vs_ref", rows, width, has_w, has_res, alias);
    rng_state = seed;
    size_t n = (size_t)rows * (size_t)width;
    bf16_t *x = hbuf(n), *w = hbuf((size_t)width), *res = hbuf(n), *out = poisoned(n);
    bf16_t *ref = hbuf(n), *y = hbuf(n);
    fill(x, n, 1.0f);
    fill(w, (size_t)width, 1.0f);
    fill(res, n, 4.0f); /* the residual stream runs larger than the normed branch */
    k_rmsnorm_args ra = {.out = ref,
                         .in = x,
                         .w = has_w ? w : NULL,
                         .residual = has_res ? res : NULL,
                         .rows = rows,
                         .width = width,
                         .eps = EPS};
    ref_rmsnorm(&ra, NULL);
    /* the normed branch before the residual add, for the element rule below */
    k_rmsnorm_args rb = ra;
    rb.out = y;
    rb.residual = NULL;
    ref_rmsnorm(&rb, NULL);

    int rc = 0;
    void *dx = dcopy(x, n * 2, &rc), *dw = dcopy(w, (size_t)width * 2, &rc);
    void *dres = dcopy(res, n * 2, &rc), *dout = dcopy(out, n * 2, &rc);
    k_rmsnorm_args a = ra;
    a.in = dx;
    a.w = has_w ? dw : NULL;
    a.residual = has_res ? dres : NULL;
    a.out = alias == ALIAS_IN ? dx : alias == ALIAS_RES ? dres : dout;
    rc |= k_rmsnorm(&a, NULL);
    rc |= k_sync();
    rc |= k_copy_to_host(out, a.out, n * 2);

    /* Element rule. The device sums the squares in a block tree, the twin left to right, and
     * device powf may differ from glibc's by a few fp32 ulps: inv differs by a relative
     * ~1e-6 (<< one bf16 ulp, 2^-8), which can move the one rounding of bf(x*inv*w) by at most
     * one ulp. With a residual, that one ulp of the branch y enters the sum, which rounds
     * again: |out - ref| <= ulp(y) + 2 ulp(ref) (cancellation can make ulp(y) many ulps of
     * the sum, hence the absolute form). */
    cmp c = {0};
    for (size_t i = 0; i < n; i++) {
        float e = ref_bf16_to_f32(ref[i]);
        float atol = has_res ? ulp_bf16(ref_bf16_to_f32(y[i])) + 2.0f * ulp_bf16(e) : 0.0f;
        cmp_elem(&c, i, out[i], ref[i], 1, atol);
    }

    /* batch invariance: row 0 alone gives the same bits as row 0 of the batch */
    const char *alone = "";
    if (rows > 1 && alias == ALIAS_NONE && rc == 0) {
        bf16_t *row = poisoned((size_t)width);
        rc |= k_copy_to_device(dout, row, (size_t)width * 2);
        a.rows = 1;
        rc |= k_rmsnorm(&a, NULL);
        rc |= k_sync();
        rc |= k_copy_to_host(row, dout, (size_t)width * 2);
        if (memcmp(row, out, (size_t)width * 2) != 0) {
            alone = ", row 0 alone DIFFERS";
            c.far++;
        } else {
            alone = ", row 0 alone identical";
        }
        free(row);
    }
    report(gate, rc, &c, has_res ? "1 ulp or ulp(y)+2ulp(ref)" : "1 ulp", alone);
    k_device_free(dx);
    k_device_free(dw);
    k_device_free(dres);
    k_device_free(dout);
    free(x);
    free(w);
    free(res);
    free(out);
    free(ref);
    free(y);
}

/* ---- gelu_mul ---- */

enum { GM_PLAIN, GM_PACKED, GM_NO_B };

static void run_gelu_mul(int rows, int width, int variant, uint64_t seed) {
    char gate[128];
    snprintf(gate, sizeof gate, "op_vs_ref[gelu_mul w=%d rows=%d %s]", width, rows,
             variant == GM_PACKED  ? "packed gate|up"
             : variant == GM_PLAIN ? "a*b"
                                   : "b=NULL");
    rng_state = seed;
    size_t n = (size_t)rows * (size_t)width, sn = 2 * n;
    bf16_t *src = hbuf(sn), *out = poisoned(n), *ref = hbuf(n);
    fill(src, sn, 2.0f); /* wide enough to reach gelu's flat negative side */
    /* PACKED: one [rows, 2*width] gate|up row as the fused projection writes it; PLAIN: two
     * dense [rows, width] operands; NO_B: gelu alone. */
    size_t b_off = variant == GM_PACKED ? (size_t)width : n;
    int ld = variant == GM_PACKED ? 2 * width : width;
    k_gelu_mul_args ra = {.out = ref,
                          .a = src,
                          .b = variant == GM_NO_B ? NULL : src + b_off,
                          .rows = rows,
                          .width = width,
                          .lda = ld,
                          .ldb = ld};
    ref_gelu_mul(&ra, NULL);
    int rc = 0;
    bf16_t *dsrc = dcopy(src, sn * 2, &rc), *dout = dcopy(out, n * 2, &rc);
    k_gelu_mul_args a = ra;
    a.out = dout;
    a.a = dsrc;
    a.b = variant == GM_NO_B ? NULL : dsrc + b_off;
    rc |= k_gelu_mul(&a, NULL);
    rc |= k_sync();
    rc |= k_copy_to_host(out, dout, n * 2);

    /* Element rule: 2 ulps, or an absolute 1e-6 (1 + |x|) max(1, |b|). tanhf on the device
     * and in glibc each err by <= 2 fp32 ulps, which can move bf(gelu) by one bf16 ulp; that
     * one relative ulp (<= 2^-7) times b moves the product by under 2 ulps before its own
     * rounding, so at most 2 ulps apart. Where gelu is nearly 0 (x < -3, 1 + tanh cancels)
     * the tanh error is relative to 1, not to gelu: |dgelu| <= 0.5 |x| 4 2^-24 ~ 1.2e-7 |x|,
     * times |b|; the absolute term covers it with room. */
    cmp c = {0};
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < width; j++) {
            size_t i = (size_t)r * width + j;
            float x = ref_bf16_to_f32(src[(size_t)r * ld + j]);
            float b = variant == GM_NO_B ? 1.0f : ref_bf16_to_f32(src[b_off + (size_t)r * ld + j]);
            float atol = 1e-6f * (1.0f + fabsf(x)) * fmaxf(1.0f, fabsf(b));
            cmp_elem(&c, i, out[i], ref[i], 2, atol);
        }

    /* The 16-byte form (prompt-sized launches, rows on 16 bytes, widths of whole 8s) against the
     * 2-byte one, byte for byte: an output one element off 16 bytes takes the 2-byte kernel,
     * which must give the same bits (each element's arithmetic is one function in both) */
    const char *paths = "";
    bf16_t *dshift = NULL;
    if (rows >= K_GELU_VEC_MIN_ROWS && width % 8 == 0 && rc == 0) {
        bf16_t *other = poisoned(n + 1);
        dshift = dcopy(other, (n + 1) * 2, &rc);
        a.out = dshift + 1;
        rc |= k_gelu_mul(&a, NULL);
        rc |= k_sync();
        rc |= k_copy_to_host(other, dshift + 1, n * 2);
        if (memcmp(other, out, n * 2) != 0) {
            paths = ", the 2-byte path DIFFERS";
            c.far++;
        } else {
            paths = ", the 2-byte path identical";
        }
        free(other);
    }
    report(gate, rc, &c, "2 ulp or 1e-6(1+|x|)max(1,|b|)", paths);
    k_device_free(dsrc);
    k_device_free(dout);
    k_device_free(dshift);
    free(src);
    free(out);
    free(ref);
}

/* ---- scale_add ---- */

static void run_scale_add(size_t n, int has_b, int alias, float scale, uint64_t seed) {
    char gate[128];
    snprintf(gate, sizeof gate, "op_vs_ref[scale_add n=%zu%s%s scale=%g]", n, has_b ? " a+b" : " a",
             alias ? " out=a" : "", (double)scale);
    rng_state = seed;
    bf16_t *a_h = hbuf(n), *b_h = hbuf(n), *out = poisoned(n), *ref = hbuf(n);
    fill(a_h, n, 4.0f);
    fill(b_h, n, 1.0f);
    k_scale_add_args ra = {.out = ref, .a = a_h, .b = has_b ? b_h : NULL, .n = n, .scale = scale};
    ref_scale_add(&ra, NULL);
    int rc = 0;
    void *da = dcopy(a_h, n * 2, &rc), *db = dcopy(b_h, n * 2, &rc), *dout = dcopy(out, n * 2, &rc);
    k_scale_add_args a = ra;
    a.a = da;
    a.b = has_b ? db : NULL;
    a.out = alias ? da : dout;
    rc |= k_scale_add(&a, NULL);
    rc |= k_sync();
    rc |= k_copy_to_host(out, a.out, n * 2);
    cmp c = {0};
    cmp_exact(&c, out, ref, n);
    report(gate, rc, &c, "exact", "");
    k_device_free(da);
    k_device_free(db);
    k_device_free(dout);
    free(a_h);
    free(b_h);
    free(out);
    free(ref);
}

/* ---- mul_vec_scale ---- */

static void run_mul_vec_scale(int rows, int width, uint64_t seed) {
    char gate[128];
    snprintf(gate, sizeof gate, "op_vs_ref[mul_vec_scale w=%d rows=%d]", width, rows);
    rng_state = seed;
    size_t n = (size_t)rows * (size_t)width;
    bf16_t *a_h = hbuf(n), *v = hbuf((size_t)width), *out = poisoned(n), *ref = hbuf(n);
    fill(a_h, n, 1.0f);
    fill(v, (size_t)width, 1.0f);
    /* the router's d_model^-0.5, a Python float applied in fp32 */
    float scale = 1.0f / sqrtf((float)width);
    k_mul_vec_scale_args ra = {
        .out = ref, .a = a_h, .v = v, .rows = rows, .width = width, .scale = scale};
    ref_mul_vec_scale(&ra, NULL);
    int rc = 0;
    void *da = dcopy(a_h, n * 2, &rc), *dv = dcopy(v, (size_t)width * 2, &rc);
    void *dout = dcopy(out, n * 2, &rc);
    k_mul_vec_scale_args a = ra;
    a.out = dout;
    a.a = da;
    a.v = dv;
    rc |= k_mul_vec_scale(&a, NULL);
    rc |= k_sync();
    rc |= k_copy_to_host(out, dout, n * 2);
    cmp c = {0};
    cmp_exact(&c, out, ref, n);
    report(gate, rc, &c, "exact", "");
    k_device_free(da);
    k_device_free(dv);
    k_device_free(dout);
    free(a_h);
    free(v);
    free(out);
    free(ref);
}

/* ---- gather_rows ---- */

static void run_gather_rows(int rows, int width, uint64_t seed) {
    char gate[128];
    snprintf(gate, sizeof gate, "op_vs_ref[gather_rows w=%d rows=%d]", width, rows);
    rng_state = seed;
    int n_in = rows + 7;
    size_t n = (size_t)rows * (size_t)width, in_n = (size_t)n_in * (size_t)width;
    bf16_t *in = hbuf(in_n), *out = poisoned(n), *ref = hbuf(n);
    int32_t *src = malloc((size_t)rows * sizeof *src);
    if (!src) exit(1);
    fill(in, in_n, 1.0f);
    for (int r = 0; r < rows; r++)
        src[r] = rnd_int(n_in);
    k_gather_rows_args ra = {.out = ref, .in = in, .src = src, .rows = rows, .width = width};
    ref_gather_rows(&ra, NULL);
    int rc = 0;
    void *din = dcopy(in, in_n * 2, &rc), *ds = dcopy(src, (size_t)rows * 4, &rc);
    void *dout = dcopy(out, n * 2, &rc);
    k_gather_rows_args a = ra;
    a.out = dout;
    a.in = din;
    a.src = ds;
    rc |= k_gather_rows(&a, NULL);
    rc |= k_sync();
    rc |= k_copy_to_host(out, dout, n * 2);
    cmp c = {0};
    cmp_exact(&c, out, ref, n); /* a copy */
    report(gate, rc, &c, "exact", "");
    k_device_free(din);
    k_device_free(ds);
    k_device_free(dout);
    free(in);
    free(out);
    free(ref);
    free(src);
}

/* ---- softcap ---- */

static void run_softcap(size_t n, float cap, uint64_t seed) {
    char gate[128];
    snprintf(gate, sizeof gate, "op_vs_ref[softcap n=%zu cap=%g]", n, (double)cap);
    rng_state = seed;
    bf16_t *x = hbuf(n), *out = hbuf(n), *ref = hbuf(n);
    fill(x, n, 20.0f); /* logits: many beyond the cap, where tanh saturates */
    memcpy(ref, x, n * 2);
    k_softcap_args ra = {.x = ref, .n = n, .cap = cap};
    ref_softcap(&ra, NULL);
    /* in place by contract, so no poison: the comparison itself shows what was written */
    int rc = 0;
    void *dx = dcopy(x, n * 2, &rc);
    k_softcap_args a = {.x = dx, .n = n, .cap = cap};
    rc |= k_softcap(&a, NULL);
    rc |= k_sync();
    rc |= k_copy_to_host(out, dx, n * 2);
    /* Element rule: 2 ulps. x / cap is one IEEE division on both sides; tanhf (<= 2 fp32 ulps
     * off on each side) can move bf(tanh) by one bf16 ulp, and that ulp times cap is under 2
     * ulps of the product (cap / 2^floor(log2 cap) < 2), so the rounded products are at most
     * 2 ulps apart. */
    cmp c = {0};
    for (size_t i = 0; i < n; i++)
        cmp_elem(&c, i, out[i], ref[i], 2, 0.0f);
    report(gate, rc, &c, "2 ulp", "");
    k_device_free(dx);
    free(x);
    free(out);
    free(ref);
}

/* ---- row_chain ---- */

/* The gate passes when nothing failed (rc), the chain took the path the case is for (chained:
 * what k_row_ops_chained said, want: what the launcher's preconditions call for; a gate that
 * compared the held kernels with themselves would pass whatever the chain does) and the two
 * runs' n elements are the same bytes. */
static void check_same_bytes(const char *gate, int rc, int chained, int want, const bf16_t *a,
                             const bf16_t *b, size_t n) {
    size_t differ = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        differ += a[i] != b[i];
    TEST_CHECK(gate, rc == 0 && chained == want && differ == 0,
               "rc %d, path %s (want %s), %zu of %zu elements differ", rc,
               chained ? "chain" : "held", want ? "chain" : "held", differ, n);
}

/* Whether the chain should take a group of n_ops ops over rows of width elements at mode. */
static int chain_wanted(int mode, int rows, int width, int n_ops) {
    return mode >= 1 &&
           (width <= 3072 || (mode >= 2 && width <= 6144 && n_ops <= 3 && rows <= 128));
}

/* Rule: k_rmsnorm alone in the chain kernel gives the held kernel's bytes (the same elements
 * per thread, sum order and rounding points), weighted or not, with or without the residual,
 * out on in or on the residual, at serve.row_chain = mode. Past the mode's widest row (3,072
 * elements at 1, 6,144 at 2) the chain falls back to the held kernel (both runs are then that
 * kernel: the fallback's gate), past 6,144 to its strided loop. */
static void run_rmsnorm_chain(int mode, int rows, int width, int has_w, int has_res, int alias,
                              uint64_t seed) {
    char gate[128], family[32];
    snprintf(family, sizeof family, "row_chain=%d", mode);
    rmsnorm_gate(gate, sizeof gate, family, rows, width, has_w, has_res, alias);
    rng_state = seed;
    size_t n = (size_t)rows * (size_t)width;
    bf16_t *x = hbuf(n), *w = hbuf((size_t)width), *res = hbuf(n), *out = poisoned(n);
    bf16_t *got[2] = {hbuf(n), hbuf(n)};
    fill(x, n, 1.0f);
    fill(w, (size_t)width, 1.0f);
    fill(res, n, 4.0f);
    int rc = 0, chained = 0;
    for (int chain = 0; chain < 2; chain++) { /* held, then the chain at mode */
        void *dx = dcopy(x, n * 2, &rc), *dw = dcopy(w, (size_t)width * 2, &rc);
        void *dres = dcopy(res, n * 2, &rc), *dout = dcopy(out, n * 2, &rc);
        k_rmsnorm_args a = {.out = alias == ALIAS_IN    ? dx
                                   : alias == ALIAS_RES ? dres
                                                        : dout,
                            .in = dx,
                            .w = has_w ? dw : NULL,
                            .residual = has_res ? dres : NULL,
                            .rows = rows,
                            .width = width,
                            .eps = EPS};
        k_set_row_chain(chain ? mode : 0);
        const k_row_ops_args one = {
            .rows = rows, .n_ops = 1, .op = {{.kind = K_ROW_RMSNORM, .u.rmsnorm = a}}};
        if (chain) chained = k_row_ops_chained(&one);
        if (rc == 0) rc |= k_rmsnorm(&a, NULL);
        k_set_row_chain(3); /* the default */
        rc |= k_sync();
        if (rc == 0) rc |= k_copy_to_host(got[chain], a.out, n * 2);
        k_device_free(dx);
        k_device_free(dw);
        k_device_free(dres);
        k_device_free(dout);
    }
    check_same_bytes(gate, rc, chained, chain_wanted(mode, rows, width, 1), got[0], got[1], n);
    free(x);
    free(w);
    free(res);
    free(out);
    free(got[0]);
    free(got[1]);
}

/* Rule: a group whose buffers overlap without coinciding (here the second norm's output starts
 * half a row into the residual it reads) is refused by the chain, whose threads would then
 * touch each other's elements, and runs on the held group kernel: the separate launches'
 * bytes. One row, so the held kernel's one block per row matches the launches' order. */
static void run_row_chain_overlap(int width, uint64_t seed) {
    char gate[96];
    snprintf(gate, sizeof gate, "row_chain[overlapping buffers fall back w=%d]", width);
    rng_state = seed;
    const size_t n = (size_t)width * 2; /* x and the shifted xn inside one buffer */
    bf16_t *xi = hbuf(n), *ti = hbuf((size_t)width), *w1 = hbuf((size_t)width);
    bf16_t *w2 = hbuf((size_t)width), *got[2] = {hbuf(n), hbuf(n)};
    fill(xi, n, 4.0f);
    fill(ti, (size_t)width, 1.0f);
    fill(w1, (size_t)width, 1.0f);
    fill(w2, (size_t)width, 1.0f);
    int rc = 0;
    void *dw1 = dcopy(w1, (size_t)width * 2, &rc), *dw2 = dcopy(w2, (size_t)width * 2, &rc);
    int chained = 1;
    for (int pass = 0; pass < 2; pass++) { /* 0: separate held launches, 1: the group, chain on */
        bf16_t *dx = dcopy(xi, n * 2, &rc), *dt = dcopy(ti, (size_t)width * 2, &rc);
        k_rmsnorm_args n0 = {
            .out = dx, .in = dt, .w = dw1, .residual = dx, .rows = 1, .width = width, .eps = EPS};
        k_rmsnorm_args n1 = {
            .out = dx + width / 2, .in = dx, .w = dw2, .rows = 1, .width = width, .eps = EPS};
        if (pass == 0) {
            k_set_row_chain(0);
            if (rc == 0) rc |= k_rmsnorm(&n0, NULL);
            if (rc == 0) rc |= k_rmsnorm(&n1, NULL);
            k_set_row_chain(3); /* the default */
        } else {
            k_row_ops_args g = {.rows = 1, .n_ops = 2};
            g.op[0] = (k_row_op){.kind = K_ROW_RMSNORM, .u.rmsnorm = n0};
            g.op[1] = (k_row_op){.kind = K_ROW_RMSNORM, .u.rmsnorm = n1};
            chained = k_row_ops_chained(&g);
            if (rc == 0) rc |= k_row_ops(&g, NULL);
        }
        rc |= k_sync();
        if (rc == 0) rc |= k_copy_to_host(got[pass], dx, n * 2);
        k_device_free(dx);
        k_device_free(dt);
    }
    check_same_bytes(gate, rc, chained, 0, got[0], got[1], n);
    k_device_free(dw1);
    k_device_free(dw2);
    free(xi);
    free(ti);
    free(w1);
    free(w2);
    free(got[0]);
    free(got[1]);
}

/* ---- preconditions ---- */

/* ---- row_ops ---- */

/* The groups a layer's schedule fuses (codegen/gen.c, row_group), on buffers named as in
 * g4_state: x the residual, t a branch output, xn the normed input, m1 the dense branch, xn2 the
 * experts' normed input. The MoE layers end in four ops, the dense and PLE layers in three (the
 * norm before the residual add, layer_scalar, the next layer's input norm). */
enum { RG_ATTN_RESIDUAL, RG_ROUTER, RG_LAYER_END, RG_DENSE_END, RG_KINDS };
enum { RG_BUFS = 5 };
static const char *const rg_names[RG_KINDS] = {
    "post_attn_norm+pre_ff_norm", "post_ff_norm_1+router_norm+router_scale+pre_ff_norm_2",
    "post_ff_norm_2+post_ff_norm+layer_scalar+next_input_norm",
    "post_ff_norm+layer_scalar+next_input_norm"};

static k_row_op rg_norm(bf16_t *out, const bf16_t *in, const bf16_t *w, const bf16_t *residual,
                        int rows, int width) {
    k_rmsnorm_args nm = {.out = out,
                         .in = in,
                         .w = w,
                         .residual = residual,
                         .rows = rows,
                         .width = width,
                         .eps = EPS};
    return (k_row_op){.kind = K_ROW_RMSNORM, .u.rmsnorm = nm};
}

static k_row_op rg_layer_scalar(bf16_t *x, int rows, int width) {
    k_scale_add_args sa = {
        .out = x, .a = x, .n = (size_t)rows * (size_t)width, .scale = ref_round_bf16(0.37f)};
    return (k_row_op){.kind = K_ROW_SCALE_ADD, .u.scale_add = sa};
}

static int rg_ops(int kind, bf16_t **b, const bf16_t *const *w, int rows, int width, k_row_op *op) {
    bf16_t *x = b[0], *t = b[1], *xn = b[2], *m1 = b[3], *xn2 = b[4];
    switch (kind) {
    case RG_ATTN_RESIDUAL:
        op[0] = rg_norm(x, t, w[0], x, rows, width);
        op[1] = rg_norm(xn, x, w[1], NULL, rows, width);
        return 2;
    case RG_ROUTER: {
        op[0] = rg_norm(m1, t, w[0], NULL, rows, width);
        op[1] = rg_norm(xn, x, NULL, NULL, rows, width);
        k_mul_vec_scale_args mv = {
            .out = xn, .a = xn, .v = w[1], .rows = rows, .width = width, .scale = 0.0188445f};
        op[2] = (k_row_op){.kind = K_ROW_MUL_VEC_SCALE, .u.mul_vec_scale = mv};
        op[3] = rg_norm(xn2, x, w[2], NULL, rows, width);
        return 4;
    }
    case RG_LAYER_END:
        op[0] = rg_norm(t, t, w[0], m1, rows, width);
        op[1] = rg_norm(x, t, w[1], x, rows, width);
        op[2] = rg_layer_scalar(x, rows, width);
        op[3] = rg_norm(xn, x, w[2], NULL, rows, width);
        return 4;
    default:
        op[0] = rg_norm(x, t, w[0], x, rows, width);
        op[1] = rg_layer_scalar(x, rows, width);
        op[2] = rg_norm(xn, x, w[1], NULL, rows, width);
        return 3;
    }
}

/* Rule: bit-identical to the same ops launched one by one (k_rmsnorm, k_mul_vec_scale,
 * k_scale_add) on the held kernels (serve.row_chain off), every buffer the group touches, since
 * each op runs the separate kernel's arithmetic element for element, in the held group kernel
 * (chain 0) and in the chain kernel (chain 1 and 2, where the group fits it; past 6,144 it
 * falls back); and row 0 alone gives row 0's bits (batch invariance). The separate launches are
 * themselves gated against the twins above. */
static void run_row_ops(int kind, int rows, int width, int chain, uint64_t seed) {
    char gate[160];
    snprintf(gate, sizeof gate, "op_vs_ops[row_ops %s w=%d rows=%d%s]", rg_names[kind], width, rows,
             chain == 1   ? " row_chain"
             : chain == 2 ? " row_chain=2"
             : chain == 3 ? " row_chain=3"
                          : "");
    rng_state = seed;
    size_t n = (size_t)rows * (size_t)width;
    bf16_t *init[RG_BUFS], *got[RG_BUFS], *want[RG_BUFS], *w[3];
    for (int b = 0; b < RG_BUFS; b++) {
        init[b] = hbuf(n), got[b] = hbuf(n), want[b] = hbuf(n);
        fill(init[b], n, b == 0 ? 4.0f : 1.0f);
    }
    int rc = 0;
    const bf16_t *dw[3];
    for (int i = 0; i < 3; i++) {
        w[i] = hbuf((size_t)width);
        fill(w[i], (size_t)width, 1.0f);
        dw[i] = dcopy(w[i], (size_t)width * 2, &rc);
    }
    bf16_t *fused[RG_BUFS], *sep[RG_BUFS];
    for (int b = 0; b < RG_BUFS; b++) {
        fused[b] = dcopy(init[b], n * 2, &rc);
        sep[b] = dcopy(init[b], n * 2, &rc);
    }
    k_row_ops_args fa = {.rows = rows}, sa = {.rows = rows};
    fa.n_ops = rg_ops(kind, fused, dw, rows, width, fa.op);
    sa.n_ops = rg_ops(kind, sep, dw, rows, width, sa.op);
    k_set_row_chain(chain);
    const int chained = k_row_ops_chained(&fa), path = chain_wanted(chain, rows, width, fa.n_ops);
    if (rc == 0) rc |= k_row_ops(&fa, NULL);
    k_set_row_chain(0);
    for (int i = 0; rc == 0 && i < sa.n_ops; i++) {
        const k_row_op *op = &sa.op[i];
        rc |= op->kind == K_ROW_RMSNORM         ? k_rmsnorm(&op->u.rmsnorm, NULL)
              : op->kind == K_ROW_MUL_VEC_SCALE ? k_mul_vec_scale(&op->u.mul_vec_scale, NULL)
                                                : k_scale_add(&op->u.scale_add, NULL);
    }
    k_set_row_chain(3); /* the default */
    rc |= k_sync();
    size_t differ = 0;
    for (int b = 0; b < RG_BUFS && rc == 0; b++) {
        rc |= k_copy_to_host(got[b], fused[b], n * 2);
        rc |= k_copy_to_host(want[b], sep[b], n * 2);
        for (size_t i = 0; i < n; i++)
            differ += got[b][i] != want[b][i];
    }
    /* row 0 alone, from the initial row 0 */
    size_t alone_differ = 0;
    if (rows > 1 && rc == 0) {
        for (int b = 0; b < RG_BUFS; b++)
            rc |= k_copy_to_device(fused[b], init[b], (size_t)width * 2);
        k_row_ops_args one = {.rows = 1};
        one.n_ops = rg_ops(kind, fused, dw, 1, width, one.op);
        k_set_row_chain(chain);
        rc |= k_row_ops(&one, NULL);
        k_set_row_chain(3); /* the default */
        rc |= k_sync();
        bf16_t *row = hbuf((size_t)width);
        for (int b = 0; b < RG_BUFS && rc == 0; b++) {
            rc |= k_copy_to_host(row, fused[b], (size_t)width * 2);
            for (int j = 0; j < width; j++)
                alone_differ += row[j] != want[b][j];
        }
        free(row);
    }
    TEST_CHECK(gate, rc == 0 && chained == path && differ == 0 && alone_differ == 0,
               "rc %d, path %s (want %s), %zu of %zu elements differ from the separate launches, "
               "row 0 alone: %zu differ",
               rc, chained ? "chain" : "held", path ? "chain" : "held", differ, (size_t)RG_BUFS * n,
               alone_differ);
    for (int b = 0; b < RG_BUFS; b++) {
        k_device_free(fused[b]);
        k_device_free(sep[b]);
        free(init[b]);
        free(got[b]);
        free(want[b]);
    }
    for (int i = 0; i < 3; i++) {
        k_device_free((void *)dw[i]);
        free(w[i]);
    }
}

static void run_preconditions(void) {
    bf16_t dummy = 0;
    int32_t id = 0;
    int bad = 0;
    k_rmsnorm_args rn = {.out = &dummy, .in = &dummy, .rows = 1, .width = 0, .eps = EPS};
    bad += k_rmsnorm(&rn, NULL) != K_ERR_SHAPE; /* width 0 */
    rn.width = 4;
    rn.rows = -1;
    bad += k_rmsnorm(&rn, NULL) != K_ERR_SHAPE; /* negative rows */
    k_rmsnorm_args rz = {.rows = 0, .width = 16, .eps = EPS};
    bad += k_rmsnorm(&rz, NULL) != K_OK; /* nothing to do: no launch, NULLs fine */
    rz.rows = 1;
    bad += k_rmsnorm(&rz, NULL) != K_ERR_SHAPE; /* NULL in/out with work to do */
    k_gelu_mul_args gm = {
        .out = &dummy, .a = &dummy, .b = &dummy, .rows = 1, .width = 8, .lda = 4, .ldb = 8};
    bad += k_gelu_mul(&gm, NULL) != K_ERR_SHAPE; /* lda < width */
    gm.lda = 8;
    gm.ldb = 0;
    bad += k_gelu_mul(&gm, NULL) != K_ERR_SHAPE; /* ldb < width with b */
    k_scale_add_args sa = {.n = 0, .scale = 1.0f};
    bad += k_scale_add(&sa, NULL) != K_OK;
    sa.n = 4;
    bad += k_scale_add(&sa, NULL) != K_ERR_SHAPE;
    k_softcap_args sc = {.x = NULL, .n = 0, .cap = 30.0f};
    bad += k_softcap(&sc, NULL) != K_OK;
    sc.n = 4;
    bad += k_softcap(&sc, NULL) != K_ERR_SHAPE;
    k_embed_args em = {.out = &dummy,
                       .table = &dummy,
                       .ids = &id,
                       .rows = 1,
                       .width = 4,
                       .n_vocab = 0,
                       .scale = 1.0f};
    bad += k_embed(&em, NULL) != K_ERR_SHAPE; /* empty vocabulary */
    k_mul_vec_scale_args mv = {.out = &dummy, .a = &dummy, .v = NULL, .rows = 1, .width = 4};
    bad += k_mul_vec_scale(&mv, NULL) != K_ERR_SHAPE; /* NULL v */
    k_gather_rows_args gr = {.out = &dummy, .in = &dummy, .src = &id, .rows = -2, .width = 4};
    bad += k_gather_rows(&gr, NULL) != K_ERR_SHAPE;
    k_row_ops_args ro = {.rows = 2, .n_ops = 0};
    bad += k_row_ops(&ro, NULL) != K_ERR_SHAPE; /* no ops */
    ro.n_ops = 1;
    ro.op[0] = (k_row_op){.kind = K_ROW_RMSNORM,
                          .u.rmsnorm = {.out = &dummy, .in = &dummy, .rows = 1, .width = 4}};
    bad += k_row_ops(&ro, NULL) != K_ERR_SHAPE; /* an op's rows differ from the group's */
    ro.op[0] =
        (k_row_op){.kind = K_ROW_SCALE_ADD, .u.scale_add = {.out = &dummy, .a = &dummy, .n = 5}};
    bad += k_row_ops(&ro, NULL) != K_ERR_SHAPE; /* n not a whole number of rows */
    ro.op[0].kind = 0;
    bad += k_row_ops(&ro, NULL) != K_ERR_SHAPE;   /* no such kind */
    bad += ref_row_ops(&ro, NULL) != K_ERR_SHAPE; /* the twin answers the same */
    TEST_CHECK("op_preconditions", bad == 0, "%d of 18 precondition answers wrong", bad);
}

int main(void) {
    char desc[256];
    if (k_device_init(desc, sizeof desc) != 0) {
        test_skip("op_vs_ref", "no GPU (%s)", desc);
        return 0;
    }
    printf("# device: %s\n", desc);
    run_preconditions();

    /* 6144 is the widest row rmsnorm holds in registers, 6145 and 8192 take its strided loop;
     * 1024, 2048 and 3072 are the chain's held sizes 4, 8 and 12 (its widest at row_chain 1) */
    static const int widths[] = {16,   33,   64,   256,  512,  1024, 2048,
                                 2816, 3072, 5376, 6144, 6145, 8192};
    static const int row_counts[] = {1, 3, 17};
    const size_t nw = sizeof widths / sizeof widths[0], nr = sizeof row_counts / sizeof *row_counts;
    uint64_t seed = 1000;

    /* rmsnorm: the fused residual form at every width and row count, then the variants */
    for (size_t i = 0; i < nw; i++)
        for (size_t k = 0; k < nr; k++)
            run_rmsnorm(row_counts[k], widths[i], 1, 1, ALIAS_NONE, seed++);
    for (size_t i = 0; i < nw; i++) {
        run_rmsnorm(3, widths[i], 1, 0, ALIAS_NONE, seed++);
        run_rmsnorm(17, widths[i], 0, 0, ALIAS_NONE, seed++);
        run_rmsnorm(17, widths[i], 1, 0, ALIAS_IN, seed++);
        run_rmsnorm(17, widths[i], 1, 1, ALIAS_IN, seed++);
        run_rmsnorm(3, widths[i], 1, 1, ALIAS_RES, seed++);
    }

    /* the elementwise and row ops: the model's widths plus an odd ragged one */
    static const int shapes[][2] = {{1, 16}, {3, 64},    {17, 256}, {3, 512},
                                    {5, 33}, {17, 2816}, {1, 5376}, {17, 5376}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int rows = shapes[i][0], width = shapes[i][1];
        size_t n = (size_t)rows * (size_t)width;
        run_embed(rows, width, 0, seed++);
        run_gelu_mul(rows, width, GM_PACKED, seed++);
        run_gelu_mul(rows, width, GM_PLAIN, seed++);
        run_gelu_mul(rows, width, GM_NO_B, seed++);
        run_scale_add(n, 1, 0, 0.70710678f, seed++);
        run_scale_add(n, 0, 0, ref_round_bf16(0.37f), seed++); /* a bf16 layer_scalar */
        run_scale_add(n, 1, 1, 0.70710678f, seed++);
        run_mul_vec_scale(rows, width, seed++);
        run_gather_rows(rows, width, seed++);
        run_softcap(n, 30.0f, seed++);
    }
    run_embed(17, 256, 1, seed++);
    run_embed(1, 64, 1, seed++);
    /* one large elementwise n, past EW_THREADS * EW_MAX_BLOCKS: the grid-stride loop wraps */
    run_scale_add((size_t)262144 * 5 + 3, 1, 0, 0.70710678f, seed++);
    run_softcap((size_t)262144 * 5 + 3, 30.0f, seed++);
    run_gelu_mul(257, 5376, GM_PACKED, seed++);
    /* prompt-sized launches (the 16-byte form): the 26B-A4B's dense MLP at a 1,024-token chunk,
     * the threshold's edge, and a width of 8s that no model has */
    run_gelu_mul(1024, 2112, GM_PACKED, seed++);
    run_gelu_mul(K_GELU_VEC_MIN_ROWS, 5376, GM_PLAIN, seed++);
    run_gelu_mul(K_GELU_VEC_MIN_ROWS, 264, GM_NO_B, seed++);
    run_gelu_mul(K_GELU_VEC_MIN_ROWS - 1, 2112, GM_PACKED, seed++);

    /* row_ops: each group a layer fuses, at the hidden sizes (the chain's held sizes: 1536 6,
     * 2560 10, 2816 11, 3840 16, 5376 21; at serve.row_chain = 1 the last two fall back to the
     * held kernels, at 2 the groups of four ops do), the widest of mode 1 (3072), ragged, and
     * the widest the chain holds and past it (6144, 8192); held and both chain modes */
    static const int rg_widths[] = {2816, 5376, 1536, 2560, 3840, 3072, 6144, 33, 8192};
    static const int rg_rows[] = {1, 3, 17};
    for (int chain = 0; chain < 4; chain++)
        for (int kind = 0; kind < RG_KINDS; kind++)
            for (size_t i = 0; i < sizeof rg_widths / sizeof *rg_widths; i++)
                for (size_t k = 0; k < sizeof rg_rows / sizeof *rg_rows; k++)
                    run_row_ops(kind, rg_rows[k], rg_widths[i], chain, seed++);

    /* the chain alone against the held norm, and a group it must refuse */
    for (int mode = 1; mode <= 3; mode++)
        for (size_t i = 0; i < nw; i++) {
            run_rmsnorm_chain(mode, 17, widths[i], 1, 1, ALIAS_NONE, seed++);
            run_rmsnorm_chain(mode, 3, widths[i], 0, 0, ALIAS_NONE, seed++);
            run_rmsnorm_chain(mode, 17, widths[i], 1, 0, ALIAS_IN, seed++);
            run_rmsnorm_chain(mode, 3, widths[i], 1, 1, ALIAS_RES, seed++);
            run_rmsnorm_chain(mode, 1, widths[i], 1, 1, ALIAS_IN, seed++);
        }
    /* the wide sizes' row limit (128): at it the chain, one past it the held kernels */
    run_rmsnorm_chain(2, 128, 5376, 1, 1, ALIAS_NONE, seed++);
    run_rmsnorm_chain(2, 129, 5376, 1, 1, ALIAS_NONE, seed++);
    run_row_ops(RG_DENSE_END, 128, 5376, 2, seed++);
    run_row_ops(RG_DENSE_END, 129, 5376, 2, seed++);
    /* serve.row_chain = 3's limit (64 rows): at it the operands loaded at once, one past it as
     * at 2 */
    for (int kind = 0; kind < RG_KINDS; kind++) {
        run_row_ops(kind, 64, 2816, 3, seed++);
        run_row_ops(kind, 65, 2816, 3, seed++);
    }
    run_row_chain_overlap(2816, seed++);
    run_row_chain_overlap(64, seed++);
    return harness_exit();
}
