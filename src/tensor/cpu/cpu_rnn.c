/* cpu_rnn.c: LSTM and GRU stacks over packed sequences (dl_rnn). Each
 * layer-direction keeps its states as rows ordered by step, then by sample
 * (the samples still running at that step, in batch order): a step's rows
 * lie together, so one GEMM projects the input of every valid step, and
 * each step multiplies the rows still running by the recurrent weights.
 * Nothing is sorted and no padded step is computed. With r->invariant the
 * GEMMs run row-exact and everything else a row at a time: a sample gets
 * the same bits alone or in any batch. Backward is BPTT over the same rows. */
#define _POSIX_C_SOURCE 200809L
#include "tensor/backend.h"
#include "tensor/cpu/cpu.h"

#include <cblas.h>

#include <string.h>

/* A call's geometry and its work memory, carved from r->work. */
typedef struct rnn_plan {
    const dl_rnn *r;
    dl_backend   *be;
    int64_t       g, h, gh;        /* gates, hidden, g * h */
    int64_t       cap, in_max;     /* rows n * t; the widest layer input */
    int64_t       rows, steps;     /* this call's rows and longest length */
    int32_t      *len;             /* [n] each sample's steps */
    int32_t      *off;             /* [t + 1] step s's rows: off[s] .. off[s + 1] */
    int32_t      *smp;             /* [cap] a row's sample */
    int32_t      *row;             /* [t][n] sample i's row at step s; -1 past it */
    float        *x;               /* [cap, in_max] a layer's inputs by row; dx */
    float        *q;               /* [n, gh] a step's recurrent products */
    float        *hg;              /* [n, h] a step's previous states, gathered;
                                    * backward: their gradients */
    float        *bsum;            /* [gh] the biases the input projection adds */
    float        *zero;            /* [h] the initial state */
    float        *dy[2];           /* [dirs][cap, h] gradients of a layer's states,
                                    * and of the layer's below */
    float        *da;              /* [cap, gh] pre-activation gradients (input side) */
    float        *dah;             /* [cap, gh] GRU: the recurrent side's (LSTM: da) */
    float        *hp;              /* [cap, h] each row's previous state */
    float        *dhc, *dcc;       /* [n, h] gradients carried to the previous step */
} rnn_plan;

/* A layer-direction's rows in the reserve: gates (after their
 * activations), then c (LSTM) or W_hn h + b_hn (GRU), then h. */
typedef struct rnn_rows {
    float *gates, *aux, *h;
} rnn_rows;

/* A layer-direction's parameters (biases NULL without). */
typedef struct rnn_params {
    const float *wih, *whh, *bih, *bhh;
    float *dwih, *dwhh, *dbih, *dbhh;
    int64_t in;
} rnn_params;

/* Carves count elements of `size` bytes, 64-byte aligned; NULL base:
 * sizes only. */
static void *carve(char *base, size_t *at, int64_t count, size_t size)
{
    size_t o = (*at + 63) / 64 * 64;
    *at = o + (size_t)count * size;
    return base ? base + o : NULL;
}

/* Lays the work out over base (NULL: none) and returns its bytes. */
static size_t layout(rnn_plan *p, char *base)
{
    const dl_rnn *r = p->r;
    int64_t n = r->n, h = p->h, cap = p->cap;
    size_t at = 0;
    p->len = carve(base, &at, n, sizeof(int32_t));
    p->off = carve(base, &at, r->t + 1, sizeof(int32_t));
    p->smp = carve(base, &at, cap, sizeof(int32_t));
    p->row = carve(base, &at, cap, sizeof(int32_t));
    p->x = carve(base, &at, cap * p->in_max, sizeof(float));
    p->q = carve(base, &at, n * p->gh, sizeof(float));
    p->hg = carve(base, &at, n * h, sizeof(float));
    p->bsum = carve(base, &at, p->gh, sizeof(float));
    p->zero = carve(base, &at, h, sizeof(float));
    for (int k = 0; k < 2; k++)
        p->dy[k] = carve(base, &at, r->dirs * cap * h, sizeof(float));
    p->da = carve(base, &at, cap * p->gh, sizeof(float));
    p->dah = r->cell == DL_RNN_GRU ? carve(base, &at, cap * p->gh, sizeof(float)) : p->da;
    p->hp = carve(base, &at, cap * h, sizeof(float));
    p->dhc = carve(base, &at, n * h, sizeof(float));
    p->dcc = carve(base, &at, n * h, sizeof(float));
    return at;
}

