#!/usr/bin/python3
"""torch_model.py: the PyTorch peer of a dlserve model.json.

Builds the same network in PyTorch (module names = layer names, so the
state_dict keys are "<layer>.weight", "<layer>.bias", "<layer>.running_mean",
"<layer>.running_var" as in dlserve's safetensors files), loads Fashion-MNIST
from the IDX gz files, and either measures throughput or trains.

    torch_model.py bench --model models/fashion-mlp/model.json --threads 2 \
        [--batch-size B] [--steps 200] [--warmup 20] [--infer-batch-size 256]
    torch_model.py train --model models/fashion-cnn/model.json --threads 2 \
        [--epochs E] --out /tmp/cnn.safetensors

bench --graph builds the model with torch_graph.py instead (layers that
name their `inputs`, such as models/fashion-resnet; one input, one output).

Each prints one JSON line on stdout; progress goes to stderr.  Only the
Python standard library, numpy and torch (Debian's python3-torch) are used.
Shared by the interop test (tests/cli/test_torch_interop.sh) and the
benchmarks (tests/bench/cpu_vs_torch, ddp_peer.py, gpu_vs_torch.py,
kafka_python_peer.py).
"""

import argparse
import collections
import gzip
import json
import math
import os
import struct
import sys
import time

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def _set_thread_env(threads):
    """OpenBLAS and OpenMP read their thread counts when torch is loaded,
    so set them (unless the caller already did) before the first import."""
    if threads and "torch" not in sys.modules:
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads))


# ---- data -----------------------------------------------------------------

def load_idx(path):
    """Reads an IDX file (optionally gzip'd) as a uint8 numpy array."""
    import numpy as np
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError("%s: not an unsigned-byte IDX file" % path)
    ndim = raw[3]
    dims = struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim])
    off = 4 + 4 * ndim
    count = 1
    for d in dims:
        count *= d
    if len(raw) - off != count:
        raise ValueError("%s: %d data bytes, expected %d"
                         % (path, len(raw) - off, count))
    return np.frombuffer(raw, dtype=np.uint8, offset=off).reshape(dims)


def load_fashion(data_dir, spec):
    """Returns (x_train, y_train, x_test, y_test) as torch tensors, inputs
    scaled as model.json says: x = (raw * scale - mean) / std, shaped
    (N, *input.shape); labels int64."""
    import torch
    shape = list(spec["input"]["shape"])
    sc = spec["input"].get("scaling", {})
    scale = float(sc.get("scale", 1.0))
    mean = float(sc.get("mean", 0.0))
    std = float(sc.get("std", 1.0))

    def images(name):
        a = load_idx(os.path.join(data_dir, name))
        t = torch.from_numpy(a.copy()).to(torch.float32)
        t = (t * scale - mean) / std
        return t.reshape([a.shape[0]] + shape).contiguous()

    def labels(name):
        a = load_idx(os.path.join(data_dir, name))
        return torch.from_numpy(a.astype("int64"))

    return (images("train-images-idx3-ubyte.gz"),
            labels("train-labels-idx1-ubyte.gz"),
            images("t10k-images-idx3-ubyte.gz"),
            labels("t10k-labels-idx1-ubyte.gz"))


# ---- model ------------------------------------------------------------------

def _pair(v):
    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise ValueError("expected an int or [h, w], got %r" % (v,))
        return int(v[0]), int(v[1])
    return int(v), int(v)


