#!/usr/bin/env bash
# End-to-end checks of `hydraulis train` (real Gloo ranks started by its launcher).
# Usage: train_test.sh HYDRAULIS_BINARY SOURCE_DIR. Prints "FAIL: <check>" for each failed
# check and exits 1 if any failed.
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 HYDRAULIS_BINARY SOURCE_DIR" >&2
  exit 2
fi
BIN=$1
SRC=$2
MODEL=$SRC/configs/models/tiny.json
PROFILE=$SRC/configs/profiles/tiny-cpu.json
CANDS2=$SRC/configs/candidates/cpu-2rank.json
for f in "$BIN" "$MODEL" "$PROFILE" "$SRC/data/wikipedia-sample-lengths.txt"; do
  [[ -e $f ]] || { echo "FAIL: setup: $f does not exist" >&2; exit 1; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILED=0
CURRENT=""
check() { CURRENT=$1; }
fail() {
  FAILED=$((FAILED + 1))
  echo "FAIL: $CURRENT: $*" >&2
}

# A corpus whose documents have real (Wikipedia) lengths, scaled down by 4 for the tiny
# model: document i is a text of length L_i / 4 + 2 characters.
awk 'NR <= 300 { n = int($1 / 4) + 2; s = ""; for (j = 0; j < n; ++j) s = s sprintf("%c", 97 + (NR * 7 + j * 3) % 26); printf "{\"text\": \"%s\"}\n", s }' \
  "$SRC/data/wikipedia-sample-lengths.txt" >"$TMP/corpus.jsonl"
"$BIN" preprocess --input "$TMP/corpus.jsonl" --output-prefix "$TMP/corpus" >/dev/null ||
  { echo "FAIL: setup: preprocess" >&2; exit 1; }

# --calibrate off: the checks below compare runs bit for bit, which needs the same plans, and
# a fit from measured times differs run to run (the calibration's own checks turn it on).
COMMON=(--model "$MODEL" --profile "$PROFILE" --data "$TMP/corpus"
        --tokens-per-batch 3000 --max-len 700 --seed 5 --timeout-s 20 --calibrate off)

# [STEPS=K] train NAME ARGS...: stdout/stderr in $TMP/NAME.{out,err}, status in RC, log in NAME.jsonl.
train() {
  local name=$1
  shift
  "$BIN" train "${COMMON[@]}" --log-json "$TMP/$name.jsonl" --steps "${STEPS:-3}" "$@" >"$TMP/$name.out" \
    2>"$TMP/$name.err"
  RC=$?
  if [[ $RC -ne 0 ]]; then fail "exit status $RC; stderr: $(tail -c 800 "$TMP/$name.err")"; fi
}
# losses NAME: the loss of each step, one per line.
losses() { sed -E 's/.*"loss":([-0-9.e+]+).*/\1/' "$TMP/$1.jsonl"; }
# same_losses A B: every step's loss within 1e-4 relative (summation order differs).
same_losses() {
  paste <(losses "$1") <(losses "$2") |
    awk -v a="$1" -v b="$2" '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $1) { print a " vs " b ": step " NR-1 ": " $1 " vs " $2; bad = 1 } } END { exit bad }' ||
    fail "losses differ"
}

check "one rank trains and logs every step"
train one --nproc 1
[[ $(wc -l <"$TMP/one.jsonl") -eq 3 ]] || fail "expected 3 log lines"
for key in step loss tokens step_ms strategy predicted_step_ms; do
  grep -q "\"$key\":" "$TMP/one.jsonl" || fail "log lacks $key"
done
grep -q "step    2  loss" "$TMP/one.out" || fail "no progress line: $(head -c 300 "$TMP/one.out")"

# The step's loss is that of the global batch whatever the layout, so every layout trains
# the same model.
for layout in "--nproc 2 --tp 2" "--nproc 2 --pp 2" "--nproc 2" "--nproc 2 --plan-algorithm static-fixed" \
  "--nproc 2 --ddp-bucket-size 5000"; do
  name=$(echo "$layout" | tr -d ' -')
  check "$layout trains like one rank"
  # shellcheck disable=SC2086
  train "$name" $layout
  [[ -f $TMP/$name.jsonl ]] && same_losses one "$name"
  grep -q '^\[rank 1\]' "$TMP/$name.out" "$TMP/$name.err" && fail "rank 1 wrote output"
done

check "small buckets: one reduce-scatter per bucket"
grep -q '"grad_buckets":25,' "$TMP/nproc2ddpbucketsize5000.jsonl" ||
  fail "expected 25 buckets: $(head -c 600 "$TMP/nproc2ddpbucketsize5000.jsonl")"
grep -q '"grad_buckets":1,' "$TMP/nproc2.jsonl" || fail "expected one bucket by default"

if [[ -f $CANDS2 ]]; then
  check "heterogeneous candidates train like one rank"
  train hetero --nproc 2 --candidates "$CANDS2"
  [[ -f $TMP/hetero.jsonl ]] && same_losses one hetero
fi

check "the learning-rate schedule and clipping: every step logs lr and grad_norm"
STEPS=4 train sched --nproc 2 --lr 1e-3 --lr-warmup-steps 1 --lr-decay-style cosine \
  --min-lr 1e-4 --clip-grad 0.5 --weight-decay 0.1 --adam-beta2 0.99
if [[ -f $TMP/sched.jsonl ]]; then
  python3 - "$TMP/sched.jsonl" <<'PY' || fail "schedule log: $(head -c 600 "$TMP/sched.jsonl")"
import json, math, sys
records = [json.loads(line) for line in open(sys.argv[1])]
lrs = [r["lr"] for r in records]
# One warmup step to the peak, then cosine to 1e-4 at the last step (Megatron's formula).
want = [1e-3] + [1e-4 + 0.5 * (1 + math.cos(math.pi * (n - 1) / 3)) * 9e-4 for n in (2, 3, 4)]
assert all(abs(a - b) <= 1e-12 for a, b in zip(lrs, want)), (lrs, want)
assert all(r["grad_norm"] > 0 for r in records), records
PY
fi
grep -q "step    3  loss [0-9.]*  lr 1.000e-04" "$TMP/sched.out" || fail "console: $(cat "$TMP/sched.out")"

check "optimisation flags that cannot run are one line before any rank starts"
for bad in "--lr-warmup-steps 10|--lr-warmup-steps 10: longer than the run (--steps 3)" \
  "--clip-grad -1|--clip-grad" "--adam-beta1 1|--adam-beta1: must be in [0, 1), got 1" \
  "--lr-decay-style exp|--lr-decay-style" "--min-lr 0.5|--min-lr 0.5: must be from 0 to --lr" \
  "--lr-decay-style linear --lr-warmup-steps 3|--lr-decay-steps 3: decay must end after"; do
  flags=${bad%%|*}
  # shellcheck disable=SC2086
  "$BIN" train "${COMMON[@]}" --steps 3 --nproc 2 $flags >"$TMP/badopt.out" 2>"$TMP/badopt.err"
  RC=$?
  [[ $RC -eq 2 && $(wc -l <"$TMP/badopt.err") -eq 1 && ! -s $TMP/badopt.out ]] ||
    fail "$flags: exit status $RC; stderr: $(cat "$TMP/badopt.err")"
  grep -qF -- "${bad#*|}" "$TMP/badopt.err" || fail "$flags: stderr: $(cat "$TMP/badopt.err")"
done

check "--config: flags from a TOML file, the command line overriding it, the effective file written back"
printf '[train]\nsteps = 5\nnproc = 2\nlr = 0.002\nlr-warmup-steps = 1\nlr-decay-style = "linear"\nclip-grad = 1.0\n' \
  >"$TMP/run.toml"
"$BIN" train "${COMMON[@]}" --config "$TMP/run.toml" --steps 3 --checkpoint-dir "$TMP/cfgckpt" \
  --log-json "$TMP/cfg1.jsonl" >"$TMP/cfg1.out" 2>"$TMP/cfg1.err" || fail "config run: $(tail -c 600 "$TMP/cfg1.err")"
[[ $(wc -l <"$TMP/cfg1.jsonl") -eq 3 ]] || fail "--steps 3 did not override the file's 5"
grep -q '^steps=3$' "$TMP/cfgckpt/run.toml" && grep -q '^lr-decay-style="linear"$' "$TMP/cfgckpt/run.toml" ||
  fail "effective config: $(cat "$TMP/cfgckpt/run.toml")"
head -1 "$TMP/cfg1.jsonl" | grep -q '"config":"\[train\]' || fail "the first record lacks the config"
sed "s|$TMP/cfgckpt|$TMP/cfgckpt2|; s|$TMP/cfg1.jsonl|$TMP/cfg2.jsonl|" "$TMP/cfgckpt/run.toml" >"$TMP/again.toml"
"$BIN" train --config "$TMP/again.toml" >/dev/null 2>"$TMP/cfg2.err" || fail "rerun: $(tail -c 600 "$TMP/cfg2.err")"
[[ "$(sed -E 's/.*"loss":([-0-9.e+]+).*/\1/' "$TMP/cfg1.jsonl")" == "$(sed -E 's/.*"loss":([-0-9.e+]+).*/\1/' "$TMP/cfg2.jsonl")" ]] ||
  fail "the written config did not repeat the run"
printf '[train]\nsteps = 2\nbogus-key = 3\n' >"$TMP/bad.toml"
"$BIN" train "${COMMON[@]}" --nproc 2 --config "$TMP/bad.toml" >"$TMP/badcfg.out" 2>"$TMP/badcfg.err"
RC=$?
[[ $RC -eq 2 && $(wc -l <"$TMP/badcfg.err") -eq 1 ]] || fail "unknown key: exit $RC: $(cat "$TMP/badcfg.err")"
grep -qF -- "--config '$TMP/bad.toml': unknown key 'train.bogus-key'" "$TMP/badcfg.err" ||
  fail "stderr: $(cat "$TMP/badcfg.err")"
# The shipped example, from the repository root as its relative paths expect.
(cd "$SRC" && "$BIN" train --config configs/runs/cpu-demo.toml --data "$TMP/corpus" \
  --profile "$PROFILE" --max-len 700 --steps 4 >"$TMP/demo.out" 2>"$TMP/demo.err") ||
  fail "configs/runs/cpu-demo.toml: $(tail -c 600 "$TMP/demo.err")"

check "6 steps equal 3 steps + resume + 3 steps"
STEPS=6 train six --nproc 2
train half --nproc 2 --checkpoint-dir "$TMP/ckpt"
[[ -f $TMP/ckpt/step-00000003/meta.json && -f $TMP/ckpt/step-00000003/rank-00001.bin ]] ||
  fail "no checkpoint written"
# Resuming appends steps 3..5 to the log of the first half.
"$BIN" train "${COMMON[@]}" --log-json "$TMP/half.jsonl" --nproc 2 --steps 6 \
  --checkpoint-dir "$TMP/ckpt" --resume >"$TMP/resume.out" 2>"$TMP/resume.err" ||
  fail "resume failed: $(tail -c 600 "$TMP/resume.err")"
grep -q "resumed from .*step-00000003 at step 3" "$TMP/resume.out" || fail "no resume message"
# Same ranks, same data order, same optimizer state: bit for bit the same losses.
[[ "$(losses six)" == "$(losses half)" ]] || fail "losses differ: $(losses six | tr '\n' ' ') vs $(losses half | tr '\n' ' ')"

check "a checkpoint written under one layout and bucket size resumes under others"
train dp_half --nproc 2 --checkpoint-dir "$TMP/ckpt2" --ddp-bucket-size 5000
"$BIN" train "${COMMON[@]}" --log-json "$TMP/dp_half.jsonl" --nproc 2 --tp 2 --steps 6 \
  --checkpoint-dir "$TMP/ckpt2" --resume >"$TMP/resume2.out" 2>"$TMP/resume2.err" ||
  fail "resume failed: $(tail -c 600 "$TMP/resume2.err")"
same_losses six dp_half

check "a rank that exits makes the job stop with a clear error"
start=$(date +%s)
"$BIN" train "${COMMON[@]}" --steps 3 --nproc 2 --fail-rank 1 --fail-step 1 >"$TMP/die.out" 2>"$TMP/die.err"
RC=$?
elapsed=$(($(date +%s) - start))
[[ $RC -ne 0 ]] || fail "exit status 0"
grep -q "rank 1 exited with code 3" "$TMP/die.err" || fail "stderr: $(tail -c 600 "$TMP/die.err")"
[[ $elapsed -lt 15 ]] || fail "took $elapsed s"

check "a layout that does not divide the ranks is rejected"
"$BIN" train "${COMMON[@]}" --steps 3 --nproc 2 --tp 3 >"$TMP/bad.out" 2>"$TMP/bad.err"
RC=$?
[[ $RC -ne 0 ]] || fail "exit status 0"
grep -q -- "--tp 3" "$TMP/bad.err" || fail "stderr: $(tail -c 600 "$TMP/bad.err")"

# Device, precision and backend flags: one line naming the flag, exit 2, before any rank
# starts (the launcher checks once). "--device cuda" fails only where no GPU is visible.
bad_flags() {  # [NPROC=N] bad_flags EXPECTED_TEXT ARGS...
  local expected=$1
  shift
  "$BIN" train "${COMMON[@]}" --steps 1 --nproc "${NPROC:-2}" "$@" >"$TMP/flag.out" 2>"$TMP/flag.err"
  RC=$?
  [[ $RC -eq 2 ]] || fail "$* exited $RC"
  [[ $(wc -l <"$TMP/flag.err") -eq 1 ]] || fail "$*: not one line: $(head -c 600 "$TMP/flag.err")"
  grep -q -- "$expected" "$TMP/flag.err" || fail "$*: stderr: $(head -c 600 "$TMP/flag.err")"
  [[ ! -s $TMP/flag.out ]] || fail "$*: a rank started: $(head -c 300 "$TMP/flag.out")"
}
check "bad device, precision and backend flags are one clear error"
bad_flags "--device: expected cpu or cuda, got 'tpu'" --device tpu
bad_flags "--precision: expected fp32 or bf16, got 'fp16'" --device cpu --precision fp16
bad_flags "--comm-backend nccl needs --device cuda" --device cpu --comm-backend nccl
if ! command -v nvidia-smi >/dev/null; then
  bad_flags "--device cuda --precision bf16: device cuda: no CUDA GPU is visible" --device cuda
fi

check "profile takes the same device and precision flags, checked before any rank starts"
for args in "--device tpu|--device: expected cpu or cuda, got 'tpu'" \
            "--device cpu --precision fp16|--precision: expected fp32 or bf16, got 'fp16'"; do
  "$BIN" profile --model "$SRC/configs/models/tiny.json" --nproc 2 --schemes 2x1 ${args%%|*} \
    -o "$TMP/never.json" >"$TMP/flag.out" 2>"$TMP/flag.err"
  RC=$?
  [[ $RC -eq 2 ]] || fail "profile ${args%%|*} exited $RC"
  [[ $(wc -l <"$TMP/flag.err") -eq 1 ]] || fail "profile ${args%%|*}: $(head -c 600 "$TMP/flag.err")"
  grep -q -- "${args#*|}" "$TMP/flag.err" || fail "profile ${args%%|*}: $(cat "$TMP/flag.err")"
  [[ ! -e $TMP/never.json ]] || fail "profile ${args%%|*} wrote a profile"
done

check "bad --cp input is one clear error from the launcher"
bad_flags "train: --cp 3 x --tp 1 x --pp 1 does not divide the 2 ranks" --cp 3
bad_flags "train: --cp 2 and --candidates: give one" --cp 2 --candidates "$CANDS2"
NPROC=4 bad_flags "has no (CP2,TP1,PP2) scheme, and cp schemes are derived only for --pp 1" \
  --cp 2 --pp 2
# A candidates file may name cp schemes, but only ones the profile has (none is derived).
cat >"$TMP/cp-cands.json" <<'JSON'
{"format": "hydraulis.candidates/1", "gpus": 2, "optimizer_layout": {"dp": 2, "tp": 1, "pp": 1},
 "strategies": [{"name": "CP2", "pipelines": [{"count": 1, "cp": 2, "tp": 1}]}]}
JSON
bad_flags "strategies\[0\].pipelines\[0\].tp: scheme (CP2,TP1) has no fitted entry in the profile" \
  --candidates "$TMP/cp-cands.json"

check "--cp 2 trains documents longer than a rank's capacity whole, where --tp 2 cuts them"
# Documents of 1,400-1,560 tokens (byte tokenizer: one token per character) between short
# ones. The capacity is the profile's memory model's: with 12,000,000 bytes per rank instead
# of the bundled 24 MiB, a tp 2 pipeline holds 1,280 tokens per micro-batch and a cp 2
# pipeline (the <2,1,1> scheme derived from <1,1,1>) 1,664, so --tp 2 cuts every long
# document and --cp 2 none (the log's truncated_tokens). One rank on the bundled profile
# holds 1,920 and cuts none either: --cp 2 must train exactly its batches, to the same
# losses.
sed 's/"gpu_memory_bytes": 25165824/"gpu_memory_bytes": 12000000/' "$PROFILE" >"$TMP/small-mem.json"
grep -q '"gpu_memory_bytes": 12000000' "$TMP/small-mem.json" || fail "setup: memory not replaced"
awk 'BEGIN { for (i = 0; i < 24; ++i) { n = i % 2 ? 1400 + 7 * i : 100 + 11 * i; s = "";
  for (j = 0; j < n; ++j) s = s sprintf("%c", 97 + (i * 5 + j * 3) % 26); printf "{\"text\": \"%s\"}\n", s } }' \
  >"$TMP/long.jsonl"