static void plan_init(rnn_plan *p, dl_backend *be, const dl_rnn *r)
{
    *p = (rnn_plan){ .r = r, .be = be, .g = r->cell == DL_RNN_LSTM ? 4 : 3, .h = r->hidden,
                     .cap = r->n * r->t };
    p->gh = p->g * p->h;
    p->in_max = r->in > p->h * r->dirs ? r->in : p->h * r->dirs;
}

/* Floats a layer-direction's rows take in the reserve. */
static int64_t rows_floats(const rnn_plan *p)
{
    return p->cap * (p->gh + 2 * p->h);
}

static rnn_rows rows_of(const rnn_plan *p, int l, int d)
{
    float *b = (float *)p->r->reserve + (int64_t)(l * p->r->dirs + d) * rows_floats(p);
    return (rnn_rows){ .gates = b, .aux = b + p->cap * p->gh, .h = b + p->cap * (p->gh + p->h) };
}

/* The width of layer l's inputs. */
static int64_t layer_in(const rnn_plan *p, int l)
{
    return l == 0 ? p->r->in : p->h * p->r->dirs;
}

/* Layer-direction (l, d)'s parameters: after those of the layers below
 * and of l's directions before d, as PyTorch orders them. */
static rnn_params params_of(const rnn_plan *p, int l, int d)
{
    const dl_rnn *r = p->r;
    int64_t gh = p->gh, h = p->h, at = 0;
    for (int k = 0; k <= l; k++)
        for (int e = 0; e < (k < l ? r->dirs : d); e++)
            at += gh * (layer_in(p, k) + h) + (r->bias ? 2 * gh : 0);
    int64_t in = layer_in(p, l), b = at + gh * (in + h);
    rnn_params q = { .in = in, .wih = r->w + at, .whh = r->w + at + gh * in };
    if (r->bias) {
        q.bih = r->w + b;
        q.bhh = q.bih + gh;
    }
    if (r->dw) {
        q.dwih = r->dw + at;
        q.dwhh = q.dwih + gh * in;
        q.dbih = r->bias ? r->dw + b : NULL;
        q.dbhh = r->bias ? q.dbih + gh : NULL;
    }
    return q;
}

/* The rows of this call: a step's rows are its running samples in batch
 * order (sample i runs steps 0 .. len[i] - 1). */
static void plan_rows(rnn_plan *p)
{
    const dl_rnn *r = p->r;
    int64_t n = r->n;
    p->steps = 0;
    for (int64_t i = 0; i < n; i++) {
        p->len[i] = r->len ? r->len[i] : (int32_t)r->t;
        p->steps = p->len[i] > p->steps ? p->len[i] : p->steps;
    }
    int32_t at = 0;
    for (int64_t s = 0; s < p->steps; s++) {
        p->off[s] = at;
        for (int64_t i = 0; i < n; i++) {
            if (s < p->len[i]) {
                p->smp[at] = (int32_t)i;
                p->row[s * n + i] = at++;
            } else {
                p->row[s * n + i] = -1;
            }
        }
    }
    p->off[p->steps] = at;
    p->rows = at;
}

/* The step at which direction d reaches position pos of sample i (and
 * back: the map is its own inverse). */
static int64_t step_at(const rnn_plan *p, int d, int64_t i, int64_t pos)
{
    return d == 0 ? pos : p->len[i] - 1 - pos;
}

/* The row of sample i at step s (of any direction: they share rows). */
static int64_t row_at(const rnn_plan *p, int64_t s, int64_t i)
{
    return p->row[s * p->r->n + i];
}

/* ---- GEMMs -------------------------------------------------------------- */

/* C (m, n) = A (m, k) B (n, k)^T (+ bias[j]; NULL: none). rows: each row
 * of C by the same operations whatever m: the backend's row-exact GEMM,
 * else a row at a time. */
