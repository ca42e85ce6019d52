/* backend_dnnl.c: the CPU backend's convolution and pooling through oneDNN,
 * and the dense layers of a model that only serves (inner products): one
 * primitive per geometry, created on first use and kept for the next; the
 * weights of a model that only serves reordered once. */
#define _POSIX_C_SOURCE 200809L
#include "tensor/cpu/cpu.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Maps a failed oneDNN call to DL_ERR_BACKEND with the library's word for it. */
#define DNNL_CHECK(call, err)                                                     \
    do {                                                                          \
        dnnl_status_t s_ = (call);                                                \
        if (s_ != dnnl_success)                                                   \
            return dl_err_set((err), DL_ERR_BACKEND, "oneDNN: %s: %s", #call,     \
                              dnnl_status2str(s_));                               \
    } while (0)

/* Primitives kept, the least recently used going first: enough for every
 * convolution and pooling of a deep network (efficientnet_b0 has 81) at a
 * few batch sizes. At 32, mobilenet_v2 (52 convolutions) rebuilt every
 * primitive on every pass and ran 30x slower. */
#define CACHE_MAX 512
#define SLOTS_MAX 5

typedef enum op_kind {
    OP_CONV_FWD, OP_CONV_BWD_DATA, OP_CONV_BWD_WEIGHTS, OP_POOL_FWD, OP_POOL_BWD, OP_DENSE_FWD,
} op_kind;

/* One tensor argument. The caller's memory is plain (OIHW, a vector) or,
 * for activations, plain NCHW or blocked as g.blocked says; when the
 * primitive picked another layout, `inner` holds the tensor in that layout
 * and `reorder` converts at the edge. Accumulating
 * outputs (weight gradients) always go through `inner`, and their reorder
 * adds into the caller's buffer. */
typedef struct arg_slot {
    int              arg;        /* DNNL_ARG_* */
    bool             output;
    dnnl_memory_t    user;       /* plain layout, data handle set per call */
    dnnl_memory_t    inner;      /* NULL when the primitive takes `user` itself */
    dnnl_primitive_t reorder;
} arg_slot;

typedef struct entry {
    op_kind          kind;
    dl_conv_geom     g;
    int              variant;    /* conv: post-ops and bias; pool: kind and training */
    float            pa, pb;     /* conv: the parameters of a unary post-op */
    dnnl_primitive_t prim;
    int              nslots;
    arg_slot         slot[SLOTS_MAX];
    dnnl_memory_t    ws;         /* pooling workspace, data handle set per call */
    size_t           ws_bytes;
    uint64_t         used;
} entry;

/* Weights the caller declared fixed (dl_dnnl_fix_weights), and their
 * copies in the layouts the forward convolutions chose. */
typedef struct fixed_range {
    const char *lo, *hi;
} fixed_range;

typedef struct packed {
    const void        *w;        /* the caller's plain weights */
    dnnl_memory_desc_t md;       /* the layout of the copy */
    dnnl_memory_t      mem;
} packed;

struct dl_dnnl {
    pthread_mutex_t mu;          /* one execution at a time: the scratchpads are per primitive */
    dnnl_engine_t   eng;
    dnnl_stream_t   stream;
    int             threads;
    int             block;       /* channels per block of the blocked layout */
    dnnl_format_tag_t blocked;   /* that layout: nChw16c or nChw8c */
    int             n;
    uint64_t        clock;
    entry          *cache[CACHE_MAX];
    fixed_range    *fixed;
    int             nfixed, fixed_cap;
    packed         *packs;
    int             npacks, packs_cap;
};

/* ---- descriptors ------------------------------------------------------- */

static void md_plain(dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims,
                     dnnl_format_tag_t tag)
{
    dnnl_memory_desc_init_by_tag(md, ndims, dims, dnnl_f32, tag);
}

static void md_any(dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims)
{
    dnnl_memory_desc_init_by_tag(md, ndims, dims, dnnl_f32, dnnl_format_tag_any);
}

/* A dilation (0 or 1: none) as the geometry has it, and as oneDNN counts
 * it (the taps skipped between two). */
static int64_t dil(int64_t d) { return d > 1 ? d : 1; }

/* Right padding that gives our output size (which rounds down): oneDNN
 * wants it explicit. It is negative when the last window stops short of
 * the edge (a 1x1 stride-2 convolution of an even size): oneDNN's
 * convolutions take that and leave the rows past it unread; for pooling,
 * DL_ERR_UNAVAILABLE, and the caller uses im2col. */
static dl_status pads(const dl_conv_geom *g, bool conv, dnnl_dims_t l, dnnl_dims_t r,
                      dl_err *err)
{
    l[0] = g->ph;
    l[1] = g->pw;
    /* the window's extent: (k - 1) * dilation + 1 */
    r[0] = (g->oh - 1) * g->sh + (g->kh - 1) * dil(g->dh) + 1 - g->h - g->ph;
    r[1] = (g->ow - 1) * g->sw + (g->kw - 1) * dil(g->dw) + 1 - g->w - g->pw;
    if (!conv && (r[0] < 0 || r[1] < 0))
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "oneDNN: window does not reach the edge");
    return DL_OK;
}

static void dims_src(const dl_conv_geom *g, dnnl_dims_t d)
{
    d[0] = g->n; d[1] = g->c; d[2] = g->h; d[3] = g->w;
}

static void dims_dst(const dl_conv_geom *g, dnnl_dims_t d)
{
    d[0] = g->n; d[1] = g->oc; d[2] = g->oh; d[3] = g->ow;
}

/* Weights (OC, C, KH, KW), or grouped (G, OC/G, C/G, KH, KW): the same
 * memory as our (OC, C/G, KH, KW). Returns the number of dimensions. */
static int dims_wei(const dl_conv_geom *g, dnnl_dims_t d)
{
    if (g->groups <= 1) {
        d[0] = g->oc; d[1] = g->c; d[2] = g->kh; d[3] = g->kw;
        return 4;
    }
    d[0] = g->groups; d[1] = g->oc / g->groups; d[2] = g->c / g->groups;
    d[3] = g->kh; d[4] = g->kw;
    return 5;
}

/* ---- entries ------------------------------------------------------------- */

static void entry_free(entry *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->nslots; i++) {
        arg_slot *s = &e->slot[i];
        if (s->reorder)
            dnnl_primitive_destroy(s->reorder);
        if (s->inner)
            dnnl_memory_destroy(s->inner);
        if (s->user)
            dnnl_memory_destroy(s->user);
    }
    if (e->ws)
        dnnl_memory_destroy(e->ws);
    if (e->prim)
        dnnl_primitive_destroy(e->prim);
    free(e);
}

