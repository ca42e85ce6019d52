/* onnx_import.c: the translation driver: an ONNX graph (onnx_read.c) into
 * model.json layers and F32 weights (operators in onnx_ops.c), the dead
 * layers pruned, the model.json beside it or the model's "dlserve.model"
 * metadata merged in, and `dlserve --import` writing the result into a
 * model repository. */
#define _POSIX_C_SOURCE 200809L
#include "onnx/translate.h"
#include "onnx/onnx_pb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct dl_onnx_model {
    char         *json;
    int           n;
    dl_st_tensor *st;
    tensor_out   *t;
};

/* ---- inputs and outputs ------------------------------------------------- */

static bool is_init(const onnx_graph *g, const char *name)
{
    for (int k = 0; k < g->ninits; k++)
        if (!strcmp(g->inits[k].name, name))
            return true;
    return false;
}

/* A graph input: its first dimension the batch, the others fixed; a
 * symbolic second one is a time axis: a sequence input of shape [-1,
 * ...] whose capacity is xl_max_length's. */
static dl_status add_input(xl *x, const onnx_value *in)
{
    static const struct { int dt; const char *name; } types[] = {
        {DT_FLOAT, "FP32"}, {DT_INT64, "INT64"}, {DT_INT32, "INT32"}, {DT_UINT8, "UINT8"},
    };
    const char *dt = NULL;
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++)
        dt = types[k].dt == in->elem ? types[k].name : dt;
    if (!dt)
        return dl_err_set(x->err, DL_ERR_INVALID, "graph input '%s': element type %d is not "
                          "float, int64, int32 or uint8", in->name, in->elem);
    if (!in->has_shape || in->ndim < 2 || in->ndim > DL_MAX_DIMS + 1 ||
        (in->dims[0] > 1))
        return dl_err_set(x->err, DL_ERR_INVALID, "graph input '%s': needs a shape of 2 to 5 "
                          "dimensions whose first (the batch) is symbolic or 1", in->name);
    json_t *shape = json_array();
    tvalue *v = xl_add(x, in->name);
    char name[DL_NAME_MAX];
    xl_layer_name(x, in->name, name);
    char *src = onnx_strdup(x->g->arena, name);
    if (!shape || !v || !src) {
        json_decref(shape);
        return dl_err_set(x->err, DL_ERR_NOMEM, "inputs");
    }
    v->src = src;
    v->nd = in->ndim - 1;
    v->ids = in->elem != DT_FLOAT;
    v->input = true;
    v->seq = in->dims[1] < 1;
    for (int k = 1; k < in->ndim; k++) {
        if (in->dims[k] < 1 && k > 1) {
            json_decref(shape);
            return dl_err_set(x->err, DL_ERR_INVALID, "graph input '%s': dimension %d is "
                              "symbolic: only the first (the batch) and the second (a time "
                              "axis) may be", in->name, k);
        }
        v->d[k - 1] = k == 1 && v->seq ? xl_max_length(x, in->name) : in->dims[k];
        json_array_append_new(shape, json_integer(k == 1 && v->seq ? -1 : in->dims[k]));
    }
    json_t *o = json_pack("{s:s,s:o,s:s}", "name", name, "shape", shape, "datatype", dt);
    if (o && v->seq)
        json_object_set_new(o, "max_length", json_integer(v->d[0]));
    json_array_append_new(x->inputs, o);
    return DL_OK;
}

/* The layer feeding graph output k: an identity when the value is a model
 * input or a layer that already feeds an output. */
