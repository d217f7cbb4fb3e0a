"""hydraulis: per-step planning of (possibly heterogeneous) parallel pipelines for
variable-length LLM training, as a library (docs/python.md).

    import hydraulis
    profile = hydraulis.load_profile("configs/profiles/llama-32b-a800.json")
    candidates = hydraulis.load_candidates("configs/candidates/case-study-64gpu.json")
    planner = hydraulis.Planner(profile, candidates)
    plan = planner.plan([4096, 812, 30000, ...])     # token counts of one global batch
    plan.strategy, plan.estimated_step_ms, plan.lower_bound_ms
    for pipeline in plan.pipelines:
        pipeline.micro_batches    # list of int64 NumPy arrays of document indices
        pipeline.cu_seqlens       # per micro-batch: int64 [0, l0, l0+l1, ...]
    plan.to_json()                # byte-identical to `hydraulis plan --no-timing`

No torch is needed. Errors in inputs raise InvalidInputError (a ValueError) with the
message the CLI prints; wrong Python types raise TypeError.
"""
import json as _json
import os as _os
import warnings as _warnings

from . import _core
from ._core import (Candidates, HydraulisError, InfeasibleError, InvalidInputError, Pipeline,
                    Plan, Profile)

__all__ = ["load_profile", "load_candidates", "data_parallel_candidates", "read_lengths",
           "BatchSampler", "Planner",
           "propose", "simulate",
           "LookaheadPlanner", "StepCalibration", "CalibrationOutcome", "Plan",
           "Pipeline", "Profile", "Candidates", "HydraulisError", "InvalidInputError",
           "InfeasibleError"]


def read_lengths(path, *, format="auto", length_field="length", text_field="",
                 counter="bytes", skip_empty=False):
    """The document lengths (int64 array) of a dataset, as every `hydraulis` command reads
    them: one integer per line or a JSON array (text), JSON lines (`length_field`, or the
    text of `text_field` counted in UTF-8 bytes or whitespace words by `counter`), or a
    Megatron-LM .idx; the format by extension when "auto" (else text, json-lines or idx).
    InvalidInputError naming the file and line on bad input."""
    return _core.read_lengths(_os.fspath(path), format=format, length_field=length_field,
                              text_field=text_field, counter=counter, skip_empty=skip_empty)


def load_profile(path_or_dict):
    """A fitted profile (docs/spec-format.md) from a JSON file path or a dict."""
    if isinstance(path_or_dict, dict):
        return _core.parse_profile(_json.dumps(path_or_dict), "<profile dict>")
    if isinstance(path_or_dict, (str, _os.PathLike)):
        return _core.load_profile(_os.fspath(path_or_dict))
    raise TypeError("load_profile: expected a path or a dict, got "
                    f"{type(path_or_dict).__name__}")


def _require_format(text, source, expected):
    """InvalidInputError naming `source` when its JSON object is tagged with another format
    (say a profile passed as candidates), at once rather than when a Planner is made. Text
    that is not such an object is left to the parser, which names what is wrong."""
    try:
        tag = _json.loads(text).get("format")
    except (ValueError, AttributeError):
        return
    if isinstance(tag, str) and tag != expected:
        raise InvalidInputError(f'{source}: format: expected "{expected}", got {tag!r}')


def load_candidates(path_or_dict):
    """Candidate strategies (docs/spec-format.md) from a JSON file path or a dict. They are
    checked against a profile when a Planner is made from both."""
    if isinstance(path_or_dict, dict):
        return _core.candidates_from_text(_json.dumps(path_or_dict), "<candidates dict>")
    if isinstance(path_or_dict, (str, _os.PathLike)):
        path = _os.fspath(path_or_dict)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise InvalidInputError(f"{path}: cannot open: {e.strerror}") from None
        _require_format(text, path, "hydraulis.candidates/1")
        return _core.candidates_from_text(text, path)
    raise TypeError("load_candidates: expected a path or a dict, got "
                    f"{type(path_or_dict).__name__}")


