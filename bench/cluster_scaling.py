#!/usr/bin/env python3
"""Planning cost against cluster size, as a user pays it: per size, `hydraulis propose`
(wall time, peak RSS) and `hydraulis plan` on the proposed candidates (per-step planning
time, cold = the first step of a fresh planner, warm = the median of the later ones; the
plans' estimated step time and gap to the bound; peak RSS). The batch grows with the
cluster (--tokens-per-gpu), as in issue 27.

With several --hydraulis binaries (e.g. a build before and after a change) every binary
plans on the candidates the first one proposed, one after the other per size, so their
plans are compared on the same batches and candidates and their times side by side.

Usage:
  bench/cluster_scaling.py --hydraulis build/release/tools/hydraulis \\
      [--hydraulis OTHER] --lengths ../shared/data/wikipedia-doc-lengths.txt \\
      [--gpus 64,1024,4096,16384] [--max-len 32768] [--tokens-per-gpu 1600] [--steps 4]
Prints a markdown table (docs/benchmarks.md records it).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run(cmd):
    """Runs cmd; returns (seconds, peak RSS in MiB). Exits with its output on failure."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out.decode(errors='replace')}")
    return seconds, usage.ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hydraulis", action="append", required=True, help="binary (repeatable)")
    ap.add_argument("--label", action="append", help="name per binary (default: its path)")
    ap.add_argument("--profile", default="configs/profiles/llama-32b-a800.json")
    ap.add_argument("--lengths", required=True)
    ap.add_argument("--gpus", default="64,1024,4096,16384")
    ap.add_argument("--max-len", type=int, default=32768)
    ap.add_argument("--tokens-per-gpu", type=int, default=1600)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--propose-args", default="", help="extra propose flags, one string")
    ap.add_argument("--work-dir", default=None)
    a = ap.parse_args()
    if a.steps < 2:
        sys.exit("--steps: need >= 2 (one cold, the rest warm)")
    labels = a.label or a.hydraulis
    if len(labels) != len(a.hydraulis):
        sys.exit("--label: give one per --hydraulis")
    work = a.work_dir or tempfile.mkdtemp(prefix="cluster_scaling.")
    os.makedirs(work, exist_ok=True)

    print(f"max-len {a.max_len}, {a.tokens_per_gpu} tokens per GPU per batch, {a.steps} steps, "
          f"seed {a.seed}, profile {a.profile}\n")
    print("| GPUs | tokens per batch | documents | build | strategies | propose s | "
          "propose RSS MiB | plan cold ms | plan warm ms | estimated step ms | gap | "
          "plan RSS MiB |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for gpus in [int(g) for g in a.gpus.split(",")]:
        tokens = gpus * a.tokens_per_gpu
        shared = None
        for k, (binary, label) in enumerate(zip(a.hydraulis, labels)):
            cands = os.path.join(work, f"cands-{gpus}-{k}.json")
            propose_s, propose_rss = run(
                [binary, "propose", "--profile", a.profile, "--lengths", a.lengths,
                 "--gpus", str(gpus), "--max-len", str(a.max_len),
                 "--tokens-per-batch", str(tokens), "-o", cands] + a.propose_args.split())
            if shared is None:
                shared = cands
            plans = os.path.join(work, f"plans-{gpus}-{k}.jsonl")
            _, plan_rss = run(
                [binary, "plan", "--profile", a.profile, "--candidates", shared,
                 "--dataset", a.lengths, "--steps", str(a.steps), "--tokens-per-batch",
                 str(tokens), "--max-len", str(a.max_len), "--seed", str(a.seed), "-o", plans])
            with open(plans) as f:
                steps = [json.loads(line) for line in f]
            with open(shared) as f:
                strategies = len(json.load(f)["strategies"])
            ms = [s["planning_ms"] for s in steps]
            est = statistics.mean(s["estimated_step_ms"] for s in steps)
            gap = statistics.mean(s["gap"] for s in steps)
            docs = statistics.mean(s["num_documents"] for s in steps)
            print(f"| {gpus:,} | {tokens:,} | {docs:,.0f} | {label} | {strategies} | "
                  f"{propose_s:.2f} | {propose_rss:.0f} | {ms[0]:.1f} | "
                  f"{statistics.median(ms[1:]):.1f} | {est:.1f} | {100 * gap:.2f} % | "
                  f"{plan_rss:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
