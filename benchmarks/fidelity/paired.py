"""Paired A/Bs of the fidelity benchmark (:mod:`benchmarks.fidelity`): model B minus model A, episode by episode.

:func:`paired_differences` on one split of two evaluations, :func:`pair_results` on every split they share,
:func:`paired_reports` from two saved JSON reports (``--paired A.json B.json``), :func:`format_paired` the table;
:func:`difference_summary` gives each mean difference a 95% Student's t interval (:func:`t_quantile_975`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from neuralsim.episode import VIEW_NAMES

from ..common.stats import mcnemar_exact
from .metrics import POSITION_TOLERANCE_M

#: (metric, window) rows of the paired differences and of the per-group scores.
PAIRED_ROWS = (("psnr", "in_horizon"), ("psnr", "beyond"), ("ssim", "in_horizon"), ("ssim", "beyond"))


def paired_differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """B minus A, episode by episode, for two evaluations of one split (``results[i]["splits"][split]``).

    Every episode is scored by both models, so the spread *between* episodes (some are hard for any model)
    cancels and a difference of a few hundredths of a dB can be told from noise.  For each (metric, window)
    and view: the mean of the per-episode differences, its standard error, a 95% interval
    (:func:`difference_summary`) and how many episodes B scores higher.  Episodes are
    matched by their index in the split; those only one side scored are left out (``episodes`` says how
    many pair up).  The cube row is the end-of-episode position error (lower is better), with the
    episodes that cross the 5 cm line each way.
    """
    for name, r in (("A", a), ("B", b)):
        if "episode_indices" not in r or "per_episode" not in (r.get("psnr") or {}):
            raise ValueError(f"report {name} has no per-episode scores: it was written by an older version or is an "
                             "--autoencoder-only report; evaluate it again")
    ia = {idx: k for k, idx in enumerate(a["episode_indices"])}
    pairs = [(ia[idx], k) for k, idx in enumerate(b["episode_indices"]) if idx in ia]
    if not pairs:
        raise ValueError("the two reports share no episode: were they run on the same split?")
    out: dict[str, Any] = {"episodes": len(pairs), "frames": {}}
    # older reports have no sharpness: paired only where both reports have it
    sharp = [("sharpness", w) for w in ("in_horizon", "beyond")] if "sharpness" in a and "sharpness" in b else []
    for metric, window in (*PAIRED_ROWS, *sharp):
        pa, pb = a[metric]["per_episode"][window], b[metric]["per_episode"][window]
        row = {}
        for view in (*VIEW_NAMES, "mean"):
            d = np.array([pb[view][j] - pa[view][i] for i, j in pairs
                          if pa[view][i] is not None and pb[view][j] is not None], np.float64)
            row[view] = difference_summary(d)
        out["frames"][f"{metric}_{window}"] = row
    ea = (a.get("position") or {}).get("per_episode_error_m")
    eb = (b.get("position") or {}).get("per_episode_error_m")
    if ea is not None and eb is not None:
        xa = np.array([ea[i] for i, _ in pairs], np.float64)
        xb = np.array([eb[j] for _, j in pairs], np.float64)
        cube = difference_summary(xb - xa)
        cube["b_better"] = int((xb < xa).sum())  # lower error is better here
        near_a, near_b = xa < POSITION_TOLERANCE_M, xb < POSITION_TOLERANCE_M
        cube["into_5cm"] = int((near_b & ~near_a).sum())
        cube["out_of_5cm"] = int((near_a & ~near_b).sum())
        # does the share below 5 cm differ? the episodes that cross the line are the discordant pairs
        cube["share_below_5cm"] = {"a": float(near_a.mean()), "b": float(near_b.mean()),
                                   "mcnemar_p": mcnemar_exact(cube["out_of_5cm"], cube["into_5cm"])}
        out["cube_end_error_m"] = cube
    return out


def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom: the factor on the standard error of a
    95% interval from ``df + 1`` paired differences (12.71 for 2 of them, 3.18 for 4, 2.00 for 60).

    Inverts (by bisection) the exact two-sided probability for an integer ``df``, a finite series in
    theta = atan(t / sqrt(df)) (Abramowitz and Stegun 26.7.3-4); above 1,000 degrees of freedom, the normal 1.96.
    """
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if df > 1000:
        return 1.959964

    def two_sided(t: float) -> float:  # P(|T| <= t)
        theta = math.atan(t / math.sqrt(df))
        c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
        if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
            for k in range(1, (df - 1) // 2):
                term *= c2 * (2 * k) / (2 * k + 1)
                total += term
            return 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0))
        for k in range(1, df // 2):  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return math.sin(theta) * total

    lo, hi = 0.0, 1000.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if two_sided(mid) < 0.95 else (lo, mid)
    return (lo + hi) / 2


def difference_summary(d: np.ndarray) -> dict[str, Any]:
    """Mean of paired differences ``d``, its standard error, a 95% interval (Student's t with n - 1 degrees of
    freedom, so a handful of episodes gets the wide interval it deserves) and how many are positive."""
    if len(d) == 0:
        return {"n": 0, "mean": None, "se": None, "ci95": None, "b_better": 0}
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else None
    mean = float(d.mean())
    half = None if se is None else t_quantile_975(len(d) - 1) * se
    return {"n": int(len(d)), "mean": mean, "se": se,
            "ci95": None if se is None else [mean - half, mean + half], "b_better": int((d > 0).sum())}


def pair_results(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """B - A (:func:`paired_differences`) on every split two result entries both hold, labelled with both
    models and the split."""
    return [{"a": a["label"], "b": b["label"], "split": split,
             **paired_differences(a["splits"][split], b["splits"][split])}
            for split in a["splits"] if split in b["splits"]]


def format_paired(diff: dict[str, Any]) -> str:
    """The paired table of one :func:`pair_results` item: per (metric, window), each view's and the mean's
    difference B - A, then B's wins."""
    columns = (*VIEW_NAMES, "mean")

    def cell(summary: dict[str, Any], decimals: int) -> str:
        if summary["mean"] is None:
            return f"{'-':>22}"
        text = f"{summary['mean']:+.{decimals}f}"
        if summary["se"] is not None:
            text += f" ± {summary['ci95'][1] - summary['mean']:.{decimals}f}"
        return f"{text:>22}"

    def wins(summary: dict[str, Any]) -> str:
        return f"{str(summary['b_better']) + '/' + str(summary['n']):>22}"

    head = f"{'':<18}" + "".join(f"{v.replace('_left', '').replace('_image', ''):>22}" for v in columns)
    lines = [f"paired, {diff['b']} - {diff['a']}, {diff['split']}: {diff['episodes']} episodes "
             "(mean difference ± 95% interval; then B higher in k of n)", head]
    for key, row in diff["frames"].items():
        decimals = 3 if key.startswith("psnr") else 4
        lines.append(f"{key:<18}" + "".join(cell(row[v], decimals) for v in columns))
        lines.append(f"{'':<18}" + "".join(wins(row[v]) for v in columns))
    if "cube_end_error_m" in diff:
        c = diff["cube_end_error_m"]
        ci = "" if c["se"] is None else f" ± {100 * (c['ci95'][1] - c['mean']):.1f}"
        share = c.get("share_below_5cm")
        lines.append(f"cube end error {100 * c['mean']:+.1f}{ci} cm; B nearer the true cube in "
                     f"{c['b_better']}/{c['n']}; {c['into_5cm']} episodes move into and {c['out_of_5cm']} out of 5 cm"
                     + (f" (share {100 * share['a']:.0f}% -> {100 * share['b']:.0f}%, "
                        f"exact McNemar p = {share['mcnemar_p']:.3g})" if share is not None else ""))
    return "\n".join(lines)



def load_result(spec: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``REPORT.json`` or ``REPORT.json:LABEL`` -> (the report, its result entry of that label)."""
    head, sep, tail = spec.rpartition(":")
    path, label = (head, tail) if sep and head.endswith(".json") else (spec, "")
    try:
        report = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"no fidelity report at {path!r}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path!r} is not a JSON report: {e}") from None
    if report.get("benchmark") != "fidelity" or not report.get("results"):
        raise ValueError(f"{path!r} is not a fidelity report (no 'benchmark': 'fidelity' with results)")
    labels = [r["label"] for r in report["results"]]
    if label:
        if label not in labels:
            raise ValueError(f"{path!r} has no model labelled {label!r}; it has {labels}")
        return report, report["results"][labels.index(label)]
    if len(labels) > 1:
        raise ValueError(f"{path!r} holds {len(labels)} models {labels}: name one as {path}:LABEL")
    return report, report["results"][0]


def paired_reports(spec_a: str, spec_b: str) -> list[dict[str, Any]]:
    """``--paired A B``: B - A on every split both reports evaluated; refuses reports of different splits."""
    (rep_a, a), (rep_b, b) = load_result(spec_a), load_result(spec_b)
    for key in ("data", "ood_data"):
        da, db = rep_a["protocol"].get(key), rep_b["protocol"].get(key)
        if da and db and Path(da).name != Path(db).name:
            raise ValueError(f"the reports were run on different {key} splits ({da!r} and {db!r}): nothing to pair")
    out = pair_results(a, b)
    if not out:
        raise ValueError(f"the reports share no split ({list(a['splits'])} and {list(b['splits'])})")
    return out

