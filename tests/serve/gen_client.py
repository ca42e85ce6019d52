#!/usr/bin/env python3
"""gen_client.py: a client of dlserve's generation endpoints for
tests/serve/test_generate.sh, on the standard library alone (http.client,
raw sockets for a client that goes away). Each subcommand prints what it
checked and exits non-zero on the first mismatch.

  gen_client.py URL MODEL stream       generate_stream's events concatenate
                                       to generate's text (sampling, a seed)
  gen_client.py URL MODEL concurrent N N generations of different lengths
                                       at once equal each alone, bit for bit
  gen_client.py URL MODEL vanish       a client that closes mid-stream frees
                                       its sequence (the running gauge back
                                       to 0) and the next request is served
  gen_client.py URL MODEL retire REPO  a stream begun on version 1 ends whole
                                       after version 2 (the same weights)
                                       replaced it; new requests go to 2
  gen_client.py URL MODEL openai       /v1/completions field by field,
                                       streamed chunks and [DONE], /v1/models
"""
import http.client
import json
import os
import re
import shutil
import socket
import sys
import threading
import time
import urllib.parse

URL, MODEL, WHAT = sys.argv[1], sys.argv[2], sys.argv[3]
HOST = urllib.parse.urlparse(URL)


def conn():
    return http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=120)


def post(path, body):
    c = conn()
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.getheader("Content-Type"), data


def events(path, body):
    """The data lines of a server-sent events answer, in order."""
    status, ctype, data = post(path, body)
    assert status == 200, (status, data)
    assert ctype.startswith("text/event-stream"), ctype
    text = data.decode()
    assert text.endswith("\n\n"), repr(text[-40:])
    out = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: "), repr(block)
        out.append(block[len("data: "):])
    return out


def generate(prompt, params):
    status, _, data = post(f"/v2/models/{MODEL}/generate",
                           {"text_input": prompt, "parameters": params})
    assert status == 200, (status, data)
    return json.loads(data)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def metric(name):
    c = conn()
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and f'model="{MODEL}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def stream():
    for seed in (1, 2, 3):
        params = {"max_tokens": 40, "temperature": 0.8, "top_k": 20, "seed": seed}
        whole = generate("in the ", params)
        evs = [json.loads(e) for e in events(f"/v2/models/{MODEL}/generate_stream",
                                             {"text_input": "in the ", "parameters": params})]
        joined = "".join(e["text_output"] for e in evs)
        if joined != whole["text_output"]:
            fail(f"seed {seed}: stream {joined!r} != generate {whole['text_output']!r}")
        if any("finish_reason" in e for e in evs[:-1]):
            fail("finish_reason before the last event")
        if evs[-1].get("finish_reason") != whole["finish_reason"]:
            fail(f"last event {evs[-1]} against {whole['finish_reason']}")
        for e in evs:
            if e["model_name"] != MODEL or e["model_version"] != whole["model_version"]:
                fail(f"event names {e}")
        print(f"seed {seed}: {len(evs)} events join to {joined!r} ({whole['finish_reason']})")


