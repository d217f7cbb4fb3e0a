#!/usr/bin/env python3
"""Where a training step's time goes, from the runtime's own per-step phase times (issue 26).

Usage: python3 bench/step_phases.py --parameters N [--skip 1] FILE [FILE ...]

FILE is either bench/gpu_train_bench's --json output (its steps' `phases_ms`) or a
`hydraulis train --log-json` file (one record per step: check_ms, pack_ms, ...). The first
--skip steps (warm-up) are left out. Prints, per file, a markdown table: each phase's mean
milliseconds per step, its share of the step, and its cost per token and per parameter
(--parameters: the model's count, for the phases whose work grows with it).
"""
import argparse
import json

PHASES = ["check", "pack", "materialise", "forward", "backward", "grad_collect",
          "grad_reduce_wait", "update", "pipeline_wait"]


def steps_of(path):
    with open(path) as f:
        text = f.read()
    try:
        doc = json.loads(text)
        return [({k: s["phases_ms"][k] for k in PHASES}, s["phases_ms"]["step"], s["tokens"])
                for s in doc["steps"] if not s["warmup"]]
    except (json.JSONDecodeError, KeyError, TypeError):
        out = []
        for line in text.splitlines():
            r = json.loads(line)
            phases = {k: r.get(k + "_ms", 0.0) for k in PHASES}
            phases["pipeline_wait"] = r["wait_ms"]
            phases["grad_reduce_wait"] = r["grad_reduce_wait_ms"]
            out.append((phases, r["step_ms"], r["tokens"]))
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--parameters", type=float, required=True)
    ap.add_argument("--skip", type=int, default=0, help="steps to leave out first (warm-up)")
    a = ap.parse_args()
    for path in a.files:
        steps = steps_of(path)[a.skip:]
        n = len(steps)
        step_ms = sum(s for _, s, _ in steps) / n
        tokens = sum(t for _, _, t in steps) / n
        print(f"{path}: {n} steps, {step_ms:.1f} ms per step, {tokens:.0f} tokens per step\n")
        print("| phase | ms per step | share | us per token | ns per parameter |")
        print("|---|---:|---:|---:|---:|")
        accounted = 0.0
        for k in PHASES:
            ms = sum(p[k] for p, _, _ in steps) / n
            accounted += ms
            print(f"| {k} | {ms:.1f} | {100 * ms / step_ms:.1f} % | {1e3 * ms / tokens:.2f} | "
                  f"{1e6 * ms / a.parameters:.2f} |")
        rest = step_ms - accounted
        print(f"| rest (bookkeeping, loss sums) | {rest:.1f} | {100 * rest / step_ms:.1f} % | "
              f"{1e3 * rest / tokens:.2f} | {1e6 * rest / a.parameters:.2f} |\n")


if __name__ == "__main__":
    main()
