"""Megatron-LM schedulers on the hydraulis planner (docs/python.md): a packing scheduler
with the shape of Megatron-LM's hook ("Megatron-LM"), and BalancedCPScheduler, a drop-in for
megatron-core's hybrid context-parallel scheduler ("Megatron-LM hybrid context
parallelism", further below).

Megatron-LM's sequence-packing schedulers take the (sample id, sequence length) pairs of a
global batch and return, per micro-batch, the sample ids each data-parallel rank packs
into it: groups[microbatch][dp_rank] -> sample ids. MegatronPackingScheduler asks the
hydraulis planner.
Megatron's model is homogeneous (dp identical pipelines of one tp/pp), so the candidate
set given to the planner must hold strategies of exactly dp identical pipelines (usually
one); what hydraulis adds there is the dispatch of documents to ranks and their packing
into micro-batches under the cost model (balanced 1F1B time, memory capacity). Choosing
among heterogeneous strategies per step needs ranks that can switch layouts: the
hydraulis runtime, not Megatron-LM.
"""
import json

import numpy as np

from . import _core
from ._core import InvalidInputError


class MegatronPackingScheduler:
    """scheduler(samples) -> groups[microbatch][dp_rank] -> list of sample ids.

    `samples` is a sequence of (sample_id, seqlen) pairs (one global batch). Ranks whose
    pipeline has fewer micro-batches than the longest get empty groups at the end (a rank
    with an empty micro-batch skips it; gradients are reduced after all of them). After a
    call, `packed_params[dp_rank]` lists per micro-batch what Megatron's packed-sequence
    parameters need: cu_seqlens (int32 NumPy array), max_seqlen and total_tokens; and
    `last_plan` is the Plan (documents cut by the long-document rule are in
    last_plan.truncated, their seqlen in last_plan.lengths)."""

    def __init__(self, planner, dp_size):
        self.planner = planner
        self.dp_size = _positive_int(dp_size, "dp_size")
        self.last_plan = None
        self.packed_params = []

    def __call__(self, samples):
        pairs = list(samples)
        if not pairs:
            raise InvalidInputError("samples: the global batch is empty")
        ids = [p[0] for p in pairs]
        plan = self.planner.plan([p[1] for p in pairs])
        if len(plan.pipelines) != self.dp_size:
            raise InvalidInputError(
                f"the planner chose strategy {plan.strategy} with {len(plan.pipelines)} "
                f"pipeline(s), but Megatron runs dp_size = {self.dp_size} identical ones: give "
                "the planner candidates of exactly dp_size pipelines")
        schemes = {p.scheme for p in plan.pipelines}
        if len(schemes) != 1:
            raise InvalidInputError(f"strategy {plan.strategy} mixes pipelines {sorted(schemes)}; "
                             "Megatron's model is homogeneous")
        count = max(len(p.micro_batches) for p in plan.pipelines)
        groups = [[[] for _ in range(self.dp_size)] for _ in range(count)]
        self.packed_params = []
        for rank, pipeline in enumerate(plan.pipelines):
            params = []
            for m, (docs, cu) in enumerate(zip(pipeline.micro_batches, pipeline.cu_seqlens)):
                groups[m][rank] = [ids[int(d)] for d in docs]
                params.append({"cu_seqlens": cu.astype(np.int32),
                               "max_seqlen": int(np.diff(cu).max()),
                               "total_tokens": int(cu[-1])})
            self.packed_params.append(params)
        self.last_plan = plan
        return groups


# ---------------------------------------------------------------------------------------
# Hybrid (dynamic) context parallelism: a drop-in for megatron-core's BalancedCPScheduler.
# docs/python.md, "Megatron-LM hybrid context parallelism", states the runtime's rules this
# follows and the choices made where they are silent.

# The default cost model (no profile given): one sample of L tokens run on k ranks costs
# each of them (a L^2 + b L) / k ms, plus kv L ms when k > 1 (its key/value exchange).
# Rounded from the shipped LLaMA-7B A800 fit at tp 8 (configs/profiles/llama-7b-a800.json:
# a 5.07e-7, b 0.0366, kv 0.008 to 0.014 for cp 2 to 8); no per-sample constant.
DEFAULT_A_MS_PER_TOKEN2 = 5e-7
DEFAULT_B_MS_PER_TOKEN = 0.035
DEFAULT_KV_MS_PER_TOKEN = 0.01
# At most this many candidate strategies (block-size multisets) are given to the planner.
DEFAULT_MAX_STRATEGIES = 256

_MAX_GPU_MEMORY_BYTES = 1 << 50  # the profile parser's bound on gpu_memory_bytes
# The planning profile's model: one layer, hidden 64, 64 heads, one kv head, so that the
# gathered keys and values weigh little against a token's 64 * A bytes of activations.
_PLAN_HIDDEN = 64


