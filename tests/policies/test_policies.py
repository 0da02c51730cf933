"""Tests of the policies package: protocol, chunked execution, baselines and the websocket adapters.

Network tests run a real server on 127.0.0.1 (ephemeral ports, threads).  The interoperability
tests against openpi's own ``openpi-client`` / ``openpi-server`` packages need an interpreter that has
them (they pin numpy<2, so they are not in the project venv): set ``NEURALSIM_OPENPI_PYTHON`` to its
python, or they are skipped.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request

import gymnasium as gym
import msgpack
import numpy as np
import pytest
from gymnasium import spaces

import policies
from policies import (
    ActionModeMismatchError,
    ChunkedController,
    MissingDependencyError,
    PolicyOutputError,
    UnknownPolicyError,
    as_action_chunk,
    make_policy,
    run_episode,
)
from policies.openpi_client import (
    OpenPIClient,
    PolicyConnectionError,
    PolicyServerError,
    PolicyTimeoutError,
    WebsocketConnection,
    letterbox,
    packb,
    unpackb,
)
from policies.replay import ReplayExhausted, ReplayPolicy
from policies.roboarena_client import RoboArenaClient, UnsupportedServerConfig
from policies.server import PolicyServer

pytestmark = pytest.mark.timeout(60)

OPENPI_KEYS = {"observation/exterior_image_1_left", "observation/wrist_image_left", "observation/joint_position",
               "observation/gripper_position", "prompt"}


# ----------------------------------------------------------------------------- helpers
def make_obs(step: int = 0, wrist_shape=(64, 64)) -> dict:
    return {
        "exterior_image_1_left": np.full((64, 64, 3), 100, np.uint8),
        "exterior_image_2_left": np.full((64, 64, 3), 50, np.uint8),
        "wrist_image_left": np.full((*wrist_shape, 3), 200, np.uint8),
        "joint_position": np.array([step, 1, 2, 3, 4, 5, 6], np.float32) / 10,
        "gripper_position": np.array([0.25], np.float32),
        "cartesian_position": np.arange(6, dtype=np.float32),
    }


class StubEnv(gym.Env):
    """DROID spaces, no physics: records the actions it is given; obs joint_position[0] = step / 10."""

    def __init__(self, horizon: int = 20, action_mode: str = "joint_velocity"):
        img = spaces.Box(0, 255, (64, 64, 3), np.uint8)
        self.observation_space = spaces.Dict({
            "exterior_image_1_left": img, "exterior_image_2_left": img, "wrist_image_left": img,
            "joint_position": spaces.Box(-10, 10, (7,), np.float32),
            "gripper_position": spaces.Box(0, 1, (1,), np.float32),
            "cartesian_position": spaces.Box(-10, 10, (6,), np.float32),
        })
        low = -np.ones(7) if action_mode == "joint_velocity" else -3 * np.ones(7)
        self.action_space = spaces.Box(np.append(low, 0).astype(np.float32), np.append(-low, 1).astype(np.float32))
        self.action_mode, self.max_episode_steps = action_mode, horizon
        self.received: list[np.ndarray] = []
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.received, self.t = [], 0
        return make_obs(0), {"instruction": "stub task"}

    def step(self, action):
        self.received.append(np.array(action))
        self.t += 1
        truncated = self.t >= self.max_episode_steps
        return make_obs(self.t), (1.0 if truncated else 0.0), False, truncated, {"instruction": "stub task"}


class RecordingPolicy:
    """Chunk row i of query q is [q, i, 0, ..., 0.5]; records resets and observations."""

    def __init__(self, horizon: int = 10, action_mode: str | None = None):
        self.horizon, self.resets, self.observations = horizon, [], []
        if action_mode is not None:
            self.action_mode = action_mode

    def reset(self, instruction: str) -> None:
        self.resets.append(instruction)

    def infer(self, observation: dict) -> np.ndarray:
        q = len(self.observations)
        self.observations.append(observation)
        chunk = np.zeros((self.horizon, 8), np.float32)
        chunk[:, 0], chunk[:, 1], chunk[:, 7] = q / 100, np.arange(self.horizon) / 100, 0.5
        return chunk


class FailingPolicy(RecordingPolicy):
    def infer(self, observation: dict) -> np.ndarray:
        raise ValueError("boom: the policy failed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def raw_server(reply):
    """A bare websocket peer: sends packb({}) metadata, then answers each message with reply(msg) (None: silence)."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.server import serve

    stop = threading.Event()

    def handler(conn):
        try:
            conn.send(packb({}))
            while True:
                out = reply(unpackb(conn.recv()))
                if out is None:
                    stop.wait(10)
                    return
                conn.send(out)
        except ConnectionClosed:
            pass

    server = serve(handler, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.socket.getsockname()[1]
    finally:
        stop.set()
        server.shutdown()
        thread.join(10)


# ----------------------------------------------------------------------------- protocol and factory
def test_as_action_chunk_validates():
    assert as_action_chunk(np.zeros(8)).shape == (1, 8)
    chunk = as_action_chunk(np.zeros((3, 8), np.float64))
    assert chunk.dtype == np.float32 and chunk.flags.writeable
    for bad in (np.zeros((3, 7)), np.zeros((0, 8)), np.zeros((2, 3, 8)), "nope"):
        with pytest.raises(PolicyOutputError):
            as_action_chunk(bad)
    with pytest.raises(PolicyOutputError, match="non-finite"):
        as_action_chunk(np.full((2, 8), np.nan))


def test_make_policy_names_and_errors():
    assert isinstance(make_policy("zero"), policies.Policy)
    assert make_policy("random", seed=0, horizon=3).infer(make_obs()).shape == (3, 8)
    with pytest.raises(UnknownPolicyError, match="valid names: .*openpi:HOST:PORT"):
        make_policy("pi0-please")
    for bad in ("openpi:host:notaport", "openpi:host:70000", "roboarena::8000"):
        with pytest.raises(UnknownPolicyError, match="HOST:PORT"):
            make_policy(bad)
    for bad in ("noisy-abc", "noisy-2"):
        with pytest.raises(UnknownPolicyError, match="noisy-<std>"):
            make_policy(bad)
    with pytest.raises(TypeError, match="env="):
        make_policy("expert")
    with pytest.raises(TypeError, match="exactly one source"):
        make_policy("replay")
    with pytest.raises(PolicyConnectionError, match="connection refused"):
        make_policy(f"openpi:127.0.0.1:{free_port()}")
    assert "noisy-<std>" in policies.available_policies()


def test_missing_dependency_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "msgpack", None)  # makes `import msgpack` fail
    with pytest.raises(MissingDependencyError, match=r"pip install 'neuralsim\[policies\]'"):
        packb({"a": 1})
    with pytest.raises(MissingDependencyError, match=r"neuralsim\[policies\]"):
        OpenPIClient("127.0.0.1", 1)
    monkeypatch.setitem(sys.modules, "websockets.sync.server", None)
    with pytest.raises(MissingDependencyError, match="websockets"):
        PolicyServer(RecordingPolicy()).start()


