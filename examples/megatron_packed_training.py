#!/usr/bin/env python3
"""hydraulis' packing scheduler inside megatron-core's own training step, against
Megatron's usual split of a global batch.

    .venv/bin/python examples/megatron_packed_training.py [--dp 2] [--pp 1|2] [--steps 4]

dp x pp gloo ranks train the small causal transformer of
examples/megatron_hybrid_cp_training.py with megatron-core's own schedule
(`forward_backward_no_pipelining`, or with --pp 2 the 1F1B
`forward_backward_pipelining_without_interleaving`, each micro-batch's shape sent ahead as
`variable_seq_lengths` asks), `DistributedDataParallel`, `finalize_model_grads` (loss per
token) and optimizer. Each step's global batch of documents (random tokens with the shape
of Wikipedia's lengths) is split into micro-batches of packed documents (cu_seqlens, each
document attending only to itself) two ways:

- hydraulis: `MegatronPackingScheduler` plans the batch over dp pipelines of pp stages under
  the CPU profile (configs/profiles/tiny-cpu.json), `groups[micro_batch][dp_rank]`;
- Megatron's usual split: each data-parallel rank takes an equal, consecutive share of the
  documents and packs them in order into micro-batches of at most --max-len tokens.

Megatron runs the same number of micro-batches on every rank, so ranks with fewer get empty
ones (no tokens, no loss). Both runs must equal one process training on the same documents,
each whole, within 1e-5 (exit 1 otherwise); the script prints each split's balance (the
data-parallel ranks' largest estimated work over their mean, under the profile's time model)
and the steps' estimated time (the largest rank's work, summed over the steps).
Megatron-core's CUDA allocations run on the CPU (`CudaOnCpu`, as in the hybrid example).
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from megatron_hybrid_cp_training import (HEADS, HIDDEN, LAYERS, VOCAB,  # noqa: E402
                                         cuda_on_cpu, distance, finish,
                                         megatron_model_and_optimizer, megatron_step,
                                         packed_sample, run_line, train_in_one_process)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROFILE = os.path.join(ROOT, "configs", "profiles", "tiny-cpu.json")
DOCUMENTS_PER_STEP = 24


def step_documents(steps, max_len):
    """Per step, the global batch's documents (random tokens), Wikipedia's length shape."""
    lengths = np.loadtxt(os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt"),
                         dtype=np.int64)
    rng = np.random.default_rng(5)
    return [[rng.integers(0, VOCAB, size=int(n))
             for n in np.clip(rng.choice(lengths, size=DOCUMENTS_PER_STEP) // 6, 4, max_len)]
            for _ in range(steps)]


def hydraulis_split(docs, dp, pp, max_len):
    """groups[micro_batch][dp_rank] -> document indices, from the hydraulis planner over
    dp pipelines of pp stages, micro-batches of at most about max_len tokens as Megatron's."""
    import hydraulis
    from hydraulis.megatron import MegatronPackingScheduler, profile_for_seq_length
    planner = hydraulis.Planner(profile_for_seq_length(PROFILE, max_len, pp=pp),
                                hydraulis.data_parallel_candidates(dp * pp, pp=pp),
                                max_len=max_len)
    return MegatronPackingScheduler(planner, dp_size=dp)(
        [(i, len(d)) for i, d in enumerate(docs)])


def megatron_split(docs, dp, pp, max_len):
    """Equal consecutive shares, packed in order up to max_len tokens per micro-batch,
    every data-parallel rank padded to the same number of micro-batches."""
    shares = np.array_split(np.arange(len(docs)), dp)
    per_rank = []
    for share in shares:
        micro_batches, current, tokens = [], [], 0
        for i in share.tolist():
            if current and tokens + len(docs[i]) > max_len:
                micro_batches.append(current)
                current, tokens = [], 0
            current.append(i)
            tokens += len(docs[i])
        per_rank.append(micro_batches + [current])
    count = max(len(m) for m in per_rank)
    return [[m[g] if g < len(m) else [] for m in per_rank] for g in range(count)]


def split_of(name):
    return hydraulis_split if name == "hydraulis" else megatron_split


def micro_batch_sample(docs):
    """A packed micro-batch as Megatron's packed-sequence data gives it; an empty one has
    no rows."""
    if not docs:
        empty = torch.zeros(0, dtype=torch.int64)
        return {"tokens": empty, "labels": empty, "loss_mask": torch.zeros(0),
                "position_ids": empty, "segments": empty}
    sample = packed_sample(docs)
    sample["segments"] = torch.repeat_interleave(torch.arange(len(docs)),
                                                 torch.tensor([len(d) for d in docs]))
    return sample


