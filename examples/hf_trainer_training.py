#!/usr/bin/env python3
"""A transformers.Trainer on hydraulis' balanced steps: `BalancedTrainer` in place of `Trainer`.

    .venv/bin/python examples/hf_trainer_training.py [--steps 10] [--profile-scale 1]

Two gloo ranks on the CPU train a tiny LlamaForCausalLM (sdpa attention) with
`hydraulis.hf.BalancedTrainer` under DDP: each step hydraulis draws a global batch of
documents, plans it over the two ranks, and each rank trains its share as packed
micro-batches, as many on both ranks (steps whose plan gives the ranks unequal counts
are padded with empty micro-batches), and the cost model is calibrated from the measured
steps (the shipped tiny-cpu profile is another model's, so the first refit is adopted within
a few steps and plans the later ones: the ranks must still plan the same steps, which the
script checks; `--profile-scale 3` starts from the profile's times made 3x too slow, a model
so far off that the first refit replaces it however noisy the machine). One process then trains the same global batches with
plain PyTorch (AdamW, gradients clipped to a global norm below theirs), and the per-step losses and
the final parameters must agree within 1e-5: the script prints the steps that split
unevenly and the worst differences, and exits 1 when they differ.
"""
import argparse
import gc
import hashlib
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import transformers

import hydraulis
from hydraulis.hf import BalancedTrainer
from hydraulis.torch_data import PackedStepLoader, step_micro_batches, to_hf_inputs

# The model and documents of the DDP/FSDP2 example beside this one.
from data_parallel_packed_training import tiny_llama, token_documents

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROFILE = os.path.join(ROOT, "configs/profiles/tiny-cpu.json")
# 4,000-token batches of documents up to 1,024 tokens: most steps split unevenly.
TOKENS_PER_BATCH, MAX_LEN, SEED, LR = 4000, 1024, 3, 1e-3
# Below the gradients' norm (about 0.13 here), so every step clips by the global norm.
CLIP = 0.05


def documents():
    """The DDP example's documents as a Trainer dataset of feature dicts."""
    return [{"input_ids": d.tolist()} for d in token_documents()]


class RecordingTrainer(BalancedTrainer):
    """Keeps a digest of each step's plan, to check that the ranks planned the same steps."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.plans = []

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.plans.append(hashlib.sha256(inputs["plan"].to_json().encode()).hexdigest())
        return super().training_step(model, inputs, num_items_in_batch)


def load_profile(scale):
    """The shipped tiny-cpu profile, its time terms multiplied by `scale`."""
    with open(PROFILE) as f:
        profile = json.load(f)
    for scheme in profile["schemes"]:
        for term in ("a_ms_per_token2", "b_ms_per_token", "c_ms"):
            scheme[term] *= scale
    return hydraulis.load_profile(profile)


def rank_main(rank, steps, scale, tmp):
    # One thread per rank: with OMP_NUM_THREADS unset, accelerate gives each process two.
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=open(f"{tmp}/port").read(),
                      OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    args = transformers.TrainingArguments(
        output_dir=f"{tmp}/out", max_steps=steps, learning_rate=LR, lr_scheduler_type="constant",
        optim="adamw_torch", weight_decay=0.0, max_grad_norm=CLIP, logging_steps=1,
        save_strategy="no", report_to=[], use_cpu=True, seed=SEED, disable_tqdm=True,
        ddp_find_unused_parameters=False)
    trainer = RecordingTrainer(model=tiny_llama(), args=args, train_dataset=documents(),
                               profile=load_profile(scale),
                               tokens_per_batch=TOKENS_PER_BATCH, max_len=MAX_LEN,
                               lookahead=1)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    torch.save({"losses": losses, "plans": trainer.plans, "step_times": trainer.step_times,
                "fits_planning": trainer.fits_planning,
                "params": [p.detach().clone() for p in trainer.model.parameters()]},
               f"{tmp}/rank{rank}.pt")
    # The DDP wrapper goes before the process group: when its reducer drops the group's last
    # reference, torch 2.11 destroys the Gloo group holding the GIL, and a Gloo thread still
    # freeing a finished collective's tensor waits for that GIL forever (pytorch#56297).
    del trainer
    gc.collect()
    dist.destroy_process_group()


def one_process(steps):
    """The same global batches trained by one process: every pipeline's micro-batches,
    each micro-batch's summed loss over the global batch's targets, then clip and step."""
    torch.set_num_threads(1)
    data = [d["input_ids"] for d in documents()]
    planner = hydraulis.Planner(hydraulis.load_profile(PROFILE),
                                hydraulis.data_parallel_candidates(2), max_len=MAX_LEN)
    model = tiny_llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    losses, uneven = [], 0
    with PackedStepLoader(data, planner, pipeline=0, tokens_per_batch=TOKENS_PER_BATCH,
                          max_len=MAX_LEN, seed=SEED) as loader:
        for _, step in zip(range(steps), loader):
            uneven += len({len(p.micro_batches) for p in step.plan.pipelines}) > 1
            total = 0.0
            for pipe in range(len(step.plan.pipelines)):
                for mb in step_micro_batches(step.plan, pipe, data, step.dataset_indices):
                    logits = model(**to_hf_inputs(mb, "sdpa")).logits[0, :-1]
                    loss = torch.nn.functional.cross_entropy(
                        logits.float(), mb["labels"][0, 1:], reduction="sum") / step.num_targets
                    loss.backward()
                    total += loss.item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(total)
    return losses, [p.detach() for p in model.parameters()], uneven


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--profile-scale", type=float, default=1.0)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with open(f"{tmp}/port", "w") as f:
            f.write(free_port())
        torch.multiprocessing.spawn(rank_main, args=(a.steps, a.profile_scale, tmp), nprocs=2, join=True)
        ranks, other = (torch.load(f"{tmp}/rank{r}.pt") for r in (0, 1))
    losses, params, uneven = one_process(a.steps)
    if ranks["plans"] != other["plans"]:
        sys.exit("the two ranks planned different steps")
    errors = [abs(p - m) / m for _, p, m, _ in ranks["step_times"]]
    calibrated = [s for s, _ in ranks["fits_planning"] if s < a.steps]
    if len(ranks["losses"]) != a.steps:
        sys.exit(f"the Trainer logged {len(ranks['losses'])} losses for {a.steps} steps")
    loss_diff = max(abs(x - y) for x, y in zip(ranks["losses"], losses))
    param_diff = max((x - y).abs().max().item() for x, y in zip(ranks["params"], params))
    print(f"BalancedTrainer, 2 ranks: uneven steps: {uneven} of {a.steps}; losses "
          f"{', '.join(f'{x:.5f}' for x in ranks['losses'])}; max loss difference from one "
          f"process {loss_diff:.3g}; max parameter difference {param_diff:.3g}; ranks' plans "
          f"equal; calibrated fits planned from steps {calibrated}; prediction error first "
          f"{errors[0]:.0%}, last {errors[-1]:.0%}")
    if loss_diff > 1e-5 or param_diff > 1e-5:
        sys.exit(f"the Trainer's ranks and one process differ: losses by {loss_diff}, "
                 f"parameters by {param_diff}")


if __name__ == "__main__":
    main()
