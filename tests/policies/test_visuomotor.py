"""Tests of the learned visuomotor baselines: tokens, training (CLI smoke run, resume, determinism), checkpoints,
bad inputs, closed-loop steps in SimDROID-v1 (the scene the shipped checkpoints learned in) and NeuralDROID-v0
(single and vector), and a round trip through :mod:`policies.server` on loopback.

The training tests run on a 3-episode dataset written by :func:`neuralsim.data.generate.generate` (raw frames, no
ffmpeg) with a budget of a few optimiser steps; the closed-loop tests use the shipped checkpoints.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import neuralsim  # noqa: F401  (registers the envs)
from policies import available_policies, make_policy, run_episode
from policies.visuomotor import CheckpointError, PolicyInputError, VisuomotorPolicy, shipped_checkpoints
from policies.visuomotor.tokens import InstructionError, instruction_tokens, parse_instruction

pytestmark = pytest.mark.timeout(120)

INSTRUCTION = "put the red cube in the blue bowl"


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> Path:
    from neuralsim.data.generate import generate

    root = tmp_path_factory.mktemp("bc_demos")
    generate(root, episodes=2, seed=0, failure_share=0.0, noise=(0.0, 0.0), progress=False, frames_format="npy")
    return root


@pytest.fixture(scope="module")
def shipped() -> list[str]:
    names = shipped_checkpoints()
    if len(names) < 4:
        pytest.fail(f"expected >= 4 shipped visuomotor checkpoints, found {names}; train them with "
                    "`neuralsim train-policy ... --ship`")
    return names


@pytest.fixture(scope="module")
def policy(shipped) -> VisuomotorPolicy:
    return make_policy(shipped[-1], num_threads=1)


SHIPPED_ENV = "SimDROID-v1"  # the legible scene, config.scene of every shipped checkpoint


def sim_observation(seed: int = 2_000_000):
    env = gym.make(SHIPPED_ENV)
    obs, info = env.reset(seed=seed)
    env.close()
    return obs, info["instruction"]


def tiny_train(demos: Path, out: Path, **kw):
    from policies.visuomotor.train import TrainPolicyConfig, train

    cfg = dict(data=str(demos), scene="classic", out=str(out), steps=4, snapshots="a=2,b=4", batch_size=4,
               progress=False)
    return train(TrainPolicyConfig(**{**cfg, **kw}))


# ----------------------------------------------------------------------------- tokens
def test_instruction_tokens_read_the_three_phrasings():
    assert parse_instruction("Put the red cube in the blue bowl ") == ("put_in_bowl", "red", None)
    assert parse_instruction("push the cyan cube onto the yellow pad") == ("push_to_pad", "cyan", None)
    assert parse_instruction("stack the white cube on the pink cube") == ("stack", "white", "pink")
    fam, target, base = instruction_tokens("stack the white cube on the pink cube")
    assert (fam, base != 0, target != base) == (2, True, True)
    assert instruction_tokens("put the gold cube in the blue bowl")[1] == 1  # <unk>: an unseen colour still runs
    with pytest.raises(InstructionError, match="pick up the cup"):
        parse_instruction("pick up the cup")


# ----------------------------------------------------------------------------- training
def test_train_policy_cli_smoke_run_writes_loadable_snapshots(demos, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "neuralsim.cli", "train-policy", "--data", str(demos), "--scene", "classic",
           "--out", str(out), "--steps", "2", "--snapshots", "early=1,late=2", "--batch-size", "4", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=110, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert summary["steps"] == 2 and summary["episodes"] == 2 and not summary["shipped"]
    for name, step in (("early", 1), ("late", 2)):
        config = json.loads((out / "snapshots" / name / "config.json").read_text())
        assert config["scene"] == "classic" and config["training"]["step"] == step
    assert len((out / "metrics.jsonl").read_text().splitlines()) >= 1
    p = make_policy(f"visuomotor:{out / 'snapshots' / 'late'}", num_threads=1)
    p.reset(INSTRUCTION)
    rng = np.random.default_rng(0)
    obs = {"exterior_image_1_left": rng.integers(0, 256, (64, 64, 3), np.uint8),
           "wrist_image_left": rng.integers(0, 256, (64, 64, 3), np.uint8),
           "joint_position": np.zeros(7, np.float32), "gripper_position": np.zeros(1, np.float32)}
    chunk = p.infer(obs)
    assert chunk.shape == (12, 8) and np.all(np.abs(chunk[:, :7]) <= 1) and np.all((chunk[:, 7] >= 0) & (
        chunk[:, 7] <= 1))


def test_training_resumes_on_the_same_curve_and_is_deterministic(demos, tmp_path, one_torch_thread):
    from safetensors.torch import load_file

    whole = tiny_train(demos, tmp_path / "whole")
    tiny_train(demos, tmp_path / "split", stop_at=2)
    assert not (tmp_path / "split" / "snapshots" / "b").exists()
    resumed = tiny_train(demos, tmp_path / "split")
    assert whole["steps"] == resumed["steps"] == 4
    a = load_file(str(tmp_path / "whole" / "snapshots" / "b" / "model.safetensors"))
    b = load_file(str(tmp_path / "split" / "snapshots" / "b" / "model.safetensors"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)
    early = load_file(str(tmp_path / "whole" / "snapshots" / "a" / "model.safetensors"))
    assert any(not np.array_equal(a[k].numpy(), early[k].numpy()) for k in a)  # training moved the weights
    with pytest.raises(ValueError, match="other options"):
        tiny_train(demos, tmp_path / "whole", lr=1e-4)


def test_wrist_pixel_labels_follow_the_hand(demos):
    """--wrist-pixels labels the wrist view with where the cube projects at each frame's joint state."""
    from neuralsim.data.reader import list_episodes, read_joints_and_actions
    from neuralsim.envs.scene import project_wrist
    from policies.visuomotor.train import load_demonstrations

    views = ("exterior_image_1_left", "wrist_image_left")
    plain = load_demonstrations([str(demos)], views, 4, "classic", progress=False)
    wrist = load_demonstrations([str(demos)], views, 4, "classic", progress=False, wrist_pixels=True)
    assert plain.pixel_mask[:, 1].sum() == 0 and wrist.pixel_mask[:, 1, 0].sum() > 0
    assert np.array_equal(plain.pixel_mask[:, 0].numpy(), wrist.pixel_mask[:, 0].numpy())  # exterior unchanged
    rec = list_episodes(demos)[0]
    q, _ = read_joints_and_actions(demos, rec)
    uv, _ = project_wrist(np.array([rec["initial_poses"][rec["target"]][:3]]), q)
    labelled = wrist.pixel_mask[:len(q), 1, 0].numpy().astype(bool)
    np.testing.assert_allclose(wrist.pixels[:len(q), 1, 0].numpy()[labelled], uv[labelled, 0], atol=1e-5)
    assert len(set(map(tuple, np.round(uv[labelled, 0], 3)))) > 1  # it moves with the hand


