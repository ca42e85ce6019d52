/* test_layers.c: central-difference gradient checks of every layer type and
 * both losses on tiny models, the loss values, dropout masks and batchnorm
 * running statistics and inference mode. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <cblas.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "nn/dl_nn.h"
#include "tensor/cpu/cpu.h"

/* Per element: |analytic - numeric| <= ATOL + RTOL * max(|analytic|, |numeric|).
 * Gradients here are about 0.01 to 1; a wrong sign on any element above 2e-4
 * or a factor of 2 above 6e-4 fails. Per tensor the error norm must also stay
 * under NORM_RTOL of the gradient norm. Measured errors stay under a tenth of
 * these bounds (float32 forward passes, EPS = 1e-3). */
#define ATOL       3e-4
#define RTOL       5e-3
#define NORM_RTOL  1e-2
#define EPS        1e-3f   /* finite-difference step */
#define PER_TENSOR 24      /* about this many elements checked per large tensor */
#define MAX_X      (1 << 17)
#define MAX_OUT    (1 << 15)

static dl_backend *be;
static dl_model_conf *conf;
static dl_model *m;
static dl_rng rng;

/* The batch of the current case: host memory serves as CPU backend memory. */
static int64_t nb;
static float x[MAX_X];
static int32_t labels[16];
static float targets[MAX_OUT];

static void setup(void)
{
    be = fx_cpu_backend();
    dl_rng_seed(&rng, 20240611);
}

/* Frees the model of the case, so that a case can build another. */
static void drop_model(void)
{
    dl_model_free(m);
    dl_model_conf_free(conf);
    m = NULL;
    conf = NULL;
}

static void teardown(void)
{
    drop_model();
    dl_backend_free(be);
    be = NULL;
}

TestSuite(layers, .init = setup, .fini = teardown, .timeout = 60);

/* ---- helpers ------------------------------------------------------------ */

/* Builds `m` from an input shape, a layer list and a loss, written with '
 * for " to keep the C strings readable. */
static void build(const char *shape, const char *layers, const char *loss)
{
    char text[4096];
    int len = snprintf(text, sizeof(text),
                       "{'name': 't', 'input': {'shape': %s}, 'layers': [%s], "
                       "'loss': '%s'}", shape, layers, loss);
    cr_assert(len > 0 && len < (int)sizeof(text));
    dl_err err = {0};
    cr_assert_eq(dl_model_conf_parse(fx_dq(text), (size_t)len, "test.json", &conf, &err),
                 DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_new(be, conf, 7, &m, &err), DL_OK, "%s", err.msg);
}

static bool is_mse(void) { return conf->loss == DL_LOSS_MSE; }

static float uniform(float lo, float hi) { return lo + (hi - lo) * dl_rng_uniform(&rng); }

/* A batch of n samples: inputs uniform in [lo, hi), random labels and
 * targets in [-1, 1). */
static void make_batch(int64_t n, float lo, float hi)
{
    int64_t din = dl_model_in_dim(m), dout = dl_model_out_dim(m);
    cr_assert(n <= 16 && n * din <= MAX_X && n * dout <= MAX_OUT);
    nb = n;
    for (int64_t i = 0; i < n * din; i++)
        x[i] = uniform(lo, hi);
    for (int64_t i = 0; i < n; i++)
        labels[i] = (int32_t)dl_rng_below(&rng, (uint64_t)dout);
    for (int64_t i = 0; i < n * dout; i++)
        targets[i] = uniform(-1.0f, 1.0f);
}

static const float *forward(bool train)
{
    const float *y = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_model_forward(m, x, nb, train, &y, &err), DL_OK, "%s", err.msg);
    return y;
}

/* Loss of the last forward pass with grad_scale 1/batch; loss_sum * scale. */
static double loss(bool want_grad)
{
    double sum = 0.0;
    int64_t correct = 0;
    dl_err err = {0};
    cr_assert_eq(dl_model_loss(m, is_mse() ? NULL : labels, is_mse() ? targets : NULL,
                               1.0f / (float)nb, want_grad, &sum, &correct, &err),
                 DL_OK, "%s", err.msg);
    return sum / (double)nb;
}

/* The training loss as a function of the parameters, for finite differences. */
static double loss_now(void)
{
    forward(true);
    return loss(false);
}

/* zero_grad, forward, loss, backward; the gradient buffer (borrowed). */
static const float *analytic_grads(void)
{
    dl_err err = {0};
    int64_t n;
    dl_model_zero_grad(m);
    forward(true);
    loss(true);
    cr_assert_eq(dl_model_backward(m, &err), DL_OK, "%s", err.msg);
    return dl_model_grads(m, &n);
}

/* Data of the named tensor (parameter or state). */
static float *tensor(const char *want, int64_t *numel)
{
    int i = dl_model_tensor_index(m, want);
    cr_assert_geq(i, 0, "no tensor named %s", want);
    const char *name;
    int ndim;
    const int64_t *shape;
    float *data;
    dl_model_tensor_at(m, i, &name, &ndim, &shape, &data);
    if (numel)
        *numel = dl_shape_numel(ndim, shape);
    return data;
}

/* Checks analytic against central-difference gradients for every trainable
 * tensor: all elements of small ones, an evenly spread subset of about
 * PER_TENSOR elements of larger ones. Fails when the gradients
 * are all about zero: such a check would prove nothing. */
