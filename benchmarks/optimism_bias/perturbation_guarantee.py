"""Do the six perturbations make SimDROID tasks fail?  MiraBench's "guaranteed failure", checked by physics.

Usage:
    python -m benchmarks.optimism_bias.perturbation_guarantee --episodes 30           # 30 seeded episodes per family
    python -m benchmarks.optimism_bias.perturbation_guarantee --quick                 # 4 per family, a few minutes
    python -m benchmarks.optimism_bias.perturbation_guarantee --episodes 30 --replay  # also open-loop replay
    python -m benchmarks.optimism_bias.perturbation_guarantee --scene classic         # SimDROID-v0's scene

Each family is run on the task families it applies to (``task_families`` of its wrapper: the grasp
families do not apply to pushing, where the gripper is a closed pusher): episode ``i`` uses seed
``seed0 + i`` and the ``i``-th of those task families round-robin; ``--other-episodes`` more per
remaining task family are run and reported, not counted.  For every (seed, task) the clean scripted
expert runs the full horizon (150 steps) in SimDROID (``--scene``; default: the scene the shipped world model
was trained on, ``SimDROID-v0`` classic or ``SimDROID-v1`` legible); then, with the same seed, it runs again with
the family at ``--severity`` (default 0.5) between it and the env: it acts closed-loop on what it
sees, the wrapper corrupts what reaches the arm.  ``--replay`` also replays the clean expert's
recorded actions open loop through the wrapper (what the optimism-bias benchmark feeds the world
model).  The verdict is the simulator's ``success`` at the end of the episode.

Criterion: per family, the perturbed failure rate is >= 90%, also counted only over the episodes the
clean expert solves, while the clean expert succeeds in >= 90% of the same seeds.  Writes
``benchmarks/results/perturbation_guarantee.json`` (the legible scene: ``perturbation_guarantee_legible.json``;
``--quick`` adds ``_quick``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..common.results_path import out_help, results_path

RESULTS = results_path("perturbation_guarantee")
TARGET = 0.9


@dataclass
class Config:
    """What to measure."""

    episodes: int = 30
    """Seeded episodes per family, split round-robin over the task families it applies to."""
    severity: float = 0.5
    """Severity of every family (MiraBench: 0.5)."""
    seed0: int = 0
    """Seed of the first episode."""
    other_episodes: int = 4
    """Episodes per task family a family does not apply to (reported, not counted)."""
    families: list[str] = field(default_factory=list)
    """Families to run (empty: all six)."""
    replay: bool = False
    """Also replay the clean expert's actions open loop through each wrapper."""
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Extra constructor arguments per family (for exploring designs)."""
    scene: str | None = None
    """SimDROID scene (``"classic"``: ``SimDROID-v0``, ``"legible"``: ``SimDROID-v1``); None: the shipped world
    model's (:func:`~neuralsim.envs.neural_droid.checkpoint_scene`)."""
    out: str = str(RESULTS)


def _run(env, seed: int, task: str, actions: np.ndarray | None = None):
    """One full-horizon episode: the closed-loop expert, or ``actions`` replayed.  (success, level, actions, fired)."""
    from neuralsim.envs.experts import ScriptedExpert

    obs, info = env.reset(seed=seed, options={"task": task})
    expert = None
    if actions is None:
        expert = ScriptedExpert(env)
        expert.reset()
    sent, fired = [], False
    horizon = env.spec.max_episode_steps
    for t in range(horizon):
        a = expert.act(obs) if expert is not None else actions[t]
        sent.append(a)
        obs, _, terminated, truncated, info = env.step(a)
        fired = fired or any(p["changed"] for p in info.get("perturbation", []))
        if terminated or truncated:
            break
    return bool(info["success"]), int(info["rubric_level"]), np.stack(sent), fired


def measure(cfg: Config) -> dict:
    import gymnasium as gym

    import neuralsim  # noqa: F401  (registers the SimDROID envs)
    from neuralsim.envs.scene import get_scene
    from neuralsim.envs.sim_droid import TASK_FAMILIES
    from neuralsim.wrappers import PERTURBATIONS, apply_perturbation

    families = cfg.families or list(PERTURBATIONS)
    scene = get_scene(cfg.scene or default_scene())
    base = gym.make(scene.env_id)
    t0 = time.perf_counter()
    nominal: dict[tuple[int, str], dict] = {}
    plans: dict[tuple[int, str], np.ndarray] = {}

    def clean(seed: int, task: str) -> dict:
        if (seed, task) not in nominal:
            ok, level, actions, _ = _run(base, seed, task)
            nominal[seed, task] = {"seed": seed, "task": task, "success": ok, "rubric_level": level}
            plans[seed, task] = actions
        return nominal[seed, task]

    modes = ["closed_loop"] + (["replay"] if cfg.replay else [])
    rows: dict[str, dict] = {}
    for name in families:
        applies = list(PERTURBATIONS[name].task_families)
        others = [t for t in TASK_FAMILIES if t not in applies]
        episodes = [(cfg.seed0 + i, applies[i % len(applies)]) for i in range(cfg.episodes)]
        episodes += [(cfg.seed0 + i, t) for t in others for i in range(cfg.other_episodes)]
        for seed, task in tqdm(episodes, desc=f"{name}/clean", leave=False):
            clean(seed, task)
        env = apply_perturbation(base, name, severity=cfg.severity, **cfg.overrides.get(name, {}))
        for mode in modes:
            eps = []
            for seed, task in tqdm(episodes, desc=f"{name}/{mode}", leave=False):
                ok, level, _, fired = _run(env, seed, task, plans[seed, task] if mode == "replay" else None)
                eps.append({"seed": seed, "task": task, "success": ok, "rubric_level": level, "fired": fired})
            rows[f"{name}/{mode}"] = _summarise(name, mode, applies, eps, [nominal[e["seed"], e["task"]] for e in eps])
    base.close()
    everything = list(nominal.values())
    config = {**{k: v for k, v in vars(cfg).items() if k != "out"}, "scene": scene.name}
    return {"config": config, "env_id": scene.env_id, "target": TARGET,
            "nominal": _summarise("clean", "closed_loop", list(TASK_FAMILIES), everything, everything),
            "rows": rows, "seconds": time.perf_counter() - t0}