# ----------------------------------------------------------------------------- chunked execution
@pytest.mark.parametrize("replan_every, executed_per_chunk", [(8, 8), (None, 10), (12, 10), (3, 3)])
def test_chunks_execute_open_loop(replan_every, executed_per_chunk):
    env, policy = StubEnv(horizon=20), RecordingPolicy(horizon=10)
    result = run_episode(env, policy, replan_every=replan_every)
    assert result.steps == 20 and result.truncated and result.reward == 1.0
    assert policy.resets == ["stub task"] and result.instruction == "stub task"
    n_queries = -(-20 // executed_per_chunk)
    assert result.num_queries == len(policy.observations) == n_queries
    step = np.arange(20)
    expected = np.zeros((20, 8), np.float32)
    expected[:, 0] = (step // executed_per_chunk) / 100
    expected[:, 1] = (step % executed_per_chunk) / 100
    expected[:, 7] = 0.5
    np.testing.assert_array_equal(np.stack(env.received), expected)
    np.testing.assert_array_equal(result.actions, expected)
    # each query saw the observation of the step it was made at
    assert [round(float(o["joint_position"][0]) * 10) for o in policy.observations] == \
        list(range(0, 20, executed_per_chunk))


def test_run_episode_budget_callback_and_errors():
    env, seen = StubEnv(horizon=20), []
    result = run_episode(env, RecordingPolicy(), max_steps=5, callback=lambda t, obs, r, info: seen.append(t))
    assert result.steps == 5 and not result.truncated and seen == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="replan_every"):
        ChunkedController(RecordingPolicy(), replan_every=0)
    with pytest.raises(TypeError, match="Policy"):
        ChunkedController(object())
    with pytest.raises(ActionModeMismatchError, match="joint_position"):
        run_episode(env, RecordingPolicy(action_mode="joint_position"))
    run_episode(StubEnv(action_mode="joint_position"), RecordingPolicy(action_mode="joint_position"), max_steps=2)

    class Bad(RecordingPolicy):
        def infer(self, observation):
            return np.zeros((4, 7))

    with pytest.raises(PolicyOutputError, match=r"\(4, 7\)"):
        run_episode(env, Bad())


def test_simple_baselines():
    obs = make_obs(3)
    zero = make_policy("zero", gripper=1.0, horizon=2)
    np.testing.assert_array_equal(zero.infer(obs), [[0] * 7 + [1]] * 2)
    hold = make_policy("zero", action_mode="joint_position").infer(obs)
    np.testing.assert_array_equal(hold[0, :7], obs["joint_position"])
    a = make_policy("random", seed=1, horizon=4).infer(obs)
    b = make_policy("random", seed=1, horizon=4).infer(obs)
    np.testing.assert_array_equal(a, b)
    assert np.all(np.abs(a[:, :7]) <= 1) and np.all((a[:, 7] >= 0) & (a[:, 7] <= 1))
    walk = make_policy("random", seed=1, horizon=4, action_mode="joint_position").infer(obs)
    steps = np.diff(np.vstack([obs["joint_position"], walk[:, :7]]), axis=0)
    assert np.all(np.abs(steps) <= 0.2 + 1e-6)
    with pytest.raises(ValueError, match="gripper"):
        make_policy("zero", gripper=2)


# ----------------------------------------------------------------------------- replay
def test_replay_is_exact(tmp_path):
    rng = np.random.default_rng(0)
    actions = np.concatenate([rng.uniform(-1, 1, (23, 7)), rng.uniform(0, 1, (23, 1))], 1).astype(np.float32)
    for horizon, replan in ((1, 8), (5, None), (8, 8)):
        env = StubEnv(horizon=23)
        run_episode(env, ReplayPolicy(actions, horizon=horizon), replan_every=replan)
        np.testing.assert_array_equal(np.stack(env.received), actions)
    np.save(tmp_path / "a.npy", actions)
    np.savez(tmp_path / "a.npz", actions=actions)
    for path in (tmp_path / "a.npy", str(tmp_path / "a.npz")):
        np.testing.assert_array_equal(make_policy("replay", actions=path).actions, actions)
    # after the recording: zero joint velocity, last gripper; or an error
    policy = ReplayPolicy(actions[:2])
    policy.reset("x"), policy.infer(), policy.infer()
    np.testing.assert_array_equal(policy.infer(), [[0] * 7 + [actions[1, 7]]])
    strict = ReplayPolicy(actions[:1], on_end="error")
    strict.infer()
    with pytest.raises(ReplayExhausted):
        strict.infer()
    with pytest.raises(ValueError, match=r"\(T, 8\)"):
        ReplayPolicy(np.zeros((5, 7)))


# ----------------------------------------------------------------------------- scripted on SimDROID
def test_scripted_policy_on_simdroid_matches_expert_and_replays_exactly(tmp_path):
    from neuralsim.data.writer import new_info, save_episode, write_info
    from neuralsim.envs.experts import ScriptedExpert
    from neuralsim.envs.sim_droid import SimDROIDEnv

    steps, seed = 20, 3
    env = SimDROIDEnv(image_size=32, max_episode_steps=steps)
    start_distance = env.reset(seed=seed)[1]["target_distance"]
    result = run_episode(env, make_policy("expert", env=env, seed=0), seed=seed)
    ep = result.episode
    assert result.steps == steps and result.truncated and ep.num_frames == steps + 1
    assert result.reward == result.info["rubric_level"]  # SimDROID scores the episode on its last step
    assert result.num_queries == steps  # the expert is closed loop: a chunk of one
    assert result.info["target_distance"] < start_distance  # it moves towards the target
    # the same as driving the expert directly
    env.reset(seed=seed)
    expert = ScriptedExpert(env, seed=0)
    expert.reset()
    direct = []
    for _ in range(steps):
        direct.append(expert.act())
        env.step(direct[-1])
    np.testing.assert_array_equal(result.actions, np.stack(direct))
    # replaying the recorded actions from the same seed reproduces the episode
    replay = run_episode(env, ReplayPolicy(ep), seed=seed)
    np.testing.assert_array_equal(replay.episode.joint_position, ep.joint_position)
    np.testing.assert_array_equal(replay.episode.frames["wrist_image_left"], ep.frames["wrist_image_left"])
    # ... also through a dataset on disk
    write_info(tmp_path, new_info(32))
    save_episode(tmp_path, ep, 0, seed=seed)
    from_disk = make_policy("replay", dataset=tmp_path, index=0)
    np.testing.assert_array_equal(from_disk.actions, ep.actions)
    assert from_disk.instruction == ep.instruction and from_disk.metadata["seed"] == seed
    assert make_policy("noisy-0.3", env=env).noise == 0.3
    with pytest.raises(TypeError, match="SimDROID"):
        make_policy("expert", env=StubEnv())
    env.close()


# ----------------------------------------------------------------------------- wire format
def test_msgpack_numpy_wire_format():
    arrays = {"u8": np.arange(24, dtype=np.uint8).reshape(2, 3, 4), "f64": np.linspace(0, 1, 5),
              "f32T": np.arange(6, dtype=np.float32).reshape(2, 3).T, "scalar": np.float32(1.5), "text": "hi",
              "nested": {"list": [1, 2.5, None]}}
    back = unpackb(packb(arrays))
    for k in ("u8", "f64", "f32T"):
        assert back[k].dtype == arrays[k].dtype
        np.testing.assert_array_equal(back[k], arrays[k])
    assert back["scalar"] == np.float32(1.5) and type(back["scalar"]) is np.float32
    assert back["nested"] == {"list": [1, 2.5, None]}
    # openpi's encoding, read with plain msgpack
    raw = msgpack.unpackb(packb({"a": np.zeros((2, 3), np.float32)}), raw=False)
    assert raw["a"] == {b"__ndarray__": True, b"data": bytes(24), b"dtype": "<f4", b"shape": [2, 3]}
    with pytest.raises(TypeError, match="object"):
        packb(np.array([object()]))


def test_letterbox():
    wide = np.full((32, 64, 3), 200, np.uint8)
    out = letterbox(wide, 224, 224)  # 64 wide -> 224 wide, 32 -> 112 high, 56 black rows above and below
    assert out.shape == (224, 224, 3) and out.dtype == np.uint8
    assert not out[:56].any() and not out[-56:].any() and np.all(out[56:168] == 200)
    tall = letterbox(np.full((64, 32, 3), 9, np.uint8), 96, 96)
    assert not tall[:, :24].any() and not tall[:, -24:].any() and np.all(tall[:, 24:72] == 9)
    assert letterbox(np.ones((8, 8, 3), np.float32), 8, 8).max() == 255
    with pytest.raises(ValueError, match="uint8"):
        letterbox(np.zeros((8, 8, 3), np.int32), 4, 4)


# ----------------------------------------------------------------------------- openpi round trip
def test_openpi_round_trip_through_real_server():
    policy = RecordingPolicy(horizon=10)
    with PolicyServer(policy, port=0, metadata={"image_resolution": (96, 128), "name": "rec"}) as server:
        with OpenPIClient("127.0.0.1", server.port, response_timeout=10) as client:
            assert client.metadata == {"image_resolution": [96, 128], "name": "rec"}
            assert client.image_resolution == (96, 128)
            client.reset("put the red cube in the blue bowl")
            chunk = client.infer(make_obs(2, wrist_shape=(32, 64)))
            assert chunk.shape == (10, 8) and chunk.dtype == np.float32 and chunk.flags.writeable
            np.testing.assert_array_equal(chunk, RecordingPolicy(10).infer({}))
            sent = server.last_request
            assert set(sent) == OPENPI_KEYS
            assert sent["prompt"] == "put the red cube in the blue bowl"
            ext, wrist = sent["observation/exterior_image_1_left"], sent["observation/wrist_image_left"]
            assert ext.shape == wrist.shape == (96, 128, 3) and ext.dtype == np.uint8
            # 64x64 -> 96x96 centred (16 black columns each side); 32x64 -> 64x128 (16 black rows each side)
            assert not ext[:, :16].any() and not ext[:, -16:].any() and np.all(ext[:, 16:112] == 100)
            assert not wrist[:16].any() and not wrist[-16:].any() and np.all(wrist[16:80] == 200)
            np.testing.assert_array_equal(sent["observation/joint_position"], make_obs(2)["joint_position"])
            # the served policy saw DROID keys and was reset with the prompt once
            assert set(policy.observations[0]) == {"exterior_image_1_left", "wrist_image_left", "joint_position",
                                                   "gripper_position"}
            client.infer(make_obs(3))
            client.reset("another task")
            client.infer(make_obs(4))
            assert policy.resets == ["put the red cube in the blue bowl", "another task"]
        # default resolution, and a whole episode through the network
        with PolicyServer(RecordingPolicy(horizon=10), port=0) as plain:
            client = OpenPIClient("127.0.0.1", plain.port)
            assert client.image_resolution == (224, 224)
            result = run_episode(StubEnv(horizon=20), client, replan_every=8)
            assert result.num_queries == 3 and plain.num_requests == 3
            assert plain.last_request["observation/wrist_image_left"].shape == (224, 224, 3)
            client.close()


def test_action_mode_from_metadata_binarize_gripper_and_health_check():
    with PolicyServer(RecordingPolicy(horizon=4, action_mode="joint_position"), port=0) as server:
        with OpenPIClient("127.0.0.1", server.port, binarize_gripper=True) as client:
            assert client.action_mode == "joint_position"  # declared in our server's metadata
            assert np.all(client.infer(make_obs())[:, 7] == 0.0)  # 0.5 is not > 0.5
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5) as r:
            assert r.status == 200


