/* model_check.c: the checks of a parsed model.json as a whole: every
 * layer's sources, shapes and datatypes, the parameter and size caps,
 * the outputs against their losses and labels, and that every layer and
 * input is used. Messages name the file, the layer and the reason. Also
 * the shapes it infers, for exporters (dl_model_conf_shapes). */
#include "nn/layer.h"

#include <stdlib.h>
#include <string.h>

/* What errors name, and where they go. */
typedef struct check {
    const char *what;
    dl_err     *err;
} check;

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
 * in[0..nd), which layer_shape accepted, a sequence [T, D...] when seq;
 * -1 past MAX_COUNT. */
static int64_t layer_params(const dl_layer_conf *l, int nd, const int64_t *in, bool seq)
{
    int64_t ch = seq ? in[nd - 1] : in[0];     /* conv1d over a sequence: channels last */
    switch (l->type) {
    case DL_LAYER_DENSE:     return mul_capped(in[nd - 1] + 1, l->units);
    case DL_LAYER_CONV1D:
    case DL_LAYER_CONV2D:    return mul_capped(mul_capped(ch / (l->groups > 1 ? l->groups : 1),
                                                          l->kh * l->kw) + 1, l->filters);
    case DL_LAYER_POS_EMBEDDING: return mul_capped(l->max_length, in[nd - 1]);
    case DL_LAYER_CONSTANT:  return numel_capped(l->nshape, l->shape);
    case DL_LAYER_BATCHNORM: return mul_capped(in[0], 4);
    case DL_LAYER_EMBEDDING: return mul_capped(l->num_embeddings, l->dim);
    case DL_LAYER_LAYERNORM: return mul_capped(in[nd - 1], 2);
    case DL_LAYER_ATTENTION: return mul_capped(in[nd - 1], 4 * in[nd - 1] + (l->bias ? 4 : 0));
    default:                 return 0;
    }
}

/* Per-sample shapes of the model inputs and layer outputs while checking. */
typedef struct shapes {
    int     *nd;                       /* ninputs + nlayers */
    int64_t (*d)[DL_MAX_DIMS];
    int     *seq;                      /* dl_model_conf.tseq */
} shapes;

static int tensor_of(const dl_model_conf *m, int src) { return src < 0 ? -1 - src : m->ninputs + src; }

/* Ids (integer inputs) go to embeddings only, and an embedding reads a
 * model input. */
static dl_status check_dtypes(const check *c, const dl_model_conf *m, const dl_layer_conf *l)
{
    for (int k = 0; k < l->nsrc; k++) {
        int s = l->src[k];
        if (l->type == DL_LAYER_EMBEDDING && (s >= 0 || l->nsrc != 1))
            return dl_err_set(c->err, DL_ERR_INVALID, "%s: layer '%s': embedding must be the "
                              "first layer or read one model input", c->what, l->name);
        if (s < 0 && l->type != DL_LAYER_EMBEDDING && m->inputs[-1 - s].dtype != DL_IN_FP32)
            return dl_err_set(c->err, DL_ERR_INVALID, "%s: layer '%s': input '%s' holds ids "
                              "(an integer datatype): only an embedding may read it", c->what,
                              l->name, m->inputs[-1 - s].name);
    }
    return DL_OK;
}

/* Name clashes, types and the shape of layer i from its sources. */
static dl_status check_layer(const check *c, const dl_model_conf *m, int i, shapes *sh, int64_t *params)
{
    const dl_layer_conf *l = &m->layers[i];
    for (int k = 0; k < i && l->type != DL_LAYER_CRF; k++)
        if (strcmp(m->layers[k].name, l->name) == 0)
            return dl_err_set(c->err, DL_ERR_INVALID, "%s: layers[%d]: name '%s' is used twice",
                              c->what, i, l->name);
    for (int k = 0; m->graph && k < m->ninputs; k++)
        if (strcmp(m->inputs[k].name, l->name) == 0)
            return dl_err_set(c->err, DL_ERR_INVALID, "%s: layers[%d]: name '%s' is used twice "
                              "(a model input has it)", c->what, i, l->name);
    dl_status st = check_dtypes(c, m, l);
    if (st != DL_OK)
        return st;
    int nd[DL_LAYER_MAX_IN] = { 0 }, seq[DL_LAYER_MAX_IN];
    int64_t in[DL_LAYER_MAX_IN][DL_MAX_DIMS] = { { 0 } };
    for (int k = 0; k < l->nsrc; k++) {
        int t = tensor_of(m, l->src[k]);
        nd[k] = sh->nd[t];
        seq[k] = sh->seq[t];
        memcpy(in[k], sh->d[t], sizeof(in[k]));
    }
    int t = m->ninputs + i;
    if (layer_shape(l, l->nsrc, nd, (const int64_t (*)[DL_MAX_DIMS])in, &sh->nd[t], sh->d[t],
                    c->err) != DL_OK ||
        layer_seq(l, l->nsrc, seq, nd, (const int64_t (*)[DL_MAX_DIMS])in, &sh->seq[t],
                  &sh->nd[t], sh->d[t], c->err) != DL_OK)
        return dl_err_prefix(c->err, "%s", c->what);
    int64_t lp = layer_params(l, nd[0], in[0], l->nsrc > 0 && seq[0] >= 0);
    *params = lp < 0 ? -1 : mul_capped(*params + lp, 1);
    if (*params < 0)
        return dl_err_set(c->err, DL_ERR_INVALID, "%s: layer '%s': the model has more "
                          "than %lld parameters", c->what, l->name, (long long)MAX_COUNT);
    if (numel_capped(sh->nd[t], sh->d[t]) < 0)
        return dl_err_set(c->err, DL_ERR_INVALID, "%s: layer '%s' gives more than %lld "
                          "values a sample", c->what, l->name, (long long)MAX_COUNT);
    return DL_OK;
}