/* A reorder from src to dst; with `accumulate`, dst += src. */
static dl_status make_reorder(dl_dnnl *d, const dnnl_memory_desc_t *src,
                              const dnnl_memory_desc_t *dst, bool accumulate,
                              dnnl_primitive_t *out, dl_err *err)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = dnnl_primitive_attr_create(&attr);
    if (s == dnnl_success && accumulate) {
        s = dnnl_post_ops_create(&po);
        if (s == dnnl_success)
            s = dnnl_post_ops_append_sum(po, 1.0f);
        if (s == dnnl_success)
            s = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    if (s == dnnl_success)
        s = dnnl_reorder_primitive_desc_create(&pd, src, d->eng, dst, d->eng, attr);
    if (s == dnnl_success)
        s = dnnl_primitive_create(out, pd);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success)
        return dl_err_set(err, DL_ERR_BACKEND, "oneDNN: reorder: %s", dnnl_status2str(s));
    return DL_OK;
}

/* Whether a blocked (or plain) layout keeps channel c of sample n at
 * n * C + c: a 4-D tensor of one position (H = W = 1), no padding, at
 * most one inner block, over the channels. NCHW, NHWC and nChw16c of
 * a squeeze-and-excitation's pooled [C, 1, 1] vectors are then the same
 * bytes, and no reorder is needed between them. */
static bool channels_dense(const dnnl_memory_desc_t *md)
{
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (md->ndims != 4 || md->format_kind != dnnl_blocked || md->offset0 != 0 ||
        md->extra.flags != 0 || md->dims[2] != 1 || md->dims[3] != 1 || b->inner_nblks > 1 ||
        (b->inner_nblks == 1 && b->inner_idxs[0] != 1))
        return false;
    for (int i = 0; i < 4; i++)
        if (md->padded_dims[i] != md->dims[i])
            return false;
    int64_t c = md->dims[1], inner = b->inner_nblks ? b->inner_blks[0] : 1;
    return (md->dims[0] == 1 || b->strides[0] == c) && (c <= inner || b->strides[1] == inner);
}

static bool same_bytes(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b)
{
    if (dnnl_memory_desc_equal(a, b))
        return true;
    return a->data_type == b->data_type && channels_dense(a) && channels_dense(b) &&
           memcmp(a->dims, b->dims, 4 * sizeof(a->dims[0])) == 0;
}

/* Adds an argument: the caller's plain layout `user` against the layout the
 * primitive chose (queried from pd with `what`). */
static dl_status add_slot(dl_dnnl *d, entry *e, const_dnnl_primitive_desc_t pd,
                          dnnl_query_t what, int index, int arg,
                          const dnnl_memory_desc_t *user, bool output, bool accumulate,
                          dl_err *err)
{
    DL_ASSERT(e->nslots < SLOTS_MAX);
    arg_slot *s = &e->slot[e->nslots++];
    s->arg = arg;
    s->output = output;
    const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, what, index);
    if (!accumulate && same_bytes(want, user)) {
        DNNL_CHECK(dnnl_memory_create(&s->user, want, d->eng, DNNL_MEMORY_NONE), err);
        return DL_OK;
    }
    DNNL_CHECK(dnnl_memory_create(&s->user, user, d->eng, DNNL_MEMORY_NONE), err);
    DNNL_CHECK(dnnl_memory_create(&s->inner, want, d->eng, DNNL_MEMORY_ALLOCATE), err);
    return output ? make_reorder(d, want, user, accumulate, &s->reorder, err)
                  : make_reorder(d, user, want, false, &s->reorder, err);
}

static dl_status make_prim(dl_dnnl *d, entry *e, const_dnnl_op_desc_t desc,
                           const_dnnl_primitive_attr_t attr,
                           const_dnnl_primitive_desc_t hint,
                           dnnl_primitive_desc_t *pd, dl_err *err)
{
    dnnl_status_t s = dnnl_primitive_desc_create(pd, desc, attr, d->eng, hint);
    if (s == dnnl_unimplemented)
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "oneDNN: no implementation");
    DNNL_CHECK(s, err);
    DNNL_CHECK(dnnl_primitive_create(&e->prim, *pd), err);
    return DL_OK;
}

/* A convolution's tensors, as indices into the caller's layouts. */
enum { CONV_SRC, CONV_WEI, CONV_DST, CONV_BIAS, CONV_TENSORS };

/* The layout of the caller's activations: blocked when g->blocked has
 * `bit`, NHWC when it has its DL_NHWC_OF, else plain NCHW. */
static dnnl_format_tag_t act_tag(const dl_dnnl *d, const dl_conv_geom *g, int64_t bit)
{
    return g->blocked & bit ? d->blocked
         : g->blocked & DL_NHWC_OF(bit) ? dnnl_nhwc : dnnl_nchw;
}

/* The convolution's tensors: with `any`, in the layouts oneDNN picks (for
 * the descriptors); else in the caller's layouts (for the slots): OIHW
 * weights, activations as act_tag says. The bias is a plain vector either
 * way. */
static void conv_mds(const dl_dnnl *d, const dl_conv_geom *g, bool any,
                     dnnl_memory_desc_t *src, dnnl_memory_desc_t *wei,
                     dnnl_memory_desc_t *dst, dnnl_memory_desc_t *b)
{
    dnnl_dims_t ds, dw, dd, db = { g->oc };
    dims_src(g, ds);
    int nw = dims_wei(g, dw);
    dims_dst(g, dd);
    if (any) {
        /* oneDNN's kernels run NHWC where asked: one NHWC side makes
         * both NHWC (its kernels take one layout for both), a plain NCHW
         * side then reordered at the edge; a blocked side keeps both to
         * the layouts oneDNN picks (blocked), the NHWC side reordered */
        bool nhwc = (g->blocked & (DL_NHWC_X | DL_NHWC_Y)) &&
                    !(g->blocked & (DL_BLOCKED_X | DL_BLOCKED_Y));
        if (nhwc) {
            md_plain(src, 4, ds, dnnl_nhwc);
            md_plain(dst, 4, dd, dnnl_nhwc);
        } else {
            md_any(src, 4, ds);
            md_any(dst, 4, dd);
        }
        md_any(wei, nw, dw);
    } else {
        md_plain(src, 4, ds, act_tag(d, g, DL_BLOCKED_X));
        md_plain(wei, nw, dw, nw == 5 ? dnnl_goihw : dnnl_oihw);
        md_plain(dst, 4, dd, act_tag(d, g, DL_BLOCKED_Y));
    }
    md_plain(b, 1, db, dnnl_a);
}

