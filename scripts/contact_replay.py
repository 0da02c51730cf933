"""Where the env's arm parts from the simulator's: replay each episode's recorded actions in SimDROID with some
collisions switched off, and measure how far the flange ends from the recorded one.

    python scripts/contact_replay.py --data data/simdroid_heldout --out runs/contact_replay.json

NeuralDROID integrates actions with its action adapter, which knows no contacts (``neuralsim/envs/adapter.py``).
Four arms are compared with the recorded one at the episode's last frame:

* ``full``: SimDROID from the episode's seed and task, as recorded (a check: it reproduces the recording);
* ``no_cubes``: the cubes collide with nothing, so the arm meets only the table, the bowl, the pad and the floor
  (what an adapter that simulated the arm against the fixed scene would give);
* ``no_contacts``: nothing collides (what the adapter models; the two agree to float rounding);
* ``adapter``: the env's own replay (``neuralsim.envs.adapter.rollout``).

With ``--world-model CHECKPOINT`` it also asks what each arm is worth to a world model: the model is driven open
loop on the episodes of ``--task`` (default push_to_pad) conditioned on the adapter's arm, the ``no_cubes`` arm (what
a table-aware adapter would feed it) and the recorded arm, with the same noise for all three
(``benchmarks.fidelity.open_loop_recorded``), and each is scored against the true frames: PSNR over frames 1-16, over
frames 33 on, and at the last frame, paired against the adapter's arm.

    python scripts/contact_replay.py --world-model neuralsim/assets/world_model --task push_to_pad \
        --out runs/contact_replay_world_model.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

MODES = ("full", "no_cubes", "no_contacts")
TOLERANCE_M = 0.05


def replay(env, record: dict, actions: np.ndarray, mode: str) -> np.ndarray:
    """Joint positions (T + 1, 7) at reset and after each of the T ``actions``, replayed in ``env`` (a SimDROIDEnv)
    from the record's seed and task with the collisions ``mode`` switches off; the collision masks are restored
    afterwards."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    m = env.model
    contype, conaffinity = m.geom_contype.copy(), m.geom_conaffinity.copy()
    try:
        env.reset(seed=int(record["seed"]), options={"task": record["task"]})
        off = {"full": [], "no_cubes": list(env.h.cube_geom), "no_contacts": list(range(m.ngeom))}[mode]
        m.geom_contype[off] = 0
        m.geom_conaffinity[off] = 0
        joints = [env.unwrapped._joint_position()]
        for a in actions:
            env.step(a)
            joints.append(env.unwrapped._joint_position())
        return np.asarray(joints)
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
                q = replay(env, rec, actions[:n], mode)[-1]
                row[mode] = float(np.linalg.norm(K.forward_kinematics(q)[:3] - end))
            q = A.arm_trajectory(q_rec[0], actions[:n, :7])[-1]
            row["adapter"] = float(np.linalg.norm(K.forward_kinematics(q)[:3] - end))
            rows.append(row)
    finally:
        env.close()
    arms = (*MODES, "adapter")
    by_task = {}
    for task in sorted({r["task"] for r in rows}):
        sel = [r for r in rows if r["task"] == task]
        by_task[task] = {"episodes": len(sel),
                         **{arm: {"end_flange_error_m_mean": float(np.mean([r[arm] for r in sel])),
                                                        "within_5cm": int(sum(r[arm] < TOLERANCE_M for r in sel))}
                                                  for arm in arms}}
    return {"data": str(root), "episodes": len(rows), "by_task": by_task, "per_episode": rows}


WORLD_MODEL_ARMS = ("adapter", "no_cubes", "recorded")


