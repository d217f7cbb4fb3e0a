#!/usr/bin/env python3
"""Run Megatron-Core's own dynamic (hybrid) context-parallel scheduler on batches of
document lengths and dump its schedule as JSON.

This is the peer baseline for `dynamic-cp`: it imports
`megatron.core.pipeline_parallel.hybrid_cp_schedule.BalancedCPScheduler` from the
installed megatron-core (tested with 0.16.1, a test-only dependency) and calls it
the way `megatron.core.datasets.data_schedule.HybridCPDataLoaderWrapper` does:

    scheduler = BalancedCPScheduler(max_seq_len_per_rank=config.max_seqlen_per_dp_cp_rank,
                                    dp_cp_group=dp_cp_group)
    groups, sample_id_groups = scheduler.get_groups_and_subsamples(global_id_seqlens, config)

where `global_id_seqlens = [(i, seqlen_i) for i in range(n)]` lists every non-empty
sub-sample (document) of the global batch, concatenated over the data-parallel
ranks, and the group only needs `size()` (the number of DP x CP ranks).

Input JSON:  {"batches": [[len, len, ...], ...]}  (one list per global batch).
Zero-length documents are dropped before ids are assigned, like the wrapper does
(`subsample_seqlens[subsample_seqlens != 0]`); negative or non-integer lengths are
rejected.

Output JSON (deterministic; written to a temporary file, then renamed):
  {"peer": {...}, "params": {...}, "batches": [
     {"batch_index", "num_samples", "input_index_of_id", "dropped_zero_length_indices",
      "peer_return": {"groups": G, "sample_id_groups": S},   # exactly as returned
      "groups": [{"group_index",
                  "samples": [{"id", "input_index", "length", "cp_size", "ranks"}],
                  "rank_loads": [...], "max_load", "min_load",
                  "nonaligned_samples": [...ids...]}],
      "num_groups"}]}
  G[g][r] is the list of sequence lengths rank r runs in group g (in execution
  order) and S[g][r] the matching sample ids.  A sample's cp size is the number of
  ranks whose S[g][r] contains it; this is how Megatron's runtime derives
  `local_cp_size` (hybrid_context_parallel_forward_backward: partner_cp_size).
  rank_loads uses the scheduler's own cost model, sum of L*L/cp_size per rank.
  nonaligned_samples lists samples whose ranks are not the aligned block
  [k*cp, (k+1)*cp) that parallel_state.create_hybrid_dp_cp_groups builds (the
  scheduler itself does not enforce alignment; informational only).

Exit codes: 0 ok, 1 the peer scheduler raised, 2 usage / input errors.
"""

import argparse
import json
import os
import sys
import tempfile
import warnings


class _Usage(Exception):
    """Bad command line or input; reported with exit status 2."""


class DpCpGroup:
    """Stand-in for the DP x CP torch.distributed.ProcessGroup.

    BalancedCPScheduler only calls size(); rank() is provided for completeness.
    """

    def __init__(self, size):
        self._size = size

    def size(self):
        return self._size

    def rank(self):
        return 0


def _positive_int(text):
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="dynamic_cp_peer.py",
        description=(
            "Schedule global batches of document lengths with Megatron-Core's "
            "BalancedCPScheduler (hybrid / dynamic context parallelism) and write "
            "the resulting groups as JSON."
        ),
        epilog=(
            "Input: JSON {\"batches\": [[len, ...], ...]}. Each inner list is one "
            "global batch; document i (after dropping zero lengths) gets sample id i. "
            "Exit status: 0 ok, 1 peer scheduler error, 2 usage/input error."
        ),
    )
    parser.add_argument("input", help="input JSON file with {\"batches\": [[len, ...], ...]}")
    parser.add_argument("-o", "--output", required=True, help="output JSON file ('-' for stdout)")
    parser.add_argument(
        "--dp-cp-size",
        type=_positive_int,
        required=True,
        help="total ranks of the DP x CP mesh (dp_cp_group.size()); Megatron's runtime "
        "requires an even number",
    )
    parser.add_argument(
        "--max-seqlen-per-rank",
        type=_positive_int,
        required=True,
        help="config.max_seqlen_per_dp_cp_rank: tokens one rank can hold",
    )
    parser.add_argument(
        "--context-parallel-size",
        type=_positive_int,
        default=1,
        help="config.context_parallel_size (default 1, which Megatron-LM uses with hybrid "
        "CP; not read by the scheduler, only stored in the config it is given)",
    )
    parser.add_argument(
        "--summary",
        action="store_true",
        help="print a one-line summary per batch to stderr",
    )
    parser.add_argument("--indent", type=int, default=None, help="indent the output JSON")
    return parser.parse_args(argv)