static dl_status gemm_nt(const rnn_plan *p, bool rows, int64_t m, int64_t n, int64_t k,
                         const float *a, const float *b, const float *bias, float *c,
                         dl_err *err)
{
    const dl_backend_ops *ops = p->be->ops;
    dl_status st = DL_ERR_UNAVAILABLE;
    if (rows && ops->gemm_bias_act_rows)
        st = ops->gemm_bias_act_rows(p->be, m, n, k, a, b, bias, NULL, c, err);
    else if (!rows && ops->gemm_bias_act)
        st = ops->gemm_bias_act(p->be, m, n, k, a, b, bias, NULL, c, err);
    if (st != DL_ERR_UNAVAILABLE)
        return st;
    if (err)
        *err = (dl_err){0};
    int64_t step = rows ? 1 : m;
    st = DL_OK;
    for (int64_t i = 0; i < m && st == DL_OK; i += step) {
        st = ops->gemm(p->be, false, true, step, n, k, 1.0f, a + i * k, b, 0.0f, c + i * n, err);
        if (st == DL_OK && bias)
            ops->bias_add(p->be, c + i * n, bias, step, n);
    }
    return st;
}

/* A step's GEMMs, on the calling thread: C (m, n) = A (m, k) B^T, B
 * (n, k) (nt), or A B, B (k, n). They are small (a group's samples by a
 * gate row) and run inside the recurrence's tasks, or alone for a batch
 * below RNN_GROUP, where waking a team of threads at every step cost 100
 * times the multiply on a loaded machine (kjv-punct at batch 1 on 2
 * threads: 52 samples/s, 7500 on the calling thread). The thin kernel
 * and OpenBLAS (single-threaded in the backend) both give each row the
 * same bits whatever the other rows: batch-invariant as they are. */
static void step_gemm(const rnn_plan *p, bool nt, int64_t m, int64_t n, int64_t k,
                      const float *a, const float *b, float *c)
{
    if (nt && p->be->gemm_thin) {
        dl_gemm_thin(m, n, k, a, k, b, k, c, n);
        return;
    }
    int64_t rows = p->r->invariant ? 1 : m;
    for (int64_t i = 0; i < m; i += rows)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, nt ? CblasTrans : CblasNoTrans,
                    (blasint)rows, (blasint)n, (blasint)k, 1.0f, a + i * k, (blasint)k, b,
                    (blasint)(nt ? k : n), 0.0f, c + i * n, (blasint)n);
}

/* ---- forward ------------------------------------------------------------- */

/* The inputs of layer l, direction d, by row: from x (layer 0) or from
 * layer l - 1's states, its directions side by side. */
static void gather_inputs(const rnn_plan *p, int l, int d, const float *x, int64_t in)
{
    const dl_rnn *r = p->r;
    int64_t h = p->h;
    for (int64_t s = 0; s < p->steps; s++)
        for (int64_t k = p->off[s]; k < p->off[s + 1]; k++) {
            int64_t i = p->smp[k], pos = step_at(p, d, i, s);
            float *dst = p->x + k * in;
            if (l == 0) {
                memcpy(dst, x + (i * r->t + pos) * in, (size_t)in * sizeof(float));
                continue;
            }
            for (int e = 0; e < r->dirs; e++) {
                const float *src = rows_of(p, l - 1, e).h + row_at(p, step_at(p, e, i, pos), i) * h;
                memcpy(dst + e * h, src, (size_t)h * sizeof(float));
            }
        }
}

/* The biases the input projection adds: all of LSTM's; GRU's but b_hn,
 * which r multiplies. */
static void bias_sum(const rnn_plan *p, const rnn_params *w)
{
    int64_t gru_n = p->r->cell == DL_RNN_GRU ? 2 * p->h : p->gh;
    for (int64_t j = 0; j < p->gh; j++)
        p->bsum[j] = w->bih[j] + (j < gru_n ? w->bhh[j] : 0.0f);
}

