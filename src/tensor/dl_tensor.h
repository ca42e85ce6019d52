/* dl_tensor.h: tensors and the backend ops table. A backend (the CPU
 * through OpenBLAS, or a CUDA GPU) is a const table of kernels plus a
 * context, created by device name; everything above src/tensor calls
 * be->ops->... (or the wrappers below) and never knows which backend runs
 * them: no backend has a header of its own outside this folder. */
#ifndef DL_TENSOR_H
#define DL_TENSOR_H

#include "util/dl_util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DL_MAX_DIMS 4

typedef struct dl_backend dl_backend;

/* A recorded sequence of ops that a backend can replay as one unit (a
 * CUDA graph); opaque, defined by the backend that made it. */
typedef struct dl_graph dl_graph;

/* Activations with an elementwise derivative expressed through the output. */
typedef enum dl_act { DL_ACT_RELU, DL_ACT_TANH, DL_ACT_SIGMOID } dl_act;

typedef enum dl_pool_kind { DL_POOL_MAX, DL_POOL_AVG } dl_pool_kind;

/* ---- the geometry of the graph layers' kernels ---------------------------- */

/* Dimensions of a strided iteration: a sample's and the batch's. */
#define DL_STRIDED_DIMS (DL_MAX_DIMS + 1)

/* An iteration over `shape` (nd dimensions, the outermost first) that
 * reads or writes up to three operands, operand k's element at position
 * (i_0, ..., i_{nd-1}) lying at offset sum_d i_d * st[k][d] from its
 * pointer. A stride of 0 repeats the operand along that dimension
 * (broadcasting). Each op names which operand is which. */
/* Scaled dot-product attention over heads (the sdpa layer): for each of
 * n samples and each head h, O_h = softmax(scale Q_h K_h^T) V_h, where
 * Q_h holds tq rows of dk floats at column h * dk of Q's rows, K_h tk rows
 * of dk at h * dk, V_h tk rows of dv at h * dv, and O_h is written at
 * h * dv of O's rows. Rows and samples lie at the strides given (floats),
 * so Q, K and V may be the columns of one packed projection. causal:
 * query row i attends to key rows 0..i only (PyTorch's is_causal).
 * q_len and k_len (host, n of them, each 1 to tq or tk; NULL: all rows)
 * are each sample's valid query and key rows (the attention layer over
 * padded sequences): a key row at or past k_len[s] gets no weight, a
 * query row at or past q_len[s] gives zeros and no gradient; the
 * gradients of such key rows are zero too. A sample's answer depends on
 * its own lengths only, never on the batch's. */
typedef struct dl_attn {
    int64_t n, heads, tq, tk, dk, dv;
    int64_t q_row, k_row, v_row, o_row;
    int64_t q_smp, k_smp, v_smp, o_smp;
    float   scale;
    bool    causal;
    const int32_t *q_len, *k_len;
    /* Decoding with a key-value cache: sample s's query row r is position
     * q_off[s] + r of its sequence (host; NULL: 0), and `causal` lets it
     * see keys 0 to q_off[s] + r. */
    const int32_t *q_off;
} dl_attn;

/* A stack of recurrent layers, PyTorch's nn.LSTM or nn.GRU (batch_first)
 * over packed sequences: `layers` layers of `dirs` directions (2:
 * bidirectional), layer k > 0 reading layer k - 1's directions side by
 * side. Sample i runs its own len[i] steps from zero states, the reverse
 * direction from its last valid position back to 0.
 * x: [n, t, in], positions past a length unread. y with ret_seq: [n, t,
 * hidden * dirs], the directions' h side by side, zeros past a length
 * (pad_packed_sequence); else [n, hidden * dirs], the top layer's final
 * states (PyTorch's h_n: forward at the last valid position, reverse at
 * position 0).
 * w: the parameters in PyTorch's order and layouts, one after the other:
 * for each layer k, each direction: weight_ih [G * hidden, in_k],
 * weight_hh [G * hidden, hidden], then (bias) bias_ih, bias_hh [G *
 * hidden]; in_0 = in, in_k = hidden * dirs. LSTM: G = 4, gates i, f, g,
 * o. GRU: G = 3, gates r, z, n, n = tanh(W_in x + b_in + r * (W_hn h +
 * b_hn)). dw: their gradients, the same layout. */
typedef enum dl_rnn_cell { DL_RNN_LSTM, DL_RNN_GRU } dl_rnn_cell;

