#!/usr/bin/python3
"""gpu_vs_torch.py: the PyTorch side of tests/bench/gpu_vs_torch, and its table.

    gpu_vs_torch.py torch --model models/fashion-mlp/model.json --data DIR \
        [--infer-batches 1,64,1024,16384] [--train-batches 64,1024] \
        [--seconds 0.4] [--tf32]
        One JSON line per measurement on stdout:
        {"side":"torch","model":..,"kind":"infer","mode":"eager"|"graph",
         "batch":B,"samples_per_sec":..}, {"kind":"train",...}, and one
        {"kind":"floor","flops_per_sample":..,"bytes_per_sample":..} per model.
    gpu_vs_torch.py table RUNS.jsonl
        The comparison table (Markdown) of torch and dlserve lines.

Same models as dlserve (torch_model.py builds them from model.json), fp32
unless --tf32 (then TF32 for matmuls and convolutions on both sides), input
already on the GPU. Inference: eval mode, no autograd, eager and replaying a
CUDA graph captured per batch size. Training: model.json's optimizer
(foreach Adam for the shipped models), batches gathered on the GPU from a
fixed shuffle of the training set, eager.
"""

import argparse
import json
import os
import sys
import time

# The Python helpers shared by tests and benchmarks (torch_model.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "py"))

# H200 figures measured on the verification machine (see the issue).
PEAK_FP32 = 51e12
PEAK_TF32 = 362e12
PEAK_BYTES = 4.2e12


def timed(fn, sync, seconds):
    """Calls fn about `seconds` long (at least 3 times) after one timed call
    to calibrate; returns (calls, elapsed)."""
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    one = max(time.perf_counter() - t0, 1e-7)
    n = max(3, min(100000, int(seconds / one)))
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return n, time.perf_counter() - t0


