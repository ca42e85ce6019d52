/* test_cuda_bodies.c: the per-index bodies of the CUDA graph kernels
 * (src/tensor/cuda/graph_body.h), the code the GPU runs, looped here over
 * every index on the host and compared with the CPU backend's slots on
 * the same random inputs and the shapes of tests/gpu/test_gpu_ops.c's
 * parity checks: broadcasting binaries with their gradients, strided
 * copies, reductions, the unary family, layernorm, softmax on an axis,
 * attention (its softmax rows between the products) and the sequence
 * kernels (masks and the four pools).
 * Limit: normwise relative error max|body - cpu| / max|cpu| <= 1e-5 (the
 * two sum in different orders). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "tensor/dl_tensor.h"
#include "tensor/cuda/graph_body.h"

#define TOL 1e-5

static dl_backend *be;
static dl_rng rng;

static void setup(void)
{
    dl_err err = {0};
    cr_assert_eq(dl_backend_cpu_new(1, &be, &err), DL_OK, "cpu backend: %s", err.msg);
    const dl_backend_ops *o = be->ops;
    cr_assert(o->binary_fwd && o->binary_bwd && o->copy_strided && o->reduce_fwd &&
              o->reduce_bwd && o->unary_fwd && o->unary_bwd && o->layernorm_fwd &&
              o->layernorm_bwd && o->softmax_axis_fwd && o->softmax_axis_bwd && o->attn_fwd &&
              o->attn_bwd && o->seq_mask && o->seq_pool_fwd && o->seq_pool_bwd,
              "the CPU backend lacks a graph layer slot: nothing to compare with");
    dl_rng_seed(&rng, 20260612);
}

static void teardown(void)
{
    dl_backend_free(be);
}

TestSuite(cuda_bodies, .init = setup, .fini = teardown);

/* ---- buffers ------------------------------------------------------------------ */

