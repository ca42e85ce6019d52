#!/usr/bin/env python3
"""make_two_tower.py: writes deterministic train.csv and test.csv for
models/two-tower (standard library only).

Each sample has a user id in [0, USERS) and 16 features drawn from N(0, 1);
    rating = w . features + bias[user] + noise,  noise ~ N(0, NOISE)
    click  = 1 if rating > 0 else 0
with w and bias fixed by the seed. The best reachable rating rmse is NOISE
(0.1 by default); predicting the mean gives about 1.5. Rows are in the
multi-input CSV layout: click, rating, user, then the 16 features.

usage: make_two_tower.py DIR [--train N] [--test N] [--users U]
                             [--noise STD] [--seed S]
"""
import argparse
import os
import random

FEATURES = 16


def rule(seed, users):
    """The fixed weights and per-user biases of the generating rule."""
    rng = random.Random(seed)
    w = [rng.uniform(-0.5, 0.5) for _ in range(FEATURES)]
    bias = [rng.gauss(0.0, 1.0) for _ in range(users)]
    return w, bias


def row(rng, w, bias, noise):
    """One CSV line: click, rating, user, features."""
    user = rng.randrange(len(bias))
    x = [rng.gauss(0.0, 1.0) for _ in range(FEATURES)]
    rating = sum(a * b for a, b in zip(w, x)) + bias[user] + rng.gauss(0.0, noise)
    click = 1 if rating > 0 else 0
    return ",".join([str(click), f"{rating:.5f}", str(user)] + [f"{v:.5f}" for v in x])


def write(path, rng, n, w, bias, noise):
    with open(path, "w") as f:
        for _ in range(n):
            f.write(row(rng, w, bias, noise) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("--train", type=int, default=20000)
    p.add_argument("--test", type=int, default=5000)
    p.add_argument("--users", type=int, default=100)
    p.add_argument("--noise", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    w, bias = rule(a.seed, a.users)
    rng = random.Random(a.seed + 1)
    write(os.path.join(a.dir, "train.csv"), rng, a.train, w, bias, a.noise)
    write(os.path.join(a.dir, "test.csv"), rng, a.test, w, bias, a.noise)


if __name__ == "__main__":
    main()