/* The descriptors below keep the names src, wei, dst, b and cd in their
 * oneDNN calls: DNNL_CHECK's message quotes the call. */

/* The forward convolution descriptor, for the forward primitive and as the
 * hint the backward ones need. */
static dl_status conv_fwd_desc(const dl_conv_geom *g, bool bias, dnnl_convolution_desc_t *cd,
                               dl_err *err)
{
    dnnl_dims_t st = { g->sh, g->sw }, dl = { dil(g->dh) - 1, dil(g->dw) - 1 }, pl, pr;
    dnnl_memory_desc_t src, wei, dst, b;
    if (pads(g, true, pl, pr, err) != DL_OK)
        return DL_ERR_UNAVAILABLE;
    conv_mds(NULL, g, true, &src, &wei, &dst, &b);
    DNNL_CHECK(dnnl_dilated_convolution_forward_desc_init(cd, dnnl_forward_training,
                                                          dnnl_convolution_direct, &src, &wei,
                                                          bias ? &b : NULL, &dst, st, dl, pl,
                                                          pr), err);
    return DL_OK;
}

/* The backward descriptor of `kind`: data, or weights (with the bias). */
static dl_status conv_bwd_desc(const dl_conv_geom *g, op_kind kind, bool bias,
                               dnnl_convolution_desc_t *out, dl_err *err)
{
    dnnl_dims_t st = { g->sh, g->sw }, dl = { dil(g->dh) - 1, dil(g->dw) - 1 }, pl, pr;
    dnnl_memory_desc_t src, wei, dst, b;
    if (pads(g, true, pl, pr, err) != DL_OK)
        return DL_ERR_UNAVAILABLE;
    conv_mds(NULL, g, true, &src, &wei, &dst, &b);
    dnnl_convolution_desc_t cd;
    if (kind == OP_CONV_BWD_DATA)
        DNNL_CHECK(dnnl_dilated_convolution_backward_data_desc_init(
                       &cd, dnnl_convolution_direct, &src, &wei, &dst, st, dl, pl, pr), err);
    else
        DNNL_CHECK(dnnl_dilated_convolution_backward_weights_desc_init(
                       &cd, dnnl_convolution_direct, &src, &wei, bias ? &b : NULL, &dst, st,
                       dl, pl, pr), err);
    *out = cd;
    return DL_OK;
}

static dl_status hint_pd(dl_dnnl *d, const dl_conv_geom *g, dnnl_primitive_desc_t *pd,
                         dl_err *err)
{
    dnnl_convolution_desc_t cd;
    dl_status st = conv_fwd_desc(g, false, &cd, err);
    if (st != DL_OK)
        return st;
    dnnl_status_t s = dnnl_primitive_desc_create(pd, &cd, NULL, d->eng, NULL);
    if (s == dnnl_unimplemented)
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "oneDNN: no implementation");
    DNNL_CHECK(s, err);
    return DL_OK;
}

#define SLOT_OUT  1   /* written by the primitive */
#define SLOT_ADD  2   /* with SLOT_OUT: added into the caller's buffer (gradients) */
#define SLOT_BIAS 4   /* present only when the variant has a bias (bit 0) */
#define NSLOTS(slot) ((int)(sizeof(slot) / sizeof((slot)[0])))

/* One argument of a convolution, in the order the caller's pointers come. */
typedef struct conv_slot {
    dnnl_query_t what;     /* the layout the primitive chose for it, at index */
    int          index;
    int          arg;      /* DNNL_ARG_* */
    int          tensor;   /* CONV_*: which layout the caller's memory has */
    int          flags;    /* SLOT_* */
} conv_slot;

/* A forward convolution's variant bit for a fused residual add: a tensor
 * of dst's shape and layout added before the eltwise post-op. */
#define VAR_RES (1 << 12)

/* Whether pd is one of oneDNN's reference implementations: a residual add
 * it fuses only there runs faster as the convolution and an add pass. */
static bool is_ref(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
           impl && strncmp(impl, "ref", 3) == 0;
}

/* The convolution primitive for desc (with attr; with `hinted`, against
 * the forward one, as the backward ones must be), then its slots against
 * the caller's layouts (conv_mds). */
