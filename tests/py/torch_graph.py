#!/usr/bin/python3
"""torch_graph.py: the PyTorch peer of a dlserve graph model.json.

Builds any model.json (a chain as today, or a graph: several `inputs`,
layers naming their `inputs`, several `outputs` with their losses) as a
torch.nn.Module whose parameters are named as dlserve names them:
"<layer>.weight", "<layer>.bias", "<layer>.running_mean",
"<layer>.running_var".  Used to write the reference values that dlserve's
graph engine is tested against.

    torch_graph.py init MODEL_JSON --seed S --out W.safetensors
        random initial weights (PyTorch's default initialisation; the
        weight and bias of batchnorm and layernorm and batchnorm's running
        statistics random as well, so that they are exercised).
    torch_graph.py grads MODEL_JSON --init W.safetensors \\
            --inputs IN.safetensors --out OUT.safetensors [--mode train|eval]
            [--dtype float64|float32]
        IN holds every model input by name ([batch, *shape]; F32, or I64
        for an integer input; as the layers see it, no `scaling` applied),
        "len.<input>" (I64 [batch]) per sequence input and, per output,
        "grad.<output>" (a tensor
        g of the output's shape).  One forward pass, then the gradient of
        sum over outputs of sum(output * g).  OUT holds "output.<name>"
        per output, "grad.<input>" per float input, "grad.<parameter>"
        per trainable parameter, and "state.<buffer>" (running statistics
        after the pass), all F32.  Computed in float64 by default.
    torch_graph.py train MODEL_JSON --init W.safetensors --csv DATA.csv \\
            --steps N --batch B --lr LR --out OUTDIR [--dtype float32|float64]
        N steps of plain SGD (no momentum, no weight decay), batch i being
        CSV rows [i*B, (i+1)*B).  Writes OUTDIR/losses.csv (a header
        "step,loss,<output>..." then one row per step: the 0-based step,
        the weighted total loss and each output's loss, all before that
        step's update) and OUTDIR/final.safetensors.
    torch_graph.py check
        self-check: the chain models under models/ and a few more build
        with the module names, parameter names, shapes and outputs of
        torch_model.py; broadcasting, matmul, softmax and transpose agree
        with NumPy sample by sample; torch.autograd.gradcheck (float64)
        passes on graphs of the new layer types.

From Python: build(model_json) (a path, JSON text or a dict) returns the
module; forward takes the inputs in the order of `inputs` and returns a
tuple of the outputs in the order of `outputs`.

Semantics (shapes are per sample; the batch dimension leads and is never
named; `axis` 0 is the first dimension after the batch, negative counts
from the end):
- add, sub, mul, div: NumPy broadcasting of the per-sample shapes (aligned
  at the right); add and mul take two or more inputs, sub and div exactly
  two.
- pow (`exponent`), sqrt, erf, leaky_relu (`alpha` 0.01), clip (`min`,
  `max`, each optional; torch.clamp), hardsigmoid (`alpha` 1/6, `beta`
  0.5: clamp(alpha * x + beta, 0, 1)), hardswish (nn.Hardswish).
- slice (`axis`, `start` 0, `end` the axis' end, `step` 1): Python's
  x[start:end:step] along the axis.
- constant (`"inputs": []`, `shape`): the buffer "<layer>.value" of the
  per-sample shape, the same for every sample.
- concat (`axis`, required), matmul (two inputs of at least 2 dimensions,
  leading dimensions broadcast), transpose (`perm`, a permutation of the
  per-sample dimensions), reshape (`shape`, at most one -1).
- softmax, log_softmax (`axis`, default -1); reduce_mean, reduce_sum
  (`axis`, an integer or a list; the reduced dimensions are dropped).
- layernorm over the last dimension (weight and bias of that size, `eps`
  default 1e-5); gelu (`approximate` "none" = erf, default, or "tanh");
  silu; identity.
- sdpa: [T, 3E] (queries, keys and values side by side) -> [T, E],
  `heads` (E a multiple of it), `scale` (default 1/sqrt(E / heads)),
  `causal` (default false): nn.MultiheadAttention's arithmetic.
- Sequences: an input of shape [-1, ...] with `max_length` L is [L, ...]
  per sample, and each sample has a length (forward's `lengths`, by input
  name); a layer's output carries the lengths of its first sequence input.
- attention (one input [T, E]: self-attention; two: a query [T, E], then
  keys and values [S, E]; `heads`, `causal` false, `bias` true):
  nn.MultiheadAttention(E, heads, bias=bias, batch_first=True) as
  mha(q, kv, kv, key_padding_mask=<keys past their length>,
  attn_mask=<causal>, need_weights=False); parameters "<layer>.in_proj_weight",
  "<layer>.in_proj_bias", "<layer>.out_proj.weight", "<layer>.out_proj.bias".
  Positions of the query past its length come out as PyTorch computes
  them: dlserve's differ there (no consumer reads them).
- global_avgpool2d: [C, H, W] -> [C].  conv1d ([C, L]; `filters`,
  `kernel_size`, `stride` 1, `padding` 0, `bias` true, `groups` 1,
  `dilation` 1; weight [filters, C / groups, kernel]; conv2d takes
  `groups` and `dilation` too), maxpool1d ([C, L]; `kernel_size`, `stride`
  default kernel_size, `padding` 0).
- embedding: ids of any shape -> shape + [dim], weight
  [num_embeddings, dim]; ids are an integer input or a float tensor
  holding integers; `padding_idx` as nn.Embedding's (that row starts at
  zero and gets no gradient).
- lstm, gru (`hidden`, `layers` 1, `bidirectional` false, `return`
  "sequence" or "last", `bias` true): nn.LSTM / nn.GRU (batch_first) over
  pack_padded_sequence of each sample's length (all T without lengths):
  [T, D] -> [T, hidden * dirs] (pad_packed_sequence: zeros past the
  length), or with "last" the top layer's h_n, its directions side by side
  [hidden * dirs] (no sequence); parameters named as PyTorch names them
  ("<layer>.weight_ih_l0", ..., "_reverse").
- seq_pool (`mode` mean, max, sum or last): [T, D...] -> [D...] over each
  sample's first len positions (max as torch.max(dim) over them: its
  gradient to the first maximal position; last: position len - 1).
  pos_embedding (`max_length`): x + weight[:T], weight [max_length, D]
  initialised as nn.Embedding's.  conv1d over a sequence [T, D] is
  channels last: nn.Conv1d on x.transpose(1, 2) with the positions past
  each length zeroed, transposed back (stride 1, groups 1, a padding that
  keeps the length; weight [filters, D, kernel]).
- today's layers as torch_model.py builds them (dense on the last
  dimension, conv2d/maxpool2d/avgpool2d on [C, H, W], batchnorm per
  channel of [C, H, W] or [C, L] or per feature of [F], dropout, flatten,
  relu, tanh, sigmoid).

Losses (each the mean over the batch; the total is the sum of the
outputs' losses times their `weight`, default 1):
- softmax_cross_entropy: a 1-D output (or a sequence [T, C], for the
  grads command only); CSV: one integer class column.
- mse: mean over the output's values.  CSV: as many float columns as the
  output has values per sample (row-major); a model written as today
  (`output` + `loss`) keeps today's one integer class column, compared
  one-hot.
- bce_with_logits: mean over the output's values; CSV: one float column
  (0 or 1, or in between) per value, so a multi-label output of K values
  takes K columns.
A CSV row holds every output's label columns (in the order of `outputs`),
then every input's values (in the order of `inputs`, row-major; float
inputs go through the input's `scaling` as dlserve applies it); no header.

Only the Python standard library, numpy and torch (Debian's python3-torch,
run as /usr/bin/python3) are used.
"""

