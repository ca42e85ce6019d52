/* test_gpu_ops.c: every op of the backend ops table on fresh random inputs,
 * run on the CPU backend (the reference) and on the CUDA backend; prints
 * one line per check, "op  maxrel  PASS|FAIL", and exits 1 if any failed.
 * Exits 77 (meson's skip) printing "SKIP: no CUDA device" when there is no
 * GPU. No Criterion: the GPU machine has none.
 *
 * maxrel is the normwise relative error max|gpu - cpu| / max|cpu| (an
 * elementwise ratio would blow up on values that cancel to ~0). Limits:
 * 1e-5 in fp32; 3e-3 for GEMMs with TF32 on. Integer outputs (argmax,
 * counts) must match exactly. DLSERVE_TEST_SEED=N repeats a run. */
#define _POSIX_C_SOURCE 200809L
#include "tensor/dl_tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOL      1e-5
#define TOL_TF32 3e-3

static dl_backend *cpu, *gpu, *tf32;
static dl_rng rng;
static int checks, failures;

/* ---- reporting ---------------------------------------------------------- */

static void report(const char *op, double rel, double tol)
{
    bool ok = rel <= tol;   /* NaN fails */
    printf("%-24s %10.3e  %s\n", op, rel, ok ? "PASS" : "FAIL");
    fflush(stdout);
    checks++;
    failures += !ok;
}

static double maxrel(const float *got, const float *want, int64_t n)
{
    double diff = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (isnan(d))
            return INFINITY;
        diff = d > diff ? d : diff;
        double w = fabs((double)want[i]);
        scale = w > scale ? w : scale;
    }
    return diff == 0.0 ? 0.0 : diff / (scale > 1e-30 ? scale : 1e-30);
}

static double rel_scalar(double got, double want)
{
    double d = fabs(got - want);
    return d == 0.0 ? 0.0 : d / (fabs(want) > 1e-30 ? fabs(want) : 1e-30);
}

/* ---- buffers on both backends ---------------------------------------------
 * A pair holds the same values on the CPU and the GPU (and TF32 GPU when
 * asked); every pair of a check is freed by drop_all. */

typedef struct pair {
    int64_t n;
    float  *host;      /* the values uploaded */
    void   *c, *g, *t;
} pair;

#define MAX_PAIRS 64
static pair pairs[MAX_PAIRS];
static int npairs;

static void *must_alloc(dl_backend *be, size_t bytes)
{
    void *p = NULL;
    dl_err err = {0};
    if (be->ops->alloc(be, bytes, &p, &err) != DL_OK) {
        fprintf(stderr, "alloc of %zu bytes on %s: %s\n", bytes, be->ops->name, err.msg);
        exit(1);
    }
    return p;
}

static pair *mk_bytes(int64_t n, size_t elem, const void *values)
{
    if (npairs == MAX_PAIRS) {
        fprintf(stderr, "too many buffers in one check\n");
        exit(1);
    }
    pair *p = &pairs[npairs++];
    size_t bytes = (size_t)(n > 0 ? n : 1) * elem;
    p->n = n;
    p->host = malloc(bytes);
    if (!p->host)
        exit(1);
    memcpy(p->host, values, (size_t)n * elem);
    p->c = must_alloc(cpu, bytes);
    p->g = must_alloc(gpu, bytes);
    p->t = must_alloc(tf32, bytes);
    cpu->ops->upload(cpu, p->c, values, (size_t)n * elem);
    gpu->ops->upload(gpu, p->g, values, (size_t)n * elem);
    tf32->ops->upload(tf32, p->t, values, (size_t)n * elem);
    return p;
}

/* Uniform values in [lo, hi). */
static pair *mk(int64_t n, float lo, float hi)
{
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!v)
        exit(1);
    for (int64_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * dl_rng_uniform(&rng);
    pair *p = mk_bytes(n, sizeof(float), v);
    free(v);
    return p;
}

/* Random integers in [0, k) stored as floats (ids) or as int32. */
static pair *mk_ids(int64_t n, int64_t k, bool as_int)
{
    int32_t *iv = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    float *fv = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!iv || !fv)
        exit(1);
    for (int64_t i = 0; i < n; i++) {
        iv[i] = (int32_t)dl_rng_below(&rng, (uint64_t)k);
        fv[i] = (float)iv[i];
    }
    pair *p = as_int ? mk_bytes(n, sizeof(int32_t), iv) : mk_bytes(n, sizeof(float), fv);
    free(iv);
    free(fv);
    return p;
}

static float *fetch(dl_backend *be, const void *ptr, int64_t n)
{
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!h)
        exit(1);
    be->ops->download(be, h, ptr, (size_t)n * sizeof(float));
    return h;
}

/* GPU (or TF32 GPU) result against the CPU's. */
static void compare(const char *op, const pair *p, bool use_tf32, double tol)
{
    float *want = fetch(cpu, p->c, p->n);
    float *got = use_tf32 ? fetch(tf32, p->t, p->n) : fetch(gpu, p->g, p->n);
    report(op, maxrel(got, want, p->n), tol);
    free(want);
    free(got);
}

static void compare_int(const char *op, const pair *p)
{
    int32_t *want = (int32_t *)fetch(cpu, p->c, p->n);
    int32_t *got = (int32_t *)fetch(gpu, p->g, p->n);
    int64_t bad = 0;
    for (int64_t i = 0; i < p->n; i++)
        bad += want[i] != got[i];
    report(op, bad ? 1.0 : 0.0, 0.0);
    free(want);
    free(got);
}

static void drop_all(void)
{
    for (int i = 0; i < npairs; i++) {
        cpu->ops->release(cpu, pairs[i].c);
        gpu->ops->release(gpu, pairs[i].g);
        tf32->ops->release(tf32, pairs[i].t);
        free(pairs[i].host);
    }
    npairs = 0;
}

/* Runs the same statement on each backend with B/P bound to it. */
#define ON_BOTH(stmt)                                                       \
    do {                                                                    \
        dl_backend *B = cpu;                                                \
        int which_ = 0;                                                     \
        (void)which_;                                                       \
        { stmt; }                                                           \
        B = gpu;                                                            \
        which_ = 1;                                                         \
        { stmt; }                                                           \
    } while (0)
#define P(p) (which_ ? (p)->g : (p)->c)
#define F(p) ((float *)P(p))

/* ---- the checks --------------------------------------------------------------- */

static void check_memory(void)
{
    /* Staged (small) and direct (large) uploads, and downloads: exact. */
    int64_t sizes[2] = { 100003, 3 << 20 };
    for (int s = 0; s < 2; s++) {
        pair *p = mk(sizes[s], -1, 1);
        float *got = fetch(gpu, p->g, p->n);
        report(s ? "upload_download_large" : "upload_download", maxrel(got, p->host, p->n), 0.0);
        free(got);
    }
    drop_all();

    pair *a = mk(100003, -1, 1), *b = mk(100003, -1, 1);
    ON_BOTH(B->ops->fill(B, F(a), a->n, 0.0f); B->ops->fill(B, F(b), b->n, 3.5f));
    compare("fill_zero", a, false, 0.0);
    compare("fill", b, false, 0.0);
    drop_all();

    a = mk(100003, -1, 1);
    b = mk(100003, -1, 1);
    ON_BOTH(B->ops->copy(B, F(b), F(a), a->n));
    compare("copy", b, false, 0.0);
    /* Overlapping ranges behave as memmove. */
    ON_BOTH(B->ops->copy(B, F(a) + 17, F(a), a->n - 17));
    compare("copy_overlap", a, false, 0.0);
    drop_all();
}

