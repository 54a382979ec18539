/* tests/bench/bench_decode.c - decode step time of one model on the engine, against the
 * memory-bandwidth floor of docs/benchmarks.md, with a per-step breakdown.
 *
 * usage: bench_decode -c FILE [--set k=v]... [--batch B] [--prompt N] [--steps S] [--bw GBPS]
 * B sequences are prefilled with N random tokens each, then S decode steps of B rows are timed
 * (wall clock around each whole step, which ends in the greedy tokens' copy to the host, so it
 * includes the launch gaps). One more step records a CUDA event after every named step and
 * sums the intervals per step name (see profile), with the bytes each decode step must read and
 * the rate that gives (step_bytes); the last prefill chunk is profiled the same
 * way, printed after the decode figures. The profiled decode step is also the one a profiler
 * started with collection off records (ncu --profile-from-start off). The floor counts the bytes a
 * step must read: every non-expert weight once, the experts B rows route to per layer, the LM head,
 * and the KV of every row (window-capped for the local family). Expert count: top_k at B = 1; at B
 * > 1 the expected number of distinct experts when each row picks top_k of n_expert independently
 * and evenly, n_expert * (1 - (1 - top_k / n_expert)^B) (82 of 128 at B = 16 on the 26B-A4B), which
 * is what the dummy weights' router does to within sampling noise. A benchmark, not a test: it
 * prints figures only.
 *
 * --trace T (a binary of `./build.sh trace`): T more decode steps as serving runs them (CUDA
 * graphs as configured, no hook), every kernel of kernels/ stamped when the grid before it has
 * finished (kernels/common.cuh, K_TRACE_MARK); the gap from one stamp to the next is what that
 * kernel cost the step, PDL's overlap included, and the gaps are summed per kernel name over the
 * T steps. A gap also holds any launch that is not of kernels/ (cuBLASLt's GEMMs) that follows
 * the kernel; the step's last kernel has no next stamp and is left out. The global timer ticks
 * in microseconds on some cards, hence several steps. */
#include "runtime/base/config.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/kv_pool.h"
#include "runtime/base/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_STEP_NAMES 64

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One step's named steps. On the GPU a CUDA event is recorded after every named step and
 * nothing synchronises until the step ends, so the step runs as in serving and the time
 * between consecutive events is the GPU time of each step plus its launch gap. On the CPU the
 * wall clock is read at each step instead. */
#define MAX_EVENTS 4096

typedef struct profile {
    const char *names[MAX_STEP_NAMES];
    double ms[MAX_STEP_NAMES];
    long calls[MAX_STEP_NAMES];
    int n, gpu;
    long layer_calls; /* op calls made inside decoder layers */
    double last;
    k_event *ev[MAX_EVENTS + 1]; /* ev[0] before the step */
    int ev_step[MAX_EVENTS + 1]; /* the name index each event closes */
    int n_ev;
    /* attention by layer kind (0 sliding, 1 full): its windowed and global layers run different
     * kernels (head dims 256 and 512), so the breakdown's one row is split again below it */
    const g4_model_desc *kinds;
    signed char ev_kind[MAX_EVENTS + 1]; /* -1: not an attention step */
    double att_ms[2];
    long att_calls[2];
    /* decode profile only (m non-NULL): what each named step must read, for its GB/s */
    const g4_model_desc *m;
    int rows, ctx, local_elem; /* ctx: the keys a row attends over; local_elem: its pool's bytes */
    double distinct;           /* experts the rows route to per layer (as the floor counts) */
    double bytes[MAX_STEP_NAMES];
} profile;

/* Bytes one named step of layer `layer` must read from HBM in a decode step of p->rows rows:
 * its weights (bf16; the routed experts' as the floor counts them), attention its rows' K and
 * V (window-capped on sliding layers), the LM head its table. Row ops and the rest move only
 * activations, a few KB, counted as 0: their time is latency, not bytes. */
