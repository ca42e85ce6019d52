/* model.c: a model as a graph of layers over three contiguous buffers
 * (parameters, gradients, state): building, forward and backward passes
 * and batched inference; per-batch buffers grow with the largest batch
 * seen. */
#include "nn/crf.h"
#include "nn/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void release_all(dl_backend *be, float **bufs, int n)
{
    for (int i = 0; bufs && i < n; i++) {
        be_release(be, bufs[i]);
        bufs[i] = NULL;
    }
}

static void free_plan_buffers(dl_model *m, act_plan *p)
{
    release_all(m->be, p->buf, p->nslots);
    free(p->buf);
    p->buf = NULL;
}

static void free_batch_buffers(dl_model *m)
{
    free_plan_buffers(m, &m->plan[0]);
    free_plan_buffers(m, &m->plan[1]);
    release_all(m->be, m->gp.buf, m->gp.nslots);
    release_all(m->be, m->gp.scratch, m->gp.nscratch);
    release_all(m->be, m->stage, m->ninputs);
    release_all(m->be, m->seqbuf, m->ninputs);
    for (int k = 0; m->lens && k < m->ninputs; k++) {
        free(m->lens[k]);
        m->lens[k] = NULL;
    }
    for (int i = 0; i < m->nlayers; i++) {
        be_release(m->be, m->layers[i].aux);
        m->layers[i].aux = NULL;
    }
    be_release(m->be, m->stage_in);
    be_release(m->be, m->stage_out);
    be_release(m->be, m->work);
    free(m->host_targets);
    free(m->host_y);
    free(m->host_labels);
    m->stage_in = m->stage_out = m->work = m->host_targets = m->host_y = NULL;
    m->host_labels = NULL;
    m->cap = 0;
}

int64_t model_out_dim_sum(const dl_model *m)
{
    int64_t d = 0;
    for (int k = 0; k < m->conf->noutputs; k++)
        d += m->tdim[m->ninputs + m->conf->outputs[k].from];
    return d;
}

int64_t model_target_cols(const dl_model *m)
{
    int64_t d = 0;
    for (int k = 0; k < m->conf->noutputs; k++)
        d += m->conf->outputs[k].tcols;
    return d;
}

/* Buffers for every kind of pass: gradients, scratch, layer aux memory,
 * staging and host loss buffers, for n samples. */
/* Sets the sequence shapes of every layer's inputs and output to
 * `steps` positions of each sequence input (NULL: its max_length, the
 * capacity everything is sized for). A pass runs at the batch's longest
 * sample, so no layer computes positions that no sample has. */
static void set_steps(dl_model *m, const int64_t *steps)
{
    for (int i = 0; i < m->nlayers; i++) {
        layer *l = &m->layers[i];
        for (int k = 0; k <= l->nin; k++) {
            int t = k < l->nin ? model_tensor_of(m, l->conf->src[k]) : m->ninputs + i;
            int s = m->conf->tseq[t];
            if (s < 0)
                continue;
            int64_t cap = m->conf->inputs[s].max_length, at = steps ? steps[s] : cap;
            int64_t dim = m->tdim[t] / cap * at;
            if (k == l->nin) {
                l->out_shape[0] = at;
                l->out_dim = dim;
                continue;
            }
            l->ins_shape[k][0] = at;
            l->ins_dim[k] = dim;
            if (k == 0) {
                l->in_shape[0] = at;
                l->in_dim = dim;
            }
        }
    }
}

static dl_status alloc_common(dl_model *m, int64_t n, dl_err *err)
{
    int64_t work = 1, od = model_out_dim_sum(m), tc = model_target_cols(m);
    dl_status st = DL_OK;
    for (int i = 0; i < m->nlayers && st == DL_OK; i++) {
        layer *l = &m->layers[i];
        if (l->ops->work_floats && l->ops->work_floats(l, n) > work)
            work = l->ops->work_floats(l, n);
        size_t aux = l->ops->aux_bytes ? l->ops->aux_bytes(l, n) : 0;
        if (aux)
            st = m->be->ops->alloc(m->be, aux, &l->aux, err);
    }
    for (int k = 0; k < m->gp.nslots && st == DL_OK; k++)
        st = be_alloc(m->be, n * m->gp.dim[k], &m->gp.buf[k], err);
    for (int k = 0; k < m->gp.nscratch && st == DL_OK; k++)
        st = be_alloc(m->be, n * m->gp.scratch_dim, &m->gp.scratch[k], err);
    for (int k = 0; m->ninputs > 1 && k < m->ninputs && st == DL_OK; k++)
        st = be_alloc(m->be, n * model_in_width(m, k), &m->stage[k], err);
    for (int k = 0; k < m->ninputs && st == DL_OK; k++) {
        if (m->conf->inputs[k].max_length == 0)
            continue;
        st = be_alloc(m->be, n * m->tdim[k], &m->seqbuf[k], err);
        if (st == DL_OK && !(m->lens[k] = malloc((size_t)n * sizeof(int32_t))))
            st = dl_err_set(err, DL_ERR_NOMEM, "sequence lengths");
    }
    if (st == DL_OK && m->be->device >= 0)
        st = be_alloc(m->be, n * dl_model_in_dim(m), &m->stage_in, err);
    if (st == DL_OK && m->be->device >= 0)
        st = be_alloc(m->be, n * od, &m->stage_out, err);
    if (st == DL_OK)
        st = be_alloc(m->be, work, &m->work, err);
    int64_t hd = od > tc ? od : tc, lab = 1;
    for (int k = 0; k < m->conf->noutputs; k++)
        if (m->conf->outputs[k].max_length > lab)
            lab = m->conf->outputs[k].max_length;
    if (st == DL_OK && (!(m->host_targets = malloc((size_t)(n * hd) * sizeof(float))) ||
                        !(m->host_y = malloc((size_t)(n * hd) * sizeof(float))) ||
                        !(m->host_labels = malloc((size_t)(n * lab) * sizeof(int32_t)))))
        st = dl_err_set(err, DL_ERR_NOMEM, "loss buffers");
    for (int i = 0; i < m->nlayers; i++)
        m->layers[i].work = m->work;
    return st;
}

