"""Serve any :class:`~policies.base.Policy` over openpi's websocket protocol (or RoboArena's flavour).

Usage: python -m policies.server --policy random --port 8000 [--flavour roboarena] [--host 0.0.0.0]

Any openpi-protocol client can then drive the policy: our :class:`~policies.openpi_client.OpenPIClient`
and :class:`~policies.roboarena_client.RoboArenaClient`, openpi's own ``WebsocketClientPolicy``, or a
real robot's DROID runtime.  From Python, the server runs in a background thread::

    with PolicyServer(make_policy("zero"), port=0) as server:      # port 0: any free port
        client = OpenPIClient("127.0.0.1", server.port)

What the server does, per flavour:

* ``"openpi"``: sends ``metadata`` (a map; by default the policy's ``server_metadata`` attribute if it has
  one, e.g. a visuomotor policy's image resolution and cameras, else its ``action_mode`` if it declares one) on
  connect; treats every message as an observation; answers ``{"actions": (H, 8) float32,
  "server_timing": {"infer_ms": ...}}``, plus ``"tool_targets": {"position", "rotation", "gripper"}`` for a policy
  that keeps its chunk's goals (``last_targets``: a flow or Cartesian visuomotor checkpoint, whose metadata says
  ``"tool_targets": true``), so that :class:`~policies.openpi_client.OpenPIClient` tracks them as the in-process
  policy does; openpi's own clients read ``actions`` and pass the rest by.  The protocol has no reset message, so
  the policy is reset with the ``prompt`` when a connection sends its first observation or the prompt changes.
* ``"roboarena"``: sends its :class:`~policies.roboarena_client.RoboArenaConfig` on connect;
  ``endpoint="reset"`` resets the policy and answers the text ``"reset successful"``;
  ``endpoint="infer"`` answers the bare (H, 8) float32 array.

The served policy sees DROID observation keys (the ``observation/`` prefix removed; ``prompt``,
``endpoint`` and ``session_id`` are not passed on).  If it raises, the client receives the traceback as
a text frame and the connection is closed with code 1011, as openpi's server does; the server keeps
serving other connections.  ``GET /healthz`` answers 200.  Connections are served in parallel threads
but the policy is called under a lock, one request at a time; a stateful policy should have one
client.
"""

from __future__ import annotations

import argparse
import dataclasses
import http
import logging
import threading
import time
import traceback
from typing import Any

import numpy as np

from .base import Policy, as_action_chunk, require
from .openpi_client import DEFAULT_PORT, packb, unpackb
from .roboarena_client import RESET_OK, RoboArenaConfig

log = logging.getLogger(__name__)

FLAVOURS = ("openpi", "roboarena")
#: Request keys that are not observations.
CONTROL_KEYS = ("prompt", "endpoint", "session_id")
OBSERVATION_PREFIX = "observation/"


