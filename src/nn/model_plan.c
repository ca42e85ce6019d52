/* model_plan.c: a model's graph planned once at build: who reads each
 * tensor, activations folded into the layers before them, blocked layouts
 * kept across graph edges, and the activation and gradient buffers. */
#include "nn/model.h"

#include <stdlib.h>
#include <string.h>

static bool is_act(dl_layer_type t)
{
    return t == DL_LAYER_RELU || t == DL_LAYER_TANH || t == DL_LAYER_SIGMOID;
}

/* The unary elementwise layers: relu, tanh, sigmoid, and the family of
 * layer_elem.c (gelu, silu, clip, hardswish, ...). */
static bool is_unary(const layer *l)
{
    return is_act(l->conf->type) || l->ops == &layer_elem_ops;
}

static bool is_binary(dl_layer_type t)
{
    return t == DL_LAYER_ADD || t == DL_LAYER_SUB || t == DL_LAYER_MUL || t == DL_LAYER_DIV;
}

/* Readers of each tensor (a layer reading it twice counts twice), the
 * last one, and which output each tensor is. */
static dl_status index_graph(dl_model *m, int **readers, dl_err *err)
{
    *readers = calloc((size_t)m->nt, sizeof(int));
    m->last_reader = malloc((size_t)m->nt * sizeof(int));
    m->out_of = malloc((size_t)m->nt * sizeof(int));
    if (!*readers || !m->last_reader || !m->out_of)
        return dl_err_set(err, DL_ERR_NOMEM, "graph index");
    for (int t = 0; t < m->nt; t++)
        m->last_reader[t] = m->out_of[t] = -1;
    for (int i = 0; i < m->nlayers; i++)
        for (int k = 0; k < m->layers[i].conf->nsrc; k++) {
            int t = model_tensor_of(m, m->layers[i].conf->src[k]);
            (*readers)[t]++;
            m->last_reader[t] = i;
        }
    for (int k = 0; k < m->conf->noutputs; k++)
        m->out_of[m->ninputs + m->conf->outputs[k].from] = k;
    return DL_OK;
}

/* Layer i's only reader when its output goes to exactly one layer and is
 * no model output (a plain chain edge); else -1. */
static int chain_next(const dl_model *m, const int *readers, int i)
{
    int t = m->ninputs + i;
    if (readers[t] != 1 || m->out_of[t] >= 0)
        return -1;
    return m->last_reader[t];
}

/* Whether layer type t applies a folded activation itself: conv2d and
 * dense (a post-op of the convolution engine, the GEMM's epilogue),
 * batchnorm, add, sub and mul (in their elementwise pass). None of them
 * reads its own output in backward. */
static bool takes_post(dl_layer_type t)
{
    return t == DL_LAYER_CONV2D || t == DL_LAYER_DENSE || t == DL_LAYER_BATCHNORM ||
           t == DL_LAYER_ADD || t == DL_LAYER_SUB || t == DL_LAYER_MUL;
}

/* Folds each activation that follows such a layer over a chain edge into
 * it: the layer applies it to its output in the same pass, and the
 * activation layer's output is that same buffer. Its backward is
 * unchanged: it reads only that output. */
static void fuse_activations(dl_model *m, const int *readers)
{
    for (int i = 0; i < m->nlayers; i++) {
        layer *prev = &m->layers[i];
        dl_layer_type pt = prev->conf->type;
        int j = chain_next(m, readers, i);
        if (j >= 0 && m->layers[j].ops == &layer_elem_ops &&
            ((pt == DL_LAYER_CONV2D && m->be->ops->conv_fwd_unary) ||
             (pt == DL_LAYER_DENSE && m->be->ops->gemm_bias_unary))) {
            prev->post_un_val = layer_unary(m->layers[j].conf);
            prev->post_un = &prev->post_un_val;
            m->layers[j].folded_infer = true;
            continue;
        }
        if (j < 0 || !takes_post(pt) ||
            !is_act(m->layers[j].conf->type))
            continue;
        prev->post_act = layer_act(m->layers[j].conf);
        prev->post = &prev->post_act;
        m->layers[j].folded = true;
    }
}

