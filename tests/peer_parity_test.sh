#!/usr/bin/env bash
# The checks that make bench/runtime_overhead.py's comparisons fair, on the CPU
# with the tiny model: the batches come from a data-parallel gpu_train_bench run (2 ranks under
# torchrun); then bench/peer_train.py --check-parity (transformers vs the eager peer: packed
# loss sums against transformers' own loss, and 3 training steps) and --check-ddp-parity (the
# DDP peer on 2 ranks against one process: the first step's gradient, 3 steps' losses and the
# final weights), each within 1e-5 relative.
# Usage: peer_parity_test.sh BENCH_BINARY REPO_ROOT PYTHON
set -euo pipefail
bench=$1 root=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run2() { "$python" -m torch.distributed.run --standalone --nproc-per-node 2 "$@" 2>&1 |
  grep -v '^W[0-9]\{4\} \|^\*\{5\}' || true; }
model=$root/configs/models/tiny.json
run2 --no-python "$bench" --model "$model" --device cpu --lengths "$root/data/wikipedia-sample-lengths.txt" \
  --context 2048 --tokens-per-step 8192 --steps 3 --warmup 0 --batches-out "$work/batches.json" >"$work/ours.log"
grep -q '"dp":2' "$work/batches.json" || { cat "$work/ours.log"; echo "no dp = 2 batches written"; exit 1; }
"$python" "$root/bench/peer_train.py" --batches "$work/batches.json" --model "$model" --check-parity |
  tee "$work/hf.log"
grep -q '^PARITY OK' "$work/hf.log"
run2 "$root/bench/peer_train.py" --batches "$work/batches.json" --model "$model" --impl ddp \
  --device cpu --check-ddp-parity | tee "$work/ddp.log"
grep -q '^DDP PARITY OK' "$work/ddp.log"
echo "peer parity: OK"
