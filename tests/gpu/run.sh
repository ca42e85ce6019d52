#!/usr/bin/env bash
# run.sh OUTDIR: the GPU verification run, for the project's GPU machine
# (one H200, Ubuntu 24.04, gcc 13, nvcc 13, cuDNN 9 and NCCL 2 in system
# paths, Open MPI, OpenBLAS, zlib, meson, ninja, PyTorch; jansson's library
# without its headers; no inih, libmicrohttpd, librdkafka, hiredis,
# Criterion, Redis or network). In under 5 minutes it:
#   1. builds the core, dlserve and the GPU test programs with CUDA
#      (-Dcuda=enabled; HTTP, Kafka, Redis, systemd and Criterion off);
#      jansson's headers come from shared-build/include, which
#      tests/gpu/vendor-headers.sh fills on a machine that has them;
#   2. runs the CPU-vs-CUDA parity check of every op (tests/gpu/test_gpu_ops)
#      and of generation (tests/gpu/test_gpu_gen: greedy decoding over the
#      key-value cache and cuDNN's recurrent states);
#   3. trains on both devices and compares (tests/gpu/test_gpu_train.sh:
#      fashion-mlp, fashion-cnn, fashion-resnet); on this machine a skip
#      (exit 77: no usable GPU) counts as a failure; then imports PyTorch's
#      ONNX transformers and compares --predict on both devices
#      (tests/gpu/test_gpu_onnx.sh);
#   4. with 2+ GPUs, a 2-rank allreduce training through NCCL (skipped on
#      one GPU);
#   5. benchmarks against PyTorch (tests/bench/gpu_vs_torch);
# and writes every log to OUTDIR, printing a short summary table last.
# Data: $DLSERVE_DATA, /usr/share/datasets/fashion-mnist or
# shared-build/fashion-mnist. Exit status: 0 when every check passed.
set -uo pipefail
out=${1:?usage: tests/gpu/run.sh OUTDIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=$root/build-gpu-run
t_start=$(date +%s)
elapsed() { echo $(($(date +%s) - t_start)); }
# left LIMIT: seconds for the next step, capped so the run ends by 285 s.
left() { local l=$((285 - $(elapsed))); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 10 ] && l=10; echo "$l"; }
say() { echo "run.sh [$(elapsed)s] $*" | tee -a "$out/run.log" >&2; }
declare -A result

# ---- 0. the machine ---------------------------------------------------------
{
    date -u
    uname -a
    nvidia-smi 2>&1 | head -20
    nvcc --version 2>&1 || /usr/local/cuda/bin/nvcc --version 2>&1
    gcc --version | head -1
    meson --version
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
    git -C "$root" log --oneline -1 2>&1
    git -C "$root" status --short 2>&1 | head -50
} > "$out/env.log" 2>&1
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
say "$ngpus GPU(s); logs in $out"

data=${DLSERVE_DATA:-}
for d in /usr/share/datasets/fashion-mnist "$root/shared-build/fashion-mnist"; do
    if [ -z "$data" ] && [ -f "$d/train-images-idx3-ubyte.gz" ]; then data=$d; fi
done
if [ -z "$data" ]; then
    say "no Fashion-MNIST: set DLSERVE_DATA or run tests/gpu/vendor-headers.sh first"
    exit 2
fi

# ---- 1. build -----------------------------------------------------------------
c_args=() link_args=()
if ! pkg-config --exists jansson 2>/dev/null; then
    inc=$root/shared-build/include
    if [ ! -f "$inc/jansson.h" ]; then
        say "no jansson headers: run tests/gpu/vendor-headers.sh on a machine with libjansson-dev"
        exit 2
    fi
    lib=$(ldconfig -p | sed -n 's/.*libjansson\.so\.4 .*=> \(.*\)$/\1/p' | head -n 1)
    if [ -z "$lib" ]; then
        say "no libjansson.so.4 on this machine"
        exit 2
    fi
    # meson's fallback: cc.find_library('jansson') with these two.
    mkdir -p "$build-deps/lib"
    ln -sf "$lib" "$build-deps/lib/libjansson.so"
    c_args=("-Dc_args=-isystem$inc")
    link_args=("-Dc_link_args=-L$build-deps/lib")
fi
say "building in $build"
setup=(setup "$build" --buildtype=release -Dcuda=enabled -Dhttp=disabled -Dkafka=disabled
       -Dredis=disabled -Dsystemd=disabled -Dtests=disabled "${c_args[@]}" "${link_args[@]}")
[ -d "$build/meson-info" ] && setup+=(--reconfigure)
if timeout "$(left 60)" meson "${setup[@]}" > "$out/build.log" 2>&1 &&
   timeout "$(left 170)" ninja -C "$build" >> "$out/build.log" 2>&1; then
    result[build]=PASS
else
    result[build]=FAIL
    say "build failed: tail of $out/build.log:"
    tail -n 30 "$out/build.log" >&2
fi
grep -A6 '^  GPU' "$out/build.log" | tee -a "$out/run.log" >&2

