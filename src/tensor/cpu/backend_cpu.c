/* backend_cpu.c: the reference backend. GEMM through OpenBLAS
 * (cblas_sgemm), convolution as im2col + GEMM, the rest as plain loops
 * spread over dl_parallel_for where the work is large enough. */
#define _POSIX_C_SOURCE 200809L
#include "tensor/backend.h"
#include "tensor/cpu/cpu.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALIGN 64
#define GRAIN 16384   /* elements below which a loop stays on one thread */

static dl_status cpu_alloc(dl_backend *be, size_t nbytes, void **out, dl_err *err)
{
    (void)be;
    size_t rounded = (nbytes + ALIGN - 1) / ALIGN * ALIGN;
    *out = aligned_alloc(ALIGN, rounded ? rounded : ALIGN);
    if (!*out)
        return dl_err_set(err, DL_ERR_NOMEM, "cpu: cannot allocate %zu bytes", nbytes);
    return DL_OK;
}

static void cpu_release(dl_backend *be, void *ptr)
{
    (void)be;
    free(ptr);
}

static void cpu_copy(dl_backend *be, void *dst, const void *src, size_t nbytes)
{
    (void)be;
    if (nbytes)
        memmove(dst, src, nbytes);
}

static void cpu_copy_f32(dl_backend *be, float *dst, const float *src, int64_t n)
{
    cpu_copy(be, dst, src, (size_t)n * sizeof(float));
}

typedef struct fill_job {
    float *x;
    float value;
} fill_job;

static void fill_task(void *ctx, int64_t b, int64_t e)
{
    const fill_job *j = ctx;
    if (j->value == 0.0f) {
        memset(j->x + b, 0, (size_t)(e - b) * sizeof(float));
        return;
    }
    for (int64_t i = b; i < e; i++)
        j->x[i] = j->value;
}

static void cpu_fill(dl_backend *be, float *x, int64_t n, float value)
{
    (void)be;
    fill_job j = { x, value };
    dl_parallel_for(n, GRAIN * 16, fill_task, &j);
}

/* A GEMM split over the pool: each task computes a block of C's rows (or
 * columns when C has few rows) with a single-threaded cblas_sgemm, so the
 * process never runs more threads than --threads and OpenBLAS never
 * spins next to our own workers. */
typedef struct gemm_job {
    bool ta, tb, by_rows;
    bool thin;             /* be->gemm_thin */
    bool rows;             /* the thin kernel at any size: rows independent of m */
    int64_t m, n, k;
    float alpha, beta;
    const float *a, *b;
    float *c;
    const float *bias;     /* epilogue: c[i, j] += bias[j], NULL for none */
    const dl_act *post;    /* then c = post(c), NULL for none */
} gemm_job;

static void act_rows(dl_act act, float *restrict y, int64_t n);

#define GEMM_BLOCK 16   /* rows or columns per unit of work */

/* Thin GEMMs of the dense layers' forward shape, A (rows, k) times B
 * (n, k) transposed, at the batches of a few requests that the daemon
 * runs, go to OpenBLAS in column chunks of at most THIN_MNK
 * multiply-adds: OpenBLAS (0.3.16 on, AVX-512 kernels) runs a GEMM of
 * M*N*K <= 1e6 in its "small matrix" kernels, which read the operands
 * where they are, and packs both operands into its own layout first above
 * that, which at a few rows costs as much as the multiply. fashion-mlp's
 * inference, one thread, batch 8: 97k -> 217k samples/s; batch 32: 165k
 * -> 196k; batch 128 and over are faster packed (docs/benchmarks.md,
 * "HTTP serving"). Without small kernels (OpenBLAS's AVX2 builds) the
 * chunks are packed as the whole was, the weights on every call, which at
 * a batch of one costs 5x the multiply: there (be->gemm_thin) the thin
 * GEMMs run in dlserve's own kernel instead (gemm_thin.c), which reads
 * both operands in place. Its AVX-512 kernel beats OpenBLAS's AVX2 one at
 * every batch (fashion-mlp, batch 256, two threads, Zen 5: 341k -> 576k
 * samples/s): with it, taller GEMMs of that shape take it too, 64 rows at
 * a time. */
#define THIN_ROWS 64
#define THIN_MNK 600000

static void gemm_block(const gemm_job *j, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    /* Row-major leading dimensions of the full operands. */
    blasint lda = j->ta ? (blasint)j->m : (blasint)j->k;
    blasint ldb = j->tb ? (blasint)j->k : (blasint)j->n;
    const float *a = j->ta ? j->a + r0 : j->a + r0 * j->k;
    if (j->k == 0) {
        for (int64_t r = r0; r < r1; r++)
            memset(j->c + r * j->n + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    } else if (j->rows || (j->thin && !j->ta && j->tb && j->alpha == 1.0f && j->beta == 0.0f &&
                           (r1 - r0 <= THIN_ROWS || dl_gemm_thin_avx512_usable()))) {
        for (int64_t r = r0; r < r1; r += THIN_ROWS)
            dl_gemm_thin(r1 - r < THIN_ROWS ? r1 - r : THIN_ROWS, c1 - c0, j->k,
                         a + (r - r0) * lda, lda, j->b + c0 * j->k, ldb,
                         j->c + r * j->n + c0, (int64_t)j->n);
    } else {
        int64_t rows = r1 - r0, step = c1 - c0;
        if (!j->ta && j->tb && rows <= THIN_ROWS && rows * step * j->k > THIN_MNK)
            step = THIN_MNK / (rows * j->k) > 0 ? THIN_MNK / (rows * j->k) : 1;
        for (int64_t c = c0; c < c1; c += step) {
            int64_t cols = c + step < c1 ? step : c1 - c;
            const float *b = j->tb ? j->b + c * j->k : j->b + c;
            cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans,
                        j->tb ? CblasTrans : CblasNoTrans, (blasint)rows, (blasint)cols,
                        (blasint)j->k, j->alpha, a, lda, b, ldb, j->beta,
                        j->c + r0 * j->n + c, (blasint)j->n);
        }
    }
    if (!j->bias && !j->post)
        return;
    /* The epilogue, while the block is still in cache. */
    for (int64_t r = r0; r < r1; r++) {
        float *restrict row = j->c + r * j->n + c0;
        if (j->bias) {
            const float *restrict bias = j->bias + c0;
            for (int64_t i = 0; i < c1 - c0; i++)
                row[i] += bias[i];
        }
        if (j->post)
            act_rows(*j->post, row, c1 - c0);
    }
}