def hybrid_group_sizes(dp_cp_size):
    """The local_cp_size values megatron-core can run on `dp_cp_size` ranks, ascending: 1,
    the powers of two that parallel_state.create_hybrid_dp_cp_groups builds a group for
    (2 <= k < 2^floor(log2 n)) and that divide n, and n itself (the whole dp-cp group)."""
    n = dp_cp_size
    sizes = {1, n}
    k = 2
    while 2 * k <= n:  # k < 2^floor(log2 n)
        if n % k == 0:
            sizes.add(k)
        k *= 2
    return sorted(sizes)


def _block_strategies(n, sizes, limit):
    """Multisets of block sizes from `sizes` that sum to n, each in descending order (so
    every block starts at a multiple of its size). When there are more than `limit`, only
    those with at most d distinct sizes, for the largest d that keeps them within `limit`
    (d = 1 always does)."""
    desc = sorted(sizes, reverse=True)
    out = []

    def rec(rem, i, cur, distinct, max_distinct):
        if rem == 0:
            out.append(list(cur))
            return len(out) <= limit
        for j in range(i, len(desc)):
            k = desc[j]
            if k > rem:
                continue
            new = distinct + (not cur or cur[-1] != k)
            if new > max_distinct:
                continue
            cur.append(k)
            ok = rec(rem - k, j, cur, new, max_distinct)
            cur.pop()
            if not ok:
                return False
        return True

    for max_distinct in range(len(desc), 0, -1):
        out = []
        if rec(n, 0, [], 0, max_distinct):
            return out
    raise AssertionError("unreachable: n blocks of one rank are a strategy")


def _read_profile_json(profile):
    """The profile's JSON, after the project's own parser has checked it (load_profile: every
    field named in its error), so a damaged profile fails as it does everywhere else."""
    import json
    import os

    import hydraulis
    if not isinstance(profile, (dict, str, os.PathLike)):
        raise TypeError(f"profile: expected a path or a dict (a hydraulis profile), got "
                        f"{type(profile).__name__}")
    hydraulis.load_profile(profile)
    if isinstance(profile, dict):
        return profile
    with open(os.fspath(profile), encoding="utf-8") as f:
        return json.load(f)


class BlockCosts:
    """What one sample costs a rank: a sample of L tokens on k ranks costs each of them
    c_k + (a_k L^2 + b_k L) / k + kv_k L (no kv term for k = 1), with (a_k, b_k, c_k, kv_k)
    per k in `terms`, or `every` = (a, b, c, kv) for every k."""

    def __init__(self, terms=None, every=None):
        self.terms = dict(terms or {})
        self.every = every

    @classmethod
    def default(cls):
        """The default model: a 5e-7 ms/token^2, b 0.035 ms/token, kv 0.01 ms/token, c 0."""
        return cls(every=(DEFAULT_A_MS_PER_TOKEN2, DEFAULT_B_MS_PER_TOKEN, 0.0,
                          DEFAULT_KV_MS_PER_TOKEN))

    @classmethod
    def peer_estimate(cls):
        """megatron-core's own estimate (get_total_workload): L^2 / k, in ms per token^2."""
        return cls(every=(1.0, 0.0, 0.0, 0.0))

    @classmethod
    def from_profile(cls, profile, tp):
        """The <k, tp, 1> schemes of a hydraulis profile (a dict or a JSON file); cp = 1 is
        required."""
        terms = {}
        for s in _read_profile_json(profile).get("schemes", []):
            if s.get("tp", 1) == tp and s.get("pp", 1) == 1:
                terms[s.get("cp", 1)] = tuple(float(s.get(name, 0.0)) for name in (
                    "a_ms_per_token2", "b_ms_per_token", "c_ms", "kv_ms_per_token"))
        if 1 not in terms:
            raise InvalidInputError(f"profile: has no <cp 1, tp {tp}, pp 1> scheme")
        return cls(terms)

    def has(self, k):
        """Whether there is a cost term for a block of k ranks."""
        return self.every is not None or k in self.terms

    def term(self, k):
        """(a, b, c, kv) of a block of k ranks."""
        return self.terms[k] if k in self.terms else self.every

    def sample_ms(self, length, k):
        """The time (ms) of a sample of `length` tokens sharded over a block of k ranks."""
        a, b, c, kv = self.term(k)
        return c + (a * length * length + b * length) / k + (kv * length if k > 1 else 0.0)


