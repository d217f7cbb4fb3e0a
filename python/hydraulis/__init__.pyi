import os
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

class HydraulisError(RuntimeError): ...
class InvalidInputError(ValueError): ...
class InfeasibleError(ValueError): ...

class Profile:
    @property
    def model_name(self) -> str: ...

class Candidates:
    source: str
    def to_json(self) -> str: ...

class Pipeline:
    scheme: str
    capacity_tokens: int
    estimated_ms: float
    tokens: int
    micro_batches: list[npt.NDArray[np.int64]]
    micro_batch_tokens: npt.NDArray[np.int64]
    kept_lengths: list[npt.NDArray[np.int64]]
    cu_seqlens: list[npt.NDArray[np.int64]]
    max_seqlen: npt.NDArray[np.int64]
    cp: int
    cp_layouts: list[list[int | list[int]]]

class Plan:
    @property
    def strategy(self) -> str: ...
    @property
    def strategy_index(self) -> int: ...
    @property
    def algorithm(self) -> str: ...
    @property
    def estimated_step_ms(self) -> float: ...
    @property
    def lower_bound_ms(self) -> float: ...
    @property
    def planning_ms(self) -> float: ...
    @property
    def gap(self) -> float:
        """estimated_step_ms / lower_bound_ms - 1: at most this far from optimal."""
    @property
    def status(self) -> str:
        """"optimal", "within-gap" or "time-limit" (a solver stopped at its limit)."""
    @property
    def time_limited_solves(self) -> int:
        """Solver calls (published: CBC) that stopped at their time limit."""
    @property
    def lengths(self) -> npt.NDArray[np.int64]: ...
    @property
    def truncated(self) -> list[tuple[int, int, int]]: ...
    pipelines: list[Pipeline]
    def to_json(self, pretty: bool = False, include_timing: bool = False) -> str: ...

def load_profile(path_or_dict: Union[str, os.PathLike, dict]) -> Profile: ...
def load_candidates(path_or_dict: Union[str, os.PathLike, dict]) -> Candidates: ...

class Planner:
    def __init__(self, profile: Profile, candidates: Candidates, *, algorithm: str = "ours",
                 seed: int = 1, max_len: int = 32768, reject_overlong: bool = False,
                 backward_to_forward: float = 2.0, threads: int = 1,
                 prune_tolerance: float = 0.0, cp_layouts: str = "subsets") -> None: ...
    def plan(self, lengths: Union[Sequence[int], npt.NDArray[np.integer]]) -> Plan: ...

class LookaheadPlanner:
    waited_ms: float
    def __init__(self, planner: Planner,
                 batches: Iterable[Any],
                 depth: int = 2,
                 lengths_of: Optional[Callable[[Any], Union[Sequence[int], npt.NDArray[np.integer]]]] = None
                 ) -> None: ...
    @property
    def planned_ahead(self) -> int: ...
    def __iter__(self) -> Iterator[tuple[Any, Plan]]: ...
    def __next__(self) -> tuple[Any, Plan]: ...
    def close(self) -> None: ...
    def __enter__(self) -> "LookaheadPlanner": ...
    def __exit__(self, *exc: object) -> bool: ...

def read_lengths(path: Union[str, os.PathLike], *, format: str = "auto",
                 length_field: str = "length", text_field: str = "", counter: str = "bytes",
                 skip_empty: bool = False) -> npt.NDArray[np.int64]: ...

class BatchSampler:
    def __init__(self, dataset: Union[Sequence[int], npt.NDArray[np.integer]], *,
                 tokens_per_batch: int = 200000, max_len: int = 32768, seed: int = 1,
                 documents_per_batch: int = 0) -> None: ...
    def next(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
    @property
    def position(self) -> tuple[int, int]: ...
    def restore(self, position: tuple[int, int]) -> None: ...
    def __iter__(self) -> "BatchSampler": ...
    def __next__(self) -> npt.NDArray[np.int64]: ...

def propose(profile: Profile, lengths: Union[Sequence[int], npt.NDArray[np.integer]], *,
            gpus: int, max_len: int, resolution: int = 128,
            tokens_per_batch: int = 200000, max_strategies: int = 0,
            optimizer_layout: Union[tuple[int, int, int], None] = None,
            top_documents: int = 1) -> Candidates: ...
def select_candidates(profile: Profile, candidates: Candidates,
                      batches: Sequence[Union[Sequence[int], npt.NDArray[np.integer]]], *,
                      more: int, always: Sequence[int], max_len: int = 32768,
                      threads: int = 0) -> tuple[Candidates, list[int], list[float], list[float]]: ...


def simulate(profile: Profile, candidates: Candidates,
             dataset: Union[Sequence[int], npt.NDArray[np.integer]], *, system: str = "ours",
             steps: int = 1, tokens_per_batch: int = 200000, max_len: int = 32768,
             seed: int = 1, sync_aware: bool = True, communication: bool = True,
             overlap: bool = True, ddp_bucket_size: int = 40000000,
             backward_to_forward: float = 2.0) -> dict[str, Any]: ...
