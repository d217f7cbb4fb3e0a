"""hydraulis.megatron.BalancedCPScheduler, the drop-in for megatron-core's hybrid
context-parallel scheduler, against the peer (megatron-core 0.16.1, a pinned test-only
peer, scripts/requirements.txt): constructed by megatron-core's own
HybridCPDataLoaderWrapper, called as it calls its scheduler, on batches of real Wikipedia
lengths; its schedules consumed by megatron-core's own hybrid_context_parallel_forward_backward
(run rank by rank, with torch.distributed and CUDA replaced by the in-process stand-in
_CpuTorch below) and checked against the
runtime's rules; its balance compared with the peer's under stated cost models.
"""
import contextlib
import os
import random
import sys
import types

import numpy as np
import pytest

import hydraulis.megatron as hm
from hydraulis.megatron import (BalancedCPScheduler, BlockCosts, check_hybrid_cp_schedule,
                                hybrid_group_sizes, schedule_ms)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.path.join(ROOT, "..", "shared", "data", "wikipedia-doc-lengths.txt")
SAMPLE = os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt")
PROFILE_7B = os.path.join(ROOT, "configs", "profiles", "llama-7b-a800.json")

pytest.importorskip("megatron.core.pipeline_parallel.hybrid_cp_schedule")
import torch  # noqa: E402  (megatron-core needs it)
from megatron.core import parallel_state  # noqa: E402
from megatron.core.datasets import data_schedule  # noqa: E402
from megatron.core.model_parallel_config import ModelParallelConfig  # noqa: E402
from megatron.core.pipeline_parallel import hybrid_cp_schedule, schedules  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "bench"))
from dynamic_cp_peer import DpCpGroup  # noqa: E402  (the dp-cp group as schedulers see it)
from megatron_cp_balance import real_length_batches  # noqa: E402


@pytest.fixture(scope="module")
def lengths():
    return np.loadtxt(SHARED if os.path.exists(SHARED) else SAMPLE, dtype=np.int64)


def config_for(max_tokens):
    return ModelParallelConfig(hybrid_context_parallel=True, max_seqlen_per_dp_cp_rank=max_tokens)


def schedule_as_megatron(scheduler_class, lengths, ranks, max_tokens, monkeypatch):
    """Builds megatron-core's HybridCPDataLoaderWrapper with `scheduler_class` in place of
    its BalancedCPScheduler (so the wrapper's own __init__ constructs it), then calls it as
    the wrapper's __next__ does: every non-empty sub-sample numbered 0..n-1 in order."""
    monkeypatch.setattr(data_schedule, "BalancedCPScheduler", scheduler_class)
    config = config_for(max_tokens)
    groups = types.SimpleNamespace(dp_cp=DpCpGroup(ranks), dp=DpCpGroup(ranks), tp=DpCpGroup(1))
    wrapper = data_schedule.HybridCPDataLoaderWrapper(iter([]), config, pg_collection=groups)
    seqlens = torch.tensor(lengths, dtype=torch.int32)
    seqlens = seqlens[seqlens != 0].tolist()
    global_id_seqlens = [(i, seqlens[i]) for i in range(len(seqlens))]
    result = wrapper.cp_balancing_scheduler.get_groups_and_subsamples(global_id_seqlens,
                                                                      wrapper.config)
    return global_id_seqlens, result, wrapper.cp_balancing_scheduler


class _CpuTorch:
    """torch for hybrid_cp_schedule's module namespace on a CPU-only, single process:
    tensors stay on the CPU; broadcast does nothing; a barrier on the dp-cp group (the one
    between groups, not the unnamed one before the schedule is broadcast) is recorded."""

    def __init__(self, on_group_barrier):
        self.cuda = types.SimpleNamespace(current_device=lambda: "cpu")
        self.distributed = types.SimpleNamespace(
            barrier=lambda *group: on_group_barrier() if group else None,
            broadcast=lambda *a, **k: None)

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def tensor(*args, device=None, **kwargs):
        return torch.tensor(*args, **kwargs)

    @staticmethod
    def empty(*args, device=None, **kwargs):
        return torch.empty(*args, **kwargs)