"$BIN" preprocess --input "$TMP/long.jsonl" --output-prefix "$TMP/long" >/dev/null || fail "preprocess"
LONG=(--model "$MODEL" --data "$TMP/long" --tokens-per-batch 3200 --max-len 1600 --seed 5
      --timeout-s 20 --steps 3)
long_run() {  # long_run NAME ARGS...
  local name=$1
  shift
  "$BIN" train "${LONG[@]}" --log-json "$TMP/$name.jsonl" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" ||
    fail "$name: exit status $?: $(tail -c 600 "$TMP/$name.err")"
}
# truncated_tokens NAME: the tokens the planner cut for capacity, over all steps (the log's
# cut_tokens also counts the sampler's cut of each batch's last document to the budget).
truncated_tokens() {
  sed -E 's/.*"truncated_tokens":([0-9]+).*/\1/' "$TMP/$1.jsonl" | awk '{ s += $1 } END { print s + 0 }'
}
long_run long-cp2 --nproc 2 --cp 2 --profile "$TMP/small-mem.json"
long_run long-tp2 --nproc 2 --tp 2 --profile "$TMP/small-mem.json"
long_run long-one --nproc 1 --profile "$PROFILE"
grep -q '"strategy":"1x(CP2,TP1)"' "$TMP/long-cp2.jsonl" || fail "cp 2 strategy: $(head -c 400 "$TMP/long-cp2.jsonl")"
grep -q "profile: (CP2,TP1) derived from its cp = 1 fit" "$TMP/long-cp2.out" ||
  fail "no derivation notice: $(head -c 300 "$TMP/long-cp2.out")"
