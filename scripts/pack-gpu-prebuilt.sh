#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs, from binaries an existing release build already
# made (it builds nothing: run `./scripts/build.sh release` first), into one folder of at
# most 40 MiB to carry to a GPU machine that has PyTorch but not the compiler or the Debian
# packages: gpu_test, runtime_test, gpu_train_bench, hydraulis-runtime (the training CLI) and
# corpus.{bin,idx} for it; in lib/ the shared libraries they need
# from this machine outside libtorch and glibc (CBC's, BLAS/LAPACK, libstdc++ of g++ 12);
# torch-version (that machine's torch must be this version: the binaries load its libtorch)
# and source-dir (the tests' compiled-in source path).
#   scripts/pack-gpu-prebuilt.sh [DEST]    (default build/gpu-prebuilt)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-build/gpu-prebuilt}
build=${HYDRAULIS_BUILD_DIR:-build/release}
limit_mib=40  # the GPU machine takes 64 MiB of working tree in all
binaries=("$build/src/runtime/gpu_test" "$build/src/runtime/runtime_test"
          "$build/bench/gpu_train_bench" "$build/tools/hydraulis-runtime")
for b in "${binaries[@]}"; do
  if [ ! -x "$b" ]; then
    echo "pack-gpu-prebuilt: $b is missing: build it first (./scripts/build.sh release)" >&2
    exit 2
  fi
done
py=.venv/bin/python
[ -x "$py" ] || py=python3
torch_lib=$("$py" -c 'import os, torch; print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib")))')
torch_root=$(dirname "$(dirname "$torch_lib")")  # site-packages: torch's and nvidia's libraries
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp/lib"
cp "${binaries[@]}" "$dest.tmp/"
# Without their symbol tables (a fifth smaller); the libraries' are kept.
for b in "${binaries[@]}"; do strip --strip-unneeded "$dest.tmp/$(basename "$b")"; done
# Libraries from outside the torch wheels and outside glibc's core (every Linux has those).
for b in "${binaries[@]}"; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r lib; do
    real=$(realpath "$lib")
    case "$real" in "$torch_root"/*) continue ;; esac
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|libutil.so.*|ld-linux*) continue ;;
    esac
    cp -L "$lib" "$dest.tmp/lib/$(basename "$lib")"
  done
# The training CLI's corpus: the first 60 documents of the demo corpus (about 0.8M byte
# tokens), preprocessed by the release build (the GPU machine lacks the Debian texts).
demo=$build/demo-corpus.jsonl
if [ ! -f "$demo" ]; then
  echo "pack-gpu-prebuilt: $demo is missing: build it first (./scripts/build.sh release)" >&2
  exit 2
fi
head -n 60 "$demo" > "$dest.tmp/corpus.jsonl"
"$build/tools/hydraulis" preprocess --input "$dest.tmp/corpus.jsonl" \
  --output-prefix "$dest.tmp/corpus" --tokenizer byte > /dev/null
rm "$dest.tmp/corpus.jsonl"
"$py" -c 'import torch; print(torch.__version__)' > "$dest.tmp/torch-version"
pwd > "$dest.tmp/source-dir"
size_kib=$(du -sk "$dest.tmp" | cut -f1)
if [ "$size_kib" -gt $((limit_mib * 1024)) ]; then
  echo "pack-gpu-prebuilt: $((size_kib / 1024)) MiB is over the ${limit_mib} MiB limit:" >&2
  du -ak "$dest.tmp" | sort -n | tail -5 >&2
  rm -rf "$dest.tmp"
  exit 1
fi
rm -rf "$dest" && mv "$dest.tmp" "$dest"
echo "pack-gpu-prebuilt: $dest ($((size_kib / 1024)) MiB: $(ls "$dest/lib" | wc -l) libraries)," \
  "torch $(cat "$dest/torch-version")"
