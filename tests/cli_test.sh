#!/usr/bin/env bash
# End-to-end checks of `hydraulis`. Usage: cli_test.sh HYDRAULIS_BINARY SOURCE_DIR
# Every check runs; the script prints "FAIL: <check>" for each failed one and exits 1 if any
# failed.
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 HYDRAULIS_BINARY SOURCE_DIR" >&2
  exit 2
fi
BIN=$1
SRC=$2
PROFILE=$SRC/configs/profiles/llama-32b-a800.json
CANDS=$SRC/configs/candidates/llama-32b-64gpu.json
CANDS_1024=$SRC/configs/candidates/llama-32b-1024gpu.json
for f in "$BIN" "$PROFILE" "$CANDS" "$CANDS_1024"; do
  [[ -e $f ]] || { echo "FAIL: setup: $f does not exist" >&2; exit 1; }
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

FAILED=0
CHECKS=0
CURRENT=""
check() { CURRENT=$1; CHECKS=$((CHECKS + 1)); }
fail() {
  FAILED=$((FAILED + 1))
  echo "FAIL: $CURRENT: $*" >&2
}

# hyd NAME ARGS...: runs the binary with stdout/stderr in $TMP/NAME.{out,err}, status in RC.
hyd() {
  local name=$1
  shift
  "$BIN" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
  RC=$?
}
# hyd_in NAME INPUT ARGS...: the same with INPUT on stdin.
hyd_in() {
  local name=$1 input=$2
  shift 2
  "$BIN" "$@" <"$input" >"$TMP/$name.out" 2>"$TMP/$name.err"
  RC=$?
}

expect_rc() {  # expect_rc NAME WANTED
  if [[ $RC -ne $2 ]]; then
    fail "exit status $RC, expected $2; stderr: $(head -c 600 "$TMP/$1.err")"
  fi
}
expect_empty_stdout() {
  if [[ -s $TMP/$1.out ]]; then fail "stdout not empty: $(head -c 300 "$TMP/$1.out")"; fi
}
expect_empty_stderr() {
  if [[ -s $TMP/$1.err ]]; then fail "stderr not empty: $(head -c 300 "$TMP/$1.err")"; fi
}
expect_one_line_stderr() {
  local lines
  lines=$(wc -l <"$TMP/$1.err")
  if [[ $lines -ne 1 ]]; then fail "stderr has $lines lines, expected 1: $(cat "$TMP/$1.err")"; fi
}
expect_stderr_has() {  # expect_stderr_has NAME FRAGMENT (fixed string)
  if ! grep -qF -- "$2" "$TMP/$1.err"; then
    fail "stderr lacks '$2': $(head -c 600 "$TMP/$1.err")"
  fi
}
# A usage or input error: status 2, one line on stderr naming what was wrong, no stdout.
expect_input_error() {  # expect_input_error NAME FRAGMENT...
  local name=$1
  shift
  expect_rc "$name" 2
  expect_empty_stdout "$name"
  expect_one_line_stderr "$name"
  local fragment
  for fragment in "$@"; do expect_stderr_has "$name" "$fragment"; done
}

HAVE_PYTHON=0
if command -v python3 >/dev/null 2>&1; then HAVE_PYTHON=1; fi

# Structural checks of plan JSON: python3 $TMP/check_plan.py FILE [options], see below.
cat >"$TMP/check_plan.py" <<'PY'
import argparse, json, math, sys

ap = argparse.ArgumentParser()
ap.add_argument("file")
ap.add_argument("--lines", type=int, help="JSON lines file with this many plans")
ap.add_argument("--docs", type=int, help="documents in the (single) input batch")
ap.add_argument("--tokens", type=int, help="num_tokens every plan must have")
ap.add_argument("--timing", choices=["yes", "no"], default="yes")
ap.add_argument("--algorithm")
ap.add_argument("--truncated", help="index:original of the only truncated document")
args = ap.parse_args()

errors = []
def err(msg):
    errors.append(msg)

def number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

