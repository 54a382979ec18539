/* kernels/attn_prep.cu - the per-family prep of attention (kernels/attn.cu has the core): q/k
 * head norms, the weightless v norm, rotate-half RoPE and the write of K/V into the pages, the
 * function of its CPU twin in kernels/ref/attn_ref.c with the same rounding points.
 *
 *   k_attn_prep: one block per (row, head), head_dim/2 threads; thread j owns the RoPE pair
 *     (j, j + head_dim/2), so the in-place q update needs no shared copy of the head. With a
 *     one-byte layout (the fp8 local pool) K and V are stored as e4m3 of the bf16 value the
 *     bf16 pool would hold: round to nearest even, saturating at +-448 (docs/gates.md "fp8
 *     layout"), q stays bf16. A row whose page is unmapped is not written (the engine never
 *     passes one).
 *   attn_prep_rows_kernel (serve.attn_prep_rows, the default, for prompt launches): the same
 *     function, a warp a head and a block a row. Each lane holds the elements thread j = lane + 32
 * w held in the block form, sums their squares warp by warp with the same butterfly and adds the
 *     warps' sums in the same order, so every head gets the block form's bits; what it saves is
 *     a block and its barrier per head, and the RoPE angles' powf, cosf and sinf, which depend on
 *     the row and j alone: computed once a warp, not once a head (24 rotated heads a 26B-A4B
 *     row). */
#include "kernels/attn_common.cuh"

#define PREP_MAX_THREADS 256 /* head_dim / 2 threads: 128 (hd 256) or 256 (hd 512) */

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

/* ---- prep ---- */

/* Where head y of row r comes from and goes, in the prep's head order (query heads, then the K
 * heads, then the V heads); false for a K/V head whose slot is unmapped (the reference's
 * K_ERR_SHAPE: nothing is written). */
struct prep_head {
    const bf16_t *src;
    bf16_t *dst;
    uint8_t *dst8;   /* the e4m3 store's K or V head, else NULL */
    const bf16_t *w; /* the norm's weight; NULL for V's weightless norm */
    bool rotate;
};
template <int D, bool FP8>
static __device__ __forceinline__ bool prep_head_of(const k_attn_prep_args &a, int r, int y,
                                                    prep_head &p) {
    const int n_kv = a.kv.n_kv_head;
    p.dst8 = NULL;
    p.w = NULL;
    p.rotate = true;
    if (y < a.n_head) {
        p.dst = a.q + ((size_t)r * a.n_head + y) * D;
        p.src = p.dst;
        p.w = a.q_norm;
        return true;
    }
    int h = (y - a.n_head) % n_kv, which = (y - a.n_head) / n_kv; /* 0 = K, 1 = V */
    long long off = kv_view_offset(&a.kv, a.seq[r], a.pos[r], a.kv_layer, which, h);
    if (off < 0) return false;
    p.dst = (bf16_t *)a.kv.base + off;
    if (FP8) p.dst8 = (uint8_t *)a.kv.base + off;
    p.src = (which ? a.v_raw : a.k_raw) + ((size_t)r * n_kv + h) * D;
    if (!which) p.w = a.k_norm;
    p.rotate = which == 0;
    return true;
}

/* The RoPE pair (j, j + D/2)'s cos and sin at the row's position, each rounded to bf16. */
template <int D>
static __device__ __forceinline__ void prep_angle(const k_attn_prep_args &a, int r, int j, float &c,
                                                  float &s) {
    float inv_freq = 1.0f / powf(a.rope_base, (float)(2 * j) / (float)D);
    float angle = __fmul_rn(inv_freq, (float)a.pos[r]);
    c = k_round_bf16(cosf(angle));
    s = k_round_bf16(sinf(angle));
}

/* x rounded through bf16: by the conversion instruction (CVT, attn_round_bf16) or by
 * k_round_bf16's integer form; for the values prep_pair rounds, every one an fp32 product or sum
 * (or a rounding of one), both give the same bits. */
template <bool CVT> static __device__ __forceinline__ float prep_round(float x) {
    return CVT ? attn_round_bf16(x) : k_round_bf16(x);
}