/* Whether layer c, a conv2d, may add tensor r, of layer j (an add of two
 * inputs), itself in inference: j is c's output's only reader and its
 * inputs share the output's shape and layout (a pass layer: one layout
 * class), c applies no activation of its own, runs on the engine, which
 * fuses the add, and r is ready when c runs (a model input or the output
 * of an earlier layer). Only where c writes the layout its kernels run
 * on, blocked or NHWC from NHWC: oneDNN's direct kernels add r only in
 * their own layout (r in plain NCHW, oneDNN 2.6 takes its GEMM-based
 * convolution instead). */
static bool res_ok(const dl_model *m, const int *readers, int c, int j, int r)
{
    const layer *l = &m->layers[c], *a = &m->layers[j];
    bool own = (l->blocked & DL_BLOCKED_Y) ||
               ((l->blocked & DL_NHWC_Y) && !(l->blocked & DL_BLOCKED_X));
    return l->conf->type == DL_LAYER_CONV2D && chain_next(m, readers, c) == j && own &&
           !l->post && !l->post_un && layer_engine_layout(l) &&
           m->be->ops->conv_fwd_add && r < m->ninputs + c && a->ins_dim[0] == a->out_dim &&
           a->ins_dim[1] == a->out_dim;
}

/* Folds a residual add into the convolution making one of its inputs, in
 * inference only (training keeps the add: its backward passes dy on to
 * both inputs, and the convolution's backward reads none of them): the
 * convolution's engine adds the other input and applies the add's folded
 * activation in its own pass (ResNet's conv -> add -> relu, as ONNX
 * Runtime's FusedConv does), where each was a pass over memory. Of two
 * convolutions the later one takes it, the other's output being ready. */
static void fuse_residuals(dl_model *m, const int *readers)
{
    for (int j = 0; j < m->nlayers; j++) {
        layer *a = &m->layers[j];
        if (a->conf->type != DL_LAYER_ADD || a->nin != 2 || a->folded_infer)
            continue;
        int t0 = model_tensor_of(m, a->conf->src[0]), t1 = model_tensor_of(m, a->conf->src[1]);
        int c = -1, r = -1;
        for (int k = 0; k < 2; k++) {
            int t = k ? t1 : t0, o = k ? t0 : t1, i = t - m->ninputs;
            if (t != o && i >= 0 && i > c && res_ok(m, readers, i, j, o))
                c = i, r = o;
        }
        if (c < 0)
            continue;
        layer *l = &m->layers[c];
        l->res_fused = true;
        l->res_t = r;
        l->res_post = a->post;
        a->folded_infer = true;
        a->res_of = c;
        DL_LOG(DL_LOG_DEBUG, "nn", "'%s' adds '%s' itself in inference", l->conf->name,
               a->conf->name);
    }
}

/* How a layer meets the engine's blocked layout (plan_layouts). */
typedef enum blk_role {
    BLK_PLAIN,     /* reads and writes plain NCHW only */
    BLK_ENGINE,    /* conv2d, pooling: either layout on either side */
    BLK_PASS,      /* its inputs and output share one layout: unary
                    * elementwise layers, batchnorm over [C, H, W] with
                    * blocked kernels, and the binary ones of inputs of the
                    * output's shape or per-channel vectors (below) */
    BLK_SINK,      /* reads either layout, writes plain: global_avgpool2d */
    BLK_CL,        /* its inputs and output share one layout, NCHW or
                    * channels last (never blocked): moves along the
                    * channel dimensions of [.., H, W], H and W kept
                    * (cl_layer) */
} blk_role;

/* Whether the last two dimensions of a per-sample shape are h, w. */
static bool ends_hw(int nd, const int64_t *shape, int64_t h, int64_t w)
{
    return nd >= 3 && shape[nd - 2] == h && shape[nd - 1] == w;
}