static dl_status ensure_capacity(dl_model *m, int64_t n, bool train, dl_err *err)
{
    dl_status st = DL_OK;
    if (n > m->cap) {
        set_steps(m, NULL);      /* buffers hold max_length positions */
        free_batch_buffers(m);
        if ((st = alloc_common(m, n, err)) != DL_OK) {
            free_batch_buffers(m);
            return st;
        }
        m->cap = n;
    }
    act_plan *p = &m->plan[train];
    if (p->buf)
        return DL_OK;
    if (!(p->buf = calloc((size_t)p->nslots + 1, sizeof(*p->buf))))
        return dl_err_set(err, DL_ERR_NOMEM, "activation table");
    for (int k = 0; k < p->nslots && st == DL_OK; k++)
        st = be_alloc(m->be, m->cap * p->dim[k], &p->buf[k], err);
    if (st != DL_OK)
        free_plan_buffers(m, p);
    return st;
}

/* Lays the slots out over the buffers (host staging or backend): the
 * fixed state (constants) after the running statistics. */
static void point_slots(dl_model *m, float *params, float *grads, float *state)
{
    int64_t po = 0, so = 0, fo = m->nrunning;
    for (int i = 0; i < m->nlayers; i++)
        for (int k = 0; k < m->layers[i].nparams; k++) {
            param_slot *p = &m->layers[i].p[k];
            int64_t n = dl_shape_numel(p->ndim, p->shape);
            int64_t *at = p->trainable ? &po : p->fixed ? &fo : &so;
            p->data = (p->trainable ? params : state) + *at;
            p->grad = p->trainable && grads ? grads + *at : NULL;
            *at += n;
        }
}

/* conv1d and maxpool1d run as the 2-D window on [C, 1, L]; a conv1d over
 * a sequence keeps its [T, D] (channels last, layer_conv.c). */
static void window_as_2d(layer *l)
{
    dl_layer_type t = l->conf->type;
    if ((t != DL_LAYER_CONV1D && t != DL_LAYER_MAXPOOL1D) || l->seq)
        return;
    int64_t in3[DL_MAX_DIMS] = { l->in_shape[0], 1, l->in_shape[1] };
    int64_t out3[DL_MAX_DIMS] = { l->out_shape[0], 1, l->out_shape[1] };
    memcpy(l->in_shape, in3, sizeof(in3));
    memcpy(l->out_shape, out3, sizeof(out3));
    l->in_ndim = l->out_ndim = 3;
}

