"""``NeuralDROID-v0``: DROID's tabletop, simulated by the learned world model instead of physics.

One module, two classes: :class:`NeuralDROIDEnv` (a ``gymnasium.Env``) and
:class:`NeuralDROIDVectorEnv` (a ``gymnasium.vector.VectorEnv`` running ONE batched world model for
N episodes).  Both are thin fronts over ``_Core``, which owns the world model, its KV cache, the
action adapter and the episode records of every row, so a single env is exactly a batch of one.
"""

from __future__ import annotations

import copy
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from .. import kinematics as K
from ..episode import VIEW_NAMES, Episode, collage
from ..rewards import make_reward_fn, reward_from_result
from . import DEFAULT_MAX_EPISODE_STEPS
from . import adapter as A
from .episodes import EpisodeSet, EpisodeSpec, default_episodes, load_episodes
from .horizon import HorizonFromMake
from .sim_droid import ACTION_MODES, CARTESIAN_HIGH, CARTESIAN_LOW, droid_spaces

log = logging.getLogger(__name__)

#: The shipped world model: ``config.json`` + ``model.safetensors`` written by ``WorldModel.save_pretrained``.
DEFAULT_CHECKPOINT = Path(__file__).resolve().parent.parent / "assets" / "world_model"
#: What ``reward_fn="default"`` means.  If it names the offline judge and its weights are not trained
#: yet (``FileNotFoundError``), the env logs a warning and gives reward 0.  Set to None for no reward.
DEFAULT_REWARD_FN: str | None = "roboworld:offline"
#: How to get a checkpoint, quoted by the error raised when there is none.
TRAIN_HINT = (
    "Train one with the shipped model's recipe (docs/TRAINING.md; it makes its data and resumes when re-run):\n"
    "  neuralsim train --recipe neuralsim/world_model/recipes/default.yaml --out runs/default\n"
    "then copy runs/default/final/* to {default} or pass checkpoint='runs/default/final'."
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class InvalidActionError(ValueError):
    """An action of the wrong shape, with NaN/inf, or (``strict=True``) outside the action space."""


@dataclass(frozen=True)
class StepTiming:
    """Wall-clock seconds of one ``step`` (``info["timing"]``); shared by the rows of a batched step.

    Timings are measurements, not state: they take no part in equality, so two seeded runs give equal
    infos (Gymnasium's ``check_env`` compares them).
    """

    adapter_s: float = field(compare=False)
    """Action adapter + forward kinematics."""
    world_model_s: float = field(compare=False)
    """Denoising passes and the commit pass of the DiT."""
    decode_s: float = field(compare=False)
    """Decoding the three views (and resizing them for the policy)."""
    step_s: float = field(compare=False)
    """The whole generation step."""


# ---------------------------------------------------------------------------------------------- helpers
def resolve_checkpoint(checkpoint=None) -> Path:
    """The directory a world-model checkpoint lives in: ``None`` (the shipped :data:`DEFAULT_CHECKPOINT`), a
    directory, or a Hugging Face hub id (``owner/name``, fetched with ``huggingface_hub`` when no such local
    directory exists).  Raises ``CheckpointError`` (a ValueError) naming the problem; does not read the files.
    """
    from ..world_model.model import CheckpointError

    if checkpoint is None:
        if not (DEFAULT_CHECKPOINT / "config.json").is_file():
            raise CheckpointError(f"NeuralDROID-v0 has no world model: the default checkpoint {DEFAULT_CHECKPOINT} "
                                  f"is missing (config.json + model.safetensors).\n"
                                  + TRAIN_HINT.format(default=DEFAULT_CHECKPOINT))
        return DEFAULT_CHECKPOINT
    path = Path(checkpoint).expanduser()
    if not path.exists() and isinstance(checkpoint, str) and _HUB_ID.match(checkpoint):
        try:
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(checkpoint, allow_patterns=["config.json", "model.safetensors"]))
        except Exception as e:  # offline, unknown repo, no huggingface_hub
            raise CheckpointError(f"world model checkpoint {checkpoint!r} is not a local directory and could not be "
                                  f"fetched from the Hugging Face hub: {type(e).__name__}: {e}") from e
    if not path.is_dir():
        raise CheckpointError(f"world model checkpoint {str(path)!r} is not a directory (expected config.json + "
                              f"model.safetensors written by WorldModel.save_pretrained)")
    return path


