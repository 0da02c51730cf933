"""Gymnasium environments: ``SimDROID-v0`` (MuJoCo) and ``NeuralDROID-v0`` (world model).

Both are registered with lazy entry points, so ``import neuralsim`` stays cheap (no MuJoCo, no torch).
"""

from __future__ import annotations

#: Default horizon (steps at 15 Hz) of both environments.
DEFAULT_MAX_EPISODE_STEPS = 150


def register_envs() -> None:
    """Register the environments with Gymnasium (idempotent)."""
    import gymnasium as gym

    if "SimDROID-v0" not in gym.registry:
        gym.register(
            id="SimDROID-v0",
            entry_point="neuralsim.envs.sim_droid:SimDROIDEnv",
            max_episode_steps=DEFAULT_MAX_EPISODE_STEPS,
        )
    if "NeuralDROID-v0" not in gym.registry:
        gym.register(
            id="NeuralDROID-v0",
            entry_point="neuralsim.envs.neural_droid:NeuralDROIDEnv",
            vector_entry_point="neuralsim.envs.neural_droid:NeuralDROIDVectorEnv",
            max_episode_steps=DEFAULT_MAX_EPISODE_STEPS,
        )
