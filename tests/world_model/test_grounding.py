"""Geometry-grounded conditioning: the projection against MuJoCo's cameras, the grounded DiT's cache, training,
checkpoints and zero start."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from neuralsim import kinematics as K
from neuralsim.world_model.config import WorldModelConfig, preset
from neuralsim.world_model.grounding import FINGERTIP_IN_HAND, POINT_NAMES, ViewProjector, scene_geometry
from neuralsim.world_model.model import WorldModel

from .conftest import conds, latents, randomise
from .test_dit import _recompute_frame

JOINT_STATES = [
    K.RESET_JOINT_POSITION,
    K.RESET_JOINT_POSITION + np.array([0.4, 0.3, -0.2, 0.35, 0.3, -0.25, 0.8]),
    K.RESET_JOINT_POSITION + np.array([-0.5, 0.5, 0.3, 0.6, -0.4, 0.2, -1.2]),
    np.array([0.2, 0.1, -0.1, -2.0, 0.1, 2.2, 0.6]),
]
GRIPPERS = [0.0, 0.5, 1.0, 0.2]


def _mujoco_projection(model, data, cam_name: str, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MuJoCo's pinhole model: world points (P, 3) -> (column, row) in [-1, 1] (square image) and depth."""
    import mujoco

    cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, cam_name)
    pos, rot = data.cam_xpos[cam], data.cam_xmat[cam].reshape(3, 3)  # columns: right, up, backward
    local = (points - pos) @ rot
    depth = -local[:, 2]
    tan = math.tan(math.radians(model.cam_fovy[cam]) / 2)
    return np.stack([local[:, 0] / depth / tan, -local[:, 1] / depth / tan], -1), depth


def _true_points(env, handles) -> np.ndarray:
    """The tool site, both fingertips (read through MuJoCo's finger bodies) and the tool point's foot (P, 3)."""
    import mujoco

    d, m = env.data, env.model
    tcp = d.site_xpos[handles.tcp_site].copy()
    tips = []
    for name, sign in (("left_finger", 1.0), ("right_finger", -1.0)):
        body = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name)
        local = np.array([FINGERTIP_IN_HAND[0], sign * FINGERTIP_IN_HAND[1], FINGERTIP_IN_HAND[2] - 0.0584])
        tips.append(d.xpos[body] + d.xmat[body].reshape(3, 3) @ local)
    return np.stack([tcp, *tips, np.array([tcp[0], tcp[1], 0.0])])


@pytest.mark.parametrize("scene", ["legible", "classic"])
def test_projection_matches_mujocos_cameras(scene):
    """grounding.py's image points from (FK flange pose, gripper) equal MuJoCo's projection of the sites it renders
    with, to well under half a pixel at 64x64, in all three views."""
    import mujoco

    from neuralsim.envs.scene import CAMERA_NAMES, FINGER_OPEN
    from neuralsim.envs.sim_droid import SimDROIDEnv

    env = SimDROIDEnv(scene=scene)
    env.reset(seed=0)
    m, d, h = env.model, env.data, env.h
    projector = ViewProjector(scene_geometry(scene), grid=4)
    half_pixel = 0.5 * 2 / 64
    worst, seen = 0.0, 0
    for q, g in zip(JOINT_STATES, GRIPPERS):
        d.qpos[h.arm_qpos] = q
        d.qpos[h.finger_qpos] = FINGER_OPEN * (1.0 - g)
        mujoco.mj_forward(m, d)
        cond = torch.tensor(np.concatenate([K.forward_kinematics(q), [g]]), dtype=torch.float64)
        uv, ahead, depth = projector.project(cond[None])
        uv, ahead, depth = uv[0].double().numpy(), ahead[0].numpy(), depth[0].double().numpy()
        points = _true_points(env, h)
        assert np.allclose(points[0], K.tool_pose(q)[0], atol=1e-9)
        for v, cam in enumerate(CAMERA_NAMES):
            want, want_depth = _mujoco_projection(m, d, cam, points)
            assert np.allclose(depth[v], want_depth, atol=1e-4), (scene, cam, depth[v], want_depth)
            assert (ahead[v] == (want_depth > 0.01)).all()
            inside = (want_depth > 0.01) & (np.abs(want) <= 1.0).all(-1)
            seen += int(inside.sum())
            if inside.any():
                err = np.abs(uv[v][inside] - want[inside]).max()
                worst = max(worst, err)
                assert err < half_pixel / 5, (scene, cam, q, g, uv[v], want)
    assert seen >= len(JOINT_STATES) * 4  # the checks saw points in the views
    env.close()


