"""NeuralDROID's episode record: what it keeps (``record_frames``) and what it costs (issue 85, item 7).

Over a 5,000-step episode RSS grew 95 KB per step, not the documented 37 KB: each recorded frame was a view of the
tensor the decoder had just allocated among the step's temporaries, and the kept 37 KB blocks fragmented the heap
(50 KB a step of free but unusable heap).  The record now copies frames into memory of its own, and
``record_frames="judge"`` keeps only the frames a judge samples.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import neuralsim  # noqa: F401  (registers the envs)
from judges.backends.base import Backend, BackendReply
from judges.judge import Judge
from judges.sampling import images_digest
from neuralsim.episode import RECORD_FRAMES, VIEW_NAMES, EpisodeRecorder

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def actions(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (n, 8)).astype(np.float32)
    a[:, 7] = rng.uniform(0, 1, n)
    return a


def rollout(checkpoint, record_frames: str, steps: int, horizon: int | None = None, reward_fn=None):
    """(env, last reward, last info) after ``steps`` seeded steps of one episode."""
    env = gym.make("NeuralDROID-v0", checkpoint=checkpoint, reward_fn=reward_fn, record_frames=record_frames,
                   max_episode_steps=horizon or steps)
    env.reset(seed=0, options={"episode": 0})
    for a in actions(steps):
        _, reward, _, _, info = env.step(a)
    return env, reward, info


class PixelBackend(Backend):
    """A VLM stand-in whose answer is a function of every pixel it is shown, and which remembers its prompts."""

    name, model = "pixels", "pixels-1"

    def __init__(self):
        self.asked: list[tuple[str, str]] = []

    def generate(self, *, system, prompt, images, json_schema, timeout_s):
        self.asked.append((prompt, images_digest(images)))
        score = int(sum(int(im.sum()) for im in images)) % 5  # never 5, so both segments are always asked
        return BackendReply(f'{{"score": {score}, "explanation": "pixels"}}')


# ---------------------------------------------------------------------------------------------- what is kept
def test_record_frames_bounds_the_frames_the_record_holds(tiny_checkpoint):
    """After 61 steps "all" holds 62 frames, "judge" frames 0, 15, 30, 45, 60 and the latest, "none" 0 and the
    latest; the kept frames are those of "all" (same seed, same actions), the others black."""
    envs = {mode: rollout(tiny_checkpoint, mode, 61, horizon=1000)[0] for mode in RECORD_FRAMES}
    held = {mode: env.unwrapped._core.records[0].frames_held for mode, env in envs.items()}
    assert held == {"all": 62, "judge": 6, "none": 2}
    full = envs["all"].unwrapped.episode()
    assert full.recorded_frames is None and full.num_frames == 62
    for mode, kept in (("judge", [0, 15, 30, 45, 60, 61]), ("none", [0, 61])):
        ep = envs[mode].unwrapped.episode()
        assert ep.num_frames == 62 and ep.recorded_frames.tolist() == kept
        for v in VIEW_NAMES:
            np.testing.assert_array_equal(ep.frames[v][kept], full.frames[v][kept])
            assert not np.delete(ep.frames[v], kept, axis=0).any()  # the frames not kept are black
        for k in ("joint_position", "gripper_position", "cartesian_position", "actions"):
            np.testing.assert_array_equal(getattr(ep, k), getattr(full, k))  # states and actions are all kept
    assert full.frames[VIEW_NAMES[0]].any()


def test_the_vector_env_records_its_rows_the_same_way(tiny_checkpoint):
    venv = gym.make_vec("NeuralDROID-v0", num_envs=2, checkpoint=tiny_checkpoint, reward_fn=None,
                        record_frames="judge", max_episode_steps=1000)
    venv.reset(seed=0)
    for _ in range(40):
        venv.step(venv.action_space.sample())
    assert [venv._core.records[i].frames_held for i in range(2)] == [4, 4]  # 0, 15, 30 and 40
    assert venv.episode(1).recorded_frames.tolist() == [0, 15, 30, 40]


def test_the_judge_frames_are_bounded_on_a_long_episode():
    """M steps with "judge" hold at most M // 15 + 2 frames, with "none" 2; past the horizon the record grows."""
    views = np.zeros((3, 4, 4, 3), np.uint8)
    state = (np.zeros(7), np.zeros(1), np.zeros(6))
    recs = {mode: EpisodeRecorder(views, *state, record_frames=mode, fps=15, horizon=100) for mode in RECORD_FRAMES}
    for m in range(1, 1001):
        for rec in recs.values():
            rec.append(views + (m % 251), np.zeros(8), *state)
        if m % 97 == 0 or m == 1000:
            assert recs["all"].frames_held == m + 1
            assert recs["judge"].frames_held <= m // 15 + 2 and recs["none"].frames_held == 2
    ep = recs["judge"].episode("x")
    assert ep.num_frames == 1001 and ep.recorded_frames.tolist() == list(range(0, 1001, 15)) + [1000]
    assert [int(ep.frames[VIEW_NAMES[0]][i, 0, 0, 0]) for i in (15, 1000)] == [15, 1000 % 251]


