/* optim.c: SGD, momentum (optionally Nesterov), Adam, AdamW and Adagrad
 * over the whole contiguous parameter buffer in one kernel call, gradient
 * clipping by global norm, and the learning-rate schedules (step, cosine)
 * with linear warm-up. */
#include "nn/dl_nn.h"

#include <math.h>
#include <stdlib.h>

struct dl_optim {
    dl_backend *be;
    dl_hparams  hp;
    int64_t     n, t;
    float      *state;       /* momentum: v; Adam, AdamW: m then v; Adagrad: sum */
    int64_t     nstate;
};

dl_status dl_optim_new(dl_backend *be, const dl_hparams *hp, int64_t n,
                       dl_optim **out, dl_err *err)
{
    *out = NULL;
    dl_optim *o = calloc(1, sizeof(*o));
    if (!o)
        return dl_err_set(err, DL_ERR_NOMEM, "optimizer");
    o->be = be;
    o->hp = *hp;
    if (o->hp.eps <= 0.0)   /* PyTorch's defaults */
        o->hp.eps = hp->optimizer == DL_OPTIM_ADAGRAD ? 1e-10 : 1e-8;
    o->n = n;
    switch (hp->optimizer) {
    case DL_OPTIM_SGD:      o->nstate = 0; break;
    case DL_OPTIM_MOMENTUM: o->nstate = n; break;
    case DL_OPTIM_ADAGRAD:  o->nstate = n; break;
    case DL_OPTIM_ADAM:
    case DL_OPTIM_ADAMW:    o->nstate = 2 * n; break;
    }
    if (o->nstate) {
        dl_status st = be->ops->alloc(be, (size_t)o->nstate * sizeof(float),
                                      (void **)&o->state, err);
        if (st != DL_OK) {
            free(o);
            return st;
        }
        be->ops->fill(be, o->state, o->nstate, 0.0f);
    }
    *out = o;
    return DL_OK;
}

void dl_optim_free(dl_optim *o)
{
    if (!o)
        return;
    if (o->state)
        o->be->ops->release(o->be, o->state);
    free(o);
}

/* p -= f(g), with the weight decay wd added to g from p (AdamW: p *= 1 - lr wd). */
static void step(dl_optim *o, float *p, const float *g, double lr, float wd)
{
    const dl_hparams *h = &o->hp;
    o->t++;
    switch (h->optimizer) {
    case DL_OPTIM_SGD:
        o->be->ops->sgd_step(o->be, p, g, NULL, o->n, (float)lr, 0.0f, false, wd);
        break;
    case DL_OPTIM_MOMENTUM:
        o->be->ops->sgd_step(o->be, p, g, o->state, o->n, (float)lr, (float)h->momentum,
                             h->nesterov, wd);
        break;
    case DL_OPTIM_ADAM:
    case DL_OPTIM_ADAMW:
        o->be->ops->adam_step(o->be, p, g, o->state, o->state + o->n, o->n, (float)lr,
                              (float)h->beta1, (float)h->beta2, (float)h->eps, wd,
                              h->optimizer == DL_OPTIM_ADAMW, o->t);
        break;
    case DL_OPTIM_ADAGRAD:
        o->be->ops->adagrad_step(o->be, p, g, o->state, o->n, (float)lr, (float)h->eps, wd);
        break;
    }
}

void dl_optim_step(dl_optim *o, float *params, const float *grads, double lr)
{
    step(o, params, grads, lr, (float)o->hp.weight_decay);
}

void dl_optim_step_delta(dl_optim *o, float *delta, const float *params, float *grads,
                         double lr)
{
    /* The weight decay comes from the parameters, so the step sees only
     * delta: added to the gradient (L2, as PyTorch), or for AdamW taken
     * off the update (p *= 1 - lr wd is delta -= lr wd p). */
    double wd = o->hp.weight_decay;
    if (wd != 0.0 && o->hp.optimizer == DL_OPTIM_ADAMW)
        o->be->ops->axpy(o->be, (float)(-lr * wd), params, delta, o->n);
    else if (wd != 0.0)
        o->be->ops->axpy(o->be, (float)wd, params, grads, o->n);
    step(o, delta, grads, lr, 0.0f);
}

float *dl_optim_state(dl_optim *o, int64_t *n)
{
    *n = o->nstate;
    return o->state;
}

int64_t dl_optim_steps(const dl_optim *o) { return o->t; }
void dl_optim_set_steps(dl_optim *o, int64_t t) { o->t = t; }

double dl_lr_at(const dl_hparams *hp, int64_t step, int64_t steps_per_epoch,
                int64_t total)
{
    double base = hp->lr;
    int64_t warm = (int64_t)(hp->warmup_epochs * (double)steps_per_epoch);
    if (hp->schedule != DL_SCHED_NONE && step < warm)
        return base * (double)(step + 1) / (double)warm;   /* linear warm-up */
    switch (hp->schedule) {
    case DL_SCHED_STEP: {
        int64_t epoch = steps_per_epoch > 0 ? step / steps_per_epoch : 0;
        return base * pow(hp->gamma, (double)(epoch / hp->step_epochs));
    }
    case DL_SCHED_COSINE: {
        double span = (double)(total - warm);
        double frac = span > 0 ? (double)(step - warm) / span : 1.0;
        return 0.5 * base * (1.0 + cos(3.14159265358979323846 * (frac < 1.0 ? frac : 1.0)));
    }
    case DL_SCHED_NONE:
        break;
    }
    return base;
}

const char *dl_optim_name(dl_optim_kind k)
{
    switch (k) {
    case DL_OPTIM_SGD:      return "sgd";
    case DL_OPTIM_MOMENTUM: return "momentum";
    case DL_OPTIM_ADAM:     return "adam";
    case DL_OPTIM_ADAGRAD:  return "adagrad";
    case DL_OPTIM_ADAMW:    return "adamw";
    }
    return "?";
}

double dl_clip_grad_norm(dl_backend *be, float *grads, int64_t n, double max_norm)
{
    double sq;
    be->ops->sumsq(be, grads, n, &sq);
    double norm = sqrt(sq);
    /* PyTorch scales by min(coef, 1), a NaN coef included (a NaN norm). */
    double coef = max_norm / (norm + 1e-6);
    if (!(coef >= 1.0))
        be->ops->scale(be, grads, n, (float)coef);
    return norm;
}