import argparse
import collections
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model as tm  # noqa: E402  (safetensors, today's chain builder)

import torch  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

INT_TYPES = ("INT64", "INT32")
LOSSES = ("softmax_cross_entropy", "mse", "bce_with_logits")


class ModelError(ValueError):
    """A model.json the builder refuses, with the reason."""


# ---- model.json ---------------------------------------------------------------

def model_inputs(spec):
    """The model inputs as [{name, shape, datatype, scaling}]."""
    if "inputs" in spec:
        ins = spec["inputs"]
        if not isinstance(ins, list) or not ins:
            raise ModelError("'inputs' must be a non-empty list")
    elif "input" in spec:
        ins = [dict(spec["input"])]
        ins[0].setdefault("name", "input")
    else:
        raise ModelError("'inputs' (or 'input') is missing")
    out = []
    for i in ins:
        if "name" not in i or "shape" not in i:
            raise ModelError("each input needs 'name' and 'shape': %r" % (i,))
        dt = i.get("datatype", "FP32")
        if dt not in ("FP32",) + INT_TYPES:
            raise ModelError("input '%s': datatype %r" % (i["name"], dt))
        shape = [int(d) for d in i["shape"]]
        length = int(i.get("max_length", 0))
        if (length > 0) != (bool(shape) and shape[0] == -1):
            raise ModelError("input '%s': a sequence has shape [-1, ...] and max_length"
                             % i["name"])
        if length:      # a sequence: max_length positions, each with a length
            shape[0] = length
        out.append({"name": i["name"], "shape": shape, "datatype": dt,
                    "scaling": i.get("scaling", {}), "max_length": length})
    return out


def model_outputs(spec):
    """The outputs as [{name, from, loss, weight, legacy}]."""
    if "outputs" in spec:
        outs = []
        for o in spec["outputs"]:
            if "from" not in o:
                raise ModelError("output %r: 'from' is missing" % (o,))
            outs.append({"name": o.get("name", o["from"]), "from": o["from"],
                         "loss": o.get("loss", "softmax_cross_entropy"),
                         "weight": float(o.get("weight", 1.0)),
                         "legacy": False})
    else:
        o = spec.get("output", {}) or {}
        outs = [{"name": o.get("name", "output"),
                 "from": spec["layers"][-1]["name"],
                 "loss": spec.get("loss", "softmax_cross_entropy"),
                 "weight": 1.0, "legacy": True}]
    for o in outs:
        if o["loss"] not in LOSSES:
            raise ModelError("output '%s': loss %r is not one of %s"
                             % (o["name"], o["loss"], ", ".join(LOSSES)))
    return outs


# ---- parameterless layers -------------------------------------------------------

def _dim(axis, nd, name):
    """Per-sample axis -> tensor dimension (batch first)."""
    axis = int(axis)
    if not -nd <= axis < nd:
        raise ModelError("layer '%s': axis %d out of range for %d dimensions"
                         % (name, axis, nd))
    return axis + 1 if axis >= 0 else axis


def _align(xs):
    """Gives the per-sample shapes the same rank by inserting 1s right after
    the batch dimension, so that they broadcast as NumPy aligns them."""
    nd = max(x.dim() for x in xs)
    return [x.reshape(x.shape[:1] + (1,) * (nd - x.dim()) + x.shape[1:])
            for x in xs]


class Elementwise(nn.Module):
    """add, sub, mul, div with broadcasting of the per-sample shapes."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def extra_repr(self):
        return self.kind

    def forward(self, *xs):
        xs = _align(xs)
        y = xs[0]
        for x in xs[1:]:
            y = y + x if self.kind == "add" else y - x if self.kind == "sub" \
                else y / x if self.kind == "div" else y * x
        return y


class Pow(nn.Module):
    def __init__(self, exponent):
        super().__init__()
        self.exponent = exponent

    def extra_repr(self):
        return "exponent=%r" % self.exponent

    def forward(self, x):
        return torch.pow(x, self.exponent)


class Unary(nn.Module):
    """A parameterless elementwise function (torch.sqrt, torch.erf)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class Clip(nn.Module):
    """torch.clamp: the gradient passes at the bounds too."""

    def __init__(self, lo, hi):
        super().__init__()
        self.lo, self.hi = lo, hi

    def extra_repr(self):
        return "min=%r, max=%r" % (self.lo, self.hi)

    def forward(self, x):
        return torch.clamp(x, self.lo, self.hi)


class HardSigmoid(nn.Module):
    """clamp(alpha * x + beta, 0, 1); nn.Hardsigmoid for 1/6, 0.5."""

    def __init__(self, alpha, beta):
        super().__init__()
        self.alpha, self.beta = alpha, beta

    def forward(self, x):
        if self.alpha == 1.0 / 6.0 and self.beta == 0.5:
            return F.hardsigmoid(x)
        return F.hardtanh(self.alpha * x + self.beta, 0.0, 1.0)


class Slice(nn.Module):
    def __init__(self, dim, start, end, step):
        super().__init__()
        self.dim, self.start, self.end, self.step = dim, start, end, step

    def extra_repr(self):
        return "dim=%d, %r:%r:%r" % (self.dim, self.start, self.end, self.step)

    def forward(self, x):
        idx = [slice(None)] * x.dim()
        idx[self.dim] = slice(self.start, self.end, self.step)
        return x[tuple(idx)]


class Constant(nn.Module):
    """The buffer "value" (one sample's shape) repeated for the batch of
    `like` (the first model input: a constant reads none)."""

    def __init__(self, shape):
        super().__init__()
        self.register_buffer("value", torch.zeros(shape))

    def forward(self, like):
        return self.value.unsqueeze(0).expand([like.shape[0]] + list(self.value.shape))


class Concat(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def extra_repr(self):
        return "dim=%d" % self.dim

    def forward(self, *xs):
        return torch.cat(xs, dim=self.dim)


class MatMul(nn.Module):
    """Batched matrix product; leading per-sample dimensions broadcast."""

    def forward(self, a, b):
        a, b = _align([a, b])
        return torch.matmul(a, b)


class Transpose(nn.Module):
    def __init__(self, perm):
        super().__init__()
        self.perm = [0] + [p + 1 for p in perm]

    def extra_repr(self):
        return "perm=%r" % (self.perm,)

    def forward(self, x):
        return x.permute(*self.perm)


class Reshape(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.shape = list(shape)

    def extra_repr(self):
        return "shape=%r" % (self.shape,)

    def forward(self, x):
        return x.reshape([x.shape[0]] + self.shape)


class Reduce(nn.Module):
    def __init__(self, kind, dims):
        super().__init__()
        self.kind, self.dims = kind, dims

    def extra_repr(self):
        return "%s dims=%r" % (self.kind, self.dims)

    def forward(self, x):
        if self.kind == "reduce_mean":
            return x.mean(dim=self.dims)
        return x.sum(dim=self.dims)


class GlobalAvgPool2d(nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3))


class Embedding(nn.Embedding):
    """nn.Embedding on ids held as integers or as floats."""

    def forward(self, x):  # noqa: D401
        ids = x.long()
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_embeddings):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise IndexError("embedding id %d not in [0, %d)" % (bad, self.num_embeddings))
        return super().forward(ids)


