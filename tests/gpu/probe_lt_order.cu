/* tests/gpu/probe_lt_order.cu - whether cuBLASLt's plans sum k the way one tensor-core
 * instruction after another does, measured.
 *
 * The project's projections keep one k order for every row in decode and prefill (kernels/mma.cuh:
 * each lane's 16 bytes split over two mma.sync, the "project" sets), and their bits are pinned.
 * Prefill on them runs at ~170 TFLOP/s where cuBLASLt reaches 270-530 on the same shapes
 * (docs/perf-notes.md, thirtieth session). If cuBLASLt's plans without split-k summed each output
 * as one 16-k instruction after another over natural k (k 0-15, then 16-31, ...), a decode kernel
 * on those natural sets would give cuBLASLt's bits, and prefill could run on cuBLASLt with every
 * row's bits the same in both. No document states how a plan sums, so this program measures it,
 * on random operands with spread exponents (where the order of rounding shows), at the 26B-A4B's
 * and the 31B's projection shapes and 1 to 1,024 rows, for every plan the heuristic offers:
 *
 *   natural   mma.sync m16n8k16, one instruction a 16-k step over natural k, ascending
 *   project   kernels/mma.cuh's mma_rows: the engine's own decode order
 *   lt #i     cuBLASLt plan i (its tile, stages, split-k and reduction printed), fp32 output
 *
 * The natural kernel is first held to a double-precision CPU sum on sampled outputs (a wrong
 * fragment layout fails there, so a "bits differ" line is never a layout bug). The comparisons
 * print as INFO lines: facts for the design, not properties of the engine.
 *
 * Built by ./build.sh tests where nvcc exists (compile-checked in CI), run by the plans' `lt-probe`
 * step: build/tests/probe_lt_order. Needs an sm_90 card. */
#include "kernels/mma.cuh"
#include "tests/gpu/probe_operands.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            printf("FAIL probe_lt_order: %s: %s\n", #call, cudaGetErrorString(e_));                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define LT_CHECK(call)                                                                             \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            printf("FAIL probe_lt_order: %s: cuBLAS status %d\n", #call, (int)s_);                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define MAX_PLANS 16

/* two bf16 at k and k + 1 of a row as one register (low half first); zero for a padding row */
static __device__ __forceinline__ uint32_t pair_at(const __nv_bfloat16 *row, int k) {
    return row ? *reinterpret_cast<const uint32_t *>(row + k) : 0u;
}

/* y[m, n] = x[m, :] . w[n, :] (k contiguous in both), fp32 out. A warp a 16-row x 8-output tile;
 * grid (n / 8, ceil(m / 16)). NATURAL: one m16n8k16 a 16-k step, slots in their natural k;
 * else mma_rows, the engine's decode order. */
template <bool NATURAL>
__global__ void chain(const __nv_bfloat16 *x, const __nv_bfloat16 *w, float *y, int m, int n,
                      int k) {
    const int lane = threadIdx.x, g = lane / 4, q = lane % 4;
    const int r0 = blockIdx.y * 16, o0 = blockIdx.x * 8;
    const __nv_bfloat16 *lo = r0 + g < m ? x + (size_t)(r0 + g) * k : NULL;
    const __nv_bfloat16 *hi = r0 + g + 8 < m ? x + (size_t)(r0 + g + 8) * k : NULL;
    const __nv_bfloat16 *wr = w + (size_t)(o0 + g) * k;
    float d[4] = {0, 0, 0, 0};
    if (NATURAL) {
        for (int k0 = 0; k0 < k; k0 += 16)
            mma_16816(d, pair_at(lo, k0 + 2 * q), pair_at(hi, k0 + 2 * q),
                      pair_at(lo, k0 + 2 * q + 8), pair_at(hi, k0 + 2 * q + 8),
                      pair_at(wr, k0 + 2 * q), pair_at(wr, k0 + 2 * q + 8));
    } else {
        const bf16_t *const wt[1] = {reinterpret_cast<const bf16_t *>(wr)};
        float acc[1][4];
        mma_rows<1>(reinterpret_cast<const bf16_t *>(lo), reinterpret_cast<const bf16_t *>(hi), wt,
                    k, acc);
        for (int j = 0; j < 4; j++)
            d[j] = acc[0][j];
    }
    const int o = o0 + 2 * q;
    if (r0 + g < m) {
        y[(size_t)(r0 + g) * n + o] = d[0];
        y[(size_t)(r0 + g) * n + o + 1] = d[1];
    }
    if (r0 + g + 8 < m) {
        y[(size_t)(r0 + g + 8) * n + o] = d[2];
        y[(size_t)(r0 + g + 8) * n + o + 1] = d[3];
    }
}

