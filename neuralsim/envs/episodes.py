"""Episode specs: where a NeuralDROID-v0 episode starts (three views, joint state, instruction).

An :class:`EpisodeSpec` is what ``env.reset(options={"episode": spec_or_name})`` starts from: the
initial ``exterior_image_1_left``, ``exterior_image_2_left`` and ``wrist_image_left`` views (uint8
H x W x 3, square), the initial joint position (7) and gripper position (1), the instruction, and free
metadata (seed, task family, object poses for evaluation, ...).  Specs come from SimDROID
(:meth:`EpisodeSpec.from_simdroid`), from a recorded :class:`~neuralsim.episode.Episode` of the
dataset (:meth:`EpisodeSpec.from_episode`) or from your own camera images
(:meth:`EpisodeSpec.from_images`).

A set of specs is one compressed ``.npz`` (views, joint and gripper arrays, and a JSON string with
names, instructions and metadata; loaded with ``allow_pickle=False``).  Each SimDROID scene has a default set in
the package (:func:`default_episodes`; NeuralDROID takes the one of its world model's ``config.scene``), rebuilt by::

    python -m neuralsim.envs.episodes --build-default                  # default.npz, SimDROID-v0
    python -m neuralsim.envs.episodes --build-default --scene legible  # default_legible.npz, SimDROID-v1

(24 specs each, seeds 1_000_000-1_000_023: far from the datasets', so the world model has never seen these
layouts; 8 per task family).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from .. import kinematics as K
from ..episode import VIEW_NAMES

log = logging.getLogger(__name__)

#: Where the default episode set of the classic scene lives (package data); :func:`default_episodes_path` gives
#: each scene's.
DEFAULT_EPISODES_PATH = Path(__file__).resolve().parent.parent / "assets" / "episodes" / "default.npz"
#: Seeds of the default set: SimDROID seeds far above any the dataset uses.
DEFAULT_SEED_START = 1_000_000
DEFAULT_NUM_EPISODES = 24
#: Smallest accepted view side [px].
MIN_IMAGE_SIZE = 16
#: Keys an episode spec must have (as a dict / in a file).
REQUIRED_KEYS = (*VIEW_NAMES, "joint_position", "gripper_position", "instruction")


class EpisodeSpecError(ValueError):
    """A malformed episode spec: missing key, wrong image size or dtype, bad joint state."""


class UnknownEpisodeError(KeyError):
    """An episode name (or index) that is not in the episode set."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


def _check_view(name: str, img: Any) -> np.ndarray:
    if not isinstance(img, np.ndarray):
        raise EpisodeSpecError(f"view {name!r} must be a numpy uint8 array (H, W, 3), got {type(img).__name__}")
    if img.dtype != np.uint8:
        raise EpisodeSpecError(f"view {name!r} must have dtype uint8 (0-255), got {img.dtype}; convert float images "
                               f"in [0, 1] with (img * 255).round().astype(np.uint8)")
    if img.ndim != 3 or img.shape[2] != 3:
        raise EpisodeSpecError(f"view {name!r} must be (H, W, 3) RGB, got shape {img.shape}")
    h, w = img.shape[:2]
    if h != w or h < MIN_IMAGE_SIZE:
        raise EpisodeSpecError(f"view {name!r} must be square with side >= {MIN_IMAGE_SIZE}, got {h}x{w}; "
                               f"EpisodeSpec.from_images(...) crops and resizes camera images")
    return img


