#!/usr/bin/env bash
# test_gpu_onnx.sh: imported ONNX transformers (tests/py/onnx_models.py
# transformer: a 2-layer nn.TransformerEncoder classifier, exported with
# relu and mean pooling, gelu and the first token, and a causal mask) run
# by --predict on the CPU and on CUDA over the same inputs (batch 32): the
# graph layers' kernels (matmul, layernorm, softmax on an axis, the
# broadcasting binaries, gelu) on both devices. Each CUDA output must equal
# the CPU's, and PyTorch's, within 1e-4 relative (tests/py/onnx_check.py:
# plus 1e-6 for values near 0). Exits 77 (meson's skip) printing "SKIP: no
# CUDA device" without a GPU.
# Environment: DLSERVE, DLSERVE_SOURCE_ROOT (as the CLI tests), PYTHON (a
# Python with PyTorch and numpy for the export, default /usr/bin/python3).
. "$(dirname "$0")/../lib/lib.sh"
PYTHON=${PYTHON:-/usr/bin/python3}

# same GOT WANT: --predict's outputs in GOT equal those in WANT (1e-4
# relative, onnx_check.py's rule).
same() {
    "$PYTHON" - "$1" "$2" "$SRC/tests/py" <<'EOF'
import sys
sys.path.insert(0, sys.argv[3])
import onnx_check
onnx_check.close("cuda against cpu", onnx_check.predicted(sys.argv[1]),
                 onnx_check.predicted(sys.argv[2]))
EOF
}

T=$WORK/tx
M=$WORK/models
mkdir -p "$T" "$M"
"$PYTHON" "$SRC/tests/py/onnx_models.py" transformer "$T" > "$WORK/tx-export.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ ! -s "$T/tx_relu.onnx" ]; then
    tail -n 20 "$WORK/tx-export.log"
fi
check "PyTorch exports the transformer classifiers" test -s "$T/tx_relu.onnx"

first=1
for m in tx_relu tx_gelu tx_causal; do
    [ -s "$T/$m.onnx" ] || continue
    "$DLSERVE" --import "$T/$m.onnx" --models "$M" --name $m > /dev/null 2> "$WORK/$m-imp.err"
    check "$m: --import writes version 1" test -s "$M/$m/1/model.safetensors"
    in=$T/$m.b32.csv
    "$DLSERVE" --predict "$M/$m" --device cuda "$in" > "$WORK/$m-cuda.txt" 2> "$WORK/$m-cuda.err"
    rc=$?
    if [ $first -eq 1 ] && [ $rc -ne 0 ] && grep -q "no CUDA device" "$WORK/$m-cuda.err"; then
        echo "SKIP: no CUDA device ($(tail -n 1 "$WORK/$m-cuda.err"))"
        exit 77
    fi
    first=0
    [ $rc -eq 0 ] || cat "$WORK/$m-cuda.err"
    check "$m: --predict on cuda exits 0" test $rc -eq 0
    "$DLSERVE" --predict "$M/$m" --device cpu "$in" > "$WORK/$m-cpu.txt" 2> "$WORK/$m-cpu.err"
    rc=$?
    [ $rc -eq 0 ] || cat "$WORK/$m-cpu.err"
    check "$m: --predict on cpu exits 0" test $rc -eq 0
    echo "$m: cuda against cpu, then against PyTorch:"
    check "$m: --predict on cuda equals cpu at batch 32 (1e-4 relative)" \
        same "$WORK/$m-cuda.txt" "$WORK/$m-cpu.txt"
    check "$m: --predict on cuda equals PyTorch at batch 32 (1e-4 relative)" \
        "$PYTHON" "$SRC/tests/py/onnx_check.py" predict "$WORK/$m-cuda.txt" "$T/$m.b32.json"
done
finish
