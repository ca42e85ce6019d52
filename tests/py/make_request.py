#!/usr/bin/env python3
"""make_request.py FIRST COUNT [--datatype FP32|UINT8] [--nested] [--id ID]
Prints an Open Inference Protocol infer request with Fashion-MNIST test
images FIRST..FIRST+COUNT-1 (raw pixel values), batch dimension first.
Shared by the serve, kafka and redis tests, tests/bench/serve_http and
scripts/demo."""
import argparse
import gzip
import json

p = argparse.ArgumentParser()
p.add_argument("first", type=int)
p.add_argument("count", type=int)
p.add_argument("--datatype", default="FP32")
p.add_argument("--nested", action="store_true")
p.add_argument("--id")
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
req = {"inputs": [{"name": "input", "shape": shape, "datatype": a.datatype, "data": data}]}
if a.id is not None:
    req["id"] = a.id
print(json.dumps(req))
