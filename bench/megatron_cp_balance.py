#!/usr/bin/env python3
"""Balance of hydraulis.megatron.BalancedCPScheduler against megatron-core's own
BalancedCPScheduler (0.16.1, the pinned test-only peer) on batches of real Wikipedia
lengths, both called as HybridCPDataLoaderWrapper calls its scheduler.

    PYTHONPATH=<dir with the hydraulis package> .venv/bin/python bench/megatron_cp_balance.py

For each setting (dp-cp ranks, max_seq_len_per_rank M, batch tokens as a multiple of
ranks * M) it draws seeded batches of consecutive lengths from
../shared/data/wikipedia-doc-lengths.txt (or data/wikipedia-sample-lengths.txt), checks
every schedule with check_hybrid_cp_schedule, and prints the mean over the batches of
schedule_ms (groups one after another, each as long as its slowest rank; a rank's time the
sum of its samples' times, waiting included) under three cost models:
- default: ours' default, (a L^2 + b L) / k + kv L (k > 1), a 5e-7, b 0.035, kv 0.01;
- peer: the peer's own estimate, L^2 / k (shown / 1e6), for ours with the default model
  and for ours given this model (costs=BlockCosts.peer_estimate());
- a800-7b: configs/profiles/llama-7b-a800.json at tp 8 (cp 1, 2, 4, 8), each sample
  paying c (only settings of at most 8 ranks; ours plans with that profile there).
It also prints where ours' time comes from, under the default model: the planner's plan
alone (its layouts merged over micro-batches), after the block re-layout, the full
scheduler, and the same local search from a trivial start (every sample on its least
block at rank 0) instead of the planner's plan.
"""
import argparse
import os
import random
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dynamic_cp_peer import DpCpGroup  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SHARED = os.path.join(ROOT, "..", "shared", "data", "wikipedia-doc-lengths.txt")
SAMPLE = os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt")
PROFILE_7B = os.path.join(ROOT, "configs", "profiles", "llama-7b-a800.json")

SETTINGS = [(8, 4096, 0.5), (8, 4096, 2.0), (8, 4096, 4.0), (16, 4096, 8.0), (16, 8192, 1.0),
            (32, 2048, 2.0), (64, 4096, 2.0)]


def real_length_batches(lengths, ranks, max_tokens, load, count, seed):
    """`count` global batches of consecutive real lengths from seeded offsets, each about
    load * ranks * max_tokens tokens, every length within what all ranks hold."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        start = rng.randrange(len(lengths))
        batch, tokens = [], 0
        while tokens < load * ranks * max_tokens:
            n = int(min(lengths[(start + len(batch)) % len(lengths)], ranks * max_tokens))
            batch.append(n)
            tokens += n
        out.append(batch)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.model_parallel_config import ModelParallelConfig
        from megatron.core.pipeline_parallel.hybrid_cp_schedule import BalancedCPScheduler as Peer
    import hydraulis.megatron as hm

    lengths = np.loadtxt(SHARED if os.path.exists(SHARED) else SAMPLE, dtype=np.int64)
    print("ranks M load | default: ours peer | L^2/k (1e6): ours ours-planned-by-it peer | "
          "a800-7b: ours peer | default, ours from: planner relayout full trivial+search")
    for ranks, max_tokens, load in SETTINGS:
        config = ModelParallelConfig(hybrid_context_parallel=True,
                                     max_seqlen_per_dp_cp_rank=max_tokens)
        ours = hm.BalancedCPScheduler(max_seq_len_per_rank=config.max_seqlen_per_dp_cp_rank,
                                      dp_cp_group=DpCpGroup(ranks))
        ours_7b = (hm.BalancedCPScheduler(max_tokens, DpCpGroup(ranks), profile=PROFILE_7B, tp=8)
                   if ranks <= 8 else None)
        default = ours.costs
        estimate = hm.BlockCosts.peer_estimate()
        ours_e = hm.BalancedCPScheduler(max_tokens, DpCpGroup(ranks), costs=estimate)
        rows = {k: [] for k in ("d_ours", "d_peer", "e_ours", "e_planned", "e_peer", "p_ours",
                                "p_peer",
                                "planner", "relayout", "trivial")}
        for batch in real_length_batches(lengths, ranks, max_tokens, load, args.batches,
                              args.seed * 1000 + ranks):
            samples = [(i, n) for i, n in enumerate(batch)]
            peer = Peer(max_seq_len_per_rank=max_tokens, dp_cp_group=DpCpGroup(ranks))
            peer_groups, peer_ids = peer.get_groups_and_subsamples(samples, config)
            hm.check_hybrid_cp_schedule(samples, peer_groups, peer_ids, ranks, max_tokens)
            groups, ids = ours.get_groups_and_subsamples(samples, config)
            hm.check_hybrid_cp_schedule(samples, groups, ids, ranks, max_tokens)
            rows["d_ours"].append(hm.schedule_ms(samples, ids, default)[0])
            rows["d_peer"].append(hm.schedule_ms(samples, peer_ids, default)[0])
            rows["e_ours"].append(hm.schedule_ms(samples, ids, estimate)[0] / 1e6)
            rows["e_peer"].append(hm.schedule_ms(samples, peer_ids, estimate)[0] / 1e6)
            _, ids_e = ours_e.get_groups_and_subsamples(samples, config)
            hm.check_hybrid_cp_schedule(samples, [[[batch[s] for s in r] for r in g]
                                                  for g in ids_e], ids_e, ranks, max_tokens)
            rows["e_planned"].append(hm.schedule_ms(samples, ids_e, estimate)[0] / 1e6)
            if ours_7b is not None:
                _, ids_7b = ours_7b.get_groups_and_subsamples(samples, config)
                hm.check_hybrid_cp_schedule(samples, [[[batch[s] for s in r] for r in g]
                                                      for g in ids_7b], ids_7b, ranks, max_tokens)
                rows["p_ours"].append(hm.schedule_ms(samples, ids_7b, ours_7b.costs)[0])
                rows["p_peer"].append(hm.schedule_ms(samples, peer_ids, ours_7b.costs)[0])
            # Where ours' time comes from.
            plan = ours.planner.plan(batch)
            start, size, blocks = ours._blocks_of(plan, len(batch))
            layout = hm._RankLayout(batch, start, size, default, ranks, ours.block_sizes)
            layout.enforce_memory(max_tokens)
            rows["planner"].append(max(layout.load))
            for first, k, docs in blocks:
                if k > 1:
                    hm._relayout_block(batch, docs, first, k, default, max_tokens,
                                       ours.block_sizes, start, size)
            layout = hm._RankLayout(batch, start, size, default, ranks, ours.block_sizes)
            layout.enforce_memory(max_tokens)
            rows["relayout"].append(max(layout.load))
            trivial = hm._RankLayout(batch, [0] * len(batch),
                                     [ours.gpus_needed(n) for n in batch], default, ranks,
                                     ours.block_sizes)
            trivial.improve(max_tokens, 4 * len(batch) + 64)
            rows["trivial"].append(max(trivial.load))
        m = {k: (float(np.mean(v)) if v else float("nan")) for k, v in rows.items()}
        print(f"{ranks:3d} {max_tokens:5d} {load:4.1f} | {m['d_ours']:8.0f} {m['d_peer']:8.0f} | "
              f"{m['e_ours']:8.1f} {m['e_planned']:8.1f} {m['e_peer']:8.1f} | "
              f"{m['p_ours']:8.0f} {m['p_peer']:8.0f} | "
              f"{m['planner']:8.0f} {m['relayout']:8.0f} {m['d_ours']:8.0f} {m['trivial']:8.0f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
