#!/usr/bin/env bash
# Planning time per step against the planner's thread count (docs/benchmarks.md, "Planning
# threads"): `hydraulis plan --threads T` on the same batches for each T, one run after the
# other, and per run the median, p90 and worst planning time, the steps planned within
# 250 ms, and the mean estimated step (the plans are the same for every T: it must not
# move). Settings (LLaMA-32B A800 profile, 128K context, real Wikipedia lengths, seed 1):
#   1024-selected  1,024 GPUs, 4M-token batches, configs/candidates/llama-32b-1024gpu-128k-selected.json, 20 steps
#   256-selected   256 GPUs, 2M-token batches, configs/candidates/llama-32b-256gpu-128k-selected.json, 100 steps
#   1024-default   1,024 GPUs, 4M-token batches, the default proposal (propose, then plan), 20 steps
#
# Usage: bench/plan_threads.sh HYDRAULIS_BINARY LENGTHS OUT_DIR "1024-selected:1,2,4,16 256-selected:2,16 ..."
set -euo pipefail
BIN=$1
LENGTHS=$2
OUT=$3
RUNS=$4
SRC=$(cd "$(dirname "$0")/.." && pwd)
PROFILE=$SRC/configs/profiles/llama-32b-a800.json
mkdir -p "$OUT"
echo "| setting | threads | mean estimated step ms | planning median / p90 / worst ms | steps <= 250 ms |"
echo "|---|---:|---:|---:|---:|"
for run in $RUNS; do
  setting=${run%%:*}
  threads=${run#*:}
  case $setting in
    1024-selected) gpus=1024 tokens=4194304 steps=20
                   candidates=$SRC/configs/candidates/llama-32b-1024gpu-128k-selected.json ;;
    256-selected) gpus=256 tokens=2097152 steps=100
                  candidates=$SRC/configs/candidates/llama-32b-256gpu-128k-selected.json ;;
    1024-default) gpus=1024 tokens=4194304 steps=20 candidates=$OUT/1024-default.json
                  [ -f "$candidates" ] || "$BIN" propose --profile "$PROFILE" --lengths "$LENGTHS" \
                    --gpus "$gpus" --max-len 131072 --tokens-per-batch "$tokens" \
                    -o "$candidates" > /dev/null 2>&1 ;;
    *) echo "plan_threads: unknown setting '$setting'" >&2; exit 2 ;;
  esac
  for t in ${threads//,/ }; do
    plans=$OUT/$setting-t$t.jsonl
    "$BIN" plan --profile "$PROFILE" --candidates "$candidates" --dataset "$LENGTHS" \
      --steps "$steps" --tokens-per-batch "$tokens" --max-len 131072 --seed 1 --threads "$t" \
      -o "$plans"
    python3 - "$plans" "$setting" "$t" << 'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
ms = sorted(r["planning_ms"] for r in rows)
pick = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
median = (ms[(len(ms) - 1) // 2] + ms[len(ms) // 2]) / 2
mean = sum(r["estimated_step_ms"] for r in rows) / len(rows)
print(f"| {sys.argv[2]} | {sys.argv[3]} | {mean:,.1f} | {median:,.0f} / {pick(0.9):,.0f} / {ms[-1]:,.0f}"
      f" | {sum(m <= 250 for m in ms)} of {len(ms)} |")
EOF
  done
done
