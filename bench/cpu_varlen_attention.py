#!/usr/bin/env python3
"""Forward + backward time of one causal attention segment on the CPU, one thread: the dense
path (materialised scores, a bottom-right mask, softmax) that varlen attention used off the
flash path before, against ATen's scaled_dot_product_attention (is_causal for a whole
document, a bottom-right boolean mask for a chunk against its prefix), which it uses now
(docs/benchmarks.md, "A fitted cp scheme against measured cp steps"). Alternates the two
and prints the median of each and their ratio.

    .venv/bin/python bench/cpu_varlen_attention.py [--heads 4 --head-dim 16 --repeats 5]
"""
import argparse
import math
import statistics
import time

import torch


def dense(q, k, v):
    lq, lk = q.shape[1], k.shape[1]
    scores = (q @ k.transpose(1, 2)) / math.sqrt(q.shape[2])
    future = torch.ones(lq, lk, dtype=torch.bool).triu(1 + lk - lq)
    return torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ v


def sdpa(q, k, v):
    lq, lk = q.shape[1], k.shape[1]
    if lq == lk:
        return torch.nn.functional.scaled_dot_product_attention(
            q[None], k[None], v[None], is_causal=True)[0]
    visible = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)
    return torch.nn.functional.scaled_dot_product_attention(
        q[None], k[None], v[None], attn_mask=visible)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print("| queries | keys | dense ms | sdpa ms | dense / sdpa | max abs difference |")
    print("|---:|---:|---:|---:|---:|---:|")
    for lq, lk in ((3072, 3072), (768, 3072)):
        q = torch.randn(a.heads, lq, a.head_dim, requires_grad=True)
        k = torch.randn(a.heads, lk, a.head_dim, requires_grad=True)
        v = torch.randn(a.heads, lk, a.head_dim, requires_grad=True)
        diff = (dense(q, k, v) - sdpa(q, k, v)).abs().max().item()
        times = {dense: [], sdpa: []}
        for f in (dense, sdpa):
            f(q, k, v).sum().backward()  # warm-up
        for _ in range(a.repeats):
            for f in (dense, sdpa):
                start = time.perf_counter()
                f(q, k, v).sum().backward()
                times[f].append((time.perf_counter() - start) * 1e3)
        d, s = statistics.median(times[dense]), statistics.median(times[sdpa])
        print(f"| {lq} | {lk} | {d:.1f} | {s:.1f} | {d / s:.2f}x | {diff:.1e} |")


if __name__ == "__main__":
    main()
