#!/usr/bin/env bash
# Copies the binaries scripts/gpu-check.sh needs from the release build into
# build/gpu-prebuilt (a few MB), for a GPU machine that has PyTorch but not the compiler
# or the Debian packages: carry that folder there. They load libtorch from that machine's
# torch (LD_LIBRARY_PATH), so its torch must be the version recorded in torch-version.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh release
dest=build/gpu-prebuilt
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
cp build/release/src/runtime/gpu_test build/release/src/runtime/runtime_test \
   build/release/bench/gpu_train_bench "$dest.tmp/"
.venv/bin/python -c 'import torch; print(torch.__version__)' > "$dest.tmp/torch-version"
pwd > "$dest.tmp/source-dir"  # the tests' compiled-in source path
rm -rf "$dest" && mv "$dest.tmp" "$dest"
echo "pack-gpu-prebuilt: $dest ($(du -sh "$dest" | cut -f1)), torch $(cat "$dest/torch-version")"
