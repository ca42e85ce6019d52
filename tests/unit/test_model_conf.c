/* test_model_conf.c: model.json validation: the shipped models parse and
 * build, defaults are filled in, and malformed files are refused with
 * DL_ERR_INVALID and a message naming the key or layer and the problem. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "nn/dl_nn.h"

static dl_model_conf *conf;

static void teardown(void)
{
    dl_model_conf_free(conf);
    conf = NULL;
}

TestSuite(model_conf, .fini = teardown, .timeout = 10);

/* ---- helpers ------------------------------------------------------------ */

static dl_status parse(const char *text, dl_err *err)
{
    const char *t = fx_dq(text);
    dl_model_conf_free(conf);
    conf = NULL;
    return dl_model_conf_parse(t, strlen(t), "test.json", &conf, err);
}

static void parses(const char *text)
{
    dl_err err = {0};
    cr_assert_eq(parse(text, &err), DL_OK, "%s", err.msg);
    cr_assert_not_null(conf);
}

/* Expects a refusal whose message names the file and holds each of the
 * given substrings (NULL-terminated list). */
#define REFUSED(text, ...) refused(text, (const char *[]){ __VA_ARGS__, NULL })
static void refused(const char *text, const char *const *subs)
{
    dl_err err = {0};
    cr_expect_eq(parse(text, &err), DL_ERR_INVALID, "accepted: %s", fx_dq(text));
    cr_expect_null(conf);
    cr_expect_not_null(strstr(err.msg, "test.json"), "message lacks the file: %s", err.msg);
    for (; *subs; subs++)
        cr_expect_not_null(strstr(err.msg, *subs), "message lacks \"%s\": %s", *subs, err.msg);
}

/* A valid model around `layers`, with input shape and loss. */
static const char *model(const char *shape, const char *layers, const char *extra)
{
    static char buf[2048];
    snprintf(buf, sizeof(buf), "{'name': 'm', 'input': {'shape': %s}, 'layers': [%s]%s}",
             shape, layers, extra);
    return buf;
}

#define FC(name, units) "{'name': '" name "', 'type': 'dense', 'units': " #units "}"

static void load_shipped(const char *dir)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "models/%s/model.json", dir);
    const char *path = fx_source_path(rel);
    dl_err err = {0};
    cr_assert_eq(dl_model_conf_load(path, &conf, &err), DL_OK, "%s", err.msg);
}

/* Builds a CPU model from conf and returns its parameter count. */
static int64_t param_count(void)
{
    dl_backend *be = fx_cpu_backend();
    dl_model *m = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_model_new(be, conf, 1, &m, &err), DL_OK, "%s", err.msg);
    int64_t n;
    dl_model_params(m, &n);
    cr_expect_eq(dl_model_out_dim(m), 10);
    dl_model_free(m);
    dl_backend_free(be);
    return n;
}

/* ---- valid files -------------------------------------------------------- */

Test(model_conf, shipped_mlp)
{
    load_shipped("fashion-mlp");
    cr_expect_str_eq(conf->name, "fashion-mlp");
    cr_expect_eq(conf->in_ndim, 3);
    cr_expect(conf->in_shape[0] == 1 && conf->in_shape[1] == 28 && conf->in_shape[2] == 28);
    cr_expect_eq(conf->nlayers, 6);
    cr_expect_eq(conf->layers[1].type, DL_LAYER_DENSE);
    cr_expect_eq(conf->layers[1].units, 256);
    cr_expect_eq(conf->loss, DL_LOSS_XENT);
    cr_assert_eq(conf->nlabels, 10);
    cr_expect_str_eq(conf->labels[0], "T-shirt/top");
    cr_expect_str_eq(conf->labels[9], "Ankle boot");
    cr_expect_str_eq(conf->output_name, "probabilities");
    cr_expect_eq(conf->train.optimizer, DL_OPTIM_ADAM);
    cr_expect_eq(conf->train.epochs, 15);
    cr_expect_eq(conf->train.schedule, DL_SCHED_COSINE);
    cr_expect_eq(conf->train.warmup_epochs, 1.0);
    cr_expect_eq(conf->train.seed, 42u);
    cr_expect(conf->train.lr > 0.00099 && conf->train.lr < 0.00101);
    cr_expect(conf->scale > 0.0039f && conf->scale < 0.00393f);
    cr_expect_not_null(strstr(conf->json, "fashion-mlp"), "conf->json keeps the text");
    /* 784*256+256 + 256*128+128 + 128*10+10 */
    cr_expect_eq(param_count(), 235146);
}

