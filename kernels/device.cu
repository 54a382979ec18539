/* kernels/device.cu - the device itself: finding a usable Hopper GPU, memory, copies and the
 * synchronisation runtime/ needs. Nothing here knows about models or requests. */
#include "kernels/common.cuh"

#include <cuda_profiler_api.h>

int k_pdl_enabled = 1;

extern "C" void k_set_pdl(int on) { k_pdl_enabled = on ? 1 : 0; }

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

/* ---- streams, pinned memory, async copies, graphs ---- */

extern "C" int k_stream_create(g4_stream *out) {
    cudaStream_t st;
    *out = NULL;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    *out = (g4_stream)st;
    return K_OK;
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
    if (rc == K_OK && moe_bytes) rc = k_scratch(K_SCRATCH_MOE, moe_bytes, NULL, &p);
    if (rc == K_OK && attn_bytes) rc = k_scratch(K_SCRATCH_ATTN, attn_bytes, NULL, &p);
    return rc;
}
