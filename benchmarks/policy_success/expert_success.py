"""Success rate of the scripted SimDROID experts per task family (clean and with each failure mode).

Usage:
    python -m benchmarks.policy_success.expert_success --episodes 50            # >= 50 seeded episodes per family
    python -m benchmarks.policy_success.expert_success --quick                  # 5 per family, clean only
    python -m benchmarks.policy_success.expert_success --scene legible          # SimDROID-v1's scene

The scene defaults to the one the shipped world model was trained on (``SimDROID-v0`` classic, ``SimDROID-v1``
legible).

Seeds are ``seed0 + i``; the verdict is the simulator's ground truth at the end of the episode.
Writes ``benchmarks/results/expert_success.json`` (the classic scene) or ``expert_success_legible.json`` (the
legible one; ``--quick`` adds ``_quick``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..common.results_path import out_help, results_path


def measure(episodes: int, failures: list[str | None], seed0: int = 0, noise: float = 0.0,
            scene: str | None = None) -> dict:
    """The experts' success per (failure mode, task family) in SimDROID's ``scene`` (None: the shipped world
    model's, :func:`default_scene`)."""
    from neuralsim.envs.experts import run_expert_episode
    from neuralsim.envs.sim_droid import TASK_FAMILIES, SimDROIDEnv

    scene = scene or default_scene()
    env = SimDROIDEnv(scene=scene)
    rows = {}
    t0 = time.perf_counter()
    total_steps = 0
    for failure in failures:
        for family in TASK_FAMILIES:
            ok, levels, lengths = [], [], []
            for i in tqdm(range(episodes), desc=f"{family}/{failure or 'clean'}", leave=False):
                info, steps = run_expert_episode(env, seed=seed0 + i, task=family, noise=noise, failure=failure)
                ok.append(bool(info["success"]))
                levels.append(int(info["rubric_level"]))
                lengths.append(steps)
            total_steps += sum(lengths)
            rows[f"{failure or 'clean'}/{family}"] = {
                "failure": failure, "family": family, "episodes": episodes, "success_rate": float(np.mean(ok)),
                "failed_seeds": [seed0 + i for i, x in enumerate(ok) if not x],
                "rubric_levels": {str(k): levels.count(k) for k in sorted(set(levels))},
                "mean_steps": float(np.mean(lengths)),
            }
    env.close()
    seconds = time.perf_counter() - t0
    return {"scene": scene, "episodes_per_family": episodes, "seed0": seed0, "noise": noise, "rows": rows,
            "seconds": seconds, "steps_per_second": total_steps / seconds}


def default_scene() -> str:
    """The scene measured by default: the one the shipped world model was trained on."""
    from neuralsim.envs.neural_droid import checkpoint_scene

    return checkpoint_scene()


def results_name(scene: str) -> str:
    """The report's file name stem: ``expert_success`` (classic) or ``expert_success_<scene>``."""
    return "expert_success" if scene == "classic" else f"expert_success_{scene}"


def main(argv: list[str] | None = None) -> int:
    from neuralsim.envs.experts import FAILURE_MODES
    from neuralsim.envs.scene import SCENES

    p = argparse.ArgumentParser(prog="python -m benchmarks.policy_success.expert_success", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise", type=float, default=0.0)
    p.add_argument("--failures", action="store_true", help="also run every failure mode")
    p.add_argument("--quick", action="store_true", help="5 episodes per family, clean only")
    p.add_argument("--scene", choices=sorted(SCENES), default=None,
                   help="SimDROID scene: classic (SimDROID-v0) or legible (SimDROID-v1); default: the shipped world "
                        "model's scene")
    p.add_argument("--out", default=None, help=out_help("expert_success[_<scene>]"))
    a = p.parse_args(argv)
    a.scene = a.scene or default_scene()
    a.out = str(results_path(results_name(a.scene), a.quick, a.out))
    episodes = 5 if a.quick else a.episodes
    failures = [None] + (list(FAILURE_MODES) if a.failures and not a.quick else [])
    res = measure(episodes, failures, a.seed, a.noise, a.scene)
    print(f"{'expert':16s} {'family':12s} {'success':>8s} {'steps':>6s}  failed seeds")
    for r in res["rows"].values():
        print(f"{r['failure'] or 'clean':16s} {r['family']:12s} {r['success_rate']:8.2f} {r['mean_steps']:6.0f}  "
              f"{r['failed_seeds'][:8]}")
    print(f"{res['seconds']:.0f} s, {res['steps_per_second']:.0f} env steps/s (incl. 3x64^2 rendering)")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