def _planning_profile(costs, sizes, max_tokens_per_rank, dp_cp_size):
    """A hydraulis profile whose <k, 1, 1> schemes carry `costs` (without the per-sample
    constant, which a micro-batch's c would misstate) and whose memory model gives every
    cp rank room for max_tokens_per_rank tokens: the planner's capacity of <k, 1, 1> is at
    least k * M for every block size k (the scheduler enforces M itself afterwards). The
    GPU memory is the least that gives this, found by bisection on the planner's own
    capacity (Profile.capacity_tokens), so the memory model is not restated here."""
    budget = _MAX_GPU_MEMORY_BYTES // 2
    rank_tokens_guess = max_tokens_per_rank + _core.TOKEN_ALIGNMENT
    activation = 1 << 24
    while activation > 1 and _PLAN_HIDDEN * activation * rank_tokens_guess * 2 > budget:
        activation //= 2
    # The planner's decisions do not depend on the time unit; keep the coefficients within
    # what the profile parser accepts (a 2^20-token sample under 1e12 ms).
    reference = float(1 << 20)
    largest = max(max(a * reference * reference, b * reference, kv * reference)
                  for a, b, _, kv in map(costs.term, sizes))
    scale = 1e9 / largest if largest > 1e9 else 1.0
    schemes = []
    for k in sizes:
        a, b, _, kv = (x * scale for x in costs.term(k))
        entry = {"cp": k, "tp": 1, "pp": 1, "a_ms_per_token2": a, "b_ms_per_token": b,
                 "c_ms": 0.0}
        if k > 1:
            entry["kv_ms_per_token"] = kv
        schemes.append(entry)

    def profile(memory):
        return {
            "format": "hydraulis.profile/1",
            "model": {"name": "megatron-hybrid-cp", "layers": 1, "hidden": _PLAN_HIDDEN,
                      "ffn": 1, "heads": _PLAN_HIDDEN, "kv_heads": 1, "vocab": 1},
            "cluster": {"gpus_per_node": max(1, dp_cp_size), "gpu_memory_bytes": memory},
            "memory": {"activation_bytes_per_token_hidden_layer": {"1": float(activation)},
                       "state_bytes_per_h2_layer": 0.0, "optimizer_share": 0.0,
                       "context_bytes": 0.0, "reserved_bytes": 0.0},
            "schemes": schemes,
        }

    def holds(memory):
        parsed = _core.parse_profile(json.dumps(profile(memory)), "<megatron planning profile>")
        return all(parsed.capacity_tokens(cp=k) >= k * max_tokens_per_rank for k in sizes)

    # Beyond the budget the activation bytes were chosen for, M is beyond what the model
    # represents.
    if not holds(budget):
        raise InvalidInputError(f"max_seq_len_per_rank: {max_tokens_per_rank} tokens is beyond what "
                                "the planner's memory model represents")
    return profile(_least_memory(holds, budget))


def _least_memory(holds, high):
    """The least GPU memory in bytes, at most `high` (which holds), for which `holds`
    (monotone: capacity rises with memory) is true; by bisection on the planner's own
    capacity, so the memory model is not restated here."""
    low = 0  # holds(high), not holds(low)
    while high - low > 1:
        middle = (low + high) // 2
        if holds(middle):
            high = middle
        else:
            low = middle
    return high


def profile_for_seq_length(profile, seq_length, *, tp=1, pp=1):
    """`profile` (a dict or a JSON path) with its GPU memory cut to the least whose
    micro-batches of a <1, tp, pp> pipeline hold `seq_length` tokens, as a Profile: the
    planner then packs micro-batches of at most about Megatron's seq_length, as Megatron's
    own data does. InvalidInputError when the profile's memory does not hold that many."""
    import hydraulis
    data = json.loads(json.dumps(_read_profile_json(profile)))  # a copy to change
    seq_length = _positive_int(seq_length, "seq_length")

    def holds(memory):
        data["cluster"]["gpu_memory_bytes"] = memory
        try:
            return hydraulis.load_profile(data).capacity_tokens(tp=tp, pp=pp) >= seq_length
        except InvalidInputError:  # not even the model's state fits
            return False

    stated = data["cluster"]["gpu_memory_bytes"]
    if not holds(stated):
        raise InvalidInputError(f"seq_length: {seq_length} tokens per micro-batch do not fit the "
                                f"profile's {stated} bytes of GPU memory (tp {tp}, pp {pp})")
    data["cluster"]["gpu_memory_bytes"] = _least_memory(holds, stated)
    return hydraulis.load_profile(data)


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{name}: must be an integer >= 1, got {value!r}")
    return value


