/* kernels/attn.cu - attention on the paged KV store: the per-family prep (q/k head norms, the
 * weightless v norm, rotate-half RoPE, the write of K/V into the pages) and the attention core.
 *
 * Both compute the function of their CPU twin kernels/ref/attn_ref.c with the same rounding
 * points; only fp32 summation orders differ (the sum of squares of a head norm, the q.k dot
 * product, the softmax denominator, the P.V accumulation), which GATES.md's 1e-2 bound covers.
 *
 * This is the plain, obviously correct version (design/KERNELS.md "Attention" wants split-KV
 * decode and a flash-style prefill later):
 *   k_attn_prep: one block per (row, head), head_dim/2 threads; thread j owns the RoPE pair
 *     (j, j + head_dim/2), so the in-place q update needs no shared copy of the head.
 *   k_attention: one block per (row, query head), 8 warps; warp w takes keys j0 + w, j0 + w + 8,
 *     ... and each lane owns head_dim/32 dims (16-byte loads). Pass 1 runs an online max and
 *     sum over the scores (per warp, merged in a fixed warp order); pass 2 recomputes each
 *     score and accumulates bf(exp(s - max) / sum) * v with the final max and sum, as the
 *     reference rounds p. Scores are recomputed rather than stored, so any context length
 *     works without a score buffer.
 *
 * Unmapped pages (table entry -1): the reference returns K_ERR_SHAPE; a kernel cannot, so
 * k_attn_prep skips the write of such a row's K/V and k_attention writes NaN for every head of
 * a row whose window touches one (loud rather than silently wrong). The engine never passes
 * unmapped positions. Likewise a position outside [0, max_pages * page_tokens). */
#include "kernels/common.cuh"

#include <math.h>
#include <stdint.h>

#define PREP_MAX_THREADS 256 /* head_dim / 2 threads: 128 (hd 256) or 256 (hd 512) */
#define ATTN_THREADS 256     /* 8 warps, each on its own keys */
#define ATTN_WARPS (ATTN_THREADS / 32)
#define BF16_NAN 0x7fc0u

/* ---- bf16 helpers: bit-identical to kernels/ref/bf16_ref.c ---- */

static __device__ __forceinline__ float bf_to_f(uint16_t v) {
    return __uint_as_float((uint32_t)v << 16);
}

static __device__ __forceinline__ uint16_t f_to_bf(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static __device__ __forceinline__ float bf(float f) { return bf_to_f(f_to_bf(f)); }

/* Sum over the block, the same value in every thread; red holds one float per warp. */
static __device__ __forceinline__ float block_sum(float v, float *red) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, m);
    int warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    if ((threadIdx.x & 31) == 0) red[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < n_warp; w++)
        s += red[w];
    return s;
}

/* Element offset of (layer, kv, head) of token pos of sequence seq, or -1 when unmapped or out
 * of the table: the same arithmetic as kv_offset in attn_ref.c. */
static __device__ __forceinline__ long long kv_offset(const k_kv_view &kv, int seq, int pos,
                                                      int layer, int which, int head) {
    if (pos < 0 || pos / kv.page_tokens >= kv.max_pages) return -1;
    int32_t page = kv.tables[(long long)seq * kv.max_pages + pos / kv.page_tokens];
    if (page < 0) return -1;
    long long slot = pos % kv.page_tokens;
    long long per_slot = (long long)kv.n_kv_head * kv.head_dim;
    long long per_kv = (long long)kv.page_tokens * per_slot;
    long long per_page = (long long)kv.n_layer * 2 * per_kv;
    return page * per_page + ((long long)layer * 2 + which) * per_kv + slot * per_slot +
           (long long)head * kv.head_dim;
}

/* ---- prep ---- */

/* blockIdx.x = row; blockIdx.y < n_head: query head (q_norm, RoPE, in place); then n_kv_head
 * K heads (k_norm, RoPE, into the pages) and n_kv_head V heads (weightless norm, into the
 * pages). Thread j handles elements j and j + D/2. */
