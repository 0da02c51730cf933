"""Generate a SimDROID dataset with the scripted expert, failures included: ``neuralsim data generate``.

Usage::

    neuralsim data generate data/simdroid --episodes 600 --workers 2

Episode ``i`` is fully determined by ``seed + i`` (its "episode seed"): the task family is
``families[i % len(families)]``; a generator seeded with the episode seed draws, in this order,
whether the episode gets a failure mode (probability ``failure_share``), which one (uniform over
``failure_modes``, by default :data:`~neuralsim.envs.experts.FAILURE_MODES`) and the expert's noise
(uniform in ``noise``); the env and the expert are seeded with the episode seed too.  The expert runs until it
says it is done, then ``settle_steps`` more steps (so the outcome is visible), or until ``max_steps``.  The labels
(``success``, ``rubric_level``) are the simulator's ground truth at the last step -- a
failure-labelled episode can still succeed, and a clean one can fail; both are kept.

``actor="idle"`` or ``"random"`` (``--actor``) replaces the expert by a no-skill baseline that runs every
episode to ``max_steps`` (:class:`IdleActor`, :class:`RandomActor`): what a policy that does nothing, or
flails, looks like, which no expert episode shows.  The judge and the world model are trained on such episodes
and the fidelity benchmark has idle and random splits (docs/FIDELITY.md, "Splits")::

    neuralsim data generate --episodes 60 --out data/simdroid_idle --actor idle --seed 5000000
    neuralsim data generate --episodes 120 --out data/simdroid_random --actor random --seed 5100000

``ood=True`` (``--ood`` on the command line) generates the out-of-distribution split: every episode
runs in ``SimDROIDEnv(distribution="ood")`` (cube colours outside the training palette, target cube
outside the training region); the dataset's ``generation`` parameters and every record say
``"distribution": "ood"``.  The fidelity benchmark's splits (``docs/FIDELITY.md``)::

    neuralsim data generate --episodes 60 --out data/simdroid_heldout --seed 1000000
    neuralsim data generate --episodes 30 --out data/simdroid_ood --seed 2000000 --ood

``perturbation=FAMILY`` (``--perturbation``, or ``all`` for a family drawn per episode among those that
apply to its task) writes what the optimism-bias benchmark calls the truth of a perturbed rollout: the
clean expert runs closed loop to ``max_steps``, then its recorded actions are replayed open loop through
that failure-perturbation wrapper (:mod:`neuralsim.wrappers`) at ``severity``, and the replay is the
episode (its actions are the ones the wrapper sent, its labels the simulator's).  Such episodes must fail
the way the benchmark's do, so a judge (or a world model) can be trained on those failures::

    neuralsim data generate --episodes 240 --out data/simdroid_perturbed --perturbation all --seed 6000000

Re-running the same command resumes: episodes already in ``meta/episodes.jsonl`` are skipped, and
asking for more episodes extends the dataset.  A directory generated with other parameters is
refused (:class:`GenerationMismatchError`).  ``workers > 1`` runs one SimDROID env per process
(``spawn`` context); workers write the episode files, the parent appends the ``episodes.jsonl`` line.

Measured on the shared 2-core CPU (20 episodes, 150-step cap, 64x64, the three families, mean 105
steps per episode; other jobs were using the cores): 24.8 episodes/min with 1 worker (the job got
59% of a core), 30.5 episodes/min with 2 workers (84% of a core in total), ~1.7 CPU-s per episode
including video encoding.  1 and 2 workers write identical episodes.
"""

from __future__ import annotations

import fcntl
import logging
import math
import multiprocessing as mp
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import kinematics as K
from . import writer as W

log = logging.getLogger(__name__)

#: Steps the generator keeps stepping after ``expert.done`` so the outcome settles on camera.
SETTLE_STEPS = 5
#: Parameters that define a dataset's episodes; a resume must match all of them.
GENERATION_KEYS = ("seed", "failure_share", "noise", "families", "max_steps", "image_size", "settle_steps", "expert",
                   "distribution", "actor", "perturbation", "severity", "scene", "failure_modes", "recovery_share")
