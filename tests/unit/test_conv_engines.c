/* test_conv_engines.c: the CPU's two convolution and pooling engines (im2col
 * + OpenBLAS, and oneDNN) against each other: the same model, weights and
 * batch give the same outputs and parameter gradients to 1e-5, for strides,
 * padding, windows short of the edge, rectangular windows, fused
 * activations (unary ones as oneDNN's post-ops in inference), both pooling
 * kinds and the blocked layouts oneDNN keeps between layers and across a
 * residual graph's joins. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "nn/dl_nn.h"
#include "nn/model.h"      /* a layer's planned layout */

#define TOL 1e-5     /* per element, relative to the tensor's largest magnitude (>= 1) */
#define BATCH 5

typedef struct side {
    dl_backend    *be;
    dl_model_conf *conf;
    dl_model      *m;
} side;

static side im2col, onednn;

static void side_free(side *s)
{
    dl_model_free(s->m);
    dl_model_conf_free(s->conf);
    dl_backend_free(s->be);
    memset(s, 0, sizeof(*s));
}

static void teardown(void)
{
    side_free(&im2col);
    side_free(&onednn);
}

TestSuite(conv_engines, .fini = teardown, .timeout = 60);

/* A backend with the given engine; the oneDNN one is skipped (not failed)
 * only in a build without it. */
static void open_side(side *s, dl_conv_engine engine)
{
    dl_backend_params p = { .threads = 2, .conv = engine };
    dl_err err = {0};
    dl_status st = dl_backend_new("cpu", &p, &s->be, &err);
#ifndef DL_HAVE_DNNL
    if (engine == DL_CONV_ONEDNN) {
        cr_assert_eq(st, DL_ERR_UNAVAILABLE, "%s", err.msg);
        cr_skip_test("oneDNN is not built in");
    }
#endif
    cr_assert_eq(st, DL_OK, "%s", err.msg);
    cr_assert_str_eq(dl_backend_conv_engine(s->be),
                     engine == DL_CONV_ONEDNN ? "onednn" : "im2col");
}

static void build(side *s, const char *shape, const char *layers)
{
    char text[4096];
    int len = snprintf(text, sizeof(text),
                       "{'name': 't', 'input': {'shape': %s}, 'layers': [%s], "
                       "'loss': 'softmax_cross_entropy'}", shape, layers);
    cr_assert(len > 0 && len < (int)sizeof(text));
    dl_err err = {0};
    cr_assert_eq(dl_model_conf_parse(fx_dq(text), (size_t)len, "test.json", &s->conf, &err),
                 DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_new(s->be, s->conf, 11, &s->m, &err), DL_OK, "%s", err.msg);
}

/* Largest |a - b| over n values, relative to max(1, largest |b|). */
static double rel_gap(const float *a, const float *b, int64_t n)
{
    double gap = 0.0, big = 1.0;
    for (int64_t i = 0; i < n; i++) {
        gap = fmax(gap, fabs((double)a[i] - b[i]));
        big = fmax(big, fabs((double)b[i]));
    }
    return gap / big;
}

/* One training step's forward and backward on side s: its outputs (copied
 * into out) and its gradient buffer (borrowed). */
static const float *step(side *s, const float *x, const int32_t *labels, float *out)
{
    dl_err err = {0};
    const float *y = NULL;
    double loss = 0.0;
    int64_t correct = 0;
    dl_model_zero_grad(s->m);
    cr_assert_eq(dl_model_forward(s->m, x, BATCH, true, &y, &err), DL_OK, "%s", err.msg);
    memcpy(out, y, (size_t)(BATCH * dl_model_out_dim(s->m)) * sizeof(float));
    cr_assert_eq(dl_model_loss(s->m, labels, NULL, 1.0f / BATCH, true, &loss, &correct, &err),
                 DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_backward(s->m, &err), DL_OK, "%s", err.msg);
    int64_t n;
    return dl_model_grads(s->m, &n);
}

/* Builds the model on both engines, runs a training step and an inference
 * pass on each, and compares outputs and every parameter gradient. */