static void check_gemm(void)
{
    static const int64_t shapes[][3] = { { 129, 67, 300 }, { 512, 384, 1024 }, { 1, 10, 784 },
                                         { 64, 256, 1 } };
    char name[64];
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            float alpha = 0.75f, beta = s % 2 ? 0.0f : 0.5f;
            pair *a = mk(m * k, -1, 1), *b = mk(k * n, -1, 1), *c = mk(m * n, -1, 1);
            dl_err err = {0};
            bool ok = true;
            ON_BOTH(ok &= B->ops->gemm(B, ta, tb, m, n, k, alpha, P(a), P(b), beta, F(c), &err)
                          == DL_OK);
            ok &= tf32->ops->gemm(tf32, ta, tb, m, n, k, alpha, a->t, b->t, beta, c->t, &err)
                  == DL_OK;
            if (!ok)
                fprintf(stderr, "gemm: %s\n", err.msg);
            snprintf(name, sizeof(name), "gemm_%s%s_%lldx%lldx%lld", ta ? "T" : "N",
                     tb ? "T" : "N", (long long)m, (long long)n, (long long)k);
            compare(name, c, false, ok ? TOL : -1);
            snprintf(name, sizeof(name), "gemm_tf32_%s%s_%lldx%lldx%lld", ta ? "T" : "N",
                     tb ? "T" : "N", (long long)m, (long long)n, (long long)k);
            compare(name, c, true, ok ? TOL_TF32 : -1);
            drop_all();
        }
    /* k = 0: C = beta C */
    pair *c = mk(40 * 30, -1, 1);
    dl_err err = {0};
    ON_BOTH(B->ops->gemm(B, false, false, 40, 30, 0, 1.0f, P(c), P(c), 0.25f, F(c), &err));
    compare("gemm_k0", c, false, TOL);
    drop_all();
}

/* The batch-invariant dense forward: the GPU's answers the CPU's, and a
 * row of a batch of 37 has the bits of that row alone. */
static void check_gemm_rows(void)
{
    int64_t m = 37, n = 129, k = 784;
    dl_act relu = DL_ACT_RELU;
    pair *a = mk(m * k, -1, 1), *b = mk(n * k, -1, 1), *bias = mk(n, -1, 1);
    pair *c = mk(m * n, -1, 1), *one = mk(n, -1, 1);
    dl_err err = {0};
    bool ok = true;
    ON_BOTH(ok &= B->ops->gemm_bias_act_rows(B, m, n, k, P(a), P(b), P(bias), &relu, F(c),
                                             &err) == DL_OK);
    if (!ok)
        fprintf(stderr, "gemm_bias_act_rows: %s\n", err.msg);
    compare("gemm_bias_act_rows", c, false, ok ? TOL : -1);
    ok = gpu->ops->gemm_bias_act_rows(gpu, 1, n, k, (const float *)a->g + 5 * k, b->g, bias->g,
                                      &relu, one->g, &err) == DL_OK;
    float *all = fetch(gpu, c->g, m * n), *alone = fetch(gpu, one->g, n);
    report("gemm_bias_act_rows_row_alone",
           ok && memcmp(all + 5 * n, alone, (size_t)n * sizeof(float)) == 0 ? 0.0 : 1.0, 0.0);
    free(all);
    free(alone);
    drop_all();
}

static void check_bias(void)
{
    int64_t rows = 1000, cols = 37;
    pair *y = mk(rows * cols, -1, 1), *b = mk(cols, -1, 1), *db = mk(cols, -1, 1);
    ON_BOTH(B->ops->bias_add(B, F(y), F(b), rows, cols);
            B->ops->bias_grad(B, F(db), F(y), rows, cols));
    compare("bias_add", y, false, TOL);
    compare("bias_grad", db, false, TOL);
    drop_all();

    static const int64_t g[][3] = { { 16, 12, 49 }, { 300, 40, 1 }, { 64, 32, 576 } };
    for (int i = 0; i < 3; i++) {
        int64_t n = g[i][0], c = g[i][1], hw = g[i][2];
        y = mk(n * c * hw, -1, 1);
        b = mk(c, -1, 1);
        db = mk(c, -1, 1);
        ON_BOTH(B->ops->bias_add_nchw(B, F(y), F(b), n, c, hw);
                B->ops->bias_grad_nchw(B, F(db), F(y), n, c, hw));
        compare(i == 1 ? "bias_add_nchw_hw1" : "bias_add_nchw", y, false, TOL);
        compare(i == 1 ? "bias_grad_nchw_hw1" : "bias_grad_nchw", db, false, TOL);
        drop_all();
    }
}

static void check_act(void)
{
    static const char *names[3][2] = { { "relu_fwd", "relu_bwd" }, { "tanh_fwd", "tanh_bwd" },
                                       { "sigmoid_fwd", "sigmoid_bwd" } };
    dl_act acts[3] = { DL_ACT_RELU, DL_ACT_TANH, DL_ACT_SIGMOID };
    for (int a = 0; a < 3; a++) {
        int64_t n = 100003;
        pair *x = mk(n, -4, 4), *y = mk(n, 0, 1), *dy = mk(n, -1, 1), *dx = mk(n, 0, 1);
        ON_BOTH(B->ops->act_fwd(B, acts[a], F(x), F(y), n));
        compare(names[a][0], y, false, TOL);
        /* The backward pass reads the forward output: give both the CPU's. */
        float *yc = fetch(cpu, y->c, n);
        pair *yy = mk_bytes(n, sizeof(float), yc);
        free(yc);
        ON_BOTH(B->ops->act_bwd(B, acts[a], F(yy), F(dy), F(dx), n));
        compare(names[a][1], dx, false, TOL);
        drop_all();
    }
}

static void check_softmax(void)
{
    static const int64_t shapes[][2] = { { 300, 10 }, { 37, 1000 } };
    for (int s = 0; s < 2; s++) {
        int64_t r = shapes[s][0], c = shapes[s][1];
        pair *x = mk(r * c, -8, 8), *y = mk(r * c, 0, 1), *dy = mk(r * c, -1, 1),
             *dx = mk(r * c, 0, 1);
        ON_BOTH(B->ops->softmax_fwd(B, F(x), F(y), r, c));
        compare(s ? "softmax_fwd_wide" : "softmax_fwd", y, false, TOL);
        float *yc = fetch(cpu, y->c, r * c);
        pair *yy = mk_bytes(r * c, sizeof(float), yc);
        free(yc);
        ON_BOTH(B->ops->softmax_bwd(B, F(yy), F(dy), F(dx), r, c));
        compare(s ? "softmax_bwd_wide" : "softmax_bwd", dx, false, TOL);
        drop_all();
    }
}

static dl_conv_geom geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh,
                             int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw)
{
    dl_conv_geom g = { .n = n, .c = c, .h = h, .w = w, .oc = oc, .kh = kh, .kw = kw,
                       .sh = sh, .sw = sw, .ph = ph, .pw = pw };
    dl_err err = {0};
    if (dl_conv_geom_finish(&g, &err) != DL_OK) {
        fprintf(stderr, "geometry: %s\n", err.msg);
        exit(1);
    }
    return g;
}