#: Values of generation parameters that datasets written before the parameter existed implicitly used
#: (such parameters are also left out of ``meta/info.json`` when they have this value).
GENERATION_DEFAULTS = {"distribution": "train", "actor": "expert", "perturbation": None, "severity": None,
                       "scene": "classic", "failure_modes": None, "recovery_share": 0.0}
#: Range of the hand's yaw offset [deg] on the approach of a recovery demonstration (either sign).
RECOVERY_YAW_DEG = (15.0, 40.0)
EXPERT_NAME = "neuralsim.envs.experts.ScriptedExpert"
#: Who acts in the episodes: the scripted expert, or a no-skill baseline (see :class:`IdleActor`,
#: :class:`RandomActor`) that labels what doing nothing, or flailing, looks like.
ACTORS = ("expert", "idle", "random")


class GenerationMismatchError(ValueError):
    """The output directory holds a dataset generated with different parameters."""


@dataclass
class EpisodePlan:
    """What episode ``index`` will be: its seed, task family, failure mode, expert noise and approach yaw."""

    index: int
    seed: int
    family: str
    failure: str | None
    noise: float
    approach_yaw: float = 0.0
    """The expert's yaw offset [rad] on the way to a pick (``ScriptedExpert(approach_yaw=)``): a recovery
    demonstration when not 0."""


def plan_episode(index: int, seed: int, families: Sequence[str], failure_share: float,
                 noise: tuple[float, float], failure_modes: Sequence[str] | None = None,
                 recovery_share: float = 0.0) -> EpisodePlan:
    """The deterministic plan of episode ``index`` (see the module docstring); a failing episode's mode is drawn
    from ``failure_modes`` (default: all of FAILURE_MODES, listed again to weight one up).  A clean pick episode
    is a recovery demonstration with probability ``recovery_share``: the hand approaches with a yaw offset drawn
    from :data:`RECOVERY_YAW_DEG`, either sign (the draws come after the others, so plans without it are unchanged)."""
    from ..envs.experts import FAILURE_MODES

    modes = FAILURE_MODES if failure_modes is None else tuple(failure_modes)
    ep_seed = seed + index
    rng = np.random.default_rng(ep_seed)
    failing = rng.random() < failure_share
    mode = modes[int(rng.integers(len(modes)))]
    lo, hi = noise
    plan = EpisodePlan(index=index, seed=ep_seed, family=families[index % len(families)],
                       failure=mode if failing else None, noise=float(rng.uniform(lo, hi)) if hi > lo else float(lo))
    if recovery_share > 0 and not failing and plan.family != "push_to_pad" and rng.random() < recovery_share:
        plan.approach_yaw = float(np.radians(rng.uniform(*RECOVERY_YAW_DEG)) * rng.choice((-1.0, 1.0)))
    return plan


@dataclass
class Rollout:
    """One expert episode: the recording, the last ``info``, per-frame ground truth and step counts."""

    episode: Any  # neuralsim.episode.Episode
    info: dict
    initial_info: dict
    ground_truth: dict[str, np.ndarray]
    steps: int
    expert_done: bool


#: Per-frame ground-truth columns written beside an episode's frames, and their dtypes: the rubric, then the
#: movable objects' state (``object_pose``: K cubes in scene order, xyz [m] + wxyz quaternion each, flattened to
#: K*7; ``held_object`` / ``touched_object``: the index of the cube held between both fingers / touching the robot,
#: -1 for none).  The cubes' names, in that order, are the episode record's ``objects``.
GROUND_TRUTH_DTYPES = {"rubric_level": np.int8, "success": bool, "target_distance": np.float32,
                       "object_pose": np.float32, "held_object": np.int8, "touched_object": np.int8}


def object_names(info: dict) -> list[str]:
    """The movable objects (the cubes) of a SimDROID ``info``, in scene order: the order of ``object_pose``."""
    return [n for n in info["object_poses"] if n.endswith("_cube")]


