#!/usr/bin/env bash
# Everything for a machine with an NVIDIA GPU and PyTorch already installed, in one command
# (docs/runtime.md, "GPU check"); results go to the folder $OUT names (7 files at most):
#   summary.txt   environment (nvidia-smi, torch, transformers), pass/fail per stage, the
#                 throughput figures and ours/peer
#   build.txt     the build's output (when it builds here)
#   tests.txt     GPU tests (flash vs dense attention, bf16 vs fp32, NCCL, 2 ranks on 1 GPU,
#                 cp; on cuda a GPU test that would skip fails: HYDRAULIS_REQUIRE_GPU), each in
#                 its own process (a crash hides no other test), and with
#                 GPU_CHECK_CPU_TESTS=1 the runtime's CPU tests on this machine's torch
#   train.txt     the training CLI on one GPU (bf16, NCCL): 6 steps straight, and 3 steps +
#                 checkpoint + resume to 6; the resumed losses must equal the straight ones.
#                 Then the cost model on this GPU: `profile` fits the throughput model's
#                 <1,1,1> scheme here, and `train` with that profile runs 8 steps; the mean
#                 absolute error of the predicted step time over steps 1.. must be at most
#                 GPU_CHECK_PREDICTION_TOLERANCE (default 0.15, the issue's bar on the CPU).
#                 Then `train --calibrate on` (CUDA events) from the derived profile, 16 steps:
#                 a fit adopted and its last 5 predictions within the same tolerance
#   bench.txt     the throughput runs' output
#   ours.json     bench/gpu_train_bench: llama-1b, 8K context, ~64K tokens/step, bf16
#   peer-hf.json, peer-eager.json   bench/peer_train.py on the same batches
# It builds against this machine's python3 torch (HYDRAULIS_PYTHON overrides) when CMake
# and the Debian packages are there; otherwise it runs binaries built elsewhere against the
# same torch version (scripts/pack-gpu-prebuilt.sh; HYDRAULIS_PREBUILT, default
# build/gpu-prebuilt), loading this machine's libtorch. Every stage runs even when an
# earlier one failed; the exit status is non-zero when any failed. Each stage has its own
# time limit (GPU_CHECK_LIMIT_<STAGE> seconds; the defaults add up to under 8 minutes on one
# H200 from the prebuilt folder): a stage past it fails with its name and the next one runs.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder for the results}"
mkdir -p "$OUT"
PY=${HYDRAULIS_PYTHON:-python3}
# Binaries built elsewhere: used without building when HYDRAULIS_PREBUILT is set (saves the
# GPU machine's time), else only as the fallback when nothing can be built here.
PREBUILT=${HYDRAULIS_PREBUILT:-build/gpu-prebuilt}
prefer_prebuilt=${HYDRAULIS_PREBUILT:+1}
# The throughput runs; the overrides exist for a dry run on a CPU-only machine
# (GPU_CHECK_DEVICE=cpu GPU_CHECK_MODEL=configs/models/tiny.json ...).
STEPS=${GPU_CHECK_STEPS:-10}
MODEL=${GPU_CHECK_MODEL:-configs/models/llama-1b.json}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
CONTEXT=${GPU_CHECK_CONTEXT:-8192}
TOKENS=${GPU_CHECK_TOKENS:-65536}
GTEST_FILTER=${GPU_CHECK_GTEST_FILTER:-*}
LIMIT_BUILD=${GPU_CHECK_LIMIT_BUILD:-900}
LIMIT_GPU_TESTS=${GPU_CHECK_LIMIT_GPU_TESTS:-150}
LIMIT_CPU_TESTS=${GPU_CHECK_LIMIT_CPU_TESTS:-300}
LIMIT_TRAIN=${GPU_CHECK_LIMIT_TRAIN:-90}
LIMIT_PREDICTION=${GPU_CHECK_LIMIT_PREDICTION:-150}
LIMIT_OURS=${GPU_CHECK_LIMIT_OURS:-100}
LIMIT_PEER=${GPU_CHECK_LIMIT_PEER:-90}
PREDICTION_TOLERANCE=${GPU_CHECK_PREDICTION_TOLERANCE:-0.15}
# GPU_CHECK_PEERS=0 leaves the peers' throughput runs out (a second run on the same GPU).
PEERS=${GPU_CHECK_PEERS:-1}
failed=0
check_start=$SECONDS
work=$(mktemp -d)  # scratch that does not come back (the batches file, prebuilt copies)
trap 'rm -rf "$work"' EXIT
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "[gpu-check $(date +%T)] $*" | tee -a "$summary"; }
stage() {  # stage NAME LIMIT_S LOG COMMAND...: runs under its time limit, records pass/fail
  local name=$1 limit=$2 log=$3
  shift 3
  local start=$SECONDS status=0
  echo "=== $name (limit $limit s): $*" >> "$log"
  timeout --kill-after=10 "$limit" "$@" >> "$log" 2>&1 || status=$?
  if [ $status -eq 0 ]; then
    note "PASS $name ($((SECONDS - start)) s)"
  elif [ $status -eq 124 ] || [ $status -eq 137 ]; then
    note "FAIL $name: past its time limit of $limit s (see $(basename "$log"))"
    failed=1
  else
    note "FAIL $name (exit $status, $((SECONDS - start)) s; see $(basename "$log"))"
    failed=1
  fi
}

