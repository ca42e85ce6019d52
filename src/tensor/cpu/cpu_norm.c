/* cpu_norm.c: the CPU backend's batch normalisation, over NCHW and over
 * the convolution engine's blocked layout. */
#define _POSIX_C_SOURCE 200809L
#include "tensor/backend.h"
#include "tensor/cpu/cpu.h"

#include <math.h>

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
            s += cpu_sum_floats(j->x + (i * j->c + ch) * j->hw, j->hw);
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

/* Channels a task: enough that one holds about CPU_GRAIN values. */
static int64_t bn_grain(int64_t n, int64_t hw)
{
    return CPU_GRAIN / (n * hw > 0 ? n * hw : 1) + 1;
}

void cpu_bn_fwd_train(dl_backend *be, const float *x, float *y,
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

void cpu_bn_fwd_infer(dl_backend *be, const float *x, float *y,
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
            sdy += cpu_sum_floats(j->dy + at, j->hw);
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

void cpu_bn_bwd(dl_backend *be, const float *x, const float *dy,
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

/* Blocks a task: enough that one holds about CPU_GRAIN values. */
static int64_t bnb_grain(int64_t n, int64_t hw, int64_t B)
{
    return CPU_GRAIN / (n * hw * B > 0 ? n * hw * B : 1) + 1;
}

void cpu_bn_fwd_train_blk(dl_backend *be, const float *x, float *y,
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

void cpu_bn_fwd_infer_blk(dl_backend *be, const float *x, float *y,
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

void cpu_bn_bwd_blk(dl_backend *be, const float *x, const float *dy,
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