/* Layers that copy along channel dimensions only, which run channels last
 * as well (layer_slice.c, layer_graph.c, layer_tensor.c): slice and concat
 * along the channels of [C, H, W], a transpose keeping H and W last, and
 * a reshape of the channel dimensions. With them ShuffleNet's split,
 * concat and shuffle stay NHWC between its convolutions. */
static bool cl_layer(const layer *l)
{
    const dl_layer_conf *c = l->conf;
    if (l->in_ndim < 3 ||
        !ends_hw(l->out_ndim, l->out_shape, l->in_shape[l->in_ndim - 2],
                 l->in_shape[l->in_ndim - 1]))
        return false;
    switch (c->type) {
    case DL_LAYER_SLICE:
        return l->in_ndim == 3 && layer_axis(c->axis, 3) == 0;
    case DL_LAYER_CONCAT:
        for (int k = 0; k < l->nin; k++)
            if (l->ins_ndim[k] != 3)
                return false;
        return l->out_ndim == 3 && layer_axis(c->axis, 3) == 0;
    case DL_LAYER_TRANSPOSE:
        return c->perm[l->in_ndim - 2] == l->in_ndim - 2 &&
               c->perm[l->in_ndim - 1] == l->in_ndim - 1;
    case DL_LAYER_RESHAPE:
        return true;
    default:
        return false;
    }
}

static blk_role role_of(const dl_model *m, const layer *l)
{
    const dl_backend_ops *ops = m->be->ops;
    dl_layer_type t = l->conf->type;
    if (layer_engine_layout(l))
        return BLK_ENGINE;
    if (is_unary(l))
        return BLK_PASS;
    if (cl_layer(l))
        return BLK_CL;
    if (t == DL_LAYER_BATCHNORM)
        return l->in_ndim == 3 && ops->bn_fwd_train_blk && ops->bn_fwd_infer_blk &&
               ops->bn_bwd_blk ? BLK_PASS : BLK_PLAIN;
    if (is_binary(t)) {
        for (int k = 0; k < l->nin; k++)
            if (l->ins_dim[k] != l->out_dim && !layer_channel_vector(l, k))
                return BLK_PLAIN;
        return BLK_PASS;
    }
    return t == DL_LAYER_GLOBAL_AVGPOOL2D ? BLK_SINK : BLK_PLAIN;
}

static int class_of(int *parent, int t)
{
    while (parent[t] != t)
        t = parent[t] = parent[parent[t]];
    return t;
}

/* Whether tensor t may be blocked by itself: a layer's [C, H, W] output,
 * no model output. */
static bool tensor_blockable(const dl_model *m, int t)
{
    if (t < m->ninputs || m->out_of[t] >= 0)
        return false;
    return m->layers[t - m->ninputs].out_ndim == 3;
}

/* Whether tensor t's channels are no whole number of blocks: blocked, its
 * last block is padded with zero channels (oneDNN's padded nChw16c). */
static bool tensor_ragged(const dl_model *m, int t, int block)
{
    return t >= m->ninputs && m->layers[t - m->ninputs].out_shape[0] % block != 0;
}

/* Whether layer l keeps the zero channels of a padded block as zeros
 * (`writes`) or reads them as nothing: an ungrouped convolution (its
 * weights padded with zeros), as a writer with no activation of its own
 * (a sigmoid's 0.5 there), or an add or sub of inputs of the output's
 * shape. Padded tensors have no other readers or writers: batchnorm,
 * pooling, unary and channel-vector layers count channels. */
static bool pad_safe(const layer *l, blk_role r, bool writes)
{
    const dl_layer_conf *c = l->conf;
    if (r == BLK_ENGINE)
        return c->type == DL_LAYER_CONV2D && c->groups <= 1 &&
               (!writes || (!l->post && !l->post_un));
    if (r != BLK_PASS || (c->type != DL_LAYER_ADD && c->type != DL_LAYER_SUB) || l->post)
        return false;
    for (int k = 0; k < l->nin; k++)
        if (l->ins_dim[k] != l->out_dim)
            return false;
    return true;
}