class BalancedCPScheduler:
    """megatron-core's BalancedCPScheduler (pipeline_parallel/hybrid_cp_schedule.py), with
    the hydraulis planner in place of its greedy. Constructed and called as
    HybridCPDataLoaderWrapper does:

        scheduler = BalancedCPScheduler(max_seq_len_per_rank=config.max_seqlen_per_dp_cp_rank,
                                        dp_cp_group=dp_cp_group)
        groups, sample_id_groups = scheduler.get_groups_and_subsamples(global_id_seqlens, config)

    groups[g][r] lists the sequence lengths dp-cp rank r runs in group g, in order, and
    sample_id_groups[g][r] the matching sample ids (Python lists of ints, as the peer's).
    There is one group (no barrier); check_hybrid_cp_schedule states what megatron-core's
    hybrid_context_parallel_forward_backward needs of it, and docs/python.md ("Megatron-LM
    hybrid context parallelism") the rules chosen here.

    Per global batch: the hydraulis planner picks a strategy of aligned blocks of ranks
    (context-parallel pipelines of k ranks, pp = 1, widest first) and dispatches the
    samples to them under the cost model and every rank's memory (max_seq_len_per_rank).
    Megatron runs each sample alone, and on any aligned block it has a hybrid group for, so
    the plan is then adapted to that: each block's samples are laid out again
    (_relayout_block), a local search moves samples off the slowest rank
    (_RankLayout.improve), and a rank left without a sample joins one (fill_idle_ranks).
    Every rank runs its samples narrowest first (its own, then shared ones by increasing
    local_cp_size; ties: batch order), one order for all ranks. Deterministic:
    every rank computes the same schedule from the same batch, as the wrapper needs.

    Keyword-only extras: `profile` (a hydraulis profile as a dict or JSON path: its
    <k, tp, 1> schemes are the cost model, BlockCosts.from_profile) or `costs` (a
    BlockCosts); default BlockCosts.default(). `tp` picks the profile's schemes; `threads`
    is the planner's; `max_strategies` bounds the candidate block layouts. `dp_cp_group`
    needs only size(). `config` is not read (nor is it by the peer). `last_plan` is the last
    batch's hydraulis Plan."""

    def __init__(self, max_seq_len_per_rank, dp_cp_group, *, profile=None, tp=1, costs=None,
                 threads=1, max_strategies=DEFAULT_MAX_STRATEGIES):
        import hydraulis
        self.max_seq_len_per_rank = _positive_int(max_seq_len_per_rank, "max_seq_len_per_rank")
        size = getattr(dp_cp_group, "size", None)
        if not callable(size):
            raise TypeError(f"dp_cp_group: needs a size() method (a process group), got "
                            f"{type(dp_cp_group).__name__}")
        self.total_hdp_gpus = _positive_int(size(), "dp_cp_group.size()")
        _positive_int(tp, "tp")
        _positive_int(max_strategies, "max_strategies")
        if profile is not None and costs is not None:
            raise InvalidInputError("profile, costs: give at most one cost model")
        if profile is not None:
            costs = BlockCosts.from_profile(profile, tp)
        self.costs = costs if costs is not None else BlockCosts.default()
        if not isinstance(self.costs, BlockCosts) or not self.costs.has(1):
            raise InvalidInputError("costs: must be a BlockCosts with a term for one rank")
        self.block_sizes = [k for k in hybrid_group_sizes(self.total_hdp_gpus)
                            if self.costs.has(k)]
        self.strategies = _block_strategies(self.total_hdp_gpus, self.block_sizes,
                                            max_strategies)
        n = self.total_hdp_gpus
        self.max_sample_tokens = self.block_sizes[-1] * self.max_seq_len_per_rank
        candidates = hydraulis.load_candidates({
            "format": "hydraulis.candidates/1", "gpus": n,
            "optimizer_layout": {"dp": n, "tp": 1, "pp": 1},
            "strategies": [
                {"name": "+".join(f"CP{k}" for k in blocks),
                 "pipelines": [{"count": blocks.count(k), "cp": k}
                               for k in sorted(set(blocks), reverse=True)]}
                for blocks in self.strategies]})
        self.planner = hydraulis.Planner(
            hydraulis.load_profile(_planning_profile(self.costs, self.block_sizes,
                                                     self.max_seq_len_per_rank, n)),
            candidates, max_len=self.max_sample_tokens, reject_overlong=True, threads=threads,
            cp_layouts="whole-or-every")
        self.last_plan = None

    def gpus_needed(self, seq_len):
        """The least block size whose ranks hold seq_len at max_seq_len_per_rank each (the
        peer's rule, over this scheduler's block sizes)."""
        for k in self.block_sizes:
            if seq_len <= k * self.max_seq_len_per_rank:
                return k
        raise InvalidInputError(f"a sample of {seq_len} tokens needs more than the "
                         f"{self.block_sizes[-1]} ranks x {self.max_seq_len_per_rank} tokens "
                         "(max_seq_len_per_rank) this scheduler has")

    def get_groups_and_subsamples(self, sample_id_seqlens, config=None):
        """(groups, sample_id_groups) for one global batch of (sample_id, seqlen) pairs."""
        del config  # as in the peer: nothing in it is read
        ids, lengths = self._read_batch(sample_id_seqlens)
        plan = self.planner.plan(lengths)
        self.last_plan = plan
        start, size, blocks = self._blocks_of(plan, len(lengths))
        for first, k, docs in blocks:
            if k > 1:
                _relayout_block(lengths, docs, first, k, self.costs, self.max_seq_len_per_rank,
                                self.block_sizes, start, size)
        layout = _RankLayout(lengths, start, size, self.costs, self.total_hdp_gpus,
                             self.block_sizes)
        layout.enforce_memory(self.max_seq_len_per_rank)
        layout.improve(self.max_seq_len_per_rank, 4 * len(lengths) + 64)
        layout.fill_idle_ranks()
        per_rank = layout.rank_lists()
        groups = [[[lengths[i] for i in docs] for docs in per_rank]]
        sample_id_groups = [[[ids[i] for i in docs] for docs in per_rank]]
        return groups, sample_id_groups

    def _read_batch(self, sample_id_seqlens):
        ids, lengths = [], []
        for j, pair in enumerate(sample_id_seqlens):
            try:
                sample_id, seqlen = pair
            except (TypeError, ValueError):
                raise TypeError(f"sample_id_seqlens[{j}]: expected a (sample_id, seqlen) pair, "
                                f"got {pair!r}") from None
            if isinstance(seqlen, bool) or not hasattr(seqlen, "__index__"):
                raise TypeError(f"sample_id_seqlens[{j}]: seqlen must be an integer, got "
                                f"{seqlen!r}")
            seqlen = int(seqlen)
            if seqlen < 1:
                raise InvalidInputError(f"sample_id_seqlens[{j}]: seqlen must be >= 1, got {seqlen} "
                                 f"(sample id {sample_id!r}; HybridCPDataLoaderWrapper drops "
                                 "empty sub-samples)")
            if seqlen > self.max_sample_tokens:
                raise InvalidInputError(
                    f"sample_id_seqlens[{j}]: sample id {sample_id!r} has {seqlen} tokens, more "
                    f"than all {self.block_sizes[-1]} ranks hold at max_seq_len_per_rank = "
                    f"{self.max_seq_len_per_rank} ({self.max_sample_tokens}); megatron-core's "
                    "scheduler cannot place it either")
            ids.append(sample_id)
            lengths.append(seqlen)
        if len(set(ids)) != len(ids):
            seen = set()
            twice = next(i for i in ids if i in seen or seen.add(i))
            raise InvalidInputError(f"sample_id_seqlens: sample id {twice!r} appears more than once")
        if not lengths:
            raise InvalidInputError("sample_id_seqlens: the global batch is empty")
        return ids, lengths

    def _blocks_of(self, plan, count):
        """Per sample: the first rank and the number of ranks of the plan's placement. The
        strategy's pipelines take consecutive blocks of ranks, widest first."""
        start = [None] * count
        size = [None] * count
        pipelines = sorted(plan.pipelines, key=lambda p: -p.cp)  # stable
        offset = 0
        blocks = []
        for p in pipelines:
            k = p.cp
            blocks.append((offset, k, [int(d) for docs in p.micro_batches for d in docs]))
            for m, docs in enumerate(p.micro_batches):
                cp_ranks = p.cp_layouts[m] if k > 1 else None
                for j, d in enumerate(docs.tolist()):
                    rank = -1 if cp_ranks is None else int(cp_ranks[j])
                    if k == 1:
                        start[d], size[d] = offset, 1
                    elif rank < 0:
                        start[d], size[d] = offset, k
                    else:
                        start[d], size[d] = offset + rank, 1
            offset += k
        if offset != self.total_hdp_gpus or any(s is None for s in start):
            raise RuntimeError(f"plan {plan.strategy} does not cover the {self.total_hdp_gpus} "
                               "ranks and every sample once")
        return start, size, blocks


