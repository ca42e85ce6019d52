#!/usr/bin/env python3
"""grpc_client.py [--token T] [--tls CERT] GRPC_TARGET HTTP_URL CHECK [ARGS...]

A gRPC client of dlserve's inference.GRPCInferenceService and
grpc.health.v1.Health, its Python stubs generated from the project's own
proto/grpc_service.proto and proto/health.proto by grpc_tools.protoc
(Debian's python3-grpc-tools) into $GRPC_STUBS (a folder; generated there
when it holds none yet) and imported from there: the client is what the
.proto files say, not code kept beside the server.

CHECK is one group of checks, run against the daemon at GRPC_TARGET
(host:port, plaintext) and, where answers are compared, its HTTP side at
HTTP_URL (the Open Inference Protocol's binary tensor data extension,
fetched with http.client); --token sends `authorization: Bearer T` on
every gRPC call and HTTP request; --tls CERT speaks TLS to GRPC_TARGET
(host:port with the certificate's host name), trusting CERT, and HTTPS
to HTTP_URL. Prints "  ok - ..." for each check that
passes; on the first failure prints "  FAIL - ..." and exits 1.

  gen                  only generate the stubs
  basics               live, ready, metadata (as HTTP's), config,
                       health, unknown method and service
  infer                fashion-mlp: raw and typed FP32, raw UINT8 and
                       HTTP's binary answer bit for bit; requested outputs,
                       classification, id, versions
  multi                two-tower (two inputs, two outputs) and tagger
                       (a BYTES input, two per-token outputs) as HTTP
  errors               the error codes of bad requests
  stream N [queued]    N requests in flight on one stream (and a few bad
                       ones): each answered once, with its id, as unary;
                       queued: all N sent before the first answer (a
                       batcher that waits for them)
  killed               clients gone mid-stream: killed, and exited with
                       requests unread; the daemon serves on, no stream left
  stats                ModelStatistics counts gRPC requests (as HTTP's)
  cache                fashion-mlp's response cache: the same inputs twice,
                       a miss then a hit, the same bits; HTTP hits too
  repository           the index; unload, ModelReady, load
  status PORT          /status's grpc object and /metrics' gRPC families
  auth                 with a token: what needs it and what does not
  oversize BYTES       a message over grpc.max_message_bytes
  deadline             a deadline that passes in the queue
  grace                after SIGTERM, during the shutdown grace
  generate             text_input to the generating model "lm": unary as
                       HTTP's generate, a stream's pieces, refusals; a
                       client gone mid-generation ("endless") cancels it
  tls                  (--tls) calls over TLS; a plaintext client refused
  traced TRACEPARENT   a ModelInfer and a stream's request carrying it

Standard library, grpcio and protobuf only.
"""
import argparse
import gzip
import http.client
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse

import grpc

p = argparse.ArgumentParser()
p.add_argument("--token", default="")
p.add_argument("--tls", default="")
p.add_argument("target")
p.add_argument("url")
p.add_argument("check")
p.add_argument("args", nargs="*")
A = p.parse_args()

SRC = os.environ.get("DLSERVE_SOURCE_ROOT",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
STUBS = os.environ.get("GRPC_STUBS") or tempfile.mkdtemp(prefix="dlserve-grpc-stubs.")
DATA = "/usr/share/datasets/fashion-mnist"


def generate_stubs(folder):
    """The Python messages and stubs of the project's .proto files, by
    grpc_tools.protoc (in a child process: protoc's module keeps state)."""
    if os.path.exists(os.path.join(folder, "grpc_service_pb2_grpc.py")):
        return
    os.makedirs(folder, exist_ok=True)
    proto = os.path.join(SRC, "proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", proto,
                    "--python_out=" + folder, "--grpc_python_out=" + folder,
                    os.path.join(proto, "grpc_service.proto"),
                    os.path.join(proto, "health.proto")], check=True)


generate_stubs(STUBS)
sys.path.insert(0, STUBS)
import grpc_service_pb2 as pb           # noqa: E402
import grpc_service_pb2_grpc as pb_grpc  # noqa: E402
import health_pb2                        # noqa: E402
import health_pb2_grpc                   # noqa: E402

URL = urllib.parse.urlparse(A.url)
MD = [("authorization", "Bearer " + A.token)] if A.token else None
OPTIONS = [("grpc.max_receive_message_length", 64 << 20),
           ("grpc.max_send_message_length", 64 << 20)]
if A.tls:
    with open(A.tls, "rb") as f:
        channel = grpc.secure_channel(A.target, grpc.ssl_channel_credentials(f.read()), OPTIONS)
else:
    channel = grpc.insecure_channel(A.target, options=OPTIONS)
stub = pb_grpc.GRPCInferenceServiceStub(channel)
health = health_pb2_grpc.HealthStub(channel)
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Failed(Exception):
    pass


def ok(what):
    print("  ok - %s" % what, flush=True)


def expect(cond, what, detail=""):
    if not cond:
        raise Failed("%s%s" % (what, (": %s" % (detail,)) if detail != "" else ""))
    ok(what)


def call(method, req, **kw):
    """(answer, None) or (None, RpcError) of a unary call, the token sent."""
    kw.setdefault("timeout", 60)
    kw.setdefault("metadata", MD)
    try:
        return method(req, **kw), None
    except grpc.RpcError as e:
        return None, e


def expect_ok(method, req, what, **kw):
    r, e = call(method, req, **kw)
    if e is not None:
        raise Failed("%s: %s %s" % (what, e.code(), e.details()))
    return r


def expect_code(method, req, code, what, words=None, **kw):
    """The call fails with code (and details holding words)."""
    r, e = call(method, req, **kw)
    got = e.code() if e is not None else grpc.StatusCode.OK
    detail = e.details() if e is not None else ""
    if got != code or (words and words not in (detail or "")):
        raise Failed("%s: expected %s%s, got %s %r" % (
            what, code.name, " saying %r" % words if words else "", got.name, detail))
    ok("%s: %s (%s)" % (what, code.name, detail))


# ---- HTTP, for comparison ---------------------------------------------------------

def hreq(method, path, body=None, headers=None):
    h = dict(headers or {})
    if A.token:
        h["Authorization"] = "Bearer " + A.token
    if A.tls:
        import ssl
        c = http.client.HTTPSConnection(URL.hostname, URL.port, timeout=60,
                                        context=ssl.create_default_context(cafile=A.tls))
    else:
        c = http.client.HTTPConnection(URL.hostname, URL.port, timeout=60)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def http_json(path, method="GET", body=None):
    st, _, b = hreq(method, path, body)
    if st != 200:
        raise Failed("%s %s: %d %s" % (method, path, st, b[:200]))
    return json.loads(b)


