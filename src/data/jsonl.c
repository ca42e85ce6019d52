/* jsonl.c: JSON Lines datasets of a model: one object a line, a key per
 * input (text tokenized, sequences packed) and per output (its target),
 * read a line at a time into packed rows and target columns. */
#define _POSIX_C_SOURCE 200809L
#include "data/dl_data.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Nested lists deeper than a sample's dimensions plus one are refused. */
#define MAX_DEPTH (DL_MAX_DIMS + 1)

/* One load: the model, the rows read so far and the scratch of a line. */
typedef struct jl_ctx {
    const char          *what;           /* the file, in errors */
    const dl_model_conf *conf;
    bool                 targets;        /* output keys are targets (else ignored) */
    dl_tokenizer       **tok;            /* per input: BYTES inputs' tokenizers */
    int64_t             *in_at;          /* per input: its first float in a row */
    dl_dataset          *ds;
    int64_t              cap;            /* rows ds->x and ds->t have room for */
    double              *vals;           /* one key's numbers, as given */
    float               *fvals;          /* and as float32 (input_values) */
    int64_t              nvals, vcap;
} jl_ctx;

/* ---- numbers of a key ------------------------------------------------ */

static dl_status push_value(jl_ctx *c, double v, dl_err *err)
{
    if (c->nvals == c->vcap) {
        int64_t cap = c->vcap ? 2 * c->vcap : 256;
        double *d = realloc(c->vals, (size_t)cap * sizeof(double));
        if (d)
            c->vals = d;
        float *f = d ? realloc(c->fvals, (size_t)cap * sizeof(float)) : NULL;
        if (f)
            c->fvals = f;
        if (!d || !f)
            return dl_err_set(err, DL_ERR_NOMEM, "values of a line");
        c->vcap = cap;
    }
    c->vals[c->nvals++] = v;
    return DL_OK;
}

/* Appends the numbers of v (a number, or lists of them, flattened) to
 * c->vals. `name` names the key in errors. */
static dl_status flatten(jl_ctx *c, const json_t *v, const char *kind, const char *name,
                         int depth, dl_err *err)
{
    if (json_is_number(v))
        return push_value(c, json_number_value(v), err);
    if (!json_is_array(v))
        return dl_err_set(err, DL_ERR_INVALID, "%s '%s': value %lld is not a number", kind,
                          name, (long long)c->nvals + 1);
    if (depth == MAX_DEPTH)
        return dl_err_set(err, DL_ERR_INVALID, "%s '%s': lists nested deeper than %d", kind,
                          name, MAX_DEPTH);
    dl_status st = DL_OK;
    for (size_t i = 0; i < json_array_size(v) && st == DL_OK; i++)
        st = flatten(c, json_array_get(v, i), kind, name, depth + 1, err);
    return st;
}

/* Whether v fits the input's datatype: any number for FP32, else a
 * whole number in the type's range and below 2^24 (exact as a float). */
static bool fits_input(const dl_input_conf *in, double v)
{
    double lo = in->dtype == DL_IN_UINT8 ? 0 : -16777216.0;
    double hi = in->dtype == DL_IN_UINT8 ? 255 : 16777216.0;
    return in->dtype == DL_IN_FP32 || (v == floor(v) && v >= lo && v <= hi);
}

/* c->vals as float32 into c->fvals, each finite: `kind` and `name` name
 * the key in errors. */
static dl_status to_float(jl_ctx *c, const char *kind, const char *name, dl_err *err)
{
    for (int64_t i = 0; i < c->nvals; i++) {
        double v = c->vals[i];
        if (!(fabs(v) <= FLT_MAX))
            return dl_err_set(err, DL_ERR_INVALID, "%s '%s': value %lld (%g) is out of "
                              "float32's range", kind, name, (long long)i + 1, v);
        c->fvals[i] = (float)v;
    }
    return DL_OK;
}

/* c->vals as input ic's values into c->fvals: ids whole numbers in range,
 * FP32 values scaled as the input says. */
static dl_status input_values(jl_ctx *c, const dl_input_conf *ic, dl_err *err)
{
    for (int64_t i = 0; i < c->nvals; i++)
        if (!fits_input(ic, c->vals[i]))
            return dl_err_set(err, DL_ERR_INVALID, "input '%s': value %lld (%g) is not an id "
                              "of its datatype", ic->name, (long long)i + 1, c->vals[i]);
    dl_status st = to_float(c, "input", ic->name, err);
    if (st == DL_OK && ic->dtype == DL_IN_FP32)
        dl_scaling_apply(&ic->sc, c->fvals, c->fvals, c->nvals);
    return st;
}

