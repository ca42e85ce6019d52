#!/usr/bin/python3
"""gpt_train.py DATA_DIR: PyTorch's side of tests/bench/gpt_train: the
architecture of models/kjv-gpt (read from its model.json: a byte
embedding and a learned position table, pre-layernorm blocks of
nn.MultiheadAttention with a causal mask and a GELU MLP, a final
layernorm, a dense layer to 256 logits), trained with the next-token
cross-entropy and AdamW (model.json's lr and weight decay, the gradients'
norm clipped as it says) on DATA_DIR/train.jsonl's windows in batches of
model.json's size, in training tokens/s (positions of the windows, as
dlserve --bench counts samples x 128). Options: --model-json, --threads,
--steps (timed, after 5 warm-up steps). Prints one JSON line."""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, d, ctx, layers, heads, hidden):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(ctx, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads, hidden) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.logits = nn.Linear(d, vocab)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.emb(ids) + self.pos[:t]
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        for b in self.blocks:
            x = b(x, mask)
        return self.logits(self.ln_f(x))


def arch(conf):
    """(vocab, width, context, blocks, heads, MLP width) of model.json."""
    layers = conf["layers"]
    emb = next(l for l in layers if l["type"] == "embedding")
    attn = [l for l in layers if l["type"] == "attention"]
    fc1 = next(l for l in layers if l["type"] == "dense")
    return (emb["num_embeddings"], emb["dim"], conf["inputs"][0]["max_length"], len(attn),
            attn[0]["heads"], fc1["units"])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--model-json", default="models/kjv-gpt/model.json")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    conf = json.load(open(a.model_json))
    tr = conf["training"]
    vocab, d, ctx, layers, heads, hidden = arch(conf)
    model = Gpt(vocab, d, ctx, layers, heads, hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=tr["lr"],
                            weight_decay=tr.get("weight_decay", 0.0))
    batch = tr["batch_size"]
    windows = []
    with open(a.data + "/train.jsonl") as f:
        for line in f:
            ids = json.loads(line)["ids"]
            if len(ids) == ctx:
                windows.append(ids)
            if len(windows) == batch * (a.steps + 5):
                break
    data = torch.tensor(windows, dtype=torch.int64)
    tokens = 0
    for s in range(-5, a.steps):
        if s == 0:
            t0 = time.perf_counter()
        ids = data[(s + 5) * batch:(s + 6) * batch]
        opt.zero_grad(set_to_none=True)
        y = model(ids)
        loss = F.cross_entropy(y[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        if tr.get("clip_norm"):
            nn.utils.clip_grad_norm_(model.parameters(), tr["clip_norm"])
        opt.step()
        tokens += ids.numel() if s >= 0 else 0
    secs = time.perf_counter() - t0
    print(json.dumps({"side": "torch", "torch": torch.__version__, "threads": a.threads,
                      "batch": batch, "steps": a.steps,
                      "train_tokens_per_sec": round(tokens / secs),
                      "loss": round(float(loss), 4)}))


if __name__ == "__main__":
    main()
