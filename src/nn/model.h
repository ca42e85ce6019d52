/* model.h (private to nn/): the model's insides, shared by model.c
 * (building, passes, inference), model_plan.c (the graph's buffer plans)
 * and model_loss.c (the losses of its outputs). */
#ifndef DL_NN_MODEL_H
#define DL_NN_MODEL_H

#include "nn/layer.h"

/* A named tensor of the model, in safetensors order. */
typedef struct named {
    char        name[2 * DL_NAME_MAX + 16];
    param_slot *slot;
} named;

/* Activation tensors are numbered: model input k is tensor k, layer i's
 * output tensor ninputs + i. */

/* Where the activations of one kind of pass live: tensor t in buffer
 * slot_of[t] (-1: a model input, or an alias of another tensor). Planned
 * once at build; the buffers are allocated on first use for `cap`. */
typedef struct act_plan {
    int       *slot_of;                /* ntensors */
    int       *alias;                  /* ntensors: the tensor whose buffer t shares, or t */
    int        nslots;
    int64_t   *dim;                    /* per-sample floats of each slot */
    float    **buf;                    /* NULL until allocated */
} act_plan;

/* The gradient of each layer tensor while backward needs it: slot_of[t]
 * among nslots buffers; scratch[k] takes input k's gradient of a tensor
 * that already holds one (several readers, or a model output), to be
 * added in. */
typedef struct grad_plan {
    int       *slot_of;
    int        nslots, nscratch;
    int64_t   *dim;
    float    **buf, **scratch;
    int64_t    scratch_dim;
} grad_plan;

/* Per-output figures of the last dl_model_loss. */
typedef struct out_stat {
    double  loss, sq;
    int64_t correct;
    int64_t count;          /* predictions judged: samples, or tokens */
} out_stat;

struct dl_model {
    dl_backend          *be;
    const dl_model_conf *conf;
    int                  nlayers, ninputs, nt;      /* nt: activation tensors */
    layer               *layers;
    float               *params, *grads, *state;   /* backend memory */
    int64_t              nparams, nstate;
    int64_t              nrunning;                  /* state before the fixed part */
    int64_t             *grad_at;                   /* nlayers + 1: layer i's gradients
                                                       are [grad_at[i], grad_at[i + 1]) */
    int                  ntensors;
    named               *tensors;
    /* the graph: per activation tensor */
    int64_t             *tdim;                      /* per-sample floats */
    int                 *last_reader;               /* layer index, -1 if none */
    int                 *out_of;                    /* output index, -1 if none */
    act_plan             plan[2];                   /* [train] */
    grad_plan            gp;
    /* per-batch buffers, sized for `cap` samples */
    int64_t              cap;
    const float        **act;                       /* this pass: tensor t's values */
    float              **grad;                      /* this backward: tensor t's gradient */
    float              **stage;                     /* per input: split rows (ninputs > 1) */
    float              **seqbuf;                    /* per sequence input: its values
                                                       without the lengths */
    int32_t            **lens;                      /* per sequence input: this pass's
                                                       lengths (host) */
    int64_t             *steps;                     /* per sequence input: the longest
                                                       of this pass, the positions its
                                                       tensors hold a sample */
    float               *stage_in, *stage_out;      /* predict: a device's staging */
    float               *work;
    int64_t              batch;
    bool                 have_out;                  /* a forward pass succeeded */
    bool                 have_dout;
    bool                 trained;                   /* last forward was training */
    uint64_t             seed, stream, counter;     /* dropout masks */
    float               *host_targets, *host_y;     /* loss: host staging */
    int32_t             *host_labels;
    out_stat            *ostat;
    bool                 input_grads;               /* FP32 model inputs get gradients */
    bool                 fixed;                     /* dl_model_fix_weights */
    bool                 invariant;                 /* dl_model_set_batch_invariant */
};

/* The activation tensor a layer source names (dl_layer_conf.src). */
static inline int model_tensor_of(const dl_model *m, int src)
{
    return src < 0 ? -1 - src : m->ninputs + src;
}

/* Floats of a packed sample of model input k (dl_input_width). */
static inline int64_t model_in_width(const dl_model *m, int k)
{
    return dl_input_width(&m->conf->inputs[k]);
}

/* The lengths tensor t carries this pass (host), or NULL. */
static inline const int32_t *model_lens_of(const dl_model *m, int t)
{
    int s = m->conf->tseq[t];
    return s >= 0 ? m->lens[s] : NULL;
}

/* Floats a sample of tensor t holds in this pass: a sequence's at the
 * pass's longest length (m->steps), its max_length before any pass. */
static inline int64_t model_dim_now(const dl_model *m, int t)
{
    int s = m->conf->tseq[t];
    if (s < 0 || m->steps[s] == 0)
        return m->tdim[t];
    return m->tdim[t] / m->conf->inputs[s].max_length * m->steps[s];
}

/* Positions a sample of sequence tensor t holds in this pass. */
static inline int64_t model_steps_of(const dl_model *m, int t)
{
    int s = m->conf->tseq[t];
    return s < 0 ? 0 : m->steps[s] ? m->steps[s] : m->conf->inputs[s].max_length;
}

/* dl_model_forward_multi with decoding state (generate.c; layer_dec says
 * which layers it reaches). */
dl_status model_forward_dec(dl_model *m, const float *const *xs, int64_t batch, bool train,
                            const layer_dec *dec, dl_err *err);

/* Values per sample of all outputs, and target columns of all outputs. */
int64_t model_out_dim_sum(const dl_model *m);
int64_t model_target_cols(const dl_model *m);

/* Indexes the graph, folds activations, plans layouts and the activation
 * and gradient buffers (model_plan.c). */
dl_status model_plan_graph(dl_model *m, dl_err *err);
dl_status model_plan_grads(dl_model *m, dl_err *err);
void model_free_grad_plan(dl_model *m);

/* Whether backward computes tensor t's gradient, and whether layer i's
 * input k takes its gradient through a scratch buffer to add in. */
bool model_needs_grad(const dl_model *m, int t);
bool model_via_scratch(const dl_model *m, int i, int k);

/* Output k's gradient buffer when want_grad, else NULL. */
float *model_dout_of(dl_model *m, int k, bool want_grad);

#endif /* DL_NN_MODEL_H */