def ground_truth_features(scene: str) -> dict[str, dict]:
    """``meta/info.json`` features of the ``ground_truth.*`` columns of a dataset of SimDROID's ``scene``."""
    from ..envs.scene import get_scene

    k = get_scene(scene).num_cubes
    pose = [f"cube{i}.{c}" for i in range(k) for c in ("x", "y", "z", "qw", "qx", "qy", "qz")]
    return {
        "ground_truth.rubric_level": {"dtype": "int8", "shape": [1], "names": None},
        "ground_truth.success": {"dtype": "bool", "shape": [1], "names": None},
        "ground_truth.target_distance": {"dtype": "float32", "shape": [1], "names": None},
        "ground_truth.object_pose": {"dtype": "float32", "shape": [7 * k], "names": pose},
        "ground_truth.held_object": {"dtype": "int8", "shape": [1], "names": None},
        "ground_truth.touched_object": {"dtype": "int8", "shape": [1], "names": None},
    }


def _ground_truth_row(info: dict) -> dict:
    names = object_names(info)
    index = {n: i for i, n in enumerate(names)}
    row = {k: info[k] for k in ("rubric_level", "success", "target_distance")}
    row["object_pose"] = np.concatenate([np.asarray(info["object_poses"][n], np.float32) for n in names])
    row["held_object"] = index.get(info["grasped_object"], -1)
    row["touched_object"] = index.get(info.get("touched_object"), -1)
    return row


def _ground_truth_start(info: dict) -> dict[str, list]:
    """The ground-truth columns opened with the reset's ``info`` (frame 0)."""
    return {k: [v] for k, v in _ground_truth_row(info).items()}


def _ground_truth_add(gt: dict[str, list], info: dict) -> None:
    for k, v in _ground_truth_row(info).items():
        gt[k].append(v)


def _ground_truth_arrays(gt: dict[str, list]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, GROUND_TRUTH_DTYPES[k]) for k, v in gt.items()}


def run_expert(env, expert, seed: int, task: str | None, max_steps: int = 150,
               settle_steps: int = SETTLE_STEPS) -> Rollout:
    """Reset ``env`` (a SimDROIDEnv) to ``(seed, task)`` and roll ``expert`` out; see :class:`Rollout`."""
    obs, info = env.reset(seed=seed, options={"task": task} if task else None)
    expert.reset()
    initial = info
    gt = _ground_truth_start(info)
    steps, settle = 0, 0
    while steps < max_steps and settle <= settle_steps:
        obs, _, terminated, truncated, info = env.step(expert.act(obs))
        steps += 1
        _ground_truth_add(gt, info)
        if expert.done:
            settle += 1
        if terminated or truncated:
            break
    return Rollout(env.episode(), info, initial, _ground_truth_arrays(gt), steps, bool(expert.done))


def replay_actions(env, seed: int, task: str | None, actions: np.ndarray) -> tuple[Rollout, bool]:
    """Reset ``env`` (SimDROID, possibly wrapped) to ``(seed, task)`` and send ``actions`` open loop.

    Returns the :class:`Rollout` of the replay (``expert_done`` False: no expert acted) and whether a
    perturbation wrapper changed any action (``info["perturbation"][i]["changed"]``).
    """
    obs, info = env.reset(seed=seed, options={"task": task} if task else None)
    initial = info
    gt = _ground_truth_start(info)
    fired, steps = False, 0
    for a in actions:
        obs, _, terminated, truncated, info = env.step(a)
        steps += 1
        fired = fired or any(p.get("changed", False) for p in info.get("perturbation", []))
        _ground_truth_add(gt, info)
        if terminated or truncated:
            break
    return Rollout(env.unwrapped.episode(), info, initial, _ground_truth_arrays(gt), steps, False), fired


def perturbation_for(plan: EpisodePlan, perturbation: str) -> str:
    """The perturbation family of a perturbed episode: ``perturbation`` itself, or for ``"all"`` one drawn
    with the episode seed among the families whose wrapper applies to the episode's task."""
    from ..wrappers import PERTURBATIONS

    if perturbation != "all":
        return perturbation
    fams = sorted(f for f, cls in PERTURBATIONS.items() if plan.family in cls.task_families)
    return fams[int(np.random.default_rng([plan.seed, 1]).integers(len(fams)))]