[[ $(wc -l <"$TMP/long-cp2.jsonl") -eq 3 ]] || fail "cp 2: expected 3 log lines"
[[ $(truncated_tokens long-cp2) -eq 0 ]] || fail "cp 2 cut $(truncated_tokens long-cp2) tokens"
[[ $(truncated_tokens long-one) -eq 0 ]] || fail "one rank cut $(truncated_tokens long-one) tokens"
[[ $(truncated_tokens long-tp2) -gt 0 ]] || fail "tp 2 cut no token: the case does not test capacity"
same_losses long-one long-cp2
# The same through a candidates file (train --candidates with cp) on a profile that has the
# <2,1,1> scheme (a candidates file's schemes are never derived): the planner, free to pick
# 2 x <1,1,1>, takes the cp pipeline on every step, the only one that holds the long
# documents whole.
python3 - "$TMP/small-mem.json" "$TMP/small-mem-cp.json" <<'PY' || fail "setup: cp profile"
import json, sys
p = json.load(open(sys.argv[1]))
placed = next(s for s in p["schemes"] if (s.get("cp", 1), s["tp"], s["pp"]) == (1, 1, 1))
p["schemes"].append(dict(placed, cp=2, kv_ms_per_token=0.001))
json.dump(p, open(sys.argv[2], "w"), indent=1)
PY
cat >"$TMP/cands-cp.json" <<'JSON'
{"format": "hydraulis.candidates/1", "gpus": 2, "optimizer_layout": {"dp": 2, "tp": 1, "pp": 1},
 "strategies": [{"name": "dp2", "pipelines": [{"count": 2, "cp": 1, "tp": 1, "pp": 1}]},
                {"name": "cp2", "pipelines": [{"count": 1, "cp": 2, "tp": 1, "pp": 1}]}]}
