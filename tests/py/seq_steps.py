#!/usr/bin/python3
"""seq_steps.py: PyTorch's side of tests/unit/test_rnn.c's training check.

Builds a model.json of one sequence input and one softmax_cross_entropy
output with torch_graph.py (lstm and gru as nn.LSTM / nn.GRU over packed
sequences), loads the initial weights dlserve saved (safetensors), trains
STEPS plain SGD steps in float32 on the whole batch and writes one JSON
line of per-step losses (before each step's update) on stdout and the
final weights as safetensors.

    seq_steps.py MODEL_JSON INIT.safetensors DATA.f32 N STEPS LR OUT.safetensors

DATA.f32 holds N packed samples of the input as dlserve takes them (the
length, then max_length values of the input's positions, zeros past the
length), then N class labels, float32.
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


def main():
    spec, init, data, n, steps, lr, out = sys.argv[1:8]
    n, steps, lr = int(n), int(steps), float(lr)
    torch.set_num_threads(1)
    model = tg.build(spec)
    tg.load_weights(model, init)
    model.float().train()
    inp = model.inputs[0]
    width = 1
    for d in inp["shape"]:
        width *= d
    d = torch.from_numpy(np.fromfile(data, dtype="<f4"))
    rows = d[:n * (1 + width)].reshape(n, 1 + width)
    labels = d[n * (1 + width):].long()
    lengths = {inp["name"]: rows[:, 0].long()}
    x = rows[:, 1:].reshape([n] + inp["shape"])
    x = x.long() if inp["datatype"] in tg.INT_TYPES else x
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x, lengths=lengths)[0], labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    tm.write_safetensors(out, tg.weights_of(model))
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