def _rnn_class(base):
    """nn.LSTM or nn.GRU (batch_first) over packed sequences, its
    parameters named as PyTorch names them."""

    class Rnn(base):
        takes_lengths = True

        def __init__(self, ret_seq, *args, **kwargs):
            super().__init__(*args, batch_first=True, **kwargs)
            self.ret_seq = ret_seq

        def forward(self, x, lengths=None):  # noqa: D401
            b, t = x.shape[0], x.shape[1]
            n = lengths[0] if lengths and lengths[0] is not None else \
                torch.full([b], t, dtype=torch.int64)
            packed = nn.utils.rnn.pack_padded_sequence(x, n.cpu(), batch_first=True,
                                                       enforce_sorted=False)
            out, h = super().forward(packed)
            if self.ret_seq:
                return nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                        total_length=t)[0]
            h = h[0] if isinstance(h, tuple) else h      # LSTM: (h_n, c_n)
            dirs = 2 if self.bidirectional else 1
            return torch.cat([h[h.shape[0] - dirs + d] for d in range(dirs)], dim=1)

    Rnn.__name__ = base.__name__
    return Rnn


RNN_CLASSES = {"lstm": _rnn_class(nn.LSTM), "gru": _rnn_class(nn.GRU)}


# ---- building -------------------------------------------------------------------

def _need(name, kind, shape, nds, form):
    if len(shape) not in nds:
        raise ModelError("layer '%s' (%s) expects %s, got %r"
                         % (name, kind, form, shape))


def _dense(name, layer, s, shapes):
    return nn.Linear(s[-1], int(layer["units"]), bias=bool(layer.get("bias", True)))


def _conv2d(name, layer, s, shapes):
    _need(name, "conv2d", s, (3,), "[C, H, W]")
    return nn.Conv2d(s[0], int(layer["filters"]), tm._pair(layer["kernel_size"]),
                     tm._pair(layer.get("stride", 1)), tm._pair(layer.get("padding", 0)),
                     tm._pair(layer.get("dilation", 1)), int(layer.get("groups", 1)),
                     bias=bool(layer.get("bias", True)))


def _pool2d(name, layer, s, shapes):
    _need(name, layer["type"], s, (3,), "[C, H, W]")
    cls = nn.MaxPool2d if layer["type"] == "maxpool2d" else nn.AvgPool2d
    return cls(tm._pair(layer["kernel_size"]),
               tm._pair(layer.get("stride", layer["kernel_size"])),
               tm._pair(layer.get("padding", 0)))


def _conv1d(name, layer, s, shapes):
    _need(name, "conv1d", s, (2,), "[C, L]")
    return nn.Conv1d(s[0], int(layer["filters"]), int(layer["kernel_size"]),
                     int(layer.get("stride", 1)), int(layer.get("padding", 0)),
                     int(layer.get("dilation", 1)), int(layer.get("groups", 1)),
                     bias=bool(layer.get("bias", True)))


def _maxpool1d(name, layer, s, shapes):
    _need(name, "maxpool1d", s, (2,), "[C, L]")
    k = int(layer["kernel_size"])
    return nn.MaxPool1d(k, int(layer.get("stride", k)), int(layer.get("padding", 0)))


def _global_avgpool2d(name, layer, s, shapes):
    _need(name, "global_avgpool2d", s, (3,), "[C, H, W]")
    return GlobalAvgPool2d()


def _batchnorm(name, layer, s, shapes):
    _need(name, "batchnorm", s, (1, 2, 3), "[F], [C, L] or [C, H, W]")
    cls = nn.BatchNorm2d if len(s) == 3 else nn.BatchNorm1d
    return cls(s[0], eps=float(layer.get("eps", 1e-5)),
               momentum=float(layer.get("momentum", 0.1)))


def _layernorm(name, layer, s, shapes):
    return nn.LayerNorm(s[-1], eps=float(layer.get("eps", 1e-5)))


def _dropout(name, layer, s, shapes):
    return nn.Dropout(float(layer.get("rate", 0.5)))


def _embedding(name, layer, s, shapes):
    pad = layer.get("padding_idx")
    return Embedding(int(layer["num_embeddings"]), int(layer["dim"]),
                     padding_idx=None if pad is None else int(pad))


def _valid(x, n):
    """[batch, T] booleans: position t < each sample's length n (n None:
    all of them)."""
    if n is None:
        return torch.ones(x.shape[:2], dtype=torch.bool)
    return torch.arange(x.shape[1]).unsqueeze(0) < n.unsqueeze(1)


def _per_position(mask, x):
    """mask [batch, T] shaped to broadcast over x [batch, T, ...]."""
    return mask.reshape(list(mask.shape) + [1] * (x.dim() - 2))


class PosEmbedding(nn.Embedding):
    """Learned positions: x [B, T, D] + weight[:T], weight [max_length, D]
    (nn.Embedding's, so initialised N(0, 1))."""

    def forward(self, x):  # noqa: D401
        return x + self.weight[:x.shape[1]]


def _pos_embedding(name, layer, s, shapes):
    _need(name, "pos_embedding", s, (2,), "[T, D]")
    return PosEmbedding(int(layer["max_length"]), s[1])


class SeqPool(nn.Module):
    """mean, max, sum or last over each sample's valid positions (dim 1)."""

    takes_lengths = True

    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def extra_repr(self):
        return self.mode

    def forward(self, x, lengths=None):
        n = lengths[0] if lengths else None
        keep = _per_position(_valid(x, n), x)
        if self.mode == "max":
            return x.masked_fill(~keep, float("-inf")).max(dim=1).values
        if self.mode == "last":
            last = (n - 1) if n is not None else torch.full([x.shape[0]], x.shape[1] - 1)
            return x[torch.arange(x.shape[0]), last]
        total = (x * keep.to(x.dtype)).sum(dim=1)
        if self.mode == "sum":
            return total
        count = n if n is not None else torch.full([x.shape[0]], x.shape[1])
        return total / count.reshape([-1] + [1] * (total.dim() - 1)).to(x.dtype)


def _seq_pool(name, layer, s, shapes):
    _need(name, "seq_pool", s, (2, 3, 4), "[T, D...]")
    mode = layer.get("mode")
    if mode not in ("mean", "max", "sum", "last"):
        raise ModelError("layer '%s': mode must be mean, max, sum or last" % name)
    return SeqPool(mode)


class SeqConv1d(nn.Conv1d):
    """nn.Conv1d over a sequence [B, T, D], channels last, the positions
    past each sample's length read as zeros."""

    takes_lengths = True

    def forward(self, x, lengths=None):  # noqa: D401
        n = lengths[0] if lengths else None
        x = x * _per_position(_valid(x, n), x).to(x.dtype)
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