JSON
long_run long-cands --nproc 2 --candidates "$TMP/cands-cp.json" --profile "$TMP/small-mem-cp.json"
[[ $(grep -c '"strategy":"cp2"' "$TMP/long-cands.jsonl") -eq 3 ]] ||
  fail "candidates: not the cp strategy on every step: $(head -c 400 "$TMP/long-cands.jsonl")"
[[ $(truncated_tokens long-cands) -eq 0 ]] || fail "candidates cut $(truncated_tokens long-cands) tokens"
same_losses long-one long-cands

check "a bucket size that makes more than 2^16 buckets is one clear error"
# One rank: buckets of 1 element, one per parameter (the tiny model has 123,712).
"$BIN" train "${COMMON[@]}" --steps 1 --nproc 1 --ddp-bucket-size 1 >"$TMP/b.out" 2>"$TMP/b.err"
RC=$?
[[ $RC -eq 2 ]] || fail "exited $RC"
[[ $(wc -l <"$TMP/b.err") -eq 1 ]] || fail "not one line: $(head -c 600 "$TMP/b.err")"
grep -q -- "--ddp-bucket-size: buckets of 1 elements cut 123712 parameters into more than 65536" \
  "$TMP/b.err" || fail "stderr: $(head -c 600 "$TMP/b.err")"
[[ ! -s $TMP/b.out ]] || fail "a rank started: $(head -c 300 "$TMP/b.out")"

check "--log-json records carry device and precision"
grep -q '"device":"cpu"' "$TMP/one.jsonl" || fail "no device field: $(head -c 400 "$TMP/one.jsonl")"
grep -q '"precision":"fp32"' "$TMP/one.jsonl" || fail "no precision field"
grep -q '"grad_buckets_overlapped":' "$TMP/one.jsonl" || fail "no overlap field"
grep -q '"param_gather_wait_ms":' "$TMP/one.jsonl" || fail "no parameter gather field"

check "a step log that cannot be written (a full device) stops the run with exit status 1"
if [[ -w /dev/full ]]; then
  "$BIN" train "${COMMON[@]}" --steps 2 --nproc 1 --log-json /dev/full >"$TMP/full.out" \
    2>"$TMP/full.err"
  RC=$?
  [[ $RC -eq 1 ]] || fail "exit status $RC"
  grep -q -- "--log-json /dev/full: write failed (step 0)" "$TMP/full.err" ||
    fail "stderr: $(tail -c 600 "$TMP/full.err")"
fi

check "a run that does not resume refuses a directory holding checkpoints"
"$BIN" train "${COMMON[@]}" --steps 1 --nproc 2 --checkpoint-dir "$TMP/ckpt" >"$TMP/again.out" \
  2>"$TMP/again.err"
RC=$?
[[ $RC -eq 2 ]] || fail "exit status $RC"
grep -q "holds checkpoints already; resume to continue" "$TMP/again.err" ||
  fail "stderr: $(tail -c 600 "$TMP/again.err")"

check "--keep-checkpoints 2 keeps the newest two"
STEPS=4 train keep --nproc 2 --checkpoint-dir "$TMP/keep" --checkpoint-every 1 --keep-checkpoints 2
[[ $(ls -d "$TMP"/keep/step-* | wc -l) -eq 2 ]] || fail "kept: $(ls "$TMP/keep")"
[[ -e $TMP/keep/step-00000004/meta.json && -e $TMP/keep/step-00000003/meta.json ]] ||
  fail "kept: $(ls "$TMP/keep")"

check "export reads the model from the checkpoint; one that records none needs --model"
"$BIN" export --checkpoint-dir "$TMP/keep" -o "$TMP/hf" >"$TMP/export.out" 2>"$TMP/export.err" ||
  fail "export without --model: $(tail -c 600 "$TMP/export.err")"
grep -q "wrote $TMP/hf (config.json and safetensors weights) from .*step-00000004 (step 4)" \
  "$TMP/export.out" || fail "stdout: $(cat "$TMP/export.out")"
grep -q '"hidden_size": 64' "$TMP/hf/config.json" || fail "config.json: $(head -c 400 "$TMP/hf/config.json")"
[[ -f $TMP/hf/model.safetensors ]] || fail "no model.safetensors: $(ls "$TMP/hf")"
rm "$TMP/keep/step-00000004/model.json"
"$BIN" export --checkpoint-dir "$TMP/keep" -o "$TMP/hf-old" >/dev/null 2>"$TMP/export-old.err"
RC=$?
[[ $RC -eq 2 ]] || fail "exit status $RC without model.json"
grep -q "does not record its model .*give --model" "$TMP/export-old.err" ||
  fail "stderr: $(tail -c 600 "$TMP/export-old.err")"
"$BIN" export --checkpoint-dir "$TMP/keep" --model "$MODEL" -o "$TMP/hf-old" >/dev/null \
  2>"$TMP/export-old.err" || fail "export with --model: $(tail -c 600 "$TMP/export-old.err")"

check "export refuses a used directory before reading, and --overwrite replaces only its files"
echo mine >"$TMP/hf/notes.txt"
cp "$TMP/hf/model.safetensors" "$TMP/before.safetensors"
"$BIN" export --checkpoint-dir "$TMP/keep" --model "$MODEL" -o "$TMP/hf" >"$TMP/used.out" \
  2>"$TMP/used.err"
RC=$?
[[ $RC -eq 2 && ! -s $TMP/used.out && $(wc -l <"$TMP/used.err") -eq 1 ]] ||
  fail "exit status $RC; stderr: $(cat "$TMP/used.err")"
