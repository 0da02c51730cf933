"""SimDROID's scenes: the legible SimDROID-v1 beside the classic v0, their legibility, and the tools that take a
scene."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import neuralsim  # noqa: F401  (registers the environments)
from benchmarks.common import object_probe as P
from benchmarks.fidelity import legibility
from neuralsim.data.generate import GenerationMismatchError, generate
from neuralsim.envs import scene as S
from neuralsim.envs.experts import run_expert_episode
from neuralsim.envs.sim_droid import TASK_FAMILIES, SimDROIDEnv


@pytest.fixture(scope="module")
def legible():
    e = SimDROIDEnv(scene="legible")
    yield e
    e.close()


def test_v1_is_the_legible_scene_and_passes_check_env():
    e = gym.make("SimDROID-v1")
    assert e.unwrapped.scene is S.LEGIBLE and e.spec.max_episode_steps == 150
    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("error")
        check_env(e.unwrapped, skip_render_check=True)
    obs, info = e.reset(seed=3)
    assert len(info["object_poses"]) == S.LEGIBLE.num_cubes + 2  # cubes, bowl, pad
    assert obs["exterior_image_1_left"].shape == (64, 64, 3)
    ep = e.unwrapped.episode()
    assert ep.metadata["scene"] == "legible" and ep.metadata["source"] == "SimDROID-v1"
    e.close()
    assert gym.make("SimDROID-v0").unwrapped.scene is S.CLASSIC


def test_scene_sizes_reach_the_compiled_model(legible):
    m, h = legible.model, legible.h
    assert np.allclose(m.geom_size[h.cube_geom[0]], S.LEGIBLE.cube_size / 2)
    assert np.allclose(m.geom_size[h.pad_geom][:2], S.LEGIBLE.pad_half)
    for name, (pos, _, fovy) in S.LEGIBLE.exterior_cameras.items():
        assert np.allclose(m.camera(name).pos, pos) and m.camera(name).fovy[0] == pytest.approx(fovy)


def test_an_episodes_scene_is_read_from_its_metadata(legible):
    assert S.scene_of({"scene": "legible", "source": "SimDROID-v0"}) == "legible"  # recorded beats inferred
    assert S.scene_of({"source": "NeuralDROID-v0", "spec_source": "SimDROID-v1"}) == "legible"
    assert S.scene_of({"source": "SimDROID-v0"}) == "classic"
    assert S.scene_of({}) == "classic" and S.scene_of({"source": "images"}, default="legible") == "legible"
    from neuralsim.envs.episodes import EpisodeSpec

    spec = EpisodeSpec.from_simdroid(7, "stack", env=legible)
    assert spec.metadata["scene"] == "legible" and S.scene_of(spec.metadata) == "legible"


def test_unknown_scene_is_refused_by_name():
    with pytest.raises(ValueError, match="banana"):
        SimDROIDEnv(scene="banana")


def test_legible_layouts_keep_the_scene_rules(legible):
    sc = S.LEGIBLE
    for seed in range(12):
        _, info = legible.reset(seed=seed, options={"task": TASK_FAMILIES[seed % 3]})
        cubes = [legible.cube_position(i)[:2] for i in range(sc.num_cubes)]
        bowl, pad = info["object_poses"]["bowl"][:2], info["object_poses"]["pad"][:2]
        assert np.linalg.norm(cubes[0] - cubes[1]) > sc.cube_spacing
        for c in cubes:
            assert np.max(np.abs(c - bowl)) > sc.bowl_half + sc.bowl_clearance
            assert np.max(np.abs(c - pad)) > sc.pad_half + sc.pad_clearance
            (x0, x1), (y0, y1) = sc.cube_region
            assert x0 <= c[0] <= x1 and y0 <= c[1] <= y1


@pytest.mark.parametrize("task", TASK_FAMILIES)
def test_expert_succeeds_in_the_legible_scene(legible, task):
    info, _ = run_expert_episode(legible, seed=11, task=task)
    assert info["success"] and info["rubric_level"] == 5


def test_legibility_separates_the_scenes():
    """The classic scene's cubes are ~3 px wide at 64x64 (fails the 8 px target); the legible scene's pass."""
    classic, legible = (legibility.measure_scene(s, layouts=2) for s in ("classic", "legible"))
    assert classic["min_span_px"] < 4.0 and not classic["passes"]
    assert legible["min_span_px"] >= legibility.MIN_SPAN_PX and legible["passes"]
    assert all(share == 1.0 for share in legible["goal_visible_share"].values())


def test_legibility_projection_matches_the_scene_cameras(legible):
    """The benchmark projects through MuJoCo's compiled camera; the scene's own geometry agrees with it."""
    legible.reset(seed=0)
    pts = np.array([[0.5, 0.05, 0.03], [0.6, -0.1, 0.1], [0.45, 0.12, 0.0]])
    for v, cam in enumerate(legibility.EXTERIOR_CAMERAS):
        px = legibility.camera_projector(legible.model, legible.data, cam, 64)(pts)
        uv = S.project_exterior(pts, S.LEGIBLE)[:, v]  # [-1, 1]
        np.testing.assert_allclose(px, (uv + 1) / 2 * 64, atol=0.01)  # the MJCF rounds xyaxes to 5 decimals


def test_wrist_projection_matches_the_compiled_wrist_camera(legible):
    """project_wrist (forward kinematics of the joints, no MuJoCo) agrees with MuJoCo's own wrist camera."""
    import mujoco

    legible.reset(seed=1)
    for _ in range(10):  # somewhere off the reset posture
        legible.step(np.array([0.3, 0.4, -0.2, 0.3, 0.1, -0.3, 0.2, 0.0], np.float32))
    mujoco.mj_forward(legible.model, legible.data)
    q = legible.data.qpos[legible.h.arm_qpos].copy()
    pts = np.array([[0.5, 0.05, 0.03], [0.6, -0.1, 0.1], [0.45, 0.12, 0.0]])
    uv, ahead = S.project_wrist(pts, q[None])
    px = legibility.camera_projector(legible.model, legible.data, "wrist", 64)(pts)
    np.testing.assert_allclose(px[ahead[0]], ((uv[0] + 1) / 2 * 64)[ahead[0]], atol=0.05)
    assert ahead.shape == (1, 3) and ahead.any()