/* Gives the tensors of padded classes (ok and ragged) room for their
 * padded channels: their per-sample size, as each layer writing or
 * reading one counts it, becomes that of whole blocks. */
static void pad_dims(dl_model *m, const int *parent, const bool *ok, const bool *ragged,
                     int block)
{
    for (int t = m->ninputs; t < m->nt; t++) {
        int c = class_of((int *)parent, t);
        if (!ok[c] || !ragged[c])
            continue;
        layer *l = &m->layers[t - m->ninputs];
        int64_t ch = l->out_shape[0], hw = l->out_shape[1] * l->out_shape[2];
        int64_t dim = (ch + block - 1) / block * block * hw;
        m->tdim[t] = l->out_dim = dim;
        for (int i = 0; i < m->nlayers; i++) {
            layer *r = &m->layers[i];
            for (int k = 0; k < r->nin; k++)
                if (model_tensor_of(m, r->conf->src[k]) == t)
                    r->ins_dim[k] = dim;
            if (r->nin > 0)
                r->in_dim = r->ins_dim[0];
        }
    }
}

/* Whether a layer of role r runs the same on NHWC as on NCHW: engine
 * layers, and the pass layers that see no channels (unary ones, binary
 * ones of inputs of the output's shape); not batchnorm, not a sink. */
static bool nhwc_role(const layer *l, blk_role r)
{
    if (r == BLK_ENGINE || r == BLK_CL)
        return true;
    if (r != BLK_PASS || l->conf->type == DL_LAYER_BATCHNORM)
        return false;
    for (int k = 0; k < l->nin; k++)
        if (l->ins_dim[k] != l->out_dim)
            return false;
    return true;
}

/* Which classes not kept blocked (ok) run NHWC instead (nh): those of
 * [.., H, W] tensors made and read by layers that run the same on either
 * (nhwc_role), with an engine layer whose other side is not blocked. An
 * engine layer between a blocked and an NHWC class reorders the NHWC
 * side (backend_dnnl.c), as it did plain NCHW, a little slower: a class
 * met by engine layers only from blocked ones stays NCHW (MobileNet's
 * 24 and 40 channels). */
static void plan_nhwc(const dl_model *m, int *parent, const blk_role *role,
                      const bool *ok, bool *nh, bool *useful)
{
    for (int t = 0; t < m->nt; t++)
        nh[t] = true;
    for (int t = 0; t < m->ninputs; t++)
        nh[class_of(parent, t)] = false;
    for (int i = 0; i < m->nlayers; i++) {
        const layer *l = &m->layers[i];
        int t = m->ninputs + i;
        bool fits = nhwc_role(l, role[i]);
        if (t < m->ninputs || m->out_of[t] >= 0 || l->out_ndim < 3 || !fits)
            nh[class_of(parent, t)] = false;
        for (int k = 0; !fits && k < l->nin; k++)
            nh[class_of(parent, model_tensor_of(m, l->conf->src[k]))] = false;
    }
    for (int t = 0; t < m->nt; t++)
        if (ok[class_of(parent, t)])
            nh[class_of(parent, t)] = false;
    for (int t = 0; t < m->nt; t++)
        useful[t] = false;
    for (int i = 0; i < m->nlayers; i++) {
        if (role[i] != BLK_ENGINE)
            continue;
        int cy = class_of(parent, m->ninputs + i);
        int cx = class_of(parent, model_tensor_of(m, m->layers[i].conf->src[0]));
        useful[cy] |= !ok[cx];
        useful[cx] |= !ok[cy];
    }
    for (int t = 0; t < m->nt; t++)
        nh[t] = nh[t] && useful[class_of(parent, t)];
}

