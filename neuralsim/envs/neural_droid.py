"""``NeuralDROID-v0``: DROID's tabletop, simulated by the learned world model instead of physics.

Two classes: :class:`NeuralDROIDEnv` (a ``gymnasium.Env``) and :class:`NeuralDROIDVectorEnv` (a
``gymnasium.vector.VectorEnv`` running ONE batched world model for N episodes).  Both are thin fronts over
``_Core`` (:mod:`neuralsim.envs.neural_droid_core`), which owns the world model, its KV cache, the action adapter
and the episode records of every row, so a single env is exactly a batch of one.  The core module's public names
(:func:`load_world_model`, :func:`resolve_checkpoint`, :func:`checkpoint_scene`, :data:`DEFAULT_CHECKPOINT`,
:data:`TRAIN_HINT`, :class:`StepTiming`, :class:`InvalidActionError`, ...) are importable from here.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from .. import kinematics as K
from ..episode import Episode
from ..rewards import make_reward_fn
from . import DEFAULT_MAX_EPISODE_STEPS
from .episodes import EpisodeSet
from .horizon import HorizonFromMake
from .neural_droid_core import (
    DEFAULT_CHECKPOINT,
    TRAIN_HINT,
    ContextWindowError,
    InvalidActionError,
    StepTiming,
    _Core,
    checkpoint_scene,
    context_window_range,
    denoising_schedule,
    draw_episode_and_noise_seed,
    inference_schedule,
    load_world_model,
    resize_views,
    resolve_checkpoint,
)

__all__ = [
    "DEFAULT_REWARD_FN", "NeuralDROIDEnv", "NeuralDROIDVectorEnv",
    # neuralsim.envs.neural_droid_core
    "DEFAULT_CHECKPOINT", "TRAIN_HINT", "ContextWindowError", "InvalidActionError", "StepTiming",
    "checkpoint_scene", "context_window_range", "denoising_schedule", "draw_episode_and_noise_seed",
    "inference_schedule", "load_world_model", "resize_views", "resolve_checkpoint",
]

log = logging.getLogger(__name__)

#: What ``reward_fn="default"`` means.  If it names the offline judge and its weights are not trained
#: yet (``FileNotFoundError``), the env logs a warning and gives reward 0.  Set to None for no reward.
DEFAULT_REWARD_FN: str | None = "roboworld:offline"


def _resolve_reward_fn(reward_fn):
    if isinstance(reward_fn, str) and reward_fn == "default":
        if DEFAULT_REWARD_FN is None:
            return None
        try:
            return make_reward_fn(DEFAULT_REWARD_FN)
        except FileNotFoundError as e:
            log.warning("default reward %r is unavailable (%s); NeuralDROID rewards are 0 until it is trained, "
                        "or pass reward_fn=...", DEFAULT_REWARD_FN, str(e).splitlines()[0])
            return None
    return make_reward_fn(reward_fn)


_COMMON_ARGS = """
    Args:
        checkpoint: world model directory (``config.json`` + ``model.safetensors``), a Hugging Face hub
            id, or a ``WorldModel``; None loads the shipped model (:data:`DEFAULT_CHECKPOINT`).
        reward_fn: called once with the finished :class:`~neuralsim.episode.Episode`; a callable, a
            name for :func:`neuralsim.rewards.make_reward_fn` (``"roboworld:offline"``,
            ``"roboworld:openai/gpt-4o"``, ...), None (reward 0), or ``"default"``
            (:data:`DEFAULT_REWARD_FN`, the offline judge once its weights exist).
        context_window: W, frames a new frame attends to (itself included); None = the model's
            ``config.window`` (the shipped model: 32, twice its 16-frame training clip; 16 is faster,
            docs/FIDELITY.md, "Inference settings").  2..max(``config.window``, 2 x ``config.clip_length``)
            (the shipped model: 2..32, see :func:`context_window_range`); others raise
            :class:`ContextWindowError` (a ValueError).
        denoising_steps: denoising passes per frame, 1..S, on a subset of the trained levels; None = the
            checkpoint's ``config.denoising_steps``, else all S (the shipped model: 4; see :func:`denoising_schedule`).
            2 passes are faster and lose a little at the end of a long episode (docs/FIDELITY.md, "Inference
            settings").
        device: torch device of the world model (``"cpu"``, ``"cuda"``).
        image_size: side of the images handed to the policy; None = the model's 64.  Frames are
            generated at 64 and resized (bilinear, antialiased); records and ``render()`` stay at 64.
        max_episode_steps: horizon; the reward is computed on the step that reaches it (``gym.make``
            replaces it with its ``TimeLimit``'s, see Episode End).
        action_mode: ``"joint_velocity"`` (DROID default) or ``"joint_position"``.
        strict: raise :class:`InvalidActionError` on finite out-of-range actions instead of clipping.
        render_mode: None or ``"rgb_array"`` (the 2x2 collage).
        episodes: the episode set to draw from: None (the shipped 24 SimDROID scenes), a ``.npz``
            path, an :class:`~neuralsim.envs.episodes.EpisodeSet` or a list of specs.
        record_frames: which frames the episode record keeps (see Memory and speed): ``"all"`` (every
            frame), ``"judge"`` (frame 0, one frame per second and the last: every frame the judges in
            ``judges/`` sample, so the reward is the same as with ``"all"``; MiraBench's pairwise vote needs
            ``"all"``) or ``"none"`` (frame 0 and the last).  Frames not kept are black in :meth:`episode` and
            missing from its ``recorded_frames``."""


class NeuralDROIDEnv(HorizonFromMake, gym.Env):
    __doc__ = """DROID's tabletop simulated by a learned action-conditioned video world model.

    ## Description
    A Franka Panda over a table with cubes, a bowl and a pad, seen by DROID's three cameras, is
    *generated* frame by frame by a causal video DiT (Step Forcing) instead of being simulated by
    physics.  Each step the action adapter integrates the DROID action into the next joint state,
    forward kinematics gives the flange pose, and the world model generates the next three views
    conditioned on (flange pose, gripper), attending to the last W frames through a KV cache.
    Its ground-truth twin is ``SimDROID-v0`` (same spaces, MuJoCo physics).

    ## Action Space
    ``Box(8,)`` float32, DROID's action (``action_mode="joint_velocity"``):

    | Num | Action                                   | Min  | Max | Unit                       |
    |-----|------------------------------------------|------|-----|----------------------------|
    | 0-6 | normalised joint velocity of joints 1-7  | -1   | 1   | 0.2 rad per 1/15 s at v=1  |
    | 7   | gripper position command                 | 0    | 1   | 0 open, 1 closed           |

    The real arm (and SimDROID) realises about 0.053 rad per step per unit v; the adapter
    (:mod:`neuralsim.envs.adapter`) reproduces SimDROID's controller to 1e-4 rad over 100 steps.
    ``action_mode="joint_position"``: entries 0-6 are absolute joint targets [rad] within the joint
    limits, approached by at most 0.2 rad per step (RoboArena's default).  Finite out-of-range actions
    are clipped, as DROID's robot does, and reported in ``info``; NaN/inf or a wrong shape raise
    :class:`InvalidActionError`.

    ## Observation Space
    ``Dict`` with DROID's names: ``exterior_image_1_left``, ``exterior_image_2_left``,
    ``wrist_image_left`` (uint8 ``image_size`` x ``image_size`` x 3), ``joint_position`` (7, rad),
    ``gripper_position`` (1, 0 open ... 1 closed), ``cartesian_position`` (6, flange xyz [m] +
    extrinsic XYZ Euler [rad], by forward kinematics).  The instruction is ``info["instruction"]``.

    ## Rewards
    0 on every step except the last: when the episode ends, ``reward_fn`` receives the whole episode
    (frames, states, actions, instruction) and its score is that step's reward; its judgement goes to
    ``info["judgement"]``.  A judge failure -- an exception, or a judgement with no score (a VLM judge
    whose server is unreachable) -- gives NaN and ``info["judgement_error"]``, the error as a string
    (in a vector env an object array with a ``_judgement_error`` mask), never an exception.
    Default: the offline RoboWorld judge (0-5) once trained, else 0.

    ## Starting State
    ``reset(seed=..., options={"episode": name | index | EpisodeSpec | dict})`` starts from an episode
    spec: three initial views, joint and gripper state, instruction (see
    :mod:`neuralsim.envs.episodes`).  Without ``"episode"`` one is drawn from the set with the seed.
    The seed also fixes the world model's noise: same seed, same actions => identical frames (on the
    same machine and torch thread count).

    ## Episode End
    Truncated after ``max_episode_steps`` (default 150 = 10 s).  Never terminated: the world model has
    no success signal (use the judgement).  Stepping after the end raises ``ResetNeeded``.
    ``gym.make(id, max_episode_steps=N)`` and ``gym.make_vec(id, max_episode_steps=N)`` set the env's
    horizon to N (made by ``gym.make`` the env takes its ``TimeLimit``'s horizon, see
    :mod:`neuralsim.envs.horizon`), so the episode is judged on the step it is truncated; a ``TimeLimit``
    added by hand is invisible to the env, give it the same ``max_episode_steps``.

    ## Info
    ``instruction``, ``episode_name`` (spec name; ``info["episode"]`` is left to Gymnasium's
    ``RecordEpisodeStatistics`` and stable-baselines3's ``Monitor``), ``step``, ``conditioning`` (the 7 numbers fed
    to the world model: flange pose + gripper), ``action_clipped`` / ``clipped_dims`` (8 bools),
    ``joint_limit_hit`` (7 bools), ``timing`` (a :class:`StepTiming`: seconds spent in the adapter, the
    world model's denoising, decoding, and the whole step); at the end ``judgement`` or
    ``judgement_error``.  A world model with object state (``dit.num_objects`` K > 0) adds ``object_poses``
    (float32 (K, 7): each object's position [m] and unit wxyz quaternion, w >= 0, in SimDROID's world frame, the robot
    base at the origin): the model's belief about the current frame, at reset the spec's true poses when it records
    them (SimDROID specs, cubes in scene order: the target first) and otherwise read from its first views (in an order
    the reader chooses); a model without object state gives no such key.

    ## Memory and speed
    The KV cache is preallocated for W frames, so world-model memory is flat over any episode length
    (episodes longer than the training clips keep running).  The episode record (for ``reward_fn`` and
    :meth:`episode`, a :class:`~neuralsim.episode.EpisodeRecorder`) grows by three 64x64 frames (36.9 KB)
    and 88 bytes of state and action per step (the process's RSS over 5,000 steps: 37 KB per step), and
    :meth:`episode` is a view of it, not a copy.  For long runs ``record_frames="judge"`` keeps one frame a
    second, all a judge reads (RSS: 2.7 KB per step), and ``"none"`` the first and the latest frame.  The
    env does not change torch's global state (threads, seeds); on a small shared CPU
    ``torch.set_num_threads(1)`` may be faster (``python -m benchmarks.throughput --env`` measures it).
    {args}

    ## Example
    >>> import gymnasium as gym, neuralsim
    >>> env = gym.make("NeuralDROID-v0")                                  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0, options={"episode": "put_in_bowl_1000000"})  # doctest: +SKIP
    >>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())  # doctest: +SKIP

    ## Version History
    * v0: initial version.
    """.replace("\n    {args}", _COMMON_ARGS)

    metadata = {"render_modes": ["rgb_array"], "render_fps": K.CONTROL_HZ}

    def __init__(self, checkpoint=None, reward_fn: str | Callable | None = "default", context_window: int | None = None,
                 denoising_steps: int | None = None, device: str = "cpu", image_size: int | None = None,
                 max_episode_steps: int | None = DEFAULT_MAX_EPISODE_STEPS, action_mode: str = "joint_velocity",
                 strict: bool = False, render_mode: str | None = None, episodes=None, record_frames: str = "all"):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self._core = _Core(1, checkpoint, reward_fn, context_window, denoising_steps, device, image_size,
                           max_episode_steps, action_mode, strict, episodes, _resolve_reward_fn,
                           record_frames=record_frames)
        self.observation_space, self.action_space = self._core.observation_space, self._core.action_space

    @property
    def world_model(self):
        return self._core.wm

    @property
    def episodes(self) -> EpisodeSet:
        return self._core.episodes

    @property
    def max_episode_steps(self) -> int | None:
        return self._core.max_episode_steps

    def _set_horizon(self, steps: int) -> None:
        self._core.max_episode_steps = steps

    @property
    def reward_fn(self) -> Callable | None:
        """The resolved reward function (None: every reward is 0, e.g. the default judge is not trained)."""
        return self._core.reward_fn

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        options = dict(options or {})
        unknown = set(options) - {"episode"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; NeuralDROID accepts 'episode'")
        # resolve on a copy of the RNG first: a bad episode raises before anything changes
        trial = seeding.np_random(seed)[0] if seed is not None else _clone_rng(self.np_random)
        self._core.resolve(options.get("episode"), trial)
        super().reset(seed=seed)
        spec, noise_seed = self._core.resolve(options.get("episode"), self.np_random)
        info = self._core.reset_rows(np.array([0]), [spec], [noise_seed])[0]
        return self._obs(), info

    def step(self, action):
        core = self._core
        if not core.started[0]:
            raise ResetNeeded("call reset() before step()")
        if core.ended[0]:
            raise ResetNeeded(f"the episode ended after {core.steps[0]} steps (max_episode_steps="
                              f"{core.max_episode_steps}); call reset()")
        a, clipped = core.validate(action, None)
        rewards, terminated, truncated, infos = core.step_rows(np.array([0]), a, clipped)
        return self._obs(), float(rewards[0]), bool(terminated[0]), bool(truncated[0]), infos[0]

    def _obs(self) -> dict[str, np.ndarray]:
        return {k: v[0] for k, v in self._core.observations(np.array([0])).items()}

    def episode(self) -> Episode:
        """The episode so far: native 64x64 frames of the three views (read-only; black where
        ``record_frames`` kept none), states, applied actions."""
        return self._core.episode(0)

    def render(self):
        """The 2x2 collage of the latest frame (exterior 1 | exterior 2 / wrist | black) if
        ``render_mode="rgb_array"``."""
        if self.render_mode != "rgb_array":
            return None
        return self._core.collage(0)

    def close(self) -> None:
        super().close()


class NeuralDROIDVectorEnv(gym.vector.VectorEnv):
    __doc__ = """``NeuralDROID-v0`` for N episodes at once: one batched world model, not N copies.

    Same spaces (batched), rewards, info keys and arguments as :class:`NeuralDROIDEnv`; made by
    ``gym.make_vec("NeuralDROID-v0", num_envs=N)``.  Env ``i`` behaves exactly like a single
    ``NeuralDROIDEnv`` reset with seed ``seed + i`` (the world model sees the same noise), up to float
    rounding of batched matrix products.

    Autoreset (``metadata["autoreset_mode"]``, see https://farama.org/Vector-Autoreset-Mode):
    ``"NextStep"`` (default, as ``SyncVectorEnv``): the step after env i ends resets it, ignores its
    action and returns its first observation with reward 0.  ``"SameStep"``: env i is reset in the
    step where it ends; that step's observation is the new episode's first and the last one is in
    ``info["final_obs"]`` / ``info["final_info"]``.

    ``reset(seed=int | list, options={"episode": one for all | list of N, "reset_mask": bool (N,)})``;
    infos are dicts of arrays with ``_key`` masks, as Gymnasium vector envs return them.
    :meth:`episode` ``(i)`` returns env i's episode so far; ``render()`` a tuple of N collages.

    Args:
        num_envs: N.
        autoreset_mode: ``"NextStep"`` or ``"SameStep"`` (or an ``AutoresetMode``).
        other arguments: as :class:`NeuralDROIDEnv`:
    {args}
    """.replace("\n    {args}", _COMMON_ARGS)

    metadata = {"render_modes": ["rgb_array"], "render_fps": K.CONTROL_HZ,
                "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, checkpoint=None, reward_fn: str | Callable | None = "default",
                 context_window: int | None = None, denoising_steps: int | None = None, device: str = "cpu",
                 image_size: int | None = None, max_episode_steps: int | None = DEFAULT_MAX_EPISODE_STEPS,
                 action_mode: str = "joint_velocity", strict: bool = False, render_mode: str | None = None,
                 episodes=None, autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
                 record_frames: str = "all"):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        try:
            mode = AutoresetMode(autoreset_mode)
        except ValueError as e:
            raise ValueError(f"autoreset_mode must be 'NextStep' or 'SameStep', got {autoreset_mode!r}") from e
        if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(f"autoreset_mode must be 'NextStep' or 'SameStep', got {autoreset_mode!r}")
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        self.num_envs, self.render_mode = int(num_envs), render_mode
        self._core = _Core(self.num_envs, checkpoint, reward_fn, context_window, denoising_steps, device, image_size,
                           max_episode_steps, action_mode, strict, episodes, _resolve_reward_fn,
                           record_frames=record_frames)
        self.single_observation_space = self._core.observation_space
        self.single_action_space = self._core.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._rngs: list[np.random.Generator | None] = [None] * self.num_envs
        self._autoreset = np.zeros(self.num_envs, bool)

    @property
    def world_model(self):
        return self._core.wm

    @property
    def episodes(self) -> EpisodeSet:
        return self._core.episodes

    def _rng(self, i: int) -> np.random.Generator:
        if self._rngs[i] is None:
            self._rngs[i], _ = seeding.np_random(None)
        return self._rngs[i]

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        n = self.num_envs
        options = dict(options or {})
        unknown = set(options) - {"episode", "reset_mask"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; accepted: 'episode', 'reset_mask'")
        mask = options.get("reset_mask", np.ones(n, bool))
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (n,) or not mask.any():
            raise ValueError(f"options['reset_mask'] must be a bool numpy array of shape ({n},) with a True, got "
                             f"{mask!r}")
        if seed is None or isinstance(seed, (int, np.integer)):
            seeds = [None if seed is None else int(seed) + i for i in range(n)]
        else:
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(f"seed must be None, an int or a list of {n} seeds, got {len(seeds)} seeds")
        episode = options.get("episode")
        per_env = list(episode) if isinstance(episode, (list, tuple)) else [episode] * n
        if len(per_env) != n:
            raise ValueError(f"options['episode'] must be one episode or a list of {n}, got {len(per_env)}")
        rows = np.flatnonzero(mask)
        # resolve everything before touching any state, so a bad spec changes nothing
        resolved = []
        for i in rows:
            rng = seeding.np_random(seeds[i])[0] if seeds[i] is not None else _clone_rng(self._rng(i))
            resolved.append((i, rng, *self._core.resolve(per_env[i], rng)))
        for i, rng, _, _ in resolved:
            self._rngs[i] = rng
        infos_list = self._core.reset_rows(rows, [r[2] for r in resolved], [r[3] for r in resolved])
        self._autoreset[rows] = False
        infos: dict[str, Any] = {}
        for i, info in zip(rows, infos_list):
            infos = self._add_info(infos, info, int(i))
        return self._core.observations(np.arange(n)), infos

    def step(self, actions):
        core, n = self._core, self.num_envs
        if not core.started.all():
            raise ResetNeeded(f"envs {np.flatnonzero(~core.started).tolist()} were never reset: call reset() first")
        a, clipped = core.validate(actions, n)
        rewards, terms, truncs = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)
        infos: dict[str, Any] = {}
        if self.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP:
            stepping, resetting = np.flatnonzero(~self._autoreset), np.flatnonzero(self._autoreset)
        else:
            stepping, resetting = np.arange(n), np.zeros(0, np.int64)
        for i, info in zip(resetting.tolist(), self._reset_rows_from_rngs(resetting)):
            infos = self._add_info(infos, info, i)
        if len(stepping):
            r, te, tr, step_infos = core.step_rows(stepping, a[stepping], clipped[stepping])
            rewards[stepping], terms[stepping], truncs[stepping] = r, te, tr
            step_infos = dict(zip(stepping.tolist(), step_infos))
            done = stepping[te | tr]
            if self.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP and len(done):
                final_obs = core.observations(done)
                for j, i in enumerate(done.tolist()):
                    infos = self._add_info(infos, {"final_obs": {k: v[j] for k, v in final_obs.items()},
                                                   "final_info": step_infos[i]}, i)
                step_infos.update(zip(done.tolist(), self._reset_rows_from_rngs(done)))
            for i, info in step_infos.items():
                infos = self._add_info(infos, info, i)
        self._autoreset = terms | truncs
        return core.observations(np.arange(n)), rewards, terms, truncs, infos

    def _reset_rows_from_rngs(self, rows: np.ndarray) -> list[dict]:
        """Autoreset: a new episode for each row, drawn from the row's own RNG; returns reset infos."""
        if not len(rows):
            return []
        resolved = [self._core.resolve(None, self._rng(i)) for i in rows]
        return self._core.reset_rows(rows, [s for s, _ in resolved], [z for _, z in resolved])

    def episode(self, index: int = 0) -> Episode:
        """Env ``index``'s episode so far (native 64x64 frames, states, applied actions)."""
        if not 0 <= index < self.num_envs:
            raise IndexError(f"env index {index} out of range for {self.num_envs} envs")
        return self._core.episode(index)

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        return tuple(self._core.collage(i) for i in range(self.num_envs))


def _clone_rng(rng: np.random.Generator) -> np.random.Generator:
    """An independent copy of ``rng`` (drawing from it leaves ``rng`` untouched)."""
    bg = type(rng.bit_generator)()
    bg.state = rng.bit_generator.state
    return np.random.Generator(bg)