@dataclass
class EpisodeSpec:
    """Where one episode starts.

    Attributes:
        name: unique name within a set (e.g. ``"put_in_bowl_1000000"``).
        views: view name (``neuralsim.episode.VIEW_NAMES``) -> uint8 (S, S, 3) initial image.
        joint_position: (7,) initial joint positions [rad], within the Panda's limits.
        gripper_position: (1,) initial gripper position, 0 open ... 1 closed.
        instruction: the language instruction.
        metadata: JSON-serialisable extras (seed, task, object poses, source, ...).
    """

    name: str
    views: dict[str, np.ndarray]
    joint_position: np.ndarray
    gripper_position: np.ndarray
    instruction: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise EpisodeSpecError(f"name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.views, dict):
            raise EpisodeSpecError(f"views must be a dict {list(VIEW_NAMES)} -> image, got {type(self.views).__name__}")
        missing = [v for v in VIEW_NAMES if v not in self.views]
        if missing:
            raise EpisodeSpecError(f"episode spec {self.name!r} is missing views {missing}; required: "
                                   f"{list(VIEW_NAMES)}")
        unknown = sorted(set(self.views) - set(VIEW_NAMES))
        if unknown:
            raise EpisodeSpecError(f"episode spec {self.name!r} has unknown views {unknown}; expected "
                                   f"{list(VIEW_NAMES)}")
        self.views = {v: _check_view(v, self.views[v]) for v in VIEW_NAMES}
        shapes = {v: self.views[v].shape for v in VIEW_NAMES}
        if len(set(shapes.values())) != 1:
            raise EpisodeSpecError(f"all three views must have the same size, got {shapes}")
        q = np.asarray(self.joint_position, np.float64).reshape(-1)
        if q.shape != (7,) or not np.all(np.isfinite(q)):
            raise EpisodeSpecError(f"joint_position must be 7 finite numbers [rad], got {self.joint_position!r}")
        if np.any(q < K.JOINT_LIMITS_LOW - 1e-6) or np.any(q > K.JOINT_LIMITS_HIGH + 1e-6):
            raise EpisodeSpecError(f"joint_position {q.round(4).tolist()} is outside the Panda's limits "
                                   f"[{K.JOINT_LIMITS_LOW.tolist()}, {K.JOINT_LIMITS_HIGH.tolist()}]")
        g = np.asarray(self.gripper_position, np.float64).reshape(-1)
        if g.shape != (1,) or not np.all(np.isfinite(g)) or not 0.0 <= g[0] <= 1.0:
            raise EpisodeSpecError(f"gripper_position must be one number in [0, 1], got {self.gripper_position!r}")
        if not isinstance(self.instruction, str):
            raise EpisodeSpecError(f"instruction must be a string, got {type(self.instruction).__name__}")
        self.joint_position = np.clip(q, K.JOINT_LIMITS_LOW, K.JOINT_LIMITS_HIGH)
        self.gripper_position = g
        self.metadata = dict(self.metadata)

    @property
    def image_size(self) -> int:
        return int(self.views[VIEW_NAMES[0]].shape[0])

    def resized(self, image_size: int) -> "EpisodeSpec":
        """The same spec with views resized to ``image_size`` (itself if already that size)."""
        if image_size == self.image_size:
            return self
        views = {v: resize_image(img, image_size) for v, img in self.views.items()}
        return EpisodeSpec(self.name, views, self.joint_position, self.gripper_position, self.instruction,
                           self.metadata)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_dict(cls, d: dict[str, Any], name: str | None = None) -> "EpisodeSpec":
        """From a flat dict with the keys of :data:`REQUIRED_KEYS` (+ optional ``name``, ``metadata``)."""
        if not isinstance(d, dict):
            raise EpisodeSpecError(f"an episode spec must be a dict or EpisodeSpec, got {type(d).__name__}")
        missing = [k for k in REQUIRED_KEYS if k not in d]
        if missing:
            raise EpisodeSpecError(f"episode spec is missing keys {missing}; required keys: {list(REQUIRED_KEYS)}")
        return cls(name=name or d.get("name", "custom"), views={v: d[v] for v in VIEW_NAMES},
                   joint_position=d["joint_position"], gripper_position=d["gripper_position"],
                   instruction=d["instruction"], metadata=d.get("metadata", {}))

    @classmethod
    def from_simdroid(cls, seed: int, task: str | None = None, image_size: int = 64, env=None,
                      scene: str = "classic") -> "EpisodeSpec":
        """Reset SimDROID with ``seed`` (and task family) and take its first observation.

        ``env`` may be an existing :class:`~neuralsim.envs.sim_droid.SimDROIDEnv` of the right image size
        (reused for speed; its own scene is used); otherwise one of ``scene`` (``"classic"``: ``SimDROID-v0``,
        ``"legible"``: ``SimDROID-v1``) is made and closed.
        """
        from .sim_droid import SimDROIDEnv

        own = env is None
        env = SimDROIDEnv(image_size=image_size, reward_fn=None, scene=scene) if own else env
        try:
            obs, info = env.reset(seed=int(seed), options={"task": task} if task else None)
        finally:
            if own:
                env.close()
        meta = {
            "source": env.scene.env_id, "scene": env.scene.name, "seed": int(seed), "task": info["task"],
            "target": info["target"],
            "base": info["base"], "object_poses": {k: np.asarray(v).round(6).tolist()
                                                   for k, v in info["object_poses"].items()},
        }
        return cls(name=f"{info['task']}_{int(seed)}", views={v: obs[v] for v in VIEW_NAMES},
                   joint_position=obs["joint_position"], gripper_position=obs["gripper_position"],
                   instruction=info["instruction"], metadata=meta)

    @classmethod
    def from_images(cls, exterior_image_1_left, exterior_image_2_left, wrist_image_left, instruction: str,
                    joint_position=None, gripper_position: float = 0.0, image_size: int = 64, name: str = "custom",
                    metadata: dict[str, Any] | None = None) -> "EpisodeSpec":
        """From your own camera images (uint8 arrays of any size, or image file paths).

        Each image is centre-cropped to a square and resized to ``image_size`` (the world model's
        resolution; 64 for the shipped model).  ``joint_position`` defaults to DROID's reset pose.
        """
        imgs = {}
        for view, img in zip(VIEW_NAMES, (exterior_image_1_left, exterior_image_2_left, wrist_image_left)):
            if isinstance(img, (str, os.PathLike)):
                from PIL import Image

                img = np.asarray(Image.open(img).convert("RGB"))
            img = np.asarray(img)
            if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
                raise EpisodeSpecError(f"{view} must be a uint8 (H, W, 3) image, got {img.dtype} {img.shape}")
            h, w = img.shape[:2]
            s = min(h, w)
            top, left = (h - s) // 2, (w - s) // 2
            imgs[view] = resize_image(img[top: top + s, left: left + s], image_size)
        q = K.RESET_JOINT_POSITION if joint_position is None else joint_position
        return cls(name=name, views=imgs, joint_position=q, gripper_position=[gripper_position],
                   instruction=instruction, metadata={"source": "images", **(metadata or {})})

    @classmethod
    def from_episode(cls, episode, t: int = 0, name: str | None = None) -> "EpisodeSpec":
        """From frame ``t`` of a recorded :class:`~neuralsim.episode.Episode` (e.g. one of the dataset)."""
        meta = {k: v for k, v in episode.metadata.items() if _jsonable(v)}
        return cls(name=name or f"{meta.get('task', 'episode')}_{meta.get('seed', 'x')}_t{t}",
                   views={v: np.ascontiguousarray(episode.frames[v][t]) for v in VIEW_NAMES},
                   joint_position=episode.joint_position[t], gripper_position=episode.gripper_position[t],
                   instruction=episode.instruction, metadata={**meta, "frame": int(t)})


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


def resize_image(img: np.ndarray, size: int) -> np.ndarray:
    """Resize a square uint8 (H, W, 3) image to (size, size, 3) (area averaging down, bicubic up)."""
    from PIL import Image

    if img.shape[0] == size and img.shape[1] == size:
        return img
    method = Image.BOX if size < img.shape[0] else Image.BICUBIC
    return np.asarray(Image.fromarray(img).resize((size, size), method))


# ---------------------------------------------------------------------------------------------- sets
class EpisodeSet(Sequence[EpisodeSpec]):
    """An ordered collection of specs with unique names; index by position or name."""

    def __init__(self, specs: Iterable[EpisodeSpec]):
        self._specs = list(specs)
        if not self._specs:
            raise EpisodeSpecError("an episode set needs at least one spec")
        self._by_name: dict[str, int] = {}
        for i, s in enumerate(self._specs):
            if not isinstance(s, EpisodeSpec):
                raise EpisodeSpecError(f"episode set entries must be EpisodeSpec, got {type(s).__name__} at {i}")
            if s.name in self._by_name:
                raise EpisodeSpecError(f"duplicate episode name {s.name!r} in the set")
            self._by_name[s.name] = i

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[EpisodeSpec]:
        return iter(self._specs)

    def __getitem__(self, key):  # int, slice or name
        if isinstance(key, str):
            if key not in self._by_name:
                some = ", ".join(list(self._by_name)[:6])
                raise UnknownEpisodeError(f"unknown episode {key!r}; this set has {len(self)} episodes, e.g. {some}"
                                          f" (see .names)")
            return self._specs[self._by_name[key]]
        if isinstance(key, slice):
            return EpisodeSet(self._specs[key])
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if not -len(self) <= key < len(self):
                raise UnknownEpisodeError(f"episode index {key} out of range for a set of {len(self)} episodes")
            return self._specs[key]
        raise TypeError(f"index an episode set by int or name, got {type(key).__name__}")

    @property
    def names(self) -> list[str]:
        return [s.name for s in self._specs]

    def resolve(self, episode: "EpisodeSpec | dict | str | int") -> EpisodeSpec:
        """A spec from a spec, a dict (validated), a name or an index into this set."""
        if isinstance(episode, EpisodeSpec):
            return episode
        if isinstance(episode, dict):
            return EpisodeSpec.from_dict(episode)
        if isinstance(episode, (str, int, np.integer)) and not isinstance(episode, bool):
            return self[episode]
        raise EpisodeSpecError(f"options['episode'] must be an EpisodeSpec, a dict, an episode name or an index, "
                               f"got {type(episode).__name__}")

    def save(self, path: str | os.PathLike) -> Path:
        return save_episodes(self, path)


def save_episodes(specs: Iterable[EpisodeSpec], path: str | os.PathLike) -> Path:
    """Write specs (all of one image size) into one compressed ``.npz``."""
    specs = list(specs)
    sizes = {s.image_size for s in specs}
    if len(sizes) != 1:
        raise EpisodeSpecError(f"all specs of a saved set must share an image size, got {sorted(sizes)}")
    index = [{"name": s.name, "instruction": s.instruction, "metadata": s.metadata} for s in specs]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        path,
        views=np.stack([np.stack([s.views[v] for v in VIEW_NAMES]) for s in specs]),  # (E, 3, S, S, 3)
        joint_position=np.stack([s.joint_position for s in specs]).astype(np.float64),
        gripper_position=np.stack([s.gripper_position for s in specs]).astype(np.float64),
        index_json=np.array(json.dumps(index)),
    )
    return path


