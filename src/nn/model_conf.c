/* model_conf.c: parsing and validation of model.json (every error names
 * the file, the key and what is wrong with it), its input scaling and the
 * model name rule. */
#define _POSIX_C_SOURCE 200809L
#include "nn/layer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Context for error messages: "what: where: problem". */
typedef struct ctx {
    const char *what;
    char        where[96];
    dl_err     *err;
} ctx;

static dl_status bad(ctx *c, const char *key, const char *problem)
{
    return dl_err_set(c->err, DL_ERR_INVALID, "%s: %s'%s' %s", c->what,
                      c->where, key, problem);
}

static bool known_key(const char *key, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (strcmp(key, *allowed) == 0)
            return true;
    return false;
}

static dl_status check_keys(ctx *c, json_t *obj, const char *const *allowed)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
        if (!known_key(key, allowed))
            return bad(c, key, "is not a known key here");
    return DL_OK;
}

/* Optional integer in [lo, hi]; absent keeps *out. */
static dl_status get_int(ctx *c, json_t *obj, const char *key, int64_t lo,
                         int64_t hi, bool required, int64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return required ? bad(c, key, "is missing") : DL_OK;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char msg[96];
        snprintf(msg, sizeof(msg), "must be an integer in [%lld, %lld]",
                 (long long)lo, (long long)hi);
        return bad(c, key, msg);
    }
    *out = json_integer_value(v);
    return DL_OK;
}

static dl_status get_num(ctx *c, json_t *obj, const char *key, double lo,
                         double hi, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return DL_OK;
    if (!json_is_number(v) || !(json_number_value(v) >= lo && json_number_value(v) <= hi)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "must be a number in [%g, %g]", lo, hi);
        return bad(c, key, msg);
    }
    *out = json_number_value(v);
    return DL_OK;
}

static dl_status get_bool(ctx *c, json_t *obj, const char *key, bool *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return DL_OK;
    if (!json_is_boolean(v))
        return bad(c, key, "must be true or false");
    *out = json_is_true(v);
    return DL_OK;
}

