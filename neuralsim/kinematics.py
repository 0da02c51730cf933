"""Franka Panda kinematics and DROID's robot conventions.

Forward kinematics follows Franka's *modified* (Craig) Denavit-Hartenberg table plus the 0.107 m
flange.  DROID's ``cartesian_position`` is exactly the flange pose: xyz in metres followed by
extrinsic XYZ Euler angles (``R = Rz(yaw) @ Ry(pitch) @ Rx(roll)``).  Checked against the real DROID
sample in ``shared/data/droid_real`` (``tests/test_kinematics.py``).

Every function is batched over leading dimensions and accepts numpy arrays or torch tensors; the
result has the input's type, dtype and device.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

__all__ = [
    "DH_TABLE",
    "FLANGE_OFFSET",
    "JOINT_LIMITS_LOW",
    "JOINT_LIMITS_HIGH",
    "JOINT_VELOCITY_LIMITS",
    "RESET_JOINT_POSITION",
    "MAX_JOINT_DELTA",
    "flange_transforms",
    "forward_kinematics",
    "matrix_to_euler_xyz",
    "euler_xyz_to_matrix",
    "link_transforms",
    "rotation_matrix",
    "rotation_vector",
    "tool_jacobian",
    "tool_pose",
    "wrist_camera_pose",
]

#: Modified DH parameters (a_{i-1} [m], d_i [m], alpha_{i-1} [rad]) for joints 1..7.
DH_TABLE = np.array(
    [
        [0.0, 0.333, 0.0],
        [0.0, 0.0, -math.pi / 2],
        [0.0, 0.316, math.pi / 2],
        [0.0825, 0.0, math.pi / 2],
        [-0.0825, 0.384, -math.pi / 2],
        [0.0, 0.0, math.pi / 2],
        [0.088, 0.0, math.pi / 2],
    ]
)
#: Distance from joint 7's frame to the flange along its z axis [m].
FLANGE_OFFSET = 0.107

#: Joint position limits from Franka's datasheet [rad].
JOINT_LIMITS_LOW = np.array([-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973])
JOINT_LIMITS_HIGH = np.array([2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973])
#: Joint velocity limits from Franka's datasheet [rad/s].
JOINT_VELOCITY_LIMITS = np.array([2.1750, 2.1750, 2.1750, 2.1750, 2.6100, 2.6100, 2.6100])

#: DROID's reset pose [rad].
RESET_JOINT_POSITION = np.array([0.0, -math.pi / 5, 0.0, -4 * math.pi / 5, 0.0, 3 * math.pi / 5, 0.0])

#: DROID action semantics: a normalised joint velocity v in [-1, 1] asks for a joint step of
#: ``MAX_JOINT_DELTA * v`` radians over one 1/15 s control period.
MAX_JOINT_DELTA = 0.2
#: DROID's control rate [Hz].
CONTROL_HZ = 15

#: SimDROID's tool point (the ``tcp`` site, between the finger pads) along the flange's z axis [m].
TCP_OFFSET = 0.13

#: SimDROID's hand frame in the flange frame: the same origin, turned this much about z [rad]
#: (Franka's hand is mounted at -45 degrees).
HAND_YAW = -math.pi / 4
#: SimDROID's wrist camera in the hand frame: position [m], MJCF ``xyaxes`` (the image's right and,
#: before it is made orthogonal to the first, up directions) and vertical field of view [deg].  The
#: scene's MJCF is written from these, so :func:`wrist_camera_pose` is the camera that rendered the images.
WRIST_CAMERA_POS = (0.065, 0.0, 0.03)
WRIST_CAMERA_XYAXES = (0.0, 1.0, 0.0, 0.97, 0.0, 0.24)
WRIST_CAMERA_FOVY = 80.0


def _backend(x: Any):
    """Return (module, is_torch) for an array-like."""
    if type(x).__module__.startswith("torch"):
        import torch

        return torch, True
    return np, False


def _dh_matrix(xp, is_torch, theta, a, d, alpha):
    """Modified-DH transform RotX(alpha) TransX(a) RotZ(theta) TransZ(d).  theta: (...,)."""
    ct, st = xp.cos(theta), xp.sin(theta)
    ca, sa = math.cos(alpha), math.sin(alpha)
    zeros = xp.zeros_like(theta)
    ones = xp.ones_like(theta)
    rows = [
        [ct, -st, zeros, zeros + a],
        [st * ca, ct * ca, zeros - sa, -sa * d * ones],
        [st * sa, ct * sa, zeros + ca, ca * d * ones],
        [zeros, zeros, zeros, ones],
    ]
    stack = (lambda xs, dim: xp.stack(xs, dim=dim)) if is_torch else (lambda xs, dim: xp.stack(xs, axis=dim))
    return stack([stack(r, -1) for r in rows], -2)  # (..., 4, 4)


def link_transforms(q):
    """Base-frame transforms of DH frames 1..7 and the flange.

    Args:
        q: joint positions, shape (..., 7).
    Returns:
        Homogeneous transforms, shape (..., 8, 4, 4); index 7 is the flange.
    """
    xp, is_torch = _backend(q)
    if q.shape[-1] != 7:
        raise ValueError(f"joint positions must have 7 entries in the last dimension, got shape {tuple(q.shape)}")
    if not is_torch:
        return _link_transforms_np(np.asarray(q))
    frames = []
    T = None
    for i in range(7):
        a, d, alpha = DH_TABLE[i]
        Ti = _dh_matrix(xp, is_torch, q[..., i], float(a), float(d), float(alpha))
        T = Ti if T is None else T @ Ti
        frames.append(T)
    flange = _dh_matrix(xp, is_torch, xp.zeros_like(q[..., 0]), 0.0, FLANGE_OFFSET, 0.0)
    frames.append(T @ flange)
    if is_torch:
        return xp.stack(frames, dim=-3)
    return np.stack(frames, axis=-3)


#: DH parameters (a, d, alpha) of the 7 joints, then the flange (a fixed frame, theta = 0), and the
#: constant entries of each DH matrix (computed as :func:`_dh_matrix` does, in Python floats).
_DH8 = [tuple(float(x) for x in row) for row in DH_TABLE] + [(0.0, FLANGE_OFFSET, 0.0)]
_DH_CONST = np.array([[a, math.cos(al), math.sin(al), -math.sin(al), -math.sin(al) * d, math.cos(al) * d]
                      for a, d, al in _DH8])  # (8, 6): a, ca, sa, -sa, -sa*d, ca*d


def _link_transforms_np(q: np.ndarray) -> np.ndarray:
    """:func:`link_transforms` for NumPy input: the 8 DH matrices filled into one array instead of
    stacked entry by entry (~10x faster at batch 1; the env calls FK every step).  Same formulas and
    product order as the generic path (equal to rounding)."""
    dtype = q.dtype if q.dtype.kind == "f" else np.dtype(np.float64)
    theta = np.concatenate([q.astype(dtype, copy=False), np.zeros(q.shape[:-1] + (1,), dtype)], axis=-1)  # (..., 8)
    ct, st = np.cos(theta), np.sin(theta)
    a, ca, sa, nsa, nsad, cad = _DH_CONST.astype(dtype).T
    m = np.zeros(theta.shape + (4, 4), dtype)
    m[..., 0, 0], m[..., 0, 1], m[..., 0, 3] = ct, -st, a
    m[..., 1, 0], m[..., 1, 1], m[..., 1, 2], m[..., 1, 3] = st * ca, ct * ca, nsa, nsad
    m[..., 2, 0], m[..., 2, 1], m[..., 2, 2], m[..., 2, 3] = st * sa, ct * sa, ca, cad
    m[..., 3, 3] = 1.0
    out = np.empty_like(m)
    t = m[..., 0, :, :]
    out[..., 0, :, :] = t
    for i in range(1, 8):
        t = t @ m[..., i, :, :]
        out[..., i, :, :] = t
    return out


def flange_transforms(q):
    """Base-frame flange transform, shape (..., 4, 4), for joint positions (..., 7)."""
    return link_transforms(q)[..., 7, :, :]


def matrix_to_euler_xyz(R):
    """Extrinsic XYZ Euler angles (roll, pitch, yaw) of rotation matrices (..., 3, 3)."""
    xp, is_torch = _backend(R)
    clip = (lambda x: x.clamp(-1.0, 1.0)) if is_torch else (lambda x: np.clip(x, -1.0, 1.0))
    pitch = xp.arcsin(clip(-R[..., 2, 0])) if not is_torch else xp.asin(clip(-R[..., 2, 0]))
    atan2 = xp.atan2 if is_torch else np.arctan2
    roll = atan2(R[..., 2, 1], R[..., 2, 2])
    yaw = atan2(R[..., 1, 0], R[..., 0, 0])
    return xp.stack([roll, pitch, yaw], -1) if is_torch else np.stack([roll, pitch, yaw], axis=-1)


def euler_xyz_to_matrix(euler):
    """Rotation matrices (..., 3, 3) from extrinsic XYZ Euler angles (..., 3)."""
    xp, is_torch = _backend(euler)
    r, p, y = euler[..., 0], euler[..., 1], euler[..., 2]
    cr, sr, cp, sp, cy, sy = xp.cos(r), xp.sin(r), xp.cos(p), xp.sin(p), xp.cos(y), xp.sin(y)
    rows = [
        [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
        [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
        [-sp, cp * sr, cp * cr],
    ]
    if is_torch:
        return xp.stack([xp.stack(row, -1) for row in rows], -2)
    return np.stack([np.stack(row, axis=-1) for row in rows], axis=-2)


def forward_kinematics(q):
    """DROID ``cartesian_position`` of the flange: (..., 6) = xyz [m] + extrinsic XYZ Euler [rad].

    Args:
        q: joint positions, shape (..., 7), numpy array or torch tensor.
    """
    T = flange_transforms(q)
    xp, is_torch = _backend(T)
    pos = T[..., :3, 3]
    eul = matrix_to_euler_xyz(T[..., :3, :3])
    if is_torch:
        return xp.cat([pos, eul], -1)
    return np.concatenate([pos, eul], axis=-1)


@functools.lru_cache(maxsize=None)
def _wrist_camera_in_flange() -> tuple[np.ndarray, np.ndarray]:
    """The wrist camera's position (3,) and rotation (3, 3) in the flange frame, axes as MuJoCo builds
    them from ``xyaxes``: x normalised, y made orthogonal to x and normalised, z = x cross y.  Constants,
    computed once (read-only arrays)."""
    c, s = math.cos(HAND_YAW), math.sin(HAND_YAW)
    hand = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    x = np.asarray(WRIST_CAMERA_XYAXES[:3], dtype=np.float64)
    y = np.asarray(WRIST_CAMERA_XYAXES[3:], dtype=np.float64)
    x = x / np.linalg.norm(x)
    y = y - x * (x @ y)
    y = y / np.linalg.norm(y)
    cam = np.stack([x, y, np.cross(x, y)], axis=1)
    pos, rot = hand @ np.asarray(WRIST_CAMERA_POS, dtype=np.float64), hand @ cam
    pos.setflags(write=False)
    rot.setflags(write=False)
    return pos, rot


def wrist_camera_pose(cartesian):
    """World pose of SimDROID's wrist camera for flange poses ``cartesian`` (..., 6) (xyz + Euler XYZ).

    Returns position (..., 3) and rotation (..., 3, 3) whose columns are the camera's axes in the base
    frame: x = image right, y = image up, z = backwards (MuJoCo cameras look along -z).
    """
    xp, is_torch = _backend(cartesian)
    offset, rot = _wrist_camera_in_flange()
    if is_torch:
        # a copy: the constants are read-only
        offset = xp.tensor(offset, dtype=cartesian.dtype, device=cartesian.device)
        rot = xp.tensor(rot, dtype=cartesian.dtype, device=cartesian.device)
    flange = euler_xyz_to_matrix(cartesian[..., 3:6])
    return cartesian[..., :3] + (flange @ offset[:, None])[..., 0], flange @ rot



# ----------------------------------------------------------------------------- rotations, the tool point
def rotation_vector(R: np.ndarray) -> np.ndarray:
    """Rotation vectors (..., 3) (axis times angle in [0, pi]) of rotation matrices (..., 3, 3), NumPy.

    Through the unit quaternion, picking for each matrix the best-conditioned of Shepperd's four formulas, so it
    is stable near 0 and near pi.
    """
    R = np.asarray(R, np.float64)
    m = R.reshape(-1, 3, 3)
    tr = np.trace(m, axis1=1, axis2=2)
    k = np.stack([tr, m[:, 0, 0], m[:, 1, 1], m[:, 2, 2]], 1).argmax(1)
    q = np.zeros((len(m), 4))
    w = k == 0
    if w.any():
        a, s = m[w], np.sqrt(np.maximum(1.0 + tr[w], 0.0)) / 2
        q[w] = np.stack([s, (a[:, 2, 1] - a[:, 1, 2]) / (4 * s), (a[:, 0, 2] - a[:, 2, 0]) / (4 * s),
                         (a[:, 1, 0] - a[:, 0, 1]) / (4 * s)], 1)
    for j in range(3):  # the largest component is x, y or z
        sel = k == j + 1
        if not sel.any():
            continue
        u, v = (j + 1) % 3, (j + 2) % 3
        a = m[sel]
        x = np.sqrt(np.maximum(1.0 + a[:, j, j] - a[:, u, u] - a[:, v, v], 0.0)) / 2
        q[sel, 0] = (a[:, v, u] - a[:, u, v]) / (4 * x)
        q[sel, 1 + j], q[sel, 1 + u], q[sel, 1 + v] = x, (a[:, u, j] + a[:, j, u]) / (4 * x), \
            (a[:, v, j] + a[:, j, v]) / (4 * x)
    q *= np.where(q[:, :1] < 0, -1.0, 1.0)  # w >= 0: the angle in [0, pi]
    n = np.linalg.norm(q[:, 1:], axis=1)
    angle = 2 * np.arctan2(n, q[:, 0])
    scale = np.where(n > 1e-12, angle / np.maximum(n, 1e-12), 2.0)
    return (q[:, 1:] * scale[:, None]).reshape(R.shape[:-2] + (3,))


def rotation_matrix(v: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) of rotation vectors (..., 3) (Rodrigues' formula), NumPy."""
    v = np.asarray(v, np.float64)
    angle = np.linalg.norm(v, axis=-1)[..., None, None]
    k = v / np.maximum(angle[..., 0], 1e-12)
    zero = np.zeros(v.shape[:-1])
    K = np.stack([np.stack([zero, -k[..., 2], k[..., 1]], -1), np.stack([k[..., 2], zero, -k[..., 0]], -1),
                  np.stack([-k[..., 1], k[..., 0], zero], -1)], -2)
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * (K @ K)


