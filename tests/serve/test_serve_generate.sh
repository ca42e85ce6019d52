#!/usr/bin/env bash
# Generation served: "lm", a tiny decoder-only byte-level transformer
# (embedding, positions, causal attention, layernorm, next-token logits)
# with a "generate" block, trained here for a moment on a few KB of
# words, and "plain", the same model without the block. Over HTTP
# (tests/serve/gen_client.py): generate_stream's events concatenate to
# generate's text for the same seed; 64 concurrent generations of
# different lengths answer bit for bit what each answers alone
# (batch_invariant); a client gone mid-stream frees its sequence (the
# running gauge back to 0) and the daemon serves on; OpenAI's completion
# object field by field, its stream's chunks and [DONE], /v1/models;
# 400s for bad parameters and bodies (OpenAI's error shape on its
# endpoint), 404 for an unknown model, 400 for a model that does not
# generate; the metrics pass promtool, /status and the status page show
# the generation. With room for one sequence, generations queue for it
# within their deadline, and one that never finds room gets 503; a
# stream begun on version 1 ends whole after version 2 replaced it.
. "$(dirname "$0")/../lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
PY=/usr/bin/python3

R=$WORK/repo
make_lm_repo "$R"
check "lm trains" test -s "$R/lm/1/model.safetensors"

start_daemon gen --set models.dir="$R" --set batching.batch_invariant=true \
    --set http.threads=2
check "the daemon starts" test -n "$PORT"

$PY "$SRC/tests/serve/gen_client.py" "$URL" lm stream
check "generate_stream's events concatenate to generate's text" test $? -eq 0
$PY "$SRC/tests/serve/gen_client.py" "$URL" lm concurrent 64
check "64 concurrent generations each equal their text alone" test $? -eq 0
$PY "$SRC/tests/serve/gen_client.py" "$URL" endless vanish
check "a client gone mid-stream frees its sequence; the daemon serves on" test $? -eq 0
$PY "$SRC/tests/serve/gen_client.py" "$URL" lm openai
check "OpenAI's completion object, its stream and /v1/models" test $? -eq 0

# refusals: code and message
refused() {   # refused CODE PATH BODY PATTERN
    local want=$1 path=$2 body=$3 pattern=$4 got
    got=$(code POST "$path" -d "$body")
    [ "$got" = "$want" ] && grep -q -- "$pattern" "$WORK/body" ||
        { echo "$path $body: $got $(cat "$WORK/body")"; false; }
}
G=/v2/models/lm/generate
check "max_tokens 0: 400" refused 400 $G '{"text_input":"a","parameters":{"max_tokens":0}}' max_tokens
check "temperature < 0: 400" refused 400 $G '{"text_input":"a","parameters":{"temperature":-1}}' temperature
check "top_p 0: 400" refused 400 $G '{"text_input":"a","parameters":{"top_p":0}}' top_p
check "beam_width 17: 400" refused 400 $G '{"text_input":"a","parameters":{"beam_width":17}}' beam_width
check "an unknown parameter: 400" refused 400 $G '{"text_input":"a","parameters":{"colour":1}}' colour
check "stop of a number: 400" refused 400 $G '{"text_input":"a","parameters":{"stop":3}}' stop
check "five stop strings: 400" refused 400 $G \
    '{"text_input":"a","parameters":{"stop":["a","b","c","d","e"]}}' stop
check "no text_input: 400" refused 400 $G '{"parameters":{}}' text_input
check "a body that is not JSON: 400" refused 400 $G 'hello' JSON
check "a prompt longer than the context: 400" refused 400 $G \
    "{\"text_input\":\"$(printf 'a%.0s' $(seq 80))\"}" context
check "an unknown model: 404" refused 404 /v2/models/nope/generate '{"text_input":"a"}' nope
check "a model without a generate block: 400" refused 400 /v2/models/plain/generate_stream \
    '{"text_input":"a"}' 'does not generate'
check "OpenAI: n 2 is 400 in OpenAI's shape" refused 400 /v1/completions \
    '{"model":"lm","prompt":"a","n":2}' '"type":"invalid_request_error"'
