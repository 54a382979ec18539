/* tests/gpu/test_moe.c - GPU gates: the MoE routing and routed experts (kernels/moe.cu) against
 * their CPU twins ref_moe_route and ref_moe_experts on fresh seeded random inputs, outputs
 * poisoned first, at the 26B-A4B's shape (128 experts, top 8, d_model 2816, d_expert 704), the
 * tiny fixture's (16, 4, 64, 32), a geometry check (128, 8, 2816, 64) and d_experts off the
 * tensor-core path's multiple of 32 (16, 4, 64, 40 and 128, 8, 2816, 712), with 1, 5 and 64
 * rows, and more (160, 200) where a bucket must span several 16-item tiles.
 *
 * Pass rules (docs/gates.md, op vs reference):
 * - route: the chosen ids equal the reference's exactly, ties included (some rows carry exact
 *   ties in the logits, at the top and across the top-k cut, to test the lower-id rule; the
 *   tied logits give bit-identical p on both sides, so the rule alone decides). The weights
 *   within 1e-6 relative: both sides do the same fp32 operations in the same order, and only
 *   the exponential may differ: the kernel rounds a double exp once (the correctly rounded
 *   value), the host's expf is within 0.502 ulp and so equals it except in rare near-halfway
 *   cases, where one ulp (1.2e-7 relative at most) separates them; through the division by the
 *   sum and by the chosen sum a few such ulps stay well under 1e-6.
 * - experts: ||out - ref|| / ||ref|| <= 1e-2 (bf16 outputs). Given the same ids and weights
 *   the two sides differ only by the summation of the dot products (its order; on the tensor-
 *   core path also the mma's fp32 accumulation, which aligns and truncates rather than rounding
 *   each add) and tanhf's last bits, so an intermediate bf16 rounding (gu, h, y) may land one ulp
 * (2^-8 relative) apart now and then; the norm ratio stays a few 1e-3 at most. No NaN from the
 * poison may be left. Batch invariance: row 0 computed alone equals row 0 of the batch bit for bit.
 * - moe_bucket_in_up: the up kernel's own bucketing against the bucket kernel's, byte for byte
 *   (check_switch says why that is the rule and how a missing bucket would show).
 * - wide_loads: the decode kernels' wider load groups against the narrow ones, byte for byte
 *   (the same mma operands in the same order; check_switch).
 * - expert_stream: the decode down projection with its weights streamed through bulk copies and
 *   its buckets its own (kernels/moe_stream.cu) against the register kernel, byte for byte, at
 *   one row (beside either bucketing of the up kernel, every item on one expert) and at 5 and 16
 *   rows (buckets past 8 and 16 items: the hi rows and a bucket's several tiles through one
 *   ring).
 * - moe_prefill_tiles: the prefill kernels of 4 item tiles a warp against the per-16-item
 *   kernels, byte for byte (every output the same mma sequence), bad ids included; and
 *   moe_prefill_staged, the kernels that stage items and weights in shared memory, likewise,
 *   and moe_prefill_ring, those kernels in their three-stage ring with idle warps skipping;
 *   moe_ring_zfill, the ring's copies a fixed count a thread with padding zero-filled by the
 *   copy, against its looped form, with the router's ids and with every item on one expert
 *   (several tiles through the ring).
 * - moe_half_tiles: the zero-fill down kernel whose blocks of at most 64 items take two blocks'
 *   outputs (and at 2 the up kernel whose such blocks take 96 outputs on 6 warps), against the
 *   zero-fill ring, byte for byte: with the router's ids, every item on one expert (the
 *   whole-tile path), and buckets on both sides of 64 items in one call (the 26B-A4B at 1,024
 *   rows; a d_model of 160, whose last down block has no pair). The d_experts of 32, 64, 96,
 *   160, 192 and 224 end the up kernel's 96-output blocks short, exactly and past the end.
 * - moe_weights_a: the zero-fill down kernel (1), and at 2 the up kernel too (whole tiles, 8
 *   outputs a warp over 128 items), with their weight rows on the mma's A operand and the items
 *   on B, against the zero-fill ring, byte for byte, at half tiles 2 and 0 (1): the router's
 *   ids, every item on one expert (several item tiles, padding items), mixed buckets (half and
 *   whole tiles in one call), bad ids; d_experts of 96 and 160 (odd 32-k block counts) leave a
 *   chunk's second block zero-filled, and a d_model of 160 ends the last block's outputs past
 *   the end.
 * - moe_route_lanes: the router's lanes form against moe_route_kernel, ids and weights byte
 *   for byte (the same operations in the same order), on the gate's logits and on a copy with
 *   NaN and infinite logits in some rows.
 */
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "tests/gpu/gpu_rand.h"
#include "tests/gpu/row_slices.h"
#include "tests/harness.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    int n_expert, top_k, d_model, d_expert;
    int many_rows; /* also a step of this many rows (0: none) */
} shape;

/* Router logits with ties: row r % 3 == 1 gets top_k + 2 experts at one equal top value (the
 * cut falls inside the tie), row r % 3 == 2 is quantised to quarters in [-2, 2] (ties
 * everywhere, as the torch.topk check in box_run.sh draws them). */
static void make_logits(bf16_t *lg, int rows, int n) {
    for (int r = 0; r < rows; r++) {
        bf16_t *row = lg + (size_t)r * (size_t)n;
        fill_uniform(row, (size_t)n, 2.0f, 0.0f);
        if (r % 3 == 1) {
            int k_tie = n / 4 + 2 < n ? n / 4 + 2 : n;
            for (int j = 0; j < k_tie; j++)
                row[(r * 7 + j * 3) % n] = ref_f32_to_bf16(3.0f);
        } else if (r % 3 == 2) {
            for (int e = 0; e < n; e++)
                row[e] = ref_f32_to_bf16(roundf(rnd() * 8.0f) / 4.0f);
        }
    }
}

/* One k_moe_route call over host logits lg with serve.moe_route_lanes = lanes (left at 1, its
 * default, after), its outputs poisoned first (ids -1, weights NaN); the ids and the weights'
 * bytes into idx, w. */
static int route_once(const shape *s, int rows, const bf16_t *lg, void *d_scale, int lanes,
                      int32_t *idx, float *w) {
    size_t nl = (size_t)rows * (size_t)s->n_expert, nk = (size_t)rows * (size_t)s->top_k;
    void *d_lg = k_device_alloc(nl * 2), *d_idx = k_device_alloc(nk * 4),
         *d_w = k_device_alloc(nk * 4);
    int rc = (!d_lg || !d_idx || !d_w) ? K_ERR_NO_MEMORY : 0;
    for (size_t i = 0; i < nk; i++) {
        idx[i] = -1;
        w[i] = NAN;
    }
    if (rc == 0)
        rc |= k_copy_to_device(d_lg, lg, nl * 2) | k_copy_to_device(d_idx, idx, nk * 4) |
              k_copy_to_device(d_w, w, nk * 4);
    k_moe_route_args a = {.idx = d_idx,
                          .weight = d_w,
                          .logits = d_lg,
                          .per_expert_scale = d_scale,
                          .rows = rows,
                          .n_expert = s->n_expert,
                          .top_k = s->top_k};
    k_set_moe_route_lanes(lanes);
    if (rc == 0)
        rc |= k_moe_route(&a, NULL) | k_sync() | k_copy_to_host(idx, d_idx, nk * 4) |
              k_copy_to_host(w, d_w, nk * 4);
    k_set_moe_route_lanes(1);
    k_device_free(d_lg);
    k_device_free(d_idx);
    k_device_free(d_w);
    return rc;
}