static double step_bytes(const profile *p, int layer, const char *step) {
    const g4_model_desc *m = p->m;
    const char *plus = strchr(step, '+');
    if (plus) { /* a fused step ("q_proj+k_proj+v_proj"): what its members read */
        char first[64];
        snprintf(first, sizeof first, "%.*s", (int)(plus - step), step);
        return step_bytes(p, layer, first) + step_bytes(p, layer, plus + 1);
    }
    if (!strcmp(step, "lm_head")) return 2.0 * m->n_vocab * m->d_model;
    if (layer < 0) return 0;
    int full = m->layer_kind[layer] == G4_LAYER_FULL;
    double hd = full ? m->head_dim_global : m->head_dim_local, dm = m->d_model;
    double kv = (full ? m->n_kv_head_global : m->n_kv_head_local) * hd;
    if (!strcmp(step, "q_proj") || !strcmp(step, "o_proj")) return 2.0 * m->n_head * hd * dm;
    if (!strcmp(step, "k_proj") || !strcmp(step, "v_proj")) return 2.0 * kv * dm;
    if (!strcmp(step, "gate_proj") || !strcmp(step, "up_proj") || !strcmp(step, "down_proj"))
        return 2.0 * g4_model_d_ff(m, layer) * dm;
    if (!strcmp(step, "router_proj")) return 2.0 * m->n_expert * dm;
    if (!strcmp(step, "experts")) return p->distinct * 3.0 * m->d_expert * dm * 2.0;
    if (!strcmp(step, "ple_gate") || !strcmp(step, "ple_proj")) return 2.0 * m->d_ple * dm;
    if (!strcmp(step, "attention")) {
        int keys = full || p->ctx < m->window ? p->ctx : m->window;
        return (double)keys * kv * 2.0 * (full ? 2 : p->local_elem) * p->rows;
    }
    return 0;
}

static int name_index(profile *p, const char *step) {
    int i = 0;
    while (i < p->n && strcmp(p->names[i], step) != 0)
        i++;
    if (i == p->n && p->n < MAX_STEP_NAMES) p->names[p->n++] = step;
    return i;
}

static int profile_hook(g4_state *s, int layer, const char *step) {
    profile *p = s->hook_ctx;
    if (layer >= 0) p->layer_calls++;
    int i = name_index(p, step);
    if (p->m && i < MAX_STEP_NAMES) p->bytes[i] += step_bytes(p, layer, step);
    const int kind = p->kinds && layer >= 0 && !strcmp(step, "attention")
                         ? p->kinds->layer_kind[layer] == G4_LAYER_FULL
                         : -1;
    if (p->gpu) {
        if (p->n_ev >= MAX_EVENTS || i >= MAX_STEP_NAMES) return 0;
        p->ev_step[++p->n_ev] = i;
        p->ev_kind[p->n_ev] = (signed char)kind;
        return k_event_record(p->ev[p->n_ev], s->stream);
    }
    double t = now_ms();
    if (i < MAX_STEP_NAMES) {
        p->ms[i] += t - p->last;
        p->calls[i]++;
    }
    if (kind >= 0) {
        p->att_ms[kind] += t - p->last;
        p->att_calls[kind]++;
    }
    p->last = t;
    return 0;
}

/* Sums the event intervals into the per-name totals (GPU). */
static int profile_collect(profile *p) {
    for (int k = 1; k <= p->n_ev; k++) {
        float ms = 0;
        if (k_event_elapsed_ms(p->ev[k - 1], p->ev[k], &ms) != 0) return -1;
        p->ms[p->ev_step[k]] += ms;
        p->calls[p->ev_step[k]]++;
        if (p->ev_kind[k] >= 0) {
            p->att_ms[p->ev_kind[k]] += ms;
            p->att_calls[p->ev_kind[k]]++;
        }
    }
    return 0;
}

static void profile_print(const profile *p, const char *what) {
    double total = 0;
    for (int i = 0; i < p->n; i++)
        total += p->ms[i];
    printf("%s breakdown (one step; %s; %.2f ms in all):\n", what,
           p->gpu ? "CUDA events after every named step, no synchronisation inside the step"
                  : "wall clock after every named step",
           total);
    printf("%-42s %10s %8s %8s %10s %8s\n", "step", "ms", "share", "calls", "GB", "GB/s");
    for (int i = 0; i < p->n; i++) {
        printf("%-42s %10.3f %7.1f%% %8ld", p->names[i], p->ms[i], 100 * p->ms[i] / total,
               p->calls[i]);
        if (p->m && p->bytes[i] > 0)
            printf(" %10.4f %8.0f", p->bytes[i] / 1e9, p->bytes[i] / 1e6 / p->ms[i]);
        else
            printf(" %10s %8s", "-", "-");
        printf("\n");
    }
    if (p->att_calls[0] && p->att_calls[1])
        printf("attention by layer kind: sliding %.3f ms (%ld calls), full %.3f ms (%ld calls)\n",
               p->att_ms[0], p->att_calls[0], p->att_ms[1], p->att_calls[1]);
}