def test_features_mark_the_token_a_point_falls_in():
    """The bump is 1 at the token holding a point's projection and the offsets point to it."""
    projector = ViewProjector(scene_geometry("classic"), grid=4)
    cond = torch.tensor([[*K.forward_kinematics(JOINT_STATES[1]), 0.0]], dtype=torch.float32)
    feats = projector(cond)  # (1, 48, P*6)
    assert feats.shape == (1, 3 * 16, len(POINT_NAMES) * 6)
    uv, ahead, _ = projector.project(cond)
    f = feats[0].view(3, 16, len(POINT_NAMES), 6)
    checked = 0
    for v in range(3):
        for p in range(len(POINT_NAMES)):
            if not ahead[0, v, p] or (uv[0, v, p].abs() > 1).any():
                continue
            cell = (uv[0, v, p] + 1) / 2 * 4
            if ((cell - cell.round()).abs() < 0.02).any():  # on a token border: either token may win
                continue
            col, row = cell.floor().clamp(0, 3).long().tolist()
            checked += 1
            best = int(f[v, :, p, 2].argmax())
            assert best == row * 4 + col, (v, p)
            assert f[v, best, p, :2].abs().max() <= 0.5 + 1e-5
            assert f[v, best, p, 3] == 1 and f[v, best, p, 4] == 1
    assert checked >= 6


# ----------------------------------------------------------------------------- the grounded DiT
def _grounded(seed: int = 0) -> WorldModel:
    torch.manual_seed(seed)
    wm = WorldModel(preset("tiny_grounded"))
    randomise(wm.dit, seed)
    return wm.eval()


def _pose_conds(b: int, *lead: int, seed: int = 0) -> torch.Tensor:
    """Conditions near the workspace (random joints around the reset pose), so the points land in the views."""
    g = torch.Generator().manual_seed(seed)
    q = torch.as_tensor(K.RESET_JOINT_POSITION, dtype=torch.float32) + 0.3 * torch.randn(b, *lead, 7, generator=g)
    return torch.cat([K.forward_kinematics(q), torch.rand(b, *lead, 1, generator=g)], dim=-1)