/* k_moe_route vs ref_moe_route; leaves the reference's ids and weights in idx, w. */
static void check_route(const shape *s, int rows, const bf16_t *scale_h, void *d_scale,
                        int32_t *idx, float *w) {
    char gate[96];
    snprintf(gate, sizeof gate, "op_vs_ref[moe_route e%d k%d rows%d]", s->n_expert, s->top_k, rows);
    size_t nl = (size_t)rows * (size_t)s->n_expert, nk = (size_t)rows * (size_t)s->top_k;
    bf16_t *lg = malloc(nl * 2);
    int32_t *gidx = malloc(nk * 4);
    float *gw = malloc(nk * 4);
    make_logits(lg, rows, s->n_expert);
    int rc = route_once(s, rows, lg, d_scale, 1, gidx, gw);
    k_moe_route_args ra = {.idx = idx,
                           .weight = w,
                           .logits = lg,
                           .per_expert_scale = scale_h,
                           .rows = rows,
                           .n_expert = s->n_expert,
                           .top_k = s->top_k};
    int rrc = ref_moe_route(&ra, NULL);
    int idx_diff = 0, first = -1, nan = 0;
    double worst = 0;
    for (size_t i = 0; i < nk; i++) {
        if (gidx[i] != idx[i]) {
            if (first < 0) first = (int)i;
            idx_diff++;
        }
        if (isnan(gw[i])) nan++;
        double d = fabs((double)gw[i] - (double)w[i]);
        double rel = w[i] != 0.0f ? d / fabs((double)w[i]) : d;
        if (!(rel <= worst)) worst = rel; /* NaN counts as worst */
    }
    if (first >= 0)
        printf("# %s: first id mismatch at row %d rank %d: gpu %d ref %d\n", gate, first / s->top_k,
               first % s->top_k, gidx[first], idx[first]);
    TEST_CHECK(gate, rc == 0 && rrc == 0 && idx_diff == 0 && nan == 0 && worst <= 1e-6,
               "ids differing %d, weights max rel err %.2e (limit 1e-6), NaN %d, rc %d/%d",
               idx_diff, worst, nan, rc, rrc);
    free(lg);
    free(gidx);
    free(gw);
}

/* moe_route_lanes (see the rules above): both forms on fresh logits (with the gate's ties), then
 * on a copy with a NaN logit in every third row and +inf in the next, then with every third row
 * all -inf and -inf in one logit of the next. The case's own seed, so the draws of the gates
 * after it do not depend on it. */
static void check_route_lanes(const shape *s, int rows, void *d_scale) {
    const uint64_t saved = rng_state;
    rng_state = 0x726f757465ull + (uint64_t)rows * 131u + (uint64_t)s->n_expert;
    const size_t n = (size_t)s->n_expert;
    size_t nl = (size_t)rows * n, nk = (size_t)rows * (size_t)s->top_k;
    bf16_t *lg = malloc(nl * 2);
    int32_t *idx[2] = {calloc(nk, 4), calloc(nk, 4)};
    float *w[2] = {calloc(nk, 4), calloc(nk, 4)};
    make_logits(lg, rows, s->n_expert);
    static const char *const pass_name[] = {"", " nan/inf", " -inf"};
    for (int pass = 0; pass < 3; pass++) {
        char gate[112];
        snprintf(gate, sizeof gate, "moe_route_lanes[e%d k%d rows%d%s]", s->n_expert, s->top_k,
                 rows, pass_name[pass]);
        for (int r = 0; pass && r < rows; r += 3) {
            bf16_t *row = lg + (size_t)r * n, *next = r + 1 < rows ? row + n : NULL;
            if (pass == 1) {
                row[(size_t)r % n] = 0x7fc1; /* a quiet NaN with a payload */
                if (next) next[(size_t)r % n] = 0x7f80;
            } else {
                for (size_t e = 0; e < n; e++)
                    row[e] = 0xff80;
                if (next) next[(size_t)r % n] = 0xff80;
            }
        }
        int rc = route_once(s, rows, lg, d_scale, 0, idx[0], w[0]) |
                 route_once(s, rows, lg, d_scale, 1, idx[1], w[1]);
        const int ids_same = memcmp(idx[0], idx[1], nk * 4) == 0;
        const int w_same = memcmp(w[0], w[1], nk * 4) == 0;
        TEST_CHECK(gate, rc == 0 && ids_same && w_same, "rc %d, ids %s, weights %s", rc,
                   ids_same ? "equal" : "differ", w_same ? "equal" : "differ");
    }
    free(lg);
    free(idx[0]);
    free(idx[1]);
    free(w[0]);
    free(w[1]);
    rng_state = saved;
}

/* The experts call of a shape at rows rows over the given buffers. */
static k_moe_experts_args experts_args(const shape *s, int rows, void *out, const void *x,
                                       const void *gu, const void *dn, const void *idx,
                                       const void *w) {
    return (k_moe_experts_args){.out = out,
                                .x = x,
                                .gate_up = gu,
                                .down = dn,
                                .idx = idx,
                                .weight = w,
                                .rows = rows,
                                .d_model = s->d_model,
                                .d_expert = s->d_expert,
                                .n_expert = s->n_expert,
                                .top_k = s->top_k};
}

/* The CPU twin of call a on host copies of its operands (ref: its output, nx elements), against
 * the device's output out: the relative error, the elements left NaN (the poison, or a bad row),
 * and those more than one ulp apart (both zero aside). */
typedef struct twin_result {
    int rc;
    double rel, den;
    double worst_row; /* the largest relative error of one row */
    int unwritten, far;
} twin_result;

/* ref_moe_experts over rows [r0, r1) of the call ctx describes (run_row_slices: at the
 * 26B-A4B's shape a row takes the twin ~0.17 s on one core) */
static int twin_rows(const void *ctx, int r0, int r1) {
    const k_moe_experts_args *a = ctx;
    const size_t dm = (size_t)a->d_model, k = (size_t)a->top_k;
    k_moe_experts_args s = *a;
    s.rows = r1 - r0;
    s.out = a->out + (size_t)r0 * dm;
    s.x = a->x + (size_t)r0 * dm;
    s.idx = a->idx + (size_t)r0 * k;
    s.weight = a->weight + (size_t)r0 * k;
    return ref_moe_experts(&s, NULL);
}

static int twin_experts(const k_moe_experts_args *a) {
    return run_row_slices(a->rows, twin_rows, a);
}