/* A layer-direction's recurrence, split by samples: a group's rows at
 * each step lie together (rows follow the batch's order within a step),
 * so each group runs all its steps alone, a small GEMM and its cells a
 * step, with no wait on the others between steps. A group's scratch
 * rows (q, hg) are those of its samples: groups at different steps never
 * share them. */
typedef struct recur_job {
    const rnn_plan   *p;
    const rnn_params *w;
    rnn_rows          rw;
    const float      *dys;     /* backward: gradients of the states, [cap, h] */
    const float      *h0, *c0; /* forward: the initial states [n, h] (NULL: zeros) */
} recur_job;

/* Samples a group has at least: smaller batches run on one thread. */
#define RNN_GROUP 8

/* The rows of step s that samples [i0, i1) own: how many, from *first. */
static int64_t group_rows(const rnn_plan *p, int64_t s, int64_t i0, int64_t i1,
                          int64_t *first)
{
    int64_t c = 0;
    *first = 0;
    for (int64_t i = i0; i < i1; i++)
        if (p->len[i] > s && c++ == 0)
            *first = row_at(p, s, i);
    return c;
}

/* The state row that row k of step s continues (-1: the zero state). */
static int64_t prev_row(const rnn_plan *p, int64_t s, int64_t k)
{
    return s == 0 ? -1 : row_at(p, s - 1, p->smp[k]);
}

CPU_WIDE static void lstm_row(int64_t h, float *restrict g, const float *restrict q,
                              const float *restrict cp, float *restrict c, float *restrict hy)
{
    for (int64_t u = 0; u < h; u++) {
        float i = cpu_sigmoidf(g[u] + q[u]), f = cpu_sigmoidf(g[h + u] + q[h + u]);
        float gg = cpu_tanhf(g[2 * h + u] + q[2 * h + u]);
        float o = cpu_sigmoidf(g[3 * h + u] + q[3 * h + u]);
        float cc = f * cp[u] + i * gg;
        g[u] = i;
        g[h + u] = f;
        g[2 * h + u] = gg;
        g[3 * h + u] = o;
        c[u] = cc;
        hy[u] = o * cpu_tanhf(cc);
    }
}

CPU_WIDE static void gru_row(int64_t h, float *restrict g, const float *restrict q,
                             const float *restrict bhn, const float *restrict hp,
                             float *restrict hn, float *restrict hy)
{
    for (int64_t u = 0; u < h; u++) {
        float rr = cpu_sigmoidf(g[u] + q[u]), z = cpu_sigmoidf(g[h + u] + q[h + u]);
        float a = q[2 * h + u] + bhn[u];
        float nn = cpu_tanhf(g[2 * h + u] + rr * a);
        g[u] = rr;
        g[h + u] = z;
        g[2 * h + u] = nn;
        hn[u] = a;
        hy[u] = (1.0f - z) * nn + z * hp[u];
    }
}

/* The cells of m rows from row o of step s; q holds their W_hh h. */
static void cells_fwd(const recur_job *j, int64_t s, int64_t o, int64_t m, const float *q)
{
    const rnn_plan *p = j->p;
    rnn_rows rw = j->rw;
    int64_t h = p->h, gh = p->gh;
    const float *bhn = j->w->bhh ? j->w->bhh + 2 * h : p->zero;
    for (int64_t u = 0; u < m; u++) {
        int64_t k = o + u, pk = prev_row(p, s, k), i = p->smp[k];
        if (p->r->cell == DL_RNN_LSTM)
            lstm_row(h, rw.gates + k * gh, q + u * gh,
                     pk >= 0 ? rw.aux + pk * h : j->c0 ? j->c0 + i * h : p->zero,
                     rw.aux + k * h, rw.h + k * h);
        else
            gru_row(h, rw.gates + k * gh, q + u * gh, bhn,
                    pk >= 0 ? rw.h + pk * h : j->h0 ? j->h0 + i * h : p->zero,
                    rw.aux + k * h, rw.h + k * h);
    }
}

/* Step s of samples [i0, i1): their previous states (contiguous when none
 * of them ended at the last step, gathered otherwise) times W_hh, then
 * their cells. */
