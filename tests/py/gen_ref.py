#!/usr/bin/python3
"""gen_ref.py: PyTorch's side of dlserve's generation tests.

Interprets a model directory's model.json graph in torch (torch_graph.py:
attention as nn.MultiheadAttention, dense as nn.Linear, layernorm,
embedding, pos_embedding, lstm / gru, ... under dlserve's tensor names)
with the weights of <dir>/<version>/model.safetensors, and decodes as
src/nn/dl_gen.h specifies, recomputing the whole prefix each step:

- the "generate" block: `input` (INT64 [-1] ids), `output` (next-token
  logits at every position), `max_context`, `eos` (its text; one byte of
  the bytes tokenizer, the only one here), `source` for an
  encoder-decoder (its ids: the prompt's bytes; the decoder starts from
  the eos token);
- greedy: the highest logit, the lowest id among equals; it ends at eos
  ("stop", the eos id the last one), at max_tokens or when the context
  is full ("length": prompt and generated ids fill max_context);
- beam search of width W: W beams from one; each step every beam's score
  (its tokens' summed log-softmax) plus each token's log-probability is a
  candidate; of the best 2W (higher score, then the lower beam, then the
  lower id) those among the first W that end in eos finish, ranked by
  score / (tokens generated, eos included)^length_penalty, and the first
  W that do not are the next beams; it stops once W have finished, or at max_tokens (or a full
  context), when the live beams finish too ("length"); the best finished
  one answers, the first among equals. Width 1 is greedy.

    gen_ref.py init MODEL_DIR --seed S [--version V] [--prompts P.json
            --max-tokens N]
        random weights (torch_graph.random_init) written to
        MODEL_DIR/V/model.safetensors (V 1). With prompts, the output
        layer's bias of the eos id is raised step by step until greedy
        decoding ends some of the prompts with eos after a token or more
        and leaves others running to max_tokens, so that both endings are
        tested.
    gen_ref.py decode MODEL_DIR --prompts P.json --max-tokens N
            [--beam-width W] [--length-penalty A] [--version V]
            [--dtype float64|float32]
        P.json: a JSON list of prompt texts. Prints one line a prompt:
        "<stop|length> <id> <id> ...", the generated ids (eos included
        where it ended the text); on stderr the smallest margin between
        the chosen candidate and the next one seen, so a mismatch can be
        told from a near tie.

Only the Python standard library, numpy and torch (/usr/bin/python3) are
used.
"""

import argparse
import copy
import math
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_graph as tg  # noqa: E402
import torch_model as tm  # noqa: E402

import torch  # noqa: E402


class GenModel:
    """A model directory's graph and generate block, evaluated in torch."""

    def __init__(self, model_dir, dtype=torch.float64):
        with open(os.path.join(model_dir, "model.json")) as f:
            self.spec = json.load(f)
        gen = self.spec.get("generate")
        if not isinstance(gen, dict):
            raise tg.ModelError("%s/model.json has no generate block" % model_dir)
        self.gen = gen
        self.input, self.output = gen["input"], gen["output"]
        self.source = gen.get("source") or None
        self.max_context = int(gen["max_context"])
        eos = gen.get("eos", "")
        tok = (gen.get("tokenizer") or {}).get("type", "bytes")
        if tok != "bytes":
            raise tg.ModelError("only the bytes tokenizer is implemented here")
        self.eos = eos.encode("utf-8")[0] if eos else None
        if eos and len(eos.encode("utf-8")) != 1:
            raise tg.ModelError("eos must be one byte here: %r" % eos)
        self.graph = tg.build(self._plain_spec())
        self.dtype = dtype
        self.graph.eval()

    def _plain_spec(self):
        """The spec torch_graph builds: text inputs as their ids, losses
        that it knows (the logits are all that is read)."""
        spec = copy.deepcopy(self.spec)
        for i in spec.get("inputs", []):
            if i.get("datatype") == "BYTES":
                i["datatype"], i["shape"] = "INT64", [-1]
                i.pop("tokenizer", None)
        for o in spec.get("outputs", []):
            o["loss"] = "mse"
            o.pop("of", None)
        spec.pop("generate", None)
        return spec

    def load(self, path):
        tg.load_weights(self.graph, path)
        self.graph.to(self.dtype)

    def ids_of(self, text):
        return list(text.encode("utf-8"))

    def start(self, prompt):
        """(the source's ids or None, the decoder's first ids)."""
        ids = self.ids_of(prompt)
        if self.source:
            return ids, [self.eos]
        return None, ids

    def logprobs(self, src, prefixes):
        """log_softmax of the next-token logits after each prefix (all of
        one length), [len(prefixes), V] in self.dtype."""
        n, t = len(prefixes), len(prefixes[0])
        xs, lengths = [], {}
        for i in self.graph.inputs:
            if i["name"] == self.input:
                xs.append(torch.tensor(prefixes, dtype=torch.int64))
                lengths[i["name"]] = torch.full((n,), t, dtype=torch.int64)
            elif i["name"] == self.source:
                xs.append(torch.tensor([src] * n, dtype=torch.int64))
                lengths[i["name"]] = torch.full((n,), len(src), dtype=torch.int64)
            else:
                raise tg.ModelError("input '%s' is neither the ids nor the source" % i["name"])
        names = [o["name"] for o in self.graph.outputs]
        with torch.no_grad():
            y = self.graph(*xs, lengths=lengths)[names.index(self.output)]
        return torch.log_softmax(y[:, t - 1].to(torch.float64), dim=-1)

    def full(self, ids):
        """Whether ids (the decoder's, prompt or start included) fill the
        context."""
        return len(ids) >= self.max_context


