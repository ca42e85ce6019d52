/* model_loss.c: the losses of a model's outputs (softmax cross-entropy,
 * mean squared error, binary cross-entropy on logits; per position of a
 * sequence: softmax cross-entropy, a linear-chain CRF, next-token
 * prediction), their gradients and per-output figures. */
#include "nn/crf.h"
#include "nn/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Today's single-output loss: labels (class indices) for cross-entropy,
 * targets or one-hot labels for MSE. */
static dl_status loss_single(dl_model *m, const int32_t *labels, const float *targets,
                             float grad_scale, bool want_grad, double *loss_sum,
                             int64_t *correct, dl_err *err)
{
    int64_t n = m->batch, k = dl_model_out_dim(m);
    float *dout = model_dout_of(m, 0, want_grad);
    const float *y = dl_model_output(m, 0);
    for (int64_t i = 0; labels && i < n; i++)
        if (labels[i] < 0 || labels[i] >= k)
            return dl_err_set(err, DL_ERR_INVALID, "label %d of sample %lld not in [0, %lld)",
                              labels[i], (long long)i, (long long)k);
    if (m->conf->loss == DL_LOSS_XENT) {
        if (!labels)
            return dl_err_set(err, DL_ERR_INVALID, "cross-entropy needs labels");
        m->be->ops->xent(m->be, y, labels, n, k, dout, grad_scale, loss_sum, correct);
        return DL_OK;
    }
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
        m->be->ops->download(m->be, m->host_y, y, (size_t)(n * k) * sizeof(float));
        for (int64_t i = 0; i < n; i++)
            *correct += dl_argmax(m->host_y + i * k, k) == labels[i];
    }
    return DL_OK;
}

/* Binary cross-entropy on logits, the mean over a sample's values; on the
 * host. Counts samples whose every value is on the target's side of 0.5. */
static void bce_host(dl_model *m, const float *y, const float *t, int64_t n, int64_t k,
                     float *dout, float scale, out_stat *os)
{
    float *hy = m->host_y, *g = m->host_targets == t ? NULL : m->host_targets;
    m->be->ops->download(m->be, hy, y, (size_t)(n * k) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        bool ok = true;
        for (int64_t j = 0; j < k; j++) {
            float x = hy[i * k + j], tt = t[i * k + j];
            os->loss += (fmaxf(x, 0.0f) - x * tt + log1pf(expf(-fabsf(x)))) / (double)k;
            ok = ok && (x > 0.0f) == (tt > 0.5f);
            if (g)
                g[i * k + j] = (1.0f / (1.0f + expf(-x)) - tt) * scale;
        }
        os->correct += ok;
    }
    if (dout && g)
        m->be->ops->upload(m->be, dout, g, (size_t)(n * k) * sizeof(float));
}

/* ---- per-token outputs ----------------------------------------------------- */

/* Cross-entropy of one row of c logits against class y: adds the loss to
 * *loss and, when g is not NULL, writes (softmax - onehot) * scale there;
 * whether the argmax is y. */
static bool xent_row(const float *x, int64_t c, int32_t y, float scale, double *loss, float *g)
{
    int64_t best = dl_argmax(x, c);
    double mx = x[best], sum = 0.0;
    for (int64_t j = 0; j < c; j++)
        sum += exp((double)x[j] - mx);
    *loss += log(sum) + mx - x[y];
    for (int64_t j = 0; g && j < c; j++)
        g[j] = (float)((exp((double)x[j] - mx) / sum - (j == y)) * scale);
    return best == y;
}

/* A CRF output's negative log-likelihood a sample (the tags of every
 * position within the length given), the gradients of its tag scores
 * into g and of its transitions into the crf layer's; its Viterbi paths'
 * correct tags counted. */
