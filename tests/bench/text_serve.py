#!/usr/bin/python3
"""text_serve.py: PyTorch's side of tests/bench/text_serve: the served text
model (its model.json and weights, built by tests/py/torch_graph.py) runs
the request bodies' texts, tokenized by its vocabulary as dlserve does, in
batches of --batch in order, each padded to its longest text (what a
PyTorch service does), no_grad and eval, at --threads. Prints one JSON
line: samples/s over --seconds of whole passes (the best pass)."""

import argparse
import json
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "py"))
import torch_graph as tg  # noqa: E402
import torch_model as tm  # noqa: E402

WORD = re.compile(rb"[A-Za-z0-9'\x80-\xff]+")


def tokenizer(model_dir, spec):
    inp = spec["inputs"][0]
    tok = inp["tokenizer"]
    if tok["type"] == "bytes":
        return lambda s: [b for b in s.encode() if b]
    words = open(os.path.join(model_dir, tok["vocab"]), "rb").read().split(b"\n")
    ids = {w: k + 2 for k, w in enumerate(words) if w}
    low = tok.get("lowercase", False)
    return lambda s: [ids.get(w, 1) for w in WORD.findall(s.encode().lower() if low
                                                          else s.encode())]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="a version's folder's model folder")
    p.add_argument("--version", default="1")
    p.add_argument("--bodies", required=True)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=5)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    spec = json.load(open(os.path.join(a.model, "model.json")))
    tok = tokenizer(a.model, spec)
    text = spec["inputs"][0]                # the texts' ids, as the tokenizer gives them
    spec["inputs"][0] = {"name": text["name"], "datatype": "INT64", "shape": [-1],
                         "max_length": text.get("max_length", 256)}
    model = tg.build(spec)
    state, _ = tm.read_safetensors(os.path.join(a.model, a.version, "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if not k.endswith("num_batches_tracked")]:
        sys.exit("text_serve.py: weights do not fit: missing %s, unexpected %s"
                 % (missing, unexpected))
    model.eval()
    name = spec["inputs"][0]["name"]
    texts = [json.loads(line)["inputs"][0]["data"][0] for line in open(a.bodies)]
    batches = []
    for i in range(0, len(texts), a.batch):
        seqs = [tok(t) for t in texts[i:i + a.batch]]
        longest = max(len(s) for s in seqs)
        ids = torch.zeros(len(seqs), longest, dtype=torch.int64)
        for j, s in enumerate(seqs):
            ids[j, :len(s)] = torch.tensor(s)
        batches.append((ids, torch.tensor([len(s) for s in seqs])))
    best, start = 0.0, time.perf_counter()
    with torch.no_grad():
        while time.perf_counter() - start < a.seconds or best == 0.0:
            t0 = time.perf_counter()
            for ids, lens in batches:
                model(ids, lengths={name: lens})
            best = max(best, len(texts) / (time.perf_counter() - t0))
    print(json.dumps({"side": "torch", "batch": a.batch, "threads": a.threads,
                      "texts": len(texts), "samples_per_sec": round(best, 1)}))


if __name__ == "__main__":
    main()
