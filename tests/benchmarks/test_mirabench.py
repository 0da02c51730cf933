"""MiraBench's indicators on cases whose answer is known, the cube tracker's pixel part, and a smoke run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.common.cube_tracks import reference_colours, window_blobs
from benchmarks.mirabench import indicators as I

T = 60


def carried_cube():
    """A true pick-and-place: the cube rests, is carried 0.2 m at 1 cm per frame with the tool point on it, and rests
    again after the gripper leaves; always visible, colour steady."""
    xyz = np.zeros((T, 3))
    xyz[:, :2] = [0.5, 0.0]
    xyz[:, 2] = 0.025
    xyz[20:40, 1] = np.linspace(0.0, 0.2, 20)
    xyz[40:, 1] = 0.2
    tcp = np.tile([0.4, -0.3, 0.3], (T, 1))
    tcp[15:42] = xyz[15:42] + [0, 0, 0.02]
    return xyz, tcp, np.ones(T), np.full(T, 5.0)


def test_a_true_track_passes_every_indicator():
    xyz, tcp, area, drift = carried_cube()
    assert I.existence(area).passed
    assert I.colour_consistency(area, drift).passed
    assert I.size_consistency(area).passed
    assert I.occlusion_consistency(area, drift).passed is None  # never disappears: does not apply
    assert I.teleport(xyz, area).passed
    assert I.post_contact_drift(xyz, tcp, area).passed
    assert I.fall(xyz, tcp, area).passed is None  # never unsupported


def test_a_painted_out_cube_fails_persistence():
    _, _, area, drift = carried_cube()
    area[25:] = 0.0  # gone from frame 25 on
    drift[25:] = np.nan
    assert not I.existence(area).passed
    assert I.occlusion_consistency(area, drift).passed is False  # never comes back


def test_an_occluded_cube_that_comes_back_passes_occlusion():
    _, _, area, drift = carried_cube()
    area[30:36] = 0.0  # behind the arm for 6 frames
    assert I.occlusion_consistency(area, drift).passed is True
    assert I.existence(area).passed


def test_a_cube_that_comes_back_in_another_colour_fails_occlusion():
    _, _, area, drift = carried_cube()
    area[30:36] = 0.0
    drift[36:] = 120.0  # a different cube came back
    assert I.occlusion_consistency(area, drift).passed is False
    assert not I.colour_consistency(area, drift).passed


def test_a_grown_cube_fails_size():
    _, _, area, _ = carried_cube()
    area[10:] = 5.0
    assert not I.size_consistency(area).passed


def test_a_teleported_cube_fails_motion():
    xyz, tcp, area, _ = carried_cube()
    xyz[30:, 0] += 0.3  # jumps 30 cm in one frame
    assert not I.teleport(xyz, area).passed
    xyz, tcp, area, _ = carried_cube()
    area[30:33] = 0.0
    xyz[33:, 0] += 0.3  # ... or while hidden for 3 frames
    assert not I.teleport(xyz, area).passed


def test_a_one_frame_probe_miss_is_not_a_teleport():
    xyz, _, area, _ = carried_cube()
    xyz[30, 0] += 0.3
    assert I.teleport(xyz, area).passed


def test_drift_after_contact_fails():
    xyz, tcp, area, _ = carried_cube()
    xyz[45:, 0] += np.linspace(0.0, 0.12, T - 45)  # slides 12 cm with the gripper gone
    assert not I.post_contact_drift(xyz, tcp, area).passed


def test_a_hovering_cube_fails_and_an_accelerating_fall_passes():
    xyz, tcp, area, _ = carried_cube()
    tcp[40:] = [0.4, -0.3, 0.5]
    xyz[40:52, 2] = 0.2  # released 20 cm up and hovering for 12 frames
    assert not I.fall(xyz, tcp, area).passed
    xyz, tcp, area, _ = carried_cube()
    tcp[40:] = [0.4, -0.3, 0.5]
    xyz[40:44, 2] = [0.2, 0.19, 0.16, 0.11]  # falling faster every frame, then on the table
    assert I.fall(xyz, tcp, area).passed
    xyz[40:44, 2] = [0.2, 0.12, 0.115, 0.11]  # decelerating in mid-air
    assert not I.fall(xyz, tcp, area).passed


def test_level2_grounding_and_completion():
    g = I.grounding(np.array([True, False, False]), np.array([True, False, False]), target=0)
    assert g["passed"] and g["distractor_moves"] == 0
    g = I.grounding(np.array([False, True, False]), np.array([True, False, False]), target=0)
    assert not g["passed"] and not g["target_agrees"] and g["distractor_moves"] == 1
    assert I.in_goal(np.array([0.51, 0.0]), "put_in_bowl", np.array([0.5, 0.0]), 0.065)
    assert not I.in_goal(np.array([0.6, 0.0]), "put_in_bowl", np.array([0.5, 0.0]), 0.065)
    c = I.task_completion(np.array([0.6, 0.0]), "stack", np.array([0.6, 0.01]), 0.03, true_success=True)
    assert c["shown_success"] and c["agrees"]


def test_motion_quality_of_a_frozen_cube():
    xyz, *_ = carried_cube()
    frozen = np.repeat(xyz[:1], T, 0)
    m = I.motion_quality(frozen, xyz)
    assert m["path_length_ratio"] == pytest.approx(0.0, abs=1e-9)
    assert m["track_error_m"] > 0.05
    assert I.motion_quality(xyz, xyz)["on_path_share"] == 1.0


def test_window_blobs_counts_a_painted_cube_and_nothing_once_painted_out():
    img = np.full((2, 64, 64, 3), (200, 160, 120), np.uint8)  # table
    img[0, 30:33, 40:43] = (240, 120, 20)  # a 3x3 orange cube in the first image only
    px = np.array([[41, 31], [41, 31]])
    ref = reference_colours(img[:1], px[:1], np.array([[0.94, 0.47, 0.08]]))
    counts, colours = window_blobs(img, px, np.repeat(ref, 2, 0))
    assert counts.tolist() == [9, 0]
    assert np.allclose(colours[0], (240, 120, 20)) and np.isnan(colours[1]).all()


def test_tracker_on_a_true_video_and_with_the_target_painted_out(one_true_episode, one_torch_thread):
    from benchmarks.common.cube_tracks import track_video
    from benchmarks.common.object_probe import DEFAULT_DIR, load

    e = one_true_episode
    probe = load(DEFAULT_DIR)
    cubes = [f"{c}_cube" for c in e.record["colors"]]
    true = track_video(probe, e.frames, cubes, e.joint_position)
    assert all(I.existence(true.area[:, c]).passed for c in range(len(cubes)))
    # paint every pixel of the target's colour with the table's from frame 10 on
    frames = e.frames.copy()
    target = cubes.index(e.record["target"])
    from benchmarks.common.object_probe import colour_rgb

    rgb = 255.0 * colour_rgb(cubes[target])
    near = np.linalg.norm(frames[10:, :2].astype(float) - rgb, axis=-1) < 90
    frames[10:, :2][near] = frames[0, 0, 40, 5]  # a table pixel
    painted = track_video(probe, frames, cubes, e.joint_position)
    assert not I.existence(painted.area[:, target]).passed


def test_mirabench_smoke_with_the_true_video_as_generated(one_true_episode, heldout_split, tmp_path,
                                                          one_torch_thread):
    """The pipeline end to end on one episode, the true video cached as the world model's (no generation)."""
    from benchmarks.mirabench import mirabench
    from benchmarks.mirabench.world_model_videos import checkpoint_hash

    e = one_true_episode
    cache = tmp_path / "videos"
    (cache / checkpoint_hash(None)).mkdir(parents=True)
    np.savez_compressed(cache / checkpoint_hash(None) / f"s0_{e.index}-{e.index}.npz", **{f"ep{e.index}": e.frames})
    out = tmp_path / "mirabench.json"
    rep = mirabench.run(mirabench.Config(data=str(heldout_split), episodes=1, cache=str(cache), out=str(out),
                                         progress=False))
    assert json.loads(out.read_text())["episodes"] == 1
    l1 = rep["level1"]
    assert l1["existence"]["generated"]["rate"] == l1["existence"]["true_video"]["rate"] == 1.0
    assert rep["level2"]["generated"]["outcome_agreement"]["rate"] == 1.0
    assert rep["level3"] is not None and rep["headline"]["reproduced"] in (True, False)
    assert "Level 1" in mirabench.format_report(rep)


@pytest.mark.parametrize("name", ["mirabench", "idm_turing"])
def test_a_missing_split_is_refused_with_the_command_that_makes_it(name, tmp_path, capsys):
    import importlib

    module = importlib.import_module(f"benchmarks.mirabench.{name}")
    with pytest.raises(SystemExit) as e:
        module.main(["--data", str(tmp_path / "nothing"), "--quick", "--no-progress"])
    assert e.value.code == 2
    assert f"neuralsim data generate {tmp_path / 'nothing'} --episodes 60 --seed 1000000" in capsys.readouterr().err
