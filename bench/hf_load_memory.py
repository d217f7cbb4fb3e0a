#!/usr/bin/env python3
"""Peak memory of loading a LLaMA-7B-shaped Hugging Face checkpoint (the goal: a 7B
checkpoint loads on a 24 GiB machine).

Usage: .venv/bin/python bench/hf_load_memory.py HYDRAULIS_BINARY [--work DIR]
       [--layers 32 --hidden 4096 --ffn 11008 --heads 32 --kv-heads 32 --vocab 32000]

Writes a checkpoint with LLaMA-7B's config and tensor names (random bf16 values, sharded
into 2 GB safetensors files with model.safetensors.index.json, as save_pretrained does;
written tensor by tensor, so this script never holds the model either), byte-tokenizes one
short document, and runs `hydraulis eval --init-from DIR --precision bf16` under GNU time:
the model is built from the checkpoint (every tensor read, converted and kept in bf16) and
runs one forward pass. Prints the weights' size, the peak resident memory (GNU time's
maximum RSS) and the wall time, then deletes the checkpoint (about 13.5 GB under --work,
default /tmp).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile

import torch
from safetensors.torch import save_file


def tensors(a):
    """(name, shape) in save_pretrained's order for LlamaForCausalLM, untied."""
    kv = a.hidden // a.heads * a.kv_heads
    yield "model.embed_tokens.weight", (a.vocab, a.hidden)
    for i in range(a.layers):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (a.hidden,)
        yield p + "self_attn.q_proj.weight", (a.hidden, a.hidden)
        yield p + "self_attn.k_proj.weight", (kv, a.hidden)
        yield p + "self_attn.v_proj.weight", (kv, a.hidden)
        yield p + "self_attn.o_proj.weight", (a.hidden, a.hidden)
        yield p + "post_attention_layernorm.weight", (a.hidden,)
        yield p + "mlp.gate_proj.weight", (a.ffn, a.hidden)
        yield p + "mlp.up_proj.weight", (a.ffn, a.hidden)
        yield p + "mlp.down_proj.weight", (a.hidden, a.ffn)
    yield "model.norm.weight", (a.hidden,)
    yield "lm_head.weight", (a.vocab, a.hidden)


def write_checkpoint(a, out):
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": a.hidden, "intermediate_size": a.ffn, "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
        "vocab_size": a.vocab, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "max_position_embeddings": 4096, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16",
    }
    limit = 2 * 10**9
    shards, current, size, total = [], {}, 0, 0
    gen = torch.Generator().manual_seed(0)

    def flush():
        nonlocal current, size
        if current:
            name = f"model-{len(shards) + 1:05d}.safetensors"
            save_file(current, os.path.join(out, name), metadata={"format": "pt"})
            shards.append((name, list(current)))
            current, size = {}, 0

    for name, shape in tensors(a):
        n = 1
        for d in shape:
            n *= d
        if size > 0 and size + 2 * n > limit:
            flush()
        if len(shape) == 1:
            t = torch.ones(shape, dtype=torch.bfloat16)
        else:
            t = (torch.randn(shape, generator=gen) * 0.02).to(torch.bfloat16)
        current[name] = t
        size += 2 * n
        total += 2 * n
    flush()
    count = len(shards)
    weight_map = {}
    for i, (name, names) in enumerate(shards):
        final = f"model-{i + 1:05d}-of-{count:05d}.safetensors"
        os.rename(os.path.join(out, name), os.path.join(out, final))
        for t in names:
            weight_map[t] = final
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)
    return total, count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--work", default="/tmp")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hf-load-", dir=a.work)
    try:
        ckpt = os.path.join(tmp, "llama")
        os.makedirs(ckpt)
        total, count = write_checkpoint(a, ckpt)
        params = total // 2
        corpus = os.path.join(tmp, "doc.jsonl")
        with open(corpus, "w") as f:
            f.write(json.dumps({"text": "The quick brown fox jumps over the lazy dog."}) + "\n")
        subprocess.run([a.binary, "preprocess", "--input", corpus, "--output-prefix",
                        os.path.join(tmp, "doc"), "--tokenizer", "byte"], check=True,
                       capture_output=True)
        run = subprocess.run(["/usr/bin/time", "-v", a.binary, "eval", "--init-from", ckpt,
                              "--data", os.path.join(tmp, "doc"), "--precision", "bf16",
                              "--max-documents", "1", "--max-len", "32"],
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"eval failed ({run.returncode}): {run.stderr[-2000:]}")
        rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr)[1])
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", run.stderr)[1]
        loss = json.loads(run.stdout.splitlines()[0])["loss"]
        gib = 2**30
        print(f"checkpoint: {params / 1e9:.2f} B parameters, {total / gib:.2f} GiB bf16 in "
              f"{count} safetensors shards")
        print(f"eval --precision bf16: peak RSS {rss_kb * 1024 / gib:.2f} GiB "
              f"({rss_kb * 1024 / params:.2f} bytes/parameter), wall {wall}, "
              f"loss of the document {loss:.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
