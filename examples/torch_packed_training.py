#!/usr/bin/env python3
"""A plain PyTorch training loop (CPU) on hydraulis' packed micro-batches.

    .venv/bin/python examples/torch_packed_training.py [--steps 5]

The corpus is the repository's own documentation, byte-tokenized (one id per UTF-8 byte),
one document per paragraph. hydraulis plans every step on the tiny CPU profile and its
two 2-rank candidates (TP2, or two TP1 pipelines), and `PackedStepLoader` packs each
pipeline's micro-batches as Hugging Face's flattening collator does. This single process
plays every rank, so it trains on all pipelines' micro-batches of a step: the summed token
losses divided by the step's global target count are the mean over the global batch. The
model is a one-layer causal Transformer whose attention is confined to each document by a
block-diagonal causal mask built from cu_seq_lens. At the first step the script checks
that every logit of the packed micro-batches equals that of its document run alone
(1e-5 absolute), then trains with AdamW and prints the loss per step.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

import hydraulis
from hydraulis.torch_data import PackedStepLoader, collate_packed, step_micro_batches

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


class TinyCausalLM(torch.nn.Module):
    def __init__(self, vocab=256, hidden=64, heads=4, max_positions=4096):
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.position = torch.nn.Embedding(max_positions, hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.out = torch.nn.Linear(hidden, hidden)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(),
                                       torch.nn.Linear(4 * hidden, hidden))
        self.norm1 = torch.nn.LayerNorm(hidden)
        self.norm2 = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, input_ids, position_ids, cu_seq_lens):
        """Logits [tokens, vocab] of one packed row; attention stays inside each document."""
        x = self.embed(input_ids[0]) + self.position(position_ids[0])
        t, h = x.shape
        doc = torch.repeat_interleave(torch.arange(len(cu_seq_lens) - 1),
                                      torch.diff(cu_seq_lens.long()))
        mask = (doc[:, None] == doc[None, :]) & torch.ones(t, t, dtype=torch.bool).tril()
        q, k, v = self.qkv(self.norm1(x)).view(t, 3, self.heads, h // self.heads).unbind(1)
        a = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                           v.transpose(0, 1), attn_mask=mask)
        x = x + self.out(a.transpose(0, 1).reshape(t, h))
        x = x + self.mlp(self.norm2(x))
        return self.head(x)


def loss_sum(model, mb):
    """Summed next-token loss of a packed micro-batch (labels shifted as transformers does)."""
    logits = model(mb["input_ids"], mb["position_ids"], mb["cu_seq_lens_q"])
    return F.cross_entropy(logits[:-1], mb["labels"][0, 1:], ignore_index=-100, reduction="sum")


def check_packing(model, micro_batches):
    """Every logit of the packed micro-batches equals the logit of its document run alone:
    attention, positions and labels are confined to each document."""
    worst = 0.0
    with torch.no_grad():
        for mb in micro_batches:
            packed = model(mb["input_ids"], mb["position_ids"], mb["cu_seq_lens_q"])
            cu = mb["cu_seq_lens_q"].tolist()
            for begin, end in zip(cu[:-1], cu[1:]):
                alone = collate_packed([mb["input_ids"][0, begin:end]])
                logits = model(alone["input_ids"], alone["position_ids"], alone["cu_seq_lens_q"])
                worst = max(worst, (packed[begin:end] - logits).abs().max().item())
    print(f"packed logits against each document run alone: worst difference {worst:.1e}")
    if worst > 1e-5:
        sys.exit("packed and per-document logits differ")


def corpus():
    docs = []
    for name in ("design.md", "runtime.md", "python.md"):
        with open(os.path.join(ROOT, "docs", name), encoding="utf-8") as f:
            docs += [list(p.encode()) for p in f.read().split("\n\n") if len(p.encode()) >= 2]
    return docs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    torch.manual_seed(0)
    dataset = corpus()
    planner = hydraulis.Planner(
        hydraulis.load_profile(os.path.join(ROOT, "configs/profiles/tiny-cpu.json")),
        hydraulis.load_candidates(os.path.join(ROOT, "configs/candidates/cpu-2rank.json")),
        max_len=1024)
    model = TinyCausalLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    with PackedStepLoader(dataset, planner, pipeline=0, tokens_per_batch=8192, max_len=1024,
                          seed=1) as loader:
        for step, batches in zip(range(a.steps), loader):
            plan = batches.plan
            micro_batches = [mb for p in range(len(plan.pipelines))
                             for mb in step_micro_batches(plan, p, dataset,
                                                          batches.dataset_indices)]
            optimizer.zero_grad()
            total = sum(loss_sum(model, mb) for mb in micro_batches)
            loss = total / batches.num_targets
            if step == 0:
                check_packing(model, micro_batches)
            loss.backward()
            optimizer.step()
            print(f"step {step}: strategy {plan.strategy}, {len(plan.lengths)} documents, "
                  f"{len(micro_batches)} micro-batches, {batches.num_targets} targets, "
                  f"loss {loss.item():.4f}, waited {loader.waited_ms:.1f} ms for the plan")


if __name__ == "__main__":
    main()
