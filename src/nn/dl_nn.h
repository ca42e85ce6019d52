/* dl_nn.h: models (model.json), layers with forward and backward passes,
 * losses, optimizers, learning-rate schedules and weights in safetensors.
 * Depends on tensor and util. Parameters, gradients and non-trained state
 * (batchnorm running statistics) each live in one contiguous buffer. */
#ifndef DL_NN_H
#define DL_NN_H

#include "tensor/dl_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DL_NAME_MAX 64

typedef enum dl_layer_type {
    DL_LAYER_DENSE, DL_LAYER_CONV2D, DL_LAYER_MAXPOOL2D, DL_LAYER_AVGPOOL2D,
    DL_LAYER_BATCHNORM, DL_LAYER_DROPOUT, DL_LAYER_FLATTEN, DL_LAYER_EMBEDDING,
    DL_LAYER_RELU, DL_LAYER_TANH, DL_LAYER_SIGMOID, DL_LAYER_SOFTMAX,
    DL_LAYER_ADD, DL_LAYER_SUB, DL_LAYER_MUL, DL_LAYER_CONCAT, DL_LAYER_IDENTITY,
    DL_LAYER_RESHAPE, DL_LAYER_GLOBAL_AVGPOOL2D, DL_LAYER_LAYERNORM, DL_LAYER_GELU,
    DL_LAYER_SILU, DL_LAYER_LOG_SOFTMAX, DL_LAYER_TRANSPOSE, DL_LAYER_MATMUL,
    DL_LAYER_REDUCE_MEAN, DL_LAYER_REDUCE_SUM, DL_LAYER_CONV1D, DL_LAYER_MAXPOOL1D,
    DL_LAYER_DIV, DL_LAYER_POW, DL_LAYER_SQRT, DL_LAYER_ERF, DL_LAYER_LEAKY_RELU,
    DL_LAYER_CLIP, DL_LAYER_HARDSIGMOID, DL_LAYER_HARDSWISH, DL_LAYER_SLICE,
    DL_LAYER_CONSTANT, DL_LAYER_SDPA, DL_LAYER_LSTM, DL_LAYER_GRU, DL_LAYER_ATTENTION,
    DL_LAYER_POS_EMBEDDING, DL_LAYER_SEQ_POOL, DL_LAYER_CRF,
    DL_LAYER_COUNT,     /* not a type: how many there are (src/nn/layer_table.c) */
} dl_layer_type;

/* softmax cross-entropy (a class a sample, or a class a position of a
 * sequence output), mean squared error, binary cross-entropy on logits, a
 * linear-chain CRF over a sequence of tag scores, and a language model's
 * next-token cross-entropy over the ids of one of its inputs. */
typedef enum dl_loss {
    DL_LOSS_XENT, DL_LOSS_MSE, DL_LOSS_BCE, DL_LOSS_CRF, DL_LOSS_NEXT_TOKEN
} dl_loss;

/* How a model input's values are typed: ids (integer types) feed only
 * embedding layers and are held as floats, exact below 2^24. BYTES is
 * text that the input's tokenizer turns into a sequence of ids. */
typedef enum dl_in_type {
    DL_IN_FP32, DL_IN_UINT8, DL_IN_INT32, DL_IN_INT64, DL_IN_BYTES
} dl_in_type;

/* A text input's tokenizer: bytes (an id a byte: its value, 1 to 255) or
 * words of a vocabulary file (line k is id k + 2; 0 pads, 1 is a word
 * not in it). A word is a maximal run of ASCII letters and digits,
 * apostrophes and bytes >= 0x80. */
typedef enum dl_tok_kind { DL_TOK_NONE, DL_TOK_BYTES, DL_TOK_WORDS } dl_tok_kind;
#define DL_TOK_PAD 0
#define DL_TOK_UNK 1

typedef struct dl_tokenizer_conf {
    dl_tok_kind kind;
    char       *vocab;                   /* words: the file's path (owned), resolved
                                          * against the model folder */
    bool        lowercase;               /* words: ASCII letters lowercased */
} dl_tokenizer_conf;

/* seq_pool's modes: over the valid positions of each sample. */
enum { DL_SEQ_POOL_MEAN, DL_SEQ_POOL_MAX, DL_SEQ_POOL_SUM, DL_SEQ_POOL_LAST };