static void check_grads(void)
{
    int64_t np;
    float *p = dl_model_params(m, &np);
    float *g = malloc((size_t)np * sizeof(float));
    cr_assert_not_null(g);
    memcpy(g, analytic_grads(), (size_t)np * sizeof(float));

    double all_n2 = 0.0;
    int checked = 0;
    for (int t = 0; t < dl_model_tensor_count(m); t++) {
        const char *name;
        int ndim;
        const int64_t *shape;
        float *data;
        dl_model_tensor_at(m, t, &name, &ndim, &shape, &data);
        uintptr_t at = (uintptr_t)data, lo = (uintptr_t)p, hi = (uintptr_t)(p + np);
        if (at < lo || at >= hi)
            continue;                     /* running statistics: not trained */
        int64_t numel = dl_shape_numel(ndim, shape), off = data - p;
        int64_t step = numel > PER_TENSOR ? numel / PER_TENSOR : 1;
        int64_t k = step > 1 ? (int64_t)dl_rng_below(&rng, (uint64_t)step) : 0;
        double d2 = 0.0, n2 = 0.0;
        for (; k < numel; k += step) {
            int64_t i = off + k;
            float orig = p[i], up = orig + EPS, dn = orig - EPS;
            p[i] = up;
            double lp = loss_now();
            p[i] = dn;
            double lm = loss_now();
            p[i] = orig;
            double num = (lp - lm) / ((double)up - (double)dn), an = g[i];
            cr_expect(fabs(an - num) <= ATOL + RTOL * fmax(fabs(an), fabs(num)),
                      "%s[%lld]: analytic %.6g, numeric %.6g", name, (long long)k,
                      an, num);
            d2 += (an - num) * (an - num);
            n2 += num * num;
            checked++;
        }
        cr_expect(sqrt(d2) <= NORM_RTOL * sqrt(n2) + ATOL,
                  "%s: error norm %.4g for gradient norm %.4g", name, sqrt(d2), sqrt(n2));
        all_n2 += n2;
    }
    cr_expect(checked > 0);
    cr_expect(sqrt(all_n2) > 1e-2, "gradient norm %.3g: nothing was tested", sqrt(all_n2));
    free(g);
}

/* z (rows, out) = x (rows, in) W^T + b from the named dense layer, on the host. */
static void host_dense(const char *layer, const float *in, int64_t rows,
                       int64_t nin, int64_t nout, double *z)
{
    char wn[80], bn[80];
    snprintf(wn, sizeof(wn), "%s.weight", layer);
    snprintf(bn, sizeof(bn), "%s.bias", layer);
    const float *w = tensor(wn, NULL), *b = tensor(bn, NULL);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < nout; o++) {
            double s = b[o];
            for (int64_t j = 0; j < nin; j++)
                s += (double)in[r * nin + j] * w[o * nin + j];
            z[r * nout + o] = s;
        }
}

/* ---- losses --------------------------------------------------------------- */

Test(layers, softmax_cross_entropy_value)
{
    build("[6]", "{'name': 'fc', 'type': 'dense', 'units': 4}", "softmax_cross_entropy");
    make_batch(4, -2.0f, 2.0f);
    const float *y = forward(true);
    double want = 0.0;
    int64_t want_correct = 0;
    for (int64_t r = 0; r < nb; r++) {
        const float *z = y + r * 4;
        double mx = z[0], s = 0.0;
        int arg = 0;
        for (int j = 1; j < 4; j++)
            if (z[j] > z[arg])
                arg = j;
        mx = z[arg];
        for (int j = 0; j < 4; j++)
            s += exp(z[j] - mx);
        want += log(s) + mx - z[labels[r]];
        want_correct += arg == labels[r];
    }
    double sum;
    int64_t correct;
    dl_err err = {0};
    cr_assert_eq(dl_model_loss(m, labels, NULL, 0.25f, false, &sum, &correct, &err), DL_OK);
    cr_expect(fabs(sum - want) <= 1e-5 * want, "loss_sum %.8g, want %.8g", sum, want);
    cr_expect_eq(correct, want_correct);
}

Test(layers, mse_value_with_targets_and_with_labels)
{
    build("[6]", "{'name': 'fc', 'type': 'dense', 'units': 3}", "mse");
    make_batch(4, -1.0f, 1.0f);
    const float *y = forward(true);
    double with_t = 0.0, with_l = 0.0;
    int64_t want_correct = 0;
    for (int64_t r = 0; r < nb; r++) {
        int arg = 0;
        for (int j = 0; j < 3; j++) {
            double d = y[r * 3 + j] - targets[r * 3 + j];
            double e = y[r * 3 + j] - (j == labels[r] ? 1.0 : 0.0);
            with_t += d * d / 3.0;   /* per sample: mean over the outputs */
            with_l += e * e / 3.0;
            if (y[r * 3 + j] > y[r * 3 + arg])
                arg = j;
        }
        want_correct += arg == labels[r];
    }
    double sum;
    int64_t correct;
    dl_err err = {0};
    cr_assert_eq(dl_model_loss(m, NULL, targets, 0.25f, false, &sum, &correct, &err), DL_OK);
    cr_expect(fabs(sum - with_t) <= 1e-5 * with_t, "targets: loss_sum %.8g, want %.8g", sum, with_t);
    cr_assert_eq(dl_model_loss(m, labels, NULL, 0.25f, false, &sum, &correct, &err), DL_OK);
    cr_expect(fabs(sum - with_l) <= 1e-5 * with_l, "labels: loss_sum %.8g, want %.8g", sum, with_l);
    cr_expect_eq(correct, want_correct);
}

Test(layers, softmax_cross_entropy_gradient)
{
    build("[6]", "{'name': 'fc', 'type': 'dense', 'units': 4}", "softmax_cross_entropy");
    make_batch(3, -1.0f, 1.0f);
    check_grads();
}

Test(layers, mse_gradient)
{
    build("[6]", "{'name': 'fc', 'type': 'dense', 'units': 3}", "mse");
    make_batch(4, -1.0f, 1.0f);
    check_grads();
}

Test(layers, loss_refuses_bad_labels_and_missing_forward)
{
    build("[6]", "{'name': 'fc', 'type': 'dense', 'units': 3}", "softmax_cross_entropy");
    double sum;
    int64_t correct;
    dl_err err = {0};
    cr_expect_eq(dl_model_loss(m, labels, NULL, 1.0f, true, &sum, &correct, &err),
                 DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "before any forward"), "message was: %s", err.msg);
    make_batch(3, -1.0f, 1.0f);
    forward(true);
    labels[1] = 3;
    cr_expect_eq(dl_model_loss(m, labels, NULL, 1.0f, true, &sum, &correct, &err),
                 DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "label 3"), "message was: %s", err.msg);
    cr_expect_eq(dl_model_backward(m, &err), DL_ERR_INVALID, "backward after a refused loss");
}

/* ---- dense, flatten, activations, softmax --------------------------------- */

