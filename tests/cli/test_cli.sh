#!/usr/bin/env bash
# The command line end to end on a data subset: --help, --version, --train
# (version folders and their files), --eval, --predict, --model-version
# and its old name --version V, and clear one-line
# errors for malformed model, weights, data and options.
. "$(dirname "$0")/../lib/lib.sh"

M=$(model_copy fashion-mlp)

"$DLSERVE" --help > "$WORK/help" ; rc=$?
check "--help exits 0 and lists --train" test $rc -eq 0 -a -n "$(grep -- --train "$WORK/help")"
check "--version prints the version" test "$("$DLSERVE" --version)" = "dlserve 0.1.0"
# Linked with jemalloc (not in sanitizer builds), the binary sets its
# options: big buffers keep their pages after free (main.c, malloc_conf).
if ldd "$DLSERVE" | grep -q libjemalloc; then
    MALLOC_CONF=stats_print:true "$DLSERVE" --version > /dev/null 2> "$WORK/jemalloc"
    check "jemalloc runs with oversize_threshold 0" grep -q 'opt.oversize_threshold: 0$' "$WORK/jemalloc"
else
    echo "# not linked with jemalloc: its options are not checked"
fi

# ---- training writes version 1, then version 2 ----
"$DLSERVE" --train "$M" --epochs 2 --limit 3000 --threads 2 --no-progress \
    > "$WORK/train1.json" 2> "$WORK/train1.log"; rc=$?
check "--train exits 0" test $rc -eq 0
check "--train prints one JSON line" test "$(wc -l < "$WORK/train1.json")" -eq 1
check "summary names version 1" test "$(json_get "$WORK/train1.json" version)" = 1
for k in model path epochs train_loss test_accuracy samples_per_sec seconds; do
    check "summary has $k" json_has "$WORK/train1.json" $k
done
check "plain progress: one line per epoch" test "$(grep -c 'epoch [0-9]/2' "$WORK/train1.log")" -eq 2
for f in model.safetensors metrics.csv curves.svg; do
    check "version 1 has $f" test -s "$M/1/$f"
done
check "metrics.csv has a header and 2 rows" test "$(wc -l < "$M/1/metrics.csv")" -eq 3
check "curves.svg is an SVG" grep -q "<svg" "$M/1/curves.svg"
check "weights carry model.json in metadata" grep -q "dlserve.model" "$M/1/model.safetensors"
acc=$(json_get "$WORK/train1.json" test_accuracy)
check "2 epochs on 3000 samples learn something (acc $acc > 0.6)" \
    /usr/bin/python3 -c "import sys; sys.exit(not $acc > 0.6)"

"$DLSERVE" --train "$M" --epochs 1 --limit 1000 --no-progress > "$WORK/train2.json" 2>/dev/null
check "second run writes version 2" test "$(json_get "$WORK/train2.json" version)" = 2 -a -s "$M/2/model.safetensors"

# ---- the progress bar on a terminal ----
if command -v script >/dev/null; then
    script -qec "$DLSERVE --train $M --epochs 1 --limit 500 --batch-size 50" /dev/null > "$WORK/tty.out" 2>&1
    check "a terminal gets a progress bar with ETA" grep -q "ETA" "$WORK/tty.out"
    rm -rf "$M/3"
fi

# ---- evaluation ----
"$DLSERVE" --eval "$M" --model-version 1 --limit 2000 > "$WORK/eval.json"; rc=$?
check "--eval exits 0" test $rc -eq 0
check "--eval reports 2000 samples" test "$(json_get "$WORK/eval.json" samples)" = 2000
for k in model version accuracy loss samples_per_sec; do
    check "eval summary has $k" json_has "$WORK/eval.json" $k
done
"$DLSERVE" --eval "$M" > "$WORK/eval-latest.json"
check "--eval defaults to the newest version" test "$(json_get "$WORK/eval-latest.json" version)" = 2

# ---- --version V, the old name of --model-version V ----
"$DLSERVE" --eval "$M" --version 1 --limit 100 > "$WORK/eval-old.json" 2> "$WORK/err"; rc=$?
check "--eval --version 1: still the model version" \
    test $rc -eq 0 -a "$(json_get "$WORK/eval-old.json" version)" = 1
check "... with a warning naming --model-version" fails_with "$WORK/err" 1 \
    "^dlserve: warning: --version V for a model version is deprecated: use --model-version 1$"
"$DLSERVE" --eval "$M" --model-version 1 --limit 100 > /dev/null 2> "$WORK/err"
check "--model-version warns of nothing" test ! -s "$WORK/err"
check "--eval ... --version (alone) prints dlserve's version" \
    test "$("$DLSERVE" --eval "$M" --version)" = "dlserve 0.1.0"
