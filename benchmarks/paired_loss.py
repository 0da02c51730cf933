"""Paired training losses of two runs that saw the same batches: B against A, per camera view, per block.

Usage::

    python -m benchmarks.paired_loss runs/ctrl runs/rays                    # blocks of 250 steps
    python -m benchmarks.paired_loss runs/ctrl runs/rays --block 500 --out runs/rays_vs_ctrl.json
    python -m benchmarks.paired_loss runs/ctrl runs/rays --until-lr-drop        # only while both rates are constant

Two ``neuralsim train`` runs with the same ``--seed``, ``--data`` and batch size draw the same clips and the
same noise at every step, whatever else differs (an input, a learning rate, a loss term).  Their
``metrics.jsonl`` lines can then be compared step by step: the ratio ``B / A - 1`` of each logged loss
(``loss`` and ``loss_view0..2``) cancels the batch-to-batch spread that dwarfs small effects in either
curve alone.  Each block of steps gets the mean ratio and a 95% interval over its logged steps
(Student's t; log lines are every ``--log-every`` steps, 10 by default).  The interval is the spread
within one pair of runs: a different seed draws other batches and another initialisation, so an effect
near the interval's size still wants a second pair (docs/fidelity_history.md, session 46).

Pairing by step stops comparing models once either run starts to anneal: a ``--cool-down-secs`` run
starts cooling at the step its speed reaches, so two runs of different speed cool from different steps,
and a cooling run's loss falls for that reason alone.  ``--until-lr-drop`` keeps only the steps before
the first logged step where either run's learning rate falls below the highest it logged before it
(warmup rises, so it is not a drop), and says where and whose rate fell.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .fidelity import difference_summary

KEYS = ("loss", "loss_view0", "loss_view1", "loss_view2")


def read_losses(run: str | Path) -> dict[int, dict[str, float]]:
    """``step -> {key: value}`` of a run's ``metrics.jsonl`` (the lines that carry a loss)."""
    path = Path(run) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{str(run)!r} has no metrics.jsonl: give a `neuralsim train --out` directory")
    out: dict[int, dict[str, float]] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n} is not a JSON line: {e}") from None
        if "loss" in row and "step" in row:
            out[int(row["step"])] = {k: float(row[k]) for k in (*KEYS, "lr") if k in row}
    return out


def first_lr_drop(losses: dict[int, dict[str, float]]) -> int | None:
    """The first logged step whose ``lr`` is below the highest ``lr`` logged before it (the start of a decay or
    cool-down; the warmup only rises), or None if the rate never falls or the log has no ``lr``."""
    peak = None
    for t in sorted(losses):
        lr = losses[t].get("lr")
        if lr is None:
            continue
        if peak is not None and lr < peak * (1 - 1e-9):
            return t
        peak = lr if peak is None else max(peak, lr)
    return None


def paired_blocks(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]], block: int = 250,
                  before: int | None = None) -> dict[str, Any]:
    """Per block of ``block`` steps and per key: the mean of ``b / a - 1`` over the steps both runs logged
    (only those before step ``before`` when it is given)."""
    if block < 1:
        raise ValueError(f"block must be >= 1 step, got {block}")
    a = {t: v for t, v in a.items() if before is None or t < before}
    b = {t: v for t, v in b.items() if before is None or t < before}
    steps = sorted(set(a) & set(b))
    if not steps:
        raise ValueError("the two runs share no logged step" + (
            f" before step {before}" if before is not None else ": were they logged at the same --log-every?"))
    keys = [k for k in KEYS if all(k in a[t] and k in b[t] for t in steps)]
    blocks = []
    for lo in range(0, steps[-1], block):
        inside = [t for t in steps if lo < t <= lo + block]
        if not inside:
            continue
        last = lo + block if before is None else min(lo + block, before - 1)
        row: dict[str, Any] = {"first_step": lo + 1, "last_step": last, "logged_steps": len(inside)}
        for k in keys:
            s = difference_summary(np.array([b[t][k] / a[t][k] - 1.0 for t in inside if a[t][k] > 0], np.float64))
            row[k] = {"mean": s["mean"], "ci95": None if s["se"] is None else s["ci95"][1] - s["mean"]}  # half-width
        blocks.append(row)
    return {"common_steps": len(steps), "last_step": steps[-1], "keys": keys, "blocks": blocks,
            "only_in_a": len(set(a) - set(b)), "only_in_b": len(set(b) - set(a))}


def format_table(label_a: str, label_b: str, result: dict[str, Any]) -> str:
    keys = result["keys"]
    lines = [f"{label_b} / {label_a} - 1 over {result['common_steps']} common logged steps (last {result['last_step']}); "
             "mean ± 95% interval per block",
             f"{'steps':>13} " + "".join(f"{k:>20}" for k in keys)]
    for row in result["blocks"]:
        cells = []
        for k in keys:
            c = row[k]
            text = "-" if c["mean"] is None else f"{100 * c['mean']:+.2f}%" + (
                "" if c["ci95"] is None else f" ± {100 * c['ci95']:.2f}%")
            cells.append(f"{text:>20}")
        lines.append(f"{row['first_step']:>6}-{row['last_step']:<6} " + "".join(cells))
    if result.get("lr_drop"):
        lines.append("(cut before step {step}, where {who} learning rate first falls)".format(**result["lr_drop"]))
    if result["only_in_a"] or result["only_in_b"]:
        lines.append(f"(steps logged by one run only: {result['only_in_a']} in A, {result['only_in_b']} in B)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.paired_loss", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_a", metavar="A", help="baseline run directory (holds metrics.jsonl)")
    p.add_argument("run_b", metavar="B", help="candidate run directory, same --seed, --data and batch size")
    p.add_argument("--block", type=int, default=250, help="steps per row (default %(default)s)")
    p.add_argument("--until-lr-drop", action="store_true",
                   help="compare only the steps before either run's learning rate first falls (decay or cool-down)")
    p.add_argument("--out", default=None, help="also write the result as JSON here")
    args = p.parse_args(argv)
    try:
        a, b = read_losses(args.run_a), read_losses(args.run_b)
        drop = None
        if args.until_lr_drop:
            drops = [(f"{Path(run).name}'s", t) for run, t in ((args.run_a, first_lr_drop(a)),
                                                               (args.run_b, first_lr_drop(b))) if t is not None]
            if drops:
                step = min(t for _, t in drops)
                drop = {"step": step, "who": " and ".join(w for w, t in drops if t == step)}
        result = paired_blocks(a, b, args.block, before=None if drop is None else drop["step"])
        result["lr_drop"] = drop
    except (OSError, ValueError) as e:
        p.error(str(e))
    print(format_table(Path(args.run_a).name, Path(args.run_b).name, result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"a": args.run_a, "b": args.run_b, "block": args.block, **result},
                                             indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
