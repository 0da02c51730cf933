"""NeuralDROID-v0 and its vector form, on a tiny random-weight world model (16x16 views)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tracemalloc
import warnings
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

import neuralsim  # noqa: F401  (registers the envs)
from neuralsim import kinematics as K
from neuralsim.envs import adapter as A
from neuralsim.envs import neural_droid as ND
from neuralsim.envs import neural_droid_core
from neuralsim.envs.episodes import EpisodeSpecError, UnknownEpisodeError, default_episodes
from neuralsim.envs.neural_droid import InvalidActionError, NeuralDROIDEnv, NeuralDROIDVectorEnv
from neuralsim.episode import VIEW_NAMES
from neuralsim.world_model.model import CheckpointError

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def make(ckpt, **kw) -> NeuralDROIDEnv:
    kw.setdefault("reward_fn", None)
    return NeuralDROIDEnv(checkpoint=ckpt, **kw)


def actions(n: int, seed: int = 0, batch: tuple[int, ...] = ()) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (n, *batch, 8)).astype(np.float32)
    a[..., 7] = rng.uniform(0, 1, (n, *batch))
    return a


def rollout(env, seed: int, acts, episode=None):
    obs, info = env.reset(seed=seed, options=None if episode is None else {"episode": episode})
    frames, infos = [obs], [info]
    for a in acts:
        obs, r, term, trunc, info = env.step(a)
        frames.append(obs)
        infos.append(info)
    return frames, infos


@dataclass
class FakeJudgement:
    score: float
    rationale: str = "fake"


# ---------------------------------------------------------------------------------------------- API
def test_check_env_passes_without_unexpected_warnings(tiny_checkpoint):
    env = gym.make("NeuralDROID-v0", checkpoint=str(tiny_checkpoint), reward_fn=None, render_mode="rgb_array")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []


def test_a_failed_first_reset_leaves_the_made_env_usable(tiny_checkpoint):
    """A mistyped episode on the very first reset raises by name, and the env then resets and steps as usual
    (gymnasium 1.4.0's passive checker broke the first step after such a reset; neuralsim/envs/__init__.py)."""
    env = gym.make("NeuralDROID-v0", checkpoint=tiny_checkpoint, reward_fn=None)
    with pytest.raises(UnknownEpisodeError, match="no_such_episode"):
        env.reset(seed=0, options={"episode": "no_such_episode"})
    obs, _ = env.reset(seed=0)
    obs2, reward, terminated, truncated, info = env.step(actions(1)[0])
    assert obs2["joint_position"].shape == obs["joint_position"].shape and not (terminated or truncated)
    env.close()


def test_a_reference_head_decodes_each_row_against_its_own_reset_views(tiny_checkpoint, tmp_path):
    """With the head's gate wide open (and no correction) every generated view is its row's reset view: the
    env hands each row's own first frame to the decoder, also after one row alone is reset."""
    import torch

    from neuralsim.world_model.model import WorldModel

    wm = WorldModel.from_pretrained(tiny_checkpoint)
    wm.autoencoder.set_reference_head(4)
    with torch.no_grad():
        wm.autoencoder.ref_head.out.bias[0] = 30.0  # gate = 1, weights zero: out = reference
    ckpt = wm.save_pretrained(tmp_path / "head")
    check_env(gym.make("NeuralDROID-v0", checkpoint=str(ckpt), reward_fn=None).unwrapped)
    venv = NeuralDROIDVectorEnv(num_envs=2, checkpoint=str(ckpt), reward_fn=None)
    obs, info = venv.reset(seed=5, options={"episode": ["stack_1000002", "put_in_bowl_1000000"]})
    first = {v: obs[v].copy() for v in VIEW_NAMES}
    assert not np.array_equal(first[VIEW_NAMES[0]][0], first[VIEW_NAMES[0]][1])
    for a in actions(2, batch=(2,)):
        obs = venv.step(a)[0]
        for v in VIEW_NAMES:
            np.testing.assert_array_equal(obs[v], first[v])
    obs, _ = venv.reset(seed=6, options={"episode": ["put_in_bowl_1000000"] * 2, "reset_mask": np.array([True, False])})
    np.testing.assert_array_equal(obs[VIEW_NAMES[0]][0], first[VIEW_NAMES[0]][1])  # row 0 now starts as row 1 did
    obs = venv.step(actions(1, batch=(2,))[0])[0]
    for v in VIEW_NAMES:
        np.testing.assert_array_equal(obs[v][0], first[v][1])
        np.testing.assert_array_equal(obs[v][1], first[v][1])
    venv.close()


def test_spaces_match_simdroid(tiny_checkpoint):
    from neuralsim.envs.sim_droid import SimDROIDEnv

    sim = SimDROIDEnv(image_size=16, reward_fn=None)
    env = make(tiny_checkpoint)
    assert env.observation_space == sim.observation_space
    assert env.action_space == sim.action_space
    env_jp = make(tiny_checkpoint, action_mode="joint_position")
    assert env_jp.action_space == SimDROIDEnv(action_mode="joint_position", reward_fn=None).action_space
    sim.close()


def test_seeded_determinism(tiny_checkpoint):
    acts = actions(8)
    f1, _ = rollout(make(tiny_checkpoint), 7, acts)
    f2, _ = rollout(make(tiny_checkpoint), 7, acts)
    f3, _ = rollout(make(tiny_checkpoint), 8, acts)
    for a, b in zip(f1, f2):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    assert any(not np.array_equal(a["wrist_image_left"], c["wrist_image_left"]) for a, c in zip(f1[1:], f3[1:]))


def test_same_episode_different_seed_changes_only_noise(tiny_checkpoint):
    acts = actions(4)
    f1, i1 = rollout(make(tiny_checkpoint), 1, acts, episode="stack_1000002")
    f2, i2 = rollout(make(tiny_checkpoint), 2, acts, episode="stack_1000002")
    np.testing.assert_array_equal(f1[0]["exterior_image_1_left"], f2[0]["exterior_image_1_left"])
    np.testing.assert_array_equal(f1[-1]["joint_position"], f2[-1]["joint_position"])
    assert not np.array_equal(f1[-1]["exterior_image_1_left"], f2[-1]["exterior_image_1_left"])


def test_vector_env_equals_single_envs(tiny_checkpoint):
    n, steps = 4, 10
    acts = actions(steps, batch=(n,))
    venv = gym.make_vec("NeuralDROID-v0", num_envs=n, checkpoint=str(tiny_checkpoint), reward_fn=None)
    assert isinstance(venv.unwrapped, NeuralDROIDVectorEnv)
    assert venv.unwrapped.world_model.dit is not None and venv.unwrapped._core.state.batch_size == n  # one model
    vobs, vinfo = venv.reset(seed=100)
    vframes = [vobs]
    for a in acts:
        vframes.append(venv.step(a)[0])
    for i in range(n):
        frames, infos = rollout(make(tiny_checkpoint), 100 + i, acts[:, i])
        assert infos[0]["episode_name"] == vinfo["episode_name"][i]
        for t, (single, batched) in enumerate(zip(frames, vframes)):
            np.testing.assert_array_equal(single["joint_position"], batched["joint_position"][i])
            for v in VIEW_NAMES:  # batched matrix products may round differently: +-1 grey level at most
                diff = np.abs(single[v].astype(int) - batched[v][i].astype(int))
                assert diff.max() <= 2 and diff.mean() < 0.05, (i, t, v, diff.max(), diff.mean())


def test_conditioning_is_fk_of_integrated_joint_state(tiny_checkpoint):
    env = make(tiny_checkpoint)
    acts = actions(12)
    obs, info = env.reset(seed=3, options={"episode": "put_in_bowl_1000000"})
    spec = env.episodes["put_in_bowl_1000000"]
    q_ref, g_ref = A.rollout(spec.joint_position[None], spec.gripper_position[None],
                             np.clip(acts[None].astype(np.float64), env.action_space.low, env.action_space.high))
    np.testing.assert_allclose(info["conditioning"][:6], K.forward_kinematics(spec.joint_position), atol=1e-5)
    for t, a in enumerate(acts, start=1):
        obs, _, _, _, info = env.step(a)
        np.testing.assert_allclose(obs["joint_position"], q_ref[0, t], atol=1e-6)
        np.testing.assert_allclose(info["conditioning"][:6], K.forward_kinematics(q_ref[0, t]), atol=1e-5)
        np.testing.assert_allclose(info["conditioning"][6:], g_ref[0, t], atol=1e-6)
        np.testing.assert_allclose(obs["cartesian_position"], info["conditioning"][:6], atol=1e-5)


def test_joint_position_mode_moves_toward_target(tiny_checkpoint):
    env = make(tiny_checkpoint, action_mode="joint_position")
    obs, _ = env.reset(seed=0)
    target = obs["joint_position"] + np.array([0.3, -0.2, 0.1, 0.2, 0.0, -0.1, 0.05], np.float32)
    before = np.abs(target - obs["joint_position"])
    for _ in range(20):
        obs, *_ = env.step(np.append(target, 1.0))
    assert np.all(np.abs(target - obs["joint_position"]) < 0.5 * before + 1e-3)
    assert obs["gripper_position"][0] > 0.99


def test_reward_exactly_once_at_episode_end(tiny_checkpoint):
    calls = []

    def reward_fn(episode):
        calls.append(episode)
        return FakeJudgement(score=4.0)

    env = make(tiny_checkpoint, reward_fn=reward_fn, max_episode_steps=5)
    env.reset(seed=0)
    rewards, infos = [], []
    for a in actions(5):
        _, r, term, trunc, info = env.step(a)
        rewards.append(r)
        infos.append(info)
    assert rewards == [0.0, 0.0, 0.0, 0.0, 4.0] and trunc and not term
    assert len(calls) == 1 and "judgement" in infos[-1] and infos[-1]["judgement"].score == 4.0
    assert all("judgement" not in i for i in infos[:-1])
    ep = calls[0]
    assert ep.num_frames == 6 and ep.actions.shape == (5, 8) and ep.instruction == infos[0]["instruction"]
    assert ep.metadata["source"] == "NeuralDROID-v0"
    with pytest.raises(ResetNeeded, match="ended"):
        env.step(actions(1)[0])


def test_reward_by_name_and_judge_failure(tiny_checkpoint, monkeypatch):
    with pytest.raises(ValueError, match="unknown reward function"):
        make(tiny_checkpoint, reward_fn="nonexistent:thing")

    def broken(episode):
        raise RuntimeError("judge down")

    env = make(tiny_checkpoint, reward_fn=broken, max_episode_steps=2)
    env.reset(seed=0)
    env.step(actions(1)[0])
    _, r, _, trunc, info = env.step(actions(1)[0])
    assert trunc and np.isnan(r) and "judge down" in info["judgement_error"]
    assert env.episode().num_frames == 3  # the rollout is kept


def test_default_reward_fn_constant(tiny_checkpoint, monkeypatch):
    monkeypatch.setattr(ND, "DEFAULT_REWARD_FN", None)
    assert make(tiny_checkpoint, reward_fn="default")._core.reward_fn is None
    monkeypatch.setattr(ND, "make_reward_fn", lambda spec: (_ for _ in ()).throw(FileNotFoundError("no weights")))
    monkeypatch.setattr(ND, "DEFAULT_REWARD_FN", "roboworld:offline")
    assert make(tiny_checkpoint, reward_fn="default")._core.reward_fn is None  # untrained judge -> 0 reward


def test_info_reports_clipping_and_timing(tiny_checkpoint):
    env = make(tiny_checkpoint)
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.array([2.0, 0, 0, 0, 0, 0, -3.0, 0.5]))
    assert info["action_clipped"] and info["clipped_dims"].tolist() == [True] + [False] * 5 + [True, False]
    assert info["timing"].step_s > 0 and info["timing"].world_model_s > 0
    assert env.episode().actions[0].tolist() == [1.0, 0, 0, 0, 0, 0, -1.0, 0.5]
    _, _, _, _, info = env.step(np.zeros(8))
    assert not info["action_clipped"]


