"""The ``Policy`` protocol and chunked, open-loop execution of its action chunks in an env.

A policy sees DROID observations and answers with an **action chunk**: a float32 array (H, 8) of
H future actions, each 7 joint commands (normalised joint velocities in [-1, 1], or absolute joint
positions in ``action_mode="joint_position"``) then the gripper position in [0, 1] (1 closed).
Like openpi's DROID runtime, the chunk is executed **open loop**: the first ``replan_every`` actions
(8 of a 10-15 step chunk for pi0 / pi0-FAST) go to the env one per 1/15 s step before the policy is
queried again.  :class:`ChunkedController` does that bookkeeping; :func:`run_episode` runs one whole
episode with it and returns an :class:`EpisodeResult`::

    env = gym.make("SimDROID-v0")
    result = run_episode(env, make_policy("noisy-0.3", env=env), seed=0)
    result.info["rubric_level"], result.episode.num_frames

Errors a caller may want to catch are defined here so that importing them stays cheap:
:class:`UnknownPolicyError`, :class:`MissingDependencyError`, :class:`PolicyOutputError`,
:class:`ActionModeMismatchError`.
"""

from __future__ import annotations

import importlib
import logging
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

log = logging.getLogger(__name__)

#: Width of one DROID action: 7 joint commands + gripper position.
ACTION_DIM = 8
#: What the first 7 numbers of an action mean (the env's ``action_mode``).
ACTION_MODES = ("joint_velocity", "joint_position")
#: Actions of each chunk executed before re-querying (openpi's DROID ``open_loop_horizon``).
DEFAULT_REPLAN_EVERY = 8
#: The pip extra that carries the websocket clients' and server's dependencies.
PIP_EXTRA = "policies"


class UnknownPolicyError(ValueError):
    """A policy name :func:`policies.make_policy` does not know."""


class MissingDependencyError(ImportError):
    """An optional dependency of a policy adapter is not installed; the message names the pip extra."""


class PolicyOutputError(ValueError):
    """A policy (or a policy server) returned something that is not an (H, 8) action chunk."""


class ActionModeMismatchError(ValueError):
    """A policy's action space differs from the env's ``action_mode``."""


@runtime_checkable
class Policy(Protocol):
    """What every policy implements.

    ``reset(instruction)`` starts an episode (called after ``env.reset``); ``infer(observation)``
    returns an action chunk (H, 8) float32 for the observation dict (DROID's keys:
    ``exterior_image_1_left``, ``exterior_image_2_left``, ``wrist_image_left``, ``joint_position``,
    ``gripper_position``, ``cartesian_position``).

    Optional attributes read by :func:`run_episode`: ``action_mode`` (one of :data:`ACTION_MODES`;
    checked against the env's) and ``close()``.
    """

    def reset(self, instruction: str) -> None: ...

    def infer(self, observation: dict[str, np.ndarray]) -> np.ndarray: ...


def require(module: str, purpose: str) -> ModuleType:
    """Import an optional dependency or raise :class:`MissingDependencyError` naming the pip extra."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        raise MissingDependencyError(
            f"{purpose} needs the optional dependency {top!r}, which is not installed ({e}); "
            f"install it with: pip install 'neuralsim[{PIP_EXTRA}]'") from e


def as_action_chunk(actions: Any, source: str = "policy") -> np.ndarray:
    """Validate a policy output and return it as a fresh float32 array (H, 8).

    A single action (8,) becomes a chunk of one.  Raises :class:`PolicyOutputError` quoting the bad
    shape, an empty chunk, or non-finite values.
    """
    try:
        a = np.array(actions, dtype=np.float32)  # a copy: chunks from the wire are read-only
    except (TypeError, ValueError) as e:
        raise PolicyOutputError(f"{source} returned {type(actions).__name__}, not a numeric array "
                                f"(H, {ACTION_DIM}): {e}") from e
    if a.ndim == 1 and a.shape == (ACTION_DIM,):
        a = a[None]
    if a.ndim != 2 or a.shape[1] != ACTION_DIM or a.shape[0] == 0:
        raise PolicyOutputError(f"{source} returned an array of shape {a.shape}; an action chunk must be "
                                f"(H, {ACTION_DIM}) with H >= 1 (7 joint commands + gripper per row)")
    if not np.all(np.isfinite(a)):
        bad = np.argwhere(~np.isfinite(a))[0].tolist()
        raise PolicyOutputError(f"{source} returned a non-finite action chunk (first at row/column {bad})")
    return a


def _check_replan_every(replan_every: int | None) -> int | None:
    if replan_every is None:
        return None
    if isinstance(replan_every, bool) or not isinstance(replan_every, (int, np.integer)) or replan_every < 1:
        raise ValueError(f"replan_every must be a positive int or None (execute whole chunks), got {replan_every!r}")
    return int(replan_every)


@runtime_checkable
class TargetTracking(Protocol):
    """A policy whose chunks are goals it can re-aim at from each new observation (a Cartesian visuomotor or flow
    checkpoint): ``tracks_targets`` says whether its chunks can be tracked, ``track(observation, k)`` returns the
    action (8,) for step ``k`` of the last ``infer``'s chunk from the arm as observed now."""

    tracks_targets: bool

    def track(self, observation: dict[str, np.ndarray], k: int) -> np.ndarray: ...