static dl_status loss_crf(dl_model *m, int k, const float *y, const int32_t *len, float scale,
                         float *g, dl_err *err)
{
    const dl_output_conf *o = &m->conf->outputs[k];
    param_slot *tp = &m->layers[o->from].p[0];
    int64_t n = m->batch, L = o->max_length, C = o->dim / L, nt = (C + 2) * C;
    int64_t T = model_steps_of(m, m->ninputs + o->from);     /* positions of y's samples */
    out_stat *os = &m->ostat[k];
    float *trans = malloc((size_t)(2 * nt) * sizeof(float)), *dtrans = trans + nt;
    int32_t *path = malloc((size_t)T * sizeof(int32_t));
    void *work = malloc(crf_work_size(T, C));
    dl_status st = trans && path && work ? DL_OK : dl_err_set(err, DL_ERR_NOMEM, "crf");
    for (int64_t i = 0; i < n && st == DL_OK; i++)
        for (int64_t p = 0; p < len[i] && st == DL_OK; p++)
            if (m->host_labels[i * L + p] < 0)
                st = dl_err_set(err, DL_ERR_INVALID, "output '%s': sample %lld has no tag at "
                                "position %lld (a crf needs one at every position)", o->name,
                                (long long)i, (long long)p);
    if (st == DL_OK) {
        m->be->ops->download(m->be, trans, tp->data, (size_t)nt * sizeof(float));
        memset(dtrans, 0, (size_t)nt * sizeof(float));
    }
    for (int64_t i = 0; i < n && st == DL_OK; i++) {
        const int32_t *tags = m->host_labels + i * L;
        double score;
        os->loss += crf_nll(y + i * T * C, T, len[i], C, trans, tags, scale,
                            g ? g + i * T * C : NULL, g ? dtrans : NULL, work);
        crf_viterbi(y + i * T * C, len[i], C, trans, path, &score, work);
        for (int64_t p = 0; p < len[i]; p++)
            os->correct += path[p] == tags[p];
        os->count += len[i];
    }
    if (st == DL_OK && g) {      /* the transitions' gradient adds to the layer's */
        m->be->ops->download(m->be, trans, tp->grad, (size_t)nt * sizeof(float));
        for (int64_t j = 0; j < nt; j++)
            trans[j] += dtrans[j];
        m->be->ops->upload(m->be, tp->grad, trans, (size_t)nt * sizeof(float));
    }
    free(work);
    free(path);
    free(trans);
    return st;
}

/* The class output k's position p of sample i should give: from the
 * targets (host_labels holds n * max_length of them) or, for next_token,
 * the next id of its input; -1: ignored. */
static int32_t token_label(const dl_model *m, const dl_output_conf *o, const float *ids,
                           int64_t steps, int64_t i, int64_t p)
{
    if (o->loss != DL_LOSS_NEXT_TOKEN)
        return m->host_labels[i * o->max_length + p];
    return (int32_t)ids[i * steps + p + 1];
}

/* Gathers a per-token output's classes (a column a position, negative or
 * past the length: ignored), checking them. */
static dl_status gather_token_labels(dl_model *m, const dl_output_conf *o, const int32_t *len,
                                     const float *targets, int64_t tc, int64_t at, dl_err *err)
{
    int64_t T = o->max_length, C = o->dim / T;
    for (int64_t i = 0; i < m->batch; i++)
        for (int64_t p = 0; p < T; p++) {
            float v = targets[i * tc + at + p];
            bool ignored = p >= len[i] || v < 0.0f;
            if (!ignored && !(v < (float)C && v == floorf(v)))
                return dl_err_set(err, DL_ERR_INVALID, "output '%s': label %g at position "
                                  "%lld of sample %lld is not a class in [0, %lld)", o->name,
                                  v, (long long)p, (long long)i, (long long)C);
            m->host_labels[i * T + p] = ignored ? -1 : (int32_t)v;
        }
    return DL_OK;
}

