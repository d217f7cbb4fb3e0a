#!/usr/bin/env python3
"""What planning through Python costs beyond planning in C++ (the goal: at most 10 %).

Usage: .venv/bin/python bench/python_overhead.py [--batches 200] [--tokens 200000]

The 64-GPU case-study workload (LLaMA-32B profile, candidates S0..S6), batches of about
--tokens tokens drawn (seeded) from the real Wikipedia document lengths. For each batch,
the wall time of `Planner.plan(lengths)` seen from Python (argument conversion, releasing
the GIL, planning, building the Plan's NumPy arrays) against the time the C++ planner
itself measured for the same call (`Plan.planning_ms`), so both come from the same call
under the same load. Prints the medians over the batches and the ratio; then the same with
every pipeline's micro-batch and cu_seqlens arrays built (Plan.pipelines is made on first
access).
"""
import argparse
import os
import statistics
import time

import numpy as np

import hydraulis

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=200_000)
    a = ap.parse_args()
    lengths = np.loadtxt(os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt"),
                         dtype=np.int64)
    planner = hydraulis.Planner(
        hydraulis.load_profile(os.path.join(ROOT, "configs/profiles/llama-32b-a800.json")),
        hydraulis.load_candidates(os.path.join(ROOT, "configs/candidates/llama-32b-64gpu.json")))
    rng = np.random.default_rng(1)
    wall, inner, docs, with_arrays = [], [], [], []
    for _ in range(a.batches):
        batch = []
        total = 0
        while total < a.tokens:
            n = int(lengths[rng.integers(len(lengths))])
            batch.append(n)
            total += n
        batch = np.array(batch, dtype=np.int64)
        t0 = time.perf_counter()
        plan = planner.plan(batch)
        wall.append((time.perf_counter() - t0) * 1e3)
        inner.append(plan.planning_ms)
        # The same batch again, now also building every array a data loader reads.
        t0 = time.perf_counter()
        again = planner.plan(batch)
        for pipeline in again.pipelines:
            pipeline.micro_batches, pipeline.cu_seqlens
        with_arrays.append((time.perf_counter() - t0) * 1e3 - again.planning_ms)
        docs.append(len(batch))
    w, c = statistics.median(wall), statistics.median(inner)
    print(f"{a.batches} batches of ~{a.tokens} tokens ({statistics.median(docs):.0f} documents, "
          "median), 64-GPU case-study candidates")
    print(f"median planning time: Python {w:.3f} ms, C++ {c:.3f} ms, "
          f"Python / C++ = {w / c:.3f} (overhead {100 * (w / c - 1):.1f} %)")
    extra = statistics.median(with_arrays)
    print(f"with every micro-batch's index and cu_seqlens arrays built: {extra:.3f} ms beyond "
          f"the C++ planning time (median), {100 * extra / c:.1f} % of it")


if __name__ == "__main__":
    main()