def check(plan, where):
    def e(msg):
        err(f"{where}: {msg}")
    for key in ("strategy", "pipelines", "estimated_step_ms", "lower_bound_ms", "truncated",
                "num_documents", "num_tokens"):
        if key not in plan:
            e(f"missing field {key}")
            return
    if args.timing == "yes":
        if not number(plan.get("planning_ms")) or plan["planning_ms"] < 0:
            e(f"planning_ms missing or not a number >= 0: {plan.get('planning_ms')!r}")
    elif "planning_ms" in plan:
        e("planning_ms present with --no-timing")
    if args.algorithm and plan.get("algorithm") != args.algorithm:
        e(f"algorithm {plan.get('algorithm')!r}, expected {args.algorithm!r}")
    sp = plan["strategy"].get("pipelines")
    if not isinstance(sp, list) or not sp:
        e("strategy.pipelines is not a non-empty list")
        return
    schemes = []
    for i, p in enumerate(sp):
        for k in ("cp", "tp", "pp"):
            if not isinstance(p.get(k), int) or p[k] < 1:
                e(f"strategy.pipelines[{i}].{k} is not an integer >= 1: {p.get(k)!r}")
                return
        schemes.append((p["cp"], p["tp"], p["pp"]))
    pipes = plan["pipelines"]
    if not isinstance(pipes, list) or len(pipes) != len(sp):
        e(f"{len(pipes)} pipelines in the plan, {len(sp)} in the strategy")
        return
    if sorted(schemes) != sorted((p.get("cp"), p.get("tp"), p.get("pp")) for p in pipes):
        e("pipelines[] schemes do not match strategy.pipelines")
    n = plan["num_documents"]
    if args.docs is not None and n != args.docs:
        e(f"num_documents {n}, expected {args.docs}")
    seen = [0] * n
    worst = 0.0
    tokens = 0
    for i, p in enumerate(pipes):
        if not number(p.get("estimated_ms")) or p["estimated_ms"] < 0:
            e(f"pipelines[{i}].estimated_ms is not a number >= 0: {p.get('estimated_ms')!r}")
            return
        worst = max(worst, p["estimated_ms"])
        mbs = p.get("micro_batches")
        if not isinstance(mbs, list):
            e(f"pipelines[{i}].micro_batches is not a list")
            return
        tokens += p.get("tokens", 0)
        for mb in mbs:
            if not isinstance(mb, list) or not mb:
                e(f"pipelines[{i}] has an empty or malformed micro-batch: {mb!r}")
                return
            for d in mb:
                if not isinstance(d, int) or not 0 <= d < n:
                    e(f"pipelines[{i}] lists document {d!r}, outside [0, {n})")
                    return
                seen[d] += 1
    bad = [d for d, c in enumerate(seen) if c != 1]
    if bad:
        e(f"documents not assigned exactly once (index: count): "
          f"{[(d, seen[d]) for d in bad[:10]]}")
    if tokens != plan["num_tokens"]:
        e(f"pipeline tokens add up to {tokens}, num_tokens is {plan['num_tokens']}")
    if args.tokens is not None and plan["num_tokens"] != args.tokens:
        e(f"num_tokens {plan['num_tokens']}, expected {args.tokens}")
    step, lb = plan["estimated_step_ms"], plan["lower_bound_ms"]
    if not number(step) or not number(lb):
        e(f"estimated_step_ms {step!r} / lower_bound_ms {lb!r} are not numbers")
        return
    if abs(step - worst) > 1e-9 * max(1.0, step):
        e(f"estimated_step_ms {step} is not the slowest pipeline's {worst}")
    if not 0 < lb <= step * (1 + 1e-9):
        e(f"lower_bound_ms {lb} not in (0, estimated_step_ms {step}]")
    trunc = plan["truncated"]
    if not isinstance(trunc, list):
        e("truncated is not a list")
    elif args.truncated:
        index, original = map(int, args.truncated.split(":"))
        if len(trunc) != 1 or trunc[0].get("index") != index or \
                trunc[0].get("original") != original:
            e(f"truncated is {trunc!r}, expected index {index} original {original}")
        elif not 0 < trunc[0].get("kept", 0) < original:
            e(f"kept {trunc[0].get('kept')!r} not in (0, {original})")
    elif trunc:
        e(f"unexpected truncations: {trunc!r}")

text = open(args.file).read()
if args.lines is not None:
    lines = text.split("\n")
    if lines[-1] != "":
        err("output does not end with a newline")
    lines = lines[:-1]
    if len(lines) != args.lines:
        err(f"{len(lines)} lines, expected {args.lines}")
    for i, line in enumerate(lines):
        try:
            check(json.loads(line), f"line {i + 1}")
        except json.JSONDecodeError as ex:
            err(f"line {i + 1}: invalid JSON: {ex}")
else:
    try:
        check(json.loads(text), "plan")
    except json.JSONDecodeError as ex:
        err(f"invalid JSON: {ex}")
for m in errors:
    print(m, file=sys.stderr)
sys.exit(1 if errors else 0)
PY

# check_plan FILE ARGS...: structural checks (python3), or a grep fallback without python3.
check_plan() {
  local file=$1
  shift
  if [[ $HAVE_PYTHON -eq 1 ]]; then
    local out
    if ! out=$(python3 "$TMP/check_plan.py" "$file" "$@" 2>&1); then fail "$out"; fi
  else
    local key
    for key in '"strategy"' '"pipelines"' '"micro_batches"' '"estimated_ms"' \
      '"estimated_step_ms"' '"lower_bound_ms"' '"truncated"'; do
      grep -qF "$key" "$file" || fail "output lacks $key"
    done
  fi
}

# Inputs. One batch of 62 documents (~234K tokens): 60 of up to 6,000 tokens and two long
# ones (30,000 tokens fits only a TP16 pipeline of the 64-GPU candidates).
LENGTHS=$TMP/lengths.txt
{
  echo "# one batch"
  for i in $(seq 0 59); do echo $(((i * 7919 + 37) % 6000 + 1)); done
  echo
  echo 30000
  echo 21000
} >"$LENGTHS"
NDOCS=62
LENGTHS_JSON=$TMP/lengths.json
grep -v -e '^#' -e '^$' "$LENGTHS" | paste -sd, - | sed 's/^/[/; s/$/]/' >"$LENGTHS_JSON"
LENGTHS_CRLF=$TMP/lengths-crlf.txt
sed 's/$/\r/' "$LENGTHS" >"$LENGTHS_CRLF"
DATASET=$TMP/dataset.txt
for i in $(seq 1 3000); do echo $(((i * 104729) % 9000 + 1)); done >"$DATASET"
printf '1000\n100000\n500\n' >"$TMP/overlong.txt"