static void gemm_task(void *ctx, int64_t u0, int64_t u1)
{
    const gemm_job *j = ctx;
    int64_t lo = u0 * GEMM_BLOCK, hi = u1 * GEMM_BLOCK;
    if (j->by_rows)
        gemm_block(j, lo, hi < j->m ? hi : j->m, 0, j->n);
    else
        gemm_block(j, 0, j->m, lo, hi < j->n ? hi : j->n);
}

/* OpenBLAS indexes with 32-bit integers: DL_ERR_INVALID beyond them. */
static dl_status gemm_fits(int64_t m, int64_t n, int64_t k, dl_err *err)
{
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return dl_err_set(err, DL_ERR_INVALID, "gemm of %lldx%lldx%lld is too large",
                          (long long)m, (long long)n, (long long)k);
    return DL_OK;
}

/* Runs j over the pool, GEMM_BLOCK rows a unit (columns when C has fewer
 * rows than columns), about 2 MFLOP a task at least: smaller GEMMs stay
 * on one thread. */
static void run_gemm(gemm_job *j)
{
    j->by_rows = j->m >= j->n;
    int64_t units = ((j->by_rows ? j->m : j->n) + GEMM_BLOCK - 1) / GEMM_BLOCK;
    int64_t per_unit = 2 * GEMM_BLOCK * (j->by_rows ? j->n : j->m) * (j->k > 0 ? j->k : 1);
    dl_parallel_for(units, (2 << 20) / per_unit + 1, gemm_task, j);
}

static dl_status cpu_gemm(dl_backend *be, bool ta, bool tb, int64_t m, int64_t n,
                          int64_t k, float alpha, const float *a, const float *b,
                          float beta, float *c, dl_err *err)
{
    dl_status st = gemm_fits(m, n, k, err);
    if (st != DL_OK || m == 0 || n == 0)
        return st;
    if (k == 0) {
        for (int64_t i = 0; i < m * n; i++)
            c[i] = beta == 0.0f ? 0.0f : beta * c[i];
        return DL_OK;
    }
    gemm_job j = { .ta = ta, .tb = tb, .thin = be->gemm_thin, .m = m, .n = n, .k = k,
                   .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c };
    run_gemm(&j);
    return DL_OK;
}

/* C = post(A B^T + bias): the dense layer's forward in one pass over C.
 * With `rows`, every block through the thin kernel, which computes each
 * C[i, j] as the same dot product whatever block holds it (gemm_thin.c):
 * a row's bits do not depend on m or on how the rows are split. */
static dl_status bias_act(dl_backend *be, bool rows, int64_t m, int64_t n, int64_t k,
                          const float *a, const float *b, const float *bias,
                          const dl_act *post, float *c, dl_err *err)
{
    dl_status st = gemm_fits(m, n, k, err);
    if (st != DL_OK || m == 0 || n == 0)
        return st;
    gemm_job j = { .ta = false, .tb = true, .thin = be->gemm_thin, .rows = rows && k > 0,
                   .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = 0.0f, .a = a, .b = b,
                   .c = c, .bias = bias, .post = post };
    run_gemm(&j);
    return DL_OK;
}

static dl_status cpu_gemm_bias_act(dl_backend *be, int64_t m, int64_t n, int64_t k,
                                   const float *a, const float *b, const float *bias,
                                   const dl_act *post, float *c, dl_err *err)
{
    return bias_act(be, false, m, n, k, a, b, bias, post, c, err);
}

/* The thin kernel needs AVX2 and FMA: elsewhere the layer goes a row at a
 * time. */
static dl_status cpu_gemm_bias_act_rows(dl_backend *be, int64_t m, int64_t n, int64_t k,
                                        const float *a, const float *b, const float *bias,
                                        const dl_act *post, float *c, dl_err *err)
{
    if (!dl_gemm_thin_usable())
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "cpu: no batch-invariant GEMM kernel "
                          "without AVX2 and FMA");
    return bias_act(be, true, m, n, k, a, b, bias, post, c, err);
}

static void cpu_bias_add(dl_backend *be, float *y, const float *b, int64_t rows,
                         int64_t cols)
{
    (void)be;
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * cols;
        for (int64_t j = 0; j < cols; j++)
            yr[j] += b[j];
    }
}

static void cpu_bias_grad(dl_backend *be, float *db, const float *dy,
                          int64_t rows, int64_t cols)
{
    (void)be;
    for (int64_t r = 0; r < rows; r++) {
        const float *d = dy + r * cols;
        for (int64_t j = 0; j < cols; j++)
            db[j] += d[j];
    }
}

typedef struct nchw_job {
    float *y;
    const float *b, *dy;
    float *db;
    int64_t n, c, hw;
} nchw_job;

/* Planes [p0, p1) of the (N*C) planes get their channel's bias. */
static void bias_add_nchw_task(void *ctx, int64_t p0, int64_t p1)
{
    const nchw_job *j = ctx;
    for (int64_t i = p0; i < p1; i++) {
        float v = j->b[i % j->c], *restrict p = j->y + i * j->hw;
        for (int64_t k = 0; k < j->hw; k++)
            p[k] += v;
    }
}

static void cpu_bias_add_nchw(dl_backend *be, float *y, const float *b,
                              int64_t n, int64_t c, int64_t hw)
{
    (void)be;
    nchw_job j = { .y = y, .b = b, .n = n, .c = c, .hw = hw };
    dl_parallel_for(n * c, GRAIN / (hw > 0 ? hw : 1) + 1, bias_add_nchw_task, &j);
}

/* A sum in 16 lanes (vectorizable, and the same order every time). */
static float sum_floats(const float *p, int64_t n)
{
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++)
            acc[k] += p[i + k];
    float s = 0.0f;
    for (int k = 0; k < 16; k++)
        s += acc[k];
    for (; i < n; i++)
        s += p[i];
    return s;
}

/* Channels [c0, c1): each task owns its channels' sums. */
static void bias_grad_nchw_task(void *ctx, int64_t c0, int64_t c1)
{
    const nchw_job *j = ctx;
    for (int64_t ch = c0; ch < c1; ch++) {
        float s = 0.0f;
        for (int64_t i = 0; i < j->n; i++)
            s += sum_floats(j->dy + (i * j->c + ch) * j->hw, j->hw);
        j->db[ch] += s;
    }
}