static void group_fwd(recur_job *j, int64_t s, int64_t i0, int64_t i1)
{
    const rnn_plan *p = j->p;
    int64_t h = p->h, gh = p->gh, o, po;
    int64_t m = group_rows(p, s, i0, i1, &o);
    float *q = p->q + i0 * gh, *hg = p->hg + i0 * h;
    if (m == 0)
        return;
    if (s == 0 && j->h0) {          /* every sample runs step 0: rows i0 on */
        step_gemm(p, true, m, gh, h, j->h0 + i0 * h, j->w->whh, q);
    } else if (s == 0) {
        memset(q, 0, (size_t)(m * gh) * sizeof(float));
    } else {
        const float *hprev = j->rw.h;
        if (group_rows(p, s - 1, i0, i1, &po) == m) {
            hprev += po * h;
        } else {
            for (int64_t u = 0; u < m; u++)
                memcpy(hg + u * h, j->rw.h + prev_row(p, s, o + u) * h,
                       (size_t)h * sizeof(float));
            hprev = hg;
        }
        step_gemm(p, true, m, gh, h, hprev, j->w->whh, q);
    }
    cells_fwd(j, s, o, m, q);
}

static void recur_fwd_task(void *ctx, int64_t i0, int64_t i1)
{
    recur_job *j = ctx;
    for (int64_t s = 0; s < j->p->steps; s++)
        group_fwd(j, s, i0, i1);
}

static dl_status layer_fwd(const rnn_plan *p, int l, int d, const float *x, dl_err *err)
{
    rnn_params w = params_of(p, l, d);
    rnn_rows rw = rows_of(p, l, d);
    gather_inputs(p, l, d, x, w.in);
    if (w.bih)
        bias_sum(p, &w);
    dl_status st = gemm_nt(p, p->r->invariant, p->rows, p->gh, w.in, p->x, w.wih,
                           w.bih ? p->bsum : NULL, rw.gates, err);
    if (st != DL_OK)
        return st;
    const dl_rnn *r = p->r;
    int64_t at = (l * r->dirs + d) * r->n * p->h;      /* hx's [layer, direction] */
    recur_job j = { .p = p, .w = &w, .rw = rw, .h0 = r->hx ? r->hx + at : NULL,
                    .c0 = r->cx ? r->cx + at : NULL };
    dl_parallel_for(r->n, RNN_GROUP, recur_fwd_task, &j);
    for (int64_t i = 0; i < r->n && (r->hy || r->cy); i++) {   /* the states at the end */
        int64_t k = row_at(p, p->len[i] - 1, i);
        if (r->hy)
            memcpy(r->hy + at + i * p->h, rw.h + k * p->h, (size_t)p->h * sizeof(float));
        if (r->cy && r->cell == DL_RNN_LSTM)
            memcpy(r->cy + at + i * p->h, rw.aux + k * p->h, (size_t)p->h * sizeof(float));
    }
    return DL_OK;
}

/* y from the top layer's states. */
static void write_output(const rnn_plan *p, float *y)
{
    const dl_rnn *r = p->r;
    int64_t h = p->h, wd = h * r->dirs;
    for (int64_t i = 0; i < r->n; i++)
        for (int d = 0; d < r->dirs; d++) {
            const float *hs = rows_of(p, r->layers - 1, d).h;
            if (!r->ret_seq) {
                memcpy(y + i * wd + d * h, hs + row_at(p, p->len[i] - 1, i) * h,
                       (size_t)h * sizeof(float));
                continue;
            }
            for (int64_t pos = 0; pos < r->t; pos++) {
                float *dst = y + (i * r->t + pos) * wd + d * h;
                if (pos < p->len[i])
                    memcpy(dst, hs + row_at(p, step_at(p, d, i, pos), i) * h,
                           (size_t)h * sizeof(float));
                else
                    memset(dst, 0, (size_t)h * sizeof(float));
            }
        }
}

/* ---- backward ------------------------------------------------------------ */

/* Row k's cell backward: dh = dys[k] + the carried gradient; gate
 * gradients before activation into da (and dah), the carry of c. */
