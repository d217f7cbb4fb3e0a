#!/usr/bin/env python3
"""hydraulis as a Megatron-LM-style packing scheduler.

    .venv/bin/python examples/megatron_packing.py [--dp 8] [--tokens 200000]

A global batch of real Wikipedia document lengths ((sample id, seqlen) pairs, as
Megatron's data iterator sees them) is scheduled onto dp data-parallel ranks, each an
8-way tensor-parallel LLaMA-32B replica (the A800 profile), by the hydraulis planner given
that one homogeneous strategy: groups[microbatch][dp_rank] -> sample ids,
plus each micro-batch's packed-sequence parameters (cu_seqlens, max_seqlen, total
tokens). Prints the per-rank load: tokens and the planner's estimated time.
"""
import argparse
import os

import hydraulis
from hydraulis.megatron import MegatronPackingScheduler

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dp", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=200_000)
    a = ap.parse_args()
    profile = hydraulis.load_profile(os.path.join(ROOT, "configs/profiles/llama-32b-a800.json"))
    candidates = hydraulis.load_candidates({
        "format": "hydraulis.candidates/1", "gpus": 8 * a.dp,
        "optimizer_layout": {"dp": a.dp, "tp": 8, "pp": 1},
        "strategies": [{"name": f"{a.dp}xTP8", "pipelines": [{"count": a.dp, "tp": 8}]}]})
    planner = hydraulis.Planner(profile, candidates)
    sampler = hydraulis.BatchSampler(
        hydraulis.read_lengths(os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt")),
        tokens_per_batch=a.tokens, seed=1)
    lengths, dataset_indices = sampler.next()
    samples = list(zip(dataset_indices.tolist(), lengths.tolist()))
    scheduler = MegatronPackingScheduler(planner, dp_size=a.dp)
    groups = scheduler(samples)
    plan = scheduler.last_plan
    print(f"{len(samples)} samples, {int(lengths.sum())} tokens -> {len(groups)} micro-batch "
          f"slots x {a.dp} dp ranks; estimated step {plan.estimated_step_ms:.0f} ms, lower "
          f"bound {plan.lower_bound_ms:.0f} ms")
    for rank, params in enumerate(scheduler.packed_params):
        tokens = [p["total_tokens"] for p in params]
        print(f"  dp rank {rank}: {len(params)} micro-batches, {sum(tokens)} tokens, longest "
              f"sample {max(p['max_seqlen'] for p in params)}, estimated "
              f"{plan.pipelines[rank].estimated_ms:.0f} ms")
    first = groups[0][0]
    print(f"groups[0][0] = sample ids {first[:8]}{' ...' if len(first) > 8 else ''}; its "
          f"cu_seqlens {scheduler.packed_params[0][0]['cu_seqlens'][:5].tolist()} ...")


if __name__ == "__main__":
    main()