Test(layers, dense_chain)
{
    build("[6]", "{'name': 'fc1', 'type': 'dense', 'units': 5},"
                 "{'name': 'fc2', 'type': 'dense', 'units': 3, 'bias': false}", "mse");
    make_batch(4, -1.0f, 1.0f);
    check_grads();
}

/* Inference batches from 1 to 130 samples through a dense layer and ReLU,
 * against a direct sum. 784 -> 300: thin batches go to the GEMM in column
 * chunks (the last one narrower; 300 columns leave one) or to the thin
 * kernel in blocks of 3 x 4, wider ones whole, and every column of every
 * sample must be there. 13 -> 7: the thin kernel's last k % 8 values and
 * its narrower blocks at both edges. meson runs this file with
 * DLSERVE_CPU_GEMM=thin and (on oneDNN) =openblas. */
static void dense_batches(int64_t in, int64_t units)
{
    char layers[160];
    snprintf(layers, sizeof(layers),
             "{'name': 'fc', 'type': 'dense', 'units': %lld}, {'name': 'r', 'type': 'relu'}",
             (long long)units);
    char shape[32];
    snprintf(shape, sizeof(shape), "[%lld]", (long long)in);
    build(shape, layers, "mse");
    const float *wt = tensor("fc.weight", NULL), *b = tensor("fc.bias", NULL);
    static const int64_t batches[] = {1, 2, 3, 4, 5, 8, 13, 16, 17, 31, 64, 65, 130};
    for (size_t t = 0; t < sizeof(batches) / sizeof(batches[0]); t++) {
        nb = batches[t];
        for (int64_t i = 0; i < nb * in; i++)
            x[i] = uniform(-1.0f, 1.0f);
        const float *y = forward(false);
        int bad = 0;
        for (int64_t n = 0; n < nb; n++)
            for (int64_t o = 0; o < units; o++) {
                double s = b[o];
                for (int64_t k = 0; k < in; k++)
                    s += (double)wt[o * in + k] * x[n * in + k];
                s = s > 0 ? s : 0;
                float got = y[n * units + o];
                if (fabs(got - s) > 1e-4 * (1 + fabs(s)) && bad++ < 5)
                    cr_expect_fail("%lld -> %lld, batch %lld: y[%lld,%lld] = %g, want %g",
                                   (long long)in, (long long)units, (long long)nb,
                                   (long long)n, (long long)o, got, s);
            }
        cr_expect_eq(bad, 0, "%lld -> %lld, batch %lld: %d outputs differ", (long long)in,
                     (long long)units, (long long)nb, bad);
    }
}

Test(layers, dense_forward_every_batch_width)
{
    dense_batches(784, 300);
    drop_model();
    dense_batches(13, 7);
}

typedef void thin_kernel(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float *c, int64_t ldc);

/* A thin kernel on every edge: m and n 1 to 9 (each count of 3 x 4 and
 * 4 x 4 blocks and leftovers), k from 1 to 33 (with and without the
 * masked tails of 8 and 16), operands inside wider rows, and C written in
 * two column halves through offset pointers as the backend's tasks do.
 * Cells around each C must stay untouched. */
static void thin_edges(thin_kernel *gemm, const char *name)
{
    enum { LD = 40, PAD = -7 };
    static float a[10 * LD], bw[10 * LD], c[10 * LD];
    for (int i = 0; i < 10 * LD; i++) {
        a[i] = uniform(-1.0f, 1.0f);
        bw[i] = uniform(-1.0f, 1.0f);
    }
    static const int64_t ks[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33};
    for (int64_t rows = 1; rows <= 9; rows++)
        for (int64_t cols = 1; cols <= 9; cols++)
            for (size_t t = 0; t < sizeof(ks) / sizeof(ks[0]); t++) {
                int64_t k = ks[t], half = cols / 2;
                for (int i = 0; i < 10 * LD; i++)
                    c[i] = PAD;
                gemm(rows, half, k, a, LD, bw, LD, c, LD);
                gemm(rows, cols - half, k, a, LD, bw + half * LD, LD, c + half, LD);
                for (int64_t i = 0; i < 10; i++)
                    for (int64_t j = 0; j < LD; j++) {
                        double want = PAD;
                        if (i < rows && j < cols) {
                            want = 0;
                            for (int64_t p = 0; p < k; p++)
                                want += (double)a[i * LD + p] * bw[j * LD + p];
                        }
                        float got = c[i * LD + j];
                        cr_assert(fabs(got - want) <= 1e-5 * (1 + fabs(want)),
                                  "%s: m %lld n %lld k %lld: c[%lld,%lld] = %g, want %g", name,
                                  (long long)rows, (long long)cols, (long long)k, (long long)i,
                                  (long long)j, got, want);
                    }
            }
}

/* dl_gemm_thin (the AVX-512 kernel where the CPU has it) and the AVX2
 * kernel, which an AVX-512 CPU would otherwise never run here. */
Test(layers, thin_gemm_every_edge)
{
    thin_edges(dl_gemm_thin, dl_gemm_thin_avx512_usable() ? "avx512" : "thin");
    if (dl_gemm_thin_usable())
        thin_edges(dl_gemm_thin_avx2, "avx2");
}

/* DLSERVE_CPU_GEMM: thin and openblas force a kernel, auto (or nothing)
 * leaves it to the CPU, another word stops the backend with its name. */
Test(layers, gemm_word_chooses_the_thin_kernel)
{
    static const struct { const char *word; int thin; } cases[] = {
        {"thin", 1}, {"openblas", 0}, {"auto", -1}, {"", -1},
    };
    dl_err err = {0};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        setenv("DLSERVE_CPU_GEMM", cases[i].word, 1);
        dl_backend *b = NULL;
        if (cases[i].thin == 1 && !dl_gemm_thin_usable()) {   /* no AVX2 and FMA */
            cr_expect_eq(dl_backend_cpu_new(1, &b, &err), DL_ERR_UNAVAILABLE);
            cr_expect_not_null(strstr(err.msg, "AVX2"), "message was: %s", err.msg);
            continue;
        }
        cr_assert_eq(dl_backend_cpu_new(1, &b, &err), DL_OK, "%s", err.msg);
        bool want = cases[i].thin < 0 ? dl_gemm_thin_preferred() : cases[i].thin;
        cr_expect_eq(b->gemm_thin, want, "DLSERVE_CPU_GEMM=%s", cases[i].word);
        dl_backend_free(b);
    }
    setenv("DLSERVE_CPU_GEMM", "fast", 1);
    dl_backend *b = NULL;
    cr_assert_eq(dl_backend_cpu_new(1, &b, &err), DL_ERR_INVALID);
    cr_expect_null(b);
    cr_expect_not_null(strstr(err.msg, "DLSERVE_CPU_GEMM=fast"), "message was: %s", err.msg);
}

