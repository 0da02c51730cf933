"""Both envs under Gymnasium's own machinery and stable-baselines3: ``gym.make``'s TimeLimit, standard wrappers,
vector envs of single envs, episode statistics, a short PPO run.

NeuralDROID runs on the tiny random-weight world model of tests/conftest.py (16x16 views).
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import FlattenObservation, NormalizeObservation, RecordEpisodeStatistics, RecordVideo
from gymnasium.wrappers.vector import RecordEpisodeStatistics as VectorRecordEpisodeStatistics

import neuralsim  # noqa: F401  (registers the envs)
from neuralsim.envs.experts import ScriptedExpert

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


class CountingReward:
    """A reward function that scores an episode with its number of frames and remembers every call."""

    def __init__(self):
        self.frames: list[int] = []

    def __call__(self, episode) -> float:
        self.frames.append(episode.num_frames)
        return float(episode.num_frames)


def neural(ckpt, **kw):
    kw.setdefault("reward_fn", None)
    return gym.make("NeuralDROID-v0", checkpoint=str(ckpt), **kw)


def run_to_end(env, seed: int = 0, limit: int = 1000):
    """Step ``env`` with seeded random actions until it ends; (rewards, last info)."""
    env.reset(seed=seed)
    env.action_space.seed(seed)
    rewards = []
    for _ in range(limit):
        _, r, terminated, truncated, info = env.step(env.action_space.sample())
        rewards.append(float(r))
        if terminated or truncated:
            return rewards, info
    raise AssertionError(f"the episode did not end in {limit} steps")


# ---------------------------------------------------------------------------------------------- the horizon
def test_simdroid_from_gym_make_rewards_the_experts_successful_episode():
    env = gym.make("SimDROID-v0", task="stack")
    obs, _ = env.reset(seed=7)
    expert = ScriptedExpert(env.unwrapped)
    expert.reset()
    rewards = []
    for _ in range(200):
        obs, r, terminated, truncated, info = env.step(expert.act(obs))
        rewards.append(r)
        if terminated or truncated:
            break
    assert truncated and len(rewards) == 150 and env.unwrapped.max_episode_steps == 150
    assert info["rubric_level"] == 5 and rewards[-1] == 5.0 and sum(rewards) == 5.0
    env.close()


@pytest.mark.parametrize("steps", [3, 160])
def test_simdroid_judges_at_the_horizon_given_to_gym_make(steps):
    judge = CountingReward()
    env = gym.make("SimDROID-v0", max_episode_steps=steps, reward_fn=judge)
    rewards, _ = run_to_end(env)
    assert len(rewards) == steps and judge.frames == [steps + 1] and rewards[-1] == steps + 1
    assert env.spec.max_episode_steps == env.unwrapped.max_episode_steps == steps
    env.close()


@pytest.mark.parametrize("steps", [3, 155])
def test_neuraldroid_judges_at_the_horizon_given_to_gym_make(tiny_checkpoint, steps):
    judge = CountingReward()
    env = neural(tiny_checkpoint, max_episode_steps=steps, reward_fn=judge)
    rewards, info = run_to_end(env)
    assert len(rewards) == steps and judge.frames == [steps + 1]
    assert rewards[-1] == steps + 1 and sum(rewards) == steps + 1 and info["step"] == steps
    assert env.unwrapped.max_episode_steps == steps
    env.close()


def test_gym_make_without_a_time_limit_keeps_the_envs_own_horizon(tiny_checkpoint):
    judge = CountingReward()
    env = neural(tiny_checkpoint, max_episode_steps=-1, reward_fn=judge)  # -1: gym.make adds no TimeLimit
    assert not isinstance(env, gym.wrappers.TimeLimit) and env.unwrapped.max_episode_steps == 150
    env.close()
    assert gym.make("SimDROID-v0", max_episode_steps=-1).unwrapped.max_episode_steps is None
    assert neuralsim.envs.sim_droid.SimDROIDEnv(max_episode_steps=7).max_episode_steps == 7


def test_neuraldroid_vector_entry_point_judges_at_its_horizon(tiny_checkpoint):
    judge = CountingReward()
    venv = gym.make_vec("NeuralDROID-v0", num_envs=2, checkpoint=str(tiny_checkpoint), reward_fn=judge,
                        max_episode_steps=152)
    venv.reset(seed=0)
    for t in range(152):
        _, rewards, terminated, truncated, infos = venv.step(venv.action_space.sample())
    assert truncated.all() and not terminated.any() and judge.frames == [153, 153]
    np.testing.assert_array_equal(rewards, [153.0, 153.0])
    venv.close()


@pytest.mark.parametrize("env_id", ["SimDROID-v0", "NeuralDROID-v0"])
def test_a_sync_vector_env_of_made_envs_judges_every_episode(tiny_checkpoint, env_id):
    judge = CountingReward()
    kw = {"checkpoint": str(tiny_checkpoint)} if env_id == "NeuralDROID-v0" else {}
    venv = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync", max_episode_steps=3, reward_fn=judge, **kw)
    assert isinstance(venv, gym.vector.SyncVectorEnv)
    venv.reset(seed=0)
    for _ in range(3):
        _, rewards, _, truncated, _ = venv.step(venv.action_space.sample())
    assert truncated.all() and judge.frames == [4, 4]
    np.testing.assert_array_equal(rewards, [4.0, 4.0])
    venv.close()


# ---------------------------------------------------------------------------------------------- info keys
def test_record_episode_statistics_single(tiny_checkpoint):
    env = RecordEpisodeStatistics(neural(tiny_checkpoint, max_episode_steps=3, reward_fn=CountingReward()))
    _, info = env.reset(seed=0)
    assert info["episode_name"] == env.unwrapped.episode().metadata["episode"] and "episode" not in info
    _, info = run_to_end(env)
    assert info["episode"]["l"] == 3 and info["episode"]["r"] == 4.0 and isinstance(info["episode_name"], str)
    env.close()


def test_record_episode_statistics_vector(tiny_checkpoint):
    venv = VectorRecordEpisodeStatistics(gym.make_vec("NeuralDROID-v0", num_envs=2, checkpoint=str(tiny_checkpoint),
                                                      reward_fn=CountingReward(), max_episode_steps=2))
    _, infos = venv.reset(seed=0)
    assert list(infos["episode_name"]) == [venv.unwrapped.episode(i).metadata["episode"] for i in range(2)]
    for _ in range(2):
        _, _, _, truncated, infos = venv.step(venv.action_space.sample())
    assert truncated.all() and list(infos["episode"]["l"]) == [2, 2] and list(infos["episode"]["r"]) == [3.0, 3.0]
    venv.close()


def test_record_episode_statistics_simdroid():
    env = RecordEpisodeStatistics(gym.make("SimDROID-v0", max_episode_steps=2))
    _, info = run_to_end(env)
    assert info["episode"]["l"] == 2 and info["episode"]["r"] == info["rubric_level"]
    env.close()


def test_stable_baselines3_ppo_learns_a_few_steps(tiny_checkpoint):
    sb3 = pytest.importorskip("stable_baselines3")
    import torch

    env = neural(tiny_checkpoint, max_episode_steps=4, image_size=36, reward_fn=CountingReward())  # NatureCNN: >= 36 px
    model = sb3.PPO("MultiInputPolicy", env, n_steps=8, batch_size=8, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=16)
    assert model.num_timesteps == 16
    assert [ep["l"] for ep in model.ep_info_buffer] == [4, 4, 4, 4]  # Monitor's episode statistics
    assert [ep["r"] for ep in model.ep_info_buffer] == [5.0] * 4
    assert all(torch.isfinite(p).all() for p in model.policy.parameters())
    env.close()


# ---------------------------------------------------------------------------------------------- wrappers
@pytest.mark.parametrize("env_id", ["SimDROID-v0", "NeuralDROID-v0"])
def test_flatten_and_normalize_observation(tiny_checkpoint, env_id):
    kw = {"checkpoint": str(tiny_checkpoint), "reward_fn": None} if env_id == "NeuralDROID-v0" else {}
    base = gym.make(env_id, max_episode_steps=3, **kw)
    size = int(np.prod(base.observation_space["wrist_image_left"].shape))
    env = NormalizeObservation(FlattenObservation(base))
    assert env.observation_space.shape == (3 * size + 7 + 1 + 6,)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        obs, _ = env.reset(seed=0)
        for _ in range(3):
            obs, *_ = env.step(env.action_space.sample())
    assert obs.shape == env.observation_space.shape and np.isfinite(obs).all()
    env.close()


@pytest.mark.parametrize("env_id", ["SimDROID-v0", "NeuralDROID-v0"])
def test_record_video(tiny_checkpoint, tmp_path, env_id):
    pytest.importorskip("moviepy",
                        reason="gymnasium's RecordVideo writes with moviepy (pip install 'gymnasium[other]')")
    kw = {"checkpoint": str(tiny_checkpoint), "reward_fn": None} if env_id == "NeuralDROID-v0" else {}
    env = RecordVideo(gym.make(env_id, render_mode="rgb_array", max_episode_steps=3, **kw), str(tmp_path),
                      episode_trigger=lambda e: True, disable_logger=True)
    for seed in range(2):
        run_to_end(env, seed)
    env.close()
    assert sorted(p.name for p in tmp_path.glob("*.mp4")) == ["rl-video-episode-0.mp4", "rl-video-episode-1.mp4"]