def test_image_shift_moves_the_pixel_labels_with_the_content():
    import torch

    from policies.visuomotor.train import pixel_index, random_shift

    images = torch.zeros(16, 1, 8, 8)
    images[:, 0, 3, 5] = 1.0  # a dot at column 5, row 3
    shifted, moved = random_shift(images, 2, torch.Generator().manual_seed(0))
    uv = torch.tensor([5.5, 3.5]) / 4 - 1 + moved.float() / 4  # the dot's centre in [-1, 1], moved with the image
    found = shifted.flatten(1).argmax(1)
    assert torch.equal(found, pixel_index(uv, 8, 8)) and moved.abs().max() <= 2 and moved.abs().sum() > 0


def test_training_refuses_a_dataset_of_another_scene(demos, tmp_path):
    from neuralsim.data.reader import DatasetError

    with pytest.raises(DatasetError, match="--scene legible"):
        tiny_train(demos, tmp_path / "run", scene="legible")


# ----------------------------------------------------------------------------- checkpoints
def test_shipped_checkpoints_are_listed_small_and_record_their_scene(shipped):
    from policies.visuomotor.policy import WEIGHTS_DIR

    assert set(shipped) <= set(available_policies())
    for name in shipped:
        d = WEIGHTS_DIR / name
        assert (d / "model.safetensors").stat().st_size <= 5 * 2**20
        config = json.loads((d / "config.json").read_text())
        assert config["scene"] == "legible" and config["training"]["step"] >= 1


