#!/usr/bin/env python3
"""Checks that README.md and docs/*.md name only what exists.

Usage: docs_test.py HYDRAULIS_BINARY SOURCE_DIR

- Every repository path a document names (configs/..., scripts/..., src/..., docs/..., in
  backticks or in a code block) exists. Paths under build/, the shared data beside the
  repository, and names with placeholders (<layer>, X, PREFIX, *) are not checked.
- Every `hydraulis SUBCOMMAND` in a code block is a subcommand of the binary, and every
  --flag written after it in that command (continued lines included) is one its --help
  lists.
- No document speaks of sessions or issue numbers (they are reference, not a log).
- The layer picture of docs/architecture.md has exactly the links between the libraries
  that src/*/CMakeLists.txt makes.

Prints one line per problem and exits 1 if there was any.
"""
import os
import re
import subprocess
import sys

ROOTS = ("configs/", "data/", "docs/", "scripts/", "tools/", "tests/", "gen/", "bench/", "fuzz/",
         "include/", "src/", "python/", "examples/")
PLACEHOLDER = re.compile(r"[<>*{}]|\bX\b|PREFIX|\.\.\.")
PATH = re.compile(r"(?<![\w./-])((?:%s)[\w./+-]*[\w/])" % "|".join(re.escape(r) for r in ROOTS))
HISTORY = re.compile(r"\b(session|sessions)\b|\bissue \d+|\bturn \d+", re.IGNORECASE)


def Exists(src, path):
    """The path, a program by its source (bench/plan_ahead_bench), or a header by its layer
    path (data/lengths.h for include/hydraulis/data/lengths.h)."""
    options = [path] + [path + ext for ext in (".cc", ".py", ".sh")]
    options += [os.path.join("include/hydraulis", path), os.path.join("src", path)]
    return any(os.path.exists(os.path.join(src, p)) for p in options)


def documents(src):
    yield os.path.join(src, "README.md")
    docs = os.path.join(src, "docs")
    for name in sorted(os.listdir(docs)):
        if name.endswith(".md"):
            yield os.path.join(docs, name)


def code_commands(text):
    """(line number, command text) of each hydraulis command in a code block, with its
    backslash-continued lines joined."""
    lines = text.split("\n")
    in_block = False
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = line.lstrip().startswith("```")
        if fence:
            in_block = not in_block
            i += 1
            continue
        indented = line.startswith("    ") and not line.lstrip().startswith(("-", "*"))
        if in_block or indented:
            start = i
            command = line
            while command.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command.rstrip()[:-1] + " " + lines[i]
            match = re.search(r"(?:^|\s|/)hydraulis\s+([a-z][a-z-]*)(?![\w/.-])(.*)", command)
            if match:
                yield start + 1, match.group(1), match.group(2).split("#")[0]
        i += 1


def LayerEdges(src):
    """(layer, dependency) of every DEPS and PRIVATE_DEPS link between the project's
    libraries in src/*/CMakeLists.txt (runtime rooms as runtime_<room>)."""
    keys = {"SOURCES", "DEPS", "PRIVATE_DEPS", "TESTS", "TEST_DEPS", "LABEL"}
    edges = set()
    for folder in sorted(os.listdir(os.path.join(src, "src"))):
        path = os.path.join(src, "src", folder, "CMakeLists.txt")
        if not os.path.exists(path):
            continue
        text = re.sub(r"#[^\n]*", "", open(path).read())
        for kind, name, body in re.findall(r"hydraulis_(layer|runtime_room)\((\w+)([^)]*)\)",
                                           text):
            node = "runtime_" + name if kind == "runtime_room" else name
            key = None
            for token in body.split():
                if token in keys:
                    key = token
                elif key in ("DEPS", "PRIVATE_DEPS") and token.startswith("hydraulis_"):
                    edges.add((node, token[len("hydraulis_"):]))
    return edges


def PictureEdges(text):
    """(a, b) of every `a --> b` in the document's mermaid blocks."""
    edges = set()
    for block in re.findall(r"```mermaid\n(.*?)```", text, re.S):
        edges.update(re.findall(r"^\s*(\w+)\s*-->\s*(\w+)\s*$", block, re.M))
    return edges


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary, src = sys.argv[1], sys.argv[2]
    top = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    subcommands = set(re.findall(r"^  ([a-z][a-z-]+)\s", top.split("SUBCOMMANDS:")[-1], re.M))
    helps = {}
    problems = []
    for path in documents(src):
        name = os.path.relpath(path, src)
        text = open(path, encoding="utf-8").read()
        for number, line in enumerate(text.split("\n"), 1):
            if HISTORY.search(line):
                problems.append(f"{name}:{number}: work history in a document: {line.strip()[:80]}")
            for found in PATH.findall(line):
                candidate = found.rstrip(".,:;)")
                after = line[line.find(found) + len(found):]
                if (PLACEHOLDER.search(candidate) or candidate.startswith("build/")
                        or re.match(r"[-\w.]*[{<*]", after)):
                    continue
                if not Exists(src, candidate):
                    problems.append(f"{name}:{number}: no such file: {candidate}")
        for number, sub, rest in code_commands(text):
            if sub not in subcommands:
                problems.append(f"{name}:{number}: hydraulis has no subcommand {sub}")
                continue
            if sub not in helps:
                helps[sub] = subprocess.run([binary, sub, "--help"], capture_output=True,
                                            text=True).stdout
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
                if not re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", helps[sub]):
                    problems.append(f"{name}:{number}: hydraulis {sub} has no flag {flag}")
    built = LayerEdges(src)
    drawn = PictureEdges(open(os.path.join(src, "docs/architecture.md")).read())
    for a, b in sorted(built - drawn):
        problems.append(f"docs/architecture.md: the build links {a} to {b}; the picture lacks it")
    for a, b in sorted(drawn - built):
        problems.append(f"docs/architecture.md: the picture draws {a} --> {b}; the build has no such link")
    for p in problems:
        print(p)
    print(f"docs_test: {len(problems)} problem(s) in README.md and docs/")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
