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


class StepBatches:
    """What one rank trains in one step.

    micro_batches: this rank's packed micro-batches in execution order (collate_packed dicts),
      empty when the step's strategy leaves its pipeline out (`pipeline` >= its pipelines).
    num_targets: targets (tokens after each document's first) of the whole global batch.
    plan: the step's Plan; dataset_indices: the dataset index of each of its documents.
    next_position: the sampler position after this step's batch; a loader started with it
      continues with the next step (save it with a checkpoint)."""

    def __init__(self, plan, micro_batches, num_targets, dataset_indices, next_position):
        self.plan = plan
        self.micro_batches = micro_batches
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
    `position` (from a StepBatches.next_position) resumes a run where it stopped."""

    def __init__(self, dataset, planner, *, pipeline, tokens_per_batch=200_000, max_len=32_768,
                 seed=1, depth=2, lengths=None, position=None):
        if not isinstance(pipeline, int) or isinstance(pipeline, bool) or pipeline < 0:
            raise InvalidInputError(f"pipeline: must be an integer >= 0, got {pipeline!r}")
        self._dataset = dataset
        self._pipeline = pipeline
        if lengths is None:
            lengths = np.fromiter((len(dataset[i]) for i in range(len(dataset))), dtype=np.int64,
                                  count=len(dataset))
        self._sampler = BatchSampler(lengths, tokens_per_batch=tokens_per_batch,
                                     max_len=max_len, seed=seed)
        if position is not None:
            self._sampler.restore(position)
        self._plans = LookaheadPlanner(planner, self._draw(), depth=depth,
                                       lengths_of=lambda item: item[0])
        self.waited_ms = 0.0

    def _draw(self):
        while True:
            lengths, indices = self._sampler.next()
            yield lengths, indices, self._sampler.position

    def __iter__(self):
        return self

    def __next__(self):
        (lengths, indices, position), plan = next(self._plans)
        self.waited_ms = self._plans.waited_ms
        num_targets = int((plan.lengths - 1).sum())
        return StepBatches(plan, step_micro_batches(plan, self._pipeline, self._dataset, indices),
                           num_targets, indices, position)

    def close(self):
        self._plans.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