static dl_status add_output(xl *x, int k, json_t *outs)
{
    const char *name = x->g->outputs[k].name;
    tvalue *v = xl_find(x, name);
    if (!v || v->c)
        return dl_err_set(x->err, DL_ERR_INVALID, "graph output '%s' is %s", name,
                          v ? "a constant (nothing to compute)" : "produced by no node");
    char where[64];
    if (!xl_std(v))
        return dl_err_set(x->err, DL_ERR_INVALID, "graph output '%s' holds the batch %s, "
                          "not alone on axis 0", name, xl_layout_text(v, where, sizeof(where)));
    bool shared = false;
    size_t i;
    json_t *o;
    json_array_foreach(outs, i, o)
        shared = shared || !strcmp(json_string_value(json_object_get(o, "from")), v->src);
    json_array_foreach(x->inputs, i, o)
        shared = shared || !strcmp(json_string_value(json_object_get(o, "name")), v->src);
    char lname[DL_NAME_MAX], oname[DL_NAME_MAX];
    xl_sanitize(name, oname);
    json_array_foreach(outs, i, o)
        if (!strcmp(json_string_value(json_object_get(o, "name")), oname))
            return dl_err_set(x->err, DL_ERR_INVALID, "graph output '%s': its name is used "
                              "twice", name);
    if (shared) {
        tvalue *nv = xl_add(x, name);
        xl_layer_name(x, name, lname);
        const char *src = v->src;
        dl_status st = nv ? xl_emit(x, json_pack("{s:s}", "type", "identity"), lname, &src,
                                    1, nv, v->nd, v->d)
                          : dl_err_set(x->err, DL_ERR_NOMEM, "outputs");
        if (st)
            return st;
        v = nv;
    }
    /* served as computed (mse); a sequence output takes per-token losses
     * only: scores a position (softmax_cross_entropy) */
    json_array_append_new(outs, json_pack("{s:s,s:s,s:s}", "name", oname, "from", v->src,
                                          "loss", v->seq ? "softmax_cross_entropy" : "mse"));
    return DL_OK;
}

/* ---- pruning ----------------------------------------------------------- */

static bool reads(json_t *l, const char *name)
{
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(l, "inputs"), i, s)
        if (!strcmp(json_string_value(s), name))
            return true;
    return false;
}

/* Drops the layers no output depends on, and their tensors. */
static void prune(xl *x, json_t *outs)
{
    for (int i = (int)json_array_size(x->layers) - 1; i >= 0; i--) {
        json_t *l = json_array_get(x->layers, (size_t)i);
        const char *name = json_string_value(json_object_get(l, "name"));
        bool live = false;
        size_t k;
        json_t *o;
        json_array_foreach(outs, k, o)
            live = live || !strcmp(json_string_value(json_object_get(o, "from")), name);
        for (size_t j = (size_t)i + 1; !live && j < json_array_size(x->layers); j++)
            live = reads(json_array_get(x->layers, j), name);
        if (live)
            continue;
        size_t len = strlen(name);
        for (int t = x->nt - 1; t >= 0; t--)
            if (!strncmp(x->t[t].name, name, len) && x->t[t].name[len] == '.' &&
                !strchr(x->t[t].name + len + 1, '.')) {
                free(x->t[t].name);
                free(x->t[t].data);
                x->t[t] = x->t[--x->nt];
            }
        json_array_remove(x->layers, (size_t)i);
    }
}

/* ---- merge with model.json or metadata ---------------------------------- */

/* The entry of list (or the single object `one`, when list has one
 * entry) called name. */
static json_t *entry_named(json_t *list, json_t *one, size_t n, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
        if (json_is_string(json_object_get(e, "name")) &&
            !strcmp(json_string_value(json_object_get(e, "name")), name))
            return e;
    return n == 1 && json_is_object(one) ? one : NULL;
}

static void merge_outputs(json_t *outs, json_t *list, json_t *one, json_t *top_loss)
{
    size_t i;
    json_t *o;
    json_array_foreach(outs, i, o) {
        const char *name = json_string_value(json_object_get(o, "name"));
        json_t *e = entry_named(list, one, json_array_size(outs), name);
        json_t *loss = e ? json_object_get(e, "loss") : NULL;
        if (!loss && e == one && json_array_size(outs) == 1)
            loss = top_loss;
        if (loss)
            json_object_set(o, "loss", loss);
        if (e && json_object_get(e, "labels"))
            json_object_set(o, "labels", json_object_get(e, "labels"));
        if (e && json_object_get(e, "weight"))
            json_object_set(o, "weight", json_object_get(e, "weight"));
        if (e && json_object_get(e, "of"))
            json_object_set(o, "of", json_object_get(e, "of"));
    }
}

/* A crf output's transitions: the initializer "<output>.transitions" that
 * dlserve's export writes beside the tag scores (the graph reads none). */
