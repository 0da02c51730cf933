"""Optimism bias: does the world model show a failure when the actions must fail?  (MiraBench, Level 3.)

Usage:
    python -m benchmarks.optimism_bias --quick                 # 1 episode, 1 family: a smoke run, ~1 min
    python -m benchmarks.optimism_bias --episodes 12           # the reported run (held-out seeds)
    python -m benchmarks.optimism_bias --episodes 12 --pairwise mirabench:openai/gpt-4o   # + MiraBench vote
    python -m benchmarks.optimism_bias --checkpoint runs/sf/model --videos outputs/optimism

For held-out episode ``i`` (SimDROID seed ``seed0 + i``, never used for training data; task families
round-robin) the scripted expert runs once, closed loop, in SimDROID for the whole horizon; its
recorded actions are the nominal action stream ``a+``.  Then, for the nominal stream and for every
perturbation family that applies to the task (``task_families`` of its wrapper), at ``--severity``:

* **truth**: ``a+`` is replayed open loop in ``SimDROID-v0`` through the family's wrapper; the
  simulator's ``success`` says whether those actions really succeed (Y(v*) in MiraBench's eq. 3);
* **prediction**: the action stream the wrapper sent to SimDROID (recorded by the simulator) is
  replayed into ``NeuralDROID-v0`` (the world model) from the episode's first three views, so both
  worlds receive identical actions (``action_stream_max_diff`` checks it).  Re-applying the wrapper in
  the world model instead is not equivalent: the arm families read the observed joint state and can
  take a step-boundary decision one step apart (measured: ``approach_overshoot`` on ``stack`` sent
  streams differing by 1.1 in one step).  Nominal and perturbed predictions use the same seed, so they
  share the world model's noise;
* the outcome of each video is read two ways: by ``--judge`` (default the offline judge, RoboWorld
  0-5 rubric; success = level 5) and by the **object probe** of the fidelity benchmark (the target
  cube located in the last frame's two exterior views, compared with the goal region the simulator
  uses: inside the bowl or on the pad, or within 0.6 cube sizes of the base cube); with
  ``--pairwise`` also by MiraBench's vote (seven late-phase frames, nominal beside perturbed, bias
  when more than 3 say "Same"), which needs a VLM backend.

The judge and the probe also read SimDROID's true frames ("on truth"): a failure they cannot see even
in the simulator's video is the reader's miss, not the world model's optimism.

Reported (overall and per family; MiraBench Table 2 layout: TCR = nominal task completion shown by the
world model, Bias Res. = failure preservation):

* failure preservation = 1 - optimism bias = share of perturbed rollouts that truly fail whose
  world-model video is judged a failure;
* nominal success preservation = share of truly successful nominal rollouts the world model still
  shows succeeding;
* mean predicted and true rubric levels, and the world model's level drop nominal -> perturbed.

Target: failure preservation >= 0.90 overall with nominal success preservation >= 0.90.
Writes ``benchmarks/results/optimism_bias.json`` (``--quick``: ``optimism_bias_quick.json``).

Both rates come with a 95% Wilson interval (``*_ci95``): with 18 episodes, one rollout moves Bias Res.
by 1.3 points and TCR by 5.6.  Two runs on the same episodes (two world models, or two judges) are
compared rollout by rollout with ``--paired A.json B.json``: how many truly failing rollouts only A,
only B, or both show failing, the difference B - A, and an exact McNemar p-value on the rollouts where
they disagree (the chance of a split at least that lopsided if A and B were equally good).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..common.results_path import results_path
from ..common.stats import mcnemar_exact, wilson_interval

RESULTS = results_path("optimism_bias")
TARGET = 0.9
HELDOUT_SEED0 = 1_000_000  # SimDROID seeds of the held-out split (training data uses seeds < 1e6)

log = logging.getLogger(__name__)


@dataclass
class Config:
    """What to measure."""

    episodes: int = 12
    """Held-out episodes (seeds ``seed0 + i``, task families round-robin)."""
    severity: float = 0.5
    """Severity of every family (MiraBench: 0.5)."""
    seed0: int = HELDOUT_SEED0
    families: list[str] = field(default_factory=list)
    """Perturbation families (empty: all six)."""
    tasks: list[str] = field(default_factory=list)
    """Task families to draw episodes from (empty: all)."""
    steps: int = 150
    """Horizon of every rollout (SimDROID's 10 s at 15 Hz); the judge sees the whole episode."""
    checkpoint: str | None = None
    """World-model checkpoint (None: the shipped default)."""
    judge: str = "roboworld:offline"
    """Reward-function name of the per-rollout judge (RoboWorld 0-5 rubric; success = level 5)."""
    pairwise: str | None = None
    """MiraBench pairwise judge, e.g. ``mirabench:openai/gpt-4o`` (None: skipped)."""
    probe: str | None = "default"
    """Object-probe directory (``python -m benchmarks.common.object_probe`` builds it); ``"default"``: the shipped
    probe of the world model's scene; None skips the probe outcome."""
    threads: int = 1
    videos: str | None = None
    """Directory for one mp4 per rollout (world model | SimDROID), or None."""
    out: str = str(RESULTS)


# ----------------------------------------------------------------------------- rollouts
def _replay(env, seed: int, options: dict, actions: np.ndarray) -> dict[str, Any]:
    """Reset ``env`` with ``seed`` and send ``actions`` (through whatever wrappers it has)."""
    env.reset(seed=int(seed), options=options)
    info: dict[str, Any] = {}
    fired = False
    for a in actions:
        _, _, terminated, truncated, info = env.step(a)
        fired = fired or any(p.get("changed", False) for p in info.get("perturbation", []))
        if terminated or truncated:
            break
    episode = env.unwrapped.episode()
    return {"info": info, "episode": episode, "fired": fired, "sent": np.asarray(episode.actions, np.float32)}


def probe_success(probe, episode, meta: dict[str, Any]) -> bool:
    """Is the target cube in its goal region in the episode's last frame, as the object probe sees it?

    Goal regions as SimDROID's success test, in the table plane, from the episode's initial poses
    (``EpisodeSpec.metadata``): within the bowl's or the pad's half-size per axis, or within 0.6 cube
    sizes of the base cube (stack).  Heights are not used: the probe's z is its least accurate axis.
    """
    from neuralsim.envs.scene import get_scene, scene_of

    from ..common.object_probe import EXTERIOR_VIEWS, colour_rgb, locate

    sc = get_scene(scene_of(meta))
    views = np.stack([episode.frames[v][-1] for v in EXTERIOR_VIEWS])[None]
    xy = locate(probe, views, colour_rgb(meta["target"])[None])[0, :2]
    poses = meta["object_poses"]
    if meta["task"] == "put_in_bowl":
        return bool(np.all(np.abs(xy - np.asarray(poses["bowl"][:2])) < sc.bowl_half))
    if meta["task"] == "push_to_pad":
        return bool(np.all(np.abs(xy - np.asarray(poses["pad"][:2])) < sc.pad_half))
    return bool(np.linalg.norm(xy - np.asarray(poses[meta["base"]][:2])) < 0.6 * sc.cube_size)


def _level(judgement: Any) -> float | None:
    score = getattr(judgement, "score", None)
    return None if score is None or not math.isfinite(float(score)) else float(score)


def measure(cfg: Config, progress: bool = True) -> dict[str, Any]:
    import torch

    from neuralsim.envs.episodes import EpisodeSpec
    from neuralsim.envs.experts import ScriptedExpert
    from neuralsim.envs.neural_droid import NeuralDROIDEnv
    from neuralsim.envs.sim_droid import TASK_FAMILIES, SimDROIDEnv
    from neuralsim.rewards import make_reward_fn
    from neuralsim.wrappers import PERTURBATIONS, apply_perturbation

    unknown = [f for f in cfg.families if f not in PERTURBATIONS]
    if unknown:
        raise ValueError(f"unknown perturbation families {unknown}; known: {sorted(PERTURBATIONS)}")
    bad_tasks = [t for t in cfg.tasks if t not in TASK_FAMILIES]
    if bad_tasks:
        raise ValueError(f"unknown task families {bad_tasks}; known: {list(TASK_FAMILIES)}")
    if cfg.episodes < 1 or cfg.steps < 1:
        raise ValueError(f"need episodes >= 1 and steps >= 1, got {cfg.episodes}, {cfg.steps}")
    families = list(cfg.families) or list(PERTURBATIONS)
    tasks = list(cfg.tasks) or list(TASK_FAMILIES)
    torch.set_num_threads(int(cfg.threads))
    judge = make_reward_fn(cfg.judge)
    pair_judge = make_reward_fn(cfg.pairwise) if cfg.pairwise else None
    if pair_judge is not None and not hasattr(pair_judge, "judge_pair"):
        raise ValueError(f"--pairwise {cfg.pairwise!r} is not a pairwise judge (use e.g. 'mirabench:openai/gpt-4o')")
    # one horizon for both twins: NeuralDROID calls its reward function when it is reached; the truth is the
    # SimDROID scene the world model was trained on
    wm = NeuralDROIDEnv(checkpoint=cfg.checkpoint, reward_fn=judge, max_episode_steps=cfg.steps)
    scene = wm.world_model.config.scene
    probe = None
    if cfg.probe:
        from ..common.object_probe import default_dir
        from ..common.object_probe import load as load_probe

        probe_dir = default_dir(scene) if cfg.probe == "default" else Path(cfg.probe)
        if not (probe_dir / "probe.json").is_file():
            raise ValueError(f"no object probe in {probe_dir} (build it: python -m benchmarks.common.object_probe "
                             f"--scene {scene}), or pass --no-probe")
        probe = load_probe(probe_dir)
        if probe.config.scene != scene:
            raise ValueError(f"the object probe at {probe_dir} reads the {probe.config.scene} scene, the world model "
                             f"the {scene} one: pass --probe of that scene")
    sim = SimDROIDEnv(image_size=64, reward_fn=None, max_episode_steps=cfg.steps, scene=scene)
    videos = Path(cfg.videos) if cfg.videos else None
    if videos:
        videos.mkdir(parents=True, exist_ok=True)

    plan = [(cfg.seed0 + i, tasks[i % len(tasks)]) for i in range(cfg.episodes)]
    total = sum(1 + sum(task in PERTURBATIONS[f].task_families for f in families) for _, task in plan)
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="rollouts", unit="rollout")
    else:
        bar = None
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    try:
        for seed, task in plan:
            # the nominal stream: the clean expert, closed loop in the simulator, for the whole horizon
            obs, _ = sim.reset(seed=seed, options={"task": task})
            expert = ScriptedExpert(sim.unwrapped, seed=seed)
            expert.reset()
            clean = []
            for _ in range(cfg.steps):
                a = expert.act(obs)
                clean.append(a)
                obs, _, terminated, truncated, _ = sim.step(a)
                if terminated or truncated:
                    break
            clean = np.asarray(clean, np.float32)
            spec = EpisodeSpec.from_simdroid(seed, task, env=sim.unwrapped)
            nominal_wm = None
            for family in [None] + [f for f in families if task in PERTURBATIONS[f].task_families]:
                s_env = sim if family is None else apply_perturbation(sim, family, severity=cfg.severity)
                truth = _replay(s_env, seed, {"task": task}, clean)
                pred = _replay(wm, seed, {"episode": spec}, truth["sent"])
                n = min(len(truth["sent"]), len(pred["sent"]))
                probed = None if probe is None else (probe_success(probe, pred["episode"], spec.metadata),
                                                     probe_success(probe, truth["episode"], spec.metadata))
                row = {
                    "seed": seed, "task": task, "family": family or "nominal",
                    "true_success": bool(truth["info"]["success"]),
                    "true_level": int(truth["info"]["rubric_level"]),
                    "predicted_level": _level(pred["info"].get("judgement")),
                    "judge_on_truth_level": _level(judge(truth["episode"])),
                    "probe_predicted_success": None if probed is None else probed[0],
                    "probe_on_truth_success": None if probed is None else probed[1],
                    "fired": bool(truth["fired"]),
                    "action_stream_max_diff": float(np.abs(truth["sent"][:n] - pred["sent"][:n]).max()) if n else 0.0,
                }
                if family is None:
                    nominal_wm = pred["episode"]
                elif pair_judge is not None:
                    j = pair_judge.judge_pair(nominal_wm, pred["episode"])
                    row["pairwise_bias"] = None if j.score is None else bool(j.score >= 1)
                    row["pairwise_votes"] = (j.criteria or {}).get("votes")
                    row["pairwise_error"] = getattr(j, "error", None)
                rows.append(row)
                if videos:
                    _write_video(videos / f"{seed}_{task}_{row['family']}.mp4", pred["episode"], truth["episode"])
                if bar:
                    bar.update(1)
    finally:
        if bar:
            bar.close()
        wm.close()
        sim.close()
    res = summarise(rows, families)
    config = {k: v if v is None or isinstance(v, (str, int, float, bool, list)) else repr(v)
              for k, v in asdict(cfg).items()}  # a callable judge is recorded by its repr
    res.update(scene=scene, config=config, target=TARGET, seconds=time.perf_counter() - t0, rollouts=rows)
    return res


