"""The RoboArena benchmark's report: two matplotlib PNGs and one static HTML page beside them.

``write_report(summary, out)`` writes ``out/scatter.png`` (each policy's judged score in the world model, and the
same judge on SimDROID's frames, against its true mean level, with 95% bootstrap intervals),
``out/bars.png`` (success rates per policy in each world and by each judge; the per-policy bias split into the
judge's and the world model's shares) and ``out/index.html`` (headline figures, leaderboard, comparisons,
decomposition, the plots, the summary's side-by-side videos that are on disk -- naming the policies whose videos
are not --, failed episodes and judge errors).  The plots name every point without overlap (:func:`place_labels`)
and are saved cropped to all they draw; the page fits a 1280-px window (confidence intervals under their values;
a table too wide for a narrower window scrolls in its own box).  The page needs no server and no script from the
network; a small inline script marks ``<body>`` with how many of its images decoded (``data-images-ok="k/n"``), how
many videos it holds and which elements reach past the window's edge, which the test reads in a headless browser.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any


def _f(x: Any, spec: str = ".2f") -> str:
    return "&ndash;" if x is None else format(x, spec)


def _ci(ci: list[float] | None, spec: str = ".2f") -> str:
    return "" if not ci else f' <span class="ci">[{ci[0]:{spec}}, {ci[1]:{spec}}]</span>'


def _err(value: float | None, ci: list[float] | None) -> list[float]:
    if value is None or not ci:
        return [0.0, 0.0]
    return [max(0.0, value - ci[0]), max(0.0, ci[1] - value)]


def _short(judge: str) -> str:
    """A judge's name for a plot label: its spec without the ``?options`` part (a base URL, retries...)."""
    return judge.split("?", 1)[0]


#: Label offsets tried around a point, in points: rings of 8 directions, nearest ring first.
_RING = [(dx * r, dy * r) for r in (4, 9, 15, 22, 30, 40)
         for dx, dy in ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1))]