def test_missing_weights_and_hub_ids_are_clear_errors(shipped, tmp_path):
    from policies.visuomotor.policy import WEIGHTS_DIR

    broken = tmp_path / "no_weights"
    shutil.copytree(WEIGHTS_DIR / shipped[0], broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="neuralsim train-policy"):
        VisuomotorPolicy.from_pretrained(broken)
    with pytest.raises(CheckpointError, match="not a local directory"):
        make_policy("visuomotor:someone/visuomotor-policy")
    with pytest.raises(CheckpointError, match="neuralsim train-policy"):
        make_policy("visuomotor:no/such/dir")


def test_bad_inputs_are_refused_by_name(policy):
    obs, text = sim_observation()
    with pytest.raises(RuntimeError, match="reset"):
        make_policy(shipped_checkpoints()[0]).infer(obs)
    policy.reset(text)
    with pytest.raises(PolicyInputError, match="wrist_image_left"):
        policy.infer({k: v for k, v in obs.items() if k != "wrist_image_left"})
    with pytest.raises(PolicyInputError, match="exterior_image_1_left"):
        policy.infer({**obs, "exterior_image_1_left": obs["exterior_image_1_left"][..., 0]})
    with pytest.raises(PolicyInputError, match="joint_position"):
        policy.infer({**obs, "joint_position": obs["joint_position"][:5]})
    with pytest.raises(InstructionError):
        policy.reset("open the drawer")


def test_float_images_in_0_255_are_refused_by_name_not_whitened():
    """Issue 85 item 6: float32 images in 0-255 were clipped to white and answered with a chunk."""
    from policies.openpi_client import OpenPIClient
    from policies.server import PolicyServer

    policy = make_policy("visuomotor-s4000", num_threads=1)
    obs, text = sim_observation()
    policy.reset(text)
    key = policy.config.views[0]
    with pytest.raises(PolicyInputError, match=rf"observation\['{key}'\] is a float image with values in "
                                                r"\[\d+(\.\d+)?, \d+(\.\d+)?\]; float images must be in \[0, 1\]"):
        policy.infer({**obs, key: obs[key].astype(np.float32)})
    with pytest.raises(PolicyInputError, match="non-finite"):
        policy.infer({**obs, key: np.full(obs[key].shape, np.nan, np.float32)})
    floats = {**obs, **{k: obs[k].astype(np.float32) / 255 for k in policy.config.views}}
    np.testing.assert_allclose(policy.infer(floats), policy.infer(obs), atol=1e-6)  # [0, 1] floats: the same chunk
    with PolicyServer(policy, port=0) as server, OpenPIClient("127.0.0.1", server.port) as client:
        client.reset(text)
        with pytest.raises(ValueError, match=r"observation\['wrist_image_left'\] is a float image with values in"):
            client.infer({**obs, "wrist_image_left": obs["wrist_image_left"].astype(np.float32)})
        assert server.num_requests == 0  # refused before sending


def test_other_image_sizes_are_letterboxed_like_openpi(policy):
    from policies.openpi_client import letterbox

    obs, text = sim_observation()
    policy.reset(text)
    big = {**obs, **{k: np.repeat(np.repeat(obs[k], 4, 0), 4, 1) for k in policy.config.views}}  # 256x256
    np.testing.assert_allclose(policy.infer(big), policy.infer(obs), atol=0.1)
    wide = {**obs, "wrist_image_left": np.zeros((48, 64, 3), np.uint8)}
    padded = {**obs, "wrist_image_left": letterbox(wide["wrist_image_left"], 64, 64)}
    np.testing.assert_array_equal(policy.infer(wide), policy.infer(padded))


def test_batched_inference_matches_single_rows(policy):
    rows = [sim_observation(2_000_000 + i) for i in range(3)]
    batch = {k: np.stack([o[k] for o, _ in rows]) for k in rows[0][0]}
    chunks = policy.infer_batch(batch, [t for _, t in rows])
    assert chunks.shape == (3, policy.config.chunk_size, 8)
    for i, (o, t) in enumerate(rows):
        policy.reset(t)
        np.testing.assert_allclose(chunks[i], policy.infer(o), atol=1e-5)


# ----------------------------------------------------------------------------- closed loop
def test_closed_loop_in_simdroid(policy):
    env = gym.make(SHIPPED_ENV)
    res = run_episode(env, policy, max_steps=20, seed=2_000_001)
    env.close()
    assert res.steps == 20 and res.num_queries == 3  # chunks of 12, 8 executed per query
    assert np.all(np.isfinite(res.actions)) and np.abs(res.actions[:, :7]).max() <= 1
    # it acts on what it sees: the arm moved away from the reset pose
    assert np.abs(res.episode.joint_position[-1] - res.episode.joint_position[0]).max() > 0.02


