"""A training run's report from its `hydraulis train --log-json` file (docs/runtime.md,
"Reports"): loss, learning rate, tokens/s, predicted against measured step time, the
planner's time, the gradient norm, model FLOP/s and peak memory, one panel each, as a PNG or as one self-contained HTML page (the figure, a
summary table and the run's configuration). Needs matplotlib (pinned in
scripts/requirements.txt); `hydraulis report LOG -o OUT` runs it.

    python -m hydraulis.report log.jsonl -o report.html
"""
import argparse
import base64
import html
import io
import json
import math
import os
import statistics
import sys

from . import InvalidInputError

__all__ = ["read_log", "read_evaluations", "summarize", "write_report"]

# The panels: (title, y label, one or two series of (label, value of a step record)).
PANELS = [
    ("Loss", "loss", [("loss", lambda r: r["loss"])]),
    ("Learning rate", "lr", [("lr", lambda r: r["lr"])]),
    ("Throughput", "tokens/s", [("tokens/s", lambda r: r["tokens"] / r["step_ms"] * 1000.0)]),
    ("Step time", "ms", [("measured", lambda r: r["step_ms"]),
                         ("predicted", lambda r: r["predicted_step_ms"])]),
    ("Planning", "ms", [("planning", lambda r: r["planning_ms"]),
                        ("waited for the plan", lambda r: r["plan_wait_ms"])]),
    ("Gradient norm", "norm", [("grad_norm", lambda r: r["grad_norm"])]),
    ("Model FLOPs", "TFLOP/s", [("model TFLOP/s", lambda r: r.get("model_tflops_per_s"))]),
    ("Peak memory (largest rank)", "GiB", [("peak memory", lambda r: (r.get("peak_memory_bytes") or
                                                               float("nan")) / 2**30)]),
]
REQUIRED = ("step", "loss", "lr", "tokens", "step_ms", "predicted_step_ms", "planning_ms",
            "plan_wait_ms")


