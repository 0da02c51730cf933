"""Tests of the Cartesian action head (``action_mode="tool_delta"``): its labels by forward kinematics, its IK layer
in the arm model and in real SimDROID physics, and a network of that mode trained, saved and run as a policy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import neuralsim  # noqa: F401  (registers the envs)
from neuralsim import kinematics as K
from policies.visuomotor import cartesian as C

pytestmark = pytest.mark.timeout(120)


def wandering_joints(steps: int = 30, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return K.RESET_JOINT_POSITION + np.cumsum(0.02 * rng.standard_normal((steps, 7)), axis=0)


def test_rotation_vector_inverts_rodrigues_up_to_pi():
    rng = np.random.default_rng(1)
    v = rng.standard_normal((500, 3))
    v *= (rng.uniform(0, np.pi - 1e-3, 500) / np.linalg.norm(v, axis=1))[:, None]
    assert np.allclose(K.rotation_vector(K.rotation_matrix(v)), v, atol=1e-9)
    assert np.allclose(K.rotation_vector(np.eye(3)), 0.0)


def test_tool_jacobian_predicts_small_motions():
    q = wandering_joints(5)
    dq = 1e-4 * np.random.default_rng(2).standard_normal(q.shape)
    J = K.tool_jacobian(q)
    (p0, R0), (p1, R1) = K.tool_pose(q), K.tool_pose(q + dq)
    assert np.allclose(p1 - p0, np.einsum("bij,bj->bi", J[:, :3], dq), atol=1e-7)
    assert np.allclose(K.rotation_vector(R1 @ np.swapaxes(R0, -1, -2)), np.einsum("bij,bj->bi", J[:, 3:], dq),
                       atol=1e-7)


def test_labels_are_the_poses_after_each_action_and_hold_past_the_end():
    q = wandering_joints(20)
    y = C.tool_offsets(q, chunk_size=6)
    p, R = K.tool_pose(q)
    assert y.shape == (20, 6, 6) and y.dtype == np.float32
    t, k = 4, 2  # the 3rd action after frame 4 ends at frame 7
    assert np.allclose(C.POSITION_SCALE * y[t, k, :3], p[t + k + 1] - p[t], atol=1e-6)
    assert np.allclose(K.rotation_matrix(C.ROTATION_SCALE * y[t, k, 3:].astype(np.float64)) @ R[t], R[t + k + 1],
                       atol=1e-5)
    assert np.allclose(y[17, 2:], y[17, 1])  # frame 19 is the last: a hold
    assert np.allclose(y[19], 0.0)


def test_the_ik_layer_reaches_its_targets_in_the_arm_model():
    """Stepping the model the layer assumes by its own velocities lands on the asked-for tool poses."""
    q = wandering_joints(40, seed=3)
    y = C.tool_offsets(q, chunk_size=8)[[0, 10, 25]]
    actions = C.joint_velocity_chunk(q[[0, 10, 25]], y, np.full((3, 8), 0.25))
    assert actions.shape == (3, 8, 8) and actions.dtype == np.float32
    assert np.all(np.abs(actions[..., :7]) <= 1) and np.allclose(actions[..., 7], 0.25)
    stepped = q[[0, 10, 25]] + C.REALISED_STEP_PER_V * np.cumsum(actions[..., :7], axis=1)[:, -1]
    reached, _ = K.tool_pose(stepped)
    wanted = K.tool_pose(q[[0, 10, 25]])[0] + C.POSITION_SCALE * y[:, -1, :3]
    assert np.linalg.norm(reached - wanted, axis=1).max() < 0.005  # metres
    still = C.joint_velocity_chunk(K.RESET_JOINT_POSITION[None], np.zeros((1, 4, 6)), np.zeros((1, 4)))
    assert np.abs(still[..., :7]).max() < 1e-6  # at the reset posture nothing pulls


def test_the_ik_layer_moves_simdroids_tool_where_it_was_asked():
    """Real MuJoCo physics: a chunk asking for the tool point 6 cm along +y and 3 cm down gets there."""
    env = gym.make("SimDROID-v1")
    obs, _ = env.reset(seed=5)
    start = env.unwrapped.tcp_position().copy()
    goal = np.array([0.0, 0.06, -0.03])
    ramp = np.linspace(0, 1, 13)[1:, None] * goal / C.POSITION_SCALE          # (12, 3)
    offsets = np.concatenate([ramp, np.zeros((12, 3))], 1)[None]
    chunk = C.joint_velocity_chunk(obs["joint_position"][None], offsets, np.zeros((1, 12)))[0]
    for action in chunk:
        env.step(action)
    for _ in range(3):  # settle: the controller lags a step behind its target
        env.step(np.zeros(8, np.float32))
    moved = env.unwrapped.tcp_position() - start
    env.close()
    assert np.linalg.norm(moved - goal) < 0.01, moved


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="offsets"):
        C.joint_velocity_chunk(np.zeros((2, 7)), np.zeros((2, 4, 7)), np.zeros((2, 4)))
    from policies.visuomotor.model import VisuomotorConfig

    with pytest.raises(ValueError, match="action_mode"):
        VisuomotorConfig(action_mode="cartesian_velocity")
    with pytest.raises(ValueError, match="gripper"):
        VisuomotorConfig(gripper="threshold")


def test_a_trained_tool_delta_checkpoint_loads_and_drives_simdroid(tmp_path, one_torch_thread):
    from neuralsim.data.generate import generate
    from policies import run_episode
    from policies.visuomotor import VisuomotorPolicy
    from policies.visuomotor.train import TrainPolicyConfig, load_demonstrations, train

    data = tmp_path / "demos"
    generate(data, episodes=1, seed=0, failure_share=0.0, noise=(0.0, 0.0), progress=False, frames_format="npy",
             scene="legible")
    demos = load_demonstrations([str(data)], ("exterior_image_1_left", "wrist_image_left"), 12, "legible",
                                progress=False, action_mode="tool_delta")
    assert demos.chunks.shape[1:] == (12, 7)  # 6 tool offsets + the gripper command per action
    summary = train(TrainPolicyConfig(data=str(data), scene="legible", out=str(tmp_path / "run"), steps=3,
                                      snapshots="last=3", batch_size=4, action_mode="tool_delta", gripper="binary",
                                      progress=False))
    policy = VisuomotorPolicy.from_pretrained(summary["snapshots"]["last"], num_threads=1)
    assert policy.config.action_mode == "tool_delta" and policy.model.action_head.out_features == 12 * 7
    result = run_episode(gym.make("SimDROID-v1", max_episode_steps=16), policy, seed=11)
    assert result.steps == 16 and np.all(np.abs(result.actions[:, :7]) <= 1)
    assert set(np.unique(result.actions[:, 7])) <= {0.0, 1.0}  # a binary gripper: open or closed, nothing between


def test_jittered_states_keep_their_targets_in_the_world():
    """Training jitters the joint state the policy reads; the labels are re-expressed so they still point at the
    demonstration's poses."""
    q = wandering_joints(20, seed=4)
    y = C.tool_offsets(q, chunk_size=5)[[2, 9]]
    seen = q[[2, 9]] + 0.02 * np.random.default_rng(5).standard_normal((2, 7))
    moved = C.reexpress(y, q[[2, 9]], seen)
    (p, R), (p_seen, R_seen) = K.tool_pose(q[[2, 9]]), K.tool_pose(seen)
    np.testing.assert_allclose(p_seen[:, None] + C.POSITION_SCALE * moved[..., :3],
                               p[:, None] + C.POSITION_SCALE * y[..., :3], atol=1e-6)
    np.testing.assert_allclose(K.rotation_matrix(C.ROTATION_SCALE * moved[..., 3:].astype(np.float64)) @
                               R_seen[:, None], K.rotation_matrix(C.ROTATION_SCALE * y[..., 3:].astype(np.float64)) @
                               R[:, None], atol=1e-5)
    assert not np.allclose(moved, y)


