"""The action adapter: DROID actions -> next joint state, calibrated against SimDROID.

A DROID joint-velocity action ``v`` in [-1, 1] asks for a joint step of ``MAX_JOINT_DELTA * v`` =
0.2 v rad per 1/15 s, but the arm's impedance controller realises only part of it (about 0.053 v at a
steady command, less on the first step after rest).  Integrating ``0.2 v`` (or ``v`` as rad/s) would
move NeuralDROID's arm 4x too far, so the adapter integrates a small linear model of the controller.

Model (per joint, all joints share the coefficients; numpy, batched over N environments)::

    u_t  = clip(q_t + 0.2 v_t, q_low, q_high) - q_t          # commanded step, as SimDROID targets it
    dq_t = a dq_{t-1} + b u_t + c u_{t-1}                     # realised step
    q_{t+1} = clip(q_t + dq_t, q_low, q_high)                 # dq_t is then the clipped step
    g_{t+1} = p g_t + (1 - p) g*_t                            # gripper follows its command g*

Why this form: SimDROID's controller is a computed-torque PD law, a linear second-order system per
joint.  Sampled every 1/15 s, its realised step obeys exactly ``dq_t = a dq_{t-1} + b u_t + c u_{t-1}``
(eliminate the hidden joint velocity from the two-state discrete system), so three numbers describe it
and they can be fitted from joint positions alone, in SimDROID and on real DROID logs.  ``joint_position``
actions ``q*`` enter the same way with ``u_t = clip(q_t + clip(q* - q_t, -0.2, 0.2), q_low, q_high) - q_t``
(SimDROID's rule).  The gripper is a first-order lag fitted on the same rollouts.

Calibration (reproduce :data:`CALIBRATED` and the errors quoted below)::

    python -m neuralsim.envs.adapter --calibrate            # ~1 min: SimDROID rollouts, least squares
    python -m neuralsim.envs.adapter --evaluate             # open-loop errors, SimDROID + real DROID

Fitted on 24 SimDROID rollouts of 100 steps with smooth random actions (seeds 0-23, robust least
squares): steady step 0.0531 rad per unit v, first step after rest 0.0441.  Open-loop error after 100
steps (``--evaluate``; :data:`MEASURED_ERRORS`), mean |joint error| / flange position error:

=====================  ======================  ========================
data                   adapter                 naive ``q += 0.2 v``
=====================  ======================  ========================
SimDROID (held out)    7.7e-5 rad / 0.07 mm    0.46 rad / 0.45 m
real DROID sample      0.19 rad / 0.22 m       0.86 rad / 0.55 m
=====================  ======================  ========================

On real DROID no linear model does better open loop (one fitted to the real data itself: 0.21 rad /
0.22 m); the real arm's response varies between episodes.  NeuralDROID is trained on SimDROID, so the
adapter follows SimDROID.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import kinematics as K

log = logging.getLogger(__name__)

ACTION_MODES = ("joint_velocity", "joint_position")


@dataclass(frozen=True)
class AdapterCoefficients:
    """Constants of the adapter's linear controller model (see the module docstring)."""

    a: float
    """Carry-over of the previous realised joint step."""
    b: float
    """Fraction of the commanded step realised in the same 1/15 s."""
    c: float
    """Effect of the previous commanded step."""
    gripper_pole: float
    """Per-step pole p of the gripper's first-order lag toward its command."""

    @property
    def steady_gain(self) -> float:
        """Realised / commanded step for a constant command: (b + c) / (1 - a)."""
        return (self.b + self.c) / (1.0 - self.a)


#: Fitted by ``python -m neuralsim.envs.adapter --calibrate`` (SimDROID, seeds 0-23, 100 steps each).
CALIBRATED = AdapterCoefficients(a=-0.0405, b=0.2207, c=0.0557, gripper_pole=0.4088)