/* Shapes of layer i's inputs and output from the tensors above it. */
static dl_status shape_layer(dl_model *m, int i, int *nd, int64_t (*sh)[DL_MAX_DIMS],
                             dl_err *err)
{
    layer *l = &m->layers[i];
    l->nin = l->conf->nsrc;
    int ind[DL_LAYER_MAX_IN];
    for (int k = 0; k < l->nin; k++) {
        int t = model_tensor_of(m, l->conf->src[k]);
        ind[k] = l->ins_ndim[k] = nd[t];
        memcpy(l->ins_shape[k], sh[t], sizeof(sh[t]));
        l->ins_dim[k] = dl_shape_numel(nd[t], sh[t]);
    }
    l->in_ndim = l->ins_ndim[0];
    memcpy(l->in_shape, l->ins_shape[0], sizeof(l->in_shape));
    l->in_dim = l->ins_dim[0];
    int seq[DL_LAYER_MAX_IN], out_seq;
    for (int k = 0; k < l->nin; k++)
        seq[k] = m->conf->tseq[model_tensor_of(m, l->conf->src[k])];
    dl_status st = layer_shape(l->conf, l->nin, ind, (const int64_t (*)[DL_MAX_DIMS])l->ins_shape,
                               &l->out_ndim, l->out_shape, err);
    if (st == DL_OK)
        st = layer_seq(l->conf, l->nin, seq, ind, (const int64_t (*)[DL_MAX_DIMS])l->ins_shape,
                       &out_seq, &l->out_ndim, l->out_shape, err);
    l->out_dim = dl_shape_numel(l->out_ndim, l->out_shape);
    l->seq = l->nin > 0 && seq[0] >= 0;
    nd[m->ninputs + i] = l->out_ndim;
    memcpy(sh[m->ninputs + i], l->out_shape, sizeof(l->out_shape));
    if (st == DL_OK)
        window_as_2d(l);
    if (st == DL_OK && l->ops->supported && !l->ops->supported(l))
        st = dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s) is unsupported on %s: the "
                        "backend lacks its kernels", l->conf->name,
                        dl_layer_type_name(l->conf->type), m->be->ops->name);
    /* (a conv1d over a sequence steps its dilated window itself) */
    if (st == DL_OK && (l->conf->dh > 1 || l->conf->dw > 1) && !m->be->conv_dilation &&
        !l->seq)
        st = dl_err_set(err, DL_ERR_INVALID, "layer '%s': the %s backend lacks dilated "
                        "convolutions (they run on the CPU only)", l->conf->name,
                        m->be->ops->name);
    return st;
}

static dl_status build_layers(dl_model *m, dl_err *err)
{
    const dl_model_conf *c = m->conf;
    int *nd = calloc((size_t)m->nt, sizeof(*nd));
    int64_t (*sh)[DL_MAX_DIMS] = calloc((size_t)m->nt, sizeof(*sh));
    m->grad_at = calloc((size_t)m->nlayers + 1, sizeof(*m->grad_at));
    m->tdim = calloc((size_t)m->nt, sizeof(*m->tdim));
    dl_status st = nd && sh && m->grad_at && m->tdim ? DL_OK
                 : dl_err_set(err, DL_ERR_NOMEM, "layer shapes");
    for (int k = 0; k < m->ninputs && st == DL_OK; k++) {
        nd[k] = c->inputs[k].ndim;
        memcpy(sh[k], c->inputs[k].shape, sizeof(sh[k]));
    }
    for (int i = 0; i < m->nlayers && st == DL_OK; i++) {
        layer *l = &m->layers[i];
        l->conf = &c->layers[i];
        l->be = m->be;
        l->ops = layer_ops_for(l->conf->type);
        if ((st = shape_layer(m, i, nd, sh, err)) != DL_OK)
            break;
        if (l->ops->declare)
            l->ops->declare(l);
        for (int k = 0; k < l->nparams; k++) {
            int64_t n = dl_shape_numel(l->p[k].ndim, l->p[k].shape);
            if (l->p[k].trainable)
                m->nparams += n;
            else
                m->nstate += n;
            if (!l->p[k].trainable && !l->p[k].fixed)
                m->nrunning += n;
            m->ntensors++;
        }
        m->grad_at[i + 1] = m->nparams;   /* point_slots lays them out in this order */
    }
    for (int t = 0; t < m->nt && st == DL_OK; t++)
        m->tdim[t] = dl_shape_numel(nd[t], sh[t]);
    free(nd);
    free(sh);
    if (st != DL_OK)
        return st;
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
    m->ninputs = conf->ninputs;
    m->nt = m->ninputs + m->nlayers;
    m->layers = calloc((size_t)conf->nlayers, sizeof(*m->layers));
    dl_status st = m->layers ? build_layers(m, err)
                             : dl_err_set(err, DL_ERR_NOMEM, "layers");
    if (st == DL_OK)
        st = model_plan_graph(m, err);
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
    if (m->fixed)
        m->be->ops->fix_weights(m->be, m->params, (size_t)m->nparams * sizeof(float), false);
    be_release(m->be, m->params);
    be_release(m->be, m->grads);
    be_release(m->be, m->state);
    for (int k = 0; k < 2; k++) {
        free(m->plan[k].slot_of);
        free(m->plan[k].alias);
        free(m->plan[k].dim);
    }
    model_free_grad_plan(m);
    free(m->act);
    free(m->grad);
    free(m->stage);
    free(m->seqbuf);
    free(m->lens);
    free(m->steps);
    free(m->ostat);
    free(m->tdim);
    free(m->last_reader);
    free(m->out_of);
    free(m->layers);
    free(m->tensors);
    free(m->grad_at);
    free(m);
}

const dl_model_conf *dl_model_conf_of(const dl_model *m) { return m->conf; }
dl_backend *dl_model_backend(const dl_model *m) { return m->be; }

int64_t dl_model_in_dim(const dl_model *m)
{
    int64_t d = 0;
    for (int k = 0; k < m->ninputs; k++)
        d += model_in_width(m, k);
    return d;
}

