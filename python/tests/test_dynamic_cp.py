"""The dynamic-cp baseline's scheduler against the peer it renders: megatron-core's
BalancedCPScheduler (a pinned test-only peer, scripts/requirements.txt), called as
megatron-core's HybridCPDataLoaderWrapper calls it, on batches of real Wikipedia lengths.
"""
import os
import random
import sys

import numpy as np
import pytest

import hydraulis._core as core

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.path.join(ROOT, "..", "shared", "data", "wikipedia-doc-lengths.txt")
SAMPLE = os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt")

pytest.importorskip("megatron.core.pipeline_parallel.hybrid_cp_schedule")
sys.path.insert(0, os.path.join(ROOT, "bench"))
from dynamic_cp_peer import peer_sample_id_groups  # noqa: E402


@pytest.fixture(scope="module")
def lengths():
    return np.loadtxt(SHARED if os.path.exists(SHARED) else SAMPLE, dtype=np.int64)


@pytest.mark.parametrize("ranks,max_tokens", [(8, 4096), (16, 2048), (32, 8192), (4, 16384)])
def test_schedules_equal_the_peers_sample_for_sample(lengths, ranks, max_tokens):
    rng = random.Random(ranks * 1000 + max_tokens)
    compared = 0
    for _ in range(25):
        start = rng.randrange(len(lengths) - 400)
        batch = [min(int(n), ranks * max_tokens) for n in lengths[start:start + rng.randrange(20, 400)]]
        ours = core.dynamic_cp_schedule(batch, ranks, max_tokens)
        assert ours == peer_sample_id_groups(batch, ranks, max_tokens)
        compared += 1
    assert compared == 25


def test_a_document_beyond_every_rank_is_named():
    with pytest.raises(core.InvalidInputError, match="needs more than the 4 ranks"):
        core.dynamic_cp_schedule([10, 20000], 4, 4096)
