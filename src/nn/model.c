/* model.c: a model as a chain of layers over three contiguous buffers
 * (parameters, gradients, state), with forward, loss, backward and
 * batched inference; per-batch buffers grow with the largest batch seen. */
#include "nn/layer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A named tensor of the model, in safetensors order. */
typedef struct named {
    char        name[2 * DL_NAME_MAX + 16];
    param_slot *slot;
} named;

struct dl_model {
    dl_backend          *be;
    const dl_model_conf *conf;
    int                  nlayers;
    layer               *layers;
    float               *params, *grads, *state;   /* backend memory */
    int64_t              nparams, nstate;
    int64_t             *grad_at;                   /* nlayers + 1: layer i's gradients
                                                       are [grad_at[i], grad_at[i + 1]) */
    int                  ntensors;
    named               *tensors;
    /* per-batch buffers, sized for `cap` samples */
    int64_t              cap;
    float              **act;                       /* act[i]: output of layer i */
    float               *dbuf[2];                   /* gradient ping-pong */
    float               *work;
    const float         *input;                     /* of the last forward */
    int64_t              batch;
    bool                 have_dout;
    bool                 trained;                   /* last forward was training */
    uint64_t             seed, stream, counter;     /* dropout masks */
    float               *host_targets;              /* one-hot MSE targets */
};

static dl_status be_alloc(dl_backend *be, int64_t nfloats, float **out, dl_err *err)
{
    return be->ops->alloc(be, (size_t)(nfloats > 0 ? nfloats : 1) * sizeof(float),
                          (void **)out, err);
}

static void be_release(dl_backend *be, void *p)
{
    if (p)
        be->ops->release(be, p);
}

static void free_batch_buffers(dl_model *m)
{
    for (int i = 0; m->act && i < m->nlayers; i++) {
        if (!m->layers[i].folded)
            be_release(m->be, m->act[i]);
        be_release(m->be, m->layers[i].aux);
        m->layers[i].aux = NULL;
    }
    free(m->act);
    m->act = NULL;
    be_release(m->be, m->dbuf[0]);
    be_release(m->be, m->dbuf[1]);
    be_release(m->be, m->work);
    free(m->host_targets);
    m->dbuf[0] = m->dbuf[1] = m->work = m->host_targets = NULL;
    m->cap = 0;
}

static dl_status ensure_capacity(dl_model *m, int64_t n, dl_err *err)
{
    if (n <= m->cap)
        return DL_OK;
    free_batch_buffers(m);
    m->act = calloc((size_t)m->nlayers, sizeof(*m->act));
    if (!m->act)
        return dl_err_set(err, DL_ERR_NOMEM, "activation table");
    int64_t maxdim = dl_model_in_dim(m), work = 1;
    dl_status st = DL_OK;
    for (int i = 0; i < m->nlayers && st == DL_OK; i++) {
        layer *l = &m->layers[i];
        maxdim = l->out_dim > maxdim ? l->out_dim : maxdim;
        if (l->ops->work_floats && l->ops->work_floats(l, n) > work)
            work = l->ops->work_floats(l, n);
        if (l->folded)
            m->act[i] = m->act[i - 1];
        else
            st = be_alloc(m->be, n * l->out_dim, &m->act[i], err);
        size_t aux = l->ops->aux_bytes ? l->ops->aux_bytes(l, n) : 0;
        if (st == DL_OK && aux)
            st = m->be->ops->alloc(m->be, aux, &l->aux, err);
    }
    if (st == DL_OK)
        st = be_alloc(m->be, n * maxdim, &m->dbuf[0], err);
    if (st == DL_OK)
        st = be_alloc(m->be, n * maxdim, &m->dbuf[1], err);
    if (st == DL_OK)
        st = be_alloc(m->be, work, &m->work, err);
    if (st == DL_OK && !(m->host_targets = malloc((size_t)(n * dl_model_out_dim(m)) * sizeof(float))))
        st = dl_err_set(err, DL_ERR_NOMEM, "target buffer");
    if (st != DL_OK) {
        free_batch_buffers(m);
        return st;
    }
    for (int i = 0; i < m->nlayers; i++)
        m->layers[i].work = m->work;
    m->cap = n;
    return DL_OK;
}