grep -q -- "-o $TMP/hf: not empty .*--overwrite" "$TMP/used.err" || fail "stderr: $(cat "$TMP/used.err")"
cmp -s "$TMP/hf/model.safetensors" "$TMP/before.safetensors" || fail "a refused export changed hf"
"$BIN" export --checkpoint-dir "$TMP/keep" --model "$MODEL" -o "$TMP/hf" --overwrite \
  --max-shard-size 20KB >/dev/null 2>"$TMP/used.err"
RC=$?
[[ $RC -eq 2 ]] || fail "sharded over a single-file export: exit status $RC"
grep -q "hf/model.safetensors: weights of an earlier export" "$TMP/used.err" ||
  fail "stderr: $(cat "$TMP/used.err")"
"$BIN" export --checkpoint-dir "$TMP/keep" --model "$MODEL" -o "$TMP/hf" --overwrite >/dev/null \
  2>"$TMP/used.err" || fail "--overwrite: $(cat "$TMP/used.err")"
[[ $(cat "$TMP/hf/notes.txt") == mine ]] || fail "--overwrite lost a file it does not write"

check "eval refuses a --logits path it cannot write before it loads the model"
"$BIN" eval --init-from "$TMP/hf" --data "$TMP/corpus" --max-documents 2 \
  --logits "$TMP/nodir/l.safetensors" >"$TMP/logits.out" 2>"$TMP/logits.err"
RC=$?
[[ $RC -eq 2 && ! -s $TMP/logits.out && $(wc -l <"$TMP/logits.err") -eq 1 ]] ||
  fail "exit status $RC; stderr: $(cat "$TMP/logits.err")"
grep -q -- "--logits '$TMP/nodir/l.safetensors': its folder '$TMP/nodir' does not exist" \
  "$TMP/logits.err" || fail "stderr: $(cat "$TMP/logits.err")"

check "resuming a checkpoint of another model is one clear error naming the field"
sed 's/"hidden": 64/"hidden": 128/' "$MODEL" >"$TMP/wide.json"
"$BIN" train --model "$TMP/wide.json" --data "$TMP/corpus" --tokens-per-batch 3000 --max-len 700 \
  --seed 5 --timeout-s 20 --steps 6 --nproc 1 --checkpoint-dir "$TMP/ckpt" --resume >/dev/null \
  2>"$TMP/wrong-model.err"
RC=$?
[[ $RC -eq 2 ]] || fail "exit status $RC, expected 2"
grep -q "model.json: the checkpoint is of another model than this run's (hidden: 64 vs 128)" \
  "$TMP/wrong-model.err" || fail "stderr: $(tail -c 600 "$TMP/wrong-model.err")"

check "calibration: ranks adopt fits from measured steps together, the log and summary say so, the fit saves as a profile plan reads"
# A fit is adopted only when it predicts the newest 4 steps better than the one in use. On a
# loaded machine (ctest -j2) the bundled profile can happen to predict the slowed steps well,
# so no refit beats it: the run starts from the profile's times made 3x too slow, which any
# refit beats, and has 16 steps.
python3 - "$PROFILE" "$TMP/slow-profile.json" <<'PY'
import json, sys
profile = json.load(open(sys.argv[1]))
for scheme in profile["schemes"]:
    for term in ("a_ms_per_token2", "b_ms_per_token", "c_ms"):
        scheme[term] *= 3
json.dump(profile, open(sys.argv[2], "w"), indent=2)
PY
CAL=(--model "$MODEL" --profile "$TMP/slow-profile.json" --data "$TMP/corpus" --tokens-per-batch 3000 --max-len 700
     --seed 5 --timeout-s 20 --candidates "$CANDS2" --nproc 2)
"$BIN" train "${CAL[@]}" --steps 16 --log-json "$TMP/cal.jsonl" --save-profile "$TMP/cal-profile.json" \
  --save-measurements "$TMP/cal-measured.jsonl" \
  >"$TMP/cal.out" 2>"$TMP/cal.err" || fail "exit status $?: $(tail -c 600 "$TMP/cal.err")"
# The ranks check every step's plan against each other (the trainer's plan hash): a fit
# adopted by one rank only would have stopped the run.
grep -q '"fit_adopted":true' "$TMP/cal.jsonl" || fail "no fit adopted in 16 steps"
tail -1 "$TMP/cal.jsonl" | grep -q '"fit":[1-9]' || fail "the last step was not planned on a fit"
head -1 "$TMP/cal.jsonl" | grep -q '"fit":0' || fail "the first step was not planned on the profile"
grep -q "prediction: step time predicted within [0-9.]* % of measured over the last 5 step(s) (fit [1-9]" \
  "$TMP/cal.out" || fail "summary: $(tail -3 "$TMP/cal.out")"
"$BIN" plan --profile "$TMP/cal-profile.json" --candidates "$CANDS2" \
  --dataset "$SRC/data/wikipedia-sample-lengths.txt" --steps 2 --tokens-per-batch 8000 --max-len 700 >/dev/null \
  2>"$TMP/cal-plan.err" || fail "plan on the saved profile: $(cat "$TMP/cal-plan.err")"
# The fit goes with the checkpoint: the resumed run plans on it from its first step.
"$BIN" train "${CAL[@]}" --steps 14 --checkpoint-dir "$TMP/cal-ckpt" --log-json "$TMP/cal-first.jsonl" \
  >/dev/null 2>"$TMP/cal-first.err" || fail "first half: $(tail -c 600 "$TMP/cal-first.err")"
saved_fit=$(sed -E 's/.*"version": ?([0-9]+).*/\1/;t;d' "$TMP/cal-ckpt/step-00000014/calibration.json" | head -1)
[[ ${saved_fit:-0} -ge 1 ]] || fail "no fit in the checkpoint: $(ls "$TMP/cal-ckpt/step-00000014")"
"$BIN" train "${CAL[@]}" --steps 16 --checkpoint-dir "$TMP/cal-ckpt" --resume \
  --log-json "$TMP/cal-resumed.jsonl" >/dev/null 2>"$TMP/cal-resumed.err" ||
  fail "resume: $(tail -c 600 "$TMP/cal-resumed.err")"
head -1 "$TMP/cal-resumed.jsonl" | grep -q "\"fit\":$saved_fit," ||
  fail "the resumed run's first step was not planned on the saved fit $saved_fit: $(head -c 300 "$TMP/cal-resumed.jsonl")"
for bad in "--save-profile $TMP/slow-profile.json|is the profile this run reads" \
  "--calibrate off --save-profile $TMP/x.json|needs --calibrate on" \
  "--calibrate maybe|--calibrate: expected on or off, got 'maybe'"; do
  # shellcheck disable=SC2086
  "$BIN" train "${CAL[@]}" --steps 2 ${bad%%|*} >/dev/null 2>"$TMP/cal-bad.err"
  RC=$?
  [[ $RC -eq 2 ]] || fail "${bad%%|*}: exit status $RC, expected 2"
  grep -qF -- "${bad#*|}" "$TMP/cal-bad.err" || fail "${bad%%|*}: $(cat "$TMP/cal-bad.err")"
