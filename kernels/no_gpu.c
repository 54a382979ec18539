/* kernels/no_gpu.c - the GPU side of a build made without nvcc: every launcher refuses, so
 * the engine falls back to the CPU reference backend with one clear log line, and the binary
 * still links (with graph/schedules_none.c for the schedule table). Never linked into a GPU
 * build. */
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

int k_gemm_plan_heur_m(const k_gemm_plan *plan) {
    (void)plan;
    return 0;
}

size_t k_gemm_plan_workspace(const k_gemm_plan *plan) {
    (void)plan;
    return 0;
}

void k_gemm_plan_destroy(k_gemm_plan *plan) { (void)plan; }

void k_gemm_plain(int on) { (void)on; }
void k_gemm_mma(int on) { (void)on; }
void k_gemm_auto(int on) { (void)on; }
void k_gemm_prompt_plans(int on) { (void)on; }
int k_stream_fork(g4_stream from, g4_stream to) {
    (void)from, (void)to;
    return K_ERR_DEVICE;
}
int k_stream_join(g4_stream main, g4_stream side) {
    (void)main, (void)side;
    return K_ERR_DEVICE;
}
int k_stream_branch_setup(void) { return K_ERR_DEVICE; }
int k_gemm_side_stream(g4_stream st) {
    (void)st;
    return K_ERR_DEVICE;
}
void k_set_moe_prompt_experts(int on) { (void)on; }
int k_set_moe_prompt_tile(int items) {
    return items < K_PROMPT_TILE_MIN || items > K_PROMPT_TILE_MAX ? K_ERR_SHAPE : K_OK;
}
int k_moe_prompt_prepare(int d_model, int d_expert, int n_expert) {
    (void)d_model, (void)d_expert, (void)n_expert;
    return K_OK;
}
void k_moe_prompt_stats(long long *calls, long long *items, long long *tile_rows) {
    *calls = *items = *tile_rows = 0;
}
int k_gemm_plan_has_prompt(const k_gemm_plan *plan) {
    (void)plan;
    return 0;
}
const char *k_gemm_plan_kernel(const k_gemm_plan *plan) {
    (void)plan;
    return NULL;
}
void k_set_pdl(int on) { (void)on; }
void k_set_wide_loads(int on) { (void)on; }

int k_gemm(const k_gemm_args *a, g4_stream st) {
    (void)a, (void)st;
    return K_ERR_DEVICE;
}

int k_gemm_group(const k_gemm_group_args *a, g4_stream st) {
    (void)a, (void)st;
    return K_ERR_DEVICE;
}
void k_gemm_fuse(int on) { (void)on; }
void k_set_attn_fold(int on) { (void)on; }
void k_set_attn_mma(int on) { (void)on; }
void k_set_attn_query_tiles(int rows) { (void)rows; }
void k_set_attn_fp8_frags(int on) { (void)on; }
void k_set_attn_early_lookup(int on) { (void)on; }
void k_set_attn_longest_first(int on) { (void)on; }
void k_set_attn_stats_together(int on) { (void)on; }
void k_set_attn_tile_fold(int on) { (void)on; }
long long k_attn_tile_folds(void) { return 0; }
long long k_attn_tile_launches(void) { return 0; }
void k_set_attn_strided_tiles(int on) { (void)on; }
long long k_attn_strided_launches(void) { return 0; }
void k_set_attn_pair_tiles(int form) { (void)form; }
long long k_attn_pair_launches(void) { return 0; }
void k_set_attn_flash(int on) { (void)on; }
void k_set_attn_prep_rows(int on) { (void)on; }
long long k_attn_flash_launches(void) { return 0; }
void k_set_attn_prompt(int on) { (void)on; }
long long k_attn_prompt_launches(void) { return 0; }
void k_set_moe_prefill_tiles(int mode) { (void)mode; }
void k_set_moe_ring_zfill(int on) { (void)on; }
void k_set_moe_half_tiles(int mode) { (void)mode; }
void k_set_moe_weights_a(int mode) { (void)mode; }
void k_set_row_chain(int mode) { (void)mode; }
int k_row_ops_chained(const k_row_ops_args *a) {
    (void)a;
    return 0;
}
int k_trace_start(void) { return K_ERR_DEVICE; }
int k_trace_take(k_trace_stamp *out, int max, int *n) {
    (void)out;
    (void)max;
    *n = 0;
    return K_ERR_DEVICE;
}
void k_trace_stop(void) {}
void k_set_moe_bucket_in_up(int on) { (void)on; }
void k_set_moe_route_lanes(int on) { (void)on; }
void k_set_moe_expert_stream(int max_items) { (void)max_items; }
int k_gemm_group_fuses(const k_gemm_group_args *a) {
    (void)a;
    return 0;
}

int k_fill_uniform(const k_fill_args *a, g4_stream st) {
    (void)a, (void)st;
    return K_ERR_DEVICE;
}

int k_argmax(const k_argmax_args *a, g4_stream st) {
    (void)a, (void)st;
    return K_ERR_DEVICE;
}

int k_topk(const k_topk_args *a, g4_stream st) {
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

int k_profiler_range(int on) {
    (void)on;
    return K_ERR_DEVICE;
}

int k_stream_create(g4_stream *out) {
    *out = NULL;
    return K_ERR_DEVICE;
}

void k_stream_destroy(g4_stream st) { (void)st; }

int k_stream_sync(g4_stream st) {
    (void)st;
    return K_ERR_DEVICE;
}

void *k_host_alloc_pinned(size_t bytes) {
    (void)bytes;
    return NULL;
}

void k_host_free_pinned(void *p) { (void)p; }

int k_copy_to_device_async(void *dst, const void *src, size_t bytes, g4_stream st) {
    (void)dst, (void)src, (void)bytes, (void)st;
    return K_ERR_DEVICE;
}

int k_copy_to_host_async(void *dst, const void *src, size_t bytes, g4_stream st) {
    (void)dst, (void)src, (void)bytes, (void)st;
    return K_ERR_DEVICE;
}

int k_capture_begin(g4_stream st) {
    (void)st;
    return K_ERR_DEVICE;
}

int k_capture_end(g4_stream st, k_graph **out) {
    (void)st;
    *out = NULL;
    return K_ERR_DEVICE;
}

int k_graph_launch(k_graph *g, g4_stream st) {
    (void)g, (void)st;
    return K_ERR_DEVICE;
}

void k_graph_destroy(k_graph *g) { (void)g; }

size_t k_moe_experts_workspace(int rows, int d_model, int d_expert, int n_expert, int top_k) {
    (void)rows, (void)d_model, (void)d_expert, (void)n_expert, (void)top_k;
    return 0;
}

size_t k_attention_workspace(void) { return 0; }

int k_workspace_reserve(size_t moe_bytes, size_t attn_bytes) {
    (void)moe_bytes, (void)attn_bytes;
    return K_ERR_DEVICE;
}
