"""Accuracy of a judge against ground-truth rubric levels: exact level and within +-1.

Works for any judge returning a Judgement whose score is a rubric level (the offline judge, or a
VLM judge such as ``roboworld:openai/gpt-4o``).  Used by ``benchmarks/judges/accuracy.py``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Sequence

import numpy as np


def level_accuracy(truth: Sequence[int], pred: Sequence[float | None], num_levels: int = 6) -> dict[str, Any]:
    """Exact and within-1 accuracy, confusion matrix and failure count (failed predictions count as wrong)."""
    truth = [int(t) for t in truth]
    ok = [(t, int(round(p))) for t, p in zip(truth, pred) if p is not None and np.isfinite(p)]
    n = len(truth)
    conf = np.zeros((num_levels, num_levels), dtype=np.int64)
    for t, p in ok:
        if 0 <= t < num_levels and 0 <= p < num_levels:
            conf[t, p] += 1
    exact = sum(t == p for t, p in ok)
    within1 = sum(abs(t - p) <= 1 for t, p in ok)
    return {
        "n": n,
        "failed": n - len(ok),
        "exact": exact / n if n else float("nan"),
        "within_1": within1 / n if n else float("nan"),
        "mae": float(np.mean([abs(t - p) for t, p in ok])) if ok else float("nan"),
        "confusion": conf.tolist(),  # rows = truth level, columns = predicted level
        "truth_counts": np.bincount(truth, minlength=num_levels).tolist() if truth else [],
    }


def grouped_accuracy(rows: Iterable[tuple[str, int, float | None]]) -> dict[str, dict[str, Any]]:
    """:func:`level_accuracy` per group name (e.g. per task family or per data source)."""
    by: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for g, t, p in rows:
        by[g][0].append(t)
        by[g][1].append(p)
    return {g: level_accuracy(t, p) for g, (t, p) in sorted(by.items())}
