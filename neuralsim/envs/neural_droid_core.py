"""The engine behind ``NeuralDROID-v0``'s two envs (:mod:`neuralsim.envs.neural_droid`).

``_Core`` owns the world model, its KV cache, the action adapter and the episode records of N rows;
``NeuralDROIDEnv`` is a batch of one and ``NeuralDROIDVectorEnv`` a batch of N over it.  Beside it, what the
benchmarks also use of the world model at inference: where a checkpoint comes from (:func:`resolve_checkpoint`,
:func:`load_world_model`, :data:`DEFAULT_CHECKPOINT`), the noise levels it denoises through
(:func:`denoising_schedule`, :func:`inference_schedule`), what a reset draws (:func:`draw_episode_and_noise_seed`)
and how its frames are resized for the policy (:func:`resize_views`).  Every public name here is importable from
:mod:`neuralsim.envs.neural_droid` too.
"""

from __future__ import annotations

import copy
import logging
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from gymnasium.error import ResetNeeded

from .. import kinematics as K
from ..episode import VIEW_NAMES, Episode, EpisodeRecorder, check_record_frames, collage
from ..rewards import reward_from_result
from . import adapter as A
from .episodes import EpisodeSet, EpisodeSpec, default_episodes, load_episodes
from .sim_droid import ACTION_MODES, CARTESIAN_HIGH, CARTESIAN_LOW, droid_spaces

log = logging.getLogger(__name__)

