"""Balanced steps inside a Hugging Face `transformers.Trainer` (docs/integrations.md,
"Hugging Face Trainer"). Needs torch, transformers and accelerate; `import hydraulis` alone
does not.

    from hydraulis.hf import BalancedTrainer
    trainer = BalancedTrainer(model=model, args=args, train_dataset=dataset,
                              profile=hydraulis.load_profile("profile.json"),
                              tokens_per_batch=65536, max_len=4096)
    trainer.train()

Each optimizer step draws one global batch of whole documents (about `tokens_per_batch`
tokens, the same on every rank), plans it over the data-parallel ranks under the profile's
cost model, and gives this rank its share as packed micro-batches (DataCollatorWithFlattening's
fields). A step holds as many micro-batches as the plan needs, the same count on every rank
(empty ones where a rank has fewer), so the step replaces Trainer's fixed gradient
accumulation: `gradient_accumulation_steps` must be 1 and `per_device_train_batch_size` is
not used. Every micro-batch's summed token loss is divided by the targets of the whole global
batch (Trainer's `num_items_in_batch`, known from the plan without a collective), so the
gradients are those of the global batch's mean loss, as one process would compute them.
"""
import contextlib
import time
import warnings

import numpy as np
import torch
import transformers

from . import InvalidInputError, Planner, StepCalibration, data_parallel_candidates
from .torch_data import PackedStepLoader, to_hf_inputs

__all__ = ["BalancedTrainer", "dataset_lengths"]


def _token_ids(example, field):
    """The token ids of one dataset example: a mapping's `field`, or the example itself."""
    if isinstance(example, dict) or hasattr(example, "keys"):
        if field not in example:
            raise InvalidInputError(
                f"train_dataset: an example has no {field!r} field (keys: {sorted(example.keys())})")
        return example[field]
    return example


class _TokenView:
    """dataset[i] as a sequence of token ids (what PackedStepLoader reads)."""

    def __init__(self, dataset, field):
        self._dataset = dataset
        self._field = field

    def __len__(self):
        return len(self._dataset)

    def __getitem__(self, i):
        return _token_ids(self._dataset[i], self._field)


def dataset_lengths(dataset, field="input_ids"):
    """The token count of every example of a map-style dataset (int64 array), read from
    `field` of each example. InvalidInputError naming the first empty example: a document
    needs at least one token."""
    view = _TokenView(dataset, field)
    lengths = np.fromiter((len(view[i]) for i in range(len(view))), dtype=np.int64,
                          count=len(view))
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        raise InvalidInputError(
            f"train_dataset: example {int(empty[0])} is empty ({empty.size} empty in all); "
            "drop empty documents before training")
    return lengths


class _PlannedSteps(torch.utils.data.IterableDataset):
    """One item per optimizer step: this rank's micro-batches as model keyword arguments,
    the global batch's target count, how many of the micro-batches are empty, the step's
    plan and index. `switch(planner, step)` plans that step and the later ones with another
    planner (a calibrated one); every rank switching at the same step keeps the ranks'
    plans the same."""

    def __init__(self, dataset, planner, *, rank, lengths, tokens_per_batch, max_len, seed,
                 depth, attn_implementation):
        self._loader_args = dict(pipeline=rank, tokens_per_batch=tokens_per_batch,
                                 max_len=max_len, seed=seed, depth=depth, lengths=lengths)
        self._dataset = dataset
        self._planner = planner
        self._attn = attn_implementation
        self._switches = []  # (step, planner), in the order adopted: steps ascending
        self._step = 0

    def switch(self, planner, step):
        self._switches.append((step, planner))

    def __iter__(self):
        loader = PackedStepLoader(self._dataset, self._planner, **self._loader_args)
        try:
            while True:
                # Fits adopted one step apart wait here together: each plans from its step.
                if self._switches and self._switches[0][0] <= self._step:
                    position = tuple(loader.state_dict()["position"])
                    loader.close()
                    self._planner = self._switches.pop(0)[1]
                    loader = PackedStepLoader(self._dataset, self._planner, position=position,
                                              **self._loader_args)
                step = next(loader)
                yield {"micro_batches": [to_hf_inputs(mb, self._attn)
                                         for mb in step.micro_batches],
                       "num_items_in_batch": step.num_targets,
                       "empty_micro_batches": step.empty_micro_batches,
                       "plan": step.plan, "step": self._step}
                self._step += 1
        finally:
            loader.close()


def _identity(item):
    return item


