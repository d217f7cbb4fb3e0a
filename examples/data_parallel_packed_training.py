#!/usr/bin/env python3
"""A data-parallel PyTorch loop (DDP or FSDP2) on hydraulis' packed micro-batches.

    .venv/bin/python examples/data_parallel_packed_training.py --wrap fsdp2 [--steps 6]

Two gloo ranks on the CPU train a tiny transformers LlamaForCausalLM (sdpa attention). Each
step hydraulis plans the global batch over two data-parallel pipelines
(`data_parallel_candidates(2)`), and each rank takes its pipeline's micro-batches from
`PackedStepLoader`, packed as transformers' flattening collator packs them; `to_hf_inputs`
keeps the packed documents apart under sdpa. Gradients accumulate over the step's
micro-batches with the synchronisation off until the last (DDP's `no_sync`, FSDP2's
`set_requires_gradient_sync`). Pipelines of one step often hold different numbers of
micro-batches; the loader pads every rank to the same count with empty micro-batches that
cost no loss, so no rank waits in a gradient reduction its peer never joins. One process then
trains the same steps on every pipeline's micro-batches, and the parameters must agree
within 1e-5: the script prints the steps that split unevenly and the worst difference, and
exits 1 when they differ.
"""
import argparse
import gc
import contextlib
import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import transformers

import hydraulis
from hydraulis.torch_data import PackedStepLoader, step_micro_batches, to_hf_inputs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# 4,000-token batches of documents up to 1,024 tokens: most steps split unevenly.
LOADER = dict(tokens_per_batch=4000, max_len=1024, seed=3)


def tiny_llama():
    """A tiny LlamaForCausalLM (sdpa), the same weights on every call."""
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=1, max_position_embeddings=1024)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def token_documents():
    """300 documents of random token ids with the shape of Wikipedia's lengths."""
    lengths = np.loadtxt(os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt"),
                         dtype=np.int64)[:300]
    rng = np.random.default_rng(7)
    return [rng.integers(0, 128, size=int(n) // 2 + 2) for n in lengths]


def loss_sum(model, mb):
    """The micro-batch's summed next-token loss (0 for an empty one)."""
    logits = model(**to_hf_inputs(mb, "sdpa")).logits[0, :-1]
    return torch.nn.functional.cross_entropy(logits.float(), mb["labels"][0, 1:], reduction="sum")


def planner_and_dataset():
    profile = hydraulis.load_profile(os.path.join(ROOT, "configs/profiles/tiny-cpu.json"))
    planner = hydraulis.Planner(profile, hydraulis.data_parallel_candidates(2), max_len=1024)
    return planner, token_documents()


def rank_main(rank, wrap, steps, tmp):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=rank,
                            world_size=2)
    planner, dataset = planner_and_dataset()
    model = tiny_llama()
    if wrap == "ddp":
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
        sync = lambda on: contextlib.nullcontext() if on else wrapped.no_sync()  # noqa: E731
    else:
        from torch.distributed.fsdp import fully_shard
        for layer in model.model.layers:
            fully_shard(layer)
        wrapped = fully_shard(model)

        def sync(on):
            wrapped.set_requires_gradient_sync(on)
            return contextlib.nullcontext()
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-3)
    uneven = 0
    with PackedStepLoader(dataset, planner, pipeline=rank, **LOADER) as loader:
        for _, step in zip(range(steps), loader):
            uneven += len({len(p.micro_batches) for p in step.plan.pipelines}) > 1
            mbs = step.micro_batches
            for i, mb in enumerate(mbs):
                with sync(i == len(mbs) - 1):
                    # The reduction averages over the 2 ranks: times 2 gives the sum, so
                    # the loss is the global batch's mean.
                    (loss_sum(wrapped, mb) * 2 / step.num_targets).backward()
            optimizer.step()
            optimizer.zero_grad()
    params = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
              for p in wrapped.parameters()]
    if rank == 0:
        torch.save({"params": [p.detach() for p in params], "uneven": uneven},
                   os.path.join(tmp, "ranks.pt"))
    # The wrapper goes before the process group: when DDP's reducer drops the group's last
    # reference, torch 2.11 destroys the Gloo group holding the GIL, and a Gloo thread still
    # freeing a finished collective's tensor waits for that GIL forever (pytorch#56297).
    del wrapped, optimizer, model, params, sync
    gc.collect()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wrap", choices=["ddp", "fsdp2"], default="fsdp2")
    p.add_argument("--steps", type=int, default=6)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        torch.multiprocessing.spawn(rank_main, args=(a.wrap, a.steps, tmp), nprocs=2, join=True)
        ranks = torch.load(os.path.join(tmp, "ranks.pt"))
    torch.set_num_threads(1)
    planner, dataset = planner_and_dataset()
    model = tiny_llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with PackedStepLoader(dataset, planner, pipeline=0, **LOADER) as loader:
        for _, step in zip(range(a.steps), loader):
            for pipe in range(len(step.plan.pipelines)):
                for mb in step_micro_batches(step.plan, pipe, dataset, step.dataset_indices):
                    (loss_sum(model, mb) / step.num_targets).backward()
            optimizer.step()
            optimizer.zero_grad()
    diff = max((a_ - b.detach()).abs().max().item()
               for a_, b in zip(ranks["params"], model.parameters()))
    print(f"{a.wrap}: uneven steps: {ranks['uneven']} of {a.steps}; "
          f"max parameter difference from one process {diff:.3g}")
    if diff > 1e-5:
        sys.exit(f"{a.wrap} ranks and one process differ by {diff}")


if __name__ == "__main__":
    main()
