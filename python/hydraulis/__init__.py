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

from . import _core
from ._core import (Candidates, HydraulisError, InfeasibleError, InvalidInputError, Pipeline,
                    Plan, Profile)

__all__ = ["load_profile", "load_candidates", "Planner", "Plan", "Pipeline", "Profile",
           "Candidates", "HydraulisError", "InvalidInputError", "InfeasibleError"]


def load_profile(path_or_dict):
    """A fitted profile (docs/spec-format.md) from a JSON file path or a dict."""
    if isinstance(path_or_dict, dict):
        return _core.parse_profile(_json.dumps(path_or_dict), "<profile dict>")
    if isinstance(path_or_dict, (str, _os.PathLike)):
        return _core.load_profile(_os.fspath(path_or_dict))
    raise TypeError("load_profile: expected a path or a dict, got "
                    f"{type(path_or_dict).__name__}")


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
        return _core.candidates_from_text(text, path)
    raise TypeError("load_candidates: expected a path or a dict, got "
                    f"{type(path_or_dict).__name__}")


class Planner(_core.Planner):
    """Plans global batches on a candidate set: Planner(profile, candidates, *,
    algorithm="ours", seed=1, max_len=32768, reject_overlong=False,
    backward_to_forward=2.0), the options of `hydraulis plan` (--algorithm, --seed,
    --max-len, --reject-overlong, --backward-to-forward).

    plan(lengths) takes a sequence of ints or an integer NumPy array (each >= 1) and
    returns a Plan. Caches persist across calls; the GIL is released while planning, so
    another thread may train meanwhile."""
