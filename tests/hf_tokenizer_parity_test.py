#!/usr/bin/env python3
"""Token ids of `hydraulis preprocess --tokenizer FILE.json` against the `tokenizers`
package's Tokenizer.encode(text).ids for the same tokenizer.json, document by document.

Usage: hf_tokenizer_parity_test.py HYDRAULIS_BINARY SOURCE_DIR

The tokenizers are byte-level BPEs of six families (tests/hf_tokenizer_files.py) trained
here on the demo corpus (scripts/make-demo-corpus.sh: the machine's license texts). Each
encodes the whole demo corpus and a JSON-lines file of hard text made here (CJK, emoji with
joiners and modifiers, combining marks in NFC and NFD, every kind of Unicode space, digits
of other scripts, code with tabs and CRLF, special tokens inside the text). Every id must
be equal; --append-eod must append the eos_token of tokenizer_config.json. Exits 1 on any
difference. Nothing is downloaded.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_tokenizer_files  # noqa: E402

HARD_TEXTS = [
    "Hello world! It's a test, isn't it? We'll see. I'M SHOUTING 'S 'T 'LL 're'RE",
    "数据并行和流水线并行。中文文本没有空格，日本語のテキストもあります。한국어 텍스트",
    "Emoji: 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 and ✨sparkles✨ keycap 1️⃣",
    "def f(x):\n    return x**2  # square\n\n\tif x >= 10:\n        print(f\"{x:>8}\")\r\n",
    "Café naïve résumé — “quotes” ‘single’ … ½ ² ³ ٣٤٥ १२३ ⅷ ①",
    "combining: e\u0301 a\u0308 n\u0303 (NFD) vs é ä ñ (NFC); Å vs \u212b (Angstrom sign)",
    "spaces:\u00a0nbsp\u2003em\u3000ideographic\u200bzwsp\u2028linesep\u2029parasep"
    "\u0085nel\u180emvs\u2060wj\ufeffbom end  ",
    "numbers 1234567 3.14159 1e10 0x1F 007 12,345,678 -42 +7",
    "special <|endoftext|> in text <|im_start|>user\nhi<|im_end|> and <|begin_of_text|>"
    " again<|end_of_text|><s>",
    "Ελληνικά Русский текст עברית العربية हिन्दी ไทย ქართული",
    "   leading spaces and trailing\n\n\n",
    "x",
    "tabs\t\t\tand\u000bvt\u000cff\r\r\n",
    "URL https://example.com/a?b=c&d=e#frag email a.b@c.org",
    "ǅ title-case ǈ ǋ and ꭰ cherokee, ＡＢＣ fullwidth, ﬁ ligature ﬁx ﬁne fine hello world",
    "mixed123abc 123abc abc123 !!! ??? ... --- ___ (a) [b] {c}; d: e, f.",
    "\U0001d400\U0001d41a math bold, \U00020000 CJK ext B, \U0010fffd private use",
    # Unicode 15/16 letters and digits and U+180E, where PCRE2's tables differ from
    # Oniguruma's (gen/onig_class_differences.py): a Cyrillic letter, Todhri, CJK ext H,
    # Garay digits, each beside ASCII so the split shows.
    "a\u1c89b \U000105c0x \U00031350\U00031351 7\U00010d40\U00010d41 9 x\u180ey \u180e",
]


def read_megatron(prefix):
    """The documents of a Megatron-LM indexed dataset (MMIDIDX version 1)."""
    with open(prefix + ".idx", "rb") as f:
        b = f.read()
    assert b[:9] == b"MMIDIDX\x00\x00", prefix + ".idx: not a Megatron index"
    code, = struct.unpack_from("<B", b, 17)
    n, = struct.unpack_from("<Q", b, 18)
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
             8: np.uint16}[code]
    sizes = np.frombuffer(b, np.int32, n, 34)
    pointers = np.frombuffer(b, np.int64, n, 34 + 4 * n)
    data = np.fromfile(prefix + ".bin", dtype)
    item = np.dtype(dtype).itemsize
    return [data[p // item:p // item + s].tolist() for p, s in zip(pointers, sizes)]


def preprocess(binary, tokenizer_json, jsonl, prefix, *extra):
    subprocess.run([binary, "preprocess", "--input", jsonl, "--output-prefix", prefix,
                    "--tokenizer", tokenizer_json, *extra], check=True,
                   stdout=subprocess.DEVNULL)
    return read_megatron(prefix)


def compare(name, ours, reference, tok):
    bad = 0
    for i, (a, r) in enumerate(zip(ours, reference)):
        if a != r:
            bad += 1
            k = next(j for j in range(len(a) + 1) if j >= min(len(a), len(r)) or a[j] != r[j])
            print(f"  {name} document {i}: first difference at token {k}: hydraulis "
                  f"{[tok.id_to_token(x) for x in a[k:k + 4]]}, tokenizers "
                  f"{[tok.id_to_token(x) for x in r[k:k + 4]]}")
    if len(ours) != len(reference):
        print(f"  {name}: {len(ours)} documents written, {len(reference)} expected")
        bad += 1
    return bad


def main():
    binary, src = sys.argv[1], sys.argv[2]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "demo-corpus.jsonl")
        subprocess.run([os.path.join(src, "scripts", "make-demo-corpus.sh"), corpus],
                       check=True, stderr=subprocess.DEVNULL)
        hard = os.path.join(tmp, "hard.jsonl")
        with open(hard, "w", encoding="utf-8") as f:
            for t in HARD_TEXTS:
                f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
        with open(corpus, encoding="utf-8") as f:
            corpus_texts = [json.loads(line)["text"] for line in f]
        for family in hf_tokenizer_files.FAMILIES:
            path = hf_tokenizer_files.make(family, corpus_texts[:300], tmp)
            tok = Tokenizer.from_file(path)
            for jsonl, texts in ((corpus, corpus_texts), (hard, HARD_TEXTS)):
                reference = [ids for ids in (tok.encode(t).ids for t in texts) if ids]
                ours = preprocess(binary, path, jsonl, os.path.join(tmp, "out"))
                bad = compare(family, ours, reference, tok)
                tokens = sum(map(len, reference))
                print(f"{family:12} {os.path.basename(jsonl):18} {len(reference):4} documents "
                      f"{tokens:8} tokens: {'equal' if bad == 0 else f'{bad} differ'}")
                failures += bad
            config = os.path.join(os.path.dirname(path), "tokenizer_config.json")
            if os.path.exists(config):
                with open(config, encoding="utf-8") as f:
                    eos = json.load(f)["eos_token"]["content"]
                eos_id = tok.token_to_id(eos)
                reference = [ids + [eos_id] for ids in (tok.encode(t).ids for t in HARD_TEXTS)]
                ours = preprocess(binary, path, hard, os.path.join(tmp, "eod"), "--append-eod")
                bad = compare(family + " --append-eod", ours, reference, tok)
                print(f"{family:12} --append-eod ({eos}): {'equal' if bad == 0 else 'DIFFER'}")
                failures += bad
    if failures:
        print(f"FAILED: {failures} difference(s)")
        return 1
    print("all token ids equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