static dl_status get_name(ctx *c, json_t *obj, const char *key, bool required,
                          char *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return required ? bad(c, key, "is missing") : DL_OK;
    const char *s = json_string_value(v);
    if (!s || !*s || strlen(s) >= DL_NAME_MAX)
        return bad(c, key, "must be a non-empty string of under 64 characters");
    for (const char *p = s; *p; p++)
        if (!(*p == '-' || *p == '_' || *p == '.' || (*p >= '0' && *p <= '9') ||
              (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return bad(c, key, "may hold only letters, digits, '-', '_' and '.'");
    strcpy(out, s);
    return DL_OK;
}

/* kernel_size / stride / padding: an integer or [h, w]. */
static dl_status get_pair(ctx *c, json_t *obj, const char *key, int64_t lo,
                          bool required, int64_t *h, int64_t *w)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return required ? bad(c, key, "is missing") : DL_OK;
    if (json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= 4096) {
        *h = *w = json_integer_value(v);
        return DL_OK;
    }
    json_t *a = json_array_get(v, 0), *b = json_array_get(v, 1);
    if (json_is_array(v) && json_array_size(v) == 2 && json_is_integer(a) &&
        json_is_integer(b) && json_integer_value(a) >= lo && json_integer_value(b) >= lo &&
        json_integer_value(a) <= 4096 && json_integer_value(b) <= 4096) {
        *h = json_integer_value(a);
        *w = json_integer_value(b);
        return DL_OK;
    }
    return bad(c, key, lo ? "must be a positive integer or [h, w]"
                          : "must be a non-negative integer or [h, w]");
}

static const struct { const char *name; dl_layer_type type; } layer_names[] = {
    {"dense", DL_LAYER_DENSE}, {"conv2d", DL_LAYER_CONV2D},
    {"maxpool2d", DL_LAYER_MAXPOOL2D}, {"avgpool2d", DL_LAYER_AVGPOOL2D},
    {"batchnorm", DL_LAYER_BATCHNORM}, {"dropout", DL_LAYER_DROPOUT},
    {"flatten", DL_LAYER_FLATTEN}, {"embedding", DL_LAYER_EMBEDDING},
    {"relu", DL_LAYER_RELU}, {"tanh", DL_LAYER_TANH},
    {"sigmoid", DL_LAYER_SIGMOID}, {"softmax", DL_LAYER_SOFTMAX},
};

static dl_status parse_layer(ctx *c, json_t *j, dl_layer_conf *l)
{
    if (!json_is_object(j))
        return dl_err_set(c->err, DL_ERR_INVALID, "%s: %smust be an object",
                          c->what, c->where);
    dl_status st = get_name(c, j, "name", true, l->name);
    if (st != DL_OK)
        return st;
    snprintf(c->where, sizeof(c->where), "layer '%s': ", l->name);
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type)
        return bad(c, "type", "is missing or not a string");
    size_t k = 0, nk = sizeof(layer_names) / sizeof(layer_names[0]);
    while (k < nk && strcmp(layer_names[k].name, type) != 0)
        k++;
    if (k == nk)
        return bad(c, "type", "must be one of dense, conv2d, maxpool2d, avgpool2d, "
                   "batchnorm, dropout, flatten, embedding, relu, tanh, sigmoid, softmax");
    l->type = layer_names[k].type;
    l->bias = true;
    l->eps = 1e-5f;
    l->momentum = 0.1f;
    l->sh = l->sw = 1;

    static const char *const plain[] = {"name", "type", NULL};
    static const char *const dense[] = {"name", "type", "units", "bias", NULL};
    static const char *const conv[] = {"name", "type", "filters", "kernel_size",
                                       "stride", "padding", "bias", NULL};
    static const char *const pool[] = {"name", "type", "kernel_size", "stride",
                                       "padding", NULL};
    static const char *const bn[] = {"name", "type", "eps", "momentum", NULL};
    static const char *const drop[] = {"name", "type", "rate", NULL};
    static const char *const emb[] = {"name", "type", "num_embeddings", "dim", NULL};
    double d;
    switch (l->type) {
    case DL_LAYER_DENSE:
        if ((st = check_keys(c, j, dense)) || (st = get_bool(c, j, "bias", &l->bias)))
            return st;
        return get_int(c, j, "units", 1, 1 << 24, true, &l->units);
    case DL_LAYER_CONV2D:
        if ((st = check_keys(c, j, conv)) || (st = get_bool(c, j, "bias", &l->bias)) ||
            (st = get_int(c, j, "filters", 1, 1 << 16, true, &l->filters)) ||
            (st = get_pair(c, j, "kernel_size", 1, true, &l->kh, &l->kw)) ||
            (st = get_pair(c, j, "stride", 1, false, &l->sh, &l->sw)))
            return st;
        return get_pair(c, j, "padding", 0, false, &l->ph, &l->pw);
    case DL_LAYER_MAXPOOL2D:
    case DL_LAYER_AVGPOOL2D:
        if ((st = check_keys(c, j, pool)) ||
            (st = get_pair(c, j, "kernel_size", 1, true, &l->kh, &l->kw)))
            return st;
        l->sh = l->kh;
        l->sw = l->kw;
        if ((st = get_pair(c, j, "stride", 1, false, &l->sh, &l->sw)))
            return st;
        return get_pair(c, j, "padding", 0, false, &l->ph, &l->pw);
    case DL_LAYER_BATCHNORM:
        if ((st = check_keys(c, j, bn)))
            return st;
        d = l->eps;
        if ((st = get_num(c, j, "eps", 1e-12, 1.0, &d)))
            return st;
        l->eps = (float)d;
        d = l->momentum;
        st = get_num(c, j, "momentum", 0.0, 1.0, &d);
        l->momentum = (float)d;
        return st;
    case DL_LAYER_DROPOUT:
        if ((st = check_keys(c, j, drop)))
            return st;
        d = 0.5;
        st = get_num(c, j, "rate", 0.0, 0.999999, &d);
        l->rate = (float)d;
        return st;
    case DL_LAYER_EMBEDDING:
        if ((st = check_keys(c, j, emb)) ||
            (st = get_int(c, j, "num_embeddings", 1, INT32_MAX, true, &l->num_embeddings)))
            return st;
        return get_int(c, j, "dim", 1, 1 << 20, true, &l->dim);
    default:
        return check_keys(c, j, plain);
    }
}

static dl_status parse_input(ctx *c, json_t *in, dl_model_conf *m)
{
    static const char *const keys[] = {"name", "shape", "datatype", "scaling", NULL};
    static const char *const skeys[] = {"scale", "mean", "std", NULL};
    snprintf(c->where, sizeof(c->where), "input: ");
    if (!json_is_object(in))
        return bad(c, "input", "must be an object");
    dl_status st = check_keys(c, in, keys);
    strcpy(m->input_name, "input");
    if (st || (st = get_name(c, in, "name", false, m->input_name)))
        return st;
    json_t *shape = json_object_get(in, "shape");
    size_t nd = json_array_size(shape);
    if (!json_is_array(shape) || nd < 1 || nd > DL_MAX_DIMS)
        return bad(c, "shape", "must be an array of 1 to 4 positive integers");
    for (size_t i = 0; i < nd; i++) {
        json_t *v = json_array_get(shape, i);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 24))
            return bad(c, "shape", "must be an array of 1 to 4 positive integers");
        m->in_shape[i] = json_integer_value(v);
    }
    m->in_ndim = (int)nd;
    const char *dt = json_string_value(json_object_get(in, "datatype"));
    if (json_object_get(in, "datatype") && (!dt || strcmp(dt, "FP32") != 0))
        return bad(c, "datatype", "must be \"FP32\"");
    m->scale = 1.0f;
    m->mean = 0.0f;
    m->std = 1.0f;
    json_t *sc = json_object_get(in, "scaling");
    if (!sc)
        return DL_OK;
    snprintf(c->where, sizeof(c->where), "input.scaling: ");
    if (!json_is_object(sc))
        return bad(c, "scaling", "must be an object");
    double scale = 1.0, mean = 0.0, sd = 1.0;
    if ((st = check_keys(c, sc, skeys)) || (st = get_num(c, sc, "scale", -1e30, 1e30, &scale)) ||
        (st = get_num(c, sc, "mean", -1e30, 1e30, &mean)) ||
        (st = get_num(c, sc, "std", 1e-30, 1e30, &sd)))
        return st;
    m->scale = (float)scale;
    m->mean = (float)mean;
    m->std = (float)sd;
    return DL_OK;
}

