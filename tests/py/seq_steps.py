#!/usr/bin/python3
"""seq_steps.py: PyTorch's side of tests/unit/test_rnn.c's training check.

Builds a model.json of one sequence input and one output, softmax
cross-entropy or a linear-chain CRF over a per-token output, with
torch_graph.py (lstm and gru as nn.LSTM / nn.GRU over packed sequences;
the CRF here: its transitions "<output>.transitions" as dlserve lays them
out, the negative log-likelihood by the forward algorithm, the mean over
the batch), loads the initial weights dlserve saved (safetensors), trains
STEPS plain SGD steps in float32 on the whole batch and writes one JSON
line of per-step losses (before each step's update) on stdout and the
final weights as safetensors.

    seq_steps.py MODEL_JSON INIT.safetensors DATA.f32 N STEPS LR OUT.safetensors

DATA.f32 holds N packed samples of the input as dlserve takes them (the
length, then max_length values of the input's positions, zeros past the
length), then N class labels (a CRF: N rows of max_length tags, -1 past
the length), float32.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_graph as tg  # noqa: E402
import torch_model as tm  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def crf_nll(emit, tags, lengths, trans):
    """The mean over the batch of each sample's CRF negative log-likelihood
    (emit [B, T, C]; trans: start scores, end scores, then tag i to j)."""
    start, end, tr = trans[0], trans[1], trans[2:]
    b, t, _ = emit.shape
    rows = torch.arange(b)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    tg_ = tags.clamp(min=0)
    score = start[tg_[:, 0]] + emit[rows, 0, tg_[:, 0]]
    alpha = start[None, :] + emit[:, 0]
    for k in range(1, t):
        score = score + (tr[tg_[:, k - 1], tg_[:, k]] + emit[rows, k, tg_[:, k]]) * mask[:, k]
        nxt = torch.logsumexp(alpha[:, :, None] + tr[None] + emit[:, k, None, :], dim=1)
        alpha = torch.where(mask[:, k, None], nxt, alpha)
    score = score + end[tg_[rows, lengths - 1]]
    return (torch.logsumexp(alpha + end[None, :], dim=1) - score).mean()


def main():
    spec, init, data, n, steps, lr, out = sys.argv[1:8]
    n, steps, lr = int(n), int(steps), float(lr)
    torch.set_num_threads(1)
    spec = json.load(open(spec))
    crf = spec["outputs"][0]["loss"] == "crf"
    tname = spec["outputs"][0]["name"] + ".transitions"
    if crf:     # the layers give the tag scores; the CRF is computed here
        spec["outputs"][0]["loss"] = "softmax_cross_entropy"
    model = tg.build(spec)
    weights, _ = tm.read_safetensors(init)
    trans = torch.nn.Parameter(weights.pop(tname)) if crf else None
    sd = model.state_dict()
    for k in sd:
        sd[k] = weights[k].to(sd[k].dtype)
    model.load_state_dict(sd)
    model.float().train()
    inp = model.inputs[0]
    width = 1
    for d in inp["shape"]:
        width *= d
    d = torch.from_numpy(np.fromfile(data, dtype="<f4"))
    rows = d[:n * (1 + width)].reshape(n, 1 + width)
    labels = d[n * (1 + width):].long()
    if crf:
        labels = labels.reshape(n, -1)
    lengths = {inp["name"]: rows[:, 0].long()}
    x = rows[:, 1:].reshape([n] + inp["shape"])
    x = x.long() if inp["datatype"] in tg.INT_TYPES else x
    opt = torch.optim.SGD(list(model.parameters()) + ([trans] if crf else []), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        y = model(x, lengths=lengths)[0]
        loss = crf_nll(y, labels, lengths[inp["name"]], trans) if crf else \
            F.cross_entropy(y, labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    final = tg.weights_of(model)
    if crf:
        final[tname] = trans.detach().clone()
    tm.write_safetensors(out, final)
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
