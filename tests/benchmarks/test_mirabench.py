"""MiraBench's indicators on cases whose answer is known, the cube tracker's pixel part, and a smoke run."""

from __future__ import annotations

import json
from pathlib import Path

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


def cache_true_video(cache, checkpoint, episode) -> None:
    """Put ``episode``'s true video in the video cache as ``checkpoint``'s (the benchmark generates nothing)."""
    from benchmarks.mirabench.world_model_videos import checkpoint_hash

    root = cache / checkpoint_hash(checkpoint)
    root.mkdir(parents=True)
    np.savez_compressed(root / f"s0_{episode.index}-{episode.index}.npz", **{f"ep{episode.index}": episode.frames})


def test_mirabench_smoke_with_the_true_video_as_generated(request, tmp_path, one_torch_thread):
    """The pipeline end to end on one episode of the shipped model's scene, the true video cached as the world
    model's (no generation)."""
    from benchmarks.common.heldout import load_split
    from benchmarks.common.results_path import results_path
    from benchmarks.mirabench import mirabench
    from neuralsim.envs.neural_droid import checkpoint_scene

    scene = checkpoint_scene()
    split = request.getfixturevalue("heldout_split" if scene == "classic" else "legible_heldout_split")
    e = load_split(split, 64, 1)[0]
    cache_true_video(tmp_path / "videos", None, e)
    out = tmp_path / "mirabench.json"
    rep = mirabench.run(mirabench.Config(data=str(split), episodes=1, cache=str(tmp_path / "videos"), out=str(out),
                                         progress=False))
    assert json.loads(out.read_text())["episodes"] == 1
    assert rep["scene"] == scene
    l1 = rep["level1"]
    assert l1["existence"]["generated"]["rate"] == l1["existence"]["true_video"]["rate"] == 1.0
    assert rep["level2"]["generated"]["outcome_agreement"]["rate"] == 1.0
    shipped = json.loads(results_path("optimism_bias").read_text()).get("scene", "classic")
    if shipped == scene:  # the shipped Level 3 report is read only when it is of the shipped model's scene
        assert rep["level3"] is not None and rep["headline"]["reproduced"] in (True, False)
    else:
        assert rep["level3"] is None and f"{shipped} scene" in rep["level3_skipped"]
    assert "Level 1" in mirabench.format_report(rep)


def test_goal_regions_are_the_scenes(one_torch_thread):
    from benchmarks.mirabench.mirabench import goal_of
    from neuralsim.envs.scene import get_scene

    rec = {"initial_poses": {"bowl": [0.5, 0.1, 0.0], "pad": [0.4, 0.0, 0.0], "red_cube": [0.6, 0.0, 0.03]},
           "base": "red_cube"}
    for scene in ("classic", "legible"):
        sc = get_scene(scene)
        assert goal_of({**rec, "task": "put_in_bowl"}, scene)[1] == sc.bowl_half
        assert goal_of({**rec, "task": "push_to_pad"}, scene)[1] == sc.pad_half
        centre, half = goal_of({**rec, "task": "stack"}, scene)
        assert half == pytest.approx(0.6 * sc.cube_size) and centre.tolist() == [0.6, 0.0]
    assert get_scene("legible").bowl_half != get_scene("classic").bowl_half