CPU_WIDE static void lstm_row_bwd(int64_t h, const float *restrict g, const float *restrict c,
                                  const float *restrict cp, const float *restrict dys,
                                  float *restrict dhc, float *restrict dcc, float *restrict da)
{
    for (int64_t u = 0; u < h; u++) {
        float i = g[u], f = g[h + u], gg = g[2 * h + u], o = g[3 * h + u];
        float tc = cpu_tanhf(c[u]), dh = dys[u] + dhc[u];
        float dc = dh * o * (1.0f - tc * tc) + dcc[u];
        da[u] = dc * gg * i * (1.0f - i);
        da[h + u] = dc * cp[u] * f * (1.0f - f);
        da[2 * h + u] = dc * i * (1.0f - gg * gg);
        da[3 * h + u] = dh * tc * o * (1.0f - o);
        dcc[u] = dc * f;
    }
}

CPU_WIDE static void gru_row_bwd(int64_t h, const float *restrict g, const float *restrict hn,
                                 const float *restrict hp, const float *restrict dys,
                                 float *restrict dhc, float *restrict da, float *restrict dah)
{
    for (int64_t u = 0; u < h; u++) {
        float rr = g[u], z = g[h + u], nn = g[2 * h + u];
        float dh = dys[u] + dhc[u];
        float dan = dh * (1.0f - z) * (1.0f - nn * nn);
        float dar = dan * hn[u] * rr * (1.0f - rr);
        float daz = dh * (hp[u] - nn) * z * (1.0f - z);
        da[u] = dah[u] = dar;
        da[h + u] = dah[h + u] = daz;
        da[2 * h + u] = dan;
        dah[2 * h + u] = dan * rr;
        dhc[u] = dh * z;        /* the direct path; W_hh's adds to it */
    }
}

/* The cells' backward of m rows from row o of step s. */
static void cells_bwd(const recur_job *j, int64_t s, int64_t o, int64_t m)
{
    const rnn_plan *p = j->p;
    rnn_rows rw = j->rw;
    int64_t h = p->h, gh = p->gh;
    for (int64_t u = 0; u < m; u++) {
        int64_t k = o + u, i = p->smp[k], pk = prev_row(p, s, k);
        if (p->r->cell == DL_RNN_LSTM)
            lstm_row_bwd(h, rw.gates + k * gh, rw.aux + k * h,
                         pk < 0 ? p->zero : rw.aux + pk * h, j->dys + k * h, p->dhc + i * h,
                         p->dcc + i * h, p->da + k * gh);
        else
            gru_row_bwd(h, rw.gates + k * gh, rw.aux + k * h, pk < 0 ? p->zero : rw.h + pk * h,
                        j->dys + k * h, p->dhc + i * h, p->da + k * gh, p->dah + k * gh);
    }
}

/* Step s of samples [i0, i1) backward: their cells, then the gradient
 * carried to their previous states, dah W_hh (GRU: added to z dh). */
static void group_bwd(recur_job *j, int64_t s, int64_t i0, int64_t i1)
{
    const rnn_plan *p = j->p;
    int64_t h = p->h, gh = p->gh, o;
    int64_t m = group_rows(p, s, i0, i1, &o);
    float *hg = p->hg + i0 * h;
    if (m == 0)
        return;
    cells_bwd(j, s, o, m);
    if (s == 0)
        return;
    /* hg (m, h) = dah (m, gh) W_hh (gh, h) */
    step_gemm(p, false, m, h, gh, p->dah + o * gh, j->w->whh, hg);
    bool add = p->r->cell == DL_RNN_GRU;
    for (int64_t u = 0; u < m; u++) {
        float *restrict dst = p->dhc + p->smp[o + u] * h;
        const float *restrict src = hg + u * h;
        for (int64_t c = 0; c < h; c++)
            dst[c] = add ? dst[c] + src[c] : src[c];
    }
}

static void recur_bwd_task(void *ctx, int64_t i0, int64_t i1)
{
    recur_job *j = ctx;
    for (int64_t s = j->p->steps - 1; s >= 0; s--)
        group_bwd(j, s, i0, i1);
}