static void check_conv(void)
{
    dl_conv_geom gs[3] = { geometry(3, 4, 13, 11, 6, 3, 5, 2, 1, 1, 2),
                           geometry(5, 1, 28, 28, 32, 5, 5, 1, 1, 0, 0),
                           geometry(2, 3, 9, 9, 4, 3, 3, 3, 2, 0, 1) };
    char name[64];
    for (int i = 0; i < 3; i++) {
        dl_conv_geom *g = &gs[i];
        int64_t nin = g->n * g->c * g->h * g->w, ncol = g->c * g->kh * g->kw * g->n * g->oh * g->ow;
        pair *x = mk(nin, -1, 1), *cols = mk(ncol, -1, 1), *dcols = mk(ncol, -1, 1),
             *dx = mk(nin, -1, 1);
        ON_BOTH(B->ops->im2col(B, g, F(x), F(cols)); B->ops->col2im(B, g, F(dcols), F(dx)));
        snprintf(name, sizeof(name), "im2col_%d", i);
        compare(name, cols, false, 0.0);
        snprintf(name, sizeof(name), "col2im_%d", i);
        compare(name, dx, false, TOL);
        drop_all();
    }
    pair *x = mk(7 * 5 * 33, -1, 1), *y = mk(7 * 5 * 33, -1, 1);
    ON_BOTH(B->ops->swap_outer(B, F(x), F(y), 7, 5, 33));
    compare("swap_outer", y, false, 0.0);
    drop_all();
}

static void check_pool(void)
{
    dl_conv_geom gs[3] = { geometry(4, 3, 28, 28, 3, 2, 2, 2, 2, 0, 0),
                           geometry(2, 5, 13, 11, 5, 3, 3, 2, 2, 1, 1),
                           geometry(3, 2, 10, 9, 2, 3, 2, 1, 2, 0, 0) };
    char name[64];
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++) {
            dl_conv_geom *g = &gs[i];
            dl_pool_kind kind = k ? DL_POOL_AVG : DL_POOL_MAX;
            int64_t nin = g->n * g->c * g->h * g->w, nout = g->n * g->c * g->oh * g->ow;
            pair *x = mk(nin, -1, 1), *y = mk(nout, -1, 1), *dy = mk(nout, -1, 1),
                 *dx = mk(nin, -1, 1), *am = mk_ids(nout, 1, true);
            ON_BOTH(B->ops->pool_fwd(B, kind, g, F(x), F(y), k ? NULL : (int32_t *)P(am));
                    B->ops->pool_bwd(B, kind, g, F(dy), k ? NULL : (int32_t *)P(am), F(dx)));
            snprintf(name, sizeof(name), "%s_fwd_%d", k ? "avgpool" : "maxpool", i);
            compare(name, y, false, TOL);
            if (!k) {
                snprintf(name, sizeof(name), "maxpool_argmax_%d", i);
                compare_int(name, am);
            }
            snprintf(name, sizeof(name), "%s_bwd_%d", k ? "avgpool" : "maxpool", i);
            compare(name, dx, false, TOL);
            drop_all();
        }
}

static void check_bn(void)
{
    static const int64_t shapes[][3] = { { 8, 6, 25 }, { 300, 40, 1 }, { 64, 32, 144 } };
    for (int s = 0; s < 3; s++) {
        int64_t n = shapes[s][0], c = shapes[s][1], hw = shapes[s][2], t = n * c * hw;
        /* An offset mean tests the two-pass variance. */
        pair *x = mk(t, 2, 4), *y = mk(t, 0, 1), *gamma = mk(c, 0.5f, 1.5f),
             *beta = mk(c, -1, 1), *sm = mk(c, 0, 1), *si = mk(c, 0, 1),
             *rm = mk(c, -1, 1), *rv = mk(c, 0.5f, 2), *dy = mk(t, -1, 1), *dx = mk(t, 0, 1),
             *dg = mk(c, -1, 1), *db = mk(c, -1, 1), *yi = mk(t, 0, 1);
        ON_BOTH(B->ops->bn_fwd_train(B, F(x), F(y), F(gamma), F(beta), F(sm), F(si), F(rm),
                                     F(rv), 0.1f, 1e-5f, n, c, hw));
        const char *sfx = s == 1 ? "_hw1" : s == 2 ? "_big" : "";
        char name[64];
        snprintf(name, sizeof(name), "bn_fwd_train%s", sfx);
        compare(name, y, false, TOL);
        snprintf(name, sizeof(name), "bn_save_mean%s", sfx);
        compare(name, sm, false, TOL);
        snprintf(name, sizeof(name), "bn_save_invstd%s", sfx);
        compare(name, si, false, TOL);
        snprintf(name, sizeof(name), "bn_running_mean%s", sfx);
        compare(name, rm, false, TOL);
        snprintf(name, sizeof(name), "bn_running_var%s", sfx);
        compare(name, rv, false, TOL);
        /* Backward from the CPU's saved statistics. */
        float *smc = fetch(cpu, sm->c, c), *sic = fetch(cpu, si->c, c);
        pair *sm2 = mk_bytes(c, sizeof(float), smc), *si2 = mk_bytes(c, sizeof(float), sic);
        free(smc);
        free(sic);
        ON_BOTH(B->ops->bn_bwd(B, F(x), F(dy), F(gamma), F(sm2), F(si2), F(dx), F(dg), F(db),
                               n, c, hw);
                B->ops->bn_fwd_infer(B, F(x), F(yi), F(gamma), F(beta), F(rm), F(rv), 1e-5f,
                                     n, c, hw));
        snprintf(name, sizeof(name), "bn_bwd_dx%s", sfx);
        compare(name, dx, false, TOL);
        snprintf(name, sizeof(name), "bn_bwd_dgamma%s", sfx);
        compare(name, dg, false, TOL);
        snprintf(name, sizeof(name), "bn_bwd_dbeta%s", sfx);
        compare(name, db, false, TOL);
        snprintf(name, sizeof(name), "bn_fwd_infer%s", sfx);
        compare(name, yi, false, TOL);
        drop_all();
    }
}

/* Masks differ from the CPU's by design: check the contract instead. */
static void check_dropout(void)
{
    int64_t n = 1 << 20;
    float p = 0.3f, keep = 1.0f / (1.0f - p);
    pair *x = mk(n, -1, 1), *y = mk(n, 0, 1), *mask = mk(n, 0, 1), *y2 = mk(n, 0, 1),
         *mask2 = mk(n, 0, 1), *mask3 = mk(n, 0, 1);
    gpu->ops->dropout_fwd(gpu, x->g, y->g, mask->g, n, p, 12345);
    gpu->ops->dropout_fwd(gpu, x->g, y2->g, mask2->g, n, p, 12345);
    gpu->ops->dropout_fwd(gpu, x->g, y2->g, mask3->g, n, p, 12346);
    float *hy = fetch(gpu, y->g, n), *hm = fetch(gpu, mask->g, n), *hm2 = fetch(gpu, mask2->g, n),
          *hm3 = fetch(gpu, mask3->g, n), *prod = malloc((size_t)n * sizeof(float));
    int64_t zeros = 0, odd = 0, same = 0, diff3 = 0;
    for (int64_t i = 0; i < n; i++) {
        zeros += hm[i] == 0.0f;
        odd += hm[i] != 0.0f && hm[i] != keep;
        same += hm[i] == hm2[i];
        diff3 += hm[i] != hm3[i];
        prod[i] = x->host[i] * hm[i];
    }
    report("dropout_y_is_x_mask", odd ? 1.0 : maxrel(hy, prod, n), 0.0);
    /* Binomial: 6 standard deviations. */
    double rate = (double)zeros / (double)n, sd = sqrt(p * (1.0 - p) / (double)n);
    report("dropout_rate", fabs(rate - p) / (6.0 * sd), 1.0);
    report("dropout_same_seed", same == n ? 0.0 : 1.0, 0.0);
    /* Another seed: about 2 p (1 - p) of the positions differ. */
    report("dropout_other_seed", fabs((double)diff3 / (double)n - 2.0 * p * (1.0 - p)) > 0.01,
           0.0);
    free(hy);
    free(hm);
    free(hm2);
    free(hm3);
    free(prod);
    drop_all();

    pair *a = mk(100003, -1, 1), *b = mk(100003, -1, 1), *o = mk(100003, 0, 1);
    ON_BOTH(B->ops->mul(B, F(a), F(b), F(o), a->n));
    compare("mul", o, false, 0.0);
    drop_all();
}