def load_episodes(path: str | os.PathLike) -> EpisodeSet:
    """Read a set written by :func:`save_episodes` (never unpickles)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"episode set {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("views", "joint_position", "gripper_position", "index_json") if k not in z.files]
            if missing:
                raise EpisodeSpecError(f"episode set {path} is missing arrays {missing}")
            views, q, g = z["views"], z["joint_position"], z["gripper_position"]
            index = json.loads(str(z["index_json"]))
    except (OSError, ValueError, json.JSONDecodeError) as e:
        if isinstance(e, EpisodeSpecError):
            raise
        raise EpisodeSpecError(f"cannot read episode set {path}: {e}") from e
    if not (len(views) == len(q) == len(g) == len(index)) or views.ndim != 5 or views.shape[1] != len(VIEW_NAMES):
        raise EpisodeSpecError(f"episode set {path} is inconsistent: views {views.shape}, joint_position {q.shape}, "
                               f"gripper_position {g.shape}, {len(index)} index entries")
    return EpisodeSet(EpisodeSpec(name=e["name"], views=dict(zip(VIEW_NAMES, v)), joint_position=qi,
                                  gripper_position=gi, instruction=e["instruction"], metadata=e.get("metadata", {}))
                      for e, v, qi, gi in zip(index, views, q, g))


def default_episodes_path(scene: str = "classic") -> Path:
    """Where the package keeps the default episode set of SimDROID's ``scene``."""
    from .scene import SCENES

    if scene not in SCENES:
        raise ValueError(f"unknown scene {scene!r}; expected one of {sorted(SCENES)}")
    return DEFAULT_EPISODES_PATH if scene == "classic" else DEFAULT_EPISODES_PATH.with_name(f"default_{scene}.npz")


