/* kernels/device.cu - the device itself: finding a usable Hopper GPU, memory, copies and the
 * synchronisation runtime/ needs. Nothing here knows about models or requests. */
#include "kernels/common.cuh"

#include <cuda_profiler_api.h>
#include <string.h>

int k_pdl_enabled = 1;

extern "C" void k_set_pdl(int on) { k_pdl_enabled = on ? 1 : 0; }
int k_wide_loads = 0; /* serve.wide_loads' default: off until measured */
extern "C" void k_set_wide_loads(int on) { k_wide_loads = on ? 1 : 0; }

extern "C" int k_device_init(char *desc, size_t desc_len) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        snprintf(desc, desc_len, "no CUDA device");
        return K_ERR_DEVICE;
    }
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    snprintf(desc, desc_len, "%s (sm_%d%d), %d SMs, %.1f GB free of %.1f GB", p.name, p.major,
             p.minor, p.multiProcessorCount, (double)free_b / 1e9, (double)total_b / 1e9);
    if (p.major != 9) return K_ERR_DEVICE; /* built for sm_90a only */
    return K_OK;
}

extern "C" void *k_device_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
    return p;
}

extern "C" void k_device_free(void *p) { cudaFree(p); }

extern "C" int k_copy_to_device(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return K_OK;
}

extern "C" int k_copy_to_host(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return K_OK;
}

extern "C" int k_sync(void) {
    CUDA_CHECK(cudaDeviceSynchronize());
    return K_OK;
}

extern "C" size_t k_device_free_bytes(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
    return free_b;
}

static void *scratch_buf[K_SCRATCH_KINDS];
static size_t scratch_bytes[K_SCRATCH_KINDS];

int k_scratch(enum k_scratch_kind kind, size_t bytes, cudaStream_t st, void **out) {
    if (bytes <= scratch_bytes[kind]) {
        *out = scratch_buf[kind];
        return K_OK;
    }
    CUDA_CHECK(cudaStreamSynchronize(st));
    if (scratch_buf[kind]) CUDA_CHECK(cudaFree(scratch_buf[kind]));
    scratch_buf[kind] = NULL;
    scratch_bytes[kind] = 0;
    if (cudaMalloc(&scratch_buf[kind], bytes) != cudaSuccess) {
        cudaGetLastError(); /* clear the error so later launches do not report it */
        scratch_buf[kind] = NULL;
        fprintf(stderr, "g4pipe: error kernels: workspace %d of %zu bytes: out of device memory\n",
                (int)kind, bytes);
        return K_ERR_NO_MEMORY;
    }
    scratch_bytes[kind] = bytes;
    *out = scratch_buf[kind];
    return K_OK;
}

extern "C" int k_event_create(k_event **out) {
    cudaEvent_t ev;
    *out = NULL;
    CUDA_CHECK(cudaEventCreate(&ev));
    *out = (k_event *)ev;
    return K_OK;
}

extern "C" void k_event_destroy(k_event *ev) {
    if (ev) cudaEventDestroy((cudaEvent_t)ev);
}

extern "C" int k_event_record(k_event *ev, g4_stream st) {
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)st));
    return K_OK;
}

extern "C" int k_event_elapsed_ms(k_event *a, k_event *b, float *ms) {
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)b));
    CUDA_CHECK(cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b));
    return K_OK;
}

extern "C" int k_profiler_range(int on) {
    CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop());
    return K_OK;
}

/* ---- the kernel trace (./build.sh trace) ---- */

#ifdef G4_KERNEL_TRACE
#define K_TRACE_UNITS(X)                                                                           \
    X(attn)                                                                                        \
    X(attn_mma_d256_bf16_keep)                                                                     \
    X(attn_mma_d256_e4m3_keep)                                                                     \
    X(attn_mma_d256_bf16)                                                                          \
    X(attn_mma_d256_e4m3)                                                                          \
    X(attn_mma_d512_bf16)                                                                          \
    X(attn_mma_d512_e4m3)                                                                          \
    X(attn_prep)                                                                                   \
    X(attn_prompt)                                                                                 \
    X(attn_window) X(fill) X(gemm_lt) X(moe) X(moe_stream) X(norm) X(sample)
#define K_TRACE_DECLARE(u) extern "C" int k_trace_bind_##u(k_trace_rec *buf);
K_TRACE_UNITS(K_TRACE_DECLARE)