def test_server_error_reaches_the_client_and_server_keeps_serving():
    with PolicyServer(FailingPolicy(), port=0) as server:
        client = OpenPIClient("127.0.0.1", server.port)
        with pytest.raises(PolicyServerError, match="boom: the policy failed"):
            client.infer(make_obs())
        with pytest.raises(PolicyConnectionError):
            client.infer(make_obs())
        OpenPIClient("127.0.0.1", server.port).close()  # a new connection still gets its metadata


def test_a_server_dying_mid_episode_leaves_the_partial_episode_on_the_error():
    from neuralsim.envs.sim_droid import SimDROIDEnv

    server = PolicyServer(RecordingPolicy(horizon=10), port=0).start()
    env = SimDROIDEnv(reward_fn=None, max_episode_steps=20)

    def kill_at_step_6(step, obs, reward, info):
        if step == 6:
            server.shutdown()  # the next query, at step 8, finds no server

    with OpenPIClient("127.0.0.1", server.port) as client:
        with pytest.raises(PolicyConnectionError) as err:
            run_episode(env, client, replan_every=4, seed=0, callback=kill_at_step_6)
    partial = err.value.partial_episode
    assert partial.steps == 8 and not (partial.terminated or partial.truncated)
    assert partial.actions.shape == (8, 8) and partial.num_queries == 2 and partial.infer_seconds > 0
    np.testing.assert_allclose(partial.actions[:, 1], [0, 0.01, 0.02, 0.03] * 2, atol=1e-7)  # rows 0-3 of 2 chunks
    assert partial.episode.num_frames == 9 and partial.episode.actions.shape == (8, 8)  # frames so far
    assert partial.info["rubric_level"] == env.ground_truth()["rubric_level"]
    assert partial.error.startswith("PolicyConnectionError:") and partial.instruction == partial.episode.instruction
    env.close()