PLAN=(plan --profile "$PROFILE" --candidates "$CANDS")

# --- One batch from a file -------------------------------------------------------------
check "plan --lengths FILE prints a valid plan"
hyd basic "${PLAN[@]}" --lengths "$LENGTHS"
expect_rc basic 0
expect_empty_stderr basic
check_plan "$TMP/basic.out" --docs $NDOCS --timing yes --algorithm ours
if [[ $(wc -l <"$TMP/basic.out") -ne 1 ]]; then fail "expected one line of JSON"; fi

check "plan --pretty prints the same plan indented"
hyd pretty "${PLAN[@]}" --lengths "$LENGTHS" --pretty --no-timing
expect_rc pretty 0
check_plan "$TMP/pretty.out" --docs $NDOCS --timing no
if [[ $(wc -l <"$TMP/pretty.out") -lt 10 ]]; then fail "--pretty output is not indented"; fi

check "plan on the 1024-GPU candidates"
hyd big plan --profile "$PROFILE" --candidates "$CANDS_1024" --lengths "$LENGTHS" --no-timing
expect_rc big 0
check_plan "$TMP/big.out" --docs $NDOCS --timing no

# --- Input forms give identical plans ----------------------------------------------------
hyd ref "${PLAN[@]}" --lengths "$LENGTHS" --no-timing
check "--no-timing reference run"
expect_rc ref 0
check_plan "$TMP/ref.out" --docs $NDOCS --timing no

check "--lengths - reads stdin"
hyd_in stdin "$LENGTHS" "${PLAN[@]}" --lengths - --no-timing
expect_rc stdin 0
cmp -s "$TMP/ref.out" "$TMP/stdin.out" || fail "stdin plan differs from the file plan"

check "--lengths with a JSON array"
hyd json "${PLAN[@]}" --lengths "$LENGTHS_JSON" --no-timing
expect_rc json 0
cmp -s "$TMP/ref.out" "$TMP/json.out" || fail "JSON-array plan differs from the line-file plan"

check "--lengths - with a JSON array on stdin"
hyd_in jsonstdin "$LENGTHS_JSON" "${PLAN[@]}" --lengths - --no-timing
expect_rc jsonstdin 0
cmp -s "$TMP/ref.out" "$TMP/jsonstdin.out" || fail "stdin JSON-array plan differs"

check "--lengths with CRLF line ends"
hyd crlf "${PLAN[@]}" --lengths "$LENGTHS_CRLF" --no-timing
expect_rc crlf 0
cmp -s "$TMP/ref.out" "$TMP/crlf.out" || fail "CRLF plan differs from the LF plan"

# --- Output file ---------------------------------------------------------------------------
check "-o FILE writes the file and nothing to stdout"
mkdir "$TMP/outdir"
hyd ofile "${PLAN[@]}" --lengths "$LENGTHS" --no-timing -o "$TMP/outdir/plan.json"
expect_rc ofile 0
expect_empty_stdout ofile
expect_empty_stderr ofile
if [[ ! -f $TMP/outdir/plan.json ]]; then
  fail "$TMP/outdir/plan.json was not written"
else
  cmp -s "$TMP/ref.out" "$TMP/outdir/plan.json" || fail "file content differs from stdout plan"
  extra=$(find "$TMP/outdir" -mindepth 1 ! -name plan.json)
  if [[ -n $extra ]]; then fail "stray files left next to the output: $extra"; fi
fi

check "-o FILE replaces an existing file"
echo "old content" >"$TMP/outdir/old.json"
hyd oreplace "${PLAN[@]}" --lengths "$LENGTHS" --no-timing --output "$TMP/outdir/old.json"
expect_rc oreplace 0
expect_empty_stdout oreplace
cmp -s "$TMP/ref.out" "$TMP/outdir/old.json" || fail "existing file was not replaced by the plan"

check "-o into a nonexistent directory fails and leaves no file"
hyd onodir "${PLAN[@]}" --lengths "$LENGTHS" -o "$TMP/no-such-dir/plan.json"
expect_input_error onodir "$TMP/no-such-dir/plan.json"
[[ ! -e $TMP/no-such-dir ]] || fail "$TMP/no-such-dir was created"

# --- Dataset mode -----------------------------------------------------------------------------
check "--dataset --steps 3 writes 3 JSON lines"
hyd dataset "${PLAN[@]}" --dataset "$DATASET" --steps 3 --tokens-per-batch 60000
expect_rc dataset 0
check_plan "$TMP/dataset.out" --lines 3 --tokens 60000 --timing yes