/* Most inputs one layer may read (concat, add, ...). */
#define DL_LAYER_MAX_IN 8
typedef enum dl_optim_kind {
    DL_OPTIM_SGD, DL_OPTIM_MOMENTUM, DL_OPTIM_ADAM, DL_OPTIM_ADAGRAD, DL_OPTIM_ADAMW,
} dl_optim_kind;
typedef enum dl_sched_kind { DL_SCHED_NONE, DL_SCHED_STEP, DL_SCHED_COSINE } dl_sched_kind;

/* One layer of model.json. Unused fields are zero. */
typedef struct dl_layer_conf {
    char          name[DL_NAME_MAX];
    dl_layer_type type;
    int64_t       units;                 /* dense */
    int64_t       filters;               /* conv2d */
    int64_t       kh, kw, sh, sw, ph, pw;/* conv2d, pooling; conv1d and maxpool1d:
                                          * kh = sh = 1, ph = 0 */
    int64_t       dh, dw, groups;        /* conv2d, conv1d: dilation and channel
                                          * groups, 1 by default (conv1d: dh = 1) */
    int64_t       num_embeddings, dim;   /* embedding */
    bool          bias;                  /* dense, conv2d */
    float         rate;                  /* dropout */
    float         eps, momentum;         /* batchnorm; eps: layernorm */
    int64_t       axis;                  /* concat, softmax, log_softmax: of one
                                          * sample, negative counts from the end */
    int           nshape;                /* reshape: target per-sample shape, */
    int64_t       shape[DL_MAX_DIMS];    /* at most one -1 */
    bool          approx_tanh;           /* gelu: the tanh approximation */
    int           nperm;                 /* transpose: a permutation of the */
    int64_t       perm[DL_MAX_DIMS];     /* sample's dimensions */
    int           naxes;                 /* reduce_mean, reduce_sum: the axes */
    int64_t       axes[DL_MAX_DIMS];     /* reduced (and dropped) */
    float         exponent;              /* pow */
    float         alpha, beta;           /* leaky_relu: alpha; hardsigmoid:
                                          * max(0, min(1, alpha * x + beta)) */
    float         lo, hi;                /* clip: -INFINITY / INFINITY when absent */
    int64_t       start, end, step;      /* slice (`axis`): Python's semantics, clamped
                                          * to the axis by layer_slice_range */
    int64_t       heads;                 /* sdpa: attention heads */
    float         scale;                 /* sdpa: of the scores; 0: 1/sqrt(head size) */
    bool          causal;                /* sdpa, attention: position i attends to
                                          * 0..i only */
    int64_t       hidden, num_layers;    /* lstm, gru: hidden size, stacked layers */
    bool          bidirectional;         /* lstm, gru */
    bool          ret_seq;               /* lstm, gru: "return": "sequence" (else
                                          * "last": the last valid step's state) */
    int           pool;                  /* seq_pool: DL_SEQ_POOL_* */
    int64_t       padding_idx;           /* embedding: the id whose row is zero and
                                          * gets no gradient; -1 none */
    int64_t       max_length;            /* pos_embedding: positions it has */
    /* Where the layer's inputs come from, resolved at parsing: nsrc >= 1
     * sources (0 for a constant), src[k] >= 0 a layer above it, src[k] < 0
     * model input -1 - src[k]. Without "inputs" the previous layer (or
     * input 0). A constant's per-sample shape is nshape/shape. */
    int           nsrc;
    int           src[DL_LAYER_MAX_IN];
} dl_layer_conf;

/* Training defaults from model.json; command-line flags override them. */
typedef struct dl_hparams {
    int64_t       epochs, batch_size;
    dl_optim_kind optimizer;
    double        lr, momentum, weight_decay;   /* weight_decay: L2, but AdamW's
                                                 * is decoupled; 0 by default */
    bool          nesterov;
    double        beta1, beta2;
    double        eps;                   /* Adam, AdamW, Adagrad; 0: the optimizer's
                                          * default (1e-8, Adagrad 1e-10) */
    double        clip_norm;             /* > 0: the gradients' global L2 norm
                                          * is clipped to it; 0: off */
    dl_sched_kind schedule;
    double        warmup_epochs;         /* linear warm-up: lr * (step+1) / warm-up steps */
    int64_t       step_epochs;           /* step schedule: every N epochs */
    double        gamma;                 /* step schedule: factor */
    uint64_t      seed;
} dl_hparams;

/* Input scaling: x = (raw * scale - mean) / std. Plain struct. */
typedef struct dl_scaling {
    float scale;
    float mean;
    float std;
} dl_scaling;

