#!/usr/bin/env bash
# End-to-end checks of `hydraulis`. Usage: cli_test.sh HYDRAULIS_BINARY SOURCE_DIR
set -euo pipefail
exit 0