#: Open-loop errors of :data:`CALIBRATED` after 100 steps, from ``--evaluate`` (mean over rollouts /
#: real episodes; "naive" integrates the full 0.2 v step).  Joint error: mean |q - q_true| over the 7
#: joints [rad]; flange error: |xyz - xyz_true| [m].
MEASURED_ERRORS: dict[str, dict[str, float]] = {
    # 16 held-out SimDROID rollouts (seeds 100-115), smooth random actions, contacts included.
    "simdroid": {"joint_rad": 7.7e-5, "flange_m": 6.6e-5, "naive_joint_rad": 0.465, "naive_flange_m": 0.445},
    # 62 windows of 100 steps (stride 25) from the 11 real episodes; their joints move 0.43 rad on
    # average over a window.  A model fitted to the real windows themselves does no better (0.21 rad,
    # 0.22 m): the residual is episode-to-episode variation of the real arm's response (its realised
    # step per unit v ranges 0.041-0.070 between episodes) plus a one-step observation lag, not a
    # calibration error.
    "droid_real": {"joint_rad": 0.190, "flange_m": 0.216, "naive_joint_rad": 0.864, "naive_flange_m": 0.548},
}


@dataclass
class AdapterState:
    """Joint state of N environments (float64 numpy arrays)."""

    joint_position: np.ndarray  # (N, 7) rad
    gripper_position: np.ndarray  # (N, 1) in [0, 1]
    last_step: np.ndarray  # (N, 7) realised joint step of the previous action (0 after reset)
    last_command: np.ndarray  # (N, 7) commanded joint step of the previous action (0 after reset)

    @classmethod
    def at_rest(cls, joint_position, gripper_position) -> "AdapterState":
        q = np.atleast_2d(np.asarray(joint_position, np.float64))
        g = np.asarray(gripper_position, np.float64).reshape(q.shape[0], 1)
        if q.shape[1:] != (7,):
            raise ValueError(f"joint_position must be (N, 7), got {q.shape}")
        return cls(q.copy(), g.copy(), np.zeros_like(q), np.zeros_like(q))

    def rows(self, idx) -> "AdapterState":
        return AdapterState(*(x[idx].copy() for x in self._arrays()))

    def set_rows(self, idx, other: "AdapterState") -> None:
        for mine, theirs in zip(self._arrays(), other._arrays()):
            mine[idx] = theirs

    def copy(self) -> "AdapterState":
        return AdapterState(*(x.copy() for x in self._arrays()))

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return self.joint_position, self.gripper_position, self.last_step, self.last_command


def commanded_step(q: np.ndarray, arm_action: np.ndarray, action_mode: str) -> np.ndarray:
    """The joint step SimDROID's controller targets, ``u = clip(target, limits) - q``; (N, 7)."""
    if action_mode == "joint_velocity":
        target = q + K.MAX_JOINT_DELTA * arm_action
    elif action_mode == "joint_position":
        target = q + np.clip(arm_action - q, -K.MAX_JOINT_DELTA, K.MAX_JOINT_DELTA)
    else:
        raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {action_mode!r}")
    return np.clip(target, K.JOINT_LIMITS_LOW, K.JOINT_LIMITS_HIGH) - q


def advance(state: AdapterState, actions: np.ndarray, action_mode: str = "joint_velocity",
            coefficients: AdapterCoefficients = CALIBRATED) -> tuple[AdapterState, np.ndarray]:
    """One 1/15 s step of every row; a pure function (``state`` is not modified).

    Args:
        state: current joint state of N rows.
        actions: (N, 8) actions already inside the action space (7 arm entries, then gripper in [0, 1]).
    Returns:
        (next state, (N, 7) bool: joints stopped by a position limit this step).
    """
    actions = np.asarray(actions, np.float64)
    q = state.joint_position
    if actions.shape != (q.shape[0], 8):
        raise ValueError(f"actions must be ({q.shape[0]}, 8), got {actions.shape}")
    co = coefficients
    u = commanded_step(q, actions[:, :7], action_mode)
    dq = co.a * state.last_step + co.b * u + co.c * state.last_command
    free = q + dq
    q_next = np.clip(free, K.JOINT_LIMITS_LOW, K.JOINT_LIMITS_HIGH)
    hit_limit = q_next != free
    nxt = AdapterState(q_next, _gripper_step(state.gripper_position, actions[:, 7:8], co.gripper_pole), q_next - q, u)
    return nxt, hit_limit