/* One model input of model.json ("inputs" list, or the "input" object).
 *
 * A sequence input (max_length > 0: a first dimension of -1, or BYTES
 * text) has shape[0] = max_length, its time axis. A sample of it travels
 * packed, everywhere a sample is a row of floats (datasets, requests,
 * dl_model_forward): its length, then max_length * (dim / max_length)
 * values, those past the length zero: 1 + dim floats. */
typedef struct dl_input_conf {
    char        name[DL_NAME_MAX];
    int         ndim;
    int64_t     shape[DL_MAX_DIMS];      /* per sample */
    int64_t     dim;                     /* product of shape */
    dl_in_type  dtype;
    dl_scaling  sc;                      /* FP32 only; ids are not scaled */
    int64_t     max_length;              /* > 0: a sequence input */
    dl_tokenizer_conf tok;               /* BYTES */
} dl_input_conf;

/* Floats of a packed sample of input ic (its length first for a
 * sequence). */
static inline int64_t dl_input_width(const dl_input_conf *ic)
{
    return ic->dim + (ic->max_length > 0);
}

/* One model output ("outputs" list, or "output" + "loss": the last layer). */
typedef struct dl_output_conf {
    char        name[DL_NAME_MAX];
    int         from;                    /* layer index */
    dl_loss     loss;
    float       weight;                  /* in the summed loss; default 1 */
    int         nlabels;
    char      **labels;                  /* owned; may be 0 labels */
    int64_t     dim;                     /* values per sample */
    int64_t     tcols;                   /* target columns in CSV data: 1 for
                                          * softmax cross-entropy (the class),
                                          * the max_length for a per-token
                                          * output (a class a position, -1 past
                                          * the length), 0 for next_token,
                                          * else dim */
    int         of;                      /* next_token: the input it predicts */
    int64_t     max_length;              /* > 0: a per-token output [T, C] of a
                                          * sequence of this many positions */
    int64_t     served;                  /* values a sample as served: dim, or
                                          * for a crf its path, max_length tags */
} dl_output_conf;

/* A parsed, validated model.json. Plain struct, read-only after parsing.
 * The single-input fields (input_name .. std) mirror inputs[0], and loss,
 * output_name, nlabels and labels mirror outputs[0]: callers that know one
 * input and one output read those. */
typedef struct dl_model_conf {
    char           name[DL_NAME_MAX];
    char          *json;                 /* the file's text (owned) */
    char           input_name[DL_NAME_MAX];
    int            in_ndim;
    int64_t        in_shape[DL_MAX_DIMS];/* per sample, e.g. {1, 28, 28} */
    float          scale, mean, std;     /* input = (raw * scale - mean) / std */
    int            nlayers;
    dl_layer_conf *layers;               /* owned */
    dl_loss        loss;
    char           output_name[DL_NAME_MAX];
    int            nlabels;
    char         **labels;               /* owned; may be 0 labels */
    dl_hparams     train;
    int            ninputs, noutputs;    /* >= 1 each */
    dl_input_conf *inputs;               /* owned */
    dl_output_conf *outputs;             /* owned; outputs[0].labels is labels */
    bool           graph;                /* "inputs" or "outputs" given: data
                                          * carries target columns (tcols) */
    int           *tseq;                 /* owned, ninputs + nlayers: the model
                                          * input whose lengths tensor t (input
                                          * k, then layer i's output) carries
                                          * along its first axis; -1: none */
    char          *dir;                  /* the model folder when loaded from a
                                          * file (owned), else NULL */
} dl_model_conf;

/* Parses and validates model.json text. `what` names the source in errors,
 * which read "what: layers[2] (fc1): 'units' must be a positive integer".
 * Also checks the graph: every layer's inputs exist above it, shapes
 * fit, every layer feeds an output, and each output fits its loss and
 * labels. *out is new (dl_model_conf_free). */
dl_status dl_model_conf_parse(const char *text, size_t len, const char *what,
                              dl_model_conf **out, dl_err *err);
/* Reads and parses a model.json file (or MODEL_DIR/model.json if path is a
 * folder). */
dl_status dl_model_conf_load(const char *path, dl_model_conf **out, dl_err *err);
void dl_model_conf_free(dl_model_conf *conf);

/* The per-sample shapes of a parsed model.json's tensors, as its checks
 * infer them: nd[t] and d[t] for t < ninputs the model input t, for
 * t = ninputs + i the output of layer i (room for ninputs + nlayers
 * entries each). For exporters and tools that map layers one by one. */