static dl_status build_conv(dl_dnnl *d, entry *e, const_dnnl_op_desc_t desc,
                            const_dnnl_primitive_attr_t attr, bool hinted,
                            const conv_slot *slot, int nslots, dl_err *err)
{
    const dl_conv_geom *g = &e->g;
    dnnl_primitive_desc_t hint = NULL, pd = NULL;
    dl_status st = hinted ? hint_pd(d, g, &hint, err) : DL_OK;
    if (st == DL_OK)
        st = make_prim(d, e, desc, attr, hint, &pd, err);
    if (st == DL_OK && e->kind == OP_CONV_FWD && (e->variant & VAR_RES) && is_ref(pd))
        st = dl_err_set(err, DL_ERR_UNAVAILABLE, "oneDNN: no fused residual add");
    dnnl_memory_desc_t md[CONV_TENSORS];
    conv_mds(d, g, false, &md[CONV_SRC], &md[CONV_WEI], &md[CONV_DST], &md[CONV_BIAS]);
    for (int i = 0; i < nslots && st == DL_OK; i++) {
        const conv_slot *s = &slot[i];
        if ((s->flags & SLOT_BIAS) && !(e->variant & 1))
            continue;
        st = add_slot(d, e, pd, s->what, s->index, s->arg, &md[s->tensor],
                      s->flags & SLOT_OUT, s->flags & SLOT_ADD, err);
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    return st;
}

/* A fused unary's oneDNN eltwise (alpha, beta: its parameters); false for
 * one oneDNN has not, or computes otherwise than PyTorch. */
static bool unary_alg(dl_unary_kind kind, float a, float b, dnnl_alg_kind_t *alg,
                      float *alpha, float *beta)
{
    *alpha = 0.0f;
    *beta = 0.0f;
    switch (kind) {
    case DL_UN_SILU:       *alg = dnnl_eltwise_swish; *alpha = 1.0f; return true;
    case DL_UN_CLIP:       *alg = dnnl_eltwise_clip; *alpha = a; *beta = b; return true;
    case DL_UN_HARDSWISH:  *alg = dnnl_eltwise_hardswish; return true;
    case DL_UN_LEAKY_RELU: *alg = dnnl_eltwise_relu; *alpha = a; return true;
    case DL_UN_GELU:       *alg = dnnl_eltwise_gelu_erf; return true;
    case DL_UN_GELU_TANH:  *alg = dnnl_eltwise_gelu_tanh; return true;
    default:               return false;
    }
}

/* The first post value of a fused unary (variant >> 1): dl_act + 1 below it. */
#define POST_UNARY 8

/* The post-op of a forward convolution: post = variant >> 1 (0: none,
 * below POST_UNARY a dl_act + 1, else a dl_unary_kind + POST_UNARY with
 * e->pa, e->pb), as an eltwise; false for a unary oneDNN does not fuse. */
static bool post_eltwise(const entry *e, dnnl_alg_kind_t *alg, float *alpha, float *beta)
{
    static const dnnl_alg_kind_t act[] = { dnnl_eltwise_relu, dnnl_eltwise_tanh,
                                           dnnl_eltwise_logistic };
    int post = (e->variant & ~VAR_RES) >> 1;
    if (post >= POST_UNARY)
        return unary_alg((dl_unary_kind)(post - POST_UNARY), e->pa, e->pb, alg, alpha, beta);
    *alg = act[post - 1];
    *alpha = *beta = 0.0f;
    return true;
}

/* Attributes with the post-ops: an add of a tensor of layout `res` (NULL:
 * none), then the eltwise alg (dnnl_alg_kind_undef: none). */
static dl_status post_attr(const dnnl_memory_desc_t *res, dnnl_alg_kind_t alg, float alpha,
                           float beta, dnnl_primitive_attr_t *attr, dl_err *err)
{
    DNNL_CHECK(dnnl_primitive_attr_create(attr), err);
    if (alg == dnnl_alg_kind_undef && !res)
        return DL_OK;
    dnnl_post_ops_t po = NULL;
    DNNL_CHECK(dnnl_post_ops_create(&po), err);
    dnnl_status_t s = res ? dnnl_post_ops_append_binary(po, dnnl_binary_add, res)
                          : dnnl_success;
    if (s == dnnl_success && alg != dnnl_alg_kind_undef)
        s = dnnl_post_ops_append_eltwise(po, 1.0f, alg, alpha, beta);
    if (s == dnnl_success)
        s = dnnl_primitive_attr_set_post_ops(*attr, po);
    dnnl_post_ops_destroy(po);
    DNNL_CHECK(s, err);
    return DL_OK;
}

/* variant for the forward convolution: bit 0 bias, bits 1.. the post-op
 * (post_eltwise), VAR_RES a residual added before it (DNNL_ARG_SRC_1 of
 * post-op 0, in the caller's layout of dst: its slot comes before dst's). */
static dl_status build_conv_fwd(dl_dnnl *d, entry *e, dl_err *err)
{
    static const conv_slot slot[] = {
        { dnnl_query_src_md,     0, DNNL_ARG_SRC,     CONV_SRC,  0 },
        { dnnl_query_weights_md, 0, DNNL_ARG_WEIGHTS, CONV_WEI,  0 },
        { dnnl_query_weights_md, 1, DNNL_ARG_BIAS,    CONV_BIAS, SLOT_BIAS },
        { dnnl_query_dst_md,     0, DNNL_ARG_DST,     CONV_DST,  SLOT_OUT },
    };
    static const conv_slot res_slot[] = {
        { dnnl_query_src_md,     0, DNNL_ARG_SRC,     CONV_SRC,  0 },
        { dnnl_query_weights_md, 0, DNNL_ARG_WEIGHTS, CONV_WEI,  0 },
        { dnnl_query_weights_md, 1, DNNL_ARG_BIAS,    CONV_BIAS, SLOT_BIAS },
        { dnnl_query_exec_arg_md, DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
          DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, CONV_DST, 0 },
        { dnnl_query_dst_md,     0, DNNL_ARG_DST,     CONV_DST,  SLOT_OUT },
    };
    bool bias = e->variant & 1, res = e->variant & VAR_RES;
    dnnl_alg_kind_t alg = dnnl_alg_kind_undef;
    float alpha = 0.0f, beta = 0.0f;
    if ((e->variant & ~VAR_RES) >> 1 && !post_eltwise(e, &alg, &alpha, &beta))
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "oneDNN: no fused post-op");
    dnnl_convolution_desc_t cd;
    dl_status st = conv_fwd_desc(&e->g, bias, &cd, err);
    if (st != DL_OK)
        return st;
    dnnl_memory_desc_t md[CONV_TENSORS];
    conv_mds(d, &e->g, false, &md[CONV_SRC], &md[CONV_WEI], &md[CONV_DST], &md[CONV_BIAS]);
    dnnl_primitive_attr_t attr = NULL;
    st = post_attr(res ? &md[CONV_DST] : NULL, alg, alpha, beta, &attr, err);
    if (st == DL_OK)
        st = build_conv(d, e, &cd, attr, false, res ? res_slot : slot,
                        res ? NSLOTS(res_slot) : NSLOTS(slot), err);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Backward data, or backward weights (variant: bit 0 bias), whose weight
 * (and bias) gradients accumulate. */
static dl_status build_conv_bwd(dl_dnnl *d, entry *e, dl_err *err)
{
    static const conv_slot data[] = {
        { dnnl_query_diff_dst_md, 0, DNNL_ARG_DIFF_DST, CONV_DST, 0 },
        { dnnl_query_weights_md,  0, DNNL_ARG_WEIGHTS,  CONV_WEI, 0 },
        { dnnl_query_diff_src_md, 0, DNNL_ARG_DIFF_SRC, CONV_SRC, SLOT_OUT },
    };
    static const conv_slot weights[] = {
        { dnnl_query_src_md,          0, DNNL_ARG_SRC,          CONV_SRC, 0 },
        { dnnl_query_diff_dst_md,     0, DNNL_ARG_DIFF_DST,     CONV_DST, 0 },
        { dnnl_query_diff_weights_md, 0, DNNL_ARG_DIFF_WEIGHTS, CONV_WEI, SLOT_OUT | SLOT_ADD },
        { dnnl_query_diff_weights_md, 1, DNNL_ARG_DIFF_BIAS,    CONV_BIAS,
          SLOT_OUT | SLOT_ADD | SLOT_BIAS },
    };
    dnnl_convolution_desc_t cd;
    dl_status st = conv_bwd_desc(&e->g, e->kind, e->variant & 1, &cd, err);
    if (st != DL_OK)
        return st;
    if (e->kind == OP_CONV_BWD_DATA)
        return build_conv(d, e, &cd, NULL, true, data, NSLOTS(data), err);
    return build_conv(d, e, &cd, NULL, true, weights, NSLOTS(weights), err);
}

/* Pooling, over plain NCHW, or over the blocked layout when either side
 * of g is blocked, else NHWC when either side is (the other side is then
 * reordered at the edge).
 * variant: bit 0 max (else average, padding counted), bit 1 training (max
 * pooling then keeps a workspace). */
static dl_status pool_desc(const dl_dnnl *d, const dl_conv_geom *g, int variant,
                           bool backward, dnnl_pooling_desc_t *pd, dl_err *err)
{
    dnnl_dims_t ds, dd, st = { g->sh, g->sw }, k = { g->kh, g->kw }, pl, pr;
    dnnl_memory_desc_t src, dst;
    dims_src(g, ds);
    dims_dst(g, dd);
    if (pads(g, false, pl, pr, err) != DL_OK)
        return DL_ERR_UNAVAILABLE;
    dnnl_format_tag_t tag = g->blocked & (DL_BLOCKED_X | DL_BLOCKED_Y) ? d->blocked
                          : g->blocked ? dnnl_nhwc : dnnl_nchw;
    md_plain(&src, 4, ds, tag);
    md_plain(&dst, 4, dd, tag);
    dnnl_alg_kind_t alg = variant & 1 ? dnnl_pooling_max : dnnl_pooling_avg_include_padding;
    if (backward)
        DNNL_CHECK(dnnl_pooling_backward_desc_init(pd, alg, &src, &dst, st, k, pl, pr), err);
    else
        DNNL_CHECK(dnnl_pooling_forward_desc_init(pd, variant & 2 ? dnnl_forward_training
                                                                  : dnnl_forward_inference,
                                                  alg, &src, &dst, st, k, pl, pr), err);
    return DL_OK;
}

static dl_status build_pool(dl_dnnl *d, entry *e, bool backward, dl_err *err)
{
    const dl_conv_geom *g = &e->g;
    dnnl_pooling_desc_t fwd, bwd;
    dnnl_primitive_desc_t hint = NULL, pd = NULL;
    dl_status s = pool_desc(d, g, e->variant | (backward ? 2 : 0), false, &fwd, err);
    if (s == DL_OK && backward)
        s = pool_desc(d, g, e->variant, true, &bwd, err);
    if (s == DL_OK && backward) {
        dnnl_status_t ds = dnnl_primitive_desc_create(&hint, &fwd, NULL, d->eng, NULL);
        if (ds != dnnl_success)
            s = dl_err_set(err, ds == dnnl_unimplemented ? DL_ERR_UNAVAILABLE : DL_ERR_BACKEND,
                           "oneDNN: pooling: %s", dnnl_status2str(ds));
    }
    if (s == DL_OK)
        s = make_prim(d, e, backward ? (const_dnnl_op_desc_t)&bwd : (const_dnnl_op_desc_t)&fwd,
                      NULL, hint, &pd, err);
    dnnl_dims_t ds, dd;
    dnnl_memory_desc_t src, dst;
    dims_src(g, ds);
    dims_dst(g, dd);
    md_plain(&src, 4, ds, act_tag(d, g, DL_BLOCKED_X));
    md_plain(&dst, 4, dd, act_tag(d, g, DL_BLOCKED_Y));
    if (s == DL_OK && !backward) {
        s = add_slot(d, e, pd, dnnl_query_src_md, 0, DNNL_ARG_SRC, &src, false, false, err);
        if (s == DL_OK)
            s = add_slot(d, e, pd, dnnl_query_dst_md, 0, DNNL_ARG_DST, &dst, true, false, err);
    } else if (s == DL_OK) {
        s = add_slot(d, e, pd, dnnl_query_diff_dst_md, 0, DNNL_ARG_DIFF_DST, &dst, false,
                     false, err);
        if (s == DL_OK)
            s = add_slot(d, e, pd, dnnl_query_diff_src_md, 0, DNNL_ARG_DIFF_SRC, &src, true,
                         false, err);
    }
    const dnnl_memory_desc_t *ws = s == DL_OK ? dnnl_primitive_desc_query_md(
                                                    pd, dnnl_query_workspace_md, 0) : NULL;
    if (ws && ws->ndims > 0) {
        e->ws_bytes = dnnl_memory_desc_get_size(ws);
        dnnl_status_t ms = dnnl_memory_create(&e->ws, ws, d->eng, DNNL_MEMORY_NONE);
        if (ms != dnnl_success)
            s = dl_err_set(err, DL_ERR_BACKEND, "oneDNN: workspace: %s", dnnl_status2str(ms));
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    return s;
}

/* ---- the cache ------------------------------------------------------------ */

/* A dense layer's forward, y (m, n) = post(x (m, k) W^T + b), as an inner
 * product for inference (g: n = m rows, c = k, oc = n), the weights in
 * the layout it picks (a fixed model's reordered once, fixed_copy): no
 * packing of the weights on every call, as OpenBLAS does. */
enum { DENSE_SRC, DENSE_WEI, DENSE_BIAS, DENSE_DST, DENSE_TENSORS };

static dl_status build_dense(dl_dnnl *d, entry *e, dl_err *err)
{
    const dl_conv_geom *g = &e->g;
    dnnl_dims_t src = { g->n, g->c }, wei = { g->oc, g->c }, bias = { g->oc },
                dst = { g->n, g->oc };
    dnnl_memory_desc_t md[DENSE_TENSORS], wany;
    md_plain(&md[DENSE_SRC], 2, src, dnnl_nc);
    md_plain(&md[DENSE_WEI], 2, wei, dnnl_oi);
    md_plain(&md[DENSE_BIAS], 1, bias, dnnl_x);
    md_plain(&md[DENSE_DST], 2, dst, dnnl_nc);
    md_any(&wany, 2, wei);
    bool has_bias = e->variant & 1;
    dnnl_inner_product_desc_t ipd;
    DNNL_CHECK(dnnl_inner_product_forward_desc_init(&ipd, dnnl_forward_inference,
                                                    &md[DENSE_SRC], &wany,
                                                    has_bias ? &md[DENSE_BIAS] : NULL,
                                                    &md[DENSE_DST]), err);
    dnnl_alg_kind_t alg = dnnl_alg_kind_undef;
    float alpha = 0.0f, beta = 0.0f;
    if (e->variant >> 1)
        post_eltwise(e, &alg, &alpha, &beta);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dl_status st = post_attr(NULL, alg, alpha, beta, &attr, err);
    if (st == DL_OK)
        st = make_prim(d, e, &ipd, attr, NULL, &pd, err);
    if (st == DL_OK)
        st = add_slot(d, e, pd, dnnl_query_src_md, 0, DNNL_ARG_SRC, &md[DENSE_SRC], false,
                      false, err);
    if (st == DL_OK)
        st = add_slot(d, e, pd, dnnl_query_weights_md, 0, DNNL_ARG_WEIGHTS, &md[DENSE_WEI],
                      false, false, err);
    if (st == DL_OK && has_bias)
        st = add_slot(d, e, pd, dnnl_query_weights_md, 1, DNNL_ARG_BIAS, &md[DENSE_BIAS],
                      false, false, err);
    if (st == DL_OK)
        st = add_slot(d, e, pd, dnnl_query_dst_md, 0, DNNL_ARG_DST, &md[DENSE_DST], true,
                      false, err);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

static dl_status build(dl_dnnl *d, entry *e, dl_err *err)
{
    switch (e->kind) {
    case OP_CONV_FWD:         return build_conv_fwd(d, e, err);
    case OP_CONV_BWD_DATA:
    case OP_CONV_BWD_WEIGHTS: return build_conv_bwd(d, e, err);
    case OP_POOL_FWD:         return build_pool(d, e, false, err);
    case OP_POOL_BWD:         return build_pool(d, e, true, err);
    case OP_DENSE_FWD:        return build_dense(d, e, err);
    }
    return dl_err_set(err, DL_ERR_INVALID, "oneDNN: unknown op");
}

/* The entry for (kind, g, variant): found, or created in place of the
 * least recently used one. Called with d->mu held. */
static dl_status lookup(dl_dnnl *d, op_kind kind, const dl_conv_geom *g, int variant,
                        const float par[2], entry **out, dl_err *err)
{
    *out = NULL;
    int victim = 0;
    for (int i = 0; i < d->n; i++) {
        entry *e = d->cache[i];
        if (e->kind == kind && e->variant == variant && e->pa == par[0] && e->pb == par[1] &&
            memcmp(&e->g, g, sizeof(*g)) == 0) {
            e->used = ++d->clock;
            *out = e;
            return DL_OK;
        }
        if (e->used < d->cache[victim]->used)
            victim = i;
    }
    entry *e = calloc(1, sizeof(*e));
    if (!e)
        return dl_err_set(err, DL_ERR_NOMEM, "oneDNN: primitive cache entry");
    e->kind = kind;
    e->g = *g;
    e->variant = variant;
    e->pa = par[0];
    e->pb = par[1];
    dl_status st = build(d, e, err);
    if (st != DL_OK) {
        entry_free(e);
        return st;
    }
    e->used = ++d->clock;
    if (d->n < CACHE_MAX) {
        d->cache[d->n++] = e;
    } else {
        entry_free(d->cache[victim]);
        d->cache[victim] = e;
    }
    *out = e;
    return DL_OK;
}

static dl_status exec(dl_dnnl *d, const_dnnl_primitive_t p, int nargs,
                      const dnnl_exec_arg_t *args, dl_err *err)
{
    DNNL_CHECK(dnnl_primitive_execute(p, d->stream, nargs, args), err);
    return DL_OK;
}

/* Grows a table of `size`-byte rows to hold one more. */
static bool grow(void **rows, int n, int *cap, size_t size)
{
    if (n < *cap)
        return true;
    int c = *cap ? 2 * *cap : 8;
    void *p = realloc(*rows, (size_t)c * size);
    if (!p)
        return false;
    *rows = p;
    *cap = c;
    return true;
}

/* The forward convolution's copy of slot s's weights at w in its own
 * layout, made by s's reorder on first use, when w lies in fixed
 * weights; else NULL (the caller reorders them itself). */
static dnnl_memory_t fixed_copy(dl_dnnl *d, const arg_slot *s, const void *w)
{
    bool fixed = false;
    for (int i = 0; i < d->nfixed && !fixed; i++)
        fixed = (const char *)w >= d->fixed[i].lo && (const char *)w < d->fixed[i].hi;
    if (!fixed)
        return NULL;
    const dnnl_memory_desc_t *md;
    dnnl_memory_get_memory_desc(s->inner, &md);
    for (int i = 0; i < d->npacks; i++)
        if (d->packs[i].w == w && dnnl_memory_desc_equal(&d->packs[i].md, md))
            return d->packs[i].mem;
    dnnl_memory_t mem = NULL;
    if (!grow((void **)&d->packs, d->npacks, &d->packs_cap, sizeof(packed)) ||
        dnnl_memory_create(&mem, md, d->eng, DNNL_MEMORY_ALLOCATE) != dnnl_success)
        return NULL;
    dnnl_exec_arg_t r[2] = { { DNNL_ARG_FROM, s->user }, { DNNL_ARG_TO, mem } };
    if (dnnl_primitive_execute(s->reorder, d->stream, 2, r) != dnnl_success) {
        dnnl_memory_destroy(mem);
        return NULL;
    }
    d->packs[d->npacks++] = (packed){ .w = w, .md = *md, .mem = mem };
    return mem;
}

/* Runs e with ptr[i] as slot i's caller memory and ws as the workspace:
 * inputs reordered in, the primitive, outputs reordered (or added) out. */
static dl_status run(dl_dnnl *d, entry *e, void *const *ptr, void *ws, dl_err *err)
{
    dnnl_exec_arg_t args[SLOTS_MAX + 1];
    int nargs = 0;
    dl_status st = DL_OK;
    for (int i = 0; i < e->nslots && st == DL_OK; i++) {
        arg_slot *s = &e->slot[i];
        DNNL_CHECK(dnnl_memory_set_data_handle_v2(s->user, ptr[i], d->stream), err);
        args[nargs++] = (dnnl_exec_arg_t){ s->arg, s->inner ? s->inner : s->user };
        dnnl_memory_t copy = (e->kind == OP_CONV_FWD || e->kind == OP_DENSE_FWD) &&
                                     s->arg == DNNL_ARG_WEIGHTS && s->inner
                           ? fixed_copy(d, s, ptr[i]) : NULL;
        if (copy)
            args[nargs - 1].memory = copy;
        else if (s->inner && !s->output) {
            dnnl_exec_arg_t r[2] = { { DNNL_ARG_FROM, s->user }, { DNNL_ARG_TO, s->inner } };
            st = exec(d, s->reorder, 2, r, err);
        }
    }
    if (st == DL_OK && e->ws) {
        DNNL_CHECK(dnnl_memory_set_data_handle_v2(e->ws, ws, d->stream), err);
        args[nargs++] = (dnnl_exec_arg_t){ DNNL_ARG_WORKSPACE, e->ws };
    }
    if (st == DL_OK)
        st = exec(d, e->prim, nargs, args, err);
    for (int i = 0; i < e->nslots && st == DL_OK; i++) {
        arg_slot *s = &e->slot[i];
        if (s->inner && s->output) {
            dnnl_exec_arg_t r[2] = { { DNNL_ARG_FROM, s->inner }, { DNNL_ARG_TO, s->user } };
            st = exec(d, s->reorder, 2, r, err);
        }
    }
    if (st == DL_OK)
        DNNL_CHECK(dnnl_stream_wait(d->stream), err);
    return st;
}

/* Below this many multiply-adds a convolution runs on the calling thread
 * alone: waking the OpenMP team (its threads sleep between primitives)
 * and joining it cost more than the work. A squeeze-and-excitation's two
 * 1x1 convolutions over its pooled vector (at most 1152 x 48 in
 * efficientnet_b0, 32 of them a pass) took 9-12 us each on two threads,
 * several times their arithmetic. */
#define SOLO_MACS (1 << 17)

static int threads_for(const dl_dnnl *d, op_kind kind, const dl_conv_geom *g)
{
    if (kind != OP_CONV_FWD && kind != OP_CONV_BWD_DATA && kind != OP_CONV_BWD_WEIGHTS)
        return d->threads;
    int64_t groups = g->groups > 1 ? g->groups : 1;
    double macs = (double)g->n * (double)(g->oh * g->ow) * (double)g->oc *
                  (double)(g->c / groups) * (double)(g->kh * g->kw);
    return macs < SOLO_MACS ? 1 : d->threads;
}

/* par: the post-op's parameters (NULL: none), part of the entry's key. */
static dl_status call(dl_dnnl *d, op_kind kind, const dl_conv_geom *g, int variant,
                      const float *par, void *const *ptr, void *ws, size_t ws_room,
                      dl_err *err)
{
    static const float none[2] = { 0.0f, 0.0f };
    pthread_mutex_lock(&d->mu);
    /* oneDNN's OpenMP team follows the calling thread's setting, when it
     * creates a primitive as when it runs one: a creation with the
     * default team (every core) left an extra OpenMP thread spinning
     * beside --threads 1 (two such processes on two cores trained 1.3x,
     * not 2x, one's rate). A tiny convolution's team is the caller
     * alone, when it is created as when it runs (threads_for). */
    int threads = threads_for(d, kind, g);
    if (omp_get_max_threads() != threads)
        omp_set_num_threads(threads);
    entry *e;
    dl_status st = lookup(d, kind, g, variant, par ? par : none, &e, err);
    if (st == DL_OK && e->ws && (!ws || e->ws_bytes > ws_room))
        st = dl_err_set(err, DL_ERR_INVALID, "oneDNN: pooling needs %zu bytes of workspace, "
                        "got %zu", e->ws_bytes, ws ? ws_room : 0);
    if (st == DL_OK)
        st = run(d, e, ptr, ws, err);
    pthread_mutex_unlock(&d->mu);
    return st;
}

/* ---- dlserve's loops on the same OpenMP team ------------------------------ */

static void omp_run(int chunks, int64_t n, dl_task_fn fn, void *ctx)
{
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
    for (int c = 0; c < chunks; c++)
        fn(ctx, n * c / chunks, n * (c + 1) / chunks);
}

void dl_dnnl_own_loops(void)
{
    dl_pool_set_runner(omp_run);
}

/* ---- the interface (cpu.h) -------------------------------------------------- */

dl_status dl_dnnl_new(int threads, dl_dnnl **out, dl_err *err)
{
    *out = NULL;
    dl_dnnl *d = calloc(1, sizeof(*d));
    if (!d)
        return dl_err_set(err, DL_ERR_NOMEM, "oneDNN context");
    pthread_mutex_init(&d->mu, NULL);
    d->threads = threads > 0 ? threads : 1;
    /* The block oneDNN's direct convolutions use on this CPU: 16 floats
     * with AVX-512, 8 with AVX2. */
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    bool avx512 = (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
    d->block = avx512 ? 16 : 8;
    d->blocked = avx512 ? dnnl_nChw16c : dnnl_nChw8c;
    dnnl_status_t s = dnnl_engine_create(&d->eng, dnnl_cpu, 0);
    if (s == dnnl_success)
        s = dnnl_stream_create(&d->stream, d->eng, dnnl_stream_default_flags);
    if (s != dnnl_success) {
        dl_dnnl_free(d);
        return dl_err_set(err, DL_ERR_BACKEND, "oneDNN: CPU engine: %s", dnnl_status2str(s));
    }
    *out = d;
    return DL_OK;
}

int dl_dnnl_block(const dl_dnnl *d) { return d->block; }

void dl_dnnl_fix_weights(dl_dnnl *d, const void *w, size_t bytes, bool fixed)
{
    const char *lo = w, *hi = lo + bytes;
    pthread_mutex_lock(&d->mu);
    if (fixed && grow((void **)&d->fixed, d->nfixed, &d->fixed_cap, sizeof(fixed_range)))
        d->fixed[d->nfixed++] = (fixed_range){ lo, hi };
    for (int i = 0; !fixed && i < d->nfixed; i++)
        if (d->fixed[i].lo == lo && d->fixed[i].hi == hi)
            d->fixed[i--] = d->fixed[--d->nfixed];
    for (int i = 0; !fixed && i < d->npacks; i++)
        if ((const char *)d->packs[i].w >= lo && (const char *)d->packs[i].w < hi) {
            dnnl_memory_destroy(d->packs[i].mem);
            d->packs[i--] = d->packs[--d->npacks];
        }
    pthread_mutex_unlock(&d->mu);
}

void dl_dnnl_free(dl_dnnl *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->n; i++)
        entry_free(d->cache[i]);
    for (int i = 0; i < d->npacks; i++)
        dnnl_memory_destroy(d->packs[i].mem);
    free(d->packs);
    free(d->fixed);
    if (d->stream)
        dnnl_stream_destroy(d->stream);
    if (d->eng)
        dnnl_engine_destroy(d->eng);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

dl_status dl_dnnl_conv_fwd(dl_dnnl *d, const dl_conv_geom *g, const float *x,
                           const float *w, const float *b, const dl_act *post, float *y,
                           dl_err *err)
{
    int variant = (b ? 1 : 0) | (post ? ((int)*post + 1) << 1 : 0);
    /* slots: src, weights, [bias,] dst */
    void *with_bias[4] = { (void *)x, (void *)w, (void *)b, y };
    void *without[3] = { (void *)x, (void *)w, y };
    return call(d, OP_CONV_FWD, g, variant, NULL, b ? with_bias : without, NULL, 0, err);
}

dl_status dl_dnnl_conv_fwd_unary(dl_dnnl *d, const dl_conv_geom *g, const float *x,
                                 const float *w, const float *b, const dl_unary *u,
                                 float *y, dl_err *err)
{
    dnnl_alg_kind_t alg;
    float alpha, beta, par[2] = { u->a, u->b };
    if (!unary_alg(u->kind, u->a, u->b, &alg, &alpha, &beta))
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "oneDNN: no fused post-op");
    int variant = (b ? 1 : 0) | ((int)u->kind + POST_UNARY) << 1;
    void *with_bias[4] = { (void *)x, (void *)w, (void *)b, y };
    void *without[3] = { (void *)x, (void *)w, y };
    return call(d, OP_CONV_FWD, g, variant, par, b ? with_bias : without, NULL, 0, err);
}

dl_status dl_dnnl_conv_fwd_add(dl_dnnl *d, const dl_conv_geom *g, const float *x,
                               const float *w, const float *b, const float *r,
                               const dl_act *post, float *y, dl_err *err)
{
    int variant = (b ? 1 : 0) | (post ? ((int)*post + 1) << 1 : 0) | VAR_RES;
    /* slots: src, weights, [bias,] residual, dst */
    void *with_bias[5] = { (void *)x, (void *)w, (void *)b, (void *)r, y };
    void *without[4] = { (void *)x, (void *)w, (void *)r, y };
    return call(d, OP_CONV_FWD, g, variant, NULL, b ? with_bias : without, NULL, 0, err);
}

dl_status dl_dnnl_conv_bwd_data(dl_dnnl *d, const dl_conv_geom *g, const float *dy,
                                const float *w, float *dx, dl_err *err)
{
    void *ptr[3] = { (void *)dy, (void *)w, dx };
    return call(d, OP_CONV_BWD_DATA, g, 0, NULL, ptr, NULL, 0, err);
}

dl_status dl_dnnl_conv_bwd_weights(dl_dnnl *d, const dl_conv_geom *g, const float *x,
                                   const float *dy, float *dw, float *db, dl_err *err)
{
    void *ptr[4] = { (void *)x, (void *)dy, dw, db };
    return call(d, OP_CONV_BWD_WEIGHTS, g, db ? 1 : 0, NULL, ptr, NULL, 0, err);
}

dl_status dl_dnnl_pool_fwd(dl_dnnl *d, dl_pool_kind kind, const dl_conv_geom *g,
                           const float *x, float *y, void *ws, size_t ws_bytes, dl_err *err)
{
    int variant = (kind == DL_POOL_MAX ? 1 : 0) | (ws ? 2 : 0);
    void *ptr[2] = { (void *)x, y };
    return call(d, OP_POOL_FWD, g, variant, NULL, ptr, ws, ws_bytes, err);
}

dl_status dl_dnnl_pool_bwd(dl_dnnl *d, dl_pool_kind kind, const dl_conv_geom *g,
                           const float *dy, const void *ws, size_t ws_bytes, float *dx,
                           dl_err *err)
{
    int variant = kind == DL_POOL_MAX ? 1 : 0;
    void *ptr[2] = { (void *)dy, dx };
    return call(d, OP_POOL_BWD, g, variant, NULL, ptr, (void *)ws, ws_bytes, err);
}

/* Whether w lies in the weights the caller declared fixed. */
static bool is_fixed(dl_dnnl *d, const void *w)
{
    bool fixed = false;
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < d->nfixed && !fixed; i++)
        fixed = (const char *)w >= d->fixed[i].lo && (const char *)w < d->fixed[i].hi;
    pthread_mutex_unlock(&d->mu);
    return fixed;
}

/* The inner product of variant (post-op bits) and its parameters par. */
static dl_status dense_call(dl_dnnl *d, int64_t m, int64_t n, int64_t k, int post,
                            const float *par, const float *x, const float *w, const float *b,
                            float *y, dl_err *err)
{
    if (!is_fixed(d, w) || m <= 0 || k <= 0)
        return DL_ERR_UNAVAILABLE;
    dl_conv_geom g = { .n = m, .c = k, .oc = n };
    void *with_bias[4] = { (void *)x, (void *)w, (void *)b, y };
    void *without[3] = { (void *)x, (void *)w, y };
    return call(d, OP_DENSE_FWD, &g, (b ? 1 : 0) | post << 1, par,
                b ? with_bias : without, NULL, 0, err);
}

dl_status dl_dnnl_dense_fwd(dl_dnnl *d, int64_t m, int64_t n, int64_t k, const float *x,
                            const float *w, const float *b, const dl_act *post, float *y,
                            dl_err *err)
{
    return dense_call(d, m, n, k, post ? (int)*post + 1 : 0, NULL, x, w, b, y, err);
}

dl_status dl_dnnl_dense_fwd_unary(dl_dnnl *d, int64_t m, int64_t n, int64_t k, const float *x,
                                  const float *w, const float *b, const dl_unary *u, float *y,
                                  dl_err *err)
{
    dnnl_alg_kind_t alg;
    float alpha, beta, par[2] = { u->a, u->b };
    if (!unary_alg(u->kind, u->a, u->b, &alg, &alpha, &beta))
        return DL_ERR_UNAVAILABLE;
    return dense_call(d, m, n, k, (int)u->kind + POST_UNARY, par, x, w, b, y, err);
}