def test_bad_record_frames_are_refused_by_value(tiny_checkpoint):
    for make in (lambda: gym.make("NeuralDROID-v0", checkpoint=tiny_checkpoint, reward_fn=None,
                                  record_frames="some"),
                 lambda: gym.make_vec("NeuralDROID-v0", num_envs=2, checkpoint=tiny_checkpoint, reward_fn=None,
                                      record_frames="some")):
        with pytest.raises(ValueError, match=r"record_frames must be one of \('all', 'judge', 'none'\), got 'some'"):
            make()


def test_the_episode_is_a_read_only_view_of_the_record(tiny_checkpoint):
    env = rollout(tiny_checkpoint, "all", 5)[0]
    ep = env.unwrapped.episode()
    with pytest.raises(ValueError, match="read-only"):
        ep.frames[VIEW_NAMES[0]][0] = 0


# ---------------------------------------------------------------------------------------------- the judge
@pytest.mark.parametrize("steps", [40, 245])  # last frame off the 1 fps grid; 245: two segments of sampled frames
def test_a_vlm_judge_sees_the_same_frames_and_scores_the_same(tiny_checkpoint, steps):
    scores, asked = {}, {}
    for mode in ("all", "judge"):
        backend = PixelBackend()
        _, scores[mode], info = rollout(tiny_checkpoint, mode, steps,
                                        reward_fn=Judge("roboworld_progress", backend, cache=False))
        asked[mode] = backend.asked
        assert info["judgement"].ok
    assert len(asked["all"]) == (2 if steps == 245 else 1)
    assert asked["judge"] == asked["all"] and scores["judge"] == scores["all"]  # same prompts, images, score


def test_the_offline_judge_scores_the_same(tiny_checkpoint):
    out = {mode: rollout(tiny_checkpoint, mode, 40, reward_fn="roboworld:offline")[1:] for mode in ("all", "judge")}
    (reward_all, info_all), (reward_judge, info_judge) = out["all"], out["judge"]
    assert reward_judge == reward_all and info_judge["judgement"].criteria == info_all["judgement"].criteria


# ---------------------------------------------------------------------------------------------- memory
def test_the_record_keeps_no_tensor_of_torch_per_step(tiny_checkpoint):
    """The cause of the 95 KB per step: every recorded frame kept the decoder's output tensor alive, 50 steps
    50 more tensors (each pinning its block among the step's freed temporaries).  The record copies frames out."""
    import gc

    import torch

    def live_tensors() -> int:
        gc.collect()
        return sum(type(o) is torch.Tensor for o in gc.get_objects())

    env = rollout(tiny_checkpoint, "all", 10, horizon=1000)[0]
    before = live_tensors()
    for a in actions(50, seed=1):
        env.step(a)
    assert live_tensors() - before < 5
