# tests/lib/lib_serve.sh: starting and stopping a real daemon for the
# serve, Kafka, Redis and soak tests (sourced after tests/lib/lib.sh).

# make_repo DIR: a model repository with fashion-mlp trained briefly (v1).
make_repo() {
    mkdir -p "$1/fashion-mlp"
    cp "$SRC/models/fashion-mlp/model.json" "$1/fashion-mlp/"
    "$DLSERVE" --train "$1/fashion-mlp" --epochs 1 --limit 3000 --threads 1 --no-progress \
        > /dev/null 2>&1
}

# make_tagger DIR: "tagger", a text model with fixed random weights (v1):
# a BYTES input through the bytes tokenizer, two per-token outputs, one of
# them a crf. Its answers are compared, not judged.
make_tagger() {
    mkdir -p "$1/1"
    cat > "$1/model.json" <<'EOF'
{"name": "tagger",
 "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "max_length": 12,
             "tokenizer": {"type": "bytes"}}],
 "layers": [{"name": "emb", "type": "embedding", "num_embeddings": 256, "dim": 32},
            {"name": "hid", "type": "dense", "units": 64},
            {"name": "relu", "type": "relu"},
            {"name": "fc1", "type": "dense", "units": 3},
            {"name": "fc2", "type": "dense", "units": 3, "inputs": ["relu"]}],
 "outputs": [{"name": "kind", "from": "fc1", "loss": "softmax_cross_entropy",
              "labels": ["lower", "upper", "other"]},
             {"name": "tags", "from": "fc2", "loss": "crf",
              "labels": ["lower", "upper", "other"]}]}
EOF
    /usr/bin/python3 "$SRC/tests/py/random_weights.py" "$1/1/model.safetensors" 5 \
        emb.weight=256x32 hid.weight=64x32 hid.bias=64 fc1.weight=3x64 fc1.bias=3 \
        fc2.weight=3x64 fc2.bias=3 tags.transitions=5x3
}

# make_lm_repo DIR: a model repository with "lm", a tiny decoder-only
# byte-level transformer (embedding, positions, causal attention,
# layernorm, next-token logits) that generates ("generate" block, eos a
# newline), trained for a moment on a few KB of words (v1); "plain", the
# same model and weights without the block; and "endless", the same
# layers over a context of 2048 and no eos: a generation that runs until
# max_tokens (long enough to be cut off by a client going away).
make_lm_repo() {
    mkdir -p "$1/lm" "$1/plain/1" "$WORK/lmdata"
    cat > "$1/lm/model.json" <<'EOF'
{"name": "lm",
 "inputs": [{"name": "ids", "datatype": "INT64", "shape": [-1], "max_length": 64}],
 "layers": [{"name": "emb", "type": "embedding", "num_embeddings": 256, "dim": 32},
            {"name": "pos", "type": "pos_embedding", "max_length": 64},
            {"name": "att", "type": "attention", "heads": 2, "causal": true},
            {"name": "res", "type": "add", "inputs": ["pos", "att"]},
            {"name": "norm", "type": "layernorm"},
            {"name": "logits", "type": "dense", "units": 256}],
 "outputs": [{"name": "next", "from": "logits", "loss": "next_token", "of": "ids"}],
 "generate": {"input": "ids", "output": "next", "max_context": 64, "eos": "\n"},
 "training": {"epochs": 3, "batch_size": 16, "optimizer": "adam", "lr": 0.01}}
EOF
    /usr/bin/python3 - "$WORK/lmdata" <<'PY'
import json, random, sys
random.seed(1)
words = "in the beginning god created heaven and earth light was good day night".split()
for split, n in (("train", 300), ("test", 30)):
    with open(f"{sys.argv[1]}/{split}.jsonl", "w") as f:
        for _ in range(n):
            s = " ".join(random.choice(words) for _ in range(random.randint(3, 8))) + "\n"
            f.write(json.dumps({"ids": list(s.encode())}) + "\n")
PY
    "$DLSERVE" --train "$1/lm" --data "$WORK/lmdata" --threads 1 --no-progress > /dev/null \
        2> "$WORK/lm-train.err"
    grep -v '"generate"' "$1/lm/model.json" | sed 's/"name": "lm"/"name": "plain"/' \
        > "$1/plain/model.json"
    cp "$1/lm/1/model.safetensors" "$1/plain/1/" 2> /dev/null
    mkdir -p "$1/endless"
    sed 's/"name": "lm"/"name": "endless"/; s/"max_length": 64/"max_length": 2048/g;
         s/"max_context": 64, "eos": "\\n"/"max_context": 2048/; s/"epochs": 3/"epochs": 1/' \
        "$1/lm/model.json" > "$1/endless/model.json"
    "$DLSERVE" --train "$1/endless" --data "$WORK/lmdata" --threads 1 --no-progress \
        > /dev/null 2>> "$WORK/lm-train.err"
}