check "--dataset with -o writes the lines to the file"
hyd dataseto "${PLAN[@]}" --dataset "$DATASET" --steps 3 --tokens-per-batch 60000 --no-timing \
  -o "$TMP/steps.jsonl"
expect_rc dataseto 0
expect_empty_stdout dataseto
check_plan "$TMP/steps.jsonl" --lines 3 --tokens 60000 --timing no

check "--dataset is deterministic for a seed and differs across seeds"
hyd dataset2 "${PLAN[@]}" --dataset "$DATASET" --steps 3 --tokens-per-batch 60000 --no-timing
expect_rc dataset2 0
cmp -s "$TMP/steps.jsonl" "$TMP/dataset2.out" || fail "two runs with the same seed differ"
hyd dataset3 "${PLAN[@]}" --dataset "$DATASET" --steps 3 --tokens-per-batch 60000 --no-timing \
  --seed 2
expect_rc dataset3 0
if cmp -s "$TMP/dataset2.out" "$TMP/dataset3.out"; then fail "seeds 1 and 2 gave the same batches"; fi

check "--dataset cuts documents to --max-len"
hyd maxlen "${PLAN[@]}" --dataset "$DATASET" --steps 2 --tokens-per-batch 20000 --max-len 500 \
  --no-timing
expect_rc maxlen 0
check_plan "$TMP/maxlen.out" --lines 2 --tokens 20000 --timing no
if [[ $HAVE_PYTHON -eq 1 ]]; then
  python3 - "$TMP/maxlen.out" <<'PY' || fail "documents were not cut to --max-len"
import json, sys
for line in open(sys.argv[1]):
    plan = json.loads(line)
    # 20000 tokens of documents cut to 500 tokens: at least 40 of them.
    assert plan["num_documents"] >= 40, plan["num_documents"]
PY
fi

# --- Determinism ------------------------------------------------------------------------------
for alg in ours static-fixed kk; do
  check "byte-identical output with --no-timing (--algorithm $alg)"
  hyd "det-$alg-1" "${PLAN[@]}" --lengths "$LENGTHS" --no-timing --algorithm "$alg"
  expect_rc "det-$alg-1" 0
  hyd "det-$alg-2" "${PLAN[@]}" --lengths "$LENGTHS" --no-timing --algorithm "$alg"
  expect_rc "det-$alg-2" 0
  [[ -s $TMP/det-$alg-1.out ]] || fail "no output"
  cmp -s "$TMP/det-$alg-1.out" "$TMP/det-$alg-2.out" || fail "two runs differ"
  check_plan "$TMP/det-$alg-1.out" --docs $NDOCS --timing no --algorithm "$alg"
done

# --- Documents longer than every capacity --------------------------------------------------
check "an overlong document is truncated with a warning"
hyd overlong "${PLAN[@]}" --lengths "$TMP/overlong.txt" --no-timing
expect_rc overlong 0
check_plan "$TMP/overlong.out" --docs 3 --timing no --truncated 1:100000
expect_stderr_has overlong "warning"
expect_one_line_stderr overlong
if [[ $HAVE_PYTHON -eq 1 ]]; then
  python3 - "$TMP/overlong.out" <<'PY' || fail "truncated document not kept at the largest capacity"
import json, sys
plan = json.load(open(sys.argv[1]))
kept = plan["truncated"][0]["kept"]
assert plan["num_tokens"] == 1000 + kept + 500, (plan["num_tokens"], kept)
# Cut to what the widest pipeline of any candidate holds (TP16 here).
capacity = max(p["capacity_tokens"] for p in plan["pipelines"])
assert kept <= capacity, (kept, capacity)
PY
fi

check "--reject-overlong exits 2 with one line on stderr"
hyd reject "${PLAN[@]}" --lengths "$TMP/overlong.txt" --reject-overlong
expect_input_error reject "100000"

check "--reject-overlong accepts a batch that fits"
hyd rejectok "${PLAN[@]}" --lengths "$LENGTHS" --reject-overlong --no-timing
expect_rc rejectok 0
cmp -s "$TMP/ref.out" "$TMP/rejectok.out" || fail "plan differs from the default run"

# --- Invalid inputs ---------------------------------------------------------------------------
check "unknown cp layout space"
hyd cplayouts "${PLAN[@]}" --lengths "$LENGTHS" --cp-layouts some -o "$TMP/cplayouts.json"
expect_input_error cplayouts "--cp-layouts" "subsets, whole-or-every or every-rank" "'some'"
[[ ! -e $TMP/cplayouts.json ]] || fail "a plan was written"

check "missing lengths file"
hyd nofile "${PLAN[@]}" --lengths "$TMP/absent.txt"
expect_input_error nofile "$TMP/absent.txt"

check "bad length 'abc'"
printf '100\nabc\n300\n' >"$TMP/bad.txt"
hyd badlen "${PLAN[@]}" --lengths "$TMP/bad.txt"
expect_input_error badlen "$TMP/bad.txt" ":2:" "abc"

check "zero length on stdin"
printf '5\n0\n' >"$TMP/zero.txt"
hyd_in zerolen "$TMP/zero.txt" "${PLAN[@]}" --lengths -
expect_input_error zerolen "<stdin>" ":2:"