class ChunkedController:
    """Turns a chunk-returning :class:`Policy` into one action per step.

    The policy is queried when the current chunk is used up; of each chunk of H actions the first
    ``min(replan_every, H)`` are executed (``replan_every=None``: all H, as RoboArena does).  They are executed
    open loop, except for a :class:`TargetTracking` policy with ``track=True``: its steps after the first come from
    ``policy.track(observation, k)``, the chunk's k-th goal reached from the arm as observed at that step.  On
    SimDROID-v1's held-out episodes that lifts a flow checkpoint trained on 617 demonstrations from 16% to 26% (90
    episodes; a Cartesian visuomotor checkpoint from 16% to 18%): the open-loop plan assumes an arm that moves each
    joint exactly as commanded, and drifts off the path.  A policy behind openpi's wire is tracked when its server
    sends the goals (our
    :class:`~policies.server.PolicyServer` does, and :class:`~policies.openpi_client.OpenPIClient` reads them);
    otherwise its planned actions run open loop.

    Args:
        policy: any :class:`Policy`.
        replan_every: actions executed per chunk before re-querying (openpi DROID: 8).
        track: track the goals of a :class:`TargetTracking` policy (False: execute its planned chunk open loop).

    Attributes:
        num_queries: ``infer`` calls since the last :meth:`reset`.
        infer_seconds: wall time spent in ``infer`` (and ``track``) since the last :meth:`reset`.
        last_chunk: the latest chunk (H, 8) as returned (validated), or None.
        tracking: whether steps come from ``policy.track``.
    """

    def __init__(self, policy: Policy, replan_every: int | None = DEFAULT_REPLAN_EVERY, track: bool = True):
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must implement reset(instruction) and infer(observation) (the Policy "
                            f"protocol), got {type(policy).__name__}")
        self.policy = policy
        self.replan_every = _check_replan_every(replan_every)
        self.tracking = bool(track) and isinstance(policy, TargetTracking) and bool(policy.tracks_targets)
        self.num_queries = 0
        self.infer_seconds = 0.0
        self.last_chunk: np.ndarray | None = None
        self._next = self._stop = 0

    def reset(self, instruction: str) -> None:
        """Drop any pending actions and reset the policy for a new episode."""
        self.policy.reset(instruction)
        self.num_queries, self.infer_seconds = 0, 0.0
        self.last_chunk, self._next, self._stop = None, 0, 0

    @property
    def pending(self) -> int:
        """Actions of the current chunk still to execute before the next query."""
        return self._stop - self._next

    def act(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        """The next action (8,) float32: from the current chunk, or from a new query if it is used up."""
        if self._next >= self._stop:
            t0 = time.perf_counter()
            raw = self.policy.infer(observation)
            self.infer_seconds += time.perf_counter() - t0
            chunk = as_action_chunk(raw, f"{type(self.policy).__name__}.infer")
            self.num_queries += 1
            self.last_chunk = chunk
            self._next = 0
            self._stop = len(chunk) if self.replan_every is None else min(self.replan_every, len(chunk))
        elif self.tracking:  # the first step of a chunk is planned from this very observation: nothing to re-aim
            t0 = time.perf_counter()
            action = as_action_chunk(self.policy.track(observation, self._next),
                                     f"{type(self.policy).__name__}.track")[0]
            self.infer_seconds += time.perf_counter() - t0
            self._next += 1
            return action
        action = self.last_chunk[self._next].copy()
        self._next += 1
        return action


# ----------------------------------------------------------------------------- episodes
def env_action_mode(env: Any) -> str | None:
    """The env's ``action_mode`` (``"joint_velocity"`` / ``"joint_position"``), or None if unknown.

    Read from the unwrapped env's ``action_mode`` attribute, else inferred from the action space
    (joint velocities are bounded by [-1, 1], joint positions by the joint limits).
    """
    base = getattr(env, "unwrapped", env)
    mode = getattr(base, "action_mode", None)
    if mode in ACTION_MODES:
        return mode
    space = getattr(env, "action_space", None)
    low, high = getattr(space, "low", None), getattr(space, "high", None)
    if low is None or np.shape(low) != (ACTION_DIM,):
        return None
    if np.allclose(low[:7], -1.0) and np.allclose(high[:7], 1.0):
        return "joint_velocity"
    return "joint_position"


def check_action_mode(env: Any, policy: Any) -> None:
    """Raise :class:`ActionModeMismatchError` if the policy declares an action mode the env does not use."""
    inner = policy.policy if isinstance(policy, ChunkedController) else policy
    wanted = getattr(inner, "action_mode", None)
    have = env_action_mode(env)
    if wanted is not None and have is not None and wanted != have:
        raise ActionModeMismatchError(
            f"{type(inner).__name__} outputs {wanted!r} actions but the env uses action_mode={have!r}; "
            f"make the env with action_mode={wanted!r} (e.g. gym.make('SimDROID-v0', action_mode={wanted!r}))")


def _horizon(env: Any) -> int | None:
    spec = getattr(env, "spec", None)
    steps = getattr(spec, "max_episode_steps", None)
    if steps is None:
        steps = getattr(getattr(env, "unwrapped", env), "max_episode_steps", None)
    return None if steps is None else int(steps)


@dataclass
class EpisodeResult:
    """What :func:`run_episode` returns.

    Attributes:
        episode: the env's record of the episode (``env.unwrapped.episode()``: frames, states, applied
            actions, instruction) or None if the env keeps none.
        info: the ``info`` of the last step (SimDROID: ground truth such as ``rubric_level``; at the
            episode's end ``judgement`` when a judge scored it).
        reward: sum of the step rewards (the envs give their score once, on the last step; NaN if a
            judge failed).
        steps: steps taken.
        terminated, truncated: how the episode ended (both False if ``max_steps`` stopped it first).
        actions: (steps, 8) float32, the actions sent to ``env.step`` (before the env's clipping).
        instruction: the instruction the policy was given.
        num_queries: policy ``infer`` calls.
        infer_seconds: wall time spent in ``infer``.
        error: None for an episode that ran; for the partial episode :func:`run_episode` attaches to an
            exception that stopped it (``err.partial_episode``), that exception as ``"Type: message"``.
    """

    episode: Any
    info: dict[str, Any]
    reward: float
    steps: int
    terminated: bool
    truncated: bool
    actions: np.ndarray
    instruction: str
    num_queries: int
    infer_seconds: float
    error: str | None = None


def run_episode(env: Any, policy: Policy | ChunkedController, max_steps: int | None = None,
                replan_every: int | None = DEFAULT_REPLAN_EVERY, *, track: bool = True, seed: int | None = None,
                options: dict[str, Any] | None = None, instruction: str | None = None,
                callback: Callable[[int, dict, float, dict], None] | None = None) -> EpisodeResult:
    """Reset ``env``, then step it with ``policy``'s chunks until it ends or ``max_steps`` steps pass.

    Args:
        env: a Gymnasium env with DROID's spaces (``SimDROID-v0``, ``NeuralDROID-v0``, wrapped or not).
        policy: a :class:`Policy` (wrapped in a :class:`ChunkedController`) or a controller.
        max_steps: step budget; None runs until the env terminates or truncates (its horizon).
            Stopping before the env's own end means its end-of-episode reward is never computed.
        replan_every: actions executed per chunk before re-querying (ignored for a controller).
        track: track the chunk's goals step by step for a policy that can (:class:`ChunkedController`; ignored for
            a controller).
        seed, options: passed to ``env.reset``.
        instruction: overrides ``info["instruction"]`` from the reset.
        callback: ``callback(step, obs, reward, info)`` after every step.

    Raises:
        whatever the policy, the env or ``callback`` raises mid-episode (a policy server that went away:
        :class:`~policies.openpi_client.PolicyConnectionError`), with the episode so far attached as
        ``err.partial_episode``: an :class:`EpisodeResult` of the steps taken (the env's record with the frames
        so far, the actions sent, the policy's query count and time, ``error`` naming the exception), so that a
        benchmark can record the failed episode.
    """
    controller = policy if isinstance(policy, ChunkedController) else ChunkedController(policy, replan_every, track)
    check_action_mode(env, controller)
    limit = _horizon(env) if max_steps is None else int(max_steps)
    if limit is None:
        raise ValueError("the env has no max_episode_steps; pass max_steps=...")
    if limit < 0:
        raise ValueError(f"max_steps must be >= 0, got {max_steps}")
    obs, info = env.reset(seed=seed, options=options)
    text = instruction if instruction is not None else info.get("instruction")
    if not isinstance(text, str):
        raise ValueError(f"the env's reset info has no 'instruction' (keys {sorted(info)}); pass instruction=...")
    controller.reset(text)
    reward, steps, terminated, truncated, actions = 0.0, 0, False, False, []

    def result(error: BaseException | None = None) -> EpisodeResult:
        base = getattr(env, "unwrapped", env)
        record = base.episode() if callable(getattr(base, "episode", None)) else None
        return EpisodeResult(
            episode=record, info=dict(info), reward=reward, steps=steps, terminated=bool(terminated),
            truncated=bool(truncated),
            actions=np.stack(actions) if actions else np.zeros((0, ACTION_DIM), np.float32),
            instruction=text, num_queries=controller.num_queries, infer_seconds=controller.infer_seconds,
            error=None if error is None else f"{type(error).__name__}: {error}")

    try:
        while steps < limit and not (terminated or truncated):
            action = controller.act(obs)
            obs, r, terminated, truncated, info = env.step(action)
            reward += float(r)
            actions.append(action)
            steps += 1
            if callback is not None:
                callback(steps, obs, float(r), info)
    except Exception as e:
        try:
            e.partial_episode = result(e)
        except Exception as inner:  # noqa: BLE001 -- the env cannot give its record; the original error matters
            log.warning("could not record the partial episode: %s: %s", type(inner).__name__, inner)
        raise
    return result()
