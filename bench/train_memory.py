#!/usr/bin/env python3
"""Peak memory of `hydraulis train --init-from` on one CPU rank, per parameter.

Usage: .venv/bin/python bench/train_memory.py HYDRAULIS_BINARY [HYDRAULIS_BINARY ...]
       [--hidden 1024 --ffn 2816 --layers 8 --heads 8 --kv-heads 4 --vocab 32000]
       [--precision fp32|bf16] [--nproc N]

Makes a random LLaMA with transformers (bf16 safetensors, save_pretrained) and a profile of
its shape, then runs one training step (512 tokens) with each binary given, side by side,
and prints the peak resident memory of the rank process (GNU time's maximum RSS, the
largest process of the job) and that peak in bytes per parameter. Run from the repository
root (the demo corpus is build/release/demo-corpus).
"""
import argparse
import json
import os
import re
import subprocess
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="compute precision of the run (--device cpu either way)")
    ap.add_argument("--nproc", type=int, default=1,
                    help="ranks (data parallel; the peak is the largest rank's)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = LlamaConfig(hidden_size=a.hidden, intermediate_size=a.ffn,
                             num_hidden_layers=a.layers, num_attention_heads=a.heads,
                             num_key_value_heads=a.kv_heads, vocab_size=a.vocab,
                             tie_word_embeddings=False)
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).to(torch.bfloat16)
        params = sum(p.numel() for p in model.parameters())
        ckpt = os.path.join(tmp, "ckpt")
        model.save_pretrained(ckpt, safe_serialization=True)
        del model
        with open("configs/profiles/tiny-cpu.json") as f:
            profile = json.load(f)
        profile["model"].update(name="memory", layers=a.layers, hidden=a.hidden, ffn=a.ffn,
                                heads=a.heads, kv_heads=a.kv_heads, vocab=a.vocab)
        profile["cluster"]["gpu_memory_bytes"] = 1 << 40
        profile_path = os.path.join(tmp, "profile.json")
        with open(profile_path, "w") as f:
            json.dump(profile, f)
        print(f"{params / 1e6:.0f}M parameters (fp32: {4 * params / 2**30:.2f} GiB)\n")
        print("| binary | peak RSS GiB | bytes / parameter | first step loss |")
        print("|---|---:|---:|---:|")
        for binary in a.binaries:
            run = subprocess.run(
                ["/usr/bin/time", "-v", binary, "train", "--init-from", ckpt, "--data",
                 "build/release/demo-corpus", "--profile", profile_path, "--nproc", str(a.nproc),
                 "--device", "cpu", "--precision", a.precision,
                 "--steps", "1", "--tokens-per-batch", str(512 * a.nproc), "--max-len", "256"],
                capture_output=True, text=True)
            rss_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr)[1])
            loss = re.search(r"loss\s+([0-9.]+)", run.stdout)
            print(f"| {binary} | {rss_kib / 2**20:.2f} | {rss_kib * 1024 / params:.1f} | "
                  f"{loss[1] if loss else 'failed: ' + run.stderr.strip()[-200:]} |", flush=True)


if __name__ == "__main__":
    main()