static dl_status parse_output(ctx *c, json_t *o, dl_model_conf *m)
{
    static const char *const keys[] = {"name", "labels", NULL};
    snprintf(c->where, sizeof(c->where), "output: ");
    strcpy(m->output_name, "output");
    if (!o)
        return DL_OK;
    if (!json_is_object(o))
        return bad(c, "output", "must be an object");
    dl_status st = check_keys(c, o, keys);
    if (st || (st = get_name(c, o, "name", false, m->output_name)))
        return st;
    json_t *labels = json_object_get(o, "labels");
    if (!labels)
        return DL_OK;
    if (!json_is_array(labels))
        return bad(c, "labels", "must be an array of strings");
    m->labels = calloc(json_array_size(labels) + 1, sizeof(char *));
    if (!m->labels)
        return dl_err_set(c->err, DL_ERR_NOMEM, "labels");
    for (size_t i = 0; i < json_array_size(labels); i++) {
        const char *s = json_string_value(json_array_get(labels, i));
        if (!s || !*s)
            return bad(c, "labels", "must be an array of non-empty strings");
        if (!(m->labels[i] = strdup(s)))
            return dl_err_set(c->err, DL_ERR_NOMEM, "labels");
        m->nlabels = (int)i + 1;
    }
    return DL_OK;
}

