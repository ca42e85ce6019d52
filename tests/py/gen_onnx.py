#!/usr/bin/python3
"""gen_onnx.py: a decoder-only transformer brought to dlserve as ONNX.

Builds a byte-level GPT in PyTorch 1.13 (learned positions from
torch.arange over the time axis; attention written out as nanoGPT writes
it: one packed q, k, v projection, heads by view and transpose, scaled
scores, a causal mask, softmax, the heads merged back; the first block's
mask an arange comparison, the second's a slice of a registered
torch.tril buffer, the third's torch.triu added to the scores), exports it
with torch.onnx.export over a dynamic time axis, and lays it out as a
model repository entry:

    OUT/gpt/model.json      {"generate": {"input": "ids", "output":
                             "logits", "max_context": 64, "eos": "\\n"}}
    OUT/gpt/1/model.onnx
    OUT/prompts.json        the prompts (--prompts, or several lengths
                            of its own, the last filling the context)
    OUT/ref.txt             PyTorch's greedy decoding of each prompt, as
                            gen_ref.py decode prints it ("<stop|length>
                            <id> ...")

The output layer's bias of the eos id is raised until greedy decoding
ends some prompts at eos and lets others run to max_tokens.

    gen_onnx.py OUT [--prompts P.json] [--max-tokens N] [--seed S]
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_ref as gr  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

CONTEXT = 64
PROMPTS = ["a", "The quick", "hello world, again", "xy", "In the beginning", "z",
           "0123456789", "And God said, Let there be light: and there was light."]


class Block(nn.Module):
    def __init__(self, e, heads, mask):
        super().__init__()
        self.e, self.heads, self.mask = e, heads, mask
        self.ln1 = nn.LayerNorm(e)
        self.qkv = nn.Linear(e, 3 * e)
        self.proj = nn.Linear(e, e)
        self.ln2 = nn.LayerNorm(e)
        self.fc1 = nn.Linear(e, 4 * e)
        self.fc2 = nn.Linear(4 * e, e)
        if mask == "tril":
            self.register_buffer("tril", torch.tril(torch.ones(CONTEXT, CONTEXT))
                                 .view(1, 1, CONTEXT, CONTEXT))

    def attend(self, x):
        b, t, e = x.shape
        h, d = self.heads, e // self.heads
        q, k, v = self.qkv(x).split(e, dim=2)
        q = q.view(b, t, h, d).transpose(1, 2)
        k = k.view(b, t, h, d).transpose(1, 2)
        v = v.view(b, t, h, d).transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        if self.mask == "arange":
            pos = torch.arange(t)
            s = s.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
        elif self.mask == "tril":
            s = s.masked_fill(self.tril[:, :, :t, :t] == 0, float("-inf"))
        else:
            s = s + torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        y = F.softmax(s, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, e))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, e=32):
        super().__init__()
        self.emb = nn.Embedding(256, e)
        self.pos = nn.Embedding(CONTEXT, e)
        self.blocks = nn.ModuleList([Block(e, 2, "arange"), Block(e, 4, "tril"),
                                     Block(e, 2, "triu")])
        self.lnf = nn.LayerNorm(e)
        self.head = nn.Linear(e, 256)

    def forward(self, ids):
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.lnf(x))


class Peer:
    """gen_ref.py's decoding over the module itself."""

    def __init__(self, m):
        self.m, self.eos, self.max_context = m, 10, CONTEXT

    def start(self, prompt):
        return None, list(prompt.encode("utf-8"))

    def logprobs(self, src, prefixes):
        with torch.no_grad():
            y = self.m(torch.tensor(prefixes, dtype=torch.int64))
        return torch.log_softmax(y[:, -1].to(torch.float64), dim=-1)

    def full(self, ids):
        return len(ids) >= self.max_context


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--prompts")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=11)
    a = ap.parse_args()
    torch.set_num_threads(1)
    prompts = json.load(open(a.prompts)) if a.prompts else PROMPTS
    torch.manual_seed(a.seed)
    m = GPT().eval()
    peer = Peer(m)
    base = float(m.head.bias[peer.eos])
    for step in range(80):
        with torch.no_grad():
            m.head.bias[peer.eos] = base + 0.25 * step
        res, margins = gr.decode_all(peer, prompts, a.max_tokens)
        if any(f == "stop" and len(ids) > 1 for f, ids in res) and \
                any(f == "length" for f, _ in res):
            break
    else:
        raise SystemExit("gen_onnx.py: no eos bias ends some prompts early and not all")
    d = os.path.join(a.out, "gpt")
    os.makedirs(os.path.join(d, "1"), exist_ok=True)
    torch.onnx.export(m, (torch.randint(1, 256, (2, 5)),), os.path.join(d, "1", "model.onnx"),
                      input_names=["ids"], output_names=["logits"],
                      dynamic_axes={"ids": {0: "batch", 1: "time"},
                                    "logits": {0: "batch", 1: "time"}},
                      opset_version=17)
    with open(os.path.join(d, "model.json"), "w") as f:
        json.dump({"generate": {"input": "ids", "output": "logits", "max_context": CONTEXT,
                                "eos": "\n"}}, f)
        f.write("\n")
    with open(os.path.join(a.out, "prompts.json"), "w") as f:
        json.dump(prompts, f)
    with open(os.path.join(a.out, "ref.txt"), "w") as f:
        for finish, ids in res:
            f.write(" ".join([finish] + [str(i) for i in ids]) + "\n")
    print("eos bias %+.2f: %d of %d end at eos; smallest margin %.3g"
          % (0.25 * step, sum(f == "stop" for f, _ in res), len(res), min(margins)),
          file=sys.stderr)


if __name__ == "__main__":
    main()