static void check_embed(void)
{
    int64_t vocab = 50, dim = 16, nids = 333;
    pair *ids = mk_ids(nids, vocab, false), *table = mk(vocab * dim, -1, 1),
         *y = mk(nids * dim, 0, 1), *dy = mk(nids * dim, -1, 1), *dt = mk(vocab * dim, -1, 1);
    dl_err err = {0};
    dl_status st[2];
    ON_BOTH(st[which_] = B->ops->embed_fwd(B, F(ids), F(table), F(y), nids, dim, vocab, &err);
            B->ops->embed_bwd(B, F(ids), F(dy), F(dt), nids, dim));
    report("embed_fwd_status", st[0] == DL_OK && st[1] == DL_OK ? 0.0 : 1.0, 0.0);
    compare("embed_fwd", y, false, 0.0);
    compare("embed_bwd", dt, false, TOL);
    drop_all();

    /* A bad id: both refuse it, naming it. */
    float bad[4] = { 1, 2, 7.5f, 3 };
    ids = mk_bytes(4, sizeof(float), bad);
    table = mk(vocab * dim, -1, 1);
    y = mk(4 * dim, 0, 1);
    dl_err e2[2] = { { 0 }, { 0 } };
    ON_BOTH(st[which_] = B->ops->embed_fwd(B, F(ids), F(table), F(y), 4, dim, vocab,
                                           &e2[which_]));
    bool same = st[0] == DL_ERR_INVALID && st[1] == DL_ERR_INVALID &&
                strstr(e2[1].msg, "7.5") && strstr(e2[1].msg, "position 2");
    if (!same)
        fprintf(stderr, "embed bad id: cpu '%s', gpu '%s'\n", e2[0].msg, e2[1].msg);
    report("embed_fwd_bad_id", same ? 0.0 : 1.0, 0.0);
    drop_all();
}

static void check_losses(void)
{
    int64_t rows = 257, cols = 10;
    pair *x = mk(rows * cols, -6, 6), *lab = mk_ids(rows, cols, true), *d = mk(rows * cols, 0, 1);
    double loss[2], loss2[2];
    int64_t ok[2], ok2[2];
    const int32_t *labels = (const int32_t *)lab->host;
    ON_BOTH(B->ops->xent(B, F(x), labels, rows, cols, F(d), 1.0f / (float)rows, &loss[which_],
                         &ok[which_]);
            B->ops->xent(B, F(x), labels, rows, cols, NULL, 1.0f, &loss2[which_], &ok2[which_]));
    report("xent_loss", rel_scalar(loss[1], loss[0]), TOL);
    report("xent_correct", ok[1] == ok[0] && ok2[1] == ok2[0] ? 0.0 : 1.0, 0.0);
    report("xent_loss_nograd", rel_scalar(loss2[1], loss2[0]), TOL);
    compare("xent_dlogits", d, false, TOL);
    drop_all();

    int64_t n = 1000;
    pair *pred = mk(n, -1, 1), *tgt = mk(n, -1, 1), *dp = mk(n, 0, 1);
    ON_BOTH(B->ops->mse(B, F(pred), tgt->host, n, F(dp), 0.01f, &loss[which_]));
    report("mse_loss", rel_scalar(loss[1], loss[0]), TOL);
    compare("mse_dpred", dp, false, TOL);
    drop_all();
}

static void check_optim(void)
{
    int64_t n = 100003;
    static const float mus[3] = { 0.0f, 0.9f, 0.9f };
    static const char *names[3][2] = { { "sgd_p", "" }, { "momentum_p", "momentum_v" },
                                       { "nesterov_p", "nesterov_v" } };
    for (int k = 0; k < 3; k++) {
        pair *p = mk(n, -1, 1), *g = mk(n, -1, 1), *v = mk(n, -1, 1);
        ON_BOTH(B->ops->sgd_step(B, F(p), F(g), mus[k] != 0.0f ? F(v) : NULL, n, 0.05f, mus[k],
                                 k == 2, 1e-4f));
        compare(names[k][0], p, false, TOL);
        if (k)
            compare(names[k][1], v, false, TOL);
        drop_all();
    }
    static const char *adam_names[2][3] = { { "adam_p", "adam_m", "adam_v" },
                                            { "adamw_p", "adamw_m", "adamw_v" } };
    for (int k = 0; k < 2; k++) {
        pair *p = mk(n, -1, 1), *g = mk(n, -1, 1), *m = mk(n, -0.1f, 0.1f), *v = mk(n, 0, 0.01f);
        ON_BOTH(B->ops->adam_step(B, F(p), F(g), F(m), F(v), n, 1e-3f, 0.9f, 0.999f, 1e-8f,
                                  k ? 0.01f : 1e-4f, k == 1, 3));
        compare(adam_names[k][0], p, false, TOL);
        compare(adam_names[k][1], m, false, TOL);
        compare(adam_names[k][2], v, false, TOL);
        drop_all();
    }

    pair *p = mk(n, -1, 1), *g = mk(n, -1, 1), *s = mk(n, 0, 0.1f);
    ON_BOTH(B->ops->adagrad_step(B, F(p), F(g), F(s), n, 0.01f, 1e-10f, 1e-4f));
    compare("adagrad_p", p, false, TOL);
    compare("adagrad_sum", s, false, TOL);
    drop_all();

    pair *x = mk(n, -1, 1), *y = mk(n, -1, 1);
    ON_BOTH(B->ops->axpy(B, -0.3f, F(x), F(y), n));
    compare("axpy", y, false, TOL);
    ON_BOTH(B->ops->scale(B, F(y), n, 0.7f));
    compare("scale", y, false, TOL);
    double sq[2];
    ON_BOTH(B->ops->sumsq(B, F(x), n, &sq[which_]));
    report("sumsq", rel_scalar(sq[1], sq[0]), TOL);
    drop_all();
}

/* ---- the graph layers' kernels ------------------------------------------------
 * The shapes of tests/unit/test_cuda_bodies.c, which checks the same
 * kernels' bodies on the host. A slot missing on either backend fails its
 * check instead of crashing. */

static bool have(bool both, const char *op)
{
    if (!both) {
        fprintf(stderr, "%s: not in the %s backend\n", op, gpu->ops->name);
        report(op, INFINITY, TOL);
    }
    return both;
}
#define HAVE(slot) have(cpu->ops->slot && gpu->ops->slot, #slot)

/* Row-major strides of an operand of shape xs (nx dimensions) read over
 * nd dimensions (right-aligned): 0 where it lacks the dimension or has
 * extent 1. */
