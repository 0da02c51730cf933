"""Client for RoboArena policy servers (openpi's websocket protocol, RoboArena's flavour).

Usage::

    policy = RoboArenaClient("gpu-box", 8000)       # or make_policy("roboarena:gpu-box:8000")
    env = gym.make("NeuralDROID-v0", action_mode=policy.action_mode)
    result = run_episode(env, policy, replan_every=None)   # RoboArena executes whole chunks

Differences from plain openpi (:mod:`policies.openpi_client`), as RoboArena's
``WebsocketPolicyServer`` defines them:

* The server's first message is its **config** (:class:`RoboArenaConfig`): ``image_resolution``
  (height, width, or None for native images), ``needs_wrist_camera``, ``n_external_cameras`` (0-2),
  ``needs_stereo_camera``, ``needs_session_id`` and ``action_space`` (``"joint_position"``, RoboArena's
  default, or ``"joint_velocity"``).  The client sends exactly the cameras asked for, at that
  resolution, and exposes the action space as :attr:`RoboArenaClient.action_mode`, which
  :func:`~policies.base.run_episode` checks against the env.
* Every message carries ``endpoint``: ``"infer"`` (observation: the cameras, plus
  ``observation/joint_position``, ``observation/cartesian_position``, ``observation/gripper_position``,
  ``prompt``, and ``session_id`` when asked) or ``"reset"`` (sent by ``reset(instruction)`` with the
  ``prompt``; the server answers the text ``"reset successful"``).
* The reply to ``infer`` is the bare action array (N, 8) (a map with ``actions`` is accepted too).
  RoboArena executes all N actions before querying again: use ``replan_every=None``.

SimDROID and NeuralDROID render only the left image of each camera, so a server that needs stereo
images is refused with :class:`UnsupportedServerConfig`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from .base import ACTION_MODES
from .openpi_client import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_PORT,
    DEFAULT_RESPONSE_TIMEOUT,
    PolicyServerError,
    WebsocketConnection,
    actions_from_reply,
    observation_image,
    observation_state,
    parse_resolution,
    server_uri,
)

log = logging.getLogger(__name__)

#: The text a RoboArena server answers a reset with.
RESET_OK = "reset successful"


class UnsupportedServerConfig(PolicyServerError):
    """The server's config asks for something the envs cannot provide (e.g. stereo images)."""