/* BPTT through a layer-direction: da (and dah) for every row. */
static void bptt(const rnn_plan *p, const rnn_params *w, rnn_rows rw, const float *dys)
{
    int64_t n = p->r->n, h = p->h;
    memset(p->dhc, 0, (size_t)(n * h) * sizeof(float));
    memset(p->dcc, 0, (size_t)(n * h) * sizeof(float));
    recur_job j = { .p = p, .w = w, .rw = rw, .dys = dys };
    dl_parallel_for(n, RNN_GROUP, recur_bwd_task, &j);
}

/* hp: each row's previous state, for rows of steps 1 on (step 0's is
 * zero and adds nothing to dW_hh). */
static void gather_prev(const rnn_plan *p, rnn_rows rw)
{
    int64_t h = p->h;
    for (int64_t s = 1; s < p->steps; s++)
        for (int64_t k = p->off[s]; k < p->off[s + 1]; k++)
            memcpy(p->hp + k * h, rw.h + row_at(p, s - 1, p->smp[k]) * h,
                   (size_t)h * sizeof(float));
}

/* Adds the rows of dX (in p->x) to where layer l's inputs came from: dx
 * for layer 0, the gradients of layer l - 1's states otherwise. */
static void scatter_inputs(const rnn_plan *p, int l, int d, float *dx, float *below, int64_t in)
{
    const dl_rnn *r = p->r;
    int64_t h = p->h;
    for (int64_t s = 0; s < p->steps; s++)
        for (int64_t k = p->off[s]; k < p->off[s + 1]; k++) {
            int64_t i = p->smp[k], pos = step_at(p, d, i, s);
            const float *src = p->x + k * in;
            if (l == 0) {
                float *dst = dx + (i * r->t + pos) * in;
                for (int64_t c = 0; c < in; c++)
                    dst[c] += src[c];
                continue;
            }
            for (int e = 0; e < r->dirs; e++) {
                float *dst = below + (e * p->cap + row_at(p, step_at(p, e, i, pos), i)) * h;
                for (int64_t c = 0; c < h; c++)
                    dst[c] += src[e * h + c];
            }
        }
}

/* A layer-direction's backward: BPTT, then the weights' gradients over
 * all rows at once, then the inputs'. */
static dl_status layer_bwd(const rnn_plan *p, int l, int d, const float *x, float *dx,
                           float *below, const float *dys, dl_err *err)
{
    const dl_backend_ops *ops = p->be->ops;
    rnn_params w = params_of(p, l, d);
    rnn_rows rw = rows_of(p, l, d);
    int64_t rows = p->rows, gh = p->gh, h = p->h, first = p->off[1] - p->off[0];
    bptt(p, &w, rw, dys);
    gather_inputs(p, l, d, x, w.in);
    gather_prev(p, rw);
    /* dW_ih (gh, in) += da^T x; dW_hh (gh, h) += dah^T hp over steps 1 on */
    dl_status st = ops->gemm(p->be, true, false, gh, w.in, rows, 1.0f, p->da, p->x, 1.0f,
                             w.dwih, err);
    if (st == DL_OK && rows > first)
        st = ops->gemm(p->be, true, false, gh, h, rows - first, 1.0f, p->dah + first * gh,
                       p->hp + first * h, 1.0f, w.dwhh, err);
    if (st == DL_OK && w.dbih) {
        ops->bias_grad(p->be, w.dbih, p->da, rows, gh);
        ops->bias_grad(p->be, w.dbhh, p->dah, rows, gh);
    }
    if (st != DL_OK || (l == 0 && !dx))
        return st;
    /* dx rows (rows, in) = da W_ih (gh, in) */
    st = ops->gemm(p->be, false, false, rows, w.in, gh, 1.0f, p->da, w.wih, 0.0f, p->x, err);
    if (st == DL_OK)
        scatter_inputs(p, l, d, dx, below, w.in);
    return st;
}