def run_megatron_runtime(sample_id_seqlens, sample_id_groups, ranks, monkeypatch):
    """Runs megatron-core's hybrid_context_parallel_forward_backward once per dp-cp rank
    on the schedule, the data iterator yielding what HybridCPDataLoaderWrapper yields (the
    rank's samples by id, and sample_id_groups). Returns per rank the (group, sample id,
    local_cp_size) of every forward step, in order; raises what the runtime raises."""
    seqlen = dict(sample_id_seqlens)
    calls = []
    group = [0]
    monkeypatch.setattr(hybrid_cp_schedule, "torch", _CpuTorch(lambda: group.__setitem__(
        0, group[0] + 1)))

    def forward_step(forward_step_func, data_iterator, *args, **kwargs):
        sample = next(data_iterator)
        calls.append((group[0], sample["id"], int(sample["local_cp_size"])))
        return None, torch.tensor(len(sample["tokens"]))

    monkeypatch.setattr(schedules, "forward_step", forward_step)
    monkeypatch.setattr(schedules, "backward_step", lambda *a, **k: None)
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_rank", lambda: 0)
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_src_rank", lambda: 0)
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_group", lambda: None)
    monkeypatch.setattr(parallel_state, "get_data_parallel_group", lambda **k: None)
    per_rank = []
    for rank in range(ranks):
        monkeypatch.setattr(parallel_state, "get_data_parallel_rank", lambda **k: rank)
        mine = {sid for g in sample_id_groups for sid in g[rank]}
        batch = {sid: {"id": sid, "tokens": torch.zeros(seqlen[sid], dtype=torch.int64)}
                 for sid in mine}
        calls.clear()
        group[0] = 0
        hybrid_cp_schedule.hybrid_context_parallel_forward_backward(
            None, iter([(batch, sample_id_groups)]), None, 1, None, None, [], None, False,
            None, True, contextlib.nullcontext, 0, lambda *a: True, None)
        per_rank.append(list(calls))
    return per_rank


def assert_runs_in_megatron(samples, sample_id_groups, ranks, max_tokens, monkeypatch):
    """The checker passes, and megatron-core's consumer runs on every rank exactly the
    samples the schedule lists, group by group, with the local_cp_size the checker says."""
    seqlen = dict(samples)
    cp_of = check_hybrid_cp_schedule(samples, [[[seqlen[s] for s in r] for r in g]
                                               for g in sample_id_groups],
                                     sample_id_groups, ranks, max_tokens)
    steps = run_megatron_runtime(samples, sample_id_groups, ranks, monkeypatch)
    for rank, rank_steps in enumerate(steps):
        expected = [(g, sid, cp_of[g][sid]) for g, grp in enumerate(sample_id_groups)
                    for sid in grp[rank]]
        assert rank_steps == expected, f"rank {rank}"


SETTINGS = [(8, 4096, 0.5), (8, 4096, 4.0), (16, 4096, 8.0), (16, 8192, 1.0), (32, 2048, 2.0)]


@pytest.mark.parametrize("ranks,max_tokens,load", SETTINGS)
def test_schedules_run_in_megatron_and_keep_its_rules(lengths, ranks, max_tokens, load,
                                                      monkeypatch):
    """Every group of every batch: megatron-core's own consumer runs it on every rank, each
    sample with the local_cp_size the checker derives; aligned power-of-two blocks, one
    consistent order (no deadlock), memory, every rank busy in the last group."""
    for batch in real_length_batches(lengths, ranks, max_tokens, load, 4, seed=ranks * max_tokens):
        samples, (groups, sample_id_groups), scheduler = schedule_as_megatron(
            BalancedCPScheduler, batch, ranks, max_tokens, monkeypatch)
        assert isinstance(scheduler, BalancedCPScheduler)
        check_hybrid_cp_schedule(samples, groups, sample_id_groups, ranks, max_tokens)
        assert_runs_in_megatron(samples, sample_id_groups, ranks, max_tokens, monkeypatch)
        assert len(sample_id_groups) == 1  # one group: no barrier
        ids = sample_id_groups[0]
        cp_of = check_hybrid_cp_schedule(samples, groups, sample_id_groups, ranks, max_tokens)[0]
        # Narrowest first: waiting costs nothing, the batch lasts the largest summed time...
        seqlen = dict(samples)
        summed = max(sum(scheduler.costs.sample_ms(seqlen[s], cp_of[s]) for s in rank_ids)
                     for rank_ids in ids)
        assert schedule_ms(samples, sample_id_groups, scheduler.costs)[0] == pytest.approx(
            summed, rel=1e-12)
        # ... and a shared sample that ends one rank's list ends all its ranks' lists.
        for rank_ids in ids:
            last = rank_ids[-1]
            assert all(other[-1] == last for other in ids if last in other)


