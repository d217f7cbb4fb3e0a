#!/usr/bin/env bash
# Installs what hydraulis builds against. Idempotent: nothing is downloaded when all is there.
#  - Debian 12 packages (compiler, CMake, GoogleTest, Benchmark, nlohmann-json, CLI11, fmt,
#    CBC, Gloo's headers, xxHash, PCRE2, utf8proc, clang with libFuzzer) with apt, when missing;
#  - the project-local virtual environment .venv/ with the pinned PyTorch from PyPI (its
#    wheel carries libtorch: headers, libraries, CMake config), when missing or another
#    version. The runtime builds against it (docs/runtime.md, "Which PyTorch").
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(build-essential cmake g++ pkg-config clang-format python3 python3-venv python3-dev
          libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libcli11-dev libfmt-dev coinor-libcbc-dev libgloo-dev
          libxxhash-dev libpcre2-dev libutf8proc-dev clang-14 libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q || true
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The pinned Python packages (scripts/requirements.txt). The marker file records what was
# installed, so an up-to-date .venv costs one file comparison.
requirements=scripts/requirements.txt
marker=.venv/.hydraulis-requirements
if [ -x .venv/bin/python ] && [ -f "$marker" ] && cmp -s "$requirements" "$marker"; then
  exit 0
fi
echo "install-deps: setting up .venv with $(tr '\n' ' ' < "$requirements")" >&2
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q -r "$requirements"
cp "$requirements" "$marker"