/* auto picks the thin kernel wherever OpenBLAS would pack the weights:
 * every core but the SkylakeX family's, AVX-512 ones included (OpenBLAS
 * 0.3.21 runs AMD's Zen 5 as Haswell, and packs there). */
Test(layers, thin_kernel_preferred_where_openblas_packs)
{
    const char *core = openblas_get_corename();
    bool small = strcasecmp(core, "skylakex") == 0 || strcasecmp(core, "cooperlake") == 0 ||
                 strcasecmp(core, "sapphirerapids") == 0;
    cr_expect_eq(dl_gemm_thin_preferred(), dl_gemm_thin_usable() && !small,
                 "OpenBLAS core %s, AVX2+FMA %d", core, dl_gemm_thin_usable());
}

Test(layers, backward_accumulates)
{
    build("[6]", "{'name': 'fc1', 'type': 'dense', 'units': 5},"
                 "{'name': 'act', 'type': 'tanh'},"
                 "{'name': 'fc2', 'type': 'dense', 'units': 3}", "softmax_cross_entropy");
    make_batch(3, -1.0f, 1.0f);
    int64_t n;
    dl_model_grads(m, &n);
    float *once = malloc((size_t)n * sizeof(float));
    cr_assert_not_null(once);
    memcpy(once, analytic_grads(), (size_t)n * sizeof(float));
    dl_err err = {0};
    forward(true);
    loss(true);
    cr_assert_eq(dl_model_backward(m, &err), DL_OK, "%s", err.msg);
    const float *twice = dl_model_grads(m, &n);
    for (int64_t i = 0; i < n; i++)
        cr_expect(fabsf(twice[i] - 2.0f * once[i]) <= 1e-6f * (1.0f + fabsf(once[i])),
                  "grad[%lld]: %g after two passes, %g after one", (long long)i,
                  twice[i], once[i]);
    free(once);
}

/* What backward's hook saw: each call's layer and range, and a copy of
 * the gradients in that range at that moment. */
typedef struct hook_log {
    int     calls, layer[8];
    int64_t begin[8], end[8];
    float   seen[256];
    int     fail_at;           /* layer whose call fails; -1: none */
} hook_log;

static dl_status record_hook(void *ctx, int layer, int64_t begin, int64_t end, dl_err *err)
{
    hook_log *h = ctx;
    cr_assert(h->calls < 8 && end <= 256);
    h->layer[h->calls] = layer;
    h->begin[h->calls] = begin;
    h->end[h->calls] = end;
    int64_t n;
    const float *g = dl_model_grads(m, &n);
    memcpy(h->seen + begin, g + begin, (size_t)(end - begin) * sizeof(float));
    h->calls++;
    if (layer == h->fail_at)
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "hook refused layer %d", layer);
    return DL_OK;
}

Test(layers, backward_hook_ranges_tile_the_gradients_last_layer_first)
{
    build("[6]", "{'name': 'fc1', 'type': 'dense', 'units': 5},"
                 "{'name': 'act', 'type': 'tanh'},"
                 "{'name': 'fc2', 'type': 'dense', 'units': 4},"
                 "{'name': 'fc3', 'type': 'dense', 'units': 3}", "softmax_cross_entropy");
    make_batch(3, -1.0f, 1.0f);
    int nl = dl_model_layer_count(m);
    cr_assert_eq(nl, 4);
    hook_log h = { .fail_at = -1 };
    dl_err err = {0};
    int64_t n;
    dl_model_zero_grad(m);
    forward(true);
    loss(true);
    cr_assert_eq(dl_model_backward_hooked(m, record_hook, &h, &err), DL_OK, "%s", err.msg);
    const float *g = dl_model_grads(m, &n);
    cr_assert_eq(n, (6 * 5 + 5) + (5 * 4 + 4) + (4 * 3 + 3));
    cr_assert_eq(h.calls, nl, "one call per layer");
    for (int c = 0; c < nl; c++) {
        int i = nl - 1 - c;
        int64_t b, e;
        dl_model_grad_range(m, i, &b, &e);
        cr_expect_eq(h.layer[c], i, "call %d: layer %d, want %d (last first)", c, h.layer[c], i);
        cr_expect(h.begin[c] == b && h.end[c] == e, "layer %d: [%lld, %lld) vs range [%lld, %lld)",
                  i, (long long)h.begin[c], (long long)h.end[c], (long long)b, (long long)e);
        /* layer order: each range starts where the previous layer's ends */
        int64_t pb, pe;
        if (i > 0)
            dl_model_grad_range(m, i - 1, &pb, &pe);
        cr_expect_eq(b, i > 0 ? pe : 0, "layer %d starts at %lld", i, (long long)b);
    }
    cr_expect_eq(h.end[0], n, "the last layer ends the buffer");
    cr_expect_eq(h.begin[2], h.end[2], "tanh has no parameters: an empty range");
    for (int64_t k = 0; k < n; k++)
        cr_expect_eq(h.seen[k], g[k], "grad[%lld] changed after its layer's hook", (long long)k);

    /* A failing hook stops the pass with its error. */
    hook_log stop = { .fail_at = 2 };
    forward(true);
    loss(true);
    cr_expect_eq(dl_model_backward_hooked(m, record_hook, &stop, &err), DL_ERR_UNAVAILABLE);
    cr_expect_eq(stop.calls, 2, "no call after the failing one");
    cr_expect_not_null(strstr(err.msg, "hook refused layer 2"), "message was: %s", err.msg);
}

/* input [6] -> fc1 dense 5 -> <act> -> fc2 dense 3, MSE on random targets. */
static void activation_case(const char *type)
{
    char layers[256];
    snprintf(layers, sizeof(layers),
             "{'name': 'fc1', 'type': 'dense', 'units': 5},"
             "{'name': 'act', 'type': '%s'},"
             "{'name': 'fc2', 'type': 'dense', 'units': 3}", type);
    build("[6]", layers, "mse");
    make_batch(4, -1.5f, 1.5f);
}