/* The gradients of the top layer's states from dy. */
static void output_grads(const rnn_plan *p, const float *dy, float *dys)
{
    const dl_rnn *r = p->r;
    int64_t h = p->h, wd = h * r->dirs;
    memset(dys, 0, (size_t)(r->dirs * p->cap * h) * sizeof(float));
    for (int64_t i = 0; i < r->n; i++)
        for (int d = 0; d < r->dirs; d++) {
            float *base = dys + d * p->cap * h;
            if (!r->ret_seq) {
                memcpy(base + row_at(p, p->len[i] - 1, i) * h, dy + i * wd + d * h,
                       (size_t)h * sizeof(float));
                continue;
            }
            for (int64_t pos = 0; pos < p->len[i]; pos++)
                memcpy(base + row_at(p, step_at(p, d, i, pos), i) * h,
                       dy + (i * r->t + pos) * wd + d * h, (size_t)h * sizeof(float));
        }
}

/* ---- the ops --------------------------------------------------------------- */

/* The geometry; with lengths, them too. */
static dl_status check(const dl_rnn *r, bool lengths, dl_err *err)
{
    if (r->n < 0 || r->t < 1 || r->in < 1 || r->hidden < 1 || r->layers < 1 ||
        (r->dirs != 1 && r->dirs != 2) || r->n * r->t > INT32_MAX / 2)
        return dl_err_set(err, DL_ERR_INVALID, "rnn of %lld x %lld steps, %lld -> %lld, %d "
                          "layers, %d directions: out of range", (long long)r->n,
                          (long long)r->t, (long long)r->in, (long long)r->hidden, r->layers,
                          r->dirs);
    for (int64_t i = 0; lengths && r->len && i < r->n; i++)
        if (r->len[i] < 1 || r->len[i] > r->t)
            return dl_err_set(err, DL_ERR_INVALID, "rnn: sample %lld has length %d, not in "
                              "[1, %lld]", (long long)i, (int)r->len[i], (long long)r->t);
    return DL_OK;
}

dl_status cpu_rnn_size(dl_backend *be, const dl_rnn *r, size_t *reserve, size_t *work,
                       dl_err *err)
{
    rnn_plan p;
    dl_status st = check(r, false, err);
    if (st != DL_OK)
        return st;
    plan_init(&p, be, r);
    *reserve = (size_t)(r->layers * r->dirs * rows_floats(&p)) * sizeof(float);
    *work = layout(&p, NULL);
    return DL_OK;
}

/* A pass's plan over r's work buffer, its rows placed (after the checks;
 * nothing more for an empty batch). */
static dl_status plan_open(rnn_plan *p, dl_backend *be, const dl_rnn *r, dl_err *err)
{
    dl_status st = check(r, true, err);
    if (st != DL_OK || r->n == 0)
        return st;
    plan_init(p, be, r);
    layout(p, r->work);
    plan_rows(p);
    memset(p->zero, 0, (size_t)p->h * sizeof(float));
    return DL_OK;
}

dl_status cpu_rnn_fwd(dl_backend *be, const dl_rnn *r, const float *x, float *y, dl_err *err)
{
    rnn_plan p;
    dl_status st = plan_open(&p, be, r, err);
    if (st != DL_OK || r->n == 0)
        return st;
    for (int l = 0; l < r->layers && st == DL_OK; l++)
        for (int d = 0; d < r->dirs && st == DL_OK; d++)
            st = layer_fwd(&p, l, d, x, err);
    if (st == DL_OK)
        write_output(&p, y);
    return st;
}

dl_status cpu_rnn_bwd(dl_backend *be, const dl_rnn *r, const float *x, const float *y,
                      const float *dy, float *dx, dl_err *err)
{
    (void)y;
    rnn_plan p;
    dl_status st = plan_open(&p, be, r, err);
    if (st != DL_OK || r->n == 0)
        return st;
    if (dx)
        memset(dx, 0, (size_t)(r->n * r->t * r->in) * sizeof(float));
    int cur = 0;
    output_grads(&p, dy, p.dy[cur]);
    for (int l = r->layers - 1; l >= 0 && st == DL_OK; l--) {
        float *below = p.dy[cur ^ 1];
        if (l > 0)
            memset(below, 0, (size_t)(r->dirs * p.cap * p.h) * sizeof(float));
        for (int d = 0; d < r->dirs && st == DL_OK; d++)
            st = layer_bwd(&p, l, d, x, dx, below, p.dy[cur] + d * p.cap * p.h, err);
        cur ^= 1;
    }
    return st;
}
