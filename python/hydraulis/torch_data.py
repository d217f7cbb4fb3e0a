"""Packed micro-batches for PyTorch training loops from hydraulis plans (docs/python.md,
"PyTorch data loading"). Needs torch; `import hydraulis` alone does not.

Each step, a seeded sampler draws a global batch of documents from a map-style dataset of
token sequences, the planner assigns them to the candidate strategy's pipelines and
micro-batches, and this rank (running pipeline `pipeline`) gets its micro-batches packed
the way Hugging Face's `DataCollatorWithFlattening(return_flash_attn_kwargs=True,
return_position_ids=True)` packs them: one row of concatenated documents, labels with the
first token of each document masked, position ids restarting at each document, and the
cumulative lengths variable-length attention takes. The step also carries the number of
targets in the whole global batch, so that summing each micro-batch's token losses and
dividing by it gives the global mean loss on every rank alike.

Every rank gets the same number of micro-batches each step (`equal_micro_batches`): a rank
whose pipeline has fewer gets empty micro-batches (one ignored token each), so loops that run a fixed
number of forward/backward passes under DDP or FSDP (gradient accumulation, `no_sync`)
never wait on a collective another rank does not join. `to_hf_inputs` turns a micro-batch
into what a transformers model's attention implementation needs to keep documents apart.
"""
import numpy as np

from . import BatchSampler, InvalidInputError, LookaheadPlanner

IGNORE_INDEX = -100


def collate_packed(sequences):
    """One packed micro-batch of `sequences` (each a 1-D sequence of token ids, at least 1
    long): the fields and dtypes of DataCollatorWithFlattening(return_flash_attn_kwargs=True,
    return_position_ids=True): input_ids, labels, position_ids ([1, tokens] int64 tensors),
    cu_seq_lens_q/k (int32 tensors [documents + 1]) and max_length_q/k (ints)."""
    import torch
    if len(sequences) == 0:
        raise InvalidInputError("collate_packed: no sequences")
    arrays = [np.asarray(s, dtype=np.int64).reshape(-1) for s in sequences]
    for i, a in enumerate(arrays):
        if a.size == 0:
            raise InvalidInputError(f"collate_packed: sequence {i} is empty")
    ids = np.concatenate(arrays)
    labels = ids.copy()
    lengths = np.array([a.size for a in arrays], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    labels[starts] = IGNORE_INDEX
    positions = np.arange(ids.size, dtype=np.int64) - np.repeat(starts, lengths)
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)
    longest = int(lengths.max())
    return {
        "input_ids": torch.from_numpy(ids).unsqueeze(0),
        "labels": torch.from_numpy(labels).unsqueeze(0),
        "position_ids": torch.from_numpy(positions).unsqueeze(0),
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu.clone(),
        "max_length_q": longest,
        "max_length_k": longest,
    }


def empty_micro_batch():
    """An empty micro-batch: one token (id 0) whose label is ignored, in
    collate_packed's fields. Its summed loss is 0, so its backward adds nothing to the
    gradients, while the rank still joins every collective its peers run."""
    return collate_packed([[0]]) | {"labels": _ignored_labels()}


def _ignored_labels():
    import torch
    return torch.full((1, 1), IGNORE_INDEX, dtype=torch.int64)


_FLASH_KEYS = ("input_ids", "labels", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k",
               "max_length_q", "max_length_k")


def _transformers_detects_packing():
    """Whether the installed transformers builds a block-causal mask from position ids that
    restart (masking_utils.find_packed_sequence_indices, used when there is no cache)."""
    try:
        from transformers import masking_utils
    except ImportError:
        return False
    return hasattr(masking_utils, "find_packed_sequence_indices")