static dl_status crf_weights(xl *x, json_t *outs)
{
    size_t i;
    json_t *o;
    json_array_foreach(outs, i, o) {
        const char *loss = json_string_value(json_object_get(o, "loss"));
        if (!loss || strcmp(loss, "crf"))
            continue;
        const char *name = json_string_value(json_object_get(o, "name"));
        char want[DL_NAME_MAX + 16];
        snprintf(want, sizeof(want), "%s.transitions", name);
        for (int k = 0; k < x->g->ninits; k++) {
            const onnx_tensor *t = &x->g->inits[k];
            if (!strcmp(t->name, want) && t->f && t->ndim == 2) {
                dl_status st = xl_tensor(x, name, "transitions", 2, t->dims, t->f, 0);
                if (st)
                    return st;
                break;
            }
        }
    }
    return DL_OK;
}

/* A text input of the model.json beside (its tokenizer) for an ONNX input
 * of ids over a time axis: the engine tokenizes, the graph reads the ids. */
static void merge_text_input(json_t *in, json_t *e)
{
    json_t *tok = json_object_get(e, "tokenizer");
    const char *dt = json_string_value(json_object_get(in, "datatype"));
    if (!tok || !json_object_get(in, "max_length") || !dt || !strcmp(dt, "FP32") ||
        json_array_size(json_object_get(in, "shape")) != 1)
        return;
    json_object_set_new(in, "datatype", json_string("BYTES"));
    json_object_set_new(in, "shape", json_pack("[i]", 1));
    json_object_set(in, "tokenizer", tok);
}

static void merge_beside(json_t *root, json_t *b)
{
    static const char *const keep[] = {"description", "training", "serving", "generate"};
    for (size_t k = 0; k < sizeof(keep) / sizeof(keep[0]); k++)
        if (json_object_get(b, keep[k]))
            json_object_set(root, keep[k], json_object_get(b, keep[k]));
    json_t *ins = json_object_get(root, "inputs");
    size_t i;
    json_t *in;
    json_array_foreach(ins, i, in) {
        json_t *e = entry_named(json_object_get(b, "inputs"), json_object_get(b, "input"),
                                json_array_size(ins),
                                json_string_value(json_object_get(in, "name")));
        if (e && json_object_get(e, "scaling"))
            json_object_set(in, "scaling", json_object_get(e, "scaling"));
        if (e)
            merge_text_input(in, e);
    }
    merge_outputs(json_object_get(root, "outputs"), json_object_get(b, "outputs"),
                  json_object_get(b, "output"), json_object_get(b, "loss"));
}

/* The metadata's text inputs whose tokenizer needs no file (bytes): a
 * words tokenizer's vocabulary comes with a model.json beside. */
static void merge_meta_inputs(json_t *ins, json_t *meta)
{
    size_t i;
    json_t *in;
    json_array_foreach(ins, i, in) {
        json_t *e = entry_named(json_object_get(meta, "inputs"), NULL, 0,
                                json_string_value(json_object_get(in, "name")));
        const char *type = json_string_value(json_object_get(json_object_get(e, "tokenizer"),
                                                             "type"));
        if (type && !strcmp(type, "bytes"))
            merge_text_input(in, e);
    }
}

static dl_status merge(xl *x, json_t *root)
{
    if (x->beside)
        merge_beside(root, x->beside);
    else if (x->meta) {
        merge_meta_inputs(json_object_get(root, "inputs"), x->meta);
        merge_outputs(json_object_get(root, "outputs"), json_object_get(x->meta, "outputs"),
                      NULL, NULL);
    }
    return crf_weights(x, json_object_get(root, "outputs"));
}

/* The model.json beside (text, may be NULL) and the metadata
 * "dlserve.model", parsed into x->beside and x->meta. */
static dl_status read_sides(xl *x, const char *beside)
{
    json_error_t je;
    if (beside) {
        x->beside = json_loads(beside, 0, &je);
        if (!json_is_object(x->beside))
            return dl_err_set(x->err, DL_ERR_INVALID, "model.json beside the ONNX model: "
                              "line %d: %s", je.line, x->beside ? "not an object" : je.text);
    }
    if (x->g->meta_model) {
        x->meta = json_loads(x->g->meta_model, 0, &je);
        if (!json_is_object(x->meta))
            return dl_err_set(x->err, DL_ERR_INVALID, "metadata 'dlserve.model' is not a JSON "
                              "object");
    }
    return DL_OK;
}

