/* cpu_train.c: the CPU backend's losses and optimizer updates. */
#define _POSIX_C_SOURCE 200809L
#include "tensor/backend.h"
#include "tensor/cpu/cpu.h"

#include <cblas.h>
#include <math.h>

/* ---- losses ------------------------------------------------------------ */

void cpu_xent(dl_backend *be, const float *logits, const int32_t *labels,
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

void cpu_mse(dl_backend *be, const float *pred, const float *target,
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
    float decay;             /* Adam: 1; AdamW: 1 - lr wd, wd then 0 */
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
    const float decay = j->decay;
    for (int64_t i = b; i < e; i++) {
        float gi = g[i] + wd * p[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        p[i] = p[i] * decay - c1 * m[i] / (sqrtf(v[i]) * c2 + eps);
    }
}

/* The state sum lives in j->v. */
static void adagrad_task(void *ctx, int64_t b, int64_t e)
{
    const opt_job *j = ctx;
    float *restrict p = j->p, *restrict s = j->v;
    const float *restrict g = j->g;
    const float lr = j->lr, eps = j->eps, wd = j->wd;
    for (int64_t i = b; i < e; i++) {
        float gi = g[i] + wd * p[i];
        s[i] += gi * gi;
        p[i] -= lr * gi / (sqrtf(s[i]) + eps);
    }
}

void cpu_sgd_step(dl_backend *be, float *p, const float *g, float *v,
                  int64_t n, float lr, float mu, bool nesterov, float wd)
{
    (void)be;
    opt_job j = { .p = p, .g = g, .v = v, .lr = lr, .mu = mu, .wd = wd,
                  .nesterov = nesterov };
    dl_parallel_for(n, CPU_GRAIN * 4, sgd_task, &j);
}

void cpu_adam_step(dl_backend *be, float *p, const float *g, float *m,
                   float *v, int64_t n, float lr, float b1, float b2,
                   float eps, float wd, bool decoupled, int64_t t)
{
    (void)be;
    /* PyTorch: p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps);
     * AdamW first p *= 1 - lr wd (1 for Adam: the product is exact). */
    double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    opt_job j = { .p = p, .g = g, .m = m, .v = v, .b1 = b1, .b2 = b2,
                  .eps = eps, .wd = decoupled ? 0.0f : wd, .c1 = (float)(lr / bc1),
                  .c2 = (float)(1.0 / sqrt(bc2)),
                  .decay = decoupled ? (float)(1.0 - (double)lr * wd) : 1.0f };
    dl_parallel_for(n, CPU_GRAIN * 4, adam_task, &j);
}

void cpu_adagrad_step(dl_backend *be, float *p, const float *g, float *sum,
                      int64_t n, float lr, float eps, float wd)
{
    (void)be;
    opt_job j = { .p = p, .g = g, .v = sum, .lr = lr, .eps = eps, .wd = wd };
    dl_parallel_for(n, CPU_GRAIN * 4, adagrad_task, &j);
}

void cpu_axpy(dl_backend *be, float alpha, const float *x, float *y,
              int64_t n)
{
    (void)be;
    cblas_saxpy((blasint)n, alpha, x, 1, y, 1);
}

void cpu_scale(dl_backend *be, float *x, int64_t n, float alpha)
{
    (void)be;
    cblas_sscal((blasint)n, alpha, x, 1);
}

/* At most SUMSQ_PARTS partial sums, over blocks of at least SUMSQ_BLOCK
 * values: the blocks, and so the total, depend on n only. */
#define SUMSQ_PARTS 256
#define SUMSQ_BLOCK ((int64_t)1 << 16)

typedef struct sumsq_job {
    const float *x;
    int64_t n, block;
    double part[SUMSQ_PARTS];
} sumsq_job;

static void sumsq_task(void *ctx, int64_t b, int64_t e)
{
    sumsq_job *j = ctx;
    for (int64_t k = b; k < e; k++) {
        int64_t end = (k + 1) * j->block < j->n ? (k + 1) * j->block : j->n;
        double s = 0.0;
        for (int64_t i = k * j->block; i < end; i++)
            s += (double)j->x[i] * j->x[i];
        j->part[k] = s;
    }
}

void cpu_sumsq(dl_backend *be, const float *x, int64_t n, double *sum)
{
    (void)be;
    *sum = 0.0;
    if (n <= 0)
        return;
    sumsq_job j = { .x = x, .n = n, .block = (n + SUMSQ_PARTS - 1) / SUMSQ_PARTS };
    if (j.block < SUMSQ_BLOCK)
        j.block = SUMSQ_BLOCK;
    int64_t parts = (n + j.block - 1) / j.block;
    dl_parallel_for(parts, 1, sumsq_task, &j);
    for (int64_t k = 0; k < parts; k++)
        *sum += j.part[k];
}