def _seq_conv1d(name, layer, s, shapes):
    _need(name, "conv1d", s, (2,), "[T, D]")
    k, dil = int(layer["kernel_size"]), int(layer.get("dilation", 1))
    pad = int(layer.get("padding", 0))
    if int(layer.get("stride", 1)) != 1 or int(layer.get("groups", 1)) != 1 or \
            2 * pad != dil * (k - 1):
        raise ModelError("layer '%s': conv1d over a sequence keeps its length" % name)
    return SeqConv1d(s[1], int(layer["filters"]), k, 1, pad, dil,
                     bias=bool(layer.get("bias", True)))


def _gelu(name, layer, s, shapes):
    approx = layer.get("approximate", "none")
    if approx not in ("none", "tanh"):
        raise ModelError("layer '%s': approximate must be \"none\" or \"tanh\"" % name)
    return nn.GELU(approximate=approx)


def _softmax(name, layer, s, shapes):
    dim = _dim(layer.get("axis", -1), len(s), name)
    return nn.Softmax(dim=dim) if layer["type"] == "softmax" else nn.LogSoftmax(dim=dim)


def _concat(name, layer, s, shapes):
    if "axis" not in layer:
        raise ModelError("layer '%s': concat needs 'axis'" % name)
    if any(len(t) != len(s) for t in shapes):
        raise ModelError("layer '%s': concat of inputs of different ranks %r"
                         % (name, shapes))
    return Concat(_dim(layer["axis"], len(s), name))