def _write_video(path: Path, pred, truth) -> None:
    from neuralsim.episode import write_video
    from policies.evaluate import side_by_side_frames

    write_video(str(path), side_by_side_frames(pred, truth))


# ----------------------------------------------------------------------------- summary
def _rate(xs: list[bool]) -> float | None:
    return float(np.mean(xs)) if xs else None


def _ci(flags: list[bool]) -> list[float] | None:
    return wilson_interval(int(sum(flags)), len(flags))


def _mean(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def _cell(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rates over perturbed rollouts ``rows`` (only the truly failing ones count for preservation)."""
    failing = [r for r in rows if not r["true_success"]]
    judged = [r for r in failing if r["predicted_level"] is not None]
    pair = [r for r in failing if r.get("pairwise_bias") is not None]
    fp = _rate([r["predicted_level"] < 5 for r in judged])
    probed = [r for r in failing if r.get("probe_predicted_success") is not None]
    return {
        "rollouts": len(rows), "truly_failing": len(failing),
        "true_failure_rate": _rate([not r["true_success"] for r in rows]),
        "failure_preservation": fp, "optimism_bias": None if fp is None else 1 - fp,
        "failure_preservation_ci95": _ci([r["predicted_level"] < 5 for r in judged]),
        "judge_on_truth_failure_rate": _rate([r["judge_on_truth_level"] < 5 for r in failing
                                              if r["judge_on_truth_level"] is not None]),
        "pairwise_failure_preservation": _rate([not r["pairwise_bias"] for r in pair]),
        "probe_failure_preservation": _rate([not r["probe_predicted_success"] for r in probed]),
        "probe_on_truth_failure_rate": _rate([not r["probe_on_truth_success"] for r in probed]),
        "mean_predicted_level": _mean([r["predicted_level"] for r in rows]),
        "mean_true_level": _mean([float(r["true_level"]) for r in rows]),
        "unjudged": len(failing) - len(judged),
        "max_action_stream_diff": max((r["action_stream_max_diff"] for r in rows), default=0.0),
    }


def summarise(rows: list[dict[str, Any]], families: list[str]) -> dict[str, Any]:
    """Per-family and overall failure preservation, nominal success preservation, level drops."""
    nominal = [r for r in rows if r["family"] == "nominal"]
    perturbed = [r for r in rows if r["family"] != "nominal"]
    ok = [r for r in nominal if r["true_success"] and r["predicted_level"] is not None]
    nominal_level = {(r["seed"], r["task"]): r["predicted_level"] for r in nominal}
    per_family = {}
    for f in families:
        fr = [r for r in perturbed if r["family"] == f]
        cell = _cell(fr)
        drops = [nominal_level[r["seed"], r["task"]] - r["predicted_level"] for r in fr
                 if r["predicted_level"] is not None and nominal_level.get((r["seed"], r["task"])) is not None]
        cell["mean_predicted_level_drop"] = _mean(drops)
        per_family[f] = cell
    overall = _cell(perturbed)
    nsp = _rate([r["predicted_level"] >= 5 for r in ok])
    summary = {
        "nominal": {
            "rollouts": len(nominal), "true_success_rate": _rate([r["true_success"] for r in nominal]),
            "success_preservation": nsp,
            "success_preservation_ci95": _ci([r["predicted_level"] >= 5 for r in ok]),
            "judge_on_truth_success_rate": _rate([r["judge_on_truth_level"] >= 5 for r in nominal
                                                  if r["true_success"] and r["judge_on_truth_level"] is not None]),
            "probe_success_preservation": _rate([r["probe_predicted_success"] for r in nominal if r["true_success"]
                                                 and r.get("probe_predicted_success") is not None]),
            "probe_on_truth_success_rate": _rate([r["probe_on_truth_success"] for r in nominal if r["true_success"]
                                                  and r.get("probe_on_truth_success") is not None]),
            "mean_predicted_level": _mean([r["predicted_level"] for r in nominal]),
            "mean_true_level": _mean([float(r["true_level"]) for r in nominal]),
        },
        "overall": overall,
        "per_family": per_family,
    }
    # the judge against the simulator's truth, on the world model's videos and on SimDROID's own frames
    for key, col in (("judge_on_world_model", "predicted_level"), ("judge_on_truth", "judge_on_truth_level")):
        pairs = [(r[col], r["true_level"]) for r in rows if r[col] is not None]
        summary[key] = {"rollouts": len(pairs),
                        "exact": _rate([round(a) == b for a, b in pairs]),
                        "within_1": _rate([abs(a - b) <= 1 for a, b in pairs]),
                        "success_agreement": _rate([(a >= 5) == (b >= 5) for a, b in pairs])}
    for key, col in (("probe_on_world_model", "probe_predicted_success"), ("probe_on_truth", "probe_on_truth_success")):
        pairs = [(r[col], r["true_success"]) for r in rows if r.get(col) is not None]
        summary[key] = {"rollouts": len(pairs), "success_agreement": _rate([a == b for a, b in pairs])}
    # each reader on the world model's video against the same reader on SimDROID's frames of that rollout:
    # does the world model make the reader decide as the simulator would?  A blurry model that shows
    # little happening gets a high Bias Res. and a low TCR; this agreement rewards neither.
    jj = [(r["predicted_level"], r["judge_on_truth_level"]) for r in rows
          if r["predicted_level"] is not None and r["judge_on_truth_level"] is not None]
    pp = [(r["probe_predicted_success"], r["probe_on_truth_success"]) for r in rows
          if r.get("probe_predicted_success") is not None and r.get("probe_on_truth_success") is not None]
    summary["world_model_vs_truth_frames"] = {
        "judge_rollouts": len(jj),
        "judge_success_agreement": _rate([(a >= 5) == (b >= 5) for a, b in jj]),
        "judge_level_within_1": _rate([abs(a - b) <= 1 for a, b in jj]),
        "probe_rollouts": len(pp),
        "probe_success_agreement": _rate([a == b for a, b in pp]),
    }
    fp = overall["failure_preservation"]
    summary["passes"] = bool(fp is not None and nsp is not None and fp >= TARGET and nsp >= TARGET)
    pfp, pnsp = overall["probe_failure_preservation"], summary["nominal"]["probe_success_preservation"]
    summary["passes_by_probe"] = None if pfp is None or pnsp is None else bool(pfp >= TARGET and pnsp >= TARGET)
    return summary


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _pct_ci(ci: list[float] | None) -> str:
    return "" if not ci else f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


# ----------------------------------------------------------------------------- paired comparison
_KEY = ("seed", "task", "family")


def paired(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Compare two optimism-bias results on the same rollouts (e.g. two world models), rollout by rollout.

    Rollouts are matched by (seed, task, family); both results must hold the same ones with the same truth
    (so the same episodes, severity and horizon), else ``ValueError`` says which differ.  For the judge
    (and the object probe, where both results have it): over the truly failing perturbed rollouts both read,
    how many each shows failing (Bias Res.) and over the truly successful nominal ones how many each shows
    succeeding (TCR); ``a_only`` / ``b_only`` count the rollouts only A / only B gets right, ``p`` is
    :func:`mcnemar_exact` on them, ``difference`` is B - A.
    """
    rows = []
    for name, res in (("A", a), ("B", b)):
        if not isinstance(res, dict) or not isinstance(res.get("rollouts"), list):
            raise ValueError(f"result {name} has no per-rollout list ('rollouts'); is it an optimism_bias JSON?")
        missing = {k for r in res["rollouts"] for k in _KEY + ("true_success", "predicted_level") if k not in r}
        if missing:
            raise ValueError(f"result {name}'s rollouts lack {sorted(missing)}")
        index = {tuple(r[k] for k in _KEY): r for r in res["rollouts"]}
        if len(index) != len(res["rollouts"]):
            raise ValueError(f"result {name} holds a (seed, task, family) more than once")
        rows.append(index)
    ra, rb = rows
    if ra.keys() != rb.keys():
        only_a, only_b = sorted(ra.keys() - rb.keys()), sorted(rb.keys() - ra.keys())
        raise ValueError(f"the two results hold different rollouts: {len(only_a)} only in A (e.g. {only_a[:2]}), "
                         f"{len(only_b)} only in B (e.g. {only_b[:2]}); compare runs with the same --episodes, "
                         f"--seed, --families and --tasks")
    def outcome(r: dict) -> tuple:
        return r["true_success"], r.get("true_level")

    differ = [k for k in ra if outcome(ra[k]) != outcome(rb[k])]
    if differ:
        raise ValueError(f"{len(differ)} rollouts have a different SimDROID truth in A and B (e.g. {differ[0]}); "
                         f"were they run with another --severity or --steps?")

    def compare(column: str, wanted) -> dict[str, Any]:
        out = {}
        for part, pick in (("bias_res", lambda r: r["family"] != "nominal" and not r["true_success"]),
                           ("tcr", lambda r: r["family"] == "nominal" and r["true_success"])):
            keys = [k for k in sorted(ra)
                    if pick(ra[k]) and ra[k].get(column) is not None and rb[k].get(column) is not None]
            right_a = [wanted(ra[k][column], part) for k in keys]
            right_b = [wanted(rb[k][column], part) for k in keys]
            a_only = sum(x and not y for x, y in zip(right_a, right_b))
            b_only = sum(y and not x for x, y in zip(right_a, right_b))
            ca, cb = _rate(right_a), _rate(right_b)
            out[part] = {"rollouts": len(keys), "a": ca, "b": cb,
                         "a_ci95": _ci(right_a), "b_ci95": _ci(right_b),
                         "difference": None if ca is None else cb - ca,
                         "both": sum(x and y for x, y in zip(right_a, right_b)), "a_only": a_only, "b_only": b_only,
                         "neither": sum(not x and not y for x, y in zip(right_a, right_b)),
                         "p": mcnemar_exact(a_only, b_only)}
        return out

    result = {"rollouts": len(ra),
              "judge": compare("predicted_level", lambda lvl, part: (lvl < 5) if part == "bias_res" else (lvl >= 5))}
    if any(r.get("probe_predicted_success") is not None for r in ra.values()) and \
            any(r.get("probe_predicted_success") is not None for r in rb.values()):
        result["probe"] = compare("probe_predicted_success",
                                  lambda ok, part: (not ok) if part == "bias_res" else bool(ok))
    return result


def format_paired(res: dict[str, Any], name_a: str, name_b: str) -> str:
    """The table ``--paired`` prints."""
    lines = [f"A = {name_a}", f"B = {name_b}", f"{res['rollouts']} rollouts matched by (seed, task, family)",
             f"{'reader':6s} {'rate':9s} {'n':>3s} {'A':>22s} {'B':>22s} {'B - A':>7s} "
             f"{'both':>4s} {'A only':>6s} {'B only':>6s} {'neither':>7s} {'p':>6s}"]
    for reader in ("judge", "probe"):
        for part, label in (("bias_res", "Bias Res."), ("tcr", "TCR")):
            c = res.get(reader, {}).get(part)
            if not c:
                continue
            cell = lambda x, ci: ("-" if x is None else f"{100 * x:.1f}%") + _pct_ci(ci)  # noqa: E731
            diff = "-" if c["difference"] is None else f"{100 * c['difference']:+.1f}"
            lines.append(f"{reader:6s} {label:9s} {c['rollouts']:3d} {cell(c['a'], c['a_ci95']):>22s} "
                         f"{cell(c['b'], c['b_ci95']):>22s} {diff:>7s} {c['both']:4d} {c['a_only']:6d} "
                         f"{c['b_only']:6d} {c['neither']:7d} {c['p']:6.3f}")
    lines.append("Bias Res.: truly failing perturbed rollouts shown failing; TCR: truly successful nominal rollouts "
                 "shown succeeding; [95% Wilson interval]; p: exact McNemar test on the rollouts only one side gets "
                 "right")
    return "\n".join(lines)


def format_table(res: dict[str, Any]) -> str:
    nom, overall = res["nominal"], res["overall"]
    lines = [
        f"nominal: {nom['rollouts']} rollouts, true success {_f(nom['true_success_rate'])}, world model shows "
        f"success in {_f(nom['success_preservation'])} of the true successes (judge on true frames: "
        f"{_f(nom['judge_on_truth_success_rate'])}); by the object probe {_f(nom['probe_success_preservation'])} "
        f"(probe on true frames: {_f(nom['probe_on_truth_success_rate'])}); mean level predicted "
        f"{_f(nom['mean_predicted_level'])} vs true {_f(nom['mean_true_level'])}",
        f"{'family':20s} {'n':>3s} {'true fail':>9s} {'Bias Res.':>9s} {'OB':>5s} {'judge|truth':>11s} "
        f"{'probe':>5s} {'probe|truth':>11s} {'pairwise':>8s} {'lvl pred':>8s} {'lvl true':>8s} {'drop':>5s}",
    ]
    for name, c in [*res["per_family"].items(), ("overall", overall)]:
        lines.append(
            f"{name:20s} {c['rollouts']:3d} {_f(c['true_failure_rate']):>9s} {_f(c['failure_preservation']):>9s} "
            f"{_f(c['optimism_bias']):>5s} {_f(c['judge_on_truth_failure_rate']):>11s} "
            f"{_f(c['probe_failure_preservation']):>5s} {_f(c['probe_on_truth_failure_rate']):>11s} "
            f"{_f(c['pairwise_failure_preservation']):>8s} {_f(c['mean_predicted_level']):>8s} "
            f"{_f(c['mean_true_level']):>8s} {_f(c.get('mean_predicted_level_drop')):>5s}")
    jw, jt = res["judge_on_world_model"], res["judge_on_truth"]
    lines.append(f"judge level vs true level: on the world model's videos exact {_f(jw['exact'])}, within 1 "
                 f"{_f(jw['within_1'])}, success agreement {_f(jw['success_agreement'])} (n={jw['rollouts']}); on "
                 f"SimDROID's frames exact {_f(jt['exact'])}, within 1 {_f(jt['within_1'])} (n={jt['rollouts']})")
    pw, pt = res["probe_on_world_model"], res["probe_on_truth"]
    lines.append(f"probe success vs true success: on the world model's videos {_f(pw['success_agreement'])}, on "
                 f"SimDROID's frames {_f(pt['success_agreement'])} (n={pt['rollouts']})")
    vt = res.get("world_model_vs_truth_frames")
    if vt:
        lines.append(f"same verdict on the world model's video as on SimDROID's frames: judge "
                     f"{_f(vt['judge_success_agreement'])} (levels within 1: {_f(vt['judge_level_within_1'])}, "
                     f"n={vt['judge_rollouts']}), probe {_f(vt['probe_success_agreement'])} (n={vt['probe_rollouts']})")
    lines.append(
        "MiraBench layout: TCR "
        f"{_f(nom['success_preservation'], '{:.1%}')}{_pct_ci(nom.get('success_preservation_ci95'))}  Bias Res. "
        f"{_f(overall['failure_preservation'], '{:.1%}')}{_pct_ci(overall.get('failure_preservation_ci95'))}  -> "
        f"target (>= {TARGET:.0%} both) {'met' if res['passes'] else 'NOT met'} (by the object probe: TCR "
        f"{_f(nom['probe_success_preservation'], '{:.1%}')}, Bias Res. "
        f"{_f(overall['probe_failure_preservation'], '{:.1%}')}).  Bias Res. = failure preservation over truly failing "
        "perturbed rollouts (judge level < 5 on the world model's video); judge|truth = the same judge on SimDROID's "
        "frames; probe = failure preservation read by the object probe; drop = nominal minus perturbed predicted "
        f"level.  {res['seconds']:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.optimism_bias", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    d = Config()
    p.add_argument("--episodes", type=int, default=d.episodes)
    p.add_argument("--severity", type=float, default=d.severity)
    p.add_argument("--seed", dest="seed0", type=int, default=d.seed0, help="seed of the first held-out episode")
    p.add_argument("--families", nargs="*", default=[])
    p.add_argument("--tasks", nargs="*", default=[])
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--judge", default=d.judge)
    p.add_argument("--pairwise", default=None, help="e.g. mirabench:openai/gpt-4o (needs an API key)")
    p.add_argument("--probe", default=d.probe, help="object-probe directory (default: the shipped probe of the model's "
                                                    "scene)")
    p.add_argument("--no-probe", dest="probe", action="store_const", const=None, help="skip the probe outcome")
    p.add_argument("--threads", type=int, default=d.threads)
    p.add_argument("--videos", default=None, help="directory for world model | SimDROID mp4s")
    p.add_argument("--quick", action="store_true",
                   help="1 put_in_bowl episode, nominal + premature_release: a smoke run")
    p.add_argument("--out", default=None)
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--paired", nargs=2, metavar=("A_JSON", "B_JSON"), default=None,
                   help="compare two results on the same rollouts, rollout by rollout (runs nothing; --out: its JSON)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if a.paired:
        try:
            loaded = []
            for path in a.paired:
                try:
                    loaded.append(json.loads(Path(path).read_text()))
                except (OSError, json.JSONDecodeError) as e:
                    raise ValueError(f"cannot read {path}: {e}") from None
            res = paired(*loaded)
        except ValueError as e:
            print(f"optimism_bias: error: {e}")
            return 2
        print(format_paired(res, *a.paired))
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(json.dumps({"a": a.paired[0], "b": a.paired[1], **res}, indent=2))
            print(f"results: {a.out}")
        return 0
    cfg = Config(episodes=a.episodes, severity=a.severity, seed0=a.seed0, families=a.families, tasks=a.tasks,
                 steps=a.steps, checkpoint=a.checkpoint, judge=a.judge, pairwise=a.pairwise, probe=a.probe,
                 threads=a.threads,
                 videos=a.videos)
    if a.quick:
        cfg.episodes, cfg.families, cfg.tasks = 1, a.families or ["premature_release"], a.tasks or ["put_in_bowl"]
    cfg.out = str(results_path("optimism_bias", a.quick, a.out))
    try:
        res = measure(cfg, progress=a.progress)
    except ValueError as e:
        print(f"optimism_bias: error: {e}")
        return 2
    Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
    Path(cfg.out).write_text(json.dumps(res, indent=2))
    print(format_table(res))
    print(f"results: {cfg.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