def default_scene() -> str:
    """The scene measured by default: the one the shipped world model was trained on."""
    from neuralsim.envs.neural_droid import checkpoint_scene

    return checkpoint_scene()


def results_name(scene: str) -> str:
    """The report's file name stem: ``perturbation_guarantee`` (classic) or ``perturbation_guarantee_<scene>``."""
    return "perturbation_guarantee" if scene == "classic" else f"perturbation_guarantee_{scene}"


def _summarise(name: str, mode: str, applies: list[str], eps: list[dict], nominal: list[dict]) -> dict:
    """Rates over the episodes ``eps`` and the clean runs ``nominal`` of the same (seed, task) pairs."""
    from neuralsim.envs.sim_droid import TASK_FAMILIES

    def rate(xs):
        return float(np.mean(xs)) if xs else None

    per_task = {}
    for task in TASK_FAMILIES:
        cell = [e for e in eps if e["task"] == task]
        clean = [n for n in nominal if n["task"] == task]
        per_task[task] = {"episodes": len(cell), "applies": task in applies,
                          "failure_rate": rate([not e["success"] for e in cell]),
                          "nominal_success_rate": rate([n["success"] for n in clean]),
                          "succeeded_seeds": [e["seed"] for e in cell if e["success"]]}
    app = [e for e in eps if e["task"] in applies]
    app_clean = [n for n in nominal if n["task"] in applies]
    fail, nom = rate([not e["success"] for e in app]), rate([n["success"] for n in app_clean])
    # the stricter reading: of the episodes the clean expert solves, how many does the perturbation break?
    broken = rate([not e["success"] for e, n in zip(eps, nominal) if e["task"] in applies and n["success"]])
    rates = (fail, nom, broken)
    return {"family": name, "mode": mode, "task_families": applies, "episodes": len(app),
            "failure_rate": fail, "nominal_success_rate": nom, "failure_rate_where_clean_succeeds": broken,
            "fired_rate": rate([e.get("fired", False) for e in app]),
            "passes": bool(all(x is not None and x >= TARGET for x in rates)),
            "per_task": per_task, "episodes_detail": eps}


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def print_table(res: dict) -> None:
    from neuralsim.envs.sim_droid import TASK_FAMILIES

    nom = res["nominal"]
    print(f"{res.get('env_id', 'SimDROID-v0')}, clean expert: success {_f(nom['nominal_success_rate'])} over "
          f"{nom['episodes']} episodes ("
          + ", ".join(f"{t} {_f(c['nominal_success_rate'])}/{c['episodes']}" for t, c in nom["per_task"].items()) + ")")
    head = f"{'family':20s} {'mode':11s} {'fail':>5s} {'f|ok':>5s} {'clean':>5s} {'n':>3s} {'pass':>4s}  " + \
        "  ".join(f"{t:>12s}" for t in TASK_FAMILIES)
    print(head)
    for r in res["rows"].values():
        cells = []
        for t in TASK_FAMILIES:
            c = r["per_task"][t]
            cells.append((f"{_f(c['failure_rate'])}/{c['episodes']}" + ("" if c["applies"] else "*")).rjust(12)
                         if c["episodes"] else "-".rjust(12))
        print(f"{r['family']:20s} {r['mode']:11s} {_f(r['failure_rate']):>5s} "
              f"{_f(r['failure_rate_where_clean_succeeds']):>5s} {_f(r['nominal_success_rate']):>5s} "
              f"{r['episodes']:3d} {'yes' if r['passes'] else 'NO':>4s}  " + "  ".join(cells))
    print(f"fail: perturbed failure rate over the task families a family applies to; f|ok: the same over the "
          f"episodes the clean expert solves; clean: the clean expert's success on the same seeds; per task: "
          f"failure rate/episodes, * = the family does not apply there (reported, not counted).  "
          f"{res['seconds']:.0f} s")


def main(argv: list[str] | None = None) -> int:
    from neuralsim.envs.scene import SCENES

    p = argparse.ArgumentParser(prog="python -m benchmarks.optimism_bias.perturbation_guarantee", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=30)
    p.add_argument("--severity", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--families", nargs="*", default=[])
    p.add_argument("--replay", action="store_true", help="also replay the clean actions open loop")
    p.add_argument("--other-episodes", type=int, default=4,
                   help="episodes per task family a family does not apply to (reported only)")
    p.add_argument("--quick", action="store_true", help="4 episodes per family, closed loop only")
    p.add_argument("--scene", choices=sorted(SCENES), default=None,
                   help="SimDROID scene: classic (SimDROID-v0) or legible (SimDROID-v1); default: the shipped world "
                        "model's scene")
    p.add_argument("--out", default=None, help=out_help("perturbation_guarantee[_<scene>]"))
    a = p.parse_args(argv)
    scene = a.scene or default_scene()
    a.out = str(results_path(results_name(scene), a.quick, a.out))
    cfg = Config(episodes=4 if a.quick else a.episodes, other_episodes=0 if a.quick else a.other_episodes,
                 severity=a.severity, seed0=a.seed, families=a.families, replay=a.replay and not a.quick, scene=scene,
                 out=a.out)
    res = measure(cfg)
    Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
    Path(cfg.out).write_text(json.dumps(res, indent=2))
    print_table(res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