class IdleActor:
    """Holds the arm still at its reset pose, gripper open, for the whole episode (a policy that does nothing).

    No SimDROID expert ever stands still at the start, so without such episodes neither the world model
    nor the offline judge has seen what "nothing happened" looks like (a static episode was judged level 4).
    """

    done = False

    def __init__(self, seed: int | None = None):
        pass

    def reset(self) -> None:
        pass

    def act(self, obs: dict) -> np.ndarray:
        return np.zeros(8, np.float32)


class RandomActor:
    """Wanders the arm with smoothed random joint velocities and switches the gripper now and then.

    Velocities follow an AR(1) process, ``w <- 0.9 w + sqrt(1 - 0.81) u`` with ``u`` uniform in
    [-scale, scale]^7 and ``scale`` drawn once per episode in [0.2, 0.7], so the arm drifts somewhere
    (i.i.d. noise mostly cancels); a spring ``SPRING * (q_reset - q)`` added to ``w`` keeps it over the
    table and in the cameras' view.  The gripper flips between open and closed with probability 0.05 per
    step.  Seeded by the episode seed: the same episode, the same actions.
    """

    done = False
    #: Pull towards the reset pose [velocity command per rad of joint error].
    SPRING = 1.5

    def __init__(self, seed: int | None = None):
        self.seed = seed
        self.reset()

    def reset(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.scale = float(self.rng.uniform(0.2, 0.7))
        self.velocity = np.zeros(7)
        self.gripper = 0.0

    def act(self, obs: dict) -> np.ndarray:
        u = self.rng.uniform(-self.scale, self.scale, 7)
        self.velocity = 0.9 * self.velocity + math.sqrt(1.0 - 0.9 ** 2) * u  # keeps u's spread
        if self.rng.random() < 0.05:
            self.gripper = 1.0 - self.gripper
        q = np.asarray(obs["joint_position"], np.float64).reshape(7)
        arm = self.velocity + self.SPRING * (np.asarray(K.RESET_JOINT_POSITION) - q)
        return np.concatenate([np.clip(arm, -1.0, 1.0), [self.gripper]]).astype(np.float32)


def _pose_summary(info: dict) -> dict[str, list[float]]:
    return {k: np.round(np.asarray(v, float), 4).tolist() for k, v in info["object_poses"].items()}


def _episode_job(root: str, plan: EpisodePlan, params: dict) -> dict:
    """Run and write one episode; returns its ``episodes.jsonl`` record (runs in a worker)."""
    from ..envs.experts import ScriptedExpert

    distribution = params.get("distribution", "train")
    actor = params.get("actor", "expert")
    env = _worker_env(params["image_size"], distribution, params.get("scene", "classic"))
    if params.get("perturbation"):  # the clean expert acts; its actions then go through the wrapper
        plan = replace(plan, failure=None, approach_yaw=0.0)
    if actor == "expert":
        expert = ScriptedExpert(env, noise=plan.noise, failure=plan.failure, seed=plan.seed,
                                approach_yaw=plan.approach_yaw)
    else:  # a no-skill actor: no plan, no failure mode, no noise; it never says it is done
        expert = (IdleActor if actor == "idle" else RandomActor)(seed=plan.seed)
        plan = replace(plan, failure=None, noise=0.0, approach_yaw=0.0)
    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    if params.get("perturbation"):  # the clean expert to the horizon, then its actions through the wrapper
        from ..wrappers import apply_perturbation

        clean = run_expert(env, expert, plan.seed, plan.family, params["max_steps"], params["max_steps"])
        family = perturbation_for(plan, params["perturbation"])
        wrapped = apply_perturbation(env, family, severity=params["severity"], horizon=params["max_steps"])
        r, fired = replay_actions(wrapped, plan.seed, plan.family, np.asarray(clean.episode.actions, np.float32))
        extra.update(perturbation=family, severity=params["severity"], perturbation_fired=fired,
                     clean_success=bool(clean.info["success"]))
    else:
        r = run_expert(env, expert, plan.seed, plan.family, params["max_steps"], params["settle_steps"])
    ep = r.episode
    ep.metadata.update(seed=plan.seed, failure=plan.failure, noise=plan.noise)
    if plan.approach_yaw:
        extra["approach_yaw_deg"] = round(float(np.degrees(plan.approach_yaw)), 2)
    W.write_episode(root, ep, plan.index, extra_columns=r.ground_truth,
                    frames_format=params.get("frames_format", "mp4"))
    info = r.info
    if distribution != "train":
        extra["distribution"] = distribution
    if actor != "expert":
        extra["actor"] = actor
    return W.episode_record(
        ep, plan.index, task=plan.family, family=plan.family, seed=plan.seed, success=bool(info["success"]),
        rubric_level=int(info["rubric_level"]), failure=plan.failure, noise=round(plan.noise, 6),
        steps=r.steps, expert_done=r.expert_done, colors=ep.metadata.get("colors"),
        target=info["target"], base=info["base"], grasped_object=info["grasped_object"],
        objects=object_names(info),
        final_target_distance=round(float(info["target_distance"]), 4),
        initial_poses=_pose_summary(r.initial_info), final_poses=_pose_summary(info),
        seconds=round(time.perf_counter() - t0, 3), **extra)


_ENV = None


def _scene_env_id(scene: str) -> str:
    from ..envs.scene import get_scene

    return get_scene(scene).env_id


def _worker_env(image_size: int, distribution: str = "train", scene: str = "classic"):
    """The process's SimDROID env (one per worker, created on first use)."""
    global _ENV
    if _ENV is None or _ENV.image_size != image_size or _ENV.distribution != distribution \
            or _ENV.scene.name != scene:
        from ..envs.sim_droid import SimDROIDEnv

        if _ENV is not None:
            _ENV.close()
        _ENV = SimDROIDEnv(image_size=image_size, reward_fn=None, distribution=distribution, scene=scene)
    return _ENV


# ----------------------------------------------------------------------------- summary
@dataclass
class GenerationSummary:
    """What ``generate`` did and what the dataset now holds."""

    out: str
    total_episodes: int
    new_episodes: int
    seconds: float
    success_by_family: dict[str, tuple[int, int]] = field(default_factory=dict)  # family -> (successes, episodes)
    clean: tuple[int, int] = (0, 0)  # (successes, episodes) without a failure mode
    failure_labelled: int = 0
    failure_labelled_failed: int = 0
    failed_by_mode: dict[str, tuple[int, int]] = field(default_factory=dict)  # mode -> (failed, episodes)
    rubric_levels: dict[int, int] = field(default_factory=dict)

    @property
    def episodes_per_minute(self) -> float:
        return 60.0 * self.new_episodes / self.seconds if self.seconds > 0 else float("nan")

    def format(self) -> str:
        n = max(self.total_episodes, 1)
        lines = [f"{self.out}: {self.total_episodes} episodes ({self.new_episodes} new in {self.seconds:.1f} s, "
                 f"{self.episodes_per_minute:.1f} episodes/min)"]
        for fam, (s, k) in sorted(self.success_by_family.items()):
            lines.append(f"  success {fam:<12} {s:>5}/{k:<5} {100 * s / max(k, 1):5.1f}%")
        cs, ck = self.clean
        lines.append(f"  clean episodes        {cs:>5}/{ck:<5} succeeded ({100 * cs / max(ck, 1):.1f}%)")
        fl, ff = self.failure_labelled, self.failure_labelled_failed
        lines.append(f"  failure-labelled      {fl:>5}/{self.total_episodes:<5} ({100 * fl / n:.1f}%), of which "
                     f"{ff} actually failed ({100 * ff / max(fl, 1):.1f}%)")
        for mode, (f, k) in sorted(self.failed_by_mode.items()):
            lines.append(f"    {mode:<18} failed {f}/{k}")
        levels = ", ".join(f"{lv}: {c}" for lv, c in sorted(self.rubric_levels.items()))
        lines.append(f"  final rubric levels   {levels}")
        return "\n".join(lines)


def summarise(records: list[dict], out: str = "", new_episodes: int = 0, seconds: float = 0.0) -> GenerationSummary:
    """Success per family, failure share and how many failure-labelled episodes failed."""
    fam: dict[str, list[int]] = {}
    modes: dict[str, list[int]] = {}
    clean = [0, 0]
    for r in records:
        f = fam.setdefault(r.get("family") or r.get("task", "?"), [0, 0])
        f[0] += bool(r.get("success"))
        f[1] += 1
        mode = r.get("failure") or (f"perturbation:{r['perturbation']}" if r.get("perturbation") else None)
        if mode:
            m = modes.setdefault(mode, [0, 0])
            m[0] += not r.get("success")
            m[1] += 1
        else:
            clean[0] += bool(r.get("success"))
            clean[1] += 1
    levels = Counter(int(r["rubric_level"]) for r in records if r.get("rubric_level") is not None)
    return GenerationSummary(
        out=str(out), total_episodes=len(records), new_episodes=new_episodes, seconds=seconds,
        success_by_family={k: tuple(v) for k, v in fam.items()}, clean=tuple(clean),
        failure_labelled=sum(v[1] for v in modes.values()), failure_labelled_failed=sum(v[0] for v in modes.values()),
        failed_by_mode={k: tuple(v) for k, v in modes.items()}, rubric_levels=dict(levels))


# ----------------------------------------------------------------------------- main entry
def generate(out: str | Path, episodes: int, workers: int = 1, seed: int = 0, failure_share: float = 0.3,
             noise: float | tuple[float, float] = (0.0, 0.3), families: Sequence[str] | None = None,
             max_steps: int = 150, image_size: int = 64, progress: bool = True, ood: bool = False,
             settle_steps: int = SETTLE_STEPS, frames_format: str = "mp4", actor: str = "expert",
             perturbation: str | None = None, severity: float = 0.5, scene: str = "classic",
             failure_modes: Sequence[str] | None = None, recovery_share: float = 0.0) -> GenerationSummary:
    """Generate (or resume/extend) a dataset of ``episodes`` expert episodes in ``out``.

    Args:
        out: dataset root (created).
        episodes: total number of episodes the dataset should hold (indices ``0 .. episodes - 1``).
        workers: processes running a SimDROID env each (1: in this process).
        seed: base seed; episode ``i`` uses ``seed + i``.
        failure_share: probability that an episode's expert gets a failure mode.
        noise: expert arm-command noise std, a value or a ``(low, high)`` range drawn uniformly.
        families: task families cycled over (default: all of ``TASK_FAMILIES``).
        max_steps: step cap per episode (``SimDROID-v0`` uses 150).
        image_size: camera image side.
        progress: show a tqdm progress bar.
        ood: generate in ``SimDROIDEnv(distribution="ood")`` (the out-of-distribution split).
        settle_steps: steps run after the expert is done; ``max_steps`` or more runs every episode to
            the horizon (``--full-horizon``), as an env rollout does.
        frames_format: ``"mp4"`` or ``"npy"`` (raw frames, no ffmpeg needed; see
            :func:`neuralsim.data.writer.write_episode`).  Not part of the dataset's identity: the
            frames are the same renders either way (the mp4s within ~45 dB of them).
        actor: ``"expert"`` (the scripted expert, with ``failure_share`` and ``noise``), or a no-skill
            baseline that runs every episode to ``max_steps``: ``"idle"`` (:class:`IdleActor`, holds still)
            or ``"random"`` (:class:`RandomActor`, wanders); these ignore ``failure_share`` and ``noise``.
        perturbation: a failure-perturbation family (:data:`neuralsim.wrappers.PERTURBATIONS`) or ``"all"``:
            every episode is the clean expert's actions replayed through that wrapper (module docstring),
            run to ``max_steps``; ``failure_share`` is ignored.  None: plain episodes.
        severity: the perturbation's severity in [0, 1] (the optimism-bias benchmark uses 0.5).
        scene: the SimDROID scene (:data:`neuralsim.envs.scene.SCENES`): ``"classic"`` (``SimDROID-v0``) or
            ``"legible"`` (``SimDROID-v1``).
        failure_modes: the failure modes a failing episode draws from, uniformly (default: all of
            :data:`~neuralsim.envs.experts.FAILURE_MODES`); a mode listed twice is drawn twice as often.
        recovery_share: share of the clean pick episodes (put in bowl, stack) that are recovery demonstrations:
            the expert approaches with the hand's yaw off by 15-40 degrees and turns it back above the cube before
            the descent (``ScriptedExpert(approach_yaw=)``), so a cloned policy sees how to fix a misread yaw.

    Returns:
        A :class:`GenerationSummary` over the whole dataset (``.format()`` for a printable report).
    """
    from ..envs.sim_droid import TASK_FAMILIES

    families = list(TASK_FAMILIES if families is None else families)
    bad = [f for f in families if f not in TASK_FAMILIES]
    if bad or not families:
        raise ValueError(f"families must be a non-empty subset of {TASK_FAMILIES}, got {families}")
    lo, hi = (float(noise), float(noise)) if np.isscalar(noise) else (float(noise[0]), float(noise[1]))
    if not 0.0 <= lo <= hi <= 1.0:
        raise ValueError(f"noise must be a value or (low, high) range with 0 <= low <= high <= 1, got {noise!r}")
    if not 0.0 <= failure_share <= 1.0:
        raise ValueError(f"failure_share must be in [0, 1], got {failure_share}")
    if not 0.0 <= recovery_share <= 1.0:
        raise ValueError(f"recovery_share must be in [0, 1], got {recovery_share}")
    if failure_modes is not None:
        from ..envs.experts import FAILURE_MODES

        failure_modes = list(failure_modes)
        bad = [m for m in failure_modes if m not in FAILURE_MODES]
        if bad or not failure_modes:
            raise ValueError(f"failure_modes must be a non-empty list of {FAILURE_MODES}, got {failure_modes}")
    if episodes < 0 or workers < 1 or max_steps < 1 or settle_steps < 0:
        raise ValueError(f"need episodes >= 0, workers >= 1, max_steps >= 1, settle_steps >= 0; got {episodes}, "
                         f"{workers}, {max_steps}, {settle_steps}")
    params = {"seed": int(seed), "failure_share": float(failure_share), "noise": [lo, hi], "families": families,
              "max_steps": int(max_steps), "image_size": int(image_size),
              "settle_steps": int(min(settle_steps, max_steps)),
              "expert": EXPERT_NAME}
    if ood:
        params["distribution"] = "ood"
    if failure_modes is not None:
        params["failure_modes"] = failure_modes
    if recovery_share:
        params["recovery_share"] = float(recovery_share)
    from ..envs.scene import SCENES

    if scene not in SCENES:
        raise ValueError(f"unknown scene {scene!r}; expected one of {sorted(SCENES)}")
    if scene != "classic":
        params["scene"] = scene
    if actor not in ACTORS:
        raise ValueError(f"actor must be one of {ACTORS}, got {actor!r}")
    if actor != "expert":
        params["actor"] = actor
    if perturbation is not None:
        from ..wrappers import PERTURBATIONS

        if perturbation != "all" and perturbation not in PERTURBATIONS:
            raise ValueError(f"unknown perturbation {perturbation!r}; choose 'all' or one of {sorted(PERTURBATIONS)}")
        if actor != "expert":
            raise ValueError(f"a perturbation replays the expert's actions; it needs actor 'expert', got {actor!r}")
        if not 0.0 <= severity <= 1.0:
            raise ValueError(f"severity must be in [0, 1], got {severity}")
        if perturbation != "all":
            unfit = [f for f in families if f not in PERTURBATIONS[perturbation].task_families]
            if unfit:
                families = list(PERTURBATIONS[perturbation].task_families)
                raise ValueError(f"perturbation {perturbation!r} applies to {families} "
                                 f"only, not {unfit}; restrict the task families (--families)")
        params.update(perturbation=perturbation, severity=float(severity), failure_share=0.0,
                      settle_steps=int(max_steps))
    if frames_format not in W.FRAMES_FORMATS:
        raise ValueError(f"frames_format must be one of {W.FRAMES_FORMATS}, got {frames_format!r}")
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root):
        records = _prepare(root, params)
        done = {int(r["episode_index"]) for r in records}
        todo = [plan_episode(i, seed, families, failure_share, (lo, hi), failure_modes, recovery_share)
                for i in range(episodes) if i not in done]
        if done:
            log.info("%s: %d episodes already done, %d to generate", root, len(done & set(range(episodes))), len(todo))
        t0 = time.perf_counter()
        records += _run_jobs(root, todo, {**params, "frames_format": frames_format}, workers, progress)
        seconds = time.perf_counter() - t0
        W.write_records(root, records)
        W.update_totals(root, records)
    summary = summarise(records, str(root), len(todo), seconds)
    log.info("%s: %d new episodes in %.1f s (%.1f episodes/min); %d in total", root, len(todo), seconds,
             summary.episodes_per_minute, len(records))
    return summary


