"""``context_window`` is range-checked against the checkpoint when the env is made (issue 85, item 5).

Before the check, ``gym.make("NeuralDROID-v0", context_window=10000)`` was accepted and then preallocated a KV
cache 300 times the shipped one: 60 steps took 3.3 GB at 0.4 steps/s.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import neuralsim  # noqa: F401  (registers the envs)
from neuralsim.envs.neural_droid import ContextWindowError, context_window_range
from neuralsim.world_model.model import WorldModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def test_the_supported_range_is_the_checkpoints_window_or_twice_its_training_clip(tiny_checkpoint):
    shipped = WorldModel.from_pretrained(neuralsim.envs.neural_droid.DEFAULT_CHECKPOINT).config
    assert context_window_range(shipped) == (2, max(shipped.window, 2 * shipped.clip_length)) == (2, 32)
    tiny = WorldModel.from_pretrained(tiny_checkpoint).config
    assert context_window_range(tiny) == (2, 2 * tiny.clip_length) == (2, 12)


def test_gym_make_refuses_a_window_the_shipped_checkpoint_does_not_support():
    with pytest.raises(ContextWindowError, match=r"context_window=10000 .*2\.\.32") as e:
        gym.make("NeuralDROID-v0", reward_fn=None, context_window=10000)
    assert isinstance(e.value, ValueError)
    env = gym.make("NeuralDROID-v0", reward_fn=None, context_window=32)  # the top of the range is accepted
    assert env.unwrapped._core.state.cache.window == 32
    env.close()


@pytest.mark.parametrize("bad", [13, 10000, 1, 0, -3, 2.5, "16", True])
def test_single_and_vector_envs_refuse_windows_outside_the_range_by_value(tiny_checkpoint, bad):
    for make in (lambda: gym.make("NeuralDROID-v0", checkpoint=tiny_checkpoint, reward_fn=None, context_window=bad),
                 lambda: gym.make_vec("NeuralDROID-v0", num_envs=2, checkpoint=tiny_checkpoint, reward_fn=None,
                                      context_window=bad)):
        with pytest.raises(ContextWindowError, match=rf"context_window={bad!r}.*2\.\.12"):
            make()


@pytest.mark.parametrize("window", [2, 12, None])
def test_windows_inside_the_range_are_accepted(tiny_checkpoint, window):
    env = gym.make("NeuralDROID-v0", checkpoint=tiny_checkpoint, reward_fn=None, context_window=window)
    venv = gym.make_vec("NeuralDROID-v0", num_envs=2, checkpoint=tiny_checkpoint, reward_fn=None,
                        context_window=window)
    want = 6 if window is None else window  # the tiny checkpoint's own window
    assert env.unwrapped._core.state.cache.window == venv._core.state.cache.window == want
    venv.reset(seed=0)
    venv.step(venv.action_space.sample())
    env.close()
    venv.close()
