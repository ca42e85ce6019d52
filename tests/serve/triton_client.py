#!/usr/bin/env python3
"""triton_client.py URL

A client of Triton's HTTP extensions, written from their documentation
(Triton's "Classification Extension", "Statistics Extension", "Model
Configuration Extension", the binary tensor data extension and the
inference request parameters "priority" and "sequence_id"), not from
dlserve's code, run against a daemon serving fashion-mlp (with labels),
fashion-idle (a copy that answers nothing before this client asks its
statistics) and fashion-prio (a serving block with priority levels).

Classification: an output asked with "parameters": {"classification": k}
comes back as BYTES of shape [batch, k], each "<value>:<index>[:<label>]",
highest value first, agreeing with the probabilities asked of the same
request; in JSON and as binary data (a 4-byte little-endian length then
the bytes). k < 1, k over the classes and a classification of "class" are
400s that say why. Statistics: GET v2/models/stats lists every model and
version, the idle ones with zero counts. Sequence parameters are 400s
naming the missing sequence batcher; unknown parameters pass. Prints one
line per check ("  ok - ..."), exits 1 on the first failure. Standard
library only.
"""
import gzip
import http.client
import json
import struct
import sys
import urllib.parse

URL = urllib.parse.urlparse(sys.argv[1])
HEADER = "Inference-Header-Content-Length"


def request(method, path, body=None, headers=None):
    c = http.client.HTTPConnection(URL.hostname, URL.port, timeout=60)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    hdrs = dict(r.getheaders())
    c.close()
    return r.status, hdrs, data


def ok(cond, what):
    if not cond:
        print("  FAIL - " + what)
        sys.exit(1)
    print("  ok - " + what)


raw = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:]
images = [[float(v) for v in raw[i * 784:(i + 1) * 784]] for i in range(3)]


def infer(model, outputs, parameters=None, binary=False):
    req = {"inputs": [{"name": in_name, "shape": [3, 1, 28, 28], "datatype": "FP32",
                       "data": [v for img in images for v in img]}],
           "outputs": outputs}
    if parameters:
        req["parameters"] = parameters
    status, hdrs, body = request("POST", "/v2/models/%s/infer" % model, json.dumps(req).encode())
    n = int(hdrs.get(HEADER, len(body)))
    answer = json.loads(body[:n])
    if status != 200:
        return status, answer, {}
    blobs, off = {}, n
    for o in answer["outputs"]:
        size = o.get("parameters", {}).get("binary_data_size")
        if size is not None:
            blobs[o["name"]] = body[off:off + size]
            off += size
    return status, answer, blobs


def bytes_elements(blob):
    out, off = [], 0
    while off < len(blob):
        (n,) = struct.unpack_from("<I", blob, off)
        out.append(blob[off + 4:off + 4 + n].decode())
        off += 4 + n
    return out


meta = json.loads(request("GET", "/v2/models/fashion-mlp")[2])
in_name = meta["inputs"][0]["name"]
out_name = [o["name"] for o in meta["outputs"] if o["datatype"] == "FP32"][0]
server = json.loads(request("GET", "/v2")[2])
ok("classification" in server["extensions"], "the server lists the classification extension")

# ---- classification -------------------------------------------------------
st, probs, _ = infer("fashion-mlp", [{"name": out_name}])
ok(st == 200, "the probabilities of 3 images")
scores = [probs["outputs"][0]["data"][i * 10:(i + 1) * 10] for i in range(3)]
# The classes of this second request are ranked against the first one's
# probabilities: the same images, the same bits only because the daemon
# runs with batch_invariant on (test_triton.sh sets it) and both its
# instances on one thread each. Each value is its float32's shortest text,
# which reads back to that float exactly: 1e-6 is slack only.
st, cls, _ = infer("fashion-mlp", [{"name": out_name, "parameters": {"classification": 3}}])
ok(st == 200, "classification 3 answers 200")
o = cls["outputs"][0]
ok(o["name"] == out_name and o["datatype"] == "BYTES" and o["shape"] == [3, 3],
   "classification: BYTES of shape [batch, 3] (%s %s)" % (o["datatype"], o["shape"]))