static void bcast_strides(int nd, int nx, const int64_t *xs, int64_t *st)
{
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int xd = d - (nd - nx);
        st[d] = xd < 0 || xs[xd] == 1 ? 0 : s;
        if (xd >= 0)
            s *= xs[xd];
    }
}

static void check_binary(void)
{
    static const struct {
        const char *name;
        int na, nb;
        int64_t as[4], bs[4];
    } cases[3] = {
        { "bcast_b", 4, 2, { 16, 3, 1, 33 }, { 8, 33 } },
        { "bcast_a", 2, 4, { 8, 33 }, { 16, 3, 1, 33 } },
        { "same", 4, 4, { 16, 3, 8, 33 }, { 16, 3, 8, 33 } },
    };
    static const int64_t out[4] = { 16, 3, 8, 33 };
    static const char *const ops[4] = { "add", "sub", "mul", "div" };
    static const char *const posts[4] = { "", "_relu", "_tanh", "_sigmoid" };
    if (!HAVE(binary_fwd) || !HAVE(binary_bwd))
        return;
    char name[64];
    for (int op = 0; op < 4; op++)
        for (int c = 0; c < 3; c++) {
            dl_strided g = { .nd = 4 };
            memcpy(g.shape, out, sizeof(out));
            bcast_strides(4, cases[c].na, cases[c].as, g.st[0]);
            bcast_strides(4, cases[c].nb, cases[c].bs, g.st[1]);
            bcast_strides(4, 4, out, g.st[2]);
            int64_t na = dl_shape_numel(cases[c].na, cases[c].as);
            int64_t nb = dl_shape_numel(cases[c].nb, cases[c].bs), ny = dl_shape_numel(4, out);
            int post = (op * 3 + c) % 4;   /* none, relu, tanh, sigmoid in turn */
            dl_act act = (dl_act)(post ? post - 1 : 0);
            pair *a = mk(na, -1, 1), *b = mk(nb, 0.5f, 1.5f), *dy = mk(ny, -1, 1),
                 *y = mk(ny, 0, 1), *da = mk(na, 0, 1), *db = mk(nb, 0, 1);
            ON_BOTH(B->ops->binary_fwd(B, (dl_binop)op, &g, F(a), F(b), post ? &act : NULL, F(y));
                    B->ops->binary_bwd(B, (dl_binop)op, &g, 0, F(a), F(b), F(dy), F(da));
                    B->ops->binary_bwd(B, (dl_binop)op, &g, 1, F(a), F(b), F(dy), F(db)));
            snprintf(name, sizeof(name), "%s_fwd_%s%s", ops[op], cases[c].name, posts[post]);
            compare(name, y, false, TOL);
            snprintf(name, sizeof(name), "%s_bwd_da_%s", ops[op], cases[c].name);
            compare(name, da, false, TOL);
            snprintf(name, sizeof(name), "%s_bwd_db_%s", ops[op], cases[c].name);
            compare(name, db, false, TOL);
            drop_all();
        }
}

/* A transpose (2,3,4,5) -> (0,2,3,1), a slice with steps x[1:5:2, 0:10:3]
 * of a (6,10); reductions of a (2,3,4,5) over dims 1 and 3, over H and W
 * (global pooling), and over everything. */
static void check_strided(void)
{
    if (HAVE(copy_strided)) {
        dl_strided t = { .nd = 4, .shape = { 2, 4, 5, 3 },
                         .st = { { 60, 5, 1, 20 }, { 60, 15, 3, 1 }, { 0 } } };
        dl_strided sl = { .nd = 2, .shape = { 2, 4 }, .st = { { 20, 3 }, { 4, 1 }, { 0 } } };
        pair *x = mk(120, -1, 1), *y = mk(120, 0, 1);
        ON_BOTH(B->ops->copy_strided(B, &t, F(x), F(y)));
        compare("copy_strided_transpose", y, false, 0.0);
        drop_all();
        x = mk(60, -1, 1);
        y = mk(8, 0, 1);
        ON_BOTH(B->ops->copy_strided(B, &sl, F(x) + 10, F(y)));
        compare("copy_strided_slice_step", y, false, 0.0);
        drop_all();
    }
    if (!HAVE(reduce_fwd) || !HAVE(reduce_bwd))
        return;
    dl_strided gs[3] = {
        { .nd = 4, .shape = { 2, 3, 4, 5 }, .st = { { 60, 20, 5, 1 }, { 4, 0, 1, 0 }, { 0 } } },
        { .nd = 4, .shape = { 2, 3, 4, 5 }, .st = { { 60, 20, 5, 1 }, { 3, 1, 0, 0 }, { 0 } } },
        { .nd = 4, .shape = { 2, 3, 4, 5 }, .st = { { 60, 20, 5, 1 }, { 0, 0, 0, 0 }, { 0 } } },
    };
    static const int64_t ny[3] = { 8, 6, 1 };
    static const float scale[3] = { 1.0f / 15.0f, 1.0f / 20.0f, 1.0f };
    static const char *const names[3][2] = { { "reduce_fwd_dims13", "reduce_bwd_dims13" },
                                              { "reduce_fwd_hw", "reduce_bwd_hw" },
                                              { "reduce_fwd_all", "reduce_bwd_all" } };
    for (int i = 0; i < 3; i++) {
        pair *x = mk(120, -1, 1), *y = mk(ny[i], 0, 1), *dy = mk(ny[i], -1, 1),
             *dx = mk(120, 0, 1);
        ON_BOTH(B->ops->reduce_fwd(B, &gs[i], F(x), F(y), scale[i]);
                B->ops->reduce_bwd(B, &gs[i], F(dy), F(dx), scale[i]));
        compare(names[i][0], y, false, TOL);
        compare(names[i][1], dx, false, TOL);
        drop_all();
    }
}

static void check_unary(void)
{
    static const struct {
        const char *name;
        dl_unary u;
        float lo, hi;
    } cases[] = {
        { "gelu", { DL_UN_GELU, 0, 0 }, -5, 5 },
        { "gelu_tanh", { DL_UN_GELU_TANH, 0, 0 }, -5, 5 },
        { "silu", { DL_UN_SILU, 0, 0 }, -6, 6 },
        { "pow", { DL_UN_POW, 2.5f, 0 }, 0.1f, 2 },
        { "pow0", { DL_UN_POW, 0.0f, 0 }, 0.1f, 2 },
        { "sqrt", { DL_UN_SQRT, 0, 0 }, 0.1f, 4 },
        { "erf", { DL_UN_ERF, 0, 0 }, -3, 3 },
        { "leaky_relu", { DL_UN_LEAKY_RELU, 0.1f, 0 }, -2, 2 },
        { "clip", { DL_UN_CLIP, -0.5f, 0.7f }, -1, 1 },
        { "hardsigmoid", { DL_UN_HARDSIGMOID, 1.0f / 6.0f, 0.5f }, -5, 5 },
        { "hardswish", { DL_UN_HARDSWISH, 0, 0 }, -5, 5 },
    };
    if (!HAVE(unary_fwd) || !HAVE(unary_bwd))
        return;
    char name[64];
    int64_t n = 10007;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const dl_unary *u = &cases[i].u;
        pair *x = mk(n, cases[i].lo, cases[i].hi), *y = mk(n, 0, 1), *dy = mk(n, -1, 1),
             *dx = mk(n, 0, 1);
        ON_BOTH(B->ops->unary_fwd(B, u, F(x), F(y), n));
        snprintf(name, sizeof(name), "%s_fwd", cases[i].name);
        compare(name, y, false, TOL);
        /* The backward reads the forward output (sqrt): give both the CPU's. */
        float *yc = fetch(cpu, y->c, n);
        pair *yy = mk_bytes(n, sizeof(float), yc);
        free(yc);
        ON_BOTH(B->ops->unary_bwd(B, u, F(x), F(yy), F(dy), F(dx), n));
        snprintf(name, sizeof(name), "%s_bwd", cases[i].name);
        compare(name, dx, false, TOL);
        drop_all();
    }
}

