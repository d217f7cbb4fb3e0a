#!/usr/bin/env bash
# Predicted against measured step time of a context-parallel run on this machine's CPU ranks
# (docs/benchmarks.md, "A fitted cp scheme against measured cp steps"): `hydraulis profile`
# fits <1,1,1> and <2,1,1> on 2 Gloo ranks, then `train --cp 2` (and, for reference, dp 2 on
# the same profile) runs on real Wikipedia lengths; per run the mean over steps 1.. of the
# step time, the planner's estimate, and the mean absolute prediction error.
#
# Usage: [REPEATS=N] bench/cp_prediction.sh HYDRAULIS_BINARY OUT_DIR [STEPS]
set -euo pipefail
BIN=$1
OUT=$2
STEPS=${3:-12}
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
"$SRC/bench/wiki_corpus.sh" "$BIN" "$OUT"
# The bundled tiny profile's memory (24 MiB per rank): TP1 holds 1,920 tokens, (CP2,TP1) 3,712.
"$BIN" profile --model "$SRC/configs/models/tiny.json" --schemes 1x1,2x1x1 --nproc 2 \
  --min-len 128 --max-len 3072 --packed 8 --repeats "${REPEATS:-3}" --memory-bytes 25165824 \
  --samples-json "$OUT/samples.json" --output "$OUT/profile.json" >"$OUT/profile.out" 2>&1
grep -v "profiled" "$OUT/profile.out" | sed 's/^\[rank 0\] //'
# Training runs under the profile's process settings (docs/runtime.md, "Profiler").
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1099511627776
run() {  # run NAME ARGS...
  local name=$1
  shift
  "$BIN" train --model "$SRC/configs/models/tiny.json" --profile "$OUT/profile.json" \
    --data "$OUT/wiki" --steps "$STEPS" --tokens-per-batch 8192 --max-len 3072 --seed 3 \
    --nproc 2 --log-json "$OUT/$name.jsonl" "$@" >"$OUT/$name.out" 2>&1
}
summary() {  # mean over steps 1.. (step 0 warms up allocators and caches)
  awk -v name="$1" '
    function field(k,   m) { if (match($0, "\"" k "\":[-0-9.e+]+")) return substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3); return 0 }
    NR > 1 { n++; ms += field("step_ms"); pred += field("predicted_step_ms"); cut += field("truncated_tokens");
             e = field("predicted_step_ms") - field("step_ms"); err += (e < 0 ? -e : e) / field("step_ms") }
    END { printf "| %s | %.0f | %.0f | %.0f %% | %d |\n", name, ms / n, pred / n, 100 * err / n, cut }' \
    "$OUT/$1.jsonl"
}
echo "| run | step ms | predicted ms | mean abs prediction error | tokens cut for capacity |"
echo "|---|---|---|---|---|"
run cp2 --cp 2
summary cp2
run dp2
summary dp2
