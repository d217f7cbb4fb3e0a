"""hydraulis.StepCalibration: the refit from measured steps, through Python, recovers a
machine 3x slower than the profile and plans on it."""
import json
import os

import numpy as np
import pytest

import hydraulis

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILE = os.path.join(ROOT, "configs/profiles/tiny-cpu.json")


def micro_batch_ms(scheme, lengths):
    return scheme["c_ms"] + sum(scheme["a_ms_per_token2"] * s * s + scheme["b_ms_per_token"] * s
                                for s in lengths)


def test_refit_recovers_a_machine_three_times_slower():
    text = json.load(open(PROFILE))
    true = next(s for s in text["schemes"] if (s["cp"], s["tp"], s["pp"]) == (1, 1, 1))
    true = {k: 3 * true[k] for k in ("a_ms_per_token2", "b_ms_per_token", "c_ms")}
    profile = hydraulis.load_profile(PROFILE)
    candidates = hydraulis.data_parallel_candidates(2)
    planner = hydraulis.Planner(profile, candidates, max_len=1024)
    calibration = hydraulis.StepCalibration(profile, candidates)
    lengths = np.loadtxt(os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt"),
                         dtype=np.int64)
    sampler = hydraulis.BatchSampler(lengths, tokens_per_batch=6000, max_len=1024, seed=2)
    adopted = []
    for step in range(12):
        plan = planner.plan(sampler.next()[0])
        stage_ms = [[[micro_batch_ms(true, kept) for kept in p.kept_lengths]]
                    for p in plan.pipelines]
        step_ms = max(sum(s[0]) for s in stage_ms) + 2.0   # 2 ms outside the pipelines
        if calibration.add(plan, stage_ms, step_ms).adopted:
            adopted.append(step)
    assert adopted, "no refit adopted"
    assert calibration.version == len(adopted)
    plan = planner.plan(sampler.next()[0])
    truth = max(sum(micro_batch_ms(true, k) for k in p.kept_lengths)
                for p in plan.pipelines) + 2.0
    assert calibration.predict_ms(plan) == pytest.approx(truth, rel=0.01)
    # The fit as a profile: a planner on it predicts the same compute time.
    fitted = hydraulis.Planner(calibration.profile, candidates, max_len=1024,
                               strategy_overhead_ms=calibration.overhead_ms)
    assert fitted.plan(plan.lengths).estimated_step_ms == pytest.approx(truth - 2.0, rel=0.02)
    assert json.loads(calibration.to_json())["format"] == "hydraulis.calibration/1"
    assert json.loads(calibration.profile.to_json())["format"] == "hydraulis.profile/1"


def test_bad_measurements_and_options_are_named():
    profile = hydraulis.load_profile(PROFILE)
    candidates = hydraulis.data_parallel_candidates(2)
    with pytest.raises(hydraulis.InvalidInputError, match="holdout"):
        hydraulis.StepCalibration(profile, candidates, window=4, holdout=4)
    calibration = hydraulis.StepCalibration(profile, candidates)
    plan = hydraulis.Planner(profile, candidates, max_len=1024).plan([300, 200, 500])
    outcome = calibration.add(plan, [[[1.0]]], 5.0)   # one pipeline's table for two
    assert not outcome.adopted and outcome.rejected
    good = [[[1.0] * len(p.micro_batches)] for p in plan.pipelines]
    assert calibration.add(plan, good, float("nan")).rejected