done

check "replay: the run's measurements refit offline adopt the same fits at the same steps and end on the run's fit"
"$BIN" replay --measurements "$TMP/cal-measured.jsonl" --json "$TMP/replay.json" \
  --save-profile "$TMP/replayed-profile.json" >"$TMP/replay.out" 2>"$TMP/replay.err" ||
  fail "replay: $(cat "$TMP/replay.err")"
cmp -s "$TMP/cal-profile.json" "$TMP/replayed-profile.json" ||
  fail "the replay ends on another fit than the run's: $(diff "$TMP/cal-profile.json" "$TMP/replayed-profile.json" | head -5)"
python3 - "$TMP/cal.jsonl" "$TMP/replay.json" <<'PY' || fail "the replay's steps differ from the run's"
import json, sys
run = [json.loads(line) for line in open(sys.argv[1]) if '"loss"' in line]
replay = json.load(open(sys.argv[2]))["steps"]
want = [(r["step"], r.get("fit_adopted", False), r["step_ms"]) for r in run]
got = [(r["step"], r["adopted"], r["measured_ms"]) for r in replay]
if [(s, a) for s, a, _ in want] != [(s, a) for s, a, _ in got]:
    sys.exit(f"adopted: run {want}, replay {got}")
# The measured step is the slowest rank's; the log's step_ms is rank 0's own.
if any(g < w * (1 - 1e-9) for (_, _, w), (_, _, g) in zip(want, got)):
    sys.exit(f"a replayed step is faster than rank 0 measured it: {want} {got}")
PY

check "resuming under another long-document rule or, with split, another --max-len is refused"
"$BIN" train "${COMMON[@]}" --steps 8 --nproc 1 --checkpoint-dir "$TMP/ckpt" --resume \
  --long-documents truncate >/dev/null 2>"$TMP/other-rule.err"
RC=$?
[[ $RC -eq 2 ]] || fail "other rule: exit status $RC, expected 2"
grep -q "meta.json: data: the checkpoint was written with --long-documents split, this run has truncate" \
  "$TMP/other-rule.err" || fail "other rule: $(tail -c 600 "$TMP/other-rule.err")"
"$BIN" train --model "$MODEL" --profile "$PROFILE" --data "$TMP/corpus" --tokens-per-batch 3000 \
  --max-len 600 --seed 5 --timeout-s 20 --steps 8 --nproc 1 --checkpoint-dir "$TMP/ckpt" \
  --resume >/dev/null 2>"$TMP/other-len.err"
RC=$?
[[ $RC -eq 2 ]] || fail "other length: exit status $RC, expected 2"
grep -q "meta.json: data: the checkpoint was written with --max-len 700, this run has 600" \
  "$TMP/other-len.err" || fail "other length: $(tail -c 600 "$TMP/other-len.err")"

check "profile refuses a memory budget that holds no micro-batch, before any timing"
"$BIN" profile --model "$MODEL" --memory-bytes 100000 --lengths "$SRC/data/wikipedia-sample-lengths.txt" \
  --output "$TMP/p.json" >"$TMP/prof.out" 2>"$TMP/prof.err"
RC=$?
[[ $RC -eq 2 ]] || fail "exit status $RC"
grep -q "memory-bytes 100000: scheme TP1 cannot hold a micro-batch of 128 tokens" "$TMP/prof.err" ||
  fail "stderr: $(tail -c 600 "$TMP/prof.err")"
[[ ! -e $TMP/p.json ]] || fail "a profile was written"

check "profile over 2 ranks times a tp 2 scheme on its block's group and fits every scheme"
# Lengths up to 2,048 so time clearly grows with tokens (at 256 a loaded machine's noise
# once made the TP2 fit flat, which profile rightly refuses).
# 2x1x1 is the cp scheme <2,1,1>: timed with every document sharded over the 2 ranks, it
# keeps 1x1's a, b, c and fits only kv_ms_per_token.
"$BIN" profile --model "$MODEL" --schemes 1x1,2x1,1x2,2x1x1 --nproc 2 --repeats 1 --warmup 1 \
  --min-len 256 --max-len 2048 --packed 4 --lengths "$SRC/data/wikipedia-sample-lengths.txt" \
  --samples-json "$TMP/p2-samples.json" --output "$TMP/p2.json" >"$TMP/prof2.out" 2>"$TMP/prof2.err" ||
  fail "$(tail -c 600 "$TMP/prof2.err")"
python3 - "$TMP/p2.json" "$TMP/p2-samples.json" <<'PY' || fail "profile: $(head -c 400 "$TMP/p2.json")"
import json, sys
p = json.load(open(sys.argv[1]))
assert [(s["cp"], s["tp"], s["pp"]) for s in p["schemes"]] == [(1, 1, 1), (1, 2, 1), (1, 1, 2), (2, 1, 1)], p["schemes"]
assert p["cluster"]["gpus_per_node"] == 2
placed, cp = p["schemes"][0], p["schemes"][3]
for k in ("a_ms_per_token2", "b_ms_per_token", "c_ms"):
    assert cp[k] == placed[k], (k, cp, placed)
assert cp["kv_ms_per_token"] >= 0, cp
samples = json.load(open(sys.argv[2]))
assert samples[3]["cp"] == 2 and len(samples[3]["samples"]) == len(samples[0]["samples"]), samples[3]
PY
grep -qE '\(CP2,TP1\) .* [0-9.]+e[-+][0-9]+$' "$TMP/prof2.out" || fail "no cp row with its kv: $(cat "$TMP/prof2.out")"

check "profile over 4 ranks times a cp 2 x tp 2 scheme on its block, cp and tp groups"
# <2,2,1>: two tp groups of 2 ranks, each cp rank of one; every document sharded over the
# cp ranks; it keeps 2x1's a, b, c and fits only kv_ms_per_token.
"$BIN" profile --model "$MODEL" --schemes 2x1,2x2x1 --nproc 4 --repeats 1 --warmup 1 \
  --min-len 256 --max-len 2048 --packed 3 --lengths "$SRC/data/wikipedia-sample-lengths.txt" \
  --samples-json "$TMP/p4-samples.json" --output "$TMP/p4.json" >"$TMP/prof4.out" 2>"$TMP/prof4.err" ||
  fail "$(tail -c 600 "$TMP/prof4.err")"
