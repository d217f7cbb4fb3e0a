#!/usr/bin/env bash
# Measured training on this machine's CPU ranks (docs/benchmarks.md, "Training runtime"):
# tokens per second and the communication share of several layouts, and the step time of
# our dynamic plans against static fixed-length packing on the same ranks and batches,
# beside the planner's and the simulator's predictions.
#
# Usage: bench/train_bench.sh HYDRAULIS_BINARY OUT_DIR [STEPS]
# The corpus has the real Wikipedia document lengths of data/wikipedia-sample-lengths.txt
# (byte-level documents of random letters: the length distribution is what matters).
set -euo pipefail
BIN=$1
OUT=$2
STEPS=${3:-20}
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"

if [[ ! -f $OUT/wiki.idx ]]; then
  awk 'NR <= 4000 { n = $1; s = ""; for (j = 0; j < n; ++j) s = s sprintf("%c", 97 + (NR * 7 + j * 3) % 26); printf "{\"text\": \"%s\"}\n", s }' \
    "$SRC/data/wikipedia-sample-lengths.txt" >"$OUT/wiki.jsonl"
  "$BIN" preprocess --input "$OUT/wiki.jsonl" --output-prefix "$OUT/wiki" >/dev/null
fi

# run NAME MODEL PROFILE TOKENS MAXLEN ARGS...: trains STEPS steps, logs to OUT/NAME.jsonl.
run() {
  local name=$1 model=$2 profile=$3 tokens=$4 maxlen=$5
  shift 5
  "$BIN" train --model "$SRC/configs/models/$model.json" --profile "$SRC/configs/profiles/$profile.json" \
    --data "$OUT/wiki" --steps "$STEPS" --tokens-per-batch "$tokens" --max-len "$maxlen" \
    --seed 3 --log-json "$OUT/$name.jsonl" "$@" >"$OUT/$name.out" 2>&1
}

# summary NAME: mean over steps 1.. (step 0 warms up allocators and caches).
summary() {
  awk -v name="$1" '
    function field(k,   m) { if (match($0, "\"" k "\":[-0-9.e+]+")) return substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3); return 0 }
    NR > 1 { n++; ms += field("step_ms"); tok += field("tokens"); sync += field("sync_ms"); wait += field("wait_ms");
             pred += field("predicted_step_ms"); e = field("predicted_step_ms") - field("step_ms"); err += (e < 0 ? -e : e) / field("step_ms") }
    END { printf "| %s | %.0f | %.0f | %.1f %% | %.1f %% | %.0f | %.0f %% |\n", name, ms / n, tok / (ms / 1000), 100 * sync / ms, 100 * wait / ms, pred / n, 100 * err / n }' \
    "$OUT/$1.jsonl"
}

echo "| run | step ms | tokens/s | sync share | pipeline wait share | predicted ms | mean abs prediction error |"
echo "|---|---|---|---|---|---|---|"
for spec in "tiny-1rank:tiny:tiny-cpu:8192:2048:--nproc 1" \
            "tiny-dp2:tiny:tiny-cpu:8192:2048:--nproc 2" \
            "tiny-tp2:tiny:tiny-cpu:8192:2048:--nproc 2 --tp 2" \
            "tiny-pp2:tiny:tiny-cpu:8192:2048:--nproc 2 --pp 2" \
            "small-1rank:small:small-cpu:4096:1024:--nproc 1" \
            "small-dp2:small:small-cpu:4096:1024:--nproc 2" \
            "small-tp2:small:small-cpu:4096:1024:--nproc 2 --tp 2" \
            "small-pp2:small:small-cpu:4096:1024:--nproc 2 --pp 2"; do
  IFS=: read -r name model profile tokens maxlen args <<<"$spec"
  # shellcheck disable=SC2086
  run "$name" "$model" "$profile" "$tokens" "$maxlen" $args
  summary "$name"
done