/* Elements j and j + D/2 of a head after its sum of squares: y = k_round_bf16(x * inv * w), left
 * to right as the reference; __fmul_rn keeps each product rounded on its own (no FMA contraction
 * anywhere below); then rotated (rot: a K or query head's pair under n_rot, c and s its angle's)
 * and stored. CVT: the roundings by the conversion instruction (the warp form's; the block form,
 * which decode steps run, keeps the integer form: with it a one-row 26B-A4B step read +0.03-0.05
 * ms in four pairs, docs/perf-notes.md, forty-eighth session). */
template <int D, bool FP8, bool CVT>
static __device__ __forceinline__ void prep_pair(const prep_head &p, int j, float xa, float xb,
                                                 float inv, bool rot, float c, float s) {
    constexpr int half = D / 2;
    float ya = p.w ? prep_round<CVT>(__fmul_rn(__fmul_rn(xa, inv), k_bf16_to_f32(p.w[j])))
                   : prep_round<CVT>(__fmul_rn(xa, inv));
    float yb = p.w ? prep_round<CVT>(__fmul_rn(__fmul_rn(xb, inv), k_bf16_to_f32(p.w[j + half])))
                   : prep_round<CVT>(__fmul_rn(xb, inv));
    if (rot) {
        float na = prep_round<CVT>(
            __fadd_rn(prep_round<CVT>(__fmul_rn(ya, c)), prep_round<CVT>(__fmul_rn(-yb, s))));
        float nb = prep_round<CVT>(
            __fadd_rn(prep_round<CVT>(__fmul_rn(yb, c)), prep_round<CVT>(__fmul_rn(ya, s))));
        ya = na;
        yb = nb;
    }
    if (FP8 && p.dst8) {
        p.dst8[j] = k_f32_to_e4m3(ya);
        p.dst8[j + half] = k_f32_to_e4m3(yb);
        return;
    }
    p.dst[j] = CVT ? attn_f32_to_bf16(ya) : k_f32_to_bf16(ya);
    p.dst[j + half] = CVT ? attn_f32_to_bf16(yb) : k_f32_to_bf16(yb);
}

/* blockIdx.x = row; blockIdx.y < n_head: query head (q_norm, RoPE, in place); then n_kv_head
 * K heads (k_norm, RoPE, into the pages) and n_kv_head V heads (weightless norm, into the
 * pages). Thread j handles elements j and j + D/2. */
template <int D, bool FP8>
static __global__ void __launch_bounds__(D / 2) attn_prep_kernel(k_attn_prep_args a) {
    K_GRID_DEPENDENCY();
    constexpr int half = D / 2;
    __shared__ float red[PREP_MAX_THREADS / 32];
    const int r = blockIdx.x, y = blockIdx.y, j = threadIdx.x;
    prep_head p;
    if (!prep_head_of<D, FP8>(a, r, y, p)) return; /* block-uniform */
    float xa = k_bf16_to_f32(p.src[j]), xb = k_bf16_to_f32(p.src[j + half]);
    float ss = block_sum(__fadd_rn(__fmul_rn(xa, xa), __fmul_rn(xb, xb)), red);
    float inv = powf(ss / (float)D + a.eps, -0.5f);
    const bool rot = p.rotate && j < a.n_rot;
    float c = 0.0f, sn = 0.0f;
    if (rot) prep_angle<D>(a, r, j, c, sn);
    prep_pair<D, FP8, false>(p, j, xa, xb, inv, rot, c, sn);
}

/* The warp form: blockIdx.x = row; warp w of block b takes heads (4 b + w) hpw .. + hpw - 1 of
 * the block form's y order. Lane l holds elements l + 32 i and l + 32 i + D/2 (i < D/64): the
 * block form's thread j = l + 32 i, whose warp i reduced them. */
