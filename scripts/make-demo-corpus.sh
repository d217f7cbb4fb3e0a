#!/usr/bin/env bash
# Builds the demo training corpus as JSON lines from text that every Debian 12 machine
# already has: each /usr/share/doc/*/copyright file and each /usr/share/common-licenses/*
# file is one document ({"source": PATH, "text": CONTENT}). Nothing is downloaded.
#
# Usage: make-demo-corpus.sh OUT.jsonl
#
# Deterministic on a given machine: files in byte order of their path (LC_ALL=C); a file
# whose content equals one already taken is skipped (packages of one source often ship
# the same copyright file, through symlinks or as copies: the four Boost libraries' 2 MB
# file would otherwise be a third of the corpus). Empty files are left out; files
# with a NUL byte or not valid UTF-8 are skipped (JSON strings must be UTF-8) and counted
# on stderr. The corpus differs between machines with different packages installed.
#
# Only tools from Debian's essential packages (bash, coreutils, GNU sed and grep, with
# the C.UTF-8 locale of libc-bin): JSON escaping is done by sed, so python3 is not needed.
set -euo pipefail
export LC_ALL=C

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUT.jsonl" >&2
  exit 2
fi
out=$1
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT

# sed program escaping a whole file (read as one record with -z) into a JSON string body:
# backslash and quote first, then newline and tab, then the other control characters.
escape=(-e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\n/\\n/g' -e 's/\t/\\t/g')
for code in $(seq 1 31); do
  [[ $code -eq 9 || $code -eq 10 ]] && continue
  hex=$(printf '%02x' "$code")
  escape+=(-e "s/\\x$hex/\\\\u00$hex/g")
done

# Candidates in byte order of their path.
mapfile -t paths < <(
  shopt -s nullglob
  for f in /usr/share/doc/*/copyright /usr/share/common-licenses/*; do
    [[ -f $f && -s $f ]] && printf '%s\n' "$f"
  done | sort
)
if [[ ${#paths[@]} -eq 0 ]]; then
  echo "make-demo-corpus: no copyright or license files found" >&2
  exit 1
fi
mapfile -t sums < <(sha256sum -- "${paths[@]}" | cut -c1-64)
# One grep per check over all files, not a process per file: lines that are not UTF-8
# (a UTF-8 locale's '.' does not match an invalid byte) and NUL bytes.
declare -A rejected=()
while IFS= read -r f; do rejected[$f]=1; done < <(
  LC_ALL=C.UTF-8 grep -laxv '.*' -- "${paths[@]}" || true
  grep -laP '\x00' -- "${paths[@]}" || true
)

documents=0
skipped=0
declare -A seen=()
: >"$tmp"
for i in "${!paths[@]}"; do
  path=${paths[$i]}
  sum=${sums[$i]}
  [[ -n ${seen[$sum]+x} ]] && continue
  seen[$sum]=1
  # Paths are package and license names; one needing JSON escapes is skipped too.
  if [[ -n ${rejected[$path]+x} || $path == *[\"\\]* || $path == *[[:cntrl:]]* ]]; then
    skipped=$((skipped + 1))
    continue
  fi
  {
    printf '{"source": "%s", "text": "' "$path"
    sed -z "${escape[@]}" -- "$path"
    printf '"}\n'
  } >>"$tmp"
  documents=$((documents + 1))
done

if [[ $documents -eq 0 ]]; then
  echo "make-demo-corpus: no usable copyright or license files found" >&2
  exit 1
fi
mv -f "$tmp" "$out"
trap - EXIT
echo "make-demo-corpus: $out: $documents documents ($skipped files skipped: NUL bytes or" \
  "not UTF-8; $((${#paths[@]} - documents - skipped)) duplicates)" >&2