@dataclasses.dataclass
class RoboArenaConfig:
    """What a RoboArena policy server asks for (its first message); defaults are RoboArena's.

    Attributes:
        image_resolution: (height, width) images are letterboxed to; None sends them unresized.
        needs_wrist_camera: send ``observation/wrist_image_left``.
        n_external_cameras: send ``observation/exterior_image_{1..n}_left``, n in 0-2.
        needs_stereo_camera: send right images too (not supported by the envs).
        needs_session_id: send a ``session_id`` (int32 (1,), new for every episode).
        action_space: ``"joint_position"`` or ``"joint_velocity"``.
    """

    image_resolution: tuple[int, int] | None = (224, 224)
    needs_wrist_camera: bool = True
    n_external_cameras: int = 1
    needs_stereo_camera: bool = False
    needs_session_id: bool = False
    action_space: str = "joint_position"

    def __post_init__(self) -> None:
        self.image_resolution = parse_resolution(self.image_resolution, "RoboArena config")
        if self.n_external_cameras not in (0, 1, 2):
            raise PolicyServerError(f"RoboArena config: n_external_cameras must be 0, 1 or 2, "
                                    f"got {self.n_external_cameras!r}")
        if self.action_space not in ACTION_MODES:
            raise PolicyServerError(f"RoboArena config: action_space must be one of {ACTION_MODES}, "
                                    f"got {self.action_space!r}")

    @classmethod
    def from_message(cls, message: Any) -> "RoboArenaConfig":
        """Parse a server's first message; unknown keys are ignored (logged)."""
        if not isinstance(message, dict):
            raise PolicyServerError(f"a RoboArena server's first message must be its config (a map), "
                                    f"got {type(message).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        extra = sorted(set(map(str, message)) - known)
        if extra:
            log.info("ignoring unknown RoboArena config keys %s", extra)
        return cls(**{k: v for k, v in message.items() if k in known})

    def to_message(self) -> dict:
        return dataclasses.asdict(self)

    def image_keys(self) -> dict[str, str]:
        """Wire key -> env observation key of the images to send."""
        keys = {f"observation/exterior_image_{i}_left": f"exterior_image_{i}_left"
                for i in range(1, self.n_external_cameras + 1)}
        if self.needs_wrist_camera:
            keys["observation/wrist_image_left"] = "wrist_image_left"
        return keys


class RoboArenaClient:
    """A :class:`~policies.base.Policy` served by a RoboArena policy server.

    Args:
        host, port: the server (``host`` may be a full ``ws://`` URI with ``port=None``).
        connect_timeout, response_timeout, wait_for_server, api_key: see
            :class:`~policies.openpi_client.WebsocketConnection`.
        seed: seed of the session ids (when the server needs them).

    Attributes:
        config: the server's :class:`RoboArenaConfig`.
        action_mode: the server's ``action_space``.
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = DEFAULT_PORT, *,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 response_timeout: float | None = DEFAULT_RESPONSE_TIMEOUT, wait_for_server: float = 0.0,
                 api_key: str | None = None, seed: int | None = None):
        self.uri = server_uri(host, port)
        self._conn = WebsocketConnection(self.uri, connect_timeout, response_timeout, wait_for_server, api_key)
        try:
            self.config = RoboArenaConfig.from_message(self._conn.first_message)
            if self.config.needs_stereo_camera:
                raise UnsupportedServerConfig(f"the RoboArena server at {self.uri} needs stereo images "
                                              "(needs_stereo_camera=True); SimDROID and NeuralDROID render only "
                                              "the left images")
        except BaseException:
            self.close()
            raise
        self.action_mode = self.config.action_space
        self.prompt = ""
        self._rng = np.random.default_rng(seed)
        self.session_id = np.array([self._rng.integers(2**31 - 1)], np.int32)

    def reset(self, instruction: str) -> None:
        """Start a new session: send ``endpoint="reset"`` with the prompt and check the answer."""
        self.prompt = str(instruction)
        self.session_id = np.array([self._rng.integers(2**31 - 1)], np.int32)
        msg: dict[str, Any] = {"endpoint": "reset", "prompt": self.prompt}
        if self.config.needs_session_id:
            msg["session_id"] = self.session_id
        self._conn.send(msg)
        raw = self._conn.recv_raw(what="an answer to reset")
        if isinstance(raw, str) and raw.strip().lower() != RESET_OK:
            self.close()
            raise PolicyServerError(f"RoboArena server at {self.uri} failed to reset:\n{raw}")

    def request(self, observation: dict) -> dict:
        """The ``infer`` message for ``observation``."""
        res = self.config.image_resolution
        msg: dict[str, Any] = {wire: observation_image(observation, key, res)
                               for wire, key in self.config.image_keys().items()}
        msg["observation/joint_position"] = observation_state(observation, "joint_position", 7)
        msg["observation/cartesian_position"] = observation_state(observation, "cartesian_position", 6)
        msg["observation/gripper_position"] = observation_state(observation, "gripper_position", 1)
        msg["prompt"] = self.prompt
        if self.config.needs_session_id:
            msg["session_id"] = self.session_id
        msg["endpoint"] = "infer"
        return msg

    def infer(self, observation: dict) -> np.ndarray:
        self._conn.send(self.request(observation))
        return actions_from_reply(self._conn.recv(what="an action chunk"), self.uri)

    def close(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()

    def __enter__(self) -> "RoboArenaClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