@lru_cache(maxsize=2)
def default_episodes(scene: str = "classic") -> EpisodeSet:
    """The episode set shipped with the package for ``scene`` (24 SimDROID layouts)."""
    path = default_episodes_path(scene)
    if not path.is_file():
        raise FileNotFoundError(f"the default episode set {path} is missing; rebuild it with "
                                f"`python -m neuralsim.envs.episodes --build-default --scene {scene}`")
    return load_episodes(path)


def build_default(path: str | os.PathLike = DEFAULT_EPISODES_PATH, num: int = DEFAULT_NUM_EPISODES,
                  seed_start: int = DEFAULT_SEED_START, image_size: int = 64, scene: str = "classic") -> EpisodeSet:
    """SimDROID specs (of ``scene``) for seeds ``seed_start ...``, task families in turn; written to ``path``."""
    from .sim_droid import TASK_FAMILIES, SimDROIDEnv

    env = SimDROIDEnv(image_size=image_size, reward_fn=None, scene=scene)
    try:
        specs = EpisodeSet(EpisodeSpec.from_simdroid(seed_start + i, TASK_FAMILIES[i % len(TASK_FAMILIES)], env=env)
                           for i in range(num))
    finally:
        env.close()
    save_episodes(specs, path)
    return specs


def main(argv: list[str] | None = None) -> None:
    """``python -m neuralsim.envs.episodes --build-default`` / ``--list [PATH]``."""
    p = argparse.ArgumentParser(description="Build or list NeuralDROID episode sets.")
    p.add_argument("--build-default", action="store_true", help=f"rebuild {DEFAULT_EPISODES_PATH.name}")
    p.add_argument("--out", default=None, help="where --build-default writes (default: the package's set of "
                                                "--scene)")
    p.add_argument("--scene", choices=("classic", "legible"), default="classic",
                   help="the SimDROID scene --build-default resets: classic (SimDROID-v0) or legible (SimDROID-v1)")
    p.add_argument("--list", nargs="?", const=str(DEFAULT_EPISODES_PATH), metavar="PATH", help="print a set's names")
    args = p.parse_args(argv)
    if args.build_default:
        out = args.out or default_episodes_path(args.scene)
        specs = build_default(out, scene=args.scene)
        print(f"wrote {len(specs)} episode specs to {out} ({Path(out).stat().st_size / 1e6:.2f} MB)")
    if args.list:
        for s in load_episodes(args.list):
            print(f"{s.name:28s} {s.instruction}")
    if not (args.build_default or args.list):
        p.error("choose --build-default or --list")


if __name__ == "__main__":
    main()
