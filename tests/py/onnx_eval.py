#!/usr/bin/python3
"""onnx_eval.py: a small evaluator of ONNX graphs (opset 17) for the tests,
written on torch from the ONNX operator specification, independently of
dlserve's code: the operators that `dlserve --export` writes, nothing more
(LSTM and GRU step by step, a sample at a time).

    import onnx_eval
    outs = onnx_eval.run(onnx.load(path), {"input": array})   # name -> numpy

    onnx_eval.py MODEL.onnx NAME=FILE.npy ...   prints {"output": [[...], ...]}

An operator or attribute value it does not know is an error, never a guess.
"""
import json
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper

DTYPES = {
    onnx.TensorProto.FLOAT: torch.float32, onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.INT64: torch.int64, onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.UINT8: torch.uint8, onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.BOOL: torch.bool,
}


def tensor(proto):
    return torch.from_numpy(np.array(numpy_helper.to_array(proto)))


def attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def need(cond, node, what):
    if not cond:
        raise ValueError(f"node {node.name!r} ({node.op_type}): {what}")


# ---- operators: f(node, attributes, inputs) -> one output ----

def op_gemm(n, a, x):
    A, B = x[0], x[1]
    A = A.t() if a.get("transA", 0) else A
    B = B.t() if a.get("transB", 0) else B
    y = a.get("alpha", 1.0) * (A @ B)
    if len(x) > 2 and x[2] is not None:
        y = y + a.get("beta", 1.0) * x[2]
    return y


def op_reshape(n, a, x):
    data, shape = x[0], [int(v) for v in x[1]]
    need(not a.get("allowzero", 0), n, "allowzero is not supported")
    shape = [data.shape[i] if v == 0 else v for i, v in enumerate(shape)]
    return data.reshape(shape)


