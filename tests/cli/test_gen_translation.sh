#!/usr/bin/env bash
# kjv-es with its shipped defaults (suite slow: about 9 minutes on 2 idle
# cores): `prepare` writes the verse pairs, `dlserve --train` trains a copy
# of models/kjv-es on two threads, and beam search (`--generate
# --beam-width 4`) translates the first 200 held-out verses; their corpus
# BLEU-4 against the Reina-Valera's (tests/py/kjv_es_bleu.py) must be above
# the word-for-word baseline's, a dictionary aligned on the same training
# pairs.
. "$(dirname "$0")/../lib/lib.sh"

D=$WORK/data
"$SRC/models/kjv-es/prepare" "$WORK/full" > "$WORK/prepare.out" 2>&1
check "prepare writes the verse pairs" test -s "$WORK/full/train.jsonl"
mkdir -p "$D" "$WORK/kjv-es"
cp "$WORK/full/train.jsonl" "$WORK/full/vocab_es.txt" "$D/"
for f in test.jsonl test.en.txt test.es.txt; do
    head -200 "$WORK/full/$f" > "$D/$f"
done
cp -L "$SRC/models/kjv-es"/*.txt "$SRC/models/kjv-es/model.json" "$WORK/kjv-es/"
"$DLSERVE" --train "$WORK/kjv-es" --data "$D" --threads 2 --no-progress \
    > "$WORK/train.json" 2> "$WORK/train.err"
check "kjv-es trains with its defaults" test -s "$WORK/kjv-es/1/model.safetensors"
"$DLSERVE" --generate "$WORK/kjv-es" --beam-width 4 --max-tokens 50 --threads 1 \
    --prompts "$D/test.en.txt" > "$WORK/answers.jsonl" 2> "$WORK/gen.err"
check "beam search answers the 200 verses" test "$(wc -l < "$WORK/answers.jsonl")" -eq 200
/usr/bin/python3 "$SRC/tests/py/kjv_es_bleu.py" "$D" "$WORK/answers.jsonl" > "$WORK/bleu.json"
check "BLEU above the word-for-word baseline's" \
    /usr/bin/python3 - "$WORK/bleu.json" "$WORK/answers.jsonl" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("# BLEU %.2f (precisions %s), word for word %.2f" % (r["bleu"], r["precisions"],
                                                         r["baseline_bleu"]))
print("# e.g. %s" % json.loads(open(sys.argv[2]).readline())["text_output"])
sys.exit(not r["bleu"] > r["baseline_bleu"])
PY
finish
