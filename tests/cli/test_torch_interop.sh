#!/usr/bin/env bash
# A PyTorch model with dlserve's layer names, trained by PyTorch and saved
# as safetensors, evaluates in dlserve to the accuracy PyTorch reports.
# Also the CNN (conv, pooling, dropout layouts) on a short run, trained on
# 10,000 images.
. "$(dirname "$0")/../lib/lib.sh"
PEER=$SRC/tests/py/torch_model.py
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "1..0 # SKIP: /usr/bin/python3 has no torch (apt-get install python3-torch)"
    exit 77
fi

interop() {  # model epochs training-images
    local name=$1 epochs=$2 samples=$3 m
    m=$(model_copy "$name")
    mkdir -p "$m/1"
    OMP_NUM_THREADS=2 /usr/bin/python3 "$PEER" train --model "$m/model.json" --threads 2 \
        --epochs "$epochs" --train-samples "$samples" --out "$m/1/model.safetensors" \
        > "$WORK/$name-torch.json" 2> "$WORK/$name-torch.log"
    check "$name: PyTorch trains and saves safetensors" test -s "$m/1/model.safetensors"
    "$DLSERVE" --eval "$m" > "$WORK/$name-eval.json" 2> "$WORK/$name-eval.err"
    check "$name: dlserve loads PyTorch's file" test $? -eq 0
    local theirs ours
    theirs=$(json_get "$WORK/$name-torch.json" test_accuracy)
    ours=$(json_get "$WORK/$name-eval.json" accuracy)
    echo "$name: PyTorch $theirs, dlserve $ours"
    # dlserve prints 4 decimals: equal within one test image in 10,000.
    check "$name: same test accuracy ($theirs vs $ours)" \
        /usr/bin/python3 -c "import sys; sys.exit(not abs($theirs - $ours) <= 1.5e-4)"
}
# The CNN on a sixth of the training set: what is checked is that both
# read the same weights alike, not how well they learn.
interop fashion-mlp 1 60000
interop fashion-cnn 1 10000
finish