def to_hf_inputs(micro_batch, attn_implementation, *, mask="auto", dtype=None):
    """Keyword arguments for a transformers causal LM (`model(**to_hf_inputs(mb, impl))`)
    that keep the packed documents of `micro_batch` (a collate_packed dict) apart under
    attention implementation `attn_implementation` (the model's
    `config._attn_implementation`):

    - "flash_attention_2" / "flash_attention_3" (any "flash..."): input_ids, labels,
      position_ids and the cu_seq_lens/max_length kwargs, as DataCollatorWithFlattening
      gives them (flash attention reads the boundaries from them).
    - anything else ("sdpa", "eager", ...): input_ids, labels, position_ids and
      use_cache=False, and with mask="4d" (or mask="auto" on a transformers that does not
      detect packed position ids) a 4-D block-causal additive mask [1, 1, T, T] of `dtype`
      (default float32; 0 where a token may attend, the dtype's minimum elsewhere; T^2
      values, so for long rows prefer a transformers that detects packing). sdpa and eager
      given only the flash kwargs attend across documents silently: their logits differ
      from each document's alone.
    """
    import torch
    if mask not in ("auto", "4d", "position_ids"):
        raise InvalidInputError(f"mask: expected 'auto', '4d' or 'position_ids', got {mask!r}")
    if not isinstance(attn_implementation, str):
        raise InvalidInputError(
            f"attn_implementation: expected a string such as 'sdpa', got {attn_implementation!r}")
    if attn_implementation.startswith("flash"):
        return {k: micro_batch[k] for k in _FLASH_KEYS}
    out = {k: micro_batch[k] for k in ("input_ids", "labels", "position_ids")}
    out["use_cache"] = False
    if mask == "4d" or (mask == "auto" and not _transformers_detects_packing()):
        cu = micro_batch["cu_seq_lens_q"].long()
        t = int(cu[-1])
        doc = torch.repeat_interleave(torch.arange(len(cu) - 1), torch.diff(cu))
        keep = (doc[:, None] == doc[None, :]) & torch.ones(t, t, dtype=torch.bool).tril()
        dtype = dtype or torch.float32
        out["attention_mask"] = torch.zeros(1, 1, t, t, dtype=dtype).masked_fill(
            ~keep, torch.finfo(dtype).min)
    return out


class StepBatches:
    """What one rank trains in one step.

    micro_batches: this rank's packed micro-batches in execution order (collate_packed dicts);
      with equal_micro_batches, as many on every rank (the most any pipeline of the step
      has), the last `empty_micro_batches` of them empty_micro_batch()s.
    num_targets: targets (tokens after each document's first) of the whole global batch.
    plan: the step's Plan; dataset_indices: the dataset index of each of its documents.
    next_position: the sampler position after this step's batch; a loader started with it
      continues with the next step (save it with a checkpoint)."""

    def __init__(self, plan, micro_batches, num_targets, dataset_indices, next_position,
                 empty_micro_batches=0):
        self.plan = plan
        self.micro_batches = micro_batches
        self.empty_micro_batches = empty_micro_batches
        self.num_targets = num_targets
        self.dataset_indices = dataset_indices
        self.next_position = next_position


def step_micro_batches(plan, pipeline, dataset, dataset_indices):
    """Pipeline `pipeline`'s micro-batches of `plan`, packed: document d of the plan is
    dataset[dataset_indices[d]] cut to plan.lengths[d] (the sampler's max_len cut and the
    planner's long-document rule)."""
    if pipeline >= len(plan.pipelines):
        return []
    # The layout the runtime packs by (documents in order, each cut to what the plan keeps).
    p = plan.pipelines[pipeline]
    out = []
    for docs, kept in zip(p.micro_batches, p.kept_lengths):
        out.append(collate_packed([
            np.asarray(dataset[int(dataset_indices[d])], dtype=np.int64)[:int(k)]
            for d, k in zip(docs, kept)]))
    return out


