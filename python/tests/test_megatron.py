"""The Megatron-style packing scheduler."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import hydraulis
from hydraulis.megatron import MegatronPackingScheduler

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILE = os.path.join(ROOT, "configs", "profiles", "tiny-cpu.json")


def candidates(*strategies):
    return hydraulis.load_candidates({
        "format": "hydraulis.candidates/1", "gpus": 4,
        "optimizer_layout": {"dp": 4, "tp": 1, "pp": 1},
        "strategies": [{"name": n, "pipelines": p} for n, p in strategies]})


def test_groups_cover_the_batch_per_rank_and_micro_batch():
    planner = hydraulis.Planner(hydraulis.load_profile(PROFILE),
                                candidates(("4xTP1", [{"count": 4, "tp": 1}])), max_len=1024)
    scheduler = MegatronPackingScheduler(planner, dp_size=4)
    lengths = np.loadtxt(os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt"),
                         dtype=np.int64)[:60]
    samples = [(1000 + i, int(min(n, 1024))) for i, n in enumerate(lengths)]
    groups = scheduler(samples)
    assert all(len(g) == 4 for g in groups)
    seen = sorted(s for g in groups for rank in g for s in rank)
    assert seen == sorted(s for s, _ in samples)
    seqlen = dict(samples)
    for rank in range(4):
        params = scheduler.packed_params[rank]
        for m, p in enumerate(params):
            docs = groups[m][rank]
            assert p["cu_seqlens"].dtype == np.int32
            assert np.diff(p["cu_seqlens"]).tolist() == [seqlen[d] for d in docs]
            assert p["total_tokens"] == sum(seqlen[d] for d in docs)
            assert p["max_seqlen"] == max(seqlen[d] for d in docs)
        # Micro-batches past this rank's count are empty groups.
        assert all(groups[m][rank] == [] for m in range(len(params), len(groups)))
    assert scheduler.last_plan.strategy == "4xTP1"


def test_refuses_heterogeneous_or_mismatched_strategies():
    mixed = hydraulis.Planner(hydraulis.load_profile(PROFILE),
                              candidates(("TP2+2xTP1", [{"count": 1, "tp": 2},
                                                        {"count": 2, "tp": 1}])))
    with pytest.raises(hydraulis.InvalidInputError, match="3 pipeline"):
        MegatronPackingScheduler(mixed, dp_size=4)([(0, 100), (1, 200)])
    with pytest.raises(hydraulis.InvalidInputError, match="homogeneous"):
        MegatronPackingScheduler(mixed, dp_size=3)([(0, 100), (1, 200)])
    with pytest.raises(hydraulis.InvalidInputError, match="dp_size"):
        MegatronPackingScheduler(mixed, dp_size=0)
    with pytest.raises(hydraulis.InvalidInputError, match="empty"):
        MegatronPackingScheduler(mixed, dp_size=3)([])


def test_example_runs():
    run = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "megatron_packing.py"),
                          "--dp", "4"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "dp rank 3:" in run.stdout and "groups[0][0]" in run.stdout


def test_profile_for_seq_length_holds_it_with_the_least_memory():
    from hydraulis.megatron import profile_for_seq_length
    for pp in (1, 2):
        profile = profile_for_seq_length(PROFILE, 256, pp=pp)
        assert profile.capacity_tokens(pp=pp) >= 256
        # One byte less would not hold it: the memory is the least.
        data = json.loads(profile.to_json())
        data["cluster"]["gpu_memory_bytes"] -= 1
        assert hydraulis.load_profile(data).capacity_tokens(pp=pp) < 256
    with pytest.raises(hydraulis.InvalidInputError, match="seq_length"):
        profile_for_seq_length(PROFILE, 10 ** 9)
    with pytest.raises(hydraulis.InvalidInputError, match="seq_length"):
        profile_for_seq_length(PROFILE, 0)