static twin_result against_twin(const k_moe_experts_args *a, bf16_t *ref, const bf16_t *x,
                                const bf16_t *gu_h, const bf16_t *dn_h, const int32_t *idx,
                                const float *w, const bf16_t *out, size_t nx) {
    k_moe_experts_args ra = *a;
    ra.out = ref;
    ra.x = x;
    ra.gate_up = gu_h;
    ra.down = dn_h;
    ra.idx = idx;
    ra.weight = w;
    twin_result t = {.rc = twin_experts(&ra)};
    double num = 0;
    for (size_t i = 0; i < nx; i++) {
        float o = ref_bf16_to_f32(out[i]), e = ref_bf16_to_f32(ref[i]);
        t.unwritten += isnan(o) != 0;
        num += isnan(o) ? 0 : (double)(o - e) * (o - e);
        t.den += (double)e * e;
        int d = (int)out[i] - (int)ref[i];
        if (d > 1 || d < -1) t.far += !(o == 0 && e == 0);
    }
    t.rel = sqrt(num / (t.den > 0 ? t.den : 1));
    const size_t dm = (size_t)a->d_model;
    for (size_t r = 0; !t.rc && r < nx / dm; r++) { /* a row's own error: an item lost shows */
        double rn = 0, rd = 0;
        for (size_t c = r * dm; c < (r + 1) * dm; c++) {
            const float o = ref_bf16_to_f32(out[c]), e = ref_bf16_to_f32(ref[c]);
            rn += isnan(o) ? 0 : (double)(o - e) * (o - e);
            rd += (double)e * e;
        }
        const double rr = sqrt(rn / (rd > 0 ? rd : 1));
        if (rr > t.worst_row) t.worst_row = rr;
    }
    return t;
}

/* k_moe_experts vs ref_moe_experts on the same ids and weights. */
static void check_experts(const shape *s, int rows, const bf16_t *gu_h, const bf16_t *dn_h,
                          void *d_gu, void *d_dn, const int32_t *idx, const float *w) {
    char gate[128];
    snprintf(gate, sizeof gate, "op_vs_ref[moe_experts e%d k%d dm%d de%d rows%d]", s->n_expert,
             s->top_k, s->d_model, s->d_expert, rows);
    size_t nx = (size_t)rows * (size_t)s->d_model, nk = (size_t)rows * (size_t)s->top_k;
    bf16_t *x = malloc(nx * 2), *out = malloc(nx * 2), *ref = malloc(nx * 2);
    fill_uniform(x, nx, 1.0f, 0.0f);
    void *d_x = k_device_alloc(nx * 2), *d_out = k_device_alloc(nx * 2),
         *d_idx = k_device_alloc(nk * 4), *d_w = k_device_alloc(nk * 4);
    int rc = (!d_x || !d_out || !d_idx || !d_w) ? K_ERR_NO_MEMORY : 0;
    for (size_t i = 0; i < nx; i++)
        out[i] = 0x7fc0; /* NaN poison */
    if (rc == 0)
        rc |= k_copy_to_device(d_x, x, nx * 2) | k_copy_to_device(d_out, out, nx * 2) |
              k_copy_to_device(d_idx, idx, nk * 4) | k_copy_to_device(d_w, w, nk * 4);
    k_moe_experts_args a = experts_args(s, rows, d_out, d_x, d_gu, d_dn, d_idx, d_w);
    if (rc == 0) rc |= k_moe_experts(&a, NULL) | k_sync() | k_copy_to_host(out, d_out, nx * 2);
    const twin_result t = against_twin(&a, ref, x, gu_h, dn_h, idx, w, out, nx);
    /* batch invariance: row 0 alone equals row 0 of the batch, bit for bit */
    int variant = 0;
    if (rows > 1 && rc == 0) {
        bf16_t *row = malloc((size_t)s->d_model * 2);
        k_moe_experts_args one = a;
        one.rows = 1;
        rc |= k_moe_experts(&one, NULL) | k_sync() |
              k_copy_to_host(row, d_out, (size_t)s->d_model * 2);
        variant = memcmp(row, out, (size_t)s->d_model * 2) != 0;
        free(row);
    }
    TEST_CHECK(gate,
               rc == 0 && t.rc == 0 && t.unwritten == 0 && t.rel <= 1e-2 && !variant && t.den > 0,
               "rel err %.2e (limit 1e-2), unwritten %d, elements over 1 ulp %d, row 0 alone %s, "
               "rc %d/%d",
               t.rel, t.unwritten, t.far, variant ? "DIFFERS" : "identical", rc, t.rc);
    k_device_free(d_x);
    k_device_free(d_out);
    k_device_free(d_idx);
    k_device_free(d_w);
    free(x);
    free(out);
    free(ref);
}

/* The speed-only switches of k_moe_experts a call runs with. */
typedef struct switches {
    int in_up, tiles, wide, stream; /* stream: serve.expert_stream's item count (0 off) */
    int zfill;                      /* serve.moe_ring_zfill */
    int half;                       /* serve.moe_half_tiles (0..2) */
    int wa;                         /* serve.moe_weights_a (0..2) */
} switches;

/* One k_moe_experts call into out (poisoned first) with the up kernel's own bucketing, the
 * prefill tiles and the wide load groups on or off; the switches go back to their kernels'
 * defaults (bucketing in the up kernel, the staged prefill kernels, the narrow groups, the
 * zero-fill ring with half tiles at 2) for the
 * other gates, so that check_experts holds the default path to the CPU twin. */
static int experts_with(const k_moe_experts_args *a, switches sw, bf16_t *out, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = 0x7fc0;
    k_set_moe_bucket_in_up(sw.in_up);
    k_set_moe_prefill_tiles(sw.tiles);
    k_set_wide_loads(sw.wide);
    k_set_moe_expert_stream(sw.stream);
    k_set_moe_ring_zfill(sw.zfill);
    k_set_moe_half_tiles(sw.half);
    k_set_moe_weights_a(sw.wa);
    int rc = k_copy_to_device(a->out, out, n * 2) | k_moe_experts(a, NULL) | k_sync() |
             k_copy_to_host(out, a->out, n * 2);
    k_set_moe_bucket_in_up(1);
    k_set_moe_prefill_tiles(3);
    k_set_wide_loads(0);
    k_set_moe_expert_stream(0);
    k_set_moe_ring_zfill(1);
    k_set_moe_half_tiles(2);
    k_set_moe_weights_a(0);
    return rc;
}

/* A speed-only switch of k_moe_experts against its other setting, byte for byte: the call with
 * the switches off, then one with every item on the last expert, which leaves other buckets and
 * another active count in the workspace (so a bucket the up kernel failed to write for the down
 * kernel shows as a difference), then the call with the switches on; for the router's ids,
 * and with bad ids, whose rows must be NaN on both.
 * - moe_bucket_in_up, where it applies (the tensor-core path, at most 128 items): the up
 *   kernel's own buckets against the bucket kernel's;
 * - moe_prefill_tiles, where it applies (the tensor-core path, more than 128 items): 4 item
 *   tiles a warp against the per-16-item kernels, (at 2) the blocks that stage 128 items and
 *   64 outputs in shared memory against them, and (at 3, moe_prefill_ring) those blocks with a
 *   three-stage ring whose warps of padding items skip their mmas: the 160-row 26B-A4B call
 *   (~10 items an expert) leaves every second warp of a block without an item, the 700-row tiny
 *   one (~175) a second item tile with a few;
 * - wide_loads, where it applies (the tensor-core path, at most 8 items: each expert's bucket
 *   one tile whose hi rows are padding), with the up kernel's buckets and with the bucket
 *   kernel's: the k loop's wider load groups (mma_rows_lo) against mma_rows. */