static void check_layernorm(void)
{
    static const int64_t shapes[3][2] = { { 7, 33 }, { 5, 300 }, { 300, 64 } };
    if (!HAVE(layernorm_fwd) || !HAVE(layernorm_bwd))
        return;
    char name[64];
    for (int s = 0; s < 3; s++) {
        int64_t rows = shapes[s][0], d = shapes[s][1], n = rows * d;
        /* An offset mean tests the two-pass variance. */
        pair *x = mk(n, 2, 4), *w = mk(d, 0.5f, 1.5f), *b = mk(d, -1, 1), *y = mk(n, 0, 1),
             *dy = mk(n, -1, 1), *dx = mk(n, 0, 1), *dw = mk(d, -1, 1), *db = mk(d, -1, 1);
        ON_BOTH(B->ops->layernorm_fwd(B, F(x), F(w), F(b), F(y), rows, d, 1e-5f);
                B->ops->layernorm_bwd(B, F(x), F(w), F(dy), F(dx), F(dw), F(db), rows, d,
                                      1e-5f));
        snprintf(name, sizeof(name), "layernorm_fwd_%lldx%lld", (long long)rows, (long long)d);
        compare(name, y, false, TOL);
        snprintf(name, sizeof(name), "layernorm_bwd_dx_%lldx%lld", (long long)rows,
                 (long long)d);
        compare(name, dx, false, TOL);
        snprintf(name, sizeof(name), "layernorm_bwd_dw_%lldx%lld", (long long)rows,
                 (long long)d);
        compare(name, dw, false, TOL);
        snprintf(name, sizeof(name), "layernorm_bwd_db_%lldx%lld", (long long)rows,
                 (long long)d);
        compare(name, db, false, TOL);
        drop_all();
    }
}

static void check_softmax_axis(void)
{
    static const int64_t shapes[3][3] = { { 3, 7, 5 }, { 4, 33, 1 }, { 8, 128, 16 } };
    if (!HAVE(softmax_axis_fwd) || !HAVE(softmax_axis_bwd))
        return;
    char name[64];
    for (int s = 0; s < 3; s++)
        for (int lg = 0; lg < 2; lg++) {
            int64_t outer = shapes[s][0], len = shapes[s][1], inner = shapes[s][2];
            int64_t n = outer * len * inner;
            pair *x = mk(n, -8, 8), *y = mk(n, 0, 1), *dy = mk(n, -1, 1), *dx = mk(n, 0, 1);
            ON_BOTH(B->ops->softmax_axis_fwd(B, lg, F(x), F(y), outer, len, inner));
            snprintf(name, sizeof(name), "%s_axis_fwd_%lldx%lldx%lld",
                     lg ? "log_softmax" : "softmax", (long long)outer, (long long)len,
                     (long long)inner);
            compare(name, y, false, TOL);
            float *yc = fetch(cpu, y->c, n);
            pair *yy = mk_bytes(n, sizeof(float), yc);
            free(yc);
            ON_BOTH(B->ops->softmax_axis_bwd(B, lg, F(yy), F(dy), F(dx), outer, len, inner));
            snprintf(name, sizeof(name), "%s_axis_bwd_%lldx%lldx%lld",
                     lg ? "log_softmax" : "softmax", (long long)outer, (long long)len,
                     (long long)inner);
            compare(name, dx, false, TOL);
            drop_all();
        }
}

/* Attention on a packed projection [T, 3E] (test_cuda_bodies.c's shapes),
 * plain and causal, with and without per-sample lengths (sample s of the
 * queries t, 1, about half; of the keys 1, t, about a third): the output
 * and the projection's gradient. */
static void check_attention(void)
{
    static const int64_t cases[4][3] = { { 3, 33, 2 }, { 2, 1, 1 }, { 1, 40, 4 },
                                         { 4, 37, 2 } };
    if (!HAVE(attn_fwd) || !HAVE(attn_bwd))
        return;
    char name[80];
    for (int cs = 0; cs < 8; cs++)
        for (int causal = 0; causal < 2; causal++) {
            bool lens = cs >= 4;
            int64_t n = cases[cs % 4][0], t = cases[cs % 4][1], h = cases[cs % 4][2], e = h * 8;
            int32_t ql[4], kl[4];
            for (int64_t s = 0; s < n; s++) {
                ql[s] = (int32_t)(s % 3 == 0 ? t : s % 3 == 1 ? 1 : (t + 1) / 2);
                kl[s] = (int32_t)(s % 3 == 0 ? 1 : s % 3 == 1 ? t : (t + 2) / 3);
            }
            dl_attn a = { .n = n, .heads = h, .tq = t, .tk = t, .dk = 8, .dv = 8,
                          .q_row = 3 * e, .k_row = 3 * e, .v_row = 3 * e, .o_row = e,
                          .q_smp = 3 * e * t, .k_smp = 3 * e * t, .v_smp = 3 * e * t,
                          .o_smp = e * t, .scale = 0.4f, .causal = causal,
                          .q_len = lens ? ql : NULL, .k_len = lens ? kl : NULL };
            pair *x = mk(n * t * 3 * e, -2, 2), *o = mk(n * t * e, 0, 1),
                 *dout = mk(n * t * e, -1, 1), *dx = mk(n * t * 3 * e, 0, 1);
            dl_err err = {0};
            ON_BOTH(B->ops->attn_fwd(B, &a, F(x), F(x) + e, F(x) + 2 * e, F(o), &err);
                    B->ops->attn_bwd(B, &a, F(x), F(x) + e, F(x) + 2 * e, F(dout), F(dx),
                                     F(dx) + e, F(dx) + 2 * e, &err));
            snprintf(name, sizeof(name), "attn_fwd_n%lld_t%lld_h%lld%s%s", (long long)n,
                     (long long)t, (long long)h, causal ? "_causal" : "", lens ? "_lens" : "");
            compare(name, o, false, TOL);
            snprintf(name, sizeof(name), "attn_bwd_n%lld_t%lld_h%lld%s%s", (long long)n,
                     (long long)t, (long long)h, causal ? "_causal" : "", lens ? "_lens" : "");
            compare(name, dx, false, TOL);
            drop_all();
        }
}

/* Sequences (test_cuda_bodies.c's shapes and one larger): the mask in
 * place and not, and the four pools, of values in multiples of 1/4 so
 * that maxima tie; with lengths and without. */