def test_probe_triangulates_through_its_scene():
    pts = np.array([[0.5, 0.05, 0.03], [0.58, -0.08, 0.09]])
    np.testing.assert_allclose(P.triangulate(S.project_exterior(pts, "legible"), "legible"), pts, atol=1e-9)
    # read through the other scene's cameras, the same image points land elsewhere
    assert np.abs(P.triangulate(S.project_exterior(pts, "legible"), "classic") - pts).max() > 0.05


def test_generate_records_the_scene_and_refuses_to_mix_scenes(tmp_path):
    params = dict(workers=1, seed=0, families=["stack"], max_steps=8, progress=False, frames_format="npy")
    generate(tmp_path, 1, scene="legible", **params)
    info = json.loads((tmp_path / "meta" / "info.json").read_text())
    assert "legible" in json.dumps(info)
    with pytest.raises(GenerationMismatchError, match="scene"):
        generate(tmp_path, 2, scene="classic", **params)
    with pytest.raises(ValueError, match="banana"):
        generate(tmp_path / "other", 1, scene="banana", **params)


def test_weak_grip_closes_only_to_the_legible_cubes_sides(legible):
    """The weak-grip failure closes to the scene's touch_grip: with the classic 0.34 a 6 cm cube is held firmly."""
    assert S.LEGIBLE.touch_grip < S.CLASSIC.touch_grip
    info, _ = run_expert_episode(legible, seed=1, task="put_in_bowl", failure="weak_grip")
    assert not info["success"]


def test_an_episode_set_of_the_legible_scene(tmp_path):
    """`--build-default --scene legible` writes specs that start from SimDROID-v1's own first observation."""
    from neuralsim.envs.episodes import EpisodeSpec, load_episodes, main

    out = tmp_path / "legible.npz"
    main(["--build-default", "--scene", "legible", "--out", str(out)])
    specs = list(load_episodes(out))
    first = specs[0]
    assert len(specs) == 24 and {s.metadata["source"] for s in specs} == {"SimDROID-v1"}
    seed, task = first.metadata["seed"], first.metadata["task"]
    again = EpisodeSpec.from_simdroid(seed, task, scene="legible")
    classic = EpisodeSpec.from_simdroid(seed, task)
    view = "exterior_image_1_left"
    np.testing.assert_array_equal(first.views[view], again.views[view])
    assert classic.metadata["source"] == "SimDROID-v0"
    assert np.abs(first.views[view].astype(int) - classic.views[view].astype(int)).mean() > 5