def test_the_shipped_cartesian_checkpoint_acts_in_simdroid_and_neuraldroid():
    from policies import make_policy, run_episode

    policy = make_policy("visuomotor-cartesian-s3000", num_threads=1)
    assert policy.config.action_mode == "tool_delta" and policy.config.scene == "legible"
    sim = run_episode(gym.make("SimDROID-v1", max_episode_steps=24), policy, seed=2_000_000)
    assert sim.steps == 24 and np.all(np.abs(sim.actions[:, :7]) <= 1)
    assert np.abs(sim.actions[:, :7]).max() > 0.05  # it moves the arm
    neural = run_episode(gym.make("NeuralDROID-v0", max_episode_steps=8), policy, seed=2_000_000)
    assert neural.steps == 8 and np.all(np.isfinite(neural.actions))


class _GoalPolicy:
    """A Cartesian policy without a network: every chunk asks for the tool point ``goal`` metres away (a straight
    ramp over the chunk), planned by the IK layer, its goals kept for ``track`` as the learned kinds keep them."""

    action_mode = "joint_velocity"
    tracks_targets = True

    def __init__(self, goal: np.ndarray, chunk: int = 12):
        self.goal, self.chunk, self.tracked_steps = np.asarray(goal, np.float64), chunk, []

    def reset(self, instruction: str) -> None:
        self.tracked_steps.clear()

    def infer(self, observation: dict) -> np.ndarray:
        q = np.asarray(observation["joint_position"], np.float64)[None]
        ramp = np.linspace(0, 1, self.chunk + 1)[1:, None] * self.goal / C.POSITION_SCALE
        offsets = np.concatenate([ramp, np.zeros((self.chunk, 3))], 1)[None]
        self.targets = C.tool_targets(q, offsets)
        return C.joint_velocity_chunk(q, offsets, np.zeros((1, self.chunk)))[0]

    def track(self, observation: dict, k: int) -> np.ndarray:
        self.tracked_steps.append(k)
        p_goal, R_goal = self.targets
        return C.track_action(observation["joint_position"], p_goal[0, k], R_goal[0, k], 0.0)