int64_t dl_model_out_dim(const dl_model *m) { return model_out_dim_sum(m); }
int64_t dl_model_target_dim(const dl_model *m) { return model_target_cols(m); }
int dl_model_input_count(const dl_model *m) { return m->ninputs; }
int dl_model_output_count(const dl_model *m) { return m->conf->noutputs; }
int64_t dl_model_input_dim(const dl_model *m, int k) { return model_in_width(m, k); }

int64_t dl_model_output_dim(const dl_model *m, int k)
{
    return m->tdim[m->ninputs + m->conf->outputs[k].from];
}

int dl_model_input_index(const dl_model *m, const char *name)
{
    for (int k = 0; k < m->ninputs; k++)
        if (strcmp(m->conf->inputs[k].name, name) == 0)
            return k;
    return -1;
}

int dl_model_output_index(const dl_model *m, const char *name)
{
    for (int k = 0; k < m->conf->noutputs; k++)
        if (strcmp(m->conf->outputs[k].name, name) == 0)
            return k;
    return -1;
}

float *dl_model_params(dl_model *m, int64_t *n) { *n = m->nparams; return m->params; }
float *dl_model_grads(dl_model *m, int64_t *n) { *n = m->nparams; return m->grads; }
float *dl_model_state(dl_model *m, int64_t *n) { *n = m->nstate; return m->state; }
float *dl_model_running_state(dl_model *m, int64_t *n) { *n = m->nrunning; return m->state; }

void dl_model_fix_weights(dl_model *m)
{
    if (m->fixed || !m->be->ops->fix_weights)
        return;
    m->fixed = true;
    m->be->ops->fix_weights(m->be, m->params, (size_t)m->nparams * sizeof(float), true);
}

void dl_model_set_batch_invariant(dl_model *m, bool on)
{
    m->invariant = on;
    for (int i = 0; i < m->nlayers; i++)
        m->layers[i].invariant = on;
}

bool dl_model_batch_invariant(const dl_model *m) { return m->invariant; }

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

/* Reads sequence input k's lengths from its packed samples (x: a length,
 * then the values), checking each, and the longest into m->steps[k]. */
static dl_status read_lengths(dl_model *m, int k, const float *x, int64_t batch, dl_err *err)
{
    const dl_input_conf *ic = &m->conf->inputs[k];
    int64_t w = model_in_width(m, k);
    m->steps[k] = 1;
    for (int64_t i = 0; i < batch; i++) {
        float len;
        if (m->be->device < 0)
            len = x[i * w];
        else
            m->be->ops->download(m->be, &len, x + i * w, sizeof(len));
        if (!(len >= 1 && len <= (float)ic->max_length && len == (float)(int32_t)len))
            return dl_err_set(err, DL_ERR_INVALID, "input '%s': sample %lld has length %g, "
                              "not a whole number from 1 to %lld", ic->name, (long long)i,
                              (double)len, (long long)ic->max_length);
        m->lens[k][i] = (int32_t)len;
        if (len > m->steps[k])
            m->steps[k] = (int64_t)len;
    }
    return DL_OK;
}

/* Copies sequence input k's values, m->steps[k] positions a sample, out
 * of its packed samples. */
static void unpack_seq(dl_model *m, int k, const float *x, int64_t batch)
{
    int64_t w = model_in_width(m, k), d = model_dim_now(m, k);
    for (int64_t i = 0; i < batch; i++)
        m->be->ops->copy(m->be, m->seqbuf[k] + i * d, x + i * w + 1, d);
}

/* The lengths each layer reads and gives this pass. */
static void bind_lengths(dl_model *m)
{
    for (int i = 0; i < m->nlayers; i++) {
        layer *l = &m->layers[i];
        for (int k = 0; k < l->nin; k++)
            l->ins_len[k] = model_lens_of(m, model_tensor_of(m, l->conf->src[k]));
        l->out_len = model_lens_of(m, m->ninputs + i);
        l->seq_max = l->nin ? l->in_shape[0] : 0;
    }
}

/* Points each tensor of this pass at its buffer (aliases included). */
static void bind_acts(dl_model *m, const float *const *xs, bool train)
{
    act_plan *p = &m->plan[train];
    for (int k = 0; k < m->ninputs; k++)
        m->act[k] = m->conf->inputs[k].max_length ? m->seqbuf[k] : xs[k];
    for (int t = m->ninputs; t < m->nt; t++)
        m->act[t] = p->alias[t] != t ? m->act[p->alias[t]] : p->buf[p->slot_of[t]];
}