check "bad element of a JSON array"
echo '[10, 20, -5]' >"$TMP/bad.json"
hyd badjson "${PLAN[@]}" --lengths "$TMP/bad.json"
expect_input_error badjson "$TMP/bad.json" "[2]"

check "empty lengths file"
: >"$TMP/empty.txt"
hyd emptylen "${PLAN[@]}" --lengths "$TMP/empty.txt"
expect_input_error emptylen "$TMP/empty.txt"

check "unknown --algorithm"
hyd badalg "${PLAN[@]}" --lengths "$LENGTHS" --algorithm bogus-algo
expect_input_error badalg "bogus-algo"

check "candidates file with an unknown field"
sed 's/"tp": 4, "pp": 2}/"tp": 4, "pp": 2, "colour": "red"}/' "$CANDS" >"$TMP/cands-unknown.json"
grep -q colour "$TMP/cands-unknown.json" || fail "test setup: sed did not add the field"
hyd badcands plan --profile "$PROFILE" --candidates "$TMP/cands-unknown.json" --lengths "$LENGTHS"
expect_input_error badcands "$TMP/cands-unknown.json" "strategies[6].pipelines[0].colour"

check "candidates file that is not JSON"
echo '{"format": "hydraulis.candidates/1",' >"$TMP/cands-broken.json"
hyd brokencands plan --profile "$PROFILE" --candidates "$TMP/cands-broken.json" \
  --lengths "$LENGTHS"
expect_input_error brokencands "$TMP/cands-broken.json"

check "profile with a bad value"
sed 's/"layers": 60/"layers": 0/' "$PROFILE" >"$TMP/profile-bad.json"
hyd badprofile plan --profile "$TMP/profile-bad.json" --candidates "$CANDS" --lengths "$LENGTHS"
expect_input_error badprofile "$TMP/profile-bad.json" "model.layers"

check "missing profile file"
hyd noprofile plan --profile "$TMP/absent-profile.json" --candidates "$CANDS" --lengths "$LENGTHS"
expect_input_error noprofile "$TMP/absent-profile.json"

check "both --lengths and --dataset"
hyd both "${PLAN[@]}" --lengths "$LENGTHS" --dataset "$DATASET"
expect_input_error both "--lengths"

check "neither --lengths nor --dataset"
hyd neither "${PLAN[@]}"
expect_input_error neither "--lengths"

check "unknown flag"
hyd badflag "${PLAN[@]}" --lengths "$LENGTHS" --frobnicate
expect_input_error badflag "--frobnicate"

check "--steps 0"
hyd steps0 "${PLAN[@]}" --dataset "$DATASET" --steps 0
expect_input_error steps0 "--steps"

# --- import-profile ---------------------------------------------------------------------------
A800=$SRC/../shared/reference/a800-profiles/llama-32b.json
if [[ -f $A800 ]]; then
  check "import-profile reproduces the shipped 32B profile"
  hyd import import-profile --a800 "$A800" --name llama-32b --ffn 17920 --heads 64 --kv-heads 64 --cp 2,4,8
  expect_rc import 0
  expect_empty_stderr import
  cmp -s "$PROFILE" "$TMP/import.out" || fail "imported profile differs from $PROFILE"
else
  echo "skip: import-profile check ($A800 absent)"
fi

# --- stats ------------------------------------------------------------------------------------
check "stats on the bundled sample prints percentiles and buckets"
hyd stats stats --lengths "$SRC/data/wikipedia-sample-lengths.txt" --max-len 32768
expect_rc stats 0
grep -q "p50" "$TMP/stats.out" || fail "no p50 in stats output"
grep -q "20,000" "$TMP/stats.out" || fail "stats does not count the 20,000 documents"

check "lengths over 2^32 tokens are one input error, never a wrapped token count"
printf '9223372036854775807\n9223372036854775807\n' >"$TMP/huge-lengths.txt"
hyd hugeplan plan --profile "$PROFILE" --candidates "$CANDS" --lengths "$TMP/huge-lengths.txt"
expect_input_error hugeplan "huge-lengths.txt:1: a length must be at most 4294967296 tokens (2^32)" \
  "got 9223372036854775807"
hyd_in hugestdin "$TMP/huge-lengths.txt" plan --profile "$PROFILE" --candidates "$CANDS" \
  --lengths -
expect_input_error hugestdin "a length must be at most 4294967296 tokens"
hyd hugestats stats --lengths "$TMP/huge-lengths.txt"
expect_input_error hugestats "huge-lengths.txt:1: a length must be at most 4294967296 tokens"
printf '9223372036854775807\n' >"$TMP/huge-one.txt"
hyd hugeone stats --lengths "$TMP/huge-one.txt"
expect_input_error hugeone "huge-one.txt:1:" "got 9223372036854775807"
printf '{"length": 4294967297}\n' >"$TMP/huge.jsonl"
hyd hugejl stats --lengths "$TMP/huge.jsonl"
expect_input_error hugejl "huge.jsonl:1: field 'length': a length must be at most 4294967296"
printf '4294967296\n' >"$TMP/max-length.txt"
hyd maxlen stats --lengths "$TMP/max-length.txt"
expect_rc maxlen 0