def data_parallel_candidates(ranks, *, tp=1, pp=1, cp=1):
    """Candidates of one strategy: ranks / (cp * tp * pp) identical <cp, tp, pp> pipelines
    (Megatron-style data parallelism; with the defaults, one pipeline per rank, what a DDP
    or FSDP loop runs), its optimizer sharded over every rank. InvalidInputError naming the
    argument when one is not a positive integer or cp * tp * pp does not divide ranks."""
    for name, value in (("ranks", ranks), ("tp", tp), ("pp", pp), ("cp", cp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidInputError(f"{name}: expected an integer >= 1, got {value!r}")
    width = cp * tp * pp
    if ranks % width != 0:
        raise InvalidInputError(f"ranks: {ranks} is not a multiple of cp * tp * pp = {width}")
    name = f"{ranks // width}x" + (f"(CP{cp},TP{tp},PP{pp})" if cp > 1 else f"(TP{tp},PP{pp})")
    return load_candidates({
        "format": "hydraulis.candidates/1", "gpus": ranks,
        "optimizer_layout": {"dp": ranks, "tp": 1, "pp": 1},
        "strategies": [{"name": name, "pipelines": [
            {"count": ranks // width, "cp": cp, "tp": tp, "pp": pp}]}]})


def propose(profile, lengths, *, gpus, max_len, resolution=128, tokens_per_batch=200000,
            max_strategies=0, optimizer_layout=None, top_documents=1):
    """Candidate strategies for a cluster of `gpus` GPUs proposed from a length dataset
    (`hydraulis propose`, docs/propose.md): a Candidates object, ready for Planner and
    simulate; its to_json() is the file `hydraulis propose` writes. max_len (the context
    length, required as --max-len is) must fit the largest usable scheme; optimizer_layout
    is (dp, tp, pp) or None for the default; top_documents is --top-documents (2 adds
    strategies for batches whose two longest documents share a bin); select_candidates is
    --select-batches."""
    return _core.propose(profile, lengths, gpus=gpus, max_len=max_len, resolution=resolution,
                         tokens_per_batch=tokens_per_batch, max_strategies=max_strategies,
                         optimizer_layout=optimizer_layout, top_documents=top_documents)


def select_candidates(profile, candidates, batches, *, more, always, max_len=32768, threads=0,
                      prune_tolerance=0.0):
    """Keeps a few of many candidate strategies by planning sample batches with all of them
    (`hydraulis propose --select-batches`, docs/propose.md): `always` (indices; include the
    strategy that holds your longest documents) plus up to `more` others, each added
    greedily where it most lowers the batches' summed planned step. Returns (Candidates,
    kept indices, per-batch best ms with the kept ones, per-batch best ms with all);
    deterministic on any thread count. prune_tolerance is --select-tolerance (0: exact)."""
    return _core.select_candidates(profile, candidates, batches, more=more, always=list(always),
                                   max_len=max_len, threads=threads,
                                   prune_tolerance=prune_tolerance)


def simulate(profile, candidates, dataset, *, system="ours", steps=1, tokens_per_batch=200000,
             max_len=32768, seed=1, sync_aware=True, communication=True, overlap=True,
             ddp_bucket_size=40000000, backward_to_forward=2.0):
    """A simulated training run (`hydraulis simulate`, docs/simulator.md): `steps` global
    batches sampled from `dataset` (lengths), planned by `system` (ours, static-fixed,
    published, ...) and timed. overlap=False is `--no-overlap` (the serial model),
    ddp_bucket_size is `--ddp-bucket-size`. Returns the run summary, the dict of
    `hydraulis simulate --json`."""
    return _json.loads(_core.simulate(
        profile, candidates, dataset, system=system, steps=steps,
        tokens_per_batch=tokens_per_batch, max_len=max_len, seed=seed, sync_aware=sync_aware,
        communication=communication, overlap=overlap, ddp_bucket_size=ddp_bucket_size,
        backward_to_forward=backward_to_forward))


class BatchSampler(_core.BatchSampler):
    """Seeded global batches from a length dataset, as `hydraulis plan --dataset` draws
    them: BatchSampler(dataset, *, tokens_per_batch=200000, max_len=32768, seed=1,
    documents_per_batch=0). Each epoch is a seeded shuffle; documents are cut to max_len;
    a batch takes documents until the token budget is reached (or exactly
    documents_per_batch of them).

    next() -> (lengths, dataset_indices), two int64 arrays; iterating yields the lengths.
    position is (epoch, offset); restore(position) on a sampler of the same dataset and
    options continues with exactly the same batches (save it in a checkpoint)."""

    def __iter__(self):
        return self

    def __next__(self):
        return self.next()[0]


class Planner(_core.Planner):
    """Plans global batches on a candidate set: Planner(profile, candidates, *,
    algorithm="ours", seed=1, max_len=32768, reject_overlong=False,
    backward_to_forward=2.0, threads=1, cp_layouts="subsets", strategy_overhead_ms=[]), the
    options of `hydraulis plan` (--algorithm, --seed, --max-len, --reject-overlong,
    --backward-to-forward, --threads, --cp-layouts; threads=0 uses every core, and the plan
    is the same for every count); strategy_overhead_ms: each candidate strategy's step time
    outside its pipelines (a StepCalibration's overhead_ms), empty for none. cp_layouts: where a cp > 1 pipeline may put a document: "subsets" (over any k of
    its cp ranks), "whole-or-every" (whole on one rank or over all of them, what Megatron's
    hybrid context parallelism runs) or "every-rank" (Megatron-LM's THD rule).

    plan(lengths) takes a sequence of ints or an integer NumPy array (each >= 1) and
    returns a Plan. Caches persist across calls; the GIL is released while planning, so
    another thread may train meanwhile. A document longer than every candidate's capacity
    is truncated (the CLI's rule) with a warnings.warn naming how many, or refused with
    reject_overlong=True."""

    def plan(self, lengths):
        """The Plan of one global batch of documents with these token counts."""
        plan = super().plan(lengths)
        if plan.truncated:
            lost = sum(original - kept for _, original, kept in plan.truncated)
            _warnings.warn(
                f"{len(plan.truncated)} document(s) longer than every candidate's capacity "
                f"truncated ({lost} token(s) lost; plan.truncated lists them; "
                "reject_overlong=True refuses them instead)", stacklevel=2)
        return plan


import collections as _collections

CalibrationOutcome = _collections.namedtuple(
    "CalibrationOutcome", ["adopted", "rejected", "in_use_error", "refit_error"])
CalibrationOutcome.__doc__ = """What StepCalibration.add made of a step: `adopted` (a new fit
is in use from now on), `rejected` (why the step was not used, "" when it was), and the
mean relative errors on the held-out steps of the fit in use before and of the refit."""


class StepCalibration:
    """The cost model refitted from the steps a run measures, as `hydraulis train
    --calibrate` refits it (docs/design.md, "Calibration from measured steps"):

        calibration = hydraulis.StepCalibration(profile, candidates)
        outcome = calibration.add(plan, stage_ms, step_ms)   # after each step
        if outcome.adopted:   # plan later steps on the fit
            planner = hydraulis.Planner(calibration.profile, candidates,
                                        strategy_overhead_ms=calibration.overhead_ms)

    stage_ms[p][s][j]: the measured forward + backward time (ms) of micro-batch j of the
    plan's pipeline p on its stage s (the slowest of the stage's ranks); step_ms: the step.
    Every rank must add the same numbers (agree on them first, e.g. a max all-reduce) to
    keep the same fit. A refit is adopted when it predicts the newest `holdout` steps of
    the `window` better than the fit in use. InvalidInputError on options out of range or a
    profile without a candidate's scheme."""

    def __init__(self, profile, candidates, *, backward_to_forward=2.0, window=16, holdout=4):
        self._impl = _core.StepCalibration(profile, candidates,
                                           backward_to_forward=backward_to_forward,
                                           window=window, holdout=holdout)

    def add(self, plan, stage_ms, step_ms):
        """Adds one measured step; a CalibrationOutcome."""
        return CalibrationOutcome(*self._impl.add(plan, stage_ms, float(step_ms)))

    def predict_ms(self, plan):
        """The step time (ms) the fit in use predicts for `plan`."""
        return self._impl.predict_ms(plan)

    @property
    def profile(self):
        """The fit in use as a Profile (the given one until a refit is adopted)."""
        return self._impl.profile

    @property
    def overhead_ms(self):
        """Per candidate strategy, the step time outside its pipelines (ms)."""
        return self._impl.overhead_ms

    @property
    def version(self):
        """0 for the given profile, then 1, 2, ... per adopted refit."""
        return self._impl.version

    def to_json(self):
        """The fit in use as `hydraulis train` keeps it in a checkpoint
        (format hydraulis.calibration/1)."""
        return self._impl.to_json()


class LookaheadPlanner:
    """Plans step k+1 (and up to `depth` steps ahead) on a background thread while step k
    trains: the thread plans without the GIL, so planning and the training loop overlap.

        with hydraulis.LookaheadPlanner(planner, batches, depth=2) as plans:
            for lengths, plan in plans:        # in the order of `batches`
                train_step(lengths, plan)

    `batches` is any iterable of length lists/arrays (a sampler), or of any items when
    `lengths_of(item)` gives each one's lengths (the iteration yields the items). Plans are exactly those
    `planner.plan` gives for the same batches, in order (planning is deterministic and
    independent of what was planned before). At most `depth` plans wait; `planned_ahead` is
    how many do now. An exception raised while planning (or while drawing the next batch) is
    raised by the iteration at the step that needs that plan; steps before it are delivered
    first. `close()` (or leaving the `with` block) stops the thread without planning further;
    `waited_ms` is how long the last step waited for its plan. The thread is the C++
    look-ahead the training runtime plans with (assign/lookahead.h); batches are drawn from
    `batches` on it, holding the GIL only while drawing.
    """

    def __init__(self, planner, batches, depth=2, lengths_of=None):
        import collections
        import weakref
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise InvalidInputError(f"depth: must be an integer >= 1, got {depth!r}")
        batches = iter(batches)
        lengths_of = lengths_of if lengths_of is not None else (lambda item: item)
        # Items drawn, in order; the thread appends, __next__ takes (both under the GIL).
        items = collections.deque()

        def next_lengths():
            try:
                item = next(batches)
            except StopIteration:
                return None
            items.append(item)
            return lengths_of(item)

        self._items = items
        self._finished = False
        self.waited_ms = 0.0
        self._impl = _core.Lookahead(planner, next_lengths, depth)
        # Joined when the object is collected or the interpreter exits, whichever is first.
        self._close = weakref.finalize(self, self._impl.close)

    @property
    def planned_ahead(self):
        """Plans made and not yet taken by the iteration."""
        return self._impl.ready

    def __iter__(self):
        return self

    def __next__(self):
        if self._finished:
            raise StopIteration
        try:
            step = self._impl.next()
        except BaseException:
            self.close()
            raise
        if step is None:
            self.close()
            raise StopIteration
        plan, self.waited_ms = step
        return self._items.popleft(), plan

    def close(self):
        """Stops planning ahead and joins the thread (a plan being made is finished first)."""
        self._finished = True
        self._close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False



Plan.__repr__ = lambda self: (
    f"<Plan {self.strategy!r}: {len(self.lengths)} documents, {len(self.pipelines)} "
    f"pipeline(s), estimated {self.estimated_step_ms:.1f} ms, bound {self.lower_bound_ms:.1f} ms>")
Pipeline.__repr__ = lambda self: (
    f"<Pipeline {self.scheme}: {len(self.micro_batches)} micro-batch(es), {self.tokens} tokens, "
    f"estimated {self.estimated_ms:.1f} ms>")
Profile.__repr__ = lambda self: f"<Profile of {self.model_name}>"
Candidates.__repr__ = lambda self: f"<Candidates from {self.source}>"

Plan.__doc__ = """One global batch's plan (Planner.plan): the strategy chosen, its estimated step
time and lower bound, the documents' lengths after the long-document rule, and per pipeline
its micro-batches (docs/python.md, "API"; docs/plan-format.md for to_json())."""
Pipeline.__doc__ = """One pipeline of a Plan: its scheme, capacity and estimated time, and per
micro-batch in execution order the document indices, kept lengths, cu_seqlens and, for
cp > 1, each document's cp ranks (docs/python.md, "API")."""
Profile.__doc__ = """A fitted cost and memory profile (load_profile; docs/spec-format.md);
to_json() writes it in the profile format; capacity_tokens(cp=, tp=, pp=, optimizer_layout=
(dp, tp, pp)) is the planner's micro-batch capacity of a scheme in tokens (the memory model
of docs/spec-format.md, aligned down to 128; 0 when the model does not fit)."""
Candidates.__doc__ = """Candidate strategies (load_candidates, data_parallel_candidates,
propose; docs/spec-format.md); to_json() is their file."""
HydraulisError.__doc__ = "An error of hydraulis that is not one of the input's (a RuntimeError)."
InvalidInputError.__doc__ = """Bad input (a ValueError): the message names the argument, file or
field and the value, as the CLI prints it after `hydraulis: error: `."""
InfeasibleError.__doc__ = """A document longer than every candidate's capacity under
reject_overlong=True (a ValueError)."""