check "OpenAI: best_of 2 is 400" refused 400 /v1/completions \
    '{"model":"lm","prompt":"a","best_of":2}' best_of
check "OpenAI: an unknown argument is 400" refused 400 /v1/completions \
    '{"model":"lm","prompt":"a","colour":1}' colour
check "OpenAI: a prompt of two is 400" refused 400 /v1/completions \
    '{"model":"lm","prompt":["a","b"]}' prompt
check "OpenAI: an unknown model is 404, model_not_found" refused 404 /v1/completions \
    '{"model":"nope","prompt":"a"}' model_not_found
check "GET on generate: 405" test "$(code GET $G)" = 405

code GET /metrics > /dev/null
cp "$WORK/body" "$WORK/metrics"
check "metrics: tokens generated" grep -q '^dlserve_generated_tokens_total{model="lm",version="1"} [1-9]' "$WORK/metrics"
check "metrics: time to first token" grep -q '^dlserve_time_to_first_token_seconds_count{model="lm"} [1-9]' "$WORK/metrics"
check "metrics: time per output token" grep -q '^dlserve_time_per_output_token_seconds_count{model="lm"} [1-9]' "$WORK/metrics"
check "metrics: generation steps count as batches" grep -q '^nv_inference_exec_count{model="lm",version="1"} [1-9]' "$WORK/metrics"
check "metrics: sequences running 0" grep -q '^dlserve_generate_sequences_running{model="lm",version="1"} 0$' "$WORK/metrics"
if command -v promtool > /dev/null; then
    check "metrics pass promtool" "$SRC/tests/serve/promtool_check.sh" "$WORK/metrics"
fi
code GET /status > /dev/null
check "status: lm generates, running 0" test "$(jq_get \
    '[m["generate"]["running"] for m in d["models"] if m["name"] == "lm"][0] == 0')" = True
check "status: tokens generated counted" test "$(jq_get \
    'd["counters"]["models"]["lm"]["1"]["generated_tokens"] > 0')" = True
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -n "$CHROMIUM" ]; then
    check "the status page shows lm's generation (headless Chromium)" \
        $PY "$SRC/tests/serve/browser.py" "$URL/" --chromium "$CHROMIUM" \
        --dom "$WORK/page.html" --screenshot "$WORK/page.png" --console "$WORK/console.txt" \
        --timeout 40 --until "document.body.dataset.polls >= 1 &&
            !document.getElementById('generation').hidden &&
            document.querySelector('#generation-models tr[data-model=lm]') !== null"
    check "... without a script error" test ! -s "$WORK/console.txt"
fi

stop_daemon
check "the daemon stops cleanly" test $? -eq 0

# Room for one sequence: requests queue for it within their deadline; one
# that can never start (a beam of 2) gets 503 once its timeout passes.
start_daemon one --set models.dir="$R" --set batching.batch_invariant=true \
    --set generate.max_sequences=1
check "a daemon of one sequence starts" test -n "$PORT"
$PY "$SRC/tests/serve/gen_client.py" "$URL" lm concurrent 8
check "8 generations queue for one sequence and each equals its text alone" test $? -eq 0
check "no room before the request's timeout: 503" refused 503 $G \
    '{"text_input":"a","parameters":{"beam_width":2,"timeout":200000}}' 'no room'
check "a bad timeout: 400" refused 400 $G '{"text_input":"a","parameters":{"timeout":-1}}' timeout
$PY "$SRC/tests/serve/gen_client.py" "$URL" lm retire "$R"
check "a stream on version 1 ends whole after version 2 replaced it" test $? -eq 0
check "version 1's generator retired with it" sh -c "curl -s $URL/metrics |
    grep -q '^dlserve_generate_sequences_running{model=\"lm\",version=\"2\"}' &&
    ! curl -s $URL/metrics | grep -q '^dlserve_generate_sequences_running{model=\"lm\",version=\"1\"}'"
stop_daemon
check "it stops cleanly" test $? -eq 0
finish