static void cpu_bias_grad_nchw(dl_backend *be, float *db, const float *dy,
                               int64_t n, int64_t c, int64_t hw)
{
    (void)be;
    nchw_job j = { .dy = dy, .db = db, .n = n, .c = c, .hw = hw };
    dl_parallel_for(c, (GRAIN / (n * hw > 0 ? n * hw : 1)) + 1, bias_grad_nchw_task, &j);
}

/* ---- activations ----------------------------------------------------- */

typedef struct act_job {
    dl_act act;
    const float *x, *y, *dy;
    float *out;
} act_job;

/* y = act(y) in place. */
static void act_rows(dl_act act, float *restrict y, int64_t n)
{
    switch (act) {
    case DL_ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        break;
    case DL_ACT_TANH:
        for (int64_t i = 0; i < n; i++)
            y[i] = tanhf(y[i]);
        break;
    case DL_ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            y[i] = 1.0f / (1.0f + expf(-y[i]));
        break;
    }
}

/* Local restrict copies let the compiler vectorize these loops. */
static void act_fwd_task(void *ctx, int64_t b, int64_t e)
{
    const act_job *j = ctx;
    if (j->x == j->out) {          /* in place: restrict would not hold */
        act_rows(j->act, j->out + b, e - b);
        return;
    }
    const float *restrict x = j->x;
    float *restrict y = j->out;
    switch (j->act) {
    case DL_ACT_RELU:
        for (int64_t i = b; i < e; i++)
            y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case DL_ACT_TANH:
        for (int64_t i = b; i < e; i++)
            y[i] = tanhf(x[i]);
        break;
    case DL_ACT_SIGMOID:
        for (int64_t i = b; i < e; i++)
            y[i] = 1.0f / (1.0f + expf(-x[i]));
        break;
    }
}

static void act_bwd_task(void *ctx, int64_t b, int64_t e)
{
    const act_job *j = ctx;
    const float *restrict y = j->y, *restrict dy = j->dy;
    float *restrict dx = j->out;
    switch (j->act) {
    case DL_ACT_RELU:
        /* both loads unconditional: the loop then vectorizes (a select),
         * where `y > 0 ? dy : 0` stayed a branch a value */
        for (int64_t i = b; i < e; i++) {
            float g = dy[i];
            dx[i] = y[i] > 0.0f ? g : 0.0f;
        }
        break;
    case DL_ACT_TANH:
        for (int64_t i = b; i < e; i++)
            dx[i] = dy[i] * (1.0f - y[i] * y[i]);
        break;
    case DL_ACT_SIGMOID:
        for (int64_t i = b; i < e; i++)
            dx[i] = dy[i] * y[i] * (1.0f - y[i]);
        break;
    }
}

static void cpu_act_fwd(dl_backend *be, dl_act act, const float *x, float *y,
                        int64_t n)
{
    (void)be;
    act_job j = { act, x, NULL, NULL, y };
    dl_parallel_for(n, GRAIN, act_fwd_task, &j);
}

static void cpu_act_bwd(dl_backend *be, dl_act act, const float *y,
                        const float *dy, float *dx, int64_t n)
{
    (void)be;
    act_job j = { act, NULL, y, dy, dx };
    dl_parallel_for(n, GRAIN, act_bwd_task, &j);
}

static void cpu_softmax_fwd(dl_backend *be, const float *x, float *y,
                            int64_t rows, int64_t cols)
{
    (void)be;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float mx = xr[0];
        for (int64_t j = 1; j < cols; j++)
            mx = xr[j] > mx ? xr[j] : mx;
        double s = 0.0;
        for (int64_t j = 0; j < cols; j++) {
            yr[j] = expf(xr[j] - mx);
            s += yr[j];
        }
        float inv = (float)(1.0 / s);
        for (int64_t j = 0; j < cols; j++)
            yr[j] *= inv;
    }
}

static void cpu_softmax_bwd(dl_backend *be, const float *y, const float *dy,
                            float *dx, int64_t rows, int64_t cols)
{
    (void)be;
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *dr = dy + r * cols;
        double dot = 0.0;
        for (int64_t j = 0; j < cols; j++)
            dot += (double)yr[j] * dr[j];
        for (int64_t j = 0; j < cols; j++)
            dx[r * cols + j] = yr[j] * (dr[j] - (float)dot);
    }
}

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

static void cpu_im2col(dl_backend *be, const dl_conv_geom *g, const float *x,
                       float *cols)
{
    (void)be;
    conv_job j = { .g = g, .src = x, .dst = cols };
    dl_parallel_for(g->c * g->kh * g->kw, 1, im2col_task, &j);
}

static void cpu_col2im(dl_backend *be, const dl_conv_geom *g, const float *cols,
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

static void cpu_swap_outer(dl_backend *be, const float *x, float *y, int64_t a,
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
                act_rows(*j->post, d, j->hw);
        }
}

static void cpu_swap_bias_act(dl_backend *be, const float *x, float *y, int64_t a,
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

static void cpu_pool_fwd(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g,
                         const float *x, float *y, int32_t *argmax)
{
    (void)be;
    pool_job j = { kind, g, x, y, argmax, NULL };
    dl_parallel_for(g->n * g->c, 8, pool_fwd_task, &j);
}

static void cpu_pool_bwd(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g,
                         const float *dy, const int32_t *argmax, float *dx)
{
    (void)be;
    pool_job j = { kind, g, dy, dx, NULL, argmax };
    dl_parallel_for(g->n * g->c, 8, pool_bwd_task, &j);
}

/* ---- batch normalisation ------------------------------------------------
 * Channels are independent: each task owns a range of them (statistics,
 * running averages, parameter gradients), and the per-row sums run in
 * float lanes (vectorized) added up in double over the rows. */

typedef struct bn_job {
    const float *x, *dy, *gamma, *beta, *mean, *var, *invstd;  /* bwd: saved stats */
    float *y, *dx, *save_mean, *save_invstd, *run_mean, *run_var, *dgamma, *dbeta;
    float momentum, eps;
    int64_t n, c, hw;
    int64_t block;       /* the blocked layout's channels a block (0: NCHW) */
} bn_job;

/* Sum of (p - mean)^2 in 16 lanes. */
static float sqdev_floats(const float *restrict p, int64_t n, float mean)
{
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++)
            acc[k] += (p[i + k] - mean) * (p[i + k] - mean);
    float s = 0.0f;
    for (int k = 0; k < 16; k++)
        s += acc[k];
    for (; i < n; i++)
        s += (p[i] - mean) * (p[i] - mean);
    return s;
}