/* A per-token output's loss: softmax cross-entropy over the labelled
 * positions (next_token: each position but the last predicts the next
 * id), the mean over the batch's tokens as PyTorch's CrossEntropyLoss,
 * reported as that mean times the batch (what a sample's loss sums to);
 * or a CRF's negative log-likelihood a sample. Host work. */
static dl_status loss_tokens(dl_model *m, int k, const float *targets, int64_t tc, int64_t at,
                             float scale, float *dout, dl_err *err)
{
    const dl_output_conf *o = &m->conf->outputs[k];
    const int32_t *len = model_lens_of(m, m->ninputs + o->from);
    int64_t T = model_steps_of(m, m->ninputs + o->from), C = o->dim / o->max_length;
    int64_t n = m->batch, d = T * C, count = 0;      /* y: n samples of T positions */
    out_stat *os = &m->ostat[k];
    float *y = malloc((size_t)(n * d) * sizeof(float) * 2), *g = y + n * d;
    float *ids = NULL;
    dl_status st = y ? DL_OK : dl_err_set(err, DL_ERR_NOMEM, "token loss");
    if (st == DL_OK && o->loss != DL_LOSS_NEXT_TOKEN)
        st = gather_token_labels(m, o, len, targets, tc, at, err);
    if (st == DL_OK && o->loss == DL_LOSS_NEXT_TOKEN &&
        !(ids = malloc((size_t)(n * T) * sizeof(float))))
        st = dl_err_set(err, DL_ERR_NOMEM, "token loss");
    if (st != DL_OK) {
        free(y);
        return st;
    }
    if (ids)
        m->be->ops->download(m->be, ids, m->seqbuf[o->of], (size_t)(n * T) * sizeof(float));
    m->be->ops->download(m->be, y, dl_model_output(m, k), (size_t)(n * d) * sizeof(float));
    memset(g, 0, (size_t)(n * d) * sizeof(float));
    if (o->loss == DL_LOSS_CRF) {
        os->count = 0;       /* loss_crf counts the tokens */
        st = loss_crf(m, k, y, len, scale, dout ? g : NULL, err);
    } else {
        for (int64_t i = 0; i < n; i++)
            for (int64_t p = 0; p < len[i] - (o->loss == DL_LOSS_NEXT_TOKEN); p++)
                count += token_label(m, o, ids, T, i, p) >= 0;
        double per = count ? (double)n / (double)count : 0.0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t p = 0; p < len[i] - (o->loss == DL_LOSS_NEXT_TOKEN); p++) {
                int32_t c = token_label(m, o, ids, T, i, p);
                double l = 0.0;
                if (c < 0)
                    continue;
                os->correct += xent_row(y + (i * T + p) * C, C, c, (float)(scale * per), &l,
                                        dout ? g + (i * T + p) * C : NULL);
                os->loss += l * per;
            }
        os->count = count;
    }
    if (st == DL_OK && dout)
        m->be->ops->upload(m->be, dout, g, (size_t)(n * d) * sizeof(float));
    free(ids);
    free(y);
    return st;
}

/* Gathers output k's target columns (at column `at` of rows of `tc`) into
 * host memory: class indices (checked) or values. */
static dl_status gather_targets(dl_model *m, int k, const float *targets, int64_t tc,
                                int64_t at, dl_err *err)
{
    const dl_output_conf *o = &m->conf->outputs[k];
    for (int64_t i = 0; i < m->batch; i++) {
        if (o->loss != DL_LOSS_XENT) {
            memcpy(m->host_y + i * o->dim, targets + i * tc + at, (size_t)o->dim * sizeof(float));
            continue;
        }
        float v = targets[i * tc + at];
        if (!(v >= 0.0f && v < (float)o->dim && v == floorf(v)))
            return dl_err_set(err, DL_ERR_INVALID, "output '%s': label %g of sample %lld is "
                              "not a class in [0, %lld)", o->name, v, (long long)i,
                              (long long)o->dim);
        m->host_labels[i] = (int32_t)v;
    }
    return DL_OK;
}

