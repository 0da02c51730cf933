"""RL fine-tuning of a visuomotor policy inside NeuralDROID-v0, checked against SimDROID's ground truth.

::

    neuralsim rl --policy visuomotor-s750 --out runs/rl --iterations 40   # or: python -m policies.finetune.rl ...
    neuralsim rl --policy visuomotor-s750 --out runs/rl --iterations 40   # again: resumes where it stopped
    python -m policies.finetune.rl --quick                                # a tiny budget, to try it out

The policy improves on-policy in ``gym.make_vec("NeuralDROID-v0", num_envs=groups * group_size)`` with the judge's
episode-end rubric level as its reward, by group-relative policy optimisation over its action chunks
(:mod:`policies.finetune.grpo`).  The env is used as any user gets it, unmodified.

**The reward-hacking guard.**  Every ``eval_every`` iterations the current policy (its mean actions) runs closed loop
on ``heldout`` held-out initial states twice: in SimDROID, whose rubric is the truth, and in the world model, judged
as in training.  Both curves are logged and plotted (``OUT/curves.png``); the checkpoint kept as ``OUT/best`` is the
one best on the guard (SimDROID success, then mean true level), never the one best in the world model's eyes.  When
the world-model reward has risen by ``divergence`` above its value at the best guard point while SimDROID success has
fallen by as much below the best, the run is flagged ``diverged`` (and stops with ``--stop-on-divergence``).

Held-out states are :mod:`policies.heldout`'s (seeds 2,000,000 + i, task families round-robin), those the policy
benchmarks play, so the ``before`` numbers are the policy's success there; training states come from seeds
8,000,000 + and are never evaluated.  ``OUT`` holds ``state.json`` (iteration, curves, the best point), ``policy/``
and ``best/`` (checkpoints loadable with ``make_policy("visuomotor:OUT/best")``), ``optimizer.pt``, ``curves.png``,
``videos/`` (before and after, world model | SimDROID) and ``report.json`` (``--results PATH`` elsewhere).  An
interrupted run continues from its last iteration: every draw comes from generators seeded by (seed, iteration), so
a resumed run equals an uninterrupted one.  With ``--ray`` the SimDROID guard episodes are spread over Ray workers
(``pip install 'neuralsim[ray]'``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..heldout import heldout_starts
from .grpo import ChunkPolicy, GRPOConfig, collect, flat_groups, group_advantages, update

log = logging.getLogger(__name__)
TRAIN_SEED0 = 8_000_000
STATE, OPTIMIZER = "state.json", "optimizer.pt"
#: Fields of the config that define a run; a resume with others is refused.
IDENTITY = ("policy", "checkpoint", "judge", "groups", "group_size", "horizon", "heldout", "seed", "eval_every",
            "grpo")


@dataclass
class RLConfig:
    """A fine-tuning run."""

    policy: str = "visuomotor-s750"
    """Starting checkpoint: a shipped name, ``visuomotor:PATH`` or a directory."""
    checkpoint: str | None = None
    """World model (None: NeuralDROID-v0's default)."""
    judge: str = "roboworld:offline"
    """Reward function of the world-model env (its rubric level / 5 is the reward)."""
    out: str = "runs/rl"
    iterations: int = 40
    groups: int = 2
    """Initial states per iteration."""
    group_size: int = 4
    """Rollouts per initial state (the group of the group-relative advantage)."""
    horizon: int = 150
    """Steps per episode (SimDROID's 10 s at 15 Hz)."""
    eval_every: int = 5
    heldout: int = 30
    """Held-out initial states of the guard."""
    seed: int = 0
    threads: int = 2
    max_minutes: float | None = None
    """Wall-clock budget of this invocation; the run stops after the iteration that crosses it (resumable)."""
    divergence: float = 0.1
    stop_on_divergence: bool = False
    videos: int = 2
    """Held-out episodes recorded before and after (world model | SimDROID mp4s)."""
    ray: bool = False
    ray_workers: int = 2
    results: str | None = None
    """Report path (None: ``OUT/report.json``)."""
    quick: bool = False
    progress: bool = True
    grpo: GRPOConfig = field(default_factory=GRPOConfig)

    def __post_init__(self) -> None:
        for name in ("iterations", "groups", "group_size", "horizon", "eval_every", "heldout", "threads",
                     "ray_workers"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (a group-relative advantage needs a group), got "
                             f"{self.group_size}")

    def identity(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return {k: d[k] for k in IDENTITY}


# ----------------------------------------------------------------------------- initial states
def train_starts(iteration: int, groups: int) -> list[tuple[int, str]]:
    from neuralsim.envs.sim_droid import TASK_FAMILIES

    first = TRAIN_SEED0 + iteration * groups
    return [(first + b, TASK_FAMILIES[(first + b) % len(TASK_FAMILIES)]) for b in range(groups)]


def specs_for(starts: Sequence[tuple[int, str]], scene: str) -> list:
    from neuralsim.envs.episodes import EpisodeSpec
    from neuralsim.envs.sim_droid import SimDROIDEnv

    sim = SimDROIDEnv(image_size=64, reward_fn=None, scene=scene)
    try:
        return [EpisodeSpec.from_simdroid(seed, family, env=sim) for seed, family in starts]
    finally:
        sim.close()


# ----------------------------------------------------------------------------- the guard
def sim_episodes(policy_dir: str, starts: Sequence[tuple[int, str]], scene: str, horizon: int,
                 keep: int = 0, threads: int = 1) -> list[dict[str, Any]]:
    """The policy at ``policy_dir`` closed loop in SimDROID from each start: true level and success per episode
    (and the first ``keep`` episodes' records)."""
    import torch

    from neuralsim.envs.sim_droid import SimDROIDEnv
    from policies import run_episode
    from policies.visuomotor import VisuomotorPolicy

    torch.set_num_threads(threads)
    policy = VisuomotorPolicy.from_pretrained(policy_dir)
    env = SimDROIDEnv(image_size=64, reward_fn=None, max_episode_steps=horizon, scene=scene)
    rows = []
    try:
        for k, (seed, family) in enumerate(starts):
            res = run_episode(env, policy, seed=seed, options={"task": family})
            rows.append({"seed": seed, "family": family, "level": int(res.info["rubric_level"]),
                         "success": bool(res.info["success"]), "episode": res.episode if k < keep else None})
    finally:
        env.close()
    return rows


def _ray_sim_episodes(cfg: RLConfig, policy_dir: str, starts, scene: str, keep: int) -> list[dict[str, Any]]:
    try:
        import ray
    except ImportError as e:
        raise ImportError(f"--ray needs Ray ({e}); install it with: pip install 'neuralsim[ray]'") from e
    started = not ray.is_initialized()
    if started:
        env_vars = {"MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "OMP_NUM_THREADS": "1",
                    "PYOPENGL_PLATFORM": os.environ.get("PYOPENGL_PLATFORM", "egl")}
        ray.init(address="local", num_cpus=cfg.ray_workers, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": env_vars})
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(sim_episodes)
        parts = np.array_split(np.arange(len(starts)), cfg.ray_workers)
        futures = [remote.remote(policy_dir, [starts[i] for i in idx], scene, cfg.horizon,
                                 keep=max(0, keep - int(idx[0])) if len(idx) else 0) for idx in parts if len(idx)]
        return [row for part in ray.get(futures) for row in part]
    finally:
        if started:
            ray.shutdown()


def wm_episodes(env, policy: ChunkPolicy, specs: Sequence, seeds: Sequence[int], horizon: int) -> dict[str, Any]:
    """The policy's mean actions closed loop in the world model from ``specs``: judged levels (N,) and the env."""
    import torch

    n = len(specs)
    obs, info = env.reset(seed=[int(s) for s in seeds], options={"episode": list(specs)})
    instructions = [str(t) for t in info["instruction"]]
    t, reward = 0, np.zeros(n)
    while t < horizon:
        inputs = policy.inputs(obs, instructions)
        with torch.no_grad():
            actions = policy.env_actions(inputs, policy.mean(inputs).numpy())
        for j in range(min(policy.cfg.replan_every, horizon - t)):
            obs, reward, *_ = env.step(actions[:, j])
        t += min(policy.cfg.replan_every, horizon - t)
    return {"levels": np.asarray(reward, np.float64)}


def evaluate(cfg: RLConfig, policy: ChunkPolicy, policy_dir: str, eval_env, specs, scene: str,
             video_tag: str | None = None) -> dict[str, Any]:
    """The guard: SimDROID truth and the world model's judged reward on the held-out starts."""
    starts = heldout_starts(cfg.heldout)
    keep = cfg.videos if video_tag else 0
    t0 = time.perf_counter()
    if cfg.ray:
        sim = _ray_sim_episodes(cfg, policy_dir, starts, scene, keep)
    else:
        sim = sim_episodes(policy_dir, starts, scene, cfg.horizon, keep=keep, threads=cfg.threads)
    seeds = [cfg.seed * 1_000_003 + 17 + i for i in range(len(specs))]
    wm = wm_episodes(eval_env, policy, specs, seeds, cfg.horizon)
    levels = wm["levels"]
    judged = levels[np.isfinite(levels)]
    result = {
        "simdroid_success": float(np.mean([r["success"] for r in sim])),
        "simdroid_level": float(np.mean([r["level"] for r in sim])),
        "wm_reward": float(np.mean(judged) / 5) if len(judged) else None,
        "wm_success": float(np.mean(judged == 5)) if len(judged) else None,
        "wm_judge_failures": int((~np.isfinite(levels)).sum()),
        "per_episode": [{"seed": r["seed"], "family": r["family"], "true_level": r["level"],
                         "judged_level": None if not math.isfinite(lv) else float(lv)}
                        for r, lv in zip(sim, levels)],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if video_tag:
        from neuralsim.episode import write_video
        from policies.evaluate import side_by_side_frames

        folder = Path(cfg.out) / "videos"
        folder.mkdir(parents=True, exist_ok=True)
        for k, row in enumerate(sim[:keep]):
            write_video(str(folder / f"{video_tag}_{row['seed']}.mp4"),
                        side_by_side_frames(eval_env.unwrapped.episode(k), row["episode"]), fps=15)
    return result


def flat_group_share(train: list[dict[str, Any]]) -> float | None:
    """The share of the run's groups whose rollouts all scored alike (no learning signal); None when no iteration
    recorded it."""
    shares = [t["flat_groups"] for t in train if "flat_groups" in t]
    return None if not shares else float(np.mean(shares))


def diverged(points: list[dict[str, Any]], margin: float) -> bool:
    """Has the world-model reward risen by ``margin`` over its value at the best guard point while SimDROID success
    fell ``margin`` below the best?  ``points``: the guard evaluations so far, in order."""
    if len(points) < 2:
        return False
    best = max(points, key=lambda p: (p["simdroid_success"], p["simdroid_level"]))
    last = points[-1]
    if last["wm_reward"] is None or best["wm_reward"] is None:
        return False
    return (last["wm_reward"] - best["wm_reward"] >= margin
            and best["simdroid_success"] - last["simdroid_success"] >= margin)


def plot_curves(state: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train, guard = state["train"], state["guard"]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([p["env_steps"] for p in train], [p["reward"] for p in train], color="0.7", lw=1,
            label="world-model reward, training rollouts")
    xs = [p["env_steps"] for p in guard]
    ax.plot(xs, [p["wm_reward"] for p in guard], "o-", color="tab:blue", label="world-model reward, held-out")
    ax.plot(xs, [p["wm_success"] for p in guard], "s--", color="tab:blue", alpha=0.6,
            label="world-model judged success, held-out")
    ax.plot(xs, [p["simdroid_success"] for p in guard], "o-", color="tab:red", label="SimDROID success, held-out")
    if state.get("best") is not None:
        ax.axvline(state["best"]["env_steps"], color="tab:red", ls=":", lw=1, label="kept checkpoint")
    ax.set_xlabel("world-model env steps")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"RL inside the world model: {state['config']['policy']}")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- the run
def _load_state(cfg: RLConfig, out: Path) -> dict[str, Any] | None:
    path = out / STATE
    if not path.is_file():
        return None
    state = json.loads(path.read_text())
    if state["config"]["identity"] != json.loads(json.dumps(cfg.identity())):
        raise ValueError(f"{out} holds a run with other settings ({state['config']['identity']}); use another --out "
                         "or the same settings to resume")
    return state


def _save(state: dict[str, Any], out: Path, policy, optimizer) -> None:
    import torch

    policy.model.save_pretrained(out / "policy.tmp")
    torch.save(optimizer.state_dict(), out / (OPTIMIZER + ".tmp"))
    if (out / "policy").exists():
        import shutil

        shutil.rmtree(out / "policy")
    os.replace(out / "policy.tmp", out / "policy")
    os.replace(out / (OPTIMIZER + ".tmp"), out / OPTIMIZER)
    tmp = out / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, out / STATE)


def _generator(seed: int, iteration: int, salt: int = 0):
    import torch

    return torch.Generator().manual_seed(int(np.random.SeedSequence([seed, iteration, salt]).generate_state(1)[0]))


def run(cfg: RLConfig) -> dict[str, Any]:
    """Fine-tune ``cfg.policy`` inside the world model; returns (and writes) the report."""
    import copy

    import gymnasium as gym
    import torch

    import neuralsim  # noqa: F401  (registers the envs)
    from neuralsim.rewards import make_reward_fn
    from policies.visuomotor import VisuomotorPolicy

    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    name = cfg.policy.split(":", 1)[1] if cfg.policy.startswith("visuomotor:") else cfg.policy
    start = VisuomotorPolicy.from_pretrained(name)
    state = _load_state(cfg, out)
    judge = make_reward_fn(cfg.judge)
    n = cfg.groups * cfg.group_size
    env = gym.make_vec("NeuralDROID-v0", num_envs=n, checkpoint=cfg.checkpoint, reward_fn=judge,
                       max_episode_steps=cfg.horizon)
    scene = env.unwrapped.world_model.config.scene
    if start.config.scene != scene:
        env.close()
        raise ValueError(f"{cfg.policy} was trained on the {start.config.scene} scene and the world model on the "
                         f"{scene} one; fine-tune a policy of the world model's scene")
    eval_env = gym.make_vec("NeuralDROID-v0", num_envs=cfg.heldout, checkpoint=cfg.checkpoint, reward_fn=judge,
                            max_episode_steps=cfg.horizon)
    heldout_specs = specs_for(heldout_starts(cfg.heldout), scene)
    reference = copy.deepcopy(start.model).eval().requires_grad_(False)
    policy = VisuomotorPolicy.from_pretrained(out / "policy") if state else start
    policy.model.requires_grad_(True)
    chunks = ChunkPolicy(policy, cfg.grpo)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=cfg.grpo.lr, weight_decay=0.0)
    out.mkdir(parents=True, exist_ok=True)
    if state:
        optimizer.load_state_dict(torch.load(out / OPTIMIZER, weights_only=True))
        log.info("resuming %s at iteration %d", out, state["iteration"])
    else:
        config = json.loads(json.dumps({**dataclasses.asdict(cfg), "identity": cfg.identity()}))
        state = {"config": config, "iteration": 0, "env_steps": 0, "wall_s": 0.0, "train": [], "guard": [],
                 "best": None, "diverged": False, "scene": scene}
        start.model.save_pretrained(out / "start")
        point = evaluate(cfg, chunks, str(out / "start"), eval_env, heldout_specs, scene, video_tag="before")
        state["guard"].append({"iteration": 0, "env_steps": 0, **point})
        state["best"] = {"iteration": 0, "env_steps": 0, "simdroid_success": point["simdroid_success"],
                         "simdroid_level": point["simdroid_level"]}
        start.model.save_pretrained(out / "best")
        _save(state, out, policy, optimizer)
    t_run = time.perf_counter()
    wall0 = state["wall_s"]
    bar = None
    if cfg.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.iterations, initial=state["iteration"], desc="RL iterations", unit="it")
    stopped = "iterations"
    try:
        while state["iteration"] < cfg.iterations:
            it = state["iteration"]
            starts = train_starts(it, cfg.groups)
            specs = [s for s in specs_for(starts, scene) for _ in range(cfg.group_size)]
            seeds = [cfg.seed * 1_000_003 + it * n + r for r in range(n)]
            rollouts = collect(env, chunks, specs, seeds, cfg.horizon, _generator(cfg.seed, it, 1))
            rewards = np.nan_to_num(rollouts.rewards, nan=0.0).reshape(cfg.groups, cfg.group_size)
            stats = update(chunks, reference, optimizer, rollouts, group_advantages(rewards).reshape(-1),
                           _generator(cfg.seed, it, 2))
            state["iteration"] = it + 1
            state["env_steps"] += rollouts.env_steps
            state["wall_s"] = wall0 + time.perf_counter() - t_run
            state["train"].append({"iteration": it + 1, "env_steps": state["env_steps"],
                                   "reward": float(rewards.mean()), "success": float((rollouts.levels == 5).mean()),
                                   "flat_groups": float(flat_groups(rewards).mean()),
                                   **{k: round(float(v), 6) for k, v in stats.items()}})
            if state["iteration"] % cfg.eval_every == 0 or state["iteration"] == cfg.iterations:
                policy.model.save_pretrained(out / "eval")
                point = evaluate(cfg, chunks, str(out / "eval"), eval_env, heldout_specs, scene)
                state["guard"].append({"iteration": state["iteration"], "env_steps": state["env_steps"], **point})
                best = state["best"]
                if (point["simdroid_success"], point["simdroid_level"]) > (best["simdroid_success"],
                                                                           best["simdroid_level"]):
                    state["best"] = {"iteration": state["iteration"], "env_steps": state["env_steps"],
                                     "simdroid_success": point["simdroid_success"],
                                     "simdroid_level": point["simdroid_level"]}
                    policy.model.save_pretrained(out / "best")
                if diverged(state["guard"], cfg.divergence):
                    state["diverged"] = True
                    log.warning("iteration %d: the world-model reward rose while SimDROID success fell "
                                "(guard %s); the kept checkpoint stays iteration %d", state["iteration"],
                                point["simdroid_success"], state["best"]["iteration"])
                since = [t for t in state["train"] if t["iteration"] > state["guard"][-2]["iteration"]]
                if since and all(t.get("flat_groups") == 1.0 for t in since):
                    log.warning("iterations %d-%d: every group's rollouts scored alike, so no advantage and no "
                                "update: the world model and judge give each initial state one outcome whatever "
                                "the sampled actions (a larger --action-std, or a world model whose outcome "
                                "follows the actions)", since[0]["iteration"], since[-1]["iteration"])
                log.info("iteration %d: SimDROID success %.2f (level %.2f), world-model reward %s, judged "
                         "success %s", state["iteration"], point["simdroid_success"], point["simdroid_level"],
                         point["wm_reward"], point["wm_success"])
                plot_curves(state, out / "curves.png")
            _save(state, out, policy, optimizer)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(reward=f"{rewards.mean():.2f}", sim=f"{state['guard'][-1]['simdroid_success']:.2f}")
            if state["diverged"] and cfg.stop_on_divergence:
                stopped = "diverged"
                break
            if cfg.max_minutes is not None and time.perf_counter() - t_run > 60 * cfg.max_minutes:
                stopped = "max_minutes"
                break
    finally:
        if bar is not None:
            bar.close()
        env.close()
    after = None
    if stopped != "max_minutes" or state["iteration"] >= cfg.iterations:
        best = VisuomotorPolicy.from_pretrained(out / "best")
        after = evaluate(cfg, ChunkPolicy(best, cfg.grpo), str(out / "best"), eval_env, heldout_specs, scene,
                         video_tag="after")
        state["after"] = after
        _save(state, out, policy, optimizer)
    eval_env.close()
    plot_curves(state, out / "curves.png")
    report = make_report(cfg, state, stopped)
    path = Path(cfg.results) if cfg.results else out / "report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    log.info("report written to %s", path)
    return report


def make_report(cfg: RLConfig, state: dict[str, Any], stopped: str) -> dict[str, Any]:
    before = state["guard"][0]
    after = state.get("after")
    return {
        "benchmark": "rl", "policy": cfg.policy, "world_model": cfg.checkpoint or "NeuralDROID-v0 default",
        "judge": cfg.judge, "scene": state["scene"],
        "algorithm": "GRPO: group-relative advantages, PPO-clip over executed action chunks, KL to the start",
        "budget": {"iterations": state["iteration"], "env_steps": state["env_steps"],
                   "wall_s": round(state["wall_s"], 1), "rollouts_per_iteration": cfg.groups * cfg.group_size},
        "heldout_episodes": cfg.heldout,
        "simdroid_success_before": before["simdroid_success"],
        "simdroid_success_after": None if after is None else after["simdroid_success"],
        "simdroid_level_before": before["simdroid_level"],
        "simdroid_level_after": None if after is None else after["simdroid_level"],
        "wm_reward_before": before["wm_reward"], "wm_reward_after": None if after is None else after["wm_reward"],
        "wm_success_before": before["wm_success"], "wm_success_after": None if after is None else after["wm_success"],
        "kept_iteration": state["best"]["iteration"], "diverged": state["diverged"], "stopped": stopped,
        "flat_group_share": flat_group_share(state["train"]),
        "curves": [{k: p[k] for k in ("iteration", "env_steps", "simdroid_success", "simdroid_level", "wm_reward",
                                      "wm_success")} for p in state["guard"]],
        "train_curve": state["train"],
        "outputs": {"dir": str(cfg.out), "plot": str(Path(cfg.out) / "curves.png"),
                    "best": str(Path(cfg.out) / "best")},
        "config": state["config"],
    }


# ----------------------------------------------------------------------------- command line
QUICK = dict(iterations=2, groups=1, group_size=2, horizon=24, eval_every=1, heldout=3, videos=1)


def add_arguments(p: argparse.ArgumentParser) -> None:
    d, g = RLConfig(), GRPOConfig()
    p.add_argument("--policy", default=d.policy, help="starting visuomotor checkpoint (default %(default)s)")
    p.add_argument("--checkpoint", default=None, help="world model (default: NeuralDROID-v0's)")
    p.add_argument("--judge", default=d.judge, help="reward function (default %(default)s)")
    p.add_argument("--out", default=d.out, help="run directory; re-running resumes it (default %(default)s)")
    for name in ("iterations", "groups", "group_size", "horizon", "eval_every", "heldout", "seed", "threads",
                 "videos", "ray_workers"):
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=getattr(d, name),
                       help=f"default {getattr(d, name)}")
    p.add_argument("--max-minutes", dest="max_minutes", type=float, default=None,
                   help="stop after the iteration that crosses this wall time (resumable)")
    p.add_argument("--divergence", type=float, default=d.divergence,
                   help="margin of the reward-hacking flag (default %(default)s)")
    p.add_argument("--stop-on-divergence", action="store_true")
    for name in ("action_std", "gripper_std", "clip", "lr", "kl_coef"):
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=float, default=getattr(g, name),
                       help=f"GRPO: default {getattr(g, name)}")
    p.add_argument("--epochs", type=int, default=g.epochs, help=f"GRPO: passes per iteration (default {g.epochs})")
    p.add_argument("--ray", action="store_true", help="SimDROID guard episodes on Ray workers")
    p.add_argument("--results", default=None, help="report path (default OUT/report.json)")
    p.add_argument("--quick", action="store_true", help=f"a tiny budget to try it ({QUICK})")
    p.add_argument("--no-progress", dest="progress", action="store_false")