/* Every layer feeds an output and every model input a layer. */
static dl_status check_used(const check *c, const dl_model_conf *m)
{
    int nt = m->ninputs + m->nlayers;
    bool *used = calloc((size_t)nt, sizeof(*used));
    if (!used)
        return dl_err_set(c->err, DL_ERR_NOMEM, "graph check");
    for (int k = 0; k < m->noutputs; k++) {
        used[m->ninputs + m->outputs[k].from] = true;
        if (m->outputs[k].loss == DL_LOSS_NEXT_TOKEN)
            used[m->outputs[k].of] = true;
    }
    for (int i = m->nlayers - 1; i >= 0; i--)
        for (int k = 0; used[m->ninputs + i] && k < m->layers[i].nsrc; k++)
            used[tensor_of(m, m->layers[i].src[k])] = true;
    dl_status st = DL_OK;
    for (int t = nt - 1; t >= 0 && st == DL_OK; t--)
        if (!used[t] && t >= m->ninputs)
            st = dl_err_set(c->err, DL_ERR_INVALID, "%s: layer '%s': no output depends on it",
                            c->what, m->layers[t - m->ninputs].name);
        else if (!used[t])
            st = dl_err_set(c->err, DL_ERR_INVALID, "%s: input '%s': no layer reads it",
                            c->what, m->inputs[t].name);
    free(used);
    return st;
}

/* A per-token output: [T, C] of a sequence, a class (or tag) a position:
 * softmax cross-entropy, crf or next_token. */
static dl_status check_token_output(const check *c, const dl_model_conf *m, dl_output_conf *o,
                                    const char *where, int nd, const int64_t *d, int seq)
{
    char buf[96];
    if (seq < 0 || nd != 2)
        return dl_err_set(c->err, DL_ERR_INVALID, "%s: %sloss %s needs a sequence of scores "
                          "[T, C] (a class a position), the layers give %s%s", c->what,
                          where, o->loss == DL_LOSS_CRF ? "crf" : o->loss == DL_LOSS_NEXT_TOKEN
                          ? "next_token" : "softmax_cross_entropy",
                          dl_shape_str(nd, d, buf, sizeof(buf)), seq < 0 ? ", no sequence" : "");
    if (o->loss == DL_LOSS_MSE || o->loss == DL_LOSS_BCE)
        return dl_err_set(c->err, DL_ERR_INVALID, "%s: %sa sequence output takes "
                          "softmax_cross_entropy, crf or next_token", c->what, where);
    if (o->loss == DL_LOSS_NEXT_TOKEN && seq != o->of)
        return dl_err_set(c->err, DL_ERR_INVALID, "%s: %snext_token: the layers give a "
                          "sequence of input '%s', not of '%s'", c->what, where,
                          m->inputs[seq].name, m->inputs[o->of].name);
    if (m->layers[o->from].type == DL_LAYER_SOFTMAX)
        return dl_err_set(c->err, DL_ERR_INVALID, "%s: %sthe last layer must give scores "
                          "(logits): drop the final softmax (the loss applies it)", c->what,
                          where);
    if (o->nlabels && o->nlabels != d[1])
        return dl_err_set(c->err, DL_ERR_INVALID, "%s: %s'labels' has %d entries but the "
                          "model gives %lld scores a position", c->what, where, o->nlabels,
                          (long long)d[1]);
    o->max_length = d[0];
    o->tcols = o->loss == DL_LOSS_NEXT_TOKEN ? 0 : d[0];
    o->served = o->loss == DL_LOSS_CRF ? d[0] : o->dim;
    return DL_OK;
}

