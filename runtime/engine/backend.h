/* runtime/engine/backend.h - where an engine's steps run: the CPU reference (kernels/ref, the
 * executable spec) or CUDA (the .cu files of kernels/), one table of operations each, picked
 * once when the engine opens. Nothing above this seam asks which one it has.
 *
 * Owns: the memory of the step buffers, the KV stores and the page tables the kernels read;
 * the weights' residence (mapped on the CPU, uploaded with their GEMM plans on the GPU); how a
 * step's rows and changed tables reach the schedule; launching the forward pass (CUDA graphs
 * included); the argmax, top-k and logits copied back to the host.
 * Does not own: which rows make a step, the KV pool and its accounting (sched, kv_pool), the
 * config.json match and the KV shape (engine.c), the step's checks and its error text. */
#ifndef G4_BACKEND_H
#define G4_BACKEND_H

#include "runtime/engine/engine.h"
#include "runtime/engine/kv_pool.h"
#include "runtime/model/loader.h"

#include <stddef.h>
#include <stdlib.h>

typedef struct backend backend;

/* The blocks a backend has handed out, for its destroy to free. */
typedef struct backend_buffers {
    void **p;
    int n, cap;
} backend_buffers;

/* Room for one more block in b: 0, or -1 when out of host memory (b unchanged). */
static inline int backend_buffers_room(backend_buffers *b) {
    if (b->n < b->cap) return 0;
    int cap = b->cap ? 2 * b->cap : 32;
    void **grown = realloc(b->p, (size_t)cap * sizeof *grown);
    if (!grown) return -1;
    b->p = grown;
    b->cap = cap;
    return 0;
}

/* What a backend sizes itself for at open (the largest step). */
typedef struct backend_sizes {
    const g4_model_desc *model;
    int max_rows, max_out_rows; /* rows of a step, rows of it with logits */
    int max_batch, max_pages;   /* page-table rows (sequence slots) and their length */
} backend_sizes;

/* Where a failed step stopped, for the engine's message. */
typedef enum backend_stage {
    BACKEND_AT_GRAPH,   /* a decode graph's capture or replay (graph_rows says its size) */
    BACKEND_AT_STAGE,   /* the rows and tables on their way to the device */
    BACKEND_AT_FORWARD, /* the schedule (g4_state.failed_layer / failed_step say where) */
    BACKEND_AT_OUTPUTS  /* argmax, top-k or logits on their way back */
} backend_stage;

typedef struct backend_failure {
    backend_stage at;
    int graph_rows;
} backend_failure;

typedef struct backend_ops {
    /* 0 when this backend can run here; else -1 and why (shown in the engine's log). */
    int (*probe)(char *why, size_t why_len);
    /* A backend for cfg; device is what probe said (the device's name, or why there is none).
     * Returns NULL after logging. */
    backend *(*create)(const g4_config *cfg, const char *device);
    void (*destroy)(backend *bk);
    /* Zeroed memory the kernels can read and write, freed by destroy; NULL when out. */
    void *(*alloc)(backend *bk, size_t bytes);
    /* Bytes left for the KV budget when kv.budget_gb is 0 (auto); HUGE_VAL where memory
     * does not bound it (the pool is then sized for serve.max_batch full contexts). */
    double (*free_bytes)(backend *bk);
    /* Binds every tensor of m: from ld, or with ld NULL (model.weights = dummy) seeded random
     * from seed (ignored with a checkpoint); with the projections' plans for z's row counts.
     * Returns 0 or -1 after logging. */
    int (*bind_weights)(backend *bk, loader *ld, const g4_model_desc *m, uint64_t seed,
                        const backend_sizes *z, g4_weights *w);
    /* The generated schedule of (model, variant) for this backend, or NULL. */
    const g4_schedule *(*find_schedule)(const char *model, const char *variant);
    /* The per-step side after alloc'd state buffers exist: row metadata, argmax and top-k
     * buffers, the ops' workspaces, the stream and graph sizes. s->stream is set here. */
    int (*open_step)(backend *bk, const backend_sizes *z, g4_state *s);
    /* Where the kernels read the page tables: sets local->tables and global->tables when
     * they have a fixed home (the GPU's device copies), else leaves them to each step. */
    int (*bind_tables)(backend *bk, k_kv_view *local, k_kv_view *global);
    /* Runs one step of b with b->pool's page tables: s already holds b's host rows and the
     * hook; the backend may point s at its own copies. Writes the outputs b asks for and the
     * out rows' logits. Returns 0, or a negative K_ERR_* code with *where set. */
    int (*step)(backend *bk, const engine_batch *b, const g4_schedule *sch, g4_state *s,
                bf16_t *logits, backend_failure *where);
    /* Waits for the work enqueued so far (debug.sync): 0 or a K_ERR_* code. */
    int (*sync)(backend *bk);
    /* Copies n bytes of a state buffer to the host for a check, or NULL when the buffers are
     * host memory already. */
    int (*copy_to_host)(void *dst, const void *src, size_t n, g4_stream st);
    /* The line engine_open logs when ready. */
    void (*log_ready)(const backend *bk, const g4_model_desc *m, const char *variant,
                      double seconds);
    int on_gpu;         /* engine_on_gpu's answer */
    const char *memory; /* where the buffers live, for messages: "device" or "host" */
} backend_ops;

extern const backend_ops backend_cpu_ops; /* runtime/engine/backend_cpu.c */
extern const backend_ops backend_gpu_ops; /* runtime/engine/backend_gpu.c */

#endif
