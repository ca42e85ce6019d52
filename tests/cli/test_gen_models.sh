#!/usr/bin/env bash
# The generating models, briefly: models/kjv-gpt's and models/kjv-es's
# `prepare` scripts write their data; each trains a reduced configuration
# of its model.json (narrower, fewer blocks, on a slice) for a few hundred
# steps on one thread, and must learn: kjv-gpt's test perplexity below a
# byte bigram model's (tests/py/book_baselines.py); kjv-es's perplexity
# falls and beam search translates the held-out verses (its BLEU against
# the word-for-word baseline needs the shipped training:
# tests/cli/test_gen_translation.sh). Then
# `dlserve --generate` as a client uses it: prompts of a file answered in
# order, each as it is alone (batch-invariant), the key-value cache equal
# to recomputing the prefix, beam width 1 equal to greedy, the same seed
# the same sample, stop strings, and bad input refused with exit status 1
# or 2. The full runs and their figures are tests/bench/book_models'.
. "$(dirname "$0")/../lib/lib.sh"

mkdir -p "$WORK/full" "$WORK/data/kjv-gpt" "$WORK/data/kjv-es"
for m in kjv-gpt kjv-es; do
    "$SRC/models/$m/prepare" "$WORK/full/$m" > "$WORK/prepare-$m.out" 2>&1
    check "$m: prepare writes train.jsonl and test.jsonl" \
        test -s "$WORK/full/$m/train.jsonl" -a -s "$WORK/full/$m/test.jsonl"
done

