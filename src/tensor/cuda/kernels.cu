/* kernels.cu: the CUDA backend's own kernels: elementwise ops, softmax and
 * the fused losses, im2col / col2im, pooling, batchnorm, dropout,
 * embeddings, the fused optimizer updates and the graph layers' kernels
 * (whose per-index arithmetic is graph_body.h's, shared with a host test). Each matches backend_cpu.c's
 * arithmetic (same formulas, double where the CPU sums in double) and is
 * deterministic: reductions run in a fixed order, never through atomics. */
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/graph_body.h"

#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cmath>

namespace {

constexpr int BLOCK = 256;
constexpr int64_t MAX_BLOCKS = 8192;   /* grid-stride loops cover the rest */
constexpr int WARPS = BLOCK / 32;

unsigned blocks_for(int64_t n, int per_block = BLOCK)
{
    int64_t b = (n + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

/* Blocks for one warp per row. */
unsigned warp_blocks(int64_t rows) { return blocks_for(rows, WARPS); }

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

__device__ __forceinline__ int64_t tid() { return blockIdx.x * (int64_t)blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t nthreads() { return (int64_t)gridDim.x * blockDim.x; }

__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over a block of BLOCK threads in a fixed order; the result is valid
 * in thread 0. */
__device__ double block_sum(double v)
{
    __shared__ double sh[BLOCK];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();   /* sh may be reused by a second call */
    return r;
}

/* ---- elementwise -------------------------------------------------------- */

__global__ void fill_kernel(float *x, int64_t n, float v)
{
    for (int64_t i = tid(); i < n; i += nthreads())
        x[i] = v;
}

__global__ void scale_kernel(float *x, int64_t n, float beta)
{
    for (int64_t i = tid(); i < n; i += nthreads())
        x[i] = beta * x[i];
}

__global__ void bias_add_kernel(float *y, const float *b, int64_t n, int64_t cols)
{
    for (int64_t i = tid(); i < n; i += nthreads())
        y[i] += b[i % cols];
}

__global__ void bias_add_nchw_kernel(float *y, const float *b, int64_t n, int64_t c,
                                     int64_t hw)
{
    for (int64_t i = tid(); i < n; i += nthreads())
        y[i] += b[(i / hw) % c];
}

template <int A>
__global__ void act_fwd_kernel(const float *x, float *y, int64_t n)
{
    for (int64_t i = tid(); i < n; i += nthreads()) {
        float v = x[i];
        if (A == DL_ACT_RELU)
            y[i] = v > 0.0f ? v : 0.0f;
        else if (A == DL_ACT_TANH)
            y[i] = tanhf(v);
        else
            y[i] = 1.0f / (1.0f + expf(-v));
    }
}

template <int A>
__global__ void act_bwd_kernel(const float *y, const float *dy, float *dx, int64_t n)
{
    for (int64_t i = tid(); i < n; i += nthreads()) {
        float v = y[i];
        if (A == DL_ACT_RELU)
            dx[i] = v > 0.0f ? dy[i] : 0.0f;
        else if (A == DL_ACT_TANH)
            dx[i] = dy[i] * (1.0f - v * v);
        else
            dx[i] = dy[i] * v * (1.0f - v);
    }
}

__global__ void mul_kernel(const float *a, const float *b, float *y, int64_t n)
{
    for (int64_t i = tid(); i < n; i += nthreads())
        y[i] = a[i] * b[i];
}

__global__ void axpy_kernel(float alpha, const float *x, float *y, int64_t n)
{
    for (int64_t i = tid(); i < n; i += nthreads())
        y[i] += alpha * x[i];
}

/* splitmix64's output function: a counter-based generator, value i of
 * stream `key` is mix(key + (i + 1) * golden). */
__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__global__ void dropout_kernel(const float *x, float *y, float *mask, int64_t n, float p,
                               float keep, uint64_t key)
{
    for (int64_t i = tid(); i < n; i += nthreads()) {
        uint64_t h = mix64(key + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull);
        /* 24 bits, as dl_rng_uniform: uniform in [0, 1) */
        float u = (float)(h >> 40) * (1.0f / 16777216.0f);
        float mk = u < p ? 0.0f : keep;
        mask[i] = mk;
        y[i] = x[i] * mk;
    }
}

__global__ void sgd_kernel(float *p, const float *g, float *v, int64_t n, float lr, float mu,
                           bool nesterov, float wd)
{
    for (int64_t i = tid(); i < n; i += nthreads()) {
        if (mu == 0.0f) {
            p[i] -= lr * (g[i] + wd * p[i]);
            continue;
        }
        float gi = g[i] + wd * p[i];
        float vi = mu * v[i] + gi;
        v[i] = vi;
        p[i] -= lr * (nesterov ? gi + mu * vi : vi);
    }
}

/* decay: 1 for Adam (exact), 1 - lr wd for AdamW, whose wd is then 0. */
__global__ void adam_kernel(float *p, const float *g, float *m, float *v, int64_t n,
                            float b1, float b2, float eps, float wd, float decay, float c1,
                            float c2)
{
    for (int64_t i = tid(); i < n; i += nthreads()) {
        float gi = g[i] + wd * p[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - c1 * mi / (sqrtf(vi) * c2 + eps);
    }
}

__global__ void adagrad_kernel(float *p, const float *g, float *sum, int64_t n, float lr,
                               float eps, float wd)
{
    for (int64_t i = tid(); i < n; i += nthreads()) {
        float gi = g[i] + wd * p[i];
        float si = sum[i] + gi * gi;
        sum[i] = si;
        p[i] -= lr * gi / (sqrtf(si) + eps);
    }
}

/* ---- softmax and losses: one warp per row ----------------------------- */

__global__ void softmax_fwd_kernel(const float *x, float *y, int64_t rows, int64_t cols)
{
    int lane = threadIdx.x & 31;
    for (int64_t r = tid() >> 5; r < rows; r += nthreads() >> 5) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float mx = xr[0];
        for (int64_t j = lane; j < cols; j += 32)
            mx = xr[j] > mx ? xr[j] : mx;
        for (int o = 16; o > 0; o >>= 1) {
            float other = __shfl_xor_sync(0xffffffffu, mx, o);
            mx = other > mx ? other : mx;
        }
        double s = 0.0;
        for (int64_t j = lane; j < cols; j += 32) {
            float e = expf(xr[j] - mx);
            yr[j] = e;
            s += e;
        }
        s = warp_sum(s);
        float inv = (float)(1.0 / s);
        for (int64_t j = lane; j < cols; j += 32)
            yr[j] *= inv;   /* written above by this same lane */
    }
}

__global__ void softmax_bwd_kernel(const float *y, const float *dy, float *dx, int64_t rows,
                                   int64_t cols)
{
    int lane = threadIdx.x & 31;
    for (int64_t r = tid() >> 5; r < rows; r += nthreads() >> 5) {
        const float *yr = y + r * cols, *dr = dy + r * cols;
        double dot = 0.0;
        for (int64_t j = lane; j < cols; j += 32)
            dot += (double)yr[j] * dr[j];
        float d = (float)warp_sum(dot);
        for (int64_t j = lane; j < cols; j += 32)
            dx[r * cols + j] = yr[j] * (dr[j] - d);
    }
}

/* Per row: loss (double) and whether the argmax (first maximum, as the
 * CPU's scan) is the label; dlogits when asked. */
__global__ void xent_rows_kernel(const float *x, const int32_t *lab, int64_t rows,
                                 int64_t cols, float *dx, float scale, double *rloss,
                                 int *rok)
{
    int lane = threadIdx.x & 31;
    for (int64_t r = tid() >> 5; r < rows; r += nthreads() >> 5) {
        const float *xr = x + r * cols;
        float best = -INFINITY;
        int64_t arg = LLONG_MAX;     /* none yet */
        for (int64_t j = lane; j < cols; j += 32)
            if (arg == LLONG_MAX || xr[j] > best) {
                best = xr[j];
                arg = j;
            }
        /* Larger value wins; equal values go to the smaller index. */
        for (int o = 16; o > 0; o >>= 1) {
            float ob = __shfl_xor_sync(0xffffffffu, best, o);
            int64_t oa = __shfl_xor_sync(0xffffffffu, arg, o);
            if (oa != LLONG_MAX &&
                (arg == LLONG_MAX || ob > best || (ob == best && oa < arg))) {
                best = ob;
                arg = oa;
            }
        }
        float mx = best;
        double s = 0.0;
        for (int64_t j = lane; j < cols; j += 32)
            s += exp((double)(xr[j] - mx));
        s = warp_sum(s);
        int32_t l = lab[r];
        bool valid = l >= 0 && l < cols;
        if (lane == 0) {
            rloss[r] = valid ? log(s) - (double)(xr[l] - mx) : (double)NAN;
            rok[r] = valid && arg == l;
        }
        if (dx) {
            float inv = (float)(1.0 / s);
            float *d = dx + r * cols;
            for (int64_t j = lane; j < cols; j += 32)
                d[j] = (expf(xr[j] - mx) * inv - (j == l ? 1.0f : 0.0f)) * scale;
        }
    }
}

/* One block of 1024 threads sums v (and counts c, may be NULL) in a fixed
 * order. */
__global__ void sum_kernel(const double *v, const int *c, int64_t n, loss_result *out)
{
    __shared__ double sv[1024];
    __shared__ long long sc[1024];
    double a = 0.0;
    long long k = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        a += v[i];
        if (c)
            k += c[i];
    }
    sv[threadIdx.x] = a;
    sc[threadIdx.x] = k;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            sv[threadIdx.x] += sv[threadIdx.x + s];
            sc[threadIdx.x] += sc[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out->loss = sv[0];
        out->count = sc[0];
    }
}

__global__ void mse_kernel(const float *pred, const float *target, int64_t n, float *dpred,
                           float scale, double *part)
{
    double s = 0.0;
    for (int64_t i = tid(); i < n; i += nthreads()) {
        float d = pred[i] - target[i];
        s += (double)d * d;
        if (dpred)
            dpred[i] = 2.0f * d * scale;
    }
    s = block_sum(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

__global__ void sumsq_kernel(const float *x, int64_t n, double *part)
{
    double s = 0.0;
    for (int64_t i = tid(); i < n; i += nthreads())
        s += (double)x[i] * x[i];
    s = block_sum(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

/* ---- convolution helpers and pooling ------------------------------------
 * Templated on the index type: 32-bit arithmetic when everything fits. */

template <typename I>
struct geom {
    I n, c, h, w, oc, oh, ow, kh, kw, sh, sw, ph, pw;
};

template <typename I>
geom<I> geom_of(const dl_conv_geom *g)
{
    return geom<I>{ (I)g->n, (I)g->c, (I)g->h, (I)g->w, (I)g->oc, (I)g->oh, (I)g->ow,
                    (I)g->kh, (I)g->kw, (I)g->sh, (I)g->sw, (I)g->ph, (I)g->pw };
}

/* cols (C*kh*kw, N*oh*ow): one thread per element, zero where the window
 * reads padding. */
template <typename I>
__global__ void im2col_kernel(geom<I> g, const float *x, float *cols, I total)
{
    I ncols = g.n * g.oh * g.ow, ohw = g.oh * g.ow;
    for (I idx = (I)(blockIdx.x * blockDim.x + threadIdx.x); idx < total;
         idx += (I)(gridDim.x * blockDim.x)) {
        I r = idx / ncols, col = idx - r * ncols;
        I c = r / (g.kh * g.kw), kk = r - c * g.kh * g.kw, ki = kk / g.kw, kj = kk - ki * g.kw;
        I n = col / ohw, rem = col - n * ohw, oy = rem / g.ow, ox = rem - oy * g.ow;
        I iy = oy * g.sh - g.ph + ki, ix = ox * g.sw - g.pw + kj;
        cols[idx] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w
                        ? x[((n * g.c + c) * g.h + iy) * g.w + ix] : 0.0f;
    }
}

/* One thread per input element gathers the columns that read it, kernel
 * offsets in the CPU's order (ki, then kj), and adds them to dx. */
template <typename I>
__global__ void col2im_kernel(geom<I> g, const float *cols, float *dx, I total)
{
    I ncols = g.n * g.oh * g.ow;
    for (I idx = (I)(blockIdx.x * blockDim.x + threadIdx.x); idx < total;
         idx += (I)(gridDim.x * blockDim.x)) {
        I ix = idx % g.w, t = idx / g.w, iy = t % g.h;
        t /= g.h;
        I c = t % g.c, n = t / g.c;
        float v = dx[idx];
        for (I ki = 0; ki < g.kh; ki++) {
            I ty = iy + g.ph - ki;
            if (ty < 0)
                break;
            if (ty % g.sh)
                continue;
            I oy = ty / g.sh;
            if (oy >= g.oh)
                continue;
            for (I kj = 0; kj < g.kw; kj++) {
                I tx = ix + g.pw - kj;
                if (tx < 0)
                    break;
                if (tx % g.sw)
                    continue;
                I ox = tx / g.sw;
                if (ox >= g.ow)
                    continue;
                v += cols[((c * g.kh + ki) * g.kw + kj) * ncols + (n * g.oh + oy) * g.ow + ox];
            }
        }
        dx[idx] = v;
    }
}

/* (A, B, HW) -> (B, A, HW) */
template <typename I>
__global__ void swap_outer_kernel(const float *x, float *y, I a, I b, I hw, I total)
{
    for (I idx = (I)(blockIdx.x * blockDim.x + threadIdx.x); idx < total;
         idx += (I)(gridDim.x * blockDim.x)) {
        I p = idx % hw, t = idx / hw, k = t % a, i = t / a;
        y[idx] = x[(k * b + i) * hw + p];
    }
}

/* One thread per output. Max: the first valid element of the window,
 * replaced only by a strictly greater one, as every CPU path does. Avg:
 * padding counts in the divisor (PyTorch's default). */
template <typename I>
__global__ void pool_fwd_kernel(geom<I> g, bool is_max, const float *x, float *y,
                                int32_t *am, I total)
{
    float inv = 1.0f / (float)(g.kh * g.kw);
    for (I idx = (I)(blockIdx.x * blockDim.x + threadIdx.x); idx < total;
         idx += (I)(gridDim.x * blockDim.x)) {
        I ox = idx % g.ow, t = idx / g.ow, oy = t % g.oh, pl = t / g.oh;
        const float *xp = x + pl * g.h * g.w;
        float best = -INFINITY, sum = 0.0f;
        I arg = -1;
        for (I ki = 0; ki < g.kh; ki++) {
            I iy = oy * g.sh - g.ph + ki;
            if (iy < 0 || iy >= g.h)
                continue;
            for (I kj = 0; kj < g.kw; kj++) {
                I ix = ox * g.sw - g.pw + kj;
                if (ix < 0 || ix >= g.w)
                    continue;
                float v = xp[iy * g.w + ix];
                sum += v;
                if (arg < 0 || v > best) {
                    best = v;
                    arg = iy * g.w + ix;
                }
            }
        }
        if (is_max) {
            y[idx] = best;
            if (am)
                am[idx] = (int32_t)arg;
        } else {
            y[idx] = sum * inv;
        }
    }
}

/* One thread per input element gathers the outputs whose window covers it,
 * in output order as the CPU's scatter adds them. */
template <typename I>
__global__ void pool_bwd_kernel(geom<I> g, bool is_max, const float *dy, const int32_t *am,
                                float *dx, I total)
{
    float inv = 1.0f / (float)(g.kh * g.kw);
    for (I idx = (I)(blockIdx.x * blockDim.x + threadIdx.x); idx < total;
         idx += (I)(gridDim.x * blockDim.x)) {
        I ix = idx % g.w, t = idx / g.w, iy = t % g.h, pl = t / g.h;
        I ny = iy + g.ph - g.kh + 1, nx = ix + g.pw - g.kw + 1;
        I oy0 = ny <= 0 ? 0 : (ny + g.sh - 1) / g.sh, oy1 = (iy + g.ph) / g.sh;
        I ox0 = nx <= 0 ? 0 : (nx + g.sw - 1) / g.sw, ox1 = (ix + g.pw) / g.sw;
        if (oy1 > g.oh - 1)
            oy1 = g.oh - 1;
        if (ox1 > g.ow - 1)
            ox1 = g.ow - 1;
        I here = iy * g.w + ix;
        float v = dx[idx];
        for (I oy = oy0; oy <= oy1; oy++)
            for (I ox = ox0; ox <= ox1; ox++) {
                I o = (pl * g.oh + oy) * g.ow + ox;
                if (!is_max)
                    v += dy[o] * inv;
                else if (am[o] == (int32_t)here)
                    v += dy[o];
            }
        dx[idx] = v;
    }
}

/* 32-bit indexing when the largest tensor involved stays below 2^31 by
 * more than one grid's stride (the loop index must not overflow). */
constexpr int64_t INDEX32_MAX = INT32_MAX - MAX_BLOCKS * BLOCK;

bool small_geom(const dl_conv_geom *g)
{
    int64_t in = g->n * g->c * g->h * g->w;
    int64_t cols = g->c * g->kh * g->kw * g->n * g->oh * g->ow;
    int64_t out = g->n * (g->oc > g->c ? g->oc : g->c) * g->oh * g->ow;
    int64_t most = in > cols ? in : cols;
    most = most > out ? most : out;
    return most < INDEX32_MAX;
}

/* ---- batch normalisation ---------------------------------------------------
 * Per channel: partial sums over P parts of its n * hw values (one block
 * each), then one thread per channel adds the parts in order. */

enum { BN_SUM, BN_CENTERED, BN_BWD };

int bn_parts(int64_t n, int64_t hw)
{
    int64_t m = n * hw, p = m / 4096;
    return (int)(p < 1 ? 1 : p > 64 ? 64 : p);
}

template <int MODE>
__device__ __forceinline__ void bn_terms(float xv, float dyv, double mean_d, float mean_f,
                                         float is, double &a, double &b)
{
    if (MODE == BN_SUM) {
        a += xv;
    } else if (MODE == BN_CENTERED) {
        double d = (double)xv - mean_d;
        a += d * d;
    } else {
        a += dyv;
        b += (double)dyv * (double)(xv - mean_f) * (double)is;
    }
}

/* hw > 1: block (channel, part) walks its slice of the channel's planes. */
template <int MODE>
__global__ void bn_part_planes(const float *x, const float *dy, const double *mean_d,
                               const float *mean_f, const float *invstd, int64_t n,
                               int64_t c, int64_t hw, double *part)
{
    int64_t ch = blockIdx.x;
    int P = gridDim.y, p = blockIdx.y;
    int64_t m = n * hw, e0 = m * p / P, e1 = m * (p + 1) / P;
    double md = MODE == BN_CENTERED ? mean_d[ch] : 0.0;
    float mf = MODE == BN_BWD ? mean_f[ch] : 0.0f, is = MODE == BN_BWD ? invstd[ch] : 0.0f;
    double a = 0.0, b = 0.0;
    for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
        int64_t i = e / hw, at = (i * c + ch) * hw + (e - i * hw);
        bn_terms<MODE>(x[at], MODE == BN_BWD ? dy[at] : 0.0f, md, mf, is, a, b);
    }
    a = block_sum(a);
    b = block_sum(b);
    if (threadIdx.x == 0) {
        part[(ch * P + p) * 2] = a;
        part[(ch * P + p) * 2 + 1] = b;
    }
}

/* hw == 1 (features of rows): 32 channels per block side by side, so that
 * a warp reads 32 neighbouring floats; 8 rows at a time. */
template <int MODE>
__global__ void bn_part_rows(const float *x, const float *dy, const double *mean_d,
                             const float *mean_f, const float *invstd, int64_t n, int64_t c,
                             double *part)
{
    __shared__ double sa[8][33], sb[8][33];
    int64_t ch = blockIdx.x * 32 + threadIdx.x;
    int P = gridDim.y, p = blockIdx.y;
    int64_t r0 = n * p / P, r1 = n * (p + 1) / P;
    double a = 0.0, b = 0.0;
    if (ch < c) {
        double md = MODE == BN_CENTERED ? mean_d[ch] : 0.0;
        float mf = MODE == BN_BWD ? mean_f[ch] : 0.0f, is = MODE == BN_BWD ? invstd[ch] : 0.0f;
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
            int64_t at = r * c + ch;
            bn_terms<MODE>(x[at], MODE == BN_BWD ? dy[at] : 0.0f, md, mf, is, a, b);
        }
    }
    sa[threadIdx.y][threadIdx.x] = a;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && ch < c) {
        double ta = 0.0, tb = 0.0;
        for (int k = 0; k < 8; k++) {
            ta += sa[k][threadIdx.x];
            tb += sb[k][threadIdx.x];
        }
        part[(ch * P + p) * 2] = ta;
        part[(ch * P + p) * 2 + 1] = tb;
    }
}

template <int MODE>
void bn_parts_launch(cudaStream_t s, const float *x, const float *dy, const double *mean_d,
                     const float *mean_f, const float *invstd, int64_t n, int64_t c,
                     int64_t hw, int P, double *part)
{
    if (hw == 1) {
        dim3 grid((unsigned)((c + 31) / 32), (unsigned)P), block(32, 8);
        bn_part_rows<MODE><<<grid, block, 0, s>>>(x, dy, mean_d, mean_f, invstd, n, c, part);
    } else {
        dim3 grid((unsigned)c, (unsigned)P);
        bn_part_planes<MODE><<<grid, BLOCK, 0, s>>>(x, dy, mean_d, mean_f, invstd, n, c, hw,
                                                    part);
    }
}

__global__ void bn_mean_kernel(const double *part, int P, int64_t c, double m, double *mean)
{
    for (int64_t ch = tid(); ch < c; ch += nthreads()) {
        double s = 0.0;
        for (int p = 0; p < P; p++)
            s += part[(ch * P + p) * 2];
        mean[ch] = s / m;
    }
}

__global__ void bn_fwd_finish_kernel(const double *part, int P, int64_t c, int64_t m,
                                     const double *mean_d, const float *gamma,
                                     const float *beta, float *save_mean, float *save_invstd,
                                     float *run_mean, float *run_var, float momentum,
                                     float eps, float *ab)
{
    for (int64_t ch = tid(); ch < c; ch += nthreads()) {
        double s2 = 0.0;
        for (int p = 0; p < P; p++)
            s2 += part[(ch * P + p) * 2];
        double mean = mean_d[ch], var = s2 / (double)m;
        float invstd = (float)(1.0 / sqrt(var + eps));
        float a = gamma[ch] * invstd, b = beta[ch] - (float)mean * a;
        ab[2 * ch] = a;
        ab[2 * ch + 1] = b;
        save_mean[ch] = (float)mean;
        save_invstd[ch] = invstd;
        double unbiased = m > 1 ? s2 / (double)(m - 1) : var;
        run_mean[ch] = (1.0f - momentum) * run_mean[ch] + momentum * (float)mean;
        run_var[ch] = (1.0f - momentum) * run_var[ch] + momentum * (float)unbiased;
    }
}

__global__ void bn_apply_kernel(const float *x, float *y, const float *ab, int64_t total,
                                int64_t c, int64_t hw)
{
    for (int64_t i = tid(); i < total; i += nthreads()) {
        int64_t ch = (i / hw) % c;
        y[i] = x[i] * ab[2 * ch] + ab[2 * ch + 1];
    }
}

__global__ void bn_infer_kernel(const float *x, float *y, const float *gamma, const float *beta,
                                const float *run_mean, const float *run_var, float eps,
                                int64_t total, int64_t c, int64_t hw)
{
    for (int64_t i = tid(); i < total; i += nthreads()) {
        int64_t ch = (i / hw) % c;
        float a = gamma[ch] / sqrtf(run_var[ch] + eps);
        float b = beta[ch] - run_mean[ch] * a;
        y[i] = x[i] * a + b;
    }
}

__global__ void bn_bwd_finish_kernel(const double *part, int P, int64_t c, double m,
                                     const float *gamma, const float *save_invstd,
                                     float *dgamma, float *dbeta, float *coef)
{
    for (int64_t ch = tid(); ch < c; ch += nthreads()) {
        double sdy = 0.0, sdyx = 0.0;
        for (int p = 0; p < P; p++) {
            sdy += part[(ch * P + p) * 2];
            sdyx += part[(ch * P + p) * 2 + 1];
        }
        dgamma[ch] += (float)sdyx;
        dbeta[ch] += (float)sdy;
        coef[3 * ch] = gamma[ch] * save_invstd[ch];
        coef[3 * ch + 1] = (float)(sdy / m);
        coef[3 * ch + 2] = (float)(sdyx / m);
    }
}

/* dx = gamma * is * (dy - mean(dy) - xhat * mean(dy xhat)) */
__global__ void bn_bwd_apply_kernel(const float *x, const float *dy, const float *save_mean,
                                    const float *save_invstd, const float *coef, float *dx,
                                    int64_t total, int64_t c, int64_t hw)
{
    for (int64_t i = tid(); i < total; i += nthreads()) {
        int64_t ch = (i / hw) % c;
        float xhat = (x[i] - save_mean[ch]) * save_invstd[ch];
        dx[i] = coef[3 * ch] * (dy[i] - coef[3 * ch + 1] - xhat * coef[3 * ch + 2]);
    }
}

/* Layout of the batchnorm scratch: parts, channel means (double), then
 * three floats per channel. */
struct bn_scratch {
    double *part, *mean;
    float *coef;
    int P;
};

bn_scratch bn_carve(void *scratch, int64_t n, int64_t c, int64_t hw)
{
    bn_scratch b;
    b.P = bn_parts(n, hw);
    char *p = (char *)scratch;
    b.part = (double *)p;
    p += align256((size_t)(c * b.P * 2) * sizeof(double));
    b.mean = (double *)p;
    p += align256((size_t)c * sizeof(double));
    b.coef = (float *)p;
    return b;
}

/* ---- embeddings ------------------------------------------------------------ */

__global__ void embed_fwd_kernel(const float *ids, const float *table, float *y, int64_t nids,
                                 int64_t dim, int64_t vocab, unsigned long long *bad)
{
    int64_t total = nids * dim;
    for (int64_t idx = tid(); idx < total; idx += nthreads()) {
        int64_t i = idx / dim, k = idx - i * dim;
        float f = ids[i];
        if (!(f >= 0.0f && f < (float)vocab) || f != floorf(f)) {
            if (k == 0)
                atomicMin(bad, (unsigned long long)i);   /* integer: order-free */
            y[idx] = 0.0f;
            continue;
        }
        y[idx] = table[(int64_t)f * dim + k];
    }
}

__global__ void embed_keys_kernel(const float *ids, int *keys, int *pos, int n)
{
    for (int64_t i = tid(); i < n; i += nthreads()) {
        keys[i] = (int)ids[i];
        pos[i] = (int)i;
    }
}

/* The first thread of each run of equal sorted ids adds the run's rows in
 * position order (the sort is stable). */
__global__ void embed_bwd_kernel(const int *keys, const int *pos, const float *dy,
                                 float *dtable, int n, int64_t dim)
{
    int64_t total = (int64_t)n * dim;
    for (int64_t idx = tid(); idx < total; idx += nthreads()) {
        int64_t s = idx / dim, k = idx - s * dim;
        int key = keys[s];
        if (s > 0 && keys[s - 1] == key)
            continue;
        float *row = dtable + (int64_t)key * dim + k;
        float v = *row;
        for (int64_t t = s; t < n && keys[t] == key; t++)
            v += dy[(int64_t)pos[t] * dim + k];
        *row = v;
    }
}

struct embed_scratch {
    int *keys, *pos, *keys_out, *pos_out;
    void *temp;
    size_t temp_bytes;
};

size_t sort_temp_bytes(int n)
{
    size_t temp = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, temp, (const int *)nullptr, (int *)nullptr,
                                    (const int *)nullptr, (int *)nullptr, n);
    return temp;
}

embed_scratch embed_carve(void *scratch, int64_t nids)
{
    embed_scratch e;
    size_t one = align256((size_t)nids * sizeof(int));
    char *p = (char *)scratch;
    e.keys = (int *)p;
    e.pos = (int *)(p + one);
    e.keys_out = (int *)(p + 2 * one);
    e.pos_out = (int *)(p + 3 * one);
    e.temp = p + 4 * one;
    e.temp_bytes = sort_temp_bytes((int)nids);
    return e;
}

/* ---- the graph layers' kernels ------------------------------------------------
 * Each thread takes an index and calls graph_body.h's body for it; the op
 * (binary op, post activation, unary kind, softmax or log) is a template
 * argument, so that a kernel's switch folds away. Geometry travels by
 * value. */

template <int OP, int POST>
__global__ void binary_fwd_kernel(dl_strided g, const float *a, const float *b, float *y,
                                  int64_t n)
{
    for (int64_t j = tid(); j < n; j += nthreads())
        body_binary_fwd((dl_binop)OP, POST, &g, a, b, y, j);
}

/* One thread an element of dx: it gathers the positions that read it. */
template <int OP>
__global__ void binary_bwd_kernel(body_split sp, int k, const float *a, const float *b,
                                  const float *dy, float *dx)
{
    for (int64_t j = tid(); j < sp.kn; j += nthreads())
        body_binary_bwd((dl_binop)OP, &sp, k, a, b, dy, dx, j);
}

__global__ void copy_strided_kernel(dl_strided g, const float *x, float *y, int64_t n)
{
    for (int64_t j = tid(); j < n; j += nthreads())
        body_copy(&g, x, y, j);
}

__global__ void reduce_fwd_kernel(body_split sp, const float *x, float *y, float scale)
{
    for (int64_t j = tid(); j < sp.kn; j += nthreads())
        body_reduce_fwd(&sp, x, y, scale, j);
}

__global__ void reduce_bwd_kernel(dl_strided g, const float *dy, float *dx, float scale,
                                  int64_t n)
{
    for (int64_t j = tid(); j < n; j += nthreads())
        body_reduce_bwd(&g, dy, dx, scale, j);
}

template <int KIND>
__global__ void unary_fwd_kernel(float a, float b, const float *x, float *y, int64_t n)
{
    for (int64_t i = tid(); i < n; i += nthreads())
        y[i] = body_unary_fwd((dl_unary_kind)KIND, a, b, x[i]);
}

/* Only sqrt reads y, only the others x. */
template <int KIND>
__global__ void unary_bwd_kernel(float a, float b, const float *x, const float *y,
                                 const float *dy, float *dx, int64_t n)
{
    for (int64_t i = tid(); i < n; i += nthreads()) {
        float xv = KIND == DL_UN_SQRT ? 0.0f : x[i], yv = KIND == DL_UN_SQRT ? y[i] : 0.0f;
        dx[i] = dy[i] * body_unary_grad((dl_unary_kind)KIND, a, b, xv, yv);
    }
}

/* One thread a column (o, i) of (outer, len, inner): neighbouring threads
 * read neighbouring values when inner > 1. */
template <bool LOG>
__global__ void softmax_axis_fwd_kernel(const float *x, float *y, int64_t outer, int64_t len,
                                        int64_t inner)
{
    for (int64_t c = tid(); c < outer * inner; c += nthreads()) {
        int64_t o = c / inner, at = o * len * inner + (c - o * inner);
        body_softmax_col(LOG, x + at, y + at, len, inner);
    }
}

template <bool LOG>
__global__ void softmax_axis_bwd_kernel(const float *y, const float *dy, float *dx,
                                        int64_t outer, int64_t len, int64_t inner)
{
    for (int64_t c = tid(); c < outer * inner; c += nthreads()) {
        int64_t o = c / inner, at = o * len * inner + (c - o * inner);
        body_softmax_col_bwd(LOG, y + at, dy + at, dx + at, len, inner);
    }
}

/* One thread a row of attention scores: row r is query r % tq of its
 * head, of the sample's qn valid queries and kn valid keys. */
__global__ void attn_softmax_kernel(float *p, int64_t rows, int64_t tq, int64_t tk, float scale,
                                    bool causal, int64_t qn, int64_t kn, int64_t off)
{
    for (int64_t r = tid(); r < rows; r += nthreads())
        body_attn_row(p + r * tk, body_attn_keys(r % tq, qn, kn, causal, off), tk, scale);
}

__global__ void attn_softmax_bwd_kernel(const float *p, float *dp, int64_t rows, int64_t tk,
                                        float scale)
{
    for (int64_t r = tid(); r < rows; r += nthreads())
        body_attn_row_bwd(p + r * tk, dp + r * tk, tk, scale);
}

/* One block a row: the statistics by block_sum (double, fixed order),
 * then the row. stats (may be NULL) receives mean and rstd. */
__global__ void layernorm_fwd_kernel(const float *x, const float *w, const float *b, float *y,
                                     double *stats, int64_t rows, int64_t d, float eps)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * d;
        double mean = block_sum(body_ln_sum(xr, d, threadIdx.x, BLOCK, 0.0, false)) / (double)d;
        double rstd = body_ln_rstd(block_sum(body_ln_sum(xr, d, threadIdx.x, BLOCK, mean, true)),
                                   d, eps);
        if (stats && threadIdx.x == 0) {
            stats[2 * r] = mean;
            stats[2 * r + 1] = rstd;
        }
        if (y)
            for (int64_t j = threadIdx.x; j < d; j += BLOCK)
                y[r * d + j] = body_ln_y(xr[j], mean, rstd, w[j], b[j]);
    }
}

/* dx of one block a row, from the statistics layernorm_fwd_kernel saved. */
__global__ void layernorm_dx_kernel(const float *x, const float *w, const float *dy, float *dx,
                                    const double *stats, int64_t rows, int64_t d)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * d, *dr = dy + r * d;
        double mean = stats[2 * r], rstd = stats[2 * r + 1], s1, s2;
        body_ln_bwd_sums(xr, w, dr, d, threadIdx.x, BLOCK, mean, rstd, &s1, &s2);
        s1 = block_sum(s1);
        s2 = block_sum(s2);
        for (int64_t j = threadIdx.x; j < d; j += BLOCK)
            dx[r * d + j] = body_ln_dx(xr[j], w[j], dr[j], mean, rstd, s1, s2, d);
    }
}

