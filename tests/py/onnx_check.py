#!/usr/bin/python3
"""onnx_check.py: dlserve's outputs against PyTorch's, value by value, for
the ONNX tests (numpy only: no torch to load for each check).

    onnx_check.py predict OUT REF   --predict's lines in OUT ({"index": i,
                                    "outputs": {"y": [...]}}, one a sample,
                                    in order) against REF's "y" (if any);
                                    with "tags" in REF (a per-token output's
                                    scores, REF's "lengths" each sample's),
                                    the classes --predict prints for it
                                    against their top
    onnx_check.py answer BODY REF   the output "y" of an OIP JSON answer
                                    (its shape, then its data) against
                                    REF's "y"

REF is a JSON file {"y": PyTorch's outputs, one row a sample}. Every value
must lie within 1e-4 of PyTorch's, relative to it, with 1e-6 allowed
besides for the values near 0 (a relative bound alone fails on float
rounding there). A per-token class must be the top of PyTorch's scores at
its position, or tied with it within tests/py/tolerance.py's bound.
Prints how many values agreed and the largest relative difference; exits
non-zero naming the first value that does not agree.
"""
import json
import os
import sys

import numpy as np

REL, ABS = 1e-4, 1e-6


def close(what, got, want):
    """Exits unless got (any nesting) equals want within REL and ABS."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        sys.exit(f"{what}: shape {list(got.shape)}, PyTorch's {list(want.shape)}")
    diff = np.abs(got - want)
    bad = np.argwhere(diff > REL * np.abs(want) + ABS)
    if len(bad):
        i = tuple(bad[0])
        sys.exit(f"{what}: value {list(i)} is {got[i]!r}, PyTorch's {want[i]!r} "
                 f"({len(bad)} of {got.size} values differ)")
    rel = float(np.max(diff / np.maximum(np.abs(want), 1e-30)))
    print(f"# {what}: {got.size} values agree, largest relative difference {rel:.1e}")


def predicted(path, names=("y",)):
    """Outputs `names` of --predict's lines: name -> one row a sample."""
    rows = {k: [] for k in names}
    for i, line in enumerate(open(path)):
        r = json.loads(line)
        if r.get("index") != i or list(r.get("outputs", {})) != list(names):
            sys.exit(f"{path}:{i + 1}: not the prediction of sample {i}: {line.strip()}")
        for k in names:
            rows[k].append(r["outputs"][k])
    return rows


def tokens(what, got, scores, lengths):
    """Each sample's per-token classes against the top of its scores."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from tolerance import near_top
    n = 0
    for i, (classes, s, length) in enumerate(zip(got, scores, lengths)):
        if len(classes) != length:
            sys.exit(f"{what}: sample {i} has {len(classes)} classes, {length} positions")
        for t, k in enumerate(classes):
            if not near_top(s[t], k):
                sys.exit(f"{what}: sample {i} position {t}: class {k}, PyTorch's scores "
                         f"{s[t]}")
            n += 1
    print(f"# {what}: {n} per-token classes agree")


def answered(path):
    """Output "y" of an OIP JSON answer, shaped as its "shape" says."""
    d = json.load(open(path))
    outs = [o for o in d.get("outputs", []) if o.get("name") == "y"]
    if len(outs) != 1 or outs[0].get("datatype") != "FP32":
        sys.exit(f"{path}: no FP32 output 'y': {json.dumps(d)[:300]}")
    return np.asarray(outs[0]["data"], dtype=np.float64).reshape(outs[0]["shape"])


def main(argv):
    if len(argv) != 4 or argv[1] not in ("predict", "answer"):
        sys.exit(__doc__)
    ref = json.load(open(argv[3]))
    what = "%s of %s" % (argv[1], os.path.basename(argv[3]))
    if argv[1] == "predict":    # each sample's values, flat
        got = predicted(argv[2], tuple(k for k in ("y", "tags") if k in ref))
        if "y" in ref:
            want = np.asarray(ref["y"], dtype=np.float64)
            close(what, got["y"], want.reshape(len(want), -1))
        if "tags" in ref:
            tokens(what + " (tags)", got["tags"], ref["tags"], ref["lengths"])
    else:
        close(what, answered(argv[2]), np.asarray(ref["y"], dtype=np.float64))


if __name__ == "__main__":
    main(sys.argv)