def http_binary(model, inputs, outputs=None, params=None):
    """The binary extension both ways: inputs [(name, datatype, shape,
    raw)], outputs [(name, {parameters})] or None; (header, [raw of each
    output]) of a 200 answer."""
    ins, raw = [], b""
    for name, dt, shape, data in inputs:
        ins.append({"name": name, "datatype": dt, "shape": shape,
                    "parameters": {"binary_data_size": len(data)}})
        raw += data
    q = {"inputs": ins, "parameters": dict(params or {}, binary_data_output=True)}
    if outputs is not None:
        q["outputs"] = [{"name": n, "parameters": dict(pp, binary_data=True)}
                        for n, pp in outputs]
    head = json.dumps(q).encode()
    st, h, b = hreq("POST", "/v2/models/%s/infer" % model, head + raw,
                    {"Inference-Header-Content-Length": str(len(head)),
                     "Content-Type": "application/octet-stream"})
    if st != 200:
        raise Failed("HTTP infer of %s: %d %s" % (model, st, b[:300]))
    n = int(h["inference-header-content-length"])
    ans, pos, tensors = json.loads(b[:n]), n, []
    for o in ans["outputs"]:
        size = o["parameters"]["binary_data_size"]
        tensors.append(b[pos:pos + size])
        pos += size
    if pos != len(b):
        raise Failed("HTTP binary answer: %d bytes of tensors, %d sent" % (pos - n, len(b) - n))
    return ans, tensors


def metrics():
    st, _, b = hreq("GET", "/metrics")
    if st != 200:
        raise Failed("GET /metrics: %d" % st)
    return b.decode()


def metric(text, name, **labels):
    """The value of a sample (0 when absent)."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        key, _, val = line.rpartition(" ")
        if key == name and not labels:
            return float(val)
        if not key.startswith(name + "{"):
            continue
        got = dict(kv.split("=", 1) for kv in key[len(name) + 1:-1].split(","))
        got = {k: v.strip('"') for k, v in got.items()}
        if all(got.get(k) == str(v) for k, v in labels.items()):
            return float(val)
    return 0.0


# ---- requests ------------------------------------------------------------------------

TYPED = {"FP32": ("fp32_contents", "<%df"), "INT64": ("int64_contents", "<%dq"),
         "INT32": ("int_contents", "<%di"), "UINT8": ("uint_contents", "<%dB")}


def unpack(dt, data):
    if dt == "BYTES":
        vals, pos = [], 0
        while pos < len(data):
            (n,) = struct.unpack_from("<I", data, pos)
            vals.append(data[pos + 4:pos + 4 + n])
            pos += 4 + n
        return vals
    fmt = TYPED[dt][1]
    return list(struct.unpack(fmt % (len(data) // struct.calcsize(fmt % 1)), data))


def infer_request(model, inputs, typed=False, outputs=None, params=None, rid="",
                  version=""):
    """A ModelInferRequest of inputs [(name, datatype, shape, raw)]:
    raw_input_contents, or each input's values in its typed contents."""
    q = pb.ModelInferRequest(model_name=model, model_version=version, id=rid)
    for name, dt, shape, data in inputs:
        t = q.inputs.add(name=name, datatype=dt, shape=shape)
        if not typed:
            q.raw_input_contents.append(data)
        elif dt == "BYTES":
            t.contents.bytes_contents.extend(unpack(dt, data))
        else:
            getattr(t.contents, TYPED[dt][0]).extend(unpack(dt, data))
    for n, pp in (outputs or []):
        o = q.outputs.add(name=n)
        for k, v in pp.items():
            set_param(o.parameters[k], v)
    for k, v in (params or {}).items():
        set_param(q.parameters[k], v)
    return q


def set_param(p, v):
    if isinstance(v, bool):
        p.bool_param = v
    elif isinstance(v, int):
        p.int64_param = v
    else:
        p.string_param = v


def same_as_http(r, ans, tensors, what):
    """A ModelInferResponse equals an HTTP binary answer: model, version,
    each output's name, datatype and shape, and its bytes."""
    got = [(o.name, o.datatype, list(o.shape)) for o in r.outputs]
    want = [(o["name"], o["datatype"], o["shape"]) for o in ans["outputs"]]
    if (r.model_name, r.model_version) != (ans["model_name"], ans["model_version"]):
        raise Failed("%s: model %s version %s, HTTP %s %s" % (
            what, r.model_name, r.model_version, ans["model_name"], ans["model_version"]))
    if got != want:
        raise Failed("%s: outputs %s, HTTP's %s" % (what, got, want))
    if len(r.raw_output_contents) != len(tensors):
        raise Failed("%s: %d raw outputs for %d" % (what, len(r.raw_output_contents),
                                                    len(tensors)))
    for o, a, b in zip(r.outputs, r.raw_output_contents, tensors):
        if a != b:
            raise Failed("%s: output %s differs from HTTP's (%d bytes, HTTP %d)" % (
                what, o.name, len(a), len(b)))
    if any(len(o.contents.ListFields()) for o in r.outputs):
        raise Failed("%s: typed contents in an answer (all raw)" % what)
    ok("%s: %s bit for bit as HTTP's" % (what, ", ".join("%s %s%s" % (n, d, s)
                                                         for n, d, s in got)))


_raw_images = None


def images(first, n, dt="FP32"):
    """Fashion-MNIST test images [first, first + n) as (name, datatype,
    shape, raw) of fashion-mlp's input: pixel values 0..255."""
    global _raw_images
    if _raw_images is None:
        _raw_images = gzip.open(DATA + "/t10k-images-idx3-ubyte.gz").read()[16:]
    px = _raw_images[first * 784:(first + n) * 784]
    data = px if dt == "UINT8" else struct.pack("<%df" % len(px), *px)
    return ("input", dt, [n, 1, 28, 28], data)


# ---- the checks ----------------------------------------------------------------------