/* An output's shape against its loss and labels; sets dim and tcols. */
static dl_status check_output(const check *c, const dl_model_conf *m, dl_output_conf *o,
                              const shapes *sh)
{
    char where[96], buf[96];
    int t = m->ninputs + o->from, nd = sh->nd[t];
    const int64_t *d = sh->d[t];
    if (m->graph)
        snprintf(where, sizeof(where), "output '%s': ", o->name);
    else
        snprintf(where, sizeof(where), "%s", "");
    for (const dl_output_conf *p = m->outputs; p < o; p++)
        if (p->from == o->from)
            return dl_err_set(c->err, DL_ERR_INVALID, "%s: output '%s': layer '%s' already "
                              "feeds output '%s' (one output a layer)", c->what, o->name,
                              m->layers[o->from].name, p->name);
    o->dim = o->served = dl_shape_numel(nd, d);
    o->tcols = o->loss == DL_LOSS_XENT ? 1 : o->dim;
    int seq = sh->seq[t];
    if (seq >= 0 || o->loss == DL_LOSS_CRF || o->loss == DL_LOSS_NEXT_TOKEN)
        return check_token_output(c, m, o, where, nd, d, seq);
    if (o->loss == DL_LOSS_XENT && nd != 1)
        return dl_err_set(c->err, DL_ERR_INVALID,
                          "%s: %ssoftmax_cross_entropy needs a 1-D output per sample, the layers give %s",
                          c->what, where, dl_shape_str(nd, d, buf, sizeof(buf)));
    if (o->loss == DL_LOSS_XENT && m->layers[o->from].type == DL_LAYER_SOFTMAX)
        return dl_err_set(c->err, DL_ERR_INVALID,
                          "%s: %swith softmax_cross_entropy the last layer must give logits: "
                          "drop the final softmax (the loss applies it)", c->what, where);
    if (o->nlabels && o->nlabels != o->dim)
        return dl_err_set(c->err, DL_ERR_INVALID,
                          "%s: %soutput: 'labels' has %d entries but the model gives %lld outputs",
                          c->what, where, o->nlabels, (long long)o->dim);
    return DL_OK;
}

/* Walks the layers in file order (sources always lie above, so this is a
 * topological order) and checks shapes, types, use and outputs. */
dl_status conf_check_graph(const char *what, dl_model_conf *m, dl_err *err)
{
    const check cc = { what, err }, *c = &cc;
    int nt = m->ninputs + m->nlayers;
    shapes sh = { calloc((size_t)nt, sizeof(int)), calloc((size_t)nt, sizeof(*sh.d)),
                  calloc((size_t)nt, sizeof(int)) };
    dl_status st = sh.nd && sh.d && sh.seq ? DL_OK
                 : dl_err_set(c->err, DL_ERR_NOMEM, "graph check");
    for (int k = 0; k < m->ninputs && st == DL_OK; k++) {
        sh.seq[k] = m->inputs[k].max_length > 0 ? k : -1;
        sh.nd[k] = m->inputs[k].ndim;
        memcpy(sh.d[k], m->inputs[k].shape, sizeof(sh.d[k]));
        if (numel_capped(sh.nd[k], sh.d[k]) < 0)
            st = dl_err_set(c->err, DL_ERR_INVALID,
                            "%s: input: 'shape' has more than %lld values a sample", c->what,
                            (long long)MAX_COUNT);
    }
    int64_t params = 0;
    for (int i = 0; i < m->nlayers && st == DL_OK; i++)
        st = check_layer(c, m, i, &sh, &params);
    for (int k = 0; k < m->noutputs && st == DL_OK; k++)
        st = check_output(c, m, &m->outputs[k], &sh);
    if (st == DL_OK)
        st = check_used(c, m);
    free(sh.nd);
    free(sh.d);
    free(m->tseq);
    m->tseq = st == DL_OK ? sh.seq : NULL;
    if (st != DL_OK)
        free(sh.seq);
    return st;
}

dl_status dl_model_conf_shapes(const dl_model_conf *conf, int *nd,
                               int64_t (*d)[DL_MAX_DIMS], dl_err *err)
{
    for (int k = 0; k < conf->ninputs; k++) {
        nd[k] = conf->inputs[k].ndim;
        memcpy(d[k], conf->inputs[k].shape, sizeof(d[k]));
    }
    for (int i = 0; i < conf->nlayers; i++) {
        const dl_layer_conf *l = &conf->layers[i];
        int ind[DL_LAYER_MAX_IN], seq[DL_LAYER_MAX_IN], out_seq;
        int64_t in[DL_LAYER_MAX_IN][DL_MAX_DIMS];
        for (int k = 0; k < l->nsrc; k++) {
            int t = tensor_of(conf, l->src[k]);
            ind[k] = nd[t];
            seq[k] = conf->tseq[t];
            memcpy(in[k], d[t], sizeof(in[k]));
        }
        int t = conf->ninputs + i;
        dl_status st = layer_shape(l, l->nsrc, ind, (const int64_t (*)[DL_MAX_DIMS])in,
                                   &nd[t], d[t], err);
        if (st == DL_OK)
            st = layer_seq(l, l->nsrc, seq, ind, (const int64_t (*)[DL_MAX_DIMS])in, &out_seq,
                           &nd[t], d[t], err);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}
