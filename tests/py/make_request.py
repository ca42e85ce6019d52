#!/usr/bin/env python3
"""make_request.py FIRST COUNT [--datatype FP32|UINT8] [--nested] [--id ID]
                  [--binary [--json-length FILE]] [--binary-output]
Prints an Open Inference Protocol infer request with Fashion-MNIST test
images FIRST..FIRST+COUNT-1 (raw pixel values), batch dimension first.
Shared by the serve, kafka and redis tests, tests/bench/serve_http and
scripts/demo.

--binary writes the request in the binary tensor data extension instead:
the JSON header (the input with "parameters": {"binary_data_size": N}
instead of "data") directly followed by the N bytes of the tensor, raw
little-endian (float32 for FP32, one byte a pixel for UINT8); send it with
the header Inference-Header-Content-Length: the JSON header's length,
which --json-length FILE writes to FILE. --binary-output asks for a
binary answer (request parameter "binary_data_output": true)."""
import argparse
import gzip
import json
import struct
import sys

p = argparse.ArgumentParser()
p.add_argument("first", type=int)
p.add_argument("count", type=int)
p.add_argument("--datatype", default="FP32")
p.add_argument("--nested", action="store_true")
p.add_argument("--id")
p.add_argument("--binary", action="store_true")
p.add_argument("--json-length", metavar="FILE")
p.add_argument("--binary-output", action="store_true")
p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
a = p.parse_args()
raw = gzip.open(a.data + "/t10k-images-idx3-ubyte.gz").read()[16:]
imgs = [list(raw[(a.first + i) * 784:(a.first + i + 1) * 784]) for i in range(a.count)]
if a.datatype == "FP32":
    imgs = [[float(v) for v in img] for img in imgs]
if a.nested:
    data = [[[img[r * 28:(r + 1) * 28] for r in range(28)]] for img in imgs]
    shape = [a.count, 1, 28, 28]
else:
    data = [v for img in imgs for v in img]
    shape = [a.count, 784]
inp = {"name": "input", "shape": shape, "datatype": a.datatype}
tensor = b""
if a.binary:
    flat = [v for img in imgs for v in img]
    tensor = struct.pack("<%df" % len(flat), *flat) if a.datatype == "FP32" else bytes(flat)
    inp["parameters"] = {"binary_data_size": len(tensor)}
else:
    inp["data"] = data
req = {"inputs": [inp]}
if a.id is not None:
    req["id"] = a.id
if a.binary_output:
    req["parameters"] = {"binary_data_output": True}
if a.binary:
    head = json.dumps(req).encode()
    sys.stdout.buffer.write(head + tensor)
    if a.json_length:
        with open(a.json_length, "w") as f:
            print(len(head), file=f)
else:
    print(json.dumps(req))