def check_basics():
    expect(expect_ok(stub.ServerLive, pb.ServerLiveRequest(), "ServerLive").live,
           "ServerLive: live")
    expect(expect_ok(stub.ServerReady, pb.ServerReadyRequest(), "ServerReady").ready,
           "ServerReady: ready")
    m = expect_ok(stub.ServerMetadata, pb.ServerMetadataRequest(), "ServerMetadata")
    st, _, b = hreq("GET", "/v2")
    h = json.loads(b)
    expect(st == 200 and m.name == h["name"] == "dlserve" and m.version == h["version"],
           "ServerMetadata: name and version as GET /v2", (m.name, m.version, h))
    expect("model_repository" in m.extensions and "statistics" in m.extensions,
           "ServerMetadata: extensions", list(m.extensions))
    for v in ("", "1"):
        r = expect_ok(stub.ModelReady, pb.ModelReadyRequest(name="fashion-mlp", version=v),
                      "ModelReady")
        expect(r.ready, "ModelReady fashion-mlp version %r: ready" % v)
    for model in ("fashion-mlp", "two-tower", "tagger"):
        r = expect_ok(stub.ModelMetadata, pb.ModelMetadataRequest(name=model), "ModelMetadata")
        h = http_json("/v2/models/" + model)
        for t in h["inputs"] + h["outputs"]:
            t.pop("parameters", None)   # max_length: TensorMetadata has no parameters
        got = {"name": r.name, "versions": list(r.versions), "platform": r.platform,
               "inputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                          for t in r.inputs],
               "outputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                           for t in r.outputs]}
        expect(got == h, "ModelMetadata %s: as GET /v2/models/%s" % (model, model), (got, h))
    r = expect_ok(stub.ModelConfig, pb.ModelConfigRequest(name="fashion-mlp"), "ModelConfig")
    h = http_json("/v2/models/fashion-mlp/config")
    c = r.config
    expect(c.name == h["name"] and c.max_batch_size == h["max_batch_size"] and
           c.platform == h["platform"], "ModelConfig: name, platform, max_batch_size as HTTP's",
           (c.name, c.platform, c.max_batch_size))
    expect([(i.name, list(i.dims)) for i in c.input] ==
           [(i["name"], i["dims"]) for i in h["input"]] and
           [(o.name, list(o.dims)) for o in c.output] ==
           [(o["name"], o["dims"]) for o in h["output"]],
           "ModelConfig: inputs and outputs as HTTP's", c)
    db = c.dynamic_batching
    expect(db.max_queue_delay_microseconds == h["dynamic_batching"]["max_queue_delay_microseconds"]
           and [g.count for g in c.instance_group] == [g["count"] for g in h["instance_group"]],
           "ModelConfig: dynamic batching and instances as HTTP's")
    r = expect_ok(stub.ModelConfig, pb.ModelConfigRequest(name="tagger"), "ModelConfig tagger")
    expect(r.config.parameters["max_length.text"].string_value == "12",
           "ModelConfig tagger: max_length as a parameter", dict(r.config.parameters))
    for svc in ("", "inference.GRPCInferenceService"):
        r = expect_ok(health.Check, health_pb2.HealthCheckRequest(service=svc), "Health")
        expect(r.status == SERVING, "Health/Check %r: SERVING" % svc, r.status)
    expect_code(health.Check, health_pb2.HealthCheckRequest(service="nope"),
                grpc.StatusCode.NOT_FOUND, "Health/Check of an unknown service")
    nope = channel.unary_unary("/inference.GRPCInferenceService/NoSuchMethod",
                               request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)
    expect_code(nope, b"", grpc.StatusCode.UNIMPLEMENTED, "an unknown method")
    other = channel.unary_unary("/other.Service/Call", request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
    expect_code(other, b"", grpc.StatusCode.UNIMPLEMENTED, "an unknown service's method")


def check_infer():
    x = images(0, 3)
    ans, tensors = http_binary("fashion-mlp", [x])
    for typed in (False, True):
        r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [x], typed=typed),
                      "ModelInfer")
        same_as_http(r, ans, tensors, "FP32 %s" % ("typed fp32_contents" if typed
                                                   else "raw_input_contents"))
    xu = images(0, 3, "UINT8")
    ans_u, tensors_u = http_binary("fashion-mlp", [xu])
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [xu]), "ModelInfer UINT8")
    same_as_http(r, ans_u, tensors_u, "UINT8 raw")
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [xu], typed=True),
                  "ModelInfer UINT8 typed")
    same_as_http(r, ans_u, tensors_u, "UINT8 typed uint_contents")
    expect(tensors_u == tensors, "UINT8 pixels answer what FP32 ones do")
    probs = unpack("FP32", r.raw_output_contents[0])
    expect(len(probs) == 30 and all(0 <= v <= 1 for v in probs) and
           all(abs(sum(probs[i * 10:i * 10 + 10]) - 1) < 1e-4 for i in range(3)),
           "probabilities: 3 rows of 10 that sum to 1")
    # a larger batch: 40 images
    x40 = images(100, 40)
    ans40, t40 = http_binary("fashion-mlp", [x40])
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [x40]), "ModelInfer 40")
    same_as_http(r, ans40, t40, "a request of 40 images")
    # id, explicit version
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [x], rid="req-7", version="1"),
                  "ModelInfer version 1")
    expect(r.id == "req-7" and r.model_version == "1" and list(r.raw_output_contents) == tensors,
           "id echoed; version \"1\" answers as the newest", (r.id, r.model_version))
    # requested outputs, in the order asked
    outs = [("class", {}), ("probabilities", {})]
    ans_o, t_o = http_binary("fashion-mlp", [x], outputs=outs)
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [x], outputs=outs),
                  "ModelInfer outputs")
    same_as_http(r, ans_o, t_o, "requested outputs class, probabilities")
    expect([o.name for o in r.outputs] == ["class", "probabilities"],
           "only the requested outputs, in the order asked")
    # the classification extension
    outs = [("probabilities", {"classification": 3})]
    ans_c, t_c = http_binary("fashion-mlp", [x], outputs=outs)
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [x], outputs=outs),
                  "ModelInfer classification")
    same_as_http(r, ans_c, t_c, "classification 3")
    cls = unpack("BYTES", r.raw_output_contents[0])
    expect(r.outputs[0].datatype == "BYTES" and list(r.outputs[0].shape) == [3, 3] and
           all(len(c.split(b":")) == 3 for c in cls),
           "classification: 3 \"score:index:label\" strings a row", cls[:3])
    top = [int(cls[i * 3].split(b":")[1]) for i in range(3)]
    expect(top == unpack("INT64", tensors[2]), "the top class is the class output",
           (top, unpack("INT64", tensors[2])))
    # binary_data is accepted (every gRPC output is raw)
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [x], outputs=[
        ("label", {"binary_data": False})]), "ModelInfer binary_data false")
    expect(list(r.raw_output_contents) == [tensors[1]],
           "an output asked binary_data false: still raw, as HTTP's")
    # the request's parameters: priority and a generous timeout
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [x],
                  params={"priority": 1, "timeout": 30000000}), "ModelInfer parameters")
    expect(list(r.raw_output_contents) == tensors, "priority and timeout parameters accepted")