def test_the_checker_catches_what_the_runtime_cannot_run(monkeypatch):
    samples = [(0, 100), (1, 200), (2, 300), (3, 9000)]
    ok = [[[0, 3], [1, 3], [2], [3]]]
    lens = lambda ids: [[[dict(samples)[s] for s in r] for r in g] for g in ids]  # noqa: E731
    # Sample 3 on ranks 0, 1, 3 (3 is not a hybrid group size).
    with pytest.raises(hm.InvalidInputError, match="3 ranks"):
        check_hybrid_cp_schedule(samples, lens(ok), ok, 4, 8192)
    aligned = [[[0, 3], [1, 3], [2], []]]
    with pytest.raises(hm.InvalidInputError, match="last group"):
        check_hybrid_cp_schedule(samples, lens(aligned), aligned, 4, 8192)
    shifted = [[[0], [1, 3], [2, 3], []]]
    with pytest.raises(hm.InvalidInputError, match="not an aligned block"):
        check_hybrid_cp_schedule(samples, lens(shifted), shifted, 4, 8192)
    crossed = [[[3, 0], [0, 3], [1], [2]]]
    with pytest.raises(hm.InvalidInputError, match="deadlock"):
        check_hybrid_cp_schedule(samples, lens(crossed), crossed, 4, 8192)
    # 9,000 tokens on two ranks of 4,096.
    tight = [[[3, 0], [3, 1], [2], [2]]]
    with pytest.raises(hm.InvalidInputError, match="exceeds max_seq_len_per_rank = 4096"):
        check_hybrid_cp_schedule(samples, lens(tight), tight, 4, 4096)
    good = [[[3, 0], [3, 1], [3, 2], [3]]]
    assert check_hybrid_cp_schedule(samples, lens(good), good, 4, 4096) == [
        {3: 4, 0: 1, 1: 1, 2: 1}]
    # The runtime itself fails on an empty last group, as the checker says.
    with pytest.raises(IndexError):
        run_megatron_runtime(samples, aligned, 4, monkeypatch)


def test_hybrid_group_sizes_follow_parallel_state():
    assert hybrid_group_sizes(8) == [1, 2, 4, 8]
    assert hybrid_group_sizes(12) == [1, 2, 4, 12]  # no group of 8 on 12 ranks
    assert hybrid_group_sizes(2) == [1, 2]
    assert hybrid_group_sizes(10) == [1, 2, 10]  # 4 does not tile 10


@pytest.mark.parametrize("ranks,max_tokens", [(8, 4096), (16, 2048)])
def test_returns_what_the_peer_returns_in_shape(lengths, ranks, max_tokens, monkeypatch):
    batch = real_length_batches(lengths, ranks, max_tokens, 1.0, 1, seed=7)[0]
    _, ours, _ = schedule_as_megatron(BalancedCPScheduler, batch, ranks, max_tokens, monkeypatch)
    samples, peer, _ = schedule_as_megatron(hybrid_cp_schedule.BalancedCPScheduler, batch,
                                            ranks, max_tokens, monkeypatch)
    # The harness runs the peer's own schedules as it runs ours.
    assert_runs_in_megatron(samples, peer[1], ranks, max_tokens, monkeypatch)
    assert type(ours) is type(peer) is tuple and len(ours) == len(peer) == 2
    for mine, theirs in zip(ours, peer):
        assert type(mine) is type(theirs) is list
        for g in mine + theirs:
            assert type(g) is list and len(g) == ranks
            assert all(type(r) is list and all(type(x) is int for x in r) for r in g)
    # The same samples, each listed with its own length.
    assert sorted({s for g in ours[1] for r in g for s in r}) == list(range(len(batch)))
    for g_lens, g_ids in zip(*ours):
        assert [[batch[s] for s in r] for r in g_ids] == g_lens


def balance(lengths, ranks, max_tokens, load, count, seed, costs_of, monkeypatch, **kwargs):
    """Mean over the batches of the schedule time (schedule_ms) of ours and of the peer."""
    ours_ms, peer_ms = [], []

    def ours_class(max_seq_len_per_rank, dp_cp_group):
        return BalancedCPScheduler(max_seq_len_per_rank, dp_cp_group, **kwargs)

    for batch in real_length_batches(lengths, ranks, max_tokens, load, count, seed):
        samples, (_, ours), scheduler = schedule_as_megatron(ours_class, batch, ranks, max_tokens,
                                                             monkeypatch)
        _, (peer_groups, peer), _ = schedule_as_megatron(hybrid_cp_schedule.BalancedCPScheduler,
                                                         batch, ranks, max_tokens, monkeypatch)
        check_hybrid_cp_schedule(samples, peer_groups, peer, ranks, max_tokens)
        costs = costs_of(scheduler)
        ours_ms.append(schedule_ms(samples, ours, costs)[0])
        peer_ms.append(schedule_ms(samples, peer, costs)[0])
    return float(np.mean(ours_ms)), float(np.mean(peer_ms))