template <int D>
static __global__ void __launch_bounds__(D / 2) attn_prep_kernel(k_attn_prep_args a) {
    constexpr int half = D / 2;
    __shared__ float red[PREP_MAX_THREADS / 32];
    const int r = blockIdx.x, y = blockIdx.y, j = threadIdx.x;
    const int n_kv = a.kv.n_kv_head;
    const bf16_t *src;
    bf16_t *dst;
    const bf16_t *w = NULL;
    bool rotate = true;
    if (y < a.n_head) {
        dst = a.q + ((size_t)r * a.n_head + y) * D;
        src = dst;
        w = a.q_norm;
    } else {
        int h = (y - a.n_head) % n_kv, which = (y - a.n_head) / n_kv; /* 0 = K, 1 = V */
        long long off = kv_offset(a.kv, a.seq[r], a.pos[r], a.kv_layer, which, h);
        if (off < 0) return; /* unmapped: the reference's K_ERR_SHAPE; block-uniform */
        dst = (bf16_t *)a.kv.base + off;
        src = (which ? a.v_raw : a.k_raw) + ((size_t)r * n_kv + h) * D;
        if (!which) w = a.k_norm;
        rotate = which == 0;
    }
    float xa = bf_to_f(src[j]), xb = bf_to_f(src[j + half]);
    float ss = block_sum(__fadd_rn(__fmul_rn(xa, xa), __fmul_rn(xb, xb)), red);
    float inv = powf(ss / (float)D + a.eps, -0.5f);
    /* y = bf(x * inv * w), left to right as the reference; __fmul_rn keeps each product
     * rounded on its own (no FMA contraction anywhere below). */
    float ya = w ? bf(__fmul_rn(__fmul_rn(xa, inv), bf_to_f(w[j]))) : bf(__fmul_rn(xa, inv));
    float yb = w ? bf(__fmul_rn(__fmul_rn(xb, inv), bf_to_f(w[j + half]))) : bf(__fmul_rn(xb, inv));
    if (rotate && j < a.n_rot) {
        float inv_freq = 1.0f / powf(a.rope_base, (float)(2 * j) / (float)D);
        float angle = __fmul_rn(inv_freq, (float)a.pos[r]);
        float c = bf(cosf(angle)), s = bf(sinf(angle));
        float na = bf(__fadd_rn(bf(__fmul_rn(ya, c)), bf(__fmul_rn(-yb, s))));
        float nb = bf(__fadd_rn(bf(__fmul_rn(yb, c)), bf(__fmul_rn(ya, s))));
        ya = na;
        yb = nb;
    }
    dst[j] = f_to_bf(ya);
    dst[j + half] = f_to_bf(yb);
}

/* ---- attention ---- */

/* Lane-owned slice of a head vector: dims c * 256 + lane * 8 + t (c < D/256, t < 8), so one
 * 16-byte load per 256 dims; q, K, V and the accumulator all use this mapping. */
template <int D> static __device__ __forceinline__ void load_slice(const bf16_t *p, float *x) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int c = 0; c < D / 256; c++) {
        uint4 u = *reinterpret_cast<const uint4 *>(p + c * 256 + lane * 8);
        uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            x[c * 8 + 2 * k] = __uint_as_float(words[k] << 16);
            x[c * 8 + 2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
        }
    }
}

/* s = bf(q . k) with fp32 accumulation; the xor butterfly leaves every lane the same value. */
template <int D> static __device__ __forceinline__ float score(const float *qf, const bf16_t *k) {
    float kf[D / 32];
    load_slice<D>(k, kf);
    float s = 0.0f;
#pragma unroll
    for (int t = 0; t < D / 32; t++)
        s += qf[t] * kf[t];
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, m);
    return bf(s);
}