static k_trace_rec *trace_buf;

/* Every unit's pointer to buf (NULL: none stamps). */
static int trace_bind(k_trace_rec *buf) {
    int rc = 0;
#define K_TRACE_BIND(u) rc |= k_trace_bind_##u(buf);
    K_TRACE_UNITS(K_TRACE_BIND)
    return rc ? K_ERR_DEVICE : K_OK;
}

extern "C" int k_trace_start(void) {
    if (trace_buf) return K_OK;
    CUDA_CHECK(cudaMalloc((void **)&trace_buf, sizeof(k_trace_rec) * K_TRACE_MAX));
    CUDA_CHECK(cudaMemset(trace_buf, 0, sizeof(k_trace_rec)));
    CUDA_CHECK(cudaDeviceSynchronize()); /* as in k_trace_take */
    return trace_bind(trace_buf);
}

/* "void attn_split_kernel(k_attention_args, ...) [with int D = 256; int G = 2; __nv_bool FP8 =
 * false; ...]", a kernel's __PRETTY_FUNCTION__, as "attn_split_kernel D=256 G=2 FP8=false ..."
 * (the instantiations of a template are different kernels with different costs). */
static void trace_compact(const char *pretty, char *out, size_t len) {
    const char *name = strncmp(pretty, "void ", 5) == 0 ? pretty + 5 : pretty;
    size_t n = strcspn(name, "(");
    int w = snprintf(out, len, "%.*s", (int)n, name);
    const char *with = strstr(name, "[with ");
    for (const char *p = with ? with + 6 : NULL;
         p && *p && *p != ']' && w > 0 && (size_t)w < len;) {
        const char *eq = strstr(p, " = "), *end = strpbrk(p, ";]");
        if (!eq || !end || eq > end) break;
        const char *key = eq; /* the last word before " = " */
        while (key > p && key[-1] != ' ')
            key--;
        w += snprintf(out + w, len - (size_t)w, " %.*s=%.*s", (int)(eq - key), key,
                      (int)(end - eq - 3), eq + 3);
        p = *end == ';' ? end + 2 : end;
    }
}

/* A stamp's name: the kernel's __PRETTY_FUNCTION__, a string in device memory, copied once per
 * address (the longest read that succeeds: the string may end near its segment's end). */
static void trace_name(const char *dev, char *out, size_t len) {
    static const char *seen_at[256];
    static char seen[256][96];
    for (int i = 0; i < 256 && seen_at[i]; i++)
        if (seen_at[i] == dev) {
            snprintf(out, len, "%s", seen[i]);
            return;
        }
    char raw[256] = {0}, buf[96];
    size_t got = 0;
    for (size_t want = sizeof raw - 1; want >= 16 && !got; want /= 2) {
        if (cudaMemcpy(raw, dev, want, cudaMemcpyDefault) == cudaSuccess)
            got = want;
        else
            (void)cudaGetLastError();
    }
    raw[got] = 0;
    if (got)
        trace_compact(raw, buf, sizeof buf);
    else
        snprintf(buf, sizeof buf, "kernel@%p", (const void *)dev);
    for (int i = 0; i < 256; i++)
        if (!seen_at[i]) {
            seen_at[i] = dev;
            snprintf(seen[i], sizeof seen[i], "%s", buf);
            break;
        }
    snprintf(out, len, "%s", buf);
}

extern "C" int k_trace_take(k_trace_stamp *out, int max, int *n) {
    *n = 0;
    if (!trace_buf) return K_ERR_SHAPE;
    CUDA_CHECK(cudaDeviceSynchronize());
    k_trace_rec head;
    CUDA_CHECK(cudaMemcpy(&head, trace_buf, sizeof head, cudaMemcpyDeviceToHost));
    int count = (int)(unsigned)head.t_ns;
    if (count > K_TRACE_MAX - 1) count = K_TRACE_MAX - 1; /* stamps past the end were dropped */
    if (count > max) count = max;
    static k_trace_rec recs[K_TRACE_MAX];
    if (count > 0)
        CUDA_CHECK(cudaMemcpy(recs, trace_buf + 1, sizeof(k_trace_rec) * (size_t)count,
                              cudaMemcpyDeviceToHost));
    for (int i = 0; i < count; i++) {
        out[i].t_ns = recs[i].t_ns;
        out[i].at_wait = recs[i].at_wait ? 1 : 0;
        trace_name(recs[i].name, out[i].name, sizeof out[i].name);
    }
    CUDA_CHECK(cudaMemset(trace_buf, 0, sizeof(k_trace_rec)));
    /* the engine's stream does not wait on the legacy stream's memset: the next step's first
     * stamp must not land before the count is zero */
    CUDA_CHECK(cudaDeviceSynchronize());
    *n = count;
    return K_OK;
}