class Sdpa(nn.Module):
    """Scaled dot-product attention over heads on a packed projection
    [T, 3E] (queries, keys, values side by side) -> [T, E]: PyTorch's own
    attention arithmetic, as nn.MultiheadAttention runs it; over a padded
    sequence, keys past its length get no weight (key_padding_mask)."""

    takes_lengths = True

    def __init__(self, heads, scale, causal):
        super().__init__()
        self.heads, self.scale, self.causal = heads, scale, causal

    def extra_repr(self):
        return "heads=%d, scale=%r, causal=%r" % (self.heads, self.scale, self.causal)

    def forward(self, x, lengths=None):
        b, t, w = x.shape
        e, h = w // 3, self.heads
        q, k, v = (p.reshape(b, t, h, e // h).transpose(1, 2) for p in x.split(e, dim=-1))
        scale = self.scale if self.scale is not None else (e // h) ** -0.5
        s = torch.matmul(q * scale, k.transpose(-2, -1))
        if self.causal:
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        if lengths and lengths[0] is not None:
            pad = torch.arange(t).unsqueeze(0) >= lengths[0].unsqueeze(1)
            s = s.masked_fill(pad[:, None, None, :], float("-inf"))
        y = torch.matmul(torch.softmax(s, dim=-1), v)
        return y.transpose(1, 2).reshape(b, t, e)


def _sdpa(name, layer, s, shapes):
    heads = layer.get("heads")
    if not isinstance(heads, int) or heads < 1 or len(s) != 2 or s[1] % 3 or \
            (s[1] // 3) % heads:
        raise ModelError("layer '%s': sdpa needs heads and an input [T, 3E], E a "
                         "multiple of heads" % name)
    scale = layer.get("scale")
    return Sdpa(heads, None if scale is None else float(scale), bool(layer.get("causal", False)))


class Attention(nn.MultiheadAttention):
    """nn.MultiheadAttention over padded sequences: self-attention on one
    input, or a query then keys and values; keys past their length get no
    weight (key_padding_mask), `causal` masks the later keys."""

    takes_lengths = True

    def __init__(self, e, heads, causal, bias):
        super().__init__(e, heads, bias=bias, batch_first=True)
        self.causal = causal

    def forward(self, q, kv=None, lengths=None):
        kv = q if kv is None else kv
        t, s = q.shape[1], kv.shape[1]
        klen = lengths[-1] if lengths else None
        pad = None if klen is None else \
            torch.arange(s).unsqueeze(0) >= klen.unsqueeze(1)
        causal = torch.ones(t, s, dtype=torch.bool).triu(1) if self.causal else None
        y, _ = super().forward(q, kv, kv, key_padding_mask=pad, attn_mask=causal,
                               need_weights=False)
        return y


def _attention(name, layer, s, shapes):
    heads = layer.get("heads")
    if not isinstance(heads, int) or heads < 1 or any(len(t) != 2 for t in shapes) or \
            shapes[-1][1] != s[1] or s[1] % heads:
        raise ModelError("layer '%s': attention needs heads, a query [T, E] (and keys [S, "
                         "E]), E a multiple of heads" % name)
    return Attention(s[1], heads, bool(layer.get("causal", False)),
                     bool(layer.get("bias", True)))


def _matmul(name, layer, s, shapes):
    if any(len(t) < 2 for t in shapes):
        raise ModelError("layer '%s': matmul needs inputs of 2 or more "
                         "dimensions, got %r" % (name, shapes))
    return MatMul()


def _transpose(name, layer, s, shapes):
    perm = [int(p) for p in layer.get("perm", [])]
    if sorted(perm) != list(range(len(s))):
        raise ModelError("layer '%s': perm %r is not a permutation of %d "
                         "dimensions" % (name, perm, len(s)))
    return Transpose(perm)


def _reshape(name, layer, s, shapes):
    shape = [int(d) for d in layer.get("shape", [])]
    if not shape or shape.count(-1) > 1 or any(d < 1 and d != -1 for d in shape):
        raise ModelError("layer '%s': shape %r needs positive sizes and at "
                         "most one -1" % (name, shape))
    return Reshape(shape)


def _reduce(name, layer, s, shapes):
    axes = layer.get("axis")
    if axes is None:
        raise ModelError("layer '%s': %s needs 'axis'" % (name, layer["type"]))
    axes = axes if isinstance(axes, list) else [axes]
    return Reduce(layer["type"], sorted({_dim(a, len(s), name) % (len(s) + 1)
                                         for a in axes}))


def _pow(name, layer, s, shapes):
    e = layer.get("exponent")
    if not isinstance(e, (int, float)) or isinstance(e, bool):
        raise ModelError("layer '%s': exponent must be a number" % name)
    return Pow(float(e))


def _clip(name, layer, s, shapes):
    lo, hi = layer.get("min"), layer.get("max")
    return Clip(None if lo is None else float(lo), None if hi is None else float(hi))


def _hardsigmoid(name, layer, s, shapes):
    return HardSigmoid(float(layer.get("alpha", 1.0 / 6.0)), float(layer.get("beta", 0.5)))


def _slice(name, layer, s, shapes):
    step = int(layer.get("step", 1))
    if step < 1:
        raise ModelError("layer '%s': step must be positive" % name)
    return Slice(_dim(layer["axis"], len(s), name), int(layer.get("start", 0)),
                 layer.get("end"), step)


def _constant(name, layer, s, shapes):
    return Constant([int(d) for d in layer["shape"]])


def _rnn(name, layer, s, shapes):
    _need(name, layer["type"], s, (2,), "[T, D]")
    ret = layer.get("return", "sequence")
    if ret not in ("sequence", "last"):
        raise ModelError("layer '%s': return must be \"sequence\" or \"last\"" % name)
    return RNN_CLASSES[layer["type"]](ret == "sequence", s[1], int(layer["hidden"]),
                                      int(layer.get("layers", 1)),
                                      bias=bool(layer.get("bias", True)),
                                      bidirectional=bool(layer.get("bidirectional", False)))


def _plain(cls):
    return lambda name, layer, s, shapes: cls()


BUILDERS = {
    "dense": _dense, "conv2d": _conv2d, "maxpool2d": _pool2d, "avgpool2d": _pool2d,
    "conv1d": _conv1d, "maxpool1d": _maxpool1d, "global_avgpool2d": _global_avgpool2d,
    "batchnorm": _batchnorm, "layernorm": _layernorm, "dropout": _dropout,
    "flatten": _plain(nn.Flatten), "embedding": _embedding,
    "relu": _plain(nn.ReLU), "tanh": _plain(nn.Tanh), "sigmoid": _plain(nn.Sigmoid),
    "silu": _plain(nn.SiLU), "identity": _plain(nn.Identity), "gelu": _gelu,
    "softmax": _softmax, "log_softmax": _softmax,
    "add": lambda *a: Elementwise("add"), "sub": lambda *a: Elementwise("sub"),
    "mul": lambda *a: Elementwise("mul"), "concat": _concat, "matmul": _matmul,
    "div": lambda *a: Elementwise("div"), "pow": _pow,
    "sqrt": lambda *a: Unary(torch.sqrt), "erf": lambda *a: Unary(torch.erf),
    "leaky_relu": lambda n, la, s, sh: nn.LeakyReLU(float(la.get("alpha", 0.01))),
    "clip": _clip, "hardsigmoid": _hardsigmoid, "hardswish": _plain(nn.Hardswish),
    "slice": _slice, "constant": _constant, "sdpa": _sdpa, "attention": _attention,
    "transpose": _transpose, "reshape": _reshape,
    "reduce_mean": _reduce, "reduce_sum": _reduce,
    "pos_embedding": _pos_embedding, "seq_pool": _seq_pool, "lstm": _rnn, "gru": _rnn,
}
# Layers of several inputs: (fewest, most).
ARITY = {"add": (2, None), "mul": (2, None), "concat": (2, None),
         "sub": (2, 2), "div": (2, 2), "matmul": (2, 2), "constant": (0, 0),
         "attention": (1, 2)}
# Layers whose output is no sequence though an input is (they end it), and
# whether a layer does.
SEQ_END = ("seq_pool",)


def ends_sequence(layer):
    return layer.get("type") in SEQ_END or \
        (layer.get("type") in ("lstm", "gru") and layer.get("return") == "last")


def make_layer(layer, shapes, seq=False):
    """The module of one layer, given its inputs' per-sample shapes and
    whether its first input is a sequence."""
    name, kind = layer["name"], layer["type"]
    if kind not in BUILDERS:
        raise ModelError("layer '%s': unknown layer type %r" % (name, kind))
    lo, hi = ARITY.get(kind, (1, 1))
    if len(shapes) < lo or (hi is not None and len(shapes) > hi):
        raise ModelError("layer '%s' (%s) takes %s input%s, got %d" % (
            name, kind, lo if lo == hi else "%d or more" % lo,
            "" if hi == 1 else "s", len(shapes)))
    build_fn = _seq_conv1d if seq and kind == "conv1d" else BUILDERS[kind]
    return build_fn(name, layer, shapes[0] if shapes else None, shapes)


class Graph(nn.Module):
    """The model: one submodule per layer, named as the layer. forward takes
    the inputs in model order and returns the outputs in model order.
    Shapes are found by passing a zero sample of each input through."""

    def __init__(self, spec):
        super().__init__()
        layers = spec.get("layers") if isinstance(spec, dict) else None
        if not isinstance(layers, list) or not layers or \
                not all(isinstance(la, dict) for la in layers):
            raise ModelError("'layers' must be a non-empty list of objects")
        self.spec = spec
        self.inputs = model_inputs(spec)
        self.outputs = model_outputs(spec)
        self.wiring = []            # (layer name, [names it reads])
        # the sequence input whose lengths each tensor carries (None: none)
        self.seq_of = {i["name"]: i["name"] if i["max_length"] else None
                       for i in self.inputs}
        env = {}
        for i in self.inputs:
            dt = torch.int64 if i["datatype"] in INT_TYPES else torch.float32
            env[i["name"]] = torch.zeros([1] + i["shape"], dtype=dt)
        prev = self.inputs[0]["name"]
        for layer in layers:
            self._add_layer(layer, prev, env)
            prev = layer["name"]
        self.shapes = {k: list(v.shape[1:]) for k, v in env.items()}
        self._check_outputs()

    def _add_layer(self, layer, prev, env):
        """Builds one layer, registers it and runs it on the zero sample."""
        name = layer.get("name")
        if not name or name in env:
            raise ModelError("layer name %r missing or used twice" % (name,))
        srcs = layer.get("inputs", [prev])
        for s in srcs:
            if s not in env:
                raise ModelError("layer '%s': input '%s' is no model input "
                                 "or layer above it" % (name, s))
        shapes = [list(env[s].shape[1:]) for s in srcs]
        args = srcs or [self.inputs[0]["name"]]   # a constant: the batch's size
        where = "layer '%s' (%s)" % (name, layer.get("type"))
        try:
            mod = make_layer(layer, shapes, bool(srcs) and self.seq_of[srcs[0]] is not None)
        except ModelError:
            raise
        except KeyError as e:
            raise ModelError("%s: %s is missing" % (where, e))
        except (TypeError, ValueError) as e:
            raise ModelError("%s: %s" % (where, e))
        try:
            self.add_module(name, mod)
        except KeyError as e:
            raise ModelError("layer name %r cannot name a module: %s" % (name, e))
        try:
            with torch.no_grad():
                env[name] = mod.eval()(*[env[s] for s in args])
        except (RuntimeError, IndexError) as e:
            raise ModelError("%s on inputs %r: %s" % (where, shapes, e))
        mod.train()
        self.wiring.append((name, args))
        seqs = [self.seq_of[a] for a in srcs if self.seq_of[a]]
        self.seq_of[name] = seqs[0] if seqs and not ends_sequence(layer) else None

    def _check_outputs(self):
        for o in self.outputs:
            if o["from"] not in self.shapes:
                raise ModelError("output '%s': 'from' names no layer: %r"
                                 % (o["name"], o["from"]))
            tokens = self.seq_of[o["from"]] and len(self.shapes[o["from"]]) == 2
            if o["loss"] == "softmax_cross_entropy" and len(self.shapes[o["from"]]) != 1 \
                    and not tokens:
                raise ModelError("output '%s': softmax_cross_entropy needs a 1-D "
                                 "output, the layers give %r"
                                 % (o["name"], self.shapes[o["from"]]))

    def forward(self, *xs, lengths=None):
        """lengths: {sequence input name: I64 [batch]}; a sequence input
        without one is full."""
        if len(xs) != len(self.inputs):
            raise ValueError("expected %d inputs, got %d" % (len(self.inputs), len(xs)))
        lengths = lengths or {}
        env = {i["name"]: x for i, x in zip(self.inputs, xs)}
        for name, srcs in self.wiring:
            mod = getattr(self, name)
            if getattr(mod, "takes_lengths", False):
                lens = [lengths.get(self.seq_of[s]) for s in srcs]
                env[name] = mod(*[env[s] for s in srcs], lengths=lens)
            else:
                env[name] = mod(*[env[s] for s in srcs])
        return tuple(env[o["from"]] for o in self.outputs)

    def output_lengths(self, out, lengths):
        """The lengths (I64 [batch]) output `out` carries, or None."""
        seq = self.seq_of[out["from"]]
        return lengths.get(seq) if seq else None


def build(model_json):
    """A Graph for a model.json path, JSON text or already parsed dict."""
    if isinstance(model_json, dict):
        spec = model_json
    elif model_json.lstrip().startswith("{"):
        spec = json.loads(model_json)
    else:
        with open(model_json) as f:
            spec = json.load(f)
    return Graph(spec)


# ---- weights ----------------------------------------------------------------------

def weights_of(model):
    """The state_dict as dlserve stores it (no num_batches_tracked), F32."""
    return collections.OrderedDict(
        (k, v.detach().to(torch.float32) if v.is_floating_point() else v)
        for k, v in model.state_dict().items()
        if not k.endswith("num_batches_tracked"))


def random_init(model, seed):
    """PyTorch's initialisation under `seed`; norm layers' affine parameters
    and running statistics random too."""
    g = torch.Generator().manual_seed(int(seed))
    torch.manual_seed(int(seed))
    with torch.no_grad():
        for mod in model.modules():
            if hasattr(mod, "reset_parameters") and mod is not model:
                mod.reset_parameters()
            if isinstance(mod, Attention):   # its own reset is _reset_parameters
                mod._reset_parameters()
                if mod.in_proj_bias is not None:
                    mod.in_proj_bias.copy_(torch.rand(mod.in_proj_bias.shape, generator=g) - 0.5)
            if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm)):
                mod.weight.copy_(torch.rand(mod.weight.shape, generator=g) + 0.5)
                mod.bias.copy_(torch.rand(mod.bias.shape, generator=g) - 0.5)
            if isinstance(mod, Constant):    # positive: a divisor too
                mod.value.copy_(torch.rand(mod.value.shape, generator=g) * 1.5 + 0.5)
            if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
                mod.running_mean.copy_(torch.rand(mod.running_mean.shape, generator=g) - 0.5)
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)


def load_weights(model, path):
    """Loads every parameter and running statistic from a safetensors file;
    a missing, extra or misshapen tensor is an error."""
    tensors, _ = tm.read_safetensors(path)
    want = weights_of(model)
    extra = sorted(set(tensors) - set(want))
    missing = sorted(set(want) - set(tensors))
    if extra or missing:
        raise ModelError("%s: missing %s, not in the model %s" % (path, missing, extra))
    sd = model.state_dict()
    for k, v in want.items():
        if list(tensors[k].shape) != list(v.shape):
            raise ModelError("%s: %s has shape %s, the model %s"
                             % (path, k, list(tensors[k].shape), list(v.shape)))
        sd[k] = tensors[k].to(sd[k].dtype)
    model.load_state_dict(sd)


def _check_dropout(model, mode):
    for name, mod in model.named_modules():
        if mode == "train" and isinstance(mod, nn.Dropout) and mod.p > 0:
            raise ModelError("layer '%s': dropout is random in training: give it "
                             "rate 0 or use --mode eval" % name)


# ---- losses -------------------------------------------------------------------------

def label_columns(model, out):
    """CSV columns an output's labels take."""
    if out["loss"] == "softmax_cross_entropy" or (out["loss"] == "mse" and out["legacy"]):
        return 1
    n = 1
    for d in model.shapes[out["from"]]:
        n *= d
    return n


def output_loss(out, y, labels):
    """Mean over the batch of one output's loss; labels as label_targets
    gives them."""
    kind = out["loss"]
    if kind == "softmax_cross_entropy":
        return F.cross_entropy(y, labels)
    if kind == "mse":
        return F.mse_loss(y, labels)
    return F.binary_cross_entropy_with_logits(y, labels)


def label_targets(model, out, cols, dtype):
    """[batch, columns] CSV values -> the loss's target tensor."""
    shape = [cols.shape[0]] + model.shapes[out["from"]]
    if out["loss"] == "softmax_cross_entropy":
        return cols[:, 0].round().long()
    if out["loss"] == "mse" and out["legacy"]:
        k = shape[-1] if len(shape) == 2 else None
        if k is None:
            raise ModelError("mse with class labels needs a 1-D output")
        return F.one_hot(cols[:, 0].round().long(), k).to(dtype)
    return cols.reshape(shape).to(dtype)


# ---- commands -----------------------------------------------------------------------

def input_tensors(model, values, dtype):
    """Named input tensors -> the forward's arguments."""
    xs = []
    for i in model.inputs:
        if i["name"] not in values:
            raise ModelError("no tensor for input '%s'" % i["name"])
        x = values[i["name"]]
        if list(x.shape[1:]) != i["shape"]:
            raise ModelError("input '%s' has shape %s, the model wants [batch] + %s"
                             % (i["name"], list(x.shape), i["shape"]))
        xs.append(x.long() if i["datatype"] in INT_TYPES else x.to(dtype))
    return xs


def input_lengths(model, values):
    """{sequence input name: its lengths "len.<input>"} from named tensors."""
    lengths = {}
    for i in model.inputs:
        if not i["max_length"]:
            continue
        n = values.get("len." + i["name"])
        if n is None or n.dim() != 1 or int(n.min()) < 1 or int(n.max()) > i["max_length"]:
            raise ModelError("len.%s: missing, or not lengths from 1 to %d"
                             % (i["name"], i["max_length"]))
        lengths[i["name"]] = n.long()
    return lengths


def zero_padding(y, n):
    """y [batch, T, ...] with the positions past each sample's length n
    zeroed (n None: y as it is)."""
    if n is None:
        return y
    keep = torch.arange(y.shape[1]).unsqueeze(0) < n.unsqueeze(1)
    return y * keep.reshape(list(keep.shape) + [1] * (y.dim() - 2)).to(y.dtype)


def compute_grads(model, values, mode="train", dtype=torch.float64):
    """One forward and backward pass of sum(output * grad.<output>); returns
    the tensors of the grads command's OUT file. A sequence output's
    positions past its lengths are zeros in "output.<name>"."""
    _check_dropout(model, mode)
    model.to(dtype)
    model.train(mode == "train")
    xs = input_tensors(model, values, dtype)
    lengths = input_lengths(model, values)
    for x in xs:
        if x.is_floating_point():
            x.requires_grad_(True)
    model.zero_grad(set_to_none=True)
    ys = model(*xs, lengths=lengths)
    total = 0
    for o, y in zip(model.outputs, ys):
        g = values.get("grad." + o["name"])
        if g is None or list(g.shape) != list(y.shape):
            raise ModelError("grad.%s: missing or not of shape %s"
                             % (o["name"], list(y.shape)))
        total = total + (y * g.to(dtype)).sum()
    total.backward()
    res = [("output." + o["name"], zero_padding(y.detach(), model.output_lengths(o, lengths)))
           for o, y in zip(model.outputs, ys)]
    res += [("grad." + i["name"], x.grad) for i, x in zip(model.inputs, xs)
            if x.is_floating_point()]
    res += [("grad." + k, p.grad if p.grad is not None else torch.zeros_like(p))
            for k, p in model.named_parameters()]
    res += [("state." + k, b.detach()) for k, b in model.named_buffers()
            if not k.endswith("num_batches_tracked")]
    if len(set(k for k, _ in res)) != len(res):
        raise ModelError("an input is named as a parameter: their gradients clash")
    return collections.OrderedDict((k, v.to(torch.float32)) for k, v in res)


def read_csv_rows(path, model):
    """The CSV as a float64 tensor [rows, columns], every row checked."""
    want = sum(label_columns(model, o) for o in model.outputs)
    for i in model.inputs:
        n = 1
        for d in i["shape"]:
            n *= d
        want += n
    rows = []
    with open(path, newline="") as f:
        for ln, row in enumerate(csv.reader(f), 1):
            if not row:
                continue
            if len(row) != want:
                raise ModelError("%s:%d: expected %d fields, found %d"
                                 % (path, ln, want, len(row)))
            try:
                rows.append([float(v) for v in row])
            except ValueError as e:
                raise ModelError("%s:%d: %s" % (path, ln, e))
    return torch.tensor(rows, dtype=torch.float64).reshape(len(rows), want)


def split_batch(model, rows, dtype):
    """CSV rows -> ([input tensors], [targets])."""
    col, targets, xs = 0, [], []
    for o in model.outputs:
        k = label_columns(model, o)
        targets.append(label_targets(model, o, rows[:, col:col + k], dtype))
        col += k
    for i in model.inputs:
        n = 1
        for d in i["shape"]:
            n *= d
        x = rows[:, col:col + n].reshape([rows.shape[0]] + i["shape"])
        col += n
        if i["datatype"] in INT_TYPES:
            xs.append(x.round().long())
        else:
            sc = i["scaling"]
            x = x.to(torch.float32).to(dtype)
            x = (x * float(sc.get("scale", 1.0)) - float(sc.get("mean", 0.0))) \
                / float(sc.get("std", 1.0))
            xs.append(x)
    return xs, targets


def cmd_train(args):
    dtype = getattr(torch, args.dtype)
    model = build(args.model_json)
    load_weights(model, args.init)
    model.to(dtype).train()
    rows = read_csv_rows(args.csv, model)
    if rows.shape[0] < args.steps * args.batch:
        raise ModelError("%s: %d rows, %d steps of %d need %d" % (
            args.csv, rows.shape[0], args.steps, args.batch, args.steps * args.batch))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    os.makedirs(args.out, exist_ok=True)
    lines = ["step,loss," + ",".join(o["name"] for o in model.outputs)]
    for step in range(args.steps):
        xs, targets = split_batch(
            model, rows[step * args.batch:(step + 1) * args.batch], dtype)
        opt.zero_grad(set_to_none=True)
        losses = [output_loss(o, y, t)
                  for o, y, t in zip(model.outputs, model(*xs), targets)]
        total = sum(o["weight"] * l for o, l in zip(model.outputs, losses))
        total.backward()
        opt.step()
        lines.append(",".join(["%d" % step] + ["%.9g" % float(v)
                                               for v in [total] + losses]))
    with open(os.path.join(args.out, "losses.csv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    tm.write_safetensors(os.path.join(args.out, "final.safetensors"), weights_of(model))
    print(json.dumps({"steps": args.steps, "loss": float(lines[-1].split(",")[1]),
                      "out": args.out}))
    return 0


def cmd_init(args):
    model = build(args.model_json)
    random_init(model, args.seed)
    tm.write_safetensors(args.out, weights_of(model))
    return 0


def cmd_grads(args):
    model = build(args.model_json)
    load_weights(model, args.init)
    values, _ = tm.read_safetensors(args.inputs)
    res = compute_grads(model, values, args.mode, getattr(torch, args.dtype))
    tm.write_safetensors(args.out, res)
    return 0


# ---- self-check -----------------------------------------------------------------------

CHAINS = [
    {"name": "chain-dense", "input": {"shape": [6]}, "loss": "mse", "layers": [
        {"name": "fc1", "type": "dense", "units": 5}, {"name": "bn", "type": "batchnorm"},
        {"name": "t", "type": "tanh"}, {"name": "fc2", "type": "dense", "units": 4},
        {"name": "s", "type": "sigmoid"}, {"name": "d", "type": "dropout", "rate": 0.3},
        {"name": "fc3", "type": "dense", "units": 3, "bias": False},
        {"name": "sm", "type": "softmax"}]},
    {"name": "chain-conv", "input": {"shape": [2, 6, 6]}, "layers": [
        {"name": "c", "type": "conv2d", "filters": 3, "kernel_size": 3, "padding": 1,
         "stride": [1, 2]},
        {"name": "bn", "type": "batchnorm", "eps": 1e-3, "momentum": 0.2},
        {"name": "r", "type": "relu"},
        {"name": "a", "type": "avgpool2d", "kernel_size": 3, "stride": 1, "padding": 1},
        {"name": "m", "type": "maxpool2d", "kernel_size": [2, 1]},
        {"name": "f", "type": "flatten"}, {"name": "fc", "type": "dense", "units": 4}]},
    {"name": "chain-embedding", "input": {"shape": [5]}, "layers": [
        {"name": "e", "type": "embedding", "num_embeddings": 12, "dim": 3},
        {"name": "f", "type": "flatten"}, {"name": "fc", "type": "dense", "units": 2}]},
]


def check_chain(spec):
    """build() and torch_model.build_model() agree on a chain model.json
    (a path or a parsed dict): module names and types, parameter names and
    shapes, and outputs on the same weights."""
    if not isinstance(spec, dict):
        with open(spec) as f:
            spec = json.load(f)
    ref = tm.build_model(spec)
    ours = build(spec)
    mods_ref = [(n, type(m).__name__) for n, m in ref.named_children()]
    mods_ours = [(n, type(m).__name__) for n, m in ours.named_children()]
    assert mods_ref == mods_ours, (mods_ref, mods_ours)
    shapes_ref = {k: list(v.shape) for k, v in ref.state_dict().items()}
    shapes_ours = {k: list(v.shape) for k, v in ours.state_dict().items()}
    assert shapes_ref == shapes_ours, (shapes_ref, shapes_ours)
    random_init(ref, 11)
    ours.load_state_dict(ref.state_dict())
    ref.eval()
    ours.eval()
    shape = [3] + list(spec["input"]["shape"])
    if spec["layers"][0]["type"] == "embedding":
        x = torch.randint(0, spec["layers"][0]["num_embeddings"], shape).float()
    else:
        x = torch.randn(shape)
    with torch.no_grad():
        diff = float((ref(x) - ours(x)[0]).abs().max())
    assert diff == 0.0, diff
    assert list(ours.shapes[ours.outputs[0]["from"]]) == list(ref.output_shape)
    return "%s: %d modules, %d tensors, same outputs" % (
        spec["name"], len(mods_ours), len(shapes_ours))


GRADCHECK_CASES = [
    ("add [3,1,5] + [4,5]", {"inputs": [{"name": "a", "shape": [3, 1, 5]},
                                        {"name": "b", "shape": [4, 5]}],
                             "layers": [{"name": "y", "type": "add", "inputs": ["a", "b"]}]}),
    ("mul [4,1] * [3]", {"inputs": [{"name": "a", "shape": [4, 1]},
                                   {"name": "b", "shape": [3]}],
                        "layers": [{"name": "y", "type": "mul", "inputs": ["a", "b"]}]}),
    ("matmul [2,3,4] x [4,5]", {"inputs": [{"name": "a", "shape": [2, 3, 4]},
                                           {"name": "b", "shape": [4, 5]}],
                                "layers": [{"name": "y", "type": "matmul",
                                            "inputs": ["a", "b"]}]}),
    ("layernorm [7,5]", {"inputs": [{"name": "x", "shape": [7, 5]}],
                         "layers": [{"name": "ln", "type": "layernorm"}]}),
    ("softmax axis 0 [4,3]", {"inputs": [{"name": "x", "shape": [4, 3]}],
                              "layers": [{"name": "sm", "type": "softmax", "axis": 0}]}),
    ("gelu tanh, transpose, reshape", {
        "inputs": [{"name": "x", "shape": [2, 3, 4]}],
        "layers": [{"name": "g", "type": "gelu", "approximate": "tanh"},
                   {"name": "t", "type": "transpose", "perm": [1, 0, 2]},
                   {"name": "r", "type": "reshape", "shape": [4, -1]}]}),
    ("conv1d, maxpool1d, reduce_mean", {
        "inputs": [{"name": "x", "shape": [3, 11]}],
        "layers": [{"name": "c", "type": "conv1d", "filters": 4, "kernel_size": 3,
                    "stride": 2, "padding": 1},
                   {"name": "p", "type": "maxpool1d", "kernel_size": 2},
                   {"name": "m", "type": "reduce_mean", "axis": 1}]}),
    ("constant, div, slice, erf, hardswish", {
        "inputs": [{"name": "x", "shape": [3, 6]}],
        "layers": [{"name": "c", "type": "constant", "inputs": [], "shape": [6]},
                   {"name": "d", "type": "div", "inputs": ["x", "c"]},
                   {"name": "s", "type": "slice", "axis": -1, "start": -5, "step": 2},
                   {"name": "e", "type": "erf"}, {"name": "h", "type": "hardswish"}]}),
    ("pos_embedding, conv1d over a sequence, seq_pool max", {
        "inputs": [{"name": "x", "shape": [-1, 3], "max_length": 6}],
        "layers": [{"name": "p", "type": "pos_embedding", "max_length": 8},
                   {"name": "c", "type": "conv1d", "filters": 4, "kernel_size": 3,
                    "dilation": 2, "padding": 2},
                   {"name": "m", "type": "seq_pool", "mode": "max"}]}),
    ("grouped dilated conv2d", {
        "inputs": [{"name": "x", "shape": [4, 7, 7]}],
        "layers": [{"name": "c", "type": "conv2d", "filters": 6, "kernel_size": 3,
                    "groups": 2, "dilation": [2, 1], "padding": 1}]}),
]


def _one_output(graph):
    """A check graph as a model: its last layer an mse output."""
    return dict(graph, name="check", outputs=[
        {"name": "y", "from": graph["layers"][-1]["name"], "loss": "mse"}])


def gradcheck_case(title, graph):
    """torch.autograd.gradcheck in float64 of the graph's first output with
    respect to its inputs and its parameters."""
    model = build(_one_output(graph))
    random_init(model, 7)
    model.double()
    names = [k for k, _ in model.named_parameters()]
    xs = [torch.randn([2] + i["shape"], dtype=torch.float64, requires_grad=True)
          for i in model.inputs]
    ps = [p.detach().clone().requires_grad_(True) for _, p in model.named_parameters()]

    def fn(*args):
        xs_, ps_ = args[:len(xs)], args[len(xs):]
        params = dict(zip(names, ps_))
        return torch.nn.utils.stateless.functional_call(model, params, tuple(xs_))[0]

    assert torch.autograd.gradcheck(fn, tuple(xs + ps), eps=1e-6, atol=1e-6)
    return "gradcheck %s: %d inputs, %d parameters" % (title, len(xs), len(ps))


def numpy_case(title, graph, per_sample):
    """The graph's output equals per_sample (NumPy on one sample's arrays)
    sample by sample: the batch dimension stays out of broadcasting."""
    model = build(_one_output(graph))
    random_init(model, 3)
    model.double().eval()
    xs = [torch.randn([3] + i["shape"], dtype=torch.float64) for i in model.inputs]
    with torch.no_grad():
        y = model(*xs)[0]
    for b in range(3):
        want = per_sample(*[x[b].numpy() for x in xs])
        assert list(want.shape) == list(y[b].shape), (want.shape, y[b].shape)
        assert abs(want - y[b].numpy()).max() < 1e-12
    return "numpy %s: per-sample %s" % (title, list(y.shape[1:]))


def cmd_check(args):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    for m in ("fashion-mlp", "fashion-cnn"):
        print(check_chain(os.path.join(root, "models", m, "model.json")))
    for spec in CHAINS:
        print(check_chain(spec))
    for title, graph in GRADCHECK_CASES:
        print(gradcheck_case(title, graph))
    import numpy as np
    for (title, graph), fn in zip(GRADCHECK_CASES[:3], (np.add, np.multiply, np.matmul)):
        print(numpy_case(title, graph, fn))
    print(numpy_case("softmax axis 0 [4,3]", GRADCHECK_CASES[4][1],
                     lambda x: np.exp(x) / np.exp(x).sum(axis=0, keepdims=True)))
    print(numpy_case("gelu tanh, transpose, reshape", GRADCHECK_CASES[5][1],
                     lambda x: np.transpose(0.5 * x * (1 + np.tanh(
                         np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
                         (1, 0, 2)).reshape(4, -1)))
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("init", help="random initial weights")
    s.add_argument("model_json")
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--out", required=True)
    s = sub.add_parser("grads", help="outputs and gradients of one pass")
    s.add_argument("model_json")
    s.add_argument("--init", required=True)
    s.add_argument("--inputs", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--mode", choices=("train", "eval"), default="train")
    s.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    s = sub.add_parser("train", help="plain SGD on CSV rows in order")
    s.add_argument("model_json")
    s.add_argument("--init", required=True)
    s.add_argument("--csv", required=True)
    s.add_argument("--steps", type=int, required=True)
    s.add_argument("--batch", type=int, required=True)
    s.add_argument("--lr", type=float, required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    sub.add_parser("check", help="self-check against torch_model.py and gradcheck")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    cmds = {"init": cmd_init, "grads": cmd_grads, "train": cmd_train, "check": cmd_check}
    try:
        return cmds[args.cmd](args)
    except (ValueError, TypeError, OSError, KeyError, IndexError, RuntimeError) as e:
        print("torch_graph.py: %s" % (e,), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