def test_render_and_episode(tiny_checkpoint):
    env = make(tiny_checkpoint, render_mode="rgb_array", image_size=32)
    obs, _ = env.reset(seed=0)
    assert obs["wrist_image_left"].shape == (32, 32, 3)
    for a in actions(3):
        env.step(a)
    img = env.render()
    assert img.shape == (32, 32, 3) and img.dtype == np.uint8  # 2x2 collage of the native 16x16 views
    assert not img[16:, 16:].any()
    ep = env.episode()
    assert ep.num_frames == 4 and ep.frames["exterior_image_1_left"].shape == (4, 16, 16, 3)
    assert ep.joint_position.shape == (4, 7) and ep.cartesian_position.shape == (4, 6)
    assert make(tiny_checkpoint).render() is None


def test_the_window_defaults_to_the_checkpoints_own(tiny_checkpoint, tmp_path):
    """A checkpoint ships its inference window (the shipped model: twice its training clip); the env uses it
    unless told otherwise, and the shipped model's is at least its clip."""
    import dataclasses

    from neuralsim.world_model.model import WorldModel

    wm = WorldModel.from_pretrained(tiny_checkpoint)
    assert make(tiny_checkpoint)._core.state.cache.window == wm.config.window
    wm.config = dataclasses.replace(wm.config, window=2 * wm.config.clip_length + 1)
    wm.save_pretrained(tmp_path / "wide")
    assert make(tmp_path / "wide")._core.state.cache.window == 2 * wm.config.clip_length + 1
    assert make(tmp_path / "wide", context_window=3)._core.state.cache.window == 3
    shipped = WorldModel.from_pretrained(ND.DEFAULT_CHECKPOINT)
    assert shipped.config.window >= shipped.config.clip_length