Test(layers, relu)
{
    activation_case("relu");
    /* Keep every pre-activation 10 EPS from the kink: a step of EPS on a
     * weight or bias moves it by at most EPS * max(1, |x|) = EPS. */
    double z[4 * 5], margin = 0.0;
    int neg = 0;
    for (int tries = 0; tries < 1000 && margin < 10.0 * EPS; tries++) {
        make_batch(4, -1.0f, 1.0f);
        host_dense("fc1", x, 4, 6, 5, z);
        margin = INFINITY;
        neg = 0;
        for (int i = 0; i < 4 * 5; i++) {
            margin = fmin(margin, fabs(z[i]));
            neg += z[i] < 0.0;
        }
    }
    cr_assert(margin >= 10.0 * EPS, "no input kept away from the kink");
    cr_assert(neg > 0 && neg < 20, "both sides of relu must be used");
    check_grads();
}

Test(layers, tanh)
{
    activation_case("tanh");
    check_grads();
}

Test(layers, sigmoid)
{
    activation_case("sigmoid");
    check_grads();
}

Test(layers, softmax_with_mse)
{
    activation_case("softmax");
    check_grads();
}

Test(layers, softmax_forward_rows_sum_to_one)
{
    build("[2, 4]", "{'name': 'sm', 'type': 'softmax'}", "mse");
    make_batch(3, -3.0f, 3.0f);
    const float *y = forward(false);
    for (int64_t r = 0; r < nb * 2; r++) {
        double s = 0.0, mx = -INFINITY;
        for (int j = 0; j < 4; j++)
            mx = fmax(mx, x[r * 4 + j]);
        for (int j = 0; j < 4; j++)
            s += exp(x[r * 4 + j] - mx);
        for (int j = 0; j < 4; j++) {
            double want = exp(x[r * 4 + j] - mx) / s;
            cr_expect(fabs(y[r * 4 + j] - want) <= 1e-6, "row %lld col %d: %g, want %g",
                      (long long)r, j, y[r * 4 + j], want);
        }
    }
}

Test(layers, flatten_after_dense_on_last_dim)
{
    /* dense acts on the last dimension: [2, 3, 4] -> [2, 3, 3] */
    build("[2, 3, 4]", "{'name': 'fc1', 'type': 'dense', 'units': 3},"
                       "{'name': 'act', 'type': 'tanh'},"
                       "{'name': 'flat', 'type': 'flatten'},"
                       "{'name': 'fc2', 'type': 'dense', 'units': 4}",
          "softmax_cross_entropy");
    make_batch(3, -1.0f, 1.0f);
    cr_assert_eq(dl_model_out_dim(m), 4);
    check_grads();
}

/* ---- convolution and pooling -------------------------------------------- */

Test(layers, conv2d_stride_and_padding)
{
    /* c1 keeps 7x7; c2 gives 4x4 with stride 2; c1's gradient needs c2's dx */
    build("[2, 7, 7]",
          "{'name': 'c1', 'type': 'conv2d', 'filters': 3, 'kernel_size': 3, 'padding': 1},"
          "{'name': 'c2', 'type': 'conv2d', 'filters': 3, 'kernel_size': 3, 'stride': 2, 'padding': 1},"
          "{'name': 'flat', 'type': 'flatten'},"
          "{'name': 'fc', 'type': 'dense', 'units': 4}", "softmax_cross_entropy");
    make_batch(3, -1.0f, 1.0f);
    cr_assert_eq(conf->layers[1].kh, 3);
    check_grads();
}

Test(layers, conv2d_rectangular_kernels)
{
    /* c1: [1,6,5] -> [2,6,2]; c2: [2,6,2] -> [3,3,2] */
    build("[1, 6, 5]",
          "{'name': 'c1', 'type': 'conv2d', 'filters': 2, 'kernel_size': [3, 2],"
          " 'stride': [1, 2], 'padding': [1, 0], 'bias': false},"
          "{'name': 'c2', 'type': 'conv2d', 'filters': 3, 'kernel_size': [2, 3],"
          " 'stride': [2, 1], 'padding': [0, 1]},"
          "{'name': 'flat', 'type': 'flatten'},"
          "{'name': 'fc', 'type': 'dense', 'units': 3}", "softmax_cross_entropy");
    cr_assert_eq(dl_model_out_dim(m), 3);
    int64_t n;
    tensor("c2.weight", &n);
    cr_expect_eq(n, 3 * 2 * 2 * 3);
    make_batch(3, -1.0f, 1.0f);
    check_grads();
}

/* Checks the output of the model's only layer, conv2d 'c' over input
 * [C, H, W], against a direct sum on the host. */
static void expect_conv_output(int64_t c, int64_t h, int64_t w)
{
    const dl_layer_conf *l = &conf->layers[0];
    int64_t oc = l->filters, kh = l->kh, kw = l->kw;
    int64_t oh = (h + 2 * l->ph - kh) / l->sh + 1, ow = (w + 2 * l->pw - kw) / l->sw + 1;
    cr_assert_eq(dl_model_out_dim(m), oc * oh * ow);
    const float *wt = tensor("c.weight", NULL), *b = tensor("c.bias", NULL);
    const float *y = forward(false);
    int bad = 0;
    for (int64_t n = 0; n < nb; n++)
        for (int64_t o = 0; o < oc; o++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    double s = b[o];
                    for (int64_t ch = 0; ch < c; ch++)
                        for (int64_t ki = 0; ki < kh; ki++)
                            for (int64_t kj = 0; kj < kw; kj++) {
                                int64_t iy = i * l->sh - l->ph + ki, ix = j * l->sw - l->pw + kj;
                                if (iy >= 0 && iy < h && ix >= 0 && ix < w)
                                    s += (double)wt[((o * c + ch) * kh + ki) * kw + kj] *
                                         x[((n * c + ch) * h + iy) * w + ix];
                            }
                    float got = y[((n * oc + o) * oh + i) * ow + j];
                    if (fabs(got - s) > 1e-5 && bad++ < 5)
                        cr_expect_fail("y[%lld,%lld,%lld,%lld] = %g, want %g", (long long)n,
                                       (long long)o, (long long)i, (long long)j, got, s);
                }
    cr_expect_eq(bad, 0, "%d outputs differ", bad);
}