check "stats on a bad lengths file"
printf '12\nabc\n' > "$TMP/bad-lengths.txt"
hyd statsbad stats --lengths "$TMP/bad-lengths.txt"
expect_input_error statsbad "bad-lengths.txt:2"

# --- simulate ---------------------------------------------------------------------------------
check "simulate writes the summary JSON and a Chrome trace"
hyd sim simulate --profile "$PROFILE" --candidates "$CANDS" \
  --lengths "$SRC/data/wikipedia-sample-lengths.txt" --steps 2 --tokens-per-batch 50000 \
  --system ours --json "$TMP/sim.json" --trace "$TMP/sim-trace.json" -q
expect_rc sim 0
if [[ $HAVE_PYTHON -eq 1 ]]; then
  python3 - "$TMP/sim.json" "$TMP/sim-trace.json" <<'PY' || fail "simulate outputs malformed"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["steps"] == 2 and s["total_time_ms"] > 0 and s["tokens_per_second"] > 0, s
per = s["per_step"]
assert per is not None and len(per) == 2, list(s)
assert all(p["step_ms"] > 0 and p["strategy"] for p in per)
t = json.load(open(sys.argv[2]))
assert any(e.get("ph") == "X" for e in t["traceEvents"])
PY
else
  grep -q '"total_time_ms"' "$TMP/sim.json" || fail "no total_time_ms"
fi

check "simulate rejects an unknown system"
hyd simbad simulate --profile "$PROFILE" --candidates "$CANDS" \
  --lengths "$SRC/data/wikipedia-sample-lengths.txt" --system nonsense
expect_input_error simbad "nonsense"

# --- counts that cannot finish, flags that would be ignored, integers out of range --------
SAMPLE=$SRC/data/wikipedia-sample-lengths.txt
PROPOSE=(propose --profile "$PROFILE" --lengths "$SAMPLE" --gpus 64 --max-len 32768)
check "propose refuses --select-tolerance without --select-batches"
hyd seltol "${PROPOSE[@]}" --select-tolerance 0.05 -o "$TMP/seltol.json"
expect_input_error seltol "--select-tolerance" "--select-batches"
[[ ! -e $TMP/seltol.json ]] || fail "a refused propose wrote its output"

check "propose refuses --select-batches it cannot plan"
hyd selbig "${PROPOSE[@]}" --select-batches 10001
expect_input_error selbig "--select-batches" "10000" "10001"

check "simulate refuses --steps it cannot plan"
hyd stepsbig simulate --profile "$PROFILE" --candidates "$CANDS" --lengths "$SAMPLE" \
  --steps 2000000000
expect_input_error stepsbig "--steps" "1000000"

check "propose caps --top-documents at the documents of one batch and names every strategy once"
hyd topk "${PROPOSE[@]}" --top-documents 10000 -o "$TMP/topk.json"
expect_rc topk 0
expect_stderr_has topk "--top-documents 10000 capped at"
grep -q "nan" "$TMP/topk.json" "$TMP/topk.err" && fail "a share is not a number"
hyd topkbig "${PROPOSE[@]}" --top-documents 10001
expect_input_error topkbig "--top-documents" "10001"
hyd topk5 "${PROPOSE[@]}" --top-documents 5 -o "$TMP/topk5.json"
expect_rc topk5 0
hyd topkplan plan --profile "$PROFILE" --candidates "$TMP/topk5.json" --lengths "$LENGTHS"
expect_rc topkplan 0

check "propose takes the long-context defaults when documents need cp, and only then"
awk 'BEGIN { for (i = 0; i < 3000; ++i) print 200 + (i * 7919) % 5800;
             for (i = 0; i < 40; ++i) print 60000 + (i * 104729) % 60000 }' >"$TMP/long.txt"
LONGP=(propose --profile "$PROFILE" --lengths "$TMP/long.txt" --gpus 64 --max-len 131072
       --tokens-per-batch 500000)
hyd longdef "${LONGP[@]}" -o "$TMP/longdef.json"
expect_rc longdef 0
expect_stderr_has longdef "long context (documents of"
expect_stderr_has longdef "by planning 16 sampled batches (seed 2)"
hyd longall "${LONGP[@]}" --select-batches 0 -o "$TMP/longall.json"
expect_rc longall 0
grep -q "long context" "$TMP/longall.err" && fail "a given --select-batches took the defaults"
if [[ $HAVE_PYTHON -eq 1 ]]; then
  python3 - "$TMP/longdef.json" "$TMP/longall.json" <<'PY' || fail "kept strategies"
import json, sys
kept, every = (len(json.load(open(f))["strategies"]) for f in sys.argv[1:])
assert kept <= 9 and every > kept, (kept, every)
PY
fi
hyd shortdef "${PROPOSE[@]}" -o "$TMP/shortdef.json"
expect_rc shortdef 0
grep -q "long context" "$TMP/shortdef.err" && fail "a short-context proposal took the defaults"