/* Sum of d * (p - mean) in 16 lanes. */
static float dotdev_floats(const float *restrict d, const float *restrict p, int64_t n,
                           float mean)
{
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++)
            acc[k] += d[i + k] * (p[i + k] - mean);
    float s = 0.0f;
    for (int k = 0; k < 16; k++)
        s += acc[k];
    for (; i < n; i++)
        s += d[i] * (p[i] - mean);
    return s;
}

/* y = x * a + b over channel ch of every sample. */
static void bn_scale_shift(const bn_job *j, const float *x, float *y, int64_t ch,
                           float a, float b)
{
    for (int64_t i = 0; i < j->n; i++) {
        const float *p = x + (i * j->c + ch) * j->hw;
        float *q = y + (i * j->c + ch) * j->hw;
        if (p == q) {
            for (int64_t k = 0; k < j->hw; k++)
                q[k] = q[k] * a + b;
            continue;
        }
        const float *restrict pr = p;
        float *restrict qr = q;
        for (int64_t k = 0; k < j->hw; k++)
            qr[k] = pr[k] * a + b;
    }
}

static void bn_train_task(void *ctx, int64_t c0, int64_t c1)
{
    const bn_job *j = ctx;
    int64_t m = j->n * j->hw;
    for (int64_t ch = c0; ch < c1; ch++) {
        double s = 0.0, s2 = 0.0;
        for (int64_t i = 0; i < j->n; i++)
            s += sum_floats(j->x + (i * j->c + ch) * j->hw, j->hw);
        float mean = (float)(s / (double)m);
        for (int64_t i = 0; i < j->n; i++)
            s2 += sqdev_floats(j->x + (i * j->c + ch) * j->hw, j->hw, mean);
        double var = s2 / (double)m;
        float invstd = (float)(1.0 / sqrt(var + j->eps));
        float a = j->gamma[ch] * invstd;
        bn_scale_shift(j, j->x, j->y, ch, a, j->beta[ch] - mean * a);
        j->save_mean[ch] = mean;
        j->save_invstd[ch] = invstd;
        double unbiased = m > 1 ? s2 / (double)(m - 1) : var;
        j->run_mean[ch] = (1.0f - j->momentum) * j->run_mean[ch] + j->momentum * mean;
        j->run_var[ch] = (1.0f - j->momentum) * j->run_var[ch] + j->momentum * (float)unbiased;
    }
}

/* Channels a task: enough that one holds about GRAIN values. */
static int64_t bn_grain(int64_t n, int64_t hw)
{
    return GRAIN / (n * hw > 0 ? n * hw : 1) + 1;
}

static void cpu_bn_fwd_train(dl_backend *be, const float *x, float *y,
                             const float *gamma, const float *beta,
                             float *save_mean, float *save_invstd,
                             float *run_mean, float *run_var, float momentum,
                             float eps, int64_t n, int64_t c, int64_t hw)
{
    (void)be;
    bn_job j = { .x = x, .y = y, .gamma = gamma, .beta = beta, .save_mean = save_mean,
                 .save_invstd = save_invstd, .run_mean = run_mean, .run_var = run_var,
                 .momentum = momentum, .eps = eps, .n = n, .c = c, .hw = hw };
    dl_parallel_for(c, bn_grain(n, hw), bn_train_task, &j);
}

/* Inference: the running statistics folded into a scale and shift. */
static void bn_infer_task(void *ctx, int64_t c0, int64_t c1)
{
    const bn_job *j = ctx;
    for (int64_t ch = c0; ch < c1; ch++) {
        float a = j->gamma[ch] / sqrtf(j->var[ch] + j->eps);
        bn_scale_shift(j, j->x, j->y, ch, a, j->beta[ch] - j->mean[ch] * a);
    }
}

static void cpu_bn_fwd_infer(dl_backend *be, const float *x, float *y,
                             const float *gamma, const float *beta,
                             const float *run_mean, const float *run_var,
                             float eps, int64_t n, int64_t c, int64_t hw)
{
    (void)be;
    bn_job j = { .x = x, .y = y, .gamma = gamma, .beta = beta, .mean = run_mean,
                 .var = run_var, .eps = eps, .n = n, .c = c, .hw = hw };
    dl_parallel_for(c, bn_grain(n, hw), bn_infer_task, &j);
}

/* dx = gamma * is / m * (m dy - sum dy - xhat * sum(dy xhat)) */
static void bn_bwd_task(void *ctx, int64_t c0, int64_t c1)
{
    const bn_job *j = ctx;
    double m = (double)(j->n * j->hw);
    for (int64_t ch = c0; ch < c1; ch++) {
        float mean = j->mean[ch], is = j->invstd[ch];
        double sdy = 0.0, sdyx = 0.0;
        for (int64_t i = 0; i < j->n; i++) {
            int64_t at = (i * j->c + ch) * j->hw;
            sdy += sum_floats(j->dy + at, j->hw);
            sdyx += dotdev_floats(j->dy + at, j->x + at, j->hw, mean);
        }
        sdyx *= is;
        j->dgamma[ch] += (float)sdyx;
        j->dbeta[ch] += (float)sdy;
        float k1 = j->gamma[ch] * is, mdy = (float)(sdy / m), mdyx = (float)(sdyx / m);
        for (int64_t i = 0; i < j->n; i++) {
            int64_t at = (i * j->c + ch) * j->hw;
            const float *restrict p = j->x + at, *restrict d = j->dy + at;
            float *restrict q = j->dx + at;
            for (int64_t k = 0; k < j->hw; k++)
                q[k] = k1 * (d[k] - mdy - (p[k] - mean) * is * mdyx);
        }
    }
}

static void cpu_bn_bwd(dl_backend *be, const float *x, const float *dy,
                       const float *gamma, const float *save_mean,
                       const float *save_invstd, float *dx, float *dgamma,
                       float *dbeta, int64_t n, int64_t c, int64_t hw)
{
    (void)be;
    bn_job j = { .x = x, .dy = dy, .gamma = gamma, .mean = save_mean,
                 .invstd = save_invstd, .dx = dx, .dgamma = dgamma,
                 .dbeta = dbeta, .n = n, .c = c, .hw = hw };
    dl_parallel_for(c, bn_grain(n, hw), bn_bwd_task, &j);
}

