"""Machinery shared by the failure-perturbation wrappers: arguments, windows, triggers, seeding, offsets.

A perturbation wrapper sits between a policy and a DROID environment (``SimDROID-v0`` or
``NeuralDROID-v0``) and corrupts the 8-d action on its way in.  This module holds what every family
needs; the six families and the registry live in :mod:`neuralsim.wrappers.perturbations`.

Time.  ``t`` counts the steps since ``reset``.  A family's *window* ``(start, end)`` is given as
fractions of the horizon ``T`` (the env spec's ``max_episode_steps`` unless ``horizon`` is passed) and
covers the steps ``floor(start T) <= k < floor(end T)`` of a clock ``k`` that starts at its *anchor*:

* ``trigger="reset"``: ``k = t``, the clock starts at reset (MiraBench's phases);
* ``trigger="grasp"``: ``k = t - t_grasp`` where ``t_grasp`` is the first step whose gripper command
  *from the policy* is at least :data:`GRASP_THRESHOLD` (0.5, half closed).  Before that step the window
  is closed; a policy that starts with the gripper closed (the pushing expert) has ``t_grasp = 0``; a
  policy that never closes it is never perturbed.  Only the policy's own action stream is read, never
  the observation, so the trigger is identical in SimDROID and in the world model.

Joint offsets.  Families that bend the arm (wrist tilt, oscillation, overshoot) describe their effect
as a joint-*position* offset ``delta`` relative to a base command, and :class:`JointOffset` realises it
in either action mode: in ``joint_position`` mode the offset is added to the absolute targets; in
``joint_velocity`` mode the wrapper adds the velocity ``(delta - realised) / REALISED_STEP_PER_V`` that
closes the gap through DROID's calibrated response (0.0527 rad of joint motion per unit command per
step), clipped so the total command stays in [-1, 1], and books what it added as realised.  An offset
therefore takes several steps to build up (at most ~0.053 rad per joint per step, DROID's own speed
limit) and, once built, persists without further commands: nothing is undone behind the policy's back.

Excursions.  A closed-loop policy corrects any offset it can see before it commits to a grasp or a
release, so the families that must survive a closed loop (wrist tilt, overshoot) strike at the commit
itself: :class:`Excursion` suspends the policy's arm, drives the offset and holds the gripper command
until it is realised, then lets the switch through.  These families read the observed
``joint_position`` (overshoot: for forward kinematics; wrist tilt in position mode: as the frozen
target), which both DROID environments provide.

Seeding.  :attr:`PerturbationWrapper.perturbation_rng` is ``default_rng(SeedSequence(seed,
spawn_key=(crc32(name),)))`` at every ``reset(seed=seed)``: a stream of its own, so the wrapped env's
``np_random`` (the world model's noise) is untouched and a clean and a perturbed rollout with the same
seed differ only by the perturbation.  ``reset()`` without a seed continues the stream.
"""

from __future__ import annotations

import copy
import math
import zlib
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from .. import kinematics as K
from ..envs.sim_droid import ACTION_MODES, REALISED_STEP_PER_V

#: Gripper command (0 open ... 1 closed) from which the policy is taken to be grasping.
GRASP_THRESHOLD = 0.5
#: How a window's clock starts: at reset, or at the policy's first gripper close.
TRIGGERS = ("reset", "grasp")
#: Fraction of a commanded joint-position step the arm realises in one 1/15 s control period
#: (DROID's calibration: 0.0527 realised of the 0.2 rad asked for per unit velocity command).
POSITION_STEP_FRACTION = REALISED_STEP_PER_V / K.MAX_JOINT_DELTA


def check_severity(severity: Any) -> float:
    """``severity`` as a float in [0, 1]; ``ValueError`` quoting it otherwise."""
    if isinstance(severity, (bool, np.bool_)) or not isinstance(severity, (int, float, np.integer, np.floating)):
        raise ValueError(f"severity must be a number in [0, 1], got {severity!r}")
    s = float(severity)
    if not 0.0 <= s <= 1.0:  # False for NaN too
        raise ValueError(f"severity must be in [0, 1] (0 = no perturbation, 0.5 = MiraBench's), got {severity!r}")
    return s


def check_fraction_pair(window: Any, what: str = "window") -> tuple[float, float]:
    """``(start, end)`` fractions of the horizon with ``0 <= start < end <= 1``."""
    try:
        start, end = (float(x) for x in window)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a pair (start, end) of fractions of the horizon, got {window!r}") from None
    if not (math.isfinite(start) and math.isfinite(end)):
        raise ValueError(f"{what} must be finite fractions of the horizon, got {window!r}")
    if not 0.0 <= start < end <= 1.0:
        reason = "empty" if start == end else ("inverted" if start > end else "outside [0, 1]")
        raise ValueError(f"{what} {window!r} is {reason}: need 0 <= start < end <= 1 (fractions of the horizon)")
    return start, end