Test(layers, conv2d_forward_matches_direct_sum)
{
    build("[2, 5, 4]",
          "{'name': 'c', 'type': 'conv2d', 'filters': 3, 'kernel_size': [3, 2],"
          " 'stride': [2, 1], 'padding': [1, 1]}", "mse");
    make_batch(2, -1.0f, 1.0f);
    expect_conv_output(2, 5, 4);
}

/* Large enough (a 4.6 MB im2col matrix for 4 samples) that a backend may
 * split the batch; the last piece is then smaller than the others. */
#define BIG "[8, 48, 48]"

Test(layers, conv2d_large_batch_forward)
{
    build(BIG, "{'name': 'c', 'type': 'conv2d', 'filters': 2, 'kernel_size': 3, 'padding': 1}",
          "mse");
    make_batch(4, -1.0f, 1.0f);
    expect_conv_output(8, 48, 48);
}

Test(layers, conv2d_large_batch_gradient)
{
    /* c1 (1x1) needs c2's input gradient for every sample */
    build(BIG, "{'name': 'c1', 'type': 'conv2d', 'filters': 8, 'kernel_size': 1},"
               "{'name': 'c2', 'type': 'conv2d', 'filters': 2, 'kernel_size': 3, 'padding': 1},"
               "{'name': 'flat', 'type': 'flatten'},"
               "{'name': 'fc', 'type': 'dense', 'units': 3}", "softmax_cross_entropy");
    make_batch(4, -1.0f, 1.0f);
    check_grads();
}

/* Smallest gap between the largest and second largest value of any
 * 3x3 / stride 2 / padding 1 window over (planes, 5, 5). */
static double pool_gap(const double *z, int64_t planes)
{
    double gap = INFINITY;
    for (int64_t p = 0; p < planes; p++)
        for (int oy = 0; oy < 3; oy++)
            for (int ox = 0; ox < 3; ox++) {
                double a = -INFINITY, b = -INFINITY;
                for (int iy = 2 * oy - 1; iy <= 2 * oy + 1; iy++)
                    for (int ix = 2 * ox - 1; ix <= 2 * ox + 1; ix++) {
                        if (iy < 0 || iy >= 5 || ix < 0 || ix >= 5)
                            continue;
                        double v = z[(p * 5 + iy) * 5 + ix];
                        if (v > a) {
                            b = a;
                            a = v;
                        } else if (v > b) {
                            b = v;
                        }
                    }
                gap = fmin(gap, a - b);
            }
    return gap;
}

Test(layers, maxpool_stride_and_padding)
{
    /* fc acts on rows: [2,5,5] -> [2,5,5]; pool 3x3 stride 2 pad 1 -> [2,3,3] */
    build("[2, 5, 5]", "{'name': 'fc', 'type': 'dense', 'units': 5},"
                       "{'name': 'pool', 'type': 'maxpool2d', 'kernel_size': 3,"
                       " 'stride': 2, 'padding': 1},"
                       "{'name': 'flat', 'type': 'flatten'},"
                       "{'name': 'out', 'type': 'dense', 'units': 3}",
          "softmax_cross_entropy");
    cr_assert_eq(dl_model_out_dim(m), 3);
    int64_t nw;
    float *w = tensor("fc.weight", &nw);
    for (int64_t i = 0; i < nw; i++)
        w[i] *= 4.0f;                 /* spread the pooled values */
    /* No ties, and no change of winner under a step: EPS moves each value
     * by at most EPS * |x| <= EPS, so a gap of 3 EPS is safe. */
    double z[3 * 2 * 5 * 5], gap = 0.0;
    for (int tries = 0; tries < 10000 && gap < 3.0 * EPS; tries++) {
        make_batch(3, -1.0f, 1.0f);
        host_dense("fc", x, 3 * 2 * 5, 5, 5, z);
        gap = pool_gap(z, 3 * 2);
    }
    cr_assert(gap >= 3.0 * EPS, "no input without near-ties");
    check_grads();
}

Test(layers, avgpool_stride_and_padding)
{
    /* c keeps [2,5,5]; pool 3x3 stride 2 pad 1 -> [2,3,3], padding counted */
    build("[2, 5, 5]", "{'name': 'c', 'type': 'conv2d', 'filters': 2, 'kernel_size': 3, 'padding': 1},"
                       "{'name': 'pool', 'type': 'avgpool2d', 'kernel_size': 3,"
                       " 'stride': 2, 'padding': 1},"
                       "{'name': 'flat', 'type': 'flatten'},"
                       "{'name': 'out', 'type': 'dense', 'units': 3}",
          "softmax_cross_entropy");
    cr_assert_eq(dl_model_out_dim(m), 3);
    make_batch(3, -1.0f, 1.0f);
    check_grads();
}

Test(layers, pooling_forward_values)
{
    /* One 4x4 plane, window 2x3 stride [2, 1] no padding -> [1, 2, 2]. */
    static const float plane[16] = { 1, 5, 2, 0,  3, 4, 9, 8,
                                    -1, 6, 7, 2,  0, 3, -4, 5 };
    static const float want_max[4] = { 9, 9, 7, 7 };
    static const float want_avg[4] = { 24 / 6.0f, 28 / 6.0f, 11 / 6.0f, 19 / 6.0f };
    const char *types[2] = { "maxpool2d", "avgpool2d" };
    for (int k = 0; k < 2; k++) {
        char layers[160];
        snprintf(layers, sizeof(layers), "{'name': 'pool', 'type': '%s',"
                 " 'kernel_size': [2, 3], 'stride': [2, 1]}", types[k]);
        build("[1, 4, 4]", layers, "mse");
        nb = 1;
        memcpy(x, plane, sizeof(plane));
        const float *y = forward(false);
        for (int i = 0; i < 4; i++)
            cr_expect(fabsf(y[i] - (k ? want_avg : want_max)[i]) <= 1e-6f,
                      "%s[%d] = %g", types[k], i, y[i]);
        dl_model_free(m);
        dl_model_conf_free(conf);
        m = NULL;
        conf = NULL;
    }
}