/* Output k's loss into m->ostat[k], its gradient (scaled by the output's
 * weight) into its gradient buffer. */
static dl_status loss_output(dl_model *m, int k, const float *targets, int64_t at,
                             float grad_scale, bool want_grad, dl_err *err)
{
    const dl_output_conf *o = &m->conf->outputs[k];
    int64_t n = m->batch, tc = model_target_cols(m);
    out_stat *os = &m->ostat[k];
    float *dout = model_dout_of(m, k, want_grad), scale = grad_scale * o->weight;
    const float *y = dl_model_output(m, k);
    *os = (out_stat){ .count = n };
    if (o->max_length)
        return loss_tokens(m, k, targets, tc, at, scale, dout, err);
    dl_status st = gather_targets(m, k, targets, tc, at, err);
    if (st != DL_OK)
        return st;
    if (o->loss == DL_LOSS_XENT) {
        m->be->ops->xent(m->be, y, m->host_labels, n, o->dim, dout, scale, &os->loss,
                         &os->correct);
        return DL_OK;
    }
    /* host_y holds the targets now: keep them apart from the staging */
    memcpy(m->host_targets, m->host_y, (size_t)(n * o->dim) * sizeof(float));
    if (o->loss == DL_LOSS_MSE) {
        m->be->ops->mse(m->be, y, m->host_targets, n * o->dim, dout, scale / (float)o->dim,
                        &os->sq);
        os->loss = os->sq / (double)o->dim;
        return DL_OK;
    }
    float *t = malloc((size_t)(n * o->dim) * sizeof(float));
    if (!t)
        return dl_err_set(err, DL_ERR_NOMEM, "targets");
    memcpy(t, m->host_targets, (size_t)(n * o->dim) * sizeof(float));
    bce_host(m, y, t, n, o->dim, dout, scale / (float)o->dim, os);
    free(t);
    return DL_OK;
}

dl_status dl_model_loss(dl_model *m, const int32_t *labels, const float *targets,
                        float grad_scale, bool want_grad, double *loss_sum,
                        int64_t *correct, dl_err *err)
{
    *correct = 0;
    *loss_sum = 0.0;
    if (!m->have_out)
        return dl_err_set(err, DL_ERR_INVALID, "loss before any forward pass");
    if (want_grad && !m->trained)
        return dl_err_set(err, DL_ERR_INVALID, "loss gradient needs a training forward pass");
    dl_status st = DL_OK;
    if (!m->conf->graph) {
        st = loss_single(m, labels, targets, grad_scale, want_grad, loss_sum, correct, err);
        m->ostat[0] = (out_stat){ *loss_sum, 0.0, *correct, m->batch };
    } else if (!targets) {
        st = dl_err_set(err, DL_ERR_INVALID, "model '%s' needs targets: a column an output "
                        "(%lld in all)", m->conf->name, (long long)model_target_cols(m));
    }
    for (int k = 0, at = 0; m->conf->graph && targets && k < m->conf->noutputs && st == DL_OK; k++) {
        st = loss_output(m, k, targets, at, grad_scale, want_grad, err);
        at += (int)m->conf->outputs[k].tcols;
        *loss_sum += m->conf->outputs[k].weight * m->ostat[k].loss;
    }
    if (m->conf->graph && st == DL_OK)
        *correct = m->ostat[0].correct;
    m->have_dout = want_grad && st == DL_OK;
    return st;
}

void dl_model_output_stats(const dl_model *m, int k, double *loss_sum, int64_t *correct,
                           double *sq_sum)
{
    *loss_sum = m->ostat[k].loss;
    *correct = m->ostat[k].correct;
    *sq_sum = m->ostat[k].sq;
}

int64_t dl_model_output_judged(const dl_model *m, int k)
{
    return m->ostat[k].count;
}

