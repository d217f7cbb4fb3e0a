#!/usr/bin/env bash
# Builds the Python package `hydraulis` (pyproject.toml: the planning layers behind a
# nanobind module, no torch) and installs it into the project's .venv, so that
# `.venv/bin/python -c "import hydraulis"` works (docs/python.md). Incremental: the CMake
# build stays in build/python. Needs scripts/install-deps.sh first (the .venv, its pinned
# scikit-build-core and nanobind).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pip install --quiet --no-build-isolation --no-deps .