/* Host values uniform in [lo, hi). */
static float *rnd(int64_t n, float lo, float hi)
{
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    cr_assert_not_null(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * dl_rng_uniform(&rng);
    return v;
}

/* The CPU backend's copy of h. */
static float *dev(const float *h, int64_t n)
{
    void *p = NULL;
    dl_err err = {0};
    cr_assert_eq(be->ops->alloc(be, (size_t)(n > 0 ? n : 1) * sizeof(float), &p, &err), DL_OK,
                 "alloc: %s", err.msg);
    be->ops->upload(be, p, h, (size_t)n * sizeof(float));
    return p;
}

static float *back(const float *d, int64_t n)
{
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    cr_assert_not_null(h);
    be->ops->download(be, h, d, (size_t)n * sizeof(float));
    return h;
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

/* The body's result (host) against the CPU's (backend memory). */
static void expect_close(const char *what, const float *body, const float *cpu, int64_t n)
{
    float *want = back(cpu, n);
    double r = maxrel(body, want, n);
    cr_expect(r <= TOL, "%s: maxrel %.3e > %.0e", what, r, TOL);
    free(want);
}

/* ---- geometry ----------------------------------------------------------------- */

/* Row-major strides of an operand of shape xs (nx dimensions) read over
 * out (nd dimensions, right-aligned as NumPy broadcasts): 0 where the
 * operand lacks the dimension or has extent 1. */
static void bcast_strides(int nd, const int64_t *out, int nx, const int64_t *xs, int64_t *st)
{
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int xd = d - (nd - nx);
        if (xd < 0 || xs[xd] == 1) {
            st[d] = 0;
        } else {
            cr_assert_eq(xs[xd], out[d]);
            st[d] = s;
        }
        if (xd >= 0)
            s *= xs[xd];
    }
}

static dl_strided bcast_geom(int nd, const int64_t *out, int na, const int64_t *as, int nb,
                             const int64_t *bs)
{
    dl_strided g;
    memset(&g, 0, sizeof(g));
    g.nd = nd;
    memcpy(g.shape, out, (size_t)nd * sizeof(int64_t));
    bcast_strides(nd, out, na, as, g.st[0]);
    bcast_strides(nd, out, nb, bs, g.st[1]);
    bcast_strides(nd, out, nd, out, g.st[2]);
    return g;
}

/* ---- binary ops ---------------------------------------------------------------- */

/* [16,3,1,33] op [8,33], [8,33] op [16,3,1,33], and same-shape [16,3,8,33]. */
typedef struct bin_case {
    const char *name;
    int na, nb;
    int64_t as[4], bs[4];
} bin_case;

static const bin_case bin_cases[3] = {
    { "bcast_b", 4, 2, { 16, 3, 1, 33 }, { 8, 33 } },
    { "bcast_a", 2, 4, { 8, 33 }, { 16, 3, 1, 33 } },
    { "same", 4, 4, { 16, 3, 8, 33 }, { 16, 3, 8, 33 } },
};
static const int64_t bin_out[4] = { 16, 3, 8, 33 };
static const char *const bin_names[4] = { "add", "sub", "mul", "div" };

Test(cuda_bodies, binary_fwd_and_bwd)
{
    char what[96];
    for (int op = 0; op < 4; op++)
        for (int c = 0; c < 3; c++) {
            const bin_case *bc = &bin_cases[c];
            dl_strided g = bcast_geom(4, bin_out, bc->na, bc->as, bc->nb, bc->bs);
            int64_t na = dl_shape_numel(bc->na, bc->as), nb = dl_shape_numel(bc->nb, bc->bs);
            int64_t ny = dl_shape_numel(4, bin_out);
            int post = (op * 3 + c) % 4 - 1;   /* none, relu, tanh, sigmoid in turn */
            dl_act act = (dl_act)(post < 0 ? 0 : post);
            float *a = rnd(na, -1, 1), *b = rnd(nb, 0.5f, 1.5f), *dy = rnd(ny, -1, 1);
            float *y = rnd(ny, 0, 1);
            float *ca = dev(a, na), *cb = dev(b, nb), *cdy = dev(dy, ny), *cy = dev(y, ny);

            be->ops->binary_fwd(be, (dl_binop)op, &g, ca, cb, post < 0 ? NULL : &act, cy);
            for (int64_t j = 0; j < ny; j++)
                body_binary_fwd((dl_binop)op, post, &g, a, b, y, j);
            snprintf(what, sizeof(what), "binary_fwd_%s_%s_post%d", bin_names[op], bc->name,
                     post);
            expect_close(what, y, cy, ny);

            for (int k = 0; k < 2; k++) {
                int64_t nx = k ? nb : na;
                float *dx = rnd(nx, -1, 1), *cdx = dev(dx, nx);
                be->ops->binary_bwd(be, (dl_binop)op, &g, k, ca, cb, cdy, cdx);
                body_split sp;
                body_split_of(&g, k, &sp);
                cr_assert_eq(sp.kn, nx, "%s: kept positions %lld, operand %lld", what,
                             (long long)sp.kn, (long long)nx);
                for (int64_t j = 0; j < sp.kn; j++)
                    body_binary_bwd((dl_binop)op, &sp, k, a, b, dy, dx, j);
                snprintf(what, sizeof(what), "binary_bwd_%s_%s_d%c", bin_names[op], bc->name,
                         k ? 'b' : 'a');
                expect_close(what, dx, cdx, nx);
                be->ops->release(be, cdx);
                free(dx);
            }
            be->ops->release(be, ca);
            be->ops->release(be, cb);
            be->ops->release(be, cdy);
            be->ops->release(be, cy);
            free(a);
            free(b);
            free(dy);
            free(y);
        }
}

/* ---- copies and reductions ------------------------------------------------------- */

/* y = x (2,3,4,5) permuted to (0,2,3,1), dense; y = x[1:5:2, 0:10:3] of
 * a (6,10). */
Test(cuda_bodies, copy_strided)
{
    dl_strided t = { .nd = 4, .shape = { 2, 4, 5, 3 },
                     .st = { { 60, 5, 1, 20 }, { 60, 15, 3, 1 }, { 0 } } };
    dl_strided s = { .nd = 2, .shape = { 2, 4 }, .st = { { 20, 3 }, { 4, 1 }, { 0 } } };
    const dl_strided *gs[2] = { &t, &s };
    const int64_t nx[2] = { 120, 60 }, ny[2] = { 120, 8 }, at[2] = { 0, 10 };
    const char *names[2] = { "copy_strided_transpose", "copy_strided_slice_step" };
    for (int i = 0; i < 2; i++) {
        float *x = rnd(nx[i], -1, 1), *y = rnd(ny[i], -1, 1);
        float *cx = dev(x, nx[i]), *cy = dev(y, ny[i]);
        be->ops->copy_strided(be, gs[i], cx + at[i], cy);
        for (int64_t j = 0; j < body_count(gs[i]); j++)
            body_copy(gs[i], x + at[i], y, j);
        expect_close(names[i], y, cy, ny[i]);
        be->ops->release(be, cx);
        be->ops->release(be, cy);
        free(x);
        free(y);
    }
}

/* x (2,3,4,5) summed over dims 1 and 3 (y (2,1,4,1)), over H and W (global
 * pooling: y (2,3)), and over everything. */
Test(cuda_bodies, reduce_fwd_and_bwd)
{
    dl_strided gs[3] = {
        { .nd = 4, .shape = { 2, 3, 4, 5 }, .st = { { 60, 20, 5, 1 }, { 4, 0, 1, 0 }, { 0 } } },
        { .nd = 4, .shape = { 2, 3, 4, 5 }, .st = { { 60, 20, 5, 1 }, { 3, 1, 0, 0 }, { 0 } } },
        { .nd = 4, .shape = { 2, 3, 4, 5 }, .st = { { 60, 20, 5, 1 }, { 0, 0, 0, 0 }, { 0 } } },
    };
    const int64_t ny[3] = { 8, 6, 1 };
    const float scale[3] = { 1.0f / 15.0f, 1.0f / 20.0f, 1.0f };
    const char *names[3][2] = { { "reduce_fwd_dims13", "reduce_bwd_dims13" },
                                { "reduce_fwd_hw", "reduce_bwd_hw" },
                                { "reduce_fwd_all", "reduce_bwd_all" } };
    for (int i = 0; i < 3; i++) {
        int64_t nx = 120;
        float *x = rnd(nx, -1, 1), *y = rnd(ny[i], -1, 1), *dy = rnd(ny[i], -1, 1),
              *dx = rnd(nx, -1, 1);
        float *cx = dev(x, nx), *cy = dev(y, ny[i]), *cdy = dev(dy, ny[i]), *cdx = dev(dx, nx);
        be->ops->reduce_fwd(be, &gs[i], cx, cy, scale[i]);
        body_split sp;
        body_split_of(&gs[i], 1, &sp);
        cr_assert_eq(sp.kn, ny[i]);
        for (int64_t j = 0; j < sp.kn; j++)
            body_reduce_fwd(&sp, x, y, scale[i], j);
        expect_close(names[i][0], y, cy, ny[i]);

        be->ops->reduce_bwd(be, &gs[i], cdy, cdx, scale[i]);
        for (int64_t j = 0; j < body_count(&gs[i]); j++)
            body_reduce_bwd(&gs[i], dy, dx, scale[i], j);
        expect_close(names[i][1], dx, cdx, nx);
        be->ops->release(be, cx);
        be->ops->release(be, cy);
        be->ops->release(be, cdy);
        be->ops->release(be, cdx);
        free(x);
        free(y);
        free(dy);
        free(dx);
    }
}

/* ---- the unary family -------------------------------------------------------------- */

typedef struct un_case {
    const char *name;
    dl_unary u;
    float lo, hi;
} un_case;

static const un_case un_cases[] = {
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

Test(cuda_bodies, unary_fwd_and_bwd)
{
    char what[64];
    int64_t n = 10007;
    for (size_t i = 0; i < sizeof(un_cases) / sizeof(un_cases[0]); i++) {
        const un_case *uc = &un_cases[i];
        float *x = rnd(n, uc->lo, uc->hi), *y = rnd(n, 0, 1), *dy = rnd(n, -1, 1),
              *dx = rnd(n, 0, 1);
        float *cx = dev(x, n), *cy = dev(y, n), *cdy = dev(dy, n), *cdx = dev(dx, n);
        be->ops->unary_fwd(be, &uc->u, cx, cy, n);
        for (int64_t j = 0; j < n; j++)
            y[j] = body_unary_fwd(uc->u.kind, uc->u.a, uc->u.b, x[j]);
        snprintf(what, sizeof(what), "unary_fwd_%s", uc->name);
        expect_close(what, y, cy, n);
        /* The backward from the CPU's forward output. */
        float *yc = back(cy, n);
        be->ops->unary_bwd(be, &uc->u, cx, cy, cdy, cdx, n);
        for (int64_t j = 0; j < n; j++)
            dx[j] = dy[j] * body_unary_grad(uc->u.kind, uc->u.a, uc->u.b, x[j], yc[j]);
        snprintf(what, sizeof(what), "unary_bwd_%s", uc->name);
        expect_close(what, dx, cdx, n);
        be->ops->release(be, cx);
        be->ops->release(be, cy);
        be->ops->release(be, cdy);
        be->ops->release(be, cdx);
        free(x);
        free(y);
        free(yc);
        free(dy);
        free(dx);
    }
}

/* ---- layernorm ------------------------------------------------------------------------ */

Test(cuda_bodies, layernorm_fwd_and_bwd)
{
    static const int64_t shapes[3][2] = { { 7, 33 }, { 5, 300 }, { 300, 64 } };
    char what[64];
    float eps = 1e-5f;
    for (int s = 0; s < 3; s++) {
        int64_t rows = shapes[s][0], d = shapes[s][1], n = rows * d;
        /* An offset mean tests the two-pass variance. */
        float *x = rnd(n, 2, 4), *w = rnd(d, 0.5f, 1.5f), *b = rnd(d, -1, 1),
              *y = rnd(n, 0, 1), *dy = rnd(n, -1, 1), *dx = rnd(n, 0, 1),
              *dw = rnd(d, -1, 1), *db = rnd(d, -1, 1);
        float *cx = dev(x, n), *cw = dev(w, d), *cb = dev(b, d), *cy = dev(y, n),
              *cdy = dev(dy, n), *cdx = dev(dx, n), *cdw = dev(dw, d), *cdb = dev(db, d);
        double *stats = malloc((size_t)rows * 2 * sizeof(double));
        cr_assert_not_null(stats);

        be->ops->layernorm_fwd(be, cx, cw, cb, cy, rows, d, eps);
        for (int64_t r = 0; r < rows; r++) {
            body_ln_stats(x + r * d, d, eps, &stats[2 * r], &stats[2 * r + 1]);
            for (int64_t j = 0; j < d; j++)
                y[r * d + j] = body_ln_y(x[r * d + j], stats[2 * r], stats[2 * r + 1], w[j],
                                         b[j]);
        }
        snprintf(what, sizeof(what), "layernorm_fwd_%lldx%lld", (long long)rows, (long long)d);
        expect_close(what, y, cy, n);

        be->ops->layernorm_bwd(be, cx, cw, cdy, cdx, cdw, cdb, rows, d, eps);
        for (int64_t r = 0; r < rows; r++) {
            double mean = stats[2 * r], rstd = stats[2 * r + 1], s1, s2;
            body_ln_bwd_sums(x + r * d, w, dy + r * d, d, 0, 1, mean, rstd, &s1, &s2);
            for (int64_t j = 0; j < d; j++)
                dx[r * d + j] = body_ln_dx(x[r * d + j], w[j], dy[r * d + j], mean, rstd, s1,
                                           s2, d);
        }
        for (int64_t j = 0; j < d; j++) {
            double sw, sb;
            body_ln_dwdb(x, dy, stats, rows, d, j, &sw, &sb);
            dw[j] += (float)sw;
            db[j] += (float)sb;
        }
        snprintf(what, sizeof(what), "layernorm_bwd_dx_%lldx%lld", (long long)rows,
                 (long long)d);
        expect_close(what, dx, cdx, n);
        snprintf(what, sizeof(what), "layernorm_bwd_dw_%lldx%lld", (long long)rows,
                 (long long)d);
        expect_close(what, dw, cdw, d);
        snprintf(what, sizeof(what), "layernorm_bwd_db_%lldx%lld", (long long)rows,
                 (long long)d);
        expect_close(what, db, cdb, d);

        float *bufs[] = { cx, cw, cb, cy, cdy, cdx, cdw, cdb, x, w, b, y, dy, dx, dw, db };
        for (int i = 0; i < 8; i++)
            be->ops->release(be, bufs[i]);
        for (int i = 8; i < 16; i++)
            free(bufs[i]);
        free(stats);
    }
}

/* ---- softmax on an axis ------------------------------------------------------------------ */

Test(cuda_bodies, softmax_axis_fwd_and_bwd)
{
    static const int64_t shapes[3][3] = { { 3, 7, 5 }, { 4, 33, 1 }, { 8, 128, 16 } };
    char what[64];
    for (int s = 0; s < 3; s++)
        for (int lg = 0; lg < 2; lg++) {
            int64_t outer = shapes[s][0], len = shapes[s][1], inner = shapes[s][2];
            int64_t n = outer * len * inner;
            float *x = rnd(n, -8, 8), *y = rnd(n, 0, 1), *dy = rnd(n, -1, 1),
                  *dx = rnd(n, 0, 1);
            float *cx = dev(x, n), *cy = dev(y, n), *cdy = dev(dy, n), *cdx = dev(dx, n);
            be->ops->softmax_axis_fwd(be, lg, cx, cy, outer, len, inner);
            for (int64_t c = 0; c < outer * inner; c++) {
                int64_t at = (c / inner) * len * inner + c % inner;
                body_softmax_col(lg, x + at, y + at, len, inner);
            }
            snprintf(what, sizeof(what), "%s_axis_fwd_%lldx%lldx%lld",
                     lg ? "log_softmax" : "softmax", (long long)outer, (long long)len,
                     (long long)inner);
            expect_close(what, y, cy, n);

            float *yc = back(cy, n);
            be->ops->softmax_axis_bwd(be, lg, cy, cdy, cdx, outer, len, inner);
            for (int64_t c = 0; c < outer * inner; c++) {
                int64_t at = (c / inner) * len * inner + c % inner;
                body_softmax_col_bwd(lg, yc + at, dy + at, dx + at, len, inner);
            }
            snprintf(what, sizeof(what), "%s_axis_bwd_%lldx%lldx%lld",
                     lg ? "log_softmax" : "softmax", (long long)outer, (long long)len,
                     (long long)inner);
            expect_close(what, dx, cdx, n);
            be->ops->release(be, cx);
            be->ops->release(be, cy);
            be->ops->release(be, cdy);
            be->ops->release(be, cdx);
            free(x);
            free(y);
            free(yc);
            free(dy);
            free(dx);
        }
}

/* ---- attention ------------------------------------------------------------------------ */

/* C (m x n, row stride ldc) = op(A) op(B) over k, row-major operands at
 * their row strides; ta/tb: A is (k x m), B is (n x k). */
static void host_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                      int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0.0;
            for (int64_t l = 0; l < k; l++)
                s += (double)(ta ? a[l * lda + i] : a[i * lda + l]) *
                     (tb ? b[j * ldb + l] : b[l * ldb + j]);
            c[i * ldc + j] = (float)s;
        }
}

