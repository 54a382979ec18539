/* kernels/device.cu - the device itself: finding a usable Hopper GPU, memory, copies and the
 * synchronisation runtime/ needs. Nothing here knows about models or requests. */
#include "kernels/common.cuh"

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
