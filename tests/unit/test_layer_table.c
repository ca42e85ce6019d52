/* test_layer_table.c: the layer-type table (src/nn/layer_table.c) has a
 * complete row for every dl_layer_type: a name that model.json parses back
 * to the type, ops that fit the arity, a shape rule, keys the parser takes,
 * the kernels it calls in the CPU backend, and an ONNX operator importing
 * to the type unless it is native only. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "nn/dl_nn.h"
#include "nn/layer.h"
#include "onnx/dl_onnx.h"

TestSuite(layer_table, .timeout = 10);

Test(layer_table, every_row_has_a_name_that_parses_back)
{
    for (int t = 0; t < DL_LAYER_COUNT; t++) {
        const char *name = layer_table[t].name;
        cr_assert_not_null(name, "layer type %d has no row (or no name)", t);
        cr_expect_str_eq(dl_layer_type_name((dl_layer_type)t), name);
        dl_layer_type back = DL_LAYER_COUNT;
        cr_expect(dl_layer_type_of(name, &back), "'%s' is not found by name", name);
        cr_expect_eq(back, t, "'%s' parses back as %s", name,
                     dl_layer_type_name(back));
    }
    dl_layer_type none;
    cr_expect_not(dl_layer_type_of("no_such_layer", &none));
    cr_expect_str_eq(dl_layer_type_name(DL_LAYER_COUNT), "?");
}

/* One input: forward. Two or more (arity 2 or -1), or one or two (-2):
 * forward_multi. A constant (arity 0) reads none and computes its value
 * with forward. */
Test(layer_table, ops_fit_the_arity)
{
    for (int t = 0; t < DL_LAYER_COUNT; t++) {
        const layer_type_info *r = &layer_table[t];
        const layer_ops *ops = layer_ops_for((dl_layer_type)t);
        cr_assert_not_null(ops, "%s has no ops", r->name);
        cr_expect_eq(ops, r->ops);
        cr_expect_not_null(r->shape, "%s has no shape rule", r->name);
        cr_expect_not_null(r->params, "%s has no keys string (\"\" for none)", r->name);
        cr_expect_eq(layer_arity((dl_layer_type)t), r->arity);
        cr_expect(r->arity >= -2 && r->arity <= 2, "%s: arity %d", r->name, r->arity);
        cr_expect(ops->forward || ops->forward_multi, "%s computes nothing", r->name);
        if (r->arity == 1 || r->arity == 0)
            cr_expect_not_null(ops->forward, "%s (arity %d) needs forward", r->name,
                               r->arity);
        else
            cr_expect_not_null(ops->forward_multi, "%s (arity %d) needs forward_multi",
                               r->name, r->arity);
        cr_expect_eq(r->arity == 0, t == DL_LAYER_CONSTANT, "%s: arity %d", r->name,
                     r->arity);
    }
}

/* Exactly the types that no ONNX operator imports as are native only. */
/* Every layer's kernels are in the CPU backend (the reference every other
 * backend is checked against): a softmax on another axis than the last
 * included, and each layer over a sequence (embedding and conv1d need
 * the sequence kernels only there). Without one of them, a layer is
 * refused. */
Test(layer_table, cpu_backend_has_every_layers_kernels)
{
    dl_backend *be = fx_cpu_backend();
    int needing = 0;
    for (int t = 0; t < DL_LAYER_COUNT; t++) {
        const layer_ops *ops = layer_ops_for((dl_layer_type)t);
        dl_layer_conf c = { .type = (dl_layer_type)t, .axis = 0 };
        layer l = { .ops = ops, .conf = &c, .be = be, .in_ndim = 2, .seq = true };
        if (!ops->supported)
            continue;
        needing++;
        cr_expect(ops->supported(&l), "the CPU backend lacks %s's kernels", layer_table[t].name);
        dl_backend_ops none = { .name = "none" };
        dl_backend bare = { .ops = &none };
        l.be = &bare;
        cr_expect_not(ops->supported(&l), "%s claims it needs no kernel", layer_table[t].name);
    }
    cr_expect_geq(needing, 20, "only %d layer types call the graph kernels", needing);
    dl_backend_free(be);
}

Test(layer_table, onnx_imports_each_type_not_native_only)
{
    for (int t = 0; t < DL_LAYER_COUNT; t++) {
        const layer_type_info *r = &layer_table[t];
        bool imported = dl_onnx_imports_layer((dl_layer_type)t);
        cr_expect_neq(imported, r->native_only, "%s: %s", r->name,
                      imported ? "ONNX imports it, yet it is marked native only"
                               : "no ONNX operator imports it: mark it native only");
    }
}

/* A model of input [2, 4, 4] -> identity "p" -> the type under test, with
 * extra keys `keys` on it. */
static dl_status parse_with(int t, const char *keys, dl_err *err)
{
    const layer_type_info *r = &layer_table[t];
    const char *in = r->arity == 0 ? ", 'inputs': []" : r->arity == 1 ? "" : ", 'inputs': ['p', 'p']";
    char text[1024];
    snprintf(text, sizeof(text), "{'name': 'm', 'input': {'shape': [2, 4, 4]}, 'layers': ["
             "{'name': 'p', 'type': 'identity'}, {'name': 'l', 'type': '%s'%s%s}]}",
             r->name, in, keys);
    const char *j = fx_dq(text);
    dl_model_conf *conf = NULL;
    dl_status st = dl_model_conf_parse(j, strlen(j), "t.json", &conf, err);
    dl_model_conf_free(conf);
    return st;
}

/* Each key a row lists is one the parser takes for that type (its value
 * may be refused: 1 does not suit every key), and an unlisted one is not. */
Test(layer_table, params_are_keys_the_parser_takes)
{
    for (int t = 0; t < DL_LAYER_COUNT; t++) {
        const layer_type_info *r = &layer_table[t];
        char keys[512] = "", key[64];
        size_t len = 0;
        for (const char *p = r->params; *p; ) {
            size_t n = strcspn(p, ", ");
            cr_assert(n > 0 && n < sizeof(key), "%s: bad keys string '%s'", r->name, r->params);
            memcpy(key, p, n);
            key[n] = '\0';
            len += (size_t)snprintf(keys + len, sizeof(keys) - len, ", '%s': 1", key);
            p += n;
            p += strspn(p, ", ");
        }
        dl_err err = {0};
        parse_with(t, keys, &err);
        cr_expect_null(strstr(err.msg, "is not a known key here"), "%s (keys %s): %s",
                       r->name, r->params, err.msg);
        err = (dl_err){0};
        cr_expect_eq(parse_with(t, ", 'no_such_key': 1", &err), DL_ERR_INVALID, "%s", r->name);
        cr_expect_not_null(strstr(err.msg, "'no_such_key' is not a known key here"), "%s: %s",
                           r->name, err.msg);
    }
}
