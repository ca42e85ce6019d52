#!/usr/bin/python3
"""make_graph_fixtures.py: writes the reference cases dlserve's graph
engine is tested against, computed by PyTorch (torch_graph.py).

    /usr/bin/python3 tests/py/make_graph_fixtures.py [--out DIR] [--only NAME...]
    /usr/bin/python3 tests/py/make_graph_fixtures.py --verify [--out DIR]

DIR defaults to tests/unit/fixtures/graph.  Every case is a folder:

- pass cases (one forward and backward pass, float64, stored F32):
  model.json, init.safetensors (the weights), inputs.safetensors (every
  model input by name, F32 or I64 for an integer input, "len.<input>"
  (I64 [batch]) per sequence input, and
  "grad.<output>" per output) and expected.safetensors (what
  `torch_graph.py grads` writes: "output.<output>", "grad.<input>" per
  float input, "grad.<parameter>", "state.<buffer>"; the mode, train or
  eval, is in its metadata as "mode").
- training cases (names starting "train_"): model.json, init.safetensors,
  data.csv, losses.csv and final.safetensors, what `torch_graph.py train`
  gives for the steps, batch and learning rate in final.safetensors'
  metadata (float32, as dlserve trains).

Everything is seeded: running it again writes the same files.  --verify
checks the pass cases in DIR without autograd: their outputs by a float64
forward pass and their gradients by a central difference along a random
direction of every float input and parameter.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_graph as tg  # noqa: E402
import torch_model as tm  # noqa: E402

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "unit", "fixtures", "graph")


def inp(name, *shape, high=None, positive=False, scale=None, max_length=None, lengths=None):
    """A model input; `high` makes it an INT64 input of ids in [0, high),
    `positive` its values uniform in [0.2, 2.2) (sqrt, pow 0.5, divisors),
    `scale` multiplies its normal values (to reach the outer pieces of
    hardsigmoid and hardswish); `max_length` makes it a sequence (shape
    [-1, ...]) whose samples have the `lengths` given (zeros past them,
    as a packed sample holds)."""
    i = {"name": name, "shape": list(shape)}
    if max_length is not None:
        i["max_length"] = max_length
        i["lengths"] = list(lengths)
    if high is not None:
        i["datatype"] = "INT64"
        i["high"] = high
    if positive:
        i["positive"] = True
    if scale is not None:
        i["scale"] = scale
    return i


def one(name, inputs, layers, mode="train", outputs=None, batch=3, ties=None, seed=None):
    """A pass case; without outputs, the last layer is the one output.
    `ties` (seq_pool max): (pos_embedding layer, ids input, p, q) makes
    positions p and q of every sample long enough hold the same values,
    the largest (the same id there, and rows p and q of the positions'
    weight equal and large), so that the maximum ties. `seed`: the case's
    own, rather than its place in the lists."""
    return {"name": name, "inputs": inputs, "layers": layers, "mode": mode,
            "outputs": outputs, "batch": batch, "ties": ties, "seed": seed}


def L(name, kind, inputs=None, **conf):
    layer = {"name": name, "type": kind}
    if inputs is not None:
        layer["inputs"] = inputs
    layer.update(conf)
    return layer


AB = ["a", "b"]

PASS_CASES = [
    # broadcasting arithmetic
    one("add_broadcast", [inp("a", 3, 1, 5), inp("b", 4, 5)], [L("y", "add", AB)]),
    one("add_three", [inp("a", 2, 3), inp("b", 3), inp("c", 1)],
        [L("y", "add", ["a", "b", "c"])]),
    one("sub_broadcast", [inp("a", 4, 1), inp("b", 3)], [L("y", "sub", AB)]),
    one("mul_broadcast", [inp("a", 2, 3, 4), inp("b", 3, 1)], [L("y", "mul", AB)]),
    one("mul_gate", [inp("x", 6)],
        [L("gate", "dense", ["x"], units=6), L("sig", "sigmoid"),
         L("y", "mul", ["x", "sig"])]),
    # concat
    one("concat_axis0", [inp("a", 2, 3), inp("b", 4, 3)], [L("y", "concat", AB, axis=0)]),
    one("concat_axis1", [inp("a", 2, 3), inp("b", 2, 4), inp("c", 2, 1)],
        [L("y", "concat", ["a", "b", "c"], axis=1)]),
    one("concat_neg_axis", [inp("a", 3, 2), inp("b", 3, 5)],
        [L("y", "concat", AB, axis=-1)]),
    # matmul
    one("matmul_2d", [inp("a", 3, 4), inp("b", 4, 2)], [L("y", "matmul", AB)]),
    one("matmul_broadcast", [inp("a", 2, 3, 4), inp("b", 4, 5)], [L("y", "matmul", AB)]),
    one("attention", [inp("x", 5, 4)],
        [L("q", "dense", ["x"], units=4), L("k", "dense", ["x"], units=4),
         L("v", "dense", ["x"], units=3), L("kt", "transpose", ["k"], perm=[1, 0]),
         L("scores", "matmul", ["q", "kt"]), L("attn", "softmax", axis=-1),
         L("y", "matmul", ["attn", "v"])]),
    one("sdpa", [inp("x", 5, 12)], [L("y", "sdpa", heads=2)]),
    one("sdpa_causal", [inp("x", 6, 6)],
        [L("p", "dense", units=9), L("y", "sdpa", ["p"], heads=3, causal=True, scale=0.8)]),
    # layout
    one("transpose_102", [inp("x", 2, 3, 4)], [L("y", "transpose", perm=[1, 0, 2])]),
    one("transpose_201", [inp("x", 2, 3, 4)], [L("y", "transpose", perm=[2, 0, 1])]),
    one("reshape_neg", [inp("x", 2, 6)], [L("y", "reshape", shape=[3, -1])]),
    one("reshape_flat_dense", [inp("x", 4, 3, 2)],
        [L("r", "reshape", shape=[-1]), L("y", "dense", units=3)]),
    # softmax family
    one("softmax_axis0", [inp("x", 4, 3)], [L("y", "softmax", axis=0)]),
    one("softmax_axis1_3d", [inp("x", 2, 3, 5)], [L("y", "softmax", axis=1)]),
    one("softmax_default", [inp("x", 5)], [L("y", "softmax")]),
    one("log_softmax_last", [inp("x", 3, 5)], [L("y", "log_softmax", axis=-1)]),
    one("log_softmax_axis0", [inp("x", 4, 3)], [L("y", "log_softmax", axis=0)]),
    # normalisation and activations
    one("layernorm_7x5", [inp("x", 7, 5)], [L("y", "layernorm")]),
    one("layernorm_eps", [inp("x", 6)], [L("y", "layernorm", eps=1e-3)]),
    one("gelu_erf", [inp("x", 3, 5)], [L("y", "gelu")]),
    one("gelu_tanh", [inp("x", 3, 5)], [L("y", "gelu", approximate="tanh")]),
    one("silu", [inp("x", 3, 5)], [L("y", "silu")]),
    one("identity", [inp("x", 2, 3)], [L("i", "identity"), L("y", "dense", units=2)]),
    # reductions and pooling
    one("global_avgpool2d", [inp("x", 3, 5, 7)], [L("y", "global_avgpool2d")]),
    one("reduce_mean_axis1", [inp("x", 3, 4, 5)], [L("y", "reduce_mean", axis=1)]),
    one("reduce_sum_axis0", [inp("x", 4, 3)], [L("y", "reduce_sum", axis=0)]),
    one("reduce_mean_axes", [inp("x", 2, 3, 4)], [L("y", "reduce_mean", axis=[0, 2])]),
    one("reduce_sum_neg", [inp("x", 2, 3, 4)], [L("y", "reduce_sum", axis=-1)]),
    one("conv1d", [inp("x", 3, 11)],
        [L("y", "conv1d", filters=4, kernel_size=3, stride=2, padding=1)]),
    one("conv1d_nobias", [inp("x", 2, 7)],
        [L("y", "conv1d", filters=3, kernel_size=2, bias=False)]),
    one("maxpool1d", [inp("x", 2, 9)], [L("y", "maxpool1d", kernel_size=3, stride=2)]),
    one("maxpool1d_pad", [inp("x", 2, 8)],
        [L("y", "maxpool1d", kernel_size=3, stride=1, padding=1)]),
    # embedding on integer inputs
    one("embedding_ids", [inp("ids", 4, high=10)], [L("y", "embedding", num_embeddings=10, dim=6)]),
    one("embedding_2d_ids", [inp("ids", 2, 3, high=7)],
        [L("y", "embedding", num_embeddings=7, dim=3)]),
    # today's layers, as graphs
    one("dense_3d", [inp("x", 3, 5)], [L("y", "dense", units=4)]),
    one("cnn_chain", [inp("x", 2, 8, 8)],
        [L("conv", "conv2d", filters=3, kernel_size=3, padding=1), L("bn", "batchnorm"),
         L("relu", "relu"), L("pool", "maxpool2d", kernel_size=2),
         L("avg", "avgpool2d", kernel_size=2, stride=1, padding=1),
         L("flat", "flatten"), L("y", "dense", units=5)]),
    one("batchnorm_1d", [inp("x", 6)],
        [L("bn", "batchnorm", momentum=0.2), L("t", "tanh"), L("y", "dense", units=2)]),
    one("batchnorm_eval", [inp("x", 3, 4, 4)],
        [L("bn", "batchnorm"), L("y", "sigmoid")], mode="eval"),
    one("conv1d_batchnorm", [inp("x", 2, 9)],
        [L("c", "conv1d", filters=3, kernel_size=3), L("bn", "batchnorm"),
         L("p", "maxpool1d", kernel_size=2), L("y", "gelu")]),
    # several inputs and outputs
    one("two_tower", [inp("user", 1, high=20), inp("features", 6)],
        [L("user_emb", "embedding", ["user"], num_embeddings=20, dim=4),
         L("user_flat", "flatten"),
         L("feat_fc", "dense", ["features"], units=4),
         L("joined", "concat", ["user_flat", "feat_fc"], axis=0),
         L("fc1", "dense", units=8), L("relu1", "relu"),
         L("click", "dense", units=1),
         L("rating", "dense", ["relu1"], units=1)],
        outputs=[{"name": "click", "from": "click", "loss": "bce_with_logits"},
                 {"name": "rating", "from": "rating", "loss": "mse", "weight": 0.5}]),
    one("residual_layernorm", [inp("x", 3, 4)],
        [L("fc", "dense", ["x"], units=4), L("act", "gelu"),
         L("res", "add", ["x", "act"]), L("ln", "layernorm"),
         L("pooled", "reduce_mean", axis=0), L("head", "dense", units=2)],
        outputs=[{"name": "head", "from": "head", "loss": "mse"},
                 {"name": "tokens", "from": "ln", "loss": "mse"}]),
]

# The layer types ONNX models need (written after TRAIN_CASES, so that the
# seeds of the cases above stay as they were).
OP_CASES = [
    # div with broadcasting, and constants feeding div, add, matmul, concat
    one("div_broadcast", [inp("a", 3, 1, 5), inp("b", 4, 5, positive=True)],
        [L("y", "div", AB)]),
    one("div_constant", [inp("x", 2, 3)],
        [L("c", "constant", [], shape=[3]), L("y", "div", ["x", "c"])]),
    one("constant_affine", [inp("x", 2, 3)],
        [L("w", "constant", [], shape=[3, 4]), L("b", "constant", [], shape=[4]),
         L("xw", "matmul", ["x", "w"]), L("y", "add", ["xw", "b"])]),
    one("constant_concat_sub", [inp("x", 2, 3)],
        [L("c", "constant", [], shape=[1, 3]), L("cat", "concat", ["c", "x"], axis=0),
         L("y", "sub", ["cat", "c"])]),
    # unary elementwise
    one("pow_2", [inp("x", 3, 5)], [L("y", "pow", exponent=2)]),
    one("pow_half", [inp("x", 3, 5, positive=True)], [L("y", "pow", exponent=0.5)]),
    one("pow_neg", [inp("x", 4, 3, positive=True)], [L("y", "pow", exponent=-1.5)]),
    one("sqrt", [inp("x", 2, 7, positive=True)], [L("y", "sqrt")]),
    one("erf", [inp("x", 3, 5)], [L("y", "erf")]),
    one("leaky_relu", [inp("x", 3, 5)], [L("y", "leaky_relu")]),
    one("leaky_relu_alpha", [inp("x", 7)], [L("y", "leaky_relu", alpha=0.2)]),
    one("clip_min_max", [inp("x", 3, 5)], [L("y", "clip", min=-0.5, max=0.7)]),
    one("clip_min", [inp("x", 3, 5)], [L("y", "clip", min=0.1)]),
    one("clip_max", [inp("x", 3, 5)], [L("y", "clip", max=-0.2)]),
    one("clip_relu6", [inp("x", 4, 5, scale=4.0)], [L("y", "clip", min=0, max=6)]),
    one("hardsigmoid", [inp("x", 4, 5, scale=4.0)], [L("y", "hardsigmoid")]),
    one("hardsigmoid_onnx", [inp("x", 4, 5, scale=4.0)],
        [L("y", "hardsigmoid", alpha=0.2, beta=0.5)]),
    one("hardswish", [inp("x", 4, 5, scale=4.0)], [L("y", "hardswish")]),
    # slice
    one("slice_neg_step2", [inp("x", 3, 10)],
        [L("y", "slice", axis=-1, start=-8, end=9, step=2)]),
    one("slice_axis0", [inp("x", 5, 2, 3)], [L("y", "slice", axis=0, start=1)]),
    one("slice_clamped", [inp("x", 2, 7, 3)],
        [L("y", "slice", axis=1, start=-100, end=100, step=3)]),
    one("slice_mid_dense", [inp("x", 4, 6)],
        [L("s", "slice", axis=1, start=1, end=-1), L("y", "dense", units=3)]),
    # grouped, depthwise and dilated convolution
    one("conv2d_groups", [inp("x", 4, 7, 6)],
        [L("y", "conv2d", filters=6, kernel_size=3, stride=[1, 2], padding=1, groups=2)]),
    one("conv2d_depthwise", [inp("x", 3, 6, 7)],
        [L("y", "conv2d", filters=3, kernel_size=3, padding=1, groups=3, bias=False)]),
    one("conv2d_depthwise_x2", [inp("x", 3, 5, 5)],
        [L("y", "conv2d", filters=6, kernel_size=[3, 2], groups=3)]),
    one("conv2d_dilation", [inp("x", 2, 9, 8)],
        [L("y", "conv2d", filters=3, kernel_size=3, dilation=[2, 1], padding=[2, 1])]),
    one("conv2d_dilated_groups", [inp("x", 4, 9, 9)],
        [L("y", "conv2d", filters=2, kernel_size=3, dilation=3, stride=2, groups=2)]),
    one("conv1d_groups_dilation", [inp("x", 4, 13)],
        [L("y", "conv1d", filters=2, kernel_size=3, dilation=2, stride=2, padding=2,
           groups=2)]),
    one("mobile_block", [inp("x", 4, 6, 6)],
        [L("pw", "conv2d", filters=8, kernel_size=1), L("bn", "batchnorm"),
         L("r6", "clip", min=0, max=6),
         L("dw", "conv2d", filters=8, kernel_size=3, padding=1, groups=8),
         L("hs", "hardswish"), L("gap", "global_avgpool2d"),
         L("gate", "hardsigmoid"), L("y", "leaky_relu", alpha=0.1)]),
]

TRAIN_CASES = [
    {"name": "train_multi", "steps": 6, "batch": 4, "lr": 0.1,
     "model": {
         "name": "train-multi",
         "inputs": [{"name": "ids", "shape": [2], "datatype": "INT64"},
                    {"name": "features", "shape": [5], "datatype": "FP32",
                     "scaling": {"scale": 0.5, "mean": 0.1, "std": 2.0}}],
         "layers": [L("emb", "embedding", ["ids"], num_embeddings=9, dim=3),
                    L("emb_mean", "reduce_mean", axis=0),
                    L("fc", "dense", ["features"], units=3),
                    L("joined", "concat", ["emb_mean", "fc"], axis=0),
                    L("ln", "layernorm"), L("hidden", "dense", units=8), L("act", "silu"),
                    L("cls", "dense", units=3), L("tags", "dense", ["act"], units=2),
                    L("score", "dense", ["act"], units=1)],
         "outputs": [{"name": "class", "from": "cls", "loss": "softmax_cross_entropy",
                      "labels": ["a", "b", "c"]},
                     {"name": "tags", "from": "tags", "loss": "bce_with_logits"},
                     {"name": "score", "from": "score", "loss": "mse", "weight": 0.5}]}},
    {"name": "train_chain_mse", "steps": 5, "batch": 3, "lr": 0.05,
     "model": {
         "name": "train-chain-mse",
         "input": {"name": "input", "shape": [4], "datatype": "FP32"},
         "layers": [L("fc1", "dense", units=6), L("bn", "batchnorm"),
                    L("relu", "relu"), L("fc2", "dense", units=3)],
         "loss": "mse", "output": {"name": "probabilities"}}},
]

BLOCKED = [L("c1", "conv2d", filters=16, kernel_size=3, padding=1, bias=False),
           L("bn1", "batchnorm"), L("r1", "relu"),
           L("c2", "conv2d", filters=16, kernel_size=3, padding=1, bias=False),
           L("bn2", "batchnorm"), L("r2", "relu"),
           L("pool", "global_avgpool2d"), L("y", "dense", units=3)]

# Pass cases seeded after the training cases, so that the cases above keep
# their seeds (and bytes): a residual block, batchnorm and add each
# applying the relu after them; batchnorm between convolutions.
LATE_PASS_CASES = [
    one("residual_relu", [inp("x", 4, 6, 6)],
        [L("conv", "conv2d", filters=4, kernel_size=3, padding=1, bias=False),
         L("bn", "batchnorm"), L("add", "add", ["bn", "x"]), L("relu", "relu"),
         L("pool", "global_avgpool2d"), L("y", "dense", units=3)]),
    one("residual_relu_eval", [inp("x", 4, 6, 6)],
        [L("conv", "conv2d", filters=4, kernel_size=3, padding=1, bias=False),
         L("bn", "batchnorm"), L("relu1", "relu"), L("add", "add", ["relu1", "x"]),
         L("relu", "relu"), L("pool", "global_avgpool2d"), L("y", "dense", units=3)],
        mode="eval"),
    # 16 channels: on AVX-512, conv -> batchnorm -> relu -> conv keeps
    # oneDNN's blocked layout through the batchnorm
    one("blocked_batchnorm", [inp("x", 2, 5, 5)], BLOCKED),
    one("blocked_batchnorm_eval", [inp("x", 2, 5, 5)], BLOCKED, mode="eval"),
    # a tanh folded into sub (a pass of its own after the flat loops)
    one("sub_tanh", [inp("a", 3, 4), inp("b", 3, 4)],
        [L("d", "sub", ["a", "b"]), L("t", "tanh"), L("y", "dense", units=2)]),
]

# Sequence inputs (seeded after the cases above): a batch of lengths
# mixed, 1 and max_length among them.
SEQ_CASES = [
    # attention: nn.MultiheadAttention with key padding; the query's
    # padded positions get no gradient
    one("mha_self_padded", [inp("x", -1, 8, max_length=5, lengths=[5, 1, 3])],
        [L("y", "attention", heads=2)],
        outputs=[{"name": "y", "from": "y", "loss": "softmax_cross_entropy"}]),
    # causal, behind a dense layer (its padded positions hold its bias, not
    # zeros) and before one
    one("mha_causal", [inp("x", -1, 6, max_length=6, lengths=[2, 6, 1])],
        [L("fc", "dense", units=8), L("att", "attention", heads=4, causal=True),
         L("y", "dense", units=3)],
        outputs=[{"name": "y", "from": "y", "loss": "softmax_cross_entropy"}]),
    # cross-attention: a query and keys of two sequence inputs
    one("mha_cross", [inp("q", -1, 8, max_length=4, lengths=[4, 2, 1]),
                      inp("kv", -1, 8, max_length=7, lengths=[1, 7, 3])],
        [L("y", "attention", ["q", "kv"], heads=2)],
        outputs=[{"name": "y", "from": "y", "loss": "softmax_cross_entropy"}]),
    one("mha_nobias", [inp("x", -1, 6, max_length=4, lengths=[3, 4, 1])],
        [L("y", "attention", heads=3, bias=False)],
        outputs=[{"name": "y", "from": "y", "loss": "softmax_cross_entropy"}]),
    # The small sequence layers, a batch of 4 with lengths 1 and max_length
    # among them. The text classifier's stack: ids -> embedding (its
    # padding row 0 the ids past the lengths) -> positions -> conv1d ->
    # relu -> max over the positions -> dense.
    one("seq_text_conv", [inp("ids", -1, high=12, max_length=6, lengths=[6, 1, 4, 2])],
        [L("emb", "embedding", num_embeddings=12, dim=5, padding_idx=0),
         L("pos", "pos_embedding", max_length=8),
         L("conv", "conv1d", filters=4, kernel_size=3, padding=1), L("relu", "relu"),
         L("pool", "seq_pool", mode="max"), L("y", "dense", units=3)], batch=4),
    # each seq_pool mode alone
    one("seq_pool_mean", [inp("x", -1, 3, max_length=5, lengths=[5, 1, 3, 2])],
        [L("y", "seq_pool", mode="mean")], batch=4),
    one("seq_pool_max", [inp("x", -1, 3, max_length=5, lengths=[2, 5, 1, 4])],
        [L("y", "seq_pool", mode="max")], batch=4),
    one("seq_pool_sum", [inp("x", -1, 2, 2, max_length=5, lengths=[1, 3, 5, 4])],
        [L("y", "seq_pool", mode="sum")], batch=4),
    one("seq_pool_last", [inp("x", -1, 3, max_length=5, lengths=[3, 1, 5, 2])],
        [L("y", "seq_pool", mode="last")], batch=4),
    # a tie of positions 1 and 3: the gradient goes to position 1 alone
    one("seq_pool_max_ties", [inp("ids", -1, high=6, max_length=5, lengths=[5, 1, 3, 4])],
        [L("emb", "embedding", num_embeddings=6, dim=3),
         L("pos", "pos_embedding", max_length=5), L("y", "seq_pool", mode="max")],
        batch=4, ties=("pos", "ids", 1, 3)),
    # conv1d over [T, D] behind a dense layer (its padded positions hold
    # its bias): dilated, and a kernel wider than the shortest sequences
    one("seq_conv1d_dilated", [inp("x", -1, 3, max_length=7, lengths=[7, 1, 5, 2])],
        [L("fc", "dense", units=4),
         L("conv", "conv1d", filters=2, kernel_size=3, dilation=2, padding=2),
         L("y", "seq_pool", mode="sum")], batch=4),
    one("seq_conv1d_k5", [inp("x", -1, 2, max_length=4, lengths=[1, 4, 2, 3])],
        [L("fc", "dense", units=3),
         L("conv", "conv1d", filters=3, kernel_size=5, padding=2, bias=False),
         L("t", "tanh"), L("y", "seq_pool", mode="mean")], batch=4),
    # a per-token output, padding_idx 2 inside the sequences too
    one("seq_tokens", [inp("ids", -1, high=7, max_length=5, lengths=[5, 1, 4, 2])],
        [L("emb", "embedding", num_embeddings=7, dim=4, padding_idx=2),
         L("pos", "pos_embedding", max_length=6), L("tags", "dense", units=3)],
        outputs=[{"name": "tags", "from": "tags", "loss": "softmax_cross_entropy"}],
        batch=4),
    # sdpa over a sequence (what ONNX imports of masked attention give): a
    # sample's keys stop at its length. Seeded apart, after the others.
    one("sdpa_seq", [inp("x", -1, 6, max_length=5, lengths=[5, 1, 3])],
        [L("p", "dense", units=12), L("y", "sdpa", ["p"], heads=2)],
        outputs=[{"name": "y", "from": "y", "loss": "softmax_cross_entropy"}], seed=401),
    one("sdpa_seq_causal", [inp("x", -1, 9, max_length=6, lengths=[2, 6, 1])],
        [L("y", "sdpa", heads=3, causal=True, scale=0.8)],
        outputs=[{"name": "y", "from": "y", "loss": "softmax_cross_entropy"}], seed=402),
]

# lstm and gru: nn.LSTM / nn.GRU over pack_padded_sequence, a batch of 5
# whose lengths include 1 and max_length; values, the inputs' and every
# parameter's gradients. Seeded by their own numbers, so that where the
# lists stand does not move their bytes (nor theirs the others').
MIXED = [6, 1, 3, 5, 6]
TOKENS = [{"name": "y", "from": "y", "loss": "softmax_cross_entropy"}]


def seq_x(d=5):
    return [inp("x", -1, d, max_length=6, lengths=MIXED)]


RNN_CASES = [
    one("lstm_seq", seq_x(), [L("y", "lstm", hidden=4)], outputs=TOKENS, batch=5,
        seed=301),
    one("lstm_last_bi", seq_x(),
        [L("y", "lstm", hidden=4, bidirectional=True, **{"return": "last"})], batch=5,
        seed=302),
    one("lstm_2layers_bi_seq", seq_x(),
        [L("rnn", "lstm", hidden=4, layers=2, bidirectional=True), L("y", "dense", units=3)],
        outputs=TOKENS, batch=5, seed=303),
    # behind a dense layer, whose padded positions hold its bias
    one("lstm_2layers_last_nobias", seq_x(3),
        [L("pre", "dense", units=3),
         L("y", "lstm", hidden=5, layers=2, bias=False, **{"return": "last"})], batch=5,
        seed=304),
    one("gru_seq", seq_x(), [L("y", "gru", hidden=4)], outputs=TOKENS, batch=5, seed=305),
    one("gru_last_bi", seq_x(),
        [L("y", "gru", hidden=4, bidirectional=True, **{"return": "last"})], batch=5,
        seed=306),
    one("gru_2layers_bi_seq", seq_x(),
        [L("pre", "dense", units=4), L("rnn", "gru", hidden=4, layers=2, bidirectional=True),
         L("y", "dense", units=3)], outputs=TOKENS, batch=5, seed=307),
    one("gru_2layers_last_nobias", seq_x(3),
        [L("y", "gru", hidden=5, layers=2, bias=False, **{"return": "last"})], batch=5,
        seed=308),
    one("lstm_ids_bi_last", [inp("ids", -1, high=11, max_length=7, lengths=[7, 2, 1, 5])],
        [L("emb", "embedding", num_embeddings=11, dim=5),
         L("rnn", "lstm", hidden=6, bidirectional=True, **{"return": "last"}),
         L("y", "dense", units=3)], batch=4, seed=309),
    # no sequence: a fixed [T, D] input runs every step
    one("gru_fixed_bi_seq", [inp("x", 4, 3)],
        [L("y", "gru", hidden=3, layers=2, bidirectional=True)], seed=310),
]

# 24 channels, no whole 16-channel block: on AVX-512 the two convolutions
# and the add between them keep oneDNN's blocked layout, its last block
# padded with zero channels (an EfficientNet's 24- and 40-channel
# stages). Seeded by their own numbers, after the others.
PADDED = [L("a", "conv2d", filters=24, kernel_size=1),
          L("b", "conv2d", filters=24, kernel_size=3, padding=1),
          L("add", "add", ["b", "a"]),
          L("c", "conv2d", filters=16, kernel_size=1), L("r", "relu"),
          L("pool", "global_avgpool2d"), L("y", "dense", units=3)]
PADDED_CASES = [
    one("padded_residual", [inp("x", 4, 5, 5)], PADDED, seed=501),
    one("padded_residual_eval", [inp("x", 4, 5, 5)], PADDED, mode="eval", seed=502),
]

# Residual adds straight after a convolution, then a relu: in inference
# the convolution adds the other input itself (oneDNN's binary post-op),
# the relu after it, where its output is blocked (16 channels from the
# convolution before); not where it is plain NCHW (with the model input
# x). Training keeps both layers.
RESADD = [L("c1", "conv2d", filters=16, kernel_size=3, padding=1), L("r1", "relu"),
          L("c2", "conv2d", filters=16, kernel_size=3, padding=1),
          L("add", "add", ["c2", "r1"]), L("r2", "relu"),
          L("c3", "conv2d", filters=16, kernel_size=1, bias=False),
          L("add2", "add", ["x", "c3"]), L("r3", "relu"),
          L("pool", "global_avgpool2d"), L("y", "dense", units=3)]
RESADD_CASES = [
    one("conv_residual_relu", [inp("x", 16, 5, 5)], RESADD, seed=601),
    one("conv_residual_relu_eval", [inp("x", 16, 5, 5)], RESADD, mode="eval", seed=602),
]


def make_ties(case, model, values, lengths):
    """Equal, largest values at positions p and q of each sample longer
    than q."""
    pos, ids, p, q = case["ties"]
    with torch.no_grad():
        w = getattr(model, pos).weight
        w[p] = w[q] = w.abs().max() + 10.0
    long_enough = lengths[ids] > q
    values[ids][long_enough, q] = values[ids][long_enough, p]


def model_of(case):
    """The model.json of a pass case (fixture-only keys dropped)."""
    ins = [{k: v for k, v in i.items() if k not in ("high", "positive", "scale", "lengths")}
           for i in case["inputs"]]
    outs = case["outputs"] or [{"name": "y", "from": case["layers"][-1]["name"],
                                "loss": "mse"}]
    return {"name": case["name"].replace("_", "-"), "inputs": ins,
            "layers": case["layers"], "outputs": outs}


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def make_pass(case, seed, folder):
    spec = model_of(case)
    model = tg.build(spec)
    tg.random_init(model, seed)
    init = tg.weights_of(model)
    g = torch.Generator().manual_seed(1000 + seed)
    b = case["batch"]
    values = {}
    for i in case["inputs"]:
        shape = [b] + i["shape"]
        if "max_length" in i:
            shape[1] = i["max_length"]
            values["len." + i["name"]] = torch.tensor(i["lengths"], dtype=torch.int64)
        if "high" in i:
            values[i["name"]] = torch.randint(0, i["high"], shape, generator=g)
        elif i.get("positive"):
            values[i["name"]] = torch.rand(shape, generator=g) * 2 + 0.2
        else:
            values[i["name"]] = torch.randn(shape, generator=g) * i.get("scale", 1.0)
    lengths = tg.input_lengths(model, values)
    for name, n in lengths.items():    # a packed sample holds zeros past its length
        values[name] = tg.zero_padding(values[name], n)
    if case["ties"]:
        make_ties(case, model, values, lengths)
        init = tg.weights_of(model)
    xs = tg.input_tensors(model, values, torch.float32)
    with torch.no_grad():
        model.eval()
        ys = model(*xs, lengths=lengths)
    for o, y in zip(model.outputs, ys):   # past a length: no gradient
        values["grad." + o["name"]] = tg.zero_padding(
            torch.randn(list(y.shape), generator=g), model.output_lengths(o, lengths))
    expected = tg.compute_grads(model, values, case["mode"], torch.float64)
    write_json(os.path.join(folder, "model.json"), spec)
    tm.write_safetensors(os.path.join(folder, "init.safetensors"), init)
    tm.write_safetensors(os.path.join(folder, "inputs.safetensors"), values)
    tm.write_safetensors(os.path.join(folder, "expected.safetensors"), expected,
                         {"format": "pt", "mode": case["mode"], "batch": str(b)})


def csv_rows(model, n, g):
    """n CSV rows of random labels and inputs for model."""
    rows = [[] for _ in range(n)]
    for o in model.outputs:
        k = tg.label_columns(model, o)
        if o["loss"] == "softmax_cross_entropy" or (o["loss"] == "mse" and o["legacy"]):
            classes = model.shapes[o["from"]][-1]
            cols = torch.randint(0, classes, [n, 1], generator=g).tolist()
            cols = [["%d" % v for v in r] for r in cols]
        elif o["loss"] == "bce_with_logits":
            cols = [["%d" % v for v in r]
                    for r in torch.randint(0, 2, [n, k], generator=g).tolist()]
        else:
            cols = [["%.4f" % v for v in r] for r in torch.randn([n, k], generator=g).tolist()]
        for r, c in zip(rows, cols):
            r.extend(c)
    for i in model.inputs:
        k = 1
        for d in i["shape"]:
            k *= d
        if i["datatype"] in tg.INT_TYPES:
            emb = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)][0]
            cols = [["%d" % v for v in r] for r in
                    torch.randint(0, emb.num_embeddings, [n, k], generator=g).tolist()]
        else:
            cols = [["%.4f" % v for v in r] for r in
                    (torch.randn([n, k], generator=g) * 2 + 0.5).tolist()]
        for r, c in zip(rows, cols):
            r.extend(c)
    return [",".join(r) for r in rows]


def make_train(case, seed, folder):
    spec = case["model"]
    model = tg.build(spec)
    tg.random_init(model, seed)
    write_json(os.path.join(folder, "model.json"), spec)
    tm.write_safetensors(os.path.join(folder, "init.safetensors"), tg.weights_of(model))
    g = torch.Generator().manual_seed(2000 + seed)
    with open(os.path.join(folder, "data.csv"), "w") as f:
        f.write("\n".join(csv_rows(model, case["steps"] * case["batch"], g)) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        args = ["train", os.path.join(folder, "model.json"), "--init",
                os.path.join(folder, "init.safetensors"), "--csv",
                os.path.join(folder, "data.csv"), "--steps", str(case["steps"]),
                "--batch", str(case["batch"]), "--lr", repr(case["lr"]), "--out", tmp]
        with open(os.devnull, "w") as null:
            old, sys.stdout = sys.stdout, null
            try:
                rc = tg.main(args)
            finally:
                sys.stdout = old
        if rc != 0:
            raise RuntimeError("%s: torch_graph.py train failed" % case["name"])
        shutil.copy(os.path.join(tmp, "losses.csv"), folder)
        final, _ = tm.read_safetensors(os.path.join(tmp, "final.safetensors"))
    tm.write_safetensors(os.path.join(folder, "final.safetensors"), final,
                         {"format": "pt", "steps": str(case["steps"]),
                          "batch": str(case["batch"]), "lr": repr(case["lr"])})


def verify_pass(folder):
    """Checks a pass case's expected.safetensors without autograd: the
    outputs by a float64 forward pass, and the gradients by a central
    difference of sum(output * g) along a random direction of every float
    input and parameter at once. Returns the worst relative errors."""
    with open(os.path.join(folder, "model.json")) as f:
        spec = json.load(f)
    model = tg.build(spec)
    tg.load_weights(model, os.path.join(folder, "init.safetensors"))
    values, _ = tm.read_safetensors(os.path.join(folder, "inputs.safetensors"))
    expected, meta = tm.read_safetensors(os.path.join(folder, "expected.safetensors"))
    model.double().train(meta["mode"] == "train")
    xs = tg.input_tensors(model, values, torch.float64)
    lengths = tg.input_lengths(model, values)
    params = dict(model.named_parameters())
    g = torch.Generator().manual_seed(5)
    dirs_x = [torch.randn(x.shape, generator=g, dtype=torch.float64)
              if x.is_floating_point() else None for x in xs]
    dirs_p = {k: torch.randn(p.shape, generator=g, dtype=torch.float64)
              for k, p in params.items()}
    for k, mod in model.named_modules():    # padding_idx's row: no gradient by convention
        if isinstance(mod, torch.nn.Embedding) and mod.padding_idx is not None:
            dirs_p[k + ".weight"][mod.padding_idx] = 0.0

    base = {k: p.detach().clone() for k, p in params.items()}

    def loss(eps):
        # the parameters moved in place: nn.LSTM and nn.GRU read their own
        # tensors, which functional_call does not swap
        xe = [x if d is None else x + eps * d for x, d in zip(xs, dirs_x)]
        with torch.no_grad():
            for k, p in params.items():
                p.copy_(base[k] + eps * dirs_p[k])
            ys = model(*xe, lengths=lengths)
            for k, p in params.items():
                p.copy_(base[k])
        ys = [tg.zero_padding(y, model.output_lengths(o, lengths))
              for o, y in zip(model.outputs, ys)]
        return ys, sum(float((y * values["grad." + o["name"]].double()).sum())
                       for o, y in zip(model.outputs, ys))

    ys, _ = loss(0.0)
    out_err = max(float((y - expected["output." + o["name"]]).abs().max()
                        / (1 + expected["output." + o["name"]].abs().max()))
                  for o, y in zip(model.outputs, ys))
    h = 1e-5
    numeric = (loss(h)[1] - loss(-h)[1]) / (2 * h)
    analytic = sum(float((expected["grad." + i["name"]].double() * d).sum())
                   for i, d in zip(model.inputs, dirs_x) if d is not None)
    analytic += sum(float((expected["grad." + k].double() * d).sum())
                    for k, d in dirs_p.items())
    grad_err = abs(numeric - analytic) / (1 + abs(analytic))
    return out_err, grad_err, numeric


def cmd_verify(out, only):
    bad = 0
    for case in (PASS_CASES + OP_CASES + LATE_PASS_CASES + SEQ_CASES + RNN_CASES + PADDED_CASES
                 + RESADD_CASES):
        if only and case["name"] not in only:
            continue
        out_err, grad_err, numeric = verify_pass(os.path.join(out, case["name"]))
        # a tied maximum has no derivative: its gradient is torch.max's
        # convention, checked against dlserve alone
        ok = out_err < 1e-6 and (grad_err < 1e-5 or case["ties"] is not None)
        bad += not ok
        print("%-20s %s output %.1e, directional derivative %.6g, error %.1e"
              % (case["name"], "ok  " if ok else "FAIL", out_err, numeric, grad_err))
    return 1 if bad else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT, help="fixture folder")
    p.add_argument("--only", nargs="*", help="case names (default: all)")
    p.add_argument("--verify", action="store_true",
                   help="check the pass cases in --out by finite differences")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.verify:
        return cmd_verify(args.out, args.only)
    cases = ([(c, make_pass) for c in PASS_CASES] + [(c, make_train) for c in TRAIN_CASES]
             + [(c, make_pass) for c in OP_CASES + LATE_PASS_CASES + SEQ_CASES + RNN_CASES
                + PADDED_CASES + RESADD_CASES])
    names = [c["name"] for c, _ in cases]
    assert len(set(names)) == len(names), "case names repeat"
    for seed, (case, make) in enumerate(cases, 1):
        if args.only and case["name"] not in args.only:
            continue
        folder = os.path.join(args.out, case["name"])
        os.makedirs(folder, exist_ok=True)
        make(case, case.get("seed") or seed, folder)
        print(case["name"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
