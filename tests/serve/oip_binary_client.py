#!/usr/bin/env python3
"""oip_binary_client.py URL [--model M] [--data DIR]

An Open Inference Protocol client for the binary tensor data extension,
written from its documentation (Triton's "Binary Tensor Data Extension",
KServe's "Binary Tensor Data Extension"), not from dlserve's code: the
body is a JSON header of Inference-Header-Content-Length bytes followed by
raw little-endian tensors in input (or output) order; an input carries
"parameters": {"binary_data_size": bytes} instead of "data"; an output is
binary when it asks "parameters": {"binary_data": true} or the request asks
"parameters": {"binary_data_output": true} (an output's own binary_data
wins); BYTES elements are a 4-byte little-endian length and the bytes.

Sends the same Fashion-MNIST images as JSON and as binary (binary in and
JSON out, JSON in and binary out, binary both ways, per output and for
all), decodes the binary answers itself and checks that they equal the
JSON answer: scores bit for bit as float32, classes and labels exactly.
Then the refusals: sizes that do not add up, a bad header, unknown input
and output names: 400 with the name in the message. Prints one line per
check ("  ok - ..."), exits 1 on the first failure. Standard library only.
"""
import argparse
import gzip
import http.client
import json
import struct
import sys
import urllib.parse

p = argparse.ArgumentParser()
p.add_argument("url")
p.add_argument("--model", default="fashion-mlp")
p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
args = p.parse_args()
url = urllib.parse.urlparse(args.url)
PATH = "/v2/models/%s/infer" % args.model
HEADER = "Inference-Header-Content-Length"
COUNT = 3   # images per request

raw = gzip.open(args.data + "/t10k-images-idx3-ubyte.gz").read()[16:]
IMAGES = [list(raw[i * 784:(i + 1) * 784]) for i in range(COUNT)]
PIXELS = [v for img in IMAGES for v in img]


def fail(what, detail):
    print("  FAIL - %s: %s" % (what, detail))
    sys.exit(1)


def ok(what):
    print("  ok - %s" % what)