{
  nvidia-smi
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)'
  "$PY" -c 'import transformers; print("transformers", transformers.__version__)'
  uname -a; nproc
} >> "$summary" 2>&1
torch_lib=$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')

# Build here when possible, else use the prebuilt binaries.
bin=""
if [ -z "$prefer_prebuilt" ] && command -v cmake > /dev/null && command -v g++ > /dev/null &&
   [ -f /usr/include/nlohmann/json.hpp ] && [ -d /usr/include/gtest ]; then
  stage "build (against $PY's torch)" "$LIMIT_BUILD" "$OUT/build.txt" bash -c "
    cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DHYDRAULIS_PYTHON=$PY \
      -DHYDRAULIS_WERROR=OFF &&
    cmake --build build/gpu -j\$(nproc) --target gpu_test runtime_test gpu_train_bench hydraulis hydraulis-runtime &&
    scripts/make-demo-corpus.sh $work/demo.jsonl && head -n 60 $work/demo.jsonl > $work/corpus.jsonl &&
    build/gpu/tools/hydraulis preprocess --input $work/corpus.jsonl --output-prefix $work/corpus \
      --tokenizer byte"
  [ -x build/gpu/src/runtime/gpu_test ] && bin=build/gpu
  corpus=$work/corpus
fi
if [ -z "$bin" ] && [ -x "$PREBUILT/gpu_test" ]; then
  note "using prebuilt binaries from $PREBUILT (built against torch $(cat "$PREBUILT/torch-version" 2>/dev/null); this machine's: $("$PY" -c 'import torch; print(torch.__version__)' 2>&1))"
  # This machine's libtorch first, then the libraries packed beside the binaries.
  export LD_LIBRARY_PATH="$torch_lib:$(cd "$PREBUILT" && pwd)/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  bin=$work/prebuilt
  mkdir -p "$bin/src/runtime" "$bin/bench" "$bin/tools"
  cp "$PREBUILT/gpu_test" "$PREBUILT/runtime_test" "$bin/src/runtime/"
  cp "$PREBUILT/hydraulis-runtime" "$bin/tools/"
  corpus=$PREBUILT/corpus
  # The tests read configs/ through the source path compiled into them: point it here.
  built_in=$(cat "$PREBUILT/source-dir" 2>/dev/null || true)
  if [ -n "$built_in" ] && [ ! -e "$built_in" ]; then
    mkdir -p "$(dirname "$built_in")" && ln -s "$PWD" "$built_in"
  fi
  cp "$PREBUILT/gpu_train_bench" "$bin/bench/"
fi
if [ -z "$bin" ]; then
  note "FAIL no build: neither CMake with the Debian packages nor $PREBUILT"
  failed=1