/* Bytes of every non-expert weight a decode step reads; *experts_all gets the bytes of all
 * experts (gate_up and down of each). */
static double weight_bytes(const g4_model_desc *m, double *experts_all) {
    double b = (double)m->n_vocab * m->d_model; /* tied LM head */
    *experts_all = 0;
    for (int l = 0; l < m->n_layer; l++) {
        int full = m->layer_kind[l] == G4_LAYER_FULL;
        double hd = full ? m->head_dim_global : m->head_dim_local;
        double kv = (full ? m->n_kv_head_global : m->n_kv_head_local) * hd;
        int owns = g4_model_kv_donor(m, l) == l;
        b += 2.0 * m->n_head * hd * m->d_model; /* q, o */
        if (owns) b += kv * m->d_model * ((full && m->k_eq_v) ? 1 : 2);
        b += 3.0 * g4_model_d_ff(m, l) * m->d_model;
        if (m->n_expert) {
            b += (double)m->n_expert * m->d_model;                              /* router */
            *experts_all += 2.0 * m->n_expert * 3.0 * m->d_expert * m->d_model; /* bytes */
        }
        if (m->d_ple) b += 2.0 * m->d_ple * m->d_model;
    }
    return 2.0 * b; /* bf16 */
}

static double kv_bytes(const g4_model_desc *m, int ctx, int rows) {
    double b = 0;
    for (int l = 0; l < m->n_layer; l++) {
        int full = m->layer_kind[l] == G4_LAYER_FULL;
        int keys = full || ctx < m->window ? ctx : m->window;
        double hd = full ? m->head_dim_global : m->head_dim_local;
        b += (double)keys * (full ? m->n_kv_head_global : m->n_kv_head_local) * hd * 2 * 2;
    }
    return b * rows;
}

/* The per-kernel-name sums of the trace. */
typedef struct trace_row {
    char name[96];
    double us; /* gaps from the kernel's end of wait to the next kernel's */
    long gaps;
    double held_us; /* from its first block reaching the wait to the wait's end */
    long held;
} trace_row;

static int cmp_trace_row(const void *a, const void *b) {
    const trace_row *x = a, *y = b;
    return x->us < y->us ? 1 : x->us > y->us ? -1 : 0;
}

/* The stamps' launches in order: each kernel's end-of-wait stamp (at_wait 0) with the time its
 * first block reached the wait (the at_wait stamp of the same name since the previous end of
 * wait: with PDL a kernel is launched once the one before it has passed its own wait, so one
 * kernel at most is resident ahead), or a negative held time where it has none. */
typedef struct trace_launch {
    const char *name;
    unsigned long long end_wait_ns;
    double held_us;
} trace_launch;

static int trace_launches(const k_trace_stamp *st, int n, trace_launch *out) {
    int k = 0, pending = -1;
    for (int i = 0; i < n; i++) {
        if (st[i].at_wait) {
            pending = i;
            continue;
        }
        out[k].name = st[i].name;
        out[k].end_wait_ns = st[i].t_ns;
        out[k].held_us = pending >= 0 && strcmp(st[pending].name, st[i].name) == 0 &&
                                 st[pending].t_ns <= st[i].t_ns
                             ? (double)(st[i].t_ns - st[pending].t_ns) / 1e3
                             : -1.0;
        pending = -1;
        k++;
    }
    return k;
}

/* Adds a step's launches to rows (n_rows of at most max_rows); the step's span goes to *span_us. */
static void trace_add(const trace_launch *l, int n, trace_row *rows, int *n_rows, int max_rows,
                      double *span_us) {
    for (int i = 0; i + 1 < n; i++) {
        int r = 0;
        while (r < *n_rows && strcmp(rows[r].name, l[i].name) != 0)
            r++;
        if (r == *n_rows) {
            if (*n_rows == max_rows) continue;
            snprintf(rows[r].name, sizeof rows[r].name, "%s", l[i].name);
            (*n_rows)++;
        }
        rows[r].us += (double)(l[i + 1].end_wait_ns - l[i].end_wait_ns) / 1e3;
        rows[r].gaps++;
        if (l[i].held_us >= 0) {
            rows[r].held_us += l[i].held_us;
            rows[r].held++;
        }
    }
    if (n > 1) *span_us += (double)(l[n - 1].end_wait_ns - l[0].end_wait_ns) / 1e3;
}