Test(model_conf, shipped_cnn)
{
    load_shipped("fashion-cnn");
    cr_expect_str_eq(conf->name, "fashion-cnn");
    cr_expect_eq(conf->nlayers, 11);
    cr_expect_eq(conf->layers[0].type, DL_LAYER_CONV2D);
    cr_expect(conf->layers[0].kh == 5 && conf->layers[0].kw == 5 && conf->layers[0].filters == 32);
    cr_expect_eq(conf->layers[2].type, DL_LAYER_MAXPOOL2D);
    cr_expect(conf->layers[2].sh == 2 && conf->layers[2].sw == 2);
    cr_expect_eq(conf->layers[9].type, DL_LAYER_DROPOUT);
    cr_expect(conf->layers[9].rate > 0.2499f && conf->layers[9].rate < 0.2501f);
    cr_expect_eq(conf->nlabels, 10);
    /* conv 32*25+32, conv 64*32*25+64, dense 1024*256+256, dense 256*10+10 */
    cr_expect_eq(param_count(), 317066);
}

Test(model_conf, load_accepts_a_folder_and_reports_missing_files)
{
    const char *path = fx_source_path("models/fashion-cnn");
    dl_err err = {0};
    cr_assert_eq(dl_model_conf_load(path, &conf, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(conf->name, "fashion-cnn");
    dl_model_conf_free(conf);
    conf = NULL;
    cr_expect_neq(dl_model_conf_load("/nonexistent/model.json", &conf, &err), DL_OK);
    cr_expect_null(conf);
    cr_expect_not_null(strstr(err.msg, "/nonexistent/model.json"), "message was: %s", err.msg);
}

Test(model_conf, defaults_and_pairs)
{
    parses(model("[2, 8, 8]",
                 "{'name': 'c', 'type': 'conv2d', 'filters': 4, 'kernel_size': [3, 2]},"
                 "{'name': 'p', 'type': 'maxpool2d', 'kernel_size': 2},"
                 "{'name': 'bn', 'type': 'batchnorm'},"
                 "{'name': 'd', 'type': 'dropout'},"
                 "{'name': 'f', 'type': 'flatten'},"
                 FC("fc", 3), ""));
    const dl_layer_conf *l = conf->layers;
    cr_expect(l[0].kh == 3 && l[0].kw == 2 && l[0].sh == 1 && l[0].sw == 1 &&
              l[0].ph == 0 && l[0].pw == 0 && l[0].bias);
    cr_expect(l[1].sh == 2 && l[1].sw == 2, "pool stride defaults to the window");
    cr_expect(l[2].eps > 0.99e-5f && l[2].eps < 1.01e-5f && l[2].momentum > 0.0999f &&
              l[2].momentum < 0.1001f);
    cr_expect(l[3].rate > 0.4999f && l[3].rate < 0.5001f);
    cr_expect(l[5].bias);
    cr_expect_eq(conf->loss, DL_LOSS_XENT, "the default loss");
    cr_expect_eq(conf->nlabels, 0);
    cr_expect_str_eq(conf->input_name, "input");
    cr_expect(conf->scale == 1.0f && conf->mean == 0.0f && conf->std == 1.0f);
    cr_expect_eq(conf->train.optimizer, DL_OPTIM_SGD);
    cr_expect_eq(conf->train.schedule, DL_SCHED_NONE);
    cr_expect_eq(conf->train.batch_size, 64);
}

Test(model_conf, training_section)
{
    parses(model("[4]", FC("fc", 2),
                 ", 'loss': 'mse', 'training': {'optimizer': 'momentum', 'lr': 0.5,"
                 " 'momentum': 0.8, 'nesterov': true, 'weight_decay': 0.01,"
                 " 'schedule': {'type': 'step', 'step_epochs': 3, 'gamma': 0.2}}"));
    cr_expect_eq(conf->loss, DL_LOSS_MSE);
    cr_expect_eq(conf->train.optimizer, DL_OPTIM_MOMENTUM);
    cr_expect_eq(conf->train.lr, 0.5);
    cr_expect_eq(conf->train.momentum, 0.8);
    cr_expect(conf->train.nesterov);
    cr_expect_eq(conf->train.weight_decay, 0.01);
    cr_expect_eq(conf->train.schedule, DL_SCHED_STEP);
    cr_expect_eq(conf->train.step_epochs, 3);
    cr_expect_eq(conf->train.gamma, 0.2);
    cr_expect_eq(conf->train.clip_norm, 0.0, "clipping is off by default");
    cr_expect_eq(conf->train.eps, 0.0, "eps: the optimizer's default");
}

Test(model_conf, training_adagrad_adamw_clip_norm)
{
    parses(model("[4]", FC("fc", 2),
                 ", 'training': {'optimizer': 'adagrad', 'eps': 1e-6, 'clip_norm': 1.5}"));
    cr_expect_eq(conf->train.optimizer, DL_OPTIM_ADAGRAD);
    cr_expect_eq(conf->train.eps, 1e-6);
    cr_expect_eq(conf->train.clip_norm, 1.5);
    parses(model("[4]", FC("fc", 2),
                 ", 'training': {'optimizer': 'adamw', 'weight_decay': 0.01, 'clip_norm': 0}"));
    cr_expect_eq(conf->train.optimizer, DL_OPTIM_ADAMW);
    cr_expect_eq(conf->train.weight_decay, 0.01);
    cr_expect_eq(conf->train.clip_norm, 0.0);
}

/* ---- malformed files ------------------------------------------------------- */

Test(model_conf, invalid_json_has_line_and_column)
{
    dl_err err = {0};
    cr_expect_eq(parse("{'name': 'm',\n 'input': }", &err), DL_ERR_INVALID);
    cr_expect_null(conf);
    const char *at = strstr(err.msg, "test.json:2:");
    cr_assert_not_null(at, "message lacks file:line: %s", err.msg);
    cr_expect(isdigit((unsigned char)at[strlen("test.json:2:")]), "no column: %s", err.msg);
    cr_expect_not_null(strstr(err.msg, "invalid JSON"), "message was: %s", err.msg);
}

Test(model_conf, duplicate_json_keys)
{
    REFUSED("{'name': 'a', 'name': 'b', 'input': {'shape': [2]},"
            " 'layers': [" FC("fc", 2) "]}", "invalid JSON", "duplicate");
}

Test(model_conf, not_an_object)
{
    REFUSED("[1, 2, 3]", "must be a JSON object");
}

Test(model_conf, missing_name)
{
    REFUSED("{'input': {'shape': [2]}, 'layers': [" FC("fc", 2) "]}", "'name'", "is missing");
}

Test(model_conf, missing_input)
{
    REFUSED("{'name': 'm', 'layers': [" FC("fc", 2) "]}", "'input'", "is missing");
}

Test(model_conf, bad_input_shape)
{
    REFUSED(model("[0, 3]", FC("fc", 2), ""), "input", "'shape'", "positive integers");
    REFUSED(model("[1, 2, 3, 4, 5]", FC("fc", 2), ""), "input", "'shape'");
    REFUSED(model("'28x28'", FC("fc", 2), ""), "input", "'shape'");
    REFUSED(model("[]", FC("fc", 2), ""), "input", "'shape'");
}

Test(model_conf, sizes_past_int64_are_refused)
{
    /* 2^72 values a sample: the product would overflow int64. */
    REFUSED(model("[16777216, 16777216, 16777216]", "{'name': 'f', 'type': 'flatten'}",
                  ""), "input", "'shape' has more than 17179869184 values a sample");
    /* 65536 filters of 4096 channels x 64x64 kernels: 2^40 weights. */
    REFUSED(model("[4096, 64, 64]",
                  "{'name': 'c', 'type': 'conv2d', 'filters': 65536, 'kernel_size': 64}",
                  ""), "layer 'c'", "more than 17179869184 parameters");
    /* 1024 x 4096 x 4096 values with padding 4095 each side: 2^37 outputs. */
    REFUSED(model("[1024, 4096, 4096]", "{'name': 'p', 'type': 'maxpool2d', 'kernel_size': "
                  "4096, 'stride': 1, 'padding': 4095}", ""),
            "layer 'p'", "values a sample");
}

Test(model_conf, name_starting_with_a_dot)
{
    REFUSED("{'name': '..', 'input': {'shape': [4]}, 'layers': [" FC("fc", 2) "]}",
            "'name'", "must not start with '.'");
}

Test(model_conf, unknown_top_level_key)
{
    REFUSED(model("[4]", FC("fc", 2), ", 'optimiser': 'adam'"), "'optimiser'",
            "not a known key");
}

Test(model_conf, unknown_layer_type)
{
    REFUSED(model("[4]", "{'name': 'fc', 'type': 'dens', 'units': 2}", ""),
            "layer 'fc'", "'type'", "must be one of");
}

Test(model_conf, unknown_key_in_a_layer)
{
    REFUSED(model("[4]", "{'name': 'fc', 'type': 'dense', 'unit': 2}", ""),
            "layer 'fc'", "'unit'", "not a known key");
}

Test(model_conf, dense_units_zero)
{
    REFUSED(model("[4]", FC("fc", 0), ""), "layer 'fc'", "'units'", "must be an integer in [1,");
}

Test(model_conf, layer_without_name)
{
    REFUSED(model("[4]", FC("fc1", 3) ", {'type': 'dense', 'units': 2}", ""),
            "layers[1]", "'name'", "is missing");
}

Test(model_conf, bad_layer_name)
{
    REFUSED(model("[4]", FC("fc 1", 3), ""), "'name'", "may hold only");
}

Test(model_conf, conv_kernel_larger_than_input)
{
    REFUSED(model("[1, 4, 4]",
                  "{'name': 'c', 'type': 'conv2d', 'filters': 2, 'kernel_size': 5},"
                  "{'name': 'f', 'type': 'flatten'}," FC("fc", 2), ""),
            "layer 'c'", "window 5x5 does not fit input 4x4");
}

Test(model_conf, conv_padding_not_smaller_than_kernel)
{
    REFUSED(model("[1, 4, 4]",
                  "{'name': 'c', 'type': 'conv2d', 'filters': 2, 'kernel_size': 2, 'padding': 2},"
                  "{'name': 'f', 'type': 'flatten'}," FC("fc", 2), ""),
            "layer 'c'", "padding must be smaller");
}

Test(model_conf, conv_on_1d_input)
{
    REFUSED(model("[16]", "{'name': 'c', 'type': 'conv2d', 'filters': 2, 'kernel_size': 3},"
                          FC("fc", 2), ""),
            "layer 'c'", "expects 3-D input", "[16]");
}

Test(model_conf, duplicate_layer_names)
{
    REFUSED(model("[4]", FC("a", 3) ", {'name': 'a', 'type': 'relu'}," FC("out", 2), ""),
            "'a'", "used twice");
}

Test(model_conf, labels_count_must_match_outputs)
{
    REFUSED(model("[4]", FC("fc", 4), ", 'output': {'labels': ['x', 'y', 'z']}"),
            "'labels' has 3 entries", "4 outputs");
}

Test(model_conf, final_softmax_with_cross_entropy)
{
    REFUSED(model("[4]", FC("fc", 3) ", {'name': 'sm', 'type': 'softmax'}",
                  ", 'loss': 'softmax_cross_entropy'"),
            "softmax_cross_entropy", "last layer");
    /* the same layers are fine with MSE */
    parses(model("[4]", FC("fc", 3) ", {'name': 'sm', 'type': 'softmax'}", ", 'loss': 'mse'"));
}

Test(model_conf, cross_entropy_needs_1d_output)
{
    REFUSED(model("[1, 4, 4]", "{'name': 'c', 'type': 'conv2d', 'filters': 2, 'kernel_size': 3}", ""),
            "1-D output", "[2, 2, 2]");
}

Test(model_conf, bad_loss)
{
    REFUSED(model("[4]", FC("fc", 2), ", 'loss': 'cross_entropy'"), "'loss'", "must be");
}

Test(model_conf, bad_optimizer)
{
    REFUSED(model("[4]", FC("fc", 2), ", 'training': {'optimizer': 'rmsprop'}"),
            "training", "'optimizer'", "must be", "adamw", "adagrad");
}

Test(model_conf, bad_clip_norm_and_eps)
{
    REFUSED(model("[4]", FC("fc", 2), ", 'training': {'clip_norm': -1}"),
            "training", "'clip_norm'", "must be a number");
    REFUSED(model("[4]", FC("fc", 2), ", 'training': {'clip_norm': 'max'}"),
            "training", "'clip_norm'", "must be a number");
    REFUSED(model("[4]", FC("fc", 2), ", 'training': {'optimizer': 'adagrad', 'eps': 0}"),
            "training", "'eps'", "must be a number");
}

Test(model_conf, negative_lr)
{
    REFUSED(model("[4]", FC("fc", 2), ", 'training': {'lr': -0.1}"),
            "training", "'lr'", "must be a number");
}

Test(model_conf, bad_schedule_type)
{
    REFUSED(model("[4]", FC("fc", 2), ", 'training': {'schedule': {'type': 'linear'}}"),
            "training.schedule", "'type'");
}

Test(model_conf, dropout_rate_one)
{
    REFUSED(model("[4]", "{'name': 'd', 'type': 'dropout', 'rate': 1.0}," FC("fc", 2), ""),
            "layer 'd'", "'rate'", "must be a number");
}

Test(model_conf, batchnorm_momentum_out_of_range)
{
    REFUSED(model("[4]", "{'name': 'bn', 'type': 'batchnorm', 'momentum': 1.5}," FC("fc", 2), ""),
            "layer 'bn'", "'momentum'");
}

Test(model_conf, embedding_not_first)
{
    REFUSED(model("[4]", FC("fc", 4) ", {'name': 'emb', 'type': 'embedding',"
                  " 'num_embeddings': 10, 'dim': 3}, {'name': 'f', 'type': 'flatten'}", ""),
            "layer 'emb'", "must be the first layer");
}

Test(model_conf, empty_layers)
{
    REFUSED(model("[4]", "", ""), "'layers'", "non-empty");
}

/* ---- the layer types of imported ONNX models ------------------------------ */

#define LAYER(name, type, rest) "{'name': '" name "', 'type': '" type "'" rest "}"

Test(model_conf, onnx_layer_defaults)
{
    parses(model("[4, 6, 6]",
                 LAYER("c", "constant", ", 'inputs': [], 'shape': [6]") ","
                 LAYER("q", "div", ", 'inputs': ['input', 'c']") ","
                 LAYER("lr", "leaky_relu", "") "," LAYER("cl", "clip", "") ","
                 LAYER("hs", "hardsigmoid", "") ","
                 LAYER("s", "slice", ", 'axis': -1, 'start': -5") ","
                 LAYER("dw", "conv2d", ", 'filters': 4, 'kernel_size': 3, 'groups': 4") ","
                 LAYER("dl", "conv2d", ", 'filters': 2, 'kernel_size': 2, 'dilation': [2, 1]") ","
                 LAYER("f", "flatten", "") "," FC("fc", 3), ""));
    const dl_layer_conf *l = conf->layers;
    cr_expect_eq(l[0].nsrc, 0, "a constant reads nothing");
    cr_expect(l[0].nshape == 1 && l[0].shape[0] == 6);
    cr_expect(l[2].alpha > 0.00999f && l[2].alpha < 0.01001f, "leaky_relu alpha 0.01");
    cr_expect(isinf(l[3].lo) && l[3].lo < 0 && isinf(l[3].hi) && l[3].hi > 0,
              "clip without bounds");
    cr_expect(fabsf(l[4].alpha - 1.0f / 6.0f) < 1e-7f && l[4].beta == 0.5f,
              "hardsigmoid as nn.Hardsigmoid");
    cr_expect(l[5].start == -5 && l[5].end == INT64_MAX && l[5].step == 1);
    cr_expect(l[6].groups == 4 && l[6].dh == 1 && l[6].dw == 1);
    cr_expect(l[7].groups == 1 && l[7].dh == 2 && l[7].dw == 1);
}

Test(model_conf, pow_exponent_must_be_a_number)
{
    REFUSED(model("[4]", LAYER("p", "pow", ", 'exponent': 'two'") "," FC("fc", 2), ""),
            "layer 'p'", "'exponent' must be a number");
    REFUSED(model("[4]", LAYER("p", "pow", "") "," FC("fc", 2), ""),
            "layer 'p'", "'exponent' is missing");
}

Test(model_conf, clip_min_above_max)
{
    REFUSED(model("[4]", LAYER("r6", "clip", ", 'min': 6, 'max': 0") "," FC("fc", 2), ""),
            "layer 'r6'", "'min' must not exceed 'max'");
    REFUSED(model("[4]", LAYER("r6", "clip", ", 'max': true") "," FC("fc", 2), ""),
            "layer 'r6'", "'max' must be a number");
    /* ONNX writes -FLT_MAX (or less) for an open bound */
    parses(model("[4]", LAYER("r6", "clip", ", 'min': -3.5e38, 'max': 6") "," FC("fc", 2), ""));
    cr_expect(isinf(conf->layers[0].lo) && conf->layers[0].lo < 0 && conf->layers[0].hi == 6.0f);
}

Test(model_conf, slice_axis_and_bounds)
{
    REFUSED(model("[3, 4]", LAYER("s", "slice", ", 'axis': 2") "," FC("fc", 2), ""),
            "layer 's'", "axis 2 is out of range for 2-D samples");
    REFUSED(model("[3, 4]", LAYER("s", "slice", ", 'start': 1") "," FC("fc", 2), ""),
            "layer 's'", "'axis' is missing");
    REFUSED(model("[3, 4]", LAYER("s", "slice", ", 'axis': 1, 'start': 3, 'end': -2") ","
                            FC("fc", 2), ""),
            "layer 's'", "keep nothing of axis 1 of [3, 4]");
    REFUSED(model("[3, 4]", LAYER("s", "slice", ", 'axis': 0, 'step': 0") "," FC("fc", 2), ""),
            "layer 's'", "'step' must be an integer in [1,");
}

Test(model_conf, constant_needs_empty_inputs_and_a_shape)
{
    parses(model("[4]", LAYER("c", "constant", ", 'inputs': [], 'shape': [4]") ","
                        LAYER("y", "add", ", 'inputs': ['input', 'c']"), ""));
    REFUSED(model("[4]", LAYER("c", "constant", ", 'inputs': []") ","
                         LAYER("y", "add", ", 'inputs': ['input', 'c']"), ""),
            "layer 'c'", "'shape' is missing");
    REFUSED(model("[4]", LAYER("c", "constant", ", 'shape': [4]") ","
                         LAYER("y", "add", ", 'inputs': ['input', 'c']"), ""),
            "layer 'c'", "'inputs' must be [] for a constant");
    REFUSED(model("[4]", LAYER("c", "constant", ", 'inputs': ['input'], 'shape': [4]") ","
                         LAYER("y", "add", ", 'inputs': ['input', 'c']"), ""),
            "layer 'c'", "'inputs' must be [] for a constant");
    REFUSED(model("[4]", LAYER("c", "constant", ", 'inputs': [], 'shape': [4, -1]") ","
                         LAYER("y", "add", ", 'inputs': ['input', 'c']"), ""),
            "layer 'c'", "'shape' must be an array of 1 to 4 positive integers");
    REFUSED(model("[4]", LAYER("r", "relu", ", 'inputs': []") "," FC("fc", 2), ""),
            "layer 'r'", "'inputs' must be an array of 1 to 8 names");
}

Test(model_conf, conv_groups_must_divide)
{
    REFUSED(model("[4, 5, 5]", LAYER("c", "conv2d", ", 'filters': 3, 'kernel_size': 3, "
                                     "'groups': 2") "," LAYER("f", "flatten", ""), ""),
            "layer 'c'", "'groups' 2 does not divide", "4 input channels and the 3 filters");
    REFUSED(model("[3, 9]", LAYER("c", "conv1d", ", 'filters': 6, 'kernel_size': 3, "
                                  "'groups': 2") "," LAYER("f", "flatten", ""), ""),
            "layer 'c'", "'groups' 2 does not divide");
    REFUSED(model("[4, 5, 5]", LAYER("c", "conv2d", ", 'filters': 4, 'kernel_size': 3, "
                                     "'groups': 0") "," LAYER("f", "flatten", ""), ""),
            "layer 'c'", "'groups' must be an integer in [1,");
}

Test(model_conf, conv_dilation)
{
    REFUSED(model("[1, 5, 5]", LAYER("c", "conv2d", ", 'filters': 2, 'kernel_size': 3, "
                                     "'dilation': 3") "," LAYER("f", "flatten", ""), ""),
            "layer 'c'", "window 7x7 does not fit input 5x5");
    REFUSED(model("[1, 5, 5]", LAYER("c", "conv2d", ", 'filters': 2, 'kernel_size': 3, "
                                     "'dilation': [1, 0]") "," LAYER("f", "flatten", ""), ""),
            "layer 'c'", "'dilation' must be a positive integer or [h, w]");
    REFUSED(model("[2, 9]", LAYER("c", "conv1d", ", 'filters': 2, 'kernel_size': 3, "
                                  "'dilation': [2, 2]") "," LAYER("f", "flatten", ""), ""),
            "layer 'c'", "'dilation' must be an integer");
}

/* ---- sequences ---------------------------------------------------------------- */

/* A graph model of inputs, layers and outputs (each a list's contents). */
static const char *graph(const char *inputs, const char *layers, const char *outputs)
{
    static char buf[4096];
    snprintf(buf, sizeof(buf), "{'name': 'm', 'inputs': [%s], 'layers': [%s], "
             "'outputs': [%s]}", inputs, layers, outputs);
    return buf;
}

#define IDS_IN "{'name': 'ids', 'datatype': 'INT64', 'shape': [-1], 'max_length': 6}"
#define VEC_IN "{'name': 'x', 'shape': [-1, 4], 'max_length': 6}"
#define EMB LAYER("emb", "embedding", ", 'inputs': ['ids'], 'num_embeddings': 9, 'dim': 4")
#define POOL(name, mode) LAYER(name, "seq_pool", ", 'mode': '" mode "'")
#define OUT(from) "{'name': 'y', 'from': '" from "', 'loss': 'mse'}"

Test(model_conf, sequence_inputs)
{
    parses(graph(IDS_IN ", " VEC_IN, EMB "," POOL("p", "mean") ","
                 LAYER("fx", "dense", ", 'inputs': ['x'], 'units': 4") "," POOL("q", "max") ","
                 LAYER("y", "add", ", 'inputs': ['p', 'q']"), OUT("y")));
    cr_expect_eq(conf->inputs[0].max_length, 6);
    cr_expect_eq(conf->inputs[0].shape[0], 6);
    cr_expect_eq(conf->inputs[0].dim, 6);
    cr_expect_eq(dl_input_width(&conf->inputs[0]), 7, "the length, then the positions");
    cr_expect_eq(conf->inputs[1].dim, 24);
    cr_expect_eq(dl_input_width(&conf->inputs[1]), 25);
    /* max_length defaults to 256 */
    parses(graph("{'name': 'ids', 'datatype': 'INT64', 'shape': [-1]}", EMB "," POOL("y", "sum"),
                 OUT("y")));
    cr_expect_eq(conf->inputs[0].max_length, 256);
    REFUSED(graph("{'name': 'x', 'shape': [4], 'max_length': 6}",
                  LAYER("y", "dense", ", 'units': 2"), OUT("y")),
            "input 'x'", "'max_length' applies to sequence inputs only");
    REFUSED(graph("{'name': 'x', 'shape': [-1, 4], 'max_length': 0}", POOL("y", "sum"),
                  OUT("y")),
            "input 'x'", "'max_length' must be an integer in [1,");
    REFUSED(graph("{'name': 'x', 'shape': [4, -1], 'max_length': 6}", POOL("y", "sum"),
                  OUT("y")),
            "input 'x'", "'shape'", "(the first may be -1: a sequence)");
}

Test(model_conf, text_inputs_and_tokenizers)
{
    const char *text = "{'name': 'text', 'datatype': 'BYTES', 'shape': [1], "
                       "'max_length': 40, 'tokenizer': {'type': 'bytes'}}";
    const char *emb = LAYER("emb", "embedding", ", 'inputs': ['text'], "
                            "'num_embeddings': 256, 'dim': 4");
    char layers[512];
    snprintf(layers, sizeof(layers), "%s,%s", emb, POOL("y", "mean"));
    parses(graph(text, layers, OUT("y")));
    cr_expect_eq(conf->inputs[0].dtype, DL_IN_BYTES);
    cr_expect_eq(conf->inputs[0].tok.kind, DL_TOK_BYTES);
    cr_expect_eq(conf->inputs[0].max_length, 40);
    cr_expect_eq(conf->inputs[0].shape[0], 40, "a sequence of ids, one a byte");
    parses(graph("{'name': 'text', 'datatype': 'BYTES', 'shape': [1], 'tokenizer': "
                 "{'type': 'words', 'vocab': 'vocab.txt', 'lowercase': true}}", layers,
                 OUT("y")));
    cr_expect_eq(conf->inputs[0].tok.kind, DL_TOK_WORDS);
    cr_expect(conf->inputs[0].tok.lowercase);
    cr_expect_str_eq(conf->inputs[0].tok.vocab, "./vocab.txt", "read beside model.json");
    REFUSED(graph("{'name': 'text', 'datatype': 'BYTES', 'shape': [1]}", layers, OUT("y")),
            "input 'text'", "'tokenizer' is missing (a BYTES input needs one)");
    REFUSED(graph("{'name': 'text', 'datatype': 'BYTES', 'shape': [2], "
                  "'tokenizer': {'type': 'bytes'}}", layers, OUT("y")),
            "input 'text'", "'shape' of a BYTES input must be [1]");
    REFUSED(graph("{'name': 'text', 'datatype': 'INT64', 'shape': [-1], "
                  "'tokenizer': {'type': 'bytes'}}", layers, OUT("y")),
            "input 'text'", "'tokenizer' applies to BYTES inputs only");
    REFUSED(graph("{'name': 'text', 'datatype': 'BYTES', 'shape': [1], "
                  "'tokenizer': {'type': 'chars'}}", layers, OUT("y")),
            "input 'text'", "'tokenizer' needs \"type\": \"bytes\" or \"words\"");
    REFUSED(graph("{'name': 'text', 'datatype': 'BYTES', 'shape': [1], "
                  "'tokenizer': {'type': 'words'}}", layers, OUT("y")),
            "input 'text'", "of type \"words\" needs 'vocab'");
    REFUSED(graph("{'name': 'text', 'datatype': 'BYTES', 'shape': [1], "
                  "'tokenizer': {'type': 'bytes', 'vocab': 'v.txt'}}", layers, OUT("y")),
            "input 'text'", "of type \"bytes\" takes no 'vocab' or 'lowercase'");
}

Test(model_conf, seq_pool_modes)
{
    static const char *const modes[4] = { "mean", "max", "sum", "last" };
    static const int want[4] = { DL_SEQ_POOL_MEAN, DL_SEQ_POOL_MAX, DL_SEQ_POOL_SUM,
                                 DL_SEQ_POOL_LAST };
    char layers[512];
    for (int k = 0; k < 4; k++) {
        snprintf(layers, sizeof(layers), "%s,{'name': 'y', 'type': 'seq_pool', 'mode': '%s'}",
                 EMB, modes[k]);
        parses(graph(IDS_IN, layers, OUT("y")));
        cr_expect_eq(conf->layers[1].pool, want[k], "mode %s", modes[k]);
        cr_expect_eq(conf->outputs[0].dim, 4, "[T, 4] pooled to [4]");
    }
    REFUSED(graph(IDS_IN, EMB "," POOL("y", "median"), OUT("y")),
            "layer 'y'", "'mode' must be \"mean\", \"max\", \"sum\" or \"last\"");
    REFUSED(graph(IDS_IN, EMB "," LAYER("y", "seq_pool", ""), OUT("y")),
            "layer 'y'", "'mode' must be");
    REFUSED(graph(IDS_IN, EMB "," LAYER("y", "seq_pool", ", 'mode': 'max', 'axis': 0"),
                  OUT("y")), "layer 'y'", "'axis'");
    REFUSED(graph("{'name': 'x', 'shape': [-1], 'max_length': 6}", POOL("y", "max"), OUT("y")),
            "layer 'y' (seq_pool) expects [T, D], got [6]");
}

Test(model_conf, embedding_padding_idx)
{
    parses(graph(IDS_IN, LAYER("emb", "embedding", ", 'num_embeddings': 9, 'dim': 4, "
                               "'padding_idx': 0") "," POOL("y", "sum"), OUT("y")));
    cr_expect_eq(conf->layers[0].padding_idx, 0);
    parses(graph(IDS_IN, EMB "," POOL("y", "sum"), OUT("y")));
    cr_expect_eq(conf->layers[0].padding_idx, -1, "none unless given");
    REFUSED(graph(IDS_IN, LAYER("emb", "embedding", ", 'num_embeddings': 9, 'dim': 4, "
                                "'padding_idx': 9") "," POOL("y", "sum"), OUT("y")),
            "layer 'emb'", "'padding_idx' must be below 'num_embeddings'");
    REFUSED(graph(IDS_IN, LAYER("emb", "embedding", ", 'num_embeddings': 9, 'dim': 4, "
                                "'padding_idx': -1") "," POOL("y", "sum"), OUT("y")),
            "layer 'emb'", "'padding_idx' must be an integer in [0,");
}

Test(model_conf, pos_embedding_max_length)
{
    parses(graph(IDS_IN, EMB "," LAYER("pos", "pos_embedding", ", 'max_length': 6") ","
                 POOL("y", "max"), OUT("y")));
    cr_expect_eq(conf->layers[1].max_length, 6);
    REFUSED(graph(IDS_IN, EMB "," LAYER("pos", "pos_embedding", "") "," POOL("y", "max"),
                  OUT("y")), "layer 'pos'", "'max_length' is missing");
    REFUSED(graph(IDS_IN, EMB "," LAYER("pos", "pos_embedding", ", 'max_length': 5") ","
                  POOL("y", "max"), OUT("y")),
            "layer 'pos' (pos_embedding): 'max_length' 5 is below the sequence's 6 positions");
}

/* layer_seq.c's refusals name the layer, its type and why. */
Test(model_conf, layers_refused_on_a_sequence)
{
    REFUSED(graph(IDS_IN, EMB "," LAYER("f", "flatten", "") "," FC("y", 2), OUT("y")),
            "layer 'f' (flatten) reads a sequence", "it would mix positions",
            "pool the sequence first");
    REFUSED(graph(IDS_IN, EMB "," LAYER("s", "softmax", ", 'axis': 0") "," POOL("y", "sum"),
                  OUT("y")),
            "layer 's' (softmax) reads a sequence", "its axis is the time axis (axis 0)");
    REFUSED(graph(IDS_IN, EMB "," LAYER("c", "conv1d", ", 'filters': 3, 'kernel_size': 3, "
                                        "'padding': 1, 'stride': 2") "," POOL("y", "sum"),
                  OUT("y")),
            "layer 'c' (conv1d) reads a sequence", "keeps the length: stride 1");
    REFUSED(graph(IDS_IN, EMB "," LAYER("c", "conv1d", ", 'filters': 3, 'kernel_size': 3") ","
                  POOL("y", "sum"), OUT("y")),
            "layer 'c' (conv1d) reads a sequence",
            "padding = dilation * (kernel_size - 1) / 2");
    REFUSED(graph(IDS_IN, EMB "," LAYER("c", "conv1d", ", 'filters': 4, 'kernel_size': 1, "
                                        "'groups': 2") "," POOL("y", "sum"), OUT("y")),
            "layer 'c' (conv1d) reads a sequence", "groups 1");
    REFUSED(graph(IDS_IN, EMB "," LAYER("m", "maxpool1d", ", 'kernel_size': 2") ","
                  POOL("y", "sum"), OUT("y")),
            "layer 'm' (maxpool1d) reads a sequence");
    REFUSED(graph("{'name': 'x', 'shape': [-1], 'max_length': 6}", FC("d", 3) ","
                  POOL("y", "sum"), OUT("y")),
            "layer 'd' (dense) reads a sequence", "it needs a vector a position");
    REFUSED(graph(IDS_IN ", " VEC_IN, EMB "," LAYER("s", "add", ", 'inputs': ['emb', 'x']") ","
                  POOL("y", "sum"), OUT("y")),
            "layer 's' (add) reads a sequence", "sequences of different lengths");
    REFUSED(graph(IDS_IN ", {'name': 'z', 'shape': [6, 4]}",
                  EMB "," LAYER("s", "add", ", 'inputs': ['emb', 'z']") "," POOL("y", "sum"),
                  OUT("y")),
            "layer 's' (add) reads a sequence", "another input of as many dimensions");
    REFUSED(graph(VEC_IN, FC("y", 4), OUT("y")),
            "output 'y'", "a sequence output takes softmax_cross_entropy, crf or next_token");
}