static dl_status parse_training(ctx *c, json_t *t, dl_hparams *h)
{
    static const char *const keys[] = {"epochs", "batch_size", "optimizer", "lr",
        "momentum", "nesterov", "weight_decay", "beta1", "beta2", "eps",
        "schedule", "seed", NULL};
    static const char *const skeys[] = {"type", "warmup_epochs", "step_epochs",
                                        "gamma", NULL};
    *h = (dl_hparams){ .epochs = 10, .batch_size = 64, .optimizer = DL_OPTIM_SGD,
                       .lr = 0.01, .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999,
                       .adam_eps = 1e-8, .schedule = DL_SCHED_NONE,
                       .step_epochs = 10, .gamma = 0.1, .seed = 1 };
    if (!t)
        return DL_OK;
    snprintf(c->where, sizeof(c->where), "training: ");
    if (!json_is_object(t))
        return bad(c, "training", "must be an object");
    int64_t seed = (int64_t)h->seed;
    dl_status st;
    if ((st = check_keys(c, t, keys)) ||
        (st = get_int(c, t, "epochs", 1, 1000000, false, &h->epochs)) ||
        (st = get_int(c, t, "batch_size", 1, 1 << 20, false, &h->batch_size)) ||
        (st = get_num(c, t, "lr", 0.0, 1e6, &h->lr)) ||
        (st = get_num(c, t, "momentum", 0.0, 1.0, &h->momentum)) ||
        (st = get_bool(c, t, "nesterov", &h->nesterov)) ||
        (st = get_num(c, t, "weight_decay", 0.0, 1e3, &h->weight_decay)) ||
        (st = get_num(c, t, "beta1", 0.0, 0.999999, &h->beta1)) ||
        (st = get_num(c, t, "beta2", 0.0, 0.999999999, &h->beta2)) ||
        (st = get_num(c, t, "eps", 1e-30, 1.0, &h->adam_eps)) ||
        (st = get_int(c, t, "seed", 0, INT64_MAX, false, &seed)))
        return st;
    h->seed = (uint64_t)seed;
    json_t *o = json_object_get(t, "optimizer");
    if (o) {
        const char *s = json_string_value(o);
        if (s && strcmp(s, "sgd") == 0)
            h->optimizer = DL_OPTIM_SGD;
        else if (s && strcmp(s, "momentum") == 0)
            h->optimizer = DL_OPTIM_MOMENTUM;
        else if (s && strcmp(s, "adam") == 0)
            h->optimizer = DL_OPTIM_ADAM;
        else
            return bad(c, "optimizer", "must be \"sgd\", \"momentum\" or \"adam\"");
    }
    json_t *s = json_object_get(t, "schedule");
    if (!s)
        return DL_OK;
    snprintf(c->where, sizeof(c->where), "training.schedule: ");
    if (!json_is_object(s))
        return bad(c, "schedule", "must be an object");
    const char *type = json_string_value(json_object_get(s, "type"));
    if (!type || (strcmp(type, "none") && strcmp(type, "step") && strcmp(type, "cosine")))
        return bad(c, "type", "must be \"none\", \"step\" or \"cosine\"");
    h->schedule = !strcmp(type, "step") ? DL_SCHED_STEP
                : !strcmp(type, "cosine") ? DL_SCHED_COSINE : DL_SCHED_NONE;
    if ((st = check_keys(c, s, skeys)) ||
        (st = get_num(c, s, "warmup_epochs", 0.0, 1e6, &h->warmup_epochs)) ||
        (st = get_int(c, s, "step_epochs", 1, 1000000, false, &h->step_epochs)))
        return st;
    return get_num(c, s, "gamma", 0.0, 1.0, &h->gamma);
}

/* Most values a sample may have at any layer (the input included), and most
 * parameters a model may have: 2^34 floats (64 GiB), past any model that
 * fits in memory and low enough that no size computed from them overflows. */
#define MAX_COUNT (INT64_C(1) << 34)

/* a * b when both are >= 0 and the product at most MAX_COUNT; else -1. */
static int64_t mul_capped(int64_t a, int64_t b)
{
    if (a < 0 || b < 0 || (a != 0 && b > MAX_COUNT / a))
        return -1;
    return a * b;
}

static int64_t numel_capped(int nd, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n = mul_capped(n, shape[i]);
    return n;
}

/* Parameters (and running statistics) of layer l on a sample of shape
 * in[0..nd), which layer_shape accepted; -1 past MAX_COUNT. */