def test_grounded_kv_cache_equals_full_recompute():
    wm = _grounded()
    dit, cfg = wm.dit, wm.config
    window, num_sink, B = 4, 1, 2
    state = wm.new_state(B, window=window, num_sink=num_sink)
    views = torch.randint(0, 256, (B, 3, 16, 16, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(9))
    c0 = _pose_conds(B, seed=11)
    wm.reset(state, None, views, c0)
    frames, cs = [wm.encode(views)], [c0]
    with torch.no_grad():
        for n in range(1, 3 * window):
            noise, c = latents(cfg, B, seed=100 + n), _pose_conds(B, seed=200 + n)
            ref = _recompute_frame(dit, torch.stack(frames, 1), torch.stack(cs, 1), noise, c, cfg.schedule, window,
                                   num_sink)
            out = wm.generate(state, noise, c)
            assert torch.allclose(out, ref, atol=1e-4, rtol=1e-4), f"frame {n}: max err {(out - ref).abs().max()}"
            frames.append(out)
            cs.append(c)


@pytest.mark.parametrize("window,num_sink", [(4, 0), (4, 1), (3, 2), (1, 0)])
def test_dit_cache_tests_pass_grounded(window, num_sink):
    """test_dit's cache-equals-recompute tests (separate commit pass, fused commit, per-row steps and resets) on the
    grounded tiny model."""
    from . import test_dit

    test_dit.test_kv_cache_equals_full_recompute_before_and_after_the_window_slides(_grounded(), window, num_sink)
    test_dit.test_fused_commit_generation_equals_full_recompute(_grounded(), window, num_sink)
    if (window, num_sink) == (4, 0):
        test_dit.test_fused_commit_per_row_steps_and_resets(_grounded())
        test_dit.test_per_row_reset_matches_a_fresh_single_row_state(_grounded())
        test_dit.test_causality_changing_frame_j_never_changes_earlier_frames(_grounded())


def test_grounding_changes_the_output_once_trained_and_starts_as_the_ungrounded_model():
    """A fresh grounded model (its last grounding layer zero) computes exactly what the ungrounded model with the
    same weights does; with that layer non-zero the tokens see where the hand is."""
    torch.manual_seed(0)
    plain = WorldModel(preset("tiny")).eval()
    randomise(plain.dit, 3)
    torch.manual_seed(0)
    grounded = WorldModel(preset("tiny_grounded")).eval()
    missing = grounded.load_state_dict(plain.state_dict(), strict=False).missing_keys
    assert missing and all(k.startswith("dit.grounding_embed.") for k in missing)
    x, c = latents(plain.config, 2, 4), _pose_conds(2, 4)
    t = torch.rand(2, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(grounded.dit(x, t, c), plain.dit(x, t, c))
        randomise(grounded.dit.grounding_embed, 5)
        assert not torch.allclose(grounded.dit(x, t, c), plain.dit(x, t, c))


def test_grounded_model_round_trips_through_save_and_load(tmp_path):
    wm = _grounded()
    wm.save_pretrained(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "config.json").read_text())
    assert saved["dit"]["grounding"] == "projected" and saved["dit"]["geometry"]["scene"] == "classic"
    back = WorldModel.from_pretrained(tmp_path / "m")
    assert back.config.to_dict() == wm.config.to_dict()
    for (k, a), (_, b) in zip(wm.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), k
    x, c = latents(wm.config, 1, 3), _pose_conds(1, 3)
    t = torch.full((1, 3), 0.5)
    with torch.no_grad():
        assert torch.equal(wm.dit(x, t, c), back.dit(x, t, c))


def test_a_config_without_the_grounding_fields_loads_ungrounded(tmp_path):
    """config.json written before grounding existed: no ``grounding`` / ``geometry`` keys -> "none", bit-identical
    outputs."""
    torch.manual_seed(0)
    wm = WorldModel(preset("tiny")).eval()
    randomise(wm.dit, 1)
    old = wm.config.to_dict()
    assert not {"grounding", "geometry"} & set(old["dit"])  # an ungrounded config is written as before
    cfg = WorldModelConfig.from_dict(old)
    assert cfg.dit.grounding == "none" and cfg.dit.geometry is None
    again = WorldModel(cfg).eval()
    again.load_state_dict(wm.state_dict())
    x, c = latents(wm.config, 1, 3), conds(1, 3)
    with torch.no_grad():
        assert torch.equal(again.dit(x, torch.full((1, 3), 0.3), c), wm.dit(x, torch.full((1, 3), 0.3), c))


def test_geometry_follows_the_scene_it_was_derived_from():
    cfg = preset("tiny_grounded")
    assert cfg.dit.geometry == scene_geometry("classic")
    legible = WorldModelConfig.from_dict({**cfg.to_dict(), "scene": "legible",
                                          "dit": {**cfg.to_dict()["dit"], "geometry": None}})
    assert legible.dit.geometry == scene_geometry("legible")
    wm = WorldModel(preset("tiny_grounded"))
    wm.set_scene("legible")
    assert wm.config.scene == "legible" and wm.config.dit.geometry["scene"] == "legible"
    assert torch.allclose(wm.dit.grounding_embed.projector.ext_pos,
                          torch.tensor(scene_geometry("legible")["exterior_position"]))
    with pytest.raises(ValueError, match="grounding"):
        dataclasses.replace(cfg.dit, grounding="rays")


def test_a_grounded_tiny_model_trains(tmp_path):
    from neuralsim.world_model.train import train

    from .test_train import _cfg

    summary = train(_cfg(tmp_path / "run", config="tiny_grounded", steps=3, checkpoint_every=3))
    assert summary["step"] == 3
    losses = [json.loads(line)["loss"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
              if '"loss"' in line]
    assert losses and all(math.isfinite(x) for x in losses)
    wm = WorldModel.from_pretrained(tmp_path / "run" / "model")
    assert wm.config.dit.grounding == "projected"
    assert wm.dit.grounding_embed.mlp[-1].weight.abs().sum() > 0  # the zero layer learned


def test_model_edit_adds_grounding_without_changing_the_model(tmp_path):
    from neuralsim.world_model.edit import EditConfig, edit_model
    from neuralsim.world_model.info import checkpoint_info, format_checkpoint_info

    torch.manual_seed(0)
    plain = WorldModel(preset("tiny")).eval()
    randomise(plain.dit, 2)
    plain.save_pretrained(tmp_path / "plain")
    edited = edit_model(EditConfig(checkpoint=str(tmp_path / "plain"), out=str(tmp_path / "grounded"),
                                   grounding="projected"))
    back = WorldModel.from_pretrained(tmp_path / "grounded")
    assert back.config.dit.grounding == "projected" and back.config.recipe["edits"][-1] == {"grounding": "projected"}
    x, c = latents(plain.config, 1, 3), _pose_conds(1, 3)
    t = torch.full((1, 3), 0.7)
    with torch.no_grad():
        assert torch.equal(back.dit(x, t, c), plain.dit(x, t, c))
        assert torch.equal(edited.dit(x, t, c), plain.dit(x, t, c))
    info = checkpoint_info(tmp_path / "grounded")
    assert info["architecture"]["grounding"] == "projected (classic cameras)"
    assert "grounded in the views: projected" in format_checkpoint_info(info)
    assert "grounded" not in format_checkpoint_info(checkpoint_info(tmp_path / "plain"))