template <int D, bool FP8>
static __global__ void __launch_bounds__(128) attn_prep_rows_kernel(k_attn_prep_args a, int hpw) {
    K_GRID_DEPENDENCY();
    constexpr int half = D / 2, NI = half / 32;
    const int r = blockIdx.x, lane = threadIdx.x & 31;
    const int y0 = ((int)blockIdx.y * 4 + (int)(threadIdx.x >> 5)) * hpw;
    const int n_kv = a.kv.n_kv_head, heads = a.n_head + (a.write_kv ? 2 * n_kv : 0);
    if (y0 >= heads) return; /* warp-uniform */
    /* the row's angles, the block form's: the same for every rotated head */
    float rc[NI], rs[NI];
#pragma unroll
    for (int i = 0; i < NI; i++) {
        rc[i] = rs[i] = 0.0f;
        if (lane + 32 * i < a.n_rot) prep_angle<D>(a, r, lane + 32 * i, rc[i], rs[i]);
    }
    const int y_end = min(y0 + hpw, heads);
    for (int y = y0; y < y_end; y++) {
        prep_head p;
        if (!prep_head_of<D, FP8>(a, r, y, p)) continue; /* warp-uniform */
        float xa[NI], xb[NI];
#pragma unroll
        for (int i = 0; i < NI; i++) {
            xa[i] = k_bf16_to_f32(p.src[lane + 32 * i]);
            xb[i] = k_bf16_to_f32(p.src[lane + 32 * i + half]);
        }
        /* block_sum: each warp's butterfly, then 0 + warp 0 + warp 1 + ... */
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < NI; i++) {
            float v = __fadd_rn(__fmul_rn(xa[i], xa[i]), __fmul_rn(xb[i], xb[i]));
#pragma unroll
            for (int m = 16; m > 0; m >>= 1)
                v += __shfl_xor_sync(0xffffffffu, v, m);
            ss += v;
        }
        const float inv = powf(ss / (float)D + a.eps, -0.5f);
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const int j = lane + 32 * i;
            prep_pair<D, FP8, true>(p, j, xa[i], xb[i], inv, p.rotate && j < a.n_rot, rc[i], rs[i]);
        }
    }
}

static int attn_prep_rows_on = 1; /* serve.attn_prep_rows' default */
extern "C" void k_set_attn_prep_rows(int on) { attn_prep_rows_on = on ? 1 : 0; }

/* Launches of at least this many rows (prompt rows) take the warp form, a block a row whose 4
 * warps share the row's heads. Decode steps keep the block form: at one and 16 26B-A4B rows a
 * warp a head (each lane four pairs' angles in turn, where a thread had one) measured +0.08 ms a
 * step (docs/perf-notes.md, thirty-seventh session). */
#define PREP_ROWS_MIN 64

extern "C" int k_attn_prep(const k_attn_prep_args *a, g4_stream st) {
    int rc = kv_dtype_check(&a->kv);
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
    cudaStream_t s = (cudaStream_t)st;
    bool fp8 = a->write_kv && a->kv.elem_bytes == 1;
    if (attn_prep_rows_on && a->rows >= PREP_ROWS_MIN) {
        const int hpw = (heads + 3) / 4;
        const dim3 wgrid((unsigned)a->rows, (unsigned)((heads + 4 * hpw - 1) / (4 * hpw)));
        if (d == 256 && fp8)
            CUDA_CHECK(k_launch(attn_prep_rows_kernel<256, true>, wgrid, 128, 0, s, *a, hpw));
        else if (d == 256)
            CUDA_CHECK(k_launch(attn_prep_rows_kernel<256, false>, wgrid, 128, 0, s, *a, hpw));
        else if (fp8)
            CUDA_CHECK(k_launch(attn_prep_rows_kernel<512, true>, wgrid, 128, 0, s, *a, hpw));
        else
            CUDA_CHECK(k_launch(attn_prep_rows_kernel<512, false>, wgrid, 128, 0, s, *a, hpw));
        CUDA_CHECK(cudaGetLastError());
        return K_OK;
    }
    dim3 grid((unsigned)a->rows, (unsigned)heads);
    if (d == 256 && fp8)
        CUDA_CHECK(k_launch(attn_prep_kernel<256, true>, grid, 128, 0, s, *a));
    else if (d == 256)
        CUDA_CHECK(k_launch(attn_prep_kernel<256, false>, grid, 128, 0, s, *a));
    else if (fp8)
        CUDA_CHECK(k_launch(attn_prep_kernel<512, true>, grid, 256, 0, s, *a));
    else
        CUDA_CHECK(k_launch(attn_prep_kernel<512, false>, grid, 256, 0, s, *a));
    CUDA_CHECK(cudaGetLastError());
    return K_OK;
}

/* The window kernels' shared memory exceeds the default 48 KB: raised once per instantiation,
 * before its first launch (plain launches at load precede any graph capture). */

K_TRACE_UNIT(attn_prep) /* the kernel trace build's binder (common.cuh) */
