#!/usr/bin/env bash
# Full-data training of fashion-mlp with its model.json defaults, then
# --eval on the 10,000 test images: accuracy must reach 0.885.
. "$(dirname "$0")/../lib/lib.sh"

M=$(model_copy fashion-mlp)
"$DLSERVE" --train "$M" --no-progress > "$WORK/train.json" 2> "$WORK/train.log"; rc=$?
cat "$WORK/train.log" "$WORK/train.json"
check "--train with defaults exits 0" test $rc -eq 0
"$DLSERVE" --eval "$M" > "$WORK/eval.json"; rc=$?
cat "$WORK/eval.json"
acc=$(json_get "$WORK/eval.json" accuracy)
check "--eval exits 0" test $rc -eq 0
check "evaluated on all 10000 test images" test "$(json_get "$WORK/eval.json" samples)" = 10000
check "test accuracy $acc >= 0.885" /usr/bin/python3 -c "import sys; sys.exit(not $acc >= 0.885)"
# Training's evaluation and --eval's compute the same model in other
# batches and orders of summation: an image whose top two classes tie
# within the last bits may go either way. Both print 4 decimals (one
# image in 10,000): equal within one image.
check "--train's test_accuracy matches --eval's (within one image in 10,000)" \
    /usr/bin/python3 -c "import sys; sys.exit(not abs($(json_get "$WORK/train.json" test_accuracy) - $acc) <= 1.5e-4)"
finish