check "-V prints dlserve's version" test "$("$DLSERVE" -V)" = "dlserve 0.1.0"
"$DLSERVE" --version 2 > /dev/null 2> "$WORK/err"; rc=$?
check "--version V without a mode that takes one: refused" \
    fails_with "$WORK/err" $rc "^dlserve: --version V (a model version) goes with --train, --eval"
"$DLSERVE" --bench "$M" --model-version 2 > /dev/null 2> "$WORK/err"; rc=$?
check "--bench --model-version: refused" \
    fails_with "$WORK/err" $rc "^dlserve: --model-version goes with --train, --eval"
"$DLSERVE" --eval "$M" --version one > /dev/null 2> "$WORK/err"; rc=$?
check "--version one: not a model version" \
    fails_with "$WORK/err" $rc "^dlserve: --version: 'one' is not a valid model version"
check "--help lists --model-version V" grep -q -- '^  --model-version V' "$WORK/help"
check "... and --version V under it only" test -z "$(grep -- '^  --version' "$WORK/help")"

# ---- prediction: IDX file, CSV on stdin ----
"$DLSERVE" --predict "$M" --model-version 1 "$DATA/t10k-images-idx3-ubyte.gz" --limit 5 > "$WORK/pred"
check "--predict prints one line per image" test "$(wc -l < "$WORK/pred")" -eq 5
check "predictions carry labels" grep -q '"label":"' "$WORK/pred"
/usr/bin/python3 - "$DATA" > "$WORK/five.csv" <<'PY'
import gzip, sys
raw = gzip.open(sys.argv[1] + "/t10k-images-idx3-ubyte.gz").read()[16:16 + 5 * 784]
for i in range(5):
    print(",".join(str(b) for b in raw[i * 784:(i + 1) * 784]))
PY
"$DLSERVE" --predict "$M" --model-version 1 - < "$WORK/five.csv" > "$WORK/pred-csv"
# Both runs compute alike (the same binary, threads, engines and batch of
# 5, the same pixel values): the same bits, so the classes compare exactly.
check "CSV on stdin predicts the same classes as the IDX file" \
    diff <(grep -o '"class":[0-9]*' "$WORK/pred") <(grep -o '"class":[0-9]*' "$WORK/pred-csv")

# ---- malformed inputs: non-zero exit, one line naming the file ----
mkdir -p "$WORK/bad"
printf '{"name": "x", "input": {"shape": [4]}, "layers": [{"name": "d", "type": "dense", "unit": 3}]}' \
    > "$WORK/bad/model.json"
"$DLSERVE" --train "$WORK/bad" --limit 10 2> "$WORK/err" >/dev/null; rc=$?
check "model.json typo: refused naming file and key" fails_with "$WORK/err" $rc "bad/model.json.*'unit'"

cp -r "$M" "$WORK/corrupt"
head -c 1000 "$M/1/model.safetensors" > "$WORK/corrupt/1/model.safetensors"
"$DLSERVE" --eval "$WORK/corrupt" --model-version 1 --limit 10 2> "$WORK/err" >/dev/null; rc=$?
check "truncated weights: refused naming the file" fails_with "$WORK/err" $rc "corrupt/1/model.safetensors"

mkdir -p "$WORK/otherdata"
printf '1,2,3\n' > "$WORK/otherdata/test.csv"
"$DLSERVE" --eval "$M" --data "$WORK/otherdata" 2> "$WORK/err" >/dev/null; rc=$?
check "CSV with the wrong width: refused with file:line" fails_with "$WORK/err" $rc "test.csv:1"

printf 'garbage' > "$WORK/otherdata/t10k-images-idx3-ubyte"
printf 'garbage' > "$WORK/otherdata/t10k-labels-idx1-ubyte"
"$DLSERVE" --eval "$M" --data "$WORK/otherdata" 2> "$WORK/err" >/dev/null; rc=$?
check "garbage IDX: refused naming the file" fails_with "$WORK/err" $rc "t10k-images-idx3-ubyte"

"$DLSERVE" --eval "$WORK/nowhere" 2> "$WORK/err" >/dev/null; rc=$?
check "missing model folder: refused" fails_with "$WORK/err" $rc "nowhere/model.json"

"$DLSERVE" --train "$M" --epochs -3 2> "$WORK/err" >/dev/null; rc=$?
check "bad option value: exit 2 with the option named" fails_with "$WORK/err" $rc "\-\-epochs"
check "bad option value: exit code 2" test $rc -eq 2

"$DLSERVE" --train "$M" --device cuda:0 --limit 10 2> "$WORK/err" >/dev/null; rc=$?
check "--device cuda without CUDA: clear refusal" fails_with "$WORK/err" $rc "cuda"