# reduce NAME BLOCKS WIDTH MLP TRAINING: $WORK/NAME/model.json from
# models/NAME's: the first BLOCKS blocks of each stack (layers b<i>_,
# enc<i>_, dec<i>_; the layer after a stack reads its previous one), widths
# 128 -> WIDTH, MLPs 512 -> MLP, TRAINING (JSON) over its training block;
# its vocabularies beside it
reduce() {
    mkdir -p "$WORK/$1"
    cp -L "$SRC/models/$1"/*.txt "$WORK/$1/" 2>/dev/null
    /usr/bin/python3 - "$SRC/models/$1/model.json" "$WORK/$1/model.json" "${@:2}" <<'PY'
import json, re, sys
src, dst, blocks, width, mlp, train = sys.argv[1:7]
m = json.load(open(src))
keep = lambda l: not re.match(r"(b|enc|dec)(\d+)_", l["name"]) or \
    int(re.match(r"(b|enc|dec)(\d+)_", l["name"]).group(2)) < int(blocks)
m["layers"] = [l for l in m["layers"] if keep(l)]
for l in m["layers"]:
    for k in ("dim", "units"):
        l[k] = {128: int(width), 512: int(mlp)}.get(l.get(k), l.get(k))
        if l[k] is None:
            del l[k]
m["training"].update(json.loads(train))
json.dump(m, open(dst, "w"), indent=1)
PY
}

# ---- kjv-gpt: 2 blocks of width 64 on 64-byte windows --------------------
# every 8th train window cut in two (7,920), the test windows so (1,302)
/usr/bin/python3 - "$WORK/full/kjv-gpt" "$WORK/data/kjv-gpt" <<'PY'
import json, sys
full, out = sys.argv[1:3]
for split, every in (("train", 8), ("test", 1)):
    with open("%s/%s.jsonl" % (out, split), "w") as f:
        for i, line in enumerate(open("%s/%s.jsonl" % (full, split))):
            if i % every:
                continue
            ids = json.loads(line)["ids"]
            for k in range(0, len(ids), 64):
                if len(ids[k:k + 64]) >= 2:
                    f.write(json.dumps({"ids": ids[k:k + 64]}) + "\n")
PY
reduce kjv-gpt 2 64 256 '{"epochs": 2, "batch_size": 32, "lr": 0.01}'
G=$WORK/kjv-gpt
"$DLSERVE" --train "$G" --data "$WORK/data/kjv-gpt" --threads 1 --no-progress \
    > "$WORK/gpt-train.json" 2> "$WORK/gpt-train.err"
check "kjv-gpt: 2 epochs of 7,920 windows (496 steps) train" test -s "$G/1/model.safetensors"
"$DLSERVE" --eval "$G" --data "$WORK/data/kjv-gpt" > "$WORK/gpt-eval.json" 2> /dev/null
/usr/bin/python3 "$SRC/tests/py/book_baselines.py" kjv-gpt "$WORK/data/kjv-gpt" \
    > "$WORK/gpt-base.json"
check "kjv-gpt learns: test perplexity below 0.9 x the byte bigram's" \
    /usr/bin/python3 - "$WORK/gpt-eval.json" "$WORK/gpt-base.json" <<'PY'
import json, sys
ev, base = (json.loads(open(p).readline()) for p in sys.argv[1:3])
print("# test perplexity %.3f; byte bigram %.3f, unigram %.3f"
      % (ev["perplexity"], base["test_perplexity"], base["unigram_test_perplexity"]))
sys.exit(not ev["perplexity"] < 0.9 * base["test_perplexity"])
PY

# ---- kjv-es: one encoder and one decoder block of width 64 ---------------
# every 2nd train pair (14,643) for one epoch (458 steps): too little to
# translate well (tests/cli/test_gen_translation.sh, suite slow, checks the
# shipped defaults' BLEU against the baseline's), enough to check that the
# encoder-decoder trains, learns, and decodes the held-out verses with beam
# search, an answer each, of its vocabulary's words
/usr/bin/python3 - "$WORK/full/kjv-es" "$WORK/data/kjv-es" <<'PY'
import shutil, sys
full, out = sys.argv[1:3]
with open(out + "/train.jsonl", "w") as f:
    f.writelines(l for i, l in enumerate(open(full + "/train.jsonl")) if i % 2 == 0)
for name in ("test.jsonl", "test.en.txt", "test.es.txt"):
    with open("%s/%s" % (out, name), "w") as f:
        f.writelines(open("%s/%s" % (full, name)).readlines()[:150])
shutil.copy(full + "/vocab_es.txt", out)
PY
reduce kjv-es 1 64 256 '{"epochs": 1, "batch_size": 32, "lr": 0.003}'
E=$WORK/kjv-es
"$DLSERVE" --train "$E" --data "$WORK/data/kjv-es" --threads 1 --no-progress \
    > "$WORK/es-train.json" 2> "$WORK/es-train.err"
check "kjv-es: 1 epoch of 14,643 verse pairs (458 steps) trains" test -s "$E/1/model.safetensors"
"$DLSERVE" --eval "$E" --data "$WORK/data/kjv-es" > "$WORK/es-eval.json" 2> /dev/null
check "kjv-es learns: test perplexity below 200 (a unigram model of its words: 309)" \
    /usr/bin/python3 -c 'import json, sys
r = json.loads(open(sys.argv[1]).readline())
print("# test perplexity %.1f, token accuracy %.3f" % (r["perplexity"], r["accuracy"]))
sys.exit(not r["perplexity"] < 200)' "$WORK/es-eval.json"
"$DLSERVE" --generate "$E" --beam-width 4 --max-tokens 50 --threads 1 \
    --prompts "$WORK/data/kjv-es/test.en.txt" > "$WORK/es-answers.jsonl" 2> "$WORK/es-gen.err"
check "kjv-es: --generate --beam-width 4 answers the 150 test verses with Spanish words" \
    /usr/bin/python3 - "$WORK/es-answers.jsonl" "$E/vocab_es.txt" <<'PY'
import json, sys
answers = [json.loads(l) for l in open(sys.argv[1])]
vocab = set(open(sys.argv[2]).read().split()) | {"<unk>"}
assert [a["index"] for a in answers] == list(range(150)), len(answers)
for a in answers:
    assert a["tokens"] <= 50 and a["finish_reason"] in ("stop", "length"), a
    assert set(a["text_output"].split()) <= vocab, a
print("# e.g. %s" % answers[0]["text_output"])
PY
/usr/bin/python3 "$SRC/tests/py/kjv_es_bleu.py" "$WORK/data/kjv-es" "$WORK/es-answers.jsonl" \
    > "$WORK/es-bleu.json"
check "kjv-es: BLEU computed (here, after 458 steps, not yet the baseline's)" \
    /usr/bin/python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print("# BLEU %.2f, word for word %.2f" % (r["bleu"], r["baseline_bleu"]))
sys.exit(not r["bleu"] >= 0)' "$WORK/es-bleu.json"

# ---- --generate on it ------------------------------------------------------
gen() { "$DLSERVE" --generate "$G" --threads 1 --batch-invariant on "$@" 2>> "$WORK/gen.err"; }
printf 'And God said\nJesus wept\n\nThe LORD is my shepherd; I shall\n' > "$WORK/prompts.txt"
gen --prompts "$WORK/prompts.txt" --max-tokens 24 --ids > "$WORK/all.jsonl"
check "--prompts: an answer a prompt, in order" \
    test "$(/usr/bin/python3 -c 'import json, sys
print(",".join(str(json.loads(l)["index"]) for l in open(sys.argv[1])))' "$WORK/all.jsonl")" = 0,1,2,3
: > "$WORK/alone.jsonl"
while IFS= read -r p; do
    gen --prompt "$p" --max-tokens 24 --ids | sed 's/^{"index":0,//' >> "$WORK/alone.jsonl"
done < "$WORK/prompts.txt"
check "... each the same as alone (continuous batching, batch-invariant)" \
    diff <(sed 's/^{"index":[0-9]*,//' "$WORK/all.jsonl") "$WORK/alone.jsonl"
gen --prompts "$WORK/prompts.txt" --max-tokens 24 --ids --max-seqs 2 > "$WORK/two.jsonl"
check "... the same two sequences at a time (the others waiting for room)" \
    diff "$WORK/all.jsonl" "$WORK/two.jsonl"
gen --prompts "$WORK/prompts.txt" --max-tokens 24 --ids --recompute > "$WORK/recompute.jsonl"
check "... the same recomputing the prefix each step as with the key-value cache" \
    diff "$WORK/all.jsonl" "$WORK/recompute.jsonl"
gen --prompts "$WORK/prompts.txt" --max-tokens 24 --ids --beam-width 1 > "$WORK/beam1.jsonl"
check "... beam width 1 is greedy decoding" diff "$WORK/all.jsonl" "$WORK/beam1.jsonl"
gen --prompts "$WORK/prompts.txt" --max-tokens 24 --beam-width 3 > "$WORK/beam3.jsonl"
check "... beam search answers each prompt" test "$(wc -l < "$WORK/beam3.jsonl")" -eq 4
gen --prompt "And" --temperature 0.9 --top-k 20 --top-p 0.95 --seed 7 > "$WORK/s1.json"
gen --prompt "And" --temperature 0.9 --top-k 20 --top-p 0.95 --seed 7 > "$WORK/s2.json"
check "sampling: the same seed, the same text" diff "$WORK/s1.json" "$WORK/s2.json"
check "... of max_tokens tokens at most (finish_reason length or stop)" \
    /usr/bin/python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(not (r["tokens"] <= 16 and r["finish_reason"] in ("length", "stop")))' "$WORK/s1.json"
gen --prompt "And God said" --max-tokens 40 --stop "the" > "$WORK/stop.json"
check "--stop: the answer ends before the stop string" \
    /usr/bin/python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print("#", r)
sys.exit(not ("the" not in r["text_output"] and (r["finish_reason"] == "stop" or r["tokens"] == 40)))' \
    "$WORK/stop.json"

# bad input: exit status 1 (2 for a bad option), one line naming it
refused() {  # CODE WORDS COMMAND...: exits CODE, stderr holds WORDS
    local code=$1 words=$2; shift 2
    "$@" > /dev/null 2> "$WORK/refused.err"
    [ $? -eq "$code" ] && grep -q "$words" "$WORK/refused.err" || { cat "$WORK/refused.err"; return 1; }
}
long=$(head -c 200 /dev/zero | tr '\0' a)
check "a prompt longer than the context is refused" \
    refused 1 "context" "$DLSERVE" --generate "$G" --prompt "$long"
printf 'fine\n%s\n' "$long" > "$WORK/bad-prompts.txt"
check "... naming its line in --prompts" \
    refused 1 "bad-prompts.txt:2" "$DLSERVE" --generate "$G" --prompts "$WORK/bad-prompts.txt"
check "top_p 0 is refused" refused 1 "top_p" "$DLSERVE" --generate "$G" --prompt a --top-p 0
check "beam search with a temperature is refused" \
    refused 1 "temperature" "$DLSERVE" --generate "$G" --prompt a --beam-width 2 --temperature 1
check "--generate without a prompt is refused" refused 2 "prompt" "$DLSERVE" --generate "$G"
check "--prompt without --generate is refused" \
    refused 2 "go with --generate" "$DLSERVE" --predict "$G" --prompt a
check "a fifth --stop is refused" refused 2 "at most 4" "$DLSERVE" --generate "$G" --prompt a \
    --stop a --stop b --stop c --stop d --stop e
mkdir -p "$WORK/plain"
/usr/bin/python3 -c 'import json, sys
m = json.load(open(sys.argv[1])); del m["generate"]; json.dump(m, open(sys.argv[2], "w"))' \
    "$G/model.json" "$WORK/plain/model.json"
cp -r "$G/1" "$WORK/plain/"
check "a model without a generate block is refused" \
    refused 1 "no \"generate\" block" "$DLSERVE" --generate "$WORK/plain" --prompt a

finish
