"""onnx_vs_ort.py: ONNX models in dlserve, against ONNX Runtime on the CPU.

    onnx_vs_ort.py DLSERVE OUT_DIR --ort NODE_MODULES
                   [--models resnet18,mobilenet_v2,...] [--threads 2]
                   [--rounds 2] [--min-secs 1.0] [--spin 0|1]

For each model, exports it with torch (seeded random weights, opset 17,
dynamic batch on input "x" and output "y") to OUT_DIR/MODEL.onnx:
torchvision's resnet18, mobilenet_v2, efficientnet_b0 and
shufflenet_v2_x1_0 (weights=None, 224x224x3 images), or `transformer`:
nn.TransformerEncoder (4 layers, d_model 256, 4 heads, feed-forward 1024,
ReLU, batch first) over 128 tokens, mean pooled into a linear head of 10
classes. Then:
  - imports it (dlserve --import); a model dlserve refuses is reported as
    "refused: <the error's first line>" and the run goes on to the next;
  - checks dlserve's outputs of two inputs (dlserve --predict) against
    ONNX Runtime's (ort_rate.js --run on the same inputs): max |difference|
    over max |ONNX Runtime's output|; ONNX Runtime's against PyTorch's too,
    to vouch for the peer;
  - inference samples/s at batch 1 and 32, in --rounds alternated rounds
    of: ONNX Runtime (tests/bench/ort_rate.js through node and
    onnxruntime-node from --ort: graph optimisation 'all', --threads
    intra-op threads, 1 inter-op thread, sequential; 3 warm-up passes, then
    at least --min-secs and 3 passes), then dlserve --bench --infer-batch
    1,1,1,32 (the last window of each batch size: the first two at batch 1
    warm it up), both at --threads threads on uniform random inputs.
The table gives the better (max) of the rounds for each side, as "the
better of two alternated rounds each"; OUT_DIR/results.json holds every
round and the medians too.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torchvision
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)   # ReLU
        self.enc = nn.TransformerEncoder(layer, num_layers=4)
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


def vision(name):
    return lambda: getattr(torchvision.models, name)(weights=None)


IMAGE = (3, 224, 224)
# name: (the module, a sample's shape)
MODELS = {
    "resnet18": (vision("resnet18"), IMAGE),
    "mobilenet_v2": (vision("mobilenet_v2"), IMAGE),
    "efficientnet_b0": (vision("efficientnet_b0"), IMAGE),
    "shufflenet_v2_x1_0": (vision("shufflenet_v2_x1_0"), IMAGE),
    "transformer": (Transformer, (128, 256)),
}
BATCHES = (1, 32)


def export(path, name):
    torch.manual_seed(0)
    make, shape = MODELS[name]
    m = make().eval()
    torch.onnx.export(m, torch.randn(1, *shape), path, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                      opset_version=17)
    return m


def first_line(text):
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return lines[0] if lines else "(no message)"


def ort_cmd(a, onnx, shape):
    return ["node", os.path.join(HERE, "ort_rate.js"), onnx, "--ort", a.ort,
            "--shape", ",".join(map(str, shape)), "--threads", str(a.threads),
            "--spin", str(a.spin)]


def rel_diff(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def check_outputs(a, m, name, onnx, model_dir):
    """(dlserve against ORT, ORT against PyTorch): max relative differences
    on two inputs."""
    shape = MODELS[name][1]
    torch.manual_seed(1)
    x = torch.rand(2, *shape)
    raw, got_raw = os.path.join(a.out, "two.f32"), os.path.join(a.out, "two.ort.f32")
    x.numpy().astype("<f4").tofile(raw)
    subprocess.run(ort_cmd(a, onnx, shape) + ["--run", raw, got_raw],
                   check=True, capture_output=True, text=True)
    ort_y = np.fromfile(got_raw, dtype="<f4").reshape(2, -1)
    csv = os.path.join(a.out, "two.csv")
    with open(csv, "w") as f:
        for row in x.reshape(2, -1).tolist():
            f.write(",".join("%.8g" % v for v in row) + "\n")
    r = subprocess.run([a.dlserve, "--predict", model_dir, csv],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("predict failed: " + first_line(r.stderr or r.stdout))
    got = np.array([json.loads(l)["outputs"]["y"] for l in r.stdout.splitlines()
                    if l.startswith("{")], dtype=np.float32).reshape(2, -1)
    with torch.no_grad():
        want = m(x).numpy().reshape(2, -1)
    return rel_diff(got, ort_y), rel_diff(ort_y, want)


def ort_rates(a, onnx, shape):
    """{batch: samples/s} of one ort_rate.js run."""
    r = subprocess.run(ort_cmd(a, onnx, shape) + [
        "--batches", ",".join(map(str, BATCHES)), "--min-secs", str(a.min_secs)],
        capture_output=True, text=True, check=True)
    return {d["batch"]: d["samples_per_sec"]
            for d in (json.loads(l) for l in r.stdout.splitlines() if l.startswith("{"))}


def dlserve_rates(dlserve, model, threads):
    """{batch: [samples/s per timed window]} of one --bench run."""
    r = subprocess.run([dlserve, "--bench", model, "--threads", str(threads),
                        "--infer-batch", "1,1,1,32"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("bench failed: " + first_line(r.stderr or r.stdout))
    rates = {}
    for l in r.stdout.splitlines():
        if l.startswith("{"):
            d = json.loads(l)
            rates.setdefault(d["batch"], []).append(d["infer_samples_per_sec"])
    return rates


def run_model(a, name):
    shape = MODELS[name][1]
    res = {"model": name, "shape": list(shape)}
    onnx = os.path.join(a.out, name + ".onnx")
    models = os.path.join(a.out, "models")
    model_dir = os.path.join(models, name)
    log("%s: export ..." % name)
    m = export(onnx, name)
    r = subprocess.run([a.dlserve, "--import", onnx, "--models", models, "--name", name],
                       capture_output=True, text=True)
    if r.returncode != 0:
        res["refused"] = first_line(r.stderr or r.stdout)
        log("%s: refused: %s" % (name, res["refused"]))
        return res
    try:
        res["max_rel_diff"], res["ort_vs_torch_rel_diff"] = check_outputs(
            a, m, name, onnx, model_dir)
        log("%s: outputs: max relative difference %.2g against ONNX Runtime "
            "(ONNX Runtime against PyTorch: %.2g)"
            % (name, res["max_rel_diff"], res["ort_vs_torch_rel_diff"]))
        runs = {"ort": {b: [] for b in BATCHES}, "dlserve": {b: [] for b in BATCHES},
                "dlserve_windows": []}
        for rnd in range(a.rounds):
            log("%s: round %d/%d ..." % (name, rnd + 1, a.rounds))
            for b, v in ort_rates(a, onnx, shape).items():
                runs["ort"][b].append(v)
            time.sleep(0.5)   # ONNX Runtime's threads wind down
            w = dlserve_rates(a.dlserve, model_dir, a.threads)
            runs["dlserve_windows"].append(w)
            for b in BATCHES:
                runs["dlserve"][b].append(w[b][-1])
    except (RuntimeError, subprocess.CalledProcessError) as e:
        msg = e.stderr if isinstance(e, subprocess.CalledProcessError) else str(e)
        res["failed"] = first_line(msg or str(e))
        log("%s: failed: %s" % (name, res["failed"]))
        return res
    res["runs"] = runs
    res["best"] = {s: {b: max(runs[s][b]) for b in BATCHES} for s in ("ort", "dlserve")}
    res["median"] = {s: {b: statistics.median(runs[s][b]) for b in BATCHES}
                     for s in ("ort", "dlserve")}
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dlserve")
    ap.add_argument("out")
    ap.add_argument("--ort", required=True, help="node_modules holding onnxruntime-node")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--min-secs", type=float, default=1.0)
    ap.add_argument("--spin", type=int, choices=(0, 1), default=0)
    a = ap.parse_args()
    names = [n for n in a.models.split(",") if n]
    for n in names:
        if n not in MODELS:
            ap.error("unknown model %s (one of %s)" % (n, ", ".join(MODELS)))
    torch.set_num_threads(a.threads)
    t0 = time.time()
    results = [run_model(a, n) for n in names]
    out = {"threads": a.threads, "rounds": a.rounds, "min_secs": a.min_secs,
           "ort_spin": a.spin, "seconds": time.time() - t0, "models": results}
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(out, f, indent=1)

    print("random weights, %d threads, the better of %d alternated round%s each "
          "(medians in results.json)" % (a.threads, a.rounds, "" if a.rounds == 1 else "s"))
    print()
    print("| model | batch | dlserve samples/s | ORT samples/s | ratio |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        if "refused" in r or "failed" in r:
            what = "refused: " + r["refused"] if "refused" in r else "failed: " + r["failed"]
            print("| %s | | %s | | |" % (r["model"], what.replace("|", "\\|")))
            continue
        for b in BATCHES:
            d, o = r["best"]["dlserve"][b], r["best"]["ort"][b]
            print("| %s | %d | %.1f | %.1f | %.2fx |" % (r["model"], b, d, o, d / o))
    print()
    for r in results:
        if "max_rel_diff" in r:
            print("%s: outputs against ONNX Runtime's: max relative difference %.1e "
                  "(ONNX Runtime against PyTorch: %.1e)"
                  % (r["model"], r["max_rel_diff"], r["ort_vs_torch_rel_diff"]))
    print("%.0f s" % out["seconds"])


if __name__ == "__main__":
    main()