def test_tracking_re_aims_each_step_and_ends_nearer_the_goals_than_the_open_loop_plan():
    """Real MuJoCo physics: the open-loop plan assumes an arm without lag, so a long reach falls short of its goal;
    the controller's tracking (each step an IK step from the measured joints to the chunk's goal) ends nearer."""
    from policies import ChunkedController, TargetTracking

    goal = np.array([0.10, 0.12, -0.08])
    errors = {}
    for track in (False, True):
        env = gym.make("SimDROID-v1")
        obs, _ = env.reset(seed=5)
        start = env.unwrapped.tcp_position().copy()
        policy = _GoalPolicy(goal)
        assert isinstance(policy, TargetTracking)
        controller = ChunkedController(policy, replan_every=None, track=track)
        assert controller.tracking is track
        controller.reset("reach")
        for _ in range(12):
            obs, *_ = env.step(controller.act(obs))
        errors[track] = np.linalg.norm(env.unwrapped.tcp_position() - start - goal)
        assert policy.tracked_steps == (list(range(1, 12)) if track else [])  # the first step is the plan's own
        env.close()
    assert errors[True] < 0.6 * errors[False], errors


def test_a_tracked_step_from_the_query_pose_is_the_plans_first_action():
    q = wandering_joints(10, seed=6)[[7]]
    offsets = C.tool_offsets(wandering_joints(10, seed=6), chunk_size=4)[[7]]
    planned = C.joint_velocity_chunk(q, offsets, np.ones((1, 4)))
    p_goal, R_goal = C.tool_targets(q, offsets)
    np.testing.assert_allclose(C.track_action(q[0], p_goal[0, 0], R_goal[0, 0], 1.0), planned[0, 0], atol=1e-6)