def test_server_gone_and_unreachable():
    server = PolicyServer(RecordingPolicy(), port=0).start()
    client = OpenPIClient("127.0.0.1", server.port)
    client.infer(make_obs())
    server.shutdown()
    with pytest.raises(PolicyConnectionError):
        client.infer(make_obs())
    with pytest.raises(PolicyConnectionError, match="connection refused"):
        OpenPIClient("127.0.0.1", free_port(), wait_for_server=0.3)


@pytest.mark.parametrize("case, error, match", [
    ("nomap", PolicyServerError, "not an action array"),
    ("noactions", PolicyServerError, "without 'actions'"),
    ("badshape", PolicyServerError, r"\(4, 7\)"),
    ("garbage", PolicyServerError, "not msgpack-numpy"),
    ("text", PolicyServerError, "went wrong"),
    ("silent", PolicyTimeoutError, "within 0.3 s"),
])
def test_bad_replies_raise_clear_errors(case, error, match):
    replies = {"nomap": packb([1, 2]), "noactions": packb({"foo": 1}),
               "badshape": packb({"actions": np.zeros((4, 7))}), "garbage": b"\xc1", "text": "Traceback: went wrong",
               "silent": None}
    with raw_server(lambda msg: replies[msg["prompt"]]) as port:
        client = OpenPIClient("127.0.0.1", port, response_timeout=0.3)
        client.reset(case)
        with pytest.raises(error, match=match):
            client.infer(make_obs())
        client.close()