def test_context_window_and_denoising_steps(tiny_checkpoint):
    env = make(tiny_checkpoint, context_window=3, denoising_steps=2)
    assert env._core.state.cache.window == 3 and env._core.schedule == (0.5, 1.0)
    assert ND.denoising_schedule((0.25, 0.5, 0.75, 1.0), 1) == (1.0,)
    assert ND.denoising_schedule((0.25, 0.5, 0.75, 1.0), 3) == (0.25, 0.5, 1.0)  # trained levels only
    assert ND.denoising_schedule((0.25, 0.5, 0.75, 1.0), 4) == (0.25, 0.5, 0.75, 1.0)
    assert ND.denoising_schedule((0.1, 0.2, 0.4, 0.6, 0.8, 1.0), 4) == (0.1, 0.4, 0.6, 1.0)
    with pytest.raises(ValueError, match="more than the 4 noise levels"):
        ND.denoising_schedule((0.25, 0.5, 0.75, 1.0), 5)
    env.reset(seed=0)
    for a in actions(5):
        env.step(a)
    for bad in ({"context_window": 1}, {"denoising_steps": 0}, {"denoising_steps": 5}, {"image_size": 8},
                {"action_mode": "torque"}, {"max_episode_steps": 0}, {"render_mode": "human"}):
        with pytest.raises(ValueError):
            make(tiny_checkpoint, **bad)


