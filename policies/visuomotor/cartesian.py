"""The Cartesian action head's two fixed ends: its training labels and the IK layer that turns its output into DROID
actions.

A ``tool_delta`` checkpoint (:class:`~policies.visuomotor.model.VisuomotorConfig`, ``action_mode``) predicts, for each
of the chunk's H actions, where the tool point and the hand should be *after* that action, relative to where they are
when the observation is taken: a position offset [m] and a rotation vector (world frame) per action, scaled by
:data:`POSITION_SCALE` / :data:`ROTATION_SCALE`, plus the gripper command.  Reaching a cube is then a near-linear
function of what the network already sees (where the cube is relative to the tool), instead of the arm's inverse
Jacobian learned to the centimetre from a few hundred demonstrations.

* :func:`tool_offsets` makes the labels from an episode's recorded joint positions by forward kinematics (the pose
  after action ``t + k`` is the recorded pose at frame ``t + k + 1``).
* :func:`joint_velocity_chunk` is the policy's last, fixed layer: damped least squares on the tool point's Jacobian
  (:func:`neuralsim.kinematics.tool_jacobian`) with the scripted expert's damping and null-space pull towards DROID's
  reset posture, stepping a model of the arm (each unit of normalised velocity moves a joint
  :data:`~neuralsim.envs.sim_droid.REALISED_STEP_PER_V` rad) through the chunk's targets.  It needs only the joint
  state, so the same policy acts in SimDROID and in NeuralDROID, and what reaches the env is DROID's 8-d action.
"""

from __future__ import annotations

import numpy as np

from neuralsim import kinematics as K
from neuralsim.envs.experts import IK_DAMPING, NULLSPACE_GAIN  # the expert's, so the layer moves the arm as it did
from neuralsim.envs.sim_droid import REALISED_STEP_PER_V

#: Scale of the predicted offsets: metres per unit of position, radians per unit of rotation.
POSITION_SCALE, ROTATION_SCALE = 0.05, 0.25


def tool_offsets(joint_position: np.ndarray, chunk_size: int) -> np.ndarray:
    """Labels (T, H, 6) float32 of every frame of an episode with joint positions (T, 7): for the k-th action after
    frame t, the tool point's offset and the hand's rotation vector from frame t to frame min(t + k + 1, T - 1),
    scaled (past the end: the last pose, a hold)."""
    p, R = K.tool_pose(np.asarray(joint_position, np.float64))
    t = len(p)
    after = np.minimum(np.arange(t)[:, None] + np.arange(1, chunk_size + 1)[None], t - 1)  # (T, H)
    dp = (p[after] - p[:, None]) / POSITION_SCALE
    dr = K.rotation_vector(R[after] @ np.swapaxes(R, -1, -2)[:, None]) / ROTATION_SCALE
    return np.concatenate([dp, dr], -1).astype(np.float32)


def reexpress(offsets: np.ndarray, joint_position: np.ndarray, seen_joint_position: np.ndarray) -> np.ndarray:
    """Scaled offsets (N, H, 6) from the tool pose at ``joint_position`` (N, 7), re-expressed from the pose at
    ``seen_joint_position``: the same targets in the world, as a policy that reads the second state must aim (the
    labels of training's joint-state jitter)."""
    p, R = K.tool_pose(joint_position)
    p_seen, R_seen = K.tool_pose(seen_joint_position)
    dp = offsets[..., :3] + (p - p_seen)[:, None] / POSITION_SCALE
    turn = K.rotation_matrix(ROTATION_SCALE * np.asarray(offsets[..., 3:], np.float64)) @ (R @ np.swapaxes(
        R_seen, -1, -2))[:, None]
    return np.concatenate([dp, K.rotation_vector(turn) / ROTATION_SCALE], -1).astype(np.float32)


