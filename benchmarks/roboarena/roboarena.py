"""RoboArena on ground truth: rank policies inside the world model, and check the ranking against SimDROID.

Usage:
    python -m benchmarks.roboarena --quick                        # 3 policies x 2 episodes, under 3 minutes
    python -m benchmarks.roboarena                                # the graded set x 20 episodes -> shipped_run/
    python -m benchmarks.roboarena --policy expert --policy openpi:127.0.0.1:8000 --episodes 12 --out outputs/ra
    python -m benchmarks.roboarena --ray --ray-workers 4          # (policy, episode chunk) units on Ray workers
    (the same options: neuralsim roboarena ...)

Every policy plays episodes 0..M-1 (SimDROID seed ``seed0 + i``, task families in turn) twice:

1. **in the world model**: ``gym.make_vec("NeuralDROID-v0", num_envs=<chunk>)`` -- one batched world model for a
   chunk of episodes (by default all M of a policy) -- starts each row from SimDROID's first three views of that
   episode and runs the policy closed loop; the env's reward function, ``--judge`` (default the offline 0-5
   progress judge), scores each finished episode, and ``--binary-judge`` (default the offline binary-success
   judge) scores it too;
2. **in SimDROID**, from the same initial state, closed loop; the simulator's rubric level and success are the
   truth, and both judges also score SimDROID's own frames (the decomposition: how much of the ranking error is
   the judge's, how much the world model's).

Scripted policies read SimDROID's privileged state, so they act closed loop in SimDROID and the world model gets
the plan they made there (their actions, open loop) -- the same actions from the same initial state.  Every other
policy (random, zero, ``openpi:HOST:PORT``, ``roboarena:HOST:PORT``, a registered learned policy) is closed loop in
both worlds, one fresh instance per episode.

Nothing is lost: each finished episode is one line of ``OUT/episodes.jsonl``; a rerun with the same ``--out``
skips the episodes already there (``--retry-failed`` reruns the failed ones), and Ctrl-C says how many are saved.
A policy that raises (a server that went away) fails only its episodes, with the error recorded and no score; a
judge that fails leaves the rollout, unjudged, with the judge's error.  ``--report-only`` rebuilds the report of the
run recorded in ``OUT`` (its ``run.json``).  A mistake is one line on stderr and exit 2 (Ctrl-C: 130).
``OUT`` then holds ``roboarena.json`` (leaderboard, correlations with bootstrap intervals, MMRV, bias, the
decomposition), ``index.html`` (the report: tables, plots, videos), ``scatter.png``, ``bars.png`` and
``videos/*.mp4`` (NeuralDROID | SimDROID, side by side).  Without ``--out`` a full run writes into
``benchmarks/roboarena/shipped_run/`` and ``benchmarks/results/roboarena.json``; ``--quick`` into
``outputs/roboarena_quick/`` and ``benchmarks/results/roboarena_quick.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from policies.heldout import HELDOUT_SEED0, heldout_starts

from ..common.policy_set import graded_names, resolve_policy
from ..common.results_path import results_path

log = logging.getLogger(__name__)

#: Where a full run without ``--out`` writes: the shipped model's run (page, plots, videos, episodes) beside this
#: module; its summary also goes to ``benchmarks/results/roboarena.json``.
RUN_DIR = Path(__file__).resolve().parent / "shipped_run"
#: ``--quick``: these policies, 2 episodes each.
QUICK_POLICIES = ("expert", "expert+missed_grasp", "zero")
QUICK_EPISODES = 2
#: Config fields a resumed run must share with the rows already in ``episodes.jsonl``.
RESULT_KEYS = ("seed0", "judge", "binary_judge", "checkpoint", "steps", "replan_every", "chunk")
#: Config fields ``run.json`` also records, of the latest run, for ``--report-only`` (a rerun may change them).
REPORT_KEYS = ("policies", "episodes", "bootstrap", "videos")
#: The score fields of a row: all None when the row failed (its policy raised), since no rollout is the policy's.
SCORE_KEYS = ("true_level", "true_success", "sim_judged", "sim_binary", "judged", "binary")


class ArenaError(ValueError):
    """An option or output directory the benchmark cannot use; the message says what to do instead."""


@dataclass
class RoboArenaConfig:
    """Options of ``python -m benchmarks.roboarena`` (each is one command-line flag)."""

    policies: list[str] = field(default_factory=graded_names)
    """Policy names: the graded set's (``expert``, ``noisy-0.3``, ``expert+weak_grip``, ``random``, ...) or any
    :func:`policies.make_policy` name (``openpi:HOST:PORT``, ``roboarena:HOST:PORT``, a learned policy)."""
    episodes: int = 20
    """Episodes per policy (episode i: SimDROID seed ``seed0 + i``, task family i mod 3)."""
    seed0: int = HELDOUT_SEED0
    """First seed (held out from training); also the world model's noise seed of episode 0."""
    judge: str = "roboworld:offline"
    """The judge of the ranking: a ``roboworld:`` (0-5 progress) or ``binary:`` reward-function name."""
    binary_judge: str | None = "binary:offline"
    """A binary-success judge scored beside it (``none`` to skip)."""
    checkpoint: str | None = None
    """World-model checkpoint (directory or hub id); None: the shipped model."""
    steps: int = 150
    """Episode length in both worlds (10 s at 15 Hz); episodes are judged at their end."""
    replan_every: int = 8
    """Actions of each chunk executed open loop before a policy is queried again (openpi's DROID setting)."""
    chunk: int | None = None
    """Episodes per work unit, i.e. per vector env (None: all of a policy's episodes in one)."""
    videos: int = 1
    """Side-by-side mp4s of each policy's first N episodes."""
    out: str | None = None
    """Output directory (default: benchmarks/roboarena/shipped_run, or outputs/roboarena_quick with --quick)."""
    retry_failed: bool = False
    """Rerun the episodes recorded as failed (a policy error) instead of keeping them."""
    report_only: bool = False
    """Run nothing: rebuild the summary and report from the episodes already in ``OUT/episodes.jsonl``, with the
    options recorded in ``OUT/run.json`` (those given beside it win); a directory with no run is refused."""
    ray: bool = False
    """Spread the (policy, episode chunk) units over Ray workers (needs ``pip install 'neuralsim[ray]'``)."""
    ray_workers: int = 2
    """Ray workers (CPUs of the local Ray instance; ignored when ``RAY_ADDRESS`` points at a running cluster)."""
    threads: int = 1
    """torch CPU threads per process (the world model at small batch gains little from more)."""
    bootstrap: int = 2000
    """Bootstrap resamples of every interval."""
    quick: bool = False
    """Smoke run: policies ``QUICK_POLICIES`` (unless given), 2 episodes each."""
    progress: bool = True
    """Show progress bars."""

    def __post_init__(self) -> None:
        for name in ("episodes", "steps", "replan_every", "threads", "ray_workers", "bootstrap"):
            if getattr(self, name) < 1:
                raise ArenaError(f"{name} must be >= 1 (--{name.replace('_', '-')}), got {getattr(self, name)}")
        if self.chunk is not None and self.chunk < 1:
            raise ArenaError(f"chunk must be >= 1 (--chunk), or unset for all episodes of a policy, got {self.chunk}")
        if self.videos < 0:
            raise ArenaError(f"videos must be >= 0 (--videos), got {self.videos}")
        if not self.policies:
            raise ArenaError("no policies given")
        if len(set(self.policies)) != len(self.policies):
            raise ArenaError(f"policies repeat a name: {self.policies}; give each --policy once")
        for spec, allowed in ((self.judge, ("roboworld", "binary")), (self.binary_judge, ("binary",))):
            if spec is not None and spec.partition(":")[0] not in allowed:
                raise ArenaError(f"judge {spec!r}: the ranking needs a rubric level or a success; use a "
                                 f"{' or '.join(repr(a + ':') for a in allowed)} judge")

    @property
    def out_dir(self) -> Path:
        return default_out(self.out, self.quick)

    @property
    def judge_top(self) -> float:
        """The score that means success on ``judge``'s scale (5 for the progress rubric, 1 for binary)."""
        return 5.0 if self.judge.startswith("roboworld") else 1.0


