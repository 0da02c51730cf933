"""Does a judge rank policies as the ground truth does?  Policies of graded skill, closed loop in SimDROID.

Usage:
    python -m benchmarks.judges.ranking --episodes 12                   # the shipped judge, the shipped model's scene
    python -m benchmarks.judges.ranking --scene legible --judge roboworld:offline/runs/judge --quick

Each policy of a graded set -- the scripted expert at noise 0, 0.3, 0.6 and 0.9, the expert with each of its
failure modes (:data:`neuralsim.envs.experts.FAILURE_MODES`), random and zero -- acts closed loop in SimDROID from
the same initial states (seeds ``seed0 + i``, task families in turn).  Every finished episode is scored by each
``--judge`` on SimDROID's own frames and by the simulator's rubric level (the truth).  The report gives, per judge,
the episode-level accuracy (exact level, within one) and the agreement of the policy ranking: Pearson and Spearman
between each policy's mean judged level and its mean true level, over all policies and over the scripted ones
(the policies that move the arm with intent).  This isolates the judge: the frames are the simulator's, so a world
model plays no part.  The scene (``--scene``) defaults to the one the shipped world model was trained on.  Writes
``benchmarks/results/judge_ranking.json`` (classic, ``SimDROID-v0``) or ``judge_ranking_<scene>.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from policies.heldout import HELDOUT_SEED0, heldout_starts

from ..common.policy_set import PolicyChoice, graded_policies
from ..common.results_path import out_help, results_path
from ..common.stats import pearson, spearman, wilson_interval

log = logging.getLogger(__name__)

@dataclass
class Args:
    scene: str | None = None
    """SimDROID scene (``"classic"``, ``"legible"``); None: the shipped world model's
    (:func:`~neuralsim.envs.neural_droid.checkpoint_scene`)."""
    judges: list[str] = field(default_factory=lambda: ["roboworld:offline"])
    episodes: int = 12
    seed0: int = HELDOUT_SEED0
    policies: list[str] | None = None
    out: str | None = None
    quick: bool = False
    progress: bool = True


def _rank_stats(rows: list[dict]) -> dict:
    """Pearson and Spearman between the policies' mean judged level and their mean true level, and Spearman
    between their judged and true success rates."""
    ok = [r for r in rows if r["m"] is not None and math.isfinite(r["m"])]
    j, t = [r["m"] for r in ok], [r["true_mean_level"] for r in ok]
    js, ts = [r["s"] for r in ok], [r["true_success"] for r in ok]
    return {"policies": len(ok), "pearson": pearson(j, t), "spearman": spearman(j, t),
            "success_spearman": spearman(js, ts)}


def run(args: Args) -> dict:
    import gymnasium as gym

    import neuralsim  # noqa: F401  (registers the envs)
    from neuralsim.envs.scene import get_scene
    from neuralsim.rewards import make_reward_fn
    from policies import run_episode

    if args.episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {args.episodes}")
    judges = {}
    for spec in args.judges:
        family = spec.partition(":")[0]
        if family not in ("roboworld", "binary"):
            raise ValueError(f"--judge {spec!r}: the ranking compares rubric levels; use a 'roboworld:' or "
                             "'binary:' judge")
        judges[spec] = (family, make_reward_fn(spec))
    chosen = graded_policies()
    if args.policies:
        known = {name for name, _, _ in chosen}
        unknown = sorted(set(args.policies) - known)
        if unknown:
            raise ValueError(f"unknown policies {unknown}; the graded set is {sorted(known)}")
        chosen = [p for p in chosen if p[0] in args.policies]
    scene = args.scene or default_scene()
    env_id = get_scene(scene).env_id
    env = gym.make(env_id, reward_fn="ground_truth")
    from tqdm import tqdm

    bar = tqdm(total=len(chosen) * args.episodes, desc="episodes", disable=not args.progress)
    t0 = time.time()
    policies, episodes = [], []
    for name, kind, kw in chosen:
        policy = PolicyChoice(name, kind, kw).build(env=env, seed=args.seed0)
        rows = []
        for seed, family in heldout_starts(args.episodes, args.seed0):
            res = run_episode(env, policy, seed=seed, options={"task": family})
            level, success = int(res.info["rubric_level"]), bool(res.info["success"])
            row = {"policy": name, "seed": seed, "family": family, "true_level": level,
                   "true_success": success, "judged": {}}
            for spec, (fam, judge) in judges.items():
                j = judge(res.episode)
                row["judged"][spec] = float(j.score) if j.ok else None
                if not j.ok:
                    log.warning("%s failed on %s seed %d: %s", spec, name, seed, j.error)
            rows.append(row)
            bar.update()
        episodes += rows
        entry = {"name": name, "episodes": len(rows),
                 "true_mean_level": float(np.mean([r["true_level"] for r in rows])),
                 "true_success": float(np.mean([r["true_success"] for r in rows])),
                 "true_success_ci95": wilson_interval(sum(r["true_success"] for r in rows), len(rows)),
                 "judged": {}}
        for spec, (fam, _) in judges.items():
            got = [r["judged"][spec] for r in rows if r["judged"][spec] is not None]
            top = 5 if fam == "roboworld" else 1
            entry["judged"][spec] = {
                "mean": float(np.mean(got)) if got else None,
                "success": float(np.mean([g >= top for g in got])) if got else None,
                "failed": len(rows) - len(got)}
        policies.append(entry)
    bar.close()
    env.close()
    summary = {}
    for spec, (fam, _) in judges.items():
        pairs = [(r["judged"][spec], r["true_level"] if fam == "roboworld" else int(r["true_success"]))
                 for r in episodes]
        scored = [(j, t) for j, t in pairs if j is not None]
        flat = [{"true_mean_level": p["true_mean_level"], "true_success": p["true_success"],
                 "m": p["judged"][spec]["mean"], "s": p["judged"][spec]["success"]} for p in policies]
        scripted = [f for f, (n, kind, _) in zip(flat, chosen) if kind == "scripted"]
        summary[spec] = {
            "episodes": len(pairs), "failed": len(pairs) - len(scored),
            "exact": float(np.mean([round(j) == t for j, t in pairs if j is not None])) if scored else None,
            "within_1": float(np.mean([abs(j - t) <= 1 for j, t in scored])) if scored else None,
            "all": _rank_stats(flat), "scripted": _rank_stats(scripted)}
    report = {"benchmark": "judge_ranking", "scene": scene, "env_id": env_id, "episodes_per_policy": args.episodes,
              "seed0": args.seed0, "judges": summary, "policies": policies, "per_episode": episodes,
              "seconds": round(time.time() - t0, 1)}
    return report


def default_scene() -> str:
    """The scene the ranking runs in by default: the shipped world model's."""
    from neuralsim.envs.neural_droid import checkpoint_scene

    return checkpoint_scene()