@pytest.mark.parametrize("ranks,max_tokens,load", SETTINGS)
def test_balance_is_no_worse_than_the_peers_under_the_default_cost_model(
        lengths, ranks, max_tokens, load, monkeypatch):
    ours, peer = balance(lengths, ranks, max_tokens, load, 6, 11, lambda s: s.costs,
                         monkeypatch)
    assert ours <= peer, (ours, peer)


@pytest.mark.parametrize("ranks,max_tokens,load", SETTINGS)
def test_balance_is_no_worse_than_the_peers_under_its_own_estimate(lengths, ranks, max_tokens,
                                                                   load, monkeypatch):
    """Given the peer's estimate (L^2 / k) as its cost model, ours is no slower by it. (With
    the default model, which charges the exchange, ours can be slower by L^2 / k on heavy
    batches: docs/python.md.)"""
    ours, peer = balance(lengths, ranks, max_tokens, load, 6, 17, lambda s: s.costs,
                         monkeypatch, costs=BlockCosts.peer_estimate())
    assert ours <= peer, (ours, peer)


def test_balance_with_a_hydraulis_profile(lengths, monkeypatch):
    """LLaMA-7B on A800 at tp 8 (cp 1, 2, 4, 8 schemes): ours plans with the profile, and
    both are timed by it, each sample paying the profile's c."""
    ours, peer = balance(lengths, 8, 4096, 2.0, 6, 13, lambda s: s.costs, monkeypatch,
                         profile=PROFILE_7B, tp=8)
    assert ours <= peer, (ours, peer)


def test_bad_input_is_named():
    with pytest.raises(hm.InvalidInputError, match=r"dp_cp_group.size\(\)"):
        BalancedCPScheduler(4096, DpCpGroup(0))
    with pytest.raises(hm.InvalidInputError, match=r"dp_cp_group.size\(\)"):
        BalancedCPScheduler(4096, DpCpGroup(2.0))
    with pytest.raises(TypeError, match="dp_cp_group"):
        BalancedCPScheduler(4096, 8)
    with pytest.raises(hm.InvalidInputError, match="max_seq_len_per_rank"):
        BalancedCPScheduler(0, DpCpGroup(8))
    scheduler = BalancedCPScheduler(4096, DpCpGroup(8))
    with pytest.raises(hm.InvalidInputError, match="sample_id_seqlens: the global batch is empty"):
        scheduler.get_groups_and_subsamples([], None)
    with pytest.raises(hm.InvalidInputError, match=r"sample_id_seqlens\[1\]: seqlen must be >= 1"):
        scheduler.get_groups_and_subsamples([(0, 10), (1, -5)], None)
    with pytest.raises(hm.InvalidInputError, match=r"sample_id_seqlens\[0\]: seqlen must be >= 1"):
        scheduler.get_groups_and_subsamples([(0, 0)], None)
    with pytest.raises(TypeError, match=r"sample_id_seqlens\[0\]: seqlen must be an integer"):
        scheduler.get_groups_and_subsamples([(0, 10.0)], None)
    with pytest.raises(hm.InvalidInputError, match="sample id 4 appears more than once"):
        scheduler.get_groups_and_subsamples([(4, 10), (5, 20), (4, 30)], None)
    # Longer than all 8 ranks hold: named (the peer fails an assertion instead).
    with pytest.raises(hm.InvalidInputError, match=r"sample id 7 has 32769 tokens, more than all 8 ranks"):
        scheduler.get_groups_and_subsamples([(3, 100), (7, 8 * 4096 + 1)], None)
    with pytest.raises(hm.InvalidInputError, match="profile, costs"):
        BalancedCPScheduler(4096, DpCpGroup(8), profile=PROFILE_7B,
                            costs=BlockCosts.peer_estimate())
    with pytest.raises(hm.InvalidInputError, match="profile: has no <cp 1, tp 3"):
        BalancedCPScheduler(4096, DpCpGroup(8), profile=PROFILE_7B, tp=3)