/* One thread a column: dw and db summed over the rows in order. */
__global__ void layernorm_dwdb_kernel(const float *x, const float *dy, const double *stats,
                                      float *dw, float *db, int64_t rows, int64_t d)
{
    for (int64_t j = tid(); j < d; j += nthreads()) {
        double sw, sb;
        body_ln_dwdb(x, dy, stats, rows, d, j, &sw, &sb);
        if (dw)
            dw[j] += (float)sw;
        if (db)
            db[j] += (float)sb;
    }
}

/* Sequences: one thread a value (mask) or a column of a sample (pool). */
__global__ void seq_mask_kernel(int64_t t, int64_t d, const int32_t *len, const float *x,
                                float *y, int64_t n)
{
    for (int64_t j = tid(); j < n; j += nthreads())
        body_seq_mask(t, d, len, x, y, j);
}

__global__ void seq_pool_fwd_kernel(dl_seq_pool_kind kind, int64_t t, int64_t d,
                                    const int32_t *len, const float *x, float *y, int64_t n)
{
    for (int64_t j = tid(); j < n; j += nthreads())
        body_seq_pool_fwd(kind, t, d, len, x, y, j);
}

__global__ void seq_pool_bwd_kernel(dl_seq_pool_kind kind, int64_t t, int64_t d,
                                    const int32_t *len, const float *x, const float *dy,
                                    float *dx, int64_t n)
{
    for (int64_t j = tid(); j < n; j += nthreads())
        body_seq_pool_bwd(kind, t, d, len, x, dy, dx, j);
}