/* Keeps activations in the convolution engine's blocked layout across
 * graph edges, so that the engine reorders only where the graph leaves
 * it. Tensors joined by a BLK_PASS layer must share a layout: they form
 * one class, kept blocked when each of its tensors may be, each is made
 * by an engine or pass layer and read only by engine, pass or sink
 * layers. A residual block's add then runs on blocked data, and the
 * tensor read by the next block and by the add stays blocked for both.
 * A class with channels no whole number of blocks is kept blocked, its
 * last block padded (pad_dims), only where every layer touching it is
 * pad_safe; else it stays NCHW or NHWC (plan_nhwc). */
static dl_status plan_layouts(dl_model *m, dl_err *err)
{
    int block = m->be->engine_block;
    if (block <= 0)
        return DL_OK;
    int *parent = malloc((size_t)m->nt * sizeof(int));
    bool *ok = malloc((size_t)m->nt * sizeof(bool));
    bool *nh = malloc((size_t)m->nt * sizeof(bool));
    bool *useful = malloc((size_t)m->nt * sizeof(bool));
    bool *ragged = malloc((size_t)m->nt * sizeof(bool));
    blk_role *role = malloc((size_t)m->nlayers * sizeof(blk_role));
    if (!parent || !ok || !nh || !useful || !ragged || !role) {
        free(ragged);
        free(parent);
        free(ok);
        free(nh);
        free(useful);
        free(role);
        return dl_err_set(err, DL_ERR_NOMEM, "layout plan");
    }
    for (int t = 0; t < m->nt; t++)
        parent[t] = t, ok[t] = true;
    for (int i = 0; i < m->nlayers; i++) {
        role[i] = role_of(m, &m->layers[i]);
        /* A per-channel vector [C, 1, 1] is the same bytes in either
         * layout: it joins no class. */
        for (int k = 0; (role[i] == BLK_PASS || role[i] == BLK_CL) && k < m->layers[i].nin;
             k++)
            if (role[i] == BLK_CL || !layer_channel_vector(&m->layers[i], k))
                parent[class_of(parent, model_tensor_of(m, m->layers[i].conf->src[k]))] =
                    class_of(parent, m->ninputs + i);
    }
    for (int t = 0; t < m->nt; t++)
        ragged[t] = false;
    for (int t = 0; t < m->nt; t++)
        if (tensor_ragged(m, t, block))
            ragged[class_of(parent, t)] = true;
    for (int i = 0; i < m->nlayers; i++) {
        int t = m->ninputs + i;
        const layer *l = &m->layers[i];
        if (!tensor_blockable(m, t) || role[i] == BLK_PLAIN || role[i] == BLK_SINK ||
            role[i] == BLK_CL || (ragged[class_of(parent, t)] && !pad_safe(l, role[i], true)))
            ok[class_of(parent, t)] = false;
        for (int k = 0; k < l->nin; k++) {
            int c = class_of(parent, model_tensor_of(m, l->conf->src[k]));
            if (role[i] == BLK_PLAIN || (ragged[c] && !pad_safe(l, role[i], false)))
                ok[c] = false;
        }
    }
    for (int t = 0; t < m->ninputs; t++)
        ok[class_of(parent, t)] = false;
    pad_dims(m, parent, ok, ragged, block);
    plan_nhwc(m, parent, role, ok, nh, useful);
    for (int i = 0; i < m->nlayers; i++) {
        layer *l = &m->layers[i];
        int cy = class_of(parent, m->ninputs + i);
        int cx = l->nin > 0 ? class_of(parent, model_tensor_of(m, l->conf->src[0])) : -1;
        bool y = ok[cy] && role[i] != BLK_SINK, x = cx >= 0 && ok[cx];
        bool ny = nh[cy], nx = cx >= 0 && nh[cx];
        if (role[i] == BLK_PLAIN || (!x && !y && !nx && !ny))
            continue;
        l->blocked = (x ? DL_BLOCKED_X : nx ? DL_NHWC_X : 0) |
                     (y ? DL_BLOCKED_Y : ny ? DL_NHWC_Y : 0);
        DL_LOG(DL_LOG_DEBUG, "nn", "'%s': reads %s, writes %s (block %d)", l->conf->name,
               x ? "blocked" : nx ? "NHWC" : "NCHW", y ? "blocked" : ny ? "NHWC" : "NCHW",
               block);
    }
    free(parent);
    free(ok);
    free(nh);
    free(useful);
    free(ragged);
    free(role);
    return DL_OK;
}

