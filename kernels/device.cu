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