template <int OP>
void launch_binary_fwd(cudaStream_t s, const dl_strided *g, const float *a, const float *b,
                       const dl_act *post, float *y, int64_t n)
{
    unsigned grid = blocks_for(n);
    switch (post ? (int)*post : -1) {
    case DL_ACT_RELU:
        binary_fwd_kernel<OP, DL_ACT_RELU><<<grid, BLOCK, 0, s>>>(*g, a, b, y, n);
        break;
    case DL_ACT_TANH:
        binary_fwd_kernel<OP, DL_ACT_TANH><<<grid, BLOCK, 0, s>>>(*g, a, b, y, n);
        break;
    case DL_ACT_SIGMOID:
        binary_fwd_kernel<OP, DL_ACT_SIGMOID><<<grid, BLOCK, 0, s>>>(*g, a, b, y, n);
        break;
    default:
        binary_fwd_kernel<OP, -1><<<grid, BLOCK, 0, s>>>(*g, a, b, y, n);
    }
}

}  // namespace

/* ---- launchers ---------------------------------------------------------- */

cudaError_t k_fill(cudaStream_t s, float *x, int64_t n, float value)
{
    fill_kernel<<<blocks_for(n), BLOCK, 0, s>>>(x, n, value);
    return cudaGetLastError();
}

