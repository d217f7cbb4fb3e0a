#!/usr/bin/env bash
# Installs dependencies (idempotent) and builds one CMake preset (default: release), then
# installs the Python package into .venv (release), and
# makes the demo training corpus build/<preset>/demo-corpus.{bin,idx} once (docs/runtime.md,
# "Training data"): local copyright and license texts, byte-tokenized; nothing downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
./scripts/install-deps.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
# The Python package (planning layers only) into .venv, beside the release build.
if [[ $preset == release ]]; then ./scripts/install-python-package.sh; fi
corpus="build/$preset/demo-corpus"
if [[ ! -f $corpus.bin || ! -f $corpus.idx ]]; then
  ./scripts/make-demo-corpus.sh "$corpus.jsonl"
  "build/$preset/tools/hydraulis" preprocess --input "$corpus.jsonl" --output-prefix "$corpus" \
    --tokenizer byte
fi
