"""The dynamic-cp baseline's scheduler against the peer it renders: megatron-core's
BalancedCPScheduler (a pinned test-only peer, scripts/requirements.txt), called as
megatron-core's HybridCPDataLoaderWrapper calls it, on batches of real Wikipedia lengths.
"""
import os
import random

import numpy as np
import pytest

import hydraulis._core as core

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.path.join(ROOT, "..", "shared", "data", "wikipedia-doc-lengths.txt")
SAMPLE = os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt")

hybrid_cp = pytest.importorskip("megatron.core.pipeline_parallel.hybrid_cp_schedule")
from megatron.core.model_parallel_config import ModelParallelConfig  # noqa: E402


class DpCpGroup:
    """The scheduler only asks the group for its size."""

    def __init__(self, size):
        self._size = size

    def size(self):
        return self._size

    def rank(self):
        return 0


def peer_schedule(lengths, ranks, max_tokens_per_rank):
    config = ModelParallelConfig(hybrid_context_parallel=True,
                                 max_seqlen_per_dp_cp_rank=max_tokens_per_rank)
    scheduler = hybrid_cp.BalancedCPScheduler(max_seq_len_per_rank=max_tokens_per_rank,
                                              dp_cp_group=DpCpGroup(ranks))
    samples = [(i, int(n)) for i, n in enumerate(lengths)]
    _, sample_id_groups = scheduler.get_groups_and_subsamples(samples, config)
    return [[list(rank) for rank in group] for group in sample_id_groups]


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
        assert ours == peer_schedule(batch, ranks, max_tokens)
        compared += 1
    assert compared == 25


def test_a_document_beyond_every_rank_is_named():
    with pytest.raises(ValueError, match="needs more than the 4 ranks"):
        core.dynamic_cp_schedule([10, 20000], 4, 4096)