/* ---- batchnorm over the convolution engine's blocked layout ---------------
 * Channel ch of sample i at position k is at ((i * CB + ch / B) * hw + k) *
 * B + ch % B (CB = c / B blocks of B channels): each task owns whole
 * blocks, and the loops over a block's B lanes vectorize. */

#define BN_MAX_BLOCK 16

/* The values of block cb of sample i. */
static const float *blk_at(const bn_job *j, const float *p, int64_t i, int64_t cb, int64_t B)
{
    return p + (i * (j->c / B) + cb) * j->hw * B;
}

/* acc[l] = sum over samples and positions of f(lane l) in block cb, added
 * up in double over the samples: f = x (what 0), (x - mean)^2 (1),
 * dy (2) or dy * (x - mean) (3). */
static void blk_sums(const bn_job *j, int64_t cb, int64_t B, int what, const float *mean,
                     double *acc)
{
    for (int64_t l = 0; l < B; l++)
        acc[l] = 0.0;
    for (int64_t i = 0; i < j->n; i++) {
        const float *restrict x = blk_at(j, j->x, i, cb, B);
        const float *restrict d = what >= 2 ? blk_at(j, j->dy, i, cb, B) : x;
        float s[BN_MAX_BLOCK] = {0};
        for (int64_t k = 0; k < j->hw; k++, x += B, d += B)
            for (int64_t l = 0; l < B; l++)
                s[l] += what == 0 ? x[l] : what == 1 ? (x[l] - mean[l]) * (x[l] - mean[l])
                      : what == 2 ? d[l] : d[l] * (x[l] - mean[l]);
        for (int64_t l = 0; l < B; l++)
            acc[l] += s[l];
    }
}

/* y = x * a[lane] + b[lane] over block cb of every sample (in place or not). */
static void blk_scale_shift(const bn_job *j, int64_t cb, int64_t B, const float *a,
                            const float *b)
{
    for (int64_t i = 0; i < j->n; i++) {
        const float *x = blk_at(j, j->x, i, cb, B);
        float *y = j->y + (x - j->x);
        for (int64_t k = 0; k < j->hw * B; k += B)
            for (int64_t l = 0; l < B; l++)
                y[k + l] = x[k + l] * a[l] + b[l];
    }
}

static void bnb_train_task(void *ctx, int64_t b0, int64_t b1)
{
    const bn_job *j = ctx;
    int64_t B = j->block, m = j->n * j->hw;
    double s[BN_MAX_BLOCK], s2[BN_MAX_BLOCK];
    float mean[BN_MAX_BLOCK], a[BN_MAX_BLOCK], b[BN_MAX_BLOCK];
    for (int64_t cb = b0; cb < b1; cb++) {
        blk_sums(j, cb, B, 0, NULL, s);
        for (int64_t l = 0; l < B; l++)
            mean[l] = (float)(s[l] / (double)m);
        blk_sums(j, cb, B, 1, mean, s2);
        for (int64_t l = 0; l < B; l++) {
            int64_t ch = cb * B + l;
            double var = s2[l] / (double)m, unbiased = m > 1 ? s2[l] / (double)(m - 1) : var;
            float invstd = (float)(1.0 / sqrt(var + j->eps));
            a[l] = j->gamma[ch] * invstd;
            b[l] = j->beta[ch] - mean[l] * a[l];
            j->save_mean[ch] = mean[l];
            j->save_invstd[ch] = invstd;
            j->run_mean[ch] = (1.0f - j->momentum) * j->run_mean[ch] + j->momentum * mean[l];
            j->run_var[ch] = (1.0f - j->momentum) * j->run_var[ch] +
                             j->momentum * (float)unbiased;
        }
        blk_scale_shift(j, cb, B, a, b);
    }
}

static void bnb_infer_task(void *ctx, int64_t b0, int64_t b1)
{
    const bn_job *j = ctx;
    int64_t B = j->block;
    float a[BN_MAX_BLOCK], b[BN_MAX_BLOCK];
    for (int64_t cb = b0; cb < b1; cb++) {
        for (int64_t l = 0; l < B; l++) {
            int64_t ch = cb * B + l;
            a[l] = j->gamma[ch] / sqrtf(j->var[ch] + j->eps);
            b[l] = j->beta[ch] - j->mean[ch] * a[l];
        }
        blk_scale_shift(j, cb, B, a, b);
    }
}

static void bnb_bwd_task(void *ctx, int64_t b0, int64_t b1)
{
    const bn_job *j = ctx;
    int64_t B = j->block;
    double m = (double)(j->n * j->hw), sdy[BN_MAX_BLOCK], sdyx[BN_MAX_BLOCK];
    float mean[BN_MAX_BLOCK], is[BN_MAX_BLOCK], k1[BN_MAX_BLOCK], mdy[BN_MAX_BLOCK],
        mdyx[BN_MAX_BLOCK];
    for (int64_t cb = b0; cb < b1; cb++) {
        for (int64_t l = 0; l < B; l++) {
            mean[l] = j->mean[cb * B + l];
            is[l] = j->invstd[cb * B + l];
        }
        blk_sums(j, cb, B, 2, mean, sdy);
        blk_sums(j, cb, B, 3, mean, sdyx);
        for (int64_t l = 0; l < B; l++) {
            int64_t ch = cb * B + l;
            sdyx[l] *= is[l];
            j->dgamma[ch] += (float)sdyx[l];
            j->dbeta[ch] += (float)sdy[l];
            k1[l] = j->gamma[ch] * is[l];
            mdy[l] = (float)(sdy[l] / m);
            mdyx[l] = (float)(sdyx[l] / m);
        }
        for (int64_t i = 0; i < j->n; i++) {
            const float *restrict x = blk_at(j, j->x, i, cb, B), *restrict d =
                blk_at(j, j->dy, i, cb, B);
            float *restrict q = j->dx + (x - j->x);
            for (int64_t k = 0; k < j->hw * B; k += B)
                for (int64_t l = 0; l < B; l++)
                    q[k + l] = k1[l] * (d[k + l] - mdy[l] - (x[k + l] - mean[l]) * is[l] * mdyx[l]);
        }
    }
}

