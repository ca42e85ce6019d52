#!/usr/bin/env python3
"""random_weights.py: writes a safetensors file of F32 tensors drawn
uniformly from [-1, 1] by a seeded generator (standard library only): fixed
weights for tests that compare a model's answers, not judge them.

usage: random_weights.py PATH SEED NAME=D0[xD1] ...
"""
import json
import random
import struct
import sys


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    rng = random.Random(int(argv[1]))
    head, data = {}, b""
    for spec in argv[2:]:
        name, dims = spec.split("=")
        shape = [int(d) for d in dims.split("x")]
        n = shape[0] * (shape[1] if len(shape) > 1 else 1)
        raw = struct.pack("<%df" % n, *[rng.uniform(-1, 1) for _ in range(n)])
        head[name] = {"dtype": "F32", "shape": shape,
                      "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(head).encode()
    with open(argv[0], "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


if __name__ == "__main__":
    main(sys.argv[1:])
