"""Judge accuracy against ground-truth rubric levels: exact level and within +-1.

Usage:
    python -m benchmarks.judges.accuracy --data data/simdroid_heldout --judge roboworld:offline \\
        [--group-by family] [--limit 200]

Scores every labelled episode of a SimDROID dataset directory (``meta/episodes.jsonl`` with the
final ``rubric_level`` + ``videos/<view>/episode_XXXXXX.mp4``) with the named judge -- the offline
judge or any VLM judge (``roboworld:openai/gpt-4o`` ...) -- and prints exact and within-1
accuracy, overall and per group (e.g. ``family`` or a ``source`` field that tells SimDROID
rollouts from world-model rollouts).  Failed judgements count as wrong and are reported.  The default offline
judge reads each episode with the shipped judge of the dataset's SimDROID scene (``meta/info.json``
``generation.scene``; classic where none is recorded), which the result records as ``scene``.

One report holds every judge on every dataset: ``benchmarks/results/judge_accuracy.json`` (``--out`` another
file), ``{"benchmark": "judge_accuracy", "runs": {"<judge> on <data>": result}}``; a run replaces its own entry
and keeps the others.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from judges.offline.dataset import iter_episodes, read_episode_index
from judges.offline.evaluate import grouped_accuracy, level_accuracy
from judges.registry import RUBRIC_OF_FAMILY, make_judge
from neuralsim.data.reader import dataset_scene

from ..common.results_path import results_path

logger = logging.getLogger(__name__)


@dataclass
class Args:
    data: str
    judge: str = "roboworld:offline"
    group_by: str | None = None
    limit: int | None = None
    out: str | None = None


def run(args: Args) -> dict:
    family, _, rest = args.judge.partition(":")
    if family not in ("roboworld", "binary"):
        raise ValueError("judge accuracy compares rubric levels; use a 'roboworld:' or 'binary:' judge, got "
                         f"{args.judge!r} (families: {sorted(RUBRIC_OF_FAMILY)})")
    judge = make_judge(RUBRIC_OF_FAMILY[family], rest or "offline")
    rows = read_episode_index(args.data)[: args.limit]
    truth, preds, groups, failures = [], [], [], []
    t0 = time.time()
    from tqdm import tqdm

    for ep in tqdm(iter_episodes(args.data, rows), total=len(rows), desc="judging"):
        j = judge(ep)
        label = ep.label if family == "roboworld" else int(ep.label == 5)
        truth.append(label)
        preds.append(j.score if j.ok else None)
        groups.append(str(ep.metadata.get(args.group_by, "?")) if args.group_by else "all")
        if not j.ok:
            failures.append({"episode_index": ep.metadata["episode_index"], "error": j.error})
    overall = level_accuracy(truth, preds, 6 if family == "roboworld" else 2)
    result = {
        "benchmark": "judge_accuracy", "judge": args.judge, "data": str(args.data), "scene": dataset_scene(args.data),
        "n": len(rows),
        "overall": overall, "seconds": time.time() - t0, "failures": failures[:50],
        "usage": getattr(getattr(judge, "usage", None), "to_dict", lambda: None)(),
    }
    if args.group_by:
        result["by_" + args.group_by] = grouped_accuracy(zip(groups, truth, preds))
    out = results_path("judge_accuracy", out=args.out)
    write_entry(out, result)
    result["path"] = str(out)
    return result


def entry_key(result: dict) -> str:
    """The key of a run in the report: ``"<judge> on <data>"``."""
    return f"{result['judge']} on {result['data']}"


def write_entry(path: Path, result: dict) -> None:
    """Put ``result`` into the report at ``path`` under :func:`entry_key`, keeping the other runs (atomic write).

    Raises:
        ValueError: ``path`` holds something other than a judge-accuracy report.
    """
    report = {"benchmark": "judge_accuracy", "runs": {}}
    if path.is_file():
        report = json.loads(path.read_text())
        if report.get("benchmark") != "judge_accuracy" or not isinstance(report.get("runs"), dict):
            raise ValueError(f"{path} is not a judge-accuracy report (no 'runs'); give --out a new file")
    report["runs"][entry_key(result)] = result
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.judges.accuracy", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="labelled dataset directory (held-out episodes)")
    p.add_argument("--judge", default="roboworld:offline",
                   help="judge name, e.g. roboworld:offline or roboworld:openai/gpt-4o")
    p.add_argument("--group-by", default=None,
                   help="episodes.jsonl field to break accuracy down by (family, source, ...)")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--out", default=None, help="JSON report the run is added to (default "
                                               "benchmarks/results/judge_accuracy.json)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    r = run(Args(data=a.data, judge=a.judge, group_by=a.group_by, limit=a.limit, out=a.out))
    o = r["overall"]
    print(f"{a.judge}: n={o['n']} exact={o['exact']:.3f} within_1={o['within_1']:.3f} failed={o['failed']}")
    for g, acc in r.get("by_" + (a.group_by or ""), {}).items():
        print(f"  {a.group_by}={g}: n={acc['n']} exact={acc['exact']:.3f} within_1={acc['within_1']:.3f}")
    print(f"wrote {r['path']}")


if __name__ == "__main__":
    main()