dl_status dl_model_conf_shapes(const dl_model_conf *conf, int *nd,
                               int64_t (*d)[DL_MAX_DIMS], dl_err *err);

/* True when s[0..len) is a valid model name: 1 to DL_NAME_MAX - 1 bytes of
 * [A-Za-z0-9._-], not starting with '.'. The one rule for model names in
 * URLs, Kafka records, Redis keys and announcements. */
bool dl_model_name_valid(const char *s, size_t len);

/* A layer type's name in model.json ("dense"), or "?" out of range. */
const char *dl_layer_type_name(dl_layer_type t);

/* The layer type called name in model.json into *out; false if none is. */
bool dl_layer_type_of(const char *name, dl_layer_type *out);

/* conv2d, maxpool2d or avgpool2d: the layers a convolution engine runs. */
bool dl_layer_is_conv_or_pool(dl_layer_type t);

/* ---- tokenizers and packed sequences ---------------------------------- */

/* A text input's tokenizer (dl_tokenizer_conf) with its vocabulary
 * loaded. Read-only once made: threads may share one. */
typedef struct dl_tokenizer dl_tokenizer;

/* Makes the tokenizer tc describes, reading its vocabulary file (a word
 * a line, line k id k + 2; errors name the file and line: an empty line,
 * a word twice, a word that the word rule would split). *out is new. */
dl_status dl_tokenizer_new(const dl_tokenizer_conf *tc, dl_tokenizer **out, dl_err *err);
void dl_tokenizer_free(dl_tokenizer *t);

/* Tokenizes text[0..len) (any bytes; not NUL-terminated) into ids (at
 * most max of them, as floats) and sets *n to how many the text has,
 * which may exceed max: the caller refuses such a text (too long) or
 * keeps the first max. Never fails. */
void dl_tokenize(const dl_tokenizer *t, const char *text, size_t len, float *ids, int64_t max,
                 int64_t *n);

/* The number of ids the tokenizer knows: 256 for bytes, the vocabulary's
 * lines + 2 for words (what an embedding reading it needs). */
int64_t dl_tokenizer_size(const dl_tokenizer *t);

/* Packs one text as a sample of sequence input ic (1 + ic->dim floats:
 * the length, the ids, zeros) into row. DL_ERR_INVALID, naming the
 * input, for a text of no tokens or of more than ic->max_length. */
dl_status dl_seq_pack_text(const dl_input_conf *ic, const dl_tokenizer *t, const char *text,
                           size_t len, float *row, dl_err *err);

/* Packs a sequence of `len` positions of values (len * (ic->dim /
 * ic->max_length) floats) as a sample of input ic into row.
 * DL_ERR_INVALID for len 0 or above ic->max_length. */
dl_status dl_seq_pack(const dl_input_conf *ic, const float *values, int64_t len, float *row,
                      dl_err *err);

/* ---- input scaling --------------------------------------------------- */

/* The input scaling that model.json declares. */
dl_scaling dl_scaling_of(const dl_model_conf *conf);

/* Scales n raw float32 values from src (any alignment: a Kafka record's
 * bytes) into dst (src itself, or an array that does not overlap it):
 * (x * scale - mean) / std, in float. The data loader and the daemon both
 * scale through it, so a sample served over HTTP or Kafka gets
 * bit-identical inputs to one read from a file. Thread-safe. */
void dl_scaling_apply(const dl_scaling *sc, float *dst, const void *src, int64_t n);

/* ---- models ------------------------------------------------------------ */

typedef struct dl_model dl_model;

/* Builds a model on backend be from conf (borrowed: it must outlive the
 * model) and allocates its parameter, gradient and state buffers.
 * Parameters are initialised as PyTorch does, from `seed`. *out is new. */
dl_status dl_model_new(dl_backend *be, const dl_model_conf *conf, uint64_t seed,
                       dl_model **out, dl_err *err);
void dl_model_free(dl_model *m);

const dl_model_conf *dl_model_conf_of(const dl_model *m);
dl_backend *dl_model_backend(const dl_model *m);
/* Features per input sample and outputs per sample: with several inputs
 * (outputs), the sum over them, a sample's inputs (outputs) side by side
 * in model.json's order. */
int64_t dl_model_in_dim(const dl_model *m);
int64_t dl_model_out_dim(const dl_model *m);
/* Values per sample of output k as dl_model_predict_multi serves it, and
 * of all outputs: the output's dim, but a crf's path of max_length tags. */
int64_t dl_model_served_dim(const dl_model *m, int k);
int64_t dl_model_served_out_dim(const dl_model *m);