def two_tower_inputs(n, dt="INT64"):
    users = [(7 * i) % 100 for i in range(n)]
    feats = [((i * 16 + k) % 23) / 7.0 - 1.5 for i in range(n) for k in range(16)]
    fmt = {"INT64": "<%dq", "INT32": "<%di"}[dt]
    return [("user", dt, [n, 1], struct.pack(fmt % n, *users)),
            ("features", "FP32", [n, 16], struct.pack("<%df" % len(feats), *feats))]


def tagger_inputs(texts):
    raw = b"".join(struct.pack("<I", len(t)) + t for t in texts)
    return [("text", "BYTES", [len(texts), 1], raw)]


def check_multi():
    ins = two_tower_inputs(5)
    ans, tensors = http_binary("two-tower", ins)
    for typed in (False, True):
        r = expect_ok(stub.ModelInfer, infer_request("two-tower", ins, typed=typed), "two-tower")
        same_as_http(r, ans, tensors, "two-tower, two inputs %s" % ("typed" if typed else "raw"))
    r = expect_ok(stub.ModelInfer, infer_request("two-tower", ins[::-1]), "two-tower reversed")
    same_as_http(r, ans, tensors, "two-tower, inputs in the other order")
    ins32 = two_tower_inputs(5, "INT32")
    r = expect_ok(stub.ModelInfer, infer_request("two-tower", ins32, typed=True), "INT32 ids")
    same_as_http(r, ans, tensors, "two-tower, INT32 ids in int_contents")
    outs = [("rating", {})]
    ans_r, t_r = http_binary("two-tower", ins, outputs=outs)
    r = expect_ok(stub.ModelInfer, infer_request("two-tower", ins, outputs=outs), "rating")
    same_as_http(r, ans_r, t_r, "two-tower, the rating output alone")
    expect(t_r[0] == tensors[1], "the rating alone is the rating of both")

    texts = [b"Hello, World", b"abc", b"X", b"a-b-c 9 Z!"]
    for group in (texts[:1], texts[1:2], texts):
        ins = tagger_inputs(group)
        ans, tensors = http_binary("tagger", ins)
        for typed in (False, True):
            r = expect_ok(stub.ModelInfer, infer_request("tagger", ins, typed=typed), "tagger")
            same_as_http(r, ans, tensors, "tagger, %d BYTES text%s %s" % (
                len(group), "s" if len(group) > 1 else "", "in bytes_contents" if typed
                else "raw"))
    outs = [("kind", {"classification": 2}), ("tags", {})]
    ins = tagger_inputs(texts)
    ans, tensors = http_binary("tagger", ins, outputs=outs)
    r = expect_ok(stub.ModelInfer, infer_request("tagger", ins, outputs=outs), "tagger cls")
    same_as_http(r, ans, tensors, "tagger, classification of positions")


def check_errors():
    x = images(0, 2)
    E = grpc.StatusCode
    cases = [
        ("unknown model", infer_request("no-such-model", [x]), E.NOT_FOUND, "no-such-model"),
        ("unknown version", infer_request("fashion-mlp", [x], version="7"), E.NOT_FOUND, None),
        ("a version that is not a number", infer_request("fashion-mlp", [x], version="x"),
         E.INVALID_ARGUMENT, None),
        ("unknown input name", infer_request("fashion-mlp", [("pixels",) + x[1:]]),
         E.INVALID_ARGUMENT, "pixels"),
        ("wrong shape", infer_request("fashion-mlp", [("input", "FP32", [2, 1, 28, 27],
                                                       x[3][:2 * 756 * 4])]),
         E.INVALID_ARGUMENT, "shape"),
        ("raw bytes that do not fit the shape",
         infer_request("fashion-mlp", [("input", "FP32", [3, 1, 28, 28], x[3])]),
         E.INVALID_ARGUMENT, None),
        ("an unknown datatype", infer_request("fashion-mlp", [("input", "FP16", x[2], x[3])]),
         E.INVALID_ARGUMENT, None),
        ("unknown output name", infer_request("fashion-mlp", [x], outputs=[("nope", {})]),
         E.INVALID_ARGUMENT, "nope"),
        ("no inputs", pb.ModelInferRequest(model_name="fashion-mlp"), E.INVALID_ARGUMENT, None),
        ("a missing input of two-tower", infer_request("two-tower", two_tower_inputs(2)[:1]),
         E.INVALID_ARGUMENT, "features"),
        ("a text over max_length", infer_request("tagger", tagger_inputs([b"x" * 13])),
         E.INVALID_ARGUMENT, "text"),
        ("classification of 0", infer_request("fashion-mlp", [x], outputs=[
            ("probabilities", {"classification": 0})]), E.INVALID_ARGUMENT, None),
    ]
    q = infer_request("fashion-mlp", [x])
    q.inputs[0].contents.fp32_contents.extend([1.0] * 1568)   # raw and typed both
    cases.append(("raw and typed contents both", q, E.INVALID_ARGUMENT, None))
    q = infer_request("fashion-mlp", [x], typed=True)
    q.inputs[0].contents.fp32_contents.append(0.5)
    cases.append(("typed contents one value too many", q, E.INVALID_ARGUMENT, None))
    q = infer_request("fashion-mlp", [images(0, 2, "UINT8")], typed=True)
    q.inputs[0].datatype = "FP32"
    cases.append(("contents in another field than the datatype's", q, E.INVALID_ARGUMENT, None))
    for what, req, code, words in cases:
        expect_code(stub.ModelInfer, req, code, "ModelInfer, " + what, words)
    raw_infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
    expect_code(raw_infer, b"\xff\xff\xff", E.INVALID_ARGUMENT, "bytes that are not a message")
    expect_code(stub.ModelReady, pb.ModelReadyRequest(name="no-such-model"), E.NOT_FOUND,
                "ModelReady of an unknown model")
    expect_code(stub.ModelMetadata, pb.ModelMetadataRequest(name="no-such-model"), E.NOT_FOUND,
                "ModelMetadata of an unknown model")
    expect_code(stub.ModelMetadata, pb.ModelMetadataRequest(name="fashion-mlp", version="9"),
                E.NOT_FOUND, "ModelMetadata of an unknown version")
    expect_code(stub.ModelConfig, pb.ModelConfigRequest(name="no-such-model"), E.NOT_FOUND,
                "ModelConfig of an unknown model")
    expect_code(stub.ModelStatistics, pb.ModelStatisticsRequest(name="no-such-model"),
                E.NOT_FOUND, "ModelStatistics of an unknown model")
    expect_code(stub.RepositoryModelLoad,
                pb.RepositoryModelLoadRequest(model_name="no-such-model"), E.NOT_FOUND,
                "RepositoryModelLoad of a model the repository lacks")
    # the daemon answers on after all these
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [x]), "ModelInfer after errors")
    expect(len(r.raw_output_contents) == 3, "a good request after the bad ones: answered")


