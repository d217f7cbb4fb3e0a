#!/usr/bin/env bash
# Runs the libFuzzer targets (fuzz/README.md).
#   scripts/fuzz.sh [--seconds N | --runs N] [--timeout S] [NAME...]
# builds the `fuzz` preset (clang, ASan + UBSan) and runs each named fuzzer (default: all)
# on its seed corpus fuzz/corpus/NAME, for N seconds (default 5) or N executions. New
# inputs go to build/fuzz/corpus/NAME, never into the repository; a finding is written to
# build/fuzz/findings/ and makes the script exit non-zero. The last line of each run
# (executions, coverage, speed) is appended to build/fuzz/runs.log.
# --timeout S: one input running longer than S seconds (wall clock; default 10) is a
# finding; long runs at nice 19 beside builds raise it, since starvation is not a hang.
# ctest (`ctest --preset fuzz`) calls it with --build-dir, after the build.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir=""
limit=(-max_total_time=5)
timeout=10
names=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --seconds) limit=(-max_total_time="$2"); shift 2 ;;
    --runs) limit=(-runs="$2"); shift 2 ;;
    --timeout) timeout="$2"; shift 2 ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
if [[ -z $build_dir ]]; then
  "$root/scripts/install-deps.sh"
  cmake --preset fuzz -S "$root" >/dev/null
  cmake --build --preset fuzz
  build_dir="$root/build/fuzz"
fi
if [[ ${#names[@]} -eq 0 ]]; then
  names=($(cd "$root/fuzz/corpus" && ls))
fi
mkdir -p "$build_dir/findings"
status=0
for name in "${names[@]}"; do
  binary="$build_dir/fuzz/${name}_fuzzer"
  seeds="$root/fuzz/corpus/$name"
  [[ -x $binary && -d $seeds ]] || { echo "fuzz.sh: no fuzzer named $name" >&2; exit 2; }
  work="$build_dir/corpus/$name"
  mkdir -p "$work"
  dict=()
  [[ -f $root/fuzz/$name.dict ]] && dict=(-dict="$root/fuzz/$name.dict")
  log="$build_dir/findings/$name.log"
  if "$binary" "${limit[@]}" "${dict[@]}" -max_len=65536 -timeout="$timeout" -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$build_dir/findings/$name-" \
      "$work" "$seeds" >"$log" 2>&1; then
    summary="$(grep -E '^#[0-9]+.*DONE' "$log" | tail -1)"
    execs="$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')"
    echo "$(date -u +%FT%TZ) $name ok executions=$execs ${summary}" | tee -a "$build_dir/runs.log"
  else
    echo "fuzz.sh: $name found a problem; see $log and $build_dir/findings/" >&2
    tail -30 "$log" >&2
    status=1
  fi
done
exit $status
