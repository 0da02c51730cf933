"""The OpenAI backend against a loopback server speaking POST /v1/chat/completions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judges.judgement import MissingAPIKeyError
from judges.registry import make_judge, make_roboworld

from judges_testing import FAST, OPENAI_KEY, Reply, openai_body


def judge_for(server, tmp_path, rubric="roboworld_progress", extra=""):
    return make_judge(rubric, f"openai/gpt-4o?base_url={server.url}&cache_dir={tmp_path / 'cache'}&{FAST}{extra}")


def images_in(req):
    return [p for p in req.body["messages"][-1]["content"] if p["type"] == "image_url"]


def test_scores_two_segments_and_takes_max(openai_server, tmp_path, episode):
    openai_server.script.extend(['{"score": 3, "explanation": "grasped, then the cube melted"}',
                                 '{"score": 4, "explanation": "lifted but not placed"}'])
    j = judge_for(openai_server, tmp_path)(episode)
    assert j.ok and j.score == 4.0
    assert j.criteria["segment_scores"] == [3.0, 4.0]
    assert len(openai_server.requests) == 2
    req = openai_server.requests[0]
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert req.body["model"] == "gpt-4o" and req.body["temperature"] == 0.0
    assert req.body["response_format"]["type"] == "json_schema"
    assert req.body["response_format"]["json_schema"]["schema"]["required"] == ["score", "explanation"]
    # 451 frames at 15 fps -> 31 frames at 1 fps -> two segments of 15 (first subsampled from 16)
    assert [len(images_in(r)) for r in openai_server.requests] == [15, 15]
    assert images_in(req)[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert "put the red cube in the bowl" in req.body["messages"][-1]["content"][0]["text"]
    # gpt-4o at $2.50 / $10 per 1M tokens, 1000 in + 50 out per call
    assert j.input_tokens == 2000 and j.output_tokens == 100
    assert j.cost_usd == pytest.approx(2 * (1000 * 2.5 + 50 * 10) / 1e6)
    assert "lifted" in j.rationale and len(j.raw_responses) == 2
    json.dumps(j.to_dict())  # serialisable for info["judgement"] / results


def test_second_segment_skipped_on_success(openai_server, tmp_path, episode):
    openai_server.script.append('{"score": 5, "explanation": "cube in bowl"}')
    j = judge_for(openai_server, tmp_path)(episode)
    assert j.score == 5.0 and len(openai_server.requests) == 1
    assert j.criteria["skipped_segments"] == 1


def test_retries_on_429_and_500(openai_server, tmp_path, episode):
    openai_server.script.extend([
        Reply(429, {"error": {"message": "rate limited", "type": "rate_limit_error"}}),
        Reply(500, {"error": {"message": "boom", "type": "server_error"}}),
        '{"score": 5, "explanation": "done"}',
    ])
    j = judge_for(openai_server, tmp_path)(episode)
    assert j.ok and j.score == 5.0
    assert len(openai_server.requests) == 3 and j.calls[0].attempts == 3


def test_retries_on_timeout(openai_server, tmp_path, episode):
    openai_server.script.extend([Reply(200, openai_body('{"score": 2, "explanation": "slow"}'), delay_s=1.5),
                                 '{"score": 5, "explanation": "done"}'])
    j = judge_for(openai_server, tmp_path, extra="&timeout_s=0.5")(episode)
    assert j.ok and j.score == 5.0 and j.calls[0].attempts == 2


def test_garbage_and_out_of_range_fail_without_raising(openai_server, tmp_path, episode):
    openai_server.default = lambda rec: "I would say it went rather well!"
    j = judge_for(openai_server, tmp_path)(episode)
    assert not j.ok and j.score is None and j.error and "segment 0" in j.error
    assert j.reward != j.reward  # NaN, never a silent 0
    assert len(openai_server.requests) == 3  # retried up to max_attempts

    openai_server.requests.clear()
    openai_server.default = lambda rec: '{"score": 9, "explanation": "great"}'
    j = judge_for(openai_server, tmp_path)(episode)
    assert not j.ok and "outside" in j.error and len(openai_server.requests) == 3


def test_permanent_error_is_not_retried(openai_server, tmp_path, episode):
    openai_server.script.append(Reply(401, {"error": {"message": "Incorrect API key provided",
                                                      "type": "invalid_request_error"}}))
    j = judge_for(openai_server, tmp_path)(episode)
    assert not j.ok and "401" in j.error and len(openai_server.requests) == 1
    assert OPENAI_KEY not in json.dumps(j.to_dict())


def test_fenced_and_prose_answers_parse(openai_server, tmp_path, episode):
    openai_server.script.extend(['Sure! ```json\n{"Score": "2", "explanation": "approached"}\n```',
                                 'Reasoning... final: {"score": 4.0, "explanation": "touched"} thanks'])
    j = judge_for(openai_server, tmp_path)(episode)
    assert j.ok and j.criteria["segment_scores"] == [2.0, 4.0]


def test_cache_hit_sends_no_request_and_stores_no_key(openai_server, tmp_path, episode):
    openai_server.script.extend(['{"score": 1, "explanation": "a"}', '{"score": 2, "explanation": "b"}'])
    first = judge_for(openai_server, tmp_path)(episode)
    assert first.ok and not first.cached and len(openai_server.requests) == 2
    judge = judge_for(openai_server, tmp_path)
    second = judge(episode)
    assert len(openai_server.requests) == 2  # nothing new reached the server
    assert second.cached and second.score == first.score == 2.0 and second.cost_usd == 0.0
    assert judge.usage.cached_calls == 2 and judge.usage.cost_usd == 0.0
    files = list(Path(tmp_path / "cache").rglob("*.json"))
    assert len(files) == 2
    for f in files:
        assert OPENAI_KEY not in f.read_text() and openai_server.url not in f.read_text()
    # a different instruction is a different question
    episode.instruction = "open the drawer"
    openai_server.script.extend(['{"score": 0, "explanation": "c"}', '{"score": 0, "explanation": "d"}'])
    assert judge(episode).score == 0.0 and len(openai_server.requests) == 4


def test_missing_key_raises_naming_env_var(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(MissingAPIKeyError, match="OPENAI_API_KEY"):
        make_roboworld("openai/gpt-4o")


def test_env_base_url_and_registry_factory(openai_server, tmp_path, episode, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.url)
    monkeypatch.setenv("NEURALSIM_JUDGE_CACHE", str(tmp_path / "c2"))
    openai_server.script.append('{"success": 1, "explanation": "done"}')
    j = make_judge("binary_success", f"openai/gpt-4o-mini?{FAST}")(episode)
    assert j.ok and j.score == 1.0 and j.rubric == "binary_success" and j.model == "gpt-4o-mini"
    assert list((tmp_path / "c2").rglob("*.json"))


def test_wow_execution_quality(openai_server, tmp_path, episode):
    openai_server.script.append('{"execution_quality": 4, "sequence_match": 1.0, "explanation": "placed"}')
    j = judge_for(openai_server, tmp_path, rubric="wow_execution_quality")(episode)
    assert j.ok and j.score == 4.0 and j.criteria["sequence_match"] == 1.0
    assert len(images_in(openai_server.requests[0])) == 16  # one call over the whole episode


def test_mirabench_pairwise_vote(openai_server, tmp_path):
    from judges_testing import make_episode

    nominal, perturbed = make_episode(seed=1), make_episode(seed=2)
    judge = judge_for(openai_server, tmp_path, rubric="mirabench_optimism_pairwise", extra="&json_mode=none")
    openai_server.script.extend(["Same", '{"verdict": "same"}', "Different", "Same.", "Different", "Same", "Different"])
    j = judge.judge_pair(nominal, perturbed)
    assert j.ok and j.criteria["same_votes"] == 4 and j.criteria["optimism_bias"] is True and j.score == 1.0
    assert len(openai_server.requests) == 7
    assert all(len(images_in(r)) == 1 for r in openai_server.requests)
    assert "response_format" not in openai_server.requests[0].body
    # 3 of 7 "Same" is not a majority: no bias; reward_fn form reads the nominal from metadata
    perturbed.metadata["nominal_episode"] = nominal
    openai_server.script.extend(["Same", "Same", "Same", "Different", "Different", "Different", "Different"])
    j = make_judge("mirabench_optimism_pairwise",
                   f"openai/gpt-4o?base_url={openai_server.url}&cache=false&json_mode=none")(perturbed)
    assert j.ok and j.criteria["same_votes"] == 3 and j.score == 0.0


def test_through_neuralsim_reward_registry(openai_server, tmp_path, episode, monkeypatch):
    """The names resolve through neuralsim.rewards exactly as the env resolves them (entry points)."""
    from importlib.metadata import EntryPoint

    import neuralsim.rewards as rewards

    eps = [EntryPoint(name=f, value=f"judges.registry:make_{f}", group=rewards.ENTRY_POINT_GROUP)
           for f in ("roboworld", "binary", "wow", "wow_execution", "mirabench")]
    monkeypatch.setattr(rewards, "entry_points", lambda group: [e for e in eps if e.group == group])
    assert rewards.available_reward_functions() == sorted(e.name for e in eps)
    reward_fn = rewards.make_reward_fn(f"roboworld:openai/gpt-4o?base_url={openai_server.url}&cache=false&{FAST}")
    openai_server.script.append('{"score": 5, "explanation": "done"}')
    reward, judgement = rewards.reward_from_result(reward_fn(episode))
    assert reward == 5.0 and judgement.ok
    openai_server.default = lambda rec: "garbage"
    reward, judgement = rewards.reward_from_result(reward_fn(episode))
    assert reward != reward and judgement.error  # NaN reward, rollout kept, error recorded