python3 - "$TMP/p4.json" "$TMP/p4-samples.json" <<'PY' || fail "profile: $(head -c 400 "$TMP/p4.json")"
import json, sys
p = json.load(open(sys.argv[1]))
assert [(s["cp"], s["tp"], s["pp"]) for s in p["schemes"]] == [(1, 2, 1), (2, 2, 1)], p["schemes"]
placed, cp = p["schemes"]
for k in ("a_ms_per_token2", "b_ms_per_token", "c_ms"):
    assert cp[k] == placed[k], (k, cp, placed)
assert cp["kv_ms_per_token"] >= 0, cp
samples = json.load(open(sys.argv[2]))
assert samples[1]["cp"] == 2 and samples[1]["tp"] == 2, samples[1]
assert all(s["ms"] > 0 for s in samples[1]["samples"]), samples[1]
PY
grep -qE '\(CP2,TP2\) .* [0-9.]+e[-+][0-9]+$' "$TMP/prof4.out" || fail "no cp x tp row: $(cat "$TMP/prof4.out")"

check "profile refuses cp schemes it cannot time, before any timing"
bad_profile() {  # bad_profile EXPECTED_TEXT SCHEMES
  "$BIN" profile --model "$MODEL" --schemes "$2" --nproc "${NPROC:-2}" --output "$TMP/bad-p.json" \
    >"$TMP/badp.out" 2>"$TMP/badp.err"
  RC=$?
  [[ $RC -eq 2 ]] || fail "$2 exited $RC"
  grep -q -- "$1" "$TMP/badp.err" || fail "$2: stderr: $(head -c 600 "$TMP/badp.err")"
  [[ ! -e $TMP/bad-p.json ]] || fail "$2: a profile was written"
}
bad_profile "--schemes: 2x1x1 keeps the fit of 1x1 for documents placed whole: list 1x1 too" 2x1x1
bad_profile "--schemes: 2x1x2: cp schemes are profiled with pp 1 only" 1x1,2x1x2
NPROC=4 bad_profile "--schemes: 2x2x1 keeps the fit of 2x1 for documents placed whole: list 2x1 too" \
  1x1,2x2x1
bad_profile "--nproc: 2 cannot run cp = 4" 1x1,4x1x1
bad_profile "--schemes: '2x1x1x1' is not TPxPP or CPxTPxPP" 2x1x1x1

check "a non-finite loss stops the run before its update, naming the step"
mkdir -p "$TMP/nan-ckpt"
"$BIN" train "${COMMON[@]}" --steps 4 --nproc 2 --poison-step 2 --checkpoint-dir "$TMP/nan-ckpt" \
  --checkpoint-every 1 >"$TMP/nan.out" 2>"$TMP/nan.err"
RC=$?
[[ $RC -ne 0 ]] || fail "exit status 0"
grep -q "step 2: the loss is nan; stopped before the update" "$TMP/nan.err" ||
  fail "stderr: $(tail -c 600 "$TMP/nan.err")"
grep -q "step    1" "$TMP/nan.out" || fail "steps before it did not run: $(cat "$TMP/nan.out")"
[[ -e $TMP/nan-ckpt/step-00000003 ]] && fail "a checkpoint after the bad step was written: $(ls "$TMP/nan-ckpt")"

check "--skip-nonfinite-steps skips and counts it, and training goes on"
STEPS=4 train skip --nproc 2 --poison-step 2 --skip-nonfinite-steps
grep -q "SKIPPED" "$TMP/skip.out" || fail "no SKIPPED line: $(cat "$TMP/skip.out")"
grep -q "1 step(s) skipped" "$TMP/skip.out" || fail "no total: $(tail -2 "$TMP/skip.out")"
grep -q '"skipped":true' "$TMP/skip.jsonl" || fail "log lacks skipped"
[[ $(grep -c '"loss":null' "$TMP/skip.jsonl") -eq 1 ]] || fail "expected one null loss"
tail -1 "$TMP/skip.jsonl" | grep -q '"loss":[0-9]' || fail "the step after it is not finite"

check "documents over the context train in pieces by default; truncate cuts and says so; reject refuses"
# cut_tokens NAME: the tokens the log says were lost, over all steps.
cut_tokens() {
  sed -E 's/.*"cut_tokens":([0-9]+).*/\1/' "$TMP/$1.jsonl" | awk '{ s += $1 } END { print s + 0 }'
}
SHORT=(--model "$MODEL" --profile "$PROFILE" --data "$TMP/corpus" --tokens-per-batch 3000
       --max-len 300 --seed 5 --timeout-s 20 --steps 3 --nproc 1)
for rule in split truncate; do
  "$BIN" train "${SHORT[@]}" --long-documents $rule --log-json "$TMP/$rule-short.jsonl" \
    >"$TMP/$rule-short.out" 2>"$TMP/$rule-short.err" ||
    fail "$rule: exit status $?: $(tail -c 600 "$TMP/$rule-short.err")"
done
[[ $(cut_tokens split-short) -eq 0 ]] || fail "split lost $(cut_tokens split-short) tokens"
grep -q "done: no token lost (--long-documents split)" "$TMP/split-short.out" ||
  fail "split total: $(tail -1 "$TMP/split-short.out")"
[[ $(cut_tokens truncate-short) -gt 0 ]] || fail "truncate lost no token: the case does not test it"
grep -q "document(s) cut to the context length" "$TMP/truncate-short.out" ||
  fail "truncate total: $(tail -1 "$TMP/truncate-short.out")"
"$BIN" train "${SHORT[@]}" --long-documents reject >"$TMP/reject.out" 2>"$TMP/reject.err"
RC=$?
[[ $RC -eq 2 ]] || fail "reject: exit status $RC, expected 2"
grep -q -- "--data $TMP/corpus: document [0-9]* has [0-9]* tokens, more than the context length 300" \
  "$TMP/reject.err" || fail "reject: $(cat "$TMP/reject.err")"
"$BIN" train "${COMMON[@]}" --long-documents cut --steps 1 --nproc 1 >/dev/null 2>"$TMP/bad-rule.err"
RC=$?
[[ $RC -eq 2 ]] || fail "--long-documents cut: exit status $RC, expected 2"
grep -q -- "--long-documents: expected split, truncate or reject, got 'cut'" "$TMP/bad-rule.err" ||
  fail "--long-documents cut: $(cat "$TMP/bad-rule.err")"

check "a model of another shape trains without --profile on a derived one, and an explicit mismatch says how to fit one"
sed 's/"layers": 2/"layers": 3/' "$MODEL" >"$TMP/three-layers.json"
"$BIN" train --model "$TMP/three-layers.json" --data "$TMP/corpus" --tokens-per-batch 3000 --max-len 700 \
  --seed 5 --timeout-s 20 --steps 2 --nproc 1 --log-json "$TMP/derived.jsonl" >"$TMP/derived.out" 2>&1 ||
  fail "exit status $?: $(tail -c 600 "$TMP/derived.out")"