# ---- Adagrad with --clip-norm: a checkpoint carries Adagrad's sums ----
# Stopped at step 10 of 20 and resumed, the run equals the uninterrupted
# one to the bit: the resumed steps read the saved sums (zeroed ones would
# take far larger steps). Without --clip-norm the run differs: it clips.
A=(--optimizer adagrad --lr 0.05 --clip-norm 0.5 --epochs 1 --limit 640 --batch-size 32
   --threads 1 --no-progress)
for d in whole parts noclip; do mkdir -p "$WORK/ada-$d"; cp "$M/model.json" "$WORK/ada-$d/"; done
"$DLSERVE" --train "$WORK/ada-whole" "${A[@]}" > /dev/null 2>&1
"$DLSERVE" --train "$WORK/ada-parts" "${A[@]}" --checkpoint-every 5 --steps 10 > /dev/null 2>&1
"$DLSERVE" --train "$WORK/ada-parts" "${A[@]}" --resume > /dev/null 2> "$WORK/ada-resume.log"
check "adagrad: --resume starts from step 10" grep -q "at step 10" "$WORK/ada-resume.log"
check "adagrad, --clip-norm: the resumed run equals the uninterrupted one" \
    /usr/bin/python3 "$SRC/tests/dist/compare_weights.py" "$WORK/ada-parts/1/model.safetensors" \
    "$WORK/ada-whole/1/model.safetensors" 0
"$DLSERVE" --train "$WORK/ada-noclip" "${A[@]}" --clip-norm 0 > /dev/null 2>&1
/usr/bin/python3 "$SRC/tests/dist/compare_weights.py" "$WORK/ada-noclip/1/model.safetensors" \
    "$WORK/ada-whole/1/model.safetensors" 0 > /dev/null; rc=$?
check "--clip-norm 0.5 changes the run" test $rc -eq 1

# ---- option values: refused with the option and the words it takes ----
"$DLSERVE" --train "$M" --optimizer rmsprop 2> "$WORK/err" >/dev/null; rc=$?
check "--optimizer: an unknown word lists the words" \
    fails_with "$WORK/err" $rc \
    "^dlserve: --optimizer: 'rmsprop' is not sgd, momentum, adam, adamw or adagrad$"
"$DLSERVE" --train "$M" --clip-norm -1 2> "$WORK/err" >/dev/null; rc=$?
check "--clip-norm: a negative norm is refused" \
    fails_with "$WORK/err" $rc "^dlserve: --clip-norm: '-1' is not a valid number$"
"$DLSERVE" --train "$M" --math fp16 2> "$WORK/err" >/dev/null; rc=$?
check "--math: an unknown word lists the words" \
    fails_with "$WORK/err" $rc "^dlserve: --math: 'fp16' is not fp32 or tf32$"
"$DLSERVE" --train "$M" --threads 2000 2> "$WORK/err" >/dev/null; rc=$?
check "--threads: out of range" fails_with "$WORK/err" $rc "^dlserve: --threads: '2000' is not a valid count$"
"$DLSERVE" --train "$M" --dist avg:0 2> "$WORK/err" >/dev/null; rc=$?
check "--dist avg:0: refused" fails_with "$WORK/err" $rc "K in avg:K must be a positive integer"
"$DLSERVE" --train "$M" --dist ring 2> "$WORK/err" >/dev/null; rc=$?
check "--dist: an unknown mode lists the modes" \
    fails_with "$WORK/err" $rc "expected allreduce, avg\[:K\], ps-sync or ps-async"
check "--help names an option's words" grep -q -- "--optimizer NAME .*(sgd, momentum, adam," "$WORK/help"

# The manual's option tables are the binary's, line for line: the
# daemon's configuration reference (docs/configuration.md) and the training
# options (docs/training.md), each between its BEGIN and END markers.
doc_table() {   # doc_table FILE MARKER: the table between MARKER's lines
    sed -n "/^<!-- BEGIN $2/,/^<!-- END $2/p" "$SRC/$1" | sed '1d;$d'
}
check "docs/configuration.md has the config-reference markers" \
    grep -q "^<!-- BEGIN config-reference" "$SRC/docs/configuration.md"
check "docs/training.md has the options-reference markers" \
    grep -q "^<!-- BEGIN options-reference" "$SRC/docs/training.md"
if "$DLSERVE" --config-reference > "$WORK/ref.md" 2>/dev/null; then
    check "docs/configuration.md's reference matches the option table" \
        diff <(doc_table docs/configuration.md config-reference) "$WORK/ref.md"
fi
"$DLSERVE" --options-reference > "$WORK/opts.md"; rc=$?
check "--options-reference exits 0" test $rc -eq 0
check "docs/training.md's training options match the option table" \
    diff <(doc_table docs/training.md options-reference) "$WORK/opts.md"

finish
