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
from hydraulis.torch_data import (PackedStepLoader, collate_packed, empty_micro_batch,  # noqa: E402
                                  step_micro_batches, to_hf_inputs)

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
            most = max(len(p.micro_batches) for p in plan.pipelines)
            assert len(step.micro_batches) == most
            assert len(step.micro_batches) - step.empty_micro_batches == len(plan.pipelines[0].micro_batches)
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


def test_state_dict_resumes_mid_epoch_like_a_torchtitan_loader(planner, dataset):
    # torchtitan's checkpointer pickles state_dict() and hands it to load_state_dict() of a
    # fresh loader (or one that already ran): the next steps must be the same.
    import pickle
    kw = dict(tokens_per_batch=6000, max_len=1024, seed=5)
    with PackedStepLoader(dataset, planner, pipeline=0, **kw) as first:
        for _, _step in zip(range(3), first):
            pass
        saved = pickle.loads(pickle.dumps(first.state_dict()))
        expected = [next(first) for _ in range(2)]
    with PackedStepLoader(dataset, planner, pipeline=1, **kw) as other:
        for _, _step in zip(range(5), other):   # planned ahead past the saved position
            pass
        other.load_state_dict(saved)
        resumed = [next(other) for _ in range(2)]
        assert other.state_dict() == {"position": list(expected[-1].next_position)}
    assert [s.plan.to_json() for s in resumed] == [s.plan.to_json() for s in expected]
    assert all(np.array_equal(a.dataset_indices, b.dataset_indices)
               for a, b in zip(resumed, expected))
    # The resumed rank gets its own pipeline's share of those steps.
    for a, b in zip(resumed, expected):
        theirs = step_micro_batches(b.plan, 1, dataset, b.dataset_indices)
        assert all(torch.equal(x["input_ids"], y["input_ids"])
                   for x, y in zip(a.micro_batches, theirs))
        assert len(a.micro_batches) - a.empty_micro_batches == len(theirs)
    with PackedStepLoader(dataset, planner, pipeline=0, **kw) as loader:
        for bad in ({}, {"position": [1]}, {"position": [0, -1]}, {"position": ["0", 1]}, None):
            with pytest.raises(hydraulis.InvalidInputError, match="position"):
                loader.load_state_dict(bad)


def test_a_rank_beyond_the_plans_pipelines_is_refused(planner, dataset):
    # Candidates for fewer ranks than the loop has: the extra rank would silently train
    # only empty micro-batches.
    with PackedStepLoader(dataset, planner, pipeline=2, tokens_per_batch=6000,
                          max_len=1024) as loader:
        with pytest.raises(hydraulis.InvalidInputError, match="pipeline: 2.*world_size"):
            next(loader)


def test_example_training_loop_runs():
    run = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "torch_packed_training.py"),
                          "--steps", "3"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "worst difference" in run.stdout and "step 2:" in run.stdout


def tiny_llama(impl):
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=512)
    config._attn_implementation = impl
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("mask", ["auto", "position_ids", "4d"])
def test_to_hf_inputs_keeps_documents_apart(impl, mask):
    model = tiny_llama(impl)
    rng = np.random.default_rng(5)
    for _ in range(3):
        docs = [rng.integers(0, 128, size=rng.integers(1, 30)).tolist()
                for _ in range(rng.integers(2, 6))]
        mb = collate_packed(docs)
        with torch.no_grad():
            alone = torch.cat([model(input_ids=torch.tensor([d]), use_cache=False).logits[0]
                               for d in docs])
            packed = model(**to_hf_inputs(mb, impl, mask=mask)).logits[0]
            naive = model(**to_hf_inputs(mb, "flash_attention_2")).logits[0]
        assert (packed - alone).abs().max().item() < 1e-5
        # What the flattening collator's fields alone do on sdpa and eager: documents mix.
        assert (naive - alone).abs().max().item() > 1e-3


def test_to_hf_inputs_rejects_bad_arguments():
    mb = collate_packed([[1, 2, 3]])
    with pytest.raises(hydraulis.InvalidInputError, match="mask: expected"):
        to_hf_inputs(mb, "sdpa", mask="2d")
    with pytest.raises(hydraulis.InvalidInputError, match="attn_implementation"):
        to_hf_inputs(mb, None)


def test_empty_micro_batches_give_every_rank_as_many_and_cost_no_loss():
    # Two data-parallel pipelines and documents of up to 1,024 tokens in 4,000-token batches:
    # most steps give one pipeline a micro-batch more than the other.
    planner = hydraulis.Planner(
        hydraulis.load_profile(os.path.join(ROOT, "configs/profiles/tiny-cpu.json")),
        hydraulis.data_parallel_candidates(2), max_len=1024)
    lengths = np.loadtxt(os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt"),
                         dtype=np.int64)[:300]
    rng = np.random.default_rng(7)
    dataset = [rng.integers(0, 128, size=int(n) // 2 + 2) for n in lengths]

    def run(pipeline):
        with PackedStepLoader(dataset, planner, pipeline=pipeline, tokens_per_batch=4000,
                              max_len=1024, seed=3) as loader:
            return [s for _, s in zip(range(8), loader)]

    ranks = [run(0), run(1)]
    padded = 0
    for step0, step1 in zip(*ranks):
        assert len(step0.micro_batches) == len(step1.micro_batches)
        padded += step0.empty_micro_batches + step1.empty_micro_batches
        for step in (step0, step1):
            for mb in step.micro_batches[len(step.micro_batches) - step.empty_micro_batches:]:
                assert mb["labels"].tolist() == [[-100]]
    assert padded > 0, "no step split unevenly: the case does not test the padding"
    model = tiny_llama("sdpa")
    out = model(**to_hf_inputs(empty_micro_batch(), "sdpa"))
    logits = out.logits[0, :-1]
    labels = empty_micro_batch()["labels"][0, 1:]
    assert torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item() == 0


@pytest.mark.parametrize("wrap", ["ddp", "fsdp2"])
def test_two_data_parallel_ranks_with_uneven_splits_train_like_one_process(wrap):
    """examples/data_parallel_packed_training.py: two gloo ranks, DDP or FSDP2 with the
    gradient synchronisation off until each step's last micro-batch; steps whose pipelines
    hold different numbers of micro-batches neither hang nor change the result (the example
    exits 1 past 1e-5 from one process)."""
    run = subprocess.run([sys.executable,
                          os.path.join(ROOT, "examples", "data_parallel_packed_training.py"),
                          "--wrap", wrap], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    uneven = int(run.stdout.split("uneven steps: ")[1].split(" ")[0])
    assert uneven > 0, "no step split unevenly: the case does not test the padding"