def config_from_args(a: argparse.Namespace) -> RLConfig:
    grpo = GRPOConfig(action_std=a.action_std, gripper_std=a.gripper_std, clip=a.clip, lr=a.lr, kl_coef=a.kl_coef,
                      epochs=a.epochs)
    kw = {f.name: getattr(a, f.name) for f in dataclasses.fields(RLConfig) if f.name != "grpo" and hasattr(a, f.name)}
    if a.quick:
        kw.update(QUICK)
        kw["out"] = a.out if a.out != RLConfig.out else "runs/rl_quick"
    return RLConfig(**kw, grpo=grpo)


def print_report(r: dict[str, Any]) -> None:
    def f(x):
        return "-" if x is None else f"{x:.2f}"

    print(f"RL inside the world model: {r['policy']} ({r['scene']} scene), {r['budget']['iterations']} iterations, "
          f"{r['budget']['env_steps']} env steps, {r['budget']['wall_s']:.0f} s")
    print(f"  SimDROID success on {r['heldout_episodes']} held-out: {f(r['simdroid_success_before'])} -> "
          f"{f(r['simdroid_success_after'])} (level {f(r['simdroid_level_before'])} -> {f(r['simdroid_level_after'])})")
    print(f"  world-model reward: {f(r['wm_reward_before'])} -> {f(r['wm_reward_after'])} (judged success "
          f"{f(r['wm_success_before'])} -> {f(r['wm_success_after'])})")
    print(f"  kept checkpoint: iteration {r['kept_iteration']}; diverged: {r['diverged']}; stopped: {r['stopped']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m policies.finetune.rl", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    a = p.parse_args(argv)
    return run_command(a)


def run_command(a: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    try:
        cfg = config_from_args(a)
        report = run(cfg)
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"error: {e}")
        return 2
    print_report(report)
    return 0


def register_command(subparsers: Any) -> None:
    """Add ``neuralsim rl`` (the ``neuralsim.commands`` entry point; same options as this module)."""
    p = subparsers.add_parser("rl", help="fine-tune a visuomotor policy inside the world model (GRPO), with a "
                                         "SimDROID guard", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.set_defaults(func=run_command)


if __name__ == "__main__":
    raise SystemExit(main())