/* Lays the slots out over the buffers (host staging or backend). */
static void point_slots(dl_model *m, float *params, float *grads, float *state)
{
    int64_t po = 0, so = 0;
    for (int i = 0; i < m->nlayers; i++)
        for (int k = 0; k < m->layers[i].nparams; k++) {
            param_slot *p = &m->layers[i].p[k];
            int64_t n = dl_shape_numel(p->ndim, p->shape);
            if (p->trainable) {
                p->data = params + po;
                p->grad = grads ? grads + po : NULL;
                po += n;
            } else {
                p->data = state + so;
                p->grad = NULL;
                so += n;
            }
        }
}

static dl_status build_layers(dl_model *m, dl_err *err)
{
    const dl_model_conf *c = m->conf;
    int ndim = c->in_ndim;
    int64_t shape[DL_MAX_DIMS];
    memcpy(shape, c->in_shape, sizeof(shape));
    m->grad_at = calloc((size_t)m->nlayers + 1, sizeof(*m->grad_at));
    if (!m->grad_at)
        return dl_err_set(err, DL_ERR_NOMEM, "gradient ranges");
    for (int i = 0; i < m->nlayers; i++) {
        layer *l = &m->layers[i];
        l->conf = &c->layers[i];
        l->be = m->be;
        l->ops = layer_ops_for(l->conf->type);
        l->in_ndim = ndim;
        memcpy(l->in_shape, shape, sizeof(shape));
        dl_status st = layer_shape(l->conf, ndim, shape, &l->out_ndim, l->out_shape, err);
        if (st != DL_OK)
            return st;
        l->in_dim = dl_shape_numel(l->in_ndim, l->in_shape);
        l->out_dim = dl_shape_numel(l->out_ndim, l->out_shape);
        if (l->ops->declare)
            l->ops->declare(l);
        for (int k = 0; k < l->nparams; k++) {
            int64_t n = dl_shape_numel(l->p[k].ndim, l->p[k].shape);
            if (l->p[k].trainable)
                m->nparams += n;
            else
                m->nstate += n;
            m->ntensors++;
        }
        m->grad_at[i + 1] = m->nparams;   /* point_slots lays them out in this order */
        ndim = l->out_ndim;
        memcpy(shape, l->out_shape, sizeof(shape));
    }
    m->tensors = calloc((size_t)(m->ntensors ? m->ntensors : 1), sizeof(*m->tensors));
    if (!m->tensors)
        return dl_err_set(err, DL_ERR_NOMEM, "tensor table");
    int t = 0;
    for (int i = 0; i < m->nlayers; i++)
        for (int k = 0; k < m->layers[i].nparams; k++, t++) {
            snprintf(m->tensors[t].name, sizeof(m->tensors[t].name), "%s.%s",
                     m->layers[i].conf->name, m->layers[i].p[k].suffix);
            m->tensors[t].slot = &m->layers[i].p[k];
        }
    return DL_OK;
}

static bool is_act(dl_layer_type t)
{
    return t == DL_LAYER_RELU || t == DL_LAYER_TANH || t == DL_LAYER_SIGMOID;
}

/* Folds each activation that follows a conv2d or dense layer into it: the
 * layer applies it to its output in the same pass (a post-op of the
 * convolution engine, the GEMM's epilogue), and the activation layer's
 * output is that same buffer. Its backward is unchanged: it reads only
 * that output. */
static void fuse_activations(dl_model *m)
{
    for (int i = 1; i < m->nlayers; i++) {
        layer *prev = &m->layers[i - 1], *l = &m->layers[i];
        dl_layer_type pt = prev->conf->type;
        if (!is_act(l->conf->type) || prev->folded ||
            (pt != DL_LAYER_CONV2D && pt != DL_LAYER_DENSE))
            continue;
        prev->post_act = layer_act(l->conf);
        prev->post = &prev->post_act;
        l->folded = true;
    }
}

/* Keeps activations in the convolution engine's blocked layout from one
 * engine layer (conv2d or pooling) to the next when their channel count
 * is a multiple of the block and only activation layers (elementwise, so
 * indifferent to the layout) lie between them: the engine then reorders
 * at the edges of such a run only, not around every layer. */