# start_daemon NAME ARGS...: starts dlserve on a free port; sets PID, PORT,
# URL and LOG. Fails if it is not ready within 30 s.
start_daemon() {
    local name=$1; shift
    LOG=$WORK/$name.log
    : > "$LOG"   # there to read before the daemon's shell opens it
    "$DLSERVE" --set http.port=0 "$@" > "$WORK/$name.out" 2> "$LOG" &
    PID=$!
    PORT=""
    for _ in $(seq 300); do
        PORT=$(sed -n 's/.*listening on https\?:\/\/[^:]*:\([0-9]*\).*/\1/p' "$LOG" | head -1)
        [ -n "$PORT" ] && break
        kill -0 $PID 2>/dev/null || break
        sleep 0.1
    done
    URL=http://127.0.0.1:$PORT
    [ -n "$PORT" ]
}

# stop_daemon [SECONDS]: SIGTERM, and the exit code within SECONDS (default
# 10; 124 if it hangs).
stop_daemon() {
    kill -TERM $PID 2>/dev/null
    local t0=$SECONDS
    while kill -0 $PID 2>/dev/null && [ $((SECONDS - t0)) -lt "${1:-10}" ]; do sleep 0.1; done
    if kill -0 $PID 2>/dev/null; then
        kill -9 $PID
        wait $PID 2>/dev/null
        return 124
    fi
    wait $PID
}

# code METHOD PATH [curl args...]: prints the HTTP status code; the body
# goes to $WORK/body.
code() {
    local method=$1 path=$2; shift 2
    curl -s -o "$WORK/body" -w '%{http_code}' -X "$method" "$URL$path" "$@"
}

# jq_get EXPR: evaluates a Python expression on the JSON in $WORK/body (as d).
jq_get() {
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
        "$WORK/body" "$1"
}

# ---- gRPC ----

# free_low_port: a port below 32768 (outside Linux's ephemeral range, where
# the kernel picks clients' ports) that nothing holds now.
free_low_port() {
    /usr/bin/python3 - <<'PY'
import random, socket
while True:
    p = random.randint(10000, 32767)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        print(p)
        break
    except OSError:
        pass
    finally:
        s.close()
PY
}

# start_grpc NAME ARGS...: start_daemon with gRPC on a free port (GPORT),
# ready once it says it listens there; another port if one was taken.
start_grpc() {
    local name=$1; shift
    for _ in 1 2 3 4 5; do
        GPORT=$(free_low_port)
        if start_daemon "$name" --set grpc.port="$GPORT" "$@"; then
            for _ in $(seq 100); do
                grep -Eq "grpc: listening on 127.0.0.1( \(TLS\))? port $GPORT," "$LOG" && return 0
                kill -0 "$PID" 2>/dev/null || break
                sleep 0.1
            done
        fi
        echo "# gRPC daemon not started on port $GPORT:"; tail -3 "$LOG"
        kill -9 "$PID" 2>/dev/null; wait "$PID" 2>/dev/null
    done
    return 1
}