cudaError_t k_scale(cudaStream_t s, float *x, int64_t n, float beta)
{
    scale_kernel<<<blocks_for(n), BLOCK, 0, s>>>(x, n, beta);
    return cudaGetLastError();
}

cudaError_t k_bias_add(cudaStream_t s, float *y, const float *b, int64_t rows, int64_t cols)
{
    bias_add_kernel<<<blocks_for(rows * cols), BLOCK, 0, s>>>(y, b, rows * cols, cols);
    return cudaGetLastError();
}

cudaError_t k_bias_add_nchw(cudaStream_t s, float *y, const float *b, int64_t n, int64_t c,
                            int64_t hw)
{
    int64_t total = n * c * hw;
    bias_add_nchw_kernel<<<blocks_for(total), BLOCK, 0, s>>>(y, b, total, c, hw);
    return cudaGetLastError();
}

/* ---- the batch-invariant dense forward ------------------------------------ */

/* C[i, j] = post(dot(A row i, B row j) + bias[j]), A (m, k) and B (n, k)
 * row-major: a warp an output, each lane summing every 32nd product in
 * order, then the same shuffle tree. One order of operations whatever m,
 * so a row's bits never depend on the rows beside it (cuBLAS chooses its
 * kernel, and its split of k, by the shape). A: -1 for no activation. */
