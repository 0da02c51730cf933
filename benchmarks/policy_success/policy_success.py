"""Closed-loop success of the learned visuomotor policies and the baselines in SimDROID, on held-out episodes.

Usage:
    python -m benchmarks.policy_success                          # every shipped checkpoint + baselines, 30 episodes
    python -m benchmarks.policy_success --episodes 60 --policy visuomotor-s4000 --policy expert
    python -m benchmarks.policy_success --quick                  # 3 episodes each, *_quick.json
    python -m benchmarks.policy_success --policy zero --update   # re-measure some, keep the report's others

Every policy meets the same held-out initial states, all task families equally (:mod:`policies.heldout`: episode
``i`` starts from SimDROID seed ``seed0 + i``, default 2,000,000, with task family ``TASK_FAMILIES[i % 3]``).
A policy acts closed loop through :func:`policies.run_episode` (chunks executed 8 actions at a time, openpi's DROID
setting; a Cartesian checkpoint's goals tracked from the measured joints at every step, ``--no-track``: its planned
chunks open loop) to the horizon; the verdict is the simulator's ground truth at the last step.  Per policy: success
rate with its 95% Wilson interval, mean rubric level (0-5), the same per task family, and for the learned policies the
inference time per query and per env step at batch 1 (one CPU thread) and of one batched forward pass.

What precedes a pick is measured too (``grasp``): where the hand is when the policy first commands the gripper shut
in a put-in-bowl or stack episode, from the simulator's state: the tool point's horizontal distance to the target
cube's centre, its height above it, and the yaw between the finger axis and the nearest pair of the cube's faces
(0-45 degrees).  The legible scene's 6 cm cube fits the open hand only within about 20 degrees of yaw, so a policy
whose ``yaw_deg`` median is above that closes on the cube's top.

The scene defaults to the one the shipped checkpoints were trained in (their ``config.scene``), and a learned
policy from another scene is refused.  Writes ``benchmarks/results/policy_success.json`` for that scene (another
``--scene X``: ``policy_success_X.json``):
``{"policies": [{"name", "learned", "episodes", "success_rate", "success_ci95", "mean_level", "per_task": {...}},
...]}`` plus the settings and every episode.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field

import numpy as np

from policies.base import DEFAULT_REPLAN_EVERY
from policies.heldout import HELDOUT_SEED0, heldout_starts

from ..common.results_path import out_help, results_path
from ..common.stats import wilson_interval

#: Baselines besides the learned policies: report name -> (make_policy name, keyword arguments).
BASELINES = {"expert": ("scripted", {"noise": 0.0}), "noisy-0.6": ("scripted", {"noise": 0.6}),
             "random": ("random", {}), "zero": ("zero", {})}


@dataclass
class Args:
    scene: str = "legible"
    episodes: int = 30
    seed0: int = HELDOUT_SEED0
    policies: list[str] = field(default_factory=list)
    """Names (learned checkpoints, baselines, any make_policy name); empty = every shipped checkpoint + BASELINES."""
    out: str | None = None
    quick: bool = False
    progress: bool = True
    replan_every: int = DEFAULT_REPLAN_EVERY
    """Actions executed from each chunk before the policy is queried again (openpi's DROID setting: 8)."""
    track: bool = True
    """Track a Cartesian checkpoint's goals from the measured joints at every step (policies.ChunkedController);
    False executes its planned chunks open loop."""


def shipped_scene() -> str:
    """The SimDROID scene the shipped checkpoints were trained in (``legible`` when none is shipped).

    Raises:
        ValueError: the shipped checkpoints come from different scenes.
    """
    from policies.flow.policy import WEIGHTS_DIR as FLOW_DIR
    from policies.flow.policy import shipped_checkpoints as shipped_flow
    from policies.visuomotor.policy import WEIGHTS_DIR, shipped_checkpoints

    configs = [WEIGHTS_DIR / n / "config.json" for n in shipped_checkpoints()]
    configs += [FLOW_DIR / n / "config.json" for n in shipped_flow()]
    scenes = {json.loads(c.read_text()).get("scene", "classic") for c in configs}
    if len(scenes) > 1:
        raise ValueError(f"the shipped checkpoints come from several scenes {sorted(scenes)}; pass --scene")
    return scenes.pop() if scenes else "legible"


def default_policies() -> list[str]:
    from policies.flow.policy import shipped_checkpoints as shipped_flow
    from policies.visuomotor import shipped_checkpoints

    return shipped_checkpoints() + shipped_flow() + list(BASELINES)


def build(name: str, env, seed: int):
    """(policy, learned) for a report name."""
    from policies import make_policy
    from policies.visuomotor import VisuomotorPolicy

    if name in BASELINES:
        factory, kw = BASELINES[name]
        if factory == "scripted":
            return make_policy(factory, env=env, seed=seed, **kw), False
        if factory == "random":
            return make_policy(factory, seed=seed), False
        return make_policy(factory, **kw), False
    if name.startswith("noisy-") or name == "expert":
        return make_policy(name, env=env, seed=seed), False
    policy = make_policy(name, num_threads=1) if name.startswith(("visuomotor", "flow")) else make_policy(name)
    return policy, isinstance(policy, VisuomotorPolicy)


#: Task families whose episodes start with a grasp (the ``grasp`` measures).
PICK_FAMILIES = ("put_in_bowl", "stack")


def grasp_geometry(sim) -> dict:
    """Where the hand of a SimDROID env (``env.unwrapped``) is against the task's target cube now: the tool point's
    horizontal distance ``xy_cm`` to the cube's centre and height ``height_cm`` above it, and ``yaw_deg``, the angle
    between the finger axis and the nearest pair of cube faces (0-45)."""
    target = sim.spec_task.target
    cube, tool = sim.cube_position(target), sim.tcp_position()
    off = (sim.finger_yaw() - sim.cube_yaw(target) + np.pi / 4) % (np.pi / 2) - np.pi / 4
    return {"xy_cm": round(100 * float(np.linalg.norm(tool[:2] - cube[:2])), 2),
            "height_cm": round(100 * float(tool[2] - cube[2]), 2), "yaw_deg": round(float(np.degrees(abs(off))), 1)}


def first_close(actions: np.ndarray, before: list[dict | None]) -> dict | None:
    """The :func:`grasp_geometry` (``before[j]``: the state action ``j`` was chosen in) at the first action that
    commands the gripper shut, with its step; None when the gripper was never commanded shut."""
    shut = np.flatnonzero(np.asarray(actions)[:, 7] > 0.5)
    if not len(shut) or before[int(shut[0])] is None:
        return None
    return {"step": int(shut[0]), **before[int(shut[0])]}


def summarise_grasps(rows: list[dict]) -> dict:
    """Medians of the first-close geometry over the pick episodes of ``rows``, and the share of them that closed
    with the fingers within 15 degrees of the faces' yaw and 1.5 cm of the centre."""
    picks = [r for r in rows if r["family"] in PICK_FAMILIES]
    closes = [r["grasp"] for r in picks if r.get("grasp")]
    out = {"pick_episodes": len(picks), "closed": len(closes)}
    for key in ("xy_cm", "height_cm", "yaw_deg"):
        out[key] = float(np.median([c[key] for c in closes])) if closes else None
    out["aligned"] = (sum(c["yaw_deg"] < 15 and c["xy_cm"] < 1.5 for c in closes) / len(picks)) if picks else None
    return out


def summarise(rows: list[dict]) -> dict:
    """Success rate with its Wilson 95% interval and the mean level of a list of episode rows."""
    k = sum(r["success"] for r in rows)
    return {"episodes": len(rows), "success_rate": k / len(rows) if rows else None,
            "success_ci95": wilson_interval(k, len(rows)),
            "mean_level": float(np.mean([r["level"] for r in rows])) if rows else None}


def inference_timing(policy, observation: dict, instruction: str, batch: int = 8, repeats: int = 50) -> dict:
    """Median ms of one ``infer`` (batch 1) and of one ``infer_batch`` over ``batch`` rows."""
    policy.reset(instruction)
    for _ in range(5):
        policy.infer(observation)
    single = []
    for _ in range(repeats):
        t = time.perf_counter()
        policy.infer(observation)
        single.append(time.perf_counter() - t)
    rows = {k: np.stack([np.asarray(v)] * batch) for k, v in observation.items()}
    batched = []
    for _ in range(max(5, repeats // 5)):
        t = time.perf_counter()
        policy.infer_batch(rows, [instruction] * batch)
        batched.append(time.perf_counter() - t)
    return {"infer_ms_batch1": 1000 * float(np.median(single)), "batch": batch,
            "infer_ms_batched": 1000 * float(np.median(batched))}


def run(args: Args) -> dict:
    import gymnasium as gym
    from tqdm import tqdm

    import neuralsim  # noqa: F401  (registers the envs)
    from neuralsim.envs.scene import get_scene
    from neuralsim.envs.sim_droid import TASK_FAMILIES
    from policies import TargetTracking, run_episode

    if args.episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {args.episodes}")
    if args.replan_every < 1:
        raise ValueError(f"--replan-every must be >= 1, got {args.replan_every}")
    names = args.policies or default_policies()
    env_id = get_scene(args.scene).env_id
    env = gym.make(env_id, reward_fn="ground_truth")
    bar = tqdm(total=len(names) * args.episodes, desc="episodes", disable=not args.progress)
    t0 = time.time()
    report_rows, episodes = [], []
    for name in names:
        policy, learned = build(name, env, args.seed0)
        if learned and policy.config.scene != args.scene:
            raise ValueError(f"{name} was trained on the {policy.config.scene!r} scene, not {args.scene!r}")
        rows, steps, infer_s, queries = [], 0, 0.0, 0
        for seed, family in heldout_starts(args.episodes, args.seed0):
            before: list[dict | None] = [None]  # the state each action is chosen in (the reset's: not needed)
            res = run_episode(env, policy, replan_every=args.replan_every, track=args.track, seed=seed,
                              options={"task": family},
                              callback=lambda *_: before.append(grasp_geometry(env.unwrapped)))
            steps, infer_s, queries = steps + res.steps, infer_s + res.infer_seconds, queries + res.num_queries
            rows.append({"policy": name, "seed": seed, "family": family, "instruction": res.instruction,
                         "success": bool(res.info["success"]), "level": int(res.info["rubric_level"]),
                         "steps": res.steps, "grasp": first_close(res.actions, before)})
            bar.update()
        tracked = args.track and isinstance(policy, TargetTracking) and bool(policy.tracks_targets)
        entry = {"name": name, "learned": learned, "tracked": tracked, **summarise(rows),
                 "per_task": {f: summarise([r for r in rows if r["family"] == f]) for f in TASK_FAMILIES},
                 "grasp": summarise_grasps(rows),
                 "infer_ms_per_step": 1000 * infer_s / max(1, steps), "infer_ms_per_query": 1000 * infer_s / max(
                     1, queries)}
        if learned:
            obs, info = env.reset(seed=args.seed0)
            entry["timing"] = inference_timing(policy, obs, info["instruction"])
            entry["checkpoint"] = {"views": list(policy.config.views), "chunk_size": policy.config.chunk_size,
                                   "scene": policy.config.scene, "step": policy.config.training.get("step"),
                                   "episodes": policy.config.training.get("episodes")}
        report_rows.append(entry)
        episodes += rows
    bar.close()
    env.close()
    return {"benchmark": "policy_success", "scene": args.scene, "env_id": env_id, "episodes_per_policy": args.episodes,
            "seed0": args.seed0, "replan_every": args.replan_every, "track": args.track, "policies": report_rows,
            "per_episode": episodes,
            "seconds": round(time.time() - t0, 1)}


def merge_reports(old: dict, new: dict) -> dict:
    """``old`` with the policies of ``new`` replacing (or joining) its own, in ``old``'s order then ``new``'s."""
    fresh = {p["name"] for p in new["policies"]}
    policies = [p for p in old["policies"] if p["name"] not in fresh] + new["policies"]
    per_episode = [r for r in old["per_episode"] if r["policy"] not in fresh] + new["per_episode"]
    return {**new, "policies": policies, "per_episode": per_episode,
            "seconds": round(old.get("seconds", 0) + new["seconds"], 1)}


def print_report(report: dict) -> None:
    fams = list(report["policies"][0]["per_task"]) if report["policies"] else []
    print(f"\n{report['env_id']}: {report['episodes_per_policy']} held-out episodes per policy "
          f"(seeds {report['seed0']}+), {report['seconds']:.0f} s")
    print(f"{'policy':22s} {'learned':>7s} {'success':>8s} {'95% CI':>13s} {'level':>6s}"
          + "".join(f" {f:>12s}" for f in fams) + f" {'ms/query':>9s} {'ms/step':>8s}")
    for p in report["policies"]:
        lo, hi = p["success_ci95"]
        rates = [p["per_task"][f]["success_rate"] for f in fams]  # None: a family with no episodes (--episodes < 3)
        cells = "".join(f" {'-':>12s}" if r is None else f" {r:12.0%}" for r in rates)
        t = p.get("timing")
        ms = f" {t['infer_ms_batch1']:9.2f} {p['infer_ms_per_step']:8.2f}" if t else ""
        print(f"{p['name']:22s} {str(p['learned']):>7s} {p['success_rate']:8.0%} {f'[{lo:.2f}, {hi:.2f}]':>13s} "
              f"{p['mean_level']:6.2f}{cells}{ms}")
    grasps = [p for p in report["policies"] if (p.get("grasp") or {}).get("closed")]
    if grasps:
        print("\nthe hand at the first gripper close of the pick episodes (medians; aligned: yaw < 15 deg, xy < 1.5 "
              "cm)")
        print(f"{'policy':22s} {'closed':>9s} {'xy cm':>6s} {'height cm':>9s} {'yaw deg':>7s} {'aligned':>7s}")
        for p in grasps:
            g = p["grasp"]
            print(f"{p['name']:22s} {g['closed']:4d}/{g['pick_episodes']:<4d} {g['xy_cm']:6.2f} "
                  f"{g['height_cm']:9.2f} {g['yaw_deg']:7.1f} {g['aligned']:7.0%}")
    replan = report.get("replan_every", DEFAULT_REPLAN_EVERY)
    for p in report["policies"]:
        if p.get("timing"):
            t = p["timing"]
            print(f"{p['name']}: inference {t['infer_ms_batch1']:.2f} ms per query at batch 1 (1 thread), "
                  f"{p['infer_ms_per_step']:.2f} ms per env step with {replan}-action chunks; "
                  f"one forward pass for {t['batch']} rows {t['infer_ms_batched']:.2f} ms")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.policy_success", description=__doc__.split("\n\n")[0])
    p.add_argument("--scene", default=None, choices=("classic", "legible"),
                   help="SimDROID scene: classic (SimDROID-v0) or legible (SimDROID-v1); default: the shipped "
                        "checkpoints' scene")
    p.add_argument("--episodes", type=int, default=30, help="held-out episodes per policy (default 30)")
    p.add_argument("--seed0", type=int, default=HELDOUT_SEED0,
                   help="first seed (default %(default)s, held out from training)")
    p.add_argument("--policy", dest="policies", action="append", default=None,
                   help="a policy (repeatable): a shipped checkpoint, visuomotor:PATH, expert, noisy-<std>, random, "
                        "zero, ...; default: every shipped checkpoint and the baselines")
    p.add_argument("--update", action="store_true",
                   help="merge into the existing report: the policies measured now replace theirs, the others stay "
                        "(the report must have the same scene, episodes and seed0)")
    p.add_argument("--replan-every", type=int, default=DEFAULT_REPLAN_EVERY,
                   help="actions executed from each chunk before the next query (default %(default)s, openpi's DROID)")
    p.add_argument("--no-track", dest="track", action="store_false",
                   help="execute a Cartesian checkpoint's planned chunks open loop instead of tracking their goals "
                        "from the measured joints at every step")
    p.add_argument("--quick", action="store_true", help="3 episodes per policy")
    p.add_argument("--out", default=None, help=out_help("policy_success"))
    p.add_argument("--no-progress", dest="progress", action="store_false")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    default_scene = shipped_scene()
    args = Args(scene=a.scene or default_scene, episodes=3 if a.quick else a.episodes, seed0=a.seed0,
                policies=a.policies or [], out=a.out, quick=a.quick, progress=a.progress, replan_every=a.replan_every,
                track=a.track)
    name = "policy_success" if args.scene == default_scene else f"policy_success_{args.scene}"
    path = results_path(name, quick=args.quick, out=args.out)
    old = json.loads(path.read_text()) if a.update and path.is_file() else None
    # reports from before an option ran with its old behaviour: 8 actions per chunk, planned chunks open loop
    old_replan = None if old is None else old.get("replan_every", DEFAULT_REPLAN_EVERY)
    old_track = None if old is None else old.get("track", False)
    if old is not None and (old["scene"], old["episodes_per_policy"], old["seed0"], old_replan, old_track) != (
            args.scene, args.episodes, args.seed0, args.replan_every, args.track):
        raise SystemExit(f"--update: {path} has scene {old['scene']!r}, {old['episodes_per_policy']} episodes, seed0 "
                         f"{old['seed0']}, replan_every {old_replan}, track {old_track}; run with the same settings "
                         f"or without --update")
    report = run(args)
    if old is not None:
        report = merge_reports(old, report)
    print_report(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"JSON: {path}")


if __name__ == "__main__":
    main()
