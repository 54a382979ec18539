/* tests/bench/bench_gemm.c - which cuBLASLt algorithm to plan each projection with. A plan's
 * algorithm serves every batch size (batch invariance), so it must be fast at the decode sizes
 * and acceptable at a prefill chunk. For each projection shape of the 26B-A4B and the 31B this
 * times, at m = 1, 4, 16 and max_m, the algorithm the heuristic picks when asked at several
 * m (the plan's heur_m), with CUDA events, median of 20 runs, against the weight-streaming
 * floor at m = 1 (n * k * 2 bytes / --bw GB/s). A benchmark: it prints figures only.
 * With --kernels it times instead, at prefill sizes (1,024 and 2,048 rows, or --m M), each shape
 * on the kernels a prefill projection can take: the project's tensor-core kernel in its tile
 * form and cuBLASLt's plan, in ms and TFLOP/s (2 m n k flops a call; the H200's dense bf16 matrix
 * rate is ~780 TFLOP/s at the clocks it holds, ~990 nominal). usage: bench_gemm [--max-m M] [--bw
 * GBPS] [--kernels [--m M]] */
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    const char *name;
    int n, k;
} shape;

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of 20 runs of y[m] = x[m] @ w^T through plan. */
static float time_gemm(k_gemm_plan *plan, bf16_t *y, const bf16_t *x, const bf16_t *w, int m, int n,
                       int k, k_event *ev[2]) {
    float t[20];
    k_gemm_args a = {.y = y, .x = x, .w = w, .m = m, .n = n, .k = k, .plan = plan};
    if (k_gemm(&a, NULL) != 0) return -1; /* warm */
    for (int i = 0; i < 20; i++) {
        if (k_event_record(ev[0], NULL) || k_gemm(&a, NULL) || k_event_record(ev[1], NULL) ||
            k_event_elapsed_ms(ev[0], ev[1], &t[i]))
            return -1;
    }
    qsort(t, 20, sizeof t[0], cmp_float);
    return t[10];
}

/* --kernels: one shape at m rows on each kernel: the tile form and cuBLASLt; a kernel that cannot
 * plan it prints "-". */
static void time_kernels(const shape *s, int m, bf16_t *y, const bf16_t *x, const bf16_t *w,
                         k_event *ev[2]) {
    enum { KINDS = 2, LT = KINDS - 1 };
    static const char *const names[KINDS] = {"tile", "cublaslt"};
    printf("%-14s %6d", s->name, m);
    for (int kind = 0; kind < KINDS; kind++) {
        k_gemm_mma(kind < LT);
        k_gemm_plan *plan = NULL;
        float ms = k_gemm_plan_create(&plan, m, s->n, s->k) == 0 &&
                           !strcmp(k_gemm_plan_kernel(plan), kind < LT ? "mma" : "cublaslt")
                       ? time_gemm(plan, y, x, w, m, s->n, s->k, ev)
                       : -1;
        k_gemm_plan_destroy(plan);
        if (ms > 0)
            printf("  %s %8.4f ms %6.1f TF/s ", names[kind], ms,
                   2.0 * m * (double)s->n * s->k / (ms * 1e9));
        else
            printf("  %s %8s    %6s      ", names[kind], "-", "-");
    }
    k_gemm_mma(0);
    printf("\n");
}

int main(int argc, char **argv) {
    int max_m = 528, kernels = 0, kernel_m = 0;
    double bw = 4280;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kernels")) {
            kernels = 1;
            continue;
        }
        if (i + 1 >= argc) break;
        if (!strcmp(argv[i], "--max-m"))
            max_m = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bw"))
            bw = atof(argv[++i]);
        else if (!strcmp(argv[i], "--m"))
            kernel_m = atoi(argv[++i]);
    }
    if (kernels) max_m = kernel_m > 2048 ? kernel_m : 2048;
    char desc[256];
    if (k_device_init(desc, sizeof desc) != 0) {
        fprintf(stderr, "bench_gemm: no GPU (%s)\n", desc);
        return 1;
    }
    static const shape shapes[] = {
        {"26b q local", 4096, 2816}, {"26b q global", 8192, 2816},  {"26b k local", 2048, 2816},
        {"26b o local", 2816, 4096}, {"26b gate", 2112, 2816},      {"26b down", 2816, 2112},
        {"26b router", 128, 2816},   {"31b q local", 8192, 5376},   {"31b k local", 4096, 5376},
        {"31b o local", 5376, 8192}, {"31b o global", 5376, 16384}, {"31b gate", 21504, 5376},
        {"31b down", 5376, 21504},   {"26b lm_head", 262144, 2816},
    };
    static const int heur[] = {1, 4, 16, 64, 0 /* max_m */};
    static const int ms[] = {1, 4, 16, 0 /* max_m */};
    size_t max_w = 0, max_x = 0, max_y = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t w = (size_t)shapes[i].n * (size_t)shapes[i].k;
        if (w > max_w) max_w = w;
        if ((size_t)shapes[i].k * (size_t)max_m > max_x)
            max_x = (size_t)shapes[i].k * (size_t)max_m;
        if ((size_t)shapes[i].n * (size_t)max_m > max_y)
            max_y = (size_t)shapes[i].n * (size_t)max_m;
    }
    bf16_t *w = k_device_alloc(max_w * 2), *x = k_device_alloc(max_x * 2),
           *y = k_device_alloc(max_y * 2);
    k_event *ev[2];
    if (!w || !x || !y || k_event_create(&ev[0]) || k_event_create(&ev[1])) return 1;
    k_fill_args f = {.out = w, .n = max_w, .seed = 1, .lo = -0.05f, .hi = 0.05f};
    k_fill_uniform(&f, NULL);
    f = (k_fill_args){.out = x, .n = max_x, .seed = 2, .lo = -1, .hi = 1};
    k_fill_uniform(&f, NULL);
    if (kernels) {
        printf("# %s; ms per call (median of 20) and TFLOP/s, prefill sizes\n", desc);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            if (shapes[i].n > 65536) continue; /* the LM head: a prompt's last row only */
            if (kernel_m > 0) {
                time_kernels(&shapes[i], kernel_m, y, x, w, ev);
                continue;
            }
            time_kernels(&shapes[i], 1024, y, x, w, ev);
            time_kernels(&shapes[i], 2048, y, x, w, ev);
        }
        return 0;
    }
    printf("# %s; ms per call (median of 20), max_m %d\n", desc, max_m);
    printf("%-14s %8s %9s %9s %9s %9s %9s %6s\n", "shape", "heur_m", "m=1", "m=4", "m=16", "m=max",
           "floor@1", "ws MB");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        for (size_t h = 0; h < sizeof heur / sizeof heur[0]; h++) {
            int hm = heur[h] ? heur[h] : max_m;
            k_gemm_plan *plan = NULL;
            if (k_gemm_plan_create_at(&plan, max_m, hm, s->n, s->k) != 0) {
                printf("%-14s %8d no algorithm\n", s->name, hm);
                continue;
            }
            printf("%-14s %8d", s->name, hm);
            for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++)
                printf(" %9.4f", time_gemm(plan, y, x, w, ms[j] ? ms[j] : max_m, s->n, s->k, ev));
            printf(" %9.4f %6zu\n", (double)s->n * s->k * 2 / (bw * 1e6),
                   k_gemm_plan_workspace(plan) >> 20);
            k_gemm_plan_destroy(plan);
        }
    }
    return 0;
}