/* Sampled outputs off the double-precision sum by more than 2^-10 of the mass (the sum of |x w|).
 * A legitimate fp32 chain errs by at most ~2^-23 of each step's mass where a tensor core aligns
 * the step's terms plus 2^-24 of the running sum a step: under 2^-13 of the mass even at 1,344
 * steps. A wrong fragment layout pairs wrong products, an error of about mass / sqrt(k): over 2^-8
 * of the mass at every k here. */
static int off_sum(const float *y, const uint16_t *x, const uint16_t *w, int m, int n, int k) {
    int bad = 0;
    for (int s = 0; s < 512; s++) {
        const int r = (int)(((unsigned)s * 2654435761u) % (unsigned)m);
        const int o = (int)(((unsigned)s * 40503u + 7u) % (unsigned)n);
        double sum = 0, mass = 0;
        for (int kk = 0; kk < k; kk++) {
            const double p = bf16_value(x[(size_t)r * k + kk]) * bf16_value(w[(size_t)o * k + kk]);
            sum += p;
            mass += fabs(p);
        }
        if (!(fabs(y[(size_t)r * n + o] - sum) <= ldexp(mass, -10))) bad++;
    }
    return bad;
}

static long differ(const float *a, const float *b, size_t count) {
    long d = 0;
    for (size_t i = 0; i < count; i++)
        d += memcmp(&a[i], &b[i], 4) != 0;
    return d;
}

static int algo_attr(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
    uint32_t v32 = 0;
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, attr, &v32, sizeof v32, &got) !=
        CUBLAS_STATUS_SUCCESS)
        return -1;
    return (int)v32;
}

