#!/usr/bin/python3
"""rnn_vs_torch.py: PyTorch's side of tests/bench/rnn_vs_torch: the
classifier of tests/tools/rnn_bench.c (embedding, nn.LSTM or nn.GRU over
pack_padded_sequence returning h_n of the top layer, linear, cross-entropy,
plain SGD) on the same random batches, in tokens/s (valid positions).
Takes rnn_bench's options; prints one JSON line."""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn


class Classifier(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.emb = nn.Embedding(a.vocab, a.embed)
        cls = nn.LSTM if a.cell == "lstm" else nn.GRU
        self.rnn = cls(a.embed, a.hidden, a.layers, batch_first=True,
                       bidirectional=a.bidirectional)
        self.dirs = 2 if a.bidirectional else 1
        self.cls = nn.Linear(a.hidden * self.dirs, a.classes)

    def forward(self, ids, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths, batch_first=True,
                                                   enforce_sorted=False)
        _, h = self.rnn(packed)
        h = h[0] if isinstance(h, tuple) else h
        return self.cls(torch.cat([h[h.shape[0] - self.dirs + d] for d in range(self.dirs)], 1))


def lcg(state):
    return (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)


def make_batch(a, state):
    """rnn_bench.c's make_batch: the same lengths, ids and labels."""
    ids = torch.zeros(a.batch, a.maxlen, dtype=torch.int64)
    lengths = torch.zeros(a.batch, dtype=torch.int64)
    for i in range(a.batch):
        state = lcg(state)
        n = a.minlen + (state >> 33) % (a.maxlen - a.minlen + 1)
        lengths[i] = n
        for k in range(n):
            state = lcg(state)
            ids[i, k] = (state >> 33) % a.vocab
    labels = torch.arange(a.batch) % a.classes
    return ids, lengths, labels, int(lengths.sum()), state


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cell", default="lstm", choices=("lstm", "gru"))
    for name, v in (("embed", 64), ("hidden", 128), ("layers", 1), ("maxlen", 30),
                    ("minlen", 20), ("batch", 64), ("steps", 30), ("threads", 2),
                    ("vocab", 1000), ("classes", 10)):
        p.add_argument("--" + name, type=int, default=v)
    p.add_argument("--bidirectional", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = Classifier(a)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    state, tokens = 1, 0
    batches = []
    for _ in range(3 + 2 * a.steps):      # made beforehand: Python's loops are slow
        ids, lengths, labels, tk, state = make_batch(a, state)
        batches.append((ids, lengths, labels, tk))
    for s in range(-3, a.steps):
        if s == 0:
            t0 = time.perf_counter()
        ids, lengths, labels, tk = batches[s + 3]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(ids, lengths), labels)
        loss.backward()
        opt.step()
        tokens += tk if s >= 0 else 0
    train_s = time.perf_counter() - t0
    model.eval()
    infer_tokens = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for ids, lengths, labels, tk in batches[3 + a.steps:]:
            model(ids, lengths)
            infer_tokens += tk
    infer_s = time.perf_counter() - t0
    print(json.dumps({"side": "torch", "cell": a.cell, "threads": a.threads, "batch": a.batch,
                      "train_tokens_per_sec": round(tokens / train_s),
                      "infer_tokens_per_sec": round(infer_tokens / infer_s),
                      "loss": round(float(loss), 4)}))


if __name__ == "__main__":
    main()