def greedy(gm, prompt, max_tokens, margins):
    src, ids = gm.start(prompt)
    out = []
    while True:
        lp = gm.logprobs(src, [ids + out])[0]
        top = torch.topk(lp, 2)
        best = int(torch.argmax(lp))    # the first maximum: the lowest id
        margins.append(float(top.values[0] - top.values[1]))
        out.append(best)
        if best == gm.eos:
            return "stop", out
        if len(out) >= max_tokens or gm.full(ids + out):
            return "length", out


def beam(gm, prompt, max_tokens, width, penalty, margins):
    if width == 1:
        return greedy(gm, prompt, max_tokens, margins)
    src, start = gm.start(prompt)
    live = [(0.0, [])]
    done = []           # (normalised score, score, ids, finish), in finishing order
    while True:
        lp = gm.logprobs(src, [start + ids for _, ids in live])
        cands = []
        for b, (score, _) in enumerate(live):
            for i, v in enumerate(lp[b].tolist()):
                cands.append((score + v, b, i))
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        nxt, used = [], -1
        for k, (score, b, i) in enumerate(cands[:2 * width]):
            ids = live[b][1] + [i]
            if i == gm.eos:
                if k >= width:      # ranked below the beams that go on
                    continue
                done.append((score / len(ids) ** penalty, score, ids, "stop"))
            elif len(nxt) < width:
                nxt.append((score, ids))
            else:
                continue
            used = k
        margins.append(beam_margin(cands, used))
        if len(done) >= width:
            break
        live = nxt
        n = len(live[0][1])
        if n >= max_tokens or gm.full(start + live[0][1]):
            for score, ids in live:
                done.append((score / n ** penalty, score, ids, "length"))
            break
    best = done[0]
    for d in done[1:]:
        if d[0] > best[0]:
            best = d
    norms = sorted((d[0] for d in done), reverse=True)
    if len(norms) > 1:
        margins.append(norms[0] - norms[1])
    return best[3], best[2]


def beam_margin(cands, used):
    """How far the step's outcome is from changing (at most): the last
    candidate it used against the next one."""
    return cands[used][0] - cands[used + 1][0] if 0 <= used < len(cands) - 1 else math.inf


def decode_all(gm, prompts, max_tokens, width=1, penalty=1.0):
    margins, res = [], []
    for p in prompts:
        res.append(beam(gm, p, max_tokens, width, penalty, margins))
    return res, margins


def output_layer(gm):
    for o in gm.graph.outputs:
        if o["name"] == gm.output:
            return o["from"]
    raise tg.ModelError("no output '%s'" % gm.output)


def cmd_init(a):
    gm = GenModel(a.model_dir)
    tg.random_init(gm.graph, a.seed)
    gm.graph.to(torch.float64)
    if a.prompts and gm.eos is not None:
        prompts = json.load(open(a.prompts))
        bias = getattr(gm.graph, output_layer(gm)).bias
        base = float(bias[gm.eos])
        for step in range(80):
            with torch.no_grad():
                bias[gm.eos] = base + 0.25 * step
            res, _ = decode_all(gm, prompts, a.max_tokens)
            late = sum(f == "stop" and len(ids) > 1 for f, ids in res)
            running = sum(f == "length" for f, _ in res)
            if late and running:
                break
        else:
            raise SystemExit("gen_ref.py init: no eos bias ends some prompts early and not "
                             "all of them")
        print("eos bias %+.2f: %d of %d end at eos" % (0.25 * step, len(res) - running,
                                                        len(res)), file=sys.stderr)
    out = os.path.join(a.model_dir, str(a.version))
    os.makedirs(out, exist_ok=True)
    tm.write_safetensors(os.path.join(out, "model.safetensors"), tg.weights_of(gm.graph))


def cmd_decode(a):
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    gm = GenModel(a.model_dir, dtype)
    gm.load(os.path.join(a.model_dir, str(a.version), "model.safetensors"))
    prompts = json.load(open(a.prompts))
    res, margins = decode_all(gm, prompts, a.max_tokens, a.beam_width, a.length_penalty)
    for finish, ids in res:
        print(" ".join([finish] + [str(i) for i in ids]))
    if margins:
        print("smallest margin %.3g" % min(margins), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init")
    p.add_argument("model_dir")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--version", type=int, default=1)
    p.add_argument("--prompts")
    p.add_argument("--max-tokens", type=int, default=16)
    p = sub.add_parser("decode")
    p.add_argument("model_dir")
    p.add_argument("--prompts", required=True)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--beam-width", type=int, default=1)
    p.add_argument("--length-penalty", type=float, default=1.0)
    p.add_argument("--version", type=int, default=1)
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    a = ap.parse_args()
    torch.set_num_threads(1)
    try:
        {"init": cmd_init, "decode": cmd_decode}[a.cmd](a)
    except tg.ModelError as e:
        raise SystemExit("gen_ref.py: %s" % e)


if __name__ == "__main__":
    main()