def _load_batches(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise _Usage(f"input file not found: {path}")
    except IsADirectoryError:
        raise _Usage(f"input is a directory: {path}")
    except PermissionError:
        raise _Usage(f"cannot read input file: {path}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _Usage(f"input is not valid JSON: {path}: {e}")
    if not isinstance(data, dict) or "batches" not in data:
        raise _Usage('input must be a JSON object with a "batches" key')
    batches = data["batches"]
    if not isinstance(batches, list):
        raise _Usage('"batches" must be a list of lists of document lengths')
    for b, batch in enumerate(batches):
        if not isinstance(batch, list):
            raise _Usage(f"batches[{b}] must be a list of document lengths")
        for i, length in enumerate(batch):
            if isinstance(length, bool) or not isinstance(length, int):
                raise _Usage(f"batches[{b}][{i}] = {length!r} is not an integer length")
            if length < 0:
                raise _Usage(f"batches[{b}][{i}] = {length} is negative")
    return batches


def _import_peer():
    try:
        with warnings.catch_warnings():
            # megatron.core warns that Transformer Engine / Apex are absent; irrelevant here.
            warnings.simplefilter("ignore")
            import megatron.core as mcore
            from megatron.core.model_parallel_config import ModelParallelConfig
            from megatron.core.pipeline_parallel import hybrid_cp_schedule
    except ImportError as e:
        raise _Usage(
            f"cannot import megatron-core ({e}); install it with "
            "'pip install megatron-core==0.16.1 --no-deps'"
        )
    if not hasattr(hybrid_cp_schedule, "BalancedCPScheduler"):
        raise _Usage(
            f"megatron-core {getattr(mcore, '__version__', '?')} has no "
            "hybrid_cp_schedule.BalancedCPScheduler (need >= 0.16)"
        )
    return mcore, ModelParallelConfig, hybrid_cp_schedule


def _describe_group(g, lens_per_rank, ids_per_rank, id_to_len, id_to_input):
    """Per-sample view of one returned group (derived only from the returned lists)."""
    ranks_of = {}
    order = []
    for r, ids in enumerate(ids_per_rank):
        for sid in ids:
            if sid not in ranks_of:
                ranks_of[sid] = []
                order.append(sid)
            ranks_of[sid].append(r)
    samples = []
    nonaligned = []
    for sid in order:
        ranks = ranks_of[sid]
        cp = len(ranks)
        samples.append(
            {
                "id": sid,
                "input_index": id_to_input[sid],
                "length": id_to_len[sid],
                "cp_size": cp,
                "ranks": ranks,
            }
        )
        aligned = ranks == list(range(ranks[0], ranks[0] + cp)) and ranks[0] % cp == 0
        if not aligned:
            nonaligned.append(sid)
    cp_of = {s["id"]: s["cp_size"] for s in samples}
    loads = [
        sum(id_to_len[sid] * id_to_len[sid] / cp_of[sid] for sid in ids) for ids in ids_per_rank
    ]
    for r, (lens, ids) in enumerate(zip(lens_per_rank, ids_per_rank)):
        if [id_to_len[sid] for sid in ids] != list(lens):
            raise RuntimeError(f"group {g} rank {r}: returned lengths do not match sample ids")
    return {
        "group_index": g,
        "samples": samples,
        "rank_loads": loads,
        "max_load": max(loads) if loads else 0.0,
        "min_load": min(loads) if loads else 0.0,
        "nonaligned_samples": nonaligned,
    }


def _to_plain(obj):
    """Nested lists/tuples of ints/floats -> fresh plain lists (no shared references)."""
    if isinstance(obj, (list, tuple)):
        return [_to_plain(x) for x in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    raise TypeError(f"unexpected value in scheduler output: {obj!r}")


def _schedule_batch(b, lengths, scheduler, config, dp_cp_size, max_seqlen):
    # Like HybridCPDataLoaderWrapper.__next__: drop empty sub-samples, then number the
    # rest 0..n-1 in order (the all-gather concatenates DP ranks in rank order).
    input_index = [i for i, L in enumerate(lengths) if L != 0]
    dropped = [i for i, L in enumerate(lengths) if L == 0]
    seqlens = [lengths[i] for i in input_index]
    global_id_seqlens = [(i, seqlens[i]) for i in range(len(seqlens))]

    too_long = [
        (input_index[i], L) for i, L in global_id_seqlens if scheduler.gpus_needed(L) > dp_cp_size
    ]
    if too_long:
        i, L = too_long[0]
        raise _Usage(
            f"batches[{b}][{i}] = {L} needs {scheduler.gpus_needed(L)} ranks at "
            f"--max-seqlen-per-rank {max_seqlen} but --dp-cp-size is {dp_cp_size} "
            f"({len(too_long)} such document(s)); Megatron's scheduler cannot place it "
            "(it would fail its 'at least one group' assertion)"
        )

    groups, sample_id_groups = scheduler.get_groups_and_subsamples(global_id_seqlens, config)
    groups = _to_plain(groups)
    sample_id_groups = _to_plain(sample_id_groups)

    id_to_len = dict(global_id_seqlens)
    described = [
        _describe_group(g, groups[g], sample_id_groups[g], id_to_len, input_index)
        for g in range(len(groups))
    ]
    scheduled = sorted(s["id"] for grp in described for s in grp["samples"])
    if scheduled != list(range(len(seqlens))):
        raise RuntimeError(f"batch {b}: scheduler output does not cover every sample exactly once")
    return {
        "batch_index": b,
        "num_samples": len(seqlens),
        "input_index_of_id": input_index,
        "dropped_zero_length_indices": dropped,
        "num_groups": len(groups),
        "peer_return": {"groups": groups, "sample_id_groups": sample_id_groups},
        "groups": described,
    }


def peer_sample_id_groups(lengths, dp_cp_size, max_seqlen_per_rank):
    """The peer's sample_id_groups[g][r] for one batch of non-zero lengths (ids are batch
    indices), called as HybridCPDataLoaderWrapper calls it. Raises what the peer raises."""
    _, ModelParallelConfig, hybrid_cp_schedule = _import_peer()
    config = ModelParallelConfig(hybrid_context_parallel=True,
                                 max_seqlen_per_dp_cp_rank=max_seqlen_per_rank)
    scheduler = hybrid_cp_schedule.BalancedCPScheduler(
        max_seq_len_per_rank=config.max_seqlen_per_dp_cp_rank, dp_cp_group=DpCpGroup(dp_cp_size))
    samples = [(i, int(n)) for i, n in enumerate(lengths)]
    _, sample_id_groups = scheduler.get_groups_and_subsamples(samples, config)
    return _to_plain(sample_id_groups)


def _write_atomic(path, text):
    if path == "-":
        sys.stdout.write(text)
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise _Usage(f"output directory does not exist: {directory}")
    fd, tmp = tempfile.mkstemp(prefix=".dynamic_cp_peer.", suffix=".tmp", dir=directory)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp creates 0600; give the usual mode
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def main(argv=None):
    args = _parse_args(argv)  # argparse exits with status 2 on bad usage
    try:
        if args.indent is not None and args.indent < 0:
            raise _Usage("--indent must be >= 0")
        if args.dp_cp_size % args.context_parallel_size != 0:
            raise _Usage("--dp-cp-size must be a multiple of --context-parallel-size")
        batches = _load_batches(args.input)
        mcore, ModelParallelConfig, hybrid_cp_schedule = _import_peer()

        # The config object the wrapper/scheduler receive (Megatron-LM passes its
        # TransformerConfig, a ModelParallelConfig subclass). Only
        # max_seqlen_per_dp_cp_rank is read, by the wrapper, for the constructor.
        config = ModelParallelConfig(
            hybrid_context_parallel=True,
            max_seqlen_per_dp_cp_rank=args.max_seqlen_per_rank,
            context_parallel_size=args.context_parallel_size,
        )
        group = DpCpGroup(args.dp_cp_size)

        out_batches = []
        for b, lengths in enumerate(batches):
            # A fresh scheduler per batch, as state-free as the wrapper's one (it keeps
            # no state between calls apart from lru caches of pure functions).
            scheduler = hybrid_cp_schedule.BalancedCPScheduler(
                max_seq_len_per_rank=config.max_seqlen_per_dp_cp_rank, dp_cp_group=group
            )
            try:
                result = _schedule_batch(
                    b, lengths, scheduler, config, args.dp_cp_size, args.max_seqlen_per_rank
                )
            except _Usage:
                raise
            except Exception as e:  # the peer's own assertions
                print(
                    f"dynamic_cp_peer: error: megatron-core scheduler failed on batch {b}: "
                    f"{type(e).__name__}: {e}",
                    file=sys.stderr,
                )
                return 1
            out_batches.append(result)
            if args.summary:
                loads = [(g["max_load"], g["min_load"]) for g in result["groups"]]
                cps = sorted({s["cp_size"] for g in result["groups"] for s in g["samples"]})
                nonal = sum(len(g["nonaligned_samples"]) for g in result["groups"])
                imb = [(mx - mn) / mx if mx else 0.0 for mx, mn in loads]
                print(
                    f"batch {b}: samples={result['num_samples']} groups={result['num_groups']} "
                    f"cp_sizes={cps} samples_per_group="
                    f"{[len(g['samples']) for g in result['groups']]} "
                    f"max_rel_imbalance={max(imb) if imb else 0.0:.3f} nonaligned={nonal}",
                    file=sys.stderr,
                )

        out = {
            "peer": {
                "package": "megatron-core",
                "version": getattr(mcore, "__version__", None),
                "module": hybrid_cp_schedule.__name__,
                "class": "BalancedCPScheduler",
                "call": "get_groups_and_subsamples(sample_id_seqlens, config)",
            },
            "params": {
                "dp_cp_size": args.dp_cp_size,
                "max_seqlen_per_dp_cp_rank": args.max_seqlen_per_rank,
                "context_parallel_size": args.context_parallel_size,
                "input": os.path.basename(args.input),
            },
            "batches": out_batches,
        }
        _write_atomic(args.output, json.dumps(out, indent=args.indent) + "\n")
    except _Usage as e:
        print(f"dynamic_cp_peer: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