def load_world_model(checkpoint=None, device: str = "cpu"):
    """A :class:`~neuralsim.world_model.WorldModel` from a directory, a Hugging Face hub id or an instance.

    ``None`` means the shipped :data:`DEFAULT_CHECKPOINT` (see :func:`resolve_checkpoint`).  Raises
    ``CheckpointError`` (a ValueError) naming the problem when the checkpoint is missing or corrupt.
    """
    from ..world_model.model import WorldModel

    if isinstance(checkpoint, WorldModel):
        return checkpoint.to(device).eval()
    return WorldModel.from_pretrained(resolve_checkpoint(checkpoint), device=device)


def draw_episode_and_noise_seed(rng: np.random.Generator, num_episodes: int) -> tuple[int, int]:
    """What a reset draws from the env's ``rng``, in this order: the index of a random episode among
    ``num_episodes`` (used when no episode is named) and the seed of the world model's noise for the episode."""
    return int(rng.integers(num_episodes)), int(rng.integers(2**62))


def denoising_schedule(trained: Sequence[float], steps: int | None) -> tuple[float, ...]:
    """Noise levels for ``steps`` denoising passes: always a subset of the trained levels.

    None keeps the trained schedule (S = 4: 0.25, 0.5, 0.75, 1).  ``steps`` < S keeps ``steps`` of the
    trained levels, evenly spaced and ending at 1 (level ``floor((i + 1) S / steps)`` for i < steps:
    2 -> 0.5, 1; 3 -> 0.25, 0.5, 1; 1 -> 1).  A Step Forcing model has only ever denoised from those
    levels: on a grid off them (3 passes at 1/3, 2/3, 1) the shipped model's frames fall apart
    (docs/FIDELITY.md, "Inference settings"), so more passes than S, which would need such levels, are refused.
    """
    trained = tuple(float(t) for t in trained)
    if steps is None:
        return trained
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"denoising_steps must be a positive integer or None, got {steps!r}")
    s = len(trained)
    if steps > s:
        raise ValueError(f"denoising_steps={steps} is more than the {s} noise levels the model was trained on "
                         f"{trained}; give 1..{s} (a subset of those levels) or None")
    return tuple(trained[(i + 1) * s // steps - 1] for i in range(int(steps)))


def inference_schedule(config, steps: int | None = None) -> tuple[float, ...]:
    """The noise levels a model denoises through at inference: ``steps`` passes when given, else the passes its
    config names (``WorldModelConfig.denoising_steps``; None there: all S trained levels)."""
    return denoising_schedule(config.schedule, config.denoising_steps if steps is None else steps)


def resize_views(views, size: int):
    """uint8 torch views (..., H, W, 3) -> (..., size, size, 3), bilinear with antialiasing."""
    import torch
    import torch.nn.functional as F

    if views.shape[-2] == size:
        return views
    lead, (h, w) = views.shape[:-3], views.shape[-3:-1]
    x = views.reshape(-1, h, w, 3).permute(0, 3, 1, 2).float()
    x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return x.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).reshape(*lead, size, size, 3)


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


# ---------------------------------------------------------------------------------------------- core
class _Core:
    """World model + KV cache + action adapter + episode records for N rows (the vector env's envs)."""

    def __init__(self, num_rows: int, checkpoint, reward_fn, context_window, denoising_steps, device, image_size,
                 max_episode_steps, action_mode, strict, episodes):
        import torch

        if action_mode not in ACTION_MODES:
            raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {action_mode!r}")
        if max_episode_steps is not None and (isinstance(max_episode_steps, bool) or int(max_episode_steps) < 1):
            raise ValueError(f"max_episode_steps must be a positive integer or None, got {max_episode_steps!r}")
        self.wm = load_world_model(checkpoint, device)
        self.model_size = self.wm.config.autoencoder.image_size
        self.image_size = self.model_size if image_size is None else int(image_size)
        if not 16 <= self.image_size <= 1024:
            raise ValueError(f"image_size must be in [16, 1024] or None (the model's {self.model_size}), "
                             f"got {image_size!r}")
        window = self.wm.config.window if context_window is None else context_window
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 2:
            raise ValueError(f"context_window must be an integer >= 2 (frames the new frame sees, itself included) "
                             f"or None (the model's {self.wm.config.window}), got {context_window!r}")
        self.window = int(window)
        self.schedule = inference_schedule(self.wm.config, denoising_steps)
        self.num_rows, self.action_mode, self.strict = num_rows, action_mode, bool(strict)
        self.max_episode_steps = None if max_episode_steps is None else int(max_episode_steps)
        self.reward_fn = _resolve_reward_fn(reward_fn)
        if episodes is None:
            episodes = default_episodes()
        elif isinstance(episodes, (str, Path)):
            episodes = load_episodes(episodes)
        elif not isinstance(episodes, EpisodeSet):
            episodes = EpisodeSet(e if isinstance(e, EpisodeSpec) else EpisodeSpec.from_dict(e) for e in episodes)
        self.episodes = episodes
        self.observation_space, self.action_space = droid_spaces(self.image_size, action_mode)
        self.state = self.wm.new_state(num_rows, window=self.window, num_sink=0, device=self.wm.device)
        zeros = np.zeros((num_rows, 7))
        self.joints = A.AdapterState(zeros.copy(), np.zeros((num_rows, 1)), zeros.copy(), zeros.copy())
        self.specs: list[EpisodeSpec | None] = [None] * num_rows
        self.seeds: list[int | None] = [None] * num_rows
        self.generators = [torch.Generator(device="cpu") for _ in range(num_rows)]
        self.steps = np.zeros(num_rows, np.int64)
        self.started = np.zeros(num_rows, bool)
        self.ended = np.zeros(num_rows, bool)
        self.records: list[dict[str, list]] = [{} for _ in range(num_rows)]
        s = self.model_size
        self.frames = np.zeros((num_rows, len(VIEW_NAMES), s, s, 3), np.uint8)  # latest native frames
        self.obs_views = np.zeros((num_rows, len(VIEW_NAMES), self.image_size, self.image_size, 3), np.uint8)

    # ------------------------------------------------------------------ validation
    def validate(self, actions, batch: int | None) -> tuple[np.ndarray, np.ndarray]:
        """(clipped actions (b, 8) float64, (b, 8) bool where clipped); raises InvalidActionError."""
        want = (8,) if batch is None else (batch, 8)
        try:
            a = np.asarray(actions, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise InvalidActionError(f"action must be numbers of shape {want}, got {actions!r} ({e})") from e
        if a.shape != want:
            what = "7 joint velocities" if self.action_mode == "joint_velocity" else "7 joint positions"
            raise InvalidActionError(f"action must have shape {want} ({what} + gripper), got {a.shape}")
        a = a.reshape(-1, 8)
        bad = ~np.isfinite(a)
        if bad.any():
            raise InvalidActionError(f"action contains NaN or inf at (row, dim) {np.argwhere(bad).tolist()}: "
                                     f"{a.tolist()}")
        low, high = self.action_space.low.astype(np.float64), self.action_space.high.astype(np.float64)
        clipped = np.clip(a, low, high)
        out = clipped != a
        if self.strict and out.any():
            raise InvalidActionError(f"action out of range at (row, dim) {np.argwhere(out).tolist()}: {a.tolist()}; "
                                     f"valid: low={low.tolist()}, high={high.tolist()} (strict=True)")
        return clipped, out

    # ------------------------------------------------------------------ reset
    def resolve(self, episode, rng: np.random.Generator) -> tuple[EpisodeSpec, int]:
        """(spec at the model's resolution, world-model noise seed); draws from ``rng`` the same way always."""
        index, noise_seed = draw_episode_and_noise_seed(rng, len(self.episodes))
        spec = self.episodes[index] if episode is None else self.episodes.resolve(episode)
        return spec.resized(self.model_size), noise_seed

    def reset_rows(self, rows: np.ndarray, specs: list[EpisodeSpec], noise_seeds: list[int]) -> list[dict]:
        import torch

        q0 = np.stack([s.joint_position for s in specs])
        g0 = np.stack([s.gripper_position for s in specs])
        views = np.stack([np.stack([s.views[v] for v in VIEW_NAMES]) for s in specs])  # (b, 3, S, S, 3)
        cond = np.concatenate([K.forward_kinematics(q0), g0], 1).astype(np.float32)
        self.wm.reset(self.state, torch.as_tensor(rows), torch.from_numpy(views), torch.from_numpy(cond))
        self.joints.set_rows(rows, A.AdapterState.at_rest(q0, g0))
        self.frames[rows] = views
        self.obs_views[rows] = resize_views(torch.from_numpy(views), self.image_size).numpy()
        infos = []
        for i, r in enumerate(rows):
            self.generators[r].manual_seed(noise_seeds[i])
            self.specs[r], self.seeds[r] = specs[i], noise_seeds[i]
            self.steps[r], self.started[r], self.ended[r] = 0, True, False
            self.records[r] = {"frames": [views[i]], "joint_position": [], "gripper_position": [],
                               "cartesian_position": [], "actions": []}
            self._record_state(r)
            infos.append({"instruction": specs[i].instruction, "episode_name": specs[i].name,
                          "metadata": copy.deepcopy(specs[i].metadata), "conditioning": cond[i].copy(), "step": 0})
        return infos

    # ------------------------------------------------------------------ step
    def step_rows(self, rows: np.ndarray, actions: np.ndarray, clipped: np.ndarray):
        """Advance ``rows`` by one 1/15 s step with validated ``actions`` (b, 8)."""
        import torch

        t0 = time.perf_counter()
        nxt, hit_limit = A.advance(self.joints.rows(rows), actions, self.action_mode)
        cond = np.concatenate([K.forward_kinematics(nxt.joint_position), nxt.gripper_position], 1).astype(np.float32)
        t1 = time.perf_counter()
        d = self.wm.config.dit
        noise = torch.cat([torch.randn((1, d.num_views, d.latent_channels, d.latent_size, d.latent_size),
                                       generator=self.generators[r]) for r in rows]).to(self.wm.device)
        all_rows = len(rows) == self.num_rows and np.array_equal(rows, np.arange(self.num_rows))
        with torch.inference_mode():
            latents = self.wm.generate(self.state, noise, torch.from_numpy(cond).to(self.wm.device),
                                       rows=None if all_rows else torch.as_tensor(rows), schedule=self.schedule)
            t2 = time.perf_counter()
            views = self.wm.decode(latents, self.state.reference(None if all_rows else torch.as_tensor(rows)))
            obs_views = resize_views(views, self.image_size).cpu().numpy()
            views = views.cpu().numpy()
        t3 = time.perf_counter()
        # commit: nothing above touched the env's own state except the KV cache
        self.joints.set_rows(rows, nxt)
        self.frames[rows], self.obs_views[rows] = views, obs_views
        self.steps[rows] += 1
        timing = StepTiming(adapter_s=t1 - t0, world_model_s=t2 - t1, decode_s=t3 - t2, step_s=t3 - t0)
        n = len(rows)
        rewards, terminated = np.zeros(n), np.zeros(n, bool)
        truncated = np.zeros(n, bool) if self.max_episode_steps is None else self.steps[rows] >= self.max_episode_steps
        infos = []
        for i, r in enumerate(rows):
            rec = self.records[r]
            rec["frames"].append(views[i])
            rec["actions"].append(actions[i].astype(np.float32))
            self._record_state(r)
            info = {"instruction": self.specs[r].instruction, "episode_name": self.specs[r].name,
                    "step": int(self.steps[r]), "action_clipped": bool(clipped[i].any()),
                    "clipped_dims": clipped[i].copy(), "joint_limit_hit": hit_limit[i].copy(),
                    "conditioning": cond[i].copy(), "timing": timing}
            if truncated[i] or terminated[i]:
                self.ended[r] = True
                rewards[i] = self._episode_reward(r, info)
            infos.append(info)
        return rewards, terminated, truncated, infos

    def _record_state(self, r: int) -> None:
        rec, q, g = self.records[r], self.joints.joint_position[r], self.joints.gripper_position[r]
        rec["joint_position"].append(q.astype(np.float32))
        rec["gripper_position"].append(g.astype(np.float32))
        rec["cartesian_position"].append(K.forward_kinematics(q).astype(np.float32))

    def _episode_reward(self, r: int, info: dict) -> float:
        if self.reward_fn is None:
            return 0.0
        try:
            reward, judgement = reward_from_result(self.reward_fn(self.episode(r)))
        except Exception as e:  # a judge failure must never lose the rollout
            log.warning("reward_fn failed on episode %s: %s: %s", self.specs[r].name, type(e).__name__, e)
            info["judgement_error"] = f"{type(e).__name__}: {e}"
            return float("nan")
        info["judgement"] = judgement
        return reward

    # ------------------------------------------------------------------ outputs
    def observations(self, rows) -> dict[str, np.ndarray]:
        q = np.clip(self.joints.joint_position[rows].astype(np.float32), self.observation_space["joint_position"].low,
                    self.observation_space["joint_position"].high)
        obs = {v: self.obs_views[rows, i].copy() for i, v in enumerate(VIEW_NAMES)}
        obs["joint_position"] = q
        obs["gripper_position"] = self.joints.gripper_position[rows].astype(np.float32)
        obs["cartesian_position"] = np.clip(K.forward_kinematics(self.joints.joint_position[rows]).astype(np.float32),
                                            CARTESIAN_LOW, CARTESIAN_HIGH)
        return obs

    def episode(self, r: int) -> Episode:
        if not self.started[r]:
            raise ResetNeeded("no episode recorded yet: call reset() first")
        rec, spec = self.records[r], self.specs[r]
        frames = np.stack(rec["frames"])  # (T, 3, S, S, 3)
        return Episode(
            frames={v: frames[:, i] for i, v in enumerate(VIEW_NAMES)},
            joint_position=np.stack(rec["joint_position"]),
            gripper_position=np.stack(rec["gripper_position"]),
            cartesian_position=np.stack(rec["cartesian_position"]),
            actions=np.stack(rec["actions"]) if rec["actions"] else np.zeros((0, 8), np.float32),
            instruction=spec.instruction, fps=K.CONTROL_HZ,
            metadata={**copy.deepcopy(spec.metadata), "spec_source": spec.metadata.get("source"),
                      "source": "NeuralDROID-v0", "episode": spec.name, "noise_seed": self.seeds[r],
                      "action_mode": self.action_mode},
        )

    def collage(self, r: int) -> np.ndarray:
        if not self.started[r]:
            raise ResetNeeded("call reset() before render()")
        return collage(*self.frames[r])


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
            docs/FIDELITY.md, "Inference settings").
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
            path, an :class:`~neuralsim.envs.episodes.EpisodeSet` or a list of specs."""


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
    ``info["judgement"]`` (a judge failure gives NaN and ``info["judgement_error"]``, never an
    exception).  Default: the offline RoboWorld judge (0-5) once trained, else 0.

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
    ``judgement_error``.

    ## Memory and speed
    The KV cache is preallocated for W frames, so world-model memory is flat over any episode length
    (episodes longer than the training clips keep running).  The episode record (for ``reward_fn`` and
    :meth:`episode`) grows by three 64x64 frames (37 KB) per step.  The env does not change torch's
    global state (threads, seeds); on a small shared CPU ``torch.set_num_threads(1)`` may be faster
    (``python -m benchmarks.throughput --env`` measures it).
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
                 strict: bool = False, render_mode: str | None = None, episodes=None):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self._core = _Core(1, checkpoint, reward_fn, context_window, denoising_steps, device, image_size,
                           max_episode_steps, action_mode, strict, episodes)
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
        """The episode so far: native 64x64 frames of the three views, states, applied actions."""
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
                 episodes=None, autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP):
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
                           max_episode_steps, action_mode, strict, episodes)
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