typedef struct dl_rnn {
    dl_rnn_cell    cell;
    int64_t        n, t, in, hidden;
    int            layers, dirs;
    bool           bias, ret_seq;
    const int32_t *len;       /* host: n lengths in [1, t]; NULL: t each */
    bool           train;     /* rnn_bwd follows */
    bool           invariant; /* inference: a sample's bits independent of the
                               * batch around it */
    const float   *w;
    float         *dw;
    void          *reserve;   /* rnn_fwd to rnn_bwd: rnn_size's bytes */
    void          *work;      /* scratch of one call: rnn_size's bytes */
    /* Inference only (decoding): the initial states, [layers * dirs, n,
     * hidden] as cuDNN's hx and cx (NULL: zeros; cx LSTM only), and where
     * rnn_fwd leaves each sample's states after its last step (NULL:
     * nowhere; hy with ret_seq only). */
    const float   *hx, *cx;
    float         *hy, *cy;
} dl_rnn;

typedef struct dl_strided {
    int     nd;
    int64_t shape[DL_STRIDED_DIMS];
    int64_t st[3][DL_STRIDED_DIMS];
} dl_strided;

/* Sequences (the seq_* kernels): n samples of t positions of d floats
 * each, [n, t, d] densely; sample s is valid at its first len[s]
 * positions (host memory, each 1 to t; len NULL: all t), the rest is
 * padding. */
typedef struct dl_seq {
    int64_t        n, t, d;
    const int32_t *len;
} dl_seq;

/* What seq_pool makes of a sample's valid positions. */
typedef enum dl_seq_pool_kind {
    DL_SEQ_POOL_KIND_MEAN, DL_SEQ_POOL_KIND_MAX, DL_SEQ_POOL_KIND_SUM, DL_SEQ_POOL_KIND_LAST,
} dl_seq_pool_kind;

/* The binary ops of add, sub, mul and div. */
typedef enum dl_binop { DL_BIN_ADD, DL_BIN_SUB, DL_BIN_MUL, DL_BIN_DIV } dl_binop;

/* The unary elementwise ops beyond dl_act, with their parameters a, b:
 * pow (x^a), leaky_relu (slope a), clip (to [a, b]), hardsigmoid
 * (clamp(a x + b, 0, 1)); gelu with erf or its tanh approximation. Values
 * and gradients are PyTorch's, its choices at the kinks included. */
typedef enum dl_unary_kind {
    DL_UN_GELU, DL_UN_GELU_TANH, DL_UN_SILU, DL_UN_POW, DL_UN_SQRT, DL_UN_ERF,
    DL_UN_LEAKY_RELU, DL_UN_CLIP, DL_UN_HARDSIGMOID, DL_UN_HARDSWISH,
} dl_unary_kind;

typedef struct dl_unary {
    dl_unary_kind kind;
    float         a, b;
} dl_unary;

/* Geometry of a 2-D convolution or pooling over an NCHW batch. For pooling
 * oc == c and kh, kw are the window. `blocked` (DL_BLOCKED_* bits, 0 for
 * plain NCHW) says which activations are in the convolution engine's own
 * layout: channels in blocks of be->engine_block, the block innermost
 * (oneDNN's nChw16c or nChw8c; the same size as NCHW, since only channel
 * counts that are multiples of the block are kept so). Only the engine's
 * kernels (conv_fwd .. pool2d_bwd) take blocked activations. */
typedef struct dl_conv_geom {
    int64_t n, c, h, w;        /* input */
    int64_t oc, oh, ow;        /* output channels and size */
    int64_t kh, kw, sh, sw, ph, pw;
    int64_t blocked;
    /* Convolution only: dilation of the window (0 or 1: none) and the
     * channel groups (0 or 1: one). im2col and col2im honour the dilation;
     * the layer runs the groups as one GEMM a group over its rows. */
    int64_t dh, dw, groups;
} dl_conv_geom;

#define DL_BLOCKED_X 1         /* x and dx */
#define DL_BLOCKED_Y 2         /* y and dy */
/* Activations in NHWC (channels innermost, the same size as NCHW), which
 * the engine keeps where the channels are no multiple of the block. */
#define DL_NHWC_X    4
#define DL_NHWC_Y    8
#define DL_NHWC_OF(bit) ((bit) << 2)   /* the NHWC bit of a DL_BLOCKED_* one */

/* Fills the output size of g from the input, window (its dilated extent),
 * stride and padding; DL_ERR_INVALID if the window does not fit. */
dl_status dl_conv_geom_finish(dl_conv_geom *g, dl_err *err);

/* The kernels a backend provides. All pointers are backend memory except
 * where named host. Counts are elements. Unless stated, outputs are
 * overwritten; "accumulates" means += into the output. Kernels run on the
 * calling thread's behalf and return when done. */
