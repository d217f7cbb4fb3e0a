#!/usr/bin/env bash
# Measured training on this machine's CPU ranks (docs/benchmarks.md, "Training throughput by layout on CPU ranks"):
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

"$SRC/bench/wiki_corpus.sh" "$BIN" "$OUT"

# [RUN_STEPS=K] run NAME MODEL PROFILE TOKENS MAXLEN ARGS...: trains STEPS (or K) steps,
# logs to OUT/NAME.jsonl.
run() {
  local name=$1 model=$2 profile=$3 tokens=$4 maxlen=$5
  shift 5
  "$BIN" train --model "$SRC/configs/models/$model.json" --profile "$SRC/configs/profiles/$profile.json" \
    --data "$OUT/wiki" --steps "${RUN_STEPS:-$STEPS}" --tokens-per-batch "$tokens" --max-len "$maxlen" \
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

if [[ -z ${SKIP_LAYOUTS:-} ]]; then
echo "| run | step ms | tokens/s | sync share | pipeline wait share | predicted ms | mean abs prediction error |"
echo "|---|---|---|---|---|---|---|"
for spec in "tiny-1rank:tiny:tiny-cpu:8192:2048:--nproc 1" \
            "tiny-dp2:tiny:tiny-cpu:8192:2048:--nproc 2" \
            "tiny-tp2:tiny:tiny-cpu:8192:2048:--nproc 2 --tp 2" \
            "tiny-pp2:tiny:tiny-cpu:8192:2048:--nproc 2 --pp 2" \
            "small-1rank:small:small-cpu:2048:512:--nproc 1" \
            "small-dp2:small:small-cpu:2048:512:--nproc 2" \
            "small-tp2:small:small-cpu:2048:512:--nproc 2 --tp 2" \
            "small-pp2:small:small-cpu:2048:512:--nproc 2 --pp 2"; do
  IFS=: read -r name model profile tokens maxlen args <<<"$spec"
  # The small model takes seconds per step here: fewer steps.
  steps=$STEPS
  [[ $model == small ]] && steps=6
  # shellcheck disable=SC2086
  RUN_STEPS=$steps run "$name" "$model" "$profile" "$tokens" "$maxlen" $args
  summary "$name"
done
fi

# Our plans against static fixed-length packing on the same ranks and batches, measured
# and predicted (the planner's estimate per step, and `hydraulis simulate` over the same
# sampled batches with communication left out, i.e. the planner's cost model).
candidates() {  # candidates NAME GPUS STRATEGY_JSON...: a candidate file in OUT
  local name=$1 gpus=$2
  shift 2
  local list
  list=$(printf '%s,' "$@")
  printf '{"format": "hydraulis.candidates/1", "gpus": %s, "optimizer_layout": {"dp": %s, "tp": 1, "pp": 1}, "strategies": [%s]}\n' \
    "$gpus" "$gpus" "${list%,}" >"$OUT/$name.json"
}
candidates dp2 2 '{"name": "2xTP1", "pipelines": [{"count": 2, "tp": 1}]}'
candidates tp2 2 '{"name": "TP2", "pipelines": [{"count": 1, "tp": 2}]}'

simulated() {  # simulated CANDIDATES SYSTEM TOKENS MAXLEN: mean simulated step ms
  "$BIN" simulate --profile "$SRC/configs/profiles/tiny-cpu.json" --candidates "$1" \
    --lengths "$OUT/wiki.idx" --steps "$STEPS" --tokens-per-batch "$3" --max-len "$4" --seed 3 \
    --system "$2" --no-communication --json "$OUT/sim.json" -q
  grep -o '"mean_step_ms": *[-0-9.e+]*' "$OUT/sim.json" | head -1 | sed -E 's/.*: *//' 
}

mean_ms() {  # mean_ms NAME: mean measured step ms over steps 1..
  awk 'NR > 1 { match($0, /"step_ms":[-0-9.e+]+/); s += substr($0, RSTART + 10, RLENGTH - 10); n++ } END { printf "%.1f", s / n }' "$OUT/$1.jsonl"
}

echo
echo "| layout | ours measured ms | static-fixed measured ms | measured speedup | simulated speedup |"
echo "|---|---|---|---|---|"
compare() {  # compare LABEL CANDS_OURS CANDS_STATIC TOKENS MAXLEN ARGS_OURS ARGS_STATIC
  local label=$1 cands_ours=$2 cands_static=$3 tokens=$4 maxlen=$5 ours_args=$6 static_args=$7
  # shellcheck disable=SC2086
  run "$label-ours" tiny tiny-cpu "$tokens" "$maxlen" $ours_args
  # shellcheck disable=SC2086
  run "$label-static" tiny tiny-cpu "$tokens" "$maxlen" $static_args --plan-algorithm static-fixed
  local m_ours m_static s_ours s_static
  m_ours=$(mean_ms "$label-ours")
  m_static=$(mean_ms "$label-static")
  s_ours=$(simulated "$cands_ours" ours "$tokens" "$maxlen")
  s_static=$(simulated "$cands_static" static-fixed "$tokens" "$maxlen")
  awk -v l="$label" -v mo="$m_ours" -v ms="$m_static" -v so="$s_ours" -v ss="$s_static" \
    'BEGIN { printf "| %s | %.0f | %.0f | %.2fx | %.2fx |\n", l, mo, ms, ms / mo, ss / so }'
}
# TP1 pipelines hold 1,920 tokens (the profile's memory model), so dp2 runs cut there.
compare dp2 "$OUT/dp2.json" "$OUT/dp2.json" 8192 1920 "--nproc 2" "--nproc 2"
compare tp2 "$OUT/tp2.json" "$OUT/tp2.json" 8192 2944 "--nproc 2 --tp 2" "--nproc 2 --tp 2"
compare hetero-vs-tp2 "$SRC/configs/candidates/cpu-2rank.json" "$OUT/tp2.json" 8192 2944 \
  "--nproc 2 --candidates $SRC/configs/candidates/cpu-2rank.json" "--nproc 2 --tp 2"
