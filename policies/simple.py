"""Baselines with no skill at all: :class:`ZeroPolicy` (stand still) and :class:`RandomPolicy`.

They bound a leaderboard from below and exercise the plumbing (chunking, servers) without a model.
Both work in either action mode: in ``"joint_position"`` mode "zero" means "hold the current joint
position" and "random" is a random walk around it (at most 0.2 rad per step, what the env allows).
"""

from __future__ import annotations

import numpy as np

from .base import ACTION_DIM, ACTION_MODES

#: Largest joint step [rad] per 1/15 s the envs accept in ``joint_position`` mode (DROID's 0.2 v).
MAX_JOINT_STEP = 0.2


def _check_common(horizon: int, action_mode: str) -> None:
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
        raise ValueError(f"horizon must be a positive int, got {horizon!r}")
    if action_mode not in ACTION_MODES:
        raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {action_mode!r}")


def _joint_position(observation: dict) -> np.ndarray:
    if "joint_position" not in observation:
        raise KeyError(f"joint_position mode needs observation['joint_position']; got keys {sorted(observation)}")
    return np.asarray(observation["joint_position"], np.float32).reshape(7)


class ZeroPolicy:
    """Does nothing: zero joint velocity (or the current joint position) and a fixed gripper.

    Args:
        gripper: gripper position to hold, 0 open ... 1 closed.
        horizon: rows per chunk.
        action_mode: ``"joint_velocity"`` or ``"joint_position"``.
    """

    def __init__(self, gripper: float = 0.0, horizon: int = 1, action_mode: str = "joint_velocity"):
        _check_common(horizon, action_mode)
        if not 0.0 <= gripper <= 1.0:
            raise ValueError(f"gripper must be in [0, 1], got {gripper}")
        self.gripper, self.horizon, self.action_mode = float(gripper), int(horizon), action_mode

    def reset(self, instruction: str) -> None:
        pass

    def infer(self, observation: dict) -> np.ndarray:
        chunk = np.zeros((self.horizon, ACTION_DIM), np.float32)
        if self.action_mode == "joint_position":
            chunk[:, :7] = _joint_position(observation)
        chunk[:, 7] = self.gripper
        return chunk


class RandomPolicy:
    """Uniformly random actions, deterministic given ``seed`` (over the sequence of calls).

    Joint velocities are drawn from [-scale, scale]; in ``joint_position`` mode each row moves the
    previous target by at most ``scale * 0.2`` rad per joint.  The gripper is drawn from [0, 1].

    Args:
        seed: seed of the generator.
        horizon: rows per chunk.
        scale: in (0, 1], how large the arm commands are.
        action_mode: ``"joint_velocity"`` or ``"joint_position"``.
    """

    def __init__(self, seed: int | None = None, horizon: int = 1, scale: float = 1.0,
                 action_mode: str = "joint_velocity"):
        _check_common(horizon, action_mode)
        if not 0.0 < scale <= 1.0:
            raise ValueError(f"scale must be in (0, 1], got {scale}")
        self.horizon, self.scale, self.action_mode = int(horizon), float(scale), action_mode
        self.rng = np.random.default_rng(seed)

    def reset(self, instruction: str) -> None:
        pass

    def infer(self, observation: dict) -> np.ndarray:
        u = self.rng.uniform(-self.scale, self.scale, (self.horizon, 7))
        if self.action_mode == "joint_position":
            u = _joint_position(observation) + np.cumsum(MAX_JOINT_STEP * u, axis=0)
        grip = self.rng.uniform(0.0, 1.0, (self.horizon, 1))
        return np.concatenate([u, grip], axis=1).astype(np.float32)