static void check_switch(const char *name, const shape *s, int rows, void *d_gu, void *d_dn,
                         const int32_t *idx, const float *w, switches sw_off, switches sw_on) {
    size_t nk = (size_t)rows * (size_t)s->top_k, nx = (size_t)rows * (size_t)s->d_model;
    int32_t *ids = malloc(nk * 4), *other = malloc(nk * 4);
    bf16_t *x = malloc(nx * 2), *off = malloc(nx * 2), *on = malloc(nx * 2);
    void *d_x = k_device_alloc(nx * 2), *d_out = k_device_alloc(nx * 2),
         *d_idx = k_device_alloc(nk * 4), *d_w = k_device_alloc(nk * 4);
    int setup = !ids || !other || !x || !off || !on || !d_x || !d_out || !d_idx || !d_w;
    if (!setup) fill_uniform(x, nx, 1.0f, 0.0f);
    /* the middle call's ids: every item on the last expert, never the expert of the gates that
     * put every item on expert 0 (there, all on expert 0 left the right outputs in the
     * workspace, and a kernel that wrote nothing would pass) */
    for (size_t i = 0; !setup && i < nk; i++)
        other[i] = s->n_expert - 1;
    k_moe_experts_args a = experts_args(s, rows, d_out, d_x, d_gu, d_dn, d_idx, d_w);
    for (int bad = 0; bad < 2; bad++) {
        char gate[128];
        snprintf(gate, sizeof gate, "%s[e%d k%d dm%d de%d rows%d%s]", name, s->n_expert, s->top_k,
                 s->d_model, s->d_expert, rows, bad ? " bad ids" : "");
        int rc = setup ? K_ERR_NO_MEMORY : 0;
        if (rc == 0) {
            memcpy(ids, idx, nk * 4);
            if (bad) { /* row 0's second pick out of range, the last row's first negative */
                ids[s->top_k > 1 ? 1 : 0] = s->n_expert;
                if (rows > 1) ids[(size_t)(rows - 1) * (size_t)s->top_k] = -1;
            }
            rc = k_copy_to_device(d_x, x, nx * 2) | k_copy_to_device(d_w, w, nk * 4) |
                 k_copy_to_device(d_idx, ids, nk * 4) | experts_with(&a, sw_off, off, nx) |
                 k_copy_to_device(d_idx, other, nk * 4) | experts_with(&a, sw_off, on, nx) |
                 k_copy_to_device(d_idx, ids, nk * 4) | experts_with(&a, sw_on, on, nx);
        }
        size_t diff = 0, nan_rows = 0;
        for (size_t i = 0; rc == 0 && i < nx; i++)
            diff += off[i] != on[i];
        for (int r = 0; rc == 0 && r < rows; r++)
            nan_rows += isnan(ref_bf16_to_f32(on[(size_t)r * (size_t)s->d_model]));
        size_t want_nan = bad ? (rows > 1 ? 2 : 1) : 0;
        TEST_CHECK(gate, rc == 0 && diff == 0 && nan_rows == want_nan,
                   "%zu of %zu elements differ from the run with the switch off, NaN rows %zu "
                   "(want %zu), rc %d",
                   diff, nx, nan_rows, want_nan, rc);
    }
    k_device_free(d_x);
    k_device_free(d_out);
    k_device_free(d_idx);
    k_device_free(d_w);
    free(ids);
    free(other);
    free(x);
    free(off);
    free(on);
}

/* A decode-row switch (at most 8 items a call) against its other setting: with the up kernel's
 * buckets (off, on), with the bucket kernel's (off_bk, on_bk), and with every item on expert 0,
 * where the router's ids would give each expert one item and leave lanes 1-7 of the lo form
 * (rows 1-7 of a warp's tile) with padding only. */
static void check_decode_switch(const char *name, const shape *s, int rows, void *d_gu, void *d_dn,
                                const int32_t *idx, const float *w, switches off, switches on,
                                switches off_bk, switches on_bk) {
    char gate[64];
    check_switch(name, s, rows, d_gu, d_dn, idx, w, off, on);
    snprintf(gate, sizeof gate, "%s+bucket_kernel", name);
    check_switch(gate, s, rows, d_gu, d_dn, idx, w, off_bk, on_bk);
    snprintf(gate, sizeof gate, "%s(one expert)", name);
    int32_t *one = calloc((size_t)rows * (size_t)s->top_k, 4);
    if (one)
        check_switch(gate, s, rows, d_gu, d_dn, one, w, off, on);
    else
        test_fail(gate, "out of host memory");
    free(one);
}

/* serve.prompt_experts (docs/prompt-rows.md): prompt rows' experts as pointer-array batched
 * cuBLASLt products over tiles of `tile` items (serve.prompt_tile). One call with every row a
 * prompt row against the CPU twin (the rule of check_experts); the same rows as two calls (other
 * bucket sizes, so other tiles and places in them) bit for bit; a call whose first rows are
 * generated ones: those equal the other paths' run of them alone, the prompt rows the all-prompt
 * call's, bit for bit; bad ids: their rows NaN, the others as in the all-prompt call. With `one`,
 * every row's items on experts 0..top_k-1, so each expert's bucket holds every row (several tiles,
 * the last partial). base: the first tile's run keeps its x and all-prompt output there, and
 * each later tile's run takes that x and must give that output bit for bit (an item's bits do
 * not depend on the tile). */
typedef struct tile_base {
    bf16_t *x, *all; /* [rows, d_model] each, NULL until the first run */
} tile_base;

