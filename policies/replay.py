"""Open-loop replay of recorded actions.

:class:`ReplayPolicy` answers every query with the next rows of a recorded (T, 8) action array,
ignoring the observation.  Sources: an array, an :class:`~neuralsim.episode.Episode` (its applied
actions), a ``.npy`` / ``.npz`` file (key ``actions``), or episode ``index`` of a dataset written by
``neuralsim data generate`` (read with :mod:`neuralsim.data.reader`).

Replaying a SimDROID episode in SimDROID from the same seed reproduces it exactly (MuJoCo is
deterministic); replaying it in NeuralDROID from the same start shows what the world model makes of
the same actions.

Each query returns ``horizon`` rows and moves the cursor past all of them, so with ``horizon > 1``
use ``replan_every >= horizon`` (or ``None``) or rows are skipped; the default ``horizon=1`` is
exact with any ``replan_every``.  After the recording ends the policy holds still
(``on_end="hold"``: zero joint velocity or the last joint target, last gripper) or raises
(``on_end="error"``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .base import ACTION_DIM, ACTION_MODES, as_action_chunk

log = logging.getLogger(__name__)

ON_END = ("hold", "error")


class ReplayExhausted(IndexError):
    """The recording has no more actions and ``on_end="error"``."""


def _load_actions(source: Any) -> tuple[np.ndarray, str | None, dict]:
    """(actions, instruction, metadata) from an array, an Episode or a file."""
    from neuralsim.episode import Episode

    if isinstance(source, Episode):
        return source.actions, source.instruction, dict(source.metadata)
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no action file {str(path)!r}; "
                                    "for a dataset use ReplayPolicy.from_dataset(root, index)")
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False), None, {"path": str(path)}
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                if "actions" not in z:
                    raise KeyError(f"{str(path)!r} has no 'actions' array (keys {sorted(z)})")
                return z["actions"], None, {"path": str(path)}
        raise ValueError(f"action file must be .npy or .npz, got {str(path)!r}")
    return source, None, {}


class ReplayPolicy:
    """Replays recorded actions open loop.

    Args:
        actions: (T, 8) array, an :class:`~neuralsim.episode.Episode`, or a ``.npy`` / ``.npz`` path.
        horizon: rows per returned chunk.
        action_mode: what the recorded joint commands are (checked against the env by ``run_episode``).
        on_end: ``"hold"`` or ``"error"`` once the recording is used up.

    Attributes:
        instruction: the recording's instruction when known (an Episode or dataset), else None.
        metadata: where the actions came from (an Episode's metadata includes SimDROID's ``seed``).
        cursor: index of the next row to replay.
    """

    def __init__(self, actions: Any, horizon: int = 1, action_mode: str = "joint_velocity", on_end: str = "hold"):
        if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise ValueError(f"horizon must be a positive int, got {horizon!r}")
        if action_mode not in ACTION_MODES:
            raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {action_mode!r}")
        if on_end not in ON_END:
            raise ValueError(f"on_end must be one of {ON_END}, got {on_end!r}")
        raw, self.instruction, self.metadata = _load_actions(actions)
        arr = np.asarray(raw)
        if arr.ndim != 2 or arr.shape[1] != ACTION_DIM or len(arr) == 0:
            raise ValueError(f"recorded actions must be (T, {ACTION_DIM}) with T >= 1, got shape {arr.shape}")
        self.actions = as_action_chunk(arr, "recorded actions")
        self.horizon, self.action_mode, self.on_end = int(horizon), action_mode, on_end
        self.cursor = 0

    @classmethod
    def from_dataset(cls, root: str | Path, index: int, **kwargs) -> "ReplayPolicy":
        """Episode ``index`` of a dataset (SimDROID layout: 15 Hz, one action per step)."""
        from neuralsim.data.reader import read_episode

        episode = read_episode(root, index, image_size=16)  # the frames are not used: decode them small
        if abs(episode.fps - 15.0) > 1e-6:
            log.warning("episode %d of %s is recorded at %.3g fps, not the envs' 15 Hz: its actions will replay "
                        "at the wrong rate", index, root, episode.fps)
        policy = cls(episode, **kwargs)
        policy.metadata.update(dataset=str(root), episode_index=int(index))
        return policy

    def __len__(self) -> int:
        return len(self.actions)

    def reset(self, instruction: str) -> None:
        """Rewind to the first recorded action."""
        self.cursor = 0
        if self.instruction and instruction != self.instruction:
            log.warning("replaying actions recorded for %r in an episode asking %r", self.instruction, instruction)

    def _hold(self) -> np.ndarray:
        last = self.actions[-1].copy()
        if self.action_mode == "joint_velocity":
            last[:7] = 0.0
        return np.repeat(last[None], self.horizon, axis=0)

    def infer(self, observation: dict | None = None) -> np.ndarray:
        """The next ``horizon`` recorded rows (fewer at the end), then the hold action."""
        if self.cursor >= len(self.actions):
            if self.on_end == "error":
                raise ReplayExhausted(f"all {len(self.actions)} recorded actions were replayed (on_end='error')")
            return self._hold()
        chunk = self.actions[self.cursor:self.cursor + self.horizon].copy()
        self.cursor += len(chunk)
        return chunk


def make_replay(actions: Any = None, *, dataset: str | Path | None = None, index: int | None = None,
                **kwargs) -> ReplayPolicy:
    """Factory behind ``make_policy("replay", ...)``: ``actions=`` or ``dataset=`` + ``index=``."""
    if (actions is None) == (dataset is None):
        raise TypeError("make_policy('replay') needs exactly one source: actions=<array | Episode | .npy/.npz path> "
                        "or dataset=<dataset dir> with index=<episode index>")
    if dataset is not None:
        if index is None:
            raise TypeError("make_policy('replay', dataset=...) needs index=<episode index>")
        return ReplayPolicy.from_dataset(dataset, index, **kwargs)
    return ReplayPolicy(actions, **kwargs)
