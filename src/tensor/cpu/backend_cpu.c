/* backend_cpu.c: the reference backend: memory, GEMM through OpenBLAS
 * (cblas_sgemm) or the thin kernel (gemm_thin.c), biases, the oneDNN
 * glue and the ops table, whose other kernels are in cpu_act.c, cpu_conv.c
 * (im2col, pooling), cpu_norm.c, cpu_rnn.c (LSTM, GRU) and cpu_train.c
 * (losses, optimizers):
 * plain loops spread over dl_parallel_for where the work is large enough. */
#define _POSIX_C_SOURCE 200809L
#include "tensor/backend.h"
#include "tensor/cpu/cpu.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define ALIGN 64

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
    dl_parallel_for(n, CPU_GRAIN * 16, fill_task, &j);
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
            cpu_act_rows(*j->post, row, c1 - c0);
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

/* Batched GEMMs (matmul): large ones one after the other, each split over
 * the pool as cpu_gemm splits it; small ones (attention's per-head
 * products) a whole matrix a task, single-threaded. Either way a matrix's
 * result does not depend on the batch around it. Where the thin kernel
 * serves (be->gemm_thin: OpenBLAS without small-matrix kernels for this
 * CPU), C = A B goes through it at any size, a matrix a task, B first
 * transposed into the task's scratch (k * n floats, against m * n * k
 * multiply-adds): attention's Q K^T and softmax(.) V, which OpenBLAS ran
 * on its generic kernels. */
#define BATCH_SPLIT_MNK (64 * 64 * 64)

typedef struct batch_job {
    gemm_job g;
    int64_t sa, sb, sc;
    bool transpose_b;      /* B (k, n) to B^T (n, k) for the thin kernel */
} batch_job;

static void batch_task(void *ctx, int64_t q0, int64_t q1)
{
    const batch_job *j = ctx;
    int64_t k = j->g.k, n = j->g.n;
    float *bt = j->transpose_b ? malloc((size_t)(k * n) * sizeof(float)) : NULL;
    for (int64_t q = q0; q < q1; q++) {
        gemm_job one = j->g;
        one.a += q * j->sa;
        one.b += q * j->sb;
        one.c += q * j->sc;
        if (bt) {
            for (int64_t r = 0; r < k; r++)
                for (int64_t c = 0; c < n; c++)
                    bt[c * k + r] = one.b[r * n + c];
            one.b = bt;
            one.tb = true;
        }
        gemm_block(&one, 0, one.m, 0, one.n);
    }
    free(bt);
}

static dl_status cpu_gemm_batched(dl_backend *be, bool ta, bool tb, int64_t m, int64_t n,
                                  int64_t k, float alpha, const float *a, int64_t sa,
                                  const float *b, int64_t sb, float beta, float *c, int64_t sc,
                                  int64_t batch, dl_err *err)
{
    dl_status st = gemm_fits(m, n, k, err);
    if (st != DL_OK || m == 0 || n == 0 || batch <= 0)
        return st;
    /* (a single large product keeps cpu_gemm's split over the threads) */
    bool thin = be->gemm_thin && !ta && !tb && alpha == 1.0f && beta == 0.0f && k > 0 &&
                (m <= THIN_ROWS || dl_gemm_thin_avx512_usable()) &&
                (batch >= be->threads || m * n * k < BATCH_SPLIT_MNK);
    if (!thin && (k == 0 || m * n * k >= BATCH_SPLIT_MNK)) {
        for (int64_t q = 0; st == DL_OK && q < batch; q++)
            st = cpu_gemm(be, ta, tb, m, n, k, alpha, a + q * sa, b + q * sb, beta,
                          c + q * sc, err);
        return st;
    }
    batch_job j = { .g = { .ta = ta, .tb = tb, .thin = be->gemm_thin, .m = m, .n = n, .k = k,
                           .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c },
                    .sa = sa, .sb = sb, .sc = sc, .transpose_b = thin };
    dl_parallel_for(batch, BATCH_SPLIT_MNK / (m * n * k) + 1, batch_task, &j);
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
    dl_parallel_for(n * c, CPU_GRAIN / (hw > 0 ? hw : 1) + 1, bias_add_nchw_task, &j);
}

/* A sum in 16 lanes (vectorizable, and the same order every time). */
float cpu_sum_floats(const float *p, int64_t n)
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
            s += cpu_sum_floats(j->dy + (i * j->c + ch) * j->hw, j->hw);
        j->db[ch] += s;
    }
}