static void check_prompt_experts(const shape *s, int rows, const bf16_t *gu_h, const bf16_t *dn_h,
                                 void *d_gu, void *d_dn, const int32_t *idx_in, const float *w,
                                 int one, int tile, tile_base *base) {
    char gate[160];
    snprintf(gate, sizeof gate, "moe_prompt_experts[e%d k%d dm%d de%d rows%d tile%d%s]",
             s->n_expert, s->top_k, s->d_model, s->d_expert, rows, tile,
             one ? " one expert set" : "");
    const size_t nx = (size_t)rows * (size_t)s->d_model, nk = (size_t)rows * (size_t)s->top_k;
    const size_t row_bytes = (size_t)s->d_model * 2;
    int32_t *idx = malloc(nk * 4);
    bf16_t *x = malloc(nx * 2), *all = malloc(nx * 2), *got = malloc(nx * 2), *ref = malloc(nx * 2);
    void *d_x = k_device_alloc(nx * 2), *d_out = k_device_alloc(nx * 2),
         *d_idx = k_device_alloc(nk * 4), *d_w = k_device_alloc(nk * 4);
    int rc = !idx || !x || !all || !got || !ref || !d_x || !d_out || !d_idx || !d_w;
    for (size_t i = 0; !rc && i < nk; i++)
        idx[i] = one ? (int32_t)(i % (size_t)s->top_k) : idx_in[i];
    if (!rc) {
        if (base->x)
            memcpy(x, base->x, nx * 2);
        else
            fill_uniform(x, nx, 1.0f, 0.0f);
        rc = k_copy_to_device(d_x, x, nx * 2) | k_copy_to_device(d_idx, idx, nk * 4) |
             k_copy_to_device(d_w, w, nk * 4);
    }
    k_moe_experts_args a = experts_args(s, rows, d_out, d_x, d_gu, d_dn, d_idx, d_w);
    const int gen = rows > 4 ? 3 : 1, half = rows / 2;
    long differ = 0, tile_differ = 0;
    k_set_moe_prompt_experts(1);
    if (!rc) rc = k_set_moe_prompt_tile(tile);
    if (!rc) { /* every row a prompt row */
        a.prompt_rows = rows;
        rc = experts_with(&a, (switches){1, 3, 0, 0, 0, 0, 0}, all, nx);
    }
    if (!rc && base->all) { /* against the first tile's run, row by row */
        for (int r = 0; r < rows; r++)
            tile_differ += memcmp(all + (size_t)r * s->d_model, base->all + (size_t)r * s->d_model,
                                  row_bytes) != 0;
    } else if (!rc) {
        base->x = malloc(nx * 2);
        base->all = malloc(nx * 2);
        rc = !base->x || !base->all;
        if (!rc) {
            memcpy(base->x, x, nx * 2);
            memcpy(base->all, all, nx * 2);
        }
    }
    if (!rc) { /* the same rows as two calls */
        k_moe_experts_args b = a;
        b.rows = b.prompt_rows = half;
        rc = experts_with(&b, (switches){1, 3, 0, 0, 0, 0, 0}, got, (size_t)half * s->d_model);
        differ += !rc && memcmp(got, all, (size_t)half * row_bytes) != 0;
        b = a;
        b.out = (bf16_t *)b.out + (size_t)half * s->d_model;
        b.x = (const bf16_t *)b.x + (size_t)half * s->d_model;
        b.idx = (const int32_t *)b.idx + (size_t)half * s->top_k;
        b.weight = (const float *)b.weight + (size_t)half * s->top_k;
        b.rows = b.prompt_rows = rows - half;
        rc |= experts_with(&b, (switches){1, 3, 0, 0, 0, 0, 0}, got,
                           (size_t)(rows - half) * s->d_model);
        differ += !rc && memcmp(got, all + (size_t)half * s->d_model,
                                (size_t)(rows - half) * row_bytes) != 0;
    }
    if (!rc) { /* generated rows first: theirs against the other paths alone */
        k_moe_experts_args g = a;
        g.rows = gen;
        g.prompt_rows = 0;
        k_set_moe_prompt_experts(0);
        rc = experts_with(&g, (switches){1, 3, 0, 0, 0, 0, 0}, ref, (size_t)gen * s->d_model);
        k_set_moe_prompt_experts(1);
        k_moe_experts_args m = a;
        m.prompt_rows = rows - gen;
        rc |= experts_with(&m, (switches){1, 3, 0, 0, 0, 0, 0}, got, nx);
        differ += !rc && memcmp(got, ref, (size_t)gen * row_bytes) != 0;
        differ += !rc && memcmp(got + (size_t)gen * s->d_model, all + (size_t)gen * s->d_model,
                                (size_t)(rows - gen) * row_bytes) != 0;
    }
    size_t nan_rows = 0, bad_differ = 0;
    if (!rc) { /* bad ids: row 0's second pick out of range, the last row's first negative; those
                * rows NaN, every other row as before (no slab row is read for a bad item) */
        int32_t *ids = malloc(nk * 4);
        rc = !ids;
        if (!rc) {
            for (size_t i = 0; i < nk; i++)
                ids[i] = one ? (int32_t)(i % (size_t)s->top_k) : idx_in[i];
            ids[s->top_k > 1 ? 1 : 0] = s->n_expert;
            ids[(size_t)(rows - 1) * (size_t)s->top_k] = -1;
            rc = k_copy_to_device(d_idx, ids, nk * 4) |
                 experts_with(&a, (switches){1, 3, 0, 0, 0, 0, 0}, got, nx) |
                 k_copy_to_device(d_idx, idx, nk * 4);
        }
        for (int r = 0; !rc && r < rows; r++) {
            const size_t o = (size_t)r * (size_t)s->d_model;
            if (r == 0 || r == rows - 1)
                nan_rows += isnan(ref_bf16_to_f32(got[o])) != 0;
            else
                bad_differ += memcmp(got + o, all + o, row_bytes) != 0;
        }
        free(ids);
    }
    k_set_moe_prompt_experts(0);
    (void)k_set_moe_prompt_tile(K_PROMPT_TILE_DEFAULT);
    twin_result t = {0};
    if (!rc) t = against_twin(&a, ref, x, gu_h, dn_h, idx, w, all, nx);
    const size_t want_nan = rows > 1 ? 2 : 1;
    TEST_CHECK(gate,
               rc == 0 && t.rc == 0 && t.unwritten == 0 && t.rel <= 1e-2 && t.den > 0 &&
                   t.worst_row <= 3e-2 && differ == 0 && nan_rows == want_nan && bad_differ == 0 &&
                   tile_differ == 0,
               "against the CPU twin rel err %.2e (limit 1e-2), worst row %.2e (limit 3e-2: "
               "one item of top_k lost moves its row by ~1/top_k), unwritten %d; %ld of 4 row "
               "ranges differ in some bit (two calls; %d generated rows against the other paths; "
               "the prompt rows beside them); with bad ids NaN rows %zu (want %zu), other rows "
               "differing %zu; %ld rows differ from the first tile's run; rc %d/%d",
               t.rel, t.worst_row, t.unwritten, differ, gen, nan_rows, want_nan, bad_differ,
               tile_differ, rc, t.rc);
    k_device_free(d_x);
    k_device_free(d_out);
    k_device_free(d_idx);
    k_device_free(d_w);
    free(idx);
    free(x);
    free(all);
    free(got);
    free(ref);
}

/* serve.prompt_experts at a whole prefill chunk of the 26B-A4B (2,048 rows, 16,384 items), which
 * the gates above (at most 160 rows here) never reach: at tiles of 64 the call cuts about 320
 * tiles, more than the 2 x n_expert its batched plans were asked at. Ids top_k distinct a row,
 * weights positive. The chunk at the default tile (96) as one call, against: the same chunk at
 * tiles of 64 (an item's bits do not depend on its tile), and the same rows as two calls of 1,024
 * (each well under the plans' batch), bit for bit; and every 16th row and the last against the
 * CPU twin row by row (the twin on all 2,048 rows would take minutes): a row's relative error at
 * most 3e-2, where the same rounding points summed in another k order give ~1 bf16 ulp on some
 * elements (~4e-3 a row) and an item lost, or read from another tile's rows, moves its row by
 * about 1/top_k of its norm. */
