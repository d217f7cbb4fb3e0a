#!/usr/bin/env python3
"""Document-length distributions nobody tuned on, for bench/long_context.py --lengths.

Writes one length per line (the `plan --lengths` text format), drawn with a fixed seed:
  chat-books: 85 % short exchanges (log-normal, median 600 tokens) and 15 % books (log-normal,
              median 40K tokens), a bimodal mix;
  pareto:     a power law from 256 tokens with exponent 1.1, the heaviest tail of the set.
Lengths are at least 16 tokens; long_context.py cuts them at --max-len as it does the others.

    bench/synthetic_lengths.py --out /tmp/synthetic
"""
import argparse
import os

import numpy as np


def chat_books(rng, n):
    books = rng.random(n) < 0.15
    return np.where(books, rng.lognormal(np.log(40_000), 0.8, n),
                    rng.lognormal(np.log(600), 1.0, n))


def pareto(rng, n):
    return 256 * (1 + rng.pareto(1.1, n))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="/tmp/hydraulis-synthetic")
    p.add_argument("--documents", type=int, default=200_000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name, draw in (("chat-books", chat_books), ("pareto", pareto)):
        rng = np.random.default_rng(a.seed)
        lengths = np.maximum(16, draw(rng, a.documents).astype(np.int64))
        path = os.path.join(a.out, f"{name}.txt")
        np.savetxt(path + ".tmp", lengths, fmt="%d")
        os.replace(path + ".tmp", path)
        print(f"{path}: {a.documents} documents, median {int(np.median(lengths))}, "
              f"share of tokens above 32K {lengths[lengths > 32768].sum() / lengths.sum():.2f}")


if __name__ == "__main__":
    main()