else
  # Each GPU test in its own process: a crash or hang in one hides none of the others (a
  # test gets the stage's limit less 10 s); the failing ones are named in the summary.
  gpu_tests() {
    local failing=() t
    for t in $("$bin/src/runtime/gpu_test" --gtest_list_tests --gtest_filter="$GTEST_FILTER" |
               awk '/^[^ ]/ {suite = $1} /^  [^ ]/ {print suite $1}'); do
      timeout --kill-after=5 $((LIMIT_GPU_TESTS - 10)) "$bin/src/runtime/gpu_test" \
        --gtest_filter="$t" || failing+=("$t")
    done
    [ ${#failing[@]} -eq 0 ] || { note "failing GPU tests: ${failing[*]}"; return 1; }
  }
  export -f gpu_tests note
  export bin GTEST_FILTER LIMIT_GPU_TESTS summary
  if [ "$DEVICE" = cuda ]; then
    # A GPU test that finds no GPU fails here instead of skipping.
    stage "GPU tests" "$LIMIT_GPU_TESTS" "$OUT/tests.txt" env HYDRAULIS_REQUIRE_GPU=1 \
      bash -c gpu_tests
  else
    stage "GPU tests (dry run: they skip without a GPU)" "$LIMIT_GPU_TESTS" "$OUT/tests.txt" \
      bash -c gpu_tests
  fi
  # The training CLI on one device (bf16 and NCCL on cuda): a run interrupted by a
  # checkpoint and resumed must give the uninterrupted run's losses (relative 1e-3 on cuda,
  # whose embedding backward adds with atomics; bit for bit on the CPU, which needs the same
  # plans: --calibrate off, as a fit from measured times differs run to run).
  train=("$bin/tools/hydraulis-runtime" train --nproc 1 --device "$DEVICE" --data "$corpus"
         --tokens-per-batch 16384 --max-len 2048 --seed 1 --calibrate off)
  stage "training CLI: checkpoint and resume" "$LIMIT_TRAIN" "$OUT/train.txt" bash -c '
    "$@" --steps 6 --log-json '"$work"'/straight.jsonl &&
    "$@" --steps 3 --checkpoint-dir '"$work"'/checkpoints --log-json '"$work"'/first.jsonl &&
    "$@" --steps 6 --checkpoint-dir '"$work"'/checkpoints --resume \
      --log-json '"$work"'/resumed.jsonl &&
    '"$PY"' - '"$work $DEVICE"' << "EOF"
import json, sys
work, device = sys.argv[1], sys.argv[2]
def losses(name):
    return {r["step"]: (r["loss"], r["device"], r["precision"])
            for r in map(json.loads, open(f"{work}/{name}.jsonl"))}
straight, first, resumed = losses("straight"), losses("first"), losses("resumed")
assert sorted(straight) == list(range(6)) and sorted(first) == list(range(3)), (straight, first)
assert sorted(resumed) == [3, 4, 5], resumed
tolerance = 1e-3 if device == "cuda" else 0.0
worst = 0.0
for step, (loss, dev, precision) in sorted({**first, **resumed}.items()):
    error = abs(loss - straight[step][0]) / straight[step][0]
    worst = max(worst, error)
    print(f"step {step}: {dev} {precision} loss {loss:.6f} straight {straight[step][0]:.6f}"
          f" relative {error:.2e}")
print(f"worst relative difference {worst:.2e} (tolerance {tolerance:g})")
sys.exit(0 if worst <= tolerance else 1)
EOF' _ "${train[@]}"
  if [ "${GPU_CHECK_CPU_TESTS:-0}" = 1 ]; then
    stage "runtime CPU tests on this torch" "$LIMIT_CPU_TESTS" "$OUT/tests.txt" \
      "$bin/src/runtime/runtime_test"
  fi
  stage "cost model: fitted here, predicted against measured" "$LIMIT_PREDICTION" \
    "$OUT/train.txt" bash -c '
    "$1" profile --model "$2" --schemes 1x1 --device "$3" --max-len "$4" \
      --output '"$work"'/profile.json &&
    "$1" train --nproc 1 --model "$2" --profile '"$work"'/profile.json --device "$3" \
      --max-len "$4" --tokens-per-batch "$5" --data "$6" --steps 8 --seed 1 \
      --log-json '"$work"'/predicted.jsonl &&
    '"$PY"' - '"$work"'/predicted.jsonl '"$PREDICTION_TOLERANCE"' << "EOF"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])][1:]  # step 0 warms up
