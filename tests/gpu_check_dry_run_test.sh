#!/usr/bin/env bash
# The GPU check cannot rot between GPU runs: on this CPU machine, pack the prebuilt folder
# from the release build (scripts/pack-gpu-prebuilt.sh), run scripts/gpu-check.sh from it
# on the CPU with the tiny model (no bar on the prediction error: this is the plumbing),
# and check its summary (every stage passed, ours/peer
# against both peers, the prebuilt path named); then run it with a one-second limit on the
# throughput stage and check that the stage fails by name while the check goes on.
#   gpu_check_dry_run_test.sh BUILD_DIR SOURCE_DIR PYTHON
set -uo pipefail
build=$1 src=$2 py=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; for d in out slow; do echo "--- $d"; cat "$tmp/$d/summary.txt" 2>/dev/null; done; exit 1; }

HYDRAULIS_BUILD_DIR=$build scripts/pack-gpu-prebuilt.sh "$tmp/prebuilt" || fail "pack"
size_kib=$(du -sk "$tmp/prebuilt" | cut -f1)
[ "$size_kib" -le $((40 * 1024)) ] || fail "prebuilt folder is $size_kib KiB"
[ -x "$tmp/prebuilt/gpu_train_bench" ] && [ -f "$tmp/prebuilt/torch-version" ] ||
  fail "prebuilt folder incomplete"

dry() {  # OUT and any overrides as arguments
  env OUT="$1" HYDRAULIS_PREBUILT="$tmp/prebuilt" HYDRAULIS_PYTHON="$py" GPU_CHECK_DEVICE=cpu \
    GPU_CHECK_MODEL=configs/models/tiny.json GPU_CHECK_CONTEXT=512 GPU_CHECK_TOKENS=2048 \
    GPU_CHECK_STEPS=2 GPU_CHECK_PREDICTION_TOLERANCE=100 "${@:2}" scripts/gpu-check.sh \
    > "$1.log" 2>&1
}
dry "$tmp/out" || fail "dry run exited $? ($(tail -3 "$tmp/out.log"))"
s=$tmp/out/summary.txt
grep -q "using prebuilt binaries from $tmp/prebuilt" "$s" || fail "prebuilt path not named"
for stage in "GPU tests" "training CLI: checkpoint and resume" \
             "cost model: fitted here, predicted against measured" \
             "calibration on the device" "throughput: hydraulis" \
             "throughput: peer (hf)" \
             "throughput: peer (eager)"; do
  grep -q "PASS $stage" "$s" || fail "stage '$stage' did not pass"
done
[ "$(grep -c "ours/peer = " "$s")" -eq 2 ] || fail "no ours/peer for both peers"
grep -q "done in .* s: all stages passed" "$s" || fail "no final line"

# A stage past its limit fails by name; the next stages still run.
if dry "$tmp/slow" GPU_CHECK_LIMIT_OURS=1 GPU_CHECK_STEPS=100000 \
     GPU_CHECK_GTEST_FILTER='GpuTest.CudaRequest*'; then
  fail "a stage past its limit did not fail the check"
fi
grep -q "FAIL throughput: hydraulis: past its time limit of 1 s" "$tmp/slow/summary.txt" ||
  { cat "$tmp/slow/summary.txt"; fail "the slow stage was not named"; }
grep -q "some stage failed" "$tmp/slow/summary.txt" || fail "no failure summary"
echo "gpu-check dry run: all checks passed"