#: The shipped world model: ``config.json`` + ``model.safetensors`` written by ``WorldModel.save_pretrained``.
DEFAULT_CHECKPOINT = Path(__file__).resolve().parent.parent / "assets" / "world_model"
#: How to get a checkpoint, quoted by the error raised when there is none.
TRAIN_HINT = (
    "Train one with the shipped model's recipe (docs/TRAINING.md; it makes its data and resumes when re-run):\n"
    "  neuralsim train --recipe neuralsim/world_model/recipes/default.yaml --out runs/default\n"
    "then copy runs/default/final/* to {default} or pass checkpoint='runs/default/final'."
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class InvalidActionError(ValueError):
    """An action of the wrong shape, with NaN/inf, or (``strict=True``) outside the action space."""


class ContextWindowError(ValueError):
    """A ``context_window`` that is not an integer in the range its checkpoint supports
    (:func:`context_window_range`)."""


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


def checkpoint_scene(checkpoint=None) -> str:
    """The SimDROID scene a world-model checkpoint was trained on, read from its ``config.json`` without loading
    the weights (``"classic"`` where none is recorded); ``None`` is the shipped model, a ``WorldModel`` its own.
    What the benchmarks and tools default to: the episodes, the held-out split, the probe and the ground-truth
    twin of the model's scene."""
    import json

    from ..world_model.model import CheckpointError, WorldModel

    if isinstance(checkpoint, WorldModel):
        return checkpoint.config.scene
    config = resolve_checkpoint(checkpoint) / "config.json"
    try:
        return json.loads(config.read_text()).get("scene", "classic")
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read the world model's config {config}: {e}") from e


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


def context_window_range(config) -> tuple[int, int]:
    """(lowest, highest) ``context_window`` a checkpoint supports, both included.

    At least 2: the new frame and one committed frame.  At most the larger of the checkpoint's own window
    (``config.window``) and twice its training clip (``2 * config.clip_length``).  The DiT sees frames up to
    ``clip_length - 1`` apart in training; at run time its relative RoPE carries it further, and the shipped window,
    twice the clip, is better than the clip beyond the horizon (docs/FIDELITY.md, "Inference settings").  Wider
    windows were never measured, and the KV cache and every step's attention grow with the window
    (``context_window=10000`` on the shipped model: 3.3 GB and 0.4 steps/s after 60 steps).
    """
    return 2, max(int(config.window), 2 * int(config.clip_length))


def check_context_window(config, context_window) -> int:
    """The window to run: ``context_window``, or the checkpoint's own (``config.window``) when None.

    Raises :class:`ContextWindowError`, quoting the value and the range, when it is not an integer within
    :func:`context_window_range`.
    """
    low, high = context_window_range(config)
    window = config.window if context_window is None else context_window
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or not low <= window <= high:
        raise ContextWindowError(
            f"context_window={context_window!r} is not supported by this checkpoint: give an integer in {low}..{high} "
            f"(frames the new frame sees, itself included; at most twice the {config.clip_length}-frame training "
            f"clip or the checkpoint's own window) or None (the checkpoint's {config.window})")
    return int(window)


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



# ---------------------------------------------------------------------------------------------- core
class _Core:
    """World model + KV cache + action adapter + episode records for N rows (the vector env's envs)."""

    def __init__(self, num_rows: int, checkpoint, reward_fn, context_window, denoising_steps, device, image_size,
                 max_episode_steps, action_mode, strict, episodes,
                 resolve_reward: Callable[[Any], Callable | None], *, record_frames: str = "all"):
        """``resolve_reward`` turns ``reward_fn`` (a front's argument) into the reward function or None."""
        import torch

        self.record_frames = check_record_frames(record_frames)
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
        self.window = check_context_window(self.wm.config, context_window)
        self.schedule = inference_schedule(self.wm.config, denoising_steps)
        self.num_rows, self.action_mode, self.strict = num_rows, action_mode, bool(strict)
        self.max_episode_steps = None if max_episode_steps is None else int(max_episode_steps)
        self.reward_fn = resolve_reward(reward_fn)
        if self.reward_fn is not None and self.record_frames == "none":
            log.warning("record_frames='none' keeps only the first and the last frame: reward_fn %r sees the others "
                        "black; a judge needs record_frames='judge'", self.reward_fn)
        if episodes is None:  # the layouts of the scene the model was trained on
            episodes = default_episodes(self.wm.config.scene)
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
        self.records: list[EpisodeRecorder | None] = [None] * num_rows
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
        self.wm.reset(self.state, torch.as_tensor(rows), torch.from_numpy(views), torch.from_numpy(cond),
                      objects=self._spec_objects(specs))
        self.joints.set_rows(rows, A.AdapterState.at_rest(q0, g0))
        self.frames[rows] = views
        self.obs_views[rows] = resize_views(torch.from_numpy(views), self.image_size).numpy()
        infos = []
        for i, r in enumerate(rows):
            self.generators[r].manual_seed(noise_seeds[i])
            self.specs[r], self.seeds[r] = specs[i], noise_seeds[i]
            self.steps[r], self.started[r], self.ended[r] = 0, True, False
            self.records[r] = EpisodeRecorder(views[i], *self._state(r), record_frames=self.record_frames,
                                              fps=K.CONTROL_HZ, horizon=self.max_episode_steps)
            infos.append({"instruction": specs[i].instruction, "episode_name": specs[i].name,
                          "metadata": copy.deepcopy(specs[i].metadata), "conditioning": cond[i].copy(), "step": 0})
        self._add_object_poses(rows, infos)
        return infos

    def _spec_objects(self, specs: list[EpisodeSpec]):
        """Frame 0's object poses (b, K, 7) for a model with object state when every spec records its K cubes'
        (SimDROID specs' ``metadata["object_poses"]``, cubes in scene order); None otherwise (the model then reads
        them from the views)."""
        k = self.wm.num_objects
        if not k:
            return None
        poses = []
        for spec in specs:
            known = spec.metadata.get("object_poses") or {}
            cubes = [np.asarray(v, np.float32) for name, v in known.items() if name.endswith("_cube")]
            if len(cubes) != k:
                if known:
                    log.warning("episode %s records %d cubes, the world model carries %d objects: reading them from "
                                "its views", spec.name, len(cubes), k)
                return None
            poses.append(np.stack(cubes))
        import torch

        return torch.from_numpy(np.stack(poses))

    def _add_object_poses(self, rows: np.ndarray, infos: list[dict]) -> None:
        """``info["object_poses"]`` (K, 7) of each row: the model's belief about its latest frame (models with object
        state only)."""
        poses = self.wm.object_poses(self.state, rows)
        if poses is None:
            return
        poses = poses.cpu().numpy().astype(np.float32)
        for i, info in enumerate(infos):
            info["object_poses"] = poses[i]

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
        object_noise = None
        if d.num_objects:  # drawn after the frame's noise: a model without objects draws what it always did
            object_noise = torch.cat([torch.randn((1, d.num_objects, 7), generator=self.generators[r])
                                      for r in rows]).to(self.wm.device)
        all_rows = len(rows) == self.num_rows and np.array_equal(rows, np.arange(self.num_rows))
        with torch.inference_mode():
            latents = self.wm.generate(self.state, noise, torch.from_numpy(cond).to(self.wm.device),
                                       rows=None if all_rows else torch.as_tensor(rows), schedule=self.schedule,
                                       object_noise=object_noise)
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
            self.records[r].append(views[i], actions[i], *self._state(r))  # copied: torch's buffer is let go
            info = {"instruction": self.specs[r].instruction, "episode_name": self.specs[r].name,
                    "step": int(self.steps[r]), "action_clipped": bool(clipped[i].any()),
                    "clipped_dims": clipped[i].copy(), "joint_limit_hit": hit_limit[i].copy(),
                    "conditioning": cond[i].copy(), "timing": timing}
            if truncated[i] or terminated[i]:
                self.ended[r] = True
                rewards[i] = self._episode_reward(r, info)
            infos.append(info)
        self._add_object_poses(rows, infos)
        return rewards, terminated, truncated, infos

    def _state(self, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Row ``r``'s (joint position (7,), gripper position (1,), flange pose (6,)) for its record."""
        q = self.joints.joint_position[r]
        return q, self.joints.gripper_position[r], K.forward_kinematics(q)

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
        if math.isnan(reward):  # a judge that caught its own failure: a Judgement with no score and its error
            info["judgement_error"] = str(getattr(judgement, "error", None) or "the reward function gave no score")
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
        spec = self.specs[r]
        return self.records[r].episode(
            spec.instruction,
            metadata={**copy.deepcopy(spec.metadata), "spec_source": spec.metadata.get("source"),
                      "source": "NeuralDROID-v0", "scene": self.wm.config.scene, "episode": spec.name,
                      "noise_seed": self.seeds[r], "action_mode": self.action_mode})

    def collage(self, r: int) -> np.ndarray:
        if not self.started[r]:
            raise ResetNeeded("call reset() before render()")
        return collage(*self.frames[r])