def place_labels(ax: Any, labels: list[tuple[str, float, float]], obstacles: list[tuple[float, float]],
                 fontsize: float = 7) -> list[Any]:
    """Name each point ``(text, x, y)`` of ``ax`` beside it so that no two names overlap, nor a name a marker
    (``obstacles``, data coordinates) or the axes' edge: each takes the first free offset of :data:`_RING`, with a
    thin leader line when it sits past the nearest ring (if no offset is free, the one overlapping least).  Call
    it after the figure's layout is final (``tight_layout``); returns the annotations."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    from matplotlib.transforms import Bbox

    half = 3.0 * fig.dpi / 72.0  # half a marker (ms=6 points), in pixels
    marks = [Bbox.from_extents(mx - half, my - half, mx + half, my + half)
             for mx, my in (ax.transData.transform((x, y)) for x, y in obstacles)]
    placed: list[Any] = []  # window extents of the names placed so far
    out = []
    for text, x, y in labels:
        probe = ax.annotate(text, (x, y), xytext=_RING[0], textcoords="offset points", fontsize=fontsize)
        best, best_cost = None, None
        for dx, dy in _RING:
            probe.set_position((dx, dy))
            probe.set_ha("left" if dx > 0 else "right" if dx < 0 else "center")
            probe.set_va("bottom" if dy > 0 else "top" if dy < 0 else "center")
            box = probe.get_window_extent(renderer).padded(0.5)
            if not (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1):
                continue
            overlap = sum(_area(box, b) for b in placed)
            cost = (overlap > 0, overlap, any(_area(box, m) > 0 for m in marks))
            if best_cost is None or cost < best_cost:
                best, best_cost = (dx, dy, probe.get_ha(), probe.get_va(), box), cost
            if cost == (False, 0, False):
                break
        probe.remove()
        if best is None:  # nowhere inside the axes: beside the point, as matplotlib would
            best = (4, 3, "left", "bottom", None)
        dx, dy, ha, va, box = best
        far = max(abs(dx), abs(dy)) > _RING[0][0]  # past the nearest ring: a leader line to its point
        ann = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize, ha=ha,
                          va=va, arrowprops=dict(arrowstyle="-", lw=0.5, color="0.45", shrinkA=0, shrinkB=3)
                          if far else None)
        if box is not None:
            placed.append(box)
        out.append(ann)
    return out


def _area(a: Any, b: Any) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(0.0, w) * max(0.0, h)


def scatter_figure(summary: dict) -> Any:
    """Each policy's judged score (in the world model, and the same judge on SimDROID's frames) against its true
    mean level, with 95% bootstrap intervals; every point of the world model named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in summary["rows"] if r["true_mean_level"] is not None]
    top = 5.0 if summary["judge"].startswith("roboworld") else 1.0
    fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=110)
    named, marks = [], []
    for key, label, style in (("judged_mean", "judge in NeuralDROID (world model)", dict(fmt="o", color="C0")),
                              ("sim_judged_mean", "same judge on SimDROID frames",
                               dict(fmt="s", color="C1", mfc="none"))):
        pts = [r for r in rows if r[key] is not None]
        if not pts:
            continue
        x = [r["true_mean_level"] for r in pts]
        y = [r[key] for r in pts]
        xerr = list(zip(*[_err(r["true_mean_level"], r["true_mean_level_ci95"]) for r in pts]))
        yerr = list(zip(*[_err(r[key], r[key + "_ci95"]) for r in pts]))
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, label=label, capsize=2, lw=0.8, ms=6, **style)
        marks += list(zip(x, y))
        if key == "judged_mean":
            named = [(r["policy"], r["true_mean_level"], r[key]) for r in pts]
    ax.plot([0, 5], [0, top], color="0.6", lw=0.8, ls="--", label="judged = true")
    c = summary["comparisons"]["world_model"]
    ax.set_title(f"Pearson {_f(c['pearson'], '.2f')}, Spearman {_f(c['spearman'], '.2f')} "
                 f"({len(rows)} policies x {summary['episodes_per_policy']} episodes)", fontsize=9)
    ax.set_xlabel("true mean rubric level in SimDROID (0-5)")
    ax.set_ylabel(f"mean judged score\n({_short(summary['judge'])})")
    ax.set_xlim(-0.35, 5.35)
    ax.set_ylim(-0.12 * top, 1.08 * top)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    place_labels(ax, sorted(named, key=lambda t: (t[1], t[2])), marks)
    return fig