def measure_world_model(checkpoint: str, root: str | Path, task: str = "push_to_pad",
                        max_episodes: int | None = None, batch_size: int = 10) -> dict:
    """A world model driven open loop on ``task``'s episodes (of the first ``max_episodes``), conditioned on each arm
    of :data:`WORLD_MODEL_ARMS` with the same noise; PSNR against the true frames per episode (frames 1-16, frames
    33 on, the last frame) and each arm's paired difference from the adapter's (mean, 95% interval, wins)."""
    import dataclasses

    from benchmarks import fidelity as F
    from neuralsim.envs import adapter as A
    from neuralsim.envs.neural_droid import load_world_model
    from neuralsim.envs.sim_droid import SimDROIDEnv

    wm = load_world_model(checkpoint)
    episodes = [e for e in F.load_split(root, wm.config.autoencoder.image_size, max_episodes)
                if e.record["task"] == task]
    if not episodes:
        raise FileNotFoundError(f"{str(root)!r} has no {task!r} episodes among its first {max_episodes or 'all'}")
    env = SimDROIDEnv()
    try:
        arms = {"adapter": [], "no_cubes": [], "recorded": [e.joint_position for e in episodes]}
        for e in episodes:
            n = len(e) - 1
            arms["adapter"].append(A.arm_trajectory(e.joint_position[0], e.actions[:n, :7]).astype(np.float32))
            arms["no_cubes"].append(replay(env, e.record, e.actions[:n], "no_cubes").astype(np.float32))
    finally:
        env.close()
    windows = {"frames_1_16": slice(1, 17), "frames_33_on": slice(33, None), "last_frame": slice(-1, None)}
    scores = {}
    for arm, joints in arms.items():
        drive = [dataclasses.replace(e, joint_position=q) for e, q in zip(episodes, joints)]
        generated = F.open_loop_recorded(wm, drive, seed=0, batch_size=batch_size)
        scores[arm] = {w: [float(F.psnr_frames(g[sl], e.frames[sl]).mean()) if len(e.frames[sl]) else None
                           for g, e in zip(generated, episodes)] for w, sl in windows.items()}
    paired = {arm: {w: F.difference_summary(np.array([b - a for a, b in zip(scores["adapter"][w], scores[arm][w])
                                                      if a is not None and b is not None]))
                    for w in windows} for arm in WORLD_MODEL_ARMS[1:]}
    return {"checkpoint": str(checkpoint), "data": str(root), "task": task,
            "episode_indices": [e.index for e in episodes], "psnr_db": scores, "paired_against_adapter": paired}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/contact_replay.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/simdroid_heldout", help="a SimDROID dataset (default %(default)s)")
    p.add_argument("--max-episodes", type=int, default=None, help="its first N episodes (default: all)")
    p.add_argument("--world-model", dest="world_model", default=None,
                   help="also drive this world model on --task's episodes with each arm (see above)")
    p.add_argument("--task", default="push_to_pad", help="with --world-model: the task family (default %(default)s)")
    p.add_argument("--out", default=None, help="JSON report (default: print only)")
    args = p.parse_args(argv)
    try:
        report = measure(args.data, args.max_episodes)
        if args.world_model:
            report["world_model"] = measure_world_model(args.world_model, args.data, args.task, args.max_episodes)
    except FileNotFoundError as e:
        p.error(str(e))
    print(f"{'task':12s} {'episodes':>8s}" + "".join(f" {arm:>20s}" for arm in (*MODES, "adapter")))
    for task, t in report["by_task"].items():
        cells = "".join(f" {t[arm]['end_flange_error_m_mean'] * 100:8.1f} cm, {t[arm]['within_5cm']:3d} < 5cm"
                        for arm in (*MODES, "adapter"))
        print(f"{task:12s} {t['episodes']:8d}{cells}")
    if args.world_model:
        w = report["world_model"]
        print(f"\n{w['checkpoint']} on {len(w['episode_indices'])} {w['task']} episodes, PSNR (dB) by the arm it is "
              "conditioned on; the paired difference from the adapter's arm, 95% interval, episodes higher:")
        for arm in WORLD_MODEL_ARMS:
            cells = "".join(f"  {win} {np.mean([x for x in v if x is not None]):6.2f}"
                            for win, v in w["psnr_db"][arm].items())
            print(f"{arm:10s}{cells}")
            for win, d in w["paired_against_adapter"].get(arm, {}).items():
                if d["n"]:
                    half = "" if d["ci95"] is None else f" +- {(d['ci95'][1] - d['ci95'][0]) / 2:.2f}"
                    print(f"{'':10s}  {win}: {d['mean']:+.2f}{half} ({d['b_better']}/{d['n']})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
        print(f"JSON: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
