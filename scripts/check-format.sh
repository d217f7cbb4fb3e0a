#!/usr/bin/env bash
# Fails when a C++ file is not clang-formatted (.clang-format at the root).
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.cc' '*.h' 2>/dev/null || find include src tools bench gen tests -name '*.cc' -o -name '*.h')
clang-format --dry-run --Werror $files
