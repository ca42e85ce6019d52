"""onnx_vs_torch.py: a PyTorch model through ONNX into dlserve, against PyTorch.

    onnx_vs_torch.py DLSERVE OUT_DIR [--model resnet18|transformer] [--threads 2]
                     [--rounds 3] [--loads 5]

Exports the model (seeded random weights) to OUT_DIR/MODEL.onnx (opset 17,
dynamic batch, PyTorch's default export): torchvision.models.resnet18 on
224x224x3 images, or `transformer`, nn.TransformerEncoder (2 layers,
d_model 256, 4 heads, feed-forward 1024, ReLU) over 64 positions, mean
pooled into a linear head of 10 classes: its attention runs batched
matmuls. Then:
  - imports it (dlserve --import) and checks dlserve's outputs of two inputs
    against PyTorch's (dlserve --predict on the imported version);
  - load time: the daemon started on a repository holding
    MODEL/1/model.onnx alone, from its launch to the "loaded" line of its
    log (reading, translating, building, weights, warm-up), and to the
    model's activation plan (built, before the warm-up); median of --loads;
  - inference samples/s at batch 1 and 32, in --rounds
    alternating rounds of: PyTorch eager, torch.jit (trace + freeze), and
    dlserve --bench --infer-batch 1,1,1,32 on the imported model (seeded
    inputs, the model's initial weights: the rate depends on neither), all
    at --threads threads. Medians over the rounds.
Writes OUT_DIR/results.json and prints a Markdown table.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torchvision
from torch import nn


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


# name: (the module, a sample's shape)
MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(weights=None), (3, 224, 224)),
    "transformer": (Transformer, (64, 256)),
}


def export(path, name):
    torch.manual_seed(0)
    make, shape = MODELS[name]
    m = make().eval()
    torch.onnx.export(m, torch.randn(1, *shape), path, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                      opset_version=17)
    return m


def check_outputs(dlserve, m, name, models, out):
    """Max relative difference of dlserve's outputs from PyTorch's on two inputs."""
    torch.manual_seed(1)
    x = torch.rand(2, *MODELS[name][1])
    csv = os.path.join(out, "two.csv")
    with open(csv, "w") as f:
        for row in x.reshape(2, -1).tolist():
            f.write(",".join("%.8g" % v for v in row) + "\n")
    r = subprocess.run([dlserve, "--predict", os.path.join(models, name), csv],
                       capture_output=True, text=True, check=True)
    got = torch.tensor([json.loads(l)["outputs"]["y"] for l in r.stdout.splitlines()
                        if l.startswith("{")])
    with torch.no_grad():
        want = m(x)
    return float((got - want).abs().max() / want.abs().max())


def log_time(line):
    """Seconds since the epoch of a log line's leading UTC timestamp."""
    stamp = line.split(" ", 1)[0].rstrip("Z")
    t = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def load_once(dlserve, repo, name, threads):
    """(to the plan, to 'loaded') in seconds from the daemon's launch."""
    t0 = time.time()
    p = subprocess.Popen([dlserve, "--models", repo, "--threads", str(threads),
                          "--set", "http.port=0", "--set", "log.level=debug",
                          "--set", "log.debug=nn"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    plan = loaded = None
    try:
        for line in p.stderr:
            if "activation plan" in line and plan is None:
                plan = log_time(line) - t0
            if "%s version 1 loaded" % name in line:
                loaded = log_time(line) - t0
                break
            if "listening" in line:
                break
    finally:
        p.terminate()
        p.communicate(timeout=30)
    if loaded is None:
        raise RuntimeError("the daemon did not load " + name)
    return plan, loaded


def torch_rate(f, batch, shape, min_secs):
    """Samples/s over at least min_secs and 3 passes."""
    x = torch.rand(batch, *shape)
    with torch.no_grad():
        f(x)
        n, t0 = 0, time.perf_counter()
        while n < 3 or time.perf_counter() - t0 < min_secs:
            f(x)
            n += 1
        return n * batch / (time.perf_counter() - t0)


def dlserve_rates(dlserve, model, threads):
    """{batch: [samples/s per timed window]} of one --bench run."""
    r = subprocess.run([dlserve, "--bench", model, "--threads", str(threads),
                        "--infer-batch", "1,1,1,32"], capture_output=True, text=True, check=True)
    rates = {}
    for l in r.stdout.splitlines():
        if l.startswith("{"):
            d = json.loads(l)
            rates.setdefault(d["batch"], []).append(d["infer_samples_per_sec"])
    return rates


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dlserve")
    ap.add_argument("out")
    ap.add_argument("--model", choices=sorted(MODELS), default="resnet18")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loads", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    name, shape = a.model, MODELS[a.model][1]
    onnx = os.path.join(a.out, name + ".onnx")
    models, repo = os.path.join(a.out, "models"), os.path.join(a.out, "repo")
    log("export %s ..." % name)
    m = export(onnx, name)
    subprocess.run([a.dlserve, "--import", onnx, "--models", models, "--name", name],
                   check=True, capture_output=True)
    res = {"model": name, "threads": a.threads, "rounds": a.rounds,
           "max_rel_diff": check_outputs(a.dlserve, m, name, models, a.out)}
    log("outputs: max relative difference %.2g" % res["max_rel_diff"])
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    os.replace(onnx, os.path.join(repo, name, "1", "model.onnx"))
    loads = [load_once(a.dlserve, repo, name, a.threads) for _ in range(a.loads)]
    res["load_s"] = statistics.median(l[1] for l in loads)
    res["plan_s"] = statistics.median(l[0] for l in loads)
    log("load: %s" % ["%.3f" % l[1] for l in loads])
    jit = torch.jit.freeze(torch.jit.trace(m, torch.randn(1, *shape), check_trace=False))
    for b in (1, 32, 1, 32):   # the profiling executor settles on both shapes
        torch_rate(jit, b, shape, 0)
    runs = {"torch": {1: [], 32: []}, "jit": {1: [], 32: []}, "dlserve": {1: [], 32: []}}
    for r in range(a.rounds):
        log("round %d/%d ..." % (r + 1, a.rounds))
        for b in (1, 32):
            runs["torch"][b].append(torch_rate(m, b, shape, 1.0))
            runs["jit"][b].append(torch_rate(jit, b, shape, 1.0))
        time.sleep(0.5)   # torch's threads stop spinning
        for b, v in dlserve_rates(a.dlserve, os.path.join(models, name), a.threads).items():
            runs["dlserve"][b].extend(v)
    res["runs"] = runs
    res["median"] = {s: {b: statistics.median(v) for b, v in d.items()} for s, d in runs.items()}
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    med = res["median"]
    print("%s (random weights), input %s, %d threads, %d rounds, medians"
          % (name, "x".join(map(str, shape)), a.threads, a.rounds))
    print()
    print("| batch | dlserve samples/s | torch eager | torch.jit | vs eager | vs jit |")
    print("|---:|---:|---:|---:|---:|---:|")
    for b in (1, 32):
        d, e, j = med["dlserve"][b], med["torch"][b], med["jit"][b]
        print("| %d | %.1f | %.1f | %.1f | %.2fx | %.2fx |" % (b, d, e, j, d / e, d / j))
    print()
    print("load from model.onnx to served (daemon launch to 'loaded', median of %d): %.2f s "
          "(model built: %.2f s, then warm-up)" % (a.loads, res["load_s"], res["plan_s"]))
    print("outputs against PyTorch's: max relative difference %.1e" % res["max_rel_diff"])


if __name__ == "__main__":
    main()