static bool is_view(dl_layer_type t)
{
    return t == DL_LAYER_FLATTEN || t == DL_LAYER_RESHAPE || t == DL_LAYER_IDENTITY;
}

/* Elementwise layers that may write over their input 0: the unary ones,
 * batchnorm, and the binary ones where input 0 has the output's size. */
static bool in_place_ok(const layer *l)
{
    dl_layer_type t = l->conf->type;
    if (is_binary(t))
        return l->ins_dim[0] == l->out_dim;
    return is_unary(l) || t == DL_LAYER_BATCHNORM;
}

static int root_of(const act_plan *p, int t)
{
    while (p->alias[t] != t)
        t = p->alias[t];
    return t;
}

/* Whether layer i reads tensor x (a root) through an input other than 0. */
static bool reads_again(const dl_model *m, const act_plan *p, int i, int x)
{
    const dl_layer_conf *c = m->layers[i].conf;
    for (int k = 1; k < c->nsrc; k++)
        if (root_of(p, model_tensor_of(m, c->src[k])) == x)
            return true;
    return false;
}

/* A slot of at least `dim` floats a sample: a free one (grown to fit), or a
 * new one. free_slot[k] says whether slot k is free. */
static int take_slot(act_plan *p, bool *free_slot, int64_t dim)
{
    int k = 0;
    while (k < p->nslots && !free_slot[k])
        k++;
    if (k == p->nslots)
        p->dim[p->nslots++] = 0;
    free_slot[k] = false;
    if (p->dim[k] < dim)
        p->dim[k] = dim;
    return k;
}

/* Aliases: a folded activation shares its producer's buffer in every pass
 * (a folded_infer one outside training), and outside training a flatten,
 * reshape or identity that is no model output passes its input on as it
 * is (only backward reads a copy). */
static void plan_aliases(dl_model *m, act_plan *p, bool train)
{
    for (int t = 0; t < m->nt; t++)
        p->alias[t] = t;
    for (int i = 0; i < m->nlayers; i++) {
        layer *l = &m->layers[i];
        int t = m->ninputs + i;
        if (!train && l->folded_infer && l->conf->type == DL_LAYER_ADD)
            p->alias[t] = m->ninputs + l->res_of;    /* the convolution's output */
        else if (l->folded || (!train && l->folded_infer) ||
            (!train && is_view(l->conf->type) && m->out_of[t] < 0))
            p->alias[t] = model_tensor_of(m, l->conf->src[0]);
    }
}

/* Plans the activation buffers of one kind of pass. Training keeps every
 * tensor for backward; inference gives a buffer back once the last
 * reader of its tensor (and of the tensors aliasing it) has run, and lets
 * an elementwise layer write over an input that dies with it. */
