"""The main job (``python -m policies.evaluate``) against real policy servers that die, hang or misbehave.

Issue 85, items 1 and 8: finished episodes survive a policy server killed mid-run (``kill -9``) and Ctrl-C, a re-run
resumes, server-side errors and user mistakes end in one line on stderr with exit 1 / 2 / 130.  The servers are
:class:`policies.server.PolicyServer` (in a subprocess where it must die or hang) or a bare websocket peer on
loopback sending the malformed replies; the job runs as a real subprocess where its exit code and stderr matter.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from policies import evaluate as E
from policies.openpi_client import packb, unpackb
from policies.server import PolicyServer

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]

#: A policy server in its own process: zero chunks of 10, and at query AT it kills itself (``die``: SIGKILL, as
#: ``kill -9`` would) or hangs (``hang``), first writing MARKER.  Prints its port.
SERVER = """
import os, signal, sys, time
from pathlib import Path
import numpy as np
from policies.server import PolicyServer

mode, at, marker = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])

class Scripted:
    n = 0
    def reset(self, instruction):
        pass
    def infer(self, observation):
        self.n += 1
        if self.n == at:
            marker.write_text(str(self.n))
            if mode == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(120)
        return np.zeros((10, 8), np.float32)

server = PolicyServer(Scripted(), port=0).start()
print(server.port, flush=True)
server.serve_forever()
"""


def _env() -> dict[str, str]:
    return {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


@contextlib.contextmanager
def server_process(tmp_path: Path, mode: str, at: int):
    """A policy server subprocess (see SERVER); yields (port, marker path)."""
    script, marker = tmp_path / "server.py", tmp_path / "server_marker"
    script.write_text(SERVER)
    proc = subprocess.Popen([sys.executable, str(script), mode, str(at), str(marker)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=_env(), cwd=ROOT)
    try:
        port = int(proc.stdout.readline())
        yield port, marker
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def job_args(port: int, out: Path, checkpoint: Path, episodes: int = 3) -> list[str]:
    """10-step episodes, a query every 5 steps: queries 1-2 are episode 1, 3-4 episode 2."""
    return ["--policy", f"openpi:127.0.0.1:{port}", "--episodes", str(episodes), "--steps", "10",
            "--replan-every", "5", "--checkpoint", str(checkpoint), "--out", str(out), "--no-progress"]


def run_job(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "policies.evaluate", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT, **kw)


class ZeroPolicy:
    """Zero chunks of 10; records the instructions it was reset with."""

    def __init__(self):
        self.resets: list[str] = []

    def reset(self, instruction: str) -> None:
        self.resets.append(instruction)

    def infer(self, observation: dict) -> np.ndarray:
        return np.zeros((10, 8), np.float32)


# ----------------------------------------------------------------------------- item 1: kill -9, resume
def test_a_policy_server_killed_mid_run_keeps_finished_episodes_and_the_rerun_resumes(tiny_checkpoint, tmp_path):
    out = tmp_path / "eval"
    with server_process(tmp_path, "die", at=4) as (port, marker):  # dies at episode 2's second query (step 5)
        job = run_job(job_args(port, out, tiny_checkpoint))
        stdout, stderr = job.communicate(timeout=240)
    assert marker.is_file(), stderr
    assert job.returncode == 1, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("policies.evaluate: error: 1 episode(s) failed (first ") and "PolicyConnectionError" in last
    assert "closed" in last and f"1 finished episode saved in {out / 'results.json'}" in last
    assert "run the same command again to resume" in last
    results = json.loads((out / "results.json").read_text())
    first, failed = results["episodes"]  # episode 3 is not run against a dead server
    assert first["error"] is None and first["neural_score"] is not None and first["sim_level"] is not None
    assert failed["error"].startswith("PolicyConnectionError: ") and failed["steps"] == 5
    assert failed["neural_score"] is None and failed["sim_level"] is None  # a failed episode has no scores
    import imageio.v3 as iio

    assert iio.imread(failed["video"]).shape[0] == 6  # the partial rollout: the first frame + 5 steps
    assert results["summary"]["episodes"] == 1 and results["summary"]["failed"] == 1
    assert not (out / "results.json.tmp").exists() and not list(out.glob("02_*.mp4"))

    # the server is back on its port: the same command runs episodes 2 and 3 only and keeps episode 1's row
    policy = ZeroPolicy()
    with PolicyServer(policy, port=port):
        assert E.main(job_args(port, out, tiny_checkpoint)) == 0
    resumed = json.loads((out / "results.json").read_text())
    assert resumed["episodes"][0] == first
    assert [r["error"] for r in resumed["episodes"]] == [None, None, None]
    assert [r["steps"] for r in resumed["episodes"]] == [10, 10, 10]
    assert policy.resets == [r["instruction"] for r in resumed["episodes"][1:]]
    assert resumed["summary"]["episodes"] == 3 and resumed["summary"]["failed"] == 0


# ----------------------------------------------------------------------------- item 1: server-side errors
@contextlib.contextmanager
def raw_server(reply):
    """A bare websocket peer: metadata {}, then reply(request) to every request."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.server import serve

    def handler(conn):
        try:
            conn.send(packb({}))
            while True:
                conn.send(reply(unpackb(conn.recv())))
        except ConnectionClosed:
            pass

    server = serve(handler, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.socket.getsockname()[1]
    finally:
        server.shutdown()
        thread.join(10)


class RaisingPolicy(ZeroPolicy):
    def infer(self, observation: dict) -> np.ndarray:
        raise RuntimeError("CUDA out of memory in the served policy")


@contextlib.contextmanager
def bad_server(case: str):
    if case == "raises":
        with PolicyServer(RaisingPolicy(), port=0) as server:
            yield server.port
        return
    replies = {"shape (10, 7)": {"actions": np.zeros((10, 7), np.float32)},
               "NaN": {"actions": np.full((10, 8), np.nan, np.float32)},
               "no actions": {"action": np.zeros((10, 8), np.float32)}}
    with raw_server(lambda request: packb(replies[case])) as port:
        yield port


@pytest.mark.parametrize("case, said", [
    ("raises", "reported an error instead of an action chunk: RuntimeError: CUDA out of memory in the served policy"),
    ("shape (10, 7)", r"returned an array of shape (10, 7)"),
    ("NaN", "non-finite action chunk"),
    ("no actions", "replied with a map without 'actions' (keys ['action'])"),
])
def test_a_server_side_error_ends_in_one_line_and_is_recorded(tiny_checkpoint, tmp_path, capsys, case, said):
    out = tmp_path / "eval"
    with bad_server(case) as port:
        code = E.main([*job_args(port, out, tiny_checkpoint, episodes=2), "--reward-fn", "none", "--no-truth"])
    err = capsys.readouterr().err
    assert code == 1
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("policies.evaluate: error: 1 episode(s) failed (first ") and said in err
    assert "PolicyServerError" in err and "no finished episode saved" in err
    (row,) = json.loads((out / "results.json").read_text())["episodes"]  # the broken server is not asked again
    assert row["error"].startswith("PolicyServerError: ") and said in row["error"] and row["steps"] == 0
    if case == "raises":  # the server's whole traceback is kept in the row, not printed
        traceback = row["extra"]["server_traceback"]
        assert "Traceback" in traceback and "CUDA out of memory" in traceback


# ----------------------------------------------------------------------------- item 8: user mistakes, Ctrl-C
def test_rerun_with_other_options_is_refused_in_one_line(tiny_checkpoint, tmp_path, capsys):
    common = ["--policy", "zero", "--episodes", "1", "--checkpoint", str(tiny_checkpoint), "--reward-fn", "none",
              "--no-truth", "--out", str(tmp_path), "--no-progress"]
    assert E.main([*common, "--steps", "4"]) == 0
    before = (tmp_path / "results.json").read_text()
    capsys.readouterr()
    assert E.main([*common, "--steps", "5"]) == 2
    err = capsys.readouterr().err
    assert err == (f"policies.evaluate: error: {tmp_path} holds episodes run with other options (steps: 4 then, 5 "
                   "now); to resume, run with the same options, or use a new --out\n")
    assert (tmp_path / "results.json").read_text() == before
    assert E.main([*common, "--steps", "4", "--episodes", "2"]) == 0  # same options, one more episode: resumed
    rows = json.loads((tmp_path / "results.json").read_text())["episodes"]
    assert len(rows) == 2 and json.loads(before)["episodes"][0] == rows[0]


def test_an_unknown_policy_is_one_line_and_exit_2(tiny_checkpoint, tmp_path, capsys):
    assert E.main(["--policy", "pi0-fast", "--checkpoint", str(tiny_checkpoint), "--out", str(tmp_path),
                   "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("policies.evaluate: error: unknown policy 'pi0-fast'")
    assert "This job takes: expert-plan, zero, random, openpi:HOST:PORT" in err


def test_ctrl_c_saves_finished_episodes_says_so_and_exits_130(tiny_checkpoint, tmp_path):
    out = tmp_path / "eval"
    with server_process(tmp_path, "hang", at=3) as (port, marker):  # hangs at episode 2's first query
        job = run_job(job_args(port, out, tiny_checkpoint))
        deadline = time.monotonic() + 240
        while not marker.is_file() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.is_file(), job.communicate(timeout=30)[1]
        job.send_signal(signal.SIGINT)
        stdout, stderr = job.communicate(timeout=60)
    assert job.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (f"policies.evaluate: interrupted; 1 finished episode saved in "
                                               f"{out / 'results.json'}; run the same command again to resume")
    (row,) = json.loads((out / "results.json").read_text())["episodes"]
    assert row["error"] is None and row["steps"] == 10
