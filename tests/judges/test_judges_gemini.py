"""The Gemini backend against a loopback server speaking POST /v1beta/models/{model}:generateContent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judges.judgement import MissingAPIKeyError
from judges.registry import make_judge

from judges_testing import FAST, GEMINI_KEY, Reply, gemini_body


def judge_for(server, tmp_path, rubric="roboworld_progress", extra=""):
    return make_judge(rubric,
                      f"gemini/gemini-2.5-flash?base_url={server.url}&cache_dir={tmp_path / 'cache'}&{FAST}{extra}")


def inline_images(req):
    return [p for c in req.body["contents"] for p in c["parts"] if "inlineData" in p or "inline_data" in p]


def test_scores_with_structured_output(gemini_server, tmp_path, episode):
    gemini_server.script.extend(['{"score": 2, "explanation": "approached"}', '{"score": 4, "explanation": "grasped"}'])
    j = judge_for(gemini_server, tmp_path)(episode)
    assert j.ok and j.score == 4.0 and j.backend == "gemini" and j.model == "gemini-2.5-flash"
    req = gemini_server.requests[0]
    assert req.path.endswith("/models/gemini-2.5-flash:generateContent")
    assert req.headers["x-goog-api-key"] == GEMINI_KEY
    gen = req.body["generationConfig"]
    assert gen["responseMimeType"] == "application/json" and gen["temperature"] == 0.0
    assert gen["responseJsonSchema"]["required"] == ["score", "explanation"]
    assert "systemInstruction" in req.body
    assert len(inline_images(req)) == 15
    # gemini-2.5-flash at $0.30 / $2.50 per 1M tokens
    assert j.cost_usd == pytest.approx(2 * (1000 * 0.30 + 50 * 2.50) / 1e6)


def test_retries_on_429_503_and_timeout(gemini_server, tmp_path, episode):
    err = {"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}}
    gemini_server.script.extend([Reply(429, err),
                                 Reply(503, {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}),
                                 Reply(200, gemini_body('{"score": 1, "explanation": "late"}'), delay_s=1.5),
                                 '{"score": 5, "explanation": "done"}'])
    j = judge_for(gemini_server, tmp_path, extra="&max_attempts=4&timeout_s=0.5")(episode)
    assert j.ok and j.score == 5.0 and j.calls[0].attempts == 4


def test_garbage_fails_after_retries(gemini_server, tmp_path, episode):
    gemini_server.default = lambda rec: "no json here"
    j = judge_for(gemini_server, tmp_path)(episode)
    assert not j.ok and j.score is None and "no JSON" in j.error
    assert len(gemini_server.requests) == 3


def test_cache_hit_and_no_key_in_cache(gemini_server, tmp_path, episode):
    gemini_server.script.append('{"score": 5, "explanation": "done"}')
    assert judge_for(gemini_server, tmp_path)(episode).score == 5.0
    j = judge_for(gemini_server, tmp_path)(episode)
    assert j.cached and j.score == 5.0 and len(gemini_server.requests) == 1
    for f in Path(tmp_path / "cache").rglob("*"):
        if f.is_file():
            assert GEMINI_KEY not in f.read_text()
    assert GEMINI_KEY not in json.dumps(j.to_dict())


def test_wow_four_dimensions(gemini_server, tmp_path, episode):
    gemini_server.script.append(json.dumps({"video_quality": 4, "instruction_following": 5, "physical_consistency": 3,
                                            "planning_logic": 4, "explanation": "ok"}))
    j = judge_for(gemini_server, tmp_path, rubric="wow_four_dimensions")(episode)
    assert j.ok and j.score == pytest.approx(4.0)
    assert {k: j.criteria[k] for k in ("video_quality", "instruction_following", "physical_consistency",
                                       "planning_logic")} == \
        {"video_quality": 4, "instruction_following": 5, "physical_consistency": 3, "planning_logic": 4}
    assert len(gemini_server.requests) == 1


def test_wow_rejects_out_of_range_dimension(gemini_server, tmp_path, episode):
    gemini_server.default = lambda rec: json.dumps({"video_quality": 0, "instruction_following": 5,
                                                    "physical_consistency": 3, "planning_logic": 4, "explanation": "x"})
    j = judge_for(gemini_server, tmp_path, rubric="wow_four_dimensions")(episode)
    assert not j.ok and "video_quality" in j.error


def test_missing_key_raises_naming_env_var(monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="GEMINI_API_KEY"):
        make_judge("roboworld_progress", "gemini/gemini-2.5-flash")
