"""Tests of the flow-matching policies (:mod:`policies.flow`): config checks, training (the loss falls, the CLI smoke
run, resume on the same curve), checkpoints, deterministic actions, valid chunks in SimDROID-v1 and NeuralDROID-v0,
bad inputs, ``make_policy`` names and a round trip through :mod:`policies.server` on loopback.

Everything runs on a 2-episode legible dataset from the real generator (40 steps each, so the episodes are not
successful: the tests clone every episode) and the ``tiny`` preset.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import neuralsim  # noqa: F401  (registers the envs)
from policies import available_policies, make_policy, run_episode
from policies.flow import CheckpointError, FlowConfig, FlowPolicy, PolicyInputError
from policies.visuomotor.tokens import InstructionError

pytestmark = pytest.mark.timeout(180)

ENV = "SimDROID-v1"
CLONE_ALL = dict(successful_only=False, include_failure_modes=True)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from neuralsim.data.generate import generate

    root = tmp_path_factory.mktemp("flow_demos")
    generate(root, episodes=2, scene="legible", max_steps=40, progress=False)
    return root


def tiny_train(data: Path, out: Path, **kw) -> dict:
    from policies.flow.train import FlowTrainConfig, train

    cfg = dict(data=str(data), out=str(out), preset="tiny", steps=4, snapshots="a=2,b=4", batch_size=8, lr=3e-3,
               progress=False, **CLONE_ALL)
    return train(FlowTrainConfig(**{**cfg, **kw}))


@pytest.fixture(scope="module")
def trained(dataset, tmp_path_factory) -> dict:
    import torch

    before = torch.get_num_threads()
    summary = tiny_train(dataset, tmp_path_factory.mktemp("flow_run"), steps=60, snapshots="last=60", batch_size=16)
    torch.set_num_threads(before)
    return summary


@pytest.fixture(scope="module")
def observation() -> tuple[dict, str]:
    env = gym.make(ENV)
    obs, info = env.reset(seed=2_000_000)
    env.close()
    return obs, info["instruction"]


def load(trained: dict, **kw) -> FlowPolicy:
    return FlowPolicy.from_pretrained(trained["snapshots"]["last"], num_threads=1, **kw)


# ----------------------------------------------------------------------------- config
def test_config_refuses_bad_fields_by_name():
    with pytest.raises(ValueError, match="wrist view"):
        FlowConfig(views=("exterior_image_1_left", "exterior_image_2_left"))
    with pytest.raises(ValueError, match="heads must divide dim"):
        FlowConfig(dim=30, heads=4)
    with pytest.raises(ValueError, match="strides"):
        FlowConfig(strides=(2, 2, 2, 2), image_size=32)
    with pytest.raises(ValueError, match="action_std"):
        FlowConfig(action_std=(1.0,) * 6 + (0.0,))
    with pytest.raises(CheckpointError, match="unknown fields"):
        FlowConfig.from_json(json.dumps({"width": 8, "depth": 3}))
    cfg = FlowConfig(width=8)
    assert FlowConfig.from_json(cfg.to_json()) == cfg and cfg.feature_size == 4 and cfg.action_mode == "tool_delta"


# ----------------------------------------------------------------------------- training
def test_tiny_training_lowers_the_flow_loss(trained):
    assert trained["steps"] == 60 and trained["episodes"] == 2 and trained["samples"] == 82
    assert trained["loss_last"] < 0.85 * trained["loss_first"], trained
    config = json.loads((Path(trained["snapshots"]["last"]) / "config.json").read_text())
    assert config["scene"] == "legible" and config["training"]["step"] == 60
    assert len(config["action_mean"]) == 7 and min(config["action_std"]) >= 0.01


def test_cli_smoke_run_resumes_on_the_same_curve(dataset, tmp_path, one_torch_thread):
    from safetensors.torch import load_file

    out = tmp_path / "cli"
    cmd = [sys.executable, "-m", "neuralsim.cli", "train-flow-policy", "--data", str(dataset), "--out", str(out),
           "--preset", "tiny", "--steps", "4", "--snapshots", "a=2,b=4", "--batch-size", "8", "--lr", "0.003",
           "--no-successful-only", "--include-failure-modes", "--no-progress"]
    first = subprocess.run([*cmd, "--stop-at", "2"], capture_output=True, text=True, timeout=150, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads(first.stdout[first.stdout.index("{"):])["stopped_early"]
    assert (out / "snapshots" / "a").is_dir() and not (out / "snapshots" / "b").exists()
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=150, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    assert json.loads(second.stdout[second.stdout.index("{"):])["steps"] == 4
    whole = tiny_train(dataset, tmp_path / "whole")
    a = load_file(str(out / "snapshots" / "b" / "model.safetensors"))
    b = load_file(whole["snapshots"]["b"] + "/model.safetensors")
    assert a.keys() == b.keys() and all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)
    with pytest.raises(ValueError, match="other options"):
        tiny_train(dataset, out, lr=1e-4)


def test_random_shift_crops_the_edge_padded_image():
    import torch
    import torch.nn.functional as F

    from policies.flow.train import random_shift

    images = torch.rand(6, 3, 8, 8)
    shifted = random_shift(images, 2, torch.Generator().manual_seed(0))
    padded = F.pad(images, (2,) * 4, mode="replicate")
    for img, pad in zip(shifted, padded):
        assert any(torch.equal(img, pad[:, y:y + 8, x:x + 8]) for y in range(5) for x in range(5))
    assert not torch.equal(shifted, images)
    assert random_shift(images, 0, torch.Generator()) is images


# ----------------------------------------------------------------------------- checkpoints and determinism
def test_save_load_round_trip_gives_identical_actions(trained, observation, tmp_path):
    obs, text = observation
    policy = load(trained)
    again = FlowPolicy(type(policy.model).from_pretrained(policy.model.save_pretrained(tmp_path / "copy")),
                       num_threads=1)
    for p in (policy, again):
        p.reset(text)
    np.testing.assert_array_equal(policy.infer(obs), again.infer(obs))


def test_actions_are_deterministic_for_a_seed(trained, observation):
    obs, text = observation
    a, b, other = load(trained, seed=3), load(trained, seed=3), load(trained, seed=4)
    for p in (a, b, other):
        p.reset(text)
    first = a.infer(obs)
    np.testing.assert_array_equal(first, b.infer(obs))
    np.testing.assert_array_equal(a.infer(obs), b.infer(obs))  # the noise stream goes on alike
    assert not np.array_equal(first, other.infer(obs))        # another seed, other noise
    a.reset(text)
    np.testing.assert_array_equal(a.infer(obs), first)        # reset restarts the noise


def test_chunks_are_valid_droid_actions_in_both_envs(trained):
    policy = load(trained)
    for env, steps in ((gym.make(ENV, max_episode_steps=10), 10), (gym.make("NeuralDROID-v0", reward_fn=None), 4)):
        result = run_episode(env, policy, max_steps=steps, seed=2_000_001)
        env.close()
        assert result.steps == steps and result.actions.shape == (steps, 8)
        assert np.all(np.isfinite(result.actions)) and np.abs(result.actions[:, :7]).max() <= 1
        assert set(np.unique(result.actions[:, 7])) <= {0.0, 1.0}  # binary gripper
    rows = {k: np.stack([v, v]) for k, v in gym.make(ENV).reset(seed=1)[0].items()}
    chunks = policy.infer_batch(rows, ["put the red cube in the blue bowl"] * 2)
    assert chunks.shape == (2, policy.config.chunk_size, 8)


def test_the_controller_tracks_the_generated_goals_from_the_measured_joints(trained, observation):
    from policies import ChunkedController

    obs, text = observation
    policy = load(trained)
    policy.reset(text)
    with pytest.raises(RuntimeError, match="before track"):
        policy.track(obs, 1)
    chunk = policy.infer(obs)
    # from the pose the chunk was planned at, step 0 is the plan's; a later step aims at its own goal from here
    np.testing.assert_allclose(policy.track(obs, 0), chunk[0], atol=1e-5)
    assert not np.allclose(policy.track(obs, 3)[:7], chunk[3, :7], atol=1e-4)
    assert policy.track(obs, 3)[7] == chunk[3, 7]
    with pytest.raises(IndexError, match="outside the chunk"):
        policy.track(obs, policy.config.chunk_size)
    with pytest.raises(PolicyInputError, match="joint_position"):
        policy.track({k: v for k, v in obs.items() if k != "joint_position"}, 1)
    policy.infer_batch({k: np.asarray(v)[None] for k, v in obs.items()}, [text])
    with pytest.raises(RuntimeError, match="before track"):  # a batch's goals are not one episode's
        policy.track(obs, 1)
    assert ChunkedController(policy).tracking and not ChunkedController(policy, track=False).tracking
    tracked, planned = (run_episode(gym.make(ENV, max_episode_steps=10), load(trained), seed=2_000_001, track=t)
                        for t in (True, False))
    np.testing.assert_array_equal(tracked.actions[0], planned.actions[0])
    assert not np.allclose(tracked.actions[2:8, :7], planned.actions[2:8, :7], atol=1e-4)
    assert tracked.num_queries == planned.num_queries  # tracking re-aims steps, it does not query more


# ----------------------------------------------------------------------------- inputs and names
def test_bad_inputs_are_refused_by_name(trained, observation):
    obs, text = observation
    policy = load(trained)
    with pytest.raises(RuntimeError, match="reset"):
        policy.infer(obs)
    policy.reset(text)
    key = "exterior_image_1_left"
    with pytest.raises(PolicyInputError, match=rf"observation\['{key}'\] is a float image with values in"):
        policy.infer({**obs, key: obs[key].astype(np.float32)})
    with pytest.raises(PolicyInputError, match="wrist_image_left"):
        policy.infer({k: v for k, v in obs.items() if k != "wrist_image_left"})
    with pytest.raises(PolicyInputError, match="joint_position"):
        policy.infer({**obs, "joint_position": obs["joint_position"][:5]})
    with pytest.raises(InstructionError, match="open the drawer"):
        policy.reset("open the drawer")
    floats = {**obs, **{k: obs[k].astype(np.float32) / 255 for k in policy.config.views}}
    policy.reset(text)
    first = policy.infer(floats)
    policy.reset(text)
    np.testing.assert_allclose(first, policy.infer(obs), atol=1e-5)  # floats in [0, 1] read as the same images


def test_make_policy_names_resolve_lazily_with_clear_errors(trained, tmp_path):
    assert "flow:PATH" in available_policies()
    with pytest.raises(CheckpointError, match="train-flow-policy"):
        make_policy("flow-s999")
    with pytest.raises(CheckpointError, match="model.safetensors"):
        (tmp_path / "empty").mkdir()
        make_policy(f"flow:{tmp_path / 'empty'}")
    policy = make_policy(f"flow:{trained['snapshots']['last']}", num_threads=1, seed=2)
    assert isinstance(policy, FlowPolicy) and policy.seed == 2
    side = policy.config.image_size  # the tiny preset reads 32 px views: the 64 px data was resized to it
    assert policy.server_metadata["image_resolution"] == [side, side] and policy.action_mode == "joint_velocity"
    from policies.visuomotor.model import VisuomotorConfig, VisuomotorNet

    visuomotor = VisuomotorNet(VisuomotorConfig()).save_pretrained(tmp_path / "visuomotor")
    with pytest.raises(CheckpointError, match="visuomotor:PATH|unknown fields"):
        make_policy(f"flow:{visuomotor}")


# ----------------------------------------------------------------------------- server
def test_served_through_the_openpi_server_gives_the_same_actions(trained):
    from policies.openpi_client import OpenPIClient
    from policies.server import PolicyServer

    served, local = load(trained), load(trained)
    env = gym.make(ENV)
    obs, info = env.reset(seed=2_000_002)
    with PolicyServer(served, port=0) as server, OpenPIClient("127.0.0.1", server.port) as client:
        side = served.config.image_size
        assert client.metadata["image_resolution"] == [side, side] and client.action_mode == "joint_velocity"
        client.reset(info["instruction"])
        local.reset(info["instruction"])
        for _ in range(3):
            remote_chunk, local_chunk = client.infer(obs), local.infer(obs)
            np.testing.assert_array_equal(remote_chunk, local_chunk)
            for a in local_chunk[:4]:
                obs, *_ = env.step(a)
    env.close()


def test_a_served_policy_is_tracked_over_the_wire_as_in_process(trained):
    """The server adds the chunk's goals to openpi's reply; our client tracks them, so a whole episode through a real
    websocket takes the in-process episode's actions."""
    from policies import ChunkedController
    from policies.openpi_client import OpenPIClient
    from policies.server import PolicyServer

    local = run_episode(gym.make(ENV, max_episode_steps=12), load(trained), seed=2_000_003)
    with PolicyServer(load(trained), port=0) as server, OpenPIClient("127.0.0.1", server.port) as client:
        assert client.metadata["tool_targets"] is True and ChunkedController(client).tracking
        remote = run_episode(gym.make(ENV, max_episode_steps=12), client, seed=2_000_003)
    np.testing.assert_allclose(remote.actions, local.actions, atol=1e-6)
    with PolicyServer(load(trained), port=0, metadata={"action_mode": "joint_velocity"}) as server, \
            OpenPIClient("127.0.0.1", server.port) as client:  # a server that does not announce them: as planned
        assert not client.tracks_targets and not ChunkedController(client).tracking
        with pytest.raises(RuntimeError, match="does not send tool_targets"):
            client.track({"joint_position": np.zeros(7)}, 1)