def read_log(path):
    """The step records of a --log-json file, in step order (a resumed run's appended
    records replace the steps they repeat), and the run's configuration (the first record's
    `config`, "" when absent). InvalidInputError naming the file and line for a line that
    is not a JSON object or a record without a field the report plots."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise InvalidInputError(f"{path}: cannot read: {e.strerror}") from None
    steps, config = {}, ""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            raise InvalidInputError(f"{path}:{n}: not a JSON line ({e.msg})") from None
        if not isinstance(record, dict):
            raise InvalidInputError(f"{path}:{n}: expected a JSON object")
        if "eval_loss" in record and "loss" not in record:
            continue  # an evaluation record
        missing = [k for k in REQUIRED if k not in record]
        if missing:
            raise InvalidInputError(f"{path}:{n}: no {missing[0]!r} in the record (is this a "
                                    "`hydraulis train --log-json` file?)")
        config = config or record.get("config", "")
        steps[int(record["step"])] = record
    if not steps:
        raise InvalidInputError(f"{path}: no step records")
    return [steps[k] for k in sorted(steps)], config


def read_evaluations(path):
    """The evaluation records of a --log-json file (`train --eval-every`), in step order, a
    resumed run's replacing the steps they repeat; [] when the run evaluated nothing. Read
    after read_log, which checks the file."""
    evals = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                if "eval_loss" in record and "loss" not in record:
                    evals[int(record["step"])] = record
    return [evals[k] for k in sorted(evals)]


def _finite(values):
    return [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def summarize(records):
    """The report's table: steps, first and last loss, mean tokens/s and step time over the
    steps after the first (which pays for start-up), mean relative error of the predicted
    step time over the last half of the run, median planning time, tokens cut."""
    later = records[1:] or records
    half = records[len(records) // 2:]
    errors = [abs(r["predicted_step_ms"] - r["step_ms"]) / r["step_ms"] for r in half
              if r["step_ms"] > 0]
    return {
        "steps": len(records),
        "first loss": records[0]["loss"],
        "last loss": records[-1]["loss"],
        "tokens/s (steps 1+)": (sum(r["tokens"] for r in later) /
                                sum(r["step_ms"] for r in later) * 1000.0),
        "mean step ms (steps 1+)": statistics.fmean(r["step_ms"] for r in later),
        "prediction error, last half": statistics.fmean(errors) if errors else float("nan"),
        "median planning ms": statistics.median(r["planning_ms"] for r in records),
        "tokens cut": sum(r.get("cut_tokens", 0) for r in records),
        "peak memory GiB (largest rank)": max((r.get("peak_memory_bytes") or 0) for r in records) / 2**30,
        "MFU (steps 1+)": (statistics.fmean(_finite([r.get("mfu") for r in later]))
                           if _finite([r.get("mfu") for r in later]) else float("nan")),
        "strategies": len({r.get("strategy") for r in records}),
    }


def _figure(records, evaluations=()):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = [r["step"] for r in records]
    fig, axes = plt.subplots(2, 4, figsize=(20, 8), constrained_layout=True)
    for ax, (title, ylabel, series) in zip(axes.flat, PANELS):
        for label, value in series:
            ys = [value(r) if r.get("skipped") is not True else float("nan") for r in records]
            ys = [float(y) if y is not None else float("nan") for y in ys]
            ax.plot(steps, ys, marker="." if len(steps) < 60 else None, label=label)
        if title == "Loss" and evaluations:
            ys = [float(e["eval_loss"]) if e["eval_loss"] is not None else float("nan")
                  for e in evaluations]
            ax.plot([e["step"] for e in evaluations], ys, marker="o", label="held-out")
            ax.legend()
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if len(series) > 1:
            ax.legend()
    return fig, plt


def _format(key, value):
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:.1%}" if "error" in key or "MFU" in key else f"{value:,.6g}"
    return f"{value:,}"


def write_report(log, out):
    """Writes the report of `log` to `out`: a PNG when it ends in .png, else HTML (the
    figure embedded, the summary and the configuration). Written to a temporary file and
    renamed. Returns the summary."""
    records, config = read_log(log)
    evaluations = read_evaluations(log)
    summary = summarize(records)
    if evaluations:
        summary["last held-out loss"] = (evaluations[-1]["eval_loss"]
                                         if evaluations[-1]["eval_loss"] is not None
                                         else float("nan"))
        summary["held-out evaluations"] = len(evaluations)
    kind = "png" if out.lower().endswith(".png") else "html"
    fig, plt = _figure(records, evaluations)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    if kind == "png":
        payload = buffer.getvalue()
    else:
        rows = "\n".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(_format(k, v))}</td></tr>"
                         for k, v in summary.items())
        image = base64.b64encode(buffer.getvalue()).decode("ascii")
        payload = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>hydraulis run: {html.escape(os.path.basename(log))}</title>
<style>body{{font-family:sans-serif;margin:2em}} th{{text-align:left;padding-right:2em}}</style>
</head><body>
<h1>Training run {html.escape(os.path.basename(log))}</h1>
<table>
{rows}
</table>
<img alt="{html.escape(', '.join(p[0] for p in PANELS))}" src="data:image/png;base64,{image}">
<h2>Configuration</h2>
<pre>{html.escape(config) or "(not in the log)"}</pre>
</body></html>
""".encode("utf-8")
    tmp = f"{out}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
        os.replace(tmp, out)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise InvalidInputError(f"-o {out}: cannot write: {e.strerror}") from None
    return summary


def main(argv=None):
    p = argparse.ArgumentParser(prog="hydraulis report", description=__doc__.splitlines()[0])
    p.add_argument("log", help="a `hydraulis train --log-json` file")
    p.add_argument("-o", "--output", required=True, help="report.html or report.png")
    a = p.parse_args(argv)
    try:
        summary = write_report(a.log, a.output)
    except InvalidInputError as e:
        print(f"hydraulis: error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"hydraulis: error: report needs matplotlib ({e})", file=sys.stderr)
        return 2
    print(f"wrote {a.output}: {summary['steps']} steps, {summary['tokens/s (steps 1+)']:,.0f} "
          f"tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
