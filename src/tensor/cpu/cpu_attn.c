/* cpu_attn.c: scaled dot-product attention (dl_attn, the sdpa layer). A
 * task a sample, head and block of ATTN_ROWS query rows computes the
 * block's scores, their softmax and its share of the output while the
 * scores are in cache, reading Q, K and V where they lie (the columns of
 * one packed projection): no transposed copies of the heads, no scores
 * tensor the size of the batch. Each product is a GEMM of the block's
 * own size, so a sample's answer does not depend on the batch around it.
 * Backward recomputes the probabilities, a task a sample and head. With
 * per-sample lengths (dl_attn.q_len, k_len) the products stop at the
 * sample's valid rows: their shapes are the sample's own, padding costs
 * nothing and a padded sample answers as it does alone. */
#include "tensor/backend.h"
#include "tensor/cpu/cpu.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#define ATTN_ROWS 32

typedef struct attn_job {
    const dl_attn *a;
    bool thin;                  /* products through the thin kernel */
    int64_t blocks;             /* blocks of query rows a head */
    const float *q, *k, *v, *dout;
    float *o, *dq, *dk, *dv;
    int failed;                 /* a task found no memory */
} attn_job;

/* Sample s's valid rows of a side of cap rows (len NULL: all of them). */
static int64_t rows_of(const int32_t *len, int64_t s, int64_t cap)
{
    if (!len)
        return cap;
    return len[s] < 0 ? 0 : len[s] < cap ? len[s] : cap;
}

/* How many of sample smp's kn valid keys its query row `row` attends to. */
static int64_t keys_of(const dl_attn *a, int64_t smp, int64_t row, int64_t kn)
{
    int64_t at = (a->q_off ? a->q_off[smp] : 0) + row;   /* the query's position */
    return a->causal && at + 1 < kn ? at + 1 : kn;
}

/* Zeroes `rows` rows of `cols` floats, `ld` apart. */
static void zero_rows(float *x, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = 0; r < rows; r++)
        memset(x + r * ld, 0, (size_t)cols * sizeof(float));
}

/* p[0..keys) = softmax(scale * s[0..keys)), p[keys..width) = 0; in place.
 * The maximum is subtracted first: no exponential overflows. */
static inline void softmax_row(float *restrict p, int64_t keys, int64_t width, float scale)
{
    float mx = scale * p[0];
    for (int64_t c = 1; c < keys; c++)
        mx = scale * p[c] > mx ? scale * p[c] : mx;
    for (int64_t c = 0; c < keys; c++)
        p[c] = cpu_expf(scale * p[c] - mx);
    float inv = 1.0f / cpu_sum_floats(p, keys);
    for (int64_t c = 0; c < keys; c++)
        p[c] *= inv;
    for (int64_t c = keys; c < width; c++)
        p[c] = 0.0f;
}

/* C (m, n) = A (m, k) B (n, k)^T, leading dimensions given. */
static void gemm_nt(bool thin, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float *c, int64_t ldc)
{
    if (thin)
        dl_gemm_thin(m, n, k, a, lda, b, ldb, c, ldc);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)m, (blasint)n,
                    (blasint)k, 1.0f, a, (blasint)lda, b, (blasint)ldb, 0.0f, c, (blasint)ldc);
}

static void fail(attn_job *j)
{
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
}

CPU_WIDE static void fwd_task(void *ctx, int64_t u0, int64_t u1)
{
    attn_job *j = ctx;
    const dl_attn *a = j->a;
    int64_t tk = a->tk;
    /* the block's scores; with the thin kernel, V_h transposed after them */
    float *s = malloc((size_t)(ATTN_ROWS * tk + (j->thin ? a->dv * tk : 0)) * sizeof(float));
    if (!s) {
        fail(j);
        return;
    }
    float *vt = s + ATTN_ROWS * tk;
    int64_t have = -1;          /* whose V_h vt holds */
    for (int64_t u = u0; u < u1; u++) {
        int64_t sh = u / j->blocks, smp = sh / a->heads, h = sh % a->heads;
        int64_t r0 = u % j->blocks * ATTN_ROWS;
        int64_t rows = a->tq - r0 < ATTN_ROWS ? a->tq - r0 : ATTN_ROWS;
        int64_t kn = rows_of(a->k_len, smp, tk), live = rows_of(a->q_len, smp, a->tq) - r0;
        live = kn == 0 || live < 0 ? 0 : live < rows ? live : rows;   /* valid queries */
        const float *q = j->q + smp * a->q_smp + r0 * a->q_row + h * a->dk;
        const float *k = j->k + smp * a->k_smp + h * a->dk;
        const float *v = j->v + smp * a->v_smp + h * a->dv;
        float *o = j->o + smp * a->o_smp + r0 * a->o_row + h * a->dv;
        zero_rows(o + live * a->o_row, rows - live, a->dv, a->o_row);
        if (live == 0)
            continue;
        int64_t keys = keys_of(a, smp, r0 + live - 1, kn);
        gemm_nt(j->thin, live, keys, a->dk, q, a->q_row, k, a->k_row, s, keys);
        for (int64_t r = 0; r < live; r++)
            softmax_row(s + r * keys, keys_of(a, smp, r0 + r, kn), keys, a->scale);
        if (!j->thin) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)live,
                        (blasint)a->dv, (blasint)keys, 1.0f, s, (blasint)keys, v,
                        (blasint)a->v_row, 0.0f, o, (blasint)a->o_row);
            continue;
        }
        if (have != sh) {
            for (int64_t r = 0; r < kn; r++)
                for (int64_t c = 0; c < a->dv; c++)
                    vt[c * tk + r] = v[r * a->v_row + c];
            have = sh;
        }
        dl_gemm_thin(live, a->dv, keys, s, keys, vt, tk, o, a->o_row);
    }
    free(s);
}

