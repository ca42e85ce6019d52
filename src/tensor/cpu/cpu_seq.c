/* cpu_seq.c: the CPU's sequence kernels (dl_seq): the mask of each
 * sample's padding and seq_pool's mean, max, sum and last over its valid
 * positions. A task takes whole samples, and each value of a sample is
 * computed by the same loop whatever the batch around it. */
#include "tensor/cpu/cpu.h"

#include <string.h>

/* Sample s's valid positions. */
static int64_t len_of(const dl_seq *q, int64_t s)
{
    return q->len ? q->len[s] : q->t;
}

typedef struct seq_job {
    const dl_seq *q;
    dl_seq_pool_kind kind;
    const float *x, *dy;
    float *out;
} seq_job;

/* Samples per task: about CPU_GRAIN values. */
static int64_t grain_of(const dl_seq *q)
{
    int64_t per = q->t * q->d;
    return CPU_GRAIN / (per > 0 ? per : 1) + 1;
}

static void mask_task(void *ctx, int64_t s0, int64_t s1)
{
    const seq_job *j = ctx;
    const dl_seq *q = j->q;
    int64_t per = q->t * q->d;
    for (int64_t s = s0; s < s1; s++) {
        int64_t valid = len_of(q, s) * q->d;
        if (j->out != j->x)
            memcpy(j->out + s * per, j->x + s * per, (size_t)valid * sizeof(float));
        memset(j->out + s * per + valid, 0, (size_t)(per - valid) * sizeof(float));
    }
}

void cpu_seq_mask(dl_backend *be, const dl_seq *q, const float *x, float *y)
{
    (void)be;
    seq_job j = { .q = q, .x = x, .out = y };
    dl_parallel_for(q->n, grain_of(q), mask_task, &j);
}

/* The first of positions [0, len) of column c of sample xs (t rows of
 * d) holding its largest value (NaN aside, as torch.max: a later value
 * wins only when strictly larger). */
static int64_t first_max(const float *xs, int64_t len, int64_t d, int64_t c)
{
    int64_t at = 0;
    for (int64_t t = 1; t < len; t++)
        if (xs[t * d + c] > xs[at * d + c])
            at = t;
    return at;
}

static void pool_fwd_task(void *ctx, int64_t s0, int64_t s1)
{
    const seq_job *j = ctx;
    const dl_seq *q = j->q;
    int64_t d = q->d;
    for (int64_t s = s0; s < s1; s++) {
        const float *xs = j->x + s * q->t * d;
        float *ys = j->out + s * d;
        int64_t len = len_of(q, s);
        for (int64_t c = 0; c < d; c++) {
            double acc = 0.0;      /* mean and sum: in double, position order */
            switch (j->kind) {
            case DL_SEQ_POOL_KIND_MAX:
                ys[c] = xs[first_max(xs, len, d, c) * d + c];
                break;
            case DL_SEQ_POOL_KIND_LAST:
                ys[c] = xs[(len - 1) * d + c];
                break;
            default:
                for (int64_t t = 0; t < len; t++)
                    acc += xs[t * d + c];
                ys[c] = (float)(j->kind == DL_SEQ_POOL_KIND_MEAN ? acc / (double)len : acc);
            }
        }
    }
}

void cpu_seq_pool_fwd(dl_backend *be, dl_seq_pool_kind kind, const dl_seq *q, const float *x,
                      float *y)
{
    (void)be;
    seq_job j = { .q = q, .kind = kind, .x = x, .out = y };
    dl_parallel_for(q->n, grain_of(q), pool_fwd_task, &j);
}

static void pool_bwd_task(void *ctx, int64_t s0, int64_t s1)
{
    const seq_job *j = ctx;
    const dl_seq *q = j->q;
    int64_t d = q->d;
    for (int64_t s = s0; s < s1; s++) {
        const float *xs = j->x ? j->x + s * q->t * d : NULL, *dys = j->dy + s * d;
        float *dxs = j->out + s * q->t * d;
        int64_t len = len_of(q, s);
        memset(dxs, 0, (size_t)(q->t * d) * sizeof(float));
        for (int64_t c = 0; c < d; c++)
            switch (j->kind) {
            case DL_SEQ_POOL_KIND_MAX:
                dxs[first_max(xs, len, d, c) * d + c] = dys[c];
                break;
            case DL_SEQ_POOL_KIND_LAST:
                dxs[(len - 1) * d + c] = dys[c];
                break;
            default: {
                float g = j->kind == DL_SEQ_POOL_KIND_MEAN ? dys[c] / (float)len : dys[c];
                for (int64_t t = 0; t < len; t++)
                    dxs[t * d + c] = g;
            }
            }
    }
}

void cpu_seq_pool_bwd(dl_backend *be, dl_seq_pool_kind kind, const dl_seq *q, const float *x,
                      const float *dy, float *dx)
{
    (void)be;
    seq_job j = { .q = q, .kind = kind, .x = x, .dy = dy, .out = dx };
    dl_parallel_for(q->n, grain_of(q), pool_bwd_task, &j);
}