static int64_t layer_params(const dl_layer_conf *l, int nd, const int64_t *in)
{
    switch (l->type) {
    case DL_LAYER_DENSE:     return mul_capped(in[nd - 1] + 1, l->units);
    case DL_LAYER_CONV2D:    return mul_capped(mul_capped(in[0], l->kh * l->kw) + 1, l->filters);
    case DL_LAYER_BATCHNORM: return mul_capped(in[0], 4);
    case DL_LAYER_EMBEDDING: return mul_capped(l->num_embeddings, l->dim);
    default:                 return 0;
    }
}

/* Walks the layer shapes and checks the whole chain. */
static dl_status check_chain(ctx *c, dl_model_conf *m)
{
    int nd = m->in_ndim;
    int64_t shape[DL_MAX_DIMS];
    memcpy(shape, m->in_shape, sizeof(shape));
    if (numel_capped(nd, shape) < 0)
        return dl_err_set(c->err, DL_ERR_INVALID,
                          "%s: input: 'shape' has more than %lld values a sample", c->what,
                          (long long)MAX_COUNT);
    int64_t params = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const dl_layer_conf *l = &m->layers[i];
        for (int k = 0; k < i; k++)
            if (strcmp(m->layers[k].name, l->name) == 0)
                return dl_err_set(c->err, DL_ERR_INVALID, "%s: layers[%d]: name '%s' is used twice",
                                  c->what, i, l->name);
        if (l->type == DL_LAYER_EMBEDDING && i != 0)
            return dl_err_set(c->err, DL_ERR_INVALID, "%s: layer '%s': embedding must be the first layer",
                              c->what, l->name);
        int ond;
        int64_t out[DL_MAX_DIMS];
        if (layer_shape(l, nd, shape, &ond, out, c->err) != DL_OK)
            return dl_err_prefix(c->err, "%s", c->what);
        int64_t lp = layer_params(l, nd, shape);
        params = lp < 0 ? -1 : mul_capped(params + lp, 1);
        if (params < 0)
            return dl_err_set(c->err, DL_ERR_INVALID, "%s: layer '%s': the model has more "
                              "than %lld parameters", c->what, l->name, (long long)MAX_COUNT);
        if (numel_capped(ond, out) < 0)
            return dl_err_set(c->err, DL_ERR_INVALID, "%s: layer '%s' gives more than %lld "
                              "values a sample", c->what, l->name, (long long)MAX_COUNT);
        nd = ond;
        memcpy(shape, out, sizeof(out));
    }
    char buf[96];
    if (m->loss == DL_LOSS_XENT && nd != 1)
        return dl_err_set(c->err, DL_ERR_INVALID,
                          "%s: softmax_cross_entropy needs a 1-D output per sample, the layers give %s",
                          c->what, dl_shape_str(nd, shape, buf, sizeof(buf)));
    if (m->loss == DL_LOSS_XENT && m->layers[m->nlayers - 1].type == DL_LAYER_SOFTMAX)
        return dl_err_set(c->err, DL_ERR_INVALID,
                          "%s: with softmax_cross_entropy the last layer must give logits: "
                          "drop the final softmax (the loss applies it)", c->what);
    if (m->nlabels && m->nlabels != dl_shape_numel(nd, shape))
        return dl_err_set(c->err, DL_ERR_INVALID,
                          "%s: output: 'labels' has %d entries but the model gives %lld outputs",
                          c->what, m->nlabels, (long long)dl_shape_numel(nd, shape));
    return DL_OK;
}

