"""Franka forward kinematics against the real DROID sample and the MuJoCo scene."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
import torch

from neuralsim import kinematics as K

DROID_REAL = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "droid_real")


def _angle_diff(a, b):
    return np.abs((a - b + np.pi) % (2 * np.pi) - np.pi)


@pytest.mark.skipif(not os.path.isdir(DROID_REAL), reason="real DROID sample (../shared/data/droid_real) not present")
def test_fk_reproduces_real_droid_cartesian_position():
    files = sorted(glob.glob(os.path.join(DROID_REAL, "annotation", "*", "*.json")))
    assert files, "no annotation files in the DROID sample"
    worst_pos, worst_rot = 0.0, 0.0
    for f in files:
        with open(f) as fh:
            d = json.load(fh)
        q = np.asarray(d["observation.state.joint_position"])
        cart = np.asarray(d["observation.state.cartesian_position"])
        fk = K.forward_kinematics(q)
        worst_pos = max(worst_pos, float(np.abs(fk[:, :3] - cart[:, :3]).max()))
        R_fk, R_real = K.euler_xyz_to_matrix(fk[:, 3:]), K.euler_xyz_to_matrix(cart[:, 3:])
        worst_rot = max(worst_rot, float(np.abs(R_fk - R_real).max()))
    assert worst_pos < 1e-5, worst_pos
    assert worst_rot < 1e-5, worst_rot


def test_fk_torch_matches_numpy_and_is_batched():
    rng = np.random.default_rng(0)
    q = rng.uniform(K.JOINT_LIMITS_LOW, K.JOINT_LIMITS_HIGH, size=(4, 5, 7))
    np_out = K.forward_kinematics(q)
    t_out = K.forward_kinematics(torch.as_tensor(q))
    assert np_out.shape == (4, 5, 6) and isinstance(t_out, torch.Tensor)
    np.testing.assert_allclose(t_out.numpy(), np_out, atol=1e-9)


def test_euler_round_trip():
    rng = np.random.default_rng(1)
    e = np.stack([rng.uniform(-np.pi, np.pi, 50), rng.uniform(-1.5, 1.5, 50), rng.uniform(-np.pi, np.pi, 50)], -1)
    back = K.matrix_to_euler_xyz(K.euler_xyz_to_matrix(e))
    assert _angle_diff(back, e).max() < 1e-9


def test_reset_pose_points_the_flange_down():
    cart = K.forward_kinematics(K.RESET_JOINT_POSITION)
    R = K.euler_xyz_to_matrix(cart[3:])
    assert R[2, 2] < -0.99  # flange z axis points at the table
    assert 0.3 < cart[0] < 0.45 and abs(cart[1]) < 1e-9


def test_mujoco_flange_site_matches_dh():
    import mujoco

    from neuralsim.envs import scene

    model, data, h = scene.load_model()
    rng = np.random.default_rng(2)
    for _ in range(20):
        q = rng.uniform(K.JOINT_LIMITS_LOW, K.JOINT_LIMITS_HIGH)
        data.qpos[h.arm_qpos] = q
        mujoco.mj_kinematics(model, data)
        T = K.flange_transforms(q)
        np.testing.assert_allclose(data.site_xpos[h.flange_site], T[:3, 3], atol=1e-4)
        np.testing.assert_allclose(data.site_xmat[h.flange_site].reshape(3, 3), T[:3, :3], atol=1e-4)


def test_mujoco_joint_ranges_are_the_datasheet_limits():
    from neuralsim.envs import scene

    model, _, h = scene.load_model()
    for i in range(7):
        jid = model.dof_jntid[h.arm_dof[i]]
        np.testing.assert_allclose(model.jnt_range[jid], [K.JOINT_LIMITS_LOW[i], K.JOINT_LIMITS_HIGH[i]], atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(7,), (1, 7), (3, 5, 7)])
def test_numpy_fast_path_equals_the_entry_by_entry_dh_chain(shape, dtype):
    """The NumPy FK (one filled array) gives the same bits as chaining :func:`_dh_matrix` frame by frame."""
    q = np.random.default_rng(7).uniform(-2.5, 2.5, shape).astype(dtype)
    T, frames = None, []
    for i, (a, d, alpha) in enumerate(K.DH_TABLE):
        Ti = K._dh_matrix(np, False, q[..., i], float(a), float(d), float(alpha))
        T = Ti if T is None else T @ Ti
        frames.append(T)
    frames.append(T @ K._dh_matrix(np, False, np.zeros_like(q[..., 0]), 0.0, K.FLANGE_OFFSET, 0.0))
    ref = np.stack(frames, axis=-3)
    got = K.link_transforms(q)
    assert got.dtype == ref.dtype and got.shape == shape[:-1] + (8, 4, 4)
    assert np.array_equal(got, ref)


def test_wrist_camera_pose_matches_mujoco_camera():
    import mujoco

    from neuralsim.envs import scene

    model, data, h = scene.load_model()
    cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "wrist")
    rng = np.random.default_rng(5)
    for _ in range(10):
        q = rng.uniform(K.JOINT_LIMITS_LOW, K.JOINT_LIMITS_HIGH)
        data.qpos[h.arm_qpos] = q
        mujoco.mj_kinematics(model, data)
        mujoco.mj_camlight(model, data)  # camera poses are not part of mj_kinematics
        pos, rot = K.wrist_camera_pose(K.forward_kinematics(q))
        np.testing.assert_allclose(pos, data.cam_xpos[cam], atol=1e-5)
        np.testing.assert_allclose(rot, data.cam_xmat[cam].reshape(3, 3), atol=1e-5)
        assert model.cam_fovy[cam] == K.WRIST_CAMERA_FOVY
    # torch in, torch out, the same numbers
    pos_t, rot_t = K.wrist_camera_pose(torch.as_tensor(K.forward_kinematics(q)))
    np.testing.assert_allclose(pos_t.numpy(), pos, atol=1e-12)
    np.testing.assert_allclose(rot_t.numpy(), rot, atol=1e-12)
