#!/usr/bin/python3
"""ddp_peer.py: the PyTorch DistributedDataParallel peer of dlserve --dist.

    ddp_peer.py --model models/fashion-mlp/model.json --ranks 2 \
        [--batch-size 64] [--steps 300] [--warmup 30] [--port 29511] \
        [--limit N] [--data DIR]

Starts --ranks local worker processes (this script with --worker, the
torch.distributed env:// variables set: RANK, WORLD_SIZE, MASTER_ADDR =
127.0.0.1, MASTER_PORT) on the gloo backend, each with 1 torch thread
(torch.set_num_threads(1), OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1).
Every worker builds the model of model.json (tests/py/torch_model.py,
same seed on every rank; DDP broadcasts rank 0's parameters anyway), wraps
it in DistributedDataParallel and trains with the model.json optimizer
(Adam, lr 0.001 for the shipped models) at a constant learning rate.

Data: the first --limit training samples (default all), one permutation
(the model.json seed) shared by every rank; global step s takes the
samples [s*G, (s+1)*G) of it, G = ranks * batch, and rank r takes its own
[r*B, (r+1)*B) slice of those, as dlserve's sharding does; wraps around at
the end of the permutation.

Timing: --warmup untimed steps, a barrier, --steps timed steps, a
barrier; job samples/s = ranks * batch * steps / rank 0's elapsed time.
Also reports rank 0's time in the backward pass (where DDP's gloo
allreduce runs, overlapped with the gradient computation) and, after the
timed steps, the time of as many steps under ddp.no_sync() (no allreduce:
the compute part of a step; the ranks still share the cores). Prints one JSON line on stdout (from the launcher); workers'
stderr passes through.
"""

import argparse
import json
import os
import subprocess
import sys
import time

# The Python helpers shared by tests and benchmarks (torch_model.py).
PY_HELPERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "py")


def worker(args):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    sys.path.insert(0, PY_HELPERS)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import torch_model as tm

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    with open(args.model) as f:
        spec = json.load(f)
    tr = spec.get("training", {})
    seed = int(tr.get("seed", 42))
    bs = args.batch_size or int(tr.get("batch_size", 64))

    xtr, ytr, _, _ = tm.load_fashion(args.data, spec)
    if args.limit and args.limit < xtr.shape[0]:
        xtr, ytr = xtr[:args.limit].contiguous(), ytr[:args.limit].contiguous()
    n = xtr.shape[0]

    dist.init_process_group("gloo", init_method="env://", rank=rank,
                            world_size=world)
    torch.manual_seed(seed)
    model = tm.build_model(spec)
    ddp = DDP(model) if world > 1 else model
    loss_fn = tm.make_loss(spec)
    opt = tm.make_optimizer(spec, ddp.parameters())
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=g)
    G = bs * world
    steps_per_pass = n // G

    bwd = [0.0]

    def step(i):
        s = i % steps_per_pass
        idx = perm[s * G + rank * bs: s * G + (rank + 1) * bs]
        xb, yb = xtr[idx], ytr[idx]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(xb), yb)
        t = time.perf_counter()
        loss.backward()          # DDP's bucketed allreduce happens here
        bwd[0] += time.perf_counter() - t
        opt.step()
        return loss

    ddp.train()
    for i in range(args.warmup):
        step(i)
    if world > 1:
        dist.barrier()
    bwd[0] = 0.0
    t0 = time.perf_counter()
    for i in range(args.warmup, args.warmup + args.steps):
        loss = step(i)
    float(loss)
    if world > 1:
        dist.barrier()
    elapsed = time.perf_counter() - t0
    backward = bwd[0]
    # The same number of steps without DDP's allreduce (no_sync: gradients
    # stay local), for the compute part of a step.
    nosync = elapsed
    if world > 1:
        t0 = time.perf_counter()
        with ddp.no_sync():
            for i in range(args.steps):
                loss = step(i)
        float(loss)
        nosync = time.perf_counter() - t0
        dist.barrier()
    out = {"rank": rank, "elapsed": elapsed, "backward_seconds": backward,
           "nosync_seconds": nosync, "loss": float(loss), "samples": n}
    print("DDP-RESULT " + json.dumps(out), flush=True)
    if world > 1:
        dist.destroy_process_group()
    return 0


def launch(args):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port),
               WORLD_SIZE=str(args.ranks))
    cmd = [sys.executable, os.path.abspath(__file__), "--worker",
           "--model", args.model, "--data", args.data,
           "--batch-size", str(args.batch_size), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--limit", str(args.limit)]
    procs = []
    for r in range(args.ranks):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE,
                                      text=True))
    results, rc = [], 0
    for p in procs:
        try:
            out, _ = p.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print("ddp_peer: timed out after %d s" % args.timeout,
                  file=sys.stderr)
            return 1
        rc = rc or p.returncode
        for line in out.splitlines():
            if line.startswith("DDP-RESULT "):
                results.append(json.loads(line[len("DDP-RESULT "):]))
    if rc or len(results) != args.ranks:
        print("ddp_peer: a worker failed (rc %d, %d results)"
              % (rc, len(results)), file=sys.stderr)
        return 1
    import torch
    r0 = [r for r in results if r["rank"] == 0][0]
    bs = args.batch_size
    sps = args.ranks * bs * args.steps / r0["elapsed"]
    print(json.dumps({
        "engine": "torch %s DDP gloo" % torch.__version__,
        "ranks": args.ranks, "batch_size": bs, "steps": args.steps,
        "warmup": args.warmup, "samples_per_sec": round(sps, 1),
        "seconds": round(r0["elapsed"], 3),
        "step_ms": round(1e3 * r0["elapsed"] / args.steps, 3),
        "backward_ms_rank0": round(1e3 * r0["backward_seconds"] / args.steps, 3),
        "nosync_step_ms": round(1e3 * r0["nosync_seconds"] / args.steps, 3),
        "loss": round(r0["loss"], 4)}), flush=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--port", type=int, default=29511)
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
