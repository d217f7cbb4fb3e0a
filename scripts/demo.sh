#!/usr/bin/env bash
# The main job on the bundled default: plans 20 global batches of 200K tokens, sampled from
# real Wikipedia document lengths, for LLaMA-32B on 64 A800 GPUs over the published
# case-study candidates (S0..S6), and prints one summary line per step. Extra arguments
# are passed to `hydraulis plan` (e.g. --algorithm static-fixed, --steps 200).
# Then it trains the tiny model for 20 steps on 2 local Gloo ranks over the bundled demo
# corpus, the planner choosing between [TP2] and [TP1, TP1] every step on a cost model it
# calibrates from the steps it measures (docs/runtime.md), and the same 20 batches with
# static fixed-length packing, and compares the two. Outputs go to build/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh release >&2
lengths=../shared/data/wikipedia-doc-lengths.txt
[ -f "$lengths" ] || lengths=data/wikipedia-sample-lengths.txt
out=build/demo
mkdir -p "$out"
./build/release/tools/hydraulis plan \
  --profile configs/profiles/llama-32b-a800.json \
  --candidates configs/candidates/llama-32b-64gpu.json \
  --dataset "$lengths" --steps 20 --tokens-per-batch 200000 --max-len 32768 --seed 1 \
  -o "$out/plans.jsonl" "$@"
./build/release/tools/hydraulis summarize "$out/plans.jsonl"
echo
echo "Training: tiny model, 2 local ranks, candidates [TP2] / [TP1, TP1] chosen per step"
train=(--nproc 2 --candidates configs/candidates/cpu-2rank.json --steps 20
       --tokens-per-batch 8192 --max-len 2944 --seed 1)
./build/release/tools/hydraulis train "${train[@]}" --log-json "$out/train-ours.jsonl" \
  --save-profile "$out/calibrated-profile.json"
echo
echo "The same 20 batches packed into fixed-length rows (static-fixed), for comparison"
./build/release/tools/hydraulis train "${train[@]}" --plan-algorithm static-fixed \
  --log-json "$out/train-static-fixed.jsonl" | tail -2
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def rows(name):
    with open(f"{out}/{name}.jsonl") as f:
        return [json.loads(line) for line in f]
ours, fixed = rows("train-ours"), rows("train-static-fixed")
def tokens_per_s(r):  # steps 1+: step 0 also starts the ranks' engines
    return sum(x["tokens"] for x in r[1:]) / sum(x["step_ms"] for x in r[1:]) * 1000
print()
print(f"tokens/s, steps 1-{len(ours) - 1}: ours {tokens_per_s(ours):,.0f}, "
      f"static-fixed {tokens_per_s(fixed):,.0f} ({tokens_per_s(ours) / tokens_per_s(fixed):.2f}x), "
      f"same batches; tokens lost to cuts: {sum(x['cut_tokens'] for x in ours)}")
PY
./build/release/tools/hydraulis report "$out/train-ours.jsonl" -o "$out/report.html"
echo
echo "Outputs in $out/: plans.jsonl (the 20 plans), train-ours.jsonl and"
echo "train-static-fixed.jsonl (one record per step), calibrated-profile.json (the fit),"
echo "report.html (the training run's loss, throughput, predicted and measured step time)."