labels = None
for i in range(3):
    row = o["data"][i * 3:(i + 1) * 3]
    parts = [e.split(":", 2) for e in row]
    ok(all(len(p) == 3 and p[2] for p in parts), "image %d: value:index:label strings %s" % (i, row))
    top = sorted(range(10), key=lambda j: (-scores[i][j], j))[:3]
    ok([int(p[1]) for p in parts] == top, "image %d: the 3 highest classes, highest first" % i)
    ok(all(abs(float(p[0]) - scores[i][int(p[1])]) < 1e-6 for p in parts),
       "image %d: each value is the class's probability" % i)
st, lab, _ = infer("fashion-mlp", [{"name": "label"}])
ok([e.split(":", 2)[2] for e in o["data"][0::3]] == lab["outputs"][0]["data"],
   "the top class's label is the label output's")

st, bcls, blobs = infer("fashion-mlp", [{"name": out_name, "parameters": {"classification": 2,
                                                                       "binary_data": True}}])
bo = bcls["outputs"][0]
ok(st == 200 and bo["datatype"] == "BYTES" and bo["shape"] == [3, 2] and "data" not in bo,
   "binary classification: BYTES [3, 2] after the JSON")
elems = bytes_elements(blobs[out_name])
ok(elems == [e for i in range(3) for e in o["data"][i * 3:i * 3 + 2]],
   "binary classification: the same strings as JSON")

for params, needle in (({"classification": 11}, "top 11 classes, but model 'fashion-mlp' has 10"),
                       ({"classification": 0}, "classification must be"),
                       ({"classification": -1}, "classification must be")):
    st, err, _ = infer("fashion-mlp", [{"name": out_name, "parameters": params}])
    ok(st == 400 and needle in err.get("error", ""), "%s: 400 (%s)" % (params, err))
st, err, _ = infer("fashion-mlp", [{"name": "class", "parameters": {"classification": 1}}])
ok(st == 400 and "not a tensor of class scores" in err["error"],
   "classification of 'class': 400 (%s)" % err)

# ---- request parameters ---------------------------------------------------
for key, value in (("sequence_id", 7), ("sequence_start", True), ("sequence_end", True)):
    st, err, _ = infer("fashion-mlp", [], {key: value})
    ok(st == 400 and err["error"] ==
       "model 'fashion-mlp' has no sequence batching: %s is not supported" % key,
       "%s: 400 (%s)" % (key, err))
st, _, _ = infer("fashion-mlp", [], {"my_own_tag": "x", "priority": 1})
ok(st == 200, "priority and unknown parameters pass")

# ---- statistics of every model ---------------------------------------------
status, _, body = request("GET", "/v2/models/stats")
ok(status == 200, "GET /v2/models/stats: 200")
stats = {(m["name"], m["version"]): m for m in json.loads(body)["model_stats"]}
ok({("fashion-mlp", "1"), ("fashion-idle", "1"), ("fashion-prio", "1")} <= set(stats),
   "every model and version listed: %s" % sorted(stats))
idle = stats[("fashion-idle", "1")]
ok(idle["inference_count"] == 0 and idle["execution_count"] == 0 and
   idle["inference_stats"]["success"] == {"count": 0, "ns": 0} and idle["batch_stats"] == [],
   "the idle model: zero counts")
ok(stats[("fashion-mlp", "1")]["inference_count"] >= 15, "the busy model: its inferences")
status, _, body = request("GET", "/v2/models/fashion-idle/stats")
ok(status == 200 and [m["version"] for m in json.loads(body)["model_stats"]] == ["1"],
   "the idle model's own statistics: version 1, zero counts")