def test_a_joint_velocity_checkpoint_runs_its_chunks_as_planned(policy):
    from policies import ChunkedController

    assert policy.config.action_mode == "joint_velocity" and not policy.tracks_targets
    assert not ChunkedController(policy).tracking
    obs, text = sim_observation()
    policy.reset(text)
    policy.infer(obs)
    with pytest.raises(RuntimeError, match="tool_delta"):
        policy.track(obs, 1)


def test_closed_loop_in_neuraldroid_on_generated_frames(policy):
    env = gym.make("NeuralDROID-v0", reward_fn=None)
    res = run_episode(env, policy, max_steps=4, seed=0)
    env.close()
    assert res.steps == 4 and res.num_queries == 1 and np.all(np.isfinite(res.actions))
    assert res.episode.num_frames == 5  # the policy read generated frames: the initial view and four steps


def test_batched_policy_drives_a_vector_neuraldroid(policy):
    envs = gym.make_vec("NeuralDROID-v0", num_envs=2, reward_fn=None)
    obs, info = envs.reset(seed=0)
    texts = list(info["instruction"])
    for _ in range(2):
        chunks = policy.infer_batch(obs, texts)
        obs, *_ = envs.step(chunks[:, 0])
    envs.close()
    assert chunks.shape == (2, policy.config.chunk_size, 8)


# ----------------------------------------------------------------------------- server
def test_served_through_the_openpi_server_gives_the_same_actions(shipped):
    from policies.openpi_client import OpenPIClient
    from policies.server import PolicyServer

    served, local = make_policy(shipped[-1], num_threads=1), make_policy(shipped[-1], num_threads=1)
    env = gym.make(SHIPPED_ENV)
    obs, info = env.reset(seed=2_000_002)
    with PolicyServer(served, port=0) as server, OpenPIClient("127.0.0.1", server.port) as client:
        assert client.metadata["image_resolution"] == [64, 64] and client.action_mode == "joint_velocity"
        client.reset(info["instruction"])
        local.reset(info["instruction"])
        for _ in range(3):
            remote_chunk, local_chunk = client.infer(obs), local.infer(obs)
            np.testing.assert_array_equal(remote_chunk, local_chunk)
            for a in local_chunk[:8]:
                obs, *_ = env.step(a)
    env.close()


REAL_OPENPI_CLIENT = r"""
import json, sys
import numpy as np
from openpi_client import websocket_client_policy
client = websocket_client_policy.WebsocketClientPolicy(host="127.0.0.1", port=int(sys.argv[1]))
obs = {k: (str(v) if k == "prompt" else np.asarray(v)) for k, v in np.load(sys.argv[2]).items()}
print(json.dumps({"metadata": client.get_server_metadata(), "actions": client.infer(obs)["actions"].tolist()}))
"""


def test_real_openpi_client_gets_the_in_process_actions(shipped, tmp_path):
    """openpi's own ``WebsocketClientPolicy`` (a numpy-1 interpreter: ``NEURALSIM_OPENPI_PYTHON``) against our
    server; skipped where no such interpreter is configured."""
    import os

    exe = os.environ.get("NEURALSIM_OPENPI_PYTHON")
    if not exe:
        pytest.skip("set NEURALSIM_OPENPI_PYTHON to a python with openpi-client (it pins numpy<2)")
    from policies.server import PolicyServer

    obs, text = sim_observation()
    wire = {"observation/exterior_image_1_left": obs["exterior_image_1_left"],
            "observation/wrist_image_left": obs["wrist_image_left"],
            "observation/joint_position": obs["joint_position"],
            "observation/gripper_position": obs["gripper_position"],
            "prompt": np.array(text)}
    np.savez(tmp_path / "obs.npz", **wire)
    local = make_policy(shipped[-1], num_threads=1)
    local.reset(text)
    with PolicyServer(make_policy(shipped[-1], num_threads=1), port=0) as server:
        proc = subprocess.run([exe, "-c", REAL_OPENPI_CLIENT, str(server.port), str(tmp_path / "obs.npz")],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["metadata"]["image_resolution"] == [64, 64]
    np.testing.assert_allclose(np.array(out["actions"], np.float32), local.infer(obs), atol=1e-6)
