"""onnx_vs_torch.py: torchvision's resnet18 through ONNX into dlserve, against PyTorch.

    onnx_vs_torch.py DLSERVE OUT_DIR [--threads 2] [--rounds 3] [--loads 5]

Exports torchvision.models.resnet18(weights=None) (seeded random weights)
to OUT_DIR/resnet18.onnx (opset 17, dynamic batch, PyTorch's default
export), then:
  - imports it (dlserve --import) and checks dlserve's outputs of two images
    against PyTorch's (dlserve --predict on the imported version);
  - load time: the daemon started on a repository holding
    resnet18/1/model.onnx alone, from its launch to the "loaded" line of its
    log (reading, translating, building, weights, warm-up), and to the
    model's activation plan (built, before the warm-up); median of --loads;
  - inference images/s at batch 1 and 32 (224x224x3), in --rounds
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


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def export(path):
    torch.manual_seed(0)
    m = torchvision.models.resnet18(weights=None).eval()
    torch.onnx.export(m, torch.randn(1, 3, 224, 224), path, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                      opset_version=17)
    return m


def check_outputs(dlserve, m, models, out):
    """Max relative difference of dlserve's outputs from PyTorch's on two images."""
    torch.manual_seed(1)
    x = torch.rand(2, 3, 224, 224)
    csv = os.path.join(out, "two.csv")
    with open(csv, "w") as f:
        for row in x.reshape(2, -1).tolist():
            f.write(",".join("%.8g" % v for v in row) + "\n")
    r = subprocess.run([dlserve, "--predict", os.path.join(models, "resnet18"), csv],
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


def load_once(dlserve, repo, threads):
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
            if "resnet18 version 1 loaded" in line:
                loaded = log_time(line) - t0
                break
            if "listening" in line:
                break
    finally:
        p.terminate()
        p.communicate(timeout=30)
    if loaded is None:
        raise RuntimeError("the daemon did not load resnet18")
    return plan, loaded


def torch_rate(f, batch, min_secs):
    """Images/s over at least min_secs and 3 passes."""
    x = torch.rand(batch, 3, 224, 224)
    with torch.no_grad():
        f(x)
        n, t0 = 0, time.perf_counter()
        while n < 3 or time.perf_counter() - t0 < min_secs:
            f(x)
            n += 1
        return n * batch / (time.perf_counter() - t0)


def dlserve_rates(dlserve, model, threads):
    """{batch: [images/s per timed window]} of one --bench run."""
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
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loads", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    onnx = os.path.join(a.out, "resnet18.onnx")
    models, repo = os.path.join(a.out, "models"), os.path.join(a.out, "repo")
    log("export resnet18 ...")
    m = export(onnx)
    subprocess.run([a.dlserve, "--import", onnx, "--models", models, "--name", "resnet18"],
                   check=True, capture_output=True)
    res = {"model": "resnet18", "threads": a.threads, "rounds": a.rounds,
           "max_rel_diff": check_outputs(a.dlserve, m, models, a.out)}
    log("outputs: max relative difference %.2g" % res["max_rel_diff"])
    os.makedirs(os.path.join(repo, "resnet18", "1"), exist_ok=True)
    os.replace(onnx, os.path.join(repo, "resnet18", "1", "model.onnx"))
    loads = [load_once(a.dlserve, repo, a.threads) for _ in range(a.loads)]
    res["load_s"] = statistics.median(l[1] for l in loads)
    res["plan_s"] = statistics.median(l[0] for l in loads)
    log("load: %s" % ["%.3f" % l[1] for l in loads])
    jit = torch.jit.freeze(torch.jit.trace(m, torch.randn(1, 3, 224, 224)))
    for b in (1, 32, 1, 32):   # the profiling executor settles on both shapes
        torch_rate(jit, b, 0)
    runs = {"torch": {1: [], 32: []}, "jit": {1: [], 32: []}, "dlserve": {1: [], 32: []}}
    for r in range(a.rounds):
        log("round %d/%d ..." % (r + 1, a.rounds))
        for b in (1, 32):
            runs["torch"][b].append(torch_rate(m, b, 1.0))
            runs["jit"][b].append(torch_rate(jit, b, 1.0))
        time.sleep(0.5)   # torch's threads stop spinning
        for b, v in dlserve_rates(a.dlserve, os.path.join(models, "resnet18"), a.threads).items():
            runs["dlserve"][b].extend(v)
    res["runs"] = runs
    res["median"] = {s: {b: statistics.median(v) for b, v in d.items()} for s, d in runs.items()}
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    med = res["median"]
    print("resnet18 (torchvision, random weights) 224x224x3, %d threads, %d rounds, medians"
          % (a.threads, a.rounds))
    print()
    print("| batch | dlserve img/s | torch eager | torch.jit | vs eager | vs jit |")
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