static void check_prompt_chunk(const shape *s, const bf16_t *gu_h, const bf16_t *dn_h, void *d_gu,
                               void *d_dn) {
    enum { ROWS = 2048, HALF = ROWS / 2, EVERY = 16, SAMPLES = ROWS / EVERY + 1 };
    char gate[160];
    snprintf(gate, sizeof gate, "moe_prompt_experts[e%d k%d dm%d de%d rows%d chunk]", s->n_expert,
             s->top_k, s->d_model, s->d_expert, ROWS);
    const size_t dm = (size_t)s->d_model, nx = ROWS * dm, nk = (size_t)ROWS * (size_t)s->top_k;
    int32_t *idx = malloc(nk * 4), *sidx = malloc((size_t)SAMPLES * (size_t)s->top_k * 4);
    float *w = malloc(nk * 4), *sw = malloc((size_t)SAMPLES * (size_t)s->top_k * 4);
    bf16_t *x = malloc(nx * 2), *all = malloc(nx * 2), *got = malloc(nx * 2),
           *sx = malloc(SAMPLES * dm * 2), *ref = malloc(SAMPLES * dm * 2);
    void *d_x = k_device_alloc(nx * 2), *d_out = k_device_alloc(nx * 2),
         *d_idx = k_device_alloc(nk * 4), *d_w = k_device_alloc(nk * 4);
    int rc = !idx || !sidx || !w || !sw || !x || !all || !got || !sx || !ref || !d_x || !d_out ||
             !d_idx || !d_w;
    if (!rc) {
        fill_uniform(x, nx, 1.0f, 0.0f);
        for (int r = 0; r < ROWS; r++)
            for (int k = 0; k < s->top_k; k++) {
                int32_t e;
                int dup;
                do { /* top_k distinct experts a row, as the router picks them */
                    e = (int32_t)rnd_int(s->n_expert);
                    dup = 0;
                    for (int j = 0; j < k; j++)
                        dup |= idx[(size_t)r * (size_t)s->top_k + (size_t)j] == e;
                } while (dup);
                idx[(size_t)r * (size_t)s->top_k + (size_t)k] = e;
                w[(size_t)r * (size_t)s->top_k + (size_t)k] = 0.1f + 0.05f * (rnd() + 1.0f);
            }
        rc = k_copy_to_device(d_x, x, nx * 2) | k_copy_to_device(d_idx, idx, nk * 4) |
             k_copy_to_device(d_w, w, nk * 4);
    }
    k_moe_experts_args a = experts_args(s, ROWS, d_out, d_x, d_gu, d_dn, d_idx, d_w);
    a.prompt_rows = ROWS;
    long long calls[2], items[2], tile_rows[2];
    long differ = 0;
    k_set_moe_prompt_experts(1);
    if (!rc)
        rc = experts_with(&a, (switches){1, 3, 0, 0, 0, 0, 0}, all,
                          nx); /* tiles of K_PROMPT_TILE_DEFAULT */
    k_moe_prompt_stats(&calls[0], &items[0], &tile_rows[0]);
    if (!rc) rc = k_set_moe_prompt_tile(64);
    if (!rc) rc = experts_with(&a, (switches){1, 3, 0, 0, 0, 0, 0}, got, nx);
    k_moe_prompt_stats(&calls[1], &items[1], &tile_rows[1]);
    (void)k_set_moe_prompt_tile(K_PROMPT_TILE_DEFAULT);
    const long long tiles64 = (tile_rows[1] - tile_rows[0]) / 64;
    differ += !rc && memcmp(got, all, nx * 2) != 0;
    for (int h = 0; !rc && h < 2; h++) { /* the two halves as calls of their own */
        k_moe_experts_args b = a;
        b.out = (bf16_t *)b.out + (size_t)h * HALF * dm;
        b.x = (const bf16_t *)b.x + (size_t)h * HALF * dm;
        b.idx = (const int32_t *)b.idx + (size_t)h * HALF * (size_t)s->top_k;
        b.weight = (const float *)b.weight + (size_t)h * HALF * (size_t)s->top_k;
        b.rows = b.prompt_rows = HALF;
        rc = experts_with(&b, (switches){1, 3, 0, 0, 0, 0, 0}, got, HALF * dm);
        differ += !rc && memcmp(got, all + (size_t)h * HALF * dm, HALF * dm * 2) != 0;
    }
    k_set_moe_prompt_experts(0);
    twin_result t = {0};
    if (!rc) { /* the sampled rows and their outputs gathered, the twin on them alone */
        for (int j = 0; j < SAMPLES; j++) {
            const int r = j < SAMPLES - 1 ? j * EVERY : ROWS - 1;
            memcpy(sx + (size_t)j * dm, x + (size_t)r * dm, dm * 2);
            memcpy(got + (size_t)j * dm, all + (size_t)r * dm, dm * 2);
            memcpy(sidx + (size_t)j * (size_t)s->top_k, idx + (size_t)r * (size_t)s->top_k,
                   (size_t)s->top_k * 4);
            memcpy(sw + (size_t)j * (size_t)s->top_k, w + (size_t)r * (size_t)s->top_k,
                   (size_t)s->top_k * 4);
        }
        const k_moe_experts_args sa = experts_args(s, SAMPLES, NULL, NULL, NULL, NULL, NULL, NULL);
        t = against_twin(&sa, ref, sx, gu_h, dn_h, sidx, sw, got, SAMPLES * dm);
    }
    TEST_CHECK(gate,
               rc == 0 && t.rc == 0 && tiles64 > 2LL * s->n_expert && differ == 0 &&
                   t.unwritten == 0 && t.den > 0 && t.worst_row <= 3e-2,
               "%lld tiles at 64 items (the plans were asked at %d); %ld of 3 comparisons (tiles "
               "of 64, each half alone) differ in some bit; %d rows against the CPU twin: worst "
               "row's rel err %.2e (limit 3e-2), %d NaN; rc %d/%d",
               tiles64, 2 * s->n_expert, differ, SAMPLES, t.worst_row, t.unwritten, rc, t.rc);
    k_device_free(d_x);
    k_device_free(d_out);
    k_device_free(d_idx);
    k_device_free(d_w);
    free(idx);
    free(sidx);
    free(w);
    free(sw);
    free(x);
    free(all);
    free(got);
    free(sx);
    free(ref);
}

/* serve.moe_half_tiles where buckets of at most 64 items and larger ones meet in one call:
 * rows whose top_k distinct experts are drawn uniformly, ~64 items an expert at the 26B-A4B's
 * 1,024 rows (a prefill chunk's spread, which the router's ids at the gates' row counts do not
 * reach), byte for byte against the zero-fill ring. */
static void check_half_mix(const shape *s, int rows, void *d_gu, void *d_dn) {
    size_t nk = (size_t)rows * (size_t)s->top_k;
    int32_t *idx = malloc(nk * 4);
    float *w = malloc(nk * 4);
    int *pool = malloc((size_t)s->n_expert * sizeof *pool);
    if (!idx || !w || !pool) {
        test_fail("moe_half_tiles(mixed buckets)", "out of host memory");
    } else {
        int small = 0, large = 0; /* buckets of at most 64 items, and of more */
        int *count = calloc((size_t)s->n_expert, sizeof *count);
        for (int r = 0; r < rows; r++) {
            for (int e = 0; e < s->n_expert; e++)
                pool[e] = e;
            for (int j = 0; j < s->top_k; j++) { /* a partial shuffle: distinct experts */
                const int pick = j + rnd_int(s->n_expert - j), e = pool[pick];
                pool[pick] = pool[j];
                pool[j] = e;
                idx[(size_t)r * (size_t)s->top_k + (size_t)j] = e;
                w[(size_t)r * (size_t)s->top_k + (size_t)j] = 0.5f + 0.5f * rnd();
                if (count) count[e]++;
            }
        }
        for (int e = 0; count && e < s->n_expert; e++) {
            small += count[e] > 0 && count[e] <= 64;
            large += count[e] > 64;
        }
        free(count);
        /* the gate must see both kinds, or it tests one path only */
        if (small == 0 || large == 0)
            test_fail("moe_half_tiles(mixed buckets)", "%d buckets of at most 64 items, %d larger",
                      small, large);
        else {
            check_switch("moe_half_tiles(mixed buckets)", s, rows, d_gu, d_dn, idx, w,
                         (switches){1, 3, 0, 0, 1, 0, 0}, (switches){1, 3, 0, 0, 1, 1, 0});
            check_switch("moe_half_tiles=2(mixed buckets)", s, rows, d_gu, d_dn, idx, w,
                         (switches){1, 3, 0, 0, 1, 0, 0}, (switches){1, 3, 0, 0, 1, 2, 0});
            check_switch("moe_weights_a(mixed buckets)", s, rows, d_gu, d_dn, idx, w,
                         (switches){1, 3, 0, 0, 1, 2, 0}, (switches){1, 3, 0, 0, 1, 2, 1});
            check_switch("moe_weights_a=2(mixed buckets)", s, rows, d_gu, d_dn, idx, w,
                         (switches){1, 3, 0, 0, 1, 2, 0}, (switches){1, 3, 0, 0, 1, 2, 2});
        }
    }
    free(idx);
    free(w);
    free(pool);
}

