"""Where the env's arm parts from the simulator's: replay each episode's recorded actions in SimDROID with some
collisions switched off, and measure how far the flange ends from the recorded one.

    python scripts/contact_replay.py --data data/simdroid_heldout --out benchmarks/results/contact_replay_s65.json

NeuralDROID integrates actions with its action adapter, which knows no contacts (``neuralsim/envs/adapter.py``).
Four arms are compared with the recorded one at the episode's last frame:

* ``full``: SimDROID from the episode's seed and task, as recorded (a check: it reproduces the recording);
* ``no_cubes``: the cubes collide with nothing, so the arm meets only the table, the bowl, the pad and the floor
  (what an adapter that simulated the arm against the fixed scene would give);
* ``no_contacts``: nothing collides (what the adapter models; the two agree to float rounding);
* ``adapter``: the env's own replay (``neuralsim.envs.adapter.rollout``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

MODES = ("full", "no_cubes", "no_contacts")
TOLERANCE_M = 0.05


def replay(env, record: dict, actions: np.ndarray, mode: str) -> np.ndarray:
    """Joint positions (7,) after replaying ``actions`` in ``env`` (a SimDROIDEnv) from the record's seed and task,
    with the collisions ``mode`` switches off; the model's collision masks are restored afterwards."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    m = env.model
    contype, conaffinity = m.geom_contype.copy(), m.geom_conaffinity.copy()
    try:
        env.reset(seed=int(record["seed"]), options={"task": record["task"]})
        off = {"full": [], "no_cubes": list(env.h.cube_geom), "no_contacts": list(range(m.ngeom))}[mode]
        m.geom_contype[off] = 0
        m.geom_conaffinity[off] = 0
        for a in actions:
            env.step(a)
        return env.unwrapped._joint_position()
    finally:
        m.geom_contype[:], m.geom_conaffinity[:] = contype, conaffinity


def measure(root: str | Path, max_episodes: int | None = None) -> dict:
    """Per episode, the flange distance [m] at the last frame between each replay and the recording; per task, the
    mean and the share within :data:`TOLERANCE_M`."""
    from neuralsim import kinematics as K
    from neuralsim.data.reader import list_episodes, read_joints_and_actions
    from neuralsim.envs import adapter as A
    from neuralsim.envs.sim_droid import SimDROIDEnv

    records = list_episodes(root)[:max_episodes]
    if not records:
        raise FileNotFoundError(f"{str(root)!r} holds no finished episodes")
    env = SimDROIDEnv()
    rows = []
    try:
        for rec in records:
            q_rec, actions = read_joints_and_actions(root, rec)
            n = len(q_rec) - 1
            end = K.forward_kinematics(q_rec[-1].astype(np.float64))[:3]
            row = {"episode_index": int(rec["episode_index"]), "task": rec["task"], "seed": int(rec["seed"])}
            for mode in MODES:
                q = replay(env, rec, actions[:n], mode)
                row[mode] = float(np.linalg.norm(K.forward_kinematics(q)[:3] - end))
            q, _ = A.rollout(q_rec[:1].astype(np.float64), np.zeros((1, 1)), actions[None, :n])
            row["adapter"] = float(np.linalg.norm(K.forward_kinematics(q[0, -1])[:3] - end))
            rows.append(row)
    finally:
        env.close()
    arms = (*MODES, "adapter")
    by_task = {}
    for task in sorted({r["task"] for r in rows}):
        sel = [r for r in rows if r["task"] == task]
        by_task[task] = {"episodes": len(sel), **{arm: {"end_flange_error_m_mean": float(np.mean([r[arm] for r in sel])),
                                                        "within_5cm": int(sum(r[arm] < TOLERANCE_M for r in sel))}
                                                  for arm in arms}}
    return {"data": str(root), "episodes": len(rows), "by_task": by_task, "per_episode": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/contact_replay.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/simdroid_heldout", help="a SimDROID dataset (default %(default)s)")
    p.add_argument("--max-episodes", type=int, default=None, help="its first N episodes (default: all)")
    p.add_argument("--out", default=None, help="JSON report (default: print only)")
    args = p.parse_args(argv)
    try:
        report = measure(args.data, args.max_episodes)
    except FileNotFoundError as e:
        p.error(str(e))
    print(f"{'task':12s} {'episodes':>8s}" + "".join(f" {arm:>20s}" for arm in (*MODES, "adapter")))
    for task, t in report["by_task"].items():
        cells = "".join(f" {t[arm]['end_flange_error_m_mean'] * 100:8.1f} cm, {t[arm]['within_5cm']:3d} < 5cm"
                        for arm in (*MODES, "adapter"))
        print(f"{task:12s} {t['episodes']:8d}{cells}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
        print(f"JSON: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
