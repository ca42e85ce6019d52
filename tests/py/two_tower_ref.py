#!/usr/bin/env python3
"""two_tower_ref.py WEIGHTS USERS FEATURES: the two-tower model's served
outputs computed here from its safetensors weights, independently of the
engine: user_emb -> flatten, feat_fc on the features, concat, fc1, relu,
then click (sigmoid: bce_with_logits is served as probabilities) and
rating (mse: as it is). USERS is a JSON list of ids, FEATURES a JSON list
of 16-value rows (scaling of models/two-tower is the identity). Prints
{"click": [...], "rating": [...]}, one value a sample. numpy only."""
import json
import struct
import sys

import numpy as np


def load(path):
    """{name: float32 array} of a safetensors file."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4").reshape(t["shape"])
    return out


def main():
    w = load(sys.argv[1])
    users = np.array(json.loads(sys.argv[2]), dtype=np.int64)
    feats = np.array(json.loads(sys.argv[3]), dtype=np.float32)
    dense = lambda x, n: x @ w[n + ".weight"].T + w[n + ".bias"]
    joined = np.concatenate([w["user_emb.weight"][users], dense(feats, "feat_fc")], axis=1)
    h = np.maximum(dense(joined, "fc1"), 0)
    click = 1 / (1 + np.exp(-dense(h, "click")))
    print(json.dumps({"click": click[:, 0].tolist(), "rating": dense(h, "rating")[:, 0].tolist()}))


if __name__ == "__main__":
    main()