/* Target columns per sample that dl_model_loss reads for a graph model
 * (conf->graph): the outputs' tcols summed. */
int64_t dl_model_target_dim(const dl_model *m);

/* Per-sample floats of the activation buffers the graph's plans hold: an
 * inference pass, a training pass, backward's gradients, and the sum of
 * every layer output (what one buffer per tensor would take). */
typedef struct dl_act_sizes {
    int64_t infer, train, grads, all;
} dl_act_sizes;
dl_act_sizes dl_model_act_sizes(const dl_model *m);

/* The named inputs and outputs: counts, per-sample sizes, and the index of
 * a name (-1 if none). */
int     dl_model_input_count(const dl_model *m);
int     dl_model_output_count(const dl_model *m);
int64_t dl_model_input_dim(const dl_model *m, int k);
int64_t dl_model_output_dim(const dl_model *m, int k);
int     dl_model_input_index(const dl_model *m, const char *name);
int     dl_model_output_index(const dl_model *m, const char *name);

/* The contiguous buffers (borrowed, backend memory). Gradients have the
 * parameters' layout; state holds running statistics, then the values of
 * constant layers. dl_model_running_state is the running statistics
 * alone (a prefix of the state): what trainers average, while constants
 * are the same on every trainer and stay exact. */
float *dl_model_params(dl_model *m, int64_t *n);
float *dl_model_grads(dl_model *m, int64_t *n);
float *dl_model_state(dl_model *m, int64_t *n);
float *dl_model_running_state(dl_model *m, int64_t *n);

/* Dropout masks derive from the model seed, a stream (distributed
 * trainers use their rank) and a counter that every training forward pass
 * advances; checkpoints save the counter to resume the same masks. */
void dl_model_set_rng(dl_model *m, uint64_t stream, uint64_t counter);
uint64_t dl_model_rng_counter(const dl_model *m);

/* Zeroes the gradient buffer. */
void dl_model_zero_grad(dl_model *m);

/* Runs the layers on x (backend memory, batch * in_dim floats; with
 * several inputs, a sample's inputs side by side, split here). train
 * selects batch statistics and dropout. *out (borrowed until the next
 * call) receives output 0's batch * dl_model_output_dim(m, 0) floats
 * (logits for softmax cross-entropy); dl_model_output gives the others. */
dl_status dl_model_forward(dl_model *m, const float *x, int64_t batch,
                           bool train, const float **out, dl_err *err);

/* dl_model_forward with one buffer an input: xs[k] (backend memory,
 * batch * dl_model_input_dim(m, k) floats; ids as floats). Read the
 * outputs with dl_model_output. */
dl_status dl_model_forward_multi(dl_model *m, const float *const *xs, int64_t batch,
                                 bool train, dl_err *err);

/* Output k of the last successful forward pass (backend memory, batch *
 * dl_model_output_dim(m, k) floats: logits for the classifier losses),
 * borrowed until the next call; NULL when there is none. A pass runs
 * sequences at the batch's longest length: a per-token output holds
 * dl_model_output_steps(m, k) positions a sample, not max_length. */
const float *dl_model_output(const dl_model *m, int k);

/* Loss of the last forward pass. A graph model (conf->graph) reads
 * `targets` (host, batch * dl_model_target_dim floats: each output's
 * columns in order, a class index for softmax cross-entropy, else one
 * value a unit) and ignores labels; the loss is the outputs' losses
 * summed with their weights, *correct output 0's count (argmax, or every
 * unit on the right side for binary cross-entropy). Otherwise labels (host, batch ints) for
 * cross-entropy; for MSE, targets are one-hot labels unless `targets`
 * (host, batch * out_dim) is given. Returns in *loss_sum the loss summed
 * over the batch's samples (for MSE a sample's loss is the mean over its
 * outputs), in *correct the number of correct argmax predictions, and when want_grad is set
 * stores d(loss * grad_scale)/d(out) for dl_model_backward. grad_scale is
 * usually 1 / batch (mean loss). */
dl_status dl_model_loss(dl_model *m, const int32_t *labels, const float *targets,
                        float grad_scale, bool want_grad, double *loss_sum,
                        int64_t *correct, dl_err *err);

/* Figures of output k in the last dl_model_loss: its loss summed over the
 * samples, correct predictions, and (MSE) summed squared errors. */
void dl_model_output_stats(const dl_model *m, int k, double *loss_sum, int64_t *correct,
                           double *sq_sum);