static dl_status attn_check(const dl_attn *a, dl_err *err)
{
    int64_t big = a->tq > a->tk ? a->tq : a->tk;
    if (big > INT32_MAX / 4 || a->q_row > INT32_MAX || a->k_row > INT32_MAX ||
        a->v_row > INT32_MAX || a->o_row > INT32_MAX || (int64_t)a->tq * a->tk > INT32_MAX)
        return dl_err_set(err, DL_ERR_INVALID, "attention of %lld x %lld positions is too "
                          "large", (long long)a->tq, (long long)a->tk);
    return DL_OK;
}

dl_status cpu_attn_fwd(dl_backend *be, const dl_attn *a, const float *q, const float *k,
                       const float *v, float *o, dl_err *err)
{
    dl_status st = attn_check(a, err);
    if (st != DL_OK || a->n <= 0 || a->tq <= 0)
        return st;
    attn_job j = { .a = a, .thin = be->gemm_thin, .blocks = (a->tq + ATTN_ROWS - 1) / ATTN_ROWS,
                   .q = q, .k = k, .v = v, .o = o };
    if (a->tk <= 0) {   /* nothing to attend to: zeros */
        for (int64_t s = 0; s < a->n; s++)
            zero_rows(o + s * a->o_smp, a->tq, a->heads * a->dv, a->o_row);
        return DL_OK;
    }
    int64_t per_unit = ATTN_ROWS * a->tk * (a->dk + a->dv);
    dl_parallel_for(a->n * a->heads * j.blocks, CPU_GRAIN * 16 / per_unit + 1, fwd_task, &j);
    return j.failed ? dl_err_set(err, DL_ERR_NOMEM, "attention: scratch of %lld floats",
                                 (long long)(ATTN_ROWS * a->tk))
                    : DL_OK;
}

/* The gradients of one sample and head over its qn valid queries and kn
 * valid keys (the rows past them get zeros): P recomputed, then
 * dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)) scale,
 * dQ = dS K, dK = dS^T Q. */
CPU_WIDE static void bwd_task(void *ctx, int64_t u0, int64_t u1)
{
    attn_job *j = ctx;
    const dl_attn *a = j->a;
    int64_t tq = a->tq, tk = a->tk;
    float *p = malloc((size_t)(2 * tq * tk) * sizeof(float));
    if (!p) {
        fail(j);
        return;
    }
    float *dp = p + tq * tk;
    for (int64_t u = u0; u < u1; u++) {
        int64_t smp = u / a->heads, h = u % a->heads;
        const float *q = j->q + smp * a->q_smp + h * a->dk;
        const float *k = j->k + smp * a->k_smp + h * a->dk;
        const float *v = j->v + smp * a->v_smp + h * a->dv;
        const float *dout = j->dout + smp * a->o_smp + h * a->dv;
        float *dq = j->dq + smp * a->q_smp + h * a->dk;
        float *dk = j->dk + smp * a->k_smp + h * a->dk;
        float *dv = j->dv + smp * a->v_smp + h * a->dv;
        int64_t qn = rows_of(a->q_len, smp, tq), kn = rows_of(a->k_len, smp, tk);
        if (qn == 0 || kn == 0)
            qn = kn = 0;
        zero_rows(dq + qn * a->q_row, tq - qn, a->dk, a->q_row);
        zero_rows(dk + kn * a->k_row, tk - kn, a->dk, a->k_row);
        zero_rows(dv + kn * a->v_row, tk - kn, a->dv, a->v_row);
        if (qn == 0)
            continue;
        gemm_nt(false, qn, kn, a->dk, q, a->q_row, k, a->k_row, p, kn);
        for (int64_t r = 0; r < qn; r++)
            softmax_row(p + r * kn, keys_of(a, smp, r, kn), kn, a->scale);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)kn, (blasint)a->dv,
                    (blasint)qn, 1.0f, p, (blasint)kn, dout, (blasint)a->o_row, 0.0f, dv,
                    (blasint)a->v_row);
        gemm_nt(false, qn, kn, a->dv, dout, a->o_row, v, a->v_row, dp, kn);
        for (int64_t r = 0; r < qn; r++) {
            float *restrict pr = p + r * kn, *restrict dr = dp + r * kn;
            float dot = 0.0f;
            for (int64_t c = 0; c < kn; c++)
                dot += pr[c] * dr[c];
            for (int64_t c = 0; c < kn; c++)
                dr[c] = pr[c] * (dr[c] - dot) * a->scale;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)qn, (blasint)a->dk,
                    (blasint)kn, 1.0f, dp, (blasint)kn, k, (blasint)a->k_row, 0.0f, dq,
                    (blasint)a->q_row);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)kn, (blasint)a->dk,
                    (blasint)qn, 1.0f, dp, (blasint)kn, q, (blasint)a->q_row, 0.0f, dk,
                    (blasint)a->k_row);
    }
    free(p);
}

dl_status cpu_attn_bwd(dl_backend *be, const dl_attn *a, const float *q, const float *k,
                       const float *v, const float *dout, float *dq, float *dk, float *dv,
                       dl_err *err)
{
    (void)be;
    dl_status st = attn_check(a, err);
    if (st != DL_OK || a->n <= 0 || a->tq <= 0 || a->tk <= 0)
        return st;
    attn_job j = { .a = a, .q = q, .k = k, .v = v, .dout = dout, .dq = dq, .dk = dk, .dv = dv };
    dl_parallel_for(a->n * a->heads, 1, bwd_task, &j);
    return j.failed ? dl_err_set(err, DL_ERR_NOMEM, "attention: scratch of %lld floats",
                                 (long long)(2 * a->tq * a->tk))
                    : DL_OK;
}