/* Per-sample lengths of a test batch: sample s of the query side gets t,
 * 1, then about half; of the key side 1, t, then about a third (so a
 * sample may have more queries than keys and the other way round). */
static void test_lengths(int32_t *ql, int32_t *kl, int64_t n, int64_t t)
{
    for (int64_t s = 0; s < n; s++) {
        ql[s] = (int32_t)(s % 3 == 0 ? t : s % 3 == 1 ? 1 : (t + 1) / 2);
        kl[s] = (int32_t)(s % 3 == 0 ? 1 : s % 3 == 1 ? t : (t + 2) / 3);
    }
}

/* The CUDA slots' sequence (backend_cuda.cu, cu_attn_fwd and _bwd) on the
 * host: the products at full size, then the bodies, a sample and head at
 * a time, on a packed projection [T, 3E], against the CPU kernels; with
 * and without per-sample lengths (the CPU's products stop at them, the
 * CUDA softmax masks: the padded rows agree, zeros). */
Test(cuda_bodies, attention_fwd_and_bwd)
{
    static const int64_t cases[4][3] = { { 3, 33, 2 }, { 2, 1, 1 }, { 1, 40, 4 },
                                         { 4, 37, 2 } };  /* n, T, H */
    char what[80];
    for (int cs = 0; cs < 8; cs++)
        for (int causal = 0; causal < 2; causal++) {
            bool lens = cs >= 4;
            int64_t n = cases[cs % 4][0], t = cases[cs % 4][1], h = cases[cs % 4][2], d = 8;
            int64_t e = h * d;
            int32_t ql[4], kl[4];
            test_lengths(ql, kl, n, t);
            dl_attn a = { .n = n, .heads = h, .tq = t, .tk = t, .dk = d, .dv = d,
                          .q_row = 3 * e, .k_row = 3 * e, .v_row = 3 * e, .o_row = e,
                          .q_smp = 3 * e * t, .k_smp = 3 * e * t, .v_smp = 3 * e * t,
                          .o_smp = e * t, .scale = 0.4f, .causal = causal,
                          .q_len = lens ? ql : NULL, .k_len = lens ? kl : NULL };
            int64_t nx = n * t * 3 * e, no = n * t * e;
            float *x = rnd(nx, -2, 2), *dout = rnd(no, -1, 1), *o = rnd(no, 0, 1),
                  *dx = rnd(nx, 0, 1), *p = rnd(t * t, 0, 1), *dp = rnd(t * t, 0, 1);
            float *cx = dev(x, nx), *cdo = dev(dout, no), *co = dev(o, no), *cdx = dev(dx, nx);
            dl_err err = {0};
            cr_assert_eq(be->ops->attn_fwd(be, &a, cx, cx + e, cx + 2 * e, co, &err), DL_OK,
                         "%s", err.msg);
            cr_assert_eq(be->ops->attn_bwd(be, &a, cx, cx + e, cx + 2 * e, cdo, cdx, cdx + e,
                                           cdx + 2 * e, &err), DL_OK, "%s", err.msg);
            for (int64_t s = 0; s < n; s++)
                for (int64_t hh = 0; hh < h; hh++) {
                    const float *q = x + s * a.q_smp + hh * d, *k = q + e, *v = q + 2 * e;
                    const float *go = dout + s * a.o_smp + hh * d;
                    float *dq = dx + s * a.q_smp + hh * d, *dk = dq + e, *dv = dq + 2 * e;
                    int64_t qn = lens ? ql[s] : t, kn = lens ? kl[s] : t;
                    host_gemm(false, true, t, t, d, q, 3 * e, k, 3 * e, p, t);
                    for (int64_t i = 0; i < t; i++)
                        body_attn_row(p + i * t, body_attn_keys(i, qn, kn, causal, 0), t,
                                      a.scale);
                    host_gemm(false, false, t, d, t, p, t, v, 3 * e,
                              o + s * a.o_smp + hh * d, e);
                    host_gemm(true, false, t, d, t, p, t, go, e, dv, 3 * e);
                    host_gemm(false, true, t, t, d, go, e, v, 3 * e, dp, t);
                    for (int64_t i = 0; i < t; i++)
                        body_attn_row_bwd(p + i * t, dp + i * t, t, a.scale);
                    host_gemm(false, false, t, d, t, dp, t, k, 3 * e, dq, 3 * e);
                    host_gemm(true, false, t, d, t, dp, t, q, 3 * e, dk, 3 * e);
                }
            snprintf(what, sizeof(what), "attention_fwd_n%lld_t%lld_h%lld%s%s", (long long)n,
                     (long long)t, (long long)h, causal ? "_causal" : "", lens ? "_lens" : "");
            expect_close(what, o, co, no);
            snprintf(what, sizeof(what), "attention_bwd_n%lld_t%lld_h%lld%s%s", (long long)n,
                     (long long)t, (long long)h, causal ? "_causal" : "", lens ? "_lens" : "");
            expect_close(what, dx, cdx, nx);
            be->ops->release(be, cx);
            be->ops->release(be, cdo);
            be->ops->release(be, co);
            be->ops->release(be, cdx);
            free(x);
            free(dout);
            free(o);
            free(dx);
            free(p);
            free(dp);
        }
}