/* ---- inputs ---------------------------------------------------------- */

/* A sequence input's list into c->vals: of numbers (flat: the positions
 * one after the other) or of lists, one a position of d values. */
static dl_status seq_values(jl_ctx *c, const dl_input_conf *ic, const json_t *v, int64_t d,
                            dl_err *err)
{
    if (!json_is_array(json_array_get(v, 0)))
        return flatten(c, v, "input", ic->name, 0, err);
    for (size_t p = 0; p < json_array_size(v); p++) {
        int64_t before = c->nvals;
        dl_status st = flatten(c, json_array_get(v, p), "input", ic->name, 1, err);
        if (st == DL_OK && c->nvals - before != d)
            st = dl_err_set(err, DL_ERR_INVALID, "input '%s': position %zu has %lld values, "
                            "not %lld", ic->name, p + 1, (long long)(c->nvals - before),
                            (long long)d);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

/* A sequence input's list, packed into row; more positions than its
 * max_length are refused. */
static dl_status seq_input(jl_ctx *c, const dl_input_conf *ic, const json_t *v, float *row,
                           dl_err *err)
{
    int64_t d = ic->dim / ic->max_length;
    if (!json_is_array(v))
        return dl_err_set(err, DL_ERR_INVALID, "input '%s' (a sequence) must be a list",
                          ic->name);
    dl_status st = seq_values(c, ic, v, d, err);
    if (st == DL_OK && c->nvals % d)
        st = dl_err_set(err, DL_ERR_INVALID, "input '%s': %lld values, not a multiple of the "
                        "%lld a position", ic->name, (long long)c->nvals, (long long)d);
    if (st == DL_OK && c->nvals / d > ic->max_length)
        st = dl_err_set(err, DL_ERR_INVALID, "input '%s': %lld positions, above max_length "
                        "%lld", ic->name, (long long)(c->nvals / d), (long long)ic->max_length);
    if (st == DL_OK)
        st = input_values(c, ic, err);
    return st == DL_OK ? dl_seq_pack(ic, c->fvals, c->nvals / d, row, err) : st;
}

/* Input k's key into its place in row. */
static dl_status read_input(jl_ctx *c, int k, const json_t *v, float *row, dl_err *err)
{
    const dl_input_conf *ic = &c->conf->inputs[k];
    c->nvals = 0;
    if (ic->dtype == DL_IN_BYTES) {
        if (!json_is_string(v))
            return dl_err_set(err, DL_ERR_INVALID, "input '%s' (BYTES) must be a string",
                              ic->name);
        return dl_seq_pack_text(ic, c->tok[k], json_string_value(v), json_string_length(v),
                                row, err);
    }
    if (ic->max_length > 0)
        return seq_input(c, ic, v, row, err);
    dl_status st = flatten(c, v, "input", ic->name, 0, err);
    if (st == DL_OK && c->nvals != ic->dim)
        st = dl_err_set(err, DL_ERR_INVALID, "input '%s': %lld values, the input takes %lld",
                        ic->name, (long long)c->nvals, (long long)ic->dim);
    if (st == DL_OK)
        st = input_values(c, ic, err);
    if (st == DL_OK)
        memcpy(row, c->fvals, (size_t)ic->dim * sizeof(float));
    return st;
}

/* ---- targets --------------------------------------------------------- */

/* One class of output o (`where`: "" or " token N" in errors): an index
 * in [0, classes) or one of its labels; -1 (a token left out) where
 * `skip` allows it. */
static dl_status read_class(const dl_output_conf *o, const char *where, const json_t *v,
                            int64_t classes, bool skip, float *out, dl_err *err)
{
    if (json_is_string(v)) {
        for (int j = 0; j < o->nlabels; j++)
            if (!strcmp(o->labels[j], json_string_value(v))) {
                *out = (float)j;
                return DL_OK;
            }
        return dl_err_set(err, DL_ERR_INVALID, "output '%s'%s: '%.40s' is not one of its %d "
                          "labels", o->name, where, json_string_value(v), o->nlabels);
    }
    double x = json_number_value(v);
    if (!json_is_number(v) || x != floor(x) || x >= (double)classes || x < (skip ? -1 : 0))
        return dl_err_set(err, DL_ERR_INVALID, "output '%s'%s: not a class: give an index in "
                          "[0, %lld)%s%s", o->name, where, (long long)classes,
                          o->nlabels ? " or a label" : "", skip ? " (-1: no label)" : "");
    *out = (float)x;
    return DL_OK;
}

/* A per-token output's list: a class a token of its sequence, as many as
 * that sequence's length, then -1 up to max_length. */
static dl_status token_targets(jl_ctx *c, const dl_output_conf *o, const json_t *v,
                               const float *row, float *t, dl_err *err)
{
    int s = c->conf->tseq[c->conf->ninputs + o->from];
    int64_t len = s >= 0 ? (int64_t)row[c->in_at[s]] : o->max_length;
    int64_t classes = o->dim / o->max_length;
    if (!json_is_array(v))
        return dl_err_set(err, DL_ERR_INVALID, "output '%s' (a class a token) must be a list",
                          o->name);
    if ((int64_t)json_array_size(v) != len)
        return dl_err_set(err, DL_ERR_INVALID, "output '%s': %zu labels for the %lld tokens "
                          "of input '%s'", o->name, json_array_size(v), (long long)len,
                          s >= 0 ? c->conf->inputs[s].name : "?");
    for (int64_t p = 0; p < o->max_length; p++)
        t[p] = -1.0f;
    dl_status st = DL_OK;
    for (int64_t p = 0; p < len && st == DL_OK; p++) {
        char where[32];
        snprintf(where, sizeof(where), " token %lld", (long long)p + 1);
        /* a CRF scores whole paths: every token needs its tag */
        st = read_class(o, where, json_array_get(v, (size_t)p), classes,
                        o->loss == DL_LOSS_XENT, t + p, err);
    }
    return st;
}

/* Output o's key into its tcols target columns t. */
static dl_status read_target(jl_ctx *c, const dl_output_conf *o, const json_t *v,
                             const float *row, float *t, dl_err *err)
{
    if (o->max_length > 0)
        return token_targets(c, o, v, row, t, err);
    if (o->loss == DL_LOSS_XENT)
        return read_class(o, "", v, o->dim, false, t, err);
    c->nvals = 0;
    dl_status st = flatten(c, v, "output", o->name, 0, err);
    if (st == DL_OK && c->nvals != o->tcols)
        st = dl_err_set(err, DL_ERR_INVALID, "output '%s': %lld values, the output gives %lld",
                        o->name, (long long)c->nvals, (long long)o->tcols);
    if (st == DL_OK)
        st = to_float(c, "output", o->name, err);
    if (st == DL_OK)
        memcpy(t, c->fvals, (size_t)o->tcols * sizeof(float));
    return st;
}

/* ---- a line ---------------------------------------------------------- */

static int input_of(const dl_model_conf *m, const char *key)
{
    for (int k = 0; k < m->ninputs; k++)
        if (!strcmp(m->inputs[k].name, key))
            return k;
    return -1;
}

static int output_of(const dl_model_conf *m, const char *key)
{
    for (int k = 0; k < m->noutputs; k++)
        if (!strcmp(m->outputs[k].name, key))
            return k;
    return -1;
}

/* Every key names an input or an output that takes one. */
static dl_status check_keys(const jl_ctx *c, json_t *obj, dl_err *err)
{
    const dl_model_conf *m = c->conf;
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int o = input_of(m, key) < 0 ? output_of(m, key) : -2;
        if (o == -1)
            return dl_err_set(err, DL_ERR_INVALID, "unknown key '%.64s': no input or output "
                              "of model '%s' has that name", key, m->name);
        if (o >= 0 && c->targets && m->outputs[o].loss == DL_LOSS_NEXT_TOKEN)
            return dl_err_set(err, DL_ERR_INVALID, "output '%s' (next_token) takes no key: "
                              "it predicts input '%s'", key, m->inputs[m->outputs[o].of].name);
    }
    return DL_OK;
}

/* Room for one more row. */
static dl_status grow(jl_ctx *c, dl_err *err)
{
    if (c->ds->n < c->cap)
        return DL_OK;
    int64_t cap = c->cap ? 2 * c->cap : 64;
    float *x = realloc(c->ds->x, (size_t)(cap * c->ds->dim) * sizeof(float));
    if (x)
        c->ds->x = x;
    float *t = c->ds->tdim ? realloc(c->ds->t, (size_t)(cap * c->ds->tdim) * sizeof(float))
                           : NULL;
    if (t)
        c->ds->t = t;
    if (!x || (c->ds->tdim && !t))
        return dl_err_set(err, DL_ERR_NOMEM, "%s: %lld samples", c->what, (long long)cap);
    c->cap = cap;
    return DL_OK;
}

/* One sample: obj's keys into the next row and its target columns. */
static dl_status read_object(jl_ctx *c, json_t *obj, dl_err *err)
{
    const dl_model_conf *m = c->conf;
    dl_status st = check_keys(c, obj, err);
    if (st == DL_OK)
        st = grow(c, err);
    if (st != DL_OK)
        return st;
    float *row = c->ds->x + c->ds->n * c->ds->dim;
    for (int k = 0; k < m->ninputs && st == DL_OK; k++) {
        json_t *v = json_object_get(obj, m->inputs[k].name);
        st = v ? read_input(c, k, v, row + c->in_at[k], err)
               : dl_err_set(err, DL_ERR_INVALID, "no key '%s' (input '%s')",
                            m->inputs[k].name, m->inputs[k].name);
    }
    int64_t at = 0;           /* output k's first target column */
    for (int k = 0; k < m->noutputs && c->targets && st == DL_OK; at += m->outputs[k++].tcols) {
        const dl_output_conf *o = &m->outputs[k];
        json_t *v = json_object_get(obj, o->name);
        if (o->tcols == 0)      /* next_token: its targets are its input's ids */
            continue;
        st = v ? read_target(c, o, v, row, c->ds->t + c->ds->n * c->ds->tdim + at, err)
               : dl_err_set(err, DL_ERR_INVALID, "no key '%s' (output '%s')", o->name, o->name);
    }
    if (st == DL_OK)
        c->ds->n++;
    return st;
}

static bool is_blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t')
            return false;
    return true;
}