typedef struct dl_backend_ops {
    const char *name;          /* the device word: "cpu", "cuda" */

    /* ---- the backend itself ---- */
    /* Frees everything the backend holds (device memory, handles,
     * streams) and be itself. Use dl_backend_free. */
    void      (*free)(dl_backend *be);
    /* Waits until every op queued on be has run, then reports (and clears)
     * an error latched by an op that returns void. */
    dl_status (*sync)(dl_backend *be, dl_err *err);
    /* Bytes of device memory the backend holds (in use plus cached for
     * reuse) and the device's total. NULL for a backend that uses host
     * memory (the CPU). */
    dl_status (*memory)(dl_backend *be, size_t *used, size_t *total);
    /* The backend's compute stream (a cudaStream_t), borrowed, for
     * collective libraries (NCCL) that queue work beside the ops. NULL
     * for a backend without streams. */
    void     *(*stream)(dl_backend *be);
    /* Recording (NULL entries when the backend cannot record): the ops
     * called between graph_begin and graph_end are recorded, not run;
     * graph_launch queues one replay. Ops that exchange data with the host
     * (upload, download, xent, mse, sumsq, embed_fwd, the seq_* kernels)
     * must not be recorded, and every buffer must exist already and stay
     * allocated, unchanged, while the graph lives: run the work once before
     * recording it. */
    dl_status (*graph_begin)(dl_backend *be, dl_err *err);
    dl_status (*graph_end)(dl_backend *be, dl_graph **out, dl_err *err);
    dl_status (*graph_launch)(dl_backend *be, dl_graph *g, dl_err *err);
    void      (*graph_free)(dl_backend *be, dl_graph *g);

    /* ---- memory ---- */
    dl_status (*alloc)(dl_backend *be, size_t nbytes, void **out, dl_err *err);
    void      (*release)(dl_backend *be, void *ptr);
    void      (*upload)(dl_backend *be, void *dst, const void *host, size_t nbytes);
    void      (*download)(dl_backend *be, void *host, const void *src, size_t nbytes);
    void      (*fill)(dl_backend *be, float *x, int64_t n, float value);
    /* dst = src, n floats, both backend memory. */
    void      (*copy)(dl_backend *be, float *dst, const float *src, int64_t n);

    /* C (m x n) = alpha * op(A) * op(B) + beta * C, row-major, contiguous. */
    dl_status (*gemm)(dl_backend *be, bool ta, bool tb, int64_t m, int64_t n,
                      int64_t k, float alpha, const float *a, const float *b,
                      float beta, float *c, dl_err *err);
    /* y[r, j] += b[j]: rows x cols. */
    void (*bias_add)(dl_backend *be, float *y, const float *b, int64_t rows, int64_t cols);
    /* db[j] += sum_r dy[r, j]. */
    void (*bias_grad)(dl_backend *be, float *db, const float *dy, int64_t rows, int64_t cols);
    /* NCHW versions: channel c of each sample gets b[c]; hw = H*W. */
    void (*bias_add_nchw)(dl_backend *be, float *y, const float *b, int64_t n, int64_t c, int64_t hw);
    void (*bias_grad_nchw)(dl_backend *be, float *db, const float *dy, int64_t n, int64_t c, int64_t hw);

    void (*act_fwd)(dl_backend *be, dl_act act, const float *x, float *y, int64_t n);
    /* dx = dy * act'(x), written through the forward output y. */
    void (*act_bwd)(dl_backend *be, dl_act act, const float *y, const float *dy, float *dx, int64_t n);
    void (*softmax_fwd)(dl_backend *be, const float *x, float *y, int64_t rows, int64_t cols);
    void (*softmax_bwd)(dl_backend *be, const float *y, const float *dy, float *dx, int64_t rows, int64_t cols);

    /* x (N,C,H,W) -> cols (C*kh*kw, N*oh*ow); col2im accumulates into dx. */
    void (*im2col)(dl_backend *be, const dl_conv_geom *g, const float *x, float *cols);
    void (*col2im)(dl_backend *be, const dl_conv_geom *g, const float *cols, float *dx);
    /* (A, B, HW) <-> (B, A, HW): swaps the two outer axes. */
    void (*swap_outer)(dl_backend *be, const float *x, float *y, int64_t a, int64_t b, int64_t hw);

    /* Optional: swap_outer, then y[., k, .] += bias[k] (bias may be NULL),
     * then y = post(y) (post may be NULL), in one pass: the epilogue of
     * an im2col convolution. NULL: the three ops one after the other. */
    void (*swap_bias_act)(dl_backend *be, const float *x, float *y, int64_t a, int64_t b,
                          int64_t hw, const float *bias, const dl_act *post);

    /* Pooling; max pooling records the winning input index in argmax. */
    void (*pool_fwd)(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g,
                     const float *x, float *y, int32_t *argmax);
    /* Accumulates into dx. */
    void (*pool_bwd)(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g,
                     const float *dy, const int32_t *argmax, float *dx);

    /* ---- optional kernels of a convolution engine (oneDNN on the CPU) ----
     * NULL in a backend without one: the layers then use im2col + gemm and
     * pool_fwd / pool_bwd above. Weights are plain (OC, C, KH, KW); x and dx
     * are (N, C, H, W), y and dy (N, OC, OH, OW), plain or blocked as
     * g->blocked says. A call answering
     * DL_ERR_UNAVAILABLE has no kernel for that geometry and changed nothing:
     * the caller falls back to the generic path. */
    /* y = post(conv(x, w) + b); b may be NULL (no bias), post NULL (none). */
    dl_status (*conv_fwd)(dl_backend *be, const dl_conv_geom *g, const float *x,
                          const float *w, const float *b, const dl_act *post,
                          float *y, dl_err *err);
    /* Optional, inference only: y = u(conv(x, w) + b), the unary op u
     * applied in the same pass. DL_ERR_UNAVAILABLE for a u the engine does
     * not fuse (the caller then runs conv_fwd and unary_fwd). */
    dl_status (*conv_fwd_unary)(dl_backend *be, const dl_conv_geom *g, const float *x,
                                const float *w, const float *b, const dl_unary *u,
                                float *y, dl_err *err);
    /* Optional, inference only: y = post(conv(x, w) + b + r), r a tensor
     * of y's shape and layout (a residual). DL_ERR_UNAVAILABLE where the
     * engine does not fuse the add (the caller then runs conv_fwd and
     * binary_fwd). */
    dl_status (*conv_fwd_add)(dl_backend *be, const dl_conv_geom *g, const float *x,
                              const float *w, const float *b, const float *r,
                              const dl_act *post, float *y, dl_err *err);
    /* dx is overwritten. */
    dl_status (*conv_bwd_data)(dl_backend *be, const dl_conv_geom *g, const float *dy,
                               const float *w, float *dx, dl_err *err);
    /* dw and db accumulate; db may be NULL (no bias). */
    dl_status (*conv_bwd_weights)(dl_backend *be, const dl_conv_geom *g, const float *x,
                                  const float *dy, float *dw, float *db, dl_err *err);
    /* Pooling as pool_fwd / pool_bwd, except that ws (room for N*C*OH*OW
     * int32) holds what the backward needs in the engine's own form (NULL:
     * inference, no backward follows) and that pool2d_bwd overwrites dx. */
    dl_status (*pool2d_fwd)(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g,
                            const float *x, float *y, void *ws, dl_err *err);
    dl_status (*pool2d_bwd)(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g,
                            const float *dy, const void *ws, float *dx, dl_err *err);
    /* Optional: the `bytes` at w hold weights that stay as they are until
     * the same call with fixed false (a model that only serves), which
     * must come before that memory is written or freed. conv_fwd may then
     * keep its own copy of them in the engine's layout, rather than
     * converting them on every call. */
    void (*fix_weights)(dl_backend *be, const void *w, size_t bytes, bool fixed);

    /* Optional fused dense epilogue: C (m x n) = post(A B^T + bias[j]) with
     * A (m x k), B (n x k) row-major; bias may be NULL, post NULL (none).
     * NULL in a backend without it: gemm, bias_add and act_fwd instead. */
    dl_status (*gemm_bias_act)(dl_backend *be, int64_t m, int64_t n, int64_t k,
                               const float *a, const float *b, const float *bias,
                               const dl_act *post, float *c, dl_err *err);
    /* Optional: gemm_bias_act with each row of C computed by the same
     * operations whatever m, the rows beside it and the threads: a
     * sample's answer is the same bits alone or in any batch
     * (batch-invariant inference). NULL, or DL_ERR_UNAVAILABLE with
     * nothing changed (no such kernel on this CPU): the dense layer runs
     * such a batch one row at a time instead. */
    dl_status (*gemm_bias_act_rows)(dl_backend *be, int64_t m, int64_t n, int64_t k,
                                    const float *a, const float *b, const float *bias,
                                    const dl_act *post, float *c, dl_err *err);
    /* Optional, inference only: C = u(A B^T + bias), the unary op u in the
     * same pass, for a dense layer's fixed weights B. DL_ERR_UNAVAILABLE
     * (err untouched) for weights not fixed or a u it does not fuse: the
     * caller then runs gemm_bias_act and unary_fwd. */
    dl_status (*gemm_bias_unary)(dl_backend *be, int64_t m, int64_t n, int64_t k,
                                 const float *a, const float *b, const float *bias,
                                 const dl_unary *u, float *c, dl_err *err);

    /* Batch normalisation over (N, C, HW) per channel. Training mode uses
     * the batch statistics, saves mean and inverse std, and updates the
     * running statistics (unbiased variance) with `momentum`. */
    void (*bn_fwd_train)(dl_backend *be, const float *x, float *y,
                         const float *gamma, const float *beta,
                         float *save_mean, float *save_invstd,
                         float *run_mean, float *run_var, float momentum,
                         float eps, int64_t n, int64_t c, int64_t hw);
    void (*bn_fwd_infer)(dl_backend *be, const float *x, float *y,
                         const float *gamma, const float *beta,
                         const float *run_mean, const float *run_var,
                         float eps, int64_t n, int64_t c, int64_t hw);
    /* dx is overwritten; dgamma and dbeta accumulate. */
    void (*bn_bwd)(dl_backend *be, const float *x, const float *dy,
                   const float *gamma, const float *save_mean,
                   const float *save_invstd, float *dx, float *dgamma,
                   float *dbeta, int64_t n, int64_t c, int64_t hw);
    /* Optional: the same three over activations in the convolution
     * engine's blocked layout (see dl_conv_geom.blocked; c a multiple of
     * engine_block). NULL: batchnorm sees NCHW only, and the engine
     * reorders around it. */
    void (*bn_fwd_train_blk)(dl_backend *be, const float *x, float *y,
                             const float *gamma, const float *beta,
                             float *save_mean, float *save_invstd,
                             float *run_mean, float *run_var, float momentum,
                             float eps, int64_t n, int64_t c, int64_t hw);
    void (*bn_fwd_infer_blk)(dl_backend *be, const float *x, float *y,
                             const float *gamma, const float *beta,
                             const float *run_mean, const float *run_var,
                             float eps, int64_t n, int64_t c, int64_t hw);
    void (*bn_bwd_blk)(dl_backend *be, const float *x, const float *dy,
                       const float *gamma, const float *save_mean,
                       const float *save_invstd, float *dx, float *dgamma,
                       float *dbeta, int64_t n, int64_t c, int64_t hw);

    /* Inverted dropout: mask = 0 or 1/(1-p), y = x * mask. */
    void (*dropout_fwd)(dl_backend *be, const float *x, float *y, float *mask,
                        int64_t n, float p, uint64_t seed);
    /* y = a * b elementwise. */
    void (*mul)(dl_backend *be, const float *a, const float *b, float *y, int64_t n);

    /* y (nids, dim) = table[ids]; ids are float values of integer ids.
     * DL_ERR_INVALID if an id is outside [0, vocab). */
    dl_status (*embed_fwd)(dl_backend *be, const float *ids, const float *table,
                           float *y, int64_t nids, int64_t dim, int64_t vocab,
                           dl_err *err);
    /* Accumulates dy rows into dtable[ids]. */
    void (*embed_bwd)(dl_backend *be, const float *ids, const float *dy,
                      float *dtable, int64_t nids, int64_t dim);

    /* Fused, stable softmax cross-entropy over rows x cols logits with
     * labels in [0, cols) (host array). Writes dlogits = (softmax - onehot)
     * * scale when dlogits is not NULL; returns the summed loss and the
     * number of rows whose argmax equals the label (host). */
    void (*xent)(dl_backend *be, const float *logits, const int32_t *labels,
                 int64_t rows, int64_t cols, float *dlogits, float scale,
                 double *loss_sum, int64_t *correct);
    /* Squared error summed over n values: sum (pred - target)^2; dpred =
     * 2 (pred - target) * scale when not NULL. target is host memory. */
    void (*mse)(dl_backend *be, const float *pred, const float *target,
                int64_t n, float *dpred, float scale, double *loss_sum);

    /* Optimizer updates over a whole contiguous parameter buffer.
     * SGD with momentum as PyTorch: g += wd p; v = mu v + g;
     * g = nesterov ? g + mu v : v; p -= lr g (v unused when mu == 0). */
    void (*sgd_step)(dl_backend *be, float *p, const float *g, float *v,
                     int64_t n, float lr, float mu, bool nesterov, float wd);
    /* Adam as PyTorch (L2 weight decay added to the gradient); decoupled:
     * AdamW's decay instead, p *= 1 - lr wd before the update; t >= 1. */
    void (*adam_step)(dl_backend *be, float *p, const float *g, float *m,
                      float *v, int64_t n, float lr, float b1, float b2,
                      float eps, float wd, bool decoupled, int64_t t);
    /* Adagrad as PyTorch: g += wd p; sum += g^2; p -= lr g / (sqrt(sum) + eps). */
    void (*adagrad_step)(dl_backend *be, float *p, const float *g, float *sum,
                         int64_t n, float lr, float eps, float wd);
    /* y += alpha * x. */
    void (*axpy)(dl_backend *be, float alpha, const float *x, float *y, int64_t n);
    /* x *= alpha. */
    void (*scale)(dl_backend *be, float *x, int64_t n, float alpha);
    /* *sum (host) = the sum of x[i]^2 over n values, summed in double in
     * an order that depends on n only. */
    void (*sumsq)(dl_backend *be, const float *x, int64_t n, double *sum);

    /* ---- the graph layers' kernels -------------------------------------
     * NULL where a backend lacks one: a model with a layer that needs it
     * is refused when it is built ("unsupported on <device>"). */
    /* Over g, operands a (st[0]), b (st[1]) and y (st[2]): y = post(a op
     * b); post may be NULL (none). y may be a when their strides agree. */
    void (*binary_fwd)(dl_backend *be, dl_binop op, const dl_strided *g, const float *a,
                       const float *b, const dl_act *post, float *y);
    /* The gradient of operand k (0: a, 1: b) of y = a op b over g: each
     * element of dx (operand k's own size and strides, overwritten) is the
     * sum, over the positions of g that read that element, of dy (at
     * st[2]) times d(a op b)/d(operand k). Operands the op's gradient
     * does not read (both for add and sub) may be NULL. */
    void (*binary_bwd)(dl_backend *be, dl_binop op, const dl_strided *g, int k,
                       const float *a, const float *b, const float *dy, float *dx);
    /* y (at st[1]) = x (at st[0]) over g: transpose, slice, concat and
     * their gradients. */
    void (*copy_strided)(dl_backend *be, const dl_strided *g, const float *x, float *y);
    /* y = scale * the sum of x (st[0]) over the dimensions along which y's
     * stride (st[1]) is 0; y overwritten. */
    void (*reduce_fwd)(dl_backend *be, const dl_strided *g, const float *x, float *y,
                       float scale);
    /* dx (st[0]) = scale * dy (st[1], repeated along its 0 strides). */
    void (*reduce_bwd)(dl_backend *be, const dl_strided *g, const float *dy, float *dx,
                       float scale);
    void (*unary_fwd)(dl_backend *be, const dl_unary *u, const float *x, float *y, int64_t n);
    /* dx = dy * u'(x); y is the forward's output (sqrt's gradient reads
     * it). dx may be dy. */
    void (*unary_bwd)(dl_backend *be, const dl_unary *u, const float *x, const float *y,
                      const float *dy, float *dx, int64_t n);
    /* Layer normalisation of each of `rows` rows of d values, affine:
     * y = (x - mean) / sqrt(var + eps) * w + b, biased variance. */
    void (*layernorm_fwd)(dl_backend *be, const float *x, const float *w, const float *b,
                          float *y, int64_t rows, int64_t d, float eps);
    /* dx overwritten (NULL: none); dw and db accumulate. */
    void (*layernorm_bwd)(dl_backend *be, const float *x, const float *w, const float *dy,
                          float *dx, float *dw, float *db, int64_t rows, int64_t d,
                          float eps);
    /* softmax, or log_softmax when log, over the middle axis of x viewed
     * as (outer, len, inner); bwd from the forward's output y. */
    void (*softmax_axis_fwd)(dl_backend *be, bool log, const float *x, float *y,
                             int64_t outer, int64_t len, int64_t inner);
    void (*softmax_axis_bwd)(dl_backend *be, bool log, const float *y, const float *dy,
                             float *dx, int64_t outer, int64_t len, int64_t inner);
    /* `batch` GEMMs as gemm's: C_q = alpha op(A_q) op(B_q) + beta C_q,
     * where X_q starts at x + q * sx (sa or sb 0: one matrix for all q;
     * sc is at least m * n, so the C_q never overlap). */
    dl_status (*gemm_batched)(dl_backend *be, bool ta, bool tb, int64_t m, int64_t n,
                              int64_t k, float alpha, const float *a, int64_t sa,
                              const float *b, int64_t sb, float beta, float *c, int64_t sc,
                              int64_t batch, dl_err *err);
    /* Attention (dl_attn): o overwritten; backward overwrites dq, dk and
     * dv (at q's, k's and v's strides) from the forward's inputs. */
    dl_status (*attn_fwd)(dl_backend *be, const dl_attn *a, const float *q, const float *k,
                          const float *v, float *o, dl_err *err);
    dl_status (*attn_bwd)(dl_backend *be, const dl_attn *a, const float *q, const float *k,
                          const float *v, const float *dout, float *dq, float *dk, float *dv,
                          dl_err *err);
    /* Sequences (dl_seq; the lengths are host memory, so these cannot be
     * recorded in a graph): y = x at each sample's valid positions and 0
     * past them; y may be x. */
    void (*seq_mask)(dl_backend *be, const dl_seq *q, const float *x, float *y);
    /* y [n, d] = the mean, max, sum or last of each sample's valid
     * positions of x (per value: max as torch.max over them). */
    void (*seq_pool_fwd)(dl_backend *be, dl_seq_pool_kind kind, const dl_seq *q,
                         const float *x, float *y);
    /* dx [n, t, d] overwritten from dy [n, d]: mean spreads dy / len over
     * the valid positions, sum dy; max gives dy to the first valid
     * position holding the maximum (found again in the forward's x, which
     * only max reads: PyTorch's index of max(dim)); last to position
     * len - 1. Zero elsewhere. */
    void (*seq_pool_bwd)(dl_backend *be, dl_seq_pool_kind kind, const dl_seq *q,
                         const float *x, const float *dy, float *dx);
    /* Recurrent stacks (dl_rnn). rnn_size: the bytes of r->reserve and
     * r->work that r's geometry (n, t, in, hidden, layers, dirs, cell)
     * needs at any lengths. rnn_fwd writes y. rnn_bwd, after a training
     * rnn_fwd of the same r and x (its reserve unchanged), accumulates
     * the parameters' gradients into r->dw and overwrites dx (NULL: not
     * wanted), zero past the lengths; dy past a length is unread. */
    dl_status (*rnn_size)(dl_backend *be, const dl_rnn *r, size_t *reserve, size_t *work,
                          dl_err *err);
    dl_status (*rnn_fwd)(dl_backend *be, const dl_rnn *r, const float *x, float *y,
                         dl_err *err);
    dl_status (*rnn_bwd)(dl_backend *be, const dl_rnn *r, const float *x, const float *y,
                         const float *dy, float *dx, dl_err *err);
} dl_backend_ops;

