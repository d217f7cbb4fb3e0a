"""Length readers and the seeded sampler from Python, against the CLI."""
import json
import os
import subprocess

import numpy as np
import pytest

import hydraulis

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("HYDRAULIS_BIN", os.path.join(ROOT, "build", "release", "tools", "hydraulis"))
PROFILE = os.path.join(ROOT, "configs", "profiles", "llama-32b-a800.json")
CANDIDATES = os.path.join(ROOT, "configs", "candidates", "llama-32b-64gpu.json")
WIKIPEDIA = os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt")


def test_read_lengths_formats(tmp_path):
    lengths = hydraulis.read_lengths(WIKIPEDIA)
    assert lengths.dtype == np.int64
    assert np.array_equal(lengths, np.loadtxt(WIKIPEDIA, dtype=np.int64))
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"length": 7}\n{"length": 3}\n')
    assert hydraulis.read_lengths(jsonl).tolist() == [7, 3]
    texts = tmp_path / "texts.jsonl"
    texts.write_text(json.dumps({"body": "héllo world"}) + "\n" + json.dumps({"body": "a b c"}) + "\n")
    assert hydraulis.read_lengths(texts, text_field="body").tolist() == [12, 5]
    assert hydraulis.read_lengths(texts, text_field="body", counter="words").tolist() == [2, 3]
    bad = tmp_path / "bad.txt"
    bad.write_text("5\nseven\n")
    with pytest.raises(hydraulis.InvalidInputError, match="bad.txt:2"):
        hydraulis.read_lengths(bad)
    with pytest.raises(hydraulis.InvalidInputError, match="format"):
        hydraulis.read_lengths(WIKIPEDIA, format="parquet")


@pytest.mark.parametrize("seed,tokens,max_len", [(1, 200_000, 32_768), (3, 50_000, 8_192)])
def test_sampler_and_planner_equal_the_cli(seed, tokens, max_len):
    steps = 4
    run = subprocess.run([BIN, "plan", "--profile", PROFILE, "--candidates", CANDIDATES,
                          "--dataset", WIKIPEDIA, "--steps", str(steps), "--seed", str(seed),
                          "--tokens-per-batch", str(tokens), "--max-len", str(max_len),
                          "--no-timing"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    sampler = hydraulis.BatchSampler(hydraulis.read_lengths(WIKIPEDIA), tokens_per_batch=tokens,
                                     max_len=max_len, seed=seed)
    planner = hydraulis.Planner(hydraulis.load_profile(PROFILE),
                                hydraulis.load_candidates(CANDIDATES), seed=seed, max_len=max_len)
    ours = "".join(planner.plan(sampler.next()[0]).to_json() for _ in range(steps))
    assert ours == run.stdout


def test_sampler_restores_its_position():
    dataset = hydraulis.read_lengths(WIKIPEDIA)[:3000]
    a = hydraulis.BatchSampler(dataset, tokens_per_batch=500_000, seed=5)
    for _ in range(3):
        a.next()
    position = a.position
    expected = [a.next() for _ in range(4)]  # crosses an epoch end (3000 documents)
    b = hydraulis.BatchSampler(dataset, tokens_per_batch=500_000, seed=5)
    b.restore(position)
    for (lengths, indices), (want_lengths, want_indices) in zip((b.next() for _ in range(4)),
                                                                expected):
        assert np.array_equal(lengths, want_lengths) and np.array_equal(indices, want_indices)
        assert np.array_equal(np.minimum(dataset[indices], 32_768)[:-1], lengths[:-1])
    assert a.position[0] >= 1
    with pytest.raises(hydraulis.InvalidInputError):
        b.restore((-1, 0))
    with pytest.raises(hydraulis.InvalidInputError):
        hydraulis.BatchSampler([])
    with pytest.raises(TypeError):
        hydraulis.BatchSampler([1.5, 2])
    first = next(iter(hydraulis.BatchSampler(dataset, documents_per_batch=10)))
    assert len(first) == 10