def floor_figures(model, x1):
    """Forward FLOPs and bytes per sample: 2 MACs per multiply-add of every
    Linear and Conv2d; bytes = input plus each leaf's output written once
    and read once, fp32."""
    import torch
    flops, acts = [0], [x1.numel()]

    def hook(mod, inp, out):
        if isinstance(mod, torch.nn.Linear):
            flops[0] += 2 * mod.in_features * mod.out_features * (out.numel() // mod.out_features)
        elif isinstance(mod, torch.nn.Conv2d):
            k = mod.in_channels // mod.groups * mod.kernel_size[0] * mod.kernel_size[1]
            flops[0] += 2 * k * out.numel()
        if len(list(mod.children())) == 0:
            acts[0] += 2 * out.numel()

    hs = [m.register_forward_hook(hook) for m in model.modules()]
    with torch.no_grad():
        model(x1)
    for h in hs:
        h.remove()
    return flops[0], 4 * acts[0]


def cmd_torch(args):
    import torch
    import torch_model as tm
    with open(args.model) as f:
        spec = json.load(f)
    name = spec.get("name")
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    xtr, ytr, xte, _ = tm.load_fashion(args.data, spec)
    torch.manual_seed(int(spec.get("training", {}).get("seed", 42)))
    model = tm.build_model(spec).to(dev).eval()
    math = "tf32" if args.tf32 else "fp32"

    def emit(**kw):
        kw.update(side="torch", model=name, math=math,
                  engine="torch " + torch.__version__,
                  gpu=torch.cuda.get_device_name(0))
        print(json.dumps(kw), flush=True)

    f1, b1 = floor_figures(model, xte[:1].to(dev))
    emit(kind="floor", flops_per_sample=f1, bytes_per_sample=b1)

    for b in [int(v) for v in args.infer_batches.split(",") if v]:
        x = xte[torch.arange(b) % xte.shape[0]].to(dev)
        with torch.inference_mode():
            n, sec = timed(lambda: model(x), sync, args.seconds)
        emit(kind="infer", mode="eager", batch=b, iters=n, seconds=round(sec, 4),
             samples_per_sec=round(n * b / sec, 1))
        # The usual recipe: warm up on a side stream, capture, replay.
        static_x = x.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                model(static_x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(g):
            model(static_x)
        n, sec = timed(g.replay, sync, args.seconds)
        emit(kind="infer", mode="graph", batch=b, iters=n, seconds=round(sec, 4),
             samples_per_sec=round(n * b / sec, 1))
        del g, static_x, x
        torch.cuda.empty_cache()

    xtr_d, ytr_d = xtr.to(dev), ytr.to(dev)
    for b in [int(v) for v in args.train_batches.split(",") if v]:
        torch.manual_seed(int(spec.get("training", {}).get("seed", 42)))
        tmodel = tm.build_model(spec).to(dev).train()
        loss_fn = tm.make_loss(spec)
        opt = tm.make_optimizer(spec, tmodel.parameters())
        g = torch.Generator(device=dev).manual_seed(1)
        perm = torch.randperm(xtr_d.shape[0], generator=g, device=dev)
        nb = xtr_d.shape[0] // b
        step = [0]

        def train_step():
            i = step[0] % nb
            step[0] += 1
            idx = perm[i * b:(i + 1) * b]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(tmodel(xtr_d[idx]), ytr_d[idx])
            loss.backward()
            opt.step()

        for _ in range(10):
            train_step()
        n, sec = timed(train_step, sync, args.seconds * 2)
        emit(kind="train", mode="eager", batch=b, iters=n, seconds=round(sec, 4),
             samples_per_sec=round(n * b / sec, 1))
    return 0


def cmd_table(args):
    runs = [json.loads(l) for l in open(args.runs) if l.strip().startswith("{")]

    def pick(side, model, kind, mode, batch):
        for r in runs:
            if (r.get("side") == side and r.get("model") == model and r.get("kind") == kind
                    and r.get("mode") == mode and r.get("batch") == batch):
                return r.get("samples_per_sec")
        return None

    def fmt(v):
        if v is None:
            return "n/a"
        return "%.3gM" % (v / 1e6) if v >= 1e6 else "%.0fk" % (v / 1e3) if v >= 1e4 else "%.0f" % v

    def ratio(a, b):
        return "%.2f" % (a / b) if a and b else "n/a"

    models = []
    for r in runs:
        if r.get("model") and r["model"] not in models:
            models.append(r["model"])
    gpu = next((r["gpu"] for r in runs if r.get("gpu")), "GPU")
    math = next((r["math"] for r in runs if r.get("math")), "fp32")
    peak = PEAK_TF32 if math == "tf32" else PEAK_FP32
    print("GPU: dlserve vs PyTorch on %s, %s, input on the device" % (gpu, math))
    print()
    print("| model | batch | dlserve eager | dlserve graph | torch eager | torch graph "
          "| graph/graph | best/eager | goal | floor | best % of floor |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for m in models:
        fl = next((r for r in runs if r.get("model") == m and r.get("kind") == "floor"), None)
        batches = sorted({r["batch"] for r in runs
                          if r.get("model") == m and r.get("kind") == "infer"})
        for b in batches:
            de, dg = pick("dlserve", m, "infer", "eager", b), pick("dlserve", m, "infer", "graph", b)
            te, tg = pick("torch", m, "infer", "eager", b), pick("torch", m, "infer", "graph", b)
            best = max([v for v in (de, dg) if v] or [0]) or None
            ok = best and tg and best >= tg and (b > 1024 or (te and best >= 2 * te))
            floor = (min(peak / fl["flops_per_sample"], PEAK_BYTES / fl["bytes_per_sample"])
                     if fl else None)
            print("| %s infer | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
                  % (m, b, fmt(de), fmt(dg), fmt(te), fmt(tg), ratio(dg, tg), ratio(best, te),
                     "met" if ok else "NOT met", fmt(floor),
                     "%.1f" % (100 * best / floor) if best and floor else "n/a"))
        for b in sorted({r["batch"] for r in runs
                         if r.get("model") == m and r.get("kind") == "train"}):
            d, t = pick("dlserve", m, "train", "eager", b), pick("torch", m, "train", "eager", b)
            need = 5.0 if b <= 64 else 1.2
            floor = (min(peak / (3 * fl["flops_per_sample"]),
                         PEAK_BYTES / (3 * fl["bytes_per_sample"])) if fl else None)
            print("| %s train | %d | %s | | %s | | | %s | %s (>= %.1fx) | %s | %s |"
                  % (m, b, fmt(d), fmt(t), ratio(d, t),
                     "met" if d and t and d >= need * t else "NOT met", need, fmt(floor),
                     "%.1f" % (100 * d / floor) if d and floor else "n/a"))
    print()
    print("Goals: inference >= torch graph at every batch and >= 2x torch eager at batch "
          "<= 1024; training >= 5x torch eager at batch 64, >= 1.2x at 1024. floor: samples/s "
          "if the H200 ran at its peak (%.0f TFLOP/s %s, %.1f TB/s) on the model's FLOPs and "
          "activation bytes (training: 3x the forward)." % (peak / 1e12, math, PEAK_BYTES / 1e12))
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("torch")
    t.add_argument("--model", required=True)
    t.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    t.add_argument("--infer-batches", default="1,64,1024,16384")
    t.add_argument("--train-batches", default="64,1024")
    t.add_argument("--seconds", type=float, default=0.4)
    t.add_argument("--tf32", action="store_true")
    tb = sub.add_parser("table")
    tb.add_argument("runs")
    args = p.parse_args(argv)
    return cmd_torch(args) if args.cmd == "torch" else cmd_table(args)


if __name__ == "__main__":
    sys.exit(main())