def bars_figure(summary: dict) -> Any:
    """Success rates per policy in each world and by each judge; below, the per-policy bias split into the judge's
    and the world model's shares."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["policy"] for r in summary["rows"]]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(max(6.4, 0.62 * len(names) + 2), 6.6), dpi=110, sharex=True)
    bars = (("true_success", "true (SimDROID)", "0.3"), ("judged_success", "judge in NeuralDROID", "C0"),
            ("binary_success", "binary judge in NeuralDROID", "C2"), ("sim_judged_success", "judge on SimDROID", "C1"))
    width = 0.8 / len(bars)
    for k, (key, label, color) in enumerate(bars):
        xs = [i + (k - (len(bars) - 1) / 2) * width for i in range(len(names))]
        vals = [r[key] if r[key] is not None else 0.0 for r in summary["rows"]]
        errs = list(zip(*[_err(r[key], r[key + "_ci95"]) for r in summary["rows"]]))
        a1.bar(xs, vals, width, yerr=errs, label=label, color=color, capsize=1.5, error_kw={"lw": 0.6})
    a1.set_ylabel("success rate")
    a1.set_ylim(0, 1.05)
    a1.legend(fontsize=7, ncol=2)
    a1.grid(axis="y", alpha=0.3)
    for k, (key, label, color) in enumerate((("bias_judge", "judge's share (judge on SimDROID - true)", "C1"),
                                             ("bias_world_model", "world model's share (NeuralDROID - SimDROID, "
                                                                  "same judge)", "C0"))):
        xs = [i + (k - 0.5) * 0.38 for i in range(len(names))]
        vals = [r[key] if r[key] is not None else 0.0 for r in summary["rows"]]
        errs = list(zip(*[_err(r[key], r[key + "_ci95"]) for r in summary["rows"]]))
        a2.bar(xs, vals, 0.38, yerr=errs, label=label, color=color, capsize=1.5, error_kw={"lw": 0.6})
    a2.plot(range(len(names)), [r["bias"] if r["bias"] is not None else 0.0 for r in summary["rows"]], "k_", ms=14,
            mew=2, label="total bias (judged - true)")
    a2.axhline(0, color="0.4", lw=0.8)
    a2.set_ylabel("bias: judged - true\n(judge scale)")
    a2.legend(fontsize=7)
    a2.grid(axis="y", alpha=0.3)
    a2.set_xticks(range(len(names)))
    a2.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
    fig.align_ylabels((a1, a2))
    fig.tight_layout()
    return fig


def write_plots(summary: dict, out: Path) -> dict[str, str]:
    """``scatter.png`` and ``bars.png`` in ``out`` (each cropped to everything drawn, so no label is cut); returns
    their file names with a caption each."""
    import matplotlib.pyplot as plt

    for name, make in (("scatter.png", scatter_figure), ("bars.png", bars_figure)):
        fig = make(summary)
        fig.savefig(out / name, bbox_inches="tight", pad_inches=0.08)
        plt.close(fig)
    return {"scatter.png": "mean judged score against the true mean level, per policy (95% bootstrap intervals)",
            "bars.png": "success rates in each world and by each judge; the bias split into the judge's and the world "
                        "model's shares"}


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1200px; color: #222; }
.wide { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; text-align: right; vertical-align: top; }
td { white-space: nowrap; } td.what, td.name { white-space: normal; overflow-wrap: break-word; }
th { background: #f3f3f3; font-weight: 600; } td:first-child, th:first-child { text-align: left; }
.ci { color: #777; font-size: 0.85em; } #leaderboard .ci { display: block; } .fail { color: #b00; }
.head { font-size: 1.2em; }
video { margin: 0.3em; border: 1px solid #ccc; image-rendering: pixelated; max-width: 100%; }
figure { display: inline-block; margin: 0.5em; max-width: 100%; vertical-align: top; } img { max-width: 100%; }
"""

#: Marks ``<body>`` with what a test reads in a headless browser: images decoded (``data-images-ok="k/n"``), video
#: sources (``data-videos``), and the elements that reach past the window's right edge (``data-overflow``, empty
#: when none; ``data-page-width`` / ``data-view-width``: the document's scroll width and the window's).
_CHECK = """
<script>
window.addEventListener("load", function () {
  var imgs = Array.from(document.images), ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  var view = document.documentElement.clientWidth, wide = [];
  document.querySelectorAll("body *").forEach(function (el) {
    if (el.tagName !== "SCRIPT" && el.getBoundingClientRect().right > view + 0.5) {
      wide.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : ""));
    }
  });
  var b = document.body;
  b.setAttribute("data-images-ok", ok.length + "/" + imgs.length);
  b.setAttribute("data-videos", String(document.querySelectorAll("video source").length));
  b.setAttribute("data-overflow", wide.slice(0, 5).join(" "));
  b.setAttribute("data-page-width", String(document.documentElement.scrollWidth));
  b.setAttribute("data-view-width", String(view));
});
</script>
"""


