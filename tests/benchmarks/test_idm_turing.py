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


def test_idm_turing_smoke_with_the_true_video_as_generated(one_true_episode, heldout_split, tiny_idm, tmp_path):
    from benchmarks.mirabench import idm_turing
    from benchmarks.mirabench.world_model_videos import checkpoint_hash

    e = one_true_episode
    cache = tmp_path / "videos"
    (cache / checkpoint_hash(None)).mkdir(parents=True)
    np.savez_compressed(cache / checkpoint_hash(None) / f"s0_{e.index}-{e.index}.npz", **{f"ep{e.index}": e.frames})
    out = tmp_path / "idm_turing.json"
    rep = idm_turing.run(idm_turing.Config(data=str(heldout_split), episodes=1, idm=str(tiny_idm), cache=str(cache),
                                           out=str(out), progress=False))
    s = rep["summary"]
    assert s["oracle"]["replay_success_rate"]["rate"] == 1.0
    row = rep["per_episode"][0]  # the same video twice: the same inferred actions and replay
    assert row["true_video"] == row["generated"]
    assert json.loads(out.read_text())["episodes"] == 1
    assert "IDM reads" in idm_turing.format_report(rep)
