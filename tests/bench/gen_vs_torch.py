#!/usr/bin/python3
"""gen_vs_torch.py: PyTorch's side of tests/bench/gen_vs_torch: the
transformer of tests/tools/gen_bench.c (its DIR/model.json and
DIR/weights.safetensors: the very same weights), decoding greedily with a
key-value cache as a PyTorch user writes one: each layer's past keys and
values concatenated with the new ones every step, nn.MultiheadAttention's
arithmetic by hand (one packed input projection, softmax(q k^T / sqrt(d))
v over 4 heads, the output projection), only the last position's logits.

    gen_vs_torch.py --dir DIR [--threads N] [--new-tokens K] [--rounds R]

Decodes DIR/prompts.txt (a) one sequence at a time and (b) as one static
batch of 16, the prompts padded on the left (each sequence's positions
from 0 at its first byte; a mask keeps the padding out of every other
position's attention). Then the staggered arrivals of DIR/arrivals.txt
(seconds from the start) on the wall clock, served as a static batcher
does: whenever idle, every request that has arrived becomes one batch,
run to its end; and one at a time, first come first served. Tokens/s
count generated tokens over the wall time (prefills included); time to
first token is from arrival to the first token's argmax. First checks that
its ids equal DIR/ids.json's (dlserve's) and says so, or where they part.
Prints one JSON line (the check on stderr)."""

import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


def read_safetensors(path):
    """{name: float32 tensor} and the metadata of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    meta = head.pop("__metadata__", {})
    out = {}
    for name, t in head.items():
        if t["dtype"] != "F32":
            raise ValueError("%s: %s is %s, not F32" % (path, name, t["dtype"]))
        a, b = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32) \
            .reshape(t["shape"])
    return out, meta


class Block(nn.Module):
    """Pre-layernorm: x + attention(ln(x)), then x + fc_b(gelu(fc_a(ln(x))))."""

    def __init__(self, e, heads, hidden):
        super().__init__()
        self.heads = heads
        self.ln_a = nn.LayerNorm(e)
        self.in_proj = nn.Linear(e, 3 * e)
        self.out_proj = nn.Linear(e, e)
        self.ln_b = nn.LayerNorm(e)
        self.fc_a = nn.Linear(e, hidden)
        self.fc_b = nn.Linear(hidden, e)

    def forward(self, x, past, mask):
        """x [B, T, E]; past (k, v) [B, H, P, d] or None; mask [B, 1, T, P + T]
        additive or None. Returns x and the new (k, v)."""
        b, t, e = x.shape
        h, d = self.heads, e // self.heads
        q, k, v = (z.view(b, t, h, d).transpose(1, 2)
                   for z in self.in_proj(self.ln_a(x)).split(e, dim=-1))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        s = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        if mask is not None:
            s = s + mask
        o = torch.matmul(torch.softmax(s, dim=-1), v).transpose(1, 2).reshape(b, t, e)
        x = x + self.out_proj(o)
        x = x + self.fc_b(F.gelu(self.fc_a(self.ln_b(x))))
        return x, (k, v)


class Gpt(nn.Module):
    def __init__(self, spec, weights):
        super().__init__()
        lay = {l["name"]: l for l in spec["layers"]}
        e = lay["emb"]["dim"]
        self.blocks = nn.ModuleList()
        i = 0
        while "att%d" % i in lay:
            self.blocks.append(Block(e, lay["att%d" % i]["heads"], lay["fc%da" % i]["units"]))
            i += 1
        self.emb = nn.Embedding(lay["emb"]["num_embeddings"], e)
        self.pos = nn.Embedding(lay["pos"]["max_length"], e)
        self.lnf = nn.LayerNorm(e)
        self.head = nn.Linear(e, lay["logits"]["units"])
        names = {"emb": "emb", "pos": "pos", "lnf": "lnf", "head": "logits"}
        for i in range(len(self.blocks)):
            names.update({"blocks.%d.ln_a" % i: "ln%da" % i, "blocks.%d.ln_b" % i: "ln%db" % i,
                          "blocks.%d.in_proj" % i: "att%d" % i,
                          "blocks.%d.out_proj" % i: "att%d.out_proj" % i,
                          "blocks.%d.fc_a" % i: "fc%da" % i, "blocks.%d.fc_b" % i: "fc%db" % i})
        state = {}
        for key in self.state_dict():
            mod, _, what = key.rpartition(".")
            src = names[mod]
            if mod.endswith("in_proj"):
                state[key] = weights["%s.in_proj_%s" % (src, what)]
            else:
                state[key] = weights["%s.%s" % (src, what)]
        self.load_state_dict(state)

    def forward(self, ids, pos, past, mask):
        """ids, pos [B, T] (int64); past: per block (k, v) or None. Returns
        the last position's logits [B, V] and the new past."""
        x = self.emb(ids) + self.pos(pos)
        new = []
        for i, blk in enumerate(self.blocks):
            x, kv = blk(x, past[i] if past else None, mask)
            new.append(kv)
        return self.head(self.lnf(x[:, -1])), new