def write_html(summary: dict, out: Path, images: dict[str, str]) -> Path:
    """``out/index.html`` from the summary and the plots (file name -> caption)."""
    e = html.escape
    d, c = summary["decomposition"], summary["comparisons"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>RoboArena on ground truth</title>"
             f"<style>{_STYLE}</style></head><body>",
             "<h1>RoboArena on ground truth</h1>",
             f"<p>{len(summary['policies'])} policies &times; {summary['episodes_per_policy']} episodes, closed loop "
             f"in NeuralDROID-v0 (world model <code>{e(str(summary['world_model']))}</code>), scored by "
             f"<code>{e(summary['judge'])}</code>; the same policies from the same initial states closed loop in "
             f"{e(summary.get('truth_env', 'SimDROID-v0'))}, scored by ground truth. "
             f"{summary['failed_episodes']} failed and "
             f"{summary['unjudged_episodes']} unjudged episodes.</p>",
             "" if not summary.get("incomplete") else
             f"<p class='fail'>Incomplete run: episodes recorded "
             f"{e(', '.join(f'{k} {v}' for k, v in summary['incomplete'].items()))} of "
             f"{summary['episodes_per_policy']}.</p>",
             f"<p class='head' id='headline'>Pearson <b>{_f(summary['pearson'], '.3f')}</b>"
             f"{_ci(summary['pearson_ci95'])}, Spearman <b>{_f(summary['spearman'], '.3f')}</b>"
             f"{_ci(summary['spearman_ci95'])}, MMRV <b>{_f(summary['mmrv'], '.3f')}</b> "
             f"(judged score vs true level; MMRV of judged vs true success rates)</p>",
             "<h2>Leaderboard</h2><div class='wide'><table id='leaderboard'><tr><th>policy</th>"
             "<th>rank (judged / true)</th><th>judged score</th><th>judged success</th><th>binary judge success</th>"
             "<th>true level</th>"
             "<th>true success</th><th>bias</th><th>judge on SimDROID</th><th>episodes (failed, unjudged)</th></tr>"]
    order = sorted(summary["rows"], key=lambda r: -(r["judged_mean"] if r["judged_mean"] is not None else -1))
    for r in order:
        parts.append(
            f"<tr><td class='name'>{_breakable(r['policy'])}</td>"
            f"<td>{_f(r.get('rank_judged'), 'g')} / {_f(r.get('rank_true'), 'g')}</td>"
            f"<td>{_f(r['judged_mean'])}{_ci(r['judged_mean_ci95'])}</td>"
            f"<td>{_f(r['judged_success'], '.0%')}{_ci(r['judged_success_ci95'], '.0%')}</td>"
            f"<td>{_f(r['binary_success'], '.0%')}{_ci(r['binary_success_ci95'], '.0%')}</td>"
            f"<td>{_f(r['true_mean_level'])}{_ci(r['true_mean_level_ci95'])}</td>"
            f"<td>{_f(r['true_success'], '.0%')}{_ci(r['true_success_ci95'], '.0%')}</td>"
            f"<td>{_f(r['bias'], '+.2f')}{_ci(r['bias_ci95'], '+.2f')}</td>"
            f"<td>{_f(r['sim_judged_mean'])}{_ci(r['sim_judged_mean_ci95'])}</td>"
            f"<td>{r['episodes']} (<span class='{'fail' if r['failed'] else ''}'>{r['failed']}</span>, "
            f"{r['unjudged']})</td></tr>")
    parts.append("</table></div>")
    parts.append("<h2>Ranking agreement</h2><div class='wide'><table id='comparisons'><tr><th>comparison</th>"
                 "<th>policies</th><th>Pearson</th><th>Spearman</th><th>MMRV</th></tr>")
    for key, v in c.items():
        parts.append(f"<tr><td class='what'><b>{e(key)}</b>: {e(v['what'])}</td><td>{v['policies']}</td>"
                     f"<td>{_f(v['pearson'], '.3f')}{_ci(v['pearson_ci95'])}</td>"
                     f"<td>{_f(v['spearman'], '.3f')}{_ci(v['spearman_ci95'])}</td>"
                     f"<td>{_f(v['mmrv'], '.3f')}</td></tr>")
    parts.append("</table></div>")
    parts.append(
        f"<h2>Decomposition</h2><p id='decomposition'>The judge alone (on SimDROID's frames) ranks the policies at "
        f"Spearman {_f(d['spearman_judge_on_sim'], '.3f')}; the world model under that fixed judge (NeuralDROID's "
        f"frames vs SimDROID's) at {_f(d['spearman_world_model_vs_judge_on_sim'], '.3f')}. Mean absolute per-policy "
        f"bias: world model {_f(d['mean_abs_bias_world_model'])}, judge {_f(d['mean_abs_bias_judge'])}. "
        + (f"The larger ranking error is the <b>{e(d['blames'])}</b>'s.</p>" if d.get("blames") else
           f"<span class='fail'>No verdict: {e(str(d.get('no_verdict') or 'a Spearman it needs is undefined'))}."
           "</span></p>"))
    parts.append("<h2>Plots</h2>" + "".join(f"<figure><img src='{e(src)}' alt='{e(caption)}'><figcaption>"
                                            f"{e(caption)}</figcaption></figure>" for src, caption in images.items()))
    parts.append(_videos_html(summary, out))
    errors = [(r["policy"], err) for r in summary["rows"] for err in r.get("errors", [])]
    if errors:
        parts.append("<h2>Failed episodes</h2><ul>" + "".join(f"<li class='fail'>{e(p)}: {e(err)}</li>"
                                                              for p, err in errors) + "</ul>")
    judge_errors = [(r["policy"], err) for r in summary["rows"] for err in r.get("judge_errors", [])]
    if judge_errors:
        parts.append("<h2>Judge errors</h2><p>Episodes the judge could not score (they count as unjudged):</p><ul>"
                     + "".join(f"<li class='fail'>{e(p)}: {e(err)}</li>" for p, err in judge_errors) + "</ul>")
    parts.append(_CHECK + "</body></html>\n")
    path = out / "index.html"
    path.write_text("\n".join(parts))
    return path