class PolicyServer:
    """A websocket policy server in a background thread.

    Args:
        policy: the :class:`~policies.base.Policy` to serve.
        host: interface to bind (``"127.0.0.1"`` local only; ``"0.0.0.0"`` all interfaces).
        port: TCP port; 0 picks a free one (read it from :attr:`port`).
        flavour: ``"openpi"`` or ``"roboarena"``.
        metadata: openpi flavour: the first message (e.g. ``{"image_resolution": (224, 224)}``, which
            our client honours).
        config: roboarena flavour: a :class:`RoboArenaConfig` or a dict of its fields; its
            ``action_space`` defaults to the policy's ``action_mode`` when the policy declares one.

    Attributes:
        num_requests: messages answered so far (all connections).
        last_request: the last message received, decoded, as the client sent it.
    """

    def __init__(self, policy: Policy, host: str = "127.0.0.1", port: int = DEFAULT_PORT, *,
                 flavour: str = "openpi", metadata: dict | None = None,
                 config: RoboArenaConfig | dict | None = None):
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must implement reset(instruction) and infer(observation), "
                            f"got {type(policy).__name__}")
        if flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {FLAVOURS}, got {flavour!r}")
        if flavour == "openpi" and config is not None:
            raise ValueError("config= is the RoboArena server config; use flavour='roboarena' "
                             "(or metadata= for openpi)")
        if flavour == "roboarena" and metadata is not None:
            raise ValueError("metadata= is for the openpi flavour; a RoboArena server sends its config= instead")
        self.policy, self.host, self.flavour = policy, host, flavour
        self._requested_port = int(port)
        mode = getattr(policy, "action_mode", None)
        if flavour == "roboarena":
            if not isinstance(config, RoboArenaConfig):
                fields = dict(config or {})
                if mode is not None:
                    fields.setdefault("action_space", mode)
                config = RoboArenaConfig(**fields)
            if mode is not None and config.action_space != mode:
                raise ValueError(f"config.action_space={config.action_space!r} but the policy outputs {mode!r} actions")
            self.config: RoboArenaConfig | None = config
            self._hello = config.to_message()
        else:
            self.config = None
            default = dict(getattr(policy, "server_metadata", None) or ({"action_mode": mode} if mode else {}))
            self._hello = dict(metadata) if metadata is not None else default
        self._lock = threading.Lock()
        self._server = None
        self._thread: threading.Thread | None = None
        self._connections: set = set()
        self._conn_lock = threading.Lock()
        self.num_requests = 0
        self.last_request: dict | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the server is not started; call start()")
        return int(self._server.socket.getsockname()[1])

    @property
    def uri(self) -> str:
        return f"ws://{self.host}:{self.port}"

    def start(self) -> "PolicyServer":
        """Bind and serve in a daemon thread; returns self."""
        if self._server is not None:
            raise RuntimeError("the server is already started")
        ws_server = require("websockets.sync.server", "serving a policy over websockets")
        require("msgpack", "the openpi websocket protocol")
        self._server = ws_server.serve(self._handle, self.host, self._requested_port, compression=None,
                                       max_size=None, process_request=_health_check)
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"PolicyServer:{self.port}",
                                        daemon=True)
        self._thread.start()
        log.info("serving %s (%s flavour) on %s", type(self.policy).__name__, self.flavour, self.uri)
        return self

    def serve_forever(self) -> None:
        """Start (if needed) and block until interrupted (Ctrl-C) or :meth:`shutdown`."""
        if self._server is None:
            self.start()
        try:
            while self._thread is not None and self._thread.is_alive():
                self._thread.join(0.5)
        except KeyboardInterrupt:
            log.info("interrupted; shutting down")
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Close open connections (code 1001), stop accepting new ones and join the thread (idempotent)."""
        server, self._server = self._server, None
        if server is None:
            return
        with self._conn_lock:
            conns = list(self._connections)
        for conn in conns:
            conn.close(1001, "server shutting down")
        server.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> "PolicyServer":
        return self if self._server is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ protocol
    def _handle(self, conn) -> None:
        from websockets.exceptions import ConnectionClosed

        with self._conn_lock:
            self._connections.add(conn)
        prompt: list[str | None] = [None]  # the prompt the policy was last reset with, on this connection
        try:
            conn.send(packb(self._hello))
            while True:
                raw = conn.recv()
                if isinstance(raw, str):
                    raise TypeError("expected binary msgpack messages, got a text frame")
                conn.send(self._answer(unpackb(raw), prompt))
        except ConnectionClosed:
            pass
        except Exception:
            log.exception("policy server: request from %s failed", conn.remote_address)
            try:
                conn.send(traceback.format_exc())
                conn.close(1011, "Internal server error. Traceback included in previous frame.")
            except ConnectionClosed:
                pass
        finally:
            with self._conn_lock:
                self._connections.discard(conn)

    def _answer(self, msg: Any, prompt: list) -> bytes | str:
        if not isinstance(msg, dict):
            raise TypeError(f"expected a msgpack map, got {type(msg).__name__}")
        text = str(msg.get("prompt", ""))
        endpoint = msg.get("endpoint", "infer") if self.flavour == "roboarena" else "infer"
        with self._lock:
            self.last_request = msg
            self.num_requests += 1
            if endpoint not in ("infer", "reset"):
                raise ValueError(f"unknown endpoint {endpoint!r}; a RoboArena server knows 'infer' and 'reset'")
            if endpoint == "reset":
                self.policy.reset(text)
                prompt[0] = text
                return RESET_OK
            if prompt[0] != text:
                self.policy.reset(text)
                prompt[0] = text
            t0 = time.perf_counter()
            chunk = as_action_chunk(self.policy.infer(to_observation(msg)), f"served {type(self.policy).__name__}")
            infer_ms = 1000.0 * (time.perf_counter() - t0)
            targets = getattr(self.policy, "last_targets", None)
        if self.flavour == "roboarena":
            return packb(chunk)
        reply = {"actions": chunk, "server_timing": {"infer_ms": infer_ms}}
        if targets is not None:
            reply["tool_targets"] = {k: np.asarray(v) for k, v in targets.items()}
        return packb(reply)


def to_observation(msg: dict) -> dict[str, Any]:
    """A request's observation in DROID's env keys: ``observation/`` stripped, control keys dropped."""
    obs = {}
    for key, value in msg.items():
        if key in CONTROL_KEYS:
            continue
        name = key[len(OBSERVATION_PREFIX):] if key.startswith(OBSERVATION_PREFIX) else key
        obs[name] = np.array(value) if isinstance(value, np.ndarray) else value  # writable copies
    return obs


def _health_check(connection, request):
    if request.path == "/healthz":
        return connection.respond(http.HTTPStatus.OK, "OK\n")
    return None


# ----------------------------------------------------------------------------- CLI
@dataclasses.dataclass
class ServeArgs:
    """Arguments of ``python -m policies.server``."""

    policy: str = "zero"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    flavour: str = "openpi"


def parse_args(argv: list[str] | None = None) -> ServeArgs:
    p = argparse.ArgumentParser(prog="python -m policies.server", description=__doc__.splitlines()[0])
    p.add_argument("--policy", default="zero", help="a policy name for policies.make_policy (zero, random, "
                   "openpi:HOST:PORT to relay, ...); scripted policies need an env and cannot be served")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (0.0.0.0: all)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--flavour", choices=FLAVOURS, default="openpi")
    return ServeArgs(**vars(p.parse_args(argv)))


def main(argv: list[str] | None = None) -> None:
    from . import make_policy

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    PolicyServer(make_policy(args.policy), args.host, args.port, flavour=args.flavour).serve_forever()


if __name__ == "__main__":
    main()