def tool_targets(joint_position: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The world-frame goals of scaled offsets (N, H, 6) taken at ``joint_position`` (N, 7): tool-point positions
    (N, H, 3) [m] and hand rotations (N, H, 3, 3)."""
    q = np.asarray(joint_position, np.float64)
    offsets = np.asarray(offsets, np.float64)
    p0, R0 = K.tool_pose(q)
    p_goal = p0[:, None] + POSITION_SCALE * offsets[..., :3]
    R_goal = K.rotation_matrix(ROTATION_SCALE * offsets[..., 3:]) @ R0[:, None]
    return p_goal, R_goal


def ik_step(joint_position: np.ndarray, p_goal: np.ndarray, R_goal: np.ndarray) -> np.ndarray:
    """Normalised joint velocities (N, 7) of one damped-least-squares step from arms at ``joint_position`` (N, 7)
    towards tool-point goals ``p_goal`` (N, 3) and hand rotations ``R_goal`` (N, 3, 3), with the expert's damping and
    null-space pull towards DROID's reset posture; the fastest joint is held to 1."""
    q = np.asarray(joint_position, np.float64)
    J, p, R = K.tool_jacobian(q, with_pose=True)                                     # (N, 6, 7)
    # the expert's rotation error: half the sum of the cross products of the current and goal axes
    turn = 0.5 * np.cross(R, R_goal, axis=-2).sum(-1)
    err = np.concatenate([p_goal - p, turn], -1)
    Jt = np.swapaxes(J, -1, -2)
    JJt = J @ Jt
    dq = (Jt @ np.linalg.solve(JJt + IK_DAMPING ** 2 * np.eye(6), err[..., None]))[..., 0]
    null = np.eye(7) - Jt @ np.linalg.solve(JJt, J)                                  # I - pinv(J) J
    dq += (null @ (NULLSPACE_GAIN * (K.RESET_JOINT_POSITION - q))[..., None])[..., 0]
    v = dq / REALISED_STEP_PER_V
    return v / np.maximum(1.0, np.abs(v).max(-1, keepdims=True))


def joint_velocity_chunk(joint_position: np.ndarray, offsets: np.ndarray, gripper: np.ndarray) -> np.ndarray:
    """DROID actions (N, H, 8) float32 that take arms at ``joint_position`` (N, 7) through the scaled tool targets
    ``offsets`` (N, H, 6) (as :func:`tool_offsets` makes them) with gripper commands ``gripper`` (N, H) in [0, 1].

    The plan steps a model of the arm (each unit of velocity moves a joint ``REALISED_STEP_PER_V`` rad, no lag), so
    it drifts from the real arm over the chunk; :func:`track_action` re-aims each step from the measured joints."""
    q = np.asarray(joint_position, np.float64).copy()
    offsets = np.asarray(offsets, np.float64)
    n, h = offsets.shape[:2]
    if q.shape != (n, 7) or offsets.shape[2] != 6 or np.shape(gripper) != (n, h):
        raise ValueError(f"expected joint positions (N, 7), offsets (N, H, 6) and gripper (N, H), got {q.shape}, "
                         f"{offsets.shape}, {np.shape(gripper)}")
    p_goal, R_goal = tool_targets(q, offsets)
    out = np.empty((n, h, 8), np.float32)
    for k in range(h):
        v = ik_step(q, p_goal[:, k], R_goal[:, k])
        q = q + REALISED_STEP_PER_V * v
        out[:, k, :7] = v
    out[..., 7] = np.clip(gripper, 0.0, 1.0)
    return out


def track_actions(joint_position: np.ndarray, p_goal: np.ndarray, R_goal: np.ndarray, gripper: np.ndarray
                  ) -> np.ndarray:
    """DROID actions (N, 8) float32 for arms measured at ``joint_position`` (N, 7): an IK step towards the goals
    ``p_goal`` (N, 3), ``R_goal`` (N, 3, 3) (one step of :func:`tool_targets`' chunk each), and the gripper commands
    (N,).

    Executing a chunk this way (closed loop on the joints, the goals fixed at query time) keeps the tool on the
    generated path where the open-loop plan of :func:`joint_velocity_chunk` drifts."""
    q = np.asarray(joint_position, np.float64)
    out = np.empty((len(q), 8), np.float32)
    out[:, :7] = ik_step(q, np.asarray(p_goal, np.float64), np.asarray(R_goal, np.float64))
    out[:, 7] = np.clip(gripper, 0.0, 1.0)
    return out


def track_action(joint_position: np.ndarray, p_goal: np.ndarray, R_goal: np.ndarray, gripper: float) -> np.ndarray:
    """:func:`track_actions` for one arm: the action (8,) from joints (7,) towards ``p_goal`` (3,), ``R_goal``
    (3, 3)."""
    return track_actions(np.reshape(joint_position, (1, 7)), np.reshape(p_goal, (1, 3)), np.reshape(R_goal, (1, 3, 3)),
                         np.reshape(gripper, (1,)))[0]