/* Blocks a task: enough that one holds about GRAIN values. */
static int64_t bnb_grain(int64_t n, int64_t hw, int64_t B)
{
    return GRAIN / (n * hw * B > 0 ? n * hw * B : 1) + 1;
}

static void cpu_bn_fwd_train_blk(dl_backend *be, const float *x, float *y,
                                 const float *gamma, const float *beta,
                                 float *save_mean, float *save_invstd,
                                 float *run_mean, float *run_var, float momentum,
                                 float eps, int64_t n, int64_t c, int64_t hw)
{
    int64_t B = be->engine_block;
    DL_ASSERT(B > 0 && B <= BN_MAX_BLOCK && c % B == 0);
    bn_job j = { .x = x, .y = y, .gamma = gamma, .beta = beta, .save_mean = save_mean,
                 .save_invstd = save_invstd, .run_mean = run_mean, .run_var = run_var,
                 .momentum = momentum, .eps = eps, .n = n, .c = c, .hw = hw, .block = B };
    dl_parallel_for(c / B, bnb_grain(n, hw, B), bnb_train_task, &j);
}

static void cpu_bn_fwd_infer_blk(dl_backend *be, const float *x, float *y,
                                 const float *gamma, const float *beta,
                                 const float *run_mean, const float *run_var,
                                 float eps, int64_t n, int64_t c, int64_t hw)
{
    int64_t B = be->engine_block;
    DL_ASSERT(B > 0 && B <= BN_MAX_BLOCK && c % B == 0);
    bn_job j = { .x = x, .y = y, .gamma = gamma, .beta = beta, .mean = run_mean,
                 .var = run_var, .eps = eps, .n = n, .c = c, .hw = hw, .block = B };
    dl_parallel_for(c / B, bnb_grain(n, hw, B), bnb_infer_task, &j);
}

static void cpu_bn_bwd_blk(dl_backend *be, const float *x, const float *dy,
                           const float *gamma, const float *save_mean,
                           const float *save_invstd, float *dx, float *dgamma,
                           float *dbeta, int64_t n, int64_t c, int64_t hw)
{
    int64_t B = be->engine_block;
    DL_ASSERT(B > 0 && B <= BN_MAX_BLOCK && c % B == 0);
    bn_job j = { .x = x, .dy = dy, .gamma = gamma, .mean = save_mean,
                 .invstd = save_invstd, .dx = dx, .dgamma = dgamma,
                 .dbeta = dbeta, .n = n, .c = c, .hw = hw, .block = B };
    dl_parallel_for(c / B, bnb_grain(n, hw, B), bnb_bwd_task, &j);
}

/* ---- dropout, embedding, elementwise ---------------------------------- */

static void cpu_dropout_fwd(dl_backend *be, const float *x, float *y, float *mask,
                            int64_t n, float p, uint64_t seed)
{
    (void)be;
    dl_rng rng;
    dl_rng_seed(&rng, seed);
    float keep = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < n; i++) {
        mask[i] = dl_rng_uniform(&rng) < p ? 0.0f : keep;
        y[i] = x[i] * mask[i];
    }
}

static void cpu_mul(dl_backend *be, const float *a, const float *b, float *y,
                    int64_t n)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}

static dl_status cpu_embed_fwd(dl_backend *be, const float *ids, const float *table,
                               float *y, int64_t nids, int64_t dim, int64_t vocab,
                               dl_err *err)
{
    (void)be;
    for (int64_t i = 0; i < nids; i++) {
        float f = ids[i];
        if (!(f >= 0.0f && f < (float)vocab) || f != floorf(f))
            return dl_err_set(err, DL_ERR_INVALID,
                              "embedding id %g at position %lld is not an integer in [0, %lld)",
                              (double)f, (long long)i, (long long)vocab);
        memcpy(y + i * dim, table + (int64_t)f * dim, (size_t)dim * sizeof(float));
    }
    return DL_OK;
}

static void cpu_embed_bwd(dl_backend *be, const float *ids, const float *dy,
                          float *dtable, int64_t nids, int64_t dim)
{
    (void)be;
    for (int64_t i = 0; i < nids; i++) {
        float *row = dtable + (int64_t)ids[i] * dim;
        for (int64_t k = 0; k < dim; k++)
            row[k] += dy[i * dim + k];
    }
}

/* ---- losses ------------------------------------------------------------ */

static void cpu_xent(dl_backend *be, const float *logits, const int32_t *labels,
                     int64_t rows, int64_t cols, float *dlogits, float scale,
                     double *loss_sum, int64_t *correct)
{
    (void)be;
    double loss = 0.0;
    int64_t ok = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = logits + r * cols;
        int64_t arg = 0;
        for (int64_t j = 1; j < cols; j++)
            if (x[j] > x[arg])
                arg = j;
        float mx = x[arg];
        double s = 0.0;
        for (int64_t j = 0; j < cols; j++)
            s += exp((double)(x[j] - mx));
        int32_t lab = labels[r];
        loss += log(s) - (double)(x[lab] - mx);
        ok += arg == lab;
        if (dlogits) {
            float inv = (float)(1.0 / s);
            float *d = dlogits + r * cols;
            for (int64_t j = 0; j < cols; j++)
                d[j] = (expf(x[j] - mx) * inv - (j == lab ? 1.0f : 0.0f)) * scale;
        }
    }
    *loss_sum = loss;
    *correct = ok;
}

static void cpu_mse(dl_backend *be, const float *pred, const float *target,
                    int64_t n, float *dpred, float scale, double *loss_sum)
{
    (void)be;
    double loss = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float d = pred[i] - target[i];
        loss += (double)d * d;
        if (dpred)
            dpred[i] = 2.0f * d * scale;
    }
    *loss_sum = loss;
}

/* ---- optimizers ---------------------------------------------------------- */

typedef struct opt_job {
    float *p, *v, *m;
    const float *g;
    float lr, mu, wd, b1, b2, eps, c1, c2;
    bool nesterov;
} opt_job;

/* Local restrict copies let the compiler vectorize these loops. */
static void sgd_task(void *ctx, int64_t b, int64_t e)
{
    const opt_job *j = ctx;
    float *restrict p = j->p, *restrict v = j->v;
    const float *restrict g = j->g;
    const float lr = j->lr, mu = j->mu, wd = j->wd;
    if (mu == 0.0f) {
        for (int64_t i = b; i < e; i++)
            p[i] -= lr * (g[i] + wd * p[i]);
        return;
    }
    for (int64_t i = b; i < e; i++) {
        float gi = g[i] + wd * p[i];
        v[i] = mu * v[i] + gi;
        p[i] -= lr * (j->nesterov ? gi + mu * v[i] : v[i]);
    }
}

