#!/usr/bin/env bash
# The runtime binary links libtorch and no MILP solver (CBC serves only the published
# planner, in the planning binary). Usage: runtime_links_test.sh HYDRAULIS_RUNTIME_BINARY
set -euo pipefail
needed=$(readelf -d "$1" | awk '/NEEDED/ {print $NF}')
if ! grep -q 'libtorch' <<<"$needed"; then
  echo "runtime_links_test: no libtorch among $1's libraries; is it the runtime binary?" >&2
  exit 1
fi
if grep -i 'cbc' <<<"$needed"; then
  echo "runtime_links_test: $1 links CBC" >&2
  exit 1
fi
echo "runtime_links_test: $1 links libtorch and no CBC"