static dl_status run_layer(dl_model *m, int i, int64_t batch, bool train, dl_err *err)
{
    layer *l = &m->layers[i];
    int t = m->ninputs + i;
    float *y = (float *)m->act[t];
    l->calls = m->counter;
    if (!train && m->plan[0].alias[t] != t && !l->folded)
        return DL_OK;                         /* a view: the input as it is */
    if (l->ops->forward_multi) {
        const float *xs[DL_LAYER_MAX_IN];
        for (int k = 0; k < l->nin; k++)
            xs[k] = m->act[model_tensor_of(m, l->conf->src[k])];
        return l->ops->forward_multi(l, xs, y, batch, train, err);
    }
    const float *x = l->nin ? m->act[model_tensor_of(m, l->conf->src[0])] : NULL;
    l->res = l->res_fused && !train ? m->act[l->res_t] : NULL;
    return l->ops->forward(l, x, y, batch, train, err);
}

dl_status dl_model_forward_multi(dl_model *m, const float *const *xs, int64_t batch,
                                 bool train, dl_err *err)
{
    return model_forward_dec(m, xs, batch, train, NULL, err);
}

dl_status model_forward_dec(dl_model *m, const float *const *xs, int64_t batch, bool train,
                            const layer_dec *dec, dl_err *err)
{
    m->have_dout = false;
    m->have_out = false;      /* no loss on a failed pass: set again on success */
    if (batch < 1)
        return dl_err_set(err, DL_ERR_INVALID, "batch of %lld samples", (long long)batch);
    dl_status st = ensure_capacity(m, batch, train, err);
    if (st != DL_OK)
        return st;
    for (int k = 0; k < m->ninputs && st == DL_OK; k++)
        if (m->conf->inputs[k].max_length)
            st = read_lengths(m, k, xs[k], batch, err);
    if (st != DL_OK)
        return st;
    set_steps(m, m->steps);
    for (int k = 0; k < m->ninputs; k++)
        if (m->conf->inputs[k].max_length)
            unpack_seq(m, k, xs[k], batch);
    if (train)
        m->counter++;
    bind_acts(m, xs, train);
    bind_lengths(m);
    for (int i = 0; i < m->nlayers; i++) {
        bool source = dec && dec->source && dec->source[i];
        if (source && dec->step)
            continue;
        m->layers[i].dec = source ? NULL : dec;
        st = run_layer(m, i, batch, train, err);
        m->layers[i].dec = NULL;
        if (st != DL_OK)
            return dl_err_prefix(err, "layer '%s'", m->layers[i].conf->name);
    }
    m->batch = batch;
    m->trained = train;
    m->have_out = true;
    return DL_OK;
}

/* Splits rows of all inputs side by side (x: batch * in_dim) into one
 * buffer an input. */
static void split_inputs(dl_model *m, const float *x, int64_t batch)
{
    int64_t din = dl_model_in_dim(m), at = 0;
    for (int k = 0; k < m->ninputs; k++) {
        int64_t w = model_in_width(m, k);
        for (int64_t i = 0; i < batch; i++)
            m->be->ops->copy(m->be, m->stage[k] + i * w, x + i * din + at, w);
        at += w;
    }
}

dl_status dl_model_forward(dl_model *m, const float *x, int64_t batch,
                           bool train, const float **out, dl_err *err)
{
    *out = NULL;
    const float *xs[1] = { x };
    if (m->ninputs > 1) {
        dl_status st = batch < 1 ? DL_OK : ensure_capacity(m, batch, train, err);
        if (st != DL_OK)
            return st;
        if (batch >= 1)
            split_inputs(m, x, batch);
    }
    dl_status st = dl_model_forward_multi(m, m->ninputs > 1 ? (const float *const *)m->stage
                                                            : xs, batch, train, err);
    if (st == DL_OK)
        *out = m->act[m->ninputs + m->conf->outputs[0].from];
    return st;
}

const float *dl_model_output(const dl_model *m, int k)
{
    return m->have_out ? m->act[m->ninputs + m->conf->outputs[k].from] : NULL;
}

int64_t dl_model_output_steps(const dl_model *m, int k)
{
    return m->conf->outputs[k].max_length ? model_steps_of(m, m->ninputs + m->conf->outputs[k].from)
                                          : 0;
}

const int32_t *dl_model_output_lengths(const dl_model *m, int k)
{
    return m->conf->outputs[k].max_length && m->have_out
         ? model_lens_of(m, m->ninputs + m->conf->outputs[k].from) : NULL;
}

int dl_model_layer_count(const dl_model *m) { return m->nlayers; }

void dl_model_grad_range(const dl_model *m, int layer, int64_t *begin, int64_t *end)
{
    DL_ASSERT(layer >= 0 && layer < m->nlayers);
    *begin = m->grad_at[layer];
    *end = m->grad_at[layer + 1];
}

dl_status dl_model_set_input_grads(dl_model *m, bool on, dl_err *err)
{
    free_batch_buffers(m);      /* the gradient buffers change */
    model_free_grad_plan(m);
    m->input_grads = on;
    m->have_out = m->have_dout = false;
    return model_plan_grads(m, err);
}

const float *dl_model_input_grad(const dl_model *m, int k)
{
    int s = m->gp.slot_of ? m->gp.slot_of[k] : -1;
    return model_needs_grad(m, k) && s >= 0 && m->gp.buf ? m->gp.buf[s] : NULL;
}