/* Line `lineno` (text[0..n), its '\n' gone): a sample, or a blank line,
 * which may only trail (*blank_at: the first of them). */
static dl_status read_line(jl_ctx *c, const char *text, size_t n, int64_t lineno,
                           int64_t *blank_at, dl_err *err)
{
    if (n > 0 && text[n - 1] == '\r')
        n--;
    if (lineno == 1 && n >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) {   /* a UTF-8 BOM */
        text += 3;
        n -= 3;
    }
    if (is_blank(text, n)) {
        *blank_at = *blank_at ? *blank_at : lineno;
        return DL_OK;
    }
    if (*blank_at)
        return dl_err_set(err, DL_ERR_INVALID, "%s:%lld: blank line inside the data",
                          c->what, (long long)*blank_at);
    json_error_t jerr;
    json_t *obj = json_loadb(text, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    dl_status st = DL_OK;
    if (!obj)
        st = dl_err_set(err, DL_ERR_INVALID, "%s:%lld: column %d: %s", c->what,
                        (long long)lineno, jerr.column, jerr.text);
    else if (!json_is_object(obj))
        st = dl_err_set(err, DL_ERR_INVALID, "%s:%lld: not a JSON object (one sample a "
                        "line)", c->what, (long long)lineno);
    else if ((st = read_object(c, obj, err)) != DL_OK)
        dl_err_prefix(err, "%s:%lld", c->what, (long long)lineno);
    json_decref(obj);
    return st;
}

/* ---- loading --------------------------------------------------------- */

static void ctx_fini(jl_ctx *c)
{
    for (int k = 0; c->tok && k < c->conf->ninputs; k++)
        dl_tokenizer_free(c->tok[k]);
    free(c->tok);
    free(c->in_at);
    free(c->vals);
    free(c->fvals);
    dl_dataset_free(c->ds);
}

/* The dataset's shape, each input's place in a row and the tokenizers. */
static dl_status ctx_init(jl_ctx *c, const char *what, const dl_model_conf *conf,
                          bool targets, dl_err *err)
{
    *c = (jl_ctx){ .what = what, .conf = conf, .targets = targets };
    if (targets && !conf->graph)
        return dl_err_set(err, DL_ERR_INVALID, "%s: JSON Lines data is for models of "
                          "\"inputs\" and \"outputs\" lists, or of sequences; model '%s' "
                          "reads IDX or CSV", what, conf->name);
    c->tok = calloc((size_t)conf->ninputs, sizeof(*c->tok));
    c->in_at = calloc((size_t)conf->ninputs, sizeof(*c->in_at));
    c->ds = calloc(1, sizeof(*c->ds));
    if (!c->tok || !c->in_at || !c->ds)
        return dl_err_set(err, DL_ERR_NOMEM, "%s", what);
    c->ds->ndim = 1;
    for (int k = 0; k < conf->ninputs; k++) {
        c->in_at[k] = c->ds->dim;
        c->ds->dim += dl_input_width(&conf->inputs[k]);
        dl_status st = conf->inputs[k].dtype == DL_IN_BYTES
                     ? dl_tokenizer_new(&conf->inputs[k].tok, &c->tok[k], err) : DL_OK;
        if (st != DL_OK)
            return dl_err_prefix(err, "input '%s'", conf->inputs[k].name);
    }
    c->ds->shape[0] = c->ds->dim;
    for (int k = 0; targets && k < conf->noutputs; k++)
        c->ds->tdim += conf->outputs[k].tcols;
    return DL_OK;
}

/* The loaded dataset, its buffers cut to its rows. */
static dl_status ctx_finish(jl_ctx *c, dl_dataset **out, dl_err *err)
{
    if (c->ds->n == 0)
        return dl_err_set(err, DL_ERR_INVALID, "%s: no samples", c->what);
    /* a targets buffer even of no columns (next_token alone): graph
     * models' losses read targets */
    if (c->targets && !c->ds->t && !(c->ds->t = malloc(sizeof(float))))
        return dl_err_set(err, DL_ERR_NOMEM, "%s", c->what);
    int64_t n = c->ds->n;
    float *x = realloc(c->ds->x, (size_t)(n * c->ds->dim) * sizeof(float));
    float *t = c->ds->tdim ? realloc(c->ds->t, (size_t)(n * c->ds->tdim) * sizeof(float)) : NULL;
    c->ds->x = x ? x : c->ds->x;      /* on failure the larger block stays valid */
    c->ds->t = t ? t : c->ds->t;
    *out = c->ds;
    c->ds = NULL;
    return DL_OK;
}

/* Reads path a line at a time. */
static dl_status load_file(const char *path, const dl_model_conf *conf, bool targets,
                           dl_dataset **out, dl_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return dl_err_set(err, DL_ERR_IO, "%s: %s", path, strerror(errno));
    jl_ctx c;
    dl_status st = ctx_init(&c, path, conf, targets, err);
    char *line = NULL;
    size_t lcap = 0;
    int64_t lineno = 0, blank_at = 0;
    ssize_t got;
    while (st == DL_OK && (got = getline(&line, &lcap, f)) >= 0) {
        size_t n = (size_t)got - (got > 0 && line[got - 1] == '\n');
        st = read_line(&c, line, n, ++lineno, &blank_at, err);
    }
    if (st == DL_OK && ferror(f))
        st = dl_err_set(err, DL_ERR_IO, "%s: %s", path, strerror(errno));
    if (st == DL_OK)
        st = ctx_finish(&c, out, err);
    free(line);
    fclose(f);
    ctx_fini(&c);
    return st;
}

dl_status dl_dataset_load_jsonl(const char *path, const dl_model_conf *conf,
                                dl_dataset **out, dl_err *err)
{
    return load_file(path, conf, true, out, err);
}

dl_status dl_dataset_load_jsonl_inputs(const char *path, const dl_model_conf *conf,
                                       dl_dataset **out, dl_err *err)
{
    return load_file(path, conf, false, out, err);
}

dl_status dl_dataset_parse_jsonl(const char *text, size_t len, const char *what,
                                 const dl_model_conf *conf, bool targets, dl_dataset **out,
                                 dl_err *err)
{
    *out = NULL;
    jl_ctx c;
    dl_status st = ctx_init(&c, what, conf, targets, err);
    int64_t lineno = 0, blank_at = 0;
    for (const char *p = text, *end = text + len; st == DL_OK && p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        st = read_line(&c, p, (size_t)(e - p), ++lineno, &blank_at, err);
        p = e + 1;
    }
    if (st == DL_OK)
        st = ctx_finish(&c, out, err);
    ctx_fini(&c);
    return st;
}