def check_positive_fraction(value: Any, what: str) -> float:
    """A fraction in (0, 1]."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number in (0, 1], got {value!r}") from None
    if not 0.0 < v <= 1.0:
        raise ValueError(f"{what} must be in (0, 1], got {value!r}")
    return v


def resolve_horizon(env: gym.Env, horizon: Any) -> int:
    """The explicit ``horizon``, else the spec's ``max_episode_steps``, else the env's own attribute."""
    if horizon is None:
        spec = getattr(env, "spec", None)
        horizon = getattr(spec, "max_episode_steps", None) if spec is not None else None
        if horizon is None:
            horizon = getattr(env.unwrapped, "max_episode_steps", None)
        if horizon is None:
            raise ValueError("the phase window needs the episode horizon: the env has no max_episode_steps "
                             "(make it with gym.make, or pass horizon=<steps>)")
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
        raise ValueError(f"horizon must be a positive number of steps, got {horizon!r}")
    return int(horizon)


def resolve_action_mode(env: gym.Env, action_mode: str | None) -> str:
    """``joint_velocity`` or ``joint_position``: given, read from the env, or inferred from its bounds."""
    if action_mode is None:
        action_mode = getattr(env.unwrapped, "action_mode", None)
    if action_mode is None:
        low, high = env.action_space.low[:7], env.action_space.high[:7]
        action_mode = "joint_velocity" if np.all(low == -1.0) and np.all(high == 1.0) else "joint_position"
    if action_mode not in ACTION_MODES:
        raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {action_mode!r}")
    return action_mode


class JointOffset:
    """Realises a joint-position offset on top of a base arm command, in either action mode.

    ``apply(base, delta)`` returns the arm command (7,) whose effect is the base command's plus the
    offset ``delta`` [rad]; ``realised`` books how much of the offset the arm has been asked to make so
    far (velocity mode: through the calibrated response; position mode: the same calibration applied
    to the step towards the target, ~26% of the remaining gap per step).  Pure: the caller commits the
    returned ``realised``.
    """

    def __init__(self, action_mode: str, low: np.ndarray, high: np.ndarray):
        self.action_mode = action_mode
        self.low, self.high = np.asarray(low[:7], float), np.asarray(high[:7], float)

    def apply(self, base: np.ndarray, delta: np.ndarray, realised: np.ndarray,
              joints: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(command, realised) for the arm joints ``joints`` (all seven by default)."""
        low, high = (self.low, self.high) if joints is None else (self.low[joints], self.high[joints])
        if self.action_mode == "joint_velocity":
            out = np.clip(base + (delta - realised) / REALISED_STEP_PER_V, low, high)
            return out, realised + REALISED_STEP_PER_V * (out - base)
        out = np.clip(base + delta, low, high)
        step = np.clip(out - base - realised, -K.MAX_JOINT_DELTA, K.MAX_JOINT_DELTA)
        return out, realised + POSITION_STEP_FRACTION * step


class Excursion:
    """An arm excursion that the policy's next gripper switch has to wait for.

    Families that strike at the moment a grasp (or release) is committed use it: the policy's arm
    commands are suspended and the arm is driven by ``delta`` [rad] from where it is (``"moving"``),
    the gripper command held at its previous value until the offset is realised (within 0.01 rad) or
    ``max_hold`` steps have passed; then the gripper command passes while the arm stays put for
    ``switch_steps`` steps (``"switching"``), and the policy gets the arm back (``"idle"``).  The state
    is a plain dict kept in the family's per-episode state.
    """

    def __init__(self, offset: JointOffset, max_hold: int, switch_steps: int):
        for label, v in (("max_hold", max_hold), ("switch_steps", switch_steps)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"{label} must be a non-negative number of steps, got {v!r}")
        self.offset, self.max_hold, self.switch_steps = offset, int(max_hold), int(switch_steps)

    @staticmethod
    def initial() -> dict[str, Any]:
        return {"phase": "idle", "delta": None, "base": None, "realised": np.zeros(7), "count": 0, "grip": 0.0}

    def start(self, ex: dict[str, Any], delta: np.ndarray, base: np.ndarray, grip: float) -> None:
        """Begin: ``base`` is the frozen arm command (zeros in velocity mode, the current joint
        positions in position mode), ``grip`` the gripper command to hold meanwhile."""
        ex.update(phase="moving", delta=np.asarray(delta, float), base=np.asarray(base, float),
                  realised=np.zeros(7), count=0, grip=float(grip))

    def apply(self, a: np.ndarray, ex: dict[str, Any]) -> bool:
        """Rewrite ``a`` in place for this step; True while the excursion is on."""
        if ex["phase"] == "idle":
            return False
        a[:7], ex["realised"] = self.offset.apply(ex["base"], ex["delta"], ex["realised"])
        ex["count"] += 1
        if ex["phase"] == "moving":
            a[7] = ex["grip"]
            if np.max(np.abs(ex["delta"] - ex["realised"])) < 0.01 or ex["count"] >= self.max_hold:
                ex.update(phase="switching", count=0)
        elif ex["count"] >= self.switch_steps:
            ex["phase"] = "idle"
        return True


