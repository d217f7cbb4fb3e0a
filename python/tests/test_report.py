"""`hydraulis report`: the report of a real training run's log holds the run's figures, and
a file that is not such a log is refused by name (exit 2, nothing written)."""
import json
import os
import subprocess

import pytest

pytest.importorskip("matplotlib")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("HYDRAULIS_BIN", os.path.join(ROOT, "build", "release", "tools", "hydraulis"))


@pytest.fixture(scope="module")
def run_log(tmp_path_factory):
    if not os.path.exists(os.path.join(os.path.dirname(BIN), "hydraulis-runtime")):
        pytest.skip("built without the runtime")
    run = tmp_path_factory.mktemp("run")
    log = str(run / "log.jsonl")
    done = subprocess.run([BIN, "train", "--nproc", "2", "--tensorboard", str(run / "tb"),
                           "--candidates",
                           os.path.join(ROOT, "configs/candidates/cpu-2rank.json"),
                           "--steps", "4", "--tokens-per-batch", "4096", "--lr-warmup-steps", "2",
                           "--eval-every", "2", "--eval-tokens", "2048", "--log-json", log], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return log


def test_report_holds_the_runs_figures(run_log, tmp_path):
    lines = [json.loads(line) for line in open(run_log)]
    records = [r for r in lines if "loss" in r]
    evaluations = [r for r in lines if "eval_loss" in r]
    assert [e["step"] for e in evaluations] == [1, 3]
    assert all("loss" not in e for e in evaluations)
    out = str(tmp_path / "report.html")
    done = subprocess.run([BIN, "report", run_log, "-o", out], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    page = open(out, encoding="utf-8").read()
    later = records[1:]
    tokens_per_s = sum(r["tokens"] for r in later) / sum(r["step_ms"] for r in later) * 1000
    assert "<tr><th>steps</th><td>4</td></tr>" in page
    assert f"<tr><th>tokens/s (steps 1+)</th><td>{tokens_per_s:,.6g}</td></tr>" in page
    assert f"<td>{records[-1]['loss']:,.6g}</td>" in page
    for panel in ("Loss", "Learning rate", "Throughput", "Step time", "Planning",
                  "Peak memory"):
        assert panel in page
    assert f"<tr><th>last held-out loss</th><td>{evaluations[-1]['eval_loss']:,.6g}</td></tr>" in page
    assert "<tr><th>held-out evaluations</th><td>2</td></tr>" in page
    assert "lr-warmup-steps=2" in page          # the run's configuration, from the log
    assert "data:image/png;base64," in page
    png = str(tmp_path / "report.png")
    assert subprocess.run([BIN, "report", run_log, "-o", png]).returncode == 0
    from PIL import Image
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (2000, 800)


@pytest.mark.parametrize("content, named", [
    ("not json\n", "log.jsonl:1: not a JSON line"),
    ('{"step": 0, "loss": 1.0}\n', "log.jsonl:1: no 'lr'"),
    ("[1, 2]\n", "log.jsonl:1: expected a JSON object"),
    ("\n", "log.jsonl: no step records"),
])
def test_a_file_that_is_not_a_training_log_is_refused(tmp_path, content, named):
    log = tmp_path / "log.jsonl"
    log.write_text(content)
    out = tmp_path / "report.html"
    done = subprocess.run([BIN, "report", str(log), "-o", str(out)], capture_output=True,
                          text=True)
    assert done.returncode == 2
    assert named in done.stderr
    assert not out.exists() and os.listdir(tmp_path) == ["log.jsonl"]


def _events(directory):
    """Every scalar of the TensorBoard event files in `directory`: {tag: [(step, value)]},
    read as TFRecords of Event protos (tensorboardX's own proto classes)."""
    import glob
    import struct
    from tensorboardX.proto import event_pb2
    scalars = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        data = open(path, "rb").read()
        at = 0
        while at < len(data):
            (length,) = struct.unpack_from("<Q", data, at)
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_tensorboard_events_hold_the_logs_scalars(run_log):
    pytest.importorskip("tensorboardX")
    lines = [json.loads(line) for line in open(run_log)]
    steps = [r for r in lines if "loss" in r]
    evaluations = [r for r in lines if "eval_loss" in r]
    scalars = _events(os.path.join(os.path.dirname(run_log), "tb"))
    assert [s for s, _ in scalars["train/loss"]] == [r["step"] for r in steps]
    for (_, value), r in zip(scalars["train/loss"], steps):
        assert value == pytest.approx(r["loss"], rel=1e-6)
    for (_, value), r in zip(scalars["time/step_ms"], steps):
        assert value == pytest.approx(r["step_ms"], rel=1e-6)
    assert [s for s, _ in scalars["eval/loss"]] == [e["step"] for e in evaluations] == [1, 3]
    for (_, value), e in zip(scalars["eval/ppl"], evaluations):
        assert value == pytest.approx(e["eval_ppl"], rel=1e-6)
    assert {"train/lr", "train/grad_norm", "train/tokens_per_s", "time/predicted_step_ms",
            "time/planning_ms"} <= set(scalars)
