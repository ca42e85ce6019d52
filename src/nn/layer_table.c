/* layer_table.c: the layer types, a row each: the name model.json gives
 * it, how many inputs it takes, its ops, its shape rule, the keys it
 * reads and whether it is native only (no ONNX operator imports as it).
 * Everything nn says about a type by type reads this table: the config
 * parser, dl_layer_type_name, layer_arity, layer_ops_for, layer_shape.
 * Rows are written with designated indices, so none can be misplaced; the
 * assertion below fails the build when the last type has no row, and
 * tests/unit/test_layer_table.c when another one has none (a NULL name).
 * docs/architecture.md ("Adding a layer") lists what else a new type
 * touches. */
#include "nn/layer.h"

#define CONV_KEYS "filters, kernel_size, stride, padding, dilation, groups, bias"
#define POOL_KEYS "kernel_size, stride, padding"
#define RNN_KEYS "hidden, layers, bidirectional, return, bias"

/* A row, imported from ONNX or native only. */
#define ROW(name, arity, ops, shape, keys)    { name, arity, ops, shape, keys, false }
#define NATIVE(name, arity, ops, shape, keys) { name, arity, ops, shape, keys, true }

const layer_type_info layer_table[] = {
    [DL_LAYER_DENSE] = ROW("dense", 1, &layer_dense_ops, layer_shape_dense, "units, bias"),
    [DL_LAYER_CONV2D] = ROW("conv2d", 1, &layer_conv2d_ops, layer_shape_conv2d, CONV_KEYS),
    [DL_LAYER_MAXPOOL2D] = ROW("maxpool2d", 1, &layer_maxpool_ops, layer_shape_pool2d,
                             POOL_KEYS),
    [DL_LAYER_AVGPOOL2D] = ROW("avgpool2d", 1, &layer_avgpool_ops, layer_shape_pool2d,
                             POOL_KEYS),
    [DL_LAYER_BATCHNORM] = ROW("batchnorm", 1, &layer_batchnorm_ops, layer_shape_batchnorm,
                             "eps, momentum"),
    /* ONNX's Dropout is elided at import: an inference graph has none. */
    [DL_LAYER_DROPOUT] = NATIVE("dropout", 1, &layer_dropout_ops, layer_shape_same, "rate"),
    [DL_LAYER_FLATTEN] = ROW("flatten", 1, &layer_flatten_ops, layer_shape_flatten, ""),
    [DL_LAYER_EMBEDDING] = ROW("embedding", 1, &layer_embedding_ops, layer_shape_embedding,
                             "num_embeddings, dim, padding_idx"),
    [DL_LAYER_RELU] = ROW("relu", 1, &layer_act_ops, layer_shape_same, ""),
    [DL_LAYER_TANH] = ROW("tanh", 1, &layer_act_ops, layer_shape_same, ""),
    [DL_LAYER_SIGMOID] = ROW("sigmoid", 1, &layer_act_ops, layer_shape_same, ""),
    [DL_LAYER_SOFTMAX] = ROW("softmax", 1, &layer_softmax_ops, layer_shape_axis, "axis"),
    [DL_LAYER_ADD] = ROW("add", -1, &layer_binary_ops, layer_shape_broadcast, ""),
    [DL_LAYER_SUB] = ROW("sub", 2, &layer_binary_ops, layer_shape_broadcast, ""),
    [DL_LAYER_MUL] = ROW("mul", -1, &layer_binary_ops, layer_shape_broadcast, ""),
    [DL_LAYER_CONCAT] = ROW("concat", -1, &layer_concat_ops, layer_shape_concat, "axis"),
    [DL_LAYER_IDENTITY] = ROW("identity", 1, &layer_flatten_ops, layer_shape_same, ""),
    [DL_LAYER_RESHAPE] = ROW("reshape", 1, &layer_flatten_ops, layer_shape_reshape, "shape"),
    [DL_LAYER_GLOBAL_AVGPOOL2D] = ROW("global_avgpool2d", 1, &layer_gap_ops, layer_shape_gap,
                                    ""),
    [DL_LAYER_LAYERNORM] = ROW("layernorm", 1, &layer_layernorm_ops, layer_shape_same, "eps"),
    /* ONNX's Gelu is opset 20: PyTorch writes Div, Erf, Add, Mul, Mul,
     * which import as one (onnx_ops.c, gelu_of). */
    [DL_LAYER_GELU] = ROW("gelu", 1, &layer_elem_ops, layer_shape_same, "approximate"),
    /* ONNX has no SiLU: Mul(x, Sigmoid(x)) imports as one. */
    [DL_LAYER_SILU] = ROW("silu", 1, &layer_elem_ops, layer_shape_same, ""),
    [DL_LAYER_LOG_SOFTMAX] = ROW("log_softmax", 1, &layer_log_softmax_ops, layer_shape_axis,
                               "axis"),
    [DL_LAYER_TRANSPOSE] = ROW("transpose", 1, &layer_transpose_ops, layer_shape_transpose,
                             "perm"),
    [DL_LAYER_MATMUL] = ROW("matmul", 2, &layer_matmul_ops, layer_shape_matmul, ""),
    [DL_LAYER_REDUCE_MEAN] = ROW("reduce_mean", 1, &layer_reduce_ops, layer_shape_reduce,
                               "axis"),
    [DL_LAYER_REDUCE_SUM] = ROW("reduce_sum", 1, &layer_reduce_ops, layer_shape_reduce,
                              "axis"),
    [DL_LAYER_CONV1D] = ROW("conv1d", 1, &layer_conv1d_ops, layer_shape_window1d, CONV_KEYS),
    [DL_LAYER_MAXPOOL1D] = ROW("maxpool1d", 1, &layer_maxpool_ops, layer_shape_window1d,
                             POOL_KEYS),
    [DL_LAYER_DIV] = ROW("div", 2, &layer_binary_ops, layer_shape_broadcast, ""),
    [DL_LAYER_POW] = ROW("pow", 1, &layer_elem_ops, layer_shape_same, "exponent"),
    [DL_LAYER_SQRT] = ROW("sqrt", 1, &layer_elem_ops, layer_shape_same, ""),
    [DL_LAYER_ERF] = ROW("erf", 1, &layer_elem_ops, layer_shape_same, ""),
    [DL_LAYER_LEAKY_RELU] = ROW("leaky_relu", 1, &layer_elem_ops, layer_shape_same, "alpha"),
    [DL_LAYER_CLIP] = ROW("clip", 1, &layer_elem_ops, layer_shape_same, "min, max"),
    [DL_LAYER_HARDSIGMOID] = ROW("hardsigmoid", 1, &layer_elem_ops, layer_shape_same,
                               "alpha, beta"),
    [DL_LAYER_HARDSWISH] = ROW("hardswish", 1, &layer_elem_ops, layer_shape_same, ""),
    [DL_LAYER_SLICE] = ROW("slice", 1, &layer_slice_ops, layer_shape_slice,
                         "axis, start, end, step"),
    /* Reads no input: its value is a tensor of its own ("value"). */
    [DL_LAYER_CONSTANT] = ROW("constant", 0, &layer_constant_ops, layer_shape_constant,
                            "shape"),
    /* Imported from the operators PyTorch writes for nn.MultiheadAttention's
     * self-attention (onnx_ops.c, fuse_attention). */
    [DL_LAYER_SDPA] = ROW("sdpa", 1, &layer_sdpa_ops, layer_shape_sdpa,
                        "heads, scale, causal"),
    /* ONNX's LSTM and GRU (onnx_seq.c), their gates reordered */
    [DL_LAYER_LSTM] = ROW("lstm", 1, &layer_rnn_ops, layer_shape_rnn, RNN_KEYS),
    [DL_LAYER_GRU] = ROW("gru", 1, &layer_rnn_ops, layer_shape_rnn, RNN_KEYS),
    /* nn.MultiheadAttention: one input (self-attention) or a query and
     * the keys and values. */
    [DL_LAYER_ATTENTION] = NATIVE("attention", -2, &layer_attention_ops,
                                layer_shape_attention, "heads, causal, bias"),
    /* A sequence plus a constant table of a row a position (onnx_seq.c). */
    [DL_LAYER_POS_EMBEDDING] = ROW("pos_embedding", 1, &layer_pos_embedding_ops,
                                 layer_shape_positions, "max_length"),
    /* ReduceMean, ReduceSum, ReduceMax over a sequence's time axis, and a
     * masked sum divided by the lengths (onnx_seq.c). */
    [DL_LAYER_SEQ_POOL] = ROW("seq_pool", 1, &layer_seq_pool_ops, layer_shape_seq_pool,
                            "mode"),
    /* Made by an output's "loss": "crf" (its transitions), not written. */
    [DL_LAYER_CRF] = NATIVE("crf", 1, &layer_crf_ops, layer_shape_positions, ""),
};

_Static_assert(sizeof(layer_table) / sizeof(layer_table[0]) == DL_LAYER_COUNT,
               "layer_table needs a row per dl_layer_type");