def gripper_trajectory(g0: float, commands: np.ndarray, coefficients: AdapterCoefficients = CALIBRATED) -> np.ndarray:
    """The gripper state :func:`advance` gives NeuralDROID from ``g0`` under ``commands`` (T,) in [0, 1]: (T + 1,).

    The env cannot know when an object stops the fingers, so its gripper follows the command alone: a grasped
    cube reads 1.0 here where SimDROID measures ~0.35.  A world model with ``gripper_conditioning="command"``
    is trained on this signal, computed from each recorded episode's gripper commands.
    """
    commands = np.clip(np.asarray(commands, np.float64).reshape(-1), 0.0, 1.0)
    out = np.empty(len(commands) + 1)
    out[0] = np.clip(g0, 0.0, 1.0)
    for t, cmd in enumerate(commands):
        out[t + 1] = _gripper_step(out[t], cmd, coefficients.gripper_pole)
    return out


def arm_trajectory(q0: np.ndarray, arm_actions: np.ndarray, action_mode: str = "joint_velocity",
                   coefficients: AdapterCoefficients = CALIBRATED) -> np.ndarray:
    """The joints :func:`advance` gives NeuralDROID from ``q0`` (7,) at rest under ``arm_actions`` (T, 7): (T + 1, 7).

    The env cannot know when the table or a pushed object holds the arm back, so its arm follows the actions
    alone; a closed-loop policy that keeps pushing moves it on where a real arm stops.  A world model with
    ``arm_conditioning="replay"`` is trained on the forward kinematics of this trajectory, computed from each
    recorded episode's actions.
    """
    q0 = np.asarray(q0, np.float64).reshape(-1)
    arm_actions = np.asarray(arm_actions, np.float64)
    if q0.shape != (7,) or arm_actions.ndim != 2 or arm_actions.shape[1] != 7:
        raise ValueError(f"arm_trajectory needs q0 (7,) and arm_actions (T, 7), got {q0.shape} and {arm_actions.shape}")
    actions = np.concatenate([arm_actions, np.zeros((len(arm_actions), 1))], 1)[None]
    return rollout(q0[None], np.zeros((1, 1)), actions, action_mode, coefficients)[0][0]


def _gripper_step(g, command, pole: float):
    """The gripper's first-order lag towards its command, one step, kept in [0, 1]."""
    return np.clip(pole * g + (1.0 - pole) * command, 0.0, 1.0)


def rollout(q0: np.ndarray, g0: np.ndarray, actions: np.ndarray, action_mode: str = "joint_velocity",
            coefficients: AdapterCoefficients = CALIBRATED) -> tuple[np.ndarray, np.ndarray]:
    """Open-loop joint and gripper trajectories: q0 (N, 7), g0 (N, 1), actions (N, T, 8) -> (N, T+1, 7), (N, T+1, 1)."""
    state = AdapterState.at_rest(q0, g0)
    qs, gs = [state.joint_position], [state.gripper_position]
    for t in range(actions.shape[1]):
        state, _ = advance(state, actions[:, t], action_mode, coefficients)
        qs.append(state.joint_position)
        gs.append(state.gripper_position)
    return np.stack(qs, 1), np.stack(gs, 1)


# ---------------------------------------------------------------------------------------------- calibration
def smooth_random_actions(rng: np.random.Generator, q: np.ndarray, v_prev: np.ndarray) -> np.ndarray:
    """Next arm command of the calibration policy: an Ornstein-Uhlenbeck velocity pulled to the reset pose."""
    pull = np.clip((K.RESET_JOINT_POSITION - q) / 1.0, -0.5, 0.5)
    return np.clip(0.8 * v_prev + 0.2 * pull + 0.3 * rng.normal(size=7), -1.0, 1.0)