def flange_shift(q: np.ndarray, shift: np.ndarray, iterations: int = 6, damping: float = 0.02) -> np.ndarray:
    """Joint displacement that moves the flange by ``shift`` [m] (base frame) and keeps its orientation.

    Damped least squares on the numerical Jacobian of :func:`neuralsim.kinematics.flange_transforms`,
    iterated (Gauss-Newton) so shifts of 10-20 cm land within millimetres.
    """
    q = np.asarray(q, float)
    T0 = K.flange_transforms(q)
    goal_p, goal_R = T0[:3, 3] + shift, T0[:3, :3]
    eps = 1e-6
    x = q.copy()
    for _ in range(iterations):
        T = K.flange_transforms(np.vstack([x, x + eps * np.eye(7)]))  # (8, 4, 4)
        p, R = T[0, :3, 3], T[0, :3, :3]
        jp = (T[1:, :3, 3] - p) / eps  # (7, 3)
        dR = np.einsum("ji,njk->nik", R, T[1:, :3, :3])  # R^T R_i, (7, 3, 3)
        jr = np.stack([dR[:, 2, 1] - dR[:, 1, 2], dR[:, 0, 2] - dR[:, 2, 0], dR[:, 1, 0] - dR[:, 0, 1]], 1) / (2 * eps)
        J = np.vstack([jp.T, R @ jr.T])  # (6, 7): position, then orientation in the base frame
        E = goal_R @ R.T
        err = np.concatenate([goal_p - p, 0.5 * np.array([E[2, 1] - E[1, 2], E[0, 2] - E[2, 0], E[1, 0] - E[0, 1]])])
        x = x + J.T @ np.linalg.solve(J @ J.T + damping ** 2 * np.eye(6), err)
    return x - q