def default_out(out: str | None, quick: bool) -> Path:
    """The output directory: ``out``, else :data:`RUN_DIR` (outputs/roboarena_quick with --quick)."""
    if out:
        return Path(out)
    return Path("outputs/roboarena_quick") if quick else RUN_DIR


# ----------------------------------------------------------------------------- one work unit
def _score(judgement: Any) -> tuple[float | None, str | None]:
    """(score or None, error or None) of a judge's result."""
    score = getattr(judgement, "score", judgement)
    if score is None or (isinstance(score, float) and math.isnan(score)):
        return None, str(getattr(judgement, "error", None) or "the judge gave no score")
    return float(score), None


def _judge(judge: Any, episode: Any) -> tuple[float | None, str | None]:
    if judge is None or episode is None:
        return None, None
    try:
        return _score(judge(episode))
    except Exception as e:  # noqa: BLE001 -- a judge failure never loses the rollout
        return None, f"{type(e).__name__}: {e}"


def _close(policy: Any) -> None:
    close = getattr(policy, "close", None)
    if callable(close):
        try:
            close()
        except Exception as e:  # noqa: BLE001
            log.warning("closing %s failed: %s", type(policy).__name__, e)


def _hold(observation: dict, row: int) -> np.ndarray:
    """The action of a row whose policy failed: no arm motion, the gripper where it is."""
    a = np.zeros(8, np.float32)
    a[7] = float(np.asarray(observation["gripper_position"][row]).reshape(-1)[0])
    return a


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def run_unit(cfg: RoboArenaConfig, policy_name: str, indices: Sequence[int],
             video_dir: str | None = None) -> list[dict]:
    """Play episodes ``indices`` of one policy in SimDROID and in one batched NeuralDROID; one row per episode.

    Deterministic given the config: the same unit gives the same rows in any process.
    """
    import gymnasium as gym
    import torch

    import neuralsim  # noqa: F401  (registers the envs)
    from neuralsim.envs.episodes import EpisodeSpec
    from neuralsim.envs.sim_droid import SimDROIDEnv
    from neuralsim.rewards import make_reward_fn
    from policies import ChunkedController, run_episode
    from policies.base import check_action_mode
    from policies.replay import ReplayPolicy

    torch.set_num_threads(cfg.threads)
    choice = resolve_policy(policy_name)
    starts = heldout_starts(max(indices) + 1, cfg.seed0)
    judge = make_reward_fn(cfg.judge)
    binary = make_reward_fn(cfg.binary_judge) if cfg.binary_judge else None
    n = len(indices)
    wm = gym.make_vec("NeuralDROID-v0", num_envs=n, checkpoint=cfg.checkpoint, reward_fn=judge,
                      max_episode_steps=cfg.steps)
    size = int(wm.single_observation_space["exterior_image_1_left"].shape[0])
    # the truth: the SimDROID scene the world model was trained on
    sim = SimDROIDEnv(image_size=size, max_episode_steps=cfg.steps, reward_fn=None,
                      scene=wm.unwrapped.world_model.config.scene)
    rows: list[dict] = []
    specs, plans, sim_episodes = [], [], []
    t0 = time.perf_counter()
    # 1. SimDROID, closed loop: the truth (and a privileged policy's plan)
    for i in indices:
        seed, family = starts[i]
        specs.append(EpisodeSpec.from_simdroid(seed, family, image_size=size, env=sim.unwrapped))
        row: dict[str, Any] = {"policy": choice.name, "episode": int(i), "seed": seed, "family": family,
                               "instruction": specs[-1].instruction, "error": None}
        policy, res = None, None
        try:
            policy = choice.build(env=sim, seed=seed)
            res = run_episode(sim, policy, replan_every=cfg.replan_every, seed=seed, options={"task": family})
        except Exception as e:  # noqa: BLE001 -- a failing policy fails its episode, the run goes on
            row["error"] = f"SimDROID: {type(e).__name__}: {e}"
            res = getattr(e, "partial_episode", None)
            log.warning("%s episode %d failed in SimDROID: %s", choice.name, i, row["error"])
        finally:
            _close(policy)
        finished = res if row["error"] is None else None  # a failed policy's partial rollout scores nothing
        row["true_level"] = int(finished.info["rubric_level"]) if finished is not None else None
        row["true_success"] = bool(finished.info["success"]) if finished is not None else None
        row["sim_judged"], row["sim_judge_error"] = _judge(judge, finished.episode if finished else None)
        row["sim_binary"], row["sim_binary_error"] = _judge(binary, finished.episode if finished else None)
        plans.append(res.actions if (choice.privileged and row["error"] is None) else None)
        sim_episodes.append(res.episode if res is not None and int(i) < cfg.videos else None)
        rows.append(row)
    # 2. NeuralDROID, one batched world model for the unit
    controllers: list[Any] = []
    for row, plan in zip(rows, plans):
        controller = None
        if row["error"]:  # failed in SimDROID: the row holds still in the batch and is not scored
            controllers.append(None)
            continue
        try:
            if choice.privileged:
                if plan is None:
                    raise RuntimeError("no plan: the scripted policy failed in SimDROID")
                policy = ReplayPolicy(plan, on_end="error")  # one row per query: exactly the SimDROID stream
            else:
                policy = choice.build(seed=row["seed"])
            controller = ChunkedController(policy, cfg.replan_every)
            check_action_mode(sim, controller)  # SimDROID's action mode is NeuralDROID's
        except Exception as e:  # noqa: BLE001
            row["error"] = row["error"] or f"NeuralDROID: {type(e).__name__}: {e}"
            if controller is not None:
                _close(controller.policy)
            controller = None
        controllers.append(controller)
    sim.close()
    obs, info = wm.reset(seed=[r["seed"] for r in rows], options={"episode": specs})
    for c, text in zip(controllers, info["instruction"]):
        if c is not None:
            c.reset(str(text))
    reward, infos = np.zeros(n), {}
    for _ in range(cfg.steps):
        batch = []
        for k, c in enumerate(controllers):
            if c is not None:
                try:
                    batch.append(c.act({key: v[k] for key, v in obs.items()}))
                    continue
                except Exception as e:  # noqa: BLE001
                    rows[k]["error"] = rows[k]["error"] or f"NeuralDROID: {type(e).__name__}: {e}"
                    log.warning("%s episode %d failed in NeuralDROID: %s", choice.name, indices[k], rows[k]["error"])
                    _close(c.policy)
                    controllers[k] = None
            batch.append(_hold(obs, k))
        obs, reward, terminated, truncated, infos = wm.step(np.stack(batch))
    ended = np.asarray(terminated) | np.asarray(truncated)
    if not ended.all():
        raise RuntimeError(f"NeuralDROID episodes did not end after {cfg.steps} steps (ended: {ended.tolist()})")
    errors = infos.get("judgement_error")  # the env's account of each judge failure (None where it judged)
    for k, (row, c) in enumerate(zip(rows, controllers)):
        _close(c.policy if c is not None else None)
        episode = wm.unwrapped.episode(k)
        if row["error"]:  # the env judged the row's still arm; that score is not the policy's
            row["judged"] = row["judge_error"] = row["binary"] = row["binary_error"] = None
        else:
            score = float(reward[k])
            row["judged"] = None if math.isnan(score) else score
            row["judge_error"] = None if row["judged"] is not None else (
                str(errors[k]) if errors is not None and errors[k] else "the judge gave no score")
            row["binary"], row["binary_error"] = _judge(binary, episode)
        row["seconds"] = round((time.perf_counter() - t0) / n, 2)
        if video_dir is not None and int(indices[k]) < cfg.videos and sim_episodes[k] is not None:
            from neuralsim.episode import write_video
            from policies.evaluate import side_by_side_frames

            path = Path(video_dir) / f"{_slug(choice.name)}_{int(indices[k])}.mp4"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_video(str(path), side_by_side_frames(episode, sim_episodes[k]), fps=15)
            row["video"] = f"videos/{path.name}"
    wm.close()
    return rows


