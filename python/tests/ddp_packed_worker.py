"""Two gloo ranks train a tiny transformers LlamaForCausalLM under DDP on PackedStepLoader's
micro-batches (each rank its pipeline of a two-pipeline data-parallel strategy), with
gradient accumulation under no_sync; one process then trains the same steps on every
pipeline's micro-batches, and the parameters must agree (1e-5). Steps whose pipelines hold
different numbers of micro-batches would leave one rank waiting in DDP's all-reduce without
the loader's placeholders.

    python ddp_packed_worker.py TMPDIR   (run by test_torch_data.py)
"""
import contextlib
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import transformers

import hydraulis
from hydraulis.torch_data import PackedStepLoader, step_micro_batches, to_hf_inputs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STEPS = 6
LOADER = dict(tokens_per_batch=4000, max_len=1024, seed=3)  # most steps split unevenly


def model_and_optimizer():
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1, max_position_embeddings=1024)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def loss_sum(model, mb):
    logits = model(**to_hf_inputs(mb, "sdpa")).logits[0, :-1]
    return torch.nn.functional.cross_entropy(logits.float(), mb["labels"][0, 1:], reduction="sum")


def inputs():
    profile = hydraulis.load_profile(os.path.join(ROOT, "configs/profiles/tiny-cpu.json"))
    planner = hydraulis.Planner(profile, hydraulis.data_parallel_candidates(2), max_len=1024)
    lengths = np.loadtxt(os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt"),
                         dtype=np.int64)[:300]
    rng = np.random.default_rng(7)
    dataset = [rng.integers(0, 128, size=int(n) // 2 + 2) for n in lengths]
    return planner, dataset


def rank_main(rank, tmp):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=rank,
                            world_size=2)
    planner, dataset = inputs()
    model, optimizer = model_and_optimizer()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    uneven = 0
    with PackedStepLoader(dataset, planner, pipeline=rank, **LOADER) as loader:
        for _, step in zip(range(STEPS), loader):
            counts = [len(p.micro_batches) for p in step.plan.pipelines]
            uneven += len(set(counts)) > 1
            mbs = step.micro_batches
            for i, mb in enumerate(mbs):
                # DDP averages over the ranks: times 2 gives the sum, the global mean loss.
                sync = contextlib.nullcontext() if i == len(mbs) - 1 else ddp.no_sync()
                with sync:
                    (loss_sum(ddp, mb) * 2 / step.num_targets).backward()
            optimizer.step()
            optimizer.zero_grad()
    if rank == 0:
        torch.save({"params": [p.detach() for p in model.parameters()], "uneven": uneven},
                   os.path.join(tmp, "ddp.pt"))
    dist.destroy_process_group()


def main():
    tmp = sys.argv[1]
    torch.multiprocessing.spawn(rank_main, args=(tmp,), nprocs=2, join=True)
    torch.set_num_threads(1)
    planner, dataset = inputs()
    model, optimizer = model_and_optimizer()
    with PackedStepLoader(dataset, planner, pipeline=0, **LOADER) as loader:
        for _, step in zip(range(STEPS), loader):
            for p in range(len(step.plan.pipelines)):
                for mb in step_micro_batches(step.plan, p, dataset, step.dataset_indices):
                    (loss_sum(model, mb) / step.num_targets).backward()
            optimizer.step()
            optimizer.zero_grad()
    ddp = torch.load(os.path.join(tmp, "ddp.pt"))
    diff = max((a - b.detach()).abs().max().item()
               for a, b in zip(ddp["params"], model.parameters()))
    print(f"uneven steps: {ddp['uneven']} of {STEPS}; max parameter difference {diff:.3g}")
    if ddp["uneven"] == 0:
        sys.exit("no step split unevenly: the case does not test the placeholders")
    if diff > 1e-5:
        sys.exit(f"DDP ranks and one process differ by {diff}")


if __name__ == "__main__":
    main()