/* The last traced step's first kernels in launch order with their gaps: a layer's sequence
 * (the per-name sums above cannot say which of a name's calls is slow). */
#define TRACE_ORDER 64
static void trace_print_order(const trace_launch *l, int n, int first) {
    printf("kernel trace, the last step's first %d kernels in order (gap to the next and time "
           "resident before its wait ended, us; - where not stamped):\n",
           first < n - 1 ? first : n - 1);
    for (int i = 0; i + 1 < n && i < first; i++) {
        printf("%4d %-60s %8.2f", i, l[i].name,
               (double)(l[i + 1].end_wait_ns - l[i].end_wait_ns) / 1e3);
        if (l[i].held_us >= 0)
            printf(" %8.2f\n", l[i].held_us);
        else
            printf(" %8s\n", "-");
    }
}

static void trace_print(trace_row *rows, int n_rows, int steps, int launches, double span_us) {
    qsort(rows, (size_t)n_rows, sizeof *rows, cmp_trace_row);
    printf("kernel trace (%d graphed steps, %d kernels a step; first end of wait to last %.1f us "
           "a step; a gap runs from a kernel's end of wait to the next's; resident: from its "
           "first block reaching the wait to the wait's end, a call):\n",
           steps, launches / (steps > 0 ? steps : 1), span_us / (steps > 0 ? steps : 1));
    printf("%-60s %10s %8s %8s %10s %10s\n", "kernel", "us/step", "share", "calls", "us/call",
           "resident");
    for (int r = 0; r < n_rows; r++)
        printf("%-60s %10.1f %7.1f%% %8.1f %10.2f %10.2f\n", rows[r].name, rows[r].us / steps,
               100 * rows[r].us / (span_us > 0 ? span_us : 1), (double)rows[r].gaps / steps,
               rows[r].us / (double)(rows[r].gaps > 0 ? rows[r].gaps : 1),
               rows[r].held_us / (double)(rows[r].held > 0 ? rows[r].held : 1));
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    g4_config cfg;
    config_defaults(&cfg);
    int batch = 1, prompt = 1024, steps = 32, trace = 0;
    double bw = 4280; /* GB/s: the H200 of record's measured copy bandwidth (docs/benchmarks.md) */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-c") && config_load(&cfg, argv[i + 1])) return 2;
        if (!strcmp(argv[i], "--set") && config_set(&cfg, argv[i + 1])) return 2;
        if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--prompt")) prompt = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--bw")) bw = atof(argv[i + 1]);
        if (!strcmp(argv[i], "--trace")) trace = atoi(argv[i + 1]);
    }
    if (batch < 1 || batch > cfg.serve.max_batch || prompt < 1 || steps < 1 || trace < 0 ||
        prompt + steps + 1 + trace > cfg.serve.max_context || config_finish(&cfg) != 0) {
        fprintf(stderr, "bench_decode: bad arguments (batch <= serve.max_batch, prompt + steps "
                        "+ trace < serve.max_context)\n");
        return 2;
    }
    log_set_level(LOG_WARN);
    engine *e = NULL;
    if (engine_open(&cfg, 0, &e) != 0) return 1;
    kv_pool_shape shape;
    engine_kv_shape(e, &shape);
    kv_pool *pool = kv_pool_create_shape(&shape); /* the scheduler's side of the KV budget */
    if (!pool) return 1;
    const g4_model_desc *m = engine_model(e);
    int32_t *ids = calloc((size_t)cfg.serve.prefill_chunk + (size_t)batch, sizeof *ids);
    int32_t *pos = calloc((size_t)cfg.serve.prefill_chunk + (size_t)batch, sizeof *pos);
    int32_t *seq = calloc((size_t)cfg.serve.prefill_chunk + (size_t)batch, sizeof *seq);
    int32_t *src = calloc((size_t)batch, sizeof *src);
    bf16_t *logits = malloc(sizeof *logits * (size_t)batch * (size_t)m->n_vocab);
    double *t = calloc((size_t)steps, sizeof *t), ttft = 0;
    srand(1);
    static profile prof, pre; /* the last decode step; the last prefill chunk */
    prof.gpu = pre.gpu = engine_on_gpu(e);
    prof.m = m;
    prof.kinds = pre.kinds = m;
    prof.rows = batch;
    prof.ctx = prompt + steps + 1; /* the profiled step is the last, at position prompt + steps */
    prof.local_elem = strcmp(engine_variant(e), "local_fp8") == 0 ? 1 : 2;
    prof.distinct =
        m->n_expert ? m->n_expert * (1.0 - pow(1.0 - (double)m->top_k / m->n_expert, batch)) : 0;
    for (int k = 0; prof.gpu && k <= MAX_EVENTS; k++)
        if (k_event_create(&prof.ev[k]) != 0 || k_event_create(&pre.ev[k]) != 0) return 1;
    /* prefill every sequence in chunks, twice: a first pass that also pays what a process's
     * first prefill pays (each kernel's module loaded on its first launch, workspaces grown),
     * timed apart, its sequences then freed; then the measured pass, whose last chunk of the
     * last sequence is profiled */
    double cold = 0;
    /* prompt tokens, as the scheduler marks them (their projections may take other kernels) */
    uint8_t *prompt_rows = malloc((size_t)cfg.serve.prefill_chunk);
    if (!prompt_rows) return 1;
    memset(prompt_rows, 1, (size_t)cfg.serve.prefill_chunk);
    for (int pass = 0; pass < 2; pass++) {
        srand(1);
        if (pass == 1) {
            cold = ttft;
            ttft = 0;
            for (int b = 0; b < batch; b++)
                kv_pool_free_seq(pool, b);
        }
        for (int b = 0; b < batch; b++)
            for (int p0 = 0; p0 < prompt; p0 += cfg.serve.prefill_chunk) {
                int n =
                    prompt - p0 < cfg.serve.prefill_chunk ? prompt - p0 : cfg.serve.prefill_chunk;
                for (int i = 0; i < n; i++) {
                    ids[i] = i + p0 == 0 ? 2 : 1000 + rand() % (m->n_vocab - 1000);
                    pos[i] = p0 + i;
                    seq[i] = b;
                }
                src[0] = n - 1;
                kv_pool_release_front(pool, b, p0);
                if (kv_pool_reserve(pool, b, p0, p0 + n) != 0) return 1;
                int last = pass == 1 && b == batch - 1 && p0 + n >= prompt;
                pre.last = now_ms();
                if (last && pre.gpu && k_event_record(pre.ev[0], NULL) != 0) return 1;
                double t0 = now_ms();
                engine_batch eb = {.pool = pool,
                                   .rows = n,
                                   .ids = ids,
                                   .pos = pos,
                                   .seq = seq,
                                   .out_rows = 1,
                                   .out_src = src,
                                   .prompt = prompt_rows};
                if (engine_step(e, &eb, logits, last ? profile_hook : NULL, &pre) != 0) return 1;
                ttft += now_ms() - t0;
                if (last && pre.gpu && profile_collect(&pre) != 0) return 1;
            }
    }
    /* decode rows are greedy: the engine's argmax, no logits copied (as serving does) */
    int32_t *argmax = calloc((size_t)batch, sizeof *argmax);
    uint8_t *need = calloc((size_t)batch, 1);
    static k_trace_stamp stamps[K_TRACE_MAX];
    static trace_launch launches[K_TRACE_MAX];
    static trace_row trows[256];
    int n_trows = 0, n_launches = 0;
    double trace_span = 0;
    if (trace && k_trace_start() != 0) {
        fprintf(stderr, "bench_decode: --trace needs a binary of ./build.sh trace and a GPU\n");
        return 2;
    }
    k_trace_stop(); /* no stamps in the timed steps: bound again for the traced ones */
    /* the last step of the timed ones is the profiled one; trace steps follow it */
    for (int s = 0; s <= steps + trace; s++) {
        for (int b = 0; b < batch; b++) {
            ids[b] = 1000 + rand() % (m->n_vocab - 1000);
            pos[b] = prompt + s;
            seq[b] = b;
            src[b] = b;
            kv_pool_release_front(pool, b, pos[b]);
            if (kv_pool_reserve(pool, b, pos[b], pos[b] + 1) != 0) return 1;
        }
        engine_batch eb = {.pool = pool,
                           .rows = batch,
                           .ids = ids,
                           .pos = pos,
                           .seq = seq,
                           .out_rows = batch,
                           .out_src = src,
                           .need_logits = need,
                           .argmax = argmax};
        if (s > steps) { /* a traced step: as serving runs it */
            int n = 0;
            if ((s == steps + 1 && k_trace_start() != 0) ||
                engine_step(e, &eb, logits, NULL, NULL) != 0 ||
                k_trace_take(stamps, K_TRACE_MAX, &n) != 0)
                return 1;
            const int nl = trace_launches(stamps, n, launches);
            trace_add(launches, nl, trows, &n_trows, 256, &trace_span);
            n_launches += nl;
            if (s == steps + trace) trace_print_order(launches, nl, TRACE_ORDER);
            continue;
        }
        prof.last = now_ms();
        if (prof.gpu && s == steps && k_event_record(prof.ev[0], NULL) != 0) return 1;
        double t0 = now_ms();
        /* the profiled step is also the one a profiler started with collection off sees */
        if (s == steps && prof.gpu && k_profiler_range(1) != 0) return 1;
        if (engine_step(e, &eb, logits, s == steps ? profile_hook : NULL, &prof) != 0) return 1;
        if (s == steps && prof.gpu && (k_profiler_range(0) != 0 || profile_collect(&prof) != 0))
            return 1;
        if (s < steps) t[s] = now_ms() - t0;
    }
    qsort(t, (size_t)steps, sizeof *t, cmp_double);
    double experts_all, wb = weight_bytes(m, &experts_all);
    double distinct = prof.distinct;
    double routed = m->n_expert ? experts_all * distinct / m->n_expert : 0;
    double floor_bytes = wb + routed + kv_bytes(m, prompt, batch);
    double floor_ms = floor_bytes / (bw * 1e6);
    double med = t[steps / 2];
    printf("model %s, variant %s, batch %d, context %d, %d steps\n", m->name, engine_variant(e),
           batch, prompt, steps);
    printf("decode step: median %.3f ms, p90 %.3f ms, min %.3f ms (%.1f tok/s at batch %d)\n", med,
           t[steps * 9 / 10], t[0], 1e3 * batch / med, batch);
    printf("floor: %.3f GB per step (weights %.3f, routed experts %.3f = %.1f distinct per layer, "
           "KV %.3f) / %.0f GB/s = %.3f ms; fraction of floor %.3f\n",
           floor_bytes / 1e9, wb / 1e9, routed / 1e9, distinct, kv_bytes(m, prompt, batch) / 1e9,
           bw, floor_ms, floor_ms / med);
    printf("prefill: %d tokens x %d sequences in %.1f ms\n", prompt, batch, ttft);
    printf("prefill, the process's first (kernels loaded on first launch): %.1f ms\n", cold);
    long long pe_calls, pe_items, pe_rows;
    k_moe_prompt_stats(&pe_calls, &pe_items, &pe_rows);
    if (pe_calls > 0)
        printf("prompt experts (serve.prompt_experts): %lld calls, %lld items in %lld tile rows "
               "(%.2f rows an item)\n",
               pe_calls, pe_items, pe_rows, (double)pe_rows / (double)pe_items);
    profile_print(&prof, "per-step");
    printf("op calls per decoder layer: %.1f (moe_experts launches 4 kernels, attention 2, the "
           "others 1)\n",
           (double)prof.layer_calls / m->n_layer);
    char what[96];
    snprintf(what, sizeof what, "prefill (the last %d-token chunk, at position %d)",
             prompt % cfg.serve.prefill_chunk
                 ? prompt % cfg.serve.prefill_chunk
                 : (prompt < cfg.serve.prefill_chunk ? prompt : cfg.serve.prefill_chunk),
             prompt - 1);
    profile_print(&pre, what);
    if (trace) {
        trace_print(trows, n_trows, trace, n_launches, trace_span);
        k_trace_stop();
    }
    engine_close(e);
    kv_pool_destroy(pool);
    free(ids);
    free(pos);
    free(seq);
    free(src);
    free(logits);
    free(prompt_rows);
    free(t);
    free(argmax);
    free(need);
    for (int k = 0; prof.gpu && k <= MAX_EVENTS; k++)
        k_event_destroy(prof.ev[k]);
    return 0;
}