template <int A>
__global__ void gemm_rows_kernel(int64_t m, int64_t n, int64_t k, const float *a,
                                 const float *b, const float *bias, float *c)
{
    int lane = (int)(threadIdx.x & 31);
    int64_t warps = nthreads() / 32;
    for (int64_t o = tid() / 32; o < m * n; o += warps) {
        const float *ai = a + (o / n) * k, *bj = b + (o % n) * k;
        float v = 0.0f;
        for (int64_t p = lane; p < k; p += 32)
            v = fmaf(ai[p], bj[p], v);
        for (int s = 16; s > 0; s >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, s);
        if (lane != 0)
            continue;
        if (bias)
            v += bias[o % n];
        if (A == DL_ACT_RELU)
            v = v > 0.0f ? v : 0.0f;
        else if (A == DL_ACT_TANH)
            v = tanhf(v);
        else if (A == DL_ACT_SIGMOID)
            v = 1.0f / (1.0f + expf(-v));
        c[o] = v;
    }
}

cudaError_t k_gemm_rows(cudaStream_t s, int64_t m, int64_t n, int64_t k, const float *a,
                        const float *b, const float *bias, const dl_act *post, float *c)
{
    unsigned g = blocks_for(m * n * 32);
    switch (post ? (int)*post : -1) {
    case DL_ACT_RELU:
        gemm_rows_kernel<DL_ACT_RELU><<<g, BLOCK, 0, s>>>(m, n, k, a, b, bias, c);
        break;
    case DL_ACT_TANH:
        gemm_rows_kernel<DL_ACT_TANH><<<g, BLOCK, 0, s>>>(m, n, k, a, b, bias, c);
        break;
    case DL_ACT_SIGMOID:
        gemm_rows_kernel<DL_ACT_SIGMOID><<<g, BLOCK, 0, s>>>(m, n, k, a, b, bias, c);
        break;
    default:
        gemm_rows_kernel<-1><<<g, BLOCK, 0, s>>>(m, n, k, a, b, bias, c);
    }
    return cudaGetLastError();
}