static void adam_task(void *ctx, int64_t b, int64_t e)
{
    const opt_job *j = ctx;
    float *restrict p = j->p, *restrict m = j->m, *restrict v = j->v;
    const float *restrict g = j->g;
    const float b1 = j->b1, b2 = j->b2, c1 = j->c1, c2 = j->c2, eps = j->eps, wd = j->wd;
    for (int64_t i = b; i < e; i++) {
        float gi = g[i] + wd * p[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        p[i] -= c1 * m[i] / (sqrtf(v[i]) * c2 + eps);
    }
}

static void cpu_sgd_step(dl_backend *be, float *p, const float *g, float *v,
                         int64_t n, float lr, float mu, bool nesterov, float wd)
{
    (void)be;
    opt_job j = { .p = p, .g = g, .v = v, .lr = lr, .mu = mu, .wd = wd,
                  .nesterov = nesterov };
    dl_parallel_for(n, GRAIN * 4, sgd_task, &j);
}

static void cpu_adam_step(dl_backend *be, float *p, const float *g, float *m,
                          float *v, int64_t n, float lr, float b1, float b2,
                          float eps, float wd, int64_t t)
{
    (void)be;
    /* PyTorch: p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
    double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    opt_job j = { .p = p, .g = g, .m = m, .v = v, .b1 = b1, .b2 = b2,
                  .eps = eps, .wd = wd, .c1 = (float)(lr / bc1),
                  .c2 = (float)(1.0 / sqrt(bc2)) };
    dl_parallel_for(n, GRAIN * 4, adam_task, &j);
}

static void cpu_axpy(dl_backend *be, float alpha, const float *x, float *y,
                     int64_t n)
{
    (void)be;
    cblas_saxpy((blasint)n, alpha, x, 1, y, 1);
}

#ifdef DL_HAVE_DNNL
/* ---- oneDNN (backend_dnnl.c): be->ctx is the dl_dnnl context ------------- */

static dl_status dnnl_conv_fwd(dl_backend *be, const dl_conv_geom *g, const float *x,
                               const float *w, const float *b, const dl_act *post,
                               float *y, dl_err *err)
{
    return dl_dnnl_conv_fwd(be->ctx, g, x, w, b, post, y, err);
}

static void dnnl_fix_weights(dl_backend *be, const void *w, size_t bytes, bool fixed)
{
    dl_dnnl_fix_weights(be->ctx, w, bytes, fixed);
}

static dl_status dnnl_conv_bwd_data(dl_backend *be, const dl_conv_geom *g,
                                    const float *dy, const float *w, float *dx, dl_err *err)
{
    return dl_dnnl_conv_bwd_data(be->ctx, g, dy, w, dx, err);
}

static dl_status dnnl_conv_bwd_weights(dl_backend *be, const dl_conv_geom *g,
                                       const float *x, const float *dy, float *dw,
                                       float *db, dl_err *err)
{
    return dl_dnnl_conv_bwd_weights(be->ctx, g, x, dy, dw, db, err);
}

/* The room the layers give: one int32 per output. */
static size_t ws_room(const dl_conv_geom *g)
{
    return (size_t)(g->n * g->c * g->oh * g->ow) * sizeof(int32_t);
}

static dl_status dnnl_pool_fwd(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g,
                               const float *x, float *y, void *ws, dl_err *err)
{
    return dl_dnnl_pool_fwd(be->ctx, kind, g, x, y, ws, ws_room(g), err);
}

static dl_status dnnl_pool_bwd(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g,
                               const float *dy, const void *ws, float *dx, dl_err *err)
{
    return dl_dnnl_pool_bwd(be->ctx, kind, g, dy, ws, ws_room(g), dx, err);
}
#endif

static void cpu_free(dl_backend *be)
{
    if (!be)
        return;
#ifdef DL_HAVE_DNNL
    dl_dnnl_free(be->ctx);
#endif
    free(be);
}

/* Every op has run when it returns: nothing is queued or latched. */
static dl_status cpu_sync(dl_backend *be, dl_err *err)
{
    (void)be;
    (void)err;
    return DL_OK;
}

/* The kernels both CPU tables share. */
#define CPU_OPS \
    .name           = "cpu", \
    .free           = cpu_free, \
    .sync           = cpu_sync, \
    .alloc          = cpu_alloc, \
    .release        = cpu_release, \
    .upload         = cpu_copy, \
    .download       = cpu_copy, \
    .fill           = cpu_fill, \
    .copy           = cpu_copy_f32, \
    .gemm           = cpu_gemm, \
    .gemm_bias_act  = cpu_gemm_bias_act, \
    .gemm_bias_act_rows = cpu_gemm_bias_act_rows, \
    .bias_add       = cpu_bias_add, \
    .bias_grad      = cpu_bias_grad, \
    .bias_add_nchw  = cpu_bias_add_nchw, \
    .bias_grad_nchw = cpu_bias_grad_nchw, \
    .act_fwd        = cpu_act_fwd, \
    .act_bwd        = cpu_act_bwd, \
    .softmax_fwd    = cpu_softmax_fwd, \
    .softmax_bwd    = cpu_softmax_bwd, \
    .im2col         = cpu_im2col, \
    .col2im         = cpu_col2im, \
    .swap_outer     = cpu_swap_outer, \
    .swap_bias_act  = cpu_swap_bias_act, \
    .pool_fwd       = cpu_pool_fwd, \
    .pool_bwd       = cpu_pool_bwd, \
    .bn_fwd_train   = cpu_bn_fwd_train, \
    .bn_fwd_infer   = cpu_bn_fwd_infer, \
    .bn_bwd         = cpu_bn_bwd, \
    .bn_fwd_train_blk = cpu_bn_fwd_train_blk, \
    .bn_fwd_infer_blk = cpu_bn_fwd_infer_blk, \
    .bn_bwd_blk     = cpu_bn_bwd_blk, \
    .dropout_fwd    = cpu_dropout_fwd, \
    .mul            = cpu_mul, \
    .embed_fwd      = cpu_embed_fwd, \
    .embed_bwd      = cpu_embed_bwd, \
    .xent           = cpu_xent, \
    .mse            = cpu_mse, \
    .sgd_step       = cpu_sgd_step, \
    .adam_step      = cpu_adam_step, \
    .axpy           = cpu_axpy,

/* im2col + OpenBLAS and plain loops for convolution and pooling. */
static const dl_backend_ops cpu_ops = {
    CPU_OPS
};

#ifdef DL_HAVE_DNNL
/* The same, with oneDNN's convolution and pooling. */
static const dl_backend_ops cpu_dnnl_ops = {
    CPU_OPS
    .conv_fwd         = dnnl_conv_fwd,
    .conv_bwd_data    = dnnl_conv_bwd_data,
    .conv_bwd_weights = dnnl_conv_bwd_weights,
    .pool2d_fwd       = dnnl_pool_fwd,
    .pool2d_bwd       = dnnl_pool_bwd,
    .fix_weights      = dnnl_fix_weights,
};
#endif

/* The engine for this CPU and these models: oneDNN's kernels for models
 * with convolutions where the CPU has AVX-512 (its avx512_core
 * convolutions trained fashion-cnn 1.3x and inferred 1.3x faster than
 * im2col + OpenBLAS there), im2col + OpenBLAS on AVX2 only, where
 * oneDNN's kernels measured no faster and its reorders cost more
 * (docs/benchmarks.md, "CPU engine"), and for models without
 * convolutions, to which oneDNN would bring only its spinning OpenMP
 * team. */
static dl_conv_engine auto_engine(bool conv_layers)
{
#if defined(DL_HAVE_DNNL) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    if (conv_layers && __builtin_cpu_supports("avx512f"))
        return DL_CONV_ONEDNN;
#else
    (void)conv_layers;
#endif
    return DL_CONV_IM2COL;
}

/* The engine asked for: the caller's, else DLSERVE_CPU_CONV's (auto,
 * im2col or onednn), else auto. DL_ERR_INVALID for an unknown word in the
 * environment. */
static dl_status pick_engine(dl_conv_engine asked, bool conv_layers, dl_conv_engine *out,
                             dl_err *err)
{
    *out = asked;
    if (asked != DL_CONV_DEFAULT)
        return DL_OK;
    const char *env = getenv("DLSERVE_CPU_CONV");
    if (!env || !*env || strcmp(env, "auto") == 0) {
        *out = auto_engine(conv_layers);
        return DL_OK;
    }
    if (strcmp(env, "im2col") == 0) {
        *out = DL_CONV_IM2COL;
        return DL_OK;
    }
    if (strcmp(env, "onednn") == 0) {
        *out = DL_CONV_ONEDNN;
        return DL_OK;
    }
    return dl_err_set(err, DL_ERR_INVALID,
                      "DLSERVE_CPU_CONV=%s: expected auto, im2col or onednn", env);
}

/* be->gemm_thin from DLSERVE_CPU_GEMM: auto (or unset), thin or openblas.
 * DL_ERR_INVALID for another word; DL_ERR_UNAVAILABLE for thin on a CPU
 * the kernel cannot run on. */
static dl_status pick_gemm(bool *thin, dl_err *err)
{
    const char *env = getenv("DLSERVE_CPU_GEMM");
    if (!env || !*env || strcmp(env, "auto") == 0) {
        *thin = dl_gemm_thin_preferred();
    } else if (strcmp(env, "thin") == 0) {
        if (!dl_gemm_thin_usable())
            return dl_err_set(err, DL_ERR_UNAVAILABLE,
                              "DLSERVE_CPU_GEMM=thin: this CPU lacks the AVX2 and FMA it needs");
        *thin = true;
    } else if (strcmp(env, "openblas") == 0) {
        *thin = false;
    } else {
        return dl_err_set(err, DL_ERR_INVALID,
                          "DLSERVE_CPU_GEMM=%s: expected auto, thin or openblas", env);
    }
    return DL_OK;
}

static dl_status cpu_new(int threads, const dl_backend_params *p, dl_backend **out,
                         dl_err *err)
{
    *out = NULL;
    dl_conv_engine engine;
    bool thin = false;
    if (pick_engine(p->conv, p->conv_layers, &engine, err) != DL_OK ||
        pick_gemm(&thin, err) != DL_OK)
        return DL_ERR_INVALID;
#ifndef DL_HAVE_DNNL
    if (engine == DL_CONV_ONEDNN)
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "oneDNN is not built in "
                          "(meson -Ddnnl=enabled with libdnnl-dev)");
#endif
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    dl_backend *be = calloc(1, sizeof(*be));
    if (!be)
        return dl_err_set(err, DL_ERR_NOMEM, "cpu backend");
    be->ops = &cpu_ops;
    be->device = -1;
    be->threads = threads;
    be->gemm_thin = thin;
    be->conv_dilation = true;
#ifdef DL_HAVE_DNNL
    if (engine == DL_CONV_ONEDNN) {
        dl_dnnl *d;
        dl_status st = dl_dnnl_new(threads, &d, err);
        if (st != DL_OK) {
            free(be);
            return st;
        }
        be->ctx = d;
        be->ops = &cpu_dnnl_ops;
        be->engine_block = dl_dnnl_block(d);
        if (!p->keep_pool)
            dl_dnnl_own_loops();
    }
#endif
    /* One team owns the cores: our pool's (OpenBLAS single-threaded inside
     * its tasks), or with oneDNN its OpenMP team of `threads`, which then
     * runs our loops too (an idle OpenMP thread spins, and would starve
     * the pool's workers), unless keep_pool: in the daemon a spinning
     * team would starve the connection threads instead (fashion-mlp
     * served 25-40% fewer requests), and its convolutions still run on
     * oneDNN's team. */
    openblas_set_num_threads(1);
    dl_pool_set_threads(threads);
    *out = be;
    return DL_OK;
}

dl_status dl_backend_cpu_new(int threads, dl_backend **out, dl_err *err)
{
    dl_backend_params p = { .conv_layers = true };
    return cpu_new(threads, &p, out, err);
}

/* The backend registration: "cpu" has no device index. */
static dl_status cpu_create(int index, const dl_backend_params *p, dl_backend **out,
                            dl_err *err)
{
    (void)index;
    return cpu_new(p->threads, p, out, err);
}

const dl_backend_reg dl_backend_cpu_reg = {
    .name    = "cpu",
    .indexed = false,
    .create  = cpu_create,
};
