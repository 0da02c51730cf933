"""The judge cache keys answers by endpoint: two servers serving the same model name never share answers.

Two real HTTP servers on loopback per backend (judges_testing.py), one cache directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from judges.backends.base import endpoint_identity
from judges.registry import make_judge

from judges_testing import FAST, OPENAI_KEY, _serve, gemini_body, openai_body


@pytest.fixture
def second_server(request, monkeypatch):
    """Another loopback server of the kind the test is parametrised with (``openai`` or ``gemini``)."""
    kind = request.param
    httpd, srv = _serve(openai_body if kind == "openai" else gemini_body)
    if kind == "openai":
        srv.url += "/v1"
    yield kind, srv
    httpd.shutdown()
    httpd.server_close()


MODEL = {"openai": "openai/Qwen/Qwen2.5-VL-7B-Instruct", "gemini": "gemini/gemini-2.5-flash"}


@pytest.mark.parametrize("second_server", ["openai", "gemini"], indirect=True)
def test_two_endpoints_serving_one_model_do_not_share_cached_answers(request, second_server, tmp_path, episode):
    kind, b = second_server
    a = request.getfixturevalue(f"{kind}_server")  # sets the API key as well
    cache = tmp_path / "cache"

    def judge(server):
        return make_judge("binary_success", f"{MODEL[kind]}?base_url={server.url}&cache_dir={cache}&{FAST}")

    a.script.append('{"success": 1, "explanation": "server A: the cube is in the bowl"}')  # success ends the judgement
    b.script.extend(['{"success": 0, "explanation": "server B: the cube is on the table"}'] * 2)  # both segments
    first = judge(a)(episode)
    other = judge(b)(episode)
    assert first.ok and first.score == 1.0 and not first.cached and len(a.requests) == 1
    assert other.ok and other.score == 0.0 and not other.cached and len(b.requests) == 2  # B was asked
    again_a, again_b = judge(a)(episode), judge(b)(episode)
    assert again_a.cached and again_a.score == 1.0 and again_b.cached and again_b.score == 0.0
    assert (len(a.requests), len(b.requests)) == (1, 2)
    files = list(Path(cache).rglob("*.json"))
    assert len(files) == 3
    for f in files:  # the entry stores neither endpoint nor key
        text = f.read_text()
        assert a.url not in text and b.url not in text and OPENAI_KEY not in text


def test_the_endpoint_is_normalised_and_the_default_one_keeps_its_keys():
    default = "https://api.openai.com/v1"
    assert endpoint_identity(None, default) == endpoint_identity("https://API.openai.com/v1/", default) == {}
    assert endpoint_identity("http://127.0.0.1:8000/v1", default) == {"endpoint": "http://127.0.0.1:8000/v1"}
    # credentials and query strings never enter the key
    assert endpoint_identity("https://user:secret@vllm.example:8000/v1/?token=abc", default) == \
        {"endpoint": "https://vllm.example:8000/v1"}