measured = sum(r["step_ms"] for r in rows) / len(rows)
predicted = sum(r["predicted_step_ms"] for r in rows) / len(rows)
error = sum(abs(r["predicted_step_ms"] - r["step_ms"]) / r["step_ms"] for r in rows) / len(rows)
device, precision = rows[0]["device"], rows[0]["precision"]
print(f"{device} {precision}, steps 1-{len(rows)}: measured {measured:.1f} ms,"
      f" predicted {predicted:.1f} ms, mean absolute error {100 * error:.1f} %"
      f" (tolerance {100 * float(sys.argv[2]):.0f} %)")
sys.exit(0 if error <= float(sys.argv[2]) else 1)
EOF' _ "$bin/tools/hydraulis-runtime" "$MODEL" "$DEVICE" "$CONTEXT" "$TOKENS" "$corpus"
  # Calibration on the device (CUDA events on a GPU): from the profile derived for this
  # model's shape, 16 steps; the last 5 predicted within the tolerance.
  stage "calibration on the device" "$LIMIT_PREDICTION" "$OUT/train.txt" bash -c '
    "$1" train --nproc 1 --model "$2" --device "$3" --max-len "$4" --tokens-per-batch "$5" \
      --data "$6" --steps 16 --seed 1 --calibrate on --log-json '"$work"'/calibrated.jsonl &&
    '"$PY"' - '"$work"'/calibrated.jsonl '"$PREDICTION_TOLERANCE"' << "EOF"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
last = rows[-5:]
error = sum(abs(r["predicted_step_ms"] - r["step_ms"]) / r["step_ms"] for r in last) / len(last)
first = abs(rows[1]["predicted_step_ms"] - rows[1]["step_ms"]) / rows[1]["step_ms"]
device, precision = rows[0]["device"], rows[0]["precision"]
begin, end, fit = last[0]["step"], last[-1]["step"], last[-1]["fit"]
print(f"{device} {precision}: step 1 predicted {100 * first:.0f} % off; steps {begin}-{end}"
      f" (fit {fit}) mean error {100 * error:.1f} % (tolerance {100 * float(sys.argv[2]):.0f} %)")
# The error is the check: a profile that already predicts within the tolerance needs no fit
# (on a loaded CPU the bundled profile can happen to be right, and no refit beats it).
sys.exit(0 if error <= float(sys.argv[2]) else 1)
EOF' _ "$bin/tools/hydraulis-runtime" "$MODEL" "$DEVICE" "$CONTEXT" "$TOKENS" "$corpus"
  stage "throughput: hydraulis" "$LIMIT_OURS" "$OUT/bench.txt" "$bin/bench/gpu_train_bench" \
    --model "$MODEL" --device "$DEVICE" --lengths data/wikipedia-sample-lengths.txt \
    --context "$CONTEXT" --tokens-per-step "$TOKENS" --steps "$STEPS" --warmup 3 \
    --batches-out "$work/batches.json" --json "$OUT/ours.json"
fi
if [ -f "$work/batches.json" ] && [ "$PEERS" = 1 ]; then
  for impl in hf eager; do
    stage "throughput: peer ($impl)" "$LIMIT_PEER" "$OUT/bench.txt" env PYTHONUNBUFFERED=1 "$PY" \
      bench/peer_train.py --batches "$work/batches.json" --model "$MODEL" \
      --impl "$impl" --device "$DEVICE" --warmup-steps 3 --json "$OUT/peer-$impl.json"
  done
fi
"$PY" - "$OUT" >> "$summary" 2>&1 << 'PYEOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) else None
ours = load("ours.json")
if ours:
    print(f"hydraulis: {ours['tokens_per_s']:.0f} tokens/s, MFU {ours['mfu']}")
for impl in ("hf", "eager"):
    peer = load(f"peer-{impl}.json")
    if peer and ours:
        print(f"peer {impl}: {peer['tokens_per_s']:.0f} tokens/s, MFU {peer.get('mfu')}; "
              f"ours/peer = {ours['tokens_per_s'] / peer['tokens_per_s']:.3f}")
PYEOF
note "done in $((SECONDS - check_start)) s: $([ $failed -eq 0 ] && echo all stages passed || echo some stage failed)"
exit $failed