extern "C" void k_trace_stop(void) {
    if (!trace_buf) return;
    (void)trace_bind(NULL);
    cudaFree(trace_buf);
    trace_buf = NULL;
}
#else
extern "C" int k_trace_start(void) { return K_ERR_SHAPE; } /* not a trace build */
extern "C" int k_trace_take(k_trace_stamp *out, int max, int *n) {
    (void)out;
    (void)max;
    *n = 0;
    return K_ERR_SHAPE;
}
extern "C" void k_trace_stop(void) {}
#endif

/* ---- streams, pinned memory, async copies, graphs ---- */

extern "C" int k_stream_create(g4_stream *out) {
    cudaStream_t st;
    *out = NULL;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    *out = (g4_stream)st;
    return K_OK;
}

/* One event a direction (k_stream_branch_setup), recorded again for every layer: a wait takes
 * the record before it */
static int stream_wait(cudaEvent_t ev, g4_stream done, g4_stream waits) {
    if (!ev) return K_ERR_DEVICE;
    CUDA_CHECK(cudaEventRecord(ev, (cudaStream_t)done));
    CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)waits, ev, 0));
    return K_OK;
}
static cudaEvent_t fork_event, join_event;
extern "C" int k_stream_branch_setup(void) {
    if (!fork_event) CUDA_CHECK(cudaEventCreateWithFlags(&fork_event, cudaEventDisableTiming));
    if (!join_event) CUDA_CHECK(cudaEventCreateWithFlags(&join_event, cudaEventDisableTiming));
    return K_OK;
}
extern "C" int k_stream_fork(g4_stream from, g4_stream to) {
    return stream_wait(fork_event, from, to);
}
extern "C" int k_stream_join(g4_stream main, g4_stream side) {
    return stream_wait(join_event, side, main);
}

extern "C" void k_stream_destroy(g4_stream st) {
    if (st) cudaStreamDestroy((cudaStream_t)st);
}

extern "C" int k_stream_sync(g4_stream st) {
    CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)st));
    return K_OK;
}

extern "C" void *k_host_alloc_pinned(size_t bytes) {
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void k_host_free_pinned(void *p) {
    if (p) cudaFreeHost(p);
}

extern "C" int k_copy_to_device_async(void *dst, const void *src, size_t bytes, g4_stream st) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)st));
    return K_OK;
}

extern "C" int k_copy_to_host_async(void *dst, const void *src, size_t bytes, g4_stream st) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)st));
    return K_OK;
}

/* Thread-local capture: another thread's unrelated CUDA call cannot invalidate it. */
extern "C" int k_capture_begin(g4_stream st) {
    CUDA_CHECK(cudaStreamBeginCapture((cudaStream_t)st, cudaStreamCaptureModeThreadLocal));
    return K_OK;
}

extern "C" int k_capture_end(g4_stream st, k_graph **out) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    *out = NULL;
    CUDA_CHECK(cudaStreamEndCapture((cudaStream_t)st, &g));
    cudaError_t err = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    CUDA_CHECK(err);
    *out = (k_graph *)exec;
    return K_OK;
}

extern "C" int k_graph_launch(k_graph *g, g4_stream st) {
    CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)g, (cudaStream_t)st));
    return K_OK;
}

extern "C" void k_graph_destroy(k_graph *g) {
    if (g) cudaGraphExecDestroy((cudaGraphExec_t)g);
}

extern "C" int k_workspace_reserve(size_t moe_bytes, size_t attn_bytes) {
    void *p = NULL;
    int rc = k_attention_setup();
    if (rc == K_OK) rc = k_moe_setup();
    if (rc == K_OK && moe_bytes) rc = k_scratch(K_SCRATCH_MOE, moe_bytes, NULL, &p);
    if (rc == K_OK && attn_bytes) rc = k_scratch(K_SCRATCH_ATTN, attn_bytes, NULL, &p);
    return rc;
}