/* ---- batchnorm -------------------------------------------------------------- */

Test(layers, batchnorm_after_conv)
{
    build("[2, 5, 5]", "{'name': 'c', 'type': 'conv2d', 'filters': 3, 'kernel_size': 3, 'padding': 1},"
                       "{'name': 'bn', 'type': 'batchnorm'},"
                       "{'name': 'act', 'type': 'tanh'},"
                       "{'name': 'flat', 'type': 'flatten'},"
                       "{'name': 'out', 'type': 'dense', 'units': 4}",
          "softmax_cross_entropy");
    /* gamma and beta away from (1, 0) so a mix-up of the two shows */
    float *gamma = tensor("bn.weight", NULL), *beta = tensor("bn.bias", NULL);
    for (int c = 0; c < 3; c++) {
        gamma[c] = 0.5f + 0.4f * (float)c;
        beta[c] = 0.3f - 0.2f * (float)c;
    }
    make_batch(4, -1.0f, 1.0f);
    check_grads();
}

Test(layers, batchnorm_after_dense)
{
    build("[6]", "{'name': 'fc1', 'type': 'dense', 'units': 5},"
                 "{'name': 'bn', 'type': 'batchnorm'},"
                 "{'name': 'act', 'type': 'tanh'},"
                 "{'name': 'fc2', 'type': 'dense', 'units': 3}", "softmax_cross_entropy");
    float *gamma = tensor("bn.weight", NULL), *beta = tensor("bn.bias", NULL);
    for (int c = 0; c < 5; c++) {
        gamma[c] = 1.5f - 0.2f * (float)c;
        beta[c] = -0.2f + 0.1f * (float)c;
    }
    make_batch(4, -1.0f, 1.0f);
    check_grads();
}

/* Input [c, hw] as batchnorm's first layer: after one training pass from
 * (mean 0, var 1) with momentum 0.1 the running statistics are 0.1 * batch
 * mean and 0.9 + 0.1 * unbiased variance; training output uses the batch
 * statistics (biased variance), inference output the running ones. */
static void batchnorm_stats_case(const char *shape, int64_t c, int64_t hw)
{
    const float eps = 1e-3f;
    build(shape, "{'name': 'bn', 'type': 'batchnorm', 'eps': 0.001, 'momentum': 0.1}", "mse");
    float *gamma = tensor("bn.weight", NULL), *beta = tensor("bn.bias", NULL);
    float *rm = tensor("bn.running_mean", NULL), *rv = tensor("bn.running_var", NULL);
    int64_t nstate;
    cr_assert_eq(dl_model_state(m, &nstate), rm, "running_mean opens the state buffer");
    cr_assert_eq(nstate, 2 * c);
    for (int64_t k = 0; k < c; k++) {
        cr_expect(rm[k] == 0.0f && rv[k] == 1.0f, "initial running statistics");
        gamma[k] = 1.5f - 0.5f * (float)k;
        beta[k] = 0.25f * (float)k - 0.3f;
    }
    make_batch(4, -2.0f, 3.0f);
    const float *y = forward(true);
    for (int64_t k = 0; k < c; k++) {
        double s = 0.0, s2 = 0.0, cnt = (double)(nb * hw);
        for (int64_t n = 0; n < nb; n++)
            for (int64_t j = 0; j < hw; j++)
                s += x[(n * c + k) * hw + j];
        double mean = s / cnt;
        for (int64_t n = 0; n < nb; n++)
            for (int64_t j = 0; j < hw; j++)
                s2 += pow(x[(n * c + k) * hw + j] - mean, 2);
        cr_expect(fabs(rm[k] - 0.1 * mean) <= 1e-6, "running_mean[%lld] %g, want %g",
                  (long long)k, rm[k], 0.1 * mean);
        double want_rv = 0.9 + 0.1 * s2 / (cnt - 1.0);
        cr_expect(fabs(rv[k] - want_rv) <= 1e-6 * want_rv, "running_var[%lld] %g, want %g",
                  (long long)k, rv[k], want_rv);
        for (int64_t n = 0; n < nb; n++)
            for (int64_t j = 0; j < hw; j++) {
                int64_t i = (n * c + k) * hw + j;
                double want = (x[i] - mean) / sqrt(s2 / cnt + eps) * gamma[k] + beta[k];
                cr_expect(fabs(y[i] - want) <= 1e-5, "train y[%lld] %g, want %g",
                          (long long)i, y[i], want);
            }
    }
    make_batch(4, -2.0f, 3.0f);          /* a new batch: eval must not use its statistics */
    y = forward(false);
    for (int64_t i = 0; i < nb * c * hw; i++) {
        int64_t k = (i / hw) % c;
        double want = (x[i] - rm[k]) / sqrt((double)rv[k] + eps) * gamma[k] + beta[k];
        cr_expect(fabs(y[i] - want) <= 1e-5, "eval y[%lld] %g, want %g", (long long)i, y[i], want);
    }
}

Test(layers, batchnorm_running_stats_1d)
{
    batchnorm_stats_case("[3]", 3, 1);
}

Test(layers, batchnorm_running_stats_per_channel)
{
    batchnorm_stats_case("[2, 2, 3]", 2, 6);
}

/* ---- dropout -------------------------------------------------------------- */

Test(layers, dropout_rate_zero_is_identity)
{
    build("[6]", "{'name': 'fc1', 'type': 'dense', 'units': 5},"
                 "{'name': 'drop', 'type': 'dropout', 'rate': 0},"
                 "{'name': 'fc2', 'type': 'dense', 'units': 3}", "mse");
    make_batch(4, -1.0f, 1.0f);
    float eval[4 * 3];
    memcpy(eval, forward(false), sizeof(eval));
    const float *y = forward(true);
    for (int i = 0; i < 4 * 3; i++)
        cr_expect_eq(y[i], eval[i], "output %d differs in training", i);
    check_grads();
}

