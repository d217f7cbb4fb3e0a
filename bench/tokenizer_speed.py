#!/usr/bin/env python3
"""Single-thread tokenization speed: hydraulis (bench/tokenize_bench) against the
`tokenizers` package on the same tokenizer.json and the same text, side by side in one run.

Usage: .venv/bin/python bench/tokenizer_speed.py BUILD_DIR CORPUS.jsonl [--passes N]

Trains the tokenizer families of tests/hf_tokenizer_files.py on the corpus' first 300
documents, then for each encodes every document of the corpus: hydraulis' HfTokenizer in
C++ (tokenize_bench), and tokenizers' Tokenizer.encode one document at a time on one
thread (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false; its word cache on, as by
default). Median seconds of N passes each; prints a markdown table with MB/s and the ratio.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import hf_tokenizer_files  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build_dir")
    ap.add_argument("corpus")
    ap.add_argument("--passes", type=int, default=5)
    args = ap.parse_args()
    with open(args.corpus, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    size = sum(len(t.encode()) for t in texts)
    print(f"corpus: {args.corpus}, {len(texts)} documents, {size / 1e6:.2f} MB; "
          f"median of {args.passes} passes, one thread each\n")
    print("| tokenizer | tokens | hydraulis MB/s | tokenizers MB/s | hydraulis / tokenizers |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for family in ("gpt2", "llama3", "qwen2", "variants"):
            path = hf_tokenizer_files.make(family, texts[:300], tmp)
            out = subprocess.run([os.path.join(args.build_dir, "bench", "tokenize_bench"),
                                  "--tokenizer", path, "--input", args.corpus,
                                  "--passes", str(args.passes)],
                                 check=True, capture_output=True, text=True).stdout
            ours = json.loads(out)
            tok = Tokenizer.from_file(path)
            seconds, tokens = [], 0
            for _ in range(args.passes):
                t0 = time.perf_counter()
                tokens = sum(len(tok.encode(t).ids) for t in texts)
                seconds.append(time.perf_counter() - t0)
            seconds.sort()
            theirs = size / seconds[len(seconds) // 2] / 1e6
            if tokens != ours["tokens"]:
                sys.exit(f"{family}: token counts differ ({ours['tokens']} vs {tokens})")
            print(f"| {family} | {tokens} | {ours['mb_per_s']:.2f} | {theirs:.2f} | "
                  f"{ours['mb_per_s'] / theirs:.2f} |", flush=True)


if __name__ == "__main__":
    main()