static void compare(const char *shape, const char *layers)
{
    open_side(&im2col, DL_CONV_IM2COL);
    open_side(&onednn, DL_CONV_ONEDNN);
    build(&im2col, shape, layers);
    build(&onednn, shape, layers);
    int64_t din = dl_model_in_dim(im2col.m), dout = dl_model_out_dim(im2col.m), np, np2;
    float *x = malloc((size_t)(BATCH * din) * sizeof(float));
    float *y1 = malloc((size_t)(BATCH * dout) * sizeof(float));
    float *y2 = malloc((size_t)(BATCH * dout) * sizeof(float));
    cr_assert(x && y1 && y2);
    dl_rng rng;
    dl_rng_seed(&rng, 99);
    for (int64_t i = 0; i < BATCH * din; i++)
        x[i] = 2.0f * dl_rng_uniform(&rng) - 1.0f;
    int32_t labels[BATCH];
    for (int i = 0; i < BATCH; i++)
        labels[i] = (int32_t)dl_rng_below(&rng, (uint64_t)dout);

    /* Same initial weights on both (same seed), checked rather than assumed. */
    const float *p1 = dl_model_params(im2col.m, &np), *p2 = dl_model_params(onednn.m, &np2);
    cr_assert_eq(np, np2);
    cr_assert_eq(memcmp(p1, p2, (size_t)np * sizeof(float)), 0);

    const float *g1 = step(&im2col, x, labels, y1), *g2 = step(&onednn, x, labels, y2);
    double gy = rel_gap(y2, y1, BATCH * dout);
    cr_expect(gy <= TOL, "training outputs differ by %g", gy);
    int bad = 0;
    for (int t = 0; t < dl_model_tensor_count(im2col.m); t++) {
        const char *name;
        int ndim;
        const int64_t *shp;
        float *data;
        dl_model_tensor_at(im2col.m, t, &name, &ndim, &shp, &data);
        int64_t off = data - p1, n = dl_shape_numel(ndim, shp);
        if (off < 0 || off >= np)
            continue;                    /* state, not a parameter */
        double norm = 0.0;
        for (int64_t i = 0; i < n; i++)
            norm += fabs(g1[off + i]);
        cr_expect(norm > 0.0, "%s: zero gradient proves nothing", name);
        double gap = rel_gap(g2 + off, g1 + off, n);
        if (gap > TOL && bad++ < 8)
            cr_expect_fail("gradient of %s differs by %g", name, gap);
    }
    cr_expect_eq(bad, 0);

    float *q1 = malloc((size_t)(BATCH * dout) * sizeof(float));
    float *q2 = malloc((size_t)(BATCH * dout) * sizeof(float));
    cr_assert(q1 && q2);
    dl_err err = {0};
    cr_assert_eq(dl_model_predict(im2col.m, x, BATCH, 2, q1, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_predict(onednn.m, x, BATCH, 2, q2, &err), DL_OK, "%s", err.msg);
    double gp = rel_gap(q2, q1, BATCH * dout);
    cr_expect(gp <= TOL, "inference outputs differ by %g", gp);
    free(q1);
    free(q2);
    free(x);
    free(y1);
    free(y2);
}

Test(conv_engines, fashion_cnn_shape)
{
    /* conv+relu (fused), max pool, conv+relu, max pool, dense+relu, dense */
    compare("[1, 28, 28]",
            "{'name': 'c1', 'type': 'conv2d', 'filters': 8, 'kernel_size': 5},"
            "{'name': 'r1', 'type': 'relu'},"
            "{'name': 'p1', 'type': 'maxpool2d', 'kernel_size': 2, 'stride': 2},"
            "{'name': 'c2', 'type': 'conv2d', 'filters': 16, 'kernel_size': 5},"
            "{'name': 'r2', 'type': 'relu'},"
            "{'name': 'p2', 'type': 'maxpool2d', 'kernel_size': 2, 'stride': 2},"
            "{'name': 'f', 'type': 'flatten'},"
            "{'name': 'fc1', 'type': 'dense', 'units': 32},"
            "{'name': 'r3', 'type': 'relu'},"
            "{'name': 'fc2', 'type': 'dense', 'units': 10}");
}

/* Channel counts that oneDNN keeps in its blocked layout from layer to
 * layer (multiples of 16, and so of 8): conv+relu -> max pool -> relu (a
 * layer of its own) -> conv -> average pool, then a conv with 20 output
 * channels (not a multiple of the block: back to NCHW) before the flatten. */
Test(conv_engines, blocked_layouts_between_layers)
{
    compare("[3, 14, 14]",
            "{'name': 'c1', 'type': 'conv2d', 'filters': 32, 'kernel_size': 3, 'padding': 1},"
            "{'name': 'r1', 'type': 'relu'},"
            "{'name': 'p1', 'type': 'maxpool2d', 'kernel_size': 2, 'stride': 2},"
            "{'name': 'r2', 'type': 'relu'},"
            "{'name': 'c2', 'type': 'conv2d', 'filters': 48, 'kernel_size': 3},"
            "{'name': 'p2', 'type': 'avgpool2d', 'kernel_size': 2, 'stride': 1},"
            "{'name': 'c3', 'type': 'conv2d', 'filters': 20, 'kernel_size': 1},"
            "{'name': 't3', 'type': 'tanh'},"
            "{'name': 'f', 'type': 'flatten'},"
            "{'name': 'fc', 'type': 'dense', 'units': 10}");
}

/* The planned layout bits of the oneDNN side's layer `name`. */
static int64_t blocked_of(const char *name)
{
    for (int i = 0; i < onednn.m->nlayers; i++)
        if (strcmp(onednn.m->layers[i].conf->name, name) == 0)
            return onednn.m->layers[i].blocked;
    cr_assert_fail("no layer '%s'", name);
    return 0;
}

/* The oneDNN side's layer `name`. */
static const layer *layer_of(const char *name)
{
    for (int i = 0; i < onednn.m->nlayers; i++)
        if (strcmp(onednn.m->layers[i].conf->name, name) == 0)
            return &onednn.m->layers[i];
    cr_assert_fail("no layer '%s'", name);
    return NULL;
}

/* MobileNet's inverted residual on blocked channels: a 1x1 expansion,
 * a depthwise 3x3 (groups = channels) with batchnorm and relu, a strided
 * one, a grouped 1x1 of whole channel blocks, and the projection. */
Test(conv_engines, depthwise_and_grouped_blocked)
{
    compare("[16, 8, 8]",
            "{'name': 'ex', 'type': 'conv2d', 'filters': 32, 'kernel_size': 1},"
            "{'name': 'dw', 'type': 'conv2d', 'filters': 32, 'kernel_size': 3, 'padding': 1,"
            " 'groups': 32, 'bias': false},"
            "{'name': 'bn', 'type': 'batchnorm'},"
            "{'name': 'r', 'type': 'relu'},"
            "{'name': 'dw2', 'type': 'conv2d', 'filters': 32, 'kernel_size': 3, 'stride': 2,"
            " 'padding': 1, 'groups': 32},"
            "{'name': 'gr', 'type': 'conv2d', 'filters': 32, 'kernel_size': 1, 'groups': 2},"
            "{'name': 'pr', 'type': 'conv2d', 'filters': 16, 'kernel_size': 1},"
            "{'name': 'f', 'type': 'flatten'},"
            "{'name': 'fc', 'type': 'dense', 'units': 10}");
    for (const char *const *n = (const char *const[]){ "dw", "dw2", "gr", NULL }; *n; n++)
        cr_expect(blocked_of(*n) & DL_BLOCKED_X, "%s reads NCHW", *n);
}

/* MobileNet's and EfficientNet's activations (clip as ReLU6, hardswish,
 * silu) and a squeeze-and-excitation block, whose per-channel scale
 * [C, 1, 1] multiplies blocked activations: all stay blocked. */
Test(conv_engines, unary_and_channel_scale_blocked)
{
    compare("[16, 6, 6]",
            "{'name': 'c1', 'type': 'conv2d', 'filters': 32, 'kernel_size': 3, 'padding': 1},"
            "{'name': 'a1', 'type': 'clip', 'min': 0, 'max': 6},"
            "{'name': 'dw', 'type': 'conv2d', 'filters': 32, 'kernel_size': 3, 'padding': 1,"
            " 'groups': 32},"
            "{'name': 'a2', 'type': 'hardswish'},"
            "{'name': 'sq', 'type': 'global_avgpool2d'},"
            "{'name': 'sq3', 'type': 'reshape', 'shape': [32, 1, 1]},"
            "{'name': 'e1', 'type': 'conv2d', 'filters': 16, 'kernel_size': 1},"
            "{'name': 'e1a', 'type': 'silu'},"
            "{'name': 'e2', 'type': 'conv2d', 'filters': 32, 'kernel_size': 1},"
            "{'name': 'e2s', 'type': 'sigmoid'},"
            "{'name': 'sc', 'type': 'mul', 'inputs': ['a2', 'e2s']},"
            "{'name': 'pr', 'type': 'conv2d', 'filters': 16, 'kernel_size': 1},"
            "{'name': 'f', 'type': 'flatten'},"
            "{'name': 'fc', 'type': 'dense', 'units': 10}");
    for (const char *const *n = (const char *const[]){ "a1", "a2", "sc", NULL }; *n; n++)
        cr_expect(blocked_of(*n) & DL_BLOCKED_Y, "%s writes NCHW", *n);
    /* clip, hardswish and silu ran as the convolutions' post-ops in inference */
    for (const char *const *n = (const char *const[]){ "a1", "a2", "e1a", NULL }; *n; n++)
        cr_expect(layer_of(*n)->folded_infer, "%s is not folded into its convolution", *n);
    cr_expect(layer_of("e1")->post_un && layer_of("e1")->post_un->kind == DL_UN_SILU);
}


/* ShuffleNet's branch on channels no multiple of the block (24): NHWC
 * between the engine's layers, a residual add on it, NCHW where a plain
 * layer (concat) reads; the same values and gradients as im2col. */
Test(conv_engines, nhwc_where_channels_are_not_whole_blocks)
{
    compare("[8, 9, 9]",
            "{'name': 'c1', 'type': 'conv2d', 'filters': 24, 'kernel_size': 1},"
            "{'name': 'a1', 'type': 'relu'},"
            "{'name': 'dw', 'type': 'conv2d', 'filters': 24, 'kernel_size': 3, 'padding': 1,"
            " 'stride': 2, 'groups': 24},"
            "{'name': 'c2', 'type': 'conv2d', 'filters': 24, 'kernel_size': 1},"
            "{'name': 'a2', 'type': 'silu'},"
            "{'name': 'dw2', 'type': 'conv2d', 'filters': 24, 'kernel_size': 3, 'padding': 1,"
            " 'groups': 24},"
            "{'name': 'r', 'type': 'add', 'inputs': ['dw2', 'a2']},"
            "{'name': 'mp', 'type': 'maxpool2d', 'kernel_size': 2, 'stride': 1},"
            "{'name': 'c3', 'type': 'conv2d', 'filters': 24, 'kernel_size': 1},"
            "{'name': 'cat', 'type': 'concat', 'axis': 0, 'inputs': ['c3', 'c3']},"
            "{'name': 'f', 'type': 'flatten'},"
            "{'name': 'fc', 'type': 'dense', 'units': 10}");
    cr_expect_eq(blocked_of("c1"), DL_NHWC_Y);
    cr_expect_eq(blocked_of("dw"), DL_NHWC_X | DL_NHWC_Y);
    cr_expect_eq(blocked_of("r"), DL_NHWC_X | DL_NHWC_Y);
    cr_expect_eq(blocked_of("mp"), DL_NHWC_X | DL_NHWC_Y);
    cr_expect_eq(blocked_of("c3"), DL_NHWC_X);
    cr_expect_eq(blocked_of("cat"), 0);
}

/* ShuffleNet's unit: split (slices), a branch of convolutions, concat and
 * the channel shuffle (reshape, transpose, reshape), all channels last
 * between the convolutions; the same values and gradients as im2col. */
Test(conv_engines, channel_shuffle_stays_nhwc)
{
    compare("[12, 6, 6]",
            "{'name': 'c0', 'type': 'conv2d', 'filters': 12, 'kernel_size': 1},"
            "{'name': 's1', 'type': 'slice', 'axis': 0, 'start': 0, 'end': 6, 'inputs': ['c0']},"
            "{'name': 's2', 'type': 'slice', 'axis': 0, 'start': 6, 'end': 12, 'inputs': ['c0']},"
            "{'name': 'b1', 'type': 'conv2d', 'filters': 6, 'kernel_size': 1},"
            "{'name': 'b1a', 'type': 'relu'},"
            "{'name': 'b2', 'type': 'conv2d', 'filters': 6, 'kernel_size': 3, 'padding': 1,"
            " 'groups': 6},"
            "{'name': 'cat', 'type': 'concat', 'axis': 0, 'inputs': ['s1', 'b2']},"
            "{'name': 'r1', 'type': 'reshape', 'shape': [2, 6, 6, 6]},"
            "{'name': 't', 'type': 'transpose', 'perm': [1, 0, 2, 3]},"
            "{'name': 'r2', 'type': 'reshape', 'shape': [12, 6, 6]},"
            "{'name': 'c1', 'type': 'conv2d', 'filters': 10, 'kernel_size': 1},"
            "{'name': 'f', 'type': 'flatten'},"
            "{'name': 'fc', 'type': 'dense', 'units': 10}");
    for (const char *const *n = (const char *const[]){ "s1", "s2", "cat", "t", NULL }; *n; n++)
        cr_expect_eq(blocked_of(*n), DL_NHWC_X | DL_NHWC_Y, "%s is not NHWC", *n);
    cr_expect_eq(blocked_of("c0"), DL_NHWC_Y);
}

/* A residual graph whose joins keep the blocked layout: the stem's output
 * read by a convolution and by an add, batchnorms, a strided block whose
 * projection meets it in a sub and a mul, global average pooling reading
 * blocked channels; the same values and gradients as im2col in NCHW. */
Test(conv_engines, residual_graph_blocked_across_joins)
{
    compare("[3, 10, 10]",
            "{'name': 'stem', 'type': 'conv2d', 'filters': 16, 'kernel_size': 3, 'padding': 1},"
            "{'name': 'stem_bn', 'type': 'batchnorm'},"
            "{'name': 'stem_relu', 'type': 'relu'},"
            "{'name': 'c1', 'type': 'conv2d', 'filters': 16, 'kernel_size': 3, 'padding': 1},"
            "{'name': 'r1', 'type': 'relu'},"
            "{'name': 'c2', 'type': 'conv2d', 'filters': 16, 'kernel_size': 3, 'padding': 1,"
            " 'bias': false},"
            "{'name': 'bn2', 'type': 'batchnorm'},"
            "{'name': 'add', 'type': 'add', 'inputs': ['bn2', 'stem_relu']},"
            "{'name': 'out1', 'type': 'relu'},"
            "{'name': 'c3', 'type': 'conv2d', 'filters': 32, 'kernel_size': 3, 'stride': 2,"
            " 'padding': 1},"
            "{'name': 'proj', 'type': 'conv2d', 'inputs': ['out1'], 'filters': 32,"
            " 'kernel_size': 1, 'stride': 2},"
            "{'name': 'proj_bn', 'type': 'batchnorm'},"
            "{'name': 'sub', 'type': 'sub', 'inputs': ['c3', 'proj_bn']},"
            "{'name': 'mul', 'type': 'mul', 'inputs': ['sub', 'proj_bn']},"
            "{'name': 'gap', 'type': 'global_avgpool2d'},"
            "{'name': 'fc', 'type': 'dense', 'units': 4}");
    cr_expect_eq(blocked_of("stem"), DL_BLOCKED_Y, "the input stays plain, the output not");
    cr_expect_eq(blocked_of("stem_bn"), DL_BLOCKED_X | DL_BLOCKED_Y);
    cr_expect_eq(blocked_of("c1"), DL_BLOCKED_X | DL_BLOCKED_Y);
    cr_expect_eq(blocked_of("add"), DL_BLOCKED_X | DL_BLOCKED_Y);
    cr_expect_eq(blocked_of("proj"), DL_BLOCKED_X | DL_BLOCKED_Y);
    cr_expect_eq(blocked_of("mul"), DL_BLOCKED_X | DL_BLOCKED_Y);
    cr_expect_eq(blocked_of("gap"), DL_BLOCKED_X, "pooling to [C] writes plain values");
    cr_expect_eq(blocked_of("fc"), 0);
}

/* A tensor read by a layer that takes only NCHW keeps every tensor joined
 * to it plain: here a flatten reads the add's output. */
Test(conv_engines, plain_reader_keeps_a_join_plain)
{
    compare("[16, 6, 6]",
            "{'name': 'c1', 'type': 'conv2d', 'filters': 16, 'kernel_size': 3, 'padding': 1},"
            "{'name': 'c2', 'type': 'conv2d', 'filters': 16, 'kernel_size': 3, 'padding': 1},"
            "{'name': 'add', 'type': 'add', 'inputs': ['c2', 'c1']},"
            "{'name': 'f', 'type': 'flatten'},"
            "{'name': 'fc', 'type': 'dense', 'units': 3}");
    cr_expect_eq(blocked_of("c1"), 0);
    cr_expect_eq(blocked_of("c2"), 0);
    cr_expect_eq(blocked_of("add"), 0);
}

/* oneDNN's predictions of a model of seed `seed` on x, before and after
 * its weights are fixed: the same values (one reordered copy a layer,
 * though both convolutions share a primitive; the dense layer then runs
 * as an inner product on its prepacked weights, which sums in another
 * order: within 1e-5), and the same bits on every pass once fixed. Then
 * the fixed model refuses backward and new weights. Returns the
 * predictions. */
static float *predict_fixed(uint64_t seed, const float *x, int64_t n)
{
    dl_err err = {0};
    dl_model_free(onednn.m);
    cr_assert_eq(dl_model_new(onednn.be, onednn.conf, seed, &onednn.m, &err), DL_OK, "%s",
                 err.msg);
    int64_t k = dl_model_out_dim(onednn.m);
    float *y = malloc((size_t)(n * k) * sizeof(float)), *yf = malloc((size_t)(n * k) * sizeof(float));
    float *first = malloc((size_t)(n * k) * sizeof(float));
    cr_assert(y && yf && first);
    cr_assert_eq(dl_model_predict(onednn.m, x, n, n, y, &err), DL_OK, "%s", err.msg);
    dl_model_fix_weights(onednn.m);
    for (int pass = 0; pass < 2; pass++) {
        cr_assert_eq(dl_model_predict(onednn.m, x, n, n, yf, &err), DL_OK, "%s", err.msg);
        double diff = 0.0, scale = 0.0;
        for (int64_t i = 0; i < n * k; i++) {
            diff = fmax(diff, fabs((double)yf[i] - y[i]));
            scale = fmax(scale, fabs((double)y[i]));
        }
        cr_expect_leq(diff, 1e-5 * scale, "seed %llu, pass %d: fixed weights predict "
                      "otherwise (%g against %g)", (unsigned long long)seed, pass, diff, scale);
        if (pass == 0)
            memcpy(first, yf, (size_t)(n * k) * sizeof(float));
        else
            cr_expect_eq(memcmp(first, yf, (size_t)(n * k) * sizeof(float)), 0,
                         "seed %llu: the fixed model's passes differ", (unsigned long long)seed);
    }
    free(first);
    cr_expect_eq(dl_model_backward(onednn.m, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "fixed"), "message was: %s", err.msg);
    cr_expect_eq(dl_model_set_weights(onednn.m, NULL, 0, "w.safetensors", &err),
                 DL_ERR_INVALID);
    free(yf);
    return y;
}

/* A model that only serves keeps oneDNN's reordered weights; a model of
 * other weights built after it was freed (perhaps at the same address)
 * gets its own. */
Test(conv_engines, fixed_weights_predict_the_same)
{
    open_side(&onednn, DL_CONV_ONEDNN);
    build(&onednn, "[16, 8, 8]",
          "{'name': 'c1', 'type': 'conv2d', 'filters': 16, 'kernel_size': 3, 'padding': 1},"
          "{'name': 'r1', 'type': 'relu'},"
          "{'name': 'c2', 'type': 'conv2d', 'filters': 16, 'kernel_size': 3, 'padding': 1},"
          "{'name': 'gap', 'type': 'global_avgpool2d'},"
          "{'name': 'fc', 'type': 'dense', 'units': 4}");
    int64_t din = dl_model_in_dim(onednn.m), k = dl_model_out_dim(onednn.m);
    float *x = malloc((size_t)(BATCH * din) * sizeof(float));
    cr_assert(x);
    dl_rng rng;
    dl_rng_seed(&rng, 5);
    for (int64_t i = 0; i < BATCH * din; i++)
        x[i] = 2.0f * dl_rng_uniform(&rng) - 1.0f;
    float *a = predict_fixed(11, x, BATCH), *b = predict_fixed(12, x, BATCH);
    cr_expect(rel_gap(a, b, BATCH * k) > 1e-3, "other weights, other outputs");
    free(a);
    free(b);
    free(x);
}

/* Dense layers followed by unary ones (a transformer's feed-forward GELU):
 * the two engines agree in training and inference, and once the oneDNN
 * side's weights are fixed its dense layers run as inner products with
 * the unary fused (gemm_bias_unary): still im2col's outputs. */
Test(conv_engines, dense_unary_post_ops)
{
    const char *layers = "{'name': 'd1', 'type': 'dense', 'units': 16},"
                         "{'name': 'g', 'type': 'gelu'},"
                         "{'name': 'd2', 'type': 'dense', 'units': 12},"
                         "{'name': 's', 'type': 'silu'},"
                         "{'name': 'd3', 'type': 'dense', 'units': 6},"
                         "{'name': 'c', 'type': 'clip', 'min': -0.1, 'max': 0.1},"
                         "{'name': 'out', 'type': 'dense', 'units': 4}";
    compare("[10]", layers);
    int64_t din = dl_model_in_dim(im2col.m), k = dl_model_out_dim(im2col.m);
    float *x = malloc((size_t)(BATCH * din) * sizeof(float));
    float *want = malloc((size_t)(BATCH * k) * sizeof(float));
    float *got = malloc((size_t)(BATCH * k) * sizeof(float));
    cr_assert(x && want && got);
    dl_rng rng;
    dl_rng_seed(&rng, 7);
    for (int64_t i = 0; i < BATCH * din; i++)
        x[i] = 2.0f * dl_rng_uniform(&rng) - 1.0f;
    dl_err err = {0};
    cr_assert_eq(dl_model_predict(im2col.m, x, BATCH, BATCH, want, &err), DL_OK, "%s", err.msg);
    dl_model_fix_weights(onednn.m);
    cr_assert_eq(dl_model_predict(onednn.m, x, BATCH, BATCH, got, &err), DL_OK, "%s", err.msg);
    double gap = rel_gap(got, want, BATCH * k);
    cr_expect(gap <= TOL, "fixed inner products with fused unaries differ by %g", gap);
    free(x);
    free(want);
    free(got);
}

/* The backend forgets a reordered copy when its weights are unfixed: the
 * same buffer, fixed again after new values, convolves with those. */
Test(conv_engines, unfixed_weights_are_forgotten)
{
    open_side(&onednn, DL_CONV_ONEDNN);
    dl_backend *be = onednn.be;
    dl_conv_geom g = { .n = 2, .c = 16, .h = 6, .w = 6, .oc = 16, .oh = 6, .ow = 6,
                       .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1 };
    enum { NX = 2 * 16 * 36, NW = 16 * 16 * 9 };
    static float x[NX], w[NW], y[4][NX];
    dl_rng rng;
    dl_rng_seed(&rng, 7);
    for (int i = 0; i < NX; i++)
        x[i] = 2.0f * dl_rng_uniform(&rng) - 1.0f;
    for (int i = 0; i < NW; i++)
        w[i] = 2.0f * dl_rng_uniform(&rng) - 1.0f;
    dl_err err = {0};
    for (int k = 0; k < 4; k++) {
        if (k == 2) {               /* new values in the same memory */
            be->ops->fix_weights(be, w, sizeof(w), false);
            for (int i = 0; i < NW; i++)
                w[i] *= 2.0f;
        }
        if (k % 2 == 1)
            be->ops->fix_weights(be, w, sizeof(w), true);
        cr_assert_eq(be->ops->conv_fwd(be, &g, x, w, NULL, NULL, y[k], &err), DL_OK, "%s",
                     err.msg);
    }
    be->ops->fix_weights(be, w, sizeof(w), false);
    cr_expect_eq(memcmp(y[0], y[1], sizeof(y[0])), 0, "fixed weights convolve otherwise");
    cr_expect_eq(memcmp(y[2], y[3], sizeof(y[0])), 0, "the old copy was kept");
    cr_expect(rel_gap(y[2], y[0], NX) > 0.1, "new weights, new outputs");
}

Test(conv_engines, stride_padding_no_bias)
{
    compare("[3, 9, 9]",
            "{'name': 'c1', 'type': 'conv2d', 'filters': 4, 'kernel_size': 3, 'padding': 1,"
            " 'bias': false},"
            "{'name': 't1', 'type': 'tanh'},"
            "{'name': 'c2', 'type': 'conv2d', 'filters': 5, 'kernel_size': 3, 'stride': 2,"
            " 'padding': 1},"
            "{'name': 's2', 'type': 'sigmoid'},"
            "{'name': 'f', 'type': 'flatten'},"
            "{'name': 'fc', 'type': 'dense', 'units': 4}");
}

/* Windows that stop short of the edge (negative right padding for
 * oneDNN): a 1x1 stride-2 projection of an even size, blocked channels,
 * as in a ResNet's downsampling branch, then a 3x3 stride-2 unpadded one. */
Test(conv_engines, windows_short_of_the_edge)
{
    compare("[16, 8, 8]",
            "{'name': 'c1', 'type': 'conv2d', 'filters': 16, 'kernel_size': 1, 'stride': 2},"
            "{'name': 'r1', 'type': 'relu'},"
            "{'name': 'c2', 'type': 'conv2d', 'filters': 5, 'kernel_size': 3, 'stride': 2},"
            "{'name': 'f', 'type': 'flatten'},"
            "{'name': 'fc', 'type': 'dense', 'units': 3}");
}

Test(conv_engines, rectangular_windows_and_pooling)
{
    /* c1 [2,8,7] -> [3,8,6]; max 3x3 s2 p1 -> [3,4,3]; c2 -> [4,4,3];
     * avg 2x2 s1 p1 (padding counted) -> [4,5,4] */
    compare("[2, 8, 7]",
            "{'name': 'c1', 'type': 'conv2d', 'filters': 3, 'kernel_size': [3, 2],"
            " 'padding': [1, 0]},"
            "{'name': 'p1', 'type': 'maxpool2d', 'kernel_size': 3, 'stride': 2, 'padding': 1},"
            "{'name': 'c2', 'type': 'conv2d', 'filters': 4, 'kernel_size': [1, 3],"
            " 'padding': [0, 1]},"
            "{'name': 'p2', 'type': 'avgpool2d', 'kernel_size': 2, 'stride': 1, 'padding': 1},"
            "{'name': 'f', 'type': 'flatten'},"
            "{'name': 'fc', 'type': 'dense', 'units': 3}");
}

Test(conv_engines, unknown_engine_word_is_refused)
{
    setenv("DLSERVE_CPU_CONV", "fast", 1);
    dl_backend *be = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_backend_cpu_new(1, &be, &err), DL_ERR_INVALID);
    cr_expect_null(be);
    cr_expect_not_null(strstr(err.msg, "DLSERVE_CPU_CONV=fast"), "message was: %s", err.msg);
    setenv("DLSERVE_CPU_CONV", "im2col", 1);
    cr_assert_eq(dl_backend_cpu_new(1, &be, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(dl_backend_conv_engine(be), "im2col");
    dl_backend_free(be);
}

/* "auto" and no word at all choose the same engine. */
Test(conv_engines, auto_is_the_default)
{
    dl_backend *be = NULL;
    dl_err err = {0};
    unsetenv("DLSERVE_CPU_CONV");
    cr_assert_eq(dl_backend_cpu_new(1, &be, &err), DL_OK, "%s", err.msg);
    const char *unset = dl_backend_conv_engine(be);
    dl_backend_free(be);
    setenv("DLSERVE_CPU_CONV", "auto", 1);
    cr_assert_eq(dl_backend_cpu_new(1, &be, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(dl_backend_conv_engine(be), unset);
    dl_backend_free(be);
    unsetenv("DLSERVE_CPU_CONV");
}
