/* runtime/text/par.h - independent pieces of host work side by side.
 *
 * par_for calls fn(ctx, i, worker) once for every i in [0, n) on up to `threads` threads, the
 * calling thread being worker 0 and the others 1..threads-1, and returns when every i has run.
 * Pieces are handed out in increasing i as workers come free, so fn must not depend on which
 * worker runs it or in what order: a worker index only picks per-worker scratch. Where a thread
 * cannot be started the others (the caller at least) take its share, so the result never
 * depends on how many threads ran. Returns the number of workers that ran. */
#ifndef G4_RUNTIME_PAR_H
#define G4_RUNTIME_PAR_H

int par_for(int n, int threads, void (*fn)(void *ctx, int i, int worker), void *ctx);

/* CPUs this process may use (at least 1). */
int par_cpus(void);

#endif
