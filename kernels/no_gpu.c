/* kernels/no_gpu.c - the GPU side of a build made without nvcc: every launcher refuses, so
 * the engine falls back to the CPU reference backend with one clear log line, and the binary
 * still links. Never linked into a GPU build. */
#include "graph/schedule.h"
#include "kernels/kernels.h"

#include <stdio.h>

int k_device_init(char *desc, size_t desc_len) {
    snprintf(desc, desc_len, "this g4pipe was built without nvcc (CPU-only build)");
    return K_ERR_DEVICE;
}

void *k_device_alloc(size_t bytes) {
    (void)bytes;
    return NULL;
}

void k_device_free(void *p) { (void)p; }

int k_copy_to_device(void *dst, const void *src, size_t bytes) {
    (void)dst, (void)src, (void)bytes;
    return K_ERR_DEVICE;
}

int k_copy_to_host(void *dst, const void *src, size_t bytes) {
    (void)dst, (void)src, (void)bytes;
    return K_ERR_DEVICE;
}

int k_sync(void) { return K_ERR_DEVICE; }
size_t k_device_free_bytes(void) { return 0; }

int k_gemm_plan_create(k_gemm_plan **out, int max_m, int n, int k) {
    (void)max_m, (void)n, (void)k;
    *out = NULL;
    return K_ERR_DEVICE;
}

int k_gemm_plan_create_at(k_gemm_plan **out, int max_m, int heur_m, int n, int k) {
    (void)max_m, (void)heur_m, (void)n, (void)k;
    *out = NULL;
    return K_ERR_DEVICE;
}

void k_gemm_plan_destroy(k_gemm_plan *plan) { (void)plan; }

int k_gemm(const k_gemm_args *a, g4_stream st) {
    (void)a, (void)st;
    return K_ERR_DEVICE;
}

int k_fill_uniform(const k_fill_args *a, g4_stream st) {
    (void)a, (void)st;
    return K_ERR_DEVICE;
}

int k_argmax(const k_argmax_args *a, g4_stream st) {
    (void)a, (void)st;
    return K_ERR_DEVICE;
}

int k_event_create(k_event **out) {
    *out = NULL;
    return K_ERR_DEVICE;
}

void k_event_destroy(k_event *ev) { (void)ev; }

int k_event_record(k_event *ev, g4_stream st) {
    (void)ev, (void)st;
    return K_ERR_DEVICE;
}

int k_event_elapsed_ms(k_event *a, k_event *b, float *ms) {
    (void)a, (void)b;
    *ms = 0;
    return K_ERR_DEVICE;
}

/* no GPU schedules in this build */
const g4_schedule *const k_schedules[] = {NULL};
const int k_n_schedules = 0;