static void plan_layouts(dl_model *m)
{
    int block = m->be->engine_block;
    for (int i = 0; block > 0 && i < m->nlayers; i++) {
        layer *l = &m->layers[i];
        if (!layer_engine_layout(l) || l->out_shape[0] % block != 0)
            continue;
        int j = i + 1;
        while (j < m->nlayers && is_act(m->layers[j].conf->type))
            j++;
        if (j == m->nlayers || !layer_engine_layout(&m->layers[j]))
            continue;
        l->blocked |= DL_BLOCKED_Y;
        m->layers[j].blocked |= DL_BLOCKED_X;
        DL_LOG(DL_LOG_DEBUG, "nn", "'%s' -> '%s': activations stay blocked by %d channels",
               l->conf->name, m->layers[j].conf->name, block);
    }
}

/* Initialises parameters on the host, then uploads them. */
static dl_status init_params(dl_model *m, uint64_t seed, dl_err *err)
{
    float *hp = calloc((size_t)(m->nparams + 1), sizeof(float));
    float *hs = calloc((size_t)(m->nstate + 1), sizeof(float));
    if (!hp || !hs) {
        free(hp);
        free(hs);
        return dl_err_set(err, DL_ERR_NOMEM, "parameter staging");
    }
    point_slots(m, hp, NULL, hs);
    dl_rng rng;
    dl_rng_seed(&rng, seed);
    m->seed = seed;
    dl_model_set_rng(m, 0, 0);
    for (int i = 0; i < m->nlayers; i++) {
        if (m->layers[i].ops->init)
            m->layers[i].ops->init(&m->layers[i], &rng);
    }
    m->be->ops->upload(m->be, m->params, hp, (size_t)m->nparams * sizeof(float));
    m->be->ops->upload(m->be, m->state, hs, (size_t)m->nstate * sizeof(float));
    point_slots(m, m->params, m->grads, m->state);
    free(hp);
    free(hs);
    return DL_OK;
}

dl_status dl_model_new(dl_backend *be, const dl_model_conf *conf, uint64_t seed,
                       dl_model **out, dl_err *err)
{
    *out = NULL;
    dl_model *m = calloc(1, sizeof(*m));
    if (!m)
        return dl_err_set(err, DL_ERR_NOMEM, "model");
    m->be = be;
    m->conf = conf;
    m->nlayers = conf->nlayers;
    m->layers = calloc((size_t)conf->nlayers, sizeof(*m->layers));
    dl_status st = m->layers ? build_layers(m, err)
                             : dl_err_set(err, DL_ERR_NOMEM, "layers");
    if (st == DL_OK) {
        fuse_activations(m);
        plan_layouts(m);
    }
    if (st == DL_OK)
        st = be_alloc(be, m->nparams, &m->params, err);
    if (st == DL_OK)
        st = be_alloc(be, m->nparams, &m->grads, err);
    if (st == DL_OK)
        st = be_alloc(be, m->nstate, &m->state, err);
    if (st == DL_OK)
        st = init_params(m, seed, err);
    if (st != DL_OK) {
        dl_model_free(m);
        return st;
    }
    dl_model_zero_grad(m);
    *out = m;
    return DL_OK;
}

void dl_model_free(dl_model *m)
{
    if (!m)
        return;
    free_batch_buffers(m);
    be_release(m->be, m->params);
    be_release(m->be, m->grads);
    be_release(m->be, m->state);
    free(m->layers);
    free(m->tensors);
    free(m->grad_at);
    free(m);
}

const dl_model_conf *dl_model_conf_of(const dl_model *m) { return m->conf; }
dl_backend *dl_model_backend(const dl_model *m) { return m->be; }

int64_t dl_model_in_dim(const dl_model *m)
{
    return dl_shape_numel(m->conf->in_ndim, m->conf->in_shape);
}

int64_t dl_model_out_dim(const dl_model *m)
{
    return m->layers[m->nlayers - 1].out_dim;
}