def pads_for(n, a, nsp):
    """ONNX pads [x1_begin, x2_begin, ..., x1_end, x2_end] as F.pad's list
    (last dimension first)."""
    p = a.get("pads", [0] * (2 * nsp))
    need(a.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET"), n, "auto_pad")
    out = []
    for d in reversed(range(nsp)):
        out += [p[d], p[d + nsp]]
    return out


def op_conv(n, a, x):
    X, W = x[0], x[1]
    nsp = X.dim() - 2
    need(a.get("kernel_shape", list(W.shape[2:])) == list(W.shape[2:]), n, "kernel_shape")
    X = F.pad(X, pads_for(n, a, nsp))
    conv = {1: F.conv1d, 2: F.conv2d}[nsp]
    b = x[2] if len(x) > 2 else None
    return conv(X, W, b, stride=a.get("strides", [1] * nsp),
                dilation=a.get("dilations", [1] * nsp), groups=a.get("group", 1))


def op_maxpool(n, a, x):
    X = x[0]
    nsp = X.dim() - 2
    need(not a.get("ceil_mode", 0) and a.get("storage_order", 0) == 0, n, "ceil_mode")
    need(a.get("dilations", [1] * nsp) == [1] * nsp, n, "dilations")
    X = F.pad(X, pads_for(n, a, nsp), value=float("-inf"))
    pool = {1: F.max_pool1d, 2: F.max_pool2d}[nsp]
    return pool(X, a["kernel_shape"], a.get("strides", [1] * nsp))


def op_avgpool(n, a, x):
    X = x[0]
    nsp = X.dim() - 2
    need(not a.get("ceil_mode", 0), n, "ceil_mode")
    k, s = a["kernel_shape"], a.get("strides", [1] * nsp)
    pool = {1: F.avg_pool1d, 2: F.avg_pool2d}[nsp]
    total = pool(F.pad(X, pads_for(n, a, nsp)), k, s) * float(np.prod(k))
    if a.get("count_include_pad", 0):
        return total / float(np.prod(k))
    ones = F.pad(torch.ones_like(X), pads_for(n, a, nsp))
    return total / (pool(ones, k, s) * float(np.prod(k)))


def op_batchnorm(n, a, x):
    X, scale, bias, mean, var = x
    need(not a.get("training_mode", 0), n, "training_mode")
    shape = [1, -1] + [1] * (X.dim() - 2)
    eps = a.get("epsilon", 1e-5)
    return ((X - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + eps)
            * scale.reshape(shape) + bias.reshape(shape))


def op_gather(n, a, x):
    data, idx = x
    axis = a.get("axis", 0) % data.dim()
    idx = idx.to(torch.int64)
    idx = torch.where(idx < 0, idx + data.shape[axis], idx)
    flat = torch.index_select(data, axis, idx.reshape(-1))
    return flat.reshape(list(data.shape[:axis]) + list(idx.shape) + list(data.shape[axis + 1:]))


def op_flatten(n, a, x):
    X, axis = x[0], a.get("axis", 1) % (x[0].dim() + 1)
    return X.reshape(int(np.prod(X.shape[:axis])), -1)


def reduce_axes(X, axes):
    return sorted(int(v) % X.dim() for v in axes) if axes is not None else list(range(X.dim()))


def op_reducemean(n, a, x):
    axes = reduce_axes(x[0], a.get("axes"))
    return x[0].mean(dim=axes, keepdim=bool(a.get("keepdims", 1)))


def op_reducesum(n, a, x):
    axes = x[1] if len(x) > 1 else None
    if axes is None or axes.numel() == 0:
        if a.get("noop_with_empty_axes", 0):
            return x[0]
        axes = None
    return x[0].sum(dim=reduce_axes(x[0], axes), keepdim=bool(a.get("keepdims", 1)))


def op_reducemax(n, a, x):
    axes = reduce_axes(x[0], a.get("axes"))
    return torch.amax(x[0], dim=axes, keepdim=bool(a.get("keepdims", 1)))


def rnn_inputs(n, a, x, gates):
    """LSTM and GRU (opset 14, layout 0): X [T, B, I], W [D, G*H, I], R [D,
    G*H, H], B [D, 2*G*H] or zeros, sequence_lens [B] or T each, initial
    states [D, B, H] or zeros; the default activations only."""
    need(a.get("layout", 0) == 0, n, "layout 1")
    need("activations" not in a and "clip" not in a, n, "activations or clip")
    X, W, R = x[0], x[1], x[2]
    t, b = X.shape[0], X.shape[1]
    d, h = W.shape[0], a["hidden_size"]
    direction = a.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    need(d == (2 if direction == "bidirectional" else 1), n, "direction")
    B = x[3] if len(x) > 3 and x[3] is not None else torch.zeros(d, 2 * gates * h)
    lens = x[4] if len(x) > 4 and x[4] is not None else torch.full([b], t)
    zero = torch.zeros(d, b, h)
    h0 = x[5] if len(x) > 5 and x[5] is not None else zero
    c0 = x[6] if len(x) > 6 and x[6] is not None else zero
    return X, W, R, B, [int(v) for v in lens], h0, c0, direction, t, b, d, h


def op_rnn(n, a, x):
    """LSTM (gates i, o, f, c) and GRU (z, r, h; linear_before_reset as
    given) over each sample's sequence_lens steps: Y zero past them, Y_h
    (and Y_c) the states after the last step of each direction."""
    lstm = n.op_type == "LSTM"
    g = 4 if lstm else 3
    X, W, R, B, lens, h0, c0, direction, t, b, d, h = rnn_inputs(n, a, x, g)
    Y = torch.zeros(t, d, b, h)
    Yh, Yc = h0.clone(), c0.clone()
    lbr = a.get("linear_before_reset", 0)
    for di in range(d):
        rev = direction == "reverse" or di == 1
        Wb, Rb = B[di, :g * h], B[di, g * h:]
        for s in range(b):
            hs, cs = h0[di, s], c0[di, s]
            steps = range(lens[s] - 1, -1, -1) if rev else range(lens[s])
            for ti in steps:
                xw = X[ti, s] @ W[di].t() + Wb
                hr = hs @ R[di].t()
                if lstm:
                    i, o, f, cc = (xw + hr + Rb).split(h)
                    cs = torch.sigmoid(f) * cs + torch.sigmoid(i) * torch.tanh(cc)
                    hs = torch.sigmoid(o) * torch.tanh(cs)
                else:
                    xz, xr, xh = xw.split(h)
                    hz, hr_, hh = hr.split(h)
                    bz, br, bh = Rb.split(h)
                    z = torch.sigmoid(xz + hz + bz)
                    r = torch.sigmoid(xr + hr_ + br)
                    if lbr:
                        nn_ = torch.tanh(xh + r * (hh + bh))
                    else:
                        nn_ = torch.tanh(xh + (r * hs) @ R[di, 2 * h:].t() + bh)
                    hs = (1 - z) * nn_ + z * hs
                Y[ti, di, s] = hs
            Yh[di, s], Yc[di, s] = hs, cs
    return (Y, Yh, Yc) if lstm else (Y, Yh)


def op_layernorm(n, a, x):
    X, scale = x[0], x[1]
    axis = a.get("axis", -1) % X.dim()
    dims = list(range(axis, X.dim()))
    mean = X.mean(dim=dims, keepdim=True)
    var = ((X - mean) ** 2).mean(dim=dims, keepdim=True)
    y = (X - mean) / torch.sqrt(var + a.get("epsilon", 1e-5)) * scale
    return y + x[2] if len(x) > 2 else y


def op_unsqueeze(n, a, x):
    X, axes = x[0], [int(v) for v in x[1]]
    rank = X.dim() + len(axes)
    for ax in sorted(v % rank for v in axes):
        X = X.unsqueeze(ax)
    return X


def op_transpose(n, a, x):
    return x[0].permute(a.get("perm", list(reversed(range(x[0].dim())))))


def op_clip(n, a, x):
    """Clip (opset 13): min and max are optional inputs (absent: no bound);
    with min > max every value becomes max."""
    y = x[0]
    lo = x[1] if len(x) > 1 else None
    hi = x[2] if len(x) > 2 else None
    for b in (lo, hi):
        need(b is None or b.dim() == 0, n, "min and max must be scalars")
    if lo is not None:
        y = torch.maximum(y, lo.to(y.dtype))
    if hi is not None:
        y = torch.minimum(y, hi.to(y.dtype))
    return y


def slice_range(n, start, end, step, dim):
    """The indices Slice (opset 13) keeps of an axis of length dim: negative
    bounds count from the end, then clamp to [0, dim] for a positive step,
    start to [0, dim - 1] and end to [-1, dim - 1] for a negative one."""
    need(step != 0, n, "step 0")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return list(range(start, end, step))


def op_slice(n, a, x):
    data = x[0]
    starts, ends = [int(v) for v in x[1]], [int(v) for v in x[2]]
    axes = [int(v) for v in x[3]] if len(x) > 3 and x[3] is not None \
        else list(range(len(starts)))
    steps = [int(v) for v in x[4]] if len(x) > 4 and x[4] is not None else [1] * len(starts)
    need(len(starts) == len(ends) == len(axes) == len(steps), n, "input lengths differ")
    axes = [v + data.dim() if v < 0 else v for v in axes]
    need(len(set(axes)) == len(axes) and all(0 <= v < data.dim() for v in axes), n, "axes")
    for ax, b, e, s in zip(axes, starts, ends, steps):
        idx = slice_range(n, b, e, s, data.shape[ax])
        data = torch.index_select(data, ax, torch.tensor(idx, dtype=torch.int64))
    return data


def op_shape(n, a, x):
    """Shape (opset 15): dims[start:end], both clamped to the rank."""
    dims = list(x[0].shape)
    r = len(dims)
    start, end = a.get("start", 0), a.get("end", r)
    start, end = (v + r if v < 0 else v for v in (start, end))
    start, end = (min(max(v, 0), r) for v in (start, end))
    return torch.tensor(dims[start:end], dtype=torch.int64)


def op_expand(n, a, x):
    """Expand: the input broadcast with the given shape (either side may
    hold the 1s)."""
    shape = torch.broadcast_shapes(tuple(x[0].shape), tuple(int(v) for v in x[1]))
    return x[0].expand(shape).clone()


def op_hardsigmoid(n, a, x):
    return torch.clamp(a.get("alpha", 0.2) * x[0] + a.get("beta", 0.5), min=0, max=1)


def op_cast(n, a, x):
    need(a["to"] in DTYPES, n, f"cast to type {a['to']}")
    return x[0].to(DTYPES[a["to"]])


OPS = {
    "Constant": lambda n, a, x: tensor(a["value"]),
    "Identity": lambda n, a, x: x[0],
    "Cast": op_cast,
    "Add": lambda n, a, x: x[0] + x[1],
    "Sub": lambda n, a, x: x[0] - x[1],
    "Mul": lambda n, a, x: x[0] * x[1],
    "Div": lambda n, a, x: x[0] / x[1],
    "MatMul": lambda n, a, x: torch.matmul(x[0], x[1]),
    "Gemm": op_gemm,
    "Relu": lambda n, a, x: torch.clamp(x[0], min=0),
    "Tanh": lambda n, a, x: torch.tanh(x[0]),
    "Sigmoid": lambda n, a, x: 1 / (1 + torch.exp(-x[0])),
    "Erf": lambda n, a, x: torch.erf(x[0]),
    "Sqrt": lambda n, a, x: torch.sqrt(x[0]),
    "Pow": lambda n, a, x: torch.pow(x[0], x[1]).to(x[0].dtype),
    "LeakyRelu": lambda n, a, x: torch.where(x[0] < 0, a.get("alpha", 0.01) * x[0], x[0]),
    "Clip": op_clip,
    "HardSigmoid": op_hardsigmoid,
    "HardSwish": lambda n, a, x: x[0] * torch.clamp(x[0] / 6 + 0.5, min=0, max=1),
    "Slice": op_slice,
    "Shape": op_shape,
    "Expand": op_expand,
    "Softmax": lambda n, a, x: torch.softmax(x[0], dim=a.get("axis", -1)),
    "LogSoftmax": lambda n, a, x: torch.log_softmax(x[0], dim=a.get("axis", -1)),
    "Reshape": op_reshape,
    "Flatten": op_flatten,
    "Conv": op_conv,
    "MaxPool": op_maxpool,
    "AveragePool": op_avgpool,
    "GlobalAveragePool": lambda n, a, x: x[0].mean(dim=list(range(2, x[0].dim())), keepdim=True),
    "BatchNormalization": op_batchnorm,
    "Gather": op_gather,
    "Concat": lambda n, a, x: torch.cat(x, dim=a["axis"]),
    "Transpose": op_transpose,
    "Unsqueeze": op_unsqueeze,
    "ReduceMean": op_reducemean,
    "ReduceSum": op_reducesum,
    "ReduceMax": op_reducemax,
    "LSTM": op_rnn,
    "GRU": op_rnn,
    "LayerNormalization": op_layernorm,
}


def run(model, feeds):
    """Evaluates model (a ModelProto) on feeds (input name -> array);
    returns output name -> numpy array. Nodes must be in topological
    order, as the ONNX checker requires."""
    env = {i.name: tensor(i) for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in env:
            continue
        if vi.name not in feeds:
            raise ValueError(f"no value for input {vi.name!r}")
        dt = DTYPES[vi.type.tensor_type.elem_type]
        env[vi.name] = torch.as_tensor(np.array(feeds[vi.name])).to(dt)
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version != 17:
            raise ValueError(f"opset {imp.version}: this evaluator follows opset 17")
    with torch.no_grad():
        for n in model.graph.node:
            if n.op_type not in OPS or n.domain not in ("", "ai.onnx"):
                raise ValueError(f"node {n.name!r}: operator {n.op_type} is not supported")
            x = [env[i] if i else None for i in n.input]
            y = OPS[n.op_type](n, attrs(n), x)
            y = y if isinstance(y, tuple) else (y,)
            need(len(n.output) <= len(y), n, "more outputs than the operator gives")
            for name, v in zip(n.output, y):
                if name:
                    env[name] = v
    return {o.name: env[o.name].numpy() for o in model.graph.output}


def main(argv):
    model = onnx.load(argv[1])
    feeds = {}
    for arg in argv[2:]:
        name, path = arg.split("=", 1)
        feeds[name] = np.load(path)
    outs = run(model, feeds)
    print(json.dumps({k: v.tolist() for k, v in outs.items()}))


if __name__ == "__main__":
    main(sys.argv)