def test_a_checkpoint_names_its_default_denoising_passes(tiny_checkpoint, tmp_path):
    import dataclasses

    from neuralsim.world_model.config import WorldModelConfig
    from neuralsim.world_model.model import WorldModel

    wm = WorldModel.from_pretrained(tiny_checkpoint)
    assert wm.config.denoising_steps is None and make(tiny_checkpoint)._core.schedule == wm.config.schedule
    wm.config = dataclasses.replace(wm.config, denoising_steps=1)
    two = wm.save_pretrained(tmp_path / "one_pass")
    assert WorldModel.from_pretrained(two).config.denoising_steps == 1  # saved and read back
    assert make(two)._core.schedule == (1.0,)  # the env's default is the checkpoint's
    assert make(two, denoising_steps=2)._core.schedule == (0.5, 1.0)  # the env's argument overrides it
    (a, _), (b, _) = rollout(make(two), 3, actions(4)), rollout(make(tiny_checkpoint, denoising_steps=1), 3, actions(4))
    for fa, fb in zip(a, b):
        for v in VIEW_NAMES:
            np.testing.assert_array_equal(fa[v], fb[v])
    for bad in (0, 5, 2.0, True):
        with pytest.raises(ValueError, match="denoising_steps must be None or an integer in 1..4"):
            dataclasses.replace(WorldModelConfig(), denoising_steps=bad)


