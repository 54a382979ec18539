/* runtime/text/par.c - par_for: a shared counter hands out the pieces; threads live for one call
 * (the callers run once per engine step, where thread start-up is microseconds against the
 * milliseconds of work they split). */
#include "runtime/text/par.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define PAR_MAX_THREADS 64

typedef struct par_job {
    atomic_int next;
    int n;
    void (*fn)(void *ctx, int i, int worker);
    void *ctx;
} par_job;

typedef struct par_worker {
    par_job *job;
    int id;
} par_worker;

static void par_run(par_job *j, int worker) {
    for (int i = atomic_fetch_add(&j->next, 1); i < j->n; i = atomic_fetch_add(&j->next, 1))
        j->fn(j->ctx, i, worker);
}

static void *par_thread(void *arg) {
    par_worker *w = arg;
    par_run(w->job, w->id);
    return NULL;
}

int par_for(int n, int threads, void (*fn)(void *ctx, int i, int worker), void *ctx) {
    if (n <= 0 || !fn) return 0;
    if (threads > n) threads = n;
    if (threads > PAR_MAX_THREADS) threads = PAR_MAX_THREADS;
    if (threads < 1) threads = 1;
    par_job job = {.n = n, .fn = fn, .ctx = ctx};
    atomic_init(&job.next, 0);
    pthread_t tid[PAR_MAX_THREADS];
    par_worker w[PAR_MAX_THREADS];
    int started = 0;
    for (int t = 1; t < threads; t++) {
        w[started] = (par_worker){.job = &job, .id = started + 1};
        if (pthread_create(&tid[started], NULL, par_thread, &w[started]) != 0) break;
        started++;
    }
    par_run(&job, 0);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    return started + 1;
}

int par_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
