#!/usr/bin/python3
"""rnn_vs_torch.py: PyTorch's side of tests/bench/rnn_vs_torch: the
classifier of tests/tools/rnn_bench.c (embedding, nn.LSTM or nn.GRU over
pack_padded_sequence returning h_n of the top layer, linear, cross-entropy,
plain SGD) or with --crf its tagger (the recurrence's padded outputs, linear
a position, a linear-chain CRF's negative log-likelihood as a PyTorch user
writes it: the forward algorithm over the batch, a step at a time) on the
same random batches, in tokens/s (valid positions). Takes rnn_bench's
options; prints one JSON line."""

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
        self.crf = a.crf
        if a.crf:   # start scores, end scores, then tag i to tag j (dlserve's layout)
            self.transitions = nn.Parameter(torch.empty(a.classes + 2, a.classes)
                                            .uniform_(-0.1, 0.1))

    def forward(self, ids, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths, batch_first=True,
                                                   enforce_sorted=False)
        out, h = self.rnn(packed)
        if self.crf:
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                      total_length=ids.shape[1])
            return self.cls(out)
        h = h[0] if isinstance(h, tuple) else h
        return self.cls(torch.cat([h[h.shape[0] - self.dirs + d] for d in range(self.dirs)], 1))


def crf_nll(emit, tags, lengths, trans):
    """The mean over the batch of each sample's CRF negative log-likelihood."""
    start, end, tr = trans[0], trans[1], trans[2:]
    b, t, _ = emit.shape
    mask = torch.arange(t)[None, :] < lengths[:, None]
    rows = torch.arange(b)
    first = tags[:, 0]
    score = start[first] + emit[rows, 0, first]
    alpha = start[None, :] + emit[:, 0]
    for k in range(1, t):
        step = tr[tags[:, k - 1].clamp(min=0), tags[:, k].clamp(min=0)] + \
            emit[rows, k, tags[:, k].clamp(min=0)]
        score = score + step * mask[:, k]
        nxt = torch.logsumexp(alpha[:, :, None] + tr[None] + emit[:, k, None, :], dim=1)
        alpha = torch.where(mask[:, k, None], nxt, alpha)
    score = score + end[tags[rows, lengths - 1]]
    return (torch.logsumexp(alpha + end[None, :], dim=1) - score).mean()


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
    if a.crf:
        pos = torch.arange(a.maxlen)[None, :]
        labels = torch.where(pos < lengths[:, None], (torch.arange(a.batch)[:, None] + pos) %
                             a.classes, torch.full_like(pos, -1))
    return ids, lengths, labels, int(lengths.sum()), state


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cell", default="lstm", choices=("lstm", "gru"))
    for name, v in (("embed", 64), ("hidden", 128), ("layers", 1), ("maxlen", 30),
                    ("minlen", 20), ("batch", 64), ("steps", 30), ("threads", 2),
                    ("vocab", 1000), ("classes", 10)):
        p.add_argument("--" + name, type=int, default=v)
    p.add_argument("--bidirectional", action="store_true")
    p.add_argument("--crf", action="store_true")
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
        y = model(ids, lengths)
        loss = crf_nll(y, labels, lengths, model.transitions) if a.crf else \
            F.cross_entropy(y, labels)
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
    print(json.dumps({"side": "torch", "cell": a.cell + ("-crf" if a.crf else ""),
                      "threads": a.threads, "batch": a.batch,
                      "train_tokens_per_sec": round(tokens / train_s),
                      "infer_tokens_per_sec": round(infer_tokens / infer_s),
                      "loss": round(float(loss), 4)}))


if __name__ == "__main__":
    main()