def build_model(spec):
    """Returns an nn.Sequential whose module names are the layer names.
    Shapes are tracked (without the batch dimension) to infer in_features
    and channel counts."""
    from torch import nn

    class Embedding(nn.Embedding):
        """nn.Embedding that accepts float indices (the data path is float)."""

        def forward(self, x):  # noqa: D401
            return super().forward(x.long())

    shape = [int(d) for d in spec["input"]["shape"]]
    mods = collections.OrderedDict()
    for layer in spec["layers"]:
        name, kind = layer["name"], layer["type"]
        if name in mods:
            raise ValueError("duplicate layer name %r" % name)
        if kind == "dense":
            # Like nn.Linear, dense acts on the last dimension.
            units = int(layer["units"])
            mods[name] = nn.Linear(shape[-1], units,
                                   bias=bool(layer.get("bias", True)))
            shape = shape[:-1] + [units]
        elif kind == "conv2d":
            if len(shape) != 3:
                raise ValueError("%s: conv2d needs a [C, H, W] input, got %r"
                                 % (name, shape))
            kh, kw = _pair(layer["kernel_size"])
            sh, sw = _pair(layer.get("stride", 1))
            ph, pw = _pair(layer.get("padding", 0))
            filters = int(layer["filters"])
            mods[name] = nn.Conv2d(shape[0], filters, (kh, kw), (sh, sw),
                                   (ph, pw), bias=bool(layer.get("bias", True)))
            shape = [filters, (shape[1] + 2 * ph - kh) // sh + 1,
                     (shape[2] + 2 * pw - kw) // sw + 1]
        elif kind in ("maxpool2d", "avgpool2d"):
            if len(shape) != 3:
                raise ValueError("%s: %s needs a [C, H, W] input, got %r"
                                 % (name, kind, shape))
            kh, kw = _pair(layer["kernel_size"])
            sh, sw = _pair(layer.get("stride", layer["kernel_size"]))
            ph, pw = _pair(layer.get("padding", 0))
            cls = nn.MaxPool2d if kind == "maxpool2d" else nn.AvgPool2d
            mods[name] = cls((kh, kw), (sh, sw), (ph, pw))
            shape = [shape[0], (shape[1] + 2 * ph - kh) // sh + 1,
                     (shape[2] + 2 * pw - kw) // sw + 1]
        elif kind == "batchnorm":
            eps = float(layer.get("eps", 1e-5))
            mom = float(layer.get("momentum", 0.1))
            if len(shape) in (1, 2):
                mods[name] = nn.BatchNorm1d(shape[0], eps=eps, momentum=mom)
            elif len(shape) == 3:
                mods[name] = nn.BatchNorm2d(shape[0], eps=eps, momentum=mom)
            else:
                raise ValueError("%s: batchnorm on shape %r" % (name, shape))
        elif kind == "dropout":
            mods[name] = nn.Dropout(float(layer.get("rate", 0.5)))
        elif kind == "flatten":
            mods[name] = nn.Flatten()
            n = 1
            for d in shape:
                n *= d
            shape = [n]
        elif kind == "embedding":
            dim = int(layer["dim"])
            mods[name] = Embedding(int(layer["num_embeddings"]), dim)
            shape = shape + [dim]
        elif kind == "relu":
            mods[name] = nn.ReLU()
        elif kind == "tanh":
            mods[name] = nn.Tanh()
        elif kind == "sigmoid":
            mods[name] = nn.Sigmoid()
        elif kind == "softmax":
            mods[name] = nn.Softmax(dim=-1)
        else:
            raise ValueError("%s: unknown layer type %r" % (name, kind))
    model = nn.Sequential(mods)
    model.output_shape = shape
    return model


def make_loss(spec):
    """Returns loss(logits, labels). mse compares with one-hot targets."""
    import torch
    from torch import nn
    kind = spec.get("loss", "softmax_cross_entropy")
    if kind == "softmax_cross_entropy":
        return nn.CrossEntropyLoss()
    if kind == "mse":
        mse = nn.MSELoss()

        def loss(out, y):
            target = torch.nn.functional.one_hot(y, out.shape[-1]).to(out.dtype)
            return mse(out, target)
        return loss
    raise ValueError("unknown loss %r" % kind)


def make_optimizer(spec, params, lr=None):
    import torch
    tr = spec.get("training", {})
    kind = tr.get("optimizer", "sgd")
    lr = float(tr.get("lr", 0.01) if lr is None else lr)
    wd = float(tr.get("weight_decay", 0.0))
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=wd)
    if kind == "momentum":
        return torch.optim.SGD(params, lr=lr,
                               momentum=float(tr.get("momentum", 0.9)),
                               nesterov=bool(tr.get("nesterov", False)),
                               weight_decay=wd)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    if kind == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, weight_decay=wd,
                                   eps=float(tr.get("eps", 1e-10)))
    raise ValueError("unknown optimizer %r" % kind)


