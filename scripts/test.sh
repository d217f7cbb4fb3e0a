#!/usr/bin/env bash
# The project's test command (README.md; CI runs exactly this): installs dependencies,
# checks formatting, builds the release preset and runs every test, then builds the
# ASan+UBSan preset and runs the unit tests under the sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/check-format.sh
./scripts/build.sh release
ctest --preset release -j2
./scripts/build.sh asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --preset asan -j2
echo "test.sh: all tests passed"