def results_name(scene: str) -> str:
    """The report's file name stem: ``judge_ranking`` (classic) or ``judge_ranking_<scene>``."""
    return "judge_ranking" if scene == "classic" else f"judge_ranking_{scene}"


def print_report(report: dict) -> None:
    specs = list(report["judges"])
    print(f"\n{report['env_id']}: {report['episodes_per_policy']} episodes per policy, {report['seconds']:.0f} s")
    head = f"{'policy':24s} {'true level':>10s} {'true success':>12s}" + "".join(f" {s[-22:]:>24s}" for s in specs)
    print(head)
    for p in report["policies"]:
        cells = "".join(f" {p['judged'][s]['mean']:24.2f}" if p["judged"][s]["mean"] is not None else f" {'-':>24s}"
                        for s in specs)
        print(f"{p['name']:24s} {p['true_mean_level']:10.2f} {p['true_success']:12.0%}{cells}")
    for s, v in report["judges"].items():
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        print(f"{s}: exact {fmt(v['exact'])}, within 1 {fmt(v['within_1'])}; ranking over {v['all']['policies']} "
              f"policies Pearson {fmt(v['all']['pearson'])} Spearman {fmt(v['all']['spearman'])} (success rates: "
              f"{fmt(v['all']['success_spearman'])}); over the "
              f"{v['scripted']['policies']} scripted Spearman {fmt(v['scripted']['spearman'])}")


def main(argv: list[str] | None = None) -> None:
    from neuralsim.envs.scene import SCENES

    p = argparse.ArgumentParser(prog="python -m benchmarks.judges.ranking", description=__doc__.split("\n\n")[0])
    p.add_argument("--scene", choices=sorted(SCENES), default=None,
                   help="SimDROID scene: classic (SimDROID-v0) or legible (SimDROID-v1); default: the shipped world "
                        "model's scene")
    p.add_argument("--judge", dest="judges", action="append", default=None,
                   help="judge spec, repeatable (default roboworld:offline); e.g. roboworld:offline/PATH")
    p.add_argument("--episodes", type=int, default=12, help="episodes per policy (default 12)")
    p.add_argument("--seed0", type=int, default=HELDOUT_SEED0, help="first seed (held out from training data)")
    p.add_argument("--policy", dest="policies", action="append", default=None,
                   help="only this policy of the graded set (repeatable)")
    p.add_argument("--quick", action="store_true", help="3 episodes per policy")
    p.add_argument("--out", default=None, help=out_help("judge_ranking[_<scene>]"))
    p.add_argument("--no-progress", dest="progress", action="store_false")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    args = Args(scene=a.scene or default_scene(), judges=a.judges or ["roboworld:offline"],
                episodes=3 if a.quick else a.episodes, seed0=a.seed0, policies=a.policies, out=a.out, quick=a.quick,
                progress=a.progress)
    report = run(args)
    print_report(report)
    path = results_path(results_name(report["scene"]), quick=args.quick, out=args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"JSON: {path}")


if __name__ == "__main__":
    main()