struct dl_backend {
    const dl_backend_ops *ops;
    void *ctx;                 /* cuBLAS/cuDNN handles for CUDA; NULL for CPU */
    int device;                /* the device's index; -1 for host memory (CPU) */
    int threads;
    /* Floats of scratch a layer should aim for per chunk of a batch
     * (im2col): cache-sized on the CPU; 0 means DL_CHUNK_FLOATS. A GPU
     * wants whole batches (a kernel launch per chunk). */
    int64_t chunk_floats;
    /* The channel block of the convolution engine's own layout (see
     * dl_conv_geom.blocked); 0 for a backend that keeps none. */
    int engine_block;
    /* CPU: thin GEMMs of the dense layers' forward shape (a batch of at
     * most 64 rows against the weights, C = A B^T; any batch with the
     * AVX-512 kernel) run in dlserve's own kernel, which reads the weights
     * where they lie, instead of OpenBLAS: DLSERVE_CPU_GEMM's "thin" or
     * "openblas", else (auto) on a CPU with AVX2 and FMA where OpenBLAS
     * runs a core without small-matrix kernels (all but SkylakeX and its
     * successors), and packs the weights on every call. */
    bool gemm_thin;
    /* Whether im2col and col2im honour dl_conv_geom's dilation: a backend
     * without it refuses dilated convolutions when a model is built. */
    bool conv_dilation;
};

