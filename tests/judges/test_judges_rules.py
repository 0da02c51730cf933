"""The papers' rules: 1 fps sampling, segmenting, max aggregation with early stop, collage, MiraBench vote."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from judges.backends.base import Backend, BackendReply
from judges.judge import Judge, aggregate, optimism_bias, segment_plan
from judges.judgement import InvalidAnswerError
from judges.rubric import available_rubrics, load_rubric
from judges.sampling import collage, progress_indices, render_frames, sample_indices, side_by_side, split_segments

from judges_testing import make_episode


# ---- sampling -------------------------------------------------------------------------------------
def test_one_fps_from_fifteen_fps():
    idx = sample_indices(451, fps=15)  # 30 s + the reset frame
    assert idx.tolist() == list(range(0, 451, 15)) and len(idx) == 31
    assert sample_indices(50, fps=15).tolist() == [0, 15, 30, 45, 49]  # final frame kept
    assert sample_indices(50, fps=15, include_last=False).tolist() == [0, 15, 30, 45]
    assert sample_indices(1, fps=15).tolist() == [0]
    assert sample_indices(61, fps=30, target_fps=2).tolist() == [0, 15, 30, 45, 60]
    with pytest.raises(ValueError, match="fps"):
        sample_indices(10, fps=0)


def test_segments_at_most_fifteen_frames_two_segments():
    assert [len(s) for s in split_segments(range(10))] == [10]  # short: one segment
    assert [len(s) for s in split_segments(range(15))] == [15]
    two = split_segments(range(20))
    assert [s.tolist() for s in two] == [list(range(10)), list(range(10, 20))]
    long = split_segments(range(100))
    assert len(long) == 2 and all(len(s) == 15 for s in long)
    assert long[0][0] == 0 and long[0][-1] == 49 and long[1][0] == 50 and long[1][-1] == 99
    assert all(np.all(np.diff(s) > 0) for s in long)
    # a 30 s rollout at 15 fps -> 31 sampled frames -> two segments of <= 15, in order, disjoint
    segs = segment_plan(451, 15.0, load_rubric("roboworld_progress"))
    assert [len(s) for s in segs] == [15, 15]
    assert segs[0][-1] < segs[1][0] and segs[1][-1] == 450


def test_aggregate_and_majority_rule():
    assert aggregate([2, 4], "max") == 4 and aggregate([2, 4], "mean") == 3
    same = ["Same"] * 4 + ["Different"] * 3
    assert optimism_bias(same) is True
    assert optimism_bias(["Same"] * 3 + ["Different"] * 4) is False  # 3 of 7 is not > 3
    assert optimism_bias(["Different"] * 7) is False and optimism_bias(["Same"] * 7) is True
    assert progress_indices(101, [0.81, 0.83, 0.85, 0.87, 0.90, 0.95, 0.97]).tolist() == [81, 83, 85, 87, 90, 95, 97]


def test_collage_tiling_matches_droid_layout():
    ep = make_episode(num_frames=3, size=8)
    e1, e2, w = (ep.frames[v] for v in ("exterior_image_1_left", "exterior_image_2_left", "wrist_image_left"))
    c = collage(e1, e2, w)
    assert c.shape == (3, 16, 16, 3)
    assert np.array_equal(c[:, :8, :8], e1) and np.array_equal(c[:, :8, 8:], e2)
    assert np.array_equal(c[:, 8:, :8], w) and not c[:, 8:, 8:].any()
    assert np.array_equal(c, ep.collage_frames())  # same as neuralsim's collage
    imgs = render_frames(ep.frames, [0, 2])
    assert len(imgs) == 2 and np.array_equal(imgs[1], c[2])
    fixed = render_frames(ep.frames, [1], views=("exterior_image_1_left", "exterior_image_2_left"))
    assert fixed[0].shape == (8, 16, 3)
    pair = side_by_side(imgs[0], imgs[1], gap=4)
    assert pair.shape == (16, 36, 3) and np.array_equal(pair[:, 20:], imgs[1])


# ---- rubric answers ---------------------------------------------------------------------------------
def test_all_rubrics_load_and_render():
    assert set(available_rubrics()) >= {"roboworld_progress", "binary_success", "wow_four_dimensions",
                                        "wow_execution_quality", "mirabench_optimism_pairwise"}
    for name in available_rubrics():
        r = load_rubric(name)
        text = r.render_prompt("stack the blocks", num_frames=15, sample_fps=1.0, segment=1, num_segments=2,
                               t_start=0.0, t_end=14.0)
        assert "stack the blocks" in text and "{" in text  # JSON example survives formatting
        assert r.json_schema()["type"] == "object"


def test_parse_answer_is_strict_about_values():
    r = load_rubric("roboworld_progress")
    assert r.parse_answer('{"score": 3, "explanation": "x"}') == {"score": 3, "explanation": "x"}
    assert r.parse_answer('```json\n{"SCORE": "5", "explanation": "y"}\n```')["score"] == 5
    for bad in ['{"score": 6, "explanation": "x"}', '{"score": -1, "explanation": "x"}',
                '{"score": 2.5, "explanation": "x"}', '{"score": true, "explanation": "x"}',
                '{"explanation": "x"}', "score: 4", "", None]:
        with pytest.raises(InvalidAnswerError):
            r.parse_answer(bad)
    m = load_rubric("mirabench_optimism_pairwise")
    assert m.parse_answer("Same")["verdict"] == "Same" and m.parse_answer("different.")["verdict"] == "Different"
    with pytest.raises(InvalidAnswerError):
        m.parse_answer("Same or Different, hard to say")


# ---- protocol with a scripted in-process backend ------------------------------------------------------
class ScriptedBackend(Backend):
    name, model, price = "scripted", "script-1", (1.0, 1.0)

    def __init__(self, answers):
        self.answers, self.seen = list(answers), []

    def generate(self, *, system, prompt, images, json_schema, timeout_s):
        self.seen.append(len(images))
        return BackendReply(self.answers.pop(0), 10, 5)


def test_judge_never_raises_and_skips_after_success(tmp_path):
    ep = make_episode(num_frames=451)
    b = ScriptedBackend(['{"score": 5, "explanation": "done"}'])
    j = Judge("roboworld_progress", b, cache=False)(ep)
    assert j.score == 5 and b.seen == [15]
    b = ScriptedBackend(['{"score": 0, "explanation": "a"}', '{"score": 2, "explanation": "b"}'])
    j = Judge("roboworld_progress", b, cache=False)(ep)
    assert j.score == 2 and b.seen == [15, 15] and j.cost_usd == pytest.approx(30 / 1e6)

    class Broken(ScriptedBackend):
        def generate(self, **kw):
            raise RuntimeError("kaboom")

    j = Judge("roboworld_progress", Broken([]), cache=False)(ep)
    assert not j.ok and "kaboom" in j.error and j.score is None
    j = Judge("roboworld_progress", b, cache=False)(object())  # not even an episode
    assert not j.ok and j.error


def test_import_judges_is_light():
    code = ("import sys, judges; judges.load_rubric('roboworld_progress'); judges.Judgement; "
            "heavy = [m for m in ('torch', 'openai', 'google.genai', 'transformers') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)
