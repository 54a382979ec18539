/* tests/gpu/row_slices.h - a CPU twin's rows in slices, one thread a slice: the references
 * compute each row alone (from its own ids, or its own position and keys), so the slices give
 * the whole call's outputs bit for bit, and a slice that fails fails the call. The GPU box has
 * 16 cores; a twin on one took most of a test program's time there. Header-only (static) since
 * each test program is linked alone against the kernels. */
#ifndef G4_TESTS_GPU_ROW_SLICES_H
#define G4_TESTS_GPU_ROW_SLICES_H

#include <pthread.h>
#include <unistd.h>

#define ROW_SLICES_MAX 32

/* One slice's work: rows [r0, r1) of the call ctx describes; returns 0 or an error code. */
typedef int (*row_slice_fn)(const void *ctx, int r0, int r1);

typedef struct row_slice {
    row_slice_fn run;
    const void *ctx;
    int r0, r1, rc;
} row_slice;

static inline void *row_slice_entry(void *p) {
    row_slice *s = p;
    s->rc = s->run(s->ctx, s->r0, s->r1);
    return NULL;
}

/* run over rows [0, rows) in as many slices as there are cores (at most ROW_SLICES_MAX and at
 * most rows); the OR of the slices' results. A slice whose thread cannot start runs here. */
static inline int run_row_slices(int rows, row_slice_fn run, const void *ctx) {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cores < 1 ? 1 : cores > ROW_SLICES_MAX ? ROW_SLICES_MAX : (int)cores;
    if (n > rows) n = rows;
    if (n <= 1) return run(ctx, 0, rows);
    row_slice s[ROW_SLICES_MAX];
    pthread_t th[ROW_SLICES_MAX];
    int started[ROW_SLICES_MAX] = {0}, rc = 0;
    for (int i = 0; i < n; i++) {
        s[i] = (row_slice){.run = run,
                           .ctx = ctx,
                           .r0 = (int)((long long)rows * i / n),
                           .r1 = (int)((long long)rows * (i + 1) / n)};
        started[i] = pthread_create(&th[i], NULL, row_slice_entry, &s[i]) == 0;
        if (!started[i]) row_slice_entry(&s[i]);
    }
    for (int i = 0; i < n; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        rc |= s[i].rc;
    }
    return rc;
}

#endif
