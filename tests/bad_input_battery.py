#!/usr/bin/env python3
"""Bad-input battery: hundreds of malformed inputs across the CLI's subcommands.

Usage: bad_input_battery.py HYDRAULIS_BINARY SOURCE_DIR [--report FILE] [--list]

Every case is an input hydraulis must refuse. Each run is classified:
  clear   exit status 2 (input) or 1 (I/O), one line on stderr starting "hydraulis: error:",
          at most 400 characters, nothing on stdout, no file left behind
  unclear refused, but the message is not one bounded line, or stdout is not empty
  crash   killed by a signal, an "internal error", or an exit status other than 1 or 2
  hang    still running after the time limit
  silent  exit status 0: the bad input was accepted
Exits 1 unless every case is "clear". With --report, writes the counts as a markdown
table (docs/benchmarks.md records it). Cases are generated deterministically: the same
binary gives the same table.
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

TIME_LIMIT_S = 20


class Battery:
    def __init__(self, binary, src, tmp):
        self.bin = binary
        self.src = src
        self.tmp = tmp
        self.cases = []  # (family, name, argv, stdin_bytes, expect_rc)
        self.counter = 0

    def file(self, name, data):
        self.counter += 1
        path = os.path.join(self.tmp, f"{self.counter:04d}-{name}")
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        return path

    def add(self, family, name, argv, stdin=None, expect_rc=(2,)):
        self.cases.append((family, name, argv, stdin, expect_rc))


def invalid_json_variants(text, rng, count):
    """Deterministically invalid versions of a valid JSON document."""
    out = []
    n = len(text)
    # Prefixes cut before the final closing brace are never valid JSON.
    last = text.rstrip().rfind("}")
    for k in range(count):
        cut = (k * 7919 + 13) % max(1, last)
        out.append(("prefix", text[:cut]))
    # A structural character replaced by '#' breaks the syntax.
    positions = [i for i, c in enumerate(text) if c in "{}[]:,\""]
    for k in range(count):
        i = positions[(k * 104729 + 7) % len(positions)]
        out.append(("flip", text[:i] + "#" + text[i + 1:]))
    return out


def set_path(doc, path, value):
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def numeric_paths(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from numeric_paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from numeric_paths(v, prefix + (i,))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield prefix


def build(b):
    src = b.src
    profile = os.path.join(src, "configs/profiles/llama-32b-a800.json")
    cands = os.path.join(src, "configs/candidates/llama-32b-64gpu.json")
    lengths = b.file("lengths.txt", "\n".join(str(100 + (i * 7919) % 20000) for i in range(300)))
    dataset = b.file("dataset.txt", "\n".join(str(1 + (i * 104729) % 9000) for i in range(3000)))
    plan = ["plan", "--profile", profile, "--candidates", cands]
    rng = random.Random(12)

    # 1. Numeric flags of every subcommand: values no flag accepts.
    bad_numbers = ["nan", "inf", "-inf", "1e400", "abc", "", "99999999999999999999999", "-1"]
    # Flags taking a real number: 1e23 is a finite number there, legitimately accepted.
    float_flags = {"--backward-to-forward", "--nvlink-gbytes-per-s", "--network-gbits-per-node",
                   "--p2p-latency-us", "--collective-latency-us", "--grad-bytes-per-param",
                   "--optimizer-ms", "--hbm-gbytes-per-s", "--select-tolerance"}
    flag_sets = {
        "plan": (plan + ["--lengths", lengths],
                 ["--seed", "--backward-to-forward"]),
        "plan-dataset": (plan + ["--dataset", dataset],
                         ["--steps", "--tokens-per-batch", "--max-len"]),
        "simulate": (["simulate", "--profile", profile, "--candidates", cands, "--lengths", dataset,
                      "--steps", "1", "-q"],
                     ["--tokens-per-batch", "--max-len", "--seed", "--backward-to-forward",
                      "--nvlink-gbytes-per-s", "--network-gbits-per-node", "--p2p-latency-us",
                      "--collective-latency-us", "--grad-bytes-per-param", "--optimizer-ms",
                      "--hbm-gbytes-per-s", "--trace-steps", "--ddp-bucket-size"]),
        "propose": (["propose", "--profile", profile, "--lengths", dataset, "--quiet"],
                    ["--gpus", "--max-len", "--resolution", "--tokens-per-batch",
                     "--max-strategies", "--top-documents", "--select-batches",
                     "--select-tolerance"]),
        "stats": (["stats", "--lengths", dataset], ["--max-len", "--resolution"]),
    }
    for sub, (base, flags) in flag_sets.items():
        for flag in flags:
            for value in bad_numbers:
                if flag in float_flags and value == "99999999999999999999999":
                    continue
                argv = list(base)
                if sub == "propose" and flag != "--gpus":
                    argv += ["--gpus", "64"]
                b.add("numeric flags", f"{sub} {flag} {value!r}", argv + [flag, value])

    # 2. Length files.
    bad_lengths = {
        "empty": "", "only comments": "# nothing\n", "zero": "0\n", "negative": "5\n-3\n",
        "float": "12.5\n", "text": "12\nabc\n", "int64 overflow": "99999999999999999999\n",
        "hex": "0x10\n", "json float": "[1, 2.5]", "json string": "[1, \"2\"]",
        "json negative": "[4, -4]", "json nested": "[[1]]", "json object": "[{\"a\": 1}]",
        "json unterminated": "[1, 2", "json trailing": "[1, 2]]", "deep": "[" * 100000,
        "binary": "\x00\x01\x02\xff", "json null": "[null]", "json bool": "[true]",
        "json empty": "[]", "spaces inside": "1 2\n", "plus sign": "+5\n",
        "json beyond a double": "[1e400]", "json huge negative": "[-1e309]",
        # Too large for int64: refused as too long, never wrapped negative.
        "json 2^63": "[9223372036854775808]", "json 2^64 - 1": "[18446744073709551615]",
        "json 2^64": "[18446744073709551616]", "json 1e30": "[1e30]",
        "20 digits": "99999999999999999999\n",
    }
    for name, text in bad_lengths.items():
        path = b.file("bad-lengths.txt", text)
        b.add("length files", f"plan --lengths {name}", plan + ["--lengths", path])
        b.add("length files", f"stats --lengths {name}", ["stats", "--lengths", path])
    b.add("length files", "plan --lengths missing file",
          plan + ["--lengths", os.path.join(b.tmp, "absent.txt")])
    b.add("length files", "plan --lengths a directory", plan + ["--lengths", b.tmp])

    # 3. JSON lines.
    bad_jsonl = {
        "not json": "{\"length\": 5}\nnope\n", "no field": "{\"size\": 5}\n",
        "string length": "{\"length\": \"5\"}\n", "zero length": "{\"length\": 0}\n",
        "float length": "{\"length\": 2.5}\n", "duplicate key": "{\"length\": 5, \"length\": 6}\n",
        "array line": "[5]\n", "deep": "{\"length\": 5, \"x\": " + "[" * 5000 + "\n",
        "truncated": "{\"length\": 5}\n{\"length\": ", "huge": "{\"length\": 1e300}\n",
        "beyond a double": "{\"length\": 5, \"x\": 1e400}\n",
        "length 2^63": "{\"length\": 9223372036854775808}\n",
        "length 2^64": "{\"length\": 18446744073709551616}\n",
    }
    for name, text in bad_jsonl.items():
        path = b.file("bad.jsonl", text)
        b.add("JSON lines", f"stats {name}", ["stats", "--lengths", path])
        b.add("JSON lines", f"plan {name}", plan[:1] + plan[1:] + ["--lengths", path])

    # 4. Profiles and candidate sets: invalid JSON, bad values, missing fields.
    for label, path, role in (("profile", profile, "--profile"), ("candidates", cands,
                                                                 "--candidates")):
        text = open(path).read()
        for kind, bad in invalid_json_variants(text, rng, 20):
            p = b.file(f"bad-{label}.json", bad)
            argv = [x if x != path else p for x in plan] + ["--lengths", lengths]
            b.add(f"{label} JSON", f"{kind}", argv)
        doc = json.loads(text)
        paths = list(numeric_paths(doc))
        for value_name, value in (("negative", -5), ("string", "7"), ("null", None),
                                  ("object", {}), ("huge", 1e308 if label == "profile" else 10**12)):
            for path_ in paths[:: max(1, len(paths) // 8)]:
                mutated = json.loads(text)
                set_path(mutated, path_, value)
                p = b.file(f"bad-{label}.json", json.dumps(mutated))
                argv = [x if x != path else p for x in plan] + ["--lengths", lengths]
                b.add(f"{label} values", f"{'.'.join(map(str, path_))} = {value_name}", argv)
        optional = {"utilization_tokens"}
        for key in [k for k in doc.keys() if k not in optional]:
            mutated = json.loads(text)
            del mutated[key]
            p = b.file(f"bad-{label}.json", json.dumps(mutated))
            argv = [x if x != path else p for x in plan] + ["--lengths", lengths]
            b.add(f"{label} values", f"without {key}", argv)
        # A number beyond a double, written as text (json.dumps cannot).
        p = b.file(f"overflow-{label}.json", text.replace("{", "{\"x\": 1e400, ", 1))
        b.add(f"{label} values", "a number beyond a double",
              [x if x != path else p for x in plan] + ["--lengths", lengths])
        # Integers too large for their type: 2^63 used to wrap to a negative.
        int_paths = ([("model", "layers"), ("model", "hidden"), ("schemes", 0, "tp")]
                     if label == "profile" else
                     [("gpus",), ("strategies", 0, "pipelines", 0, "count"),
                      ("optimizer_layout", "dp")])
        for path_ in int_paths:
            for value_name, value in (("2^63", 2**63), ("2^64", 2**64), ("1e30", 1e30)):
                mutated = json.loads(text)
                set_path(mutated, path_, value)
                p = b.file(f"big-{label}.json", json.dumps(mutated))
                b.add(f"{label} values", f"{'.'.join(map(str, path_))} = {value_name}",
                      [x if x != path else p for x in plan] + ["--lengths", lengths])
        dup = text.replace("{", "{\"format\": \"x\", ", 1)
        p = b.file(f"dup-{label}.json", dup)
        b.add(f"{label} values", "duplicate key",
              [x if x != path else p for x in plan] + ["--lengths", lengths])

    # 5. Plans for `summarize`.
    out = subprocess.run([b.bin] + plan + ["--dataset", dataset, "--steps", "2", "--no-timing"],
                         capture_output=True, check=True).stdout.decode()
    good = [json.loads(line) for line in out.splitlines() if line.strip()]
    plan_mutations = {
        "wrong format": lambda j: j.update(format="hydraulis.plan/9"),
        "no format": lambda j: j.pop("format"),
        "negative documents": lambda j: j.update(num_documents=-3),
        "negative tokens": lambda j: j.update(num_tokens=-1),
        "float documents": lambda j: j.update(num_documents=2.5),
        "empty pipelines": lambda j: j.update(pipelines=[]),
        "pipelines not a list": lambda j: j.update(pipelines={}),
        "string estimate": lambda j: j.update(estimated_step_ms="fast"),
        "negative estimate": lambda j: j.update(estimated_step_ms=-1.0),
        "bound above estimate": lambda j: j.update(lower_bound_ms=j["estimated_step_ms"] * 2),
        "no strategy": lambda j: j.pop("strategy"),
        "strategy not an object": lambda j: j.update(strategy=3),
        "no name": lambda j: j["strategy"].pop("name"),
        "negative planning": lambda j: j.update(planning_ms=-2.0),
        "tokens 2^63": lambda j: j.update(num_tokens=2**63),
        "documents 2^64": lambda j: j.update(num_documents=2**64),
        "tokens 1e30": lambda j: j.update(num_tokens=1e30),
        "array line": None, "truncated line": None, "empty file": None,
        "number beyond a double": None,
    }
    for name, mutate in plan_mutations.items():
        if name == "array line":
            text = json.dumps(good[0]) + "\n[1, 2]\n"
        elif name == "truncated line":
            text = json.dumps(good[0]) + "\n" + json.dumps(good[1])[:50] + "\n"
        elif name == "empty file":
            text = ""
        elif name == "number beyond a double":
            text = json.dumps(good[0]).replace("{", "{\"x\": 1e400, ", 1) + "\n"
        else:
            bad = json.loads(json.dumps(good[1]))
            mutate(bad)
            text = json.dumps(good[0]) + "\n" + json.dumps(bad) + "\n"
        b.add("summarize", name, ["summarize", b.file("plans.jsonl", text)])

    # 5a. Measurements files (`replay`): a header and a step damaged field by field.
    tiny = os.path.join(src, "configs/profiles/tiny-cpu.json")
    cands2 = os.path.join(src, "configs/candidates/cpu-2rank.json")
    short = [300, 200, 100, 50]
    out = subprocess.run([b.bin, "plan", "--profile", tiny, "--candidates", cands2, "--lengths",
                          b.file("short.txt", "\n".join(map(str, short))), "--no-timing"],
                         capture_output=True, check=True).stdout.decode()
    tiny_profile, tiny_cands = json.load(open(tiny)), json.load(open(cands2))
    header = {"format": "hydraulis.measurements/1", "profile": tiny_profile,
              "candidates": tiny_cands, "backward_to_forward": 2.0, "window": 16, "holdout": 4,
              "start": {"format": "hydraulis.calibration/1", "version": 0,
                        "overhead_ms": [0.0, 0.0], "profile": tiny_profile}}
    step = {"step": 0, "lengths": short, "plan": json.loads(out.splitlines()[0]),
            "stage_ms": [[[1.0]]], "step_ms": 10.0}
    measured_cases = {
        "header of another format": ({**header, "format": "hydraulis.measurements/9"}, step),
        "header without a profile": ({k: v for k, v in header.items() if k != "profile"}, step),
        "window 1": ({**header, "window": 1}, step),
        "holdout as large as the window": ({**header, "holdout": 16}, step),
        "backward_to_forward 0": ({**header, "backward_to_forward": 0}, step),
        "start of another format": ({**header, "start": {**header["start"], "format": "x"}}, step),
        "step without step_ms": (header, {k: v for k, v in step.items() if k != "step_ms"}),
        "step_ms a string": (header, {**step, "step_ms": "nan"}),
        "negative length": (header, {**step, "lengths": [-1, 200, 100, 50]}),
        "lengths that are not the plan's": (header, {**step, "lengths": [300, 200]}),
        "plan not an object": (header, {**step, "plan": "x"}),
        "stage_ms not nested": (header, {**step, "stage_ms": [1.0]}),
        "stage_ms with a string": (header, {**step, "stage_ms": [[["1"]]]}),
        "unknown step field": (header, {**step, "extra": 1}),
    }
    for name, (h, st) in measured_cases.items():
        text = json.dumps(h) + "\n" + json.dumps(st) + "\n"
        b.add("replay", name, ["replay", "--measurements", b.file("measured.jsonl", text), "-q"])
    b.add("replay", "empty file", ["replay", "--measurements", b.file("measured.jsonl", ""), "-q"])
    b.add("replay", "a profile given as measurements", ["replay", "--measurements", tiny, "-q"])
    b.add("replay", "not JSON", ["replay", "--measurements", b.file("measured.jsonl", "{x"), "-q"])
    good_measured = b.file("good-measured.jsonl", json.dumps(header) + "\n" + json.dumps(step))
    for flag, value in (("--window", "1"), ("--holdout", "0"), ("--window", "nan")):
        b.add("replay", f"{flag} {value}",
              ["replay", "--measurements", good_measured, flag, value, "-q"])
    b.add("replay", "--holdout not below the window",
          ["replay", "--measurements", good_measured, "--window", "4", "--holdout", "4", "-q"])
    b.add("replay", "--profile without the run's schemes",
          ["replay", "--measurements", good_measured, "--profile", profile, "-q"])

    # 5b. Plans with context-parallel pipelines: every cp field damaged.
    long_dataset = b.file("long-dataset.txt",
                          "\n".join(str(90000 if i % 40 == 0 else 1 + (i * 104729) % 9000)
                                    for i in range(3000)))
    cp_cands = os.path.join(src, "configs/candidates/llama-32b-256gpu-128k.json")
    out = subprocess.run([b.bin, "plan", "--profile", profile, "--candidates", cp_cands,
                          "--dataset", long_dataset, "--steps", "1", "--max-len", "131072",
                          "--tokens-per-batch", "2097152", "--no-timing"],
                         capture_output=True, check=True).stdout.decode()
    cp_plan = json.loads(out.splitlines()[0])
    cp = next(i for i, p in enumerate(cp_plan["pipelines"])
              if p["cp"] > 1 and p["micro_batches"])

    def pipe(j):
        return j["pipelines"][cp]
    cp_mutations = {
        "layout rank 99": lambda j: pipe(j)["cp_layouts"][0].__setitem__(0, 99),
        "layout rank -2": lambda j: pipe(j)["cp_layouts"][0].__setitem__(0, -2),
        "layout subset rank 2^62": lambda j: pipe(j)["cp_layouts"][0].__setitem__(0, [0, 2**62]),
        "layout subset repeated": lambda j: pipe(j)["cp_layouts"][0].__setitem__(0, [1, 1]),
        "layout string": lambda j: pipe(j)["cp_layouts"][0].__setitem__(0, "0"),
        "layouts missing": lambda j: pipe(j).pop("cp_layouts"),
        "layouts one short": lambda j: pipe(j)["cp_layouts"].pop(),
        "pipeline cp 0": lambda j: pipe(j).update(cp=0),
        "pipeline cp -4": lambda j: pipe(j).update(cp=-4),
        "pipeline cp \"4\"": lambda j: pipe(j).update(cp=str(pipe(j)["cp"])),
        "pipeline cp 2^62": lambda j: pipe(j).update(cp=2**62),
        "pipeline cp differs": lambda j: pipe(j).update(cp=pipe(j)["cp"] * 2),
        "strategy cp 0": lambda j: j["strategy"]["pipelines"][cp].update(cp=0),
        "document index past the batch": lambda j: pipe(j)["micro_batches"][0].__setitem__(0, 10**6),
        "document index -1": lambda j: pipe(j)["micro_batches"][0].__setitem__(0, -1),
        "document twice": lambda j: j["pipelines"][cp]["micro_batches"][0].append(
            pipe(j)["micro_batches"][0][0]),
        "cp 1 pipeline with layouts": lambda j: next(
            p for p in j["pipelines"] if p["cp"] == 1).update(cp_layouts=[]),
    }
    for name, mutate in cp_mutations.items():
        bad = json.loads(json.dumps(cp_plan))
        mutate(bad)
        b.add("summarize cp fields", name,
              ["summarize", b.file("cp-plans.jsonl", json.dumps(bad) + "\n")])

    # 5c. Counts a command cannot finish, flags it would ignore, integers past a flag's type.
    propose = ["propose", "--profile", profile, "--lengths", dataset, "--gpus", "64",
               "--max-len", "4096", "--quiet"]
    sim = ["simulate", "--profile", profile, "--candidates", cands, "--lengths", dataset, "-q"]
    for name, argv in {
            "propose --top-documents 10001": propose + ["--top-documents", "10001"],
            "propose --top-documents 1000000000": propose + ["--top-documents", "1000000000"],
            "propose --select-batches 10001": propose + ["--max-strategies", "2",
                                                         "--select-batches", "10001"],
            "propose --select-batches 1000000000": propose + ["--max-strategies", "2",
                                                              "--select-batches", "1000000000"],
            "propose --select-tolerance without --select-batches":
                propose + ["--select-tolerance", "0.05"],
            "simulate --steps 2000000000": sim + ["--steps", "2000000000"],
            "simulate --steps 1000001": sim + ["--steps", "1000001"],
            "propose --gpus 2147483648": propose[:-5] + ["--gpus", "2147483648"],
            "propose --max-strategies 2147483648": propose + ["--max-strategies", "2147483648"],
            "plan --steps 2147483648": plan + ["--dataset", dataset, "--steps", "2147483648"],
            "simulate --trace-steps 2147483648": sim + ["--steps", "1", "--trace-steps",
                                                        "2147483648"],
    }.items():
        b.add("counts and ranges", name, argv)
    b.add("output", "stdout on a full device (plan --dataset)",
          plan + ["--dataset", dataset, "--steps", "3"], expect_rc=(1,))

    # 6. Megatron .idx files: every kind of damage to the header and the arrays.
    def idx(n_docs, version=1, dtype=8, magic=b"MMIDIDX\x00\x00", sizes=None, docs=None):
        sizes = sizes if sizes is not None else [10] * n_docs
        docs = docs if docs is not None else list(range(n_docs + 1))
        data = magic + struct.pack("<Q", version) + struct.pack("<B", dtype)
        data += struct.pack("<Q", len(sizes)) + struct.pack("<Q", len(docs))
        data += struct.pack(f"<{len(sizes)}i", *sizes)
        data += struct.pack(f"<{len(sizes)}q", *[10 * i * 2 for i in range(len(sizes))])
        data += struct.pack(f"<{len(docs)}q", *docs)
        return data
    good_idx = idx(5)
    idx_cases = {"bad magic": idx(5, magic=b"NOTMAGIC\x00"), "version 2": idx(5, version=2),
                 "dtype 99": idx(5, dtype=99), "negative size": idx(3, sizes=[10, -4, 10]),
                 "zero size": idx(3, sizes=[10, 0, 10]),
                 "doc index backwards": idx(3, docs=[0, 2, 1, 3]),
                 "doc index past sizes": idx(3, docs=[0, 1, 9, 3]),
                 "no documents": idx(0, docs=[0])}
    for cut in range(0, len(good_idx) - 1, max(1, len(good_idx) // 12)):
        idx_cases[f"prefix {cut}"] = good_idx[:cut]
    for name, data in idx_cases.items():
        p = b.file("bad.idx", data)
        b.add("Megatron .idx", name, ["stats", "--lengths", p])

    # 7. Output targets.
    os.makedirs(os.path.join(b.tmp, "out-dir"), exist_ok=True)
    b.add("output", "-o a directory", plan + ["--lengths", lengths, "-o",
                                              os.path.join(b.tmp, "out-dir")])
    b.add("output", "-o in a missing folder",
          plan + ["--lengths", lengths, "-o", os.path.join(b.tmp, "no/such/plan.json")])
    b.add("output", "stdout on a full device", plan + ["--lengths", lengths], expect_rc=(1,))
    b.add("output", "propose -o a directory",
          ["propose", "--profile", profile, "--lengths", dataset, "--gpus", "64", "--max-len", "4096", "--quiet", "-o",
           os.path.join(b.tmp, "out-dir")])

    own = b.file("own-lengths.txt", open(lengths, "rb").read())
    own_profile = b.file("own-profile.json", open(profile, "rb").read())
    candidates = plan[plan.index("--candidates") + 1]
    b.add("output", "plan -o onto its --lengths", plan + ["--lengths", own, "-o", own])
    b.add("output", "plan -o onto its --profile",
          ["plan", "--profile", own_profile, "--candidates", candidates, "--lengths", lengths,
           "-o", own_profile])
    own_dataset = b.file("own-" + os.path.basename(dataset), open(dataset, "rb").read())
    b.add("output", "propose -o onto its --lengths (another spelling)",
          ["propose", "--profile", profile, "--lengths", own_dataset, "--gpus", "64", "--max-len",
           "4096", "--quiet", "-o",
           os.path.join(os.path.dirname(own_dataset), ".", os.path.basename(own_dataset))])
    b.add("output", "-o ''", plan + ["--lengths", lengths, "-o", ""])
    b.add("output", "propose -o ''",
          ["propose", "--profile", profile, "--lengths", dataset, "--gpus", "64", "--max-len", "4096",
           "-o", ""])

    # 8. Flags themselves: unknown, missing values, conflicting.
    for argv in (["plan"], ["plan", "--profile"], plan, plan + ["--lengths", lengths, "--bogus"],
                 plan + ["--lengths", lengths, "--algorithm", "best"],
                 plan + ["--lengths", lengths, "--recompute-granularity", "partial"],
                 ["simulate", "--profile", profile, "--candidates", cands, "--lengths", dataset,
                  "--recompute-granularity", "Full"],
                 plan + ["--lengths", lengths, "--dataset", dataset],
                 ["stats"], ["summarize"], ["simulate", "--profile", profile],
                 ["propose", "--profile", profile, "--lengths", dataset],
                 # --select-batches without --max-strategies: nothing to keep.
                 ["propose", "--profile", profile, "--lengths", dataset, "--gpus", "64",
                  "--max-len", "4096", "--select-batches", "4", "--quiet"],
                 ["preprocess", "--input", os.path.join(b.tmp, "absent.jsonl"),
                  "--output-prefix", os.path.join(b.tmp, "x")],
                 ["nosuchcommand"], ["stats", "--lengths", dataset, "--format", "csv"],
                 ["stats", "--lengths", dataset, "--tokenizer", "sentencepiece"]):
        b.add("flags", " ".join(argv[:1] + [a for a in argv[1:] if a.startswith("--")]), argv)

    # 8b. Control bytes and long values in a flag: echoed escaped and cut, one short line.
    jsonl = b.file("ok-lengths.jsonl", "{\"length\": 5}\n")
    corpus = b.file("ok-corpus.jsonl", "{\"text\": \"one\"}\n")
    pre = ["preprocess", "--input", corpus, "--output-prefix", os.path.join(b.tmp, "ctl")]
    for value in ("a\nb", "a\rb", "a\x1b[2Jb", "a\tb", "x" * 2000):
        shown = repr(value) if len(value) < 20 else f"'x' * {len(value)}"
        family = "control bytes in flags"
        b.add(family, f"stats --length-field {shown}",
              ["stats", "--lengths", jsonl, "--length-field", value])
        b.add(family, f"stats --text-field {shown}",
              ["stats", "--lengths", corpus, "--text-field", value])
        b.add(family, f"preprocess --tokenizer {shown}", pre + ["--tokenizer", value])
        b.add(family, f"preprocess --json-key {shown}", pre + ["--json-key", value])

    # 9. preprocess: damaged corpora and tokenizer files.
    add_preprocess_cases(b)

    # 10. train (the runtime binary, over a second per call: a few cases only), where this
    # build has it (the ASan build has no libtorch runtime).
    if os.path.exists(os.path.join(os.path.dirname(b.bin), "hydraulis-runtime")):
        add_train_cases(b, src, profile)


def add_preprocess_cases(b):
    good = b.file("corpus.jsonl", "{\"text\": \"one\"}\n{\"text\": \"two\"}\n")
    out = os.path.join(b.tmp, "pre-out")
    pre = ["preprocess", "--output-prefix", out]
    corpora = {
        "not json": "{\"text\": \"a\"}\nnope\n", "text not a string": "{\"text\": 5}\n",
        "no text field": "{\"body\": \"a\"}\n", "array line": "[\"a\"]\n",
        "duplicate key": "{\"text\": \"a\", \"text\": \"b\"}\n",
        "deep": "{\"text\": \"a\", \"x\": " + "[" * 5000 + "\n",
        "beyond a double": "{\"text\": \"a\", \"x\": 1e400}\n",
        "truncated": "{\"text\": \"a\"}\n{\"text\": \"b",
    }
    for name, text in corpora.items():
        b.add("preprocess", f"corpus {name}", pre + ["--input", b.file("bad.jsonl", text)])
    b.add("preprocess", "--output-prefix in a missing folder",
          ["preprocess", "--input", good, "--output-prefix", os.path.join(b.tmp, "no/such/x")])
    b.add("preprocess", "--tokenizer gpt2 without files", pre + ["--input", good,
                                                                 "--tokenizer", "gpt2"])
    # GPT-2 BPE files: a valid pair, then one damage at a time.
    byte_symbols = gpt2_byte_symbols()
    vocab = {byte_symbols[i]: i for i in range(256)}
    vocab["on"] = 256
    merges = "#version: 0.2\no n\n"
    damaged = {
        "vocab not an object": ("[1, 2]", merges),
        "vocab id a string": (json.dumps({**vocab, "on": "256"}), merges),
        "vocab id negative": (json.dumps({**vocab, "on": -1}), merges),
        "vocab id beyond int32": (json.dumps({**vocab, "on": 2**40}), merges),
        "vocab duplicate id": (json.dumps({**vocab, "on": 5}), merges),
        "vocab without a byte": (json.dumps({k: v for k, v in vocab.items() if v != 65}), merges),
        "vocab invalid JSON": (json.dumps(vocab)[:-3], merges),
        "merge of one symbol": (json.dumps(vocab), "o\n"),
        "merge of three symbols": (json.dumps(vocab), "o n x\n"),
        "merge not in the vocabulary": (json.dumps(vocab), "n o\n"),
        "merge with two spaces": (json.dumps(vocab), "o  n\n"),
    }
    for name, (vocab_text, merges_text) in damaged.items():
        b.add("preprocess", f"gpt2 {name}",
              pre + ["--input", good, "--tokenizer", "gpt2", "--vocab-file",
                     b.file("vocab.json", vocab_text), "--merge-file",
                     b.file("merges.txt", merges_text)])


def gpt2_byte_symbols():
    """GPT-2's bytes_to_unicode: byte -> printable symbol."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
          + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for v in range(256):
        if v not in bs:
            bs.append(v)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def add_train_cases(b, src, profile):
    model = os.path.join(src, "configs/models/tiny.json")
    tiny = os.path.join(src, "configs/profiles/tiny-cpu.json")
    # Under the launcher (--nproc): every check must happen before a rank starts, as one line.
    train = ["train", "--nproc", "2", "--model", model, "--profile", tiny, "--steps", "1",
             "--timeout-s", "20"]
    for extra in (["--lr", "nan"], ["--steps", "0"], ["--tp", "0"], ["--keep-checkpoints", "-1"],
                  ["--checkpoint-every", "-1"], ["--resume"], ["--device", "tpu"],
                  ["--precision", "fp8"], ["--timeout-s", "inf"], ["--max-len", ""],
                  ["--recompute-granularity", "partial"],
                  ["--recompute-granularity", "full"],
                  ["--data", os.path.join(b.tmp, "no-such-corpus")],
                  ["--plan-algorithm", "kk"], ["--comm-backend", "nc\ncl"],
                  ["--comm-backend", "x" * 2000]):
        name = " ".join(e if e.isprintable() and len(e) < 40 else
                        repr(e) if len(e) < 40 else f"<{len(e)} characters>" for e in extra)
        b.add("train flags", name, train + extra)
    b.add("train flags", "--model missing",
          ["train", "--nproc", "2", "--model", os.path.join(b.tmp, "absent.json"), "--profile", tiny])
    b.add("train flags", "--profile of another model",
          ["train", "--nproc", "2", "--model", model, "--profile", profile])
    b.add("train flags", "--tokens-per-batch beyond 10^7 documents",
          train + ["--tokens-per-batch", "9000000000000"])
    # Data tokenized for a larger vocabulary than tiny's 256 ids: refused before any rank.
    prefix = os.path.join(b.tmp, "wide-vocab")
    ids = [1, 2, 300, 4, 5]
    with open(prefix + ".bin", "wb") as f:
        f.write(struct.pack("<5H", *ids))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, 2, 3) +
                struct.pack("<2i", 3, 2) + struct.pack("<2q", 0, 6) + struct.pack("<3q", 0, 1, 2))
    b.add("train data", "token id beyond the vocabulary", train + ["--data", prefix])
    # Failures that used to print once per rank plus the launcher's lines.
    for name, extra in (("--max-len 1", ["--max-len", "1"]),
                        ("--timeout-s 0", ["--timeout-s", "0"]),
                        ("--log-json in a missing folder",
                         ["--log-json", os.path.join(b.tmp, "no", "such", "log.jsonl")]),
                        ("--log-json a folder", ["--log-json", b.tmp])):
        b.add("train, one line per failure", name, train + extra)
    # A model whose training state alone is terabytes: refused by size, not by an allocator.
    huge = json.load(open(model))
    huge.update(name="huge", hidden=4096, heads=32, kv_heads=8, ffn=11008, vocab=60000000)
    b.add("train, one line per failure", "a model of terabytes",
          ["train", "--nproc", "2", "--model", b.file("huge.json", json.dumps(huge)), "--steps", "1",
           "--timeout-s", "20"])
    # Models too large for the machine or for their types: refused by size or at
    # parse time, before anything is allocated; eval counts the weights alone.
    deep = dict(json.load(open(model)), name="deep", layers=2**31 - 1)
    wide = dict(json.load(open(model)), name="wide", hidden=2**30, heads=2**20, kv_heads=2**20,
                ffn=2**30, vocab=2**30)
    for name, config in (("a model of terabytes", huge), ("2^31 - 1 layers", deep),
                         ("a parameter count past int64", wide),
                         ("vocab 2^63", dict(json.load(open(model)), vocab=2**63)),
                         ("hidden 1e30", dict(json.load(open(model)), hidden=1e30))):
        path = b.file("big-model.json", json.dumps(config))
        b.add("model size", f"eval {name}", ["eval", "--model", path, "--data",
                                              prefix_with_ids(b, [1, 2, 3])])
        b.add("model size", f"train {name}",
              ["train", "--nproc", "2", "--model", path, "--steps", "1", "--timeout-s", "20"])
    # Every document one token long: no batch has a target token.
    prefix = os.path.join(b.tmp, "one-token-docs")
    with open(prefix + ".bin", "wb") as f:
        f.write(struct.pack("<4H", 1, 2, 3, 4))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, 4, 5) +
                struct.pack("<4i", 1, 1, 1, 1) + struct.pack("<4q", 0, 2, 4, 6) +
                struct.pack("<5q", 0, 1, 2, 3, 4))
    b.add("train, one line per failure", "no document has a target token",
          train + ["--data", prefix])
    # A checkpoint made by a real 2-rank run, then damaged: refused before any rank starts.
    ckpt = os.path.join(b.tmp, "ckpt-good")
    made = subprocess.run([b.bin] + train + ["--checkpoint-dir", ckpt], capture_output=True,
                          timeout=120)
    if made.returncode != 0:
        raise RuntimeError("battery set-up: the checkpoint run failed: " +
                           made.stderr.decode(errors="replace")[-400:])
    step = sorted(d for d in os.listdir(ckpt) if d.startswith("step-"))[-1]

    def damaged(name, how):
        d = os.path.join(b.tmp, "ckpt-" + name)
        shutil.copytree(ckpt, d)
        shard = os.path.join(d, step, "rank-00001.bin")
        how(shard)
        b.add("train, one line per failure", f"--resume from a {name} shard",
              train + ["--steps", "2", "--checkpoint-dir", d, "--resume"])

    def truncate(path):
        os.truncate(path, os.path.getsize(path) // 2)

    def flip(path):
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 5)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x40]))

    damaged("truncated", truncate)
    damaged("damaged", flip)
    damaged("missing", os.remove)
    # Checkpoint directories.
    not_dir = b.file("not-a-dir", "x")
    b.add("train data", "--checkpoint-dir is a file", train + ["--checkpoint-dir", not_dir])
    ckpt = os.path.join(b.tmp, "ckpt-garbage")
    os.makedirs(ckpt, exist_ok=True)
    with open(os.path.join(ckpt, "latest"), "w") as f:
        f.write("step-00000099\n")
    b.add("train data", "--resume with latest naming nothing",
          train + ["--checkpoint-dir", ckpt, "--resume"])
    add_hf_cases(b, prefix_with_ids(b, [1, 2, 3, 4, 5]))