check "an integer past its flag's range names the flag and the range"
hyd intbig propose --profile "$PROFILE" --lengths "$SAMPLE" --gpus 2147483648
expect_input_error intbig "--gpus" "2147483648" "from -2147483648 to 2147483647"
hyd int64big "${PROPOSE[@]}" --tokens-per-batch 99999999999999999999
expect_input_error int64big "--tokens-per-batch" "to 9223372036854775807"

check "sampled plans written to a full device fail with one write error"
"$BIN" plan --profile "$PROFILE" --candidates "$CANDS" --dataset "$SAMPLE" --steps 3 \
  >/dev/full 2>"$TMP/dsfull.err"
RC=$?
expect_rc dsfull 1
expect_one_line_stderr dsfull
expect_stderr_has dsfull "stdout: write failed"

# --- preprocess -------------------------------------------------------------------------------
check "preprocess writes a Megatron dataset that stats reads"
printf '%s\n' '{"text": "hello"}' '{"text": ""}' '' '{"id": 3, "text": "caf\u00e9"}' \
  '{"text": "a b"}' >"$TMP/corpus.jsonl"
hyd prep preprocess --input "$TMP/corpus.jsonl" --output-prefix "$TMP/corpus" --tokenizer byte
expect_rc prep 0
expect_empty_stderr prep
grep -qF "3 documents, 13 tokens, dtype uint16, 1 empty documents skipped" "$TMP/prep.out" ||
  fail "unexpected summary: $(cat "$TMP/prep.out")"
[[ -f $TMP/corpus.bin && -f $TMP/corpus.idx && ! -e $TMP/corpus.bin.tmp ]] ||
  fail "PREFIX.bin/.idx missing or a temporary left behind"
hyd prepstats stats --lengths "$TMP/corpus.idx"
expect_rc prepstats 0
grep -qF "3 documents, 13 tokens" "$TMP/prepstats.out" ||
  fail "stats on the .idx: $(head -1 "$TMP/prepstats.out")"

check "preprocess rejects a bad line and leaves the earlier output as it was"
cp "$TMP/corpus.bin" "$TMP/corpus.bin.before"
printf '%s\n' '{"text": "ok"}' '{"body": "no text"}' >"$TMP/bad-corpus.jsonl"
hyd prepbad preprocess --input "$TMP/bad-corpus.jsonl" --output-prefix "$TMP/corpus"
expect_input_error prepbad "bad-corpus.jsonl:2" "missing field 'text'"
cmp -s "$TMP/corpus.bin" "$TMP/corpus.bin.before" || fail "corpus.bin changed"
[[ ! -e $TMP/corpus.bin.tmp && ! -e $TMP/corpus.idx.tmp ]] || fail "temporary left behind"

check "preprocess rejects an unknown tokenizer"
hyd preptok preprocess --input "$TMP/corpus.jsonl" --output-prefix "$TMP/x" --tokenizer nope
expect_input_error preptok "--tokenizer" "nope"
[[ ! -e $TMP/x.bin ]] || fail "x.bin written"

# --- Numeric flags: never a NaN, an infinity or a wrapped negative ----------------------
check "numeric flags reject NaN, infinity, negatives and overflow, naming the flag"
n=0
for bad in "--backward-to-forward nan" "--backward-to-forward inf" "--backward-to-forward -1" \
  "--backward-to-forward 1e400" "--seed -1" "--seed nan" "--steps 0" "--max-len -5" \
  "--tokens-per-batch nan"; do
  n=$((n + 1))
  # shellcheck disable=SC2086  # $bad is a flag and its value
  hyd "num$n" "${PLAN[@]}" --lengths "$LENGTHS" $bad
  expect_input_error "num$n" "${bad%% *}"
done
hyd numsim simulate --profile "$PROFILE" --candidates "$CANDS" --lengths "$DATASET" \
  --steps 1 --nvlink-gbytes-per-s nan
expect_input_error numsim "--nvlink-gbytes-per-s" "finite"

# --- JSON inputs: bounded nesting, no duplicate keys, no whole values echoed ------------
check "deeply nested JSON is one clear error, not a crash"
head -c 100000 /dev/zero | tr '\0' '[' >"$TMP/deep.json"
hyd deep "${PLAN[@]}" --lengths "$TMP/deep.json"
expect_input_error deep "deep.json" "nesting deeper than 64"
printf '{"length": 5, "length": 7}\n' >"$TMP/dup.jsonl"
hyd dupjl stats --lengths "$TMP/dup.jsonl"
expect_input_error dupjl "dup.jsonl:1" "duplicate key 'length'"
sed 's/"gpus": 64,/"gpus": 64, "gpus": 32,/' "$CANDS" >"$TMP/dupkey.json"
hyd dupkey "${PLAN[@]/$CANDS/$TMP/dupkey.json}" --lengths "$LENGTHS"
expect_input_error dupkey "dupkey.json" "duplicate key 'gpus'"