float *dl_model_params(dl_model *m, int64_t *n) { *n = m->nparams; return m->params; }
float *dl_model_grads(dl_model *m, int64_t *n) { *n = m->nparams; return m->grads; }
float *dl_model_state(dl_model *m, int64_t *n) { *n = m->nstate; return m->state; }

void dl_model_set_rng(dl_model *m, uint64_t stream, uint64_t counter)
{
    m->stream = stream;
    m->counter = counter;
    for (int i = 0; i < m->nlayers; i++)
        m->layers[i].seed = m->seed + (uint64_t)i * 7919u + stream * 0xD1B54A32D192ED03ull;
}

uint64_t dl_model_rng_counter(const dl_model *m) { return m->counter; }

void dl_model_zero_grad(dl_model *m)
{
    m->be->ops->fill(m->be, m->grads, m->nparams, 0.0f);
}

dl_status dl_model_forward(dl_model *m, const float *x, int64_t batch,
                           bool train, const float **out, dl_err *err)
{
    *out = NULL;
    m->have_dout = false;
    m->input = NULL;          /* no loss on a failed pass: set again on success */
    if (batch < 1)
        return dl_err_set(err, DL_ERR_INVALID, "batch of %lld samples", (long long)batch);
    dl_status st = ensure_capacity(m, batch, err);
    if (st != DL_OK)
        return st;
    const float *in = x;
    if (train)
        m->counter++;
    for (int i = 0; i < m->nlayers; i++) {
        layer *l = &m->layers[i];
        l->calls = m->counter;
        /* Outside training a flatten passes its input on as it is, not a
         * copy: only backward reads act[i] of a layer before the last
         * (and the layer after, were it folded into it). */
        if (!train && l->conf->type == DL_LAYER_FLATTEN && i < m->nlayers - 1 &&
            !m->layers[i + 1].folded)
            continue;
        st = l->ops->forward(l, in, m->act[i], batch, train, err);
        if (st != DL_OK)
            return dl_err_prefix(err, "layer '%s'", l->conf->name);
        in = m->act[i];
    }
    m->input = x;
    m->batch = batch;
    m->trained = train;
    *out = in;
    return DL_OK;
}

dl_status dl_model_loss(dl_model *m, const int32_t *labels, const float *targets,
                        float grad_scale, bool want_grad, double *loss_sum,
                        int64_t *correct, dl_err *err)
{
    int64_t n = m->batch, k = dl_model_out_dim(m);
    float *dout = want_grad ? m->dbuf[0] : NULL;
    *correct = 0;
    if (!m->input)
        return dl_err_set(err, DL_ERR_INVALID, "loss before any forward pass");
    const float *y = m->act[m->nlayers - 1];   /* act is NULL before the first forward */
    for (int64_t i = 0; labels && i < n; i++)
        if (labels[i] < 0 || labels[i] >= k)
            return dl_err_set(err, DL_ERR_INVALID, "label %d of sample %lld not in [0, %lld)",
                              labels[i], (long long)i, (long long)k);
    if (m->conf->loss == DL_LOSS_XENT) {
        if (!labels)
            return dl_err_set(err, DL_ERR_INVALID, "cross-entropy needs labels");
        m->be->ops->xent(m->be, y, labels, n, k, dout, grad_scale, loss_sum, correct);
    } else {
        if (!targets) {
            if (!labels)
                return dl_err_set(err, DL_ERR_INVALID, "mean squared error needs labels or targets");
            memset(m->host_targets, 0, (size_t)(n * k) * sizeof(float));
            for (int64_t i = 0; i < n; i++)
                m->host_targets[i * k + labels[i]] = 1.0f;
            targets = m->host_targets;
        }
        /* Per-sample loss is the mean over outputs, as PyTorch's MSELoss. */
        m->be->ops->mse(m->be, y, targets, n * k, dout, grad_scale / (float)k, loss_sum);
        *loss_sum /= (double)k;
        if (labels) {
            float *host = m->host_targets == targets ? NULL : m->host_targets;
            float *probe = host ? host : malloc((size_t)(n * k) * sizeof(float));
            if (!probe)
                return dl_err_set(err, DL_ERR_NOMEM, "accuracy buffer");
            m->be->ops->download(m->be, probe, y, (size_t)(n * k) * sizeof(float));
            for (int64_t i = 0; i < n; i++) {
                int64_t arg = 0;
                for (int64_t j = 1; j < k; j++)
                    if (probe[i * k + j] > probe[i * k + arg])
                        arg = j;
                *correct += arg == labels[i];
            }
            if (!host)
                free(probe);
        }
    }
    m->have_dout = want_grad && m->trained;
    if (want_grad && !m->trained)
        return dl_err_set(err, DL_ERR_INVALID, "loss gradient needs a training forward pass");
    return DL_OK;
}

