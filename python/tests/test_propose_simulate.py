"""propose and simulate from Python equal the CLI's output."""
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


def test_propose_equals_the_cli():
    run = subprocess.run([BIN, "propose", "--profile", PROFILE, "--lengths", WIKIPEDIA,
                          "--gpus", "64", "--max-len", "16384", "--max-strategies", "5", "--quiet"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    proposed = hydraulis.propose(hydraulis.load_profile(PROFILE),
                                 hydraulis.read_lengths(WIKIPEDIA), gpus=64, max_len=16384,
                                 max_strategies=5)
    assert proposed.to_json() == run.stdout
    run = subprocess.run([BIN, "propose", "--profile", PROFILE, "--lengths", WIKIPEDIA,
                          "--gpus", "64", "--max-len", "16384", "--top-documents", "2", "--quiet"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    two = hydraulis.propose(hydraulis.load_profile(PROFILE), hydraulis.read_lengths(WIKIPEDIA),
                            gpus=64, max_len=16384, top_documents=2)
    assert two.to_json() == run.stdout
    # Ready for planning as it is.
    plan = hydraulis.Planner(hydraulis.load_profile(PROFILE), proposed).plan([4000, 900, 120])
    assert plan.lower_bound_ms <= plan.estimated_step_ms
    with pytest.raises(hydraulis.InvalidInputError, match="optimizer_layout"):
        hydraulis.propose(hydraulis.load_profile(PROFILE), [100], gpus=64, max_len=4096,
                          optimizer_layout=(0, 8, 1))


def test_select_candidates_keeps_what_the_cli_keeps():
    run = subprocess.run([BIN, "propose", "--profile", PROFILE, "--lengths", WIKIPEDIA,
                          "--gpus", "64", "--max-len", "16384", "--top-documents", "2",
                          "--max-strategies", "3", "--select-batches", "4", "--select-seed", "3",
                          "--quiet"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    profile = hydraulis.load_profile(PROFILE)
    lengths = hydraulis.read_lengths(WIKIPEDIA)
    proposed = hydraulis.propose(profile, lengths, gpus=64, max_len=16384, top_documents=2)
    sampler = hydraulis.BatchSampler(lengths, tokens_per_batch=200000, max_len=16384, seed=3)
    batches = [sampler.next()[0] for _ in range(4)]
    # The CLI keeps the fallback (0) and the longest bin's strategy (1 here).
    kept, indices, kept_ms, all_ms = hydraulis.select_candidates(
        profile, proposed, batches, more=2, always=[0, 1], max_len=16384, threads=2)
    assert kept.to_json() == run.stdout
    assert indices[:2] == [0, 1] and len(indices) <= 4
    assert all(k >= a for k, a in zip(kept_ms, all_ms))
    count = len(json.loads(proposed.to_json())["strategies"])
    _, every, kept_ms, all_ms = hydraulis.select_candidates(
        profile, proposed, batches, more=count, always=[0], max_len=16384)
    assert kept_ms == all_ms
    with pytest.raises(hydraulis.InvalidInputError, match="no candidate"):
        hydraulis.select_candidates(profile, proposed, batches, more=1, always=[count])
    with pytest.raises(hydraulis.InvalidInputError, match="prune tolerance"):
        hydraulis.select_candidates(profile, proposed, batches, more=1, always=[0],
                                    prune_tolerance=-0.5)


def test_select_tolerance_is_the_cli_flag():
    run = subprocess.run([BIN, "propose", "--profile", PROFILE, "--lengths", WIKIPEDIA,
                          "--gpus", "64", "--max-len", "16384", "--top-documents", "2",
                          "--max-strategies", "3", "--select-batches", "4", "--select-seed", "3",
                          "--select-tolerance", "0.05", "--quiet"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    profile = hydraulis.load_profile(PROFILE)
    lengths = hydraulis.read_lengths(WIKIPEDIA)
    proposed = hydraulis.propose(profile, lengths, gpus=64, max_len=16384, top_documents=2)
    sampler = hydraulis.BatchSampler(lengths, tokens_per_batch=200000, max_len=16384, seed=3)
    batches = [sampler.next()[0] for _ in range(4)]
    exact = hydraulis.select_candidates(profile, proposed, batches, more=2, always=[0, 1],
                                        max_len=16384)
    loose = hydraulis.select_candidates(profile, proposed, batches, more=2, always=[0, 1],
                                        max_len=16384, prune_tolerance=0.05)
    assert loose[0].to_json() == run.stdout
    # Pruned within 5 %, the best plan over every candidate is at most 5 % above the exact one.
    assert all(e <= l <= e * 1.05 * (1 + 1e-12) for e, l in zip(exact[3], loose[3]))


@pytest.mark.parametrize("system,overlap", [("ours", True), ("static-fixed", True),
                                            ("ours", False)])
def test_simulate_equals_the_cli(tmp_path, system, overlap):
    summary = tmp_path / "summary.json"
    run = subprocess.run([BIN, "simulate", "--profile", PROFILE, "--candidates", CANDIDATES,
                          "--lengths", WIKIPEDIA, "--steps", "3", "--system", system,
                          "--json", str(summary), "--quiet"] + ([] if overlap else ["--no-overlap"]),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    ours = hydraulis.simulate(hydraulis.load_profile(PROFILE),
                              hydraulis.load_candidates(CANDIDATES),
                              hydraulis.read_lengths(WIKIPEDIA), system=system, steps=3,
                              overlap=overlap)
    assert ours == json.loads(summary.read_text())
    assert ours["options"]["communication"]["overlap"] == overlap
    with pytest.raises(hydraulis.InvalidInputError):
        hydraulis.simulate(hydraulis.load_profile(PROFILE), hydraulis.load_candidates(CANDIDATES),
                           np.array([100, 200]), steps=0)
