#!/usr/bin/env python3
"""The long-context benchmark (docs/benchmarks.md, "Long context on three distributions").

For each length distribution: candidates from `hydraulis propose` with no tuning flags, then
`hydraulis simulate` of ours (cp layouts over any rank subset, and restricted to whole-or-
every for comparison), static-cp (Megatron-LM: every document over every cp rank of
(CP4,TP16) pipelines) and dynamic-cp (megatron-core's BalancedCPScheduler over TP8 ranks),
and `hydraulis plan --dataset` for the gap to the lower bound and the planning time. Prints
one table row per distribution and writes every output under --out.

    bench/long_context.py --gpus 256 --tokens-per-batch 2097152 --steps 100
    bench/long_context.py --lengths mine=my-lengths.txt --steps 20   # your own data
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
DISTRIBUTIONS = [("wikipedia", "wikipedia-doc-lengths.txt"),
                 ("code-files", "code-file-lengths-cl100k.txt"),
                 ("code-dirs", "code-dir-lengths-cl100k.txt")]


def run(args, what):
    start = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{what} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout, time.monotonic() - start


def candidates(path, gpus, name, cp, tp):
    """A homogeneous baseline candidate set: gpus / (cp * tp) pipelines of (cp, tp)."""
    with open(path, "w") as f:
        json.dump({"format": "hydraulis.candidates/1", "gpus": gpus,
                   "optimizer_layout": {"dp": gpus // 16, "tp": 16, "pp": 1},
                   "strategies": [{"name": name, "pipelines": [
                       {"count": gpus // (cp * tp), "cp": cp, "tp": tp, "pp": 1}]}]}, f)


def step_times(path):
    with open(path) as f:
        return [s["step_ms"] for s in json.load(f)["per_step"]]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hydraulis", default=os.path.join(ROOT, "build/release/tools/hydraulis"))
    p.add_argument("--profile", default=os.path.join(ROOT, "configs/profiles/llama-32b-a800.json"))
    p.add_argument("--gpus", type=int, default=256)
    p.add_argument("--tokens-per-batch", type=int, default=2_097_152)
    p.add_argument("--max-len", type=int, default=131_072)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="/tmp/hydraulis-long-context")
    p.add_argument("--only", help="one distribution name")
    p.add_argument("--lengths", action="append", default=[], metavar="NAME=PATH",
                   help="run on this length file instead of the three of ../shared/data "
                        "(repeatable; the formats `plan --lengths` reads)")
    p.add_argument("--reuse", action="store_true",
                   help="keep outputs already under --out instead of running them again")
    p.add_argument("--recompute-granularity", default="",
                   help="plan, propose and simulate every system under activation recomputation "
                        "(none, selective, full; default: the profile's own)")
    p.add_argument("--propose-args", default="",
                   help="extra flags for propose (default none: the no-flag proposal)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    h = a.hydraulis
    recompute = (["--recompute-granularity", a.recompute_granularity]
                 if a.recompute_granularity else [])
    common = ["--profile", a.profile, "--max-len", str(a.max_len),
              "--tokens-per-batch", str(a.tokens_per_batch), "--seed", str(a.seed), *recompute]
    static = os.path.join(a.out, f"static-cp4-tp16-{a.gpus}.json")
    dynamic = os.path.join(a.out, f"dynamic-cp-tp8-{a.gpus}.json")
    candidates(static, a.gpus, "static-cp4-tp16", 4, 16)
    candidates(dynamic, a.gpus, "dynamic-cp-tp8", 1, 8)
    print(f"{a.gpus} GPUs, {a.tokens_per_batch} tokens per batch, {a.steps} steps, seed {a.seed}, "
          f"propose flags: {a.propose_args or 'none'}, recompute: "
          f"{a.recompute_granularity or 'the profile'}")
    print("| data | propose s | ours ms | whole-or-every ms | dynamic-cp ms | static-cp ms "
          "| x dynamic-cp: mean, worst step, slower steps | x static-cp | x whole-or-every "
          "| plan over bound | planning median / p90 ms |")
    distributions = [(n, os.path.join(SHARED, f)) for n, f in DISTRIBUTIONS]
    if a.lengths:
        if any("=" not in x for x in a.lengths):
            p.error("--lengths takes NAME=PATH")
        distributions = [tuple(x.split("=", 1)) for x in a.lengths]
    for name, lengths in distributions:
        if a.only and a.only != name:
            continue
        proposed = os.path.join(a.out, f"{name}-{a.gpus}-candidates.json")
        propose_s = 0.0
        if not (a.reuse and os.path.exists(proposed)):
            _, propose_s = run([h, "propose", "--profile", a.profile, "--lengths", lengths,
                                "--gpus", str(a.gpus), "--max-len", str(a.max_len),
                                "--tokens-per-batch", str(a.tokens_per_batch), "--quiet",
                                *recompute, *a.propose_args.split(), "-o", proposed], "propose")
        times = {}
        for system, cands, extra in [("ours", proposed, []),
                                     ("whole-or-every", proposed,
                                      ["--cp-layouts", "whole-or-every"]),
                                     ("dynamic-cp", dynamic, []), ("static-cp", static, [])]:
            out = os.path.join(a.out, f"{name}-{a.gpus}-{system}.json")
            if not (a.reuse and os.path.exists(out)):
                run([h, "simulate", *common, "--candidates", cands, "--lengths", lengths,
                     "--steps", str(a.steps), "--quiet", "--json", out,
                     "--system", "ours" if system == "whole-or-every" else system, *extra],
                    f"simulate {system}")
            times[system] = step_times(out)
        plans, _ = run([h, "plan", *common, "--candidates", proposed, "--dataset", lengths,
                        "--steps", str(a.steps), "--threads", str(a.threads)], "plan")
        plans = [json.loads(line) for line in plans.splitlines() if line.strip()]
        over = (sum(x["estimated_step_ms"] for x in plans) /
                sum(x["lower_bound_ms"] for x in plans) - 1)
        planning = sorted(x["planning_ms"] for x in plans)
        ours = times["ours"]
        mean = statistics.fmean

        def ratio(other):
            return mean(times[other]) / mean(ours)

        per_step = [d / o for d, o in zip(times["dynamic-cp"], ours)]
        print(f"| {name} | {propose_s:.0f} | {mean(ours):,.0f} | {mean(times['whole-or-every']):,.0f} "
              f"| {mean(times['dynamic-cp']):,.0f} | {mean(times['static-cp']):,.0f} "
              f"| {ratio('dynamic-cp'):.3f}x, {min(per_step):.3f}x, "
              f"{sum(r < 1 for r in per_step)} | {ratio('static-cp'):.3f}x "
              f"| {ratio('whole-or-every'):.3f}x | {100 * over:.2f} % "
              f"| {planning[len(planning) // 2]:.0f} / {planning[int(0.9 * len(planning))]:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