def test_metadata_must_be_a_map():
    from websockets.sync.server import serve

    server = serve(lambda conn: conn.send(packb([1, 2, 3])), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(PolicyServerError, match="metadata"):
            OpenPIClient("127.0.0.1", server.socket.getsockname()[1])
    finally:
        server.shutdown()
        thread.join(10)


# ----------------------------------------------------------------------------- RoboArena
def test_roboarena_round_trip_respects_the_config():
    policy = RecordingPolicy(horizon=4, action_mode="joint_position")
    config = {"image_resolution": (32, 48), "needs_wrist_camera": False, "n_external_cameras": 2,
              "needs_session_id": True}
    with PolicyServer(policy, port=0, flavour="roboarena", config=config) as server:
        with make_policy(f"roboarena:127.0.0.1:{server.port}") as client:
            assert client.action_mode == "joint_position"  # from the server's action_space
            assert client.config.image_resolution == (32, 48) and client.config.n_external_cameras == 2
            client.reset("stack the red cube on the green cube")
            assert policy.resets == ["stack the red cube on the green cube"]
            assert server.last_request["endpoint"] == "reset"
            chunk = client.infer(make_obs(1))
            assert chunk.shape == (4, 8) and chunk.dtype == np.float32
            sent = server.last_request
            assert set(sent) == {"observation/exterior_image_1_left", "observation/exterior_image_2_left",
                                 "observation/joint_position", "observation/cartesian_position",
                                 "observation/gripper_position", "prompt", "session_id", "endpoint"}
            assert sent["endpoint"] == "infer" and sent["session_id"].shape == (1,)
            assert sent["observation/exterior_image_2_left"].shape == (32, 48, 3)
            assert policy.resets == ["stack the red cube on the green cube"]  # no implicit second reset
            with pytest.raises(ActionModeMismatchError):
                run_episode(StubEnv(), client)
            result = run_episode(StubEnv(horizon=8, action_mode="joint_position"), client, replan_every=None)
            assert result.num_queries == 2
    with pytest.raises(ValueError, match="action_space"):
        PolicyServer(policy, port=0, flavour="roboarena", config={"action_space": "joint_velocity"})


def test_roboarena_refuses_configs_it_cannot_honour():
    with PolicyServer(RecordingPolicy(), port=0, flavour="roboarena", config={"needs_stereo_camera": True}) as server:
        with pytest.raises(UnsupportedServerConfig, match="stereo"):
            RoboArenaClient("127.0.0.1", server.port)
    with raw_server(lambda msg: None) as port:  # metadata {} = RoboArena's defaults
        with RoboArenaClient("127.0.0.1", port) as client:
            assert client.action_mode == "joint_position" and client.config.image_resolution == (224, 224)


# ----------------------------------------------------------------------------- openpi's own packages
def _openpi_python(module: str) -> str:
    exe = os.environ.get("NEURALSIM_OPENPI_PYTHON")
    if not exe and importlib.util.find_spec(module) is not None:
        exe = sys.executable
    if not exe:
        pytest.skip(f"{module} is not installed (openpi-client pins numpy<2); set NEURALSIM_OPENPI_PYTHON to a "
                    "python with openpi-client and openpi-server to run this test")
    probe = subprocess.run([exe, "-c", f"import {module}"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"{exe} cannot import {module}: {probe.stderr.strip().splitlines()[-1:]}")
    return exe


OPENPI_CLIENT_SCRIPT = r"""
import json, sys
import numpy as np
from openpi_client import image_tools, websocket_client_policy
client = websocket_client_policy.WebsocketClientPolicy(host="127.0.0.1", port=int(sys.argv[1]))
obs = {
    "observation/exterior_image_1_left": image_tools.resize_with_pad(np.full((64, 64, 3), 100, np.uint8), 224, 224),
    "observation/wrist_image_left": image_tools.resize_with_pad(np.full((32, 64, 3), 200, np.uint8), 224, 224),
    "observation/joint_position": np.arange(7, dtype=np.float64) / 10,
    "observation/gripper_position": np.array([0.25]),
    "prompt": "put the red cube in the blue bowl",
}
out = client.infer(obs)
print(json.dumps({"metadata": client.get_server_metadata(), "keys": sorted(out),
                  "dtype": str(out["actions"].dtype), "actions": out["actions"].tolist()}))
"""


def test_real_openpi_client_drives_our_server():
    exe = _openpi_python("openpi_client")
    policy = RecordingPolicy(horizon=10)
    with PolicyServer(policy, port=0, metadata={"image_resolution": [224, 224]}) as server:
        proc = subprocess.run([exe, "-c", OPENPI_CLIENT_SCRIPT, str(server.port)], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        sent = server.last_request
    assert out["metadata"] == {"image_resolution": [224, 224]}
    assert out["keys"] == ["actions", "server_timing"] and out["dtype"] == "float32"
    np.testing.assert_array_equal(np.array(out["actions"], np.float32), RecordingPolicy(10).infer({}))
    assert set(sent) == OPENPI_KEYS and sent["observation/wrist_image_left"].shape == (224, 224, 3)
    assert policy.resets == ["put the red cube in the blue bowl"]
    np.testing.assert_allclose(policy.observations[0]["joint_position"], np.arange(7) / 10)


OPENPI_SERVER_SCRIPT = r"""
import sys
import numpy as np
from openpi_client import base_policy
from openpi_server import WebsocketPolicyServer

class Echo(base_policy.BasePolicy):
    def infer(self, obs):
        actions = np.tile(np.arange(8, dtype=np.float32) / 10, (10, 1))
        received = {k: [str(np.asarray(v).dtype), list(np.shape(v))] for k, v in obs.items()}
        return {"actions": actions, "received": received, "prompt": obs["prompt"],
                "joints": obs["observation/joint_position"]}

server = WebsocketPolicyServer(Echo(), host="127.0.0.1", port=int(sys.argv[1]),
                               metadata={"image_resolution": [96, 128]})
server.serve_forever()
"""


def test_our_client_drives_real_openpi_server():
    exe = _openpi_python("openpi_server")
    port = free_port()
    proc = subprocess.Popen([exe, "-c", OPENPI_SERVER_SCRIPT, str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        client = OpenPIClient("127.0.0.1", port, wait_for_server=30)
        assert client.metadata == {"image_resolution": [96, 128]} and client.image_resolution == (96, 128)
        client.reset("put the red cube in the blue bowl")
        chunk = client.infer(make_obs(5))
        np.testing.assert_allclose(chunk, np.tile(np.arange(8, dtype=np.float32) / 10, (10, 1)))
        # what the real server decoded from our encoding
        conn = WebsocketConnection(client.uri)
        conn.send(client.request(make_obs(5)))
        reply = conn.recv()
        conn.close()
        client.close()
    finally:
        proc.terminate()
        proc.communicate(timeout=10)  # reaps it and closes the pipes
    assert reply["received"] == {
        "observation/exterior_image_1_left": ["uint8", [96, 128, 3]],
        "observation/wrist_image_left": ["uint8", [96, 128, 3]],
        "observation/joint_position": ["float32", [7]],
        "observation/gripper_position": ["float32", [1]],
        "prompt": ["<U33", []],
    }
    assert reply["prompt"] == "put the red cube in the blue bowl"
    np.testing.assert_array_equal(reply["joints"], make_obs(5)["joint_position"])
    assert "infer_ms" in reply["server_timing"]