def _breakable(name: str) -> str:
    """A policy name, escaped, that may wrap after its ``+`` and ``:`` (``expert+missed_grasp``,
    ``openpi:host:8000``)."""
    return "".join(html.escape(c) + ("<wbr>" if c in "+:/" else "") for c in name)


def _videos_html(summary: dict, out: Path) -> str:
    """The side-by-side videos on disk, and which policies have none here, and why."""
    e = html.escape
    shown, missing, none = [], [], []
    for r in summary["rows"]:
        recorded = r.get("videos", [])
        here = [v for v in recorded if (out / v).is_file()]
        shown += [(r["policy"], v) for v in here]
        if len(here) < len(recorded):
            missing.append((r["policy"], [v for v in recorded if v not in here]))
        elif not recorded:
            none.append(r["policy"])
    parts = [f"<h2>Episodes side by side</h2><p id='videos-note'>Videos of {len({p for p, _ in shown})} of "
             f"{len(summary['rows'])} policies. "
             "Left: NeuralDROID (the world model); right: SimDROID, the same policy from the same initial state."]
    if missing:
        parts.append(" Recorded by the run but not in this directory (not copied here): "
                     + ", ".join(f"<span title='{e(', '.join(vs))}'>{e(p)}</span>" for p, vs in missing) + ".")
    if none:
        videos = summary.get("config", {}).get("videos")
        why = ("the run recorded no videos (--videos 0)" if videos == 0 else
               "no video was recorded (the policy failed before its first rollout finished)")
        parts.append(f" No video for {e(', '.join(none))}: {why}.")
    parts.append("</p>")
    for policy, v in shown:
        parts.append(f"<figure><video controls loop muted width='390'><source src='{e(v)}' type='video/mp4'>"
                     f"</video><figcaption>{e(policy)}: {e(Path(v).stem)}</figcaption></figure>")
    return "".join(parts)


def write_report(summary: dict, out: str | Path) -> Path:
    """Plots and ``index.html`` in ``out``; returns the page's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return write_html(summary, out, write_plots(summary, out))