def decode_one(model, prompt, k):
    """Greedy ids of one prompt and the seconds to its first token."""
    t0 = time.perf_counter()
    ids = torch.tensor([prompt], dtype=torch.int64)
    n = len(prompt)
    causal = torch.full((n, n), float("-inf")).triu(1)[None, None]
    logits, past = model(ids, torch.arange(n)[None], None, causal)
    out = [int(logits.argmax(-1))]
    first = time.perf_counter() - t0
    for _ in range(k - 1):
        logits, past = model(torch.tensor([[out[-1]]]), torch.tensor([[n]]), past, None)
        n += 1
        out.append(int(logits.argmax(-1)))
    return out, first


def decode_batch(model, prompts, k):
    """Greedy ids of prompts as one static batch, left-padded, and the
    seconds to their first tokens (all at once)."""
    t0 = time.perf_counter()
    b, L = len(prompts), max(len(p) for p in prompts)
    pad = torch.tensor([L - len(p) for p in prompts])
    ids = torch.tensor([[0] * (L - len(p)) + list(p) for p in prompts], dtype=torch.int64)
    pos = (torch.arange(L)[None] - pad[:, None]).clamp(min=0)
    # keys a query may see: earlier ones that are not padding (a padding
    # position sees itself, so that no row of its softmax is empty)
    real = torch.arange(L + k)[None] >= pad[:, None]                      # [B, S]
    allowed = torch.ones(L, L, dtype=torch.bool).tril()[None] & \
        (real[:, None, :L] | torch.eye(L, dtype=torch.bool)[None])
    mask = torch.zeros(b, 1, L, L).masked_fill(~allowed[:, None], float("-inf"))
    step_mask = torch.zeros(b, 1, 1, L + k).masked_fill(~real[:, None, None], float("-inf"))
    logits, past = model(ids, pos, None, mask)
    nxt = logits.argmax(-1)
    out = [nxt]
    first = time.perf_counter() - t0
    pos = pos[:, -1:] + 1
    for i in range(k - 1):
        logits, past = model(nxt[:, None], pos, past, step_mask[..., :L + i + 1])
        nxt = logits.argmax(-1)
        out.append(nxt)
        pos = pos + 1
    return torch.stack(out, 1).tolist(), first


def serve(model, prompts, arrive, k, batched):
    """Replays arrivals (seconds from now): a static batcher (batched) or
    one at a time. Returns the wall time and each request's time to first
    token from its arrival."""
    t0 = time.perf_counter()
    ttft = [0.0] * len(prompts)
    nxt = 0
    while nxt < len(prompts):
        wait = t0 + arrive[nxt] - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        now = time.perf_counter() - t0
        take = [i for i in range(nxt, len(prompts)) if arrive[i] <= now]
        if not batched:
            take = take[:1]
        start = time.perf_counter() - t0
        if len(take) == 1:
            _, first = decode_one(model, prompts[take[0]], k)
        else:
            _, first = decode_batch(model, [prompts[i] for i in take], k)
        for i in take:
            ttft[i] = start + first - arrive[i]
        nxt = take[-1] + 1
    return time.perf_counter() - t0, ttft