/* The prefill-sized calls' speed-only switches, each byte for byte against its other setting
 * (check_switch), with the router's ids and, where one_expert, with every item on expert 0 (for
 * the half tiles, a bucket past half a tile: their kernels' whole-tile path). */
static const struct prefill_switch {
    const char *name;
    switches off, on;
    int one_expert;
} prefill_switches[] = {
    {"moe_prefill_tiles", {1, 0, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 0, 0}, 0},
    {"moe_prefill_staged", {1, 0, 0, 0, 0, 0, 0}, {1, 2, 0, 0, 0, 0, 0}, 1},
    {"moe_prefill_ring", {1, 0, 0, 0, 0, 0, 0}, {1, 3, 0, 0, 0, 0, 0}, 1},
    {"moe_ring_zfill", {1, 3, 0, 0, 0, 0, 0}, {1, 3, 0, 0, 1, 0, 0}, 1},
    {"moe_half_tiles", {1, 3, 0, 0, 1, 0, 0}, {1, 3, 0, 0, 1, 1, 0}, 1},
    {"moe_half_tiles=2", {1, 3, 0, 0, 1, 0, 0}, {1, 3, 0, 0, 1, 2, 0}, 1},
    {"moe_weights_a", {1, 3, 0, 0, 1, 2, 0}, {1, 3, 0, 0, 1, 2, 1}, 1},
    {"moe_weights_a(half 0)", {1, 3, 0, 0, 1, 0, 0}, {1, 3, 0, 0, 1, 0, 1}, 1},
    {"moe_weights_a=2", {1, 3, 0, 0, 1, 2, 0}, {1, 3, 0, 0, 1, 2, 2}, 1},
};

static void run_shape(const shape *s, uint64_t seed) {
    rng_state = seed;
    size_t ngu = (size_t)s->n_expert * 2 * (size_t)s->d_expert * (size_t)s->d_model;
    size_t ndn = (size_t)s->n_expert * (size_t)s->d_model * (size_t)s->d_expert;
    bf16_t *scale = malloc((size_t)s->n_expert * 2), *gu = malloc(ngu * 2), *dn = malloc(ndn * 2);
    fill_uniform(scale, (size_t)s->n_expert, 0.5f, 1.0f);
    /* unit-variance-ish activations: weights at 1/sqrt(fan-in) */
    fill_uniform(gu, ngu, 1.0f / sqrtf((float)s->d_model), 0.0f);
    fill_uniform(dn, ndn, 1.0f / sqrtf((float)s->d_expert), 0.0f);
    void *d_scale = k_device_alloc((size_t)s->n_expert * 2), *d_gu = k_device_alloc(ngu * 2),
         *d_dn = k_device_alloc(ndn * 2);
    int ok = d_scale && d_gu && d_dn &&
             k_copy_to_device(d_scale, scale, (size_t)s->n_expert * 2) == 0 &&
             k_copy_to_device(d_gu, gu, ngu * 2) == 0 && k_copy_to_device(d_dn, dn, ndn * 2) == 0;
    const int rows_list[] = {1, 5, 16, 64, s->many_rows};
    for (size_t i = 0; i < sizeof rows_list / sizeof rows_list[0]; i++) {
        int rows = rows_list[i];
        if (rows == 0) continue;
        if (!ok) {
            test_fail("op_vs_ref_moe", "device allocation or copy failed (e%d dm%d de%d)",
                      s->n_expert, s->d_model, s->d_expert);
            break;
        }
        size_t nk = (size_t)rows * (size_t)s->top_k;
        int32_t *idx = malloc(nk * 4);
        float *w = malloc(nk * 4);
        check_route(s, rows, scale, d_scale, idx, w);
        check_route_lanes(s, rows, d_scale);
        check_experts(s, rows, gu, dn, d_gu, d_dn, idx, w);
        const int mma = s->d_model % 32 == 0 && s->d_expert % 32 == 0;
        if (mma && nk <= 128) /* where the up kernel may bucket its items */
            check_switch("moe_bucket_in_up", s, rows, d_gu, d_dn, idx, w,
                         (switches){0, 0, 0, 0, 0, 0, 0}, (switches){1, 0, 0, 0, 0, 0, 0});
        if (mma && nk > 128) { /* prefill-sized calls */
            for (size_t p = 0; p < sizeof prefill_switches / sizeof *prefill_switches; p++)
                check_switch(prefill_switches[p].name, s, rows, d_gu, d_dn, idx, w,
                             prefill_switches[p].off, prefill_switches[p].on);
            /* every item on expert 0: 128-item tiles one after another in a block at the
             * shape's own k, so a stage one tile's last chunks read meets the next tile's first
             * copies (the router's ids spread the items too thin for a second tile) */
            int32_t *one = calloc(nk, 4);
            for (size_t p = 0; one && p < sizeof prefill_switches / sizeof *prefill_switches; p++) {
                char name[64];
                if (!prefill_switches[p].one_expert) continue;
                snprintf(name, sizeof name, "%s(one expert)", prefill_switches[p].name);
                check_switch(name, s, rows, d_gu, d_dn, one, w, prefill_switches[p].off,
                             prefill_switches[p].on);
            }
            if (!one) test_fail("moe_prefill_staged(one expert)", "out of host memory");
            free(one);
            /* the default tile, one past the 26B-A4B's usual bucket (~64 items an expert at
             * 1,024 rows: one tile an expert, mostly), and one no multiple of 8; each against
             * the first's bits */
            static const int tiles[] = {64, 128, 100};
            tile_base spread = {0}, one_set = {0};
            for (size_t ti = 0; ti < sizeof tiles / sizeof tiles[0]; ti++) {
                check_prompt_experts(s, rows, gu, dn, d_gu, d_dn, idx, w, 0, tiles[ti], &spread);
                check_prompt_experts(s, rows, gu, dn, d_gu, d_dn, idx, w, 1, tiles[ti], &one_set);
            }
            free(spread.x);
            free(spread.all);
            free(one_set.x);
            free(one_set.all);
        }
        if (mma && nk <= 8) /* one decode row: where serve.wide_loads applies */
            check_decode_switch("wide_loads", s, rows, d_gu, d_dn, idx, w,
                                (switches){1, 0, 0, 0, 0, 0, 0}, (switches){1, 0, 1, 0, 0, 0, 0},
                                (switches){0, 0, 0, 0, 0, 0, 0}, (switches){0, 0, 1, 0, 0, 0, 0});
        if (mma && nk > 8 && nk <= 128) /* past it the narrow groups run: the switch is inert */
            check_switch("wide_loads(inert)", s, rows, d_gu, d_dn, idx, w,
                         (switches){1, 0, 0, 0, 0, 0, 0}, (switches){1, 0, 1, 0, 0, 0, 0});
        if (mma && nk <= 8) /* one decode row: against the wide groups, the default there */
            check_decode_switch("expert_stream", s, rows, d_gu, d_dn, idx, w,
                                (switches){1, 0, 1, 0, 0, 0, 0}, (switches){1, 0, 1, 8, 0, 0, 0},
                                (switches){0, 0, 1, 0, 0, 0, 0}, (switches){0, 0, 1, 8, 0, 0, 0});
        if (mma && nk > 8 && nk <= 128) { /* up to 16 decode rows: buckets past 8 and 16 items */
            check_switch("expert_stream", s, rows, d_gu, d_dn, idx, w,
                         (switches){1, 0, 1, 0, 0, 0, 0}, (switches){1, 0, 1, 128, 0, 0, 0});
            check_switch("expert_stream+bucket_kernel", s, rows, d_gu, d_dn, idx, w,
                         (switches){0, 0, 1, 0, 0, 0, 0}, (switches){0, 0, 1, 128, 0, 0, 0});
            /* every item on expert 0: one bucket of several 16-item tiles, the ring's stages
             * and phases carried from tile to tile, the last tile partial or past 8 items */
            int32_t *one = calloc(nk, 4);
            if (one)
                check_switch("expert_stream(one expert)", s, rows, d_gu, d_dn, one, w,
                             (switches){1, 0, 1, 0, 0, 0, 0}, (switches){1, 0, 1, 128, 0, 0, 0});
            else
                test_fail("expert_stream(one expert)", "out of host memory");
            free(one);
        }
        free(idx);
        free(w);
    }
    /* buckets on both sides of half a tile in one call: the 26B-A4B at 1,024 rows, and a
     * d_model of 160 at 256 (~64 items an expert either way; there the down grid is 3 blocks,
     * so the last one has no pair and half its outputs past the end) */
    if (ok && s->d_model % 32 == 0 && s->d_expert % 32 == 0 &&
        ((s->n_expert == 128 && s->top_k == 8 && s->d_model == 2816 && s->d_expert == 704) ||
         s->d_model == 160))
        check_half_mix(s, s->d_model == 160 ? 256 : 1024, d_gu, d_dn);
    /* the 26B-A4B's experts at a whole prefill chunk (conf/gemma4-26b-a4b.ini's 2,048 rows) */
    if (ok && s->n_expert == 128 && s->top_k == 8 && s->d_model == 2816 && s->d_expert == 704 &&
        s->many_rows > 0)
        check_prompt_chunk(s, gu, dn, d_gu, d_dn);
    k_device_free(d_scale);
    k_device_free(d_gu);
    k_device_free(d_dn);
    free(scale);
    free(gu);
    free(dn);
}