class PackedStepLoader:
    """Iterates this rank's StepBatches, step after step (the sampler runs across epochs):

        loader = PackedStepLoader(dataset, planner, pipeline=rank, tokens_per_batch=65536,
                                  max_len=4096, seed=1)
        for step, batches in zip(range(steps), loader):
            for mb in batches.micro_batches:
                loss_sum = model_loss_sum(mb)        # summed over mb's targets
                (loss_sum / batches.num_targets).backward()

    dataset: map-style, dataset[i] a sequence of token ids; `lengths` (its documents'
    lengths) is read from it when not given. Every rank must use the same planner inputs,
    sampler options and seed: they then plan the same steps (planning is deterministic)
    and each takes its own pipeline's share. Plans are made `depth` steps ahead on a
    thread (LookaheadPlanner); `waited_ms` is how long the last step waited for its plan.
    `position` (from a StepBatches.next_position) resumes a run where it stopped;
    state_dict()/load_state_dict() do the same in torchtitan's checkpointing protocol.
    `equal_micro_batches` (default True) pads every rank's micro-batches to the most any
    pipeline of the step has, with empty_micro_batch()s, so every rank runs as
    many forward/backward passes; False gives each rank exactly its pipeline's. A step
    whose plan has no pipeline `pipeline` raises InvalidInputError (the rank would train
    nothing: candidates for fewer pipelines than the loop's ranks)."""

    def __init__(self, dataset, planner, *, pipeline, tokens_per_batch=200_000, max_len=32_768,
                 seed=1, depth=2, lengths=None, position=None, equal_micro_batches=True):
        if not isinstance(pipeline, int) or isinstance(pipeline, bool) or pipeline < 0:
            raise InvalidInputError(f"pipeline: must be an integer >= 0, got {pipeline!r}")
        self._dataset = dataset
        self._pipeline = pipeline
        self._equal = bool(equal_micro_batches)
        if lengths is None:
            lengths = np.fromiter((len(dataset[i]) for i in range(len(dataset))), dtype=np.int64,
                                  count=len(dataset))
        self._sampler = BatchSampler(lengths, tokens_per_batch=tokens_per_batch,
                                     max_len=max_len, seed=seed)
        if position is not None:
            self._sampler.restore(position)
        self._planner = planner
        self._depth = depth
        self._position = self._sampler.position
        self._plans = self._plan_ahead()
        self.waited_ms = 0.0

    def _plan_ahead(self):
        return LookaheadPlanner(self._planner, self._draw(), depth=self._depth,
                                lengths_of=lambda item: item[0])

    def _draw(self):
        while True:
            lengths, indices = self._sampler.next()
            yield lengths, indices, self._sampler.position

    def __iter__(self):
        return self

    def __next__(self):
        (lengths, indices, position), plan = next(self._plans)
        self.waited_ms = self._plans.waited_ms
        self._position = position
        if self._pipeline >= len(plan.pipelines):
            self.close()
            raise InvalidInputError(
                f"pipeline: {self._pipeline}, but the step's plan ({plan.strategy}) has "
                f"{len(plan.pipelines)} pipeline(s): this rank would train nothing (for a "
                "data-parallel loop, plan on data_parallel_candidates(world_size))")
        num_targets = int((plan.lengths - 1).sum())
        mbs = step_micro_batches(plan, self._pipeline, self._dataset, indices)
        empty = 0
        if self._equal:
            most = max(len(p.micro_batches) for p in plan.pipelines)
            empty = most - len(mbs)
            mbs += [empty_micro_batch() for _ in range(empty)]
        return StepBatches(plan, mbs, num_targets, indices, position, empty)

    def state_dict(self):
        """Where the next step starts (the sampler position after the last step given), as
        torchtitan's checkpointer saves a data loader (its Stateful protocol): the same on
        every rank, so one rank's state resumes any rank, and a resumed loader gives the
        same next step as this one would."""
        epoch, index = self._position
        return {"position": [int(epoch), int(index)]}

    def load_state_dict(self, state):
        """Continues from a state_dict(): plans already made ahead are dropped and the next
        step is the one after the saved position. InvalidInputError naming the field when
        `state` is not such a dict."""
        position = state.get("position") if isinstance(state, dict) else None
        if (not isinstance(position, (list, tuple)) or len(position) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                           for v in position)):
            raise InvalidInputError(
                f"state_dict: position: expected [epoch, index] of integers >= 0, got {position!r}")
        self._plans.close()
        self._sampler.restore(tuple(position))
        self._position = self._sampler.position
        self._plans = self._plan_ahead()

    def close(self):
        """Stops planning ahead (joins the look-ahead thread); leaving a `with` block does it."""
        self._plans.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