static dl_status plan_acts(dl_model *m, act_plan *p, bool train, dl_err *err)
{
    p->slot_of = malloc((size_t)m->nt * sizeof(int));
    p->alias = malloc((size_t)m->nt * sizeof(int));
    p->dim = calloc((size_t)m->nt + 1, sizeof(int64_t));
    int *until = malloc((size_t)m->nt * sizeof(int));
    bool *free_slot = calloc((size_t)m->nt + 1, sizeof(bool));
    if (!p->slot_of || !p->alias || !p->dim || !until || !free_slot) {
        free(until);
        free(free_slot);
        return dl_err_set(err, DL_ERR_NOMEM, "activation plan");
    }
    plan_aliases(m, p, train);
    for (int t = 0; t < m->nt; t++)
        until[t] = -1;
    for (int t = 0; t < m->nt; t++) {
        int r = root_of(p, t), last = m->out_of[t] >= 0 || train ? INT32_MAX : m->last_reader[t];
        until[r] = last > until[r] ? last : until[r];
    }
    for (int i = 0; i < m->nlayers; i++) {
        int t = m->ninputs + i;
        p->slot_of[t] = -1;
        for (int u = m->ninputs; u < t; u++)      /* give back the dead */
            if (p->slot_of[u] >= 0 && until[u] < i)
                free_slot[p->slot_of[u]] = true, until[u] = INT32_MAX;
        if (p->alias[t] != t)
            continue;
        int x = m->layers[i].nin ? root_of(p, model_tensor_of(m, m->layers[i].conf->src[0]))
                                 : -1;
        if (!train && in_place_ok(&m->layers[i]) && x >= m->ninputs && until[x] == i &&
            p->slot_of[x] >= 0 && !reads_again(m, p, i, x)) {
            p->slot_of[t] = p->slot_of[x];
            until[x] = INT32_MAX;           /* its slot passes on to t */
            continue;
        }
        p->slot_of[t] = take_slot(p, free_slot, m->tdim[t]);
    }
    for (int k = 0; k < m->ninputs; k++)
        p->slot_of[k] = -1;
    free(until);
    free(free_slot);
    return DL_OK;
}

/* Whether backward computes tensor t's gradient: every layer output, and
 * the FP32 model inputs (sequences too) when asked
 * (dl_model_set_input_grads). */
bool model_needs_grad(const dl_model *m, int t)
{
    return t >= m->ninputs || (m->input_grads && m->conf->inputs[t].dtype == DL_IN_FP32);
}

/* Whether layer i's input k writes its gradient through a scratch buffer:
 * its tensor already holds a gradient (a model output, a later reader) or
 * an earlier input of the same layer is the same tensor. */
bool model_via_scratch(const dl_model *m, int i, int k)
{
    const dl_layer_conf *c = m->layers[i].conf;
    int t = model_tensor_of(m, c->src[k]);
    if (m->out_of[t] >= 0 || m->last_reader[t] != i)
        return true;
    for (int q = 0; q < k; q++)
        if (c->src[q] == c->src[k])
            return true;
    return false;
}

/* Output k's tensor's slot in the gradient plan: where the loss writes
 * its gradient, when wanted. */
float *model_dout_of(dl_model *m, int k, bool want_grad)
{
    int t = m->ninputs + m->conf->outputs[k].from;
    return want_grad ? m->gp.buf[m->gp.slot_of[t]] : NULL;
}

/* Gradient buffers: tensor t's gradient lives from the backward of its
 * last reader (or the loss, for an output) to its producer's backward. A
 * buffer is reused once that interval has ended, so a chain ping-pongs
 * between two. */