template <int D>
static __global__ void __launch_bounds__(ATTN_THREADS) attention_kernel(k_attention_args a) {
    constexpr int per = D / 32;
    __shared__ float part[ATTN_WARPS][D]; /* per-warp P.V partials */
    __shared__ float warp_m[ATTN_WARPS], warp_l[ATTN_WARPS];
    const int r = blockIdx.x, h = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kvh = h / (a.n_head / a.kv.n_kv_head);
    const int i = a.pos[r], seq = a.seq[r];
    const int j0 = a.window > 0 && i - a.window + 1 > 0 ? i - a.window + 1 : 0;
    const bf16_t *store = (const bf16_t *)a.kv.base;
    bf16_t *out = a.out + ((size_t)r * a.n_head + h) * D;

    float qf[per];
    load_slice<D>(a.q + ((size_t)r * a.n_head + h) * D, qf);

    /* pass 1: online max and sum of exp over this warp's keys */
    float m = -INFINITY, l = 0.0f;
    int bad = i < 0; /* a negative position has no keys: NaN out, as for unmapped pages */
    for (int j = j0 + warp; j <= i; j += ATTN_WARPS) {
        long long ko = kv_offset(a.kv, seq, j, a.kv_layer, 0, kvh);
        if (ko < 0) {
            bad = 1;
            continue;
        }
        float s = score<D>(qf, store + ko);
        if (s > m) {
            l = l * expf(m - s) + 1.0f; /* m = -inf at first: l is 0 then */
            m = s;
        } else {
            l += expf(s - m);
        }
    }
    if (lane == 0) {
        warp_m[warp] = m;
        warp_l[warp] = l;
    }
    bad = __syncthreads_or(bad);
    if (bad) {
        for (int e = threadIdx.x; e < D; e += ATTN_THREADS)
            out[e] = BF16_NAN;
        return;
    }
    /* merge the warps in a fixed order: every thread gets the same max and sum */
    float mx = -INFINITY;
    for (int w = 0; w < ATTN_WARPS; w++)
        mx = fmaxf(mx, warp_m[w]);
    float sum = 0.0f;
    for (int w = 0; w < ATTN_WARPS; w++)
        if (warp_l[w] > 0.0f) sum += warp_l[w] * expf(warp_m[w] - mx);

    /* pass 2: p_j = bf(exp(s_j - max) / sum), acc += p_j * v_j */
    float acc[per];
#pragma unroll
    for (int t = 0; t < per; t++)
        acc[t] = 0.0f;
    for (int j = j0 + warp; j <= i; j += ATTN_WARPS) {
        long long ko = kv_offset(a.kv, seq, j, a.kv_layer, 0, kvh);
        long long vo = kv_offset(a.kv, seq, j, a.kv_layer, 1, kvh);
        float p = bf(expf(score<D>(qf, store + ko) - mx) / sum);
        float vf[per];
        load_slice<D>(store + vo, vf);
#pragma unroll
        for (int t = 0; t < per; t++)
            acc[t] += p * vf[t];
    }
#pragma unroll
    for (int c = 0; c < D / 256; c++)
#pragma unroll
        for (int t = 0; t < 8; t++)
            part[warp][c * 256 + lane * 8 + t] = acc[c * 8 + t];
    __syncthreads();
    for (int e = threadIdx.x; e < D; e += ATTN_THREADS) {
        float o = 0.0f;
        for (int w = 0; w < ATTN_WARPS; w++)
            o += part[w][e];
        out[e] = f_to_bf(o);
    }
}

/* ---- launchers ---- */

static int kv_dtype_check(const k_kv_view *kv, const char *op) {
    if (kv->elem_bytes != 2) {
        fprintf(stderr, "g4pipe: error %s: no e4m3 kernel: refusing a %d-byte KV layout\n", op,
                kv->elem_bytes);
        return K_ERR_DTYPE;
    }
    return K_OK;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The view's shape as both ops need it (tables and base only when they are read). */
static bool kv_shape_ok(const k_kv_view *kv, int kv_layer) {
    return (kv->head_dim == 256 || kv->head_dim == 512) && kv->n_kv_head > 0 &&
           kv->page_tokens > 0 && kv->n_layer > 0 && kv_layer >= 0 && kv_layer < kv->n_layer &&
           kv->max_pages > 0 && kv->tables && kv->base && aligned16(kv->base);
}

extern "C" int k_attn_prep(const k_attn_prep_args *a, g4_stream st) {
    int rc = kv_dtype_check(&a->kv, "k_attn_prep");
    if (rc) return rc;
    int d = a->kv.head_dim;
    if ((d != 256 && d != 512) || a->rows < 0 || a->n_head <= 0 || a->kv.n_kv_head <= 0 ||
        a->n_rot < 0 || a->n_rot > d / 2 || !a->q || !a->pos)
        return K_ERR_SHAPE;
    if (a->write_kv && (!kv_shape_ok(&a->kv, a->kv_layer) || !a->k_raw || !a->v_raw || !a->seq))
        return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    int heads = a->n_head + (a->write_kv ? 2 * a->kv.n_kv_head : 0);
    if (heads > 65535) return K_ERR_SHAPE;
    dim3 grid((unsigned)a->rows, (unsigned)heads);
    cudaStream_t s = (cudaStream_t)st;
    if (d == 256)
        attn_prep_kernel<256><<<grid, 128, 0, s>>>(*a);
    else
        attn_prep_kernel<512><<<grid, 256, 0, s>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

extern "C" int k_attention(const k_attention_args *a, g4_stream st) {
    int rc = kv_dtype_check(&a->kv, "k_attention");
    if (rc) return rc;
    if (!kv_shape_ok(&a->kv, a->kv_layer) || a->rows < 0 || a->n_head <= 0 ||
        a->n_head % a->kv.n_kv_head || a->n_head > 65535 || a->window < 0 || !a->out || !a->q ||
        !a->pos || !a->seq || !aligned16(a->q))
        return K_ERR_SHAPE;
    if (a->rows == 0) return K_OK;
    dim3 grid((unsigned)a->rows, (unsigned)a->n_head);
    cudaStream_t s = (cudaStream_t)st;
    if (a->kv.head_dim == 256)
        attention_kernel<256><<<grid, ATTN_THREADS, 0, s>>>(*a);
    else
        attention_kernel<512><<<grid, ATTN_THREADS, 0, s>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}