def concurrent(n):
    jobs = []
    for i in range(n):
        prompt = ["in the", "god ", "and", "light was"][i % 4] + " " * (i % 3)
        params = {"max_tokens": 1 + (i * 7) % 48, "seed": i,
                  "temperature": 0 if i % 2 else 0.9}
        jobs.append((prompt, params))
    alone = [generate(p, q) for p, q in jobs]
    got = [None] * n
    errors = []

    def run(i):
        try:
            got[i] = generate(*jobs[i])
        except Exception as e:  # reported below
            errors.append(f"{i}: {e!r}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        fail("; ".join(errors[:5]))
    for i in range(n):
        if got[i] != alone[i]:
            fail(f"request {i} {jobs[i]}: together {got[i]} != alone {alone[i]}")
    print(f"{n} concurrent generations equal each alone "
          f"({sum(len(a['text_output']) for a in alone)} bytes)")


def vanish():
    before = metric("dlserve_generate_cancelled_total")
    body = json.dumps({"text_input": "in", "parameters": {
        "max_tokens": 2000, "temperature": 1.0, "seed": 7}}).encode()
    for route in ("generate_stream", "generate"):
        s = socket.create_connection((HOST.hostname, HOST.port), timeout=60)
        s.sendall(b"POST /v2/models/%s/%s HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                  % (MODEL.encode(), route.encode(), len(body), body))
        got = b""
        while route == "generate_stream" and b"data: " not in got:
            chunk = s.recv(4096)
            if not chunk:
                fail("the stream closed before its first event")
            got += chunk
        s.close()   # mid-stream, or before the answer
    deadline = time.time() + 60
    while metric("dlserve_generate_sequences_running") != 0:
        if time.time() > deadline:
            fail("the sequence of a client gone still runs after 60 s")
        time.sleep(0.1)
    cancelled = metric("dlserve_generate_cancelled_total") - before
    if cancelled != 2:
        fail(f"{cancelled:.0f} of the 2 generations of clients gone were cancelled")
    print("clients gone mid-stream and before their answer: both sequences cancelled "
          "and freed (running 0)")
    r = generate("in the", {"max_tokens": 5})
    if not isinstance(r.get("text_output"), str):
        fail(f"served after: {r}")
    print("the daemon still serves:", r)


def openai():
    status, ctype, data = post("/v1/completions", {"model": MODEL, "prompt": "in the",
                                                   "max_tokens": 12, "temperature": 0,
                                                   "seed": 3})
    assert status == 200, (status, data)
    o = json.loads(data)
    want = {"id", "object", "created", "model", "choices", "usage"}
    if set(o) != want:
        fail(f"keys {sorted(o)}")
    if not (o["id"].startswith("cmpl-") and o["object"] == "text_completion"
            and isinstance(o["created"], int) and o["created"] > 1.6e9 and o["model"] == MODEL):
        fail(f"header fields {o}")
    if len(o["choices"]) != 1:
        fail(f"choices {o['choices']}")
    ch = o["choices"][0]
    if set(ch) != {"text", "index", "logprobs", "finish_reason"} or ch["index"] != 0 \
            or ch["logprobs"] is not None or ch["finish_reason"] not in ("length", "stop"):
        fail(f"choice {ch}")
    u = o["usage"]
    if u["prompt_tokens"] != len("in the".encode()) or \
            u["total_tokens"] != u["prompt_tokens"] + u["completion_tokens"] or \
            not 1 <= u["completion_tokens"] <= 12:
        fail(f"usage {u}")
    if ch["finish_reason"] == "length" and u["completion_tokens"] != 12:
        fail(f"length with {u['completion_tokens']} tokens")
    # the same as Triton's generate, greedy
    t = generate("in the", {"max_tokens": 12, "temperature": 0, "seed": 3})
    if t["text_output"] != ch["text"] or t["finish_reason"] != ch["finish_reason"]:
        fail(f"completions {ch} != generate {t}")
    print("completion object:", o)
    # streamed: chunks of the same shape, the last with finish_reason, then [DONE]
    evs = events("/v1/completions", {"model": MODEL, "prompt": ["in the"], "max_tokens": 12,
                                     "seed": 3, "temperature": 0, "stream": True})
    if evs[-1] != "[DONE]":
        fail(f"last event {evs[-1]!r}")
    chunks = [json.loads(e) for e in evs[:-1]]
    for k in chunks:
        if k["object"] != "text_completion" or k["model"] != MODEL or \
                not k["id"].startswith("cmpl-") or len(k["choices"]) != 1:
            fail(f"chunk {k}")
    if len({k["id"] for k in chunks}) != 1:
        fail("chunks of one completion carry different ids")
    if any(k["choices"][0]["finish_reason"] is not None for k in chunks[:-1]) or \
            chunks[-1]["choices"][0]["finish_reason"] != ch["finish_reason"]:
        fail(f"finish_reason in chunks {chunks}")
    joined = "".join(k["choices"][0]["text"] for k in chunks)
    if joined != ch["text"]:
        fail(f"stream {joined!r} != {ch['text']!r}")
    print(f"{len(chunks)} chunks and [DONE] join to {joined!r}")
    c = conn()
    c.request("GET", "/v1/models")
    r = c.getresponse()
    m = json.loads(r.read())
    if r.status != 200 or m["object"] != "list":
        fail(f"/v1/models {m}")
    ids = [d["id"] for d in m["data"]]
    if MODEL not in ids:
        fail(f"/v1/models lists {ids}")
    for d in m["data"]:
        if set(d) != {"id", "object", "created", "owned_by"} or d["object"] != "model" \
                or d["owned_by"] != "dlserve":
            fail(f"model entry {d}")
    print("/v1/models:", m)


def retire(repo):
    params = {"max_tokens": 40, "temperature": 0.8, "seed": 5, "stop": ["\x01"]}
    body = json.dumps({"text_input": "in the", "parameters": params}).encode()
    s = socket.create_connection((HOST.hostname, HOST.port), timeout=60)
    s.sendall(b"POST /v2/models/%s/generate_stream HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
              % (MODEL.encode(), len(body), body))
    got = b""
    while b"data: " not in got:
        chunk = s.recv(1)   # the first event only: the rest waits in the socket
        if not chunk:
            fail("the stream closed before its first event")
        got += chunk
    # version 2: the same weights, published whole (a rename)
    tmp = os.path.join(repo, MODEL, ".v2")
    os.makedirs(tmp)
    shutil.copy(os.path.join(repo, MODEL, "1", "model.safetensors"), tmp)
    os.rename(tmp, os.path.join(repo, MODEL, "2"))
    deadline = time.time() + 60
    while generate("in", {"max_tokens": 1})["model_version"] != "2":
        if time.time() > deadline:
            fail("version 2 was not served within 60 s")
        time.sleep(0.1)
    while not got.endswith(b"0\r\n\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    events = [json.loads(e) for e in re.findall(rb"data: (\{.*?\})\n\n", got)]
    if not events or events[-1].get("finish_reason") not in ("length", "stop"):
        fail(f"the stream did not end whole: {got[-200:]!r}")
    if {e["model_version"] for e in events} != {"1"}:
        fail(f"versions in the stream: {[e['model_version'] for e in events]}")
    joined = "".join(e["text_output"] for e in events)
    now = generate("in the", params)
    if now["model_version"] != "2" or now["text_output"] != joined:
        fail(f"version 1's stream {joined!r} against version 2's {now}")
    print(f"version 1's stream ended whole ({len(events)} events) after version 2 came; "
          f"version 2 answers the same text")


if WHAT == "stream":
    stream()
elif WHAT == "concurrent":
    concurrent(int(sys.argv[4]))
elif WHAT == "retire":
    retire(sys.argv[4])
elif WHAT == "vanish":
    vanish()
elif WHAT == "openai":
    openai()
else:
    fail(f"unknown subcommand {WHAT}")