def _prepare(root: Path, params: dict) -> list[dict]:
    """Check ``root`` against ``params``; write ``meta/info.json`` if new; return the finished records."""
    from .reader import list_episodes

    info = W.read_info(root)
    if info is None:
        stray = [p.name for p in root.iterdir() if p.name not in ("meta", "data", "videos")]
        if (root / W.EPISODES_PATH).is_file() or stray:
            raise GenerationMismatchError(f"{str(root)!r} is not empty and has no {W.INFO_PATH} "
                                          f"(found {sorted(stray)[:5] or W.EPISODES_PATH}); pick an empty directory")
        info = W.new_info(params["image_size"], generation=params, source=_scene_env_id(params.get("scene", "classic")))
        info["features"].update(ground_truth_features(params.get("scene", "classic")))
        W.write_info(root, info)
        return []
    old = info.get("generation") or {}
    diff = {}
    for k in GENERATION_KEYS:
        had, want = old.get(k, GENERATION_DEFAULTS.get(k)), params.get(k, GENERATION_DEFAULTS.get(k))
        if had != want:
            diff[k] = (had, want)
    if diff:
        lines = ", ".join(f"{k}: dataset has {a!r}, asked {b!r}" for k, (a, b) in diff.items())
        raise GenerationMismatchError(f"{str(root)!r} was generated with other parameters ({lines}); resume with "
                                      "the same parameters or choose another output directory")
    records = list_episodes(root) if (root / W.EPISODES_PATH).is_file() else []
    W.write_records(root, records)  # drop a torn last line before appending again
    return records


