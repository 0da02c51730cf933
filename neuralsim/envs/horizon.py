"""The horizon ``gym.make`` gives an env: the step at which its ``TimeLimit`` wrapper truncates.

Both DROID envs score the whole episode once, on its last step, so each must know which step that is.
Gymnasium 1.x hands ``gym.make(id, max_episode_steps=N)`` (and the registered ``max_episode_steps`` when N is
not given) only to the ``TimeLimit`` wrapper it puts around the env: ``env.unwrapped.spec.max_episode_steps``
stays None (https://github.com/Farama-Foundation/Gymnasium/issues/871) and no public API passes the number
inward.  What ``gym.make`` does do is set the env's ``spec`` just before it adds that wrapper.  The envs'
``spec`` setters call :func:`time_limit_of_make`, which reads, from that ``gym.make`` call, the horizon its
``TimeLimit`` is about to get; the env then truncates and scores at the same step.

A ``TimeLimit`` applied by hand (``TimeLimit(SimDROIDEnv(), 50)``) stays invisible to the env: give the env
the same ``max_episode_steps`` instead.  ``gym.make_vec`` with the vector entry point passes
``max_episode_steps`` to the vector env's constructor, so it needs none of this.
"""

from __future__ import annotations

import sys


def time_limit_of_make(depth: int = 2) -> int | None:
    """The ``max_episode_steps`` of the ``TimeLimit`` that ``gym.make`` is about to wrap around the env it makes.

    ``depth`` frames up from here must be that ``gym.make`` call (2: the caller of the function calling this,
    i.e. of a ``spec`` setter).  Returns None when it is not ``gym.make`` (the env was made directly, or its spec
    is set by someone else) and when ``gym.make`` adds no ``TimeLimit`` (``max_episode_steps=-1``, or none given
    and none registered).  Mirrors ``gymnasium.make``: an explicit ``max_episode_steps`` wins over the
    registered one.
    """
    from gymnasium.envs import registration

    frame = sys._getframe(depth)
    if frame.f_code is not registration.make.__code__:
        return None
    local = frame.f_locals
    steps = local.get("max_episode_steps")
    if steps is None:
        steps = getattr(local.get("env_spec"), "max_episode_steps", None)
    if steps is None or steps == -1:
        return None
    return int(steps)


class HorizonFromMake:
    """Mixin for an env whose ``spec`` setter takes the horizon of ``gym.make``'s ``TimeLimit``.

    ``gym.make`` sets the spec right before it wraps the env in ``TimeLimit(N)``; the setter passes N to the env's
    ``_set_horizon``, so the episode is scored on the step the wrapper truncates.
    """

    _spec = None

    @property
    def spec(self):
        """The env's ``EnvSpec`` (set by ``gym.make``; None when made directly)."""
        return self._spec

    @spec.setter
    def spec(self, value) -> None:
        self._spec = value
        steps = time_limit_of_make()  # depth 2: this setter's caller, gym.make
        if steps is not None:
            self._set_horizon(steps)

    def _set_horizon(self, steps: int) -> None:
        raise NotImplementedError