class PerturbationWrapper(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """Base class of the failure-perturbation families (see :mod:`neuralsim.wrappers.perturbations`).

    Subclasses set :attr:`name`, :attr:`default_window`, :attr:`default_trigger` and implement
    :meth:`_perturb`.  The base class validates arguments, keeps the clock and the grasp trigger, seeds
    :attr:`perturbation_rng` from the reset seed, passes the policy's action down a stack of
    perturbation wrappers (so every trigger reads the policy's stream, not a perturbed one) and appends
    this wrapper's entry to ``info["perturbation"]`` (a list, innermost wrapper first) on reset and step:
    ``{"name", "severity", "step", "active", "changed", "trigger_step"}`` where ``step`` counts the
    steps taken since reset, ``active`` says the
    family's effect phase is on at this step, ``changed`` whether the action that reached the env
    differs from the one received, and ``trigger_step`` is the anchor of the window (0 for
    ``trigger="reset"``, the grasp onset for ``"grasp"``, None before it).
    """

    name: ClassVar[str] = ""
    default_window: ClassVar[tuple[float, float]] = (0.0, 1.0)
    default_trigger: ClassVar[str] = "reset"
    #: SimDROID task families on which the family must make the task fail (its "affordance", as in
    #: MiraBench's per-task schedule); on the others it is still applied and measured.
    task_families: ClassVar[tuple[str, ...]] = ()

    def __init__(self, env: gym.Env, severity: float = 0.5, window: tuple[float, float] | None = None,
                 trigger: str | None = None, horizon: int | None = None, action_mode: str | None = None):
        gym.utils.RecordConstructorArgs.__init__(self, severity=severity, window=window, trigger=trigger,
                                                 horizon=horizon, action_mode=action_mode)
        gym.ActionWrapper.__init__(self, env)
        self.severity = check_severity(severity)
        self.window = check_fraction_pair(self.default_window if window is None else window)
        trigger = self.default_trigger if trigger is None else trigger
        if trigger not in TRIGGERS:
            raise ValueError(f"trigger must be one of {TRIGGERS}, got {trigger!r}")
        self.trigger = trigger
        space = env.action_space
        if not isinstance(space, gym.spaces.Box) or space.shape != (8,):
            raise ValueError(f"perturbations need DROID's 8-d Box action space, got {space!r}")
        self.horizon = resolve_horizon(env, horizon)
        self.action_mode = resolve_action_mode(env, action_mode)
        self.lo = int(math.floor(self.window[0] * self.horizon))
        self.hi = int(math.floor(self.window[1] * self.horizon))
        if self.hi <= self.lo:
            raise ValueError(f"window {self.window!r} covers no step of a {self.horizon}-step horizon")
        self._low, self._high = space.low.astype(float), space.high.astype(float)
        self._offset = JointOffset(self.action_mode, self._low, self._high)
        self._seed_key = zlib.crc32(self.name.encode())
        self.perturbation_rng: np.random.Generator | None = None
        self.last_action: np.ndarray | None = None
        self.last_observation: Any = None
        self._t, self._grasp_step, self._active, self._changed = 0, None, False, False
        self._family_state: dict[str, Any] | None = None  # set at reset

    # ------------------------------------------------------------------ for subclasses
    def _initial_state(self) -> dict[str, Any]:
        """Per-episode state of the family (fresh copy at every reset)."""
        return {}

    def _on_reset(self, state: dict[str, Any]) -> None:
        """Draw the episode's random quantities from :attr:`perturbation_rng` into ``state``."""

    def _perturb(self, a: np.ndarray, policy: np.ndarray, k: int | None, in_window: bool,
                 state: dict[str, Any]) -> tuple[np.ndarray, bool]:
        """(action to send, whether the effect phase is on).  ``a`` is the incoming action (float64
        copy), ``policy`` the policy's own action, ``k`` the window clock (None before the anchor).
        Update ``state`` in place; it is committed only when the step is taken."""
        raise NotImplementedError

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self.perturbation_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(self._seed_key,)))
        elif self.perturbation_rng is None:
            self.perturbation_rng = np.random.default_rng(np.random.SeedSequence(spawn_key=(self._seed_key,)))
        self._t, self._grasp_step, self._active, self._changed = 0, None, False, False
        self.last_action = None
        self._family_state = self._initial_state()
        self._on_reset(self._family_state)
        obs, info = self.env.reset(seed=seed, options=options)
        self.last_observation = obs
        return obs, self._add_info(info)

    def action(self, action):
        """The action this wrapper would send at the current step (does not advance its state)."""
        return self._advance(action, action)[0]

    def step(self, action):
        return self._step_with_policy(action, action)

    def _step_with_policy(self, action, policy_action):
        out, (t, grasp, active, changed, state) = self._advance(action, policy_action)
        self._t, self._grasp_step, self._active, self._changed, self._family_state = t, grasp, active, changed, state
        self.last_action = out
        if isinstance(self.env, PerturbationWrapper):
            obs, reward, terminated, truncated, info = self.env._step_with_policy(out, policy_action)
        else:
            obs, reward, terminated, truncated, info = self.env.step(out)
        self.last_observation = obs
        return obs, reward, terminated, truncated, self._add_info(info)

    def _joint_position(self, a: np.ndarray) -> np.ndarray:
        """The arm's joint positions: observed if the observation has them, else (position mode) the
        incoming targets."""
        obs = self.last_observation
        if isinstance(obs, dict) and "joint_position" in obs:
            return np.asarray(obs["joint_position"], float)
        return np.asarray(a[:7], float)

    # ------------------------------------------------------------------ internals
    def _advance(self, action, policy_action):
        a_in = np.asarray(action)
        a = np.array(a_in, dtype=float)
        p = np.asarray(policy_action, dtype=float)
        if a.shape != (8,) or p.shape != (8,):
            raise ValueError(f"action must have shape (8,) (7 arm + gripper), got {a.shape}")
        if self._family_state is None:
            raise RuntimeError("call reset() before step() or action()")
        t, grasp = self._t, self._grasp_step
        if grasp is None and p[7] >= GRASP_THRESHOLD:
            grasp = t
        anchor = 0 if self.trigger == "reset" else grasp
        k = None if anchor is None else t - anchor
        in_window = k is not None and self.lo <= k < self.hi
        state = copy.deepcopy(self._family_state)
        if self.severity == 0.0:
            return a_in, (t + 1, grasp, False, False, state)
        out, active = self._perturb(a.copy(), p, k, in_window, state)
        changed = bool(np.any(out != a))
        if not changed:
            return a_in, (t + 1, grasp, bool(active), False, state)
        out = np.clip(out, self._low, self._high).astype(self.action_space.dtype)
        return out, (t + 1, grasp, bool(active), changed, state)

    def _add_info(self, info: dict[str, Any]) -> dict[str, Any]:
        info = dict(info)
        anchor = 0 if self.trigger == "reset" else self._grasp_step
        entry = {"name": self.name, "severity": self.severity, "step": self._t, "active": self._active,
                 "changed": self._changed, "trigger_step": anchor}
        info["perturbation"] = [*info.get("perturbation", []), entry]
        return info

    def __repr__(self) -> str:
        return (f"<{type(self).__name__}(severity={self.severity}, window={self.window}, "
                f"trigger={self.trigger!r}){self.env}>")
