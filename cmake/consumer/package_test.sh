#!/usr/bin/env bash
# The library as a package: installs BUILD_DIR into a fresh prefix, builds the consumer
# project beside this script with find_package(hydraulis) from that prefix, and plans a batch
# with it; the plan must equal `hydraulis plan`'s on the same input. Where the build has the
# training runtime, the consumer also runs its Transformer through hydraulis::runtime.
# Usage: package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log"
for f in lib/cmake/hydraulis/hydraulisConfig.cmake lib/cmake/hydraulis/hydraulisTargets.cmake \
  include/hydraulis/assign/planner.h lib/libhydraulis_assign.a bin/hydraulis; do
  [[ -e $tmp/prefix/$f ]] || { echo "package_test: $f not installed" >&2; exit 1; }
done
# The installed headers name no third-party type but torch's, and need no internal/ header.
if grep -rlE 'nlohmann|"hydraulis/[a-z_/]*internal/' "$tmp/prefix/include" >&2; then
  echo "package_test: the installed headers above include nlohmann-json or an internal/ header" >&2
  exit 1
fi
# The runtime is in the package exactly when the build has it (with its headers, not the
# CLI's launcher's).
runtime=$(sed -n 's/^HYDRAULIS_BUILD_RUNTIME:BOOL=//p' "$build/CMakeCache.txt")
if [[ $runtime == ON ]]; then
  for f in lib/cmake/hydraulis/hydraulisRuntimeTargets.cmake lib/libhydraulis_runtime_job.a \
    include/hydraulis/runtime/model/transformer.h; do
    [[ -e $tmp/prefix/$f ]] || { echo "package_test: $f not installed" >&2; exit 1; }
  done
  [[ ! -e $tmp/prefix/include/hydraulis/runtime/launch ]] ||
    { echo "package_test: the launcher's header was installed" >&2; exit 1; }
else
  [[ ! -e $tmp/prefix/include/hydraulis/runtime ]] ||
    { echo "package_test: the runtime's headers were installed without the runtime" >&2; exit 1; }
fi
cmake -S "$src/cmake/consumer" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/configure.log" ||
  { cat "$tmp/configure.log" >&2; exit 1; }
cmake --build "$tmp/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log" >&2; exit 1; }
profile=$src/configs/profiles/llama-32b-a800.json
cands=$src/configs/candidates/llama-32b-64gpu.json
lengths=(4096 812 30000 77 15000 2200 9000 640)
got=$("$tmp/build/plan_one_batch" "$profile" "$cands" "${lengths[@]}")
printf '%s\n' "${lengths[@]}" >"$tmp/lengths.txt"
want=$("$tmp/prefix/bin/hydraulis" plan --profile "$profile" --candidates "$cands" \
  --lengths "$tmp/lengths.txt" --no-timing | python3 -c '
import json, sys
p = json.load(sys.stdin)
print("strategy %d step_ms %.3f bound_ms %.3f" % (p["strategy"]["index"], p["estimated_step_ms"], p["lower_bound_ms"]))')
[[ $got == "$want" ]] || { echo "package_test: consumer says '$got', hydraulis plan '$want'" >&2; exit 1; }
echo "package_test: installed, found and planned: $got"
if [[ $runtime == ON ]]; then
  [[ -x $tmp/build/packed_forward ]] ||
    { echo "package_test: find_package(hydraulis) offered no hydraulis::runtime" >&2; exit 1; }
  "$tmp/build/packed_forward"
fi