def _run_jobs(root: Path, todo: list[EpisodePlan], params: dict, workers: int, progress: bool) -> list[dict]:
    from tqdm import tqdm

    new: list[dict] = []
    bar = tqdm(total=len(todo), disable=not progress, desc="episodes", unit="ep")

    def finish(rec: dict) -> None:
        W.append_record(root, rec)
        new.append(rec)
        bar.update(1)
        bar.set_postfix(success=f"{np.mean([r['success'] for r in new]):.2f}")

    try:
        if workers == 1 or len(todo) <= 1:
            for plan in todo:
                finish(_episode_job(str(root), plan, params))
            return new
        with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=mp.get_context("spawn")) as pool:
            pending = set()
            queue = iter(todo)
            for plan in queue:  # keep a few jobs per worker in flight, not the whole list
                pending.add(pool.submit(_episode_job, str(root), plan, params))
                if len(pending) >= 2 * workers:
                    break
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    finish(fut.result())
                    nxt = next(queue, None)
                    if nxt is not None:
                        pending.add(pool.submit(_episode_job, str(root), nxt, params))
        return new
    finally:
        bar.close()


class _exclusive:
    """An advisory lock on ``meta/.lock`` so two generators never write into one directory."""

    def __init__(self, root: Path):
        self.path = root / "meta" / ".lock"

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = self.path.open("w")
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.f.close()
            raise RuntimeError(f"another `neuralsim data generate` is writing into "
                               f"{str(self.path.parents[1])!r}") from None
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()
        return False