static void cpu_bias_grad_nchw(dl_backend *be, float *db, const float *dy,
                               int64_t n, int64_t c, int64_t hw)
{
    (void)be;
    nchw_job j = { .dy = dy, .db = db, .n = n, .c = c, .hw = hw };
    dl_parallel_for(c, (CPU_GRAIN / (n * hw > 0 ? n * hw : 1)) + 1, bias_grad_nchw_task, &j);
}

#ifdef DL_HAVE_DNNL
/* ---- oneDNN (backend_dnnl.c): be->ctx is the dl_dnnl context ------------- */

static dl_status dnnl_conv_fwd(dl_backend *be, const dl_conv_geom *g, const float *x,
                               const float *w, const float *b, const dl_act *post,
                               float *y, dl_err *err)
{
    return dl_dnnl_conv_fwd(be->ctx, g, x, w, b, post, y, err);
}

/* A serving model's dense layers on oneDNN's inner product, its weights
 * reordered once (prepacked), where OpenBLAS packs them on every call:
 * at a batch of one that packing took a fifth of a transformer encoder's
 * time (its dense layers see 128 rows a sample). Below IP_MIN_ROWS rows
 * OpenBLAS's small-matrix kernels, which read the weights in place, are
 * faster: fashion-mlp, one thread, samples/s, inner product against
 * OpenBLAS: 1 row 128k / 166k, 2 rows 247k / 291k, 4 rows 398k / 395k,
 * 8 rows 435k / 399k, 64 rows 475k / 321k. Trained weights go to
 * OpenBLAS. */
#define IP_MIN_ROWS 4

/* Except for a matrix of at least IP_MIN_WEIGHTS weights (1 MiB), which
 * each row reads whole: the inner product splits that read between the
 * threads, OpenBLAS's small kernel reads it on one. efficientnet_b0's
 * classifier (1280 x 1000) at a batch of one: 1.7% of a pass on
 * OpenBLAS; resnet18, mobilenet_v2, shufflenet_v2 and efficientnet_b0
 * at batch 1 measured 0-3% faster. */
#define IP_MIN_WEIGHTS (1 << 18)

static bool use_ip(int64_t m, int64_t n, int64_t k)
{
    return m >= IP_MIN_ROWS || (m > 0 && n * k >= IP_MIN_WEIGHTS);
}

static dl_status dnnl_gemm_bias_act(dl_backend *be, int64_t m, int64_t n, int64_t k,
                                    const float *a, const float *b, const float *bias,
                                    const dl_act *post, float *c, dl_err *err)
{
    dl_status st = use_ip(m, n, k)
                       ? dl_dnnl_dense_fwd(be->ctx, m, n, k, a, b, bias, post, c, err)
                       : DL_ERR_UNAVAILABLE;
    return st == DL_ERR_UNAVAILABLE ? bias_act(be, false, m, n, k, a, b, bias, post, c, err)
                                    : st;
}

static dl_status dnnl_conv_fwd_unary(dl_backend *be, const dl_conv_geom *g, const float *x,
                                     const float *w, const float *b, const dl_unary *u,
                                     float *y, dl_err *err)
{
    return dl_dnnl_conv_fwd_unary(be->ctx, g, x, w, b, u, y, err);
}

static dl_status dnnl_conv_fwd_add(dl_backend *be, const dl_conv_geom *g, const float *x,
                                   const float *w, const float *b, const float *r,
                                   const dl_act *post, float *y, dl_err *err)
{
    return dl_dnnl_conv_fwd_add(be->ctx, g, x, w, b, r, post, y, err);
}

