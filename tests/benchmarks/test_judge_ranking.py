"""The judge-ranking benchmark on real SimDROID episodes, judged by the shipped offline judge."""

import json

import pytest

from benchmarks.judges import ranking as jr


def test_graded_set_spans_skill_levels():
    names = [n for n, _, _ in jr.graded_policies()]
    assert names[:4] == ["expert", "noisy-0.3", "noisy-0.6", "noisy-0.9"]
    assert "expert+missed_grasp" in names and names[-2:] == ["random", "zero"]


def test_unknown_policy_and_judge_are_refused():
    with pytest.raises(ValueError, match="unknown policies"):
        jr.run(jr.Args(policies=["nope"], progress=False))
    with pytest.raises(ValueError, match="compares rubric levels"):
        jr.run(jr.Args(judges=["wow:offline"], progress=False))


def test_expert_and_zero_are_told_apart(tmp_path, monkeypatch):
    monkeypatch.setattr(jr, "default_scene", lambda: "legible")  # a shipped world model of the legible scene
    report = jr.run(jr.Args(episodes=1, policies=["expert", "zero"], progress=False))
    assert (report["scene"], report["env_id"]) == ("legible", "SimDROID-v1")
    assert jr.results_name("legible") == "judge_ranking_legible" and jr.results_name("classic") == "judge_ranking"
    by = {p["name"]: p for p in report["policies"]}
    assert by["expert"]["true_mean_level"] == 5 and by["zero"]["true_mean_level"] == 0
    spec = "roboworld:offline"
    assert report["judges"][spec]["episodes"] == 2
    assert by["zero"]["judged"][spec]["mean"] is not None
    assert report["per_episode"][0]["family"] == "put_in_bowl"
    json.dumps(report)  # the report is JSON as written
    jr.print_report(report)
