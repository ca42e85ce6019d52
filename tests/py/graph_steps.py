#!/usr/bin/python3
"""graph_steps.py: PyTorch's side of tests/unit/test_graph.c.

Builds the graph model of that test (residual join, concat of two
branches, layernorm, three outputs: softmax cross-entropy, MSE with weight
0.5, binary cross-entropy), loads the initial weights dlserve saved
(safetensors), trains STEPS plain SGD steps on the whole batch and writes
one JSON line of per-step losses on stdout and the final weights as
safetensors.

    graph_steps.py INIT.safetensors DATA.f32 N STEPS LR OUT.safetensors

DATA.f32 holds N rows of a (6 floats), then N rows of b (4 floats), then
N rows of targets (class, 2 regression values, one 0/1 flag), float32.
"""

import json
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

from two_tower_ref import load


def read_st(path):
    return {k: torch.from_numpy(v.copy()) for k, v in load(path).items()}


def write_st(path, tensors):
    head, off, blobs = {}, 0, []
    for k, t in tensors.items():
        b = t.detach().numpy().astype("<f4").tobytes()
        head[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(head).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def forward(p, a, b):
    lin = lambda name, x: F.linear(x, p[name + ".weight"], p[name + ".bias"])
    fa = lin("fa", a)
    ra = F.relu(fa)
    res = lin("fa2", ra) + ra
    gb = F.gelu(lin("fb", b))
    cat = torch.cat([res, gb], dim=1)
    ln = F.layer_norm(cat, (16,), p["ln.weight"], p["ln.bias"], 1e-5)
    cls = lin("cls", F.silu(ln))
    reg = lin("reg", cat)
    flag = lin("flag", res)
    return cls, reg, flag


def main():
    init, data, n, steps, lr, out = sys.argv[1:7]
    n, steps, lr = int(n), int(steps), float(lr)
    torch.set_default_dtype(torch.float32)
    p = {k: v.requires_grad_(True) for k, v in read_st(init).items()}
    d = torch.from_numpy(np.fromfile(data, dtype="<f4"))
    a = d[:n * 6].reshape(n, 6)
    b = d[n * 6:n * 10].reshape(n, 4)
    t = d[n * 10:].reshape(n, 4)
    losses = []
    for _ in range(steps):
        cls, reg, flag = forward(p, a, b)
        loss = (F.cross_entropy(cls, t[:, 0].long()) + 0.5 * F.mse_loss(reg, t[:, 1:3])
                + F.binary_cross_entropy_with_logits(flag, t[:, 3:4]))
        for v in p.values():
            v.grad = None
        loss.backward()
        with torch.no_grad():
            for v in p.values():
                v -= lr * v.grad
        losses.append(loss.item())
    write_st(out, p)
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
