"""hydraulis' Megatron schedulers inside megatron-core's own training step (gloo CPU ranks):
the runs must train as one process does, with megatron-core's scheduler and with ours."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("megatron.core.pipeline_parallel.hybrid_cp_schedule")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run_example(name, tmp_path, *args):
    report = tmp_path / "report.json"
    out = subprocess.run([sys.executable, "-W", "ignore", os.path.join(ROOT, "examples", name),
                          "--json", str(report), *args], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-4000:]
    return json.loads(report.read_text())


def test_hybrid_cp_step_trains_as_one_process_with_either_scheduler(tmp_path):
    report = run_example("megatron_hybrid_cp_training.py", tmp_path, "--steps", "3")
    for name in ("megatron", "hydraulis"):
        run = report[name]
        assert run["loss_diff"] <= 1e-5 and run["parameter_diff"] <= 1e-5, run
        assert len(run["losses"]) == 3
        # The point of the check: documents sharded over 2 and over 4 ranks, so the
        # context-parallel path of megatron-core's hybrid schedule ran.
        widths = {int(k) for k in run["documents_per_width"]}
        assert {1, 2, 4} <= widths, run["documents_per_width"]
    assert report["megatron"]["losses"] == pytest.approx(report["hydraulis"]["losses"],
                                                         abs=1e-5)


def test_pipelined_packed_step_trains_as_one_process_with_either_split(tmp_path):
    # 2 data-parallel ranks x 2 pipeline stages: megatron-core's 1F1B schedule with
    # variable-length micro-batches, empty ones included.
    report = run_example("megatron_packed_training.py", tmp_path, "--steps", "3", "--pp", "2")
    for name in ("megatron", "hydraulis"):
        run = report[name]
        assert run["loss_diff"] <= 1e-5 and run["parameter_diff"] <= 1e-5, run
    # Megatron's equal shares leave ranks with different micro-batch counts: the empty
    # micro-batches that even them out went through megatron-core's schedule.
    assert any(len(set(c)) > 1 for c in report["megatron"]["micro_batches_per_rank"])
    # The planner's split is balanced under the profile it planned with, and so no slower.
    assert max(report["hydraulis"]["balance"]) < 1.02
    assert sum(report["hydraulis"]["step_ms"]) <= sum(report["megatron"]["step_ms"])