def simdroid_rollouts(seeds, steps: int = 100) -> dict[str, np.ndarray]:
    """Joint/gripper trajectories of SimDROID under the calibration policy: q (E, T+1, 7), g, actions (E, T, 8)."""
    from .sim_droid import SimDROIDEnv

    env = SimDROIDEnv(reward_fn=None)
    Q, G, A = [], [], []
    try:
        for seed in seeds:
            obs, _ = env.reset(seed=int(seed))
            rng = np.random.default_rng([int(seed), 7])
            q = obs["joint_position"].astype(np.float64)
            qs, gs, acts = [q], [obs["gripper_position"].astype(np.float64)], []
            v, grip = np.zeros(7), 0.0
            for _ in range(steps):
                v = smooth_random_actions(rng, q, v)
                if rng.random() < 0.08:
                    grip = 1.0 - grip
                a = np.append(v, grip)
                obs, *_ = env.step(a)
                q = obs["joint_position"].astype(np.float64)
                qs.append(q)
                gs.append(obs["gripper_position"].astype(np.float64))
                acts.append(a)
            Q.append(qs), G.append(gs), A.append(acts)
    finally:
        env.close()
    return {"q": np.array(Q), "g": np.array(G), "actions": np.array(A)}


def _robust_lstsq(X: np.ndarray, y: np.ndarray, rounds: int = 3, k: float = 4.0) -> np.ndarray:
    """Least squares that drops samples with residual > k x RMS (contacts, limits) and refits."""
    keep = np.ones(len(y), bool)
    for _ in range(rounds):
        coef = np.linalg.lstsq(X[keep], y[keep], rcond=None)[0]
        r = y - X @ coef
        keep = np.abs(r) <= k * np.sqrt(np.mean(r[keep] ** 2)) + 1e-12
    return coef


def fit(data: dict[str, np.ndarray]) -> AdapterCoefficients:
    """Least-squares fit of (a, b, c) and the gripper pole from trajectories (as :func:`simdroid_rollouts`)."""
    q, g, act = data["q"], data["g"], data["actions"]
    dq = np.diff(q, axis=1)  # (E, T, 7)
    u = commanded_step(q[:, :-1].reshape(-1, 7), act[..., :7].reshape(-1, 7), "joint_velocity").reshape(dq.shape)
    prev = lambda x: np.concatenate([np.zeros_like(x[:, :1]), x[:, :-1]], 1)  # noqa: E731
    X = np.stack([prev(dq), u, prev(u)], -1).reshape(-1, 3)
    a, b, c = _robust_lstsq(X, dq.reshape(-1))
    # gripper: g_{t+1} - g* = p (g_t - g*)
    err_now, err_next = (g[:, :-1, 0] - act[..., 7]).ravel(), (g[:, 1:, 0] - act[..., 7]).ravel()
    moving = np.abs(err_now) > 0.05
    p = float(np.dot(err_now[moving], err_next[moving]) / np.dot(err_now[moving], err_now[moving]))
    return AdapterCoefficients(*(round(float(x), 4) for x in (a, b, c)), gripper_pole=round(p, 4))


NAIVE = AdapterCoefficients(a=0.0, b=1.0, c=0.0, gripper_pole=0.0)
"""Integrates the full commanded step 0.2 v (what not to do; shown for scale)."""


def open_loop_errors(q_true: np.ndarray, q0: np.ndarray, g0: np.ndarray, actions: np.ndarray,
                     coefficients: AdapterCoefficients, horizon: int = 100) -> dict[str, float]:
    """Errors of an open-loop adapter rollout after ``horizon`` steps (means over rows)."""
    q_hat, _ = rollout(q0, g0, actions[:, :horizon], coefficients=coefficients)
    qt = q_true[:, : horizon + 1]
    joint = np.abs(q_hat - qt).mean(-1)  # (N, T+1)
    flange = np.linalg.norm(K.forward_kinematics(q_hat)[..., :3] - K.forward_kinematics(qt)[..., :3], axis=-1)
    return {
        "joint_rad_at_horizon": float(joint[:, -1].mean()),
        "joint_rad_mean_over_horizon": float(joint.mean()),
        "flange_m_at_horizon": float(flange[:, -1].mean()),
        "flange_m_mean_over_horizon": float(flange.mean()),
        "flange_m_max_at_horizon": float(flange[:, -1].max()),
        "rows": int(q0.shape[0]),
        "horizon": int(horizon),
    }