def unary_answers(n, together):
    """The unary answer (raw outputs) to each of images 0..n-1 alone: one
    call after the other, or all at once (a batcher that waits)."""
    reqs = [infer_request("fashion-mlp", [images(i, 1)]) for i in range(n)]
    if not together:
        return [list(expect_ok(stub.ModelInfer, q, "unary").raw_output_contents) for q in reqs]
    futs = [stub.ModelInfer.future(q, timeout=60, metadata=MD) for q in reqs]
    try:
        return [list(f.result().raw_output_contents) for f in futs]
    except grpc.RpcError as e:
        raise Failed("unary: %s %s" % (e.code(), e.details()))


def check_stream(total, queued=False):
    """total requests on one stream, and a few bad ones; queued: the
    batcher holds them (eager off, a long delay) until all are sent."""
    DISTINCT, BAD = 50, 5
    want = unary_answers(DISTINCT, queued)
    ok("%d unary answers to compare with" % DISTINCT)
    reqs = [infer_request("fashion-mlp", [images(i % DISTINCT, 1)], rid="s-%d" % i)
            for i in range(total)]
    bad_at = {total * (k + 1) // (BAD + 1): "bad-%d" % k for k in range(BAD)}
    for at, rid in bad_at.items():
        reqs.insert(at, infer_request("no-such-model", [images(0, 1)], rid=rid))
    sent = [0]

    def gen():
        for q in reqs:
            sent[0] += 1
            yield q

    t0 = time.time()
    got, errors, first = {}, {}, None
    for m in stub.ModelStreamInfer(gen(), timeout=120, metadata=MD):
        rid = m.infer_response.id
        if first is None and not m.error_message:
            first = sent[0]
        if m.error_message:
            errors.setdefault(rid, []).append(m.error_message)
        else:
            got.setdefault(rid, []).append(list(m.infer_response.raw_output_contents))
    dt = time.time() - t0
    ok("%d requests on one stream answered in %.2f s; %s sent before the first answer" % (
        len(reqs), dt, first))
    if queued:
        expect(first == len(reqs), "all %d requests in flight at once: sent before the "
               "first answer" % len(reqs), first)
    dup = [k for k, v in list(got.items()) + list(errors.items()) if len(v) != 1]
    expect(not dup, "each request answered exactly once", dup[:5])
    ids = ["s-%d" % i for i in range(total)]
    missing = [i for i in ids if i not in got]
    expect(not missing and len(got) == total, "every one of the %d answered, with its id" % total,
           (len(got), missing[:5]))
    expect(sorted(errors) == sorted(bad_at.values()) and
           all("no-such-model" in e[0] for e in errors.values()),
           "the %d bad requests answered with an error_message, with their ids" % BAD, errors)
    wrong = [i for i in range(total) if got["s-%d" % i][0] != want[i % DISTINCT]]
    expect(not wrong, "every answer equals its image's unary answer, bit for bit", wrong[:5])
    order = [k for k in got]   # the order answers came in
    ok("answers came %s" % ("in request order" if order == ids else "out of request order"))
    # a stream the client ends without requests
    answers = list(stub.ModelStreamInfer(iter([]), timeout=30, metadata=MD))
    expect(answers == [], "a stream closed without requests ends with no answer")


VICTIM = r"""
import os, sys, time, threading
sys.path.insert(0, sys.argv[1])
import grpc, grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc
how, target, token = sys.argv[2], sys.argv[3], sys.argv[4]
ch = grpc.insecure_channel(target)
stub = pb_grpc.GRPCInferenceServiceStub(ch)
x = bytes(range(256)) * 3 + bytes(16)
def gen():
    for i in range(100000):
        q = pb.ModelInferRequest(model_name="fashion-mlp", id="v-%d" % i)
        q.inputs.add(name="input", datatype="UINT8", shape=[1, 1, 28, 28])
        q.raw_input_contents.append(x)
        yield q
md = [("authorization", "Bearer " + token)] if token else None
it = stub.ModelStreamInfer(gen(), metadata=md)
if how == "exit":            # many requests out, none read: gone at once
    threading.Timer(1.0, lambda: os._exit(0)).start()
    time.sleep(10)
n = 0
for m in it:
    n += 1
    if n == 200:
        print("streaming", flush=True)   # the parent kills it now
"""


def grpc_status():
    return http_json("/status")["grpc"]


def check_killed():
    for how in ("kill", "exit"):
        proc = subprocess.Popen([sys.executable, "-c", VICTIM, STUBS, how, A.target, A.token],
                                stdout=subprocess.PIPE, text=True)
        if how == "kill":
            line = proc.stdout.readline()
            if line.strip() != "streaming":
                proc.kill()
                raise Failed("the client never streamed: %r" % line)
            s = grpc_status()
            expect(s["streams_open"] >= 1, "a stream open while the client streams",
                   s["streams_open"])
            proc.send_signal(signal.SIGKILL)
        rc = proc.wait(30)
        ok("a client %s mid-stream (exit %d)" % ("SIGKILLed" if how == "kill" else
                                                 "exited with requests unanswered", rc))
        r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [images(0, 2)]),
                      "ModelInfer after the client went")
        expect(len(r.raw_output_contents) == 3, "the daemon answers another ModelInfer")
        deadline = time.time() + 10
        s = grpc_status()
        while (s["streams_open"] or s["calls_in_flight"]) and time.time() < deadline:
            time.sleep(0.1)
            s = grpc_status()
        expect(s["streams_open"] == 0 and s["calls_in_flight"] == 0,
               "/status: no stream open and no call in flight within 10 s", s)
    m = metrics()
    expect(metric(m, "dlserve_grpc_streams_open") == 0, "dlserve_grpc_streams_open 0")
    expect(metric(m, "dlserve_grpc_requests_total", method="ModelStreamInfer",
                  code="CANCELLED") >= 2,
           "the two streams counted as CANCELLED",
           [l for l in m.splitlines() if "ModelStreamInfer" in l])
    # a stream works after them
    q = [infer_request("fashion-mlp", [images(i, 1)], rid="after-%d" % i) for i in range(20)]
    got = {m.infer_response.id for m in stub.ModelStreamInfer(iter(q), timeout=60, metadata=MD)}
    expect(got == {"after-%d" % i for i in range(20)}, "a new stream is answered in full")


def model_stats(name):
    r = expect_ok(stub.ModelStatistics, pb.ModelStatisticsRequest(name=name), "ModelStatistics")
    expect(len(r.model_stats) == 1 and r.model_stats[0].name == name,
           "ModelStatistics %s: one entry" % name, [s.name for s in r.model_stats])
    return r.model_stats[0]