#define DL_CHUNK_FLOATS (512 * 1024)   /* ~2 MB: still in cache for the GEMM */

/* The CPU's kernels for convolution and pooling: im2col + OpenBLAS with
 * plain loops, or oneDNN's primitives (a build with -Ddnnl). DEFAULT is
 * the environment's DLSERVE_CPU_CONV ("auto", "im2col" or "onednn"), else
 * auto: oneDNN for models with convolutions on a CPU with AVX-512,
 * im2col + OpenBLAS otherwise, the faster of the two on each
 * (docs/benchmarks.md, "CPU engine"). */
typedef enum dl_conv_engine {
    DL_CONV_DEFAULT = 0, DL_CONV_IM2COL, DL_CONV_ONEDNN,
} dl_conv_engine;

/* How a backend is created. Zero-initialised means: all online CPUs,
 * fp32 GEMMs. */
typedef struct dl_backend_params {
    int  threads;      /* CPU threads for OpenBLAS and our own loops; <= 0: all */
    bool tf32;         /* TF32 tensor-core GEMMs where the device has them:
                        * the products keep 10 mantissa bits (relative
                        * error ~1e-3 instead of ~1e-6); the CPU ignores it */
    dl_conv_engine conv;   /* CPU: the kernels of convolution and pooling */
    /* The models have layers oneDNN runs (or may have: the daemon):
     * convolutions, pooling, and the dense layers of a model that only
     * serves. Only then does DL_CONV_DEFAULT's auto choose oneDNN, which
     * brings a model without them nothing but its OpenMP team. */
    bool engine_layers;
    /* CPU with oneDNN: dlserve's loops stay on its own pool, whose idle
     * workers sleep, instead of running on oneDNN's OpenMP team, whose
     * idle threads spin. For a process whose other threads need the
     * cores between computations (the daemon's connection threads). */
    bool keep_pool;
} dl_backend_params;