int64_t xl_max_length(xl *x, const char *name)
{
    if (x->max_length > 0)
        return x->max_length;
    json_t *sides[2] = { x->beside, x->meta };
    for (int k = 0; k < 2; k++) {
        json_t *ins = json_object_get(sides[k], "inputs");
        json_t *e = entry_named(ins, json_object_get(sides[k], "input"),
                                ins ? json_array_size(ins) : 1, name);
        json_t *ml = json_object_get(e, "max_length");
        if (json_is_integer(ml) && json_integer_value(ml) > 0)
            return json_integer_value(ml);
    }
    /* the generate block's context, for its ids input */
    json_t *gen = json_object_get(x->beside, "generate");
    json_t *in = json_object_get(gen, "input"), *mc = json_object_get(gen, "max_context");
    if (json_is_string(in) && !strcmp(json_string_value(in), name) && json_is_integer(mc) &&
        json_integer_value(mc) > 0)
        return json_integer_value(mc);
    return DL_ONNX_MAX_LENGTH;
}

/* ---- the translation ------------------------------------------------------ */

/* model.json's text: one line a key, and one line an entry of inputs,
 * layers and outputs. New, or NULL when out of memory. */
static char *dump(json_t *root)
{
    dl_sbuf b = {0};
    const char *key;
    json_t *v;
    size_t left = json_object_size(root);
    dl_sbuf_printf(&b, "{\n");
    json_object_foreach(root, key, v) {
        bool list = json_is_array(v) && json_array_size(v) > 0;
        char *text = json_dumps(v, JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
        dl_sbuf_printf(&b, "  \"%s\": %s", key, list ? "[\n" : text ? text : "null");
        free(text);
        for (size_t i = 0; list && i < json_array_size(v); i++) {
            text = json_dumps(json_array_get(v, i), JSON_PRESERVE_ORDER);
            dl_sbuf_printf(&b, "    %s%s\n", text ? text : "null",
                           i + 1 < json_array_size(v) ? "," : "");
            free(text);
        }
        dl_sbuf_printf(&b, "%s%s\n", list ? "  ]" : "", --left ? "," : "");
    }
    dl_sbuf_printf(&b, "}");
    if (b.oom) {
        dl_sbuf_free(&b);
        return NULL;
    }
    return b.s;
}

static dl_status translate(xl *x, const char *name, const char *beside, char **json)
{
    /* Room for every value up front (a node adds at most two), so that no
     * xl_add moves the values an operator holds pointers to. */
    int cap = x->g->ninits + x->g->ninputs + x->g->noutputs + 16;
    for (int i = 0; i < x->g->nnodes; i++)
        cap += 2 * x->g->nodes[i].nout;
    if (!(x->v = malloc((size_t)cap * sizeof(*x->v))))
        return dl_err_set(x->err, DL_ERR_NOMEM, "values");
    x->capv = cap;
    dl_status st = read_sides(x, beside);
    for (int k = 0; k < x->g->ninits && st == DL_OK; k++) {
        tvalue *v = xl_add(x, x->g->inits[k].name);
        st = v ? DL_OK : dl_err_set(x->err, DL_ERR_NOMEM, "values");
        if (v)
            v->c = &x->g->inits[k];
    }
    for (int k = 0; k < x->g->ninputs && st == DL_OK; k++)
        if (!is_init(x->g, x->g->inputs[k].name))
            st = add_input(x, &x->g->inputs[k]);
    for (int i = 0; i < x->g->nnodes && st == DL_OK; i++)
        st = xl_node(x, &x->g->nodes[i]);
    json_t *outs = json_array();
    for (int k = 0; k < x->g->noutputs && st == DL_OK; k++)
        st = add_output(x, k, outs);
    if (st == DL_OK && x->g->noutputs == 0)
        st = dl_err_set(x->err, DL_ERR_INVALID, "the graph has no outputs");
    if (st == DL_OK)
        prune(x, outs);
    if (st == DL_OK)
        st = xl_merge_stacks(x, outs);
    /* a model that generates: its attention as attention layers, which the
     * decoder's key-value cache runs on */
    if (st == DL_OK && json_object_get(x->beside, "generate"))
        st = xl_fuse_attention(x, outs);
    json_t *root = json_pack("{s:s,s:O,s:O,s:o}", "name", name, "inputs", x->inputs,
                             "layers", x->layers, "outputs", outs);
    if (st == DL_OK && !root)
        st = dl_err_set(x->err, DL_ERR_NOMEM, "model.json");
    if (st == DL_OK)
        st = merge(x, root);
    if (st == DL_OK && !(*json = dump(root)))
        st = dl_err_set(x->err, DL_ERR_NOMEM, "model.json");
    json_decref(root);   /* json_pack took outs, even when it failed */
    return st;
}

static void xl_fini(xl *x)
{
    for (int k = 0; k < x->nt; k++) {
        free(x->t[k].name);
        free(x->t[k].data);
    }
    free(x->t);
    free(x->v);
    json_decref(x->layers);
    json_decref(x->inputs);
    json_decref(x->beside);
    json_decref(x->meta);
}

static dl_status finish(xl *x, char *json, dl_onnx_model **out)
{
    dl_onnx_model *om = calloc(1, sizeof(*om));
    dl_st_tensor *st = calloc((size_t)x->nt + 1, sizeof(*st));
    if (!om || !st) {
        free(om);
        free(st);
        free(json);
        return dl_err_set(x->err, DL_ERR_NOMEM, "model");
    }
    for (int k = 0; k < x->nt; k++) {
        st[k].name = x->t[k].name;
        st[k].dtype = DL_ST_F32;
        st[k].ndim = x->t[k].ndim;
        memcpy(st[k].shape, x->t[k].shape, sizeof(x->t[k].shape));
        st[k].data = x->t[k].data;
        st[k].nbytes = (size_t)dl_shape_numel(x->t[k].ndim, x->t[k].shape) * sizeof(float);
    }
    om->json = json;
    om->n = x->nt;
    om->st = st;
    om->t = x->t;
    x->t = NULL;
    x->nt = 0;
    *out = om;
    return DL_OK;
}

/* dl_onnx_parse, with the time axes' capacity max_length (0: each
 * input's from the model.json beside, the metadata, or 256). */
static dl_status parse(const void *buf, size_t len, const char *dir, const char *name,
                       const char *beside, int64_t max_length, const char *what,
                       dl_onnx_model **out, dl_err *err)
{
    *out = NULL;
    if (!dl_model_name_valid(name, strlen(name)))
        return dl_err_set(err, DL_ERR_INVALID, "'%s' is not a valid model name", name);
    onnx_graph *g;
    dl_status st = onnx_read(buf, len, dir, what, &g, err);
    if (st != DL_OK)
        return st;
    xl x = { .g = g, .err = err, .max_length = max_length, .layers = json_array(),
             .inputs = json_array() };
    char *json = NULL;
    st = x.layers && x.inputs ? translate(&x, name, beside, &json)
                              : dl_err_set(err, DL_ERR_NOMEM, "model");
    if (st != DL_OK && err && strncmp(err->msg, what, strlen(what)))
        dl_err_prefix(err, "%s", what);
    if (st == DL_OK)
        st = finish(&x, json, out);
    xl_fini(&x);
    onnx_graph_free(g);
    return st;
}

dl_status dl_onnx_parse(const void *buf, size_t len, const char *dir, const char *name,
                        const char *beside, const char *what, dl_onnx_model **out,
                        dl_err *err)
{
    return parse(buf, len, dir, name, beside, 0, what, out, err);
}

/* dl_onnx_load, with parse's max_length. */
static dl_status load(const char *path, const char *name, const char *beside,
                      int64_t max_length, dl_onnx_model **out, dl_err *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0 && sb.st_size > DL_ONNX_MAX_BYTES)
        return dl_err_set(err, DL_ERR_INVALID, "%s: larger than 2 GiB", path);
    char *buf;
    size_t len;
    dl_status st = dl_file_read(path, &buf, &len, err);
    if (st != DL_OK)
        return st;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    st = parse(buf, len, dir, name, beside, max_length, path, out, err);
    free(buf);
    return st;
}