def _rank_loads(lengths, docs, first, k, costs, start, size):
    """Each rank's summed sample time in the block [first, first + k)."""
    load = [0.0] * k
    for d in docs:
        ms = costs.sample_ms(lengths[d], size[d])
        for r in range(start[d] - first, start[d] - first + size[d]):
            load[r] += ms
    return load


def _relayout_block(lengths, docs, first, k, costs, max_tokens, sizes, start, size):
    """Lays out again the samples the planner dispatched to the block of k ranks at `first`.
    The planner lays out each micro-batch within the ranks' memory, so its layout is packed
    micro-batch by micro-batch; megatron-core runs every sample alone, and a sample may run
    on any aligned sub-block of the block. Two greedy layouts, each taking the samples
    longest first and putting each on the aligned sub-block (of a size in `sizes`, at most
    k) that leaves the least maximum summed time over its ranks (ties: fewer ranks, then
    the lowest):
    - least: on need(L) ranks, the fewest that hold it at max_tokens each;
    - any: on any number of ranks from need(L) to k.
    The one with the least block time (max over its ranks of their summed time; ties: least,
    any, the planner's) replaces the planner's layout merged over its micro-batches when it
    is faster. Writes start/size of the block's samples."""
    best_ms = max(_rank_loads(lengths, docs, first, k, costs, start, size))
    order = sorted(docs, key=lambda d: (-lengths[d], d))
    block_sizes = [s for s in sizes if s <= k and k % s == 0]
    best = None
    for widen in (False, True):
        load = [0.0] * k
        placed = {}
        for d in order:
            length = lengths[d]
            need = next((s for s in block_sizes if length <= s * max_tokens), k)
            choice = None
            for s in block_sizes:
                if s < need or (s > need and not widen):
                    continue
                ms = costs.sample_ms(length, s)
                for j in range(0, k, s):
                    key = (max(load[j:j + s]) + ms, s, j)
                    if choice is None or key < choice:
                        choice = key
            _, s, j = choice
            ms = costs.sample_ms(length, s)
            for r in range(j, j + s):
                load[r] += ms
            placed[d] = (first + j, s)
        if max(load) < best_ms:
            best_ms = max(load)
            best = placed
    if best is not None:
        for d, (begin, count) in best.items():
            start[d], size[d] = begin, count