# ---------------------------------------------------------------------------------------------- bad input
def _continue_equals_fresh(env, tiny_checkpoint, seed, done_actions, next_actions):
    """After an error, the env continues exactly like a fresh env that never saw the bad input."""
    ref = make(tiny_checkpoint)
    ref.reset(seed=seed)
    for a in done_actions:
        ref.step(a)
    for a in next_actions:
        o1 = env.step(a)[0]
        o2 = ref.step(a)[0]
        for k in o1:
            np.testing.assert_array_equal(o1[k], o2[k])


@pytest.mark.parametrize("bad", [
    np.array([np.nan] + [0.0] * 7), np.array([0.0] * 7 + [np.inf]), np.zeros(7), np.zeros((1, 8)), "forward",
    [0.0] * 9,
])
def test_bad_actions_raise_and_do_not_corrupt(tiny_checkpoint, bad):
    env = make(tiny_checkpoint)
    env.reset(seed=5)
    first = actions(2, seed=1)
    env.step(first[0])
    with pytest.raises(InvalidActionError):
        env.step(bad)
    _continue_equals_fresh(env, tiny_checkpoint, 5, first[:1], first[1:])


def test_strict_raises_on_out_of_range(tiny_checkpoint):
    env = make(tiny_checkpoint, strict=True)
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match="strict"):
        env.step(np.array([1.5] + [0.0] * 7))
    with pytest.raises(InvalidActionError, match="strict"):
        env.step(np.array([0.0] * 7 + [-0.1]))
    env.step(np.array([1.0] * 7 + [1.0]))


def test_step_before_reset_raises(tiny_checkpoint):
    with pytest.raises(ResetNeeded):
        make(tiny_checkpoint).step(np.zeros(8))
    with pytest.raises(ResetNeeded):
        make(tiny_checkpoint).episode()


def test_bad_episodes_raise_and_do_not_corrupt(tiny_checkpoint):
    env = make(tiny_checkpoint)
    env.reset(seed=5)
    first = actions(2, seed=1)
    env.step(first[0])
    spec = default_episodes()[0]
    bad_specs = [
        ("no_such_episode", UnknownEpisodeError),
        (999, UnknownEpisodeError),
        ({"instruction": "x"}, EpisodeSpecError),  # missing keys
        ({**{v: spec.views[v] for v in VIEW_NAMES},
          "exterior_image_1_left": spec.views[VIEW_NAMES[0]].astype(np.float32),
          "joint_position": spec.joint_position, "gripper_position": [0.0], "instruction": "x"}, EpisodeSpecError),
        ({**{v: spec.views[v] for v in VIEW_NAMES}, "wrist_image_left": spec.views[VIEW_NAMES[2]][:, :40],
          "joint_position": spec.joint_position, "gripper_position": [0.0], "instruction": "x"}, EpisodeSpecError),
        (3.5, EpisodeSpecError),
    ]
    for bad, err in bad_specs:
        with pytest.raises(err):
            env.reset(seed=99, options={"episode": bad})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"task": "stack"})
    _continue_equals_fresh(env, tiny_checkpoint, 5, first[:1], first[1:])


def test_spec_objects_and_dicts_are_accepted(tiny_checkpoint):
    env = make(tiny_checkpoint)
    spec = default_episodes()["push_to_pad_1000001"]
    d = {**spec.views, "joint_position": spec.joint_position, "gripper_position": spec.gripper_position,
         "instruction": "push it"}
    _, info = env.reset(seed=0, options={"episode": d})
    assert info["instruction"] == "push it"
    obs, info = env.reset(seed=0, options={"episode": spec})
    assert info["episode_name"] == spec.name and obs["exterior_image_1_left"].shape == (16, 16, 3)


