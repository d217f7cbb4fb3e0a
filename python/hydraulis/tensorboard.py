"""TensorBoard event files from a training log: `hydraulis train --tensorboard DIR` streams its
step and evaluation records here as it writes them (docs/runtime.md, "TensorBoard").

    python -m hydraulis.tensorboard DIR              # records as JSON lines on stdin
    python -m hydraulis.tensorboard DIR --log LOG    # an existing --log-json file

Each step record gives the scalars train/loss, train/lr, train/grad_norm,
train/tokens_per_s, train/mfu, time/step_ms, time/predicted_step_ms, time/planning_ms,
memory/peak_gib and train/cut_tokens at its step; each evaluation record eval/loss and
eval/ppl. Written with tensorboardX (a pinned test and report peer in .venv).
"""
import argparse
import json
import math
import sys

__all__ = ["SCALARS", "scalars_of", "write_events"]

# (tag, the value of a step record, or None where the record has none).
SCALARS = [
    ("train/loss", lambda r: r.get("loss")),
    ("train/lr", lambda r: r.get("lr")),
    ("train/grad_norm", lambda r: r.get("grad_norm")),
    ("train/tokens_per_s", lambda r: r.get("tokens_per_s")),
    ("train/mfu", lambda r: r.get("mfu")),
    ("time/step_ms", lambda r: r.get("step_ms")),
    ("time/predicted_step_ms", lambda r: r.get("predicted_step_ms")),
    ("time/planning_ms", lambda r: r.get("planning_ms")),
    ("memory/peak_gib", lambda r: (r["peak_memory_bytes"] / 2**30
                                   if r.get("peak_memory_bytes") else None)),
    ("train/cut_tokens", lambda r: r.get("cut_tokens")),
]
EVAL_SCALARS = [("eval/loss", lambda r: r.get("eval_loss")),
                ("eval/ppl", lambda r: r.get("eval_ppl"))]


def scalars_of(record):
    """The (tag, value) pairs a record gives: an evaluation record's (it has eval_loss and no
    training loss) or a step record's, finite numbers only."""
    table = EVAL_SCALARS if "eval_loss" in record and "loss" not in record else SCALARS
    out = []
    for tag, value in table:
        v = value(record)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append((tag, float(v)))
    return out


def write_events(logdir, lines):
    """Writes every record of `lines` (JSON objects, one per line) as scalars at its step,
    flushing after each so TensorBoard shows a running job's steps as they come. Returns the
    number of records written. ValueError naming the line for one that is not a record."""
    from tensorboardX import SummaryWriter
    writer = SummaryWriter(logdir=logdir)
    count = 0
    try:
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise ValueError(f"line {n}: not a JSON line ({e.msg})") from None
            if not isinstance(record, dict) or "step" not in record:
                raise ValueError(f"line {n}: not a step or evaluation record")
            for tag, value in scalars_of(record):
                writer.add_scalar(tag, value, int(record["step"]))
            writer.flush()
            count += 1
    finally:
        writer.close()
    return count


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m hydraulis.tensorboard",
                                description=__doc__.splitlines()[0])
    p.add_argument("logdir", help="TensorBoard log directory (created when missing)")
    p.add_argument("--log", help="a `train --log-json` file (default: records on stdin)")
    a = p.parse_args(argv)
    try:
        if a.log:
            with open(a.log, encoding="utf-8") as f:
                write_events(a.logdir, f)
        else:
            write_events(a.logdir, sys.stdin)
    except ImportError as e:
        print(f"hydraulis.tensorboard: {e.name} is not installed in {sys.executable} "
              "(scripts/requirements.txt pins tensorboardX)", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"hydraulis.tensorboard: {a.log or 'stdin'}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