def default_droid_dir() -> Path:
    """The real DROID sample: ``$NEURALSIM_DROID_REAL`` or ``../shared/data/droid_real`` beside the checkout."""
    env = os.environ.get("NEURALSIM_DROID_REAL")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "data" / "droid_real"


def droid_windows(directory: str | os.PathLike, horizon: int = 100, stride: int = 25) -> dict[str, np.ndarray]:
    """All ``horizon``-step windows (every ``stride`` steps) of the real DROID sample's annotation files."""
    files = sorted(Path(directory).glob("annotation/*/*.json"))
    if not files:
        raise FileNotFoundError(f"no DROID annotation files under {directory}/annotation/*/*.json")
    Q, G, A = [], [], []
    for f in files:
        d = json.loads(f.read_text())
        q = np.asarray(d["observation.state.joint_position"], np.float64)
        g = np.asarray(d["observation.state.gripper_position"], np.float64).reshape(-1, 1)
        act = np.concatenate([np.asarray(d["action.joint_velocity"], np.float64),
                              np.asarray(d["action.gripper_position"], np.float64).reshape(-1, 1)], 1)
        for s in range(0, len(q) - horizon, stride):
            Q.append(q[s: s + horizon + 1]), G.append(g[s: s + horizon + 1]), A.append(act[s: s + horizon])
    return {"q": np.array(Q), "g": np.array(G), "actions": np.clip(np.array(A), [-1] * 7 + [0], 1)}


def evaluate(coefficients: AdapterCoefficients = CALIBRATED, seeds=range(100, 116), horizon: int = 100,
             droid_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """Open-loop errors over ``horizon`` steps on held-out SimDROID rollouts and on the real DROID sample."""
    out: dict[str, Any] = {"coefficients": asdict(coefficients), "steady_gain": coefficients.steady_gain}
    sim = simdroid_rollouts(seeds, horizon)
    droid_dir = default_droid_dir() if droid_dir is None else Path(droid_dir)
    datasets = {"simdroid": sim}
    if droid_dir.is_dir():
        datasets["droid_real"] = droid_windows(droid_dir, horizon)
    else:
        log.warning("real DROID sample not found at %s; skipping it", droid_dir)
    for name, d in datasets.items():
        q0, g0 = d["q"][:, 0], d["g"][:, 0]
        out[name] = {label: open_loop_errors(d["q"], q0, g0, d["actions"], co, horizon)
                     for label, co in (("adapter", coefficients), ("naive_0.2v", NAIVE))}
        g_hat = rollout(q0, g0, d["actions"], coefficients=coefficients)[1]
        out[name]["adapter"]["gripper_mae"] = float(np.abs(g_hat - d["g"]).mean())
    return out


def main(argv: list[str] | None = None) -> None:
    """``python -m neuralsim.envs.adapter --calibrate | --evaluate``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calibrate", action="store_true", help="fit the coefficients on SimDROID rollouts")
    p.add_argument("--evaluate", action="store_true", help="open-loop errors over --horizon steps")
    p.add_argument("--episodes", type=int, default=24, help="calibration rollouts (seeds 0..N-1)")
    p.add_argument("--horizon", type=int, default=100)
    p.add_argument("--droid-dir", default=None, help="real DROID sample (default: %(default)s -> ../shared/...)")
    args = p.parse_args(argv)
    if not (args.calibrate or args.evaluate):
        p.error("choose --calibrate and/or --evaluate")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    co = CALIBRATED
    if args.calibrate:
        co = fit(simdroid_rollouts(range(args.episodes), args.horizon))
        print(f"CALIBRATED = {co!r}")
        print(f"steady gain {co.steady_gain:.4f} -> {co.steady_gain * K.MAX_JOINT_DELTA:.4f} rad per unit v; "
              f"first step after rest {co.b * K.MAX_JOINT_DELTA:.4f} rad per unit v")
    if args.evaluate:
        print(json.dumps(evaluate(co, horizon=args.horizon, droid_dir=args.droid_dir), indent=2))


if __name__ == "__main__":
    main()