def tool_pose(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SimDROID's tool point (..., 3) [m] and flange rotation (..., 3, 3) for joint positions (..., 7), NumPy."""
    T = flange_transforms(np.asarray(q, np.float64))
    return T[..., :3, 3] + TCP_OFFSET * T[..., :3, 2], T[..., :3, :3]


def tool_jacobian(q: np.ndarray, eps: float = 1e-6, with_pose: bool = False):
    """The tool point's geometric Jacobian (..., 6, 7) at joint positions (..., 7): rows 0-2 its linear velocity,
    rows 3-5 the hand's angular velocity (world frame), per unit joint velocity.  Central differences of
    :func:`tool_pose`, one batched forward kinematics of 15 states (no MuJoCo, so it also runs where only the joint
    state is known, as in NeuralDROID).  ``with_pose``: also return the :func:`tool_pose` at ``q``."""
    q = np.asarray(q, np.float64)
    step = eps * np.eye(7)
    states = np.concatenate([q[..., None, :] + step, q[..., None, :] - step, q[..., None, :]], axis=-2)
    p, R = tool_pose(states)                                       # (..., 15, 3), (..., 15, 3, 3)
    dp = (p[..., :7, :] - p[..., 7:14, :]) / (2 * eps)              # (..., 7, 3)
    dR = (R[..., :7, :, :] - R[..., 7:14, :, :]) / (2 * eps)        # (..., 7, 3, 3)
    W = dR @ np.swapaxes(R[..., 14:, :, :], -1, -2)                  # the skew matrix of each column's omega
    omega = np.stack([W[..., 2, 1], W[..., 0, 2], W[..., 1, 0]], axis=-1)  # (..., 7, 3)
    J = np.swapaxes(np.concatenate([dp, omega], axis=-1), -1, -2)
    return (J, p[..., 14, :], R[..., 14, :, :]) if with_pose else J
