"""Gymnasium environments: ``SimDROID-v0`` and ``SimDROID-v1`` (MuJoCo; the classic and the legible scene) and
``NeuralDROID-v0`` (world model).

Both are registered with lazy entry points, so ``import neuralsim`` stays cheap (no MuJoCo, no torch).

Both are registered with ``disable_env_checker=True``: ``gym.make`` does not wrap them in gymnasium's
``PassiveEnvChecker``. In gymnasium 1.4.0 that wrapper breaks an env whose *first* ``reset`` raised (a mistyped
episode or task name): it marks reset as checked before the call, and the next valid reset is then followed by
``TypeError: cannot unpack non-iterable NoneType object`` on the first ``step``. The test suite runs gymnasium's
full ``check_env`` on both environments instead; ``gym.make(..., disable_env_checker=False)`` still adds the
passive checker for whoever wants it.
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
            disable_env_checker=True,
        )
    if "SimDROID-v1" not in gym.registry:
        gym.register(
            id="SimDROID-v1",
            entry_point="neuralsim.envs.sim_droid:SimDROIDEnv",
            kwargs={"scene": "legible"},
            max_episode_steps=DEFAULT_MAX_EPISODE_STEPS,
            disable_env_checker=True,
        )
    if "NeuralDROID-v0" not in gym.registry:
        gym.register(
            id="NeuralDROID-v0",
            entry_point="neuralsim.envs.neural_droid:NeuralDROIDEnv",
            vector_entry_point="neuralsim.envs.neural_droid:NeuralDROIDVectorEnv",
            max_episode_steps=DEFAULT_MAX_EPISODE_STEPS,
            disable_env_checker=True,
        )