class _RankLayout:
    """Each sample's ranks, the aligned block [start, start + size), and each rank's summed
    sample time. Every rank runs its samples narrowest first (ties: in batch order), one
    order for all ranks, so no deadlock. Aligned blocks nest, so a block B's samples start
    when both halves are done: B takes its samples' time plus the slower half's, and the
    batch as long as the largest sum of sample times on one rank (the `load` here), as
    widest first would (where no rank waits). Narrowest first also ends every rank of a
    shared sample on the same last sample (the one megatron-core runs with gradient sync),
    as the peer's groups do."""

    def __init__(self, lengths, start, size, costs, ranks, block_sizes):
        self.lengths, self.start, self.size = lengths, list(start), list(size)
        self.costs, self.ranks, self.block_sizes = costs, ranks, block_sizes
        self.load = [0.0] * ranks
        self.count = [0] * ranks
        for i in range(len(lengths)):
            self._add(i, +1)

    def _add(self, i, sign):
        ms = self.costs.sample_ms(self.lengths[i], self.size[i])
        for r in range(self.start[i], self.start[i] + self.size[i]):
            self.load[r] += sign * ms
            self.count[r] += sign

    def _widen(self, i, block_start, block_size):
        self._add(i, -1)
        self.start[i], self.size[i] = block_start, block_size
        self._add(i, +1)

    def _enclosing(self, first, size):
        """Valid blocks strictly larger than [first, first + size), smallest first."""
        for k in self.block_sizes:
            if k > size:
                yield (first // k) * k, k

    def enforce_memory(self, max_tokens):
        """A sample on k ranks must hold at most max_tokens per rank (L <= k M, the peer's
        rule); the planner's 128-token capacity alignment may place up to 127 more. Such a
        sample is widened to the least enclosing block that holds it."""
        for i, length in enumerate(self.lengths):
            if length > self.size[i] * max_tokens:
                for first, k in self._enclosing(self.start[i], self.size[i]):
                    if length <= k * max_tokens:
                        self._widen(i, first, k)
                        break

    def fill_idle_ranks(self):
        """megatron-core's runtime runs the last sample of a rank's last group, so every rank
        needs one. A rank with none takes part in a sample of the least enclosing block that
        holds samples: the one whose widening to that block leaves the block's slowest rank
        fastest (ties: the longer, then the earlier)."""
        while True:
            idle = [r for r in range(self.ranks) if self.count[r] == 0]
            if not idle:
                return
            rank = idle[0]
            for first, k in self._enclosing(rank, 1):
                inside = [i for i in range(len(self.lengths))
                          if first <= self.start[i] and self.start[i] + self.size[i] <= first + k]
                if inside:
                    break
            best = None
            for i in inside:
                length = self.lengths[i]
                old = self.costs.sample_ms(length, self.size[i])
                new = self.costs.sample_ms(length, k)
                slowest = max(self.load[r] + new - (old if self.start[i] <= r <
                                                    self.start[i] + self.size[i] else 0.0)
                              for r in range(first, first + k))
                key = (slowest, -length, i)
                if best is None or key < best[0]:
                    best = (key, i)
            self._widen(best[1], first, k)

    def improve(self, max_tokens, max_steps):
        """Local search on the runtime's time (max over ranks of summed sample time): take the
        slowest rank and move one of its samples (the 64 costliest) to another aligned
        block of a valid size that holds it, the move that leaves the affected ranks'
        maximum least, if that is below the slowest rank's time; stop when no move helps or
        after max_steps moves. Deterministic (ties: the first found)."""
        n = self.ranks
        on = [[] for _ in range(n)]
        for i in range(len(self.lengths)):
            for r in range(self.start[i], self.start[i] + self.size[i]):
                on[r].append(i)
        for _ in range(max_steps):
            slow = max(range(n), key=lambda r: (self.load[r], -r))
            current = self.load[slow]
            # Per valid size, each aligned block's maximum load.
            block_max = {k: [max(self.load[j:j + k]) for j in range(0, n - k + 1, k)]
                         for k in self.block_sizes}
            candidates = sorted(on[slow], key=lambda i: (-self.costs.sample_ms(
                self.lengths[i], self.size[i]), i))[:64]
            best = None
            for i in candidates:
                length, first, count = self.lengths[i], self.start[i], self.size[i]
                old = self.costs.sample_ms(length, count)
                rest = max(self.load[r] - old for r in range(first, first + count))
                for k in self.block_sizes:
                    if length > k * max_tokens:
                        continue
                    new = self.costs.sample_ms(length, k)
                    for b, j in enumerate(range(0, n - k + 1, k)):
                        if j == first and k == count:
                            continue
                        if j + k <= first or first + count <= j:  # disjoint
                            after = max(block_max[k][b] + new, rest)
                        else:
                            lo, hi = min(j, first), max(j + k, first + count)
                            after = max(self.load[r] + (new if j <= r < j + k else 0.0) -
                                        (old if first <= r < first + count else 0.0)
                                        for r in range(lo, hi))
                        if after < current * (1 - 1e-12) and (best is None or after < best[0]):
                            best = (after, i, j, k)
            if best is None:
                return
            _, i, j, k = best
            for r in range(self.start[i], self.start[i] + self.size[i]):
                on[r].remove(i)
            self._widen(i, j, k)
            for r in range(j, j + k):
                on[r].append(i)

    def rank_lists(self):
        lists = [[] for _ in range(self.ranks)]
        for i in sorted(range(len(self.lengths)), key=lambda i: (self.size[i], i)):
            for r in range(self.start[i], self.start[i] + self.size[i]):
                lists[r].append(i)
        return lists


def check_hybrid_cp_schedule(sample_id_seqlens, groups, sample_id_groups, dp_cp_size,
                             max_seq_len_per_rank):
    """Checks a (groups, sample_id_groups) schedule against what megatron-core 0.16.1's
    hybrid_context_parallel_forward_backward and HybridCPDataLoaderWrapper do with it, by
    running their consumption: per group g and rank r the runtime runs sample_id_groups[g][r]
    in order, each sample as its own forward/backward with local_cp_size = the number of
    ranks listing it in g, on the hybrid group of that size containing r; groups are
    separated by a barrier; it runs sample_id_groups[-1][r][-1] of every rank. Raises
    ValueError naming the group, rank and sample of the first violation of:
    - shape: at least one group, each a list of dp_cp_size lists; groups[g][r][j] is the
      length of sample_id_groups[g][r][j]; every sample of the batch in exactly one group,
      at most once per rank, and nothing else;
    - local_cp_size is 1, a power of two with a hybrid group (hybrid_group_sizes) or
      dp_cp_size, and the ranks listing the sample are exactly the aligned block
      [j * size, (j + 1) * size) within the dp-cp ranks;
    - memory: one sample at a time, each rank holds length / local_cp_size tokens of it:
      length <= local_cp_size * max_seq_len_per_rank;
    - no deadlock: ranks sharing samples meet them in an order that lets every rank finish
      (simulated: a shared sample starts when every rank listing it has reached it; in
      particular two ranks sharing two samples list them in the same order);
    - every rank has a sample in the last group.
    Returns, per group, a dict sample id -> local_cp_size."""
    seqlen = {}
    for sample_id, length in sample_id_seqlens:
        seqlen[sample_id] = int(length)
    n = dp_cp_size
    sizes = set(hybrid_group_sizes(n))
    if not isinstance(groups, list) or not isinstance(sample_id_groups, list):
        raise InvalidInputError("groups and sample_id_groups must be lists")
    if len(sample_id_groups) == 0 or len(groups) != len(sample_id_groups):
        raise InvalidInputError(f"{len(groups)} groups of lengths and {len(sample_id_groups)} of sample "
                         "ids: need the same number, at least one")
    seen = {}
    result = []
    for g, (lens, ids) in enumerate(zip(groups, sample_id_groups)):
        if len(ids) != n or len(lens) != n:
            raise InvalidInputError(f"group {g}: {len(ids)} rank lists of ids and {len(lens)} of lengths, "
                             f"expected {n}")
        ranks_of = {}
        for r in range(n):
            if len(ids[r]) != len(lens[r]):
                raise InvalidInputError(f"group {g} rank {r}: {len(ids[r])} ids but {len(lens[r])} "
                                 "lengths")
            if len(set(ids[r])) != len(ids[r]):
                raise InvalidInputError(f"group {g} rank {r}: a sample listed twice")
            for sid, length in zip(ids[r], lens[r]):
                if sid not in seqlen:
                    raise InvalidInputError(f"group {g} rank {r}: sample id {sid!r} is not in the batch")
                if length != seqlen[sid]:
                    raise InvalidInputError(f"group {g} rank {r}: sample {sid!r} listed with length "
                                     f"{length}, has {seqlen[sid]}")
                ranks_of.setdefault(sid, []).append(r)
        cp_of = {}
        for sid, ranks in ranks_of.items():
            if sid in seen:
                raise InvalidInputError(f"sample {sid!r} in groups {seen[sid]} and {g}")
            seen[sid] = g
            size = len(ranks)  # partner_cp_size, as the runtime counts it
            first = ranks[0]
            if size not in sizes:
                raise InvalidInputError(f"group {g}: sample {sid!r} on {size} ranks; megatron-core has "
                                 f"hybrid groups of {sorted(sizes)} ranks")
            if first % size or ranks != list(range(first, first + size)):
                raise InvalidInputError(f"group {g}: sample {sid!r} on ranks {ranks}, not an aligned "
                                 f"block of {size}")
            if seqlen[sid] > size * max_seq_len_per_rank:
                raise InvalidInputError(f"group {g}: sample {sid!r} of {seqlen[sid]} tokens on {size} "
                                 f"rank(s) exceeds max_seq_len_per_rank = {max_seq_len_per_rank}")
            cp_of[sid] = size
        _run_group(g, ids, cp_of)
        result.append(cp_of)
    missing = [sid for sid in seqlen if sid not in seen]
    if missing:
        raise InvalidInputError(f"{len(missing)} samples scheduled nowhere, e.g. {missing[0]!r}")
    for r in range(n):
        if not sample_id_groups[-1][r]:
            raise InvalidInputError(f"rank {r} has no sample in the last group (the runtime runs "
                             "sample_id_groups[-1][rank][-1])")
    return result


def _run_group(g, ids, cp_of, sample_ms=None):
    """Runs one group as the ranks would; returns each rank's finish time (0 at the start)
    under sample_ms(sample id, local_cp_size), or raises ValueError on a deadlock."""
    n = len(ids)
    head = [0] * n
    clock = [0.0] * n
    waiting = {}  # shared sample -> ranks at it
    ready = list(range(n))
    while ready:
        r = ready.pop()
        while head[r] < len(ids[r]):
            sid = ids[r][head[r]]
            cost = sample_ms(sid, cp_of[sid]) if sample_ms else 0.0
            if cp_of[sid] == 1:
                clock[r] += cost
                head[r] += 1
                continue
            at = waiting.setdefault(sid, [])
            at.append(r)
            if len(at) < cp_of[sid]:
                break
            begin = max(clock[q] for q in at)
            for q in at:
                clock[q] = begin + cost
                head[q] += 1
                if q != r:
                    ready.append(q)
            del waiting[sid]
    stuck = [r for r in range(n) if head[r] < len(ids[r])]
    if stuck:
        r = stuck[0]
        raise InvalidInputError(f"group {g}: deadlock: rank {r} waits at sample {ids[r][head[r]]!r} "
                         f"for partners that wait elsewhere ({len(stuck)} ranks stuck)")
    return clock


def schedule_ms(sample_id_seqlens, sample_id_groups, costs):
    """The time of a schedule under `costs` (a BlockCosts): each group run as the ranks run
    it (a shared sample starts when all its ranks are free; each sample costs each of its
    ranks costs.sample_ms(length, local_cp_size)), groups one after another (the barrier).
    Returns (total ms, per-group ms). Assumes check_hybrid_cp_schedule passed."""
    seqlen = {sid: int(length) for sid, length in sample_id_seqlens}
    per_group = []
    for g, ids in enumerate(sample_id_groups):
        cp_of = {}
        for rank_ids in ids:
            for sid in rank_ids:
                cp_of[sid] = cp_of.get(sid, 0) + 1
        clock = _run_group(g, ids, cp_of,
                           lambda sid, k: costs.sample_ms(seqlen[sid], k))
        per_group.append(max(clock))
    return sum(per_group), per_group
