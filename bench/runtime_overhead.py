#!/usr/bin/env python3
"""One rank of hydraulis against plain PyTorch on the same batches, alternated (issue 26).

Usage: .venv/bin/python bench/runtime_overhead.py [--bench build/release/bench/gpu_train_bench]
       [--models tiny,small] [--rounds 3] [--steps tiny=30,small=3] [--warmup 1] [--context 2048]
       [--tokens-per-step 8192] [--dp 1|N] [--allocator trainer|same|plain] [--report FILE]

For each model: bench/gpu_train_bench (ours: the distributed trainer on one CPU rank, fp32)
writes the packed batches of real Wikipedia lengths it trained on; then every round runs
ours, the eager PyTorch LLaMA and transformers' LlamaForCausalLM (bench/peer_train.py) on
those same batches, one after the other, the order rotating each round, so slow drifts of
the machine hit all three alike. Each run's tokens/s is over its timed steps (after
`--warmup`); the table gives each implementation's median and the median over rounds of
ours / peer, the figure issue 26 sets goals on (>= 1.05x). Peak resident memory of each run
(GNU time) is recorded beside it. Run from the repository root on a quiet machine.

--dp N (N > 1): data parallelism against PyTorch DDP instead. Ours runs as N ranks under
torchrun (one single-GPU pipeline per rank; the step's micro-batches spread over the ranks by
tokens) and writes which rank ran each micro-batch; the peer is the eager model in
DistributedDataParallel (Gloo) on the same N ranks, each rank training the same micro-batches
(bench/peer_train.py --impl ddp). Both launch through `python -m torch.distributed.run
--standalone`, so both get torchrun's environment (OMP_NUM_THREADS=1 per rank). Peak RSS is
then the largest single process's (GNU time's figure for a process tree), i.e. one rank's.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile


# kAllocatorTunables of include/hydraulis/runtime/launch/launcher.h: what `hydraulis train`
# (and gpu_train_bench) run under.
ALLOCATOR_TUNABLES = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1099511627776"


def timed(cmd, env=None):
    """Runs cmd under GNU time; returns (stdout+stderr text, peak RSS in bytes)."""
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{(r.stdout + r.stderr)[-8000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)[1]) * 1024
    return r.stdout + r.stderr, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/release/bench/gpu_train_bench")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--models", default="tiny,small")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", default="tiny=30,small=3",
                    help="timed steps per model (MODEL=N,...; 3 for a model not named): a run of "
                         "a few seconds is noise on a shared machine")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--tokens-per-step", type=int, default=8192)
    ap.add_argument("--lengths", default="data/wikipedia-sample-lengths.txt")
    ap.add_argument("--dp", type=int, default=1, help="data-parallel ranks; > 1 compares with DDP")
    ap.add_argument("--allocator", choices=["trainer", "same", "plain"], default="trainer",
                    help="trainer: ours under the malloc settings `hydraulis train` sets for itself "
                         "(freed memory kept for reuse), the peers as a plain Python run; same: the "
                         "peers under those settings too; plain: nobody")
    ap.add_argument("--report")
    a = ap.parse_args()
    peer_env = dict(os.environ)
    peer_env.pop("GLIBC_TUNABLES", None)
    if a.allocator == "same":
        peer_env["GLIBC_TUNABLES"] = ALLOCATOR_TUNABLES
    ours_flags = ["--plain-allocator"] if a.allocator == "plain" else []
    peers = ["eager", "hf"] if a.dp == 1 else ["ddp"]
    launch = [] if a.dp == 1 else [a.python, "-m", "torch.distributed.run", "--standalone",
                                    "--nproc-per-node", str(a.dp)]
    lines = ["| model | parameters | dp | ours tokens/s | " +
             " | ".join(f"{p} tokens/s" for p in peers) + " | " +
             " | ".join(f"ours / {p}" for p in peers) +
             f" | peak RSS MiB ours / {' / '.join(peers)} |",
             "|---|---:|---:|---:|" + "---:|" * (2 * len(peers) + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        steps_of = dict((k, int(v)) for k, v in (kv.split("=") for kv in a.steps.split(",")))
        for model in a.models.split(","):
            config = f"configs/models/{model}.json"
            steps = steps_of.get(model, 3)
            batches = os.path.join(tmp, f"{model}-batches.json")
            out = os.path.join(tmp, "run.json")

            def ours():
                text, rss = timed(launch + (["--no-python"] if launch else []) + [a.bench, "--model", config, "--device", "cpu", "--precision",
                                   "fp32", "--lengths", a.lengths, "--context", str(a.context),
                                   "--tokens-per-step", str(a.tokens_per_step), "--steps",
                                   str(steps), "--warmup", str(a.warmup), "--batches-out",
                                   batches, "--json", out] + ours_flags, env=peer_env)
                with open(out) as f:
                    return json.load(f)["tokens_per_s"], rss

            def peer(impl):
                text, rss = timed((launch or [a.python]) + ["bench/peer_train.py", "--batches", batches, "--model",
                                   config, "--impl", impl, "--device", "cpu", "--warmup-steps",
                                   str(a.warmup), "--json", out], env=peer_env)
                with open(out) as f:
                    return json.load(f)["tokens_per_s"], rss

            order = ["ours"] + peers
            runs = {k: [] for k in order}
            rss = {k: 0 for k in order}
            ours()  # writes the batches the peers read (and warms the caches)
            for r in range(a.rounds):
                for name in order[r % len(order):] + order[:r % len(order)]:
                    tps, peak = ours() if name == "ours" else peer(name)
                    runs[name].append(tps)
                    rss[name] = max(rss[name], peak)
                    print(f"{model} round {r}: {name} {tps:.0f} tokens/s, peak {peak / 2**20:.0f} MiB",
                          flush=True)
            med = {k: statistics.median(v) for k, v in runs.items()}
            ratio = {p: statistics.median(o / q for o, q in zip(runs["ours"], runs[p]))
                     for p in peers}
            with open(config) as f:
                c = json.load(f)
            hd = c["hidden"] // c["heads"]
            params = c["layers"] * (2 * c["hidden"] * c["hidden"] + 2 * c["hidden"] * c["kv_heads"] * hd
                                    + 3 * c["hidden"] * c["ffn"] + 2 * c["hidden"]) + c["hidden"] + \
                c["vocab"] * c["hidden"] * (1 if c["tie_embeddings"] else 2)
            lines.append(f"| {model} | {params / 1e6:.1f}M | {a.dp} | {med['ours']:.0f} | " +
                         " | ".join(f"{med[p]:.0f}" for p in peers) + " | " +
                         " | ".join(f"{ratio[p]:.3f}" for p in peers) + " | " +
                         " / ".join(f"{rss[k] / 2**20:.0f}" for k in order) + " |")
    print("\n".join(lines))
    if a.report:
        with open(a.report, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
