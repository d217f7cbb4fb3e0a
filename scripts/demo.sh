#!/usr/bin/env bash
# The main job on the bundled default: plans 20 global batches of 200K tokens, sampled from
# real Wikipedia document lengths, for LLaMA-32B on 64 A800 GPUs over the published
# case-study candidates (S0..S6), and prints one summary line per step. Extra arguments
# are passed to `hydraulis plan` (e.g. --algorithm static-fixed, --steps 200).
# Then it trains the tiny model for 10 steps on 2 local Gloo ranks over the bundled demo
# corpus, the planner choosing between [TP2] and [TP1, TP1] every step (docs/runtime.md).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh release >&2
lengths=../shared/data/wikipedia-doc-lengths.txt
[ -f "$lengths" ] || lengths=data/wikipedia-sample-lengths.txt
out=$(mktemp)
trap 'rm -f "$out"' EXIT
./build/release/tools/hydraulis plan \
  --profile configs/profiles/llama-32b-a800.json \
  --candidates configs/candidates/llama-32b-64gpu.json \
  --dataset "$lengths" --steps 20 --tokens-per-batch 200000 --max-len 32768 --seed 1 \
  -o "$out" "$@"
./build/release/tools/hydraulis summarize "$out"
echo
echo "Training: tiny model, 2 local ranks, candidates [TP2] / [TP1, TP1] chosen per step"
./build/release/tools/hydraulis train --nproc 2 \
  --candidates configs/candidates/cpu-2rank.json --steps 10 --tokens-per-batch 8192 \
  --max-len 2944 --seed 1
