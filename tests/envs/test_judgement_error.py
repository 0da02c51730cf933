"""``info["judgement_error"]``: a judge that fails -- by raising or by returning a judgement with no score, as the
VLM judges do when their server is unreachable or answers 5xx -- gives reward NaN and the error as a string, in
SimDROID and NeuralDROID, made by ``gym.make`` and by ``gym.make_vec``.  The judge is the real OpenAI-backend judge
talking to a real socket on loopback: a closed port (127.0.0.1:9) or a server that answers HTTP 500."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import numpy as np
import pytest

import neuralsim  # noqa: F401  (registers the envs)

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),  # tests/conftest.py
              pytest.mark.filterwarnings("ignore:.*SimDROID-v0 is out of date")]

#: The judge of the issue's report, with one attempt and no cache so a test takes well under a second.
UNREACHABLE = "roboworld:openai/gpt-4o?base_url=http://127.0.0.1:9/v1&max_attempts=1&cache=false"


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture
def failing_server(api_key):
    """An OpenAI-compatible URL on loopback whose every request gets HTTP 500."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.dumps({"error": {"message": "the model is overloaded", "type": "server_error"}}).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"roboworld:openai/gpt-4o?base_url=http://127.0.0.1:{httpd.server_address[1]}/v1&max_attempts=1&cache=false"
    httpd.shutdown()
    httpd.server_close()


def _kwargs(env_id: str, checkpoint) -> dict:
    return {"checkpoint": str(checkpoint)} if env_id.startswith("Neural") else {"image_size": 16}


@pytest.mark.parametrize("env_id", ["NeuralDROID-v0", "SimDROID-v0"])
def test_an_unreachable_judge_sets_judgement_error(env_id, tiny_checkpoint, api_key):
    env = gym.make(env_id, reward_fn=UNREACHABLE, max_episode_steps=2, **_kwargs(env_id, tiny_checkpoint))
    env.reset(seed=0)
    _, reward, _, truncated, info = env.step(env.action_space.sample())
    assert not truncated and reward == 0.0 and "judgement_error" not in info
    _, reward, _, truncated, info = env.step(env.action_space.sample())
    assert truncated and np.isnan(reward)
    error = info["judgement_error"]
    assert isinstance(error, str) and "Connection" in error, error
    assert error == info["judgement"].error  # the judge's own account, as a string
    env.close()


@pytest.mark.parametrize("env_id", ["NeuralDROID-v0", "SimDROID-v0"])
def test_a_judge_server_error_sets_judgement_error_in_vector_envs(env_id, tiny_checkpoint, failing_server):
    venv = gym.make_vec(env_id, num_envs=2, reward_fn=failing_server, max_episode_steps=2,
                        **_kwargs(env_id, tiny_checkpoint))
    venv.reset(seed=0)
    for _ in range(2):
        _, reward, _, truncated, info = venv.step(venv.action_space.sample())
    assert truncated.all() and np.isnan(reward).all()
    assert info["_judgement_error"].all()
    for k in range(2):
        error = info["judgement_error"][k]
        assert isinstance(error, str) and "500" in error and "overloaded" in error, error
    venv.close()


def test_a_reward_function_returning_nan_names_it(tiny_checkpoint):
    env = gym.make("NeuralDROID-v0", checkpoint=str(tiny_checkpoint), reward_fn=lambda episode: float("nan"),
                   max_episode_steps=1)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(env.action_space.sample())
    assert np.isnan(reward) and info["judgement_error"] == "the reward function gave no score"
