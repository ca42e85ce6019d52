/* cpu_act.c: the CPU backend's activations, softmax, dropout, elementwise
 * products and embeddings, spread over dl_parallel_for where the work is
 * large enough. */
#define _POSIX_C_SOURCE 200809L
#include "tensor/backend.h"
#include "tensor/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* ---- activations ----------------------------------------------------- */

typedef struct act_job {
    dl_act act;
    const float *x, *y, *dy;
    float *out;
} act_job;

/* y = act(y) in place. */
CPU_WIDE void cpu_act_rows(dl_act act, float *restrict y, int64_t n)
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
            y[i] = 1.0f / (1.0f + cpu_expf(-y[i]));
        break;
    }
}

/* Local restrict copies let the compiler vectorize these loops. */
CPU_WIDE static void act_fwd_task(void *ctx, int64_t b, int64_t e)
{
    const act_job *j = ctx;
    if (j->x == j->out) {          /* in place: restrict would not hold */
        cpu_act_rows(j->act, j->out + b, e - b);
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
            y[i] = 1.0f / (1.0f + cpu_expf(-x[i]));
        break;
    }
}

CPU_WIDE static void act_bwd_task(void *ctx, int64_t b, int64_t e)
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

void cpu_act_fwd(dl_backend *be, dl_act act, const float *x, float *y,
                 int64_t n)
{
    (void)be;
    act_job j = { act, x, NULL, NULL, y };
    dl_parallel_for(n, CPU_GRAIN, act_fwd_task, &j);
}

void cpu_act_bwd(dl_backend *be, dl_act act, const float *y,
                 const float *dy, float *dx, int64_t n)
{
    (void)be;
    act_job j = { act, NULL, y, dy, dx };
    dl_parallel_for(n, CPU_GRAIN, act_bwd_task, &j);
}

typedef struct softmax_job {
    const float *x;
    float *y;
    int64_t cols;
} softmax_job;

CPU_WIDE static void softmax_task(void *ctx, int64_t r0, int64_t r1)
{
    const softmax_job *j = ctx;
    int64_t cols = j->cols;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict xr = j->x + r * cols;
        float *restrict yr = j->y + r * cols;
        float mx = xr[0];
        for (int64_t c = 1; c < cols; c++)
            mx = xr[c] > mx ? xr[c] : mx;
        for (int64_t c = 0; c < cols; c++)
            yr[c] = cpu_expf(xr[c] - mx);
        float inv = 1.0f / cpu_sum_floats(yr, cols);
        for (int64_t c = 0; c < cols; c++)
            yr[c] *= inv;
    }
}

/* Rows over the pool (an attention's scores hold thousands). */
void cpu_softmax_fwd(dl_backend *be, const float *x, float *y,
                     int64_t rows, int64_t cols)
{
    (void)be;
    softmax_job j = { x, y, cols };
    dl_parallel_for(rows, CPU_GRAIN / (cols > 0 ? cols : 1) + 1, softmax_task, &j);
}

void cpu_softmax_bwd(dl_backend *be, const float *y, const float *dy,
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

/* ---- dropout, embedding, elementwise ---------------------------------- */

void cpu_dropout_fwd(dl_backend *be, const float *x, float *y, float *mask,
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

void cpu_mul(dl_backend *be, const float *a, const float *b, float *y,
             int64_t n)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}

dl_status cpu_embed_fwd(dl_backend *be, const float *ids, const float *table,
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

void cpu_embed_bwd(dl_backend *be, const float *ids, const float *dy,
                   float *dtable, int64_t nids, int64_t dim)
{
    (void)be;
    for (int64_t i = 0; i < nids; i++) {
        float *row = dtable + (int64_t)ids[i] * dim;
        for (int64_t k = 0; k < dim; k++)
            row[k] += dy[i * dim + k];
    }
}