class _Clock:
    """Milliseconds since its creation; on a GPU after the queued work has finished (a
    synchronisation per reading: calibration's price there)."""

    def __init__(self, device):
        self._cuda = torch.device(device).type == "cuda"
        self._start = self._read()

    def _read(self):
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def now(self):
        return (self._read() - self._start) * 1000.0


class BalancedTrainer(transformers.Trainer):
    """A `transformers.Trainer` whose optimizer steps hydraulis plans (module docstring).

    Arguments beyond Trainer's (all keyword-only):
      profile: the cost model (hydraulis.load_profile) the ranks are balanced under; it must
        hold the single-GPU scheme (tp = pp = cp = 1) each data-parallel rank runs.
      tokens_per_batch: the global batch's token budget per optimizer step; max_len: the
        longest document kept (longer ones are cut to it, as the planner's rule says).
      input_field: the dataset field with the token ids (default "input_ids"); lengths:
        the documents' token counts when known (else read from the dataset once).
      lookahead: steps planned ahead on a background thread (default 2).
      planner_threads: threads each rank's planner uses (default 1).
      calibrate: refit the profile's time terms from the steps this run measures (default
        True), as `hydraulis train --calibrate` does: each rank times its micro-batches,
        the ranks share the times, and an adopted fit plans the steps from `lookahead` + 1
        after it on. `step_times` lists (step, predicted ms, measured ms, fit version);
        `fits_planning` lists (first step it plans, fit version) per adopted fit.

    The data order is seeded by `args.seed`; every rank draws and plans the same global
    batches and trains its own share. `args.max_steps` must be set: a step is a token
    budget, so an epoch's number of steps is not known before its batches are drawn. A
    resumed run fast-forwards by planning the steps it skips (they are the same steps).
    InvalidInputError naming the argument, before the first step, when the arguments
    contradict this (gradient accumulation, max_steps, an empty document, a model whose loss
    does not take `num_items_in_batch`).
    """

    def __init__(self, *args, profile, tokens_per_batch, max_len, input_field="input_ids",
                 lengths=None, lookahead=2, planner_threads=1, calibrate=True, **kwargs):
        super().__init__(*args, **kwargs)
        a = self.args
        if a.gradient_accumulation_steps != 1:
            raise InvalidInputError(
                f"gradient_accumulation_steps: must be 1, got {a.gradient_accumulation_steps}: "
                "each step's micro-batches come from the plan (as many as the step needs, the "
                "same count on every rank), which replaces a fixed accumulation count")
        if a.max_steps is None or a.max_steps <= 0:
            raise InvalidInputError(
                f"max_steps: must be set (> 0), got {a.max_steps}: a step is a token budget, so "
                "the number of steps in an epoch is not known ahead")
        if not self.model_accepts_loss_kwargs and self.compute_loss_func is None:
            raise InvalidInputError(
                f"model: {type(self.model).__name__}.forward takes no num_items_in_batch, so its "
                "loss is a mean per micro-batch, not per global batch; pass compute_loss_func")
        for name, value in (("tokens_per_batch", tokens_per_batch), ("max_len", max_len),
                            ("lookahead", lookahead), ("planner_threads", planner_threads)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidInputError(f"{name}: expected an integer >= 1, got {value!r}")
        if self.train_dataset is None:
            raise InvalidInputError("train_dataset: BalancedTrainer needs one")
        if a.fsdp and not self.is_fsdp_enabled:
            # accelerate (1.16) shards only on GPU-like devices; elsewhere it silently
            # trains a replica per rank under DDP.
            warnings.warn("fsdp: the Trainer's FSDP settings are ignored here: accelerate "
                          "enables FSDP only on GPU-like devices, so this run trains under DDP "
                          "(a whole replica per rank)", UserWarning, stacklevel=2)
        self._tokens = _TokenView(self.train_dataset, input_field)
        if lengths is None:
            lengths = dataset_lengths(self.train_dataset, input_field)
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.shape != (len(self._tokens),):
            raise InvalidInputError(
                f"lengths: expected one per example ({len(self._tokens)}), got shape "
                f"{lengths.shape}")
        self._lengths = lengths
        self._candidates = data_parallel_candidates(a.world_size)
        self._planner = Planner(profile, self._candidates, max_len=max_len,
                                threads=planner_threads)
        self._tokens_per_batch = tokens_per_batch
        self._max_len = max_len
        self._lookahead = lookahead
        self._planner_threads = planner_threads
        self.calibration = StepCalibration(profile, self._candidates) if calibrate else None
        self.step_times = []
        self.fits_planning = []
        self._steps = None

    def get_train_dataloader(self):
        """The planned steps, one item per optimizer step; not sharded by accelerate (every
        rank already takes only its own pipeline's micro-batches)."""
        model = self.accelerator.unwrap_model(self.model)
        attn = getattr(model.config, "_attn_implementation", None) or "eager"
        self._steps = _PlannedSteps(self._tokens, self._planner, rank=self.args.process_index,
                                    lengths=self._lengths,
                                    tokens_per_batch=self._tokens_per_batch,
                                    max_len=self._max_len, seed=self.args.seed,
                                    depth=self._lookahead, attn_implementation=attn)
        return torch.utils.data.DataLoader(self._steps, batch_size=None, collate_fn=_identity)

    def training_step(self, model, inputs, num_items_in_batch=None):
        """Forward and backward over this rank's micro-batches of the step, gradients
        synchronised only with the last; returns the summed loss (the global batch's mean
        loss after Trainer averages it over the ranks)."""
        model.train()
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        targets = inputs["num_items_in_batch"]
        micro_batches = inputs["micro_batches"]
        total = torch.zeros((), device=self.args.device)
        clock = _Clock(self.args.device)
        real = len(micro_batches) - inputs["empty_micro_batches"]
        times = []
        for i, mb in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            sync = contextlib.nullcontext() if last else self.accelerator.no_sync(model)
            with sync:
                mb = self._prepare_inputs(mb)
                start = clock.now()
                with self.compute_loss_context_manager():
                    loss = self.compute_loss(model, mb, num_items_in_batch=targets)
                # Trainer scales by the ranks itself only with average_tokens_across_devices;
                # the gradient reduction averages over them either way.
                if not self.args.average_tokens_across_devices:
                    loss = loss * self.accelerator.num_processes
                forward = clock.now()
                self.accelerator.backward(loss)
                if i < real:
                    # The last backward also waits for the gradient reduction (and for the
                    # slowest rank): its compute is taken as its forward times 1 + the
                    # backward-to-forward ratio the cost model assumes (2).
                    times.append((forward - start) * 3.0 if last else clock.now() - start)
            total += loss.detach()
        if self.calibration is not None:
            self._calibrate(inputs["plan"], inputs["step"], times, clock.now())
        return total

    def _calibrate(self, plan, step, times, step_ms):
        """Adds the step, as every rank measured it, to the calibration; on an adopted
        refit, plans the steps the look-ahead has not yet planned on it."""
        shared = [(times, step_ms)]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            shared = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(shared, (times, step_ms))
        stage_ms = [[list(t)] for t, _ in shared]
        measured = max(ms for _, ms in shared)
        predicted = self.calibration.predict_ms(plan)
        self.step_times.append((step, predicted, measured, self.calibration.version))
        if len(stage_ms) != len(plan.pipelines):
            return
        if self.calibration.add(plan, stage_ms, measured).adopted and self._steps is not None:
            planner = Planner(self.calibration.profile, self._candidates, max_len=self._max_len,
                              threads=self._planner_threads,
                              strategy_overhead_ms=self.calibration.overhead_ms)
            self._steps.switch(planner, step + 1 + self._lookahead)
            self.fits_planning.append((step + 1 + self._lookahead, self.calibration.version))

    def log(self, logs, *args, **kwargs):
        """Trainer's log, with the last step's predicted and measured time (ms) and the fit
        version when calibrating."""
        if self.step_times and "loss" in logs:
            _, predicted, measured, version = self.step_times[-1]
            logs = dict(logs, step_ms=round(measured, 1), predicted_step_ms=round(predicted, 1),
                        fit=version)
        return super().log(logs, *args, **kwargs)

    def _real_input_ids(self, inputs):
        real = inputs["micro_batches"][:len(inputs["micro_batches"]) -
                                       inputs["empty_micro_batches"]]
        if not real:
            return torch.zeros(0, dtype=torch.int64)
        return torch.cat([mb["input_ids"].reshape(-1) for mb in real])

    def _track_num_input_tokens(self, inputs):
        main = getattr(self.model, "main_input_name", "input_ids")
        super()._track_num_input_tokens({main: self._real_input_ids(inputs)})

    def floating_point_ops(self, inputs):
        """The model's estimate for the step's real tokens (its empty micro-batches left out)."""
        model = self.accelerator.unwrap_model(self.model)
        if not hasattr(model, "floating_point_ops"):
            return 0
        ids = self._real_input_ids(inputs)
        return model.floating_point_ops({"input_ids": ids[None]}) if ids.numel() else 0

