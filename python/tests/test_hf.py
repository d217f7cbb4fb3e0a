"""hydraulis.hf.BalancedTrainer: two DDP ranks of transformers' Trainer train like one
process on the same global batches, and arguments that contradict the planned steps are
refused before the first step."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import hydraulis  # noqa: E402
from hydraulis.hf import BalancedTrainer, dataset_lengths  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILE = os.path.join(ROOT, "configs/profiles/tiny-cpu.json")


def test_two_ranks_train_like_one_process():
    # The example fails (exit 1) unless the per-step losses and the final parameters equal
    # one process's within 1e-5, with clipping active on every step. A profile 3x too slow
    # makes the first refit win on a loaded machine too, so later steps plan on a new fit.
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples/hf_trainer_training.py"),
                          "--steps", "14", "--profile-scale", "3"], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("BalancedTrainer")][-1]
    uneven = int(line.split("uneven steps: ")[1].split(" of ")[0])
    # The point of the check: steps whose ranks hold different numbers of micro-batches,
    # and steps planned on a fit calibrated during the run (the ranks' plans stay equal).
    assert uneven >= 1, line
    assert "ranks' plans equal" in line, line
    switched = line.split("calibrated fits planned from steps [")[1].split("]")[0]
    assert switched.strip(), line


def tiny_model():
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1, max_position_embeddings=256)
    return transformers.LlamaForCausalLM(config)


def make(tmp_path, dataset=None, **overrides):
    args = dict(output_dir=str(tmp_path), max_steps=2, report_to=[], use_cpu=True,
                save_strategy="no", disable_tqdm=True)
    trainer_kw = {k: overrides.pop(k) for k in list(overrides)
                  if k in ("tokens_per_batch", "max_len", "lengths", "input_field")}
    args.update(overrides)
    kw = dict(tokens_per_batch=512, max_len=128) | trainer_kw
    return BalancedTrainer(model=tiny_model(), args=transformers.TrainingArguments(**args),
                           train_dataset=dataset or [{"input_ids": [1, 2, 3]}] * 40,
                           profile=hydraulis.load_profile(PROFILE), **kw)


@pytest.mark.parametrize("overrides, named", [
    (dict(gradient_accumulation_steps=4), "gradient_accumulation_steps"),
    (dict(max_steps=-1), "max_steps"),
    (dict(tokens_per_batch=0), "tokens_per_batch"),
    (dict(max_len=2.5), "max_len"),
    (dict(lengths=[3, 3]), "lengths"),
    (dict(input_field="tokens"), "'tokens'"),
])
def test_contradicting_arguments_are_refused_by_name(tmp_path, overrides, named):
    with pytest.raises(hydraulis.InvalidInputError, match=named):
        make(tmp_path, **overrides)


def test_fsdp_settings_accelerate_ignores_are_named(tmp_path):
    # On the CPU accelerate trains under DDP whatever `fsdp` says; the user hears of it.
    # Trainer takes fsdp only when distributed: one gloo rank, in its own process.
    script = f"""
import os, warnings, sys
os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT="{free_port()}")
sys.path.insert(0, {os.path.dirname(__file__)!r})
from test_hf import make
import pathlib
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    make(pathlib.Path({str(tmp_path)!r}), fsdp="full_shard")
print("\\n".join(str(w.message) for w in caught))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fsdp: the Trainer's FSDP settings are ignored here" in out.stdout, out.stdout


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_empty_document_is_named():
    with pytest.raises(hydraulis.InvalidInputError, match="example 1 is empty"):
        dataset_lengths([{"input_ids": [5]}, {"input_ids": []}])


def test_one_process_trains_every_document_of_its_steps(tmp_path):
    # One rank: each step's items are every micro-batch of the plan, and the targets it
    # divides by are the step's real tokens minus one per document.
    rng = torch.Generator().manual_seed(1)
    data = [{"input_ids": torch.randint(0, 64, (int(n),), generator=rng).tolist()}
            for n in torch.randint(2, 100, (60,), generator=rng)]
    trainer = make(tmp_path, data, tokens_per_batch=600, max_len=64)
    steps = iter(trainer.get_train_dataloader())
    for _ in range(3):
        step = next(steps)
        real = step["micro_batches"][:len(step["micro_batches"]) - step["empty_micro_batches"]]
        labels = torch.cat([mb["labels"].reshape(-1) for mb in real])
        assert step["empty_micro_batches"] == 0
        assert int((labels != -100).sum()) == step["num_items_in_batch"]


def test_a_resumed_run_continues_with_the_same_steps(tmp_path):
    # 6 steps straight against 3, a checkpoint, and a resume for the other 3: the Trainer
    # fast-forwards past the planned steps it trained, so the losses are bit for bit the same.
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from hf_trainer_training import PROFILE as EXAMPLE_PROFILE, documents, tiny_llama

    def run(out, save_steps=None, resume=None):
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / out), max_steps=6, learning_rate=1e-3,
            lr_scheduler_type="linear", optim="adamw_torch", logging_steps=1,
            save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
            report_to=[], use_cpu=True, seed=3, disable_tqdm=True)
        # A fixed profile: with calibration the resumed run would plan from the profile
        # again (the fit is not kept with Trainer's checkpoint), the same data in other
        # micro-batches, equal within rounding but not bit for bit.
        trainer = BalancedTrainer(model=tiny_llama(), args=args, train_dataset=documents(),
                                  profile=hydraulis.load_profile(EXAMPLE_PROFILE),
                                  tokens_per_batch=4000, max_len=1024, calibrate=False)
        trainer.train(resume_from_checkpoint=resume)
        return [h["loss"] for h in trainer.state.log_history if "loss" in h]

    straight = run("straight")
    assert run("saved", save_steps=3) == straight
    assert run("resumed", resume=str(tmp_path / "saved" / "checkpoint-3")) == straight
