#!/usr/bin/env python3
"""BalancedTrainer against transformers' own packing (docs/benchmarks.md, "transformers.Trainer
with balanced steps").

Two gloo ranks on the CPU (one thread each) train the tiny-cpu profile's model (a LlamaForCausalLM,
sdpa attention) on documents with the lengths of ../shared/data/wikipedia-doc-lengths.txt
(cut at --max-len, random token ids), twice on the same documents: `hydraulis.hf.BalancedTrainer`
with --tokens-per-batch global tokens per step, and `transformers.Trainer` with
`DataCollatorWithFlattening` and its default (distributed random) sampler, its per-device
batch sized to the same mean tokens per step; BalancedTrainer also with calibrate=False (the
shipped profile as given); and the Trainer again with --accumulation
gradient-accumulation steps of proportionally smaller batches (packed rows about as long as
BalancedTrainer's micro-batches, so that what remains is the balance across ranks). Prints
each run's real tokens per second (Trainer's num_input_tokens_seen over its train_runtime)
and BalancedTrainer's ratio to it.

    bench/hf_trainer.py --steps 30
"""
import argparse
import gc
import json
import os
import socket
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILE = os.path.join(ROOT, "configs/profiles/tiny-cpu.json")
LENGTHS = os.path.join(ROOT, "..", "shared", "data", "wikipedia-doc-lengths.txt")


def model():
    m = json.load(open(PROFILE))["model"]
    config = transformers.LlamaConfig(
        vocab_size=m["vocab"], hidden_size=m["hidden"], intermediate_size=m["ffn"],
        num_hidden_layers=m["layers"], num_attention_heads=m["heads"],
        num_key_value_heads=m["kv_heads"], max_position_embeddings=8192)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def documents(count, max_len):
    lengths = np.loadtxt(LENGTHS, dtype=np.int64, max_rows=count)
    rng = np.random.default_rng(1)
    return [{"input_ids": rng.integers(0, 256, size=int(min(n, max_len))).tolist()}
            for n in lengths if n >= 2]


def rank_main(rank, opts, tmp):
    import hydraulis
    from hydraulis.hf import BalancedTrainer
    # One thread per rank (two ranks on two cores): with OMP_NUM_THREADS unset, accelerate
    # gives each process two, and the oversubscribed runs varied by up to 2x between runs.
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=opts["port"], OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    data = documents(opts["documents"], opts["max_len"])
    common = dict(output_dir=f"{tmp}/out", max_steps=opts["steps"], learning_rate=1e-3,
                  logging_steps=1000, save_strategy="no", report_to=[], use_cpu=True, seed=1,
                  disable_tqdm=True, ddp_find_unused_parameters=False,
                  include_num_input_tokens_seen=True)
    if opts["accumulation"] <= 0:
        trainer = BalancedTrainer(
            model=model(), args=transformers.TrainingArguments(**common), train_dataset=data,
            profile=hydraulis.load_profile(PROFILE), tokens_per_batch=opts["tokens_per_batch"],
            max_len=opts["max_len"], calibrate=opts["accumulation"] == 0)
    else:
        mean = float(np.mean([len(d["input_ids"]) for d in data]))
        accumulation = opts["accumulation"]
        per_device = max(1, round(opts["tokens_per_batch"] / 2 / accumulation / mean))
        trainer = transformers.Trainer(
            model=model(), train_dataset=data,
            args=transformers.TrainingArguments(per_device_train_batch_size=per_device,
                                                gradient_accumulation_steps=accumulation,
                                                **common),
            data_collator=transformers.DataCollatorWithFlattening(return_position_ids=True))
    out = trainer.train()
    if rank == 0:
        json.dump({"tokens": int(trainer.state.num_input_tokens_seen),
                   "seconds": out.metrics["train_runtime"]}, open(f"{tmp}/result.json", "w"))
    del trainer
    gc.collect()
    dist.destroy_process_group()


def run(accumulation, a):
    with tempfile.TemporaryDirectory() as tmp:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        opts = dict(accumulation=accumulation, port=port, steps=a.steps, documents=a.documents,
                    max_len=a.max_len, tokens_per_batch=a.tokens_per_batch)
        torch.multiprocessing.spawn(rank_main, args=(opts, tmp), nprocs=2, join=True)
        return json.load(open(f"{tmp}/result.json"))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--tokens-per-batch", type=int, default=16384)
    p.add_argument("--max-len", type=int, default=1536)
    p.add_argument("--documents", type=int, default=20000)
    p.add_argument("--accumulation", type=int, default=4,
                   help="gradient accumulation steps of the third run (smaller packed rows)")
    a = p.parse_args()
    if not os.path.exists(LENGTHS):
        sys.exit(f"{LENGTHS}: not found (the shared length data)")
    # 0: BalancedTrainer calibrating its profile (the default), -1: on the profile as given.
    runs = {"BalancedTrainer": 0, "BalancedTrainer, calibrate=False": -1,
            "Trainer + DataCollatorWithFlattening": 1,
            f"the same, {a.accumulation} accumulation steps": a.accumulation}
    results = {name: run(acc, a) for name, acc in runs.items()}
    speed = {name: r["tokens"] / r["seconds"] for name, r in results.items()}
    ours = speed["BalancedTrainer"]
    print("| trainer | real tokens | seconds | tokens/s | BalancedTrainer x |")
    print("|---|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['tokens']:,} | {r['seconds']:.1f} | {speed[name]:,.0f} | "
              f"{ours / speed[name]:.3f}x |")


if __name__ == "__main__":
    main()