def lr_at(spec, base_lr, step, steps_per_epoch, epochs):
    """Learning rate for 0-based global step: linear warm-up over
    warmup_epochs, then none / step (gamma every step_epochs) / cosine
    (to 0 at the end of the last epoch)."""
    sch = spec.get("training", {}).get("schedule", {}) or {}
    kind = sch.get("type", "none")
    warm = int(round(float(sch.get("warmup_epochs", 0)) * steps_per_epoch))
    total = epochs * steps_per_epoch
    if warm > 0 and step < warm:
        return base_lr * (step + 1) / warm
    if kind == "none":
        return base_lr
    if kind == "step":
        every = int(sch.get("step_epochs", 1)) or 1
        return base_lr * float(sch.get("gamma", 0.1)) ** (
            (step // steps_per_epoch) // every)
    if kind == "cosine":
        span = max(1, total - warm)
        t = min(1.0, (step - warm) / span)
        return base_lr * 0.5 * (1.0 + math.cos(math.pi * t))
    raise ValueError("unknown schedule %r" % kind)


def evaluate(model, loss_fn, x, y, batch=256):
    """Returns (mean loss, accuracy) with argmax over the outputs."""
    import torch
    model.eval()
    correct, total_loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            out = model(x[i:i + batch])
            yb = y[i:i + batch]
            total_loss += float(loss_fn(out, yb)) * yb.shape[0]
            correct += int((out.argmax(dim=-1) == yb).sum())
    return total_loss / x.shape[0], correct / x.shape[0]


# ---- safetensors ------------------------------------------------------------

_DTYPES = None


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} as safetensors: u64 LE header length, JSON
    header (dtype, shape, data_offsets; "__metadata__"), padded with spaces
    to a multiple of 8, then the tensors back to back (little-endian, as
    this machine is). Atomic: temporary file, fsync, rename."""
    import torch
    global _DTYPES
    if _DTYPES is None:
        _DTYPES = {torch.float32: "F32", torch.float64: "F64",
                   torch.float16: "F16", torch.int64: "I64",
                   torch.int32: "I32", torch.uint8: "U8"}
    if sys.byteorder != "little":
        raise RuntimeError("big-endian host")
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    blobs, off = [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        if t.dtype not in _DTYPES:
            raise ValueError("%s: unsupported dtype %s" % (name, t.dtype))
        data = t.numpy().tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_safetensors_header(path):
    """Returns the parsed JSON header (for tests and quick checks)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def read_safetensors(path):
    """Reads a safetensors file as ({name: tensor}, metadata). Tensors are
    copies (writable), in file order; F32, F64, F16, I64, I32 and U8."""
    import numpy as np
    import torch
    kinds = {"F32": np.float32, "F64": np.float64, "F16": np.float16,
             "I64": np.int64, "I32": np.int32, "U8": np.uint8}
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError("%s: header length %d past the end" % (path, n))
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    body = raw[8 + n:]
    out = collections.OrderedDict()
    for name, h in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if h["dtype"] not in kinds:
            raise ValueError("%s: %s: unsupported dtype %s" % (path, name, h["dtype"]))
        a, b = h["data_offsets"]
        if not 0 <= a <= b <= len(body):
            raise ValueError("%s: %s: data_offsets out of range" % (path, name))
        arr = np.frombuffer(body[a:b], dtype=kinds[h["dtype"]]).reshape(h["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out, meta


# ---- commands ---------------------------------------------------------------

def _setup(args):
    import torch
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    with open(args.model) as f:
        spec = json.load(f)
    return spec


def graph_model(spec):
    """A one-input, one-output model.json built by torch_graph.py, as a
    module that returns its single output."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_graph

    class Single(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.graph = torch_graph.build(spec)

        def forward(self, x):
            return self.graph(x)[0]
    return Single()


def cmd_bench(args):
    """Training throughput: `warmup` untimed then `steps` timed optimizer
    steps at the training batch size, over one fixed shuffle of the training
    set (batch gather included, as in a real loop). Inference throughput:
    eval mode, no_grad, batch 256, whole passes over the 10k test set
    (last partial batch included), repeated until at least --infer-seconds."""
    import torch
    spec = _setup(args)
    tr = spec.get("training", {})
    bs = args.batch_size or int(tr.get("batch_size", 64))
    torch.manual_seed(int(tr.get("seed", 42)))
    xtr, ytr, xte, yte = load_fashion(args.data, spec)
    model = graph_model(spec) if args.graph else build_model(spec)
    loss_fn = make_loss(spec)
    opt = make_optimizer(spec, model.parameters())

    g = torch.Generator().manual_seed(int(tr.get("seed", 42)))
    perm = torch.randperm(xtr.shape[0], generator=g)
    nb = xtr.shape[0] // bs

    def train_step(i):
        idx = perm[(i % nb) * bs:(i % nb + 1) * bs]
        xb, yb = xtr[idx], ytr[idx]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    model.train()
    for i in range(args.warmup):
        train_step(i)
    t0 = time.perf_counter()
    for i in range(args.warmup, args.warmup + args.steps):
        loss = train_step(i)
    float(loss)
    train_sec = time.perf_counter() - t0
    train_sps = args.steps * bs / train_sec

    ib = args.infer_batch_size
    model.eval()
    with torch.no_grad():
        for i in range(0, min(xte.shape[0], 4 * ib), ib):   # warm-up
            model(xte[i:i + ib])
        passes, t0 = 0, time.perf_counter()
        while True:
            for i in range(0, xte.shape[0], ib):
                model(xte[i:i + ib])
            passes += 1
            infer_sec = time.perf_counter() - t0
            if infer_sec >= args.infer_seconds or passes >= 1000:
                break
    infer_sps = passes * xte.shape[0] / infer_sec

    print(json.dumps({
        "model": spec.get("name"), "engine": "torch " + torch.__version__,
        "threads": args.threads,
        "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "train_batch_size": bs, "train_steps": args.steps,
        "warmup_steps": args.warmup,
        "train_samples_per_sec": round(train_sps, 1),
        "infer_batch_size": ib, "infer_passes": passes,
        "infer_samples_per_sec": round(infer_sps, 1)}), flush=True)
    return 0


def cmd_train(args):
    import torch
    spec = _setup(args)
    tr = spec.get("training", {})
    epochs = args.epochs or int(tr.get("epochs", 10))
    bs = args.batch_size or int(tr.get("batch_size", 64))
    base_lr = float(args.lr if args.lr is not None else tr.get("lr", 0.01))
    seed = int(args.seed if args.seed is not None else tr.get("seed", 42))
    torch.manual_seed(seed)
    xtr, ytr, xte, yte = load_fashion(args.data, spec)
    if args.train_samples > 0:
        xtr, ytr = xtr[:args.train_samples], ytr[:args.train_samples]
    model = build_model(spec)
    loss_fn = make_loss(spec)
    opt = make_optimizer(spec, model.parameters(), lr=base_lr)
    g = torch.Generator().manual_seed(seed)
    n = xtr.shape[0]
    spe = (n + bs - 1) // bs     # the last, partial batch is kept
    step, t_start = 0, time.perf_counter()
    train_loss = float("nan")
    for ep in range(1, epochs + 1):
        model.train()
        t0 = time.perf_counter()
        perm = torch.randperm(n, generator=g)
        tot_loss, correct = 0.0, 0
        for b in range(spe):
            idx = perm[b * bs:(b + 1) * bs]
            xb, yb = xtr[idx], ytr[idx]
            lr = lr_at(spec, base_lr, step, spe, epochs)
            for pg in opt.param_groups:
                pg["lr"] = lr
            opt.zero_grad(set_to_none=True)
            out = model(xb)
            loss = loss_fn(out, yb)
            loss.backward()
            opt.step()
            step += 1
            tot_loss += float(loss) * yb.shape[0]
            correct += int((out.argmax(dim=-1) == yb).sum())
        sec = time.perf_counter() - t0
        train_loss = tot_loss / n
        te_loss, te_acc = evaluate(model, loss_fn, xte, yte)
        print("epoch %d/%d lr %.6f train_loss %.4f train_acc %.4f "
              "test_loss %.4f test_acc %.4f %.0f samples/s %.1f s"
              % (ep, epochs, lr, train_loss, correct / n, te_loss, te_acc,
                 n / sec, sec), file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t_start
    te_loss, te_acc = evaluate(model, loss_fn, xte, yte)
    if args.out:
        meta = {"format": "pt", "model.json": json.dumps(spec),
                "test_accuracy": "%.4f" % te_acc}
        write_safetensors(args.out, model.state_dict(), meta)
    print(json.dumps({"model": spec.get("name"), "epochs": epochs,
                      "threads": args.threads,
                      "train_loss": round(train_loss, 5),
                      "test_loss": round(te_loss, 5),
                      "test_accuracy": te_acc, "test_samples": xte.shape[0],
                      "seconds": round(seconds, 1), "out": args.out}),
          flush=True)
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("bench", "train"):
        s = sub.add_parser(name)
        s.add_argument("--model", required=True, help="model.json")
        s.add_argument("--data", default=DEFAULT_DATA,
                       help="folder with the Fashion-MNIST IDX gz files")
        s.add_argument("--threads", type=int, default=1)
        s.add_argument("--batch-size", type=int, default=0,
                       help="training batch size (default: model.json)")
        if name == "bench":
            s.add_argument("--steps", type=int, default=200,
                           help="timed training steps")
            s.add_argument("--warmup", type=int, default=20,
                           help="untimed training steps first")
            s.add_argument("--infer-batch-size", type=int, default=256)
            s.add_argument("--infer-seconds", type=float, default=1.0,
                           help="repeat test-set passes at least this long")
            s.add_argument("--graph", action="store_true",
                           help="build the model with torch_graph.py")
        else:
            s.add_argument("--epochs", type=int, default=0,
                           help="default: model.json")
            s.add_argument("--lr", type=float, default=None)
            s.add_argument("--seed", type=int, default=None)
            s.add_argument("--train-samples", type=int, default=0,
                           help="train on the first N training images (default: all)")
            s.add_argument("--out", default=None,
                           help="write the state_dict here (safetensors)")
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error("--threads must be >= 1")
    _set_thread_env(args.threads)
    return cmd_bench(args) if args.cmd == "bench" else cmd_train(args)


if __name__ == "__main__":
    sys.exit(main())
