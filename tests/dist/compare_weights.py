#!/usr/bin/env python3
"""compare_weights.py A B [TOL]: compares two safetensors files tensor by
tensor (same names, shapes, F32) and prints the largest relative error,
max|a-b| / max|b| per tensor. Exits 1 if it exceeds TOL (default 1e-5)."""
import json
import struct
import sys
from array import array


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        a = array("f")
        a.frombytes(data[b:e])
        out[name] = (t["shape"], a)
    return out


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
    if sorted(a) != sorted(b):
        print("different tensors: %s vs %s" % (sorted(a), sorted(b)))
        return 1
    worst, lines = 0.0, []
    for name in sorted(a):
        (sa, va), (sb, vb) = a[name], b[name]
        if sa != sb:
            print("%s: shapes %s vs %s" % (name, sa, sb))
            return 1
        scale = max(max(abs(x) for x in vb), 1e-12)
        err = max(abs(x - y) for x, y in zip(va, vb)) / scale
        worst = max(worst, err)
        lines.append("%-24s %-14s rel err %.3g" % (name, sa, err))
    if worst > tol:
        print("\n".join(lines))
    print("max rel err %.3g (tolerance %g)" % (worst, tol))
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
