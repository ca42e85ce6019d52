#!/usr/bin/python3
"""onnx_check.py: dlserve's outputs against PyTorch's, value by value, for
the ONNX tests (numpy only: no torch to load for each check).

    onnx_check.py predict OUT REF   --predict's lines in OUT ({"index": i,
                                    "outputs": {"y": [...]}}, one a sample,
                                    in order) against REF's "y"
    onnx_check.py answer BODY REF   the output "y" of an OIP JSON answer
                                    (its shape, then its data) against
                                    REF's "y"

REF is a JSON file {"y": PyTorch's outputs, one row a sample}. Every value
must lie within 1e-4 of PyTorch's, relative to it, with 1e-6 allowed
besides for the values near 0 (a relative bound alone fails on float
rounding there). Prints how many values agreed and the largest relative
difference; exits non-zero naming the first value that does not agree.
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


def predicted(path):
    """Output "y" of --predict's lines, one row a sample."""
    rows = []
    for i, line in enumerate(open(path)):
        r = json.loads(line)
        if r.get("index") != i or list(r.get("outputs", {})) != ["y"]:
            sys.exit(f"{path}:{i + 1}: not the prediction of sample {i}: {line.strip()}")
        rows.append(r["outputs"]["y"])
    return rows


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
    want = np.asarray(json.load(open(argv[3]))["y"], dtype=np.float64)
    what = "%s of %s" % (argv[1], os.path.basename(argv[3]))
    if argv[1] == "predict":    # each sample's values, flat
        close(what, predicted(argv[2]), want.reshape(len(want), -1))
    else:
        close(what, answered(argv[2]), want)


if __name__ == "__main__":
    main(sys.argv)