/* How many predictions output k's `correct` of the last dl_model_loss
 * counts among: the batch's samples, or for a per-token output its
 * labelled tokens (next_token: each position but a sample's last). */
int64_t dl_model_output_judged(const dl_model *m, int k);

/* Positions a sample of per-token output k holds after the last forward
 * pass (the batch's longest length), 0 for another output. */
int64_t dl_model_output_steps(const dl_model *m, int k);

/* The lengths (host, batch of them) of output k's samples in the last
 * forward pass when it is a per-token output, else NULL. */
const int32_t *dl_model_output_lengths(const dl_model *m, int k);

/* Instead of a loss: sets the gradient of each output k to g[k] (backend
 * memory, batch * dl_model_output_dim(m, k)) for dl_model_backward, after
 * a training forward pass. */
dl_status dl_model_set_output_grads(dl_model *m, const float *const *g, dl_err *err);

/* Whether backward also computes the gradients of the FP32 model inputs
 * (off by default); then dl_model_input_grad(m, k) gives input k's after
 * a backward pass (backend memory, borrowed until the next pass), NULL
 * for an id input or when off. A sequence input's gradient has its
 * positions only (ic->dim floats a sample, no length), zeros past each
 * sample's length. */
dl_status dl_model_set_input_grads(dl_model *m, bool on, dl_err *err);
const float *dl_model_input_grad(const dl_model *m, int k);

/* Backpropagates the stored loss gradient through the last forward pass,
 * which must have been a training pass; accumulates into the gradient
 * buffer. */
dl_status dl_model_backward(dl_model *m, dl_err *err);

/* Layers of the model, and where layer i's gradients lie in the gradient
 * buffer (dl_model_grads): [*begin, *end), empty for a layer without
 * trainable parameters. Parameters (and gradients) are laid out layer
 * after layer, in model.json's order, so layer i's range starts where
 * layer i-1's ends and the ranges tile [0, nparams). */
int  dl_model_layer_count(const dl_model *m);
void dl_model_grad_range(const dl_model *m, int layer, int64_t *begin, int64_t *end);

/* Called by dl_model_backward_hooked after each layer's backward (last
 * layer first, every layer, empty ranges included) with that layer's
 * gradient range [begin, end), as dl_model_grad_range gives it: those
 * gradients are final for this pass and, since backward runs from the
 * last layer to the first, so is all of [begin, nparams). The values are
 * in memory at once on a host backend (device -1); a backend that queues
 * work (CUDA) has them once it is synced. A status other than DL_OK
 * (with err filled) stops the pass and is returned. */
typedef dl_status (*dl_grad_hook)(void *ctx, int layer, int64_t begin, int64_t end,
                                  dl_err *err);

/* dl_model_backward, calling fn(ctx, ...) after each layer (fn may be
 * NULL): for callers that start work on the finished gradients while the
 * earlier layers' backward runs (gradient allreduce in buckets). */
dl_status dl_model_backward_hooked(dl_model *m, dl_grad_hook fn, void *ctx,
                                   dl_err *err);

/* Inference on host data: x (n * in_dim) to out (n * out_dim), in chunks
 * of at most `batch`. For softmax cross-entropy models the outputs are
 * class probabilities (softmax of the logits). */
dl_status dl_model_predict(dl_model *m, const float *x, int64_t n, int64_t batch,
                           float *out, dl_err *err);

/* dl_model_predict with one host array an input (xs[k]: n *
 * dl_model_input_dim(m, k)) and an output (outs[k]: n *
 * dl_model_served_dim(m, k)), as served: softmax for softmax
 * cross-entropy (a row a position for per-token outputs and next_token),
 * sigmoid for binary cross-entropy, values for MSE, a crf's Viterbi path
 * (tag indices, -1 past the length). dl_model_predict's rows hold the
 * outputs as served side by side (dl_model_served_out_dim). */
dl_status dl_model_predict_multi(dl_model *m, const float *const *xs, int64_t n,
                                 int64_t batch, float *const *outs, dl_err *err);

/* Writes the weights as safetensors with PyTorch names and layouts, and
 * metadata "format" = "pt", "dlserve.model" = the model.json text and
 * "dlserve.training" = training_json (may be NULL). Atomic. */
dl_status dl_model_save(dl_model *m, const char *path, const char *training_json,
                        dl_err *err);

/* Loads weights from safetensors, checking every tensor's name, dtype and
 * shape against the model; extra tensors are refused except PyTorch's
 * "<bn>.num_batches_tracked". On error the model's weights are unchanged. */