def post(body, headers):
    """POSTs body to the infer path; (status, lower-cased headers, body)."""
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        conn.request("POST", PATH, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def make_request(datatype="FP32", binary_in=False, outputs=None, params=None, name="input"):
    """(body, json_len or None): the request for IMAGES, its input as JSON
    "data" or as binary data after the JSON."""
    inp = {"name": name, "shape": [COUNT, 784], "datatype": datatype}
    tensor = b""
    if binary_in:
        if datatype == "FP32":
            tensor = struct.pack("<%df" % len(PIXELS), *PIXELS)
        else:
            tensor = bytes(PIXELS)
        inp["parameters"] = {"binary_data_size": len(tensor)}
    else:
        inp["data"] = [float(v) for v in PIXELS] if datatype == "FP32" else PIXELS
    req = {"id": "binary-client", "inputs": [inp]}
    if outputs is not None:
        req["outputs"] = outputs
    if params is not None:
        req["parameters"] = params
    head = json.dumps(req).encode()
    return head + tensor, len(head) if binary_in else None


def send(body, json_len=None, header_value=None):
    headers = {"Content-Type": "application/json"}
    if json_len is not None or header_value is not None:
        headers["Content-Type"] = "application/octet-stream"
        headers[HEADER] = header_value if header_value is not None else str(json_len)
    return post(body, headers)


def elements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def decode(what, status, headers, body):
    """The answer's outputs in answer order: [(name, datatype, shape,
    values, binary)], binary outputs decoded from the bytes after the JSON."""
    if status != 200:
        fail(what, "status %d: %r" % (status, body[:300]))
    ctype = headers.get("content-type", "")
    if HEADER.lower() in headers:
        n = int(headers[HEADER.lower()])
        if ctype != "application/octet-stream":
            fail(what, "a binary answer with Content-Type %r" % ctype)
        doc, rest = json.loads(body[:n]), body[n:]
    else:
        if not ctype.startswith("application/json"):
            fail(what, "a JSON answer with Content-Type %r" % ctype)
        doc, rest = json.loads(body), b""
    if doc.get("id") != "binary-client" or doc.get("model_name") != args.model:
        fail(what, "id or model_name not echoed: %r" % {k: doc.get(k) for k in ("id", "model_name")})
    outs, pos = [], 0
    for o in doc["outputs"]:
        count, dt = elements(o["shape"]), o["datatype"]
        size = o.get("parameters", {}).get("binary_data_size")
        if size is None:
            outs.append((o["name"], dt, o["shape"], o["data"], False))
            continue
        if "data" in o:
            fail(what, "output %s has both data and binary_data_size" % o["name"])
        chunk = rest[pos:pos + size]
        pos += size
        if len(chunk) != size:
            fail(what, "output %s: %d bytes announced, %d there" % (o["name"], size, len(chunk)))
        if dt == "FP32":
            values = list(struct.unpack("<%df" % count, chunk))
        elif dt == "INT64":
            values = list(struct.unpack("<%dq" % count, chunk))
        elif dt == "BYTES":
            values, k = [], 0
            for _ in range(count):
                (n,) = struct.unpack_from("<I", chunk, k)
                values.append(chunk[k + 4:k + 4 + n].decode())
                k += 4 + n
            if k != size:
                fail(what, "BYTES output %s: %d bytes left over" % (o["name"], size - k))
        else:
            fail(what, "unexpected datatype %s" % dt)
        outs.append((o["name"], dt, o["shape"], values, True))
    if pos != len(rest):
        fail(what, "%d bytes after the last binary output" % (len(rest) - pos))
    return outs


def canonical(dt, values):
    """Values comparable bit for bit: FP32 as their float32 bytes."""
    if dt == "FP32":
        return [struct.pack("<f", v) for v in values]
    return list(values)


def same(what, got, want, binary):
    """got equals the JSON answer want, output by output; binary: the
    names of the outputs that must have come as binary data."""
    if [o[0] for o in got] != [o[0] for o in want]:
        fail(what, "outputs %s, expected %s" % ([o[0] for o in got], [o[0] for o in want]))
    for (name, dt, shape, values, is_bin), (_, wdt, wshape, wvalues, _) in zip(got, want):
        if (dt, shape) != (wdt, wshape):
            fail(what, "%s is %s%s, expected %s%s" % (name, dt, shape, wdt, wshape))
        if is_bin != (name in binary):
            fail(what, "%s came %s" % (name, "binary" if is_bin else "as JSON"))
        if canonical(dt, values) != canonical(wdt, wvalues):
            fail(what, "%s differs from the JSON answer" % name)
    ok(what)


def refused(what, body, json_len=None, header_value=None, needle=""):
    status, headers, answer = send(body, json_len, header_value)
    if status != 400:
        fail(what, "status %d, expected 400: %r" % (status, answer[:300]))
    if not headers.get("content-type", "").startswith("application/json"):
        fail(what, "an error as %r" % headers.get("content-type"))
    message = json.loads(answer)["error"]
    if needle not in message:
        fail(what, "message %r does not say %r" % (message, needle))
    ok(what + " (400: %s)" % message)


# ---- the same images, every way ------------------------------------------------

base = decode("JSON in, JSON out", *send(*make_request()))
names = [o[0] for o in base]
if names != ["probabilities", "label", "class"] or any(o[4] for o in base):
    fail("JSON in, JSON out", "outputs %s" % names)
if base[0][2] != [COUNT, 10] or len(base[0][3]) != COUNT * 10:
    fail("JSON in, JSON out", "probabilities shape %s" % base[0][2])
ok("JSON in, JSON out: %s" % names)

same("binary FP32 in, JSON out", decode("binary FP32 in", *send(*make_request(binary_in=True))),
     base, set())
same("binary UINT8 in, JSON out",
     decode("binary UINT8 in", *send(*make_request("UINT8", binary_in=True))), base, set())
same("JSON in, binary out (binary_data_output)",
     decode("binary out", *send(*make_request(params={"binary_data_output": True}))),
     base, set(names))
same("binary in, binary out (binary_data_output)",
     decode("binary both", *send(*make_request(binary_in=True,
                                                params={"binary_data_output": True}))),
     base, set(names))

by_name = {o[0]: o for o in base}
asked = [{"name": "class", "parameters": {"binary_data": True}}, {"name": "probabilities"},
         {"name": "label", "parameters": {"binary_data": True}}]
same("binary in, binary_data per output, in the order asked",
     decode("per output", *send(*make_request(binary_in=True, outputs=asked))),
     [by_name["class"], by_name["probabilities"], by_name["label"]], {"class", "label"})
asked = [{"name": "probabilities", "parameters": {"binary_data": False}}, {"name": "class"}]
same("binary_data false wins over binary_data_output",
     decode("override", *send(*make_request("UINT8", binary_in=True, outputs=asked,
                                            params={"binary_data_output": True}))),
     [by_name["probabilities"], by_name["class"]], {"class"})
same("a subset of outputs", decode("subset", *send(*make_request(outputs=[{"name": "label"}]))),
     [by_name["label"]], set())
body, _ = make_request()
same("JSON with a header as long as the body",
     decode("header = body", *send(body, json_len=len(body))), base, set())

# ---- refusals --------------------------------------------------------------------

body, jl = make_request(binary_in=True)
refused("a header longer than the body", body, header_value=str(len(body) + 1), needle=HEADER)
refused("a header that is not a number", body, header_value="12ab", needle=HEADER)
refused("a negative header", body, header_value="-4", needle=HEADER)
refused("binary data cut short", body[:-4], jl, needle="binary_data_size")
refused("bytes left over after the binary data", body + b"\0\0\0\0", jl, needle=HEADER)
head = json.loads(body[:jl])
head["inputs"][0]["parameters"]["binary_data_size"] -= 4
h = json.dumps(head).encode()
refused("binary_data_size not the shape's size", h + body[jl:-4], len(h), needle="binary_data_size")
head["inputs"][0]["data"] = [0] * (COUNT * 784)
h = json.dumps(head).encode()
refused("both data and binary_data_size", h + body[jl:-4], len(h), needle="binary_data_size")
body, _ = make_request(name="pixels")
refused("an input name the model does not have", body, needle="'pixels'")
body, jl = make_request(binary_in=True, name="pixels")
refused("an unknown input name, binary", body, jl, needle="'pixels'")
body, _ = make_request(outputs=[{"name": "class"}, {"name": "logits"}])
refused("an output name the model does not have", body, needle="'logits'")
body, _ = make_request(outputs=[{"name": "label", "parameters": {"binary_data": "yes"}}])
refused("binary_data not a bool", body, needle="binary_data")