static dl_status parse_root(ctx *c, json_t *root, dl_model_conf *m)
{
    static const char *const keys[] = {"name", "description", "input", "layers",
                                       "loss", "output", "training", NULL};
    if (!json_is_object(root))
        return dl_err_set(c->err, DL_ERR_INVALID, "%s: must be a JSON object", c->what);
    dl_status st = check_keys(c, root, keys);
    if (st || (st = get_name(c, root, "name", true, m->name)))
        return st;
    /* The model's name is also a folder, a URL part and a Redis key. */
    if (m->name[0] == '.')
        return bad(c, "name", "must not start with '.'");
    if (json_object_get(root, "description") && !json_is_string(json_object_get(root, "description")))
        return bad(c, "description", "must be a string");
    if (!json_object_get(root, "input"))
        return bad(c, "input", "is missing");
    if ((st = parse_input(c, json_object_get(root, "input"), m)))
        return st;
    c->where[0] = '\0';
    json_t *layers = json_object_get(root, "layers");
    if (!json_is_array(layers) || json_array_size(layers) == 0 || json_array_size(layers) > 1024)
        return bad(c, "layers", "must be a non-empty array of layer objects");
    m->layers = calloc(json_array_size(layers), sizeof(*m->layers));
    if (!m->layers)
        return dl_err_set(c->err, DL_ERR_NOMEM, "layers");
    for (size_t i = 0; i < json_array_size(layers); i++) {
        snprintf(c->where, sizeof(c->where), "layers[%zu]: ", i);
        if ((st = parse_layer(c, json_array_get(layers, i), &m->layers[i])))
            return st;
        m->nlayers = (int)i + 1;
    }
    c->where[0] = '\0';
    const char *loss = json_string_value(json_object_get(root, "loss"));
    if (json_object_get(root, "loss") && (!loss || (strcmp(loss, "softmax_cross_entropy") &&
                                                    strcmp(loss, "mse"))))
        return bad(c, "loss", "must be \"softmax_cross_entropy\" or \"mse\"");
    m->loss = loss && !strcmp(loss, "mse") ? DL_LOSS_MSE : DL_LOSS_XENT;
    if ((st = parse_output(c, json_object_get(root, "output"), m)) ||
        (st = parse_training(c, json_object_get(root, "training"), &m->train)))
        return st;
    return check_chain(c, m);
}

dl_status dl_model_conf_parse(const char *text, size_t len, const char *what,
                              dl_model_conf **out, dl_err *err)
{
    *out = NULL;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return dl_err_set(err, DL_ERR_INVALID, "%s:%d:%d: invalid JSON: %s", what,
                          jerr.line, jerr.column, jerr.text);
    dl_model_conf *m = calloc(1, sizeof(*m));
    ctx c = { .what = what, .err = err };
    dl_status st = m ? parse_root(&c, root, m) : dl_err_set(err, DL_ERR_NOMEM, "model");
    json_decref(root);
    if (st == DL_OK && !(m->json = strndup(text, len)))
        st = dl_err_set(err, DL_ERR_NOMEM, "model text");
    if (st != DL_OK) {
        dl_model_conf_free(m);
        return st;
    }
    *out = m;
    return DL_OK;
}

dl_status dl_model_conf_load(const char *path, dl_model_conf **out, dl_err *err)
{
    *out = NULL;
    char file[4096];
    struct stat sb;
    size_t n = strlen(path);
    bool is_json = n >= 5 && strcmp(path + n - 5, ".json") == 0;
    if ((stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) || !is_json)
        snprintf(file, sizeof(file), "%s/model.json", path);
    else
        snprintf(file, sizeof(file), "%s", path);
    char *text;
    size_t len;
    dl_status st = dl_file_read(file, &text, &len, err);
    if (st != DL_OK)
        return st;
    st = dl_model_conf_parse(text, len, file, out, err);
    free(text);
    return st;
}

void dl_model_conf_free(dl_model_conf *conf)
{
    if (!conf)
        return;
    for (int i = 0; i < conf->nlabels; i++)
        free(conf->labels[i]);
    free(conf->labels);
    free(conf->layers);
    free(conf->json);
    free(conf);
}

dl_scaling dl_scaling_of(const dl_model_conf *conf)
{
    return (dl_scaling){ conf->scale, conf->mean, conf->std };
}

void dl_scaling_apply(const dl_scaling *sc, float *dst, const void *src, int64_t n)
{
    const unsigned char *s = src;
    for (int64_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, s + 4 * i, sizeof(v));
        dst[i] = (v * sc->scale - sc->mean) / sc->std;
    }
}

bool dl_model_name_valid(const char *s, size_t len)
{
    /* A leading '.' would let "." and ".." reach the repository folder. */
    if (len == 0 || len >= DL_NAME_MAX || s[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!(c == '-' || c == '_' || c == '.' || (c >= '0' && c <= '9') ||
              (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            return false;
    }
    return true;
}
