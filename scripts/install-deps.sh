#!/usr/bin/env bash
# Installs the Debian 12 packages hydraulis builds against. Idempotent: packages already
# present are not reinstalled, and nothing is downloaded when all are there.
set -euo pipefail
packages=(build-essential cmake g++ pkg-config clang-format
          libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libcli11-dev libfmt-dev coinor-libcbc-dev
          libtorch-dev libgloo-dev libopenblas0-pthread)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q || true
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