static void check_seq(void)
{
    static const int32_t lens5[5] = { 7, 1, 3, 5, 2 };
    static const char *const kinds[4] = { "mean", "max", "sum", "last" };
    if (!HAVE(seq_mask) || !HAVE(seq_pool_fwd) || !HAVE(seq_pool_bwd))
        return;
    int32_t lens64[64];
    for (int i = 0; i < 64; i++)
        lens64[i] = 1 + (int32_t)(dl_rng_uniform(&rng) * 100.0f);
    lens64[0] = 100;
    const dl_seq cases[3] = { { 5, 7, 6, lens5 }, { 5, 7, 6, NULL }, { 64, 100, 33, lens64 } };
    char name[64];
    for (int c = 0; c < 3; c++) {
        const dl_seq *q = &cases[c];
        int64_t nx = q->n * q->t * q->d, ny = q->n * q->d;
        const char *tag = c == 0 ? "" : c == 1 ? "_all" : "_big";
        float *v = malloc((size_t)nx * sizeof(float));
        if (!v)
            exit(1);
        for (int64_t i = 0; i < nx; i++)
            v[i] = roundf((dl_rng_uniform(&rng) * 2.0f - 1.0f) * 4.0f) / 4.0f;
        pair *x = mk_bytes(nx, sizeof(float), v), *y = mk(nx, -1, 1), *z = mk(nx, -1, 1);
        free(v);
        ON_BOTH(B->ops->seq_mask(B, q, F(x), F(y));
                B->ops->seq_mask(B, q, F(z), F(z)));
        snprintf(name, sizeof(name), "seq_mask%s", tag);
        compare(name, y, false, 0.0);
        snprintf(name, sizeof(name), "seq_mask_inplace%s", tag);
        compare(name, z, false, 0.0);
        for (int k = 0; k < 4; k++) {
            pair *p = mk(ny, -1, 1), *dy = mk(ny, -1, 1), *dx = mk(nx, -1, 1);
            ON_BOTH(B->ops->seq_pool_fwd(B, (dl_seq_pool_kind)k, q, F(x), F(p));
                    B->ops->seq_pool_bwd(B, (dl_seq_pool_kind)k, q, F(x), F(dy), F(dx)));
            snprintf(name, sizeof(name), "seq_pool_fwd_%s%s", kinds[k], tag);
            compare(name, p, false, TOL);
            snprintf(name, sizeof(name), "seq_pool_bwd_%s%s", kinds[k], tag);
            compare(name, dx, false, TOL);
        }
        drop_all();
    }
}

/* Floats of a dl_rnn's parameters (PyTorch's layout, dl_tensor.h). */
static int64_t rnn_param_floats(const dl_rnn *r)
{
    int64_t gh = (r->cell == DL_RNN_LSTM ? 4 : 3) * r->hidden, n = 0;
    for (int l = 0; l < r->layers; l++)
        n += r->dirs * (gh * ((l == 0 ? r->in : r->hidden * r->dirs) + r->hidden) +
                        (r->bias ? 2 * gh : 0));
    return n;
}

/* Recurrent stacks (dl_rnn): LSTM and GRU, one and two layers, one and two
 * directions, the sequence or the last states, lengths mixed (1 and t
 * among them) or none; the output, dx and the parameters' gradients, and
 * the batch-invariant forward (cuDNN a sample at a time). The steps'
 * sums run in cuDNN's order: RNN_TOL. */
#define RNN_TOL 5e-5

/* r's forward (and in training its backward) on be, with reserve and
 * work of rnn_size's bytes. */
static bool rnn_run(dl_backend *be, dl_rnn r, float *w, float *dw, const float *x, float *y,
                    const float *dy, float *dx, dl_err *err)
{
    size_t reserve = 0, work = 0;
    r.w = w;
    r.dw = dw;
    if (be->ops->rnn_size(be, &r, &reserve, &work, err) != DL_OK)
        return false;
    r.reserve = reserve ? must_alloc(be, reserve) : NULL;
    r.work = work ? must_alloc(be, work) : NULL;
    bool ok = be->ops->rnn_fwd(be, &r, x, y, err) == DL_OK &&
              (!r.train || be->ops->rnn_bwd(be, &r, x, y, dy, dx, err) == DL_OK) &&
              dl_backend_sync(be, err) == DL_OK;
    if (r.reserve)
        be->ops->release(be, r.reserve);
    if (r.work)
        be->ops->release(be, r.work);
    return ok;
}

static void check_rnn(void)
{
    static const struct {
        dl_rnn_cell cell;
        int layers, dirs;
        bool ret_seq, bias, lens, invariant;
        int64_t n, t, in, hidden;
    } cases[] = {
        { DL_RNN_LSTM, 1, 1, true, true, true, false, 5, 7, 6, 8 },
        { DL_RNN_LSTM, 2, 2, false, true, true, false, 5, 7, 6, 8 },
        { DL_RNN_LSTM, 1, 2, true, false, false, false, 3, 4, 5, 3 },
        { DL_RNN_GRU, 1, 1, false, true, true, false, 5, 7, 6, 8 },
        { DL_RNN_GRU, 2, 2, true, true, true, false, 5, 7, 6, 8 },
        { DL_RNN_GRU, 1, 2, false, false, false, false, 3, 4, 5, 3 },
        { DL_RNN_LSTM, 1, 1, false, true, true, false, 64, 30, 64, 128 },
        { DL_RNN_LSTM, 2, 2, true, true, true, true, 5, 7, 6, 8 },
        { DL_RNN_GRU, 1, 2, false, true, true, true, 5, 7, 6, 8 },
    };
    if (!HAVE(rnn_size) || !HAVE(rnn_fwd) || !HAVE(rnn_bwd))
        return;
    char name[64];
    for (size_t cs = 0; cs < sizeof(cases) / sizeof(cases[0]); cs++) {
        int64_t n = cases[cs].n, t = cases[cs].t, h = cases[cs].hidden;
        int32_t *len = malloc((size_t)n * sizeof(int32_t));
        for (int64_t i = 0; i < n; i++)
            len[i] = i == 0 ? (int32_t)t : i == 1 ? 1 : 1 + (int32_t)dl_rng_below(&rng, t);
        dl_rnn r = { .cell = cases[cs].cell, .n = n, .t = t, .in = cases[cs].in, .hidden = h,
                     .layers = cases[cs].layers, .dirs = cases[cs].dirs,
                     .bias = cases[cs].bias, .ret_seq = cases[cs].ret_seq,
                     .len = cases[cs].lens ? len : NULL, .train = !cases[cs].invariant,
                     .invariant = cases[cs].invariant };
        int64_t np = rnn_param_floats(&r), yw = (r.ret_seq ? t : 1) * h * r.dirs;
        pair *w = mk(np, -0.4f, 0.4f), *dw = mk(np, 0, 0), *x = mk(n * t * r.in, -1, 1),
             *y = mk(n * yw, 0, 0), *dy = mk(n * yw, -1, 1), *dx = mk(n * t * r.in, 0, 0);
        dl_err err = {0};
        bool ok = true;
        ON_BOTH(ok &= rnn_run(B, r, F(w), F(dw), F(x), F(y), F(dy), F(dx), &err));
        if (!ok)
            fprintf(stderr, "rnn: %s\n", err.msg);
        snprintf(name, sizeof(name), "rnn_%s_l%d_d%d_%s%s%s%s_n%lld",
                 r.cell == DL_RNN_LSTM ? "lstm" : "gru", r.layers, r.dirs,
                 r.ret_seq ? "seq" : "last", r.bias ? "" : "_nobias", r.len ? "" : "_full",
                 r.invariant ? "_inv" : "", (long long)n);
        char what[80];
        snprintf(what, sizeof(what), "%s_y", name);
        compare(what, y, false, ok ? RNN_TOL : -1);
        if (r.train) {
            snprintf(what, sizeof(what), "%s_dx", name);
            compare(what, dx, false, ok ? RNN_TOL : -1);
            snprintf(what, sizeof(what), "%s_dw", name);
            compare(what, dw, false, ok ? RNN_TOL : -1);
        }
        drop_all();
        free(len);
    }
}