# ---- 2. parity ------------------------------------------------------------------
if [ "${result[build]}" = PASS ]; then
    say "CPU-vs-CUDA parity of every op"
    timeout "$(left 90)" "$build/tests/test_gpu_ops" > "$out/parity.log" 2>&1
    rc=$?
    result[parity]=$([ $rc -eq 0 ] && echo PASS || echo "FAIL($rc)")

    say "generation on cuda against cpu"
    timeout "$(left 40)" "$build/tests/test_gpu_gen" > "$out/gen.log" 2>&1
    rc=$?
    result[gen]=$([ $rc -eq 0 ] && echo PASS || echo "FAIL($rc)")

    # ---- 3. training on both devices -------------------------------------------
    say "training on cpu and cuda"
    DLSERVE=$build/dlserve DLSERVE_SOURCE_ROOT=$root DLSERVE_DATA=$data \
        timeout "$(left 120)" bash "$root/tests/gpu/test_gpu_train.sh" > "$out/train.log" 2>&1
    rc=$?
    result[train]=$([ $rc -eq 0 ] && echo PASS || echo "FAIL($rc)")

    say "ONNX transformers, --predict on cpu and cuda"
    DLSERVE=$build/dlserve DLSERVE_SOURCE_ROOT=$root PYTHON=python3 \
        timeout "$(left 60)" bash "$root/tests/gpu/test_gpu_onnx.sh" > "$out/onnx.log" 2>&1
    rc=$?
    result[onnx]=$([ $rc -eq 0 ] && echo PASS || echo "FAIL($rc)")

    # ---- 4. NCCL ---------------------------------------------------------------------
    if [ "$ngpus" -ge 2 ] && command -v mpirun > /dev/null; then
        say "2-rank allreduce training through NCCL"
        work=$(mktemp -d /tmp/dlserve-nccl.XXXXXX)
        mkdir -p "$work/m"
        cp "$root/models/fashion-mlp/model.json" "$work/m/"
        # 2 trainers x batch 64 against 1 trainer x batch 128: same global batch.
        timeout "$(left 60)" mpirun --allow-run-as-root --oversubscribe -np 2 \
            "$build/dlserve" --train "$work/m" --device cuda --dist allreduce --epochs 1 \
            --limit 12800 --seed 7 --no-progress --data "$data" \
            > "$out/nccl.json" 2> "$out/nccl.log"
        rc=$?
        timeout "$(left 60)" "$build/dlserve" --train "$work/m" --device cuda --epochs 1 \
            --batch-size 128 --limit 12800 --seed 7 --no-progress --data "$data" \
            > "$out/nccl-ref.json" 2>> "$out/nccl.log"
        if [ $rc -eq 0 ] && grep -q "through NCCL" "$out/nccl.log" &&
           python3 - "$out/nccl.json" "$out/nccl-ref.json" <<'EOF' >> "$out/nccl.log" 2>&1
import json, sys
a = json.loads(open(sys.argv[1]).readline())
b = json.loads(open(sys.argv[2]).readline())
print("nccl 2 ranks: ranks %s loss %s; 1 rank batch 128: loss %s"
      % (a["ranks"], a["train_loss"], b["train_loss"]))
sys.exit(not (a["ranks"] == 2 and abs(a["train_loss"] - b["train_loss"]) <= 0.02 * b["train_loss"]))
EOF
        then result[nccl]=PASS; else result[nccl]=FAIL; fi
        rm -rf "$work"
    else
        result[nccl]="skipped: one GPU ($ngpus found)"
        [ "$ngpus" -ge 2 ] && result[nccl]="skipped: no mpirun"
        echo "${result[nccl]}" > "$out/nccl.log"
    fi

    # ---- 5. benchmark ------------------------------------------------------------------
    say "benchmark against PyTorch"
    OUT_DIR=$out/bench DATA=$data PYTHON=python3 \
        timeout "$(left 170)" "$root/tests/bench/gpu_vs_torch" "$build" > "$out/bench.log" 2>&1
    rc=$?
    result[bench]=$([ $rc -eq 0 ] && echo DONE || echo "INCOMPLETE($rc)")
fi

# ---- summary ----------------------------------------------------------------------------
{
    echo
    echo "## GPU verification, $(date -u +%Y-%m-%dT%H:%MZ), $(elapsed) s, $ngpus GPU(s)"
    echo "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo
    echo "| step | result |"
    echo "|---|---|"
    for k in build parity gen train onnx nccl bench; do
        echo "| $k | ${result[$k]:-not run} |"
    done
    if [ -f "$out/parity.log" ]; then
        echo
        python3 - "$out/parity.log" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
rows = [r for r in rows if len(r) == 3 and r[2] in ("PASS", "FAIL")]
def worst(sel):
    v = [float(r[1]) for r in sel]
    return "%.2e" % max(v) if v else "n/a"
fp32 = [r for r in rows if "tf32" not in r[0]]
tf32 = [r for r in rows if "tf32" in r[0]]
print("| parity | checks | failed | worst maxrel | limit |")
print("|---|---:|---:|---:|---:|")
print("| fp32 ops | %d | %d | %s | 1e-5 |" % (len(fp32), sum(r[2] == "FAIL" for r in fp32), worst(fp32)))
print("| TF32 GEMMs | %d | %d | %s | 3e-3 |" % (len(tf32), sum(r[2] == "FAIL" for r in tf32), worst(tf32)))
for r in rows:
    if r[2] == "FAIL":
        print("| FAIL %s | | | %s | |" % (r[0], r[1]))
EOF
    fi
    if [ -f "$out/train.log" ]; then
        echo
        grep -E '^fashion-(mlp|cnn|resnet):|^(ok|FAIL) -|passed,' "$out/train.log" | sed 's/^/    /'
    fi
    if [ -f "$out/onnx.log" ]; then
        echo
        grep -E '^FAIL -|^# |passed,|^SKIP' "$out/onnx.log" | sed 's/^/    /'
    fi
    [ -f "$out/nccl.log" ] && grep -E '^nccl|skipped' "$out/nccl.log" | sed 's/^/    /'
    if [ -f "$out/bench/table.md" ]; then
        echo
        cat "$out/bench/table.md"
    fi
} | tee "$out/summary.md"

for k in build parity gen train onnx nccl; do
    case ${result[$k]:-} in PASS|skipped*) ;; *) exit 1 ;; esac
done
exit 0