dl_status dl_model_set_output_grads(dl_model *m, const float *const *g, dl_err *err)
{
    if (!m->have_out || !m->trained)
        return dl_err_set(err, DL_ERR_INVALID, "output gradients need a training forward pass");
    for (int k = 0; k < m->conf->noutputs; k++)
        m->be->ops->copy(m->be, model_dout_of(m, k, true), g[k],
                         m->batch * model_dim_now(m, m->ninputs + m->conf->outputs[k].from));
    m->have_dout = true;
    return DL_OK;
}

dl_status dl_model_backward(dl_model *m, dl_err *err)
{
    return dl_model_backward_hooked(m, NULL, NULL, err);
}

/* Gradient buffers of layer i's inputs: the tensor's own, a scratch one
 * to add in afterwards, or NULL for a model input (no gradient). */
static void input_grads(dl_model *m, int i, float **dxs, bool *add)
{
    const dl_layer_conf *c = m->layers[i].conf;
    int scr = 0;
    for (int k = 0; k < c->nsrc; k++) {
        int s = model_tensor_of(m, c->src[k]);
        add[k] = model_needs_grad(m, s) && model_via_scratch(m, i, k);
        dxs[k] = !model_needs_grad(m, s) ? NULL
               : add[k] ? m->gp.scratch[scr++] : m->gp.buf[m->gp.slot_of[s]];
    }
}

static dl_status backward_layer(dl_model *m, int i, dl_err *err)
{
    layer *l = &m->layers[i];
    int t = m->ninputs + i;
    const float *xs[DL_LAYER_MAX_IN] = { NULL }, *dy = m->gp.buf[m->gp.slot_of[t]];
    float *dxs[DL_LAYER_MAX_IN] = { NULL };
    bool add[DL_LAYER_MAX_IN];
    for (int k = 0; k < l->nin; k++)
        xs[k] = m->act[model_tensor_of(m, l->conf->src[k])];
    input_grads(m, i, dxs, add);
    dl_status st = l->ops->backward_multi
                 ? l->ops->backward_multi(l, xs, m->act[t], dy, dxs, m->batch, err)
                 : l->ops->backward(l, xs[0], m->act[t], dy, dxs[0], m->batch, err);
    for (int k = 0; k < l->nin && st == DL_OK; k++)
        if (add[k])      /* a second reader's share: the gradients add up */
            m->be->ops->axpy(m->be, 1.0f, dxs[k],
                             m->gp.buf[m->gp.slot_of[model_tensor_of(m, l->conf->src[k])]],
                             m->batch * l->ins_dim[k]);
    return st;
}

dl_status dl_model_backward_hooked(dl_model *m, dl_grad_hook fn, void *ctx, dl_err *err)
{
    if (m->fixed)
        return dl_err_set(err, DL_ERR_INVALID, "backward through a model whose weights are "
                          "fixed for serving");
    if (!m->have_dout)
        return dl_err_set(err, DL_ERR_INVALID, "backward without a loss gradient");
    for (int i = m->nlayers - 1; i >= 0; i--) {
        dl_status st = backward_layer(m, i, err);
        if (st != DL_OK) {
            m->have_dout = false;
            return dl_err_prefix(err, "layer '%s'", m->layers[i].conf->name);
        }
        /* The layer wrote its own gradients and no later step touches them. */
        if (fn && (st = fn(ctx, i, m->grad_at[i], m->grad_at[i + 1], err)) != DL_OK) {
            m->have_dout = false;
            return st;
        }
    }
    m->have_dout = false;
    return DL_OK;
}

int64_t dl_model_served_dim(const dl_model *m, int k) { return m->conf->outputs[k].served; }

int64_t dl_model_served_out_dim(const dl_model *m)
{
    int64_t d = 0;
    for (int k = 0; k < m->conf->noutputs; k++)
        d += m->conf->outputs[k].served;
    return d;
}

/* A crf output's Viterbi paths (host p: b rows of max_length tags, -1
 * past each length) from its tag scores y and the crf layer's
 * transitions. */
static dl_status serve_crf(dl_model *m, int k, const float *y, float *p, int64_t b, dl_err *err)
{
    const dl_output_conf *o = &m->conf->outputs[k];
    const float *tr = m->layers[o->from].p[0].data;
    const int32_t *len = dl_model_output_lengths(m, k);
    int64_t L = o->max_length, C = o->dim / L, T = model_steps_of(m, m->ninputs + o->from);
    float *hy = malloc((size_t)(b * T * C + (C + 2) * C) * sizeof(float)), *ht = hy + b * T * C;
    int32_t *path = malloc((size_t)T * sizeof(int32_t));
    void *work = malloc(crf_work_size(T, C));
    if (!hy || !path || !work) {
        free(hy), free(path), free(work);
        return dl_err_set(err, DL_ERR_NOMEM, "crf decoding");
    }
    m->be->ops->download(m->be, hy, y, (size_t)(b * T * C) * sizeof(float));
    m->be->ops->download(m->be, ht, tr, (size_t)((C + 2) * C) * sizeof(float));
    for (int64_t i = 0; i < b; i++) {
        crf_viterbi(hy + i * T * C, len[i], C, ht, path, NULL, work);
        for (int64_t t = 0; t < L; t++)
            p[i * L + t] = t < len[i] ? (float)path[t] : -1.0f;
    }
    free(work), free(path), free(hy);
    return DL_OK;
}

