"""The inverse dynamics model: saving, loading, refusing bad weights; its labels; the replay controller; a smoke run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.common import idm as D


@pytest.fixture
def tiny_idm(tmp_path, one_torch_thread):
    import torch

    torch.manual_seed(0)
    return D.save(D.make_network(D.IDMConfig(width=8, hidden=16)), tmp_path / "idm")


def test_save_and_load_round_trip(tiny_idm):
    import torch

    model = D.load(tiny_idm)
    again = D.make_network(model.config).eval()
    again.load_state_dict(model.state_dict())
    x = torch.randint(0, 255, (2, 2, 3, 64, 64, 3), dtype=torch.uint8)
    assert model(x).shape == (2, D.OUT_DIM)
    assert torch.equal(model(x), again(x))
    assert type(model).from_pretrained(tiny_idm).config == model.config


def test_refuses_missing_corrupt_and_mismatched_weights(tiny_idm, tmp_path):
    with pytest.raises(D.WeightsError, match="no config.json"):
        D.load(tmp_path / "nowhere")
    cfg = json.loads((tiny_idm / "config.json").read_text())
    (tiny_idm / "config.json").write_text(json.dumps({**cfg, "width": 16}))
    with pytest.raises(D.WeightsError, match="do not fit its config"):
        D.load(tiny_idm)
    (tiny_idm / "config.json").write_text(json.dumps({**cfg, "bogus": 1}))
    with pytest.raises(D.WeightsError, match="not an IDM config"):
        D.load(tiny_idm)
    (tiny_idm / "config.json").write_text(json.dumps(cfg))
    (tiny_idm / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(D.WeightsError, match="not a safetensors file"):
        D.load(tiny_idm)


def test_config_rejects_an_odd_image_size():
    with pytest.raises(ValueError, match="multiple of 16"):
        D.IDMConfig(image_size=60)


def test_rotation_vectors_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(20):
        v = rng.normal(size=3)
        v *= rng.uniform(0.0, 3.1) / np.linalg.norm(v)
        assert np.allclose(D.rotvec(D.rotation(v)), v, atol=1e-9)


def test_labels_decode_back_to_the_true_moves():
    from neuralsim import kinematics as K

    q = np.tile(K.RESET_JOINT_POSITION, (5, 1)) + np.linspace(0, 0.2, 5)[:, None]
    actions = np.zeros((5, 8), np.float32)
    actions[2:, 7] = 1.0
    y = D.labels(q, actions)
    p, R = D.tool_poses(q)
    moves = D.decode_outputs(y)
    assert len(moves) == 4
    assert np.allclose(moves[1].dp, p[2] - p[1]) and np.allclose(moves[1].p, p[2]) and np.allclose(moves[1].R, R[2])
    assert np.allclose(D.rotation(moves[1].dr) @ R[1], R[2], atol=1e-9)
    assert y[:, 15].tolist() == [0.0, 0.0, 1.0, 1.0]


def test_the_true_moves_replayed_through_the_controller_succeed(one_true_episode):
    from benchmarks.mirabench.idm_turing import replay
    from neuralsim.envs.sim_droid import SimDROIDEnv

    e = one_true_episode
    assert e.record["success"]
    y = D.labels(e.joint_position, e.actions)
    moves = D.decode_outputs(y)
    for m, g in zip(moves, y[:, 15]):
        m.gripper = float(g)
    env = SimDROIDEnv(image_size=64, reward_fn=None, max_episode_steps=None)
    try:
        assert replay(env, e.record, moves, D.ABSOLUTE_GAIN)["success"]
    finally:
        env.close()


@pytest.mark.parametrize("scene", ["classic", "legible"])
def test_idm_turing_smoke_with_the_true_video_as_generated(scene, request, tmp_path, one_torch_thread):
    """End to end on one episode of each scene with a tiny world model of that scene (its defaults: the scene's
    split, the scene's SimDROID for every replay), the true video cached as the world model's."""
    from benchmarks.common import heldout
    from benchmarks.mirabench import idm_turing
    from benchmarks.mirabench.world_model_videos import checkpoint_hash

    checkpoint = request.getfixturevalue("tiny_checkpoint" if scene == "classic" else "tiny_legible_checkpoint")
    split = request.getfixturevalue("heldout_split" if scene == "classic" else "legible_heldout_split")
    request.getfixturevalue("monkeypatch").setitem(heldout.SPLITS, scene, (str(split), "unused"))
    idm = D.save(D.make_network(D.IDMConfig(image_size=16, downsample=1, width=8, hidden=16, scene=scene)),
                 tmp_path / "idm")
    e = heldout.load_split(split, 16, 1)[0]  # the tiny model's resolution
    assert e.record["success"]
    cache = tmp_path / "videos" / checkpoint_hash(checkpoint)
    cache.mkdir(parents=True)
    np.savez_compressed(cache / f"s0_{e.index}-{e.index}.npz", **{f"ep{e.index}": e.frames})
    out = tmp_path / "idm_turing.json"
    rep = idm_turing.run(idm_turing.Config(checkpoint=str(checkpoint), episodes=1, idm=str(idm),
                                           cache=str(tmp_path / "videos"), out=str(out), progress=False))
    assert rep["scene"] == scene and rep["config"]["data"] == str(split) and rep["idm_config"]["scene"] == scene
    s = rep["summary"]
    assert s["oracle"]["replay_success_rate"]["rate"] == 1.0  # the true moves, replayed in the scene's SimDROID
    row = rep["per_episode"][0]  # the same video twice: the same inferred actions and replay
    assert row["true_video"] == row["generated"]
    assert json.loads(out.read_text())["episodes"] == 1
    assert f"({scene} scene)" in idm_turing.format_report(rep)


def test_the_default_idm_follows_the_scene_and_a_missing_one_names_its_training_command(
        tiny_legible_checkpoint, legible_heldout_split, tmp_path, monkeypatch):
    from benchmarks.mirabench import idm_turing

    assert D.default_dir("classic") == D.DEFAULT_DIR
    assert D.default_dir("legible") == D.DEFAULT_DIR.with_name("idm_legible")
    with pytest.raises(ValueError, match="unknown scene"):
        D.default_dir("nowhere")
    monkeypatch.setattr(D, "DEFAULT_DIR", tmp_path / "idm")  # the shipped IDMs' folder, holding none of the legible
    cfg = idm_turing.Config(checkpoint=str(tiny_legible_checkpoint), data=str(legible_heldout_split), episodes=1,
                            progress=False)
    with pytest.raises(D.WeightsError, match=f"no IDM of the legible scene at {tmp_path / 'idm_legible'}; train it "
                                             "with `python -m benchmarks.common.idm --scene legible`"):
        idm_turing.run(cfg)
    with pytest.raises(D.WeightsError, match="python -m benchmarks.common.idm --scene legible`"):
        D.load(D.default_dir("legible"))


def test_an_idm_of_another_scene_is_refused(tiny_legible_checkpoint, legible_heldout_split, tiny_idm):
    from benchmarks.mirabench import idm_turing

    assert D.load(tiny_idm).config.scene == "classic"
    with pytest.raises(ValueError, match="reads the classic scene, the world model makes the legible one"):
        idm_turing.run(idm_turing.Config(checkpoint=str(tiny_legible_checkpoint), data=str(legible_heldout_split),
                                         idm=str(tiny_idm), episodes=1, progress=False))


def test_training_records_the_scene_and_refuses_data_of_another(heldout_split, tmp_path, capsys, one_torch_thread):
    rng = np.random.default_rng(0)
    videos = [rng.integers(0, 255, (3, 3, 64, 64, 3), dtype=np.uint8) for _ in range(2)]
    targets = [rng.normal(size=(2, D.OUT_DIM)).clip(0, 1).astype(np.float32) for _ in range(2)]
    model = D.train(videos, targets, D.IDMConfig(width=8, hidden=16, scene="legible"), steps=1, progress=False)
    assert json.loads((D.save(model, tmp_path / "idm") / "config.json").read_text())["scene"] == "legible"
    with pytest.raises(SystemExit):
        D.main(["--scene", "legible", "--data", str(heldout_split), "--out", str(tmp_path / "x"), "--no-progress"])
    assert f"{heldout_split} holds classic-scene episodes, not legible ones" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
