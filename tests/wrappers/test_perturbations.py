"""Failure-perturbation wrappers: identity at s = 0, exact transformed actions, info, arguments, seeding."""

from __future__ import annotations

import doctest
import math
import re
import warnings
import zlib

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from neuralsim import kinematics as K
from neuralsim.envs.sim_droid import REALISED_STEP_PER_V
from neuralsim.wrappers import (
    PERTURBATIONS,
    ContactOscillation,
    GripCarrySlip,
    PerturbationWrapper,
    WristTiltGrasp,
    apply_perturbation,
    compose,
    make_perturbation,
)

HORIZON = 20
OPEN, CLOSED = 0.0, 1.0


class StubEnv(gym.Env):
    """DROID's action space, a joint-position observation, and a record of the actions that reached it.

    Joints integrate the calibrated velocity response (0.0527 rad per unit per step) or jump to the
    position targets; nothing else happens.
    """

    def __init__(self, action_mode: str = "joint_velocity", max_episode_steps: int | None = HORIZON):
        self.action_mode = action_mode
        if action_mode == "joint_velocity":
            self.action_space = spaces.Box(np.array([-1.0] * 7 + [0.0], np.float32), np.ones(8, np.float32))
        else:
            self.action_space = spaces.Box(np.append(K.JOINT_LIMITS_LOW, 0.0).astype(np.float32),
                                           np.append(K.JOINT_LIMITS_HIGH, 1.0).astype(np.float32))
        self.observation_space = spaces.Dict({"joint_position": spaces.Box(
            K.JOINT_LIMITS_LOW.astype(np.float32), K.JOINT_LIMITS_HIGH.astype(np.float32))})
        self.max_episode_steps = max_episode_steps
        self.received: list[np.ndarray] = []
        self.q = K.RESET_JOINT_POSITION.copy()

    def _obs(self):
        return {"joint_position": np.clip(self.q, K.JOINT_LIMITS_LOW, K.JOINT_LIMITS_HIGH).astype(np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.received, self.q = [], K.RESET_JOINT_POSITION.copy()
        return self._obs(), {}

    def step(self, action):
        self.received.append(np.array(action, copy=True))
        a = np.asarray(action, float)
        self.q = self.q + REALISED_STEP_PER_V * a[:7] if self.action_mode == "joint_velocity" else a[:7].copy()
        return self._obs(), 0.0, False, len(self.received) >= HORIZON, {}


def grasp_stream(n: int = HORIZON, close_at: int = 3, arm: float = 0.0) -> np.ndarray:
    """Policy actions: arm command ``arm`` on every joint, gripper open then closed from ``close_at``."""
    a = np.zeros((n, 8), np.float32)
    a[:, :7] = arm
    a[close_at:, 7] = CLOSED
    return a


def run(env: gym.Env, actions: np.ndarray, seed: int = 0):
    """Feed ``actions``; return (actions that reached the stub, list of info['perturbation'])."""
    env.reset(seed=seed)
    infos = [env.step(a)[4]["perturbation"] for a in actions]
    return np.stack(env.unwrapped.received), infos


# ---------------------------------------------------------------------------- identity at s = 0
@pytest.mark.parametrize("name", sorted(PERTURBATIONS))
@pytest.mark.parametrize("mode", ["joint_velocity", "joint_position"])
def test_zero_severity_is_identity(name, mode):
    rng = np.random.default_rng(1)
    stub = StubEnv(mode)
    actions = rng.uniform(stub.action_space.low, stub.action_space.high, (HORIZON, 8)).astype(np.float32)
    actions[:5, 7], actions[5:, 7] = 0.0, 1.0
    sent, infos = run(apply_perturbation(stub, name, severity=0.0), actions)
    assert sent.dtype == actions.dtype
    np.testing.assert_array_equal(sent, actions)
    assert not any(i[0]["active"] or i[0]["changed"] for i in infos)


# ---------------------------------------------------------------------------- exact sequences
def test_grip_force_weak_scales_the_gripper_by_one_minus_s_squared():
    actions = grasp_stream(arm=0.3)
    sent, infos = run(apply_perturbation(StubEnv(), "grip_force_weak", severity=0.5), actions)
    expected = actions.copy()
    expected[3:, 7] = 0.25
    np.testing.assert_array_equal(sent, expected)
    assert all(i[0]["active"] for i in infos)  # window (0, 1): the whole episode
    assert [i[0]["changed"] for i in infos] == [False] * 3 + [True] * (HORIZON - 3)


def test_premature_release_opens_the_gripper_in_a_window_after_the_grasp():
    # T = 20, window (0.10, 0.40) -> clock steps 2..7 after the grasp at t = 3 -> t = 5..10
    sent, infos = run(apply_perturbation(StubEnv(), "premature_release", severity=0.5), grasp_stream())
    grip = sent[:, 7]
    np.testing.assert_allclose(grip[5:11], 0.02, rtol=1e-6)
    np.testing.assert_array_equal(grip[:3], 0.0)
    np.testing.assert_array_equal(grip[[3, 4] + list(range(11, HORIZON))], 1.0)
    assert [t for t, i in enumerate(infos) if i[0]["active"]] == list(range(5, 11))
    assert {i[0]["trigger_step"] for i in infos[3:]} == {3} and infos[0][0]["trigger_step"] is None


def test_premature_release_never_fires_without_a_grasp():
    sent, infos = run(apply_perturbation(StubEnv(), "premature_release"), grasp_stream(close_at=HORIZON))
    np.testing.assert_array_equal(sent[:, 7], 0.0)
    assert not any(i[0]["active"] for i in infos)


def test_grip_carry_slip_loosens_linearly():
    # T = 20: window (0.05, 0.45) -> clock 1..8, ramp 0.1 T = 2 steps; grasp at t = 3 -> t = 4..11
    sent, _ = run(apply_perturbation(StubEnv(), "grip_carry_slip", severity=0.5), grasp_stream())
    expected = [0, 0, 0, 1, 0.5] + [0] * 7 + [1] * 8
    np.testing.assert_allclose(sent[:, 7], expected, atol=1e-7)
    sent, _ = run(apply_perturbation(StubEnv(), "grip_carry_slip", severity=0.25, ramp=0.2), grasp_stream())
    expected = [0, 0, 0, 1, 0.875, 0.75, 0.625] + [0.5] * 5 + [1] * 8  # 4-step ramp down to 1 - 2 s = 0.5
    np.testing.assert_allclose(sent[:, 7], expected, atol=1e-7)
    np.testing.assert_array_equal(sent[:, :7], 0.0)


def oscillation_phase(seed: int) -> float:
    ss = np.random.SeedSequence(seed, spawn_key=(zlib.crc32(b"contact_oscillation"),))
    return float(np.random.default_rng(ss).uniform(0.0, 2.0 * np.pi))


def test_contact_oscillation_position_mode_adds_the_tremor_to_the_targets():
    stub = StubEnv("joint_position")
    actions = np.tile(np.append(K.RESET_JOINT_POSITION, 0.0).astype(np.float32), (HORIZON, 1))
    env = ContactOscillation(stub, severity=0.5, amplitude=0.2, frequency=2.5)
    sent, infos = run(env, actions, seed=7)
    lo, hi = 2, 14  # window (0.10, 0.70) of 20 steps
    phase = oscillation_phase(7)
    pattern = np.array([1, -1, 1, -1, 1, -1, 1.0])
    for t in range(HORIZON):
        delta = 0.1 * math.sin(2 * math.pi * 2.5 / 15 * (t - lo) + phase) * pattern if lo <= t < hi else 0.0
        np.testing.assert_allclose(sent[t, :7], (K.RESET_JOINT_POSITION + delta).astype(np.float32), atol=1e-6)
    assert [i[0]["active"] for i in infos] == [lo <= t < hi for t in range(HORIZON)]


def test_contact_oscillation_velocity_mode_exact_sequence():
    sent, _ = run(ContactOscillation(StubEnv(), severity=0.5), np.zeros((HORIZON, 8), np.float32), seed=7)
    # regression values at seed 7 (A = 0.08 rad, 2.5 Hz, window steps 2-13): mostly DROID's speed limit
    expected_j0 = [0.0, 0.0, 1.0, 0.164951, -1.0, -1.0, -0.329902, 1.0, 1.0, 0.329902, -1.0, -1.0, -0.329902,
                   1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(sent[:, 0], expected_j0, atol=1e-5)
    np.testing.assert_allclose(sent[:, 1], -sent[:, 0], atol=1e-6)  # anti-phase neighbours
    realised = REALISED_STEP_PER_V * np.cumsum(sent[:14, 0])
    target = 0.08 * np.sin(2 * np.pi * 2.5 / 15 * np.arange(12) + oscillation_phase(7))
    np.testing.assert_allclose(realised[2:][np.abs(sent[2:14, 0]) < 1], target[np.abs(sent[2:14, 0]) < 1],
                               atol=1e-6)  # where the command is not clipped, the offset is exact


def test_wrist_tilt_velocity_mode_tilts_at_the_grasp_and_holds_the_wrist():
    policy = grasp_stream(n=40, arm=-0.4)  # a policy that keeps turning every joint the other way
    sent, infos = run(WristTiltGrasp(StubEnv(), severity=0.5, horizon=40), policy)
    np.testing.assert_array_equal(sent[:3], policy[:3])
    full = int(0.8 // REALISED_STEP_PER_V)  # 15 steps at +1 on joints 6 and 7, arm frozen, gripper open
    np.testing.assert_array_equal(sent[3:3 + full], np.tile([0, 0, 0, 0, 0, 1, 1, 0], (full, 1)))
    rest = (0.8 - full * REALISED_STEP_PER_V) / REALISED_STEP_PER_V
    np.testing.assert_allclose(sent[18], [0, 0, 0, 0, 0, rest, rest, 1], rtol=1e-5)  # the grasp closes
    np.testing.assert_array_equal(sent[19:21], np.tile([0, 0, 0, 0, 0, 0, 0, 1], (2, 1)))
    held = policy[21:37].copy()
    held[:, 5:7] = 0.0  # the policy has the arm back, but not the wrist
    np.testing.assert_array_equal(sent[21:37], held)
    np.testing.assert_array_equal(sent[37:], policy[37:])  # window (0, 0.85) of 40 after t = 3: no undo
    np.testing.assert_allclose(REALISED_STEP_PER_V * sent[3:37, 5:7].sum(0), 0.8, rtol=1e-6)
    assert [i[0]["active"] for i in infos] == [False] * 3 + [True] * 34 + [False] * 3


def test_wrist_tilt_position_mode_and_pushing():
    stub = StubEnv("joint_position")
    policy = np.tile(np.append(K.RESET_JOINT_POSITION, 0.0).astype(np.float32), (40, 1))
    policy[:, 6] = np.linspace(0.0, 0.5, 40)  # the policy turns joint 7; the held wrist ignores it
    policy[3:, 7] = CLOSED
    sent, _ = run(WristTiltGrasp(stub, severity=0.5, horizon=40), policy)
    q2 = policy[2, :7]  # where the stub's arm is when the grasp starts
    tilted = q2 + np.array([0, 0, 0, 0, 0, 0.8, 0.8], np.float32)
    np.testing.assert_allclose(sent[3:23], np.tile(np.append(tilted, 0.0), (20, 1)), atol=1e-6)  # max_hold
    np.testing.assert_allclose(sent[23:26], np.tile(np.append(tilted, 1.0), (3, 1)), atol=1e-6)
    np.testing.assert_allclose(sent[26:37, :5], policy[26:37, :5])
    np.testing.assert_allclose(sent[26:37, 5:7], np.tile(tilted[5:7], (11, 1)), atol=1e-6)
    np.testing.assert_array_equal(sent[37:], policy[37:])
    # pushing: the gripper is closed from the first step, so the wrist tilts at once and stays tilted
    sent, infos = run(WristTiltGrasp(StubEnv(), severity=0.25, horizon=40), grasp_stream(n=40, close_at=0))
    assert sent[0, 7] == 1.0 and sent[0, 5] == 1.0 and infos[0][0]["trigger_step"] == 0
    np.testing.assert_allclose(REALISED_STEP_PER_V * sent[:34, 5].sum(), 0.4, rtol=1e-6)


def flange(q):
    return K.flange_transforms(np.asarray(q, float))


def overshoot_steps(sent: np.ndarray, start: int, grip: float) -> int:
    """Number of steps from ``start`` during which the gripper command is held at ``grip``."""
    n = 0
    while sent[start + n, 7] == grip:
        n += 1
    return n


def test_approach_overshoot_drives_on_at_the_grasp_with_the_gripper_held_open():
    policy = np.zeros((HORIZON, 8), np.float32)
    policy[:10, [1, 3]] = 0.5, 0.8  # reach: shoulder and elbow forward for 10 steps (10 cm ahead)
    policy[10:, 7] = CLOSED
    policy[10:, 3] = -0.2  # the policy keeps a small arm command while grasping: suspended
    env = apply_perturbation(StubEnv(), "approach_overshoot", severity=0.5)
    sent, infos = run(env, policy)
    np.testing.assert_array_equal(sent[:10], policy[:10])
    q0, q10 = K.RESET_JOINT_POSITION, K.RESET_JOINT_POSITION + REALISED_STEP_PER_V * policy[:10, :7].sum(0)
    n = overshoot_steps(sent, 10, OPEN)  # gripper held open while the overshoot builds up
    assert 2 <= n <= 10
    q_over = q10 + REALISED_STEP_PER_V * sent[10:10 + n, :7].sum(0)
    travel = flange(q10)[:3, 3] - flange(q0)[:3, 3]
    moved = flange(q_over)[:3, 3] - flange(q10)[:3, 3]
    np.testing.assert_allclose(moved, 0.6 * travel * [1, 1, 0], atol=2e-3)  # 60% further, horizontally
    np.testing.assert_allclose(flange(q_over)[:3, :3], flange(q10)[:3, :3], atol=0.02)  # same orientation
    np.testing.assert_allclose(sent[10 + n:13 + n], np.tile([0, 0, 0, 0, 0, 0, 0, 1], (3, 1)), atol=0.2)
    np.testing.assert_array_equal(sent[13 + n:], policy[13 + n:])  # the policy has the arm back
    assert [i[0]["active"] for i in infos] == [False] * 10 + [True] * (n + 3) + [False] * (HORIZON - 13 - n)


def test_approach_overshoot_exact_sequence():
    policy = np.zeros((HORIZON, 8), np.float32)
    policy[:10, [1, 3]] = 0.5, 0.8
    policy[10:, 7] = CLOSED
    sent, _ = run(apply_perturbation(StubEnv(), "approach_overshoot", severity=0.5), policy)
    expected = np.array([  # regression at the defaults (gain 1.2): steps 10-16
        [0.0, 1.0, 0.0, 1.0, 0.0, 0.049686, 0.0, 0.0],  # overshoot, gripper held open
        [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
        [0.0, 0.506785, 0.0, 0.457099, 0.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],  # the grasp closes past the object
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]], np.float32)
    np.testing.assert_allclose(sent[10:17], expected, atol=1e-5)


def test_approach_overshoot_defers_the_release_past_the_goal():
    policy = np.zeros((HORIZON, 8), np.float32)
    policy[:10, 7] = CLOSED  # holding from the start (the switch at t = 0 has no travel behind it)
    policy[:10, 0] = 0.5  # transport: turn the base
    sent, _ = run(apply_perturbation(StubEnv(), "approach_overshoot", severity=0.5), policy)
    np.testing.assert_array_equal(sent[:10], policy[:10])
    n = overshoot_steps(sent, 10, CLOSED)  # still closed while the hand carries on
    assert n >= 2 and sent[10, 0] > 0.5  # on in the direction of the transport
    np.testing.assert_array_equal(sent[10 + n:13 + n, 7], 0.0)
    sent, _ = run(apply_perturbation(StubEnv(), "approach_overshoot", severity=0.5, window=(0.0, 0.45)), policy)
    np.testing.assert_array_equal(sent, policy)  # the release at t = 10 is after the window (9 steps)


def test_approach_overshoot_position_mode_and_pushing():
    stub = StubEnv("joint_position")
    q0 = np.append(K.RESET_JOINT_POSITION, 0.0).astype(np.float32)
    policy = np.tile(q0, (HORIZON, 1))
    policy[:10, 1] += np.linspace(0.0, 0.3, 10, dtype=np.float32)
    policy[10:, 1] += 0.3
    policy[10:, 7] = CLOSED
    sent, infos = run(apply_perturbation(stub, "approach_overshoot", severity=0.5), policy)
    q9 = policy[9, :7].astype(float)
    delta = sent[10, :7] - q9  # a constant target past the reach while the gripper is deferred
    travel = flange(q9)[:3, 3] - flange(q0[:7])[:3, 3]
    np.testing.assert_allclose(flange(q9 + delta)[:3, 3] - flange(q9)[:3, 3], 0.6 * travel * [1, 1, 0], atol=2e-3)
    n = overshoot_steps(sent, 10, OPEN)
    assert 2 <= n <= 10  # position targets realise ~26% of the remaining gap per step
    np.testing.assert_array_equal(sent[10:10 + n], np.tile(sent[10], (n, 1)))
    # a policy that starts with the gripper closed and keeps it (pushing) is never affected
    sent, infos = run(apply_perturbation(StubEnv(), "approach_overshoot"), grasp_stream(close_at=0, arm=0.5))
    np.testing.assert_array_equal(sent, grasp_stream(close_at=0, arm=0.5))
    assert not any(i[0]["changed"] for i in infos)
    flat = StubEnv()
    flat.observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    with pytest.raises(ValueError, match="joint_position"):
        apply_perturbation(flat, "approach_overshoot")


# ---------------------------------------------------------------------------- info, composition
def test_info_entry_content():
    env = apply_perturbation(StubEnv(), "premature_release", severity=0.4)
    _, info = env.reset(seed=0)
    assert info["perturbation"] == [{"name": "premature_release", "severity": 0.4, "step": 0, "active": False,
                                     "changed": False, "trigger_step": None}]
    for a in grasp_stream()[:6]:
        *_, info = env.step(a)
    entry = info["perturbation"][0]
    assert entry == {"name": "premature_release", "severity": 0.4, "step": 6, "active": True, "changed": True,
                     "trigger_step": 3}
    np.testing.assert_allclose(env.last_action[7], 1 - 1.96 * 0.4, rtol=1e-6)


def test_compose_lists_every_entry_and_triggers_read_the_policy_stream():
    # outer grip_force_weak turns the policy's 1.0 into 0.25 (< the 0.5 grasp threshold); the inner
    # premature_release must still see the policy's grasp at t = 3
    env = compose(StubEnv(), "premature_release", ("grip_force_weak", {"severity": 0.5}))
    sent, infos = run(env, grasp_stream())
    assert [e["name"] for e in infos[0]] == ["premature_release", "grip_force_weak"]
    np.testing.assert_allclose(sent[5:11, 7], 0.25 * 0.02, rtol=1e-6)
    np.testing.assert_allclose(sent[[3, 4, 11], 7], 0.25)
    assert infos[5][0]["active"] and infos[5][0]["trigger_step"] == 3
    factory = make_perturbation("contact_oscillation", severity=0.2)
    env = compose(StubEnv(), factory, "grip_force_weak")
    assert isinstance(env, PerturbationWrapper) and env.env.severity == 0.2


# ---------------------------------------------------------------------------- bad arguments
@pytest.mark.parametrize("kwargs, quoted", [
    ({"severity": -0.1}, "-0.1"), ({"severity": 1.5}, "1.5"), ({"severity": float("nan")}, "nan"),
    ({"severity": "0.5"}, "'0.5'"), ({"severity": True}, "True"),
    ({"window": (0.5, 0.5)}, "(0.5, 0.5)"), ({"window": (0.6, 0.2)}, "(0.6, 0.2)"),
    ({"window": (-0.1, 0.5)}, "(-0.1, 0.5)"), ({"window": (0.0, float("nan"))}, "(0.0, nan)"),
    ({"window": 0.5}, "0.5"), ({"trigger": "contact"}, "'contact'"), ({"horizon": 0}, "0"),
])
def test_bad_arguments_raise_quoting_the_value(kwargs, quoted):
    with pytest.raises(ValueError, match=re.escape(quoted)):
        apply_perturbation(StubEnv(), "premature_release", **kwargs)
    if "severity" in kwargs or "window" in kwargs:
        with pytest.raises(ValueError, match=re.escape(quoted)):
            make_perturbation("premature_release", **kwargs)


def test_other_bad_arguments():
    with pytest.raises(ValueError, match="'grip_slip'"):
        make_perturbation("grip_slip")
    with pytest.raises(ValueError, match="'strength'"):
        make_perturbation("premature_release", strength=2)
    with pytest.raises(ValueError, match="horizon"):
        apply_perturbation(StubEnv(max_episode_steps=None), "grip_force_weak")
    assert apply_perturbation(StubEnv(max_episode_steps=None), "grip_force_weak", horizon=30).horizon == 30
    with pytest.raises(ValueError, match="covers no step"):
        apply_perturbation(StubEnv(), "grip_force_weak", window=(0.50, 0.52))  # 10 <= k < 10
    with pytest.raises(ValueError, match="ramp"):
        GripCarrySlip(StubEnv(), ramp=0.0)
    with pytest.raises(ValueError, match="frequency"):
        ContactOscillation(StubEnv(), frequency=8.0)
    with pytest.raises(ValueError, match="shape"):
        env = apply_perturbation(StubEnv(), "grip_force_weak")
        env.reset(seed=0)
        env.step(np.zeros(7))
    with pytest.raises(ValueError, match="compose"):
        compose(StubEnv())


# ---------------------------------------------------------------------------- seeding
def test_rng_is_seeded_from_reset_and_leaves_the_env_rng_alone():
    actions = np.zeros((HORIZON, 8), np.float32)
    a1, _ = run(ContactOscillation(StubEnv(), severity=0.5), actions, seed=3)
    a2, _ = run(ContactOscillation(StubEnv(), severity=0.5), actions, seed=3)
    a3, _ = run(ContactOscillation(StubEnv(), severity=0.5), actions, seed=4)
    np.testing.assert_array_equal(a1, a2)
    assert not np.array_equal(a1, a3)
    clean, wrapped = StubEnv(), ContactOscillation(StubEnv(), severity=0.5)
    clean.reset(seed=5)
    wrapped.reset(seed=5)
    assert clean.np_random.random() == wrapped.unwrapped.np_random.random()  # the world's noise is shared
    wrapped.reset()  # no seed: the wrapper's generator continues, the episode is still perturbed
    assert wrapped.perturbation_rng is not None


# ---------------------------------------------------------------------------- SimDROID
def test_check_env_on_wrapped_simdroid():
    from gymnasium.utils.env_checker import check_env

    import neuralsim  # noqa: F401  (registers SimDROID-v0)

    env = compose(gym.make("SimDROID-v0"), *sorted(PERTURBATIONS))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    unexpected = [str(w.message) for w in caught if "different from the unwrapped version" not in str(w.message)]
    assert not unexpected, unexpected
    env.close()


def test_docstring_examples():
    from neuralsim.wrappers import perturbations

    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(perturbations, optionflags=flags, verbose=False)
    assert result.attempted >= 7 and result.failed == 0