def check_stats():
    before = model_stats("fashion-mlp")
    n = 0
    for i in range(5):
        expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [images(i, i + 1)]), "infer")
        n += i + 1
    expect_code(stub.ModelInfer, infer_request("fashion-mlp", [("input", "FP32", [1, 2],
                                                                b"\0" * 8)]),
                grpc.StatusCode.INVALID_ARGUMENT, "a bad request")
    after = model_stats("fashion-mlp")
    expect(after.inference_count - before.inference_count == n,
           "inference_count grew by the %d samples of 5 gRPC requests" % n,
           (before.inference_count, after.inference_count))
    s0, s1 = before.inference_stats, after.inference_stats
    expect(s1.success.count - s0.success.count == 5 and s1.fail.count - s0.fail.count == 1,
           "5 successes and the bad request as a failure",
           (s0.success.count, s1.success.count, s0.fail.count, s1.fail.count))
    expect(s1.success.ns > s0.success.ns and after.last_inference >= before.last_inference > 0,
           "their durations and the last inference's time")
    h = http_json("/v2/models/fashion-mlp/stats")["model_stats"][0]
    expect(h["inference_count"] == after.inference_count and
           h["inference_stats"]["success"]["count"] == s1.success.count and
           h["version"] == after.version,
           "as HTTP's statistics", (h["inference_count"], after.inference_count))
    r = expect_ok(stub.ModelStatistics, pb.ModelStatisticsRequest(), "ModelStatistics all")
    names = sorted(s.name for s in r.model_stats)
    expect({"fashion-mlp", "tagger", "two-tower"} <= set(names), "every model's statistics",
           names)


def check_cache():
    """fashion-mlp with "cache": true, the images 900..902 new to it."""
    x = [images(900, 3)]
    s0 = model_stats("fashion-mlp").inference_stats
    r1 = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", x), "infer")
    r2 = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", x, typed=True), "again, typed")
    expect(r2.raw_output_contents == r1.raw_output_contents,
           "the same inputs again: the same bits")
    s1 = model_stats("fashion-mlp").inference_stats
    expect((s1.cache_miss.count - s0.cache_miss.count, s1.cache_hit.count - s0.cache_hit.count)
           == (1, 1), "a miss, then a hit", (s0, s1))
    expect(s1.cache_hit.ns > s0.cache_hit.ns and s1.cache_miss.ns > s0.cache_miss.ns,
           "their durations")
    ans, tensors = http_binary("fashion-mlp", x)
    same_as_http(r1, ans, tensors, "HTTP's answer from the cache gRPC filled")
    s2 = model_stats("fashion-mlp").inference_stats
    expect(s2.cache_hit.count - s1.cache_hit.count == 1, "HTTP's request was a hit")


def index():
    r = expect_ok(stub.RepositoryIndex, pb.RepositoryIndexRequest(), "RepositoryIndex")
    return {m.name: m for m in r.models}


def check_repository():
    ix = index()
    h = {m["name"]: m for m in http_json("/v2/repository/index", "POST", b"{}")}
    expect(ix["fashion-mlp"].state == "READY" and ix["fashion-mlp"].version == "1",
           "RepositoryIndex: fashion-mlp version 1 READY", ix["fashion-mlp"])
    expect(sorted(ix) == sorted(h) and
           all(ix[k].state == h[k]["state"] for k in ix), "RepositoryIndex as HTTP's",
           (sorted(ix), sorted(h)))
    x = [images(0, 2)]
    want = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", x), "infer").raw_output_contents
    expect_ok(stub.RepositoryModelUnload, pb.RepositoryModelUnloadRequest(model_name="fashion-mlp"),
              "RepositoryModelUnload")
    ok("RepositoryModelUnload fashion-mlp")
    r, e = call(stub.ModelReady, pb.ModelReadyRequest(name="fashion-mlp"))
    expect((e is None and not r.ready) or (e is not None and e.code() == grpc.StatusCode.NOT_FOUND),
           "ModelReady after unload: false or NOT_FOUND",
           e.code() if e is not None else r)
    _, e = call(stub.ModelInfer, infer_request("fashion-mlp", x))
    expect(e is not None and e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND),
           "ModelInfer of the unloaded model: UNAVAILABLE or NOT_FOUND",
           e.code() if e is not None else "answered")
    ix = index()
    expect(ix["fashion-mlp"].state != "READY", "the index: not READY", ix["fashion-mlp"])
    r = expect_ok(stub.RepositoryIndex, pb.RepositoryIndexRequest(ready=True), "index ready")
    expect("fashion-mlp" not in [m.name for m in r.models] and
           "tagger" in [m.name for m in r.models], "RepositoryIndex ready=true leaves it out")
    expect_ok(stub.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name="fashion-mlp"),
              "RepositoryModelLoad")
    ok("RepositoryModelLoad fashion-mlp")
    r = expect_ok(stub.ModelReady, pb.ModelReadyRequest(name="fashion-mlp"), "ModelReady")
    expect(r.ready, "ModelReady after load: ready")
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", x), "infer after load")
    expect(r.raw_output_contents == want, "the reloaded model answers as before")
    expect(index()["fashion-mlp"].state == "READY", "the index: READY again")


CODES = [c.name for c in grpc.StatusCode]


def check_status(port):
    s = grpc_status()
    expect(s["port"] == int(port) and s["tls"] is False and s["auth"] is bool(A.token),
           "/status grpc: port %s, no TLS, auth %s" % (port, bool(A.token)), s)
    expect(s["calls_in_flight"] == 0 and s["streams_open"] == 0,
           "/status grpc: nothing in flight", s)
    expect(s["requests"].get("ModelInfer", 0) > 0 and "ModelStreamInfer" in s["requests"],
           "/status grpc: requests per method", s["requests"])
    m = metrics()
    expect(metric(m, "dlserve_grpc_requests_total", method="ModelInfer", code="OK") > 0,
           "/metrics: dlserve_grpc_requests_total{method=\"ModelInfer\",code=\"OK\"}")
    expect(metric(m, "dlserve_grpc_requests_total", method="ModelInfer", code="NOT_FOUND") > 0
           and metric(m, "dlserve_grpc_requests_total", method="ModelInfer",
                      code="INVALID_ARGUMENT") > 0,
           "/metrics: NOT_FOUND and INVALID_ARGUMENT ModelInfer calls counted")
    expect(metric(m, "dlserve_grpc_requests_total", method="unknown", code="UNIMPLEMENTED") > 0,
           "/metrics: unknown methods counted as UNIMPLEMENTED")
    expect("# TYPE dlserve_grpc_calls_in_flight gauge" in m and
           "# TYPE dlserve_grpc_streams_open gauge" in m and
           metric(m, "dlserve_grpc_calls_in_flight") == 0,
           "/metrics: the calls_in_flight and streams_open gauges")
    for method, n in s["requests"].items():
        total = sum(metric(m, "dlserve_grpc_requests_total", method=method, code=c)
                    for c in CODES)
        if total != n:
            raise Failed("/metrics counts %d %s calls, /status %d" % (total, method, n))
    ok("/metrics and /status agree on every method's calls")


