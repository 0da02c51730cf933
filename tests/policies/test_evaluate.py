"""The evaluation main job (``python -m policies.evaluate``) on a tiny random-weight world model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from policies import evaluate as E


def test_expert_plan_reaches_the_goal_in_simdroid():
    sim = E._sim_env()
    try:
        plan = E.expert_plan(sim, seed=1000000, task="put_in_bowl", max_steps=150)
        info, episode = E.replay_in_sim(sim, 1000000, "put_in_bowl", plan)
    finally:
        sim.close()
    assert plan.shape[1] == 8 and 30 < len(plan) <= 150
    assert info["rubric_level"] == 5  # replaying the expert's own actions open loop is deterministic
    assert episode.num_frames == len(plan) + 1


def test_evaluate_writes_videos_results_and_truth(tiny_checkpoint, tmp_path):
    calls = []

    def reward(episode):
        calls.append(episode.num_frames)
        return 3.0

    cfg = E.EvalConfig(policy="zero", episodes=2, steps=12, checkpoint=tiny_checkpoint, reward_fn=reward,
                       out=str(tmp_path), progress=False)
    scores = E.evaluate(cfg)
    assert [s.steps for s in scores] == [12, 12]
    assert calls == [13, 13]  # judged once per episode, on the whole episode (first frame + 12)
    assert all(s.neural_score == 3.0 for s in scores)
    assert all(s.sim_level in (0, 2, 4, 5) for s in scores)  # zero actions: the arm stays at rest
    assert scores[0].sim_level == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["summary"]["episodes"] == 2 and results["summary"]["neural_mean_score"] == 3.0
    import imageio.v3 as iio

    video = iio.imread(scores[0].video)
    assert video.shape[0] == 13 and video.shape[2] > video.shape[1]  # two collages side by side


def test_expert_plan_policy_runs_the_full_horizon(tiny_checkpoint, tmp_path):
    cfg = E.EvalConfig(episodes=1, steps=40, checkpoint=tiny_checkpoint, reward_fn="none", out=str(tmp_path),
                       progress=False)
    (score,) = E.evaluate(cfg)
    assert score.steps == 40 and score.neural_score is None and score.sim_level is not None


def test_the_default_job_follows_a_legible_world_model(tiny_legible_checkpoint, tmp_path, monkeypatch):
    """What scripts/demo.sh runs, on a model of the legible scene: its SimDROID-v1 specs are planned, and replayed
    for the truth, in SimDROID-v1 (not in the classic SimDROID-v0)."""
    made = []

    def sim_env(scene="classic"):
        made.append(real(scene))
        return made[-1]

    real = E._sim_env
    monkeypatch.setattr(E, "_sim_env", sim_env)
    cfg = E.EvalConfig(episodes=1, steps=6, checkpoint=tiny_legible_checkpoint, reward_fn="none", out=str(tmp_path),
                       progress=False)
    (score,) = E.evaluate(cfg)
    assert [env.scene.env_id for env in made] == ["SimDROID-v1"]
    assert score.error is None and score.steps == 6 and score.sim_level is not None and score.video is not None


def test_bad_arguments(tiny_checkpoint, tmp_path):
    with pytest.raises(ValueError, match="steps"):
        E.evaluate(E.EvalConfig(steps=0, checkpoint=tiny_checkpoint, out=str(tmp_path)))
    with pytest.raises(KeyError):
        E.evaluate(E.EvalConfig(names=["no_such_episode"], checkpoint=tiny_checkpoint, reward_fn="none",
                                out=str(tmp_path), progress=False))


@pytest.mark.parametrize("name, match", [("expert", "privileged"), ("noisy-0.3", "privileged"),
                                         ("scripted", "privileged"), ("replay", "recorded actions"),
                                         ("bogus", "unknown policy 'bogus'.*This job takes: expert-plan")])
def test_policies_this_job_cannot_build_are_refused_by_name(tiny_checkpoint, tmp_path, name, match):
    from policies import UnknownPolicyError

    with pytest.raises(UnknownPolicyError if name == "bogus" else ValueError, match=match):
        E.evaluate(E.EvalConfig(policy=name, episodes=1, steps=2, checkpoint=tiny_checkpoint, reward_fn="none",
                                out=str(tmp_path), progress=False))


def test_more_episodes_than_the_set_holds_is_an_error_not_a_silent_cap(tiny_checkpoint, tmp_path):
    with pytest.raises(ValueError, match=r"episodes must be <= 24.*got 100"):
        E.evaluate(E.EvalConfig(policy="zero", episodes=100, steps=2, checkpoint=tiny_checkpoint, reward_fn="none",
                                out=str(tmp_path), progress=False))


def test_the_command_line_reports_bad_input_without_a_traceback(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    common = ["--checkpoint", str(tiny_checkpoint), "--reward-fn", "none", "--out", str(tmp_path), "--no-progress"]
    assert E.main(["--names", "no_such_episode", *common]) == 2  # usage mistakes exit 2
    assert "policies.evaluate: error: unknown episode 'no_such_episode'" in capsys.readouterr().err
    assert E.main(["--policy", "expert", *common]) == 2
    assert "use 'expert-plan'" in capsys.readouterr().err
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):  # a hosted judge without its key: one line naming the variable
        monkeypatch.delenv(var, raising=False)
    hosted = [*common[:2], "--reward-fn", "roboworld:openai/gpt-4o", *common[4:]]
    assert E.main(hosted) == 1
    err = capsys.readouterr().err
    assert err.startswith("policies.evaluate: error: ") and "set the OPENAI_API_KEY environment variable" in err


def test_summary_agreement():
    s = [E.EpisodeScore("a", "x", 10, 5.0, 5, "v"), E.EpisodeScore("b", "x", 10, 4.0, 0, "v"),
         E.EpisodeScore("c", "x", 10, float("nan"), 2, "v")]
    summary = E.summarise(s)
    assert summary["success_agreement"] == 1.0 and summary["mean_abs_level_error"] == 2.0
    assert np.isclose(summary["sim_mean_level"], 7 / 3)