cudaError_t k_act_fwd(cudaStream_t s, dl_act act, const float *x, float *y, int64_t n)
{
    unsigned g = blocks_for(n);
    switch (act) {
    case DL_ACT_RELU:    act_fwd_kernel<DL_ACT_RELU><<<g, BLOCK, 0, s>>>(x, y, n); break;
    case DL_ACT_TANH:    act_fwd_kernel<DL_ACT_TANH><<<g, BLOCK, 0, s>>>(x, y, n); break;
    case DL_ACT_SIGMOID: act_fwd_kernel<DL_ACT_SIGMOID><<<g, BLOCK, 0, s>>>(x, y, n); break;
    }
    return cudaGetLastError();
}

cudaError_t k_act_bwd(cudaStream_t s, dl_act act, const float *y, const float *dy, float *dx,
                      int64_t n)
{
    unsigned g = blocks_for(n);
    switch (act) {
    case DL_ACT_RELU:    act_bwd_kernel<DL_ACT_RELU><<<g, BLOCK, 0, s>>>(y, dy, dx, n); break;
    case DL_ACT_TANH:    act_bwd_kernel<DL_ACT_TANH><<<g, BLOCK, 0, s>>>(y, dy, dx, n); break;
    case DL_ACT_SIGMOID: act_bwd_kernel<DL_ACT_SIGMOID><<<g, BLOCK, 0, s>>>(y, dy, dx, n); break;
    }
    return cudaGetLastError();
}

cudaError_t k_softmax_fwd(cudaStream_t s, const float *x, float *y, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    softmax_fwd_kernel<<<warp_blocks(rows), BLOCK, 0, s>>>(x, y, rows, cols);
    return cudaGetLastError();
}

cudaError_t k_softmax_bwd(cudaStream_t s, const float *y, const float *dy, float *dx,
                          int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    softmax_bwd_kernel<<<warp_blocks(rows), BLOCK, 0, s>>>(y, dy, dx, rows, cols);
    return cudaGetLastError();
}

cudaError_t k_im2col(cudaStream_t s, const dl_conv_geom *g, const float *x, float *cols)
{
    int64_t total = g->c * g->kh * g->kw * g->n * g->oh * g->ow;
    if (total <= 0)
        return cudaSuccess;
    if (small_geom(g))
        im2col_kernel<int32_t><<<blocks_for(total), BLOCK, 0, s>>>(geom_of<int32_t>(g), x, cols,
                                                                  (int32_t)total);
    else
        im2col_kernel<int64_t><<<blocks_for(total), BLOCK, 0, s>>>(geom_of<int64_t>(g), x, cols,
                                                                  total);
    return cudaGetLastError();
}

cudaError_t k_col2im(cudaStream_t s, const dl_conv_geom *g, const float *cols, float *dx)
{
    int64_t total = g->n * g->c * g->h * g->w;
    if (total <= 0)
        return cudaSuccess;
    if (small_geom(g))
        col2im_kernel<int32_t><<<blocks_for(total), BLOCK, 0, s>>>(geom_of<int32_t>(g), cols, dx,
                                                                  (int32_t)total);
    else
        col2im_kernel<int64_t><<<blocks_for(total), BLOCK, 0, s>>>(geom_of<int64_t>(g), cols, dx,
                                                                  total);
    return cudaGetLastError();
}

cudaError_t k_swap_outer(cudaStream_t s, const float *x, float *y, int64_t a, int64_t b,
                         int64_t hw)
{
    int64_t total = a * b * hw;
    if (total <= 0)
        return cudaSuccess;
    if (total < INDEX32_MAX)
        swap_outer_kernel<int32_t><<<blocks_for(total), BLOCK, 0, s>>>(
            x, y, (int32_t)a, (int32_t)b, (int32_t)hw, (int32_t)total);
    else
        swap_outer_kernel<int64_t><<<blocks_for(total), BLOCK, 0, s>>>(x, y, a, b, hw, total);
    return cudaGetLastError();
}

cudaError_t k_pool_fwd(cudaStream_t s, dl_pool_kind kind, const dl_conv_geom *g,
                       const float *x, float *y, int32_t *argmax)
{
    int64_t total = g->n * g->c * g->oh * g->ow;
    bool is_max = kind == DL_POOL_MAX;
    if (total <= 0)
        return cudaSuccess;
    if (small_geom(g))
        pool_fwd_kernel<int32_t><<<blocks_for(total), BLOCK, 0, s>>>(
            geom_of<int32_t>(g), is_max, x, y, argmax, (int32_t)total);
    else
        pool_fwd_kernel<int64_t><<<blocks_for(total), BLOCK, 0, s>>>(
            geom_of<int64_t>(g), is_max, x, y, argmax, total);
    return cudaGetLastError();
}

cudaError_t k_pool_bwd(cudaStream_t s, dl_pool_kind kind, const dl_conv_geom *g,
                       const float *dy, const int32_t *argmax, float *dx)
{
    int64_t total = g->n * g->c * g->h * g->w;
    bool is_max = kind == DL_POOL_MAX;
    if (total <= 0)
        return cudaSuccess;
    if (small_geom(g))
        pool_bwd_kernel<int32_t><<<blocks_for(total), BLOCK, 0, s>>>(
            geom_of<int32_t>(g), is_max, dy, argmax, dx, (int32_t)total);
    else
        pool_bwd_kernel<int64_t><<<blocks_for(total), BLOCK, 0, s>>>(
            geom_of<int64_t>(g), is_max, dy, argmax, dx, total);
    return cudaGetLastError();
}

size_t k_bn_scratch_bytes(int64_t n, int64_t c, int64_t hw)
{
    int P = bn_parts(n, hw);
    return align256((size_t)(c * P * 2) * sizeof(double)) +
           align256((size_t)c * sizeof(double)) + align256((size_t)(3 * c) * sizeof(float));
}

cudaError_t k_bn_fwd_train(cudaStream_t s, void *scratch, const float *x, float *y,
                           const float *gamma, const float *beta, float *save_mean,
                           float *save_invstd, float *run_mean, float *run_var,
                           float momentum, float eps, int64_t n, int64_t c, int64_t hw)
{
    if (n * c * hw <= 0)
        return cudaSuccess;
    bn_scratch b = bn_carve(scratch, n, c, hw);
    int64_t m = n * hw;
    /* Two passes as the CPU: the mean, then the centred sum of squares. */
    bn_parts_launch<BN_SUM>(s, x, nullptr, nullptr, nullptr, nullptr, n, c, hw, b.P, b.part);
    bn_mean_kernel<<<blocks_for(c), BLOCK, 0, s>>>(b.part, b.P, c, (double)m, b.mean);
    bn_parts_launch<BN_CENTERED>(s, x, nullptr, b.mean, nullptr, nullptr, n, c, hw, b.P,
                                 b.part);
    bn_fwd_finish_kernel<<<blocks_for(c), BLOCK, 0, s>>>(b.part, b.P, c, m, b.mean, gamma,
                                                         beta, save_mean, save_invstd,
                                                         run_mean, run_var, momentum, eps,
                                                         b.coef);
    bn_apply_kernel<<<blocks_for(n * c * hw), BLOCK, 0, s>>>(x, y, b.coef, n * c * hw, c, hw);
    return cudaGetLastError();
}

cudaError_t k_bn_fwd_infer(cudaStream_t s, const float *x, float *y, const float *gamma,
                           const float *beta, const float *run_mean, const float *run_var,
                           float eps, int64_t n, int64_t c, int64_t hw)
{
    int64_t total = n * c * hw;
    if (total <= 0)
        return cudaSuccess;
    bn_infer_kernel<<<blocks_for(total), BLOCK, 0, s>>>(x, y, gamma, beta, run_mean, run_var,
                                                        eps, total, c, hw);
    return cudaGetLastError();
}