static dl_status dnnl_gemm_bias_unary(dl_backend *be, int64_t m, int64_t n, int64_t k,
                                      const float *a, const float *b, const float *bias,
                                      const dl_unary *u, float *c, dl_err *err)
{
    return use_ip(m, n, k) ? dl_dnnl_dense_fwd_unary(be->ctx, m, n, k, a, b, bias, u, c, err)
                           : DL_ERR_UNAVAILABLE;
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
    .adagrad_step   = cpu_adagrad_step, \
    .axpy           = cpu_axpy, \
    .scale          = cpu_scale, \
    .sumsq          = cpu_sumsq, \
    .binary_fwd       = cpu_binary_fwd, \
    .binary_bwd       = cpu_binary_bwd, \
    .copy_strided     = cpu_copy_strided, \
    .reduce_fwd       = cpu_reduce_fwd, \
    .reduce_bwd       = cpu_reduce_bwd, \
    .unary_fwd        = cpu_unary_fwd, \
    .unary_bwd        = cpu_unary_bwd, \
    .layernorm_fwd    = cpu_layernorm_fwd, \
    .layernorm_bwd    = cpu_layernorm_bwd, \
    .softmax_axis_fwd = cpu_softmax_axis_fwd, \
    .softmax_axis_bwd = cpu_softmax_axis_bwd, \
    .gemm_batched     = cpu_gemm_batched, \
    .attn_fwd         = cpu_attn_fwd, \
    .attn_bwd         = cpu_attn_bwd, \
    .seq_mask         = cpu_seq_mask, \
    .seq_pool_fwd     = cpu_seq_pool_fwd, \
    .seq_pool_bwd     = cpu_seq_pool_bwd, \
    .rnn_size         = cpu_rnn_size, \
    .rnn_fwd          = cpu_rnn_fwd, \
    .rnn_bwd          = cpu_rnn_bwd,

/* im2col + OpenBLAS and plain loops for convolution and pooling. */
static const dl_backend_ops cpu_ops = {
    CPU_OPS
    .gemm_bias_act    = cpu_gemm_bias_act,
};

#ifdef DL_HAVE_DNNL
/* The same, with oneDNN's convolution and pooling. */
static const dl_backend_ops cpu_dnnl_ops = {
    CPU_OPS
    .conv_fwd         = dnnl_conv_fwd,
    .conv_fwd_unary   = dnnl_conv_fwd_unary,
    .conv_fwd_add     = dnnl_conv_fwd_add,
    .conv_bwd_data    = dnnl_conv_bwd_data,
    .conv_bwd_weights = dnnl_conv_bwd_weights,
    .pool2d_fwd       = dnnl_pool_fwd,
    .pool2d_bwd       = dnnl_pool_bwd,
    .fix_weights      = dnnl_fix_weights,
    .gemm_bias_act    = dnnl_gemm_bias_act,
    .gemm_bias_unary  = dnnl_gemm_bias_unary,
};
#endif

/* The engine for this CPU and these models: oneDNN's kernels for models
 * with convolutions where the CPU has AVX-512 (its avx512_core
 * convolutions trained fashion-cnn 1.3x and inferred 1.3x faster than
 * im2col + OpenBLAS there), im2col + OpenBLAS on AVX2 only, where
 * oneDNN's kernels measured no faster and its reorders cost more
 * (docs/benchmarks.md, "CPU engine"), and for models without layers it
 * runs (convolutions, pooling, a serving model's dense layers), to which
 * oneDNN would bring only its spinning OpenMP team. */
static dl_conv_engine auto_engine(bool engine_layers)
{
#if defined(DL_HAVE_DNNL) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    if (engine_layers && __builtin_cpu_supports("avx512f"))
        return DL_CONV_ONEDNN;
#else
    (void)engine_layers;
#endif
    return DL_CONV_IM2COL;
}

/* The engine asked for: the caller's, else DLSERVE_CPU_CONV's (auto,
 * im2col or onednn), else auto. DL_ERR_INVALID for an unknown word in the
 * environment. */
static dl_status pick_engine(dl_conv_engine asked, bool engine_layers, dl_conv_engine *out,
                             dl_err *err)
{
    *out = asked;
    if (asked != DL_CONV_DEFAULT)
        return DL_OK;
    const char *env = getenv("DLSERVE_CPU_CONV");
    if (!env || !*env || strcmp(env, "auto") == 0) {
        *out = auto_engine(engine_layers);
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
    if (pick_engine(p->conv, p->engine_layers, &engine, err) != DL_OK ||
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

const char *dl_blas_core_name(void)
{
    const char *core = openblas_get_corename();
    return core ? core : "?";
}

const char *dl_blas_core_override(void)
{
    const char *core = openblas_get_corename();
    if (getenv("OPENBLAS_CORETYPE") || !core || strcasecmp(core, "prescott") != 0)
        return NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    return NULL;
}

dl_status dl_backend_cpu_new(int threads, dl_backend **out, dl_err *err)
{
    dl_backend_params p = { .engine_layers = true };
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
