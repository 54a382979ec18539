/* runtime/model/device_weights.c - see device_weights.h. The walk over tensors is weights.c's; this
 * module is only a weights_source whose get() returns device memory, plus the plans. */
#include "runtime/model/device_weights.h"

#include "kernels/kernels.h"
#include "runtime/base/log.h"
#include "runtime/model/weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* a progress line after every this many bytes reach the device */
#define WEIGHTS_REPORT_BYTES ((size_t)8 << 30)

struct device_weights {
    loader *ld; /* NULL: dummy weights */
    uint64_t seed;
    long n_tensors;
    void **buffers;
    long n_buffers, cap_buffers;
    size_t bytes;
    size_t next_report; /* bytes at which the next progress line is due */
    double t0;          /* when binding began */
    k_gemm_plan **plans;
    long n_plans, cap_plans;
};

static int remember(void ***arr, long *n, long *cap, void *p) {
    if (*n == *cap) {
        long c = *cap ? 2 * *cap : 256;
        void **a = realloc(*arr, sizeof *a * (size_t)c);
        if (!a) return -1;
        *arr = a;
        *cap = c;
    }
    (*arr)[(*n)++] = p;
    return 0;
}

/* The range dummy values are drawn from: near 1 for norms and scales, else std 1/sqrt(k). */
static void dummy_range(const char *name, int ndim, const int64_t *shape, float *lo, float *hi) {
    if (ndim == 1) {
        *lo = 0.9f;
        *hi = 1.1f;
        return;
    }
    float half = sqrtf(3.0f / (float)shape[ndim - 1]); /* uniform(-a, a) has std a/sqrt(3) */
    if (strstr(name, "embed_tokens")) half = sqrtf(3.0f) * 0.02f;
    *lo = -half;
    *hi = half;
}

static const void *device_get(void *ctx, const char *name, int ndim, const int64_t *shape) {
    static const bf16_t one = 0x3f80; /* bf16 1.0: the dummy layer_scalar */
    device_weights *dw = ctx;
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    const void *host = NULL;
    if (dw->ld) {
        host = loader_get(dw->ld, "BF16", ndim, shape, "%s", name);
        if (!host) return NULL;
    }
    dw->n_tensors++;
    if (ndim == 1 && shape[0] == 1) return host ? host : &one; /* read on the host */
    void *dev = k_device_alloc(n * sizeof(bf16_t));
    if (!dev || remember(&dw->buffers, &dw->n_buffers, &dw->cap_buffers, dev) != 0) {
        log_msg(LOG_ERROR, "weights", "out of device memory at %s (%zu bytes)", name,
                n * sizeof(bf16_t));
        k_device_free(dev);
        return NULL;
    }
    dw->bytes += n * sizeof(bf16_t);
    int rc;
    if (host) {
        rc = k_copy_to_device(dev, host, n * sizeof(bf16_t));
    } else {
        k_fill_args f = {.out = dev, .n = n, .seed = dw->seed + (uint64_t)dw->n_tensors * 7919u};
        dummy_range(name, ndim, shape, &f.lo, &f.hi);
        rc = k_fill_uniform(&f, NULL);
    }
    if (rc != 0) {
        log_msg(LOG_ERROR, "weights", "could not fill %s on the device", name);
        return NULL;
    }
    if (dw->bytes >= dw->next_report) { /* a 50 GB checkpoint takes a while: say how far */
        log_msg(LOG_INFO, "weights", "%.1f GB on the device after %.1f s", (double)dw->bytes / 1e9,
                log_clock_s() - dw->t0);
        dw->next_report = dw->bytes + WEIGHTS_REPORT_BYTES;
    }
    return dev;
}

int device_weights_bind(loader *ld, const g4_model_desc *m, uint64_t seed, g4_weights *w,
                        device_weights **out) {
    *out = NULL;
    device_weights *dw = calloc(1, sizeof *dw);
    if (!dw) return -1;
    dw->ld = ld;
    dw->seed = seed;
    dw->t0 = log_clock_s();
    dw->next_report = WEIGHTS_REPORT_BYTES;
    weights_source src = {device_get, dw};
    if (weights_bind_source(&src, m, w) != 0 ||
        (ld && loader_finish(ld, m->n_layer - m->n_kv_shared) != 0) || k_sync() != 0) {
        device_weights_free(dw);
        return -1;
    }
    log_msg(LOG_INFO, "weights", "%ld tensors, %.2f GB on the device in %.1f s (%s)", dw->n_tensors,
            (double)dw->bytes / 1e9, log_clock_s() - dw->t0,
            ld ? "copied from the checkpoint" : "dummy, filled on the device");
    *out = dw;
    return 0;
}

/* One plan, remembered for freeing; NULL weights (absent tensors) get none. */
static int plan(device_weights *dw, void **dst, const void *w, int max_m, int n, int k) {
    if (!w) return 0;
    k_gemm_plan *p = NULL;
    if (k_gemm_plan_create(&p, max_m, n, k) != 0 ||
        remember((void ***)&dw->plans, &dw->n_plans, &dw->cap_plans, p) != 0) {
        log_msg(LOG_ERROR, "weights", "no cuBLASLt plan for a %d x %d x %d projection", max_m, n,
                k);
        k_gemm_plan_destroy(p);
        return -1;
    }
    *dst = p;
    return 0;
}

int device_weights_plans(device_weights *dw, const g4_model_desc *m, g4_weights *w, int max_rows,
                         int max_out_rows) {
    int H = m->d_model, rc = 0;
    rc |= plan(dw, &w->plan_head, w->embed, max_out_rows, m->n_vocab, H);
    rc |= plan(dw, &w->plan_ple_model_proj, w->ple_model_proj, max_rows, m->n_layer * m->d_ple, H);
    for (int l = 0; l < m->n_layer && rc == 0; l++) {
        g4_layer_weights *L = &w->layer[l];
        int full = m->layer_kind[l] == G4_LAYER_FULL;
        int hd = full ? m->head_dim_global : m->head_dim_local;
        int kv = (full ? m->n_kv_head_global : m->n_kv_head_local) * hd;
        int ff = g4_model_d_ff(m, l);
        rc |= plan(dw, &L->plan_q, L->q, max_rows, m->n_head * hd, H);
        rc |= plan(dw, &L->plan_k, L->k, max_rows, kv, H);
        rc |= plan(dw, &L->plan_v, L->v, max_rows, kv, H);
        rc |= plan(dw, &L->plan_o, L->o, max_rows, H, m->n_head * hd);
        rc |= plan(dw, &L->plan_gate, L->gate, max_rows, ff, H);
        rc |= plan(dw, &L->plan_up, L->up, max_rows, ff, H);
        rc |= plan(dw, &L->plan_down, L->down, max_rows, H, ff);
        rc |= plan(dw, &L->plan_router, L->router, max_rows, m->n_expert, H);
        rc |= plan(dw, &L->plan_ple_gate, L->ple_gate, max_rows, m->d_ple, H);
        rc |= plan(dw, &L->plan_ple_proj, L->ple_proj, max_rows, H, m->d_ple);
    }
    return rc ? -1 : 0;
}

size_t device_weights_bytes(const device_weights *dw) { return dw ? dw->bytes : 0; }

void device_weights_free(device_weights *dw) {
    if (!dw) return;
    for (long i = 0; i < dw->n_buffers; i++)
        k_device_free(dw->buffers[i]);
    for (long i = 0; i < dw->n_plans; i++)
        k_gemm_plan_destroy(dw->plans[i]);
    free(dw->buffers);
    free(dw->plans);
    free(dw);
}
