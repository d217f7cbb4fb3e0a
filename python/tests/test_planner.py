"""The Python planner against the CLI and against bad input.

Run by ctest (python_tests) with HYDRAULIS_BIN pointing at the CLI; the package must be
installed into the interpreter (scripts/install-python-package.sh).
"""
import json
import os
import random
import subprocess
import threading

import numpy as np
import pytest

import hydraulis

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("HYDRAULIS_BIN", os.path.join(ROOT, "build", "release", "tools", "hydraulis"))
PROFILE = os.path.join(ROOT, "configs", "profiles", "llama-32b-a800.json")
CANDIDATES = os.path.join(ROOT, "configs", "candidates", "llama-32b-64gpu.json")
WIKIPEDIA = os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt")


@pytest.fixture(scope="module")
def lengths():
    return np.loadtxt(WIKIPEDIA, dtype=np.int64)


@pytest.fixture(scope="module")
def planner():
    return hydraulis.Planner(hydraulis.load_profile(PROFILE), hydraulis.load_candidates(CANDIDATES))


def cli_plan(tmp_path, batch, *extra):
    path = tmp_path / "batch.txt"
    path.write_text("".join(f"{n}\n" for n in batch))
    run = subprocess.run([BIN, "plan", "--profile", PROFILE, "--candidates", CANDIDATES,
                          "--lengths", str(path), "--no-timing", *extra],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.parametrize("algorithm", ["ours", "static-fixed", "kk"])
@pytest.mark.parametrize("start,size", [(0, 300), (5000, 2000), (15000, 40)])
def test_to_json_is_byte_identical_to_the_cli(tmp_path, lengths, algorithm, start, size):
    batch = lengths[start:start + size]
    planner = hydraulis.Planner(hydraulis.load_profile(PROFILE),
                                hydraulis.load_candidates(CANDIDATES), algorithm=algorithm,
                                max_len=16384)
    plan = planner.plan(batch)
    assert plan.to_json() == cli_plan(tmp_path, batch, "--algorithm", algorithm, "--max-len",
                                      "16384")
    assert plan.algorithm == algorithm


def test_status_and_gap_agree_with_the_json(planner, lengths):
    for batch in (lengths[:300], lengths[2000:2001]):
        plan = planner.plan(batch)
        record = json.loads(plan.to_json())
        assert plan.status == record["status"]
        assert plan.time_limited_solves == record["time_limited_solves"] == 0
        assert plan.gap == pytest.approx(record["gap"], rel=1e-12, abs=1e-15)
        assert plan.gap >= 0
    # One document alone on the fastest candidate meets the bound.
    assert planner.plan([5000]).status == "optimal"


def test_unknown_algorithm_names_the_keyword_not_a_flag():
    with pytest.raises(hydraulis.InvalidInputError, match=r"^algorithm: expected ours, static-fixed, "
                                         r"published or kk, got 'fastest'$"):
        hydraulis.Planner(hydraulis.load_profile(PROFILE), hydraulis.load_candidates(CANDIDATES),
                          algorithm="fastest")


def test_plan_arrays_cover_every_document_once(planner, lengths):
    batch = lengths[:1500]
    plan = planner.plan(batch)
    seen = []
    for pipeline in plan.pipelines:
        assert len(pipeline.micro_batches) == len(pipeline.cu_seqlens)
        assert len(pipeline.micro_batches) == len(pipeline.kept_lengths)
        for docs, kept, cu, tokens, longest in zip(pipeline.micro_batches, pipeline.kept_lengths,
                                                   pipeline.cu_seqlens, pipeline.micro_batch_tokens,
                                                   pipeline.max_seqlen):
            assert docs.dtype == np.int64 and cu.dtype == np.int64
            assert np.array_equal(kept, plan.lengths[docs])
            assert cu[0] == 0 and np.array_equal(np.diff(cu), plan.lengths[docs])
            assert cu[-1] == tokens and longest == plan.lengths[docs].max()
            assert tokens <= pipeline.capacity_tokens
            seen.extend(docs.tolist())
        assert pipeline.tokens == sum(pipeline.micro_batch_tokens)
    assert sorted(seen) == list(range(len(batch)))
    assert plan.lower_bound_ms <= plan.estimated_step_ms
    assert plan.strategy == json.loads(plan.to_json())["strategy"]["name"]


def test_dicts_load_like_files(planner, lengths):
    with open(PROFILE) as f:
        profile = json.load(f)
    with open(CANDIDATES) as f:
        candidates = json.load(f)
    from_dicts = hydraulis.Planner(hydraulis.load_profile(profile),
                                   hydraulis.load_candidates(candidates))
    batch = lengths[:700]
    assert from_dicts.plan(batch).to_json() == planner.plan(batch).to_json()
    assert planner.plan(batch.tolist()).to_json() == planner.plan(batch).to_json()
    assert planner.plan(batch.astype(np.int32)).to_json() == planner.plan(batch).to_json()


def test_threads_plan_what_one_thread_plans(planner, lengths):
    batches = [lengths[i * 400:(i + 1) * 400] for i in range(8)]
    expected = [planner.plan(b).to_json() for b in batches]
    got = [None] * len(batches)

    def work(i):
        got[i] = planner.plan(batches[i]).to_json()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected


def test_plans_are_the_same_on_any_thread_count(tmp_path, lengths):
    # 8,000 documents on the 64-GPU candidates: enough pipeline-document pairs (>= 2^16)
    # for the planner to use its threads.
    batch = lengths[:8000]
    plans = [hydraulis.Planner(hydraulis.load_profile(PROFILE),
                               hydraulis.load_candidates(CANDIDATES), threads=t).plan(batch)
             for t in (1, 2, 0)]
    assert plans[0].to_json() == plans[1].to_json() == plans[2].to_json()
    assert plans[0].to_json() == cli_plan(tmp_path, batch, "--threads", "3")
    with pytest.raises(hydraulis.InvalidInputError, match="threads"):
        hydraulis.Planner(hydraulis.load_profile(PROFILE), hydraulis.load_candidates(CANDIDATES),
                          threads=-1)


def test_prune_tolerance_bounds_the_loss_and_matches_the_cli(tmp_path, lengths):
    # Skipping candidates whose bound is within T of the best plan costs at most T.
    profile, candidates = hydraulis.load_profile(PROFILE), hydraulis.load_candidates(CANDIDATES)
    exact = hydraulis.Planner(profile, candidates)
    tolerant = hydraulis.Planner(profile, candidates, prune_tolerance=0.05)
    pruned_more = 0
    for i in range(10):
        batch = lengths[i * 300:(i + 1) * 300]
        a, b = exact.plan(batch), tolerant.plan(batch)
        assert b.estimated_step_ms <= 1.05 * a.estimated_step_ms + 1e-9
        pruned = [sum(c["status"] == "pruned" for c in json.loads(p.to_json())["candidates"])
                  for p in (a, b)]
        pruned_more += pruned[1] - pruned[0]
    assert pruned_more > 0  # the tolerance did skip candidates
    assert b.to_json() == cli_plan(tmp_path, batch, "--prune-tolerance", "0.05")
    with pytest.raises(hydraulis.InvalidInputError, match="prune tolerance"):
        hydraulis.Planner(profile, candidates, prune_tolerance=-0.1)


def test_overlong_documents_are_truncated_or_rejected(lengths):
    profile, candidates = hydraulis.load_profile(PROFILE), hydraulis.load_candidates(CANDIDATES)
    batch = [10_000_000] + lengths[:50].tolist()
    with pytest.warns(UserWarning, match=r"1 document\(s\) longer than every candidate's capacity"):
        plan = hydraulis.Planner(profile, candidates).plan(batch)
    assert len(plan.truncated) == 1 and plan.truncated[0][0] == 0
    assert plan.truncated[0][1] == 10_000_000 and plan.truncated[0][2] < 10_000_000
    with pytest.raises(hydraulis.InfeasibleError, match="document 0"):
        hydraulis.Planner(profile, candidates, reject_overlong=True).plan(batch)


def test_input_errors_carry_the_cli_message(tmp_path):
    bad = tmp_path / "profile.json"
    with open(PROFILE) as f:
        profile = json.load(f)
    profile["model"]["layers"] = -3
    bad.write_text(json.dumps(profile))
    with pytest.raises(hydraulis.InvalidInputError) as caught:
        hydraulis.load_profile(str(bad))
    run = subprocess.run([BIN, "plan", "--profile", str(bad), "--candidates", CANDIDATES,
                          "--lengths", WIKIPEDIA], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip() == f"hydraulis: error: {caught.value}"
    assert isinstance(caught.value, ValueError)
    mismatched = hydraulis.load_profile(os.path.join(ROOT, "configs", "profiles", "tiny-cpu.json"))
    with pytest.raises(hydraulis.InvalidInputError):
        hydraulis.Planner(mismatched, hydraulis.load_candidates(CANDIDATES))
    with pytest.raises(TypeError):
        hydraulis.load_profile(42)


@pytest.mark.parametrize("value,error,match", [
    ([], hydraulis.InvalidInputError, "empty"),
    ([5, 0], hydraulis.InvalidInputError, r"lengths\[1\]"),
    ([5, -7], hydraulis.InvalidInputError, r"lengths\[1\]"),
    ([1.0], TypeError, r"lengths\[0\]: expected an integer"),
    ([float("nan")], TypeError, r"lengths\[0\]"),
    ([True], TypeError, r"lengths\[0\]"),
    (["12"], TypeError, r"lengths\[0\]"),
    ([None], TypeError, r"lengths\[0\]"),
    ([2 ** 70], hydraulis.InvalidInputError, "beyond 64 bits"),
    ("1234", TypeError, "string"),
    (None, TypeError, "NoneType"),
    (7, TypeError, "int"),
    (np.array([1.5, 2.0]), TypeError, "float64"),
    (np.array([3, 0]), hydraulis.InvalidInputError, r"lengths\[1\]"),
    (np.array([2 ** 64 - 1], dtype=np.uint64), hydraulis.InvalidInputError, "2\\^63"),
    ([10 ** 30], hydraulis.InvalidInputError, "beyond 64 bits"),
    ([2 ** 63 - 1], hydraulis.InvalidInputError, r"lengths\[0\]"),
    (np.array([[1, 2]]), hydraulis.InvalidInputError, r"^lengths: expected a 1-D array .* 2-D"),
    (np.array([[1.5]]), hydraulis.InvalidInputError, "lengths: expected a 1-D array"),
    (np.array(5), hydraulis.InvalidInputError, "0-D"),
])
def test_bad_lengths_raise_naming_the_value(planner, value, error, match):
    with pytest.raises(error, match=match):
        planner.plan(value)


def test_random_inputs_only_raise_type_or_value_errors(planner):
    rng = random.Random(7)
    atoms = [0, -1, 1, 2, 7, 2 ** 31, 2 ** 63 - 1, 2 ** 64, 1.0, float("nan"), float("inf"),
             True, None, "x", b"y", [], {}, (1,), 10 ** 6]
    planned = 0
    for _ in range(3000):
        kind = rng.randrange(4)
        if kind == 0:
            value = [rng.choice(atoms) for _ in range(rng.randrange(4))]
        elif kind == 1:
            value = [rng.randrange(1, 40000) for _ in range(rng.randrange(1, 30))]
        elif kind == 2:
            dtype = rng.choice([np.int8, np.int32, np.int64, np.uint16, np.uint64, np.float32,
                                np.bool_])
            value = np.array([rng.randrange(0, 120) for _ in range(rng.randrange(0, 20))],
                             dtype=dtype)
        else:
            value = rng.choice(atoms)
        try:
            plan = planner.plan(value)
            planned += 1
            assert sum(len(mb) for p in plan.pipelines for mb in p.micro_batches) == len(value)
        except (TypeError, hydraulis.InvalidInputError):
            pass
    assert planned > 500


def test_cp_pipelines_expose_their_shard_layouts(lengths):
    """128K on 256 GPUs: cp pipelines say, per micro-batch, where each document lies
    (a cp rank, -1 sharded over every rank, or the list of its ranks), exactly as the plan
    JSON does."""
    profile = hydraulis.load_profile(PROFILE)
    candidates = hydraulis.load_candidates(
        os.path.join(ROOT, "configs", "candidates", "llama-32b-256gpu-128k.json"))
    planner = hydraulis.Planner(profile, candidates, max_len=131072)
    batch = list(lengths[:1200]) + [120000, 90000, 50000]
    plan = planner.plan(batch)
    assert plan.truncated == []
    document = json.loads(plan.to_json())
    sharded = 0
    for pipeline, written in zip(plan.pipelines, document["pipelines"]):
        assert pipeline.cp == written["cp"]
        if pipeline.cp == 1:
            assert pipeline.cp_layouts == [] and "cp_layouts" not in written
            continue
        assert pipeline.cp_layouts == written["cp_layouts"]
        for docs, layout in zip(pipeline.micro_batches, pipeline.cp_layouts):
            assert len(docs) == len(layout)
            for place in layout:
                if isinstance(place, list):
                    assert 1 < len(place) < pipeline.cp and place == sorted(set(place))
                    assert all(0 <= r < pipeline.cp for r in place)
                    sharded += 1
                else:
                    assert -1 <= place < pipeline.cp
                    sharded += place == -1
    assert sharded >= 1
    # The 120,000-token document lies on a cp pipeline: no cp = 1 scheme holds it.
    owner = [p for p in plan.pipelines for docs in p.micro_batches if len(batch) - 3 in docs]
    assert owner[0].cp > 1


def test_data_parallel_candidates_equal_the_file_a_user_would_write(lengths):
    profile = hydraulis.load_profile(os.path.join(ROOT, "configs", "profiles", "tiny-cpu.json"))
    written = hydraulis.load_candidates({
        "format": "hydraulis.candidates/1", "gpus": 4,
        "optimizer_layout": {"dp": 4, "tp": 1, "pp": 1},
        "strategies": [{"name": "2x(TP2,PP1)", "pipelines": [{"count": 2, "tp": 2}]}]})
    made = hydraulis.data_parallel_candidates(4, tp=2)
    batch = [int(n) % 900 + 1 for n in lengths[:60]]
    assert (hydraulis.Planner(profile, made, max_len=1024).plan(batch).to_json()
            == hydraulis.Planner(profile, written, max_len=1024).plan(batch).to_json())
    for kwargs, message in [({"ranks": 0}, "ranks: expected an integer >= 1, got 0"),
                            ({"ranks": 4, "tp": 3}, "ranks: 4 is not a multiple of cp * tp * pp = 3"),
                            ({"ranks": 2, "pp": True}, "pp: expected an integer >= 1, got True")]:
        with pytest.raises(hydraulis.InvalidInputError, match=message.replace("*", r"\*")):
            hydraulis.data_parallel_candidates(**kwargs)


def test_reprs_say_what_an_object_is_and_a_profile_is_no_candidates(planner, lengths):
    plan = planner.plan(lengths[:40])
    assert repr(plan).startswith(f"<Plan '{plan.strategy}': 40 documents, ")
    assert repr(plan.pipelines[0]).startswith(f"<Pipeline {plan.pipelines[0].scheme}: ")
    assert repr(hydraulis.load_profile(PROFILE)) == "<Profile of llama-32b>"
    assert repr(hydraulis.load_candidates(CANDIDATES)) == f"<Candidates from {CANDIDATES}>"
    with pytest.raises(hydraulis.InvalidInputError,
                       match=r'format: expected "hydraulis.candidates/1", got \'hydraulis.profile/1\''):
        hydraulis.load_candidates(PROFILE)


def test_profile_capacity_is_the_planners(planner, lengths):
    # The capacity a profile reports for a scheme is the one the planner packs to, with the
    # candidates' optimizer layout; Megatron's scheduler sizes its memory by it.
    profile = hydraulis.load_profile(PROFILE)
    layout = json.load(open(CANDIDATES))["optimizer_layout"]
    pipelines = json.loads(planner.plan(lengths[:400]).to_json())["pipelines"]
    assert pipelines
    for pipe in pipelines:
        assert profile.capacity_tokens(cp=pipe["cp"], tp=pipe["tp"], pp=pipe["pp"],
                                       optimizer_layout=(layout["dp"], layout["tp"],
                                                         layout["pp"])) == pipe["capacity_tokens"]
    # The published worked value (docs/spec-format.md): TP16 under a (4, 16, 1) layout holds
    # 43,614 tokens before the 128-token alignment.
    assert profile.capacity_tokens(tp=16, optimizer_layout=(4, 16, 1)) == 43_520
    # The alignment the Megatron scheduler's memory sizing starts from is the C++ constant.
    alignment = hydraulis._core.TOKEN_ALIGNMENT
    assert 43_614 // alignment * alignment == 43_520


def test_recomputed_profiles_hold_more_tokens_as_the_cli_plans_them():
    # A profile measured keeping every activation, for a run under recomputation: the same
    # conversion `plan --recompute-granularity` makes; capacities grow, a mode is refused
    # on a profile of another one.
    profile = hydraulis.load_profile(PROFILE)
    assert profile.recompute == "none"
    full, selective = profile.recomputed("full"), profile.recomputed("selective")
    assert (full.recompute, selective.recompute) == ("full", "selective")
    layout = (4, 16, 1)
    kept = profile.capacity_tokens(tp=16, optimizer_layout=layout)
    # At tp 16 a quarter of a layer's activations are replicated, so full holds 4.6x.
    assert full.capacity_tokens(tp=16, optimizer_layout=layout) > 4 * kept
    assert kept < selective.capacity_tokens(tp=16, optimizer_layout=layout) < 2 * kept
    assert json.loads(full.to_json())["recompute"] == "full"
    with pytest.raises(hydraulis.InvalidInputError, match="made only from one that keeps"):
        selective.recomputed("full")
    with pytest.raises(hydraulis.InvalidInputError, match="expected none, selective or full"):
        profile.recomputed("partial")


def test_plans_pickle_whole(planner, lengths):
    # DataLoader workers and multiprocessing hand plans between processes by pickle: the
    # copy is the same plan, micro-batches, lengths and timing included.
    import pickle
    plan = planner.plan(lengths[:400])
    copy = pickle.loads(pickle.dumps(plan))
    assert copy.to_json(include_timing=True) == plan.to_json(include_timing=True)
    assert np.array_equal(copy.lengths, plan.lengths)
    assert copy.planning_ms == plan.planning_ms
    for a, b in zip(copy.pipelines, plan.pipelines):
        assert [list(m) for m in a.micro_batches] == [list(m) for m in b.micro_batches]
        assert [list(c) for c in a.cu_seqlens] == [list(c) for c in b.cu_seqlens]
    with pytest.raises(hydraulis.InvalidInputError, match="pickled plan"):
        # What pickle does with a state whose lengths are not the plan's.
        hydraulis.Plan.__new__(hydraulis.Plan).__setstate__(
            (plan.to_json(), plan.lengths[:-1].tolist()))