def check_auth():
    E = grpc.StatusCode
    bad = [("authorization", "Bearer wrong-" + A.token)]
    x = images(0, 1)
    calls = [("ServerMetadata", stub.ServerMetadata, pb.ServerMetadataRequest()),
             ("ModelMetadata", stub.ModelMetadata, pb.ModelMetadataRequest(name="fashion-mlp")),
             ("ModelReady", stub.ModelReady, pb.ModelReadyRequest(name="fashion-mlp")),
             ("ModelInfer", stub.ModelInfer, infer_request("fashion-mlp", [x])),
             ("ModelConfig", stub.ModelConfig, pb.ModelConfigRequest(name="fashion-mlp")),
             ("ModelStatistics", stub.ModelStatistics, pb.ModelStatisticsRequest()),
             ("RepositoryIndex", stub.RepositoryIndex, pb.RepositoryIndexRequest()),
             ("RepositoryModelUnload", stub.RepositoryModelUnload,
              pb.RepositoryModelUnloadRequest(model_name="fashion-mlp"))]
    for name, m, req in calls:
        expect_code(m, req, E.UNAUTHENTICATED, name + " without a token", metadata=None)
        expect_code(m, req, E.UNAUTHENTICATED, name + " with a wrong token", metadata=bad)
    expect_code(stub.ModelInfer, infer_request("fashion-mlp", [x]), E.UNAUTHENTICATED,
                "ModelInfer with the token not as a bearer",
                metadata=[("authorization", A.token)])
    try:
        list(stub.ModelStreamInfer(iter([infer_request("fashion-mlp", [x])]), timeout=30))
        raise Failed("ModelStreamInfer without a token: answered")
    except grpc.RpcError as e:
        expect(e.code() == E.UNAUTHENTICATED, "ModelStreamInfer without a token: UNAUTHENTICATED",
               e.code())
    expect(expect_ok(stub.ServerLive, pb.ServerLiveRequest(), "live", metadata=None).live,
           "ServerLive without a token: answered")
    expect(expect_ok(stub.ServerReady, pb.ServerReadyRequest(), "ready", metadata=None).ready,
           "ServerReady without a token: answered")
    r = expect_ok(health.Check, health_pb2.HealthCheckRequest(), "health", metadata=None)
    expect(r.status == SERVING, "Health/Check without a token: SERVING")
    r = expect_ok(stub.ModelMetadata, pb.ModelMetadataRequest(name="fashion-mlp"), "metadata")
    expect(r.name == "fashion-mlp", "ModelMetadata with the token: answered")
    r = expect_ok(stub.ModelReady, pb.ModelReadyRequest(name="fashion-mlp"), "ready")
    expect(r.ready, "fashion-mlp still loaded (the refused unload did nothing)")
    st, _, _ = hreq("GET", "/v2/models/fashion-mlp")
    expect(st == 200, "HTTP with the same token: 200")
    m = metrics()
    expect(metric(m, "dlserve_grpc_requests_total", method="ModelInfer",
                  code="UNAUTHENTICATED") == 3,
           "/metrics: the 3 refused ModelInfer calls as UNAUTHENTICATED")


def check_oversize(limit):
    limit = int(limit)
    small = images(0, 1, "UINT8")            # 784 bytes
    big = images(0, 3)                        # 9408 bytes of FP32
    assert infer_request("fashion-mlp", [small]).ByteSize() < limit < \
        infer_request("fashion-mlp", [big]).ByteSize()
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [small], params={
        "timeout": 60000000}), "small", timeout=60)
    expect(len(r.raw_output_contents) == 3, "a message under grpc.max_message_bytes: answered")
    expect_code(stub.ModelInfer, infer_request("fashion-mlp", [big]),
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "a message of %d bytes over grpc.max_message_bytes %d" % (
                    infer_request("fashion-mlp", [big]).ByteSize(), limit))
    r = expect_ok(stub.ServerLive, pb.ServerLiveRequest(), "live after")
    expect(r.live, "the daemon serves on")


def check_deadline():
    """The batcher waits seconds for a batch (eager off): a request whose
    deadline passes while it waits is DEADLINE_EXCEEDED, counted as a
    timeout by /metrics and as a failure by the statistics."""
    m0 = metrics()
    t0 = metric(m0, "dlserve_request_timeouts_total", model="fashion-mlp", version="1")
    f0 = model_stats("fashion-mlp").inference_stats.fail.count
    start = time.time()
    expect_code(stub.ModelInfer, infer_request("fashion-mlp", [images(0, 1, "UINT8")]),
                grpc.StatusCode.DEADLINE_EXCEEDED, "a request of deadline 0.3 s that queues",
                timeout=0.3)
    took = time.time() - start
    expect(took < 1.5, "... refused when its deadline passed (%.2f s)" % took)
    # The timeout is counted as the batcher refuses the request, the call
    # once its status is sent: both within the queue delay.
    deadline = time.time() + 10
    while time.time() < deadline:
        m1 = metrics()
        t1 = metric(m1, "dlserve_request_timeouts_total", model="fashion-mlp", version="1")
        if t1 > t0 and metric(m1, "dlserve_grpc_requests_total", method="ModelInfer",
                              code="DEADLINE_EXCEEDED") >= 1:
            break
        time.sleep(0.1)
    expect(t1 == t0 + 1, "/metrics: dlserve_request_timeouts_total grew by one", (t0, t1))
    f1 = model_stats("fashion-mlp").inference_stats.fail.count
    expect(f1 == f0 + 1, "ModelStatistics: one more failure", (f0, f1))
    expect(metric(m1, "dlserve_grpc_requests_total", method="ModelInfer",
                  code="DEADLINE_EXCEEDED") >= 1,
           "/metrics: a ModelInfer call ended DEADLINE_EXCEEDED")
    # a deadline longer than the wait: answered once the batch runs
    start = time.time()
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [images(0, 1, "UINT8")]),
                  "a patient request", timeout=30)
    expect(len(r.raw_output_contents) == 3,
           "a request of deadline 30 s: answered after the batch delay (%.2f s)" %
           (time.time() - start))


