#!/usr/bin/env python3
"""Megatron-LM's own hybrid context-parallel training step, scheduled by megatron-core's
BalancedCPScheduler or by hydraulis' drop-in, against one process.

    .venv/bin/python examples/megatron_hybrid_cp_training.py [--ranks 4] [--steps 4]

Four gloo ranks form megatron-core's data x context-parallel pool
(`parallel_state.initialize_model_parallel(hybrid_context_parallel=True)`). Every step,
megatron-core's `HybridCPDataLoaderWrapper` gathers the ranks' documents, asks its
scheduler for groups, and reroutes each document to its ranks; megatron-core's
`forward_backward_no_pipelining` (which hands a hybrid-CP config to
`hybrid_context_parallel_forward_backward`) runs every document on `local_cp_size` ranks;
megatron-core's `DistributedDataParallel`, `finalize_model_grads` (loss per token) and
optimizer finish the step. The model is a small causal transformer written here: megatron's
own attention cannot run packed documents without TransformerEngine, so its attention
shards a document over its `local_cp_size` ranks as Megatron does (2k chunks, rank r
holding chunks r and 2k-1-r) and gathers keys and values in the document's hybrid group.

The run is repeated with `hydraulis.megatron.BalancedCPScheduler` in the wrapper's place of
megatron-core's own (the two-line change docs/integrations.md shows). Both runs' losses and
final parameters must equal one process training the same model on the same documents,
each whole, within 1e-5; the script prints each scheduler's step balance under the
drop-in's cost model (max over mean of the ranks' work) and exits 1 on a mismatch.

megatron-core 0.16.1 allocates on CUDA in its schedule, data wrapper, point-to-point sends
and DDP buffers (`device="cuda"`, `.cuda()`, `torch.cuda.current_device()`) and calls
`torch.cuda.synchronize()` around its sends; the script runs them under `CudaOnCpu`, a
TorchFunctionMode that puts those tensors on the CPU, with `current_device` answering the
CPU and `synchronize` doing nothing. Nothing else of megatron-core is replaced.
"""
import argparse
import collections
import json
import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.overrides import TorchFunctionMode

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
VOCAB, HIDDEN, HEADS, LAYERS = 64, 32, 4, 2
MAX_TOKENS_PER_RANK = 48  # max_seqlen_per_dp_cp_rank: longer documents need 2 or 4 ranks
LR, MOMENTUM = 0.05, 0.9  # SGD: parameters follow the gradients linearly


class CudaOnCpu(TorchFunctionMode):
    """Puts the tensors megatron-core allocates on CUDA on the CPU instead."""

    @staticmethod
    def _device(device):
        if isinstance(device, int) or (device is not None and torch.device(device).type == "cuda"):
            return torch.device("cpu")
        return device

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if "device" in kwargs:
            kwargs["device"] = self._device(kwargs["device"])
        if func is torch.Tensor.to and len(args) > 1 and isinstance(args[1], (str, int,
                                                                            torch.device)):
            args = (args[0], self._device(args[1])) + tuple(args[2:])
        return func(*args, **kwargs)


def cuda_on_cpu():
    """Megatron-core's CUDA tensors, current device and synchronisation, on the CPU."""
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.cuda.synchronize = lambda device=None: None
    return CudaOnCpu()


class GatherRows(torch.autograd.Function):
    """Every rank's rows, concatenated in rank order, with the gradient summed back."""

    @staticmethod
    def forward(ctx, rows, group, counts):
        ctx.group, ctx.counts = group, counts
        rank = dist.get_rank(group)
        padded = torch.zeros((max(counts),) + rows.shape[1:], dtype=rows.dtype)
        padded[:rows.shape[0]] = rows
        parts = [torch.empty_like(padded) for _ in counts]
        dist.all_gather(parts, padded.contiguous(), group=group)
        ctx.start = sum(counts[:rank])
        return torch.cat([p[:c] for p, c in zip(parts, counts)])

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        rank = dist.get_rank(ctx.group)
        return grad[ctx.start:ctx.start + ctx.counts[rank]], None, None


def shard_positions(length, k):
    """The positions each of k ranks holds: 2k chunks, rank r holding chunks r and
    2k-1-r (Megatron's load-balanced causal split; chunks differ by at most one token)."""
    chunks = np.array_split(np.arange(length), 2 * k)
    return [np.concatenate([chunks[r], chunks[2 * k - 1 - r]]) for r in range(k)]