dl_status model_plan_grads(dl_model *m, dl_err *err)
{
    grad_plan *g = &m->gp;
    g->slot_of = malloc((size_t)m->nt * sizeof(int));
    g->dim = calloc((size_t)m->nt + 1, sizeof(int64_t));
    bool *free_slot = calloc((size_t)m->nt + 1, sizeof(bool));
    if (!g->slot_of || !g->dim || !free_slot) {
        free(free_slot);
        return dl_err_set(err, DL_ERR_NOMEM, "gradient plan");
    }
    act_plan tmp = { .dim = g->dim };
    for (int t = 0; t < m->nt; t++)
        g->slot_of[t] = -1;
    for (int t = m->ninputs; t < m->nt; t++)     /* the loss writes these first */
        if (m->out_of[t] >= 0)
            g->slot_of[t] = take_slot(&tmp, free_slot, m->tdim[t]);
    for (int i = m->nlayers - 1; i >= 0; i--) {
        const dl_layer_conf *c = m->layers[i].conf;
        int nscr = 0;
        for (int k = 0; k < c->nsrc; k++) {
            int s = model_tensor_of(m, c->src[k]);
            if (!model_needs_grad(m, s))
                continue;
            nscr += model_via_scratch(m, i, k);
            if (g->slot_of[s] < 0)
                g->slot_of[s] = take_slot(&tmp, free_slot, m->tdim[s]);
            if (m->tdim[s] > g->scratch_dim)
                g->scratch_dim = m->tdim[s];
        }
        g->nscratch = nscr > g->nscratch ? nscr : g->nscratch;
        free_slot[g->slot_of[m->ninputs + i]] = true;    /* consumed by this backward */
    }
    g->nslots = tmp.nslots;
    free(free_slot);
    g->buf = calloc((size_t)g->nslots + 1, sizeof(float *));
    g->scratch = calloc((size_t)g->nscratch + 1, sizeof(float *));
    if (!g->buf || !g->scratch)
        return dl_err_set(err, DL_ERR_NOMEM, "gradient plan");
    return DL_OK;
}

void model_free_grad_plan(dl_model *m)
{
    free(m->gp.slot_of);
    free(m->gp.dim);
    free(m->gp.buf);
    free(m->gp.scratch);
    m->gp = (grad_plan){ 0 };
}

static int64_t slot_floats(const int64_t *dim, int nslots)
{
    int64_t sum = 0;
    for (int k = 0; k < nslots; k++)
        sum += dim[k];
    return sum;
}

dl_act_sizes dl_model_act_sizes(const dl_model *m)
{
    dl_act_sizes a = {
        .infer = slot_floats(m->plan[0].dim, m->plan[0].nslots),
        .train = slot_floats(m->plan[1].dim, m->plan[1].nslots),
        .grads = slot_floats(m->gp.dim, m->gp.nslots),
    };
    for (int t = m->ninputs; t < m->nt; t++)
        a.all += m->tdim[t];
    return a;
}

static void log_act_sizes(const dl_model *m)
{
    dl_act_sizes a = dl_model_act_sizes(m);
    DL_LOG(DL_LOG_DEBUG, "nn", "activation plan, floats a sample: inference %lld in %d "
           "buffers, training %lld, gradients %lld; every layer output %lld",
           (long long)a.infer, m->plan[0].nslots, (long long)a.train, (long long)a.grads,
           (long long)a.all);
}

/* The graph's plans, after the layers are built. */
dl_status model_plan_graph(dl_model *m, dl_err *err)
{
    int *readers = NULL;
    dl_status st = index_graph(m, &readers, err);
    if (st == DL_OK) {
        fuse_activations(m, readers);
        st = plan_layouts(m, err);
    }
    if (st == DL_OK)
        fuse_residuals(m, readers);
    if (st == DL_OK)
        st = plan_acts(m, &m->plan[0], false, err);
    if (st == DL_OK)
        st = plan_acts(m, &m->plan[1], true, err);
    if (st == DL_OK)
        st = model_plan_grads(m, err);
    m->act = calloc((size_t)m->nt, sizeof(*m->act));
    m->grad = calloc((size_t)m->nt, sizeof(*m->grad));
    m->stage = calloc((size_t)m->ninputs, sizeof(*m->stage));
    m->seqbuf = calloc((size_t)m->ninputs, sizeof(*m->seqbuf));
    m->lens = calloc((size_t)m->ninputs, sizeof(*m->lens));
    m->steps = calloc((size_t)m->ninputs, sizeof(*m->steps));
    m->ostat = calloc((size_t)m->conf->noutputs, sizeof(*m->ostat));
    if (st == DL_OK && (!m->act || !m->grad || !m->stage || !m->seqbuf || !m->lens || !m->steps ||
                        !m->ostat))
        st = dl_err_set(err, DL_ERR_NOMEM, "graph tables");
    free(readers);
    if (st == DL_OK)
        log_act_sizes(m);
    return st;
}