def prefix_with_ids(b, ids):
    """A Megatron dataset of one uint16 document."""
    prefix = os.path.join(b.tmp, "one-doc")
    with open(prefix + ".bin", "wb") as f:
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, 1, 2) +
                struct.pack("<i", len(ids)) + struct.pack("<q", 0) + struct.pack("<2q", 0, 1))
    return prefix


def safetensors_bytes(tensors):
    """A safetensors file of F32 zeros: tensors is a list of (name, shape)."""
    header, data, at = {}, b"", 0
    for name, shape in tensors:
        n = 4
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + n]}
        data += b"\0" * n
        at += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def add_hf_cases(b, data):
    """Damaged Hugging Face checkpoints for `eval --init-from` (and one for `train`)."""
    config = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 12,
              "vocab_size": 16, "tie_word_embeddings": True}
    tensors = [("model.embed_tokens.weight", [16, 8])]
    for field, shape in (("self_attn.q_proj", [8, 8]), ("self_attn.k_proj", [4, 8]),
                         ("self_attn.v_proj", [4, 8]), ("self_attn.o_proj", [8, 8]),
                         ("mlp.gate_proj", [12, 8]), ("mlp.up_proj", [12, 8]),
                         ("mlp.down_proj", [8, 12]), ("input_layernorm", [8]),
                         ("post_attention_layernorm", [8])):
        tensors.append((f"model.layers.0.{field}.weight", shape))
    tensors.append(("model.norm.weight", [8]))
    good = safetensors_bytes(tensors)
    header_len = struct.unpack("<Q", good[:8])[0]

    def checkpoint(name, weights=good, cfg=config, files=None):
        d = os.path.join(b.tmp, "hf-" + name.replace(" ", "-"))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        for file_name, content in (files if files is not None else
                                   {"model.safetensors": weights}).items():
            with open(os.path.join(d, file_name), "wb") as f:
                f.write(content)
        return d

    flipped = bytearray(good)
    flipped[8 + header_len // 2] ^= 0x40
    cases = {
        "truncated safetensors": checkpoint("trunc", good[:len(good) - 7]),
        "header length only": checkpoint("hdr", good[:8]),
        "flipped header byte": checkpoint("flip", bytes(flipped)),
        "huge header length": checkpoint("huge", struct.pack("<Q", 1 << 60) + good[8:]),
        "unknown dtype": checkpoint("dtype", good.replace(b'"F32"', b'"F99"', 1)),
        "offsets past the end": checkpoint("offs", good[:-64]),
        "shape disagrees with config": checkpoint("shape", cfg={**config, "intermediate_size": 16}),
        "tensor missing": checkpoint("missing", safetensors_bytes(tensors[:-1])),
        "model_type qwen2": checkpoint("qwen", cfg={**config, "model_type": "qwen2"}),
        "rope_scaling": checkpoint("rope", cfg={**config, "rope_scaling": {"type": "linear"}}),
        "missing shard": checkpoint("shard", files={
            "model.safetensors.index.json": json.dumps(
                {"weight_map": {t: "model-00001-of-00002.safetensors" for t, _ in tensors}}).encode()}),
        "index escaping the directory": checkpoint("escape", files={
            "model.safetensors.index.json": json.dumps(
                {"weight_map": {t: "../x.safetensors" for t, _ in tensors}}).encode()}),
        "no weights file": checkpoint("none", files={}),
        "vocab_size 2^64": checkpoint("bigvocab", cfg={**config, "vocab_size": 2**64}),
        "num_hidden_layers 1e30": checkpoint("biglayers", cfg={**config, "num_hidden_layers": 1e30}),
    }
    for name, d in cases.items():
        b.add("Hugging Face checkpoints", name,
              ["eval", "--init-from", d, "--data", data, "--max-documents", "1"])
    used = os.path.join(b.tmp, "used-export")
    os.makedirs(used, exist_ok=True)
    with open(os.path.join(used, "model.safetensors"), "wb") as f:
        f.write(good)
    b.add("Hugging Face checkpoints", "export into a used directory",
          ["export", "--checkpoint-dir", os.path.join(b.tmp, "no-checkpoints"), "-o", used])
    b.add("Hugging Face checkpoints", "eval --logits in a missing folder",
          ["eval", "--init-from", checkpoint("good"), "--data", data, "--max-documents", "1",
           "--logits", os.path.join(b.tmp, "no-folder", "l.safetensors")])
    b.add("Hugging Face checkpoints", "train --init-from a truncated file",
          ["train", "--nproc", "2", "--init-from", cases["truncated safetensors"], "--data", data,
           "--steps", "1", "--timeout-s", "20"])


def classify(b, case):
    family, name, argv, stdin, expect_rc = case
    before = set(os.listdir(b.tmp))
    stdout_target = subprocess.PIPE
    full = None
    if name.startswith("stdout on a full device"):
        full = open("/dev/full", "wb")
        stdout_target = full
    try:
        r = subprocess.run([b.bin] + argv, input=stdin, stdout=stdout_target,
                           stderr=subprocess.PIPE, timeout=TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        return "hang", ""
    finally:
        if full:
            full.close()
    err = r.stderr.decode(errors="replace")
    out = r.stdout.decode(errors="replace") if r.stdout else ""
    left = [f for f in set(os.listdir(b.tmp)) - before if ".tmp" in f]
    if r.returncode == 0:
        return "silent", out[:200]
    if r.returncode < 0 or r.returncode not in (1, 2) or "internal error" in err:
        return "crash", err[:300]
    lines = err.rstrip("\n").split("\n")
    if (r.returncode not in expect_rc or len(lines) != 1 or len(lines[0]) > 400
            or not lines[0].isprintable()
            or not lines[0].startswith("hydraulis: error:") or out or left):
        return "unclear", err[:300]
    return "clear", lines[0]


def main():
    args = sys.argv[1:]
    report = None
    if "--report" in args:
        report = args[args.index("--report") + 1]
        del args[args.index("--report"):args.index("--report") + 2]
    listing = "--list" in args
    if listing:
        args.remove("--list")
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="battery-")
    try:
        b = Battery(os.path.abspath(args[0]), os.path.abspath(args[1]), tmp)
        build(b)
        counts, by_family, bad = {}, {}, []
        for case in b.cases:
            outcome, detail = classify(b, case)
            counts[outcome] = counts.get(outcome, 0) + 1
            fam = by_family.setdefault(case[0], {})
            fam[outcome] = fam.get(outcome, 0) + 1
            if listing:
                print(f"{outcome:8} {case[0]}: {case[1]}: {detail}")
            if outcome != "clear":
                bad.append(f"{outcome}: {case[0]}: {case[1]}: {detail}")
        outcomes = ["clear", "unclear", "crash", "hang", "silent"]
        table = ["| family | cases | " + " | ".join(outcomes) + " |",
                 "|---|---:|" + "---:|" * len(outcomes)]
        for fam, c in by_family.items():
            table.append(f"| {fam} | {sum(c.values())} | " +
                         " | ".join(str(c.get(o, 0)) for o in outcomes) + " |")
        table.append(f"| all | {len(b.cases)} | " +
                     " | ".join(str(counts.get(o, 0)) for o in outcomes) + " |")
        print("\n".join(table))
        if report:
            with open(report, "w") as f:
                f.write("\n".join(table) + "\n")
        for line in bad:
            print("NOT CLEAR: " + line, file=sys.stderr)
        return 1 if bad else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
