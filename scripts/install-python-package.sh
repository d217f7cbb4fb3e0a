#!/usr/bin/env bash
# Builds the Python package `hydraulis` (pyproject.toml: the planning layers behind a
# nanobind module, no torch) and installs it into the project's .venv, so that
# `.venv/bin/python -c "import hydraulis"` works (docs/python.md). Incremental: the CMake
# build stays in build/python. Needs scripts/install-deps.sh first (the .venv, its pinned
# scikit-build-core and nanobind).
set -euo pipefail
cd "$(dirname "$0")/.."
# build-dir keeps the CMake build between installs here; a plain `pip install .` (no build-dir)
# builds in a temporary directory and writes nothing into the source tree.
.venv/bin/python -m pip install --quiet --no-build-isolation --no-deps \
  --config-settings=build-dir=build/python .