/* The router's lanes form at routing shapes no model has: every slot of a lane (256 experts,
 * the most), an expert count that is no multiple of 32, and top 16 (the most). */
static void run_route_shapes(uint64_t seed) {
    static const int route_shapes[][2] = {{256, 16}, {200, 5}, {33, 3}};
    static const int route_rows[] = {1, 7, 64};
    rng_state = seed;
    for (size_t i = 0; i < sizeof route_shapes / sizeof route_shapes[0]; i++) {
        const shape s = {.n_expert = route_shapes[i][0], .top_k = route_shapes[i][1]};
        bf16_t *scale = malloc((size_t)s.n_expert * 2);
        fill_uniform(scale, (size_t)s.n_expert, 0.5f, 1.0f);
        void *d_scale = k_device_alloc((size_t)s.n_expert * 2);
        if (!d_scale || k_copy_to_device(d_scale, scale, (size_t)s.n_expert * 2) != 0)
            test_fail("moe_route_lanes", "device allocation or copy failed (e%d)", s.n_expert);
        else
            for (size_t k = 0; k < sizeof route_rows / sizeof route_rows[0]; k++)
                check_route_lanes(&s, route_rows[k], d_scale);
        k_device_free(d_scale);
        free(scale);
    }
}

int main(void) {
    char desc[256];
    if (k_device_init(desc, sizeof desc) != 0) {
        test_skip("op_vs_ref_moe", "no GPU (%s)", desc);
        test_skip("moe_prompt_experts", "no GPU (%s)", desc);
        test_skip("moe_prompt_tile_range", "no GPU (%s)", desc);
        return 0;
    }
    printf("# device: %s\n", desc);
    /* serve.prompt_tile's range (the config's): a tile outside it refused, the tile unchanged;
     * 0 too (the size classes, taken out after they measured slower than tiles of 96) */
    const int below = k_set_moe_prompt_tile(K_PROMPT_TILE_MIN - 1),
              above = k_set_moe_prompt_tile(K_PROMPT_TILE_MAX + 1),
              negative = k_set_moe_prompt_tile(-1), zero = k_set_moe_prompt_tile(0),
              lo = k_set_moe_prompt_tile(K_PROMPT_TILE_MIN),
              hi = k_set_moe_prompt_tile(K_PROMPT_TILE_MAX),
              back = k_set_moe_prompt_tile(K_PROMPT_TILE_DEFAULT);
    TEST_CHECK("moe_prompt_tile_range",
               below == K_ERR_SHAPE && above == K_ERR_SHAPE && negative == K_ERR_SHAPE &&
                   zero == K_ERR_SHAPE && lo == K_OK && hi == K_OK && back == K_OK,
               "%d below, %d above, %d at -1, %d at 0, %d %d at the ends, %d back", below, above,
               negative, zero, lo, hi, back);
    /* the 26B-A4B (with 160 rows: ~10 items an expert, a few experts past one 16-item tile at
     * the long k), the tiny fixture (with 200 rows: ~50 items an expert, so the tensor-core
     * path's tiles run full, partial and several to an expert), the 26B-A4B's routing with a
     * narrow expert, d_experts that are no multiple of 32 (the CUDA-core path, at a short
     * and at the real k), the tiny fixture at 700 rows (~175 items an expert: the staged
     * prefill kernels' 128-item tiles, two to an expert, the second partial), d_experts of 96
     * and 192 at 200 rows (the down kernels' k in 2 and 3 chunks of 64: the ring's stages used
     * fewer than, and exactly, once each), and at the tiny fixture's width a d_model of 96 (the
     * up kernels' k a chunk and a half) and d_experts of 160 and 224 (the down kernels' k ending
     * in half a chunk, the last after the ring's three stages have wrapped), and a d_model of
     * 160 at 256 rows (~64 items an expert: serve.moe_half_tiles' odd down grid) */
    const shape shapes[] = {
        {128, 8, 2816, 704, 160}, {16, 4, 64, 32, 200},     {128, 8, 2816, 64, 0},
        {16, 4, 64, 40, 200},     {128, 8, 2816, 712, 0},   {16, 4, 64, 32, 700},
        {128, 8, 2816, 96, 200},  {128, 8, 2816, 192, 200}, {16, 4, 96, 160, 200},
        {16, 4, 64, 224, 200},    {16, 4, 160, 64, 256}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        run_shape(&shapes[i], 4321 + i);
    run_route_shapes(8765);
    return harness_exit();
}
