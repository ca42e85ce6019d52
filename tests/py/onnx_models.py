#!/usr/bin/python3
"""onnx_models.py: small PyTorch models exported to ONNX, with reference
outputs, for dlserve's ONNX import tests.

    onnx_models.py export OUTDIR [MODEL...]
        For each model (mlp, cnn_bn, resnet, emb2, ops, unsupported; or
        those named) writes OUTDIR/<model>.onnx (torch.onnx.export, a
        dynamic batch axis), OUTDIR/<model>.names (the state_dict's names)
        and, for random inputs at batch 1 and 32:
          OUTDIR/<model>.b<N>.csv       each input's values, one line a
                                        sample (what --predict reads);
          OUTDIR/<model>.b<N>.req.json  the same as an OIP infer request
                                        (ids INT64, the rest FP32);
          OUTDIR/<model>.b<N>.json      {"y": PyTorch's outputs}.
    onnx_models.py walkthrough DOC OUTDIR
        Runs the walk-through of DOC (docs/onnx.md) in OUTDIR: its Python
        export (the first python block: mlp.onnx) and, from the same
        module, writes its model.json (the first json block), its HTTP
        request body (request.json: the quoted body after curl's -d), its
        Kafka record (record.txt: the quoted key|value after kcat's <<<)
        and, for each, request.ref.json and record.ref.json: {"y": the
        softmax of the module's output for its input}, what the daemon
        serves with that model.json.
    onnx_models.py transformer OUTDIR
        Classifiers on a 2-layer nn.TransformerEncoder (batch_first,
        2 heads): OUTDIR/tx_relu.onnx (opset 17, constant folding, mean
        over the sequence), OUTDIR/tx_gelu.onnx (opset 13, no folding,
        the first token) and OUTDIR/tx_causal.onnx (opset 15, a causal
        attention mask), each with OUTDIR/<model>.b<N>.csv (the inputs, one
        row a sample) and .b<N>.json ({"x": inputs, "y": outputs}) for
        batch 1 and 32; OUTDIR/batchmix.onnx, whose softmax runs over the
        batch after a transpose, and OUTDIR/batchout.onnx, whose output
        holds the batch on axis 1.
    onnx_models.py sequence OUTDIR
        Text models of ids over a dynamic time axis (dynamic_axes {0:
        "batch", 1: "time"}, opset 17, pad id 0), each exported without
        padding to OUTDIR/<model>.onnx with, for batch 1 and 32 (lengths 1
        to 16, 1 and 16 included at 32): OUTDIR/<model>.b<N>.jsonl (a
        sample's ids a line, unpadded: what --predict reads) and
        .b<N>.json (PyTorch's outputs over the padded batch, masks or
        packing applied: {"y": [...], "tags": [...]}, tags the per-token
        scores of seq_gru). seq_tx: learned positions and a 2-layer
        nn.TransformerEncoder with src_key_padding_mask = ids == 0,
        masked mean pooling; seq_lstm: a 2-layer bidirectional nn.LSTM
        (pack_padded_sequence for the reference), h_n of the top layer;
        seq_gru: an nn.GRU, masked max pooling (masked_fill, max) and a
        per-token output; seq_cnn: a text CNN, Conv1d over
        emb.transpose(1, 2), masked max over time; seq_lm: a causal
        language model (torch.triu mask over the time axis), its next-id
        scores as "tags". Each batch's outputs
        are asserted equal (1e-5) to each sample's alone, unpadded. And
        two the import refuses: seq_first.onnx (h[:, 0], the first
        position) and seq_dim.onnx (a symbolic third dimension).
    onnx_models.py finetune OUTDIR STEPS BATCH LR [WEIGHTS]
        Trains the mlp from OUTDIR/mlp.onnx's weights with plain SGD on
        OUTDIR/ft.csv (class, then 8 features) with softmax cross-entropy,
        batch i being rows [i*B mod n, +B); prints one mean loss a step
        (before its update). With WEIGHTS (dlserve's safetensors after the
        same steps), exits non-zero unless every parameter equals PyTorch's
        to 1e-4 relative.
"""
import json
import os
import re
import sys
import numpy as np
import torch
from torch import nn

torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 16)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        x = torch.tanh(self.fc2(torch.relu(self.fc1(x))))
        return self.out(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=1)
        self.avg = nn.AvgPool2d(2)
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.avg(torch.sigmoid(self.conv2(x)))
        return torch.log_softmax(self.fc(torch.flatten(x, 1)), dim=1)


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.c1 = nn.Conv2d(8, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        y = self.c2(torch.relu(self.c1(x)))
        x = torch.relu(x + y)
        x = nn.functional.adaptive_avg_pool2d(x, 1)
        return torch.softmax(self.fc(x.reshape(x.shape[0], -1)), dim=1)


class Emb2(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.feat = nn.Linear(5, 4)
        self.head = nn.Linear(8 + 4, 2)

    def forward(self, ids, x):
        e = self.emb(ids).flatten(1)
        h = torch.cat([e, torch.relu(self.feat(x))], dim=1)
        return self.head(h)


class Ops(nn.Module):
    """The operators of imported models beyond the classic layers: grouped
    and dilated convolution, Slice, ReduceMean, Div, Pow, Sqrt, Erf (exact
    GELU), LeakyRelu, Clip, HardSigmoid, HardSwish, SiLU (Sigmoid and Mul),
    constant operands."""

    def __init__(self):
        super().__init__()
        self.pw = nn.Conv2d(1, 4, 1)
        self.dw = nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=4)
        self.fc = nn.Linear(4 * 3, 6)
        self.scale = nn.Parameter(torch.rand(6) + 0.5)

    def forward(self, x):
        h = nn.functional.silu(nn.functional.hardswish(self.dw(self.pw(x))))
        h = nn.functional.leaky_relu(h, 0.1)[:, :, 1:4, :]
        h = self.fc(h.mean(dim=3).flatten(1)) / self.scale
        h = torch.pow(torch.sqrt(h * h + 1.0), 2.0)
        h = torch.clamp(nn.functional.gelu(h), -1.0, 3.0)
        return nn.functional.hardsigmoid(h) + h


class Unsupported(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.cumsum(self.fc(x), dim=1)


class TransformerClassifier(nn.Module):
    """PyTorch's encoder as exported by torch 1.13: its attention moves the
    batch off axis 0 and merges it with the heads."""

    def __init__(self, act, pool, causal=False):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, activation=act, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(16, 3)
        self.pool = pool
        self.mask = nn.Transformer.generate_square_subsequent_mask(8) if causal else None

    def forward(self, x):
        h = self.enc(x, mask=self.mask)
        return self.head(h.mean(dim=1) if self.pool == "mean" else h[:, 0])


class BatchMix(nn.Module):
    """A softmax over the batch: no per-sample equivalent."""

    def forward(self, x):
        return torch.softmax(x.t(), dim=1).t()


class BatchOut(nn.Module):
    """An output of shape (4, batch)."""

    def forward(self, x):
        return x.t() * 2


class SeqTransformer(nn.Module):
    """Ids -> embedding + learned positions -> nn.TransformerEncoder with a
    key padding mask computed from the ids -> masked mean -> classes."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 16, padding_idx=0)
        self.pos = nn.Embedding(16, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(16, 3)

    def forward(self, ids, lengths=None):
        pad = ids == 0
        h = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
        h = self.enc(h, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        return self.head((h * keep).sum(1) / keep.sum(1))


class SeqLSTM(nn.Module):
    """Ids -> embedding -> 2-layer bidirectional LSTM (over packed
    sequences when lengths are given) -> the top layer's last states."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 8, padding_idx=0)
        self.rnn = nn.LSTM(8, 6, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(12, 3)

    def forward(self, ids, lengths=None):
        x = self.emb(ids)
        if lengths is not None:
            x = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                  enforce_sorted=False)
        _, (h, _) = self.rnn(x)
        return self.head(torch.cat([h[-2], h[-1]], dim=1))


class SeqGRU(nn.Module):
    """Ids -> embedding -> GRU -> masked max over time -> classes, and a
    per-token output (tags) of the GRU's states."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 8, padding_idx=0)
        self.rnn = nn.GRU(8, 6, batch_first=True)
        self.head = nn.Linear(6, 3)
        self.tagger = nn.Linear(6, 4)

    def forward(self, ids, lengths=None):
        x = self.emb(ids)
        if lengths is not None:
            x = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                  enforce_sorted=False)
        out, _ = self.rnn(x)
        if lengths is not None:
            out = nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                   total_length=ids.shape[1])[0]
        pad = (ids == 0).unsqueeze(-1)
        mx = out.masked_fill(pad, float("-inf")).max(dim=1).values
        return self.head(mx), self.tagger(out)


class SeqCNN(nn.Module):
    """Ids -> embedding -> Conv1d over the channels-first transpose ->
    ReLU -> masked max over time -> classes."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 8, padding_idx=0)
        self.conv = nn.Conv1d(8, 6, 3, padding=1)
        self.head = nn.Linear(6, 3)

    def forward(self, ids, lengths=None):
        h = torch.relu(self.conv(self.emb(ids).transpose(1, 2)))
        h = h.masked_fill((ids == 0).unsqueeze(1), float("-inf"))
        return self.head(h.max(dim=2).values)


class SeqFirst(nn.Module):
    """The first position of each sample: no layer of dlserve takes it."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, ids):
        return self.head(self.emb(ids)[:, 0])


def seq_refused(out):
    """seq_first.onnx (the first position over a time axis) and
    seq_dim.onnx (a symbolic third dimension)."""
    import onnx
    from onnx import TensorProto, helper
    torch.onnx.export(SeqFirst().eval(), (torch.randint(1, 30, (2, 5)),), f"{out}/seq_first.onnx",
                      input_names=["ids"], output_names=["y"],
                      dynamic_axes={"ids": {0: "batch", 1: "time"}, "y": {0: "batch"}},
                      opset_version=17)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "time", "feat"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "time", "feat"])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "dim", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              f"{out}/seq_dim.onnx")


class SeqLM(nn.Module):
    """A causal language model: a transformer whose mask (torch.triu over
    the time axis) hides later positions, next-id scores a position."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=1)
        self.head = nn.Linear(16, 30)

    def forward(self, ids, lengths=None):
        t = ids.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        return self.head(self.enc(self.emb(ids), mask=mask))


def seq_batch(b, g):
    """b samples of ids in 1..29, padded with 0 to 16; lengths 1 to 16 (a
    sample of 1 and one of 16 when b > 1; 7 when b is 1)."""
    lens = torch.randint(1, 17, (b,), generator=g)
    if b > 1:
        lens[0], lens[1] = 16, 1
    else:
        lens[0] = 7
    ids = torch.zeros(b, 16, dtype=torch.int64)
    for i in range(b):
        ids[i, :lens[i]] = torch.randint(1, 30, (int(lens[i]),), generator=g)
    return ids[:, :int(lens.max())], lens


def seq_outputs(m, ids, lens, names):
    """PyTorch's outputs of a batch by name ("y", "tags"): per-token
    scores (tags) zero past each sample's length."""
    y = m(ids, lens)
    out = dict(zip(names, y if isinstance(y, tuple) else (y,)))
    if "tags" in out:
        keep = torch.arange(ids.shape[1])[None, :] < lens[:, None]
        out["tags"] = out["tags"] * keep.unsqueeze(-1)
    return out


def sequence(out):
    g = torch.Generator().manual_seed(7)
    for name, m in (("seq_tx", SeqTransformer()), ("seq_lstm", SeqLSTM()),
                    ("seq_gru", SeqGRU()), ("seq_cnn", SeqCNN()), ("seq_lm", SeqLM())):
        m.eval()
        outs = {"seq_gru": ["y", "tags"], "seq_lm": ["tags"]}.get(name, ["y"])
        axes = {"ids": {0: "batch", 1: "time"}, "y": {0: "batch"}, "tags": {0: "batch", 1: "time"}}
        torch.onnx.export(m, (torch.randint(1, 30, (2, 5)),), f"{out}/{name}.onnx",
                          input_names=["ids"], output_names=outs,
                          dynamic_axes={k: v for k, v in axes.items() if k in outs + ["ids"]},
                          opset_version=17)
        for b in (1, 32):
            ids, lens = seq_batch(b, g)
            with torch.no_grad():
                ref = seq_outputs(m, ids, lens, outs)
                for i in range(b):        # the batch answers as each sample alone
                    alone = seq_outputs(m, ids[i:i + 1, :lens[i]], lens[i:i + 1], outs)
                    for k, v in alone.items():
                        got = ref[k][i:i + 1, :v.shape[1]] if k == "tags" else ref[k][i:i + 1]
                        assert torch.allclose(got, v, rtol=1e-5, atol=1e-5), (name, k, i)
            with open(f"{out}/{name}.b{b}.jsonl", "w") as f:
                for i in range(b):
                    f.write(json.dumps({"ids": ids[i, :lens[i]].tolist()}) + "\n")
            with open(f"{out}/{name}.b{b}.json", "w") as f:
                json.dump({k: v.tolist() for k, v in ref.items()} |
                          {"lengths": lens.tolist()}, f)
    seq_refused(out)


def models():
    """name -> (module, example inputs maker(batch), input names, opset)."""
    return {
        "mlp": (MLP(), lambda b: [torch.randn(b, 8)], ["x"], 13),
        "cnn_bn": (CNN(), lambda b: [torch.randn(b, 1, 8, 8)], ["image"], 14),
        "resnet": (ResNet(), lambda b: [torch.randn(b, 3, 6, 6)], ["image"], 17),
        "emb2": (Emb2(), lambda b: [torch.randint(0, 10, (b, 2)), torch.randn(b, 5)],
                 ["ids", "x"], 15),
        "ops": (Ops(), lambda b: [torch.randn(b, 1, 6, 6)], ["image"], 14),
        "unsupported": (Unsupported(), lambda b: [torch.randn(b, 4)], ["x"], 13),
    }


def randomize_bn(m):
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.5, 0.5)


def number(v):
    """A value's exact text: ids as integers, float32 values as the double
    they are (which reads back as the same float32)."""
    return str(int(v)) if isinstance(v, int) else repr(float(v))


def write_inputs(path, xs, names):
    """path.csv (each input's values, one line a sample) and path.req.json
    (an OIP infer request of them)."""
    with open(f"{path}.csv", "w") as f:
        for i in range(len(xs[0])):
            f.write(",".join(number(v) for x in xs for v in x[i].reshape(-1).tolist()) + "\n")
    ins = [{"name": n, "shape": list(x.shape),
            "datatype": "FP32" if x.is_floating_point() else "INT64",
            "data": x.reshape(-1).tolist()} for n, x in zip(names, xs)]
    with open(f"{path}.req.json", "w") as f:
        json.dump({"inputs": ins}, f)


def export(out, only=None):
    for name, (m, make, names, opset) in models().items():
        randomize_bn(m)     # before the skip: every model's weights stay as they were
        if only and name not in only:
            continue
        m.eval()
        ex = make(2)
        axes = {n: {0: "batch"} for n in names}
        axes["y"] = {0: "batch"}
        torch.onnx.export(m, tuple(ex), f"{out}/{name}.onnx", input_names=names,
                          output_names=["y"], dynamic_axes=axes, opset_version=opset,
                          training=torch.onnx.TrainingMode.PRESERVE,
                          do_constant_folding=False)
        with open(f"{out}/{name}.names", "w") as f:
            f.write("".join(k + "\n" for k in m.state_dict()
                            if not k.endswith("num_batches_tracked")))
        for b in (1, 32):
            xs = make(b)
            with torch.no_grad():
                y = m(*xs)
            write_inputs(f"{out}/{name}.b{b}", xs, names)
            with open(f"{out}/{name}.b{b}.json", "w") as f:
                json.dump({"y": y.tolist()}, f)


def fenced(doc, lang):
    """The first ```lang block of the markdown file doc."""
    m = re.search(r"^```%s\n(.*?)^```" % lang, open(doc).read(), re.M | re.S)
    return m.group(1)


def walkthrough(doc, out):
    text = open(doc).read()
    here = os.getcwd()
    os.chdir(out)
    env = {}
    try:
        exec(fenced(doc, "python"), env)
    finally:
        os.chdir(here)
    with open(f"{out}/model.json", "w") as f:
        f.write(fenced(doc, "json"))
    body = re.search(r"curl .*? -d \\\n\s*'(\{.*?\})'", text, re.S).group(1)
    record = re.search(r"kcat .*?<<< \\\n\s*'([^'|]+\|\{.*?\})'", text, re.S).group(1)
    with open(f"{out}/request.json", "w") as f:
        f.write(body)
    with open(f"{out}/record.txt", "w") as f:
        f.write(record + "\n")
    x_req = json.loads(body)["inputs"][0]
    x_rec = json.loads(record.split("|", 1)[1])["data"]
    with torch.no_grad():
        for k, x, shape in (("request", x_req["data"], x_req["shape"]), ("record", x_rec, [1, -1])):
            y = env["m"](torch.tensor(x, dtype=torch.float32).reshape(shape))
            with open(f"{out}/{k}.ref.json", "w") as f:
                json.dump({"y": torch.softmax(y, dim=1).tolist()}, f)


def transformer(out):
    for name, act, pool, opset, fold in (("tx_relu", "relu", "mean", 17, True),
                                         ("tx_gelu", "gelu", "first", 13, False),
                                         ("tx_causal", "relu", "mean", 15, True)):
        m = TransformerClassifier(act, pool, name == "tx_causal").eval()
        torch.onnx.export(m, torch.randn(2, 8, 16), f"{out}/{name}.onnx", input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                          opset_version=opset, do_constant_folding=fold)
        for b in (1, 32):
            x = torch.randn(b, 8, 16)
            with torch.no_grad():
                y = m(x)
            np.savetxt(f"{out}/{name}.b{b}.csv", x.reshape(b, -1).numpy(), delimiter=",",
                       fmt="%.9g")
            with open(f"{out}/{name}.b{b}.json", "w") as f:
                json.dump({"x": x.tolist(), "y": y.tolist()}, f)
    for name, m in (("batchmix", BatchMix()), ("batchout", BatchOut())):
        torch.onnx.export(m, torch.randn(2, 4), f"{out}/{name}.onnx", input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"}},
                          opset_version=17)


def finetune(out, steps, batch, lr, weights=None):
    import onnx
    from onnx import numpy_helper
    m = MLP()
    g = onnx.load(f"{out}/mlp.onnx").graph
    sd = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in g.initializer}
    m.load_state_dict(sd)
    data = np.loadtxt(f"{out}/ft.csv", delimiter=",", dtype=np.float32, ndmin=2)
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    for s in range(steps):
        lo = (s * batch) % len(data)
        rows = data[lo:lo + batch]
        x = torch.from_numpy(rows[:, 1:])
        y = torch.from_numpy(rows[:, 0]).long()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        print(f"{loss.item():.7f}")
    if weights:
        theirs = read_safetensors(weights)
        for k, v in m.state_dict().items():
            d = np.abs(theirs[k] - v.numpy())
            bound = 1e-4 * np.abs(v.numpy()) + 1e-6
            if not np.all(d <= bound):
                sys.exit(f"{k}: dlserve's fine-tuned weights differ by {d.max():g}")
        print("weights equal")


def read_safetensors(path):
    """name -> F32 array of a safetensors file (no safetensors module)."""
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, e in head.items():
        if k != "__metadata__":
            a, b = e["data_offsets"]
            out[k] = np.frombuffer(data[a:b], dtype=np.float32).reshape(e["shape"])
    return out


if __name__ == "__main__":
    if sys.argv[1] == "export":
        export(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "walkthrough":
        walkthrough(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "transformer":
        transformer(sys.argv[2])
    elif sys.argv[1] == "sequence":
        sequence(sys.argv[2])
    elif sys.argv[1] == "finetune":
        finetune(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]),
                 sys.argv[6] if len(sys.argv) > 6 else None)
    else:
        sys.exit(__doc__)