dl_status dl_onnx_load(const char *path, const char *name, const char *beside,
                       dl_onnx_model **out, dl_err *err)
{
    return load(path, name, beside, 0, out, err);
}

void dl_onnx_free(dl_onnx_model *om)
{
    if (!om)
        return;
    for (int k = 0; k < om->n; k++) {
        free(om->t[k].name);
        free(om->t[k].data);
    }
    free(om->t);
    free(om->st);
    free(om->json);
    free(om);
}

const char *dl_onnx_json(const dl_onnx_model *om) { return om->json; }
int dl_onnx_tensor_count(const dl_onnx_model *om) { return om->n; }
const dl_st_tensor *dl_onnx_tensor_at(const dl_onnx_model *om, int i)
{
    return i >= 0 && i < om->n ? &om->st[i] : NULL;
}

dl_status dl_onnx_build(const dl_onnx_model *om, dl_backend *be, const char *what,
                        dl_model_conf **conf, dl_model **m, dl_err *err)
{
    if (m)
        *m = NULL;
    dl_status st = dl_model_conf_parse(om->json, strlen(om->json), what, conf, err);
    if (st != DL_OK || !m)
        return st;
    st = dl_model_new(be, *conf, 1, m, err);
    if (st == DL_OK)
        st = dl_model_set_weights(*m, om->st, om->n, what, err);
    if (st != DL_OK) {
        dl_model_free(*m);
        *m = NULL;
        dl_model_conf_free(*conf);
        *conf = NULL;
    }
    return st;
}

