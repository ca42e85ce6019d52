#!/usr/bin/env bash
# test_gpu_train.sh: the same short training on the CPU and on CUDA, same
# seed and data, must end at the same place; --eval of one set of weights
# must agree across devices. Exits 77 (meson's skip) printing "SKIP: no
# CUDA device" without a GPU.
#
# Tolerances (the two runs differ only in summation order, ~1e-7 a step,
# which training amplifies but does not bias):
#   fashion-mlp, 300 steps of batch 64: epoch train loss within 1% relative,
#     test accuracy within 0.01; with --math tf32 within 2% and 0.02;
#   fashion-cnn, 100 steps: within 5% and 0.03, because its dropout masks
#     come from different generators on the two devices;
#   fashion-resnet (graph layers: residual adds, global average pooling),
#     20 steps of batch 128: train loss within 5% (dropout as the cnn's);
#   --eval of one version on both devices: accuracy within 0.002 (near-ties
#     may flip).
# Environment: DLSERVE, DLSERVE_SOURCE_ROOT (as the CLI tests),
# DLSERVE_DATA (default /usr/share/datasets/fashion-mnist).
. "$(dirname "$0")/../lib/lib.sh"
DATA=${DLSERVE_DATA:-$DATA}

# train NAME DEVICE LIMIT OUT [extra flags]: one epoch over LIMIT samples.
train() {
    local model=$1 device=$2 limit=$3 out=$4
    shift 4
    "$DLSERVE" --train "$model" --device "$device" --data "$DATA" --epochs 1 \
        --limit "$limit" --seed 7 --no-progress "$@" > "$out.json" 2> "$out.log"
}

# close A B REL: |A - B| <= REL * |B|
close() { /usr/bin/python3 -c "import sys; a,b,r=map(float,sys.argv[1:]); sys.exit(not abs(a-b) <= r*abs(b))" "$@"; }
# near A B ABS: |A - B| <= ABS
near() { /usr/bin/python3 -c "import sys; a,b,t=map(float,sys.argv[1:]); sys.exit(not abs(a-b) <= t)" "$@"; }

MLP=$(model_copy fashion-mlp)
train "$MLP" cuda 19200 "$WORK/mlp-cuda"; rc=$?
if [ $rc -ne 0 ] && grep -q "no CUDA device" "$WORK/mlp-cuda.log"; then
    echo "SKIP: no CUDA device ($(tail -n 1 "$WORK/mlp-cuda.log"))"
    exit 77
fi
cat "$WORK/mlp-cuda.log" "$WORK/mlp-cuda.json"
check "fashion-mlp trains on cuda" test $rc -eq 0
train "$MLP" cpu 19200 "$WORK/mlp-cpu"; rc=$?
cat "$WORK/mlp-cpu.json"
check "fashion-mlp trains on cpu" test $rc -eq 0
train "$MLP" cuda 19200 "$WORK/mlp-tf32" --math tf32; rc=$?
cat "$WORK/mlp-tf32.json"
check "fashion-mlp trains on cuda with --math tf32" test $rc -eq 0

lc=$(json_get "$WORK/mlp-cpu.json" train_loss)
lg=$(json_get "$WORK/mlp-cuda.json" train_loss)
lt=$(json_get "$WORK/mlp-tf32.json" train_loss)
ac=$(json_get "$WORK/mlp-cpu.json" test_accuracy)
ag=$(json_get "$WORK/mlp-cuda.json" test_accuracy)
at=$(json_get "$WORK/mlp-tf32.json" test_accuracy)
echo "fashion-mlp: train_loss cpu $lc cuda $lg tf32 $lt; test_accuracy cpu $ac cuda $ag tf32 $at"
check "mlp train loss cuda $lg ~ cpu $lc (1%)" close "$lg" "$lc" 0.01
check "mlp test accuracy cuda $ag ~ cpu $ac (0.01)" near "$ag" "$ac" 0.01
check "mlp train loss tf32 $lt ~ cpu $lc (2%)" close "$lt" "$lc" 0.02
check "mlp test accuracy tf32 $at ~ cpu $ac (0.02)" near "$at" "$ac" 0.02

# The CPU-trained version (2) evaluated on both devices.
for d in cpu cuda; do
    "$DLSERVE" --eval "$MLP" --model-version 2 --device "$d" --data "$DATA" \
        > "$WORK/eval-$d.json" 2> "$WORK/eval-$d.log"
    check "--eval on $d exits 0" test $? -eq 0
done
ec=$(json_get "$WORK/eval-cpu.json" accuracy)
eg=$(json_get "$WORK/eval-cuda.json" accuracy)
check "--eval accuracy cuda $eg ~ cpu $ec (0.002)" near "$eg" "$ec" 0.002

CNN=$(model_copy fashion-cnn)
train "$CNN" cuda 6400 "$WORK/cnn-cuda"; rc=$?
cat "$WORK/cnn-cuda.log" "$WORK/cnn-cuda.json"
check "fashion-cnn trains on cuda" test $rc -eq 0
train "$CNN" cpu 6400 "$WORK/cnn-cpu"; rc=$?
cat "$WORK/cnn-cpu.json"
check "fashion-cnn trains on cpu" test $rc -eq 0
lc=$(json_get "$WORK/cnn-cpu.json" train_loss)
lg=$(json_get "$WORK/cnn-cuda.json" train_loss)
ac=$(json_get "$WORK/cnn-cpu.json" test_accuracy)
ag=$(json_get "$WORK/cnn-cuda.json" test_accuracy)
echo "fashion-cnn: train_loss cpu $lc cuda $lg; test_accuracy cpu $ac cuda $ag"
check "cnn train loss cuda $lg ~ cpu $lc (5%)" close "$lg" "$lc" 0.05
check "cnn test accuracy cuda $ag ~ cpu $ac (0.03)" near "$ag" "$ac" 0.03

RES=$(model_copy fashion-resnet)
train "$RES" cuda 2560 "$WORK/res-cuda"; rc=$?
cat "$WORK/res-cuda.log" "$WORK/res-cuda.json"
check "fashion-resnet trains on cuda" test $rc -eq 0
train "$RES" cpu 2560 "$WORK/res-cpu"; rc=$?
cat "$WORK/res-cpu.json"
check "fashion-resnet trains on cpu" test $rc -eq 0
lc=$(json_get "$WORK/res-cpu.json" train_loss)
lg=$(json_get "$WORK/res-cuda.json" train_loss)
ac=$(json_get "$WORK/res-cpu.json" test_accuracy)
ag=$(json_get "$WORK/res-cuda.json" test_accuracy)
echo "fashion-resnet: train_loss cpu $lc cuda $lg; test_accuracy cpu $ac cuda $ag"
check "resnet train loss cuda $lg ~ cpu $lc (5%)" close "$lg" "$lc" 0.05
finish