/* ---- sequences ------------------------------------------------------------------------ */

/* [5, 7, 6] of lengths 7, 1, 3, 5, 2 and without lengths, the values
 * multiples of 1/4 so that maxima tie: the pools' gradients must pick
 * the same position. */
Test(cuda_bodies, seq_mask_and_pool)
{
    static const int32_t lens[5] = { 7, 1, 3, 5, 2 };
    static const char *const kinds[4] = { "mean", "max", "sum", "last" };
    char what[64];
    for (int with = 0; with < 2; with++) {
        dl_seq q = { .n = 5, .t = 7, .d = 6, .len = with ? lens : NULL };
        int64_t nx = q.n * q.t * q.d, ny = q.n * q.d;
        float *x = rnd(nx, -1, 1), *y = rnd(nx, 0, 1);
        for (int64_t i = 0; i < nx; i++)
            x[i] = roundf(x[i] * 4.0f) / 4.0f;
        float *cx = dev(x, nx), *cy = dev(y, nx);
        be->ops->seq_mask(be, &q, cx, cy);
        for (int64_t j = 0; j < nx; j++)
            body_seq_mask(q.t, q.d, q.len, x, y, j);
        snprintf(what, sizeof(what), "seq_mask%s", with ? "" : "_no_lengths");
        expect_close(what, y, cy, nx);
        for (int k = 0; k < 4; k++) {
            float *p = rnd(ny, 0, 1), *dy = rnd(ny, -1, 1), *dx = rnd(nx, 0, 1);
            float *cp = dev(p, ny), *cdy = dev(dy, ny), *cdx = dev(dx, nx);
            be->ops->seq_pool_fwd(be, (dl_seq_pool_kind)k, &q, cx, cp);
            be->ops->seq_pool_bwd(be, (dl_seq_pool_kind)k, &q, cx, cdy, cdx);
            for (int64_t j = 0; j < ny; j++) {
                body_seq_pool_fwd((dl_seq_pool_kind)k, q.t, q.d, q.len, x, p, j);
                body_seq_pool_bwd((dl_seq_pool_kind)k, q.t, q.d, q.len, x, dy, dx, j);
            }
            snprintf(what, sizeof(what), "seq_pool_fwd_%s%s", kinds[k], with ? "" : "_all");
            expect_close(what, p, cp, ny);
            snprintf(what, sizeof(what), "seq_pool_bwd_%s%s", kinds[k], with ? "" : "_all");
            expect_close(what, dx, cdx, nx);
            be->ops->release(be, cp);
            be->ops->release(be, cdy);
            be->ops->release(be, cdx);
            free(p);
            free(dy);
            free(dx);
        }
        be->ops->release(be, cx);
        be->ops->release(be, cy);
        free(x);
        free(y);
    }
}
