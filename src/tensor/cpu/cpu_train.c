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
                   float eps, float wd, int64_t t)
{
    (void)be;
    /* PyTorch: p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
    double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    opt_job j = { .p = p, .g = g, .m = m, .v = v, .b1 = b1, .b2 = b2,
                  .eps = eps, .wd = wd, .c1 = (float)(lr / bc1),
                  .c2 = (float)(1.0 / sqrt(bc2)) };
    dl_parallel_for(n, CPU_GRAIN * 4, adam_task, &j);
}

void cpu_axpy(dl_backend *be, float alpha, const float *x, float *y,
              int64_t n)
{
    (void)be;
    cblas_saxpy((blasint)n, alpha, x, 1, y, 1);
}