def pct(v, q):
    """The nearest-rank percentile q of v."""
    v = sorted(v)
    r = max(1, min(len(v), math.ceil(q / 100.0 * len(v))))
    return v[r - 1]


def check(torch_ids, dlserve_ids, what):
    """A line saying whether the greedy ids agree, or where they first part."""
    for i, (a, b) in enumerate(zip(torch_ids, dlserve_ids)):
        for j, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return False, "%s: prompt %d parts at token %d: dlserve %d, torch %d" % \
                    (what, i, j, y, x)
    return True, "%s: the greedy ids agree with dlserve's (%d prompts x %d tokens)" % \
        (what, len(torch_ids), len(torch_ids[0]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    spec = json.load(open(os.path.join(a.dir, "model.json")))
    weights, _ = read_safetensors(os.path.join(a.dir, "weights.safetensors"))
    model = Gpt(spec, weights).eval()
    prompts = [list(l.rstrip("\n").encode()) for l in open(os.path.join(a.dir, "prompts.txt"))]
    arrive = [float(l) for l in open(os.path.join(a.dir, "arrivals.txt"))]
    theirs = json.load(open(os.path.join(a.dir, "ids.json")))["ids"]
    k = a.new_tokens
    with torch.inference_mode():
        one = [decode_one(model, p, k)[0] for p in prompts]      # also the warm-up
        batch, _ = decode_batch(model, prompts, k)
        agree = []
        for got, what in ((one, "one at a time"), (batch, "static batch")):
            ok, line = check(got, theirs, what)
            print("gen_vs_torch: " + line, file=sys.stderr)
            agree.append(ok)
        one_s = batch_s = math.inf
        one_first, batch_first, queue = [], [], []
        stag = {True: [math.inf, []], False: [math.inf, []]}
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            for p in prompts:    # also sixteen arriving together, served in turn
                t1 = time.perf_counter()
                first = decode_one(model, p, k)[1]
                one_first.append(first)
                queue.append(t1 + first - t0)
            one_s = min(one_s, time.perf_counter() - t0)
            t0 = time.perf_counter()
            batch_first.append(decode_batch(model, prompts, k)[1])
            batch_s = min(batch_s, time.perf_counter() - t0)
            for batched in (True, False):
                w, tt = serve(model, prompts, arrive, k, batched)
                stag[batched][0] = min(stag[batched][0], w)
                stag[batched][1] += tt
    tokens = len(prompts) * k
    print(json.dumps({
        "side": "torch", "threads": a.threads, "new_tokens": k, "agree": all(agree),
        "one_tokens_per_sec": round(tokens / one_s, 1),
        "batch_tokens_per_sec": round(tokens / batch_s, 1),
        "one_ttft_ms": round(1e3 * min(one_first), 3),
        "batch_ttft_ms": round(1e3 * min(batch_first), 3),
        "queue_ttft_p50_ms": round(1e3 * pct(queue, 50), 3),
        "queue_ttft_p99_ms": round(1e3 * pct(queue, 99), 3),
        "staggered_batch_tokens_per_sec": round(tokens / stag[True][0], 1),
        "staggered_batch_ttft_p50_ms": round(1e3 * pct(stag[True][1], 50), 3),
        "staggered_batch_ttft_p99_ms": round(1e3 * pct(stag[True][1], 99), 3),
        "staggered_one_tokens_per_sec": round(tokens / stag[False][0], 1),
        "staggered_one_ttft_p50_ms": round(1e3 * pct(stag[False][1], 50), 3),
        "staggered_one_ttft_p99_ms": round(1e3 * pct(stag[False][1], 99), 3)}))


if __name__ == "__main__":
    main()