def test_malformed_tool_targets_from_a_server_are_refused_by_name():
    from policies.openpi_client import PolicyServerError, targets_from_reply

    good = {"position": np.zeros((4, 3)), "rotation": np.tile(np.eye(3), (4, 1, 1)), "gripper": np.zeros(4)}
    assert targets_from_reply({"actions": None, "tool_targets": good}, 4, "ws://x")["rotation"].shape == (4, 3, 3)
    with pytest.raises(PolicyServerError, match="announced tool_targets but sent NoneType"):
        targets_from_reply({"actions": None}, 4, "ws://x")
    with pytest.raises(PolicyServerError, match=r"'position': \(3, 3\)"):
        targets_from_reply({"tool_targets": {**good, "position": np.zeros((3, 3))}}, 4, "ws://x")
    with pytest.raises(PolicyServerError, match="non-finite"):
        targets_from_reply({"tool_targets": {**good, "gripper": np.full(4, np.nan)}}, 4, "ws://x")


def test_real_openpi_client_gets_the_in_process_actions(trained, observation, tmp_path):
    """openpi's own ``WebsocketClientPolicy`` (a numpy-1 interpreter: ``NEURALSIM_OPENPI_PYTHON``) against our
    server; skipped where no such interpreter is configured."""
    import os

    from test_visuomotor import REAL_OPENPI_CLIENT

    exe = os.environ.get("NEURALSIM_OPENPI_PYTHON")
    if not exe:
        pytest.skip("set NEURALSIM_OPENPI_PYTHON to a python with openpi-client (it pins numpy<2)")
    from policies.server import PolicyServer

    obs, text = observation
    np.savez(tmp_path / "obs.npz", **{f"observation/{k}": obs[k] for k in (
        "exterior_image_1_left", "wrist_image_left", "joint_position", "gripper_position")}, prompt=np.array(text))
    local = load(trained)
    local.reset(text)
    with PolicyServer(load(trained), port=0) as server:
        proc = subprocess.run([exe, "-c", REAL_OPENPI_CLIENT, str(server.port), str(tmp_path / "obs.npz")],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(np.array(out["actions"], np.float32), local.infer(obs), atol=1e-6)


def test_the_shipped_checkpoints_load_by_name_and_act_in_the_legible_scene():
    from policies.flow.policy import shipped_checkpoints

    names = shipped_checkpoints()
    assert {"flow-v4-s2000", "flow-v4-s8000", "flow-v4-s16000"} <= set(names) <= set(available_policies())
    env = gym.make("SimDROID-v1")
    obs, info = env.reset(seed=2_000_000)
    for name in ("flow-v4-s2000", "flow-v4-s16000"):
        policy = make_policy(name, num_threads=1)
        assert policy.config.scene == "legible" and policy.config.training["step"] == int(name.split("-s")[1])
        policy.reset(info["instruction"])
        chunk = np.asarray(policy.infer(obs))
        assert chunk.shape == (policy.config.chunk_size, 8) and np.all(np.abs(chunk[:, :7]) <= 1)
        assert set(np.unique(chunk[:, 7])) <= {0.0, 1.0}  # binary gripper, as the demonstrations command it
    env.close()