Test(layers, dropout_statistics)
{
    /* rate 0.2 (not 0.5) so that rate and keep probability cannot be swapped */
    build("[256]", "{'name': 'drop', 'type': 'dropout', 'rate': 0.2}", "mse");
    make_batch(16, 1.5f, 1.5f);
    const float *y = forward(false);
    for (int64_t i = 0; i < nb * 256; i++)
        cr_assert_eq(y[i], 1.5f, "inference must not drop");
    y = forward(true);
    static float first[16 * 256];
    memcpy(first, y, sizeof(first));
    int64_t zeros = 0, count = nb * 256;
    double sum = 0.0;
    for (int64_t i = 0; i < count; i++) {
        cr_assert(y[i] == 0.0f || fabsf(y[i] - 1.5f / 0.8f) <= 1e-6f, "y[%lld] = %g",
                  (long long)i, y[i]);
        zeros += y[i] == 0.0f;
        sum += y[i];
    }
    /* 4096 draws: the zero fraction's sd is 0.006 and the mean's 0.019 */
    cr_expect(fabs((double)zeros / (double)count - 0.2) < 0.03, "zero fraction %g",
              (double)zeros / (double)count);
    cr_expect(fabs(sum / (double)count - 1.5) < 0.1, "E[y] %g, want 1.5", sum / (double)count);
    y = forward(true);
    int64_t same = 0;
    for (int64_t i = 0; i < count; i++)
        same += y[i] == first[i];
    cr_expect(same < count * 9 / 10, "a second pass must draw a fresh mask (%lld of %lld same)",
              (long long)same, (long long)count);
}

Test(layers, dropout_backward_uses_forward_mask)
{
    /* fc [16] -> [16], dropout last, MSE: dz = 2 (y - t) / (16 B) * mask */
    build("[16]", "{'name': 'fc', 'type': 'dense', 'units': 16},"
                  "{'name': 'drop', 'type': 'dropout', 'rate': 0.5}", "mse");
    make_batch(4, -1.0f, 1.0f);
    double z[4 * 16], dz[4 * 16];
    host_dense("fc", x, 4, 16, 16, z);

    dl_err err = {0};
    dl_model_zero_grad(m);
    const float *y = forward(true);
    int zeros = 0;
    for (int i = 0; i < 4 * 16; i++) {
        bool dropped = y[i] == 0.0f;
        cr_assert(dropped || fabs(y[i] - 2.0 * z[i]) <= 1e-5 * (1.0 + fabs(z[i])),
                  "y[%d] = %g for z %g: neither dropped nor scaled by 2", i, y[i], z[i]);
        zeros += dropped;
        dz[i] = dropped ? 0.0 : 2.0 * (y[i] - targets[i]) / (16.0 * 4.0) * 2.0;
    }
    cr_assert(zeros > 8 && zeros < 56, "%d of 64 dropped", zeros);
    loss(true);
    cr_assert_eq(dl_model_backward(m, &err), DL_OK, "%s", err.msg);

    const float *gw = dl_model_grads(m, &(int64_t){0}), *gb = gw + 16 * 16;
    for (int o = 0; o < 16; o++) {
        double wb = 0.0;
        for (int r = 0; r < 4; r++)
            wb += dz[r * 16 + o];
        cr_expect(fabs(gb[o] - wb) <= 1e-5, "bias grad[%d] %g, want %g", o, gb[o], wb);
        for (int j = 0; j < 16; j++) {
            double ww = 0.0;
            for (int r = 0; r < 4; r++)
                ww += dz[r * 16 + o] * x[r * 16 + j];
            cr_expect(fabs(gw[o * 16 + j] - ww) <= 1e-5, "weight grad[%d,%d] %g, want %g",
                      o, j, gw[o * 16 + j], ww);
        }
    }
}

/* ---- embedding -------------------------------------------------------------- */

Test(layers, embedding_table_gradient)
{
    /* ids [5] -> [5, 4] -> dense on the last dim [5, 2] -> flatten -> 3 */
    build("[5]", "{'name': 'emb', 'type': 'embedding', 'num_embeddings': 7, 'dim': 4},"
                 "{'name': 'fc1', 'type': 'dense', 'units': 2},"
                 "{'name': 'flat', 'type': 'flatten'},"
                 "{'name': 'fc2', 'type': 'dense', 'units': 3}", "softmax_cross_entropy");
    make_batch(3, 0.0f, 0.0f);
    /* Repeats within and across samples; id 4 unused (its gradient is 0). */
    static const float ids[15] = { 0, 3, 3, 6, 1,  2, 2, 2, 5, 0,  6, 5, 3, 1, 1 };
    memcpy(x, ids, sizeof(ids));
    const float *g = analytic_grads();
    int64_t nt;
    const float *table = tensor("emb.weight", &nt);
    int64_t np;
    const float *gt = g + (table - dl_model_params(m, &np));
    for (int k = 0; k < 4; k++)
        cr_expect_eq(gt[4 * 4 + k], 0.0f, "unused row 4 got a gradient");
    check_grads();
}

Test(layers, embedding_forward_and_bad_ids)
{
    build("[3]", "{'name': 'emb', 'type': 'embedding', 'num_embeddings': 5, 'dim': 2}", "mse");
    const float *table = tensor("emb.weight", NULL);
    nb = 2;
    static const float ids[6] = { 4, 0, 4, 2, 1, 3 };
    memcpy(x, ids, sizeof(ids));
    const float *y = forward(false);
    for (int i = 0; i < 6; i++)
        for (int k = 0; k < 2; k++)
            cr_expect_eq(y[i * 2 + k], table[(int)ids[i] * 2 + k]);

    static const float bad[3][3] = { { 0, 5, 1 }, { 0, -1, 1 }, { 0, 1.5f, 1 } };
    for (int b = 0; b < 3; b++) {
        memcpy(x, bad[b], sizeof(bad[b]));
        nb = 1;
        dl_err err = {0};
        cr_expect_eq(dl_model_forward(m, x, 1, false, &y, &err), DL_ERR_INVALID);
        cr_expect_not_null(strstr(err.msg, "embedding id"), "message was: %s", err.msg);
        cr_expect_not_null(strstr(err.msg, "emb"), "message names the layer: %s", err.msg);
    }
    double sum;
    int64_t correct;
    dl_err err = {0};
    cr_expect_eq(dl_model_loss(m, NULL, targets, 1.0f, true, &sum, &correct, &err),
                 DL_ERR_INVALID, "loss after a failed forward pass");
}