/* CPU backend with `threads` threads for OpenBLAS, oneDNN and our own
 * loops (they run one at a time, so the process never computes on more
 * than `threads` cores). threads <= 0 means the number of online CPUs.
 * Convolution and pooling as DL_CONV_DEFAULT says for models with
 * convolutions. New. */
dl_status dl_backend_cpu_new(int threads, dl_backend **out, dl_err *err);

/* The OPENBLAS_CORETYPE this process should have started with, or NULL.
 * OpenBLAS picks its kernels by CPU model when it loads, and on a model it
 * does not know (0.3.21 on CPUs newer than it) falls back to its generic
 * Prescott (SSE3) ones: on an AVX-512 Xeon, training ran 3x slower and
 * attention's products were the slowest part of a transformer. This names
 * the core the CPU's features match: "SkylakeX" (AVX-512 F, CD, BW, DQ,
 * VL) or "Haswell" (AVX2 and FMA); NULL when OpenBLAS chose a core of its
 * own, when OPENBLAS_CORETYPE is set (the user's choice, or this answer
 * applied), or without those features. The dlserve binary applies it and
 * executes itself again before anything else runs (cmd/main.c). */
const char *dl_blas_core_override(void);

/* The core OpenBLAS runs ("SkylakeX", "Haswell", "Prescott", ...). */
const char *dl_blas_core_name(void);