grep -q "profile: derived from" "$TMP/derived.out" || fail "no start-up line: $(head -c 300 "$TMP/derived.out")"
[[ $(grep -c '"profile":"derived"' "$TMP/derived.jsonl") -eq 2 ]] || fail "steps not marked derived"
grep -q '"profile":' "$TMP/one.jsonl" && fail "a run on a fitted profile is marked"
"$BIN" train --model "$TMP/three-layers.json" --profile "$PROFILE" --data "$TMP/corpus" --steps 1 --nproc 1 \
  >"$TMP/mismatch.out" 2>&1
RC=$?
[[ $RC -eq 2 ]] || fail "mismatch: exit status $RC, expected 2"
grep -q "hydraulis profile --model" "$TMP/mismatch.out" || fail "mismatch: no way forward: $(cat "$TMP/mismatch.out")"

check "recomputation trains like keeping every activation, on a profile derived for it; a profile of another mode is refused"
# COMMON without --profile: the run derives one for the mode from the bundled profile.
NO_PROFILE=(--model "$MODEL" --data "$TMP/corpus" --tokens-per-batch 3000 --max-len 700 --seed 5
            --timeout-s 20 --calibrate off)
for mode in selective full; do
  "$BIN" train "${NO_PROFILE[@]}" --nproc 2 --tp 2 --steps 3 --recompute-granularity $mode \
    --log-json "$TMP/recompute-$mode.jsonl" >"$TMP/recompute-$mode.out" 2>&1 ||
    fail "$mode: exit status $?: $(tail -c 600 "$TMP/recompute-$mode.out")"
  grep -q "profile: derived from .* recompute $mode" "$TMP/recompute-$mode.out" ||
    fail "$mode: no start-up line: $(head -c 300 "$TMP/recompute-$mode.out")"
  same_losses one "recompute-$mode"
done
"$BIN" train "${NO_PROFILE[@]}" --nproc 1 --steps 1 --profile "$PROFILE" --recompute-granularity full \
  >"$TMP/recompute-mismatch.out" 2>&1
RC=$?
[[ $RC -eq 2 ]] || fail "mismatch: exit status $RC, expected 2"
grep -q "recompute: the profile is for none, the run asks --recompute-granularity full" \
  "$TMP/recompute-mismatch.out" || fail "mismatch: $(cat "$TMP/recompute-mismatch.out")"

check "evaluation during training on a pp = 2 layout equals hydraulis eval on the exported checkpoint"
"$BIN" train "${COMMON[@]}" --nproc 2 --pp 2 --steps 4 --eval-every 2 --eval-data "$TMP/corpus" \
  --eval-tokens 1500 --long-documents truncate --checkpoint-dir "$TMP/eval-ckpt" \
  --log-json "$TMP/eval.jsonl" >"$TMP/eval.out" 2>&1 || fail "exit status $?: $(tail -c 600 "$TMP/eval.out")"
[[ $(grep -c '"eval_loss"' "$TMP/eval.jsonl") -eq 2 ]] || fail "expected evaluations after steps 2 and 4"
grep '"eval_loss"' "$TMP/eval.jsonl" | grep -q '"loss"' && fail "an evaluation record carries a training loss"
grep -q "eval   step    3  loss" "$TMP/eval.out" || fail "no evaluation line: $(tail -c 300 "$TMP/eval.out")"
"$BIN" export --checkpoint-dir "$TMP/eval-ckpt" -o "$TMP/eval-hf" >/dev/null 2>"$TMP/eval-export.err" ||
  fail "export: $(tail -c 600 "$TMP/eval-export.err")"
documents=$(tail -1 "$TMP/eval.jsonl" | sed -E 's/.*"eval_documents":([0-9]+).*/\1/')
"$BIN" eval --init-from "$TMP/eval-hf" --data "$TMP/corpus" --max-documents "$documents" --max-len 700 \
  >"$TMP/eval-docs.jsonl" 2>"$TMP/eval-docs.err" || fail "eval: $(tail -c 600 "$TMP/eval-docs.err")"
python3 - "$TMP/eval.jsonl" "$TMP/eval-docs.jsonl" <<'PY' || fail "the losses differ"
import json, sys
trained = json.loads(open(sys.argv[1]).read().splitlines()[-1])
docs = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
targets = sum(d["tokens"] - 1 for d in docs)
mean = sum(d["loss"] * (d["tokens"] - 1) for d in docs) / targets
print(f"train's evaluation {trained['eval_loss']:.6f} over {trained['eval_targets']} targets, "
      f"eval's {mean:.6f} over {targets}")
sys.exit(0 if targets == trained["eval_targets"] and abs(mean - trained["eval_loss"]) < 1e-5 * mean else 1)
PY

check "without --eval-data the last documents are held out, and a resume holding out others is refused"
"$BIN" train "${COMMON[@]}" --nproc 1 --steps 2 --eval-every 1 --eval-tokens 3000 \
  --checkpoint-dir "$TMP/held-ckpt" --log-json "$TMP/held.jsonl" >"$TMP/held.out" 2>&1 ||
  fail "exit status $?: $(tail -c 600 "$TMP/held.out")"
[[ $(grep -c '"eval_loss"' "$TMP/held.jsonl") -eq 2 ]] || fail "expected an evaluation after each step"
"$BIN" train "${COMMON[@]}" --nproc 1 --steps 3 --eval-every 1 --eval-tokens 1000 \
  --checkpoint-dir "$TMP/held-ckpt" --resume >"$TMP/held-resume.out" 2>&1
RC=$?
[[ $RC -eq 2 ]] || fail "resume holding out another number: exit status $RC, expected 2"
grep -q "resume with the same --eval-every, --eval-data and --eval-tokens" "$TMP/held-resume.out" ||
  fail "resume: $(tail -c 600 "$TMP/held-resume.out")"

check "the shipped GPU run configs parse: every key is a flag (they stop at the GPU this machine lacks)"
if ! command -v nvidia-smi >/dev/null; then
  for config in "$SRC"/configs/runs/llama-*.toml; do
    (cd "$SRC" && "$BIN" train --config "$config" --data "$TMP/corpus") >"$TMP/config-gpu.out" 2>&1
    RC=$?
    [[ $RC -eq 2 ]] || fail "$config: exit status $RC, expected 2"
    grep -q "device cuda: no CUDA GPU is visible" "$TMP/config-gpu.out" ||
      fail "$config: $(tail -c 400 "$TMP/config-gpu.out")"
  done
fi

if [[ $FAILED -gt 0 ]]; then
  echo "$FAILED check(s) failed" >&2
  exit 1
fi
echo "train_test: all checks passed"
