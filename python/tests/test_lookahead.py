"""LookaheadPlanner: the plans of synchronous planning, in order; errors at their step;
clean shutdown; and planning really overlaps the caller's work."""
import os
import threading
import time

import numpy as np
import pytest

import hydraulis

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(scope="module")
def planner():
    return hydraulis.Planner(
        hydraulis.load_profile(os.path.join(ROOT, "configs/profiles/llama-32b-a800.json")),
        hydraulis.load_candidates(os.path.join(ROOT, "configs/candidates/llama-32b-64gpu.json")))


@pytest.fixture(scope="module")
def batches():
    lengths = np.loadtxt(os.path.join(ROOT, "data", "wikipedia-sample-lengths.txt"),
                         dtype=np.int64)
    return [lengths[i * 250:(i + 1) * 250] for i in range(20)]


def test_plans_equal_synchronous_planning_in_order(planner, batches):
    expected = [planner.plan(b).to_json() for b in batches]
    for depth in (1, 2, 5):
        with hydraulis.LookaheadPlanner(planner, batches, depth=depth) as plans:
            got = [(lengths is batches[i], plan.to_json()) for i, (lengths, plan) in
                   enumerate(plans)]
        assert [g[1] for g in got] == expected and all(g[0] for g in got)


def test_an_error_surfaces_at_its_step(planner, batches):
    bad = list(batches[:3]) + [[5, 0]] + list(batches[3:6])
    seen = 0
    with pytest.raises(hydraulis.InvalidInputError, match=r"lengths\[1\]"):
        for _ in hydraulis.LookaheadPlanner(planner, bad, depth=3):
            seen += 1
    assert seen == 3

    def failing_sampler():
        yield batches[0]
        raise RuntimeError("sampler broke")

    plans = hydraulis.LookaheadPlanner(planner, failing_sampler())
    next(plans)
    with pytest.raises(RuntimeError, match="sampler broke"):
        next(plans)
    with pytest.raises(StopIteration):
        next(plans)


def test_close_stops_the_thread_without_planning_everything(planner, batches):
    planned = []

    def sampler():
        for b in batches * 100:
            planned.append(1)
            yield b

    before = threading.active_count()
    plans = hydraulis.LookaheadPlanner(planner, sampler(), depth=2)
    next(plans)
    plans.close()
    assert threading.active_count() == before
    assert len(planned) < 10
    with pytest.raises(StopIteration):
        next(plans)
    with pytest.raises(hydraulis.InvalidInputError, match="depth"):
        hydraulis.LookaheadPlanner(planner, batches, depth=0)


def test_plans_are_made_while_the_caller_trains(planner, batches):
    # While the caller holds step 0 (training), the thread plans the next `depth` steps;
    # the queue fills without the caller asking, and the next step then does not wait for
    # planning. (No timing is asserted beyond a generous bound: this is a behaviour test.)
    with hydraulis.LookaheadPlanner(planner, batches[:8], depth=3) as plans:
        next(plans)
        deadline = time.monotonic() + 60
        while plans.planned_ahead < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert plans.planned_ahead == 3
        next(plans)
        assert plans.waited_ms < 1000