/* Probabilities from output k's values as served: softmax for
 * cross-entropy (a row a position), sigmoid for binary cross-entropy, a
 * crf's path (into host memory hp; the others into p), else the values
 * as they are. */
static dl_status serve_output(dl_model *m, int k, const float *y, float *p, float *hp,
                              int64_t b, dl_err *err)
{
    const dl_output_conf *o = &m->conf->outputs[k];
    if (o->loss == DL_LOSS_CRF)
        return serve_crf(m, k, y, hp, b, err);
    if (o->max_length) {    /* T positions a sample computed, max_length served */
        int64_t L = o->max_length, C = o->dim / L, T = model_steps_of(m, m->ninputs + o->from);
        const int32_t *len = dl_model_output_lengths(m, k);
        for (int64_t i = 0; i < b; i++) {   /* zeros past each sample's length */
            m->be->ops->softmax_fwd(m->be, y + i * T * C, p + i * L * C, len[i], C);
            m->be->ops->fill(m->be, p + (i * L + len[i]) * C, (L - len[i]) * C, 0.0f);
        }
    } else if (o->loss == DL_LOSS_XENT) {
        m->be->ops->softmax_fwd(m->be, y, p, b, o->dim);
    } else if (o->loss == DL_LOSS_BCE) {
        m->be->ops->act_fwd(m->be, DL_ACT_SIGMOID, y, p, b * o->dim);
    } else {
        m->be->ops->copy(m->be, p, y, b * o->dim);
    }
    return DL_OK;
}

/* One chunk of b samples (host rows xb[k] of each input) to its served
 * outputs (host rows ob[k]). */
static dl_status predict_chunk(dl_model *m, const float *const *xb, int64_t b,
                               float *const *ob, dl_err *err)
{
    bool host = m->be->device < 0;
    const float *xd[64];
    int64_t at = 0;
    for (int k = 0; k < m->ninputs; k++) {
        int64_t w = model_in_width(m, k);
        xd[k] = xb[k];
        if (!host) {       /* a device's inputs: staged one after the other */
            m->be->ops->upload(m->be, m->stage_in + at, xb[k], (size_t)(b * w) * sizeof(float));
            xd[k] = m->stage_in + at;
            at += b * w;
        }
    }
    dl_status st = dl_model_forward_multi(m, xd, b, false, err);
    for (int k = 0; k < m->conf->noutputs && st == DL_OK; k++) {
        int64_t od = dl_model_served_dim(m, k);
        float *p = host ? ob[k] : m->stage_out;
        st = serve_output(m, k, dl_model_output(m, k), p, ob[k], b, err);
        if (!host && m->conf->outputs[k].loss != DL_LOSS_CRF)
            m->be->ops->download(m->be, ob[k], p, (size_t)(b * od) * sizeof(float));
    }
    return st;
}

/* The longest of sample i's sequences (0: none). */
static int64_t sample_steps(const dl_model *m, const float *const *xs, int64_t i)
{
    int64_t len = 0;
    for (int k = 0; k < m->ninputs; k++) {
        if (!m->conf->inputs[k].max_length)
            continue;
        float v = xs[k][i * model_in_width(m, k)];
        if (v > (float)len && v <= (float)m->conf->inputs[k].max_length)
            len = (int64_t)v;
    }
    return len;
}

/* A sample and its longest sequence, ordered by length, then index. */
typedef struct by_steps {
    int64_t steps, i;
} by_steps;

static int by_steps_cmp(const void *a, const void *b)
{
    const by_steps *x = a, *y = b;
    return x->steps != y->steps ? (x->steps > y->steps) - (x->steps < y->steps)
                                : (x->i > y->i) - (x->i < y->i);
}

/* Samples of sequences run in groups of similar lengths (sorted, a group
 * ending where a sample would be more than twice as long as its first or
 * the chunk is full), as a pass costs its longest sample: a batch of
 * mixed lengths would pad every sample to the longest. Each group is
 * gathered into staging rows and its answers put back in place. */