cudaError_t k_bn_bwd(cudaStream_t s, void *scratch, const float *x, const float *dy,
                     const float *gamma, const float *save_mean, const float *save_invstd,
                     float *dx, float *dgamma, float *dbeta, int64_t n, int64_t c, int64_t hw)
{
    int64_t total = n * c * hw;
    if (total <= 0)
        return cudaSuccess;
    bn_scratch b = bn_carve(scratch, n, c, hw);
    bn_parts_launch<BN_BWD>(s, x, dy, nullptr, save_mean, save_invstd, n, c, hw, b.P, b.part);
    bn_bwd_finish_kernel<<<blocks_for(c), BLOCK, 0, s>>>(b.part, b.P, c, (double)(n * hw),
                                                         gamma, save_invstd, dgamma, dbeta,
                                                         b.coef);
    bn_bwd_apply_kernel<<<blocks_for(total), BLOCK, 0, s>>>(x, dy, save_mean, save_invstd,
                                                            b.coef, dx, total, c, hw);
    return cudaGetLastError();
}

cudaError_t k_dropout(cudaStream_t s, const float *x, float *y, float *mask, int64_t n,
                      float p, float keep, uint64_t key)
{
    dropout_kernel<<<blocks_for(n), BLOCK, 0, s>>>(x, y, mask, n, p, keep, key);
    return cudaGetLastError();
}

cudaError_t k_mul(cudaStream_t s, const float *a, const float *b, float *y, int64_t n)
{
    mul_kernel<<<blocks_for(n), BLOCK, 0, s>>>(a, b, y, n);
    return cudaGetLastError();
}

cudaError_t k_embed_fwd(cudaStream_t s, const float *ids, const float *table, float *y,
                        int64_t nids, int64_t dim, int64_t vocab, unsigned long long *bad)
{
    embed_fwd_kernel<<<blocks_for(nids * dim), BLOCK, 0, s>>>(ids, table, y, nids, dim, vocab,
                                                              bad);
    return cudaGetLastError();
}

size_t k_embed_bwd_scratch_bytes(int64_t nids)
{
    return 4 * align256((size_t)nids * sizeof(int)) + align256(sort_temp_bytes((int)nids));
}

cudaError_t k_embed_bwd(cudaStream_t s, void *scratch, size_t scratch_bytes, const float *ids,
                        const float *dy, float *dtable, int64_t nids, int64_t dim)
{
    if (nids <= 0 || dim <= 0)
        return cudaSuccess;
    if (nids > INT_MAX || scratch_bytes < k_embed_bwd_scratch_bytes(nids))
        return cudaErrorInvalidValue;
    embed_scratch e = embed_carve(scratch, nids);
    int n = (int)nids;
    embed_keys_kernel<<<blocks_for(n), BLOCK, 0, s>>>(ids, e.keys, e.pos, n);
    cudaError_t st = cub::DeviceRadixSort::SortPairs(e.temp, e.temp_bytes, e.keys, e.keys_out,
                                                     e.pos, e.pos_out, n, 0,
                                                     (int)(sizeof(int) * 8), s);
    if (st != cudaSuccess)
        return st;
    embed_bwd_kernel<<<blocks_for(nids * dim), BLOCK, 0, s>>>(e.keys_out, e.pos_out, dy, dtable,
                                                              n, dim);
    return cudaGetLastError();
}

size_t k_xent_scratch_bytes(int64_t rows)
{
    return align256((size_t)rows * sizeof(double)) + align256((size_t)rows * sizeof(int));
}

cudaError_t k_xent(cudaStream_t s, void *scratch, const float *logits, const int32_t *labels,
                   int64_t rows, int64_t cols, float *dlogits, float scale, loss_result *out)
{
    double *rloss = (double *)scratch;
    int *rok = (int *)((char *)scratch + align256((size_t)rows * sizeof(double)));
    xent_rows_kernel<<<warp_blocks(rows), BLOCK, 0, s>>>(logits, labels, rows, cols, dlogits,
                                                         scale, rloss, rok);
    sum_kernel<<<1, 1024, 0, s>>>(rloss, rok, rows, out);
    return cudaGetLastError();
}

/* A fixed grid per size keeps the partial sums, and so the total, the
 * same from run to run. */
static unsigned mse_blocks(int64_t n)
{
    int64_t b = (n + 4 * BLOCK - 1) / (4 * BLOCK);
    return (unsigned)(b < 1 ? 1 : b > 1024 ? 1024 : b);
}

size_t k_mse_scratch_bytes(int64_t n)
{
    return align256((size_t)mse_blocks(n) * sizeof(double));
}

cudaError_t k_mse(cudaStream_t s, void *scratch, const float *pred, const float *target,
                  int64_t n, float *dpred, float scale, loss_result *out)
{
    double *part = (double *)scratch;
    unsigned g = mse_blocks(n);
    mse_kernel<<<g, BLOCK, 0, s>>>(pred, target, n, dpred, scale, part);
    sum_kernel<<<1, 1024, 0, s>>>(part, nullptr, g, out);
    return cudaGetLastError();
}

cudaError_t k_sgd(cudaStream_t s, float *p, const float *g, float *v, int64_t n, float lr,
                  float mu, bool nesterov, float wd)
{
    sgd_kernel<<<blocks_for(n), BLOCK, 0, s>>>(p, g, v, n, lr, mu, nesterov, wd);
    return cudaGetLastError();
}

cudaError_t k_adam(cudaStream_t s, float *p, const float *g, float *m, float *v, int64_t n,
                   float b1, float b2, float eps, float wd, float decay, float c1, float c2)
{
    adam_kernel<<<blocks_for(n), BLOCK, 0, s>>>(p, g, m, v, n, b1, b2, eps, wd, decay, c1, c2);
    return cudaGetLastError();
}

cudaError_t k_adagrad(cudaStream_t s, float *p, const float *g, float *sum, int64_t n,
                      float lr, float eps, float wd)
{
    adagrad_kernel<<<blocks_for(n), BLOCK, 0, s>>>(p, g, sum, n, lr, eps, wd);
    return cudaGetLastError();
}

size_t k_sumsq_scratch_bytes(int64_t n)
{
    return k_mse_scratch_bytes(n);
}

/* The grid of mse's: fixed per size, so the sum is the same from run to run. */
cudaError_t k_sumsq(cudaStream_t s, void *scratch, const float *x, int64_t n,
                    loss_result *out)
{
    double *part = (double *)scratch;
    unsigned g = mse_blocks(n);
    sumsq_kernel<<<g, BLOCK, 0, s>>>(x, n, part);
    sum_kernel<<<1, 1024, 0, s>>>(part, nullptr, g, out);
    return cudaGetLastError();
}

cudaError_t k_axpy(cudaStream_t s, float alpha, const float *x, float *y, int64_t n)
{
    axpy_kernel<<<blocks_for(n), BLOCK, 0, s>>>(alpha, x, y, n);
    return cudaGetLastError();
}

/* ---- the graph layers' launchers ------------------------------------------------ */

cudaError_t k_binary_fwd(cudaStream_t s, dl_binop op, const dl_strided *g, const float *a,
                         const float *b, const dl_act *post, float *y)
{
    int64_t n = body_count(g);
    if (n <= 0)
        return cudaSuccess;
    switch (op) {
    case DL_BIN_ADD: launch_binary_fwd<DL_BIN_ADD>(s, g, a, b, post, y, n); break;
    case DL_BIN_SUB: launch_binary_fwd<DL_BIN_SUB>(s, g, a, b, post, y, n); break;
    case DL_BIN_MUL: launch_binary_fwd<DL_BIN_MUL>(s, g, a, b, post, y, n); break;
    case DL_BIN_DIV: launch_binary_fwd<DL_BIN_DIV>(s, g, a, b, post, y, n); break;
    }
    return cudaGetLastError();
}

cudaError_t k_binary_bwd(cudaStream_t s, dl_binop op, const dl_strided *g, int k,
                         const float *a, const float *b, const float *dy, float *dx)
{
    if (body_count(g) <= 0)
        return cudaSuccess;
    body_split sp;
    body_split_of(g, k, &sp);
    unsigned grid = blocks_for(sp.kn);
    switch (op) {
    case DL_BIN_ADD:
        binary_bwd_kernel<DL_BIN_ADD><<<grid, BLOCK, 0, s>>>(sp, k, a, b, dy, dx);
        break;
    case DL_BIN_SUB:
        binary_bwd_kernel<DL_BIN_SUB><<<grid, BLOCK, 0, s>>>(sp, k, a, b, dy, dx);
        break;
    case DL_BIN_MUL:
        binary_bwd_kernel<DL_BIN_MUL><<<grid, BLOCK, 0, s>>>(sp, k, a, b, dy, dx);
        break;
    case DL_BIN_DIV:
        binary_bwd_kernel<DL_BIN_DIV><<<grid, BLOCK, 0, s>>>(sp, k, a, b, dy, dx);
        break;
    }
    return cudaGetLastError();
}