/* One B for every q (sb = 0), every stride nonzero, and C_q apart by more
 * than m n; each with the four transposes, in FP32 and TF32; then k = 0. */
static void check_gemm_batched(void)
{
    if (!HAVE(gemm_batched))
        return;
    int64_t m = 17, n = 23, k = 31, batch = 6;
    static const char *const kinds[3] = { "sb0", "strided", "sc_gap" };
    char name[64];
    for (int s = 0; s < 3; s++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            int64_t sa = m * k, sb = s == 0 ? 0 : k * n, sc = m * n + (s == 2 ? 5 : 0);
            float alpha = 0.75f, beta = s == 1 ? 0.0f : 0.5f;
            pair *a = mk(batch * sa, -1, 1), *b = mk(sb ? batch * sb : k * n, -1, 1),
                 *c = mk(batch * sc, -1, 1);
            dl_err err = {0};
            bool ok = true;
            ON_BOTH(ok &= B->ops->gemm_batched(B, ta, tb, m, n, k, alpha, P(a), sa, P(b), sb,
                                               beta, F(c), sc, batch, &err) == DL_OK);
            ok &= tf32->ops->gemm_batched(tf32, ta, tb, m, n, k, alpha, a->t, sa, b->t, sb, beta,
                                          c->t, sc, batch, &err) == DL_OK;
            if (!ok)
                fprintf(stderr, "gemm_batched: %s\n", err.msg);
            snprintf(name, sizeof(name), "gemm_batched_%s_%s%s", kinds[s], ta ? "T" : "N",
                     tb ? "T" : "N");
            compare(name, c, false, ok ? TOL : -1);
            snprintf(name, sizeof(name), "gemm_batched_tf32_%s_%s%s", kinds[s], ta ? "T" : "N",
                     tb ? "T" : "N");
            compare(name, c, true, ok ? TOL_TF32 : -1);
            drop_all();
        }
    /* k = 0: C_q = beta C_q, with and without gaps between the C_q. */
    for (int gap = 0; gap < 2; gap++) {
        int64_t sc = m * n + gap * 3;
        pair *c = mk(batch * sc, -1, 1);
        dl_err err = {0};
        ON_BOTH(B->ops->gemm_batched(B, false, false, m, n, 0, 1.0f, P(c), 0, P(c), 0, 0.25f,
                                     F(c), sc, batch, &err));
        compare(gap ? "gemm_batched_k0_gap" : "gemm_batched_k0", c, false, TOL);
        drop_all();
    }
}

/* The pool, out-of-memory, graphs and the error latch. */
static void check_backend(void)
{
    dl_err err = {0};
    void *a = must_alloc(gpu, 1000), *b;
    gpu->ops->release(gpu, a);
    b = must_alloc(gpu, 1000);
    report("pool_reuse", a == b ? 0.0 : 1.0, 0.0);
    gpu->ops->release(gpu, b);

    void *huge = NULL;
    dl_status st = gpu->ops->alloc(gpu, (size_t)1 << 50, &huge, &err);
    report("alloc_oom_is_nomem", st == DL_ERR_NOMEM && !huge ? 0.0 : 1.0, 0.0);
    a = NULL;
    st = gpu->ops->alloc(gpu, 4096, &a, &err);
    report("alloc_after_oom", st == DL_OK && a ? 0.0 : 1.0, 0.0);
    if (a)
        gpu->ops->release(gpu, a);

    size_t used = 0, total = 0;
    st = dl_backend_memory(gpu, &used, &total);
    report("memory_figures", st == DL_OK && used > 0 && total > used ? 0.0 : 1.0, 0.0);

    /* A recorded sequence replays to the eager result. */
    int64_t n = 4099;
    pair *x = mk(n, -1, 1), *y = mk(n, -1, 1), *z = mk(n, -1, 1);
    for (int i = 0; i < 2; i++)
        cpu->ops->axpy(cpu, 0.5f, x->c, y->c, n);
    cpu->ops->act_fwd(cpu, DL_ACT_TANH, y->c, z->c, n);
    dl_graph *g = NULL;
    st = dl_graph_begin(gpu, &err);
    if (st == DL_OK) {
        gpu->ops->axpy(gpu, 0.5f, x->g, y->g, n);
        gpu->ops->act_fwd(gpu, DL_ACT_TANH, y->g, z->g, n);
        st = dl_graph_end(gpu, &g, &err);
    }
    if (st == DL_OK)   /* recording ran nothing: two replays, two axpys */
        st = dl_graph_launch(gpu, g, &err);
    if (st == DL_OK)
        st = dl_graph_launch(gpu, g, &err);
    if (st == DL_OK) {
        compare("graph_replay", z, false, TOL);
    } else {
        fprintf(stderr, "graph: %s\n", err.msg);
        report("graph_replay", INFINITY, TOL);
    }
    dl_graph_free(gpu, g);
    drop_all();

    /* A host transfer inside a recording is refused, reported once, and
     * leaves the backend usable. */
    float h[4];
    a = must_alloc(gpu, sizeof(h));
    g = NULL;
    st = dl_graph_begin(gpu, &err);
    if (st == DL_OK) {
        gpu->ops->download(gpu, h, a, sizeof(h));
        st = dl_graph_end(gpu, &g, &err);
    }
    dl_graph_free(gpu, g);
    dl_status after = dl_backend_sync(gpu, &err);
    report("latch_reports_once", st != DL_OK && after == DL_OK ? 0.0 : 1.0, 0.0);
    gpu->ops->release(gpu, a);
}

int main(void)
{
    dl_err err = {0};
    dl_status st = dl_backend_new("cuda", NULL, &gpu, &err);
    if (st == DL_ERR_UNAVAILABLE) {
        printf("SKIP: no CUDA device (%s)\n", err.msg);
        return 77;
    }
    if (st != DL_OK) {
        fprintf(stderr, "cuda backend: %s\n", err.msg);
        return 1;
    }
    st = dl_backend_new("cuda", &(dl_backend_params){ .tf32 = true }, &tf32, &err);
    if (st == DL_OK)
        st = dl_backend_cpu_new(0, &cpu, &err);
    if (st != DL_OK) {
        fprintf(stderr, "backends: %s\n", err.msg);
        return 1;
    }
    const char *env = getenv("DLSERVE_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    dl_rng_seed(&rng, seed);
    printf("# CPU vs CUDA parity, DLSERVE_TEST_SEED=%llu; maxrel = max|gpu-cpu| / max|cpu|\n",
           (unsigned long long)seed);
    printf("%-24s %10s  %s\n", "op", "maxrel", "result");

    check_memory();
    check_gemm();
    check_gemm_rows();
    check_bias();
    check_act();
    check_softmax();
    check_conv();
    check_pool();
    check_bn();
    check_dropout();
    check_embed();
    check_losses();
    check_optim();
    check_binary();
    check_strided();
    check_unary();
    check_layernorm();
    check_softmax_axis();
    check_attention();
    check_seq();
    check_gemm_batched();
    check_rnn();
    check_backend();

    st = dl_backend_sync(gpu, &err);
    if (st != DL_OK) {
        fprintf(stderr, "cuda: %s\n", err.msg);
        failures++;
    }
    printf("# %d checks, %d failed\n", checks, failures);
    dl_backend_free(tf32);
    dl_backend_free(gpu);
    dl_backend_free(cpu);
    return failures ? 1 : 0;
}
