"""Helpers for judge tests: synthetic episodes and loopback HTTP servers speaking real wire formats.

Imported by tests as ``judges_testing`` (pytest puts this directory on sys.path).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import numpy as np
import pytest

from neuralsim.episode import VIEW_NAMES, Episode

OPENAI_KEY = "sk-test-SECRET-openai-0123456789"
GEMINI_KEY = "AIza-test-SECRET-gemini-0123456789"


def make_episode(num_frames: int = 451, size: int = 16, instruction: str = "put the red cube in the bowl",
                 seed: int = 0, fps: float = 15.0) -> Episode:
    """An Episode with distinct per-view, per-frame images (so frame digests differ)."""
    rng = np.random.default_rng(seed)
    frames = {v: rng.integers(0, 255, (num_frames, size, size, 3), dtype=np.uint8) for v in VIEW_NAMES}
    t = num_frames
    return Episode(
        frames=frames, joint_position=np.zeros((t, 7)), gripper_position=np.zeros((t, 1)),
        cartesian_position=np.zeros((t, 6)), actions=np.zeros((t - 1, 8)), instruction=instruction, fps=fps,
    )


@dataclass
class Reply:
    """A scripted HTTP reply: status, JSON body (or raw text), optional delay before answering."""

    status: int = 200
    body: Any = None
    delay_s: float = 0.0


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeServer:
    """A ThreadingHTTPServer on 127.0.0.1; replies come from ``script`` (a queue) or ``default``."""

    url: str
    requests: list[Recorded] = field(default_factory=list)
    script: deque = field(default_factory=deque)
    default: Callable[[Recorded], Reply] | None = None


def _serve(make_ok: Callable[[str], Any]) -> Any:
    state: dict[str, FakeServer] = {}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

        def do_POST(self) -> None:  # noqa: N802
            srv = state["srv"]
            n = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(n) or b"{}")
            rec = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            srv.requests.append(rec)
            if srv.script:
                reply = srv.script.popleft()
            else:
                reply = srv.default(rec) if srv.default else Reply(500, {"error": "no reply scripted"})
            if isinstance(reply, str):
                reply = Reply(200, make_ok(reply))
            if reply.delay_s:
                time.sleep(reply.delay_s)
            data = reply.body if isinstance(reply.body, (bytes, str)) else json.dumps(reply.body)
            data = data.encode() if isinstance(data, str) else data
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    srv = FakeServer(url=f"http://127.0.0.1:{httpd.server_address[1]}")
    state["srv"] = srv
    th = threading.Thread(target=httpd.serve_forever, daemon=True)
    th.start()
    return httpd, srv


def openai_body(text: str, prompt_tokens: int = 1000, completion_tokens: int = 50) -> dict[str, Any]:
    """A chat.completion object as api.openai.com returns it."""
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 1700000000, "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
        "system_fingerprint": "fp_test",
    }


def gemini_body(text: str, prompt_tokens: int = 1000, completion_tokens: int = 50) -> dict[str, Any]:
    """A GenerateContentResponse as generativelanguage.googleapis.com returns it."""
    return {
        "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": completion_tokens,
                          "totalTokenCount": prompt_tokens + completion_tokens},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "test",
    }


@pytest.fixture
def openai_server(monkeypatch):
    httpd, srv = _serve(openai_body)
    srv.url += "/v1"
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    yield srv
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def gemini_server(monkeypatch):
    httpd, srv = _serve(gemini_body)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    yield srv
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def episode():
    return make_episode()


FAST = "initial_backoff_s=0.001&max_backoff_s=0.01&max_attempts=3"


def write_synthetic_dataset(root, num_episodes: int = 12, num_frames: int = 61, size: int = 32, seed: int = 0,
                            ground_truth: bool = False):
    """A tiny labelled dataset in the SimDROID layout (meta/info.json, meta/episodes.jsonl, videos/<view>/...).

    The rubric level is visible: a bright square slides right in the exterior views by an amount
    that grows with the level, so a model can learn it; the wrist view is noise.  With
    ``ground_truth`` each episode also gets ``data/episode_XXXXXX.parquet`` with the per-frame
    ``ground_truth.rubric_level`` and ``ground_truth.target_distance`` (the square's distance to the
    right edge, 0.01 m per pixel), and its record the ``target`` and ``final_poses`` of a
    ``put_in_bowl`` episode whose cube ends 0.1 m * (5 - level) from the bowl.
    """
    from pathlib import Path

    from neuralsim.episode import write_video

    root = Path(root)
    rng = np.random.default_rng(seed)
    (root / "meta").mkdir(parents=True, exist_ok=True)
    (root / "meta" / "info.json").write_text(json.dumps({"fps": 15, "features": {}}))
    levels = [0, 2, 4, 5]
    rows = []
    for i in range(num_episodes):
        level = levels[i % len(levels)]
        for v in VIEW_NAMES:
            x = np.full((num_frames, size, size, 3), 60, dtype=np.uint8)
            if v != "wrist_image_left":
                for t in range(num_frames):
                    pos = int(2 + (size - 10) * (level / 5) * t / (num_frames - 1))
                    x[t, 12:20, pos:pos + 8] = (230, 40, 40)
            else:
                x = rng.integers(0, 255, x.shape, dtype=np.uint8)
            (root / "videos" / v).mkdir(parents=True, exist_ok=True)
            write_video(str(root / "videos" / v / f"episode_{i:06d}.mp4"), x, fps=15)
        if ground_truth:
            import pyarrow as pa
            import pyarrow.parquet as pq

            t = np.arange(num_frames)
            pos = (2 + (size - 10) * (level / 5) * t / (num_frames - 1)).astype(int)
            (root / "data").mkdir(exist_ok=True)
            pq.write_table(pa.table({
                "episode_index": np.full(num_frames, i, np.int64),
                "ground_truth.rubric_level": np.minimum(t * 6 // num_frames, level).astype(np.int8),
                "ground_truth.target_distance": (0.01 * (size - 8 - pos)).astype(np.float32)}),
                root / "data" / f"episode_{i:06d}.parquet")
        rows.append({"episode_index": i, "task": "put the red cube in the bowl", "family": f"fam{i % 2}",
                     "seed": i, "success": level == 5, "rubric_level": level, "failure": None})
        if ground_truth:
            rows[-1].update(family="put_in_bowl", target="red_cube", final_poses={
                "red_cube": [0.5 + 0.1 * (5 - level), 0.0, 0.03, 1, 0, 0, 0], "bowl": [0.5, 0.0, 0.0, 1, 0, 0, 0]})
    (root / "meta" / "episodes.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root