def test_missing_and_corrupt_checkpoints(tmp_path, monkeypatch, tiny_checkpoint):
    monkeypatch.setattr(neural_droid_core, "DEFAULT_CHECKPOINT", tmp_path / "nothing")  # resolve_checkpoint's
    with pytest.raises(CheckpointError, match="neuralsim train"):
        gym.make("NeuralDROID-v0")
    with pytest.raises(CheckpointError, match="not a directory"):
        NeuralDROIDEnv(checkpoint=str(tmp_path / "missing_dir"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((Path(tiny_checkpoint) / "config.json").read_text())
    (broken / "model.safetensors").write_bytes(b"garbage" * 10)
    with pytest.raises(CheckpointError, match="corrupt"):
        NeuralDROIDEnv(checkpoint=broken)


def test_a_hub_id_loads_from_the_local_hub_cache_offline(offline_hub, tiny_checkpoint):
    """The hub path is the real ``snapshot_download``: offline, it resolves an id from the local cache (how an
    air-gapped machine uses a checkpoint fetched elsewhere) and names the id when the cache lacks it."""
    snapshot = offline_hub("neuralsim/tiny-world-model", tiny_checkpoint)

    assert ND.resolve_checkpoint("neuralsim/tiny-world-model").resolve() == snapshot.resolve()
    acts = actions(3, seed=5)
    from_hub, _ = rollout(make("neuralsim/tiny-world-model"), 3, acts)
    local, _ = rollout(make(tiny_checkpoint), 3, acts)
    for a, b in zip(from_hub, local, strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    with pytest.raises(CheckpointError, match="'neuralsim/not-cached'.*could not be fetched"):
        make("neuralsim/not-cached")


# ---------------------------------------------------------------------------------------------- memory
def test_memory_flat_over_1000_steps(tiny_checkpoint):
    env = make(tiny_checkpoint, max_episode_steps=1000, denoising_steps=1)
    env.reset(seed=0)
    cache = env._core.state.cache
    ptrs, nbytes = [k.data_ptr() for k in cache.k], cache.memory_bytes()
    frame_bytes = 3 * 16 * 16 * 3
    a = actions(1000, seed=2)
    a[:, :7] *= 0.3
    for t in range(700):
        env.step(a[t])
    tracemalloc.start()
    try:
        env.step(a[700])
        base, _ = tracemalloc.get_traced_memory()
        for t in range(701, 1000):
            _, _, _, trunc, _ = env.step(a[t])
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert trunc
    assert [k.data_ptr() for k in cache.k] == ptrs and cache.memory_bytes() == nbytes  # preallocated, reused
    # 1001 frames: the cache holds all but the latest, which is pending (committed by the next step)
    assert int(cache.num_frames[0]) == 1000 and int((cache.frame_index[0] >= 0).sum()) == cache.capacity
    # growth over the last 299 steps: only the episode record (frames + states + action), no per-step leak
    record_per_step = frame_bytes + 4 * (7 + 1 + 6 + 8)
    assert end - base < 299 * record_per_step * 2 + 500_000, (end - base) / 299


def test_long_episode_keeps_running_past_training_clip(tiny_checkpoint):
    env = make(tiny_checkpoint, max_episode_steps=40)
    clip = env.world_model.config.clip_length
    env.reset(seed=0)
    for t, a in enumerate(actions(40)):
        obs, *_ = env.step(a)
    assert 40 > 4 * clip and env.episode().num_frames == 41
    assert all(env.observation_space[k].contains(obs[k]) for k in obs)


# ---------------------------------------------------------------------------------------------- vector
def test_vector_autoreset_next_step(tiny_checkpoint):
    calls = []
    venv = NeuralDROIDVectorEnv(2, checkpoint=tiny_checkpoint, reward_fn=lambda ep: calls.append(ep) or 1.0,
                                max_episode_steps=3)
    assert venv.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    obs, info = venv.reset(seed=0)
    assert obs["joint_position"].shape == (2, 7) and list(info["_episode_name"]) == [True, True]
    a = actions(5, batch=(2,))
    for t in range(2):
        _, r, te, tr, _ = venv.step(a[t])
        assert not tr.any() and (r == 0).all()
    _, r, te, tr, info = venv.step(a[2])
    assert tr.all() and (r == 1.0).all() and len(calls) == 2 and info["_judgement"].all()
    obs, r, te, tr, info = venv.step(a[3])  # autoreset step: actions ignored, first observations
    assert not tr.any() and (r == 0).all() and (info["step"] == 0).all()
    assert all(venv.episode(i).num_frames == 1 for i in range(2))
    _, _, _, _, info = venv.step(a[4])
    assert (info["step"] == 1).all()


def test_vector_autoreset_same_step_and_reset_mask(tiny_checkpoint):
    venv = NeuralDROIDVectorEnv(2, checkpoint=tiny_checkpoint, reward_fn=None, max_episode_steps=2,
                                autoreset_mode="SameStep")
    assert venv.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    venv.reset(seed=0)
    a = actions(2, batch=(2,))
    venv.step(a[0])
    obs, r, te, tr, info = venv.step(a[1])
    assert tr.all() and info["_final_obs"].all() and info["final_obs"][0]["joint_position"].shape == (7,)
    assert info["final_info"]["step"].tolist() == [2, 2] and (info["step"] == 0).all()
    assert all(venv.episode(i).num_frames == 1 for i in range(2))
    # partial reset: env 1 keeps its episode
    venv.step(a[0])
    obs, info = venv.reset(seed=5, options={"reset_mask": np.array([True, False])})
    assert list(info["_episode_name"]) == [True, False]
    assert venv.episode(0).num_frames == 1 and venv.episode(1).num_frames == 2


def test_vector_bad_input(tiny_checkpoint):
    venv = NeuralDROIDVectorEnv(2, checkpoint=tiny_checkpoint, reward_fn=None)
    with pytest.raises(ResetNeeded):
        venv.step(actions(1, batch=(2,))[0])
    venv.reset(seed=0, options={"episode": ["stack_1000002", 0]})
    with pytest.raises(InvalidActionError):
        venv.step(np.zeros(8))
    bad = actions(1, batch=(2,))[0]
    bad[1, 3] = np.nan
    with pytest.raises(InvalidActionError, match=r"\[\[1, 3\]\]"):
        venv.step(bad)
    with pytest.raises(UnknownEpisodeError):
        venv.reset(seed=0, options={"episode": ["stack_1000002", "nope"]})
    with pytest.raises(ValueError, match="reset_mask"):
        venv.reset(options={"reset_mask": np.array([False, False])})
    assert [venv.episode(i).metadata["episode"] for i in range(2)] == ["stack_1000002", "put_in_bowl_1000000"]
    with pytest.raises(ValueError, match="num_envs"):
        NeuralDROIDVectorEnv(0, checkpoint=tiny_checkpoint)


def test_vector_render(tiny_checkpoint):
    venv = NeuralDROIDVectorEnv(3, checkpoint=tiny_checkpoint, reward_fn=None, render_mode="rgb_array")
    venv.reset(seed=0)
    frames = venv.render()
    assert len(frames) == 3 and frames[0].shape == (32, 32, 3)


# ---------------------------------------------------------------------------------------------- registration
def test_gym_make_by_module_id_in_fresh_process(tiny_checkpoint):
    code = textwrap.dedent(f"""
        import sys, gymnasium as gym
        assert "neuralsim" not in sys.modules
        env = gym.make("neuralsim:NeuralDROID-v0", checkpoint={str(tiny_checkpoint)!r}, reward_fn=None)
        obs, info = env.reset(seed=0)
        obs, r, term, trunc, info = env.step(env.action_space.sample())
        venv = gym.make_vec("NeuralDROID-v0", num_envs=2, checkpoint={str(tiny_checkpoint)!r}, reward_fn=None)
        print(type(env.unwrapped).__name__, type(venv).__name__, env.spec.max_episode_steps)
    """)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["NeuralDROIDEnv", "NeuralDROIDVectorEnv", "150"]


def test_gripper_trajectory_is_the_gripper_the_env_feeds_the_world_model():
    """``adapter.gripper_trajectory`` (what a ``command``-conditioned world model trains on) is the gripper that
    ``advance`` -- and so NeuralDROID's conditioning -- follows under the same commands, clipping included."""
    rng = np.random.default_rng(0)
    commands = np.concatenate([np.zeros(5), np.ones(8), rng.uniform(-0.5, 1.5, 12)])
    state = A.AdapterState.at_rest(K.RESET_JOINT_POSITION[None], np.array([[0.3]]))
    stepped = [0.3]
    for cmd in commands:
        action = np.zeros((1, 8))
        action[0, 7] = np.clip(cmd, 0.0, 1.0)  # the env clips actions into the action space first
        state, _ = A.advance(state, action)
        stepped.append(float(state.gripper_position[0, 0]))
    traj = A.gripper_trajectory(0.3, commands)
    np.testing.assert_allclose(traj, stepped, atol=1e-12)
    assert traj.shape == (len(commands) + 1,) and traj[12] > 0.95  # closes on a steady command: nothing stops it


def test_arm_trajectory_is_the_arm_the_env_feeds_the_world_model():
    """``adapter.arm_trajectory`` (what a ``replay``-conditioned world model trains on) is the joint state that
    ``advance`` follows under the same arm actions, joint limits included."""
    rng = np.random.default_rng(1)
    arm = np.clip(rng.normal(0.0, 0.8, (30, 7)), -1.0, 1.0)
    arm[:, 0] = 1.0  # joint 1 runs into its limit
    q0 = K.RESET_JOINT_POSITION.copy()
    q0[0] = K.JOINT_LIMITS_HIGH[0] - 0.5
    state = A.AdapterState.at_rest(q0[None], np.array([[0.0]]))
    stepped = [state.joint_position[0].copy()]
    for a in arm:
        state, _ = A.advance(state, np.append(a, 0.0)[None])
        stepped.append(state.joint_position[0].copy())
    traj = A.arm_trajectory(q0, arm)
    np.testing.assert_allclose(traj, np.stack(stepped), atol=1e-12)
    assert traj[:, 0].max() <= K.JOINT_LIMITS_HIGH[0] and traj[-1, 0] > K.JOINT_LIMITS_HIGH[0] - 1e-3
    with pytest.raises(ValueError, match="arm_actions"):
        A.arm_trajectory(K.RESET_JOINT_POSITION, arm[:, :6])


def test_env_cond_is_the_conditioning_the_env_feeds_the_world_model(tiny_checkpoint):
    """``latents.env_cond(..., gripper="command", arm="replay")`` turns an episode's first state and actions into
    NeuralDROID's own conditioning, step for step: the signals a world model trained on them sees in the env."""
    from neuralsim.world_model.latents import env_cond

    env = make(tiny_checkpoint)
    acts = np.clip(actions(12).astype(np.float64), env.action_space.low, env.action_space.high)
    obs, info = env.reset(seed=3, options={"episode": "put_in_bowl_1000000"})
    spec = env.episodes["put_in_bowl_1000000"]
    got = [info["conditioning"]]
    for a in acts:
        got.append(env.step(a)[4]["conditioning"])
    first = np.concatenate([K.forward_kinematics(spec.joint_position), spec.gripper_position]).astype(np.float32)
    measured = np.repeat(first[None], len(acts) + 1, 0)  # only row 0 of the measured state is read
    joints = np.repeat(spec.joint_position[None], len(acts) + 1, 0)
    want = env_cond(measured, joints, acts, gripper="command", arm="replay")
    np.testing.assert_allclose(np.stack(got), want, atol=1e-5)
    assert np.abs(want[-1, :3] - want[0, :3]).max() > 0.01  # the arm moved: the test can fail
    np.testing.assert_array_equal(env_cond(measured, joints, acts), measured)
    with pytest.raises(ValueError, match="arm must be one of"):
        env_cond(measured, joints, acts, arm="commanded")
