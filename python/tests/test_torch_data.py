"""PyTorch data loading from plans: the fields of Hugging Face's flattening
collator, every document of a step packed once across the pipelines, resumable, and the
example training loop."""
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hydraulis  # noqa: E402
from hydraulis.torch_data import PackedStepLoader, collate_packed, step_micro_batches  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_collate_equals_transformers_flattening_collator():
    reference = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True,
                                                        return_position_ids=True)
    rng = np.random.default_rng(3)
    for _ in range(50):
        docs = [rng.integers(0, 1000, size=rng.integers(1, 40)).tolist()
                for _ in range(rng.integers(1, 6))]
        ours = collate_packed(docs)
        theirs = reference([{"input_ids": d} for d in docs])
        assert set(ours) == set(theirs)
        for key, value in theirs.items():
            if isinstance(value, torch.Tensor):
                assert ours[key].dtype == value.dtype, key
                assert torch.equal(ours[key], value), key
            else:
                assert ours[key] == value, key
    with pytest.raises(ValueError):
        collate_packed([[1, 2], []])


@pytest.fixture(scope="module")
def planner():
    return hydraulis.Planner(
        hydraulis.load_profile(os.path.join(ROOT, "configs/profiles/tiny-cpu.json")),
        hydraulis.load_candidates(os.path.join(ROOT, "configs/candidates/cpu-2rank.json")),
        max_len=1024)


@pytest.fixture(scope="module")
def dataset():
    lengths = np.loadtxt(os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt"),
                         dtype=np.int64)[:400]
    rng = np.random.default_rng(1)
    return [rng.integers(0, 256, size=int(n)) for n in lengths]


def test_every_document_packed_once_per_step(planner, dataset):
    with PackedStepLoader(dataset, planner, pipeline=0, tokens_per_batch=6000, max_len=1024,
                          seed=2) as loader:
        for _, step in zip(range(6), loader):
            plan = step.plan
            seen = []
            for p in range(len(plan.pipelines)):
                mbs = step_micro_batches(plan, p, dataset, step.dataset_indices)
                assert len(mbs) == len(plan.pipelines[p].micro_batches)
                for mb, docs, cu in zip(mbs, plan.pipelines[p].micro_batches,
                                        plan.pipelines[p].cu_seqlens):
                    assert mb["input_ids"].shape[1] <= plan.pipelines[p].capacity_tokens
                    assert mb["cu_seq_lens_q"].tolist() == cu.tolist()
                    for k, d in enumerate(docs):
                        want = dataset[int(step.dataset_indices[d])][:int(plan.lengths[d])]
                        assert mb["input_ids"][0, cu[k]:cu[k + 1]].tolist() == want.tolist()
                    seen.extend(docs.tolist())
            assert sorted(seen) == list(range(len(plan.lengths)))
            assert step.num_targets == int((plan.lengths - 1).sum())
            assert len(step.micro_batches) == len(plan.pipelines[0].micro_batches)
    with pytest.raises(ValueError, match="pipeline"):
        PackedStepLoader(dataset, planner, pipeline=-1)


def test_ranks_agree_and_a_run_resumes(planner, dataset):
    def run(pipeline, position=None, steps=4):
        with PackedStepLoader(dataset, planner, pipeline=pipeline, tokens_per_batch=6000,
                              max_len=1024, seed=4, position=position) as loader:
            return [s for _, s in zip(range(steps), loader)]

    rank0, rank1 = run(0), run(1)
    assert [s.plan.to_json() for s in rank0] == [s.plan.to_json() for s in rank1]
    resumed = run(0, position=rank0[1].next_position, steps=2)
    assert [s.plan.to_json() for s in resumed] == [s.plan.to_json() for s in rank0[2:]]


def test_example_training_loop_runs():
    run = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "torch_packed_training.py"),
                          "--steps", "3"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "worst difference" in run.stdout and "step 2:" in run.stdout