dl_status dl_model_load(dl_model *m, const char *path, dl_err *err);

/* Declares that m only serves from now on: its weights stay as they are
 * until dl_model_free, so the backend may keep them in its own layout
 * (oneDNN's reordered convolution weights, not redone every pass).
 * Backward passes and loading weights are refused afterwards, and the
 * caller writes no parameter. */
void dl_model_fix_weights(dl_model *m);

/* Batch-invariant inference (off at dl_model_new): each sample of a
 * forward pass that does not train gives the same bits whatever the batch
 * it runs in, alone or beside any others, at any batch size. The dense
 * layers (and the attention layer's projections) take the backend's
 * row-exact GEMM (the thin kernel on the CPU; else a row at a time),
 * convolutions and pooling one sample at a time;
 * every other layer computes each sample by itself anyway. Bits may
 * still differ between thread counts, CPUs and backends. */
void dl_model_set_batch_invariant(dl_model *m, bool on);
bool dl_model_batch_invariant(const dl_model *m);
/* The default of [batching] batch_invariant and of --eval, --predict and
 * --bench (src/serve/conf.c writes it as text: keep both alike). */
#define DL_BATCH_INVARIANT_DEFAULT false

/* Number of named tensors and, for i in [0, n), the name, shape and data
 * (borrowed) of tensor i, in file order. */
int dl_model_tensor_count(const dl_model *m);
void dl_model_tensor_at(const dl_model *m, int i, const char **name, int *ndim,
                        const int64_t **shape, float **data);
/* Index of the tensor named `name` (e.g. "fc1.weight"), or -1. */
int dl_model_tensor_index(const dl_model *m, const char *name);

/* ---- optimizers and schedules -------------------------------------- */

typedef struct dl_optim dl_optim;

/* An optimizer over a parameter buffer of n floats, with hyperparameters
 * from hp. *out is new. */
dl_status dl_optim_new(dl_backend *be, const dl_hparams *hp, int64_t n,
                       dl_optim **out, dl_err *err);
void dl_optim_free(dl_optim *o);

/* One update p -= f(g) with learning rate lr. */
void dl_optim_step(dl_optim *o, float *params, const float *grads, double lr);

/* The same update written into delta (delta -= f(g)) instead of the
 * parameters, which it reads for weight decay only (added into grads,
 * which it therefore changes; AdamW's goes into delta). For parameter
 * averaging: an update kept apart keeps its own precision, where one
 * added to the parameters is rounded to theirs on every step and on
 * every trainer. */
void dl_optim_step_delta(dl_optim *o, float *delta, const float *params, float *grads,
                         double lr);

/* Optimizer state (momentum / Adam moments / Adagrad sums), borrowed;
 * *n may be 0. */
float *dl_optim_state(dl_optim *o, int64_t *n);
int64_t dl_optim_steps(const dl_optim *o);
/* Sets the step counter (resuming from a checkpoint). */
void dl_optim_set_steps(dl_optim *o, int64_t t);

/* Learning rate at global step `step` (0-based) of a run with
 * steps_per_epoch steps an epoch and `total` steps in all. */
double dl_lr_at(const dl_hparams *hp, int64_t step, int64_t steps_per_epoch,
                int64_t total);

const char *dl_optim_name(dl_optim_kind k);

/* torch.nn.utils.clip_grad_norm_ over n gradients (backend memory): when
 * their global L2 norm exceeds max_norm, scales them all by max_norm /
 * (norm + 1e-6). Returns the norm before clipping. */
double dl_clip_grad_norm(dl_backend *be, float *grads, int64_t n, double max_norm);

/* ---- safetensors files ---------------------------------------------- */

/* Reading and writing the safetensors format: an 8-byte little-endian
 * header length N, N bytes of JSON {"name": {"dtype", "shape",
 * "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "string
 * value"}}, then the data buffer. Model weights (dl_model_save/_load) and
 * training checkpoints use it. A dl_st_file is read-only once loaded:
 * several threads may read it; dl_st_free needs the only reference. */

#define DL_ST_MAX_DIMS 8
#define DL_ST_MAX_HEADER (100u * 1024u * 1024u)

typedef enum dl_st_dtype {
    DL_ST_F32, DL_ST_F16, DL_ST_BF16, DL_ST_F64,
    DL_ST_I64, DL_ST_I32, DL_ST_I16, DL_ST_I8, DL_ST_U8, DL_ST_BOOL,
} dl_st_dtype;