def test_mirabench_on_a_legible_model_follows_its_scene(tiny_legible_checkpoint, legible_heldout_split, tmp_path,
                                                        monkeypatch, one_torch_thread):
    """A legible world model with every default: the legible held-out split, the legible probe, the truth replayed
    in SimDROID-v1 (which reproduces the recorded episode) and the legible goal regions."""
    from benchmarks.common import heldout
    from benchmarks.common.object_probe import default_dir
    from benchmarks.common.results_path import results_path
    from benchmarks.mirabench import mirabench

    monkeypatch.setitem(heldout.SPLITS, "legible", (str(legible_heldout_split), "unused"))  # default_split's answer
    e = heldout.load_split(legible_heldout_split, 16, 1)[0]  # the tiny model's resolution
    truth = mirabench.truth_replay(e, "legible")
    assert truth["xyz"].shape[1] == 2  # the legible scene's two cubes
    assert np.allclose(truth["xyz"][-1, e.record["colors"].index(e.record["target"].removesuffix("_cube"))],
                       e.record["final_poses"][e.record["target"]][:3], atol=1e-3)
    scenes = {"truth": [], "goal": []}
    real_truth, real_goal = mirabench.truth_replay, mirabench.goal_of
    monkeypatch.setattr(mirabench, "truth_replay", lambda ep, scene: scenes["truth"].append(scene) or
                        real_truth(ep, scene))
    monkeypatch.setattr(mirabench, "goal_of", lambda rec, scene: scenes["goal"].append(scene) or real_goal(rec, scene))
    report = json.loads(results_path("optimism_bias").read_text())
    (tmp_path / "optimism.json").write_text(json.dumps({**report, "scene": "legible"}))
    cache_true_video(tmp_path / "videos", tiny_legible_checkpoint, e)
    rep = mirabench.run(mirabench.Config(checkpoint=str(tiny_legible_checkpoint), episodes=1,
                                         optimism=str(tmp_path / "optimism.json"), cache=str(tmp_path / "videos"),
                                         out=str(tmp_path / "mirabench.json"), progress=False))
    assert rep["scene"] == "legible" and rep["config"]["data"] == str(legible_heldout_split)
    assert (Path.cwd() / rep["config"]["probe"]).resolve() == default_dir("legible")
    assert scenes["truth"] == ["legible"] and set(scenes["goal"]) == {"legible"}
    row = rep["per_episode"][0]
    assert row["true_success"] == e.record["success"]
    assert all(len(row["level1"][src]["existence"]) == 2 for src in ("generated", "round_trip", "true_video"))
    assert rep["level3"] is not None
    assert "legible scene" in mirabench.format_report(rep)


def test_mirabench_refuses_inputs_of_another_scene(tiny_legible_checkpoint, heldout_split, legible_heldout_split):
    import re

    from benchmarks.common.object_probe import default_dir
    from benchmarks.mirabench import mirabench

    legible = dict(checkpoint=str(tiny_legible_checkpoint), episodes=1, progress=False)
    with pytest.raises(ValueError, match=re.escape(f"{heldout_split} holds classic-scene episodes, the world model "
                                                   "is trained on the legible scene")):
        mirabench.run(mirabench.Config(data=str(heldout_split), **legible))
    with pytest.raises(ValueError, match="reads the classic scene, the world model the legible one"):
        mirabench.run(mirabench.Config(data=str(legible_heldout_split), probe=str(default_dir("classic")), **legible))


def test_level3_reads_only_a_report_of_the_models_scene(tmp_path, monkeypatch):
    from benchmarks.common import results_path as R
    from benchmarks.mirabench.mirabench import level3_source

    monkeypatch.setattr(R, "RESULTS_DIR", tmp_path)  # where the shipped report lives
    shipped = tmp_path / "optimism_bias.json"
    shipped.write_text(json.dumps({"config": {}}))  # records no scene: a classic model's
    assert level3_source("default", "classic") == (str(shipped), None)
    path, why = level3_source("default", "legible")  # the shipped report of another scene: left out
    assert path is None and "is of the classic scene, the world model of the legible one" in why
    with pytest.raises(ValueError, match="classic scene.*--no-level3"):  # ... a given one: refused
        level3_source(str(shipped), "legible")
    legible = tmp_path / "legible.json"
    legible.write_text(json.dumps({"scene": "legible"}))
    assert level3_source(str(legible), "legible") == (str(legible), None)
    assert level3_source(None, "legible")[0] is None


@pytest.mark.parametrize("name", ["mirabench", "idm_turing"])
def test_a_missing_split_is_refused_with_the_command_that_makes_it(name, tmp_path, capsys):
    import importlib

    module = importlib.import_module(f"benchmarks.mirabench.{name}")
    with pytest.raises(SystemExit) as e:
        module.main(["--data", str(tmp_path / "nothing"), "--quick", "--no-progress"])
    assert e.value.code == 2
    assert f"neuralsim data generate {tmp_path / 'nothing'} --episodes 60 --seed 1000000" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["mirabench", "idm_turing"])
def test_a_legible_models_missing_default_split_is_named_with_its_scene(name, tiny_legible_checkpoint, tmp_path,
                                                                         monkeypatch, capsys):
    import importlib

    from benchmarks.common import heldout

    monkeypatch.setitem(heldout.SPLITS, "legible", (str(tmp_path / "legible_heldout"), "unused"))
    module = importlib.import_module(f"benchmarks.mirabench.{name}")
    with pytest.raises(SystemExit) as e:
        module.main(["--checkpoint", str(tiny_legible_checkpoint), "--quick", "--no-progress"])
    assert e.value.code == 2
    assert (f"neuralsim data generate {tmp_path / 'legible_heldout'} --episodes 60 --seed 1000000 --scene legible"
            in capsys.readouterr().err)