# ----------------------------------------------------------------------------- the run: units, resume, Ray
def plan_units(cfg: RoboArenaConfig, done: set[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    """The (policy, episode indices) work units still to run: each policy's missing episodes in chunks."""
    units = []
    size = cfg.chunk or cfg.episodes
    for name in cfg.policies:
        todo = [i for i in range(cfg.episodes) if (name, i) not in done]
        units += [(name, todo[k:k + size]) for k in range(0, len(todo), size)]
    return units


def read_rows(path: Path) -> list[dict]:
    """The rows of an ``episodes.jsonl`` (a torn last line from an interrupted write is dropped)."""
    if not path.is_file():
        return []
    rows = []
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if n != len(lines) - 1:
                raise ValueError(f"{path}: line {n + 1} is not JSON; the file is damaged") from None
            log.warning("%s: dropping a torn last line (an interrupted write)", path)
    return rows


def _append_rows(path: Path, rows: list[dict]) -> None:
    with path.open("a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _check_resume(cfg: RoboArenaConfig, out: Path, write: bool = True) -> None:
    """Refuse a rerun whose options differ from ``run.json``'s (the options that decide the rows); else, with
    ``write``, record them there, with this run's :data:`REPORT_KEYS`."""
    path = out / "run.json"
    mine = {k: getattr(cfg, k) for k in RESULT_KEYS}
    if path.is_file():
        before = json.loads(path.read_text())
        changed = {k: (before.get(k), v) for k, v in mine.items() if before.get(k) != v}
        if changed:
            said = ", ".join(f"--{k.replace('_', '-')} {a!r} then, {b!r} now" for k, (a, b) in changed.items())
            raise ArenaError(f"{out} holds episodes run with other options ({said}); rerun with the same options, "
                             "or give a new --out")
    if write:
        path.write_text(json.dumps({**mine, **{k: getattr(cfg, k) for k in REPORT_KEYS}}, indent=1) + "\n")


def recorded_config(out: str | Path) -> dict[str, Any]:
    """The options of the run recorded in ``out``: :data:`RESULT_KEYS` and :data:`REPORT_KEYS` from ``run.json``
    (a run recorded before ``run.json`` held the policies and episodes: those of ``roboarena.json``'s config when
    every one of its policies has rows, else the policies found in ``episodes.jsonl``, in order).

    Raises:
        ArenaError: ``out`` holds no run (no ``run.json``) or no finished episode.
    """
    out = Path(out)
    if not (out / "run.json").is_file():
        raise ArenaError(f"{out} holds no RoboArena run (no run.json); give --out the directory of a run, or drop "
                         "--report-only to run one")
    rows = read_rows(out / "episodes.jsonl")
    if not rows:
        raise ArenaError(f"{out} holds no finished episode yet (episodes.jsonl is missing or empty); rerun the run's "
                         "command without --report-only to run them")
    recorded = {k: v for k, v in json.loads((out / "run.json").read_text()).items() if k in RESULT_KEYS + REPORT_KEYS}
    if "policies" not in recorded or "episodes" not in recorded:
        seen = list(dict.fromkeys(r["policy"] for r in rows))
        summary = out / "roboarena.json"
        config = json.loads(summary.read_text()).get("config", {}) if summary.is_file() else {}
        if set(config.get("policies") or ()) <= set(seen) and config.get("episodes"):
            recorded.update(policies=list(config["policies"]), episodes=int(config["episodes"]))
        else:
            recorded.update(policies=seen, episodes=1 + max(int(r["episode"]) for r in rows))
        recorded.update({k: config[k] for k in ("bootstrap", "videos") if k in config and k not in recorded})
    return recorded


def _check_checkpoint(checkpoint: str | None) -> None:
    """Refuse a world-model checkpoint that is not there before any work (an ArenaError naming it)."""
    from neuralsim.envs.neural_droid_core import resolve_checkpoint

    try:
        path = resolve_checkpoint(checkpoint)
    except ValueError as e:  # CheckpointError
        raise ArenaError(str(e).splitlines()[0]) from e
    if not (path / "config.json").is_file():
        raise ArenaError(f"world model checkpoint {str(path)!r} has no config.json (a directory written by "
                         "WorldModel.save_pretrained holds config.json + model.safetensors); check --checkpoint")


def _ray_units(cfg: RoboArenaConfig, units, video_dir: str):
    """Run units on Ray workers; yields each unit's rows as it finishes."""
    try:
        import ray
    except ImportError as e:
        from policies.base import MissingDependencyError

        raise MissingDependencyError(f"--ray needs Ray ({e}); install it with: pip install 'neuralsim[ray]'") from e
    root = str(Path(__file__).resolve().parents[2])
    env_vars = {"PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
                "OMP_NUM_THREADS": str(cfg.threads)}
    env_vars.update({k: os.environ[k] for k in ("MUJOCO_GL", "PYOPENGL_PLATFORM") if k in os.environ})
    started = not ray.is_initialized()
    if started:
        if os.environ.get("RAY_ADDRESS"):
            ray.init(address=os.environ["RAY_ADDRESS"], runtime_env={"env_vars": env_vars})
        else:
            ray.init(address="local", num_cpus=cfg.ray_workers, include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": env_vars})  # "local": a new instance, never another run's
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_unit)
        pending = {remote.remote(cfg, name, idx, video_dir): (name, idx) for name, idx in units}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            pending.pop(ready[0])
            yield ray.get(ready[0])
    finally:
        if started:
            ray.shutdown()


def run(cfg: RoboArenaConfig) -> dict:
    """Run (or resume) the benchmark; returns the summary (also written to ``OUT/roboarena.json``)."""
    from tqdm import tqdm

    for name in cfg.policies:  # every name before any work
        resolve_policy(name)
    out = cfg.out_dir
    if cfg.report_only:
        recorded_config(out)  # refuses a directory that holds no run, and creates nothing
    else:
        _check_checkpoint(cfg.checkpoint)
        out.mkdir(parents=True, exist_ok=True)
    _check_resume(cfg, out, write=not cfg.report_only)
    jsonl = out / "episodes.jsonl"
    rows = read_rows(jsonl)
    if cfg.retry_failed:
        rows = [r for r in rows if not r.get("error")]
    if jsonl.is_file():  # rewritten whole: drops a torn last line before anything is appended to it
        jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = {(r["policy"], r["episode"]) for r in rows}
    units = [] if cfg.report_only else plan_units(cfg, done)
    todo = sum(len(idx) for _, idx in units)
    if done:
        log.info("resuming %s: %d episodes recorded, %d to run", out, len(done), todo)
    t0 = time.time()
    bar = tqdm(total=todo, desc="episodes", unit="ep", disable=not cfg.progress)
    video_dir = str(out / "videos")
    results = (_ray_units(cfg, units, video_dir) if cfg.ray and units
               else (run_unit(cfg, name, idx, video_dir) for name, idx in units))
    try:
        for unit_rows in results:
            _append_rows(jsonl, unit_rows)
            rows += unit_rows
            bar.update(len(unit_rows))
    finally:  # also on Ctrl-C: the bar ends and Ray shuts down before anyone reports what was saved
        bar.close()
        results.close()
    summary = summarise(cfg, rows)
    summary["seconds_this_run"] = round(time.time() - t0, 1)
    from .report import write_report

    summary["report"] = _repo_relative(write_report(summary, out))
    (out / "roboarena.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


# ----------------------------------------------------------------------------- statistics
def _mean(x: list[float]) -> float | None:
    return float(np.mean(x)) if x else None


def _policy_row(cfg: RoboArenaConfig, name: str, rows: list[dict], seed: int) -> dict:
    from ..common.stats import bootstrap_mean_ci

    ok = [r for r in rows if not r.get("error")]
    top = cfg.judge_top

    def stat(values: list[float], salt: int) -> tuple[float | None, list[float] | None]:
        return _mean(values), bootstrap_mean_ci(values, cfg.bootstrap, seed=seed + salt) if values else None

    truth_key = "true_level" if top == 5 else "true_success"
    judged = [r["judged"] for r in ok if r.get("judged") is not None]
    sim_judged = [r["sim_judged"] for r in ok if r.get("sim_judged") is not None]
    out: dict[str, Any] = {"policy": name, "episodes": len(rows), "failed": len(rows) - len(ok),
                           "unjudged": len(ok) - len(judged),
                           "errors": sorted({r["error"] for r in rows if r.get("error")})[:3],
                           "judge_errors": sorted({r[k] for r in ok for k in JUDGE_ERROR_KEYS if r.get(k)})[:3]}
    entries = {
        "judged_mean": [float(v) for v in judged],
        "judged_success": [float(v >= top) for v in judged],
        "binary_success": [float(r["binary"]) for r in ok if r.get("binary") is not None],
        "true_mean_level": [float(r["true_level"]) for r in ok if r.get("true_level") is not None],
        "true_success": [float(r["true_success"]) for r in ok if r.get("true_success") is not None],
        "sim_judged_mean": [float(v) for v in sim_judged],
        "sim_judged_success": [float(v >= top) for v in sim_judged],
        "sim_binary_success": [float(r["sim_binary"]) for r in ok if r.get("sim_binary") is not None],
        # bias, episode by episode: total = world model's share + judge's share
        "bias": [r["judged"] - float(r[truth_key]) for r in ok
                 if r.get("judged") is not None and r.get(truth_key) is not None],
        "bias_world_model": [r["judged"] - r["sim_judged"] for r in ok
                             if r.get("judged") is not None and r.get("sim_judged") is not None],
        "bias_judge": [r["sim_judged"] - float(r[truth_key]) for r in ok
                       if r.get("sim_judged") is not None and r.get(truth_key) is not None],
    }
    for salt, (key, values) in enumerate(entries.items()):
        out[key], out[key + "_ci95"] = stat(values, salt)
    out["videos"] = sorted(r["video"] for r in rows if r.get("video"))
    return out


#: The row fields that hold a judge's failure (the judge or the binary judge, in either world).
JUDGE_ERROR_KEYS = ("judge_error", "binary_error", "sim_judge_error", "sim_binary_error")
#: The comparisons between worlds: name -> (episode key of the prediction, its success threshold or None,
#: episode key of the reference, its scale top), and what each isolates.
COMPARISONS = {
    "world_model": ("judged", None, "truth", "the headline: the judge in the world model vs SimDROID's truth"),
    "world_model_success": ("judged", "top", "true_success", "judged success in the world model vs true success"),
    "binary": ("binary", None, "true_success", "the binary-success judge in the world model vs true success"),
    "judge_on_sim": ("sim_judged", None, "truth", "the judge's own error: the judge on SimDROID's frames vs truth"),
    "world_model_vs_judge_on_sim": ("judged", None, "sim_judged",
                                    "the world model's error under a fixed judge: the judge on NeuralDROID's frames "
                                    "vs the same judge on SimDROID's"),
    "binary_on_sim": ("sim_binary", None, "true_success", "the binary judge on SimDROID's frames vs true success"),
}


def _compare(cfg: RoboArenaConfig, by_policy: dict[str, list[dict]], a_key: str, threshold: str | None, b_key: str,
             seed: int) -> dict:
    from ..common.stats import bootstrap_grouped_ci, mmrv, pearson, spearman

    top = cfg.judge_top
    truth = "true_level" if top == 5 else "true_success"
    b_key = truth if b_key == "truth" else b_key

    def value(r: dict, key: str) -> float | None:
        v = r.get(key)
        if v is None:
            return None
        v = float(v)
        return float(v >= top) if (key == a_key and threshold) else v

    groups, names = [], []
    for name, rows in by_policy.items():
        pairs = [(value(r, a_key), value(r, b_key)) for r in rows if not r.get("error")]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if pairs:
            groups.append(pairs)
            names.append(name)
    a = [float(np.mean([p[0] for p in g])) for g in groups]
    b = [float(np.mean([p[1] for p in g])) for g in groups]
    b_top = top if b_key in ("true_level", "sim_judged") and top == 5 else 1.0
    return {
        "policies": len(groups), "pearson": pearson(a, b), "spearman": spearman(a, b),
        "pearson_ci95": bootstrap_grouped_ci(groups, pearson, cfg.bootstrap, seed=seed) if groups else None,
        "spearman_ci95": bootstrap_grouped_ci(groups, spearman, cfg.bootstrap, seed=seed + 1) if groups else None,
        "mmrv": mmrv(a, [v / b_top for v in b]), "predicted": dict(zip(names, a)), "reference": dict(zip(names, b)),
    }


def summarise(cfg: RoboArenaConfig, rows: list[dict]) -> dict:
    """The benchmark's summary from its episode rows (those of ``cfg``'s policies and episodes only)."""
    from ..common.stats import ranks

    wanted = set(cfg.policies)
    by_policy: dict[str, list[dict]] = {name: [] for name in cfg.policies}
    for r in rows:
        if r["policy"] in wanted and r["episode"] < cfg.episodes:
            by_policy[r["policy"]].append(r)
    for name in by_policy:
        by_policy[name].sort(key=lambda r: r["episode"])
    table = [_policy_row(cfg, name, by_policy[name], cfg.seed0 + 101 * k) for k, name in enumerate(cfg.policies)]
    comparisons = {}
    for k, (key, (a_key, threshold, b_key, what)) in enumerate(COMPARISONS.items()):
        if key.startswith("binary") and not cfg.binary_judge:
            continue
        comparisons[key] = {"what": what, **_compare(cfg, by_policy, a_key, threshold, b_key, cfg.seed0 + 7 * k)}
    ranked = [t for t in table if t["judged_mean"] is not None and t["true_mean_level"] is not None]
    for t, rj, rt in zip(ranked, ranks([-t["judged_mean"] for t in ranked]),
                         ranks([-t["true_mean_level"] for t in ranked])):
        t["rank_judged"], t["rank_true"] = rj, rt
    head = comparisons["world_model"]
    n_rows = sum(len(v) for v in by_policy.values())
    truth_env = _truth_env(cfg.checkpoint)
    return {
        "benchmark": "roboarena", "policies": list(cfg.policies), "episodes_per_policy": cfg.episodes,
        "pearson": head["pearson"], "spearman": head["spearman"], "pearson_ci95": head["pearson_ci95"],
        "spearman_ci95": head["spearman_ci95"], "mmrv": comparisons["world_model_success"]["mmrv"],
        "judge": cfg.judge, "binary_judge": cfg.binary_judge, "world_model": _world_model_name(cfg.checkpoint),
        "truth": f"{truth_env} rubric level (0-5) and success, closed loop from the same initial states",
        "truth_env": truth_env,
        "rows": table, "comparisons": comparisons,
        "decomposition": _decomposition(comparisons, table),
        "incomplete": {t["policy"]: t["episodes"] for t in table if t["episodes"] < cfg.episodes},
        "episodes": n_rows, "failed_episodes": sum(t["failed"] for t in table),
        "unjudged_episodes": sum(t["unjudged"] for t in table),
        "config": {k: v for k, v in asdict(cfg).items() if k not in ("progress", "report_only")},
        "report": None,
    }


def _decomposition(comparisons: dict, table: list[dict]) -> dict:
    """Which side the ranking error comes from: the judge alone (on SimDROID's frames) or the world model."""
    def gap(name: str) -> float | None:
        s = comparisons.get(name, {}).get("spearman")
        return None if s is None else 1.0 - s

    bias = [t for t in table if t["bias_world_model"] is not None and t["bias_judge"] is not None]
    wm_abs = _mean([abs(t["bias_world_model"]) for t in bias])
    judge_abs = _mean([abs(t["bias_judge"]) for t in bias])
    judge_gap, wm_gap = gap("judge_on_sim"), gap("world_model_vs_judge_on_sim")
    blame, why = None, None
    if judge_gap is not None and wm_gap is not None:
        blame = ("world model" if wm_gap > judge_gap else "judge" if judge_gap > wm_gap
                 else "judge and world model alike")
    else:
        why = _no_verdict(comparisons, table)
    return {"spearman_judge_on_sim": comparisons.get("judge_on_sim", {}).get("spearman"),
            "spearman_world_model_vs_judge_on_sim": comparisons.get("world_model_vs_judge_on_sim", {}).get("spearman"),
            "mean_abs_bias_world_model": wm_abs, "mean_abs_bias_judge": judge_abs, "blames": blame,
            "no_verdict": why}


def _no_verdict(comparisons: dict, table: list[dict]) -> str:
    """Why the decomposition names no side: which of its two Spearmans is undefined, and the judge's errors."""
    parts = []
    for key in ("judge_on_sim", "world_model_vs_judge_on_sim"):
        c = comparisons.get(key, {})
        if c.get("spearman") is None:
            n = c.get("policies", 0)
            parts.append(f"{key} compares {n} {'policy' if n == 1 else 'policies'} scored in both worlds (needs 2)"
                         if n < 2 else f"{key} has no ranking (one side scores every policy alike)")
    errors = [f"{t['policy']}: {e}" for t in table for e in t.get("judge_errors", [])]
    unjudged, failed = sum(t["unjudged"] for t in table), sum(t["failed"] for t in table)
    if failed:
        parts.append(f"{failed} failed episodes")
    if unjudged:
        parts.append(f"{unjudged} unjudged episodes" + (f", e.g. {errors[0]}" if errors else ""))
    return "; ".join(parts)


def _repo_relative(path: Path) -> str:
    """``path`` relative to the repository when inside it (so a committed summary names a repository file)."""
    try:
        return str(Path(path).resolve().relative_to(Path(__file__).resolve().parents[2]))
    except ValueError:
        return str(path)


def _truth_env(checkpoint: str | None) -> str:
    """The ground truth's env id: the SimDROID env of the world model's scene (``SimDROID-v0`` classic,
    ``SimDROID-v1`` legible)."""
    from neuralsim.envs.neural_droid_core import checkpoint_scene
    from neuralsim.envs.scene import get_scene

    try:
        return get_scene(checkpoint_scene(checkpoint)).env_id
    except Exception:  # noqa: BLE001 -- the label is informative only (the checkpoint may be gone)
        return "SimDROID"


def _world_model_name(checkpoint: str | None) -> str:
    from neuralsim.envs.neural_droid_core import resolve_checkpoint

    try:
        return _repo_relative(resolve_checkpoint(checkpoint))
    except Exception:  # noqa: BLE001 -- the name is informative only
        return str(checkpoint)


# ----------------------------------------------------------------------------- command line
def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def _ci(ci: list[float] | None, spec: str = ".2f") -> str:
    return "" if not ci else f" [{ci[0]:{spec}}, {ci[1]:{spec}}]"


def print_report(summary: dict) -> None:
    """The leaderboard and the headline figures, as a table on stdout."""
    print(f"\nRoboArena on ground truth: {len(summary['policies'])} policies x {summary['episodes_per_policy']} "
          f"episodes; judge {summary['judge']}, world model {summary['world_model']}")
    print(f"{'policy':24s} {'judged':>7s} {'judged ok':>9s} {'binary ok':>9s} {'true lvl':>8s} {'true ok':>7s} "
          f"{'bias':>6s} {'judge@sim':>9s} {'failed':>6s}")
    for t in sorted(summary["rows"], key=lambda t: -(t["judged_mean"] if t["judged_mean"] is not None else -1)):
        print(f"{t['policy'][:24]:24s} {_fmt(t['judged_mean']):>7s} {_fmt(t['judged_success'], '.0%'):>9s} "
              f"{_fmt(t['binary_success'], '.0%'):>9s} {_fmt(t['true_mean_level']):>8s} "
              f"{_fmt(t['true_success'], '.0%'):>7s} {_fmt(t['bias'], '+.2f'):>6s} {_fmt(t['sim_judged_mean']):>9s} "
              f"{t['failed']:>6d}")
    for key, c in summary["comparisons"].items():
        print(f"{key:28s} Pearson {_fmt(c['pearson'], '.3f')}{_ci(c['pearson_ci95'], '.2f')}  Spearman "
              f"{_fmt(c['spearman'], '.3f')}{_ci(c['spearman_ci95'], '.2f')}  MMRV {_fmt(c['mmrv'], '.3f')}")
    d = summary["decomposition"]
    print(f"decomposition: judge on SimDROID frames Spearman {_fmt(d['spearman_judge_on_sim'], '.3f')}, world model "
          f"vs the judge on SimDROID Spearman {_fmt(d['spearman_world_model_vs_judge_on_sim'], '.3f')}; mean |bias| "
          f"world model {_fmt(d['mean_abs_bias_world_model'])}, judge {_fmt(d['mean_abs_bias_judge'])}; "
          + (f"blames the {d['blames']}" if d["blames"] else f"no verdict: {d.get('no_verdict')}"))
    print(f"{summary['failed_episodes']} failed, {summary['unjudged_episodes']} unjudged episodes; report "
          f"{summary['report']}")
    for t in summary["rows"]:
        for e in t.get("judge_errors", []):
            print(f"judge error ({t['policy']}): {e}")
        for e in t.get("errors", []):
            print(f"failed ({t['policy']}): {e}")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of :class:`RoboArenaConfig` on ``p`` (its field docstrings are the help texts)."""
    import ast
    import inspect

    docs: dict[str, str] = {}  # field name -> the docstring under it in the dataclass body
    body = ast.parse(inspect.getsource(RoboArenaConfig)).body[0].body
    for a, b in zip(body, body[1:]):
        if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
            docs[a.target.id] = " ".join(str(b.value.value).split()).replace("%", "%%")
    default = RoboArenaConfig()
    for f in fields(RoboArenaConfig):
        flag, value, text = "--" + f.name.replace("_", "-"), getattr(default, f.name), docs.get(f.name, "")
        if f.name == "policies":
            p.add_argument("--policy", dest="policies", action="append", default=None,
                           help=text + " Repeatable; default: the graded set.")
        elif f.name == "progress":
            p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
        elif isinstance(value, bool):
            p.add_argument(flag, dest=f.name, action="store_true", help=text)
        elif f.name == "chunk" or isinstance(value, int):
            p.add_argument(flag, type=int, default=None, help=text + ("" if value is None else f" (default {value})"))
        else:
            p.add_argument(flag, default=None, help=text + f" (default {value})")


def config_from_namespace(ns: dict[str, Any]) -> RoboArenaConfig:
    """A :class:`RoboArenaConfig` from parsed options (unset ones keep their defaults; ``--quick`` its own; with
    ``--report-only`` unset ones are the recorded run's, :func:`recorded_config`)."""
    names = {f.name for f in fields(RoboArenaConfig)}
    kw = {k: v for k, v in ns.items() if k in names and v is not None}
    if kw.get("report_only"):
        for k, v in recorded_config(default_out(kw.get("out"), bool(kw.get("quick")))).items():
            kw.setdefault(k, v)
    if kw.get("quick"):
        kw.setdefault("policies", list(QUICK_POLICIES))
        kw.setdefault("episodes", QUICK_EPISODES)
    if kw.get("binary_judge") == "none":
        kw["binary_judge"] = None
    return RoboArenaConfig(**kw)


def _parser(prog: str = "python -m benchmarks.roboarena", parser: Any = None) -> argparse.ArgumentParser:
    summary, usage = __doc__.split("\n\n")[0], "\n".join(__doc__.split("\n\n")[1].splitlines()[1:])
    kw = dict(description=summary, epilog="examples:\n" + usage, formatter_class=argparse.RawDescriptionHelpFormatter)
    p = argparse.ArgumentParser(prog=prog, **kw) if parser is None else parser.add_parser(
        "roboarena", help="rank policies in the world model against SimDROID's truth (benchmarks.roboarena)", **kw)
    add_arguments(p)
    return p


def config_from_args(argv: list[str] | None = None) -> RoboArenaConfig:
    """Parse ``python -m benchmarks.roboarena`` options into a :class:`RoboArenaConfig`."""
    return config_from_namespace(vars(_parser().parse_args(argv)))


def execute(cfg: RoboArenaConfig) -> dict:
    """Run, print the report and write the summary JSON(s); returns the summary."""
    summary = run(cfg)
    print_report(summary)
    if cfg.out is None:  # the repository's copy of the summary
        path = results_path("roboarena", quick=cfg.quick)
        path.write_text(json.dumps(summary, indent=1) + "\n")
        print(f"JSON: {path}")
    print(f"JSON: {cfg.out_dir / 'roboarena.json'}")
    return summary


def register_command(subparsers: Any) -> None:
    """Add ``neuralsim roboarena`` (the ``neuralsim.commands`` entry point; same options as this module)."""
    _parser(parser=subparsers).set_defaults(func=_run_command)


def _run_command(args: argparse.Namespace) -> int:
    return cli(vars(args))


def cli(ns: dict[str, Any]) -> int:
    """Run from parsed options; returns the exit code.  A user's mistake (a bad option, an unknown policy, a rerun
    with other options, a directory with no run) is one line on stderr and exit 2; Ctrl-C says what was saved
    and exits 130."""
    from policies.base import MissingDependencyError, UnknownPolicyError

    cfg = None
    try:
        cfg = config_from_namespace(ns)
        execute(cfg)
    except (ArenaError, UnknownPolicyError, MissingDependencyError) as e:
        print(f"roboarena: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nroboarena: interrupted; {_saved(cfg)}", file=sys.stderr)
        return 130
    return 0


def _saved(cfg: RoboArenaConfig | None) -> str:
    """What an interrupted run leaves, and how to go on."""
    if cfg is None or cfg.report_only:
        return "nothing was run"
    jsonl = cfg.out_dir / "episodes.jsonl"
    try:
        n = len({(r["policy"], r["episode"]) for r in read_rows(jsonl)
                 if r["policy"] in cfg.policies and r["episode"] < cfg.episodes})
    except ValueError:
        n = 0
    total = len(cfg.policies) * cfg.episodes
    if not n:
        return f"no episode had finished, none saved in {jsonl}"
    return (f"{n} of {total} episodes are saved in {jsonl}; rerun the same command to run the other {total - n}"
            if n < total else f"all {total} episodes are saved in {jsonl}; rerun the same command for the report")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    return cli(vars(_parser().parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