int main(void) {
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        printf("SKIP probe_lt_order: skipped: no GPU\n");
        return 0;
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 8) {
        printf("SKIP probe_lt_order: skipped: sm_%d%d has no bf16 mma.sync\n", prop.major,
               prop.minor);
        return 0;
    }
    static const struct {
        const char *name;
        int n, k;
    } shapes[] = {
        {"26B-A4B q local", 4096, 2816},
        {"26B-A4B o local", 2816, 4096},
        {"31B down", 5376, 21504},
    };
    static const int ms[] = {1, 16, 256, 1024};
    const int max_m = 1024;
    cublasLtHandle_t lt;
    LT_CHECK(cublasLtCreate(&lt));
    const size_t ws_bytes = (size_t)64 << 20; /* room for split-k's partials */
    void *ws;
    CHECK(cudaMalloc(&ws, ws_bytes));
    int ok = 1;
    srand(20261205);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int n = shapes[si].n, k = shapes[si].k;
        const size_t nx = (size_t)max_m * k, nw = (size_t)n * k, ny = (size_t)max_m * n;
        uint16_t *x = (uint16_t *)malloc(nx * 2), *w = (uint16_t *)malloc(nw * 2);
        float *y_nat = (float *)malloc(ny * 4), *y_proj = (float *)malloc(ny * 4),
              *y_lt = (float *)malloc(ny * 4);
        probe_fill(x, nx, w, nw);
        __nv_bfloat16 *dx, *dw;
        float *dy;
        CHECK(cudaMalloc(&dx, nx * 2));
        CHECK(cudaMalloc(&dw, nw * 2));
        CHECK(cudaMalloc(&dy, ny * 4));
        CHECK(cudaMemcpy(dx, x, nx * 2, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dw, w, nw * 2, cudaMemcpyHostToDevice));
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            const int m = ms[mi];
            const size_t cnt = (size_t)m * n;
            const dim3 grid((unsigned)(n / 8), (unsigned)((m + 15) / 16));
            CHECK(cudaMemset(dy, 0xff, ny * 4));
            chain<true><<<grid, 32>>>(dx, dw, dy, m, n, k);
            CHECK(cudaGetLastError());
            CHECK(cudaMemcpy(y_nat, dy, cnt * 4, cudaMemcpyDeviceToHost));
            CHECK(cudaMemset(dy, 0xff, ny * 4));
            chain<false><<<grid, 32>>>(dx, dw, dy, m, n, k);
            CHECK(cudaGetLastError());
            CHECK(cudaMemcpy(y_proj, dy, cnt * 4, cudaMemcpyDeviceToHost));
            const int bad_nat = off_sum(y_nat, x, w, m, n, k),
                      bad_proj = off_sum(y_proj, x, w, m, n, k);
            printf("%s probe_valid[%s, m %d]: natural %d, project %d of 512 sampled outputs off "
                   "the double sum\n",
                   bad_nat || bad_proj ? "FAIL" : "PASS", shapes[si].name, m, bad_nat, bad_proj);
            if (bad_nat || bad_proj) {
                ok = 0;
                continue;
            }
            printf("INFO lt_order[%s, m %d, project vs natural]: %ld of %zu outputs differ\n",
                   shapes[si].name, m, differ(y_proj, y_nat, cnt), cnt);
            /* y^T (n x m, column-major) = w^T' x^T: w as a k x n column-major matrix, transposed */
            cublasLtMatmulDesc_t desc;
            LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
            LT_CHECK(
                cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
            LT_CHECK(
                cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
            cublasLtMatrixLayout_t la, lb, lc;
            LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, k));
            LT_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, (uint64_t)k, (uint64_t)m, k));
            LT_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)n, (uint64_t)m, n));
            cublasLtMatmulPreference_t pref;
            LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
            size_t cap = ws_bytes;
            LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &cap, sizeof cap));
            cublasLtMatmulHeuristicResult_t res[MAX_PLANS];
            int found = 0;
            if (cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, MAX_PLANS, res,
                                               &found) != CUBLAS_STATUS_SUCCESS)
                found = 0;
            for (int i = 0; i < found; i++) {
                const float one = 1.0f, zero = 0.0f;
                CHECK(cudaMemset(dy, 0xff, ny * 4));
                const cublasStatus_t st = cublasLtMatmul(lt, desc, &one, dw, la, dx, lb, &zero, dy,
                                                         lc, dy, lc, &res[i].algo, ws, ws_bytes, 0);
                CHECK(cudaDeviceSynchronize());
                const cublasLtMatmulAlgo_t *al = &res[i].algo;
                const int id = algo_attr(al, CUBLASLT_ALGO_CONFIG_ID),
                          tile = algo_attr(al, CUBLASLT_ALGO_CONFIG_TILE_ID),
                          stages = algo_attr(al, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                          splitk = algo_attr(al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                          red = algo_attr(al, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
                if (st != CUBLAS_STATUS_SUCCESS) {
                    printf("INFO lt_order[%s, m %d, lt #%d]: algo %d did not run (status %d)\n",
                           shapes[si].name, m, i, id, (int)st);
                    continue;
                }
                CHECK(cudaMemcpy(y_lt, dy, cnt * 4, cudaMemcpyDeviceToHost));
                const int bad = off_sum(y_lt, x, w, m, n, k);
                printf("INFO lt_order[%s, m %d, lt #%d]: algo %d tile %d stages %d split-k %d "
                       "reduction %d, workspace %zu: vs natural %ld, vs project %ld of %zu "
                       "differ; %d of 512 sampled off the double sum\n",
                       shapes[si].name, m, i, id, tile, stages, splitk, red, res[i].workspaceSize,
                       differ(y_lt, y_nat, cnt), differ(y_lt, y_proj, cnt), cnt, bad);
            }
            if (found == 0)
                printf("INFO lt_order[%s, m %d]: the heuristic offered no plan\n", shapes[si].name,
                       m);
            cublasLtMatmulPreferenceDestroy(pref);
            cublasLtMatrixLayoutDestroy(la);
            cublasLtMatrixLayoutDestroy(lb);
            cublasLtMatrixLayoutDestroy(lc);
            cublasLtMatmulDescDestroy(desc);
        }
        CHECK(cudaFree(dx));
        CHECK(cudaFree(dw));
        CHECK(cudaFree(dy));
        free(x);
        free(w);
        free(y_nat);
        free(y_proj);
        free(y_lt);
    }
    cublasLtDestroy(lt);
    printf("probe_lt_order: %s\n", ok ? "the reference kernels held to the double sum"
                                      : "a reference kernel failed its double-sum check");
    return ok ? 0 : 1;
}
