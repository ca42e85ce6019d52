/* cpu_conv.c: the CPU backend's generic convolution pieces (im2col,
 * col2im, the (A, B, HW) swaps and the fused im2col epilogue) and pooling.
 * oneDNN's primitives are in backend_dnnl.c. */
#define _POSIX_C_SOURCE 200809L
#include "tensor/backend.h"
#include "tensor/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* ---- convolution helpers --------------------------------------------- */

typedef struct conv_job {
    const dl_conv_geom *g;
    const float *src;
    float *dst;
    int64_t a, b, hw;
    const float *bias;
    const dl_act *post;
} conv_job;

/* The dilation of a geometry (0 or 1: none). */
static int64_t dil(int64_t d) { return d > 1 ? d : 1; }

/* Output columns [*lo, *hi) whose input column ox * sw + off (off =
 * kj * dw - pw) lies inside the row; the others read padding. */
static void valid_cols(const dl_conv_geom *g, int64_t off, int64_t *lo, int64_t *hi)
{
    *lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
    int64_t last = g->w - 1 - off;     /* largest ox * sw allowed */
    *hi = last < 0 ? 0 : last / g->sw + 1;
    if (*hi > g->ow)
        *hi = g->ow;
    if (*lo > *hi)
        *lo = *hi;
}

/* Rows of im2col are short (the output width): a call to memcpy per row
 * costs more than the copy, so GCC must not turn these loops into calls. */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_MEMCPY_CALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define NO_MEMCPY_CALLS
#endif

/* One row r of cols = (channel c, kernel offset ki, kj) over all outputs. */
NO_MEMCPY_CALLS
static void im2col_task(void *ctx, int64_t r0, int64_t r1)
{
    const conv_job *j = ctx;
    const dl_conv_geom *g = j->g;
    int64_t ncols = g->n * g->oh * g->ow;
    for (int64_t r = r0; r < r1; r++) {
        int64_t c = r / (g->kh * g->kw), ki = (r / g->kw) % g->kh, kj = r % g->kw;
        int64_t lo, hi, off = kj * dil(g->dw) - g->pw;
        valid_cols(g, off, &lo, &hi);
        float *dst = j->dst + r * ncols;
        for (int64_t n = 0; n < g->n; n++) {
            const float *plane = j->src + (n * g->c + c) * g->h * g->w;
            for (int64_t oy = 0; oy < g->oh; oy++, dst += g->ow) {
                int64_t iy = oy * g->sh - g->ph + ki * dil(g->dh);
                if (iy < 0 || iy >= g->h) {
                    memset(dst, 0, (size_t)g->ow * sizeof(float));
                    continue;
                }
                const float *row = plane + iy * g->w + off;
                for (int64_t ox = 0; ox < lo; ox++)
                    dst[ox] = 0.0f;
                if (g->sw == 1)
                    for (int64_t ox = lo; ox < hi; ox++)
                        dst[ox] = row[ox];
                else
                    for (int64_t ox = lo; ox < hi; ox++)
                        dst[ox] = row[ox * g->sw];
                for (int64_t ox = hi; ox < g->ow; ox++)
                    dst[ox] = 0.0f;
            }
        }
    }
}

/* Channels [c0, c1): each channel's part of dx is written by one task. */
NO_MEMCPY_CALLS
static void col2im_task(void *ctx, int64_t c0, int64_t c1)
{
    const conv_job *j = ctx;
    const dl_conv_geom *g = j->g;
    int64_t ncols = g->n * g->oh * g->ow;
    for (int64_t c = c0; c < c1; c++)
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++) {
                int64_t lo, hi, off = kj * dil(g->dw) - g->pw;
                valid_cols(g, off, &lo, &hi);
                const float *src = j->src + ((c * g->kh + ki) * g->kw + kj) * ncols;
                for (int64_t n = 0; n < g->n; n++) {
                    float *plane = j->dst + (n * g->c + c) * g->h * g->w;
                    for (int64_t oy = 0; oy < g->oh; oy++, src += g->ow) {
                        int64_t iy = oy * g->sh - g->ph + ki * dil(g->dh);
                        if (iy < 0 || iy >= g->h)
                            continue;
                        float *row = plane + iy * g->w + off;
                        for (int64_t ox = lo; ox < hi; ox++)
                            row[ox * g->sw] += src[ox];
                    }
                }
            }
}

