#!/usr/bin/env bash
# The project's test command (README.md; CI runs exactly this): installs dependencies,
# checks formatting, builds the release preset and runs every test, then builds the
# ASan+UBSan preset and runs the unit tests under the sanitizers, then runs every libFuzzer
# target for a few seconds (fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/check-format.sh
./scripts/build.sh release
# The runtime is built only when CMake finds PyTorch; the tests must not pass without it.
build/release/tools/hydraulis --version | grep -q "built against PyTorch" ||
  { echo "test.sh: the training runtime was not built (PyTorch not found in .venv)" >&2; exit 1; }
ctest --preset release -j2
./scripts/build.sh asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --preset asan -j2
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
ctest --preset fuzz -j2
echo "test.sh: all tests passed"