/* One tensor: in a loaded file, data points into the file's buffer
 * (borrowed from the dl_st_file); for writing, the caller's F32 data. */
typedef struct dl_st_tensor {
    const char  *name;
    dl_st_dtype  dtype;
    int          ndim;
    int64_t      shape[DL_ST_MAX_DIMS];
    const void  *data;
    size_t       nbytes;
} dl_st_tensor;

typedef struct dl_st_file dl_st_file;

/* Writes tensors (their data in the given order) and metadata key/value
 * string pairs (meta[2i] = key, meta[2i+1] = value, nmeta pairs) atomically
 * to path.
 * Names must be unique and not "__metadata__". */
dl_status dl_st_write(const char *path, const dl_st_tensor *tensors, int n,
                      const char *const *meta, int nmeta, dl_err *err);

/* Loads and validates a whole file: header length within the file and
 * below DL_ST_MAX_HEADER, header is a JSON object, every entry has a known
 * dtype, a shape of non-negative dims, data_offsets [begin, end] with
 * begin <= end inside the data buffer and end - begin equal to the shape's
 * byte size, no two tensors overlapping, no unused bytes in the buffer,
 * metadata values are strings. Errors name the file and the problem.
 * *out is new (dl_st_free). */
dl_status dl_st_load(const char *path, dl_st_file **out, dl_err *err);

/* Same, from memory (the bytes are copied). `what` names the source in
 * errors. */
dl_status dl_st_parse(const void *bytes, size_t len, const char *what,
                      dl_st_file **out, dl_err *err);

int                 dl_st_count(const dl_st_file *f);
const dl_st_tensor *dl_st_at(const dl_st_file *f, int i);       /* borrowed */
const dl_st_tensor *dl_st_find(const dl_st_file *f, const char *name);
/* Metadata value for key, or NULL. Borrowed. */
const char         *dl_st_meta(const dl_st_file *f, const char *key);
const char         *dl_st_dtype_name(dl_st_dtype dt);
void                dl_st_free(dl_st_file *f);

/* Model weights (dl_model_load) from tensors in memory (ts, n of them; `what` names
 * their source in errors), with the same checks. */
dl_status dl_model_set_weights(dl_model *m, const dl_st_tensor *ts, int n, const char *what,
                               dl_err *err);

/* ---- model repository: version folders and checkpoints --------------- */

/* A model folder holds model.json, numbered version folders (1/, 2/, ...)
 * holding model.safetensors and, while it trains, checkpoint files
 * checkpoints/step-<N>.safetensors. A version is a folder name of decimal digits only (at most
 * 18), > 0: "v2", "+3", "0" and "latest" are not versions. These functions
 * read the folder as it is when called and keep no state: thread-safe. A
 * folder that cannot be read has no versions and no checkpoints. */

/* The newest `max` versions in model_dir into out (room for max), newest
 * first; returns how many. With need_weights only folders holding a regular
 * file model.safetensors count; otherwise every entry with a version name. */
int dl_repo_versions(const char *model_dir, bool need_weights, int64_t *out, int max);

/* dl_repo_versions of the folders the daemon serves: holding a regular
 * file model.safetensors, or model.onnx (translated at load). */
int dl_repo_served_versions(const char *model_dir, int64_t *out, int max);

/* The newest version holding a model.safetensors, or 0 if none. */
int64_t dl_repo_latest(const char *model_dir);

/* The number for a new version: one past the newest version name, weights
 * or not (a version being written counts), or 1 in an empty folder. */
int64_t dl_repo_next(const char *model_dir);

/* The versions that a version policy selects among `have` (nhave versions,
 * newest first, as dl_repo_versions lists them), into out (room for nhave),
 * newest first; returns how many. "versions:1,3": those listed that are
 * present; "latest:N": the N newest; "latest" (or anything else): the
 * newest. The syntax is checked where the configuration is read. */
int dl_repo_select(const char *policy, const int64_t *have, int nhave, int64_t *out);

/* The steps of the checkpoints in MODEL_DIR/checkpoints (files named
 * step-<digits>.safetensors): the newest `max` into out (room for max),
 * newest first; returns how many. */
int dl_repo_checkpoints(const char *model_dir, int64_t *out, int max);

/* Writes MODEL_DIR/checkpoints/step-<step, 9 digits>.safetensors into out
 * (len bytes, truncated to fit). */
void dl_repo_checkpoint_path(const char *model_dir, int64_t step, char *out, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* DL_NN_H */