cudaError_t k_copy_strided(cudaStream_t s, const dl_strided *g, const float *x, float *y)
{
    int64_t n = body_count(g);
    if (n <= 0)
        return cudaSuccess;
    copy_strided_kernel<<<blocks_for(n), BLOCK, 0, s>>>(*g, x, y, n);
    return cudaGetLastError();
}

cudaError_t k_reduce_fwd(cudaStream_t s, const dl_strided *g, const float *x, float *y,
                         float scale)
{
    if (body_count(g) <= 0)
        return cudaSuccess;
    body_split sp;
    body_split_of(g, 1, &sp);
    reduce_fwd_kernel<<<blocks_for(sp.kn), BLOCK, 0, s>>>(sp, x, y, scale);
    return cudaGetLastError();
}

cudaError_t k_reduce_bwd(cudaStream_t s, const dl_strided *g, const float *dy, float *dx,
                         float scale)
{
    int64_t n = body_count(g);
    if (n <= 0)
        return cudaSuccess;
    reduce_bwd_kernel<<<blocks_for(n), BLOCK, 0, s>>>(*g, dy, dx, scale, n);
    return cudaGetLastError();
}

#define UNARY_CASES(X) \
    X(DL_UN_GELU) X(DL_UN_GELU_TANH) X(DL_UN_SILU) X(DL_UN_POW) X(DL_UN_SQRT) X(DL_UN_ERF) \
    X(DL_UN_LEAKY_RELU) X(DL_UN_CLIP) X(DL_UN_HARDSIGMOID) X(DL_UN_HARDSWISH)

cudaError_t k_unary_fwd(cudaStream_t s, const dl_unary *u, const float *x, float *y, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    unsigned grid = blocks_for(n);
    switch (u->kind) {
#define FWD_CASE(K) \
    case K: unary_fwd_kernel<K><<<grid, BLOCK, 0, s>>>(u->a, u->b, x, y, n); break;
    UNARY_CASES(FWD_CASE)
#undef FWD_CASE
    }
    return cudaGetLastError();
}

cudaError_t k_unary_bwd(cudaStream_t s, const dl_unary *u, const float *x, const float *y,
                        const float *dy, float *dx, int64_t n)
{
    if (n <= 0)
        return cudaSuccess;
    unsigned grid = blocks_for(n);
    switch (u->kind) {
#define BWD_CASE(K) \
    case K: unary_bwd_kernel<K><<<grid, BLOCK, 0, s>>>(u->a, u->b, x, y, dy, dx, n); break;
    UNARY_CASES(BWD_CASE)
#undef BWD_CASE
    }
    return cudaGetLastError();
}

#undef UNARY_CASES

cudaError_t k_attn_softmax(cudaStream_t s, float *p, int64_t rows, int64_t tq, int64_t tk,
                           float scale, bool causal, int64_t qn, int64_t kn, int64_t off)
{
    if (rows <= 0 || tk <= 0)
        return cudaSuccess;
    attn_softmax_kernel<<<blocks_for(rows), BLOCK, 0, s>>>(p, rows, tq, tk, scale, causal, qn,
                                                           kn, off);
    return cudaGetLastError();
}

cudaError_t k_attn_softmax_bwd(cudaStream_t s, const float *p, float *dp, int64_t rows,
                               int64_t tk, float scale)
{
    if (rows <= 0 || tk <= 0)
        return cudaSuccess;
    attn_softmax_bwd_kernel<<<blocks_for(rows), BLOCK, 0, s>>>(p, dp, rows, tk, scale);
    return cudaGetLastError();
}

cudaError_t k_softmax_axis_fwd(cudaStream_t s, bool log, const float *x, float *y,
                               int64_t outer, int64_t len, int64_t inner)
{
    if (outer <= 0 || len <= 0 || inner <= 0)
        return cudaSuccess;
    unsigned grid = blocks_for(outer * inner);
    if (log)
        softmax_axis_fwd_kernel<true><<<grid, BLOCK, 0, s>>>(x, y, outer, len, inner);
    else
        softmax_axis_fwd_kernel<false><<<grid, BLOCK, 0, s>>>(x, y, outer, len, inner);
    return cudaGetLastError();
}

cudaError_t k_softmax_axis_bwd(cudaStream_t s, bool log, const float *y, const float *dy,
                               float *dx, int64_t outer, int64_t len, int64_t inner)
{
    if (outer <= 0 || len <= 0 || inner <= 0)
        return cudaSuccess;
    unsigned grid = blocks_for(outer * inner);
    if (log)
        softmax_axis_bwd_kernel<true><<<grid, BLOCK, 0, s>>>(y, dy, dx, outer, len, inner);
    else
        softmax_axis_bwd_kernel<false><<<grid, BLOCK, 0, s>>>(y, dy, dx, outer, len, inner);
    return cudaGetLastError();
}

cudaError_t k_layernorm_fwd(cudaStream_t s, const float *x, const float *w, const float *b,
                            float *y, int64_t rows, int64_t d, float eps)
{
    if (rows <= 0 || d <= 0)
        return cudaSuccess;
    layernorm_fwd_kernel<<<blocks_for(rows, 1), BLOCK, 0, s>>>(x, w, b, y, nullptr, rows, d,
                                                               eps);
    return cudaGetLastError();
}

size_t k_layernorm_scratch_bytes(int64_t rows)
{
    return (size_t)(rows > 0 ? rows : 1) * 2 * sizeof(double);
}

cudaError_t k_layernorm_bwd(cudaStream_t s, void *scratch, const float *x, const float *w,
                            const float *dy, float *dx, float *dw, float *db, int64_t rows,
                            int64_t d, float eps)
{
    if (rows <= 0 || d <= 0)
        return cudaSuccess;
    double *stats = (double *)scratch;
    unsigned grid = blocks_for(rows, 1);
    layernorm_fwd_kernel<<<grid, BLOCK, 0, s>>>(x, w, nullptr, nullptr, stats, rows, d, eps);
    if (dx)
        layernorm_dx_kernel<<<grid, BLOCK, 0, s>>>(x, w, dy, dx, stats, rows, d);
    if (dw || db)
        layernorm_dwdb_kernel<<<blocks_for(d), BLOCK, 0, s>>>(x, dy, stats, dw, db, rows, d);
    return cudaGetLastError();
}

cudaError_t k_seq_mask(cudaStream_t s, const dl_seq *q, const int32_t *len, const float *x,
                       float *y)
{
    int64_t n = q->n * q->t * q->d;
    if (n <= 0)
        return cudaSuccess;
    seq_mask_kernel<<<blocks_for(n), BLOCK, 0, s>>>(q->t, q->d, len, x, y, n);
    return cudaGetLastError();
}

cudaError_t k_seq_pool_fwd(cudaStream_t s, dl_seq_pool_kind kind, const dl_seq *q,
                           const int32_t *len, const float *x, float *y)
{
    int64_t n = q->n * q->d;
    if (n <= 0 || q->t <= 0)
        return cudaSuccess;
    seq_pool_fwd_kernel<<<blocks_for(n), BLOCK, 0, s>>>(kind, q->t, q->d, len, x, y, n);
    return cudaGetLastError();
}

cudaError_t k_seq_pool_bwd(cudaStream_t s, dl_seq_pool_kind kind, const dl_seq *q,
                           const int32_t *len, const float *x, const float *dy, float *dx)
{
    int64_t n = q->n * q->d;
    if (n <= 0 || q->t <= 0)
        return cudaSuccess;
    seq_pool_bwd_kernel<<<blocks_for(n), BLOCK, 0, s>>>(kind, q->t, q->d, len, x, dy, dx, n);
    return cudaGetLastError();
}