void cpu_im2col(dl_backend *be, const dl_conv_geom *g, const float *x,
                float *cols)
{
    (void)be;
    conv_job j = { .g = g, .src = x, .dst = cols };
    dl_parallel_for(g->c * g->kh * g->kw, 1, im2col_task, &j);
}

void cpu_col2im(dl_backend *be, const dl_conv_geom *g, const float *cols,
                float *dx)
{
    (void)be;
    conv_job j = { .g = g, .src = cols, .dst = dx };
    dl_parallel_for(g->c, 1, col2im_task, &j);
}

static void swap_task(void *ctx, int64_t i0, int64_t i1)
{
    const conv_job *j = ctx;
    size_t bytes = (size_t)j->hw * sizeof(float);
    for (int64_t i = i0; i < i1; i++)            /* i indexes the output's outer axis (b) */
        for (int64_t k = 0; k < j->a; k++)
            memcpy(j->dst + (i * j->a + k) * j->hw,
                   j->src + (k * j->b + i) * j->hw, bytes);
}

void cpu_swap_outer(dl_backend *be, const float *x, float *y, int64_t a,
                    int64_t b, int64_t hw)
{
    (void)be;
    conv_job j = { .src = x, .dst = y, .a = a, .b = b, .hw = hw };
    dl_parallel_for(b, 1, swap_task, &j);
}

/* swap_task with the bias and the activation applied to each plane as it
 * is copied. */
static void swap_bias_act_task(void *ctx, int64_t i0, int64_t i1)
{
    const conv_job *j = ctx;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t k = 0; k < j->a; k++) {
            float *restrict d = j->dst + (i * j->a + k) * j->hw;
            const float *restrict s = j->src + (k * j->b + i) * j->hw;
            float v = j->bias ? j->bias[k] : 0.0f;
            for (int64_t e = 0; e < j->hw; e++)
                d[e] = s[e] + v;
            if (j->post)
                cpu_act_rows(*j->post, d, j->hw);
        }
}

void cpu_swap_bias_act(dl_backend *be, const float *x, float *y, int64_t a,
                       int64_t b, int64_t hw, const float *bias, const dl_act *post)
{
    (void)be;
    conv_job j = { .src = x, .dst = y, .a = a, .b = b, .hw = hw, .bias = bias, .post = post };
    dl_parallel_for(b, 1, swap_bias_act_task, &j);
}

/* ---- pooling ---------------------------------------------------------- */

typedef struct pool_job {
    dl_pool_kind kind;
    const dl_conv_geom *g;
    const float *src;
    float *dst;
    int32_t *argmax;
    const int32_t *argmax_in;
} pool_job;

/* The common 2x2, stride 2 case, first maximum wins as in the general
 * loop. Selects rather than branches: after a ReLU, ties and near-random
 * winners would make every branch a coin toss. */
static void maxpool_2x2(const dl_conv_geom *g, const float *x, float *restrict y,
                        int32_t *restrict am)
{
    int32_t w = (int32_t)g->w;
    for (int64_t oy = 0; oy < g->oh; oy++) {
        const float *restrict r0 = x + 2 * oy * g->w, *restrict r1 = r0 + g->w;
        float *restrict yr = y + oy * g->ow;
        int32_t base = (int32_t)(2 * oy * g->w);
        for (int64_t ox = 0; ox < g->ow; ox++) {
            int32_t c = (int32_t)(2 * ox), arg = c;
            float best = r0[c], v;
            v = r0[c + 1]; arg = v > best ? c + 1 : arg;     best = v > best ? v : best;
            v = r1[c];     arg = v > best ? w + c : arg;     best = v > best ? v : best;
            v = r1[c + 1]; arg = v > best ? w + c + 1 : arg; best = v > best ? v : best;
            yr[ox] = best;
            if (am)
                am[oy * g->ow + ox] = base + arg;
        }
    }
}

