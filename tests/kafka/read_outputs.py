#!/usr/bin/env python3
"""read_outputs.py DLSERVE OIP_JSON OIP_BINARY COUNT: reads one output topic
per [kafka] output_format (as `kafka_tool collect --out` wrote them: key,
partition, offset, timestamp, headers, value, tab-separated, escaped) and
checks that each form answers the same records alike: a classifier's
probabilities, label and class, or every output of a model of several
outputs (the dlserve form's "output"/"values" and its "outputs" object).

The OIP forms are read as the Open Inference Protocol describes an
InferenceResponse (model_name, model_version, id, parameters, outputs with
name, datatype, shape and data), and the binary one as its binary tensor
data extension does: the JSON is the first Inference-Header-Content-Length
bytes, each output with parameters.binary_data_size takes that many bytes
after it in output order (FP32 and INT64 little-endian, BYTES each a 4-byte
little-endian length then the bytes). Standard library only.

Values are compared bit for bit (as float32) across the daemons, each of
which batched the records its own way: the callers run them with
[batching] batch_invariant on and one configuration (thread count, CPU
engines), without which a value may move in its last bits."""
import json
import struct
import sys


def unescape(text):
    """The bytes that kafka_tool's escaping (\\\\ \\t \\r \\n \\xHH) stands for."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += c.encode()
            i += 1
        elif text[i + 1] == "x":
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        else:
            out += {"\\": b"\\", "t": b"\t", "r": b"\r", "n": b"\n"}[text[i + 1]]
            i += 2
    return bytes(out)


def records(path):
    """{key: (headers, value bytes)} of a collect file."""
    got = {}
    for line in open(path, encoding="ascii"):
        key, _part, _off, _ts, hdrs, value = line.rstrip("\n").split("\t", 5)
        h = {}
        for kv in filter(None, hdrs.split(";")):
            name, val = kv.split("=", 1)
            h[unescape(name).decode().lower()] = unescape(val).decode()
        got[key] = (h, unescape(value))
    return got


def binary_outputs(value, json_len):
    """An InferenceResponse whose binary outputs get their "data" back."""
    resp = json.loads(value[:json_len])
    pos = json_len
    for o in resp["outputs"]:
        size = o.get("parameters", {}).get("binary_data_size")
        if size is None:
            continue
        raw = value[pos:pos + size]
        pos += size
        if o["datatype"] == "FP32":
            o["data"] = list(struct.unpack("<%df" % (size // 4), raw))
        elif o["datatype"] == "INT64":
            o["data"] = list(struct.unpack("<%dq" % (size // 8), raw))
        else:   # BYTES
            data, j = [], 0
            while j < size:
                (n,) = struct.unpack_from("<I", raw, j)
                data.append(raw[j + 4:j + 4 + n].decode())
                j += 4 + n
            o["data"] = data
    assert pos == len(value), ("bytes left after the outputs", pos, len(value))
    return resp


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def check(key, plain, resp, form):
    """resp (an InferenceResponse) answers as the dlserve form plain does."""
    assert resp["id"] == plain["id"] == key, (form, key, resp["id"], plain["id"])
    assert resp["model_name"] == plain["model"], (form, key)
    assert resp["model_version"] == str(plain["version"]), (form, key)
    src = plain["source"]
    assert resp["parameters"] == {"source_topic": src["topic"],
                                  "source_partition": src["partition"],
                                  "source_offset": src["offset"]}, (form, key, resp)
    outs = {o["name"]: o for o in resp["outputs"]}
    if "scores" not in plain:   # a model of one output or more, none a classifier
        check_values(key, plain, resp, form)
        return
    # the classifier's output under its own name ("probabilities" for the
    # shipped models), then label and class
    assert [o["name"] for o in resp["outputs"]][1:] == ["label", "class"], (form, key)
    probs = resp["outputs"][0]
    assert probs["datatype"] == "FP32" and probs["shape"] == [1, len(plain["scores"])], \
        (form, key, probs["shape"])
    assert [f32(v) for v in probs["data"]] == [f32(v) for v in plain["scores"]], (form, key)
    assert outs["class"]["datatype"] == "INT64" and outs["class"]["shape"] == [1]
    assert outs["class"]["data"] == [plain["class"]], (form, key)
    assert outs["label"]["datatype"] == "BYTES" and outs["label"]["data"] == [plain["label"]]


def rows(values):
    """A dlserve form's values as rows: one sample's list, or one a sample."""
    return values if values and isinstance(values[0], list) else [values]


def check_values(key, plain, resp, form):
    """The dlserve form's "output"/"values" and "outputs" {name: values} (a
    model of several outputs) are the InferenceResponse's FP32 outputs, in
    order, each of shape [samples, values a sample]."""
    want = [(plain["output"], rows(plain["values"]))]
    want += [(name, rows(v)) for name, v in plain.get("outputs", {}).items()]
    got = resp["outputs"]
    assert [o["name"] for o in got] == [name for name, _ in want], (form, key, got)
    for o, (name, r) in zip(got, want):
        assert o["datatype"] == "FP32" and o["shape"] == [len(r), len(r[0])], (form, key, o)
        assert [f32(v) for v in o["data"]] == [f32(v) for row in r for v in row], (form, key)


def main():
    plain_path, json_path, bin_path, count = sys.argv[1:5]
    plain, oip, binary = records(plain_path), records(json_path), records(bin_path)
    want = int(count)
    assert len(plain) == len(oip) == len(binary) == want, (len(plain), len(oip), len(binary))
    for key, (h, value) in plain.items():
        p = json.loads(value)
        hj, vj = oip[key]
        assert hj["content-type"] == "application/json", hj
        assert "inference-header-content-length" not in hj, hj
        check(key, p, json.loads(vj), "oip-json")
        hb, vb = binary[key]
        assert hb["content-type"] == "application/octet-stream", hb
        json_len = int(hb["inference-header-content-length"])
        head = json.loads(vb[:json_len])
        assert all("data" not in o for o in head["outputs"]), head
        check(key, p, binary_outputs(vb, json_len), "oip-binary")
    print("%d records read back alike in dlserve, oip-json and oip-binary" % want)


if __name__ == "__main__":
    main()
