"""Scripted baselines of graded skill: SimDROID's privileged expert behind the :class:`Policy` protocol.

:class:`ScriptedPolicy` wraps :class:`neuralsim.envs.experts.ScriptedExpert`, which reads the
simulator's state (object poses, the tool point, MuJoCo's Jacobian) rather than the images, so it
only works in ``SimDROID-v0`` and never in ``NeuralDROID-v0``.  It still acts only through the 8-d
DROID action, so its actions can be recorded and replayed anywhere (see :mod:`policies.replay`).

Skill is graded by the std of Gaussian noise added to the normalised arm command and, optionally, by
one of the expert's failure modes.  Named baselines (:data:`SCRIPTED_BASELINES`, usable with
:func:`policies.make_policy`): ``"expert"`` (no noise) and ``"noisy-<std>"`` for any std in [0, 1],
e.g. ``"noisy-0.3"``.  The expert answers with a chunk of one action (it is closed loop), so it
is re-queried every step whatever ``replan_every`` is.
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)

#: Named scripted baselines, most to least skilled: name -> noise std.
SCRIPTED_BASELINES = {"expert": 0.0, "noisy-0.1": 0.1, "noisy-0.3": 0.3, "noisy-0.6": 0.6}


def noise_from_name(name: str) -> float:
    """``"expert"`` -> 0.0, ``"noisy-0.3"`` -> 0.3; ValueError for anything else."""
    if name == "expert":
        return 0.0
    if name.startswith("noisy-"):
        try:
            noise = float(name[len("noisy-"):])
        except ValueError:
            noise = float("nan")
        if 0.0 <= noise <= 1.0:
            return noise
    raise ValueError(f"not a scripted baseline name: {name!r}; use 'expert' or 'noisy-<std>' with std in [0, 1] "
                     f"(e.g. {', '.join(SCRIPTED_BASELINES)})")


class ScriptedPolicy:
    """SimDROID's scripted expert as a :class:`~policies.base.Policy` (privileged, SimDROID only).

    Args:
        env: the ``SimDROID-v0`` env it will act in (wrapped or not); it reads that env's state, so
            it must be the env that :func:`~policies.base.run_episode` steps.
        noise: std of Gaussian noise on the normalised arm command, in [0, 1].
        failure: None or one of :data:`neuralsim.envs.experts.FAILURE_MODES` (a corrupted plan).
        seed: seed of the noise generator (one generator over all episodes).

    Raises:
        TypeError: ``env`` is not a SimDROID env (e.g. ``NeuralDROID-v0``, which has no privileged state).
    """

    action_mode = "joint_velocity"

    def __init__(self, env, noise: float = 0.0, failure: str | None = None, seed: int | None = None):
        from neuralsim.envs.sim_droid import SimDROIDEnv

        base = getattr(env, "unwrapped", env)
        if not isinstance(base, SimDROIDEnv):
            raise TypeError(f"ScriptedPolicy needs a SimDROID-v0 env (it reads the simulator's privileged state), "
                            f"got {type(base).__name__}; for NeuralDROID-v0 record the expert in SimDROID and "
                            f"replay its actions (policies.replay.ReplayPolicy)")
        from neuralsim.envs.experts import ScriptedExpert

        self.env = base
        self.expert = ScriptedExpert(base, noise=noise, failure=failure, seed=seed)
        self.noise, self.failure = float(noise), failure

    @property
    def done(self) -> bool:
        """The expert finished its plan (it then holds its last waypoint)."""
        return self.expert.done

    def reset(self, instruction: str) -> None:
        """Plan for the episode the env was just reset to (call after ``env.reset``)."""
        self.expert.reset()
        if instruction != self.env.spec_task.instruction:
            log.warning("ScriptedPolicy was given %r but the env's task is %r; the expert follows the env's task",
                        instruction, self.env.spec_task.instruction)

    def infer(self, observation: dict) -> np.ndarray:
        """One action (1, 8) from the expert's current phase (the observation is not used)."""
        return self.expert.act(observation)[None]
