#!/usr/bin/env bash
# Writes OUT_DIR/wiki.{bin,idx} once: a corpus of byte-level documents of random letters
# with the real Wikipedia lengths of data/wikipedia-sample-lengths.txt (the first 4,000),
# for the CPU training benchmarks (train_bench.sh, cp_prediction.sh), where the length
# distribution is what matters.
#
# Usage: bench/wiki_corpus.sh HYDRAULIS_BINARY OUT_DIR
set -euo pipefail
BIN=$1
OUT=$2
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
if [[ ! -f $OUT/wiki.idx ]]; then
  awk 'NR <= 4000 { n = $1; s = ""; for (j = 0; j < n; ++j) s = s sprintf("%c", 97 + (NR * 7 + j * 3) % 26); printf "{\"text\": \"%s\"}\n", s }' \
    "$SRC/data/wikipedia-sample-lengths.txt" >"$OUT/wiki.jsonl"
  "$BIN" preprocess --input "$OUT/wiki.jsonl" --output-prefix "$OUT/wiki" >/dev/null
fi