/* The kernels behind convolution and pooling: "onednn" when the backend
 * has a convolution engine (ops->conv_fwd), else "im2col". Static string. */
const char *dl_backend_conv_engine(const dl_backend *be);

/* Creates the backend named by a device string: "NAME" or "NAME:N" for
 * device N of that kind ("cpu", "cuda", "cuda:1"; a bare "cuda" is the GPU
 * of this process's local rank; NULL means "cpu"). p may be NULL (defaults). *out is new
 * (dl_backend_free). DL_ERR_INVALID for an unknown name or a malformed
 * index; DL_ERR_UNAVAILABLE, with "no CUDA device" in the message, when
 * the backend is not built in or its device is not present. */
dl_status dl_backend_new(const char *device, const dl_backend_params *p,
                         dl_backend **out, dl_err *err);

/* Frees a backend through its ops table; NULL does nothing. */
void dl_backend_free(dl_backend *be);

/* Waits for the queued ops and reports a latched error; DL_OK at once on
 * the CPU. */
dl_status dl_backend_sync(dl_backend *be, dl_err *err);

/* Device memory held and the device's total; DL_ERR_INVALID (and zeros)
 * for a backend on host memory. */
dl_status dl_backend_memory(dl_backend *be, size_t *used, size_t *total);

/* True when be can record graphs (ops->graph_begin is set). The wrappers
 * answer DL_ERR_INVALID on backends that cannot; dl_graph_free(be, NULL)
 * does nothing. */