/* Max pooling whose windows all lie inside the input (no padding). */
static void maxpool_inside(const dl_conv_geom *g, const float *x, float *y, int32_t *am)
{
    if (g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2) {
        maxpool_2x2(g, x, y, am);
        return;
    }
    for (int64_t oy = 0; oy < g->oh; oy++)
        for (int64_t ox = 0; ox < g->ow; ox++) {
            int64_t base = oy * g->sh * g->w + ox * g->sw, arg = base;
            float best = x[base];
            for (int64_t ki = 0; ki < g->kh; ki++)
                for (int64_t kj = 0; kj < g->kw; kj++) {
                    int64_t at = base + ki * g->w + kj;
                    if (x[at] > best) {
                        best = x[at];
                        arg = at;
                    }
                }
            y[oy * g->ow + ox] = best;
            if (am)
                am[oy * g->ow + ox] = (int32_t)arg;
        }
}

static void pool_fwd_task(void *ctx, int64_t p0, int64_t p1)
{
    const pool_job *j = ctx;
    const dl_conv_geom *g = j->g;
    float inv = 1.0f / (float)(g->kh * g->kw);   /* PyTorch: padding counts */
    for (int64_t p = p0; p < p1; p++) {
        const float *x = j->src + p * g->h * g->w;
        float *y = j->dst + p * g->oh * g->ow;
        int32_t *am = j->argmax ? j->argmax + p * g->oh * g->ow : NULL;
        if (j->kind == DL_POOL_MAX && g->ph == 0 && g->pw == 0) {
            maxpool_inside(g, x, y, am);
            continue;
        }
        for (int64_t oy = 0; oy < g->oh; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++) {
                float best = -INFINITY, sum = 0.0f;
                int32_t arg = -1;
                for (int64_t ki = 0; ki < g->kh; ki++) {
                    int64_t iy = oy * g->sh - g->ph + ki;
                    if (iy < 0 || iy >= g->h)
                        continue;
                    for (int64_t kj = 0; kj < g->kw; kj++) {
                        int64_t ix = ox * g->sw - g->pw + kj;
                        if (ix < 0 || ix >= g->w)
                            continue;
                        float v = x[iy * g->w + ix];
                        sum += v;
                        if (v > best || arg < 0) {
                            best = v;
                            arg = (int32_t)(iy * g->w + ix);
                        }
                    }
                }
                int64_t o = oy * g->ow + ox;
                if (j->kind == DL_POOL_MAX) {
                    y[o] = best;
                    if (am)
                        am[o] = arg;
                } else {
                    y[o] = sum * inv;
                }
            }
    }
}

static void pool_bwd_task(void *ctx, int64_t p0, int64_t p1)
{
    const pool_job *j = ctx;
    const dl_conv_geom *g = j->g;
    float inv = 1.0f / (float)(g->kh * g->kw);
    for (int64_t p = p0; p < p1; p++) {
        const float *dy = j->src + p * g->oh * g->ow;
        float *dx = j->dst + p * g->h * g->w;
        if (j->kind == DL_POOL_MAX) {
            const int32_t *am = j->argmax_in + p * g->oh * g->ow;
            for (int64_t o = 0; o < g->oh * g->ow; o++)
                dx[am[o]] += dy[o];
            continue;
        }
        for (int64_t oy = 0; oy < g->oh; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++) {
                float d = dy[oy * g->ow + ox] * inv;
                for (int64_t ki = 0; ki < g->kh; ki++) {
                    int64_t iy = oy * g->sh - g->ph + ki;
                    if (iy < 0 || iy >= g->h)
                        continue;
                    for (int64_t kj = 0; kj < g->kw; kj++) {
                        int64_t ix = ox * g->sw - g->pw + kj;
                        if (ix >= 0 && ix < g->w)
                            dx[iy * g->w + ix] += d;
                    }
                }
            }
    }
}

void cpu_pool_fwd(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g,
                  const float *x, float *y, int32_t *argmax)
{
    (void)be;
    pool_job j = { kind, g, x, y, argmax, NULL };
    dl_parallel_for(g->n * g->c, 8, pool_fwd_task, &j);
}

void cpu_pool_bwd(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g,
                  const float *dy, const int32_t *argmax, float *dx)
{
    (void)be;
    pool_job j = { kind, g, dy, dx, NULL, argmax };
    dl_parallel_for(g->n * g->c, 8, pool_bwd_task, &j);
}