# --- Output: lost writes fail; what is not a regular file is never replaced -------------
check "a plan written to a full device or a closed stdout fails with the reason"
"$BIN" "${PLAN[@]}" --lengths "$LENGTHS" >/dev/full 2>"$TMP/full.err"
RC=$?
expect_rc full 1
expect_stderr_has full "stdout: write failed"
"$BIN" "${PLAN[@]}" --lengths "$LENGTHS" >&- 2>"$TMP/closed.err"
RC=$?
expect_rc closed 1
expect_stderr_has closed "stdout: write failed"

check "-o through a symbolic link replaces its target and keeps the link"
echo old >"$TMP/target.json"
ln -s "$TMP/target.json" "$TMP/link.json"
hyd olink "${PLAN[@]}" --lengths "$LENGTHS" -o "$TMP/link.json"
expect_rc olink 0
[[ -L $TMP/link.json ]] || fail "the link was replaced"
grep -q '"estimated_step_ms"' "$TMP/target.json" || fail "the link's target holds no plan"

check "-o into a FIFO writes into it; -o on a directory is refused"
mkfifo "$TMP/plan.fifo"
cat "$TMP/plan.fifo" >"$TMP/fifo.out" &
hyd ofifo "${PLAN[@]}" --lengths "$LENGTHS" -o "$TMP/plan.fifo"
wait
expect_rc ofifo 0
[[ -p $TMP/plan.fifo ]] || fail "the FIFO was replaced"
grep -q '"estimated_step_ms"' "$TMP/fifo.out" || fail "nothing came through the FIFO"
mkdir "$TMP/adir"
hyd odir "${PLAN[@]}" --lengths "$LENGTHS" -o "$TMP/adir"
expect_input_error odir "adir" "not a regular file"

check "an output that is one of the command's inputs is refused, the input untouched"
cp "$LENGTHS" "$TMP/own.txt"
cp "$PROFILE" "$TMP/own-profile.json"
ln -s "$TMP/own.txt" "$TMP/own-link.txt"
hyd ownlen "${PLAN[@]}" --lengths "$TMP/own.txt" -o "$TMP/./own.txt"
expect_input_error ownlen "-o/--output" "--lengths" "same file"
cmp -s "$LENGTHS" "$TMP/own.txt" || fail "plan overwrote its --lengths"
hyd ownprof plan --profile "$TMP/own-profile.json" --candidates "$CANDS" --lengths "$LENGTHS" \
  -o "$TMP/own-profile.json"
expect_input_error ownprof "--profile" "same file"
cmp -s "$PROFILE" "$TMP/own-profile.json" || fail "plan overwrote its --profile"
hyd ownprop propose --profile "$PROFILE" --lengths "$TMP/own.txt" --gpus 64 --max-len 4096 \
  -o "$TMP/own-link.txt"
expect_input_error ownprop "-o/--output" "--lengths"
cmp -s "$LENGTHS" "$TMP/own.txt" || fail "propose overwrote its --lengths through a link"
hyd ownsim simulate --profile "$TMP/own-profile.json" --candidates "$CANDS" --lengths "$LENGTHS" \
  --steps 1 --max-len 4096 --json "$TMP/own-profile.json"
expect_input_error ownsim "--json" "--profile"
echo '{"text": "abc"}' >"$TMP/own.jsonl"
cp "$TMP/own.jsonl" "$TMP/own.bin"
hyd ownpre preprocess --input "$TMP/own.bin" --output-prefix "$TMP/own"
expect_input_error ownpre "--output-prefix" "--input"
cmp -s "$TMP/own.jsonl" "$TMP/own.bin" || fail "preprocess overwrote its --input"

check "summarize quotes a strategy name's control bytes instead of sending them to the terminal"
hyd esc "${PLAN[@]}" --lengths "$LENGTHS"
sed '0,/"name":"[^"]*"/s//"name":"\\u001b[2Jevil"/' "$TMP/esc.out" >"$TMP/esc.jsonl"
hyd escsum summarize "$TMP/esc.jsonl"
expect_rc escsum 0
if grep -q $'\x1b' "$TMP/escsum.out"; then fail "an escape byte reached stdout"; fi
grep -qF "'\x1b[2Jevil" "$TMP/escsum.out" || fail "the name is not shown quoted: $(cat "$TMP/escsum.out")"

check "an empty output path is an error naming the flag, not standard output"
hyd emptyo "${PLAN[@]}" --lengths "$LENGTHS" -o ''
expect_input_error emptyo "--output" "empty"
hyd emptyp propose --profile "$PROFILE" --lengths "$LENGTHS" --gpus 64 --max-len 4096 -o ''
expect_input_error emptyp "--output" "empty"
hyd emptyj simulate --profile "$PROFILE" --candidates "$CANDS" --lengths "$LENGTHS" --steps 1 \
  --max-len 4096 --json ''
expect_input_error emptyj "--json" "empty"

if [[ $HAVE_PYTHON -eq 0 ]]; then echo "note: python3 absent; JSON checked by grep only"; fi
if [[ $FAILED -ne 0 ]]; then
  echo "cli_test: $FAILED failure(s) in $CHECKS checks" >&2
  exit 1
fi
echo "cli_test: all $CHECKS checks passed"
