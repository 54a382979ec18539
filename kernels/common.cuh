/* kernels/common.cuh - CUDA-only helpers every kernels/<family>.cu shares: the checked-call
 * macros. Inside kernels/ a failed CUDA or cuBLASLt call is logged with its statement text,
 * function, file, line and device, then becomes a K_ERR_DEVICE return (docs/style.md, errors):
 * runtime/ decides whether that ends a request or the process. */
#ifndef G4_COMMON_CUH
#define G4_COMMON_CUH

#include "kernels/kernels.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <utility>

/* Prints one line for a failed call; status is the API's error text. */
static inline void k_report(const char *api, const char *status, const char *stmt, const char *func,
                            const char *file, int line) {
    int dev = -1;
    cudaGetDevice(&dev);
    fprintf(stderr, "g4pipe: error kernels: %s %s in %s at %s:%d (device %d): %s\n", api, status,
            func, file, line, dev, stmt);
}

#define CUDA_CHECK(stmt)                                                                           \
    do {                                                                                           \
        cudaError_t err_ = (stmt);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            k_report("CUDA", cudaGetErrorString(err_), #stmt, __func__, __FILE__, __LINE__);       \
            return K_ERR_DEVICE;                                                                   \
        }                                                                                          \
    } while (0)

#define CUBLAS_CHECK(stmt)                                                                         \
    do {                                                                                           \
        cublasStatus_t st_ = (stmt);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            k_report("cuBLASLt", cublasLtGetStatusString(st_), #stmt, __func__, __FILE__,          \
                     __LINE__);                                                                    \
            return K_ERR_DEVICE;                                                                   \
        }                                                                                          \
    } while (0)

/* Per-op device workspaces (kernels/device.cu): one buffer per kind, grown on demand and reused
 * by every call of that kind. Not thread-safe and for one stream: two calls in flight on
 * different streams would share it. Growing synchronises the stream first (kernels queued
 * earlier may still read the old buffer) and uses cudaMalloc, so it must not happen during
 * graph capture: warm up once at the largest step. */
enum k_scratch_kind { K_SCRATCH_MOE, K_SCRATCH_ATTN, K_SCRATCH_SAMPLE, K_SCRATCH_KINDS };
int k_scratch(enum k_scratch_kind kind, size_t bytes, cudaStream_t st, void **out);

/* Programmatic dependent launch (k_set_pdl; docs/perf-notes.md, "Launch gaps"). Every kernel
 * of kernels/ is launched through k_launch and opens with K_GRID_DEPENDENCY: it waits until the
 * grid before it in the stream has finished and its writes are visible (griddepcontrol.wait,
 * before any load or store, so neither a read-after-write nor a write-after-read can cross the
 * boundary), then lets the next grid be launched. The exceptions: model constants no kernel
 * of a step writes (the row chain's norm weights, the router's per-expert scales) and the step's
 * inputs, copied in before its first kernel and written by none (the rows' positions and
 * sequences and the page tables, looked up by attention under serve.attn_early_lookup) may be
 * read before the wait; kernels.h names each. One more (serve.expert_stream): the router's ids,
 * read by the experts' streamed down kernel, which is launched only once every block of the up
 * kernel between them has passed its own wait, that is after the route kernel that wrote them
 * had ended and its writes were visible. The next grid's blocks are then already
 * resident when this one ends, instead of being launched after it; no block of this grid can be
 * kept waiting by them, because the release only takes effect once every block of this grid
 * has started. A kernel launched without the attribute (PDL off, or from another library) sees
 * both instructions as no-ops. The bits are the same either way. */
extern int k_pdl_enabled;
/* serve.wide_loads (kernels.h, k_set_wide_loads): tiles of at most 8 rows take mma_rows_lo. */
extern int k_wide_loads;

/* The kernel trace (`./build.sh trace` defines G4_KERNEL_TRACE; docs/benchmarks.md): every
 * kernel's first thread of its first block stamps the global timer once its wait on the grid
 * before it ends, i.e. when that grid has finished, so the gap between two stamps is what a
 * kernel costs the step inside a graph, PDL's overlap included (ncu times kernels one at a
 * time, serialised); and once as it reaches that wait, so the time between the two is how long
 * the kernel was resident, its loads before the wait in flight, before it could go on. Each unit
 * holds its own pointer to the buffer (no relocatable device code), bound through the K_TRACE_UNIT
 * binder every kernels/ .cu file defines; the buffer's first record counts the stamps. Absent from
 * the plain build: K_TRACE_MARK is empty there. */
#ifdef G4_KERNEL_TRACE
static __device__ k_trace_rec *k_trace_buf;
static __device__ __forceinline__ void k_trace_mark(const char *name, unsigned at_wait) {
    k_trace_rec *b = k_trace_buf;
    if (!b || (blockIdx.x | blockIdx.y | blockIdx.z | threadIdx.x | threadIdx.y | threadIdx.z))
        return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    const unsigned n = atomicAdd(reinterpret_cast<unsigned *>(&b[0].t_ns), 1u) + 1;
    if (n < K_TRACE_MAX) {
        b[n].t_ns = t;
        b[n].name = name;
        b[n].at_wait = at_wait;
    }
}
/* template arguments included in the name */
#define K_TRACE_MARK() k_trace_mark(__PRETTY_FUNCTION__, 0u)
#define K_TRACE_MARK_AT_WAIT() k_trace_mark(__PRETTY_FUNCTION__, 1u)
#define K_TRACE_UNIT(unit)                                                                         \
    extern "C" int k_trace_bind_##unit(k_trace_rec *buf) {                                         \
        return cudaMemcpyToSymbol(k_trace_buf, &buf, sizeof buf) == cudaSuccess ? 0 : -1;          \
    }
#else
#define K_TRACE_MARK()                                                                             \
    do {                                                                                           \
    } while (0)
#define K_TRACE_MARK_AT_WAIT() K_TRACE_MARK()
#define K_TRACE_UNIT(unit)
#endif

#define K_GRID_DEPENDENCY()                                                                        \
    do {                                                                                           \
        K_TRACE_MARK_AT_WAIT();                                                                    \
        asm volatile("griddepcontrol.wait;" ::: "memory");                                         \
        K_TRACE_MARK();                                                                            \
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");                            \
    } while (0)

template <typename... Params, typename... Args>
static inline cudaError_t k_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t st, Args &&...args) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = k_pdl_enabled;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

#endif