static dl_status predict_grouped(dl_model *m, const float *const *xs, int64_t n, int64_t batch,
                                 float *const *outs, dl_err *err)
{
    int64_t win = dl_model_in_dim(m), wout = dl_model_served_out_dim(m);
    by_steps *order = malloc((size_t)n * sizeof(*order));
    float *xb = malloc((size_t)(batch * (win + wout)) * sizeof(float));
    if (!order || !xb) {
        free(order);
        free(xb);
        return dl_err_set(err, DL_ERR_NOMEM, "predict staging");
    }
    for (int64_t i = 0; i < n; i++)
        order[i] = (by_steps){ sample_steps(m, xs, i), i };
    qsort(order, (size_t)n, sizeof(*order), by_steps_cmp);
    const float *xk[64];
    float *ok[64];
    int64_t at = 0;
    for (int k = 0; k < m->ninputs; at += batch * model_in_width(m, k++))
        xk[k] = xb + at;
    for (int k = 0; k < m->conf->noutputs; at += batch * dl_model_served_dim(m, k++))
        ok[k] = xb + at;
    dl_status st = DL_OK;
    for (int64_t g = 0, e; g < n && st == DL_OK; g = e) {
        for (e = g + 1; e < n && e - g < batch && order[e].steps <= 2 * order[g].steps; e++)
            ;
        for (int k = 0; k < m->ninputs; k++) {
            int64_t w = model_in_width(m, k);
            for (int64_t i = g; i < e; i++)
                memcpy((float *)xk[k] + (i - g) * w, xs[k] + order[i].i * w,
                       (size_t)w * sizeof(float));
        }
        st = predict_chunk(m, xk, e - g, ok, err);
        for (int k = 0; k < m->conf->noutputs && st == DL_OK; k++) {
            int64_t d = dl_model_served_dim(m, k);
            for (int64_t i = g; i < e; i++)
                memcpy(outs[k] + order[i].i * d, ok[k] + (i - g) * d, (size_t)d * sizeof(float));
        }
    }
    free(xb);
    free(order);
    return st;
}

dl_status dl_model_predict_multi(dl_model *m, const float *const *xs, int64_t n,
                                 int64_t batch, float *const *outs, dl_err *err)
{
    if (batch < 1)
        batch = 256;
    dl_status st = ensure_capacity(m, n < batch ? (n > 0 ? n : 1) : batch, false, err);
    bool seq = false;
    for (int k = 0; k < m->ninputs; k++)
        seq = seq || (n > 1 && m->conf->inputs[k].max_length > 0);
    if (st == DL_OK && seq)
        st = predict_grouped(m, xs, n, batch, outs, err);
    for (int64_t i = 0; i < n && st == DL_OK && !seq; i += batch) {
        int64_t b = n - i < batch ? n - i : batch;
        const float *xb[64];
        float *ob[64];
        for (int k = 0; k < m->ninputs; k++)
            xb[k] = xs[k] + i * model_in_width(m, k);
        for (int k = 0; k < m->conf->noutputs; k++)
            ob[k] = outs[k] + i * dl_model_served_dim(m, k);
        st = predict_chunk(m, xb, b, ob, err);
    }
    m->have_out = false;
    return st;
}

/* Copies cols values of each of n rows of stride `from` to rows of stride
 * `to`. Host memory. */
static void copy_rows(float *dst, int64_t to, const float *src, int64_t from, int64_t n,
                      int64_t cols)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * to, src + i * from, (size_t)cols * sizeof(float));
}

dl_status dl_model_predict(dl_model *m, const float *x, int64_t n, int64_t batch,
                           float *out, dl_err *err)
{
    int64_t din = dl_model_in_dim(m), dout = dl_model_served_out_dim(m);
    if (m->ninputs == 1 && m->conf->noutputs == 1)
        return dl_model_predict_multi(m, &x, n, batch, &out, err);
    /* Rows of all inputs side by side in, rows of all outputs side by side
     * out: split into one host array an input and an output. */
    if (batch < 1)
        batch = 256;
    int64_t b0 = n < batch ? (n > 0 ? n : 1) : batch;
    float *buf = malloc((size_t)(b0 * (din + dout)) * sizeof(float));
    if (!buf)
        return dl_err_set(err, DL_ERR_NOMEM, "predict staging");
    const float *xs[64];
    float *outs[64];
    dl_status st = DL_OK;
    for (int64_t i = 0; i < n && st == DL_OK; i += b0) {
        int64_t b = n - i < b0 ? n - i : b0, at = 0;
        for (int k = 0; k < m->ninputs; at += model_in_width(m, k++)) {
            xs[k] = buf + b0 * at;
            copy_rows(buf + b0 * at, model_in_width(m, k), x + i * din + at, din, b,
                      model_in_width(m, k));
        }
        at = 0;
        for (int k = 0; k < m->conf->noutputs; at += dl_model_served_dim(m, k++))
            outs[k] = buf + b0 * (din + at);
        st = dl_model_predict_multi(m, xs, b, b, outs, err);
        at = 0;
        for (int k = 0; k < m->conf->noutputs && st == DL_OK; at += dl_model_served_dim(m, k++))
            copy_rows(out + i * dout + at, dout, outs[k], dl_model_served_dim(m, k), b,
                      dl_model_served_dim(m, k));
    }
    free(buf);
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