int dl_model_layer_count(const dl_model *m) { return m->nlayers; }

void dl_model_grad_range(const dl_model *m, int layer, int64_t *begin, int64_t *end)
{
    DL_ASSERT(layer >= 0 && layer < m->nlayers);
    *begin = m->grad_at[layer];
    *end = m->grad_at[layer + 1];
}

dl_status dl_model_backward(dl_model *m, dl_err *err)
{
    return dl_model_backward_hooked(m, NULL, NULL, err);
}

dl_status dl_model_backward_hooked(dl_model *m, dl_grad_hook fn, void *ctx, dl_err *err)
{
    if (!m->have_dout)
        return dl_err_set(err, DL_ERR_INVALID, "backward without a loss gradient");
    int cur = 0;
    for (int i = m->nlayers - 1; i >= 0; i--) {
        layer *l = &m->layers[i];
        const float *x = i ? m->act[i - 1] : m->input;
        float *dx = i ? m->dbuf[1 - cur] : NULL;
        dl_status st = l->ops->backward(l, x, m->act[i], m->dbuf[cur], dx, m->batch, err);
        if (st != DL_OK)
            return dl_err_prefix(err, "layer '%s'", l->conf->name);
        cur = 1 - cur;
        /* The layer wrote its own gradients and no later step touches them. */
        if (fn && (st = fn(ctx, i, m->grad_at[i], m->grad_at[i + 1], err)) != DL_OK) {
            m->have_dout = false;
            return st;
        }
    }
    m->have_dout = false;
    return DL_OK;
}

dl_status dl_model_predict(dl_model *m, const float *x, int64_t n, int64_t batch,
                           float *out, dl_err *err)
{
    int64_t din = dl_model_in_dim(m), dout = dl_model_out_dim(m);
    if (batch < 1)
        batch = 256;
    dl_status st = ensure_capacity(m, n < batch ? (n > 0 ? n : 1) : batch, err);
    if (st != DL_OK)
        return st;
    /* A device's inputs are staged in dbuf[1] (at least cap * in_dim);
     * host memory is read and written where it is. */
    bool host = m->be->device < 0;
    for (int64_t i = 0; i < n && st == DL_OK; i += batch) {
        int64_t b = n - i < batch ? n - i : batch;
        const float *xb = x + i * din, *y;
        float *ob = out + i * dout;
        if (!host) {
            m->be->ops->upload(m->be, m->dbuf[1], xb, (size_t)(b * din) * sizeof(float));
            xb = m->dbuf[1];
        }
        st = dl_model_forward(m, xb, b, false, &y, err);
        if (st != DL_OK)
            break;
        if (m->conf->loss == DL_LOSS_XENT) {
            float *p = host ? ob : m->dbuf[0];
            m->be->ops->softmax_fwd(m->be, y, p, b, dout);
            y = p;
        }
        if (y != ob)
            m->be->ops->download(m->be, ob, y, (size_t)(b * dout) * sizeof(float));
    }
    m->input = NULL;
    return st;
}

int dl_model_tensor_count(const dl_model *m) { return m->ntensors; }

void dl_model_tensor_at(const dl_model *m, int i, const char **name, int *ndim,
                        const int64_t **shape, float **data)
{
    DL_ASSERT(i >= 0 && i < m->ntensors);
    *name = m->tensors[i].name;
    *ndim = m->tensors[i].slot->ndim;
    *shape = m->tensors[i].slot->shape;
    *data = m->tensors[i].slot->data;
}

int dl_model_tensor_index(const dl_model *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return i;
    return -1;
}
