"""Focus masks (where the target cube can be) and the focus-weighted DiT losses."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuralsim import kinematics as K
from neuralsim.world_model.focus import (
    FOCUS_RADIUS,
    focus_mask,
    project_exterior,
    project_wrist,
    record_focus,
    tool_centre,
)
from neuralsim.world_model.objectives import diffusion_forcing_loss, step_forcing_loss

from .conftest import conds, latents

Q0 = np.array([0.0, -0.6, 0.0, -2.4, 0.0, 1.8, 0.8])


def test_a_camera_sees_its_look_at_point_in_the_image_centre():
    from neuralsim.envs import scene as S

    for v, (_, target, _) in enumerate(S.EXTERIOR_CAMERAS.values()):
        np.testing.assert_allclose(project_exterior(np.array([target]))[0, v], [0.0, 0.0], atol=1e-9)
        above = project_exterior(np.array([target]) + [0.0, 0.0, 0.1])[0, v]
        assert above[1] < -0.05 and abs(above[0]) < 0.05  # image rows run downwards


def test_the_wrist_camera_sees_its_optical_axis_in_the_centre_and_nothing_behind_it():
    cart = K.forward_kinematics(Q0)[None]
    pos, rot = K.wrist_camera_pose(cart)
    ahead = pos - rot[:, :, 2] * 0.3  # MuJoCo cameras look along -z
    np.testing.assert_allclose(project_wrist(ahead, cart)[0], [0.0, 0.0], atol=1e-9)
    right = ahead + rot[:, :, 0] * 0.05
    assert project_wrist(right, cart)[0, 0] > 0.1  # image x = camera right
    behind = pos + rot[:, :, 2] * 0.3
    assert (np.abs(project_wrist(behind, cart)) > 1.5).all()


def test_the_tool_centre_is_13_cm_along_the_flange_axis_and_seen_by_the_wrist_camera():
    cart = K.forward_kinematics(np.stack([Q0, Q0 + 0.2]))
    tcp = tool_centre(cart)
    np.testing.assert_allclose(np.linalg.norm(tcp - cart[:, :3], axis=1), 0.130, atol=1e-9)
    uv = project_wrist(tcp, cart)
    assert (np.abs(uv) < 1.0).all()  # between the fingertips, inside the wrist view
    np.testing.assert_allclose(uv[0], uv[1], atol=1e-9)  # and at the same place whatever the pose


def test_focus_mask_marks_the_start_end_and_gripper_cells():
    cart = K.forward_kinematics(np.stack([Q0, Q0 + 0.1, Q0 + 0.2]))
    start, end = np.array([0.45, 0.1, 0.025]), np.array([0.6, -0.2, 0.03])
    m = focus_mask(cart, start, end, grid=16)
    assert m.shape == (3, 3, 16, 16) and m.dtype == bool
    assert 0 < m.mean() < 0.1  # a few marks, not the frame
    for v in range(2):  # the cell under each projected point is marked in every frame
        for p in (start, end):
            col, row = ((project_exterior(p[None])[0, v] + 1) / 2 * 16).astype(int)
            assert m[:, v, row, col].all()
    # a point on a cell centre marks it and its 4 neighbours at radius 1
    one = focus_mask(cart[:1], start, start, grid=16, radius=FOCUS_RADIUS)
    far = focus_mask(cart[:1], start, end, grid=16)
    assert (far.sum(axis=(2, 3)) >= one.sum(axis=(2, 3))).all()
    # the gripper's mark moves with the arm
    assert not np.array_equal(m[0, 0], m[2, 0])
    with pytest.raises(ValueError, match=r"\(T, 6\)"):
        focus_mask(cart[:, :3], start, end, grid=16)
    with pytest.raises(ValueError, match="non-finite"):
        focus_mask(np.full((2, 6), np.nan), start, end, grid=16)


def test_record_focus_names_a_record_without_target_poses():
    cart = K.forward_kinematics(Q0[None])
    rec = {"episode_index": 4, "target": "red_cube", "initial_poses": {"red_cube": [0.5, 0, 0.025]},
           "final_poses": {"red_cube": [0.6, 0, 0.025]}}
    np.testing.assert_array_equal(record_focus(rec, cart, 16),
                                  focus_mask(cart, [0.5, 0, 0.025], [0.6, 0, 0.025], 16))
    with pytest.raises(ValueError, match="episode 4 has no target pose"):
        record_focus({"episode_index": 4, "target": "red_cube", "initial_poses": {}}, cart, 16)


@pytest.mark.parametrize("loss_fn", [diffusion_forcing_loss, step_forcing_loss], ids=["df", "sf"])
def test_focus_weight_is_a_weighted_mean_of_the_same_errors(tiny_model, loss_fn):
    cfg = tiny_model.config
    x, c = latents(cfg, 2, 4), conds(2, 4)
    d = cfg.dit
    mask = (torch.rand(2, 4, d.num_views, 1, d.latent_size, d.latent_size, generator=torch.Generator().manual_seed(3))
            < 0.2).float()
    sched = cfg.schedule

    def run(**kw):
        return loss_fn(tiny_model.dit, x, c, sched, generator=torch.Generator().manual_seed(0), **kw)

    plain, _ = run()
    zero, m0 = run(focus=mask, focus_weight=0.0)
    torch.testing.assert_close(zero, plain)  # W = 0 is the plain loss
    torch.testing.assert_close(m0["loss_plain"], plain)
    heavy, mh = run(focus=mask, focus_weight=9.0)
    torch.testing.assert_close(mh["loss_plain"], plain)  # same draws, same errors
    # the weighted mean of per-element errors: (plain * n + 9 * focus_sum) / (n + 9 * n_focus), per channel alike
    m = mask[:, 1:]
    n, nf = m.numel(), m.sum()
    want = (plain * n + 9.0 * mh["loss_focus"] * nf) / (n + 9.0 * nf)
    torch.testing.assert_close(heavy, want)
    assert not torch.isclose(heavy, plain)
    with pytest.raises(ValueError, match="does not fit latents"):
        run(focus=mask[:, :, :2], focus_weight=1.0)
    with pytest.raises(ValueError, match="focus_weight must be >= 0"):
        run(focus=mask, focus_weight=-1.0)


def test_a_huge_focus_weight_leaves_only_the_masked_cells_error(tiny_model):
    """With everything but one cell masked out, a huge weight makes the loss that cell's error alone."""
    cfg = tiny_model.config
    x, c = latents(cfg, 1, 3), conds(1, 3)
    d = cfg.dit
    mask = torch.zeros(1, 3, d.num_views, 1, d.latent_size, d.latent_size)
    mask[:, :, 0, :, 2, 3] = 1.0
    loss, met = step_forcing_loss(tiny_model.dit, x, c, cfg.schedule, generator=torch.Generator().manual_seed(0),
                                  focus=mask, focus_weight=1e6)
    torch.testing.assert_close(loss, met["loss_focus"], rtol=1e-3, atol=0)