/* ---- dlserve --import ---------------------------------------------------- */

static dl_status write_text(const char *path, const char *text, dl_err *err)
{
    char tmp[4400];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    ok = f && fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0)
        return dl_err_set(err, DL_ERR_IO, "%s: cannot write", path);
    return DL_OK;
}

dl_status dl_onnx_import(const char *path, const char *models_dir, const char *name,
                         int64_t max_length, int64_t *version, dl_err *err)
{
    char dir[4200], file[4300];
    snprintf(dir, sizeof(dir), "%s/%s", models_dir, name);
    snprintf(file, sizeof(file), "%s/model.json", dir);
    char *beside = NULL;
    size_t len;
    struct stat sb;
    dl_status st = stat(file, &sb) == 0 ? dl_file_read(file, &beside, &len, err) : DL_OK;
    dl_onnx_model *om = NULL;
    if (st == DL_OK)
        st = load(path, name, beside, max_length, &om, err);
    free(beside);
    dl_backend *be = NULL;
    dl_model_conf *conf = NULL;
    dl_model *m = NULL;
    if (st == DL_OK)
        st = dl_backend_cpu_new(1, &be, err);
    if (st == DL_OK)
        st = dl_onnx_build(om, be, path, &conf, &m, err);
    if (st == DL_OK && ((mkdir(models_dir, 0777) && stat(models_dir, &sb) != 0) ||
                        (mkdir(dir, 0777) && stat(dir, &sb) != 0)))
        st = dl_err_set(err, DL_ERR_IO, "%s: cannot create the model folder", dir);
    if (st == DL_OK) {
        *version = dl_repo_next(dir);
        snprintf(file, sizeof(file), "%s/%lld", dir, (long long)*version);
        if (mkdir(file, 0777) != 0)
            st = dl_err_set(err, DL_ERR_IO, "%s: cannot create the version folder", file);
    }
    if (st == DL_OK) {
        snprintf(file, sizeof(file), "%s/%lld/model.safetensors", dir, (long long)*version);
        st = dl_model_save(m, file, NULL, err);
    }
    if (st == DL_OK) {
        snprintf(file, sizeof(file), "%s/model.json", dir);
        st = write_text(file, dl_onnx_json(om), err);
    }
    dl_model_free(m);
    dl_model_conf_free(conf);
    dl_backend_free(be);
    dl_onnx_free(om);
    return st;
}