def check_grace():
    """Run after SIGTERM, within http.shutdown_grace_s."""
    r = expect_ok(health.Check, health_pb2.HealthCheckRequest(), "health", metadata=None)
    expect(r.status == NOT_SERVING, "Health/Check during the shutdown grace: NOT_SERVING",
           r.status)
    r = expect_ok(health.Check, health_pb2.HealthCheckRequest(
        service="inference.GRPCInferenceService"), "health", metadata=None)
    expect(r.status == NOT_SERVING, "... for the inference service too", r.status)
    expect(not expect_ok(stub.ServerReady, pb.ServerReadyRequest(), "ready").ready,
           "ServerReady: false")
    expect(expect_ok(stub.ServerLive, pb.ServerLiveRequest(), "live").live, "ServerLive: true")
    r = expect_ok(stub.ModelMetadata, pb.ModelMetadataRequest(name="fashion-mlp"), "metadata")
    expect(r.name == "fashion-mlp", "other calls still answered")


def text_request(model, prompt, rid, **params):
    q = pb.ModelInferRequest(model_name=model, id=rid)
    q.inputs.add(name="text_input", datatype="BYTES", shape=[1]).contents.bytes_contents.append(
        prompt.encode())
    for k, v in params.items():
        set_param(q.parameters[k], v)
    return q


def text_of(r):
    """text_output of a generation's answer, and its final flag."""
    expect([(o.name, o.datatype, list(o.shape)) for o in r.outputs] ==
           [("text_output", "BYTES", [1])], "an answer of text_output BYTES [1]", r.outputs)
    return unpack("BYTES", r.raw_output_contents[0])[0], \
        r.parameters["triton_final_response"].bool_param


def check_generate():
    prompts = {"g-%d" % i: p for i, p in enumerate(["in the ", "light ", "god created "])}
    want = {}
    for rid, prompt in prompts.items():
        h = http_json("/v2/models/lm/generate", "POST", json.dumps(
            {"text_input": prompt, "parameters": {"max_tokens": 24}}).encode())
        r = expect_ok(stub.ModelInfer, text_request("lm", prompt, rid, max_tokens=24),
                      "ModelInfer of a text_input")
        text, final = text_of(r)
        expect(text.decode() == h["text_output"] and final and r.id == rid and
               r.parameters["finish_reason"].string_param == h["finish_reason"],
               "ModelInfer %r: HTTP generate's text and finish reason, final" % prompt,
               (text, h))
        want[rid] = text
    pieces = {}
    qs = [text_request("lm", p, rid, max_tokens=24) for rid, p in prompts.items()]
    qs.append(text_request("lm", "x", "bad", max_tokens=-1))
    for m in stub.ModelStreamInfer(iter(qs), timeout=60, metadata=MD):
        pieces.setdefault(m.infer_response.id, []).append(m)
    bad = pieces.pop("bad", [])
    expect(len(bad) == 1 and "max_tokens" in bad[0].error_message,
           "a stream's bad parameter: one answer with its error", bad)
    for rid, ms in pieces.items():
        texts = [text_of(m.infer_response) for m in ms]
        expect(all(not f for _, f in texts[:-1]) and texts[-1][1],
               "%s: pieces, then one final answer" % rid, len(texts))
        expect(b"".join(t for t, _ in texts) == want[rid],
               "%s: the pieces make the unary text" % rid)
    expect(set(pieces) == set(prompts), "every generation of the stream answered")
    expect_code(stub.ModelInfer, text_request("lm", "x", "p", warmth=1),
                grpc.StatusCode.INVALID_ARGUMENT, "an unknown parameter", "warmth")
    # a long generation, its client gone: cancelled at a step, nothing left
    proc = subprocess.Popen([sys.executable, "-c", GEN_VICTIM, STUBS, A.target],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    proc.kill()
    proc.wait(30)
    expect(line.strip() == "generating", "a client streams an endless generation", line)
    deadline = time.time() + 10
    while time.time() < deadline:
        s = grpc_status()
        m = metrics()
        if s["streams_open"] == 0 and metric(m, "dlserve_generate_sequences_running", model="endless",
                                             version="1") == 0:
            break
        time.sleep(0.1)
    expect(s["streams_open"] == 0, "its stream closed", s)
    expect(metric(m, "dlserve_generate_sequences_running", model="endless", version="1") == 0,
           "its generation stopped (none running)")
    expect(metric(m, "dlserve_generate_cancelled_total", model="endless", version="1") >= 1,
           "... counted as cancelled")


GEN_VICTIM = r"""
import sys
sys.path.insert(0, sys.argv[1])
import grpc, grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc
stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(sys.argv[2]))
q = pb.ModelInferRequest(model_name="endless", id="e")
q.inputs.add(name="text_input", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"in")
q.parameters["max_tokens"].int64_param = 2000
for i, m in enumerate(stub.ModelStreamInfer(iter([q]))):
    print("generating", flush=True)
    break
import time; time.sleep(30)
"""


def check_tls():
    r = expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [images(0, 2)]),
                  "ModelInfer over TLS")
    ans, tensors = http_binary("fashion-mlp", [images(0, 2)])
    same_as_http(r, ans, tensors, "over TLS")
    plain = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(A.target))
    expect_code(plain.ServerLive, pb.ServerLiveRequest(), grpc.StatusCode.UNAVAILABLE,
                "a plaintext client of the TLS port", timeout=5)


def check_traced(tp):
    md = (MD or []) + [("traceparent", tp)]
    expect_ok(stub.ModelInfer, infer_request("fashion-mlp", [images(0, 1)]),
              "ModelInfer with a traceparent", metadata=md)
    got = list(stub.ModelStreamInfer(iter([infer_request("fashion-mlp", [images(1, 1)],
                                                         rid="traced")]),
                                     timeout=60, metadata=md))
    expect(len(got) == 1 and not got[0].error_message, "a stream's request with it", got)


CHECKS = {"gen": lambda: ok("stubs in %s" % STUBS), "basics": check_basics,
          "infer": check_infer, "multi": check_multi, "errors": check_errors,
          "stream": lambda n="1000", how="": check_stream(int(n), how == "queued"),
          "killed": check_killed,
          "stats": check_stats, "cache": check_cache, "repository": check_repository,
          "status": check_status,
          "auth": check_auth, "oversize": check_oversize, "deadline": check_deadline,
          "grace": check_grace, "generate": check_generate, "tls": check_tls,
          "traced": check_traced}

try:
    CHECKS[A.check](*A.args)
except Failed as e:
    print("  FAIL - %s" % e, flush=True)
    sys.exit(1)