bool      dl_backend_can_record(const dl_backend *be);
dl_status dl_graph_begin(dl_backend *be, dl_err *err);
dl_status dl_graph_end(dl_backend *be, dl_graph **out, dl_err *err);
dl_status dl_graph_launch(dl_backend *be, dl_graph *g, dl_err *err);
void      dl_graph_free(dl_backend *be, dl_graph *g);

/* ---- tensors --------------------------------------------------------- */

/* An F32 tensor: shape plus backend data. A view borrows its data from a
 * larger buffer (one parameter buffer holds every weight). */
typedef struct dl_tensor {
    dl_backend *be;
    int         ndim;
    int64_t     shape[DL_MAX_DIMS];
    float      *data;
    bool        owns;
} dl_tensor;

/* Number of elements. */
int64_t dl_tensor_numel(const dl_tensor *t);
int64_t dl_shape_numel(int ndim, const int64_t *shape);

/* New tensor with uninitialised data. */
dl_status dl_tensor_new(dl_backend *be, int ndim, const int64_t *shape,
                        dl_tensor **out, dl_err *err);

/* Fills *t as a view on data (borrowed). */
void dl_tensor_view(dl_tensor *t, dl_backend *be, int ndim,
                    const int64_t *shape, float *data);

/* Frees a tensor from dl_tensor_new (and its data if it owns it). */
void dl_tensor_free(dl_tensor *t);

/* Index of the largest of x[0..n) (the first on ties; 0 when n <= 1):
 * a classifier's top class. Host memory. */
int64_t dl_argmax(const float *x, int64_t n);

/* Formats a shape as "[a, b, c]" into buf. Returns buf. */
const char *dl_shape_str(int ndim, const int64_t *shape, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* DL_TENSOR_H */