def test_fewer_samples_than_ranks_keep_every_rank_busy(monkeypatch):
    """Widening: a rank with no sample joins one of its enclosing block's (the peer widens
    a sample's cp too)."""
    for batch in ([5000], [100, 200, 300], [4096 * 8], [1] * 3 + [20000]):
        samples, (groups, ids), _ = schedule_as_megatron(BalancedCPScheduler, batch, 8, 4096,
                                                         monkeypatch)
        check_hybrid_cp_schedule(samples, groups, ids, 8, 4096)
        assert_runs_in_megatron(samples, ids, 8, 4096, monkeypatch)
    # A lone sample ends up on all eight ranks.
    _, (_, ids), _ = schedule_as_megatron(BalancedCPScheduler, [5000], 8, 4096, monkeypatch)
    assert ids == [[[0]] * 8]


def test_non_power_of_two_ranks(lengths, monkeypatch):
    """12 ranks: blocks of 1, 2, 4 and all 12, the groups megatron-core has there."""
    for batch in real_length_batches(lengths, 12, 2048, 1.0, 3, seed=5):
        samples, (groups, ids), scheduler = schedule_as_megatron(BalancedCPScheduler, batch, 12,
                                                                 2048, monkeypatch)
        assert scheduler.block_sizes == [1, 2, 4, 12]
        check_hybrid_cp_schedule(samples, groups, ids, 12, 2048)
        assert_runs_in_megatron(samples, ids, 12, 2048, monkeypatch)


def test_schedule_ms_counts_waiting_at_shared_samples():
    costs = BlockCosts.peer_estimate()
    samples = [(0, 10), (1, 20), (2, 4)]
    # Rank 1 runs sample 1 (400) before the shared sample 2 (16 / 2 = 8): rank 0 waits.
    total, per_group = schedule_ms(samples, [[[0, 2], [1, 2]]], costs)
    assert per_group == [408.0]
    assert hm._run_group(0, [[0, 2], [1, 2]], {0: 1, 1: 1, 2: 2}) == [0.0, 0.0]


def test_the_documented_example_runs(monkeypatch):
    """docs/python.md's example: the drop-in put into megatron-core's data_schedule before
    the wrapper is built, then called as the wrapper calls it (8 ranks of 4,096 tokens)."""
    monkeypatch.setattr(data_schedule, "BalancedCPScheduler", BalancedCPScheduler)
    config = config_for(4096)
    wrapper = data_schedule.HybridCPDataLoaderWrapper(
        iter([]), config, pg_collection=types.SimpleNamespace(dp_cp=DpCpGroup(8), dp=DpCpGroup(8),
                                                              tp=DpCpGroup(1)))
    samples = [(0, 5000), (1, 812), (2, 30000), (3, 77)]
    groups, sample_id_groups = wrapper.cp_balancing_scheduler.get_groups_and_subsamples(
        samples, config)
    cp_of = check_hybrid_cp_schedule(samples, groups, sample_id_groups, 8, 4096)[0]
    assert cp_of[2] == 8  # 30,000 tokens need all eight ranks of 4,096
    assert cp_of[0] >= 2  # 5,000 need two
    profiled = BalancedCPScheduler(4096, DpCpGroup(8), profile=PROFILE_7B, tp=8)
    assert profiled.block_sizes == [1, 2, 4, 8]
    check_hybrid_cp_schedule(samples, *profiled.get_groups_and_subsamples(samples, config), 8,
                             4096)


def test_random_batches_always_give_runnable_schedules():
    """720 random batches (1 to 3n samples, a third up to n * M tokens) on 2 to 16 ranks and
    M from 1 to 2^22 tokens (most not a multiple of the planner's 128): every schedule
    passes the checker."""
    rng = random.Random(3)
    for ranks in (2, 4, 6, 8, 12, 16):
        for max_tokens in (1, 100, 1000, 4096, 131072, 1 << 22):
            scheduler = BalancedCPScheduler(max_tokens, DpCpGroup(ranks))
            for _ in range(20):
                count = rng.randrange(1, 3 * ranks)
                batch = [rng.randrange(1, ranks * max_tokens + 1) if rng.random() < 0.3 else
                         rng.randrange(1, max_tokens + 1) for _ in range(count)]
                samples = [(1000 + i, n) for i, n in enumerate(batch)]
                groups, ids = scheduler.get_groups_and_subsamples(samples, None)
                check_hybrid_cp_schedule(samples, groups, ids, ranks, max_tokens)