def forward_step(data_iterator, model):
    """Megatron's forward_step_func on one packed micro-batch; a stage before the last
    returns its hidden rows for megatron-core to send on."""
    sample = next(data_iterator)
    output = model(sample["tokens"], sample["position_ids"], segments=sample["segments"])
    if not model.module.last:
        return output, None
    losses = torch.nn.functional.cross_entropy(output, sample["labels"].long(),
                                               reduction="none")
    mask = sample["loss_mask"]

    def loss_func(output):
        total = (output * mask).sum()
        count = mask.sum().int()
        return total, count, {"lm loss": torch.stack([total.detach(), count.float()])}

    return losses, loss_func


def rank_main(rank, dp, pp, steps, max_len, name, tmp):
    from megatron.core import parallel_state
    from megatron.core.transformer import TransformerConfig
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous-{name}", rank=rank,
                            world_size=dp * pp)
    with cuda_on_cpu():
        parallel_state.initialize_model_parallel(pipeline_model_parallel_size=pp)
        stage = parallel_state.get_pipeline_model_parallel_rank()
        dp_rank = parallel_state.get_data_parallel_rank()
        # Packed micro-batches differ in length: megatron-core sends each one's shape first.
        config = TransformerConfig(num_layers=LAYERS, hidden_size=HIDDEN,
                                   num_attention_heads=HEADS, calculate_per_token_loss=True,
                                   pipeline_model_parallel_size=pp, variable_seq_lengths=pp > 1,
                                   pipeline_dtype=torch.float32, use_cpu_initialization=True,
                                   moe_token_dispatcher_type="alltoall")  # no MoE; it checks
        model, optimizer = megatron_model_and_optimizer(config, max_len, stage, pp)
        losses, splits = [], []
        for docs in step_documents(steps, max_len):
            groups = split_of(name)(docs, dp, pp, max_len)
            splits.append(groups)
            data = iter([micro_batch_sample([docs[i] for i in g[dp_rank]]) for g in groups])
            losses.append(megatron_step(model, optimizer, data, len(groups), forward_step,
                                        max_len))
        parameters = {n: p.detach().tolist() for n, p in model.module.named_parameters()}
    with open(os.path.join(tmp, f"{name}-{rank}.json"), "w") as f:
        json.dump({"losses": losses, "parameters": parameters, "splits": splits}, f)
    dist.barrier()
    dist.destroy_process_group()


def gathered_run(tmp, name, ranks):
    """Rank 0's losses and splits, and every rank's parameters (each stage holds its own;
    data-parallel replicas hold the same)."""
    runs = []
    for rank in range(ranks):
        with open(os.path.join(tmp, f"{name}-{rank}.json")) as f:
            runs.append(json.load(f))
    run = runs[0]
    for other in runs[1:]:
        run["parameters"].update(other["parameters"])
    return run


def rank_work(splits, steps, pp, max_len):
    """Per step, each data-parallel rank's estimated work in ms: each micro-batch
    a * sum(s^2) + b * sum(s) + c under the profile's <1, 1, pp> scheme, an empty one
    nothing."""
    with open(PROFILE) as f:
        scheme = next(s for s in json.load(f)["schemes"]
                      if (s["cp"], s["tp"], s["pp"]) == (1, 1, pp))
    out = []
    for docs, groups in zip(step_documents(steps, max_len), splits):
        work = [0.0] * len(groups[0])
        for group in groups:
            for r, ids in enumerate(group):
                if ids:
                    s = np.array([len(docs[i]) for i in ids], dtype=np.float64)
                    work[r] += (scheme["a_ms_per_token2"] * (s * s).sum()
                                + scheme["b_ms_per_token"] * s.sum() + scheme["c_ms"])
        out.append(work)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dp", type=int, default=2, help="data-parallel ranks")
    parser.add_argument("--pp", type=int, choices=[1, 2], default=1, help="pipeline stages")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    reference_losses, reference = train_in_one_process(
        step_documents(args.steps, args.max_len), args.max_len)
    report, worst = {"one_process_losses": reference_losses}, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("megatron", "hydraulis"):
            mp.spawn(rank_main, args=(args.dp, args.pp, args.steps, args.max_len, name, tmp),
                     nprocs=args.dp * args.pp)
            run = gathered_run(tmp, name, args.dp * args.pp)
            loss_diff, param_diff = distance(run, reference_losses, reference)
            worst = max(worst, loss_diff, param_diff)
            counts = [[sum(1 for ids in g if ids) for g in zip(*groups)]
                      for groups in run["splits"]]
            work = rank_work(run["splits"], args.steps, args.pp, args.max_len)
            report[name] = {"losses": run["losses"], "loss_diff": loss_diff,
                            "parameter_diff": param_diff,
                            "balance": [max(w) / (sum(w) / len(w)) for w in work],
                            "step_ms": [max(w) for w in work],
                            "micro_batches_per_rank": counts}
            print(f"{run_line(name + ' split', report[name])}; estimated step "
                  f"{sum(report[name]['step_ms']):.0f} ms in all; non-empty micro-batches per "
                  f"rank {counts}")
    return finish(report, worst, args.json, "splits")


if __name__ == "__main__":
    sys.exit(main())