def rms_norm(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def attention(q, k, v, positions, key_positions, segments):
    """Causal attention of the rows at `positions` over the keys at `key_positions`;
    with `segments`, packed documents see only themselves."""
    allowed = key_positions[None, :] <= positions[:, None]
    if segments is not None:
        allowed &= segments[None, :] == segments[:, None]
    scores = torch.einsum("qhd,khd->hqk", q, k) / (HIDDEN // HEADS) ** 0.5
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return torch.einsum("hqk,khd->qhd", weights, v).reshape(len(q), HIDDEN)


class Block(torch.nn.Module):
    """A pre-norm attention and MLP block."""

    def __init__(self):
        super().__init__()
        self.norms = torch.nn.Parameter(1 + 0.1 * torch.randn(2, HIDDEN))
        self.qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.up = torch.nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = torch.nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x, positions, shards, group, segments):
        q, k, v = self.qkv(rms_norm(x, self.norms[0])).view(len(x), 3, HEADS,
                                                             HIDDEN // HEADS).unbind(1)
        key_positions = positions
        if group is not None:
            counts = [len(s) for s in shards]
            k = GatherRows.apply(k, group, counts)
            v = GatherRows.apply(v, group, counts)
            key_positions = torch.from_numpy(np.concatenate(shards))
        x = x + self.proj(attention(q, k, v, positions, key_positions, segments))
        return x + self.down(torch.nn.functional.gelu(self.up(rms_norm(x, self.norms[1]))))


def make_model_class():
    from megatron.core.enums import ModelType
    from megatron.core.transformer.module import MegatronModule

    class TinyCausalTransformer(MegatronModule):
        """Learned positions, LAYERS blocks, an output layer. Called on one document (its
        rows `positions` on this rank, the others' in `group`) or on packed documents
        (`segments` numbers each row's document). As pipeline stage `stage` of `stages`
        it holds only that stage's part, with the same values as the whole model's."""

        def __init__(self, config, max_len, stage=0, stages=1):
            super().__init__(config)
            self.model_type = ModelType.encoder_or_decoder
            torch.manual_seed(0)
            embed = torch.nn.Embedding(VOCAB, HIDDEN)
            pos = torch.nn.Embedding(max_len, HIDDEN)
            blocks = [Block() for _ in range(LAYERS)]
            final_norm = torch.nn.Parameter(torch.ones(HIDDEN))
            out = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
            self.first, self.last = stage == 0, stage == stages - 1
            # What megatron-core's finalize_model_grads asks of a GPT-like model: no weight
            # shared between the first and the last stage.
            self.pre_process, self.post_process = self.first, self.last
            self.share_embeddings_and_output_weights = False
            per_stage = LAYERS // stages
            self.blocks = torch.nn.ModuleDict(
                {str(i): blocks[i] for i in range(stage * per_stage, (stage + 1) * per_stage)})
            if self.first:
                self.embed, self.pos = embed, pos
            if self.last:
                self.final_norm, self.out = final_norm, out
            self.input_tensor = None

        def set_input_tensor(self, tensor):
            """Megatron's pipeline hook: the previous stage's output, [rows, 1, hidden]."""
            self.input_tensor = tensor[0] if isinstance(tensor, list) else tensor

        def forward(self, tokens, positions, shards=None, group=None, segments=None):
            if self.first:
                x = self.embed(tokens) + self.pos(positions)
            else:
                x = self.input_tensor[:, 0]
            for block in self.blocks.values():
                x = block(x, positions, shards, group, segments)
            if self.last:
                return self.out(rms_norm(x, self.final_norm))
            return x[:, None]

    return TinyCausalTransformer


def documents(ranks, steps):
    """Per step, per data-parallel rank: a list of documents (random tokens) with the shape
    of Wikipedia's lengths, scaled so some need 2 or 4 ranks."""
    lengths = np.loadtxt(os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt"),
                         dtype=np.int64)
    rng = np.random.default_rng(11)
    per_rank = 6
    out = []
    for step in range(steps):
        picked = rng.choice(lengths, size=ranks * per_rank)
        sizes = np.clip(picked // 24, 4, ranks * MAX_TOKENS_PER_RANK - 8)
        docs = [rng.integers(0, VOCAB, size=int(n)) for n in sizes]
        out.append([docs[r * per_rank:(r + 1) * per_rank] for r in range(ranks)])
    return out


def packed_sample(docs):
    """One packed sample as megatron's GPT dataset gives it (cu_seqlens between documents);
    the last token of each document has no target."""
    tokens = np.concatenate(docs)
    labels = np.concatenate([np.append(d[1:], 0) for d in docs])
    mask = np.concatenate([np.append(np.ones(len(d) - 1), 0) for d in docs])
    positions = np.concatenate([np.arange(len(d)) for d in docs])
    cu = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
    return {"tokens": torch.from_numpy(tokens), "labels": torch.from_numpy(labels),
            "loss_mask": torch.from_numpy(mask).float(),
            "position_ids": torch.from_numpy(positions),
            "cu_seqlens": torch.from_numpy(cu).int()}


def forward_step(data_iterator, model):
    """Megatron's forward_step_func: this rank's shard of one document (local_cp_size ranks
    share it), its summed loss and its target count."""
    from megatron.core import parallel_state
    sample = next(data_iterator)
    k = int(sample["local_cp_size"])
    length = len(sample["tokens"])
    shards = shard_positions(length, k)
    group = None
    mine = shards[0]
    if k > 1:
        group = parallel_state.get_hybrid_data_context_parallel_groups(group_size=k)
        mine = shards[dist.get_rank(group)]
    index = torch.from_numpy(mine)
    positions = sample["position_ids"][index]
    logits = model(sample["tokens"][index], positions, shards if k > 1 else None, group)
    losses = torch.nn.functional.cross_entropy(logits, sample["labels"][index].long(),
                                               reduction="none")
    mask = sample["loss_mask"][index]

    def loss_func(output):
        total = (output * mask).sum()
        count = mask.sum().int()
        return total, count, {"lm loss": torch.stack([total.detach(), count.float()])}

    return losses, loss_func


def scheduler_class(name):
    if name == "megatron":
        from megatron.core.pipeline_parallel.hybrid_cp_schedule import BalancedCPScheduler
        return BalancedCPScheduler
    from hydraulis.megatron import BalancedCPScheduler
    return BalancedCPScheduler


class RecordingScheduler:
    """Wraps a scheduler class to keep each batch's schedule for the balance report."""

    def __init__(self, inner):
        self.inner, self.schedules = inner, []

    def __call__(self, *args, **kwargs):
        scheduler = self.inner(*args, **kwargs)
        schedule = scheduler.get_groups_and_subsamples

        def get_groups_and_subsamples(sample_id_seqlens, config=None):
            groups, sample_id_groups = schedule(sample_id_seqlens, config)
            self.schedules.append((list(sample_id_seqlens), sample_id_groups))
            return groups, sample_id_groups

        scheduler.get_groups_and_subsamples = get_groups_and_subsamples
        return scheduler


def rank_main(rank, ranks, steps, name, tmp):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous-{name}", rank=rank,
                            world_size=ranks)
    with cuda_on_cpu():
        results = train_with_megatron(rank, ranks, steps, name)
    if rank == 0:
        with open(os.path.join(tmp, f"{name}.json"), "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def megatron_model_and_optimizer(config, max_len, stage=0, stages=1):
    """The model (pipeline stage `stage` of `stages`) under megatron-core's
    DistributedDataParallel, its gradient hooks wired into `config` as Megatron's training
    loop wires them, and megatron-core's optimizer."""
    from megatron.core.distributed import (DistributedDataParallel,
                                           DistributedDataParallelConfig, finalize_model_grads)
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    model = make_model_class()(config, max_len, stage, stages)
    model = DistributedDataParallel(config, DistributedDataParallelConfig(), model)
    config.no_sync_func = model.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="sgd", lr=LR, sgd_momentum=MOMENTUM, weight_decay=0.0,
                        clip_grad=0.0), [model])
    return model, optimizer


def megatron_step(model, optimizer, data_iterator, num_microbatches, step_func, seq_length=0):
    """One training step through megatron-core's schedule (pipelined when the model has
    pipeline stages); the step's loss per target, summed over every rank's micro-batches."""
    from megatron.core.pipeline_parallel import get_forward_backward_func
    model.zero_grad_buffer()
    optimizer.zero_grad()
    stored = get_forward_backward_func()(
        forward_step_func=step_func, data_iterator=data_iterator, model=[model],
        num_microbatches=num_microbatches, seq_length=seq_length, micro_batch_size=1)
    total = torch.stack([s["lm loss"] for s in stored]).sum(0) if stored else torch.zeros(2)
    dist.all_reduce(total)
    optimizer.step()
    return float(total[0] / total[1])


def train_with_megatron(rank, ranks, steps, name):
    from megatron.core import parallel_state
    from megatron.core.datasets import data_schedule
    from megatron.core.transformer import TransformerConfig

    parallel_state.initialize_model_parallel(hybrid_context_parallel=True)
    recorder = RecordingScheduler(scheduler_class(name))
    data_schedule.BalancedCPScheduler = recorder
    config = TransformerConfig(num_layers=LAYERS, hidden_size=HIDDEN,
                               num_attention_heads=HEADS, hybrid_context_parallel=True,
                               max_seqlen_per_dp_cp_rank=MAX_TOKENS_PER_RANK,
                               calculate_per_token_loss=True, use_cpu_initialization=True)
    model, optimizer = megatron_model_and_optimizer(config, ranks * MAX_TOKENS_PER_RANK)
    batches = documents(ranks, steps)
    losses = []
    for step in range(steps):
        data = data_schedule.HybridCPDataLoaderWrapper(
            iter([[packed_sample(batches[step][rank])]]), config)
        losses.append(megatron_step(model, optimizer, data, 1, forward_step))
    parameters = {n: p.detach().tolist() for n, p in model.module.named_parameters()}
    return {"losses": losses, "parameters": parameters, "schedules": recorder.schedules}


def train_in_one_process(step_documents, max_len):
    """The same model and optimizer on every step's documents (a list per step), each
    whole; returns the per-step losses (mean over targets) and the final parameters."""
    from megatron.core.transformer import TransformerConfig
    config = TransformerConfig(num_layers=LAYERS, hidden_size=HIDDEN,
                               num_attention_heads=HEADS, use_cpu_initialization=True)
    model = make_model_class()(config, max_len)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for docs in step_documents:
        optimizer.zero_grad()
        total = torch.zeros(())
        targets = sum(len(d) - 1 for d in docs)
        for d in docs:
            tokens = torch.from_numpy(d)
            logits = model(tokens, torch.arange(len(d)))
            total = total + torch.nn.functional.cross_entropy(logits[:-1], tokens[1:].long(),
                                                              reduction="sum")
        (total / targets).backward()
        optimizer.step()
        losses.append(float(total / targets))
    return losses, {n: p.detach() for n, p in model.named_parameters()}


def distance(run, reference_losses, reference):
    """The largest loss and parameter differences of a run from one process's."""
    if set(run["parameters"]) != set(reference):
        raise RuntimeError(f"the run's parameters {sorted(run['parameters'])} are not the "
                           f"model's {sorted(reference)}")
    loss_diff = max(abs(a - b) for a, b in zip(run["losses"], reference_losses))
    param_diff = max(float((torch.tensor(v) - reference[n]).abs().max())
                     for n, v in run["parameters"].items())
    return loss_diff, param_diff


def local_cp_sizes(sample_id_groups):
    """Each sample's local_cp_size: how many ranks run it (a sample runs in one group)."""
    return collections.Counter(sid for group in sample_id_groups for ids in group for sid in ids)


def balance(schedules):
    """Per step, the ranks' largest work over their mean, work being each rank's summed
    sample time under the drop-in's default cost model (hydraulis.megatron.BlockCosts)."""
    from hydraulis.megatron import BlockCosts
    costs = BlockCosts.default()
    out = []
    for sample_id_seqlens, sample_id_groups in schedules:
        seqlen = dict(sample_id_seqlens)
        k = local_cp_sizes(sample_id_groups)
        work = [0.0] * len(sample_id_groups[0])
        for group in sample_id_groups:
            for r, ids in enumerate(group):
                work[r] += sum(costs.sample_ms(seqlen[sid], k[sid]) for sid in ids)
        out.append(max(work) / (sum(work) / len(work)))
    return out


def widths(schedules):
    """How many documents ran on 1, 2, 4, ... ranks, over all steps."""
    count = collections.Counter()
    for _, sample_id_groups in schedules:
        count.update(local_cp_sizes(sample_id_groups).values())
    return dict(sorted(count.items()))


def run_line(what, entry):
    """A run's losses, its distance from one process and its balance, for the console."""
    return (f"{what}: losses {', '.join(f'{x:.6f}' for x in entry['losses'])}; vs one "
            f"process: loss {entry['loss_diff']:.1e}, parameters {entry['parameter_diff']:.1e}; "
            f"balance (max/mean rank work) {', '.join(f'{b:.3f}' for b in entry['balance'])}")


def finish(report, worst, json_path, what):
    """Writes the report where asked; the exit status: 1 when a run left one process's
    losses or parameters by more than 1e-5."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=1)
    if worst > 1e-5:
        print(f"FAILED: {worst:.1e} from one process (allowed 1e-5)")
        return 1
    print(f"both {what} train as one process does (worst difference {worst:.1e})")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    reference_losses, reference = train_in_one_process(
        [[d for rank_docs in step for d in rank_docs]
         for step in documents(args.ranks, args.steps)], args.ranks * MAX_TOKENS_PER_RANK)
    report, worst = {}, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("megatron", "hydraulis"):
            mp.spawn(rank_main, args=(args.ranks, args.steps, name, tmp),
                     nprocs=args.ranks)
            with open(os.path.join(tmp, f"{name}.json")) as f:
                run = json.load(f)
            loss_diff, param_diff = distance(run, reference_losses, reference)
            worst = max(worst, loss_diff, param_diff)
            report[name] = {"losses": run["losses"], "loss_diff": loss_diff,
                            "parameter_diff": param_diff, "balance": balance(run["schedules"]),
                            "documents_per_width": widths(run["schedules"])}
            print(f"{run_line(name + ' scheduler', report[name])}; documents per "
                  f"local_cp_size {report[name]['documents_per_width']}")
    report["one_process_losses"] = reference_losses
    return finish(report, worst, args.json, "schedulers")


if __name__ == "__main__":
    sys.exit(main())
