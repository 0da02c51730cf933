"""Client for openpi policy servers, speaking openpi's websocket protocol itself.

Usage::

    policy = OpenPIClient("gpu-box", 8000)          # or make_policy("openpi:gpu-box:8000")
    result = run_episode(gym.make("NeuralDROID-v0"), policy, replan_every=8)

The protocol (as openpi's ``WebsocketClientPolicy`` and ``WebsocketPolicyServer`` speak it; we do
not depend on ``openpi-client``, which pins numpy<2):

1. The client opens a websocket (no compression, no size limit).  The server's first message is
   its metadata, a msgpack map (openpi servers send the policy's metadata, often empty).
2. Per query the client sends one binary msgpack map: ``observation/exterior_image_1_left`` and
   ``observation/wrist_image_left`` (uint8 H x W x 3, resized with zero padding to the server's
   resolution, 224 x 224 unless the metadata carries ``image_resolution``),
   ``observation/joint_position`` (7), ``observation/gripper_position`` (1) and ``prompt`` (str).
3. The server answers with a binary msgpack map holding ``actions`` (H, 8) (and e.g.
   ``server_timing``), or, on an error, a *text* frame with its traceback and then closes.

Our :mod:`policies.server` extends the reply, compatibly: a policy that keeps its chunk's goals (metadata
``"tool_targets": true``) also sends ``tool_targets`` (``position`` (H, 3), ``rotation`` (H, 3, 3), ``gripper``
(H,)), and :class:`OpenPIClient` then tracks them step by step as the in-process policy does
(:class:`~policies.base.TargetTracking`); from other servers it returns the chunk to run as planned.

Numpy arrays travel in openpi's msgpack-numpy encoding: a map ``{b"__ndarray__": True, b"data":
raw bytes, b"dtype": dtype.str, b"shape": shape}`` (numpy scalars: ``{b"__npgeneric__": True,
b"data": value, b"dtype": dtype.str}``); object, void and complex dtypes are refused.

The websocket and msgpack dependencies are the ``policies`` extra (``pip install
'neuralsim[policies]'``).  :mod:`policies.roboarena_client` and :mod:`policies.server` reuse the
codec, :func:`letterbox` and :class:`WebsocketConnection` from here.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import numpy as np

from .base import ACTION_MODES, as_action_chunk, require

log = logging.getLogger(__name__)

DEFAULT_PORT = 8000
#: (height, width) images are letterboxed to unless the server says otherwise.
DEFAULT_IMAGE_RESOLUTION = (224, 224)
#: Seconds to wait for the websocket handshake and for each reply.
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_RESPONSE_TIMEOUT = 60.0

#: Observation keys the openpi DROID client sends: wire name -> env observation key.
OPENPI_IMAGE_KEYS = {"observation/exterior_image_1_left": "exterior_image_1_left",
                     "observation/wrist_image_left": "wrist_image_left"}
OPENPI_STATE_KEYS = {"observation/joint_position": "joint_position",
                     "observation/gripper_position": "gripper_position"}

_NDARRAY, _NPGENERIC = b"__ndarray__", b"__npgeneric__"


class PolicyConnectionError(ConnectionError):
    """The policy server cannot be reached, or the connection to it was lost.

    Raised during :func:`~policies.base.run_episode`, it carries the episode so far as ``partial_episode`` (an
    :class:`~policies.base.EpisodeResult`); None otherwise.
    """

    partial_episode = None


class PolicyTimeoutError(PolicyConnectionError, TimeoutError):
    """The policy server did not answer within the timeout."""


class PolicyServerError(RuntimeError):
    """The policy server reported an error or sent a malformed reply.

    The message is one line; for an error the server reported, it ends with the exception the server's traceback
    names, and the whole traceback is in ``server_traceback`` (None otherwise).
    """

    server_traceback: str | None = None


# ----------------------------------------------------------------------------- msgpack-numpy
def _encode_numpy(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in "OVc":
        raise TypeError(f"cannot send numpy dtype {obj.dtype} over msgpack-numpy "
                        "(object, void and complex dtypes are refused)")
    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        return {_NDARRAY: True, b"data": arr.tobytes(), b"dtype": arr.dtype.str, b"shape": list(arr.shape)}
    if isinstance(obj, np.generic):
        return {_NPGENERIC: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    return obj


def _decode_numpy(obj: dict) -> Any:
    if _NDARRAY in obj:
        dtype = np.dtype(obj[b"dtype"])
        if dtype.kind in "OVc":
            raise TypeError(f"refusing to decode a numpy array of dtype {dtype}")
        return np.frombuffer(obj[b"data"], dtype=dtype).reshape(obj[b"shape"])
    if _NPGENERIC in obj:
        return np.dtype(obj[b"dtype"]).type(obj[b"data"])
    return obj


def packb(obj: Any) -> bytes:
    """Serialise ``obj`` (dicts, lists, str, numbers, numpy arrays) with openpi's msgpack-numpy encoding."""
    msgpack = require("msgpack", "the openpi websocket protocol")
    return msgpack.packb(obj, default=_encode_numpy, use_bin_type=True)


def unpackb(data: bytes) -> Any:
    """Inverse of :func:`packb`; arrays come back read-only (views of the message)."""
    msgpack = require("msgpack", "the openpi websocket protocol")
    return msgpack.unpackb(data, object_hook=_decode_numpy, raw=False, strict_map_key=False)


# ----------------------------------------------------------------------------- images
def image_as_uint8(image: Any, name: str = "image") -> np.ndarray:
    """``image`` (H, W, 3) as uint8: uint8 as it is, a float image in [0, 1] scaled by 255 and rounded.

    Raises:
        ValueError: naming ``name``: another shape or dtype, or a float image with values outside [0, 1] (the range
            found is quoted; a float image in 0-255 is refused rather than clipped to white).
    """
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"{name} must be an (H, W, 3) image, got shape {img.shape}")
    if img.dtype == np.uint8:
        return img
    if not np.issubdtype(img.dtype, np.floating):
        raise ValueError(f"{name} must be uint8 (or float in [0, 1]), got dtype {img.dtype}")
    if img.size and not np.all(np.isfinite(img)):
        raise ValueError(f"{name} is a float image with non-finite values; float images must be in [0, 1]")
    lo, hi = (float(img.min()), float(img.max())) if img.size else (0.0, 0.0)
    if lo < 0.0 or hi > 1.0:
        raise ValueError(f"{name} is a float image with values in [{lo:g}, {hi:g}]; float images must be in [0, 1] "
                         "(scale 0-255 floats with img.round().astype(np.uint8))")
    return (255.0 * img).round().astype(np.uint8)


def letterbox(image: np.ndarray, height: int, width: int, name: str = "image") -> np.ndarray:
    """Resize ``image`` (H, W, 3) to fit ``height`` x ``width`` keeping its aspect, centred on black.

    Bilinear resampling (Pillow); uint8 images, or float images in [0, 1] converted to uint8 first
    (:func:`image_as_uint8`, whose errors name the image ``name``).  This is the "resize with pad"
    openpi's DROID clients apply before sending.
    """
    from PIL import Image

    img = image_as_uint8(image, name)
    h, w = img.shape[:2]
    if (h, w) == (height, width):
        return img
    scale = min(height / h, width / w)
    new_h, new_w = max(1, min(height, round(h * scale))), max(1, min(width, round(w * scale)))
    resized = np.asarray(Image.fromarray(img).resize((new_w, new_h), resample=Image.BILINEAR))
    out = np.zeros((height, width, 3), np.uint8)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    out[top:top + new_h, left:left + new_w] = resized
    return out


def parse_resolution(value: Any, where: str) -> tuple[int, int] | None:
    """``(height, width)`` from a config value (a pair of positive ints) or None."""
    if value is None:
        return None
    try:
        h, w = (int(v) for v in value)
    except (TypeError, ValueError) as e:
        raise PolicyServerError(f"{where}: image resolution must be (height, width), got {value!r}") from e
    if h < 1 or w < 1:
        raise PolicyServerError(f"{where}: image resolution must be positive, got {value!r}")
    return h, w


# ----------------------------------------------------------------------------- connection
class WebsocketConnection:
    """A blocking websocket to a policy server, with timeouts and specific errors.

    Args:
        uri: ``ws://host:port`` (or ``wss://...``).
        connect_timeout: seconds for the TCP connect + handshake + the server's first message.
        response_timeout: seconds to wait for each reply.
        wait_for_server: keep retrying a refused connection for this many seconds (a server that is
            still starting); 0 fails at once.
        api_key: sent as ``Authorization: Api-Key <key>`` (what openpi's client sends) when given.

    Attributes:
        first_message: the server's first message, decoded (openpi: metadata; RoboArena: config).
    """

    def __init__(self, uri: str, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 response_timeout: float | None = DEFAULT_RESPONSE_TIMEOUT, wait_for_server: float = 0.0,
                 api_key: str | None = None):
        self.uri, self.response_timeout = uri, response_timeout
        ws_client = require("websockets.sync.client", "connecting to a policy server")
        require("msgpack", "the openpi websocket protocol")
        exceptions = require("websockets.exceptions", "connecting to a policy server")
        self._closed_errors = (exceptions.ConnectionClosed,)
        headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
        deadline = time.monotonic() + max(0.0, wait_for_server)
        while True:
            try:
                ws = ws_client.connect(uri, open_timeout=connect_timeout, compression=None, max_size=None,
                                       additional_headers=headers)
                break
            except ConnectionRefusedError as e:
                if time.monotonic() >= deadline:
                    raise PolicyConnectionError(f"no policy server at {uri} (connection refused); is it running? "
                                                f"(wait_for_server={wait_for_server} s)") from e
                time.sleep(0.2)
            except TimeoutError as e:
                raise PolicyTimeoutError(f"policy server at {uri} did not complete the websocket handshake "
                                         f"within {connect_timeout} s") from e
            except (OSError, exceptions.WebSocketException) as e:
                raise PolicyConnectionError(f"cannot connect to a policy server at {uri}: "
                                            f"{type(e).__name__}: {e}") from e
        # entering the connection's context makes us responsible for closing it (websockets >= 17.1
        # warns about connections used without one); close() exits it
        self._stack = contextlib.ExitStack()
        self._ws = self._stack.enter_context(ws)
        try:
            self.first_message = self.recv(connect_timeout, what="its first message (metadata)")
        except BaseException:
            self.close()
            raise

    def send(self, obj: Any) -> None:
        try:
            self._ws.send(packb(obj))
        except self._closed_errors as e:
            raise PolicyConnectionError(f"the connection to the policy server at {self.uri} is closed ({e})") from e

    def recv_raw(self, timeout: float | None = None, what: str = "a reply") -> bytes | str:
        """The next frame as it came: bytes (a msgpack message) or str (a text frame)."""
        timeout = self.response_timeout if timeout is None else timeout
        try:
            return self._ws.recv(timeout=timeout)
        except TimeoutError as e:
            self.close()  # a late reply would otherwise be taken for the answer to the next request
            raise PolicyTimeoutError(f"policy server at {self.uri} sent no {what} within {timeout} s; "
                                     "the connection was closed") from e
        except self._closed_errors as e:
            raise PolicyConnectionError(f"policy server at {self.uri} closed the connection while we waited for "
                                        f"{what} ({e})") from e

    def recv(self, timeout: float | None = None, what: str = "a reply") -> Any:
        """The next message decoded; a text frame (openpi's error report) raises :class:`PolicyServerError`."""
        raw = self.recv_raw(timeout, what)
        if isinstance(raw, str):
            self.close()
            lines = [line.strip() for line in raw.splitlines() if line.strip()]
            err = PolicyServerError(f"policy server at {self.uri} reported an error instead of {what}: "
                                    f"{lines[-1] if lines else '(an empty message)'}")
            err.server_traceback = raw
            raise err
        try:
            return unpackb(raw)
        except Exception as e:
            raise PolicyServerError(f"policy server at {self.uri} sent {what} that is not msgpack-numpy: "
                                    f"{type(e).__name__}: {e}") from e

    def close(self) -> None:
        """Close the websocket (idempotent)."""
        stack = getattr(self, "_stack", None)
        if stack is not None:
            stack.close()


def server_uri(host: str, port: int | None) -> str:
    """``ws://host:port``; a host that already is a ``ws://`` / ``wss://`` URI is kept."""
    uri = host if host.startswith(("ws://", "wss://")) else f"ws://{host}"
    return uri if port is None else f"{uri}:{int(port)}"


def observation_image(observation: dict, key: str, resolution: tuple[int, int] | None) -> np.ndarray:
    """``observation[key]`` as uint8 letterboxed to ``resolution`` (None: native size)."""
    if key not in observation:
        raise KeyError(f"observation has no {key!r} (keys {sorted(observation)}); the policy server needs it")
    img = np.asarray(observation[key])
    size = resolution if resolution is not None else img.shape[:2]
    return letterbox(img, *size, name=f"observation[{key!r}]")


def observation_state(observation: dict, key: str, size: int) -> np.ndarray:
    """``observation[key]`` as a flat array of ``size`` numbers (its dtype kept)."""
    if key not in observation:
        raise KeyError(f"observation has no {key!r} (keys {sorted(observation)}); the policy server needs it")
    arr = np.asarray(observation[key])
    if arr.size != size:
        raise ValueError(f"observation[{key!r}] must have {size} numbers, got shape {arr.shape}")
    return arr.reshape(size)


def actions_from_reply(reply: Any, uri: str) -> np.ndarray:
    """The (H, 8) chunk of a reply: a map with ``actions`` (openpi) or a bare array (RoboArena)."""
    if isinstance(reply, dict):
        if "actions" not in reply:
            raise PolicyServerError(f"policy server at {uri} replied with a map without 'actions' "
                                    f"(keys {sorted(map(str, reply))})")
        reply = reply["actions"]
    if not isinstance(reply, np.ndarray):
        raise PolicyServerError(f"policy server at {uri} replied with {type(reply).__name__}, not an action array")
    try:
        return as_action_chunk(reply, f"policy server at {uri}")
    except ValueError as e:
        raise PolicyServerError(str(e)) from e


def targets_from_reply(reply: Any, horizon: int, uri: str) -> dict[str, np.ndarray]:
    """The ``tool_targets`` of a reply from a server that announced them, checked against the chunk's length."""
    targets = reply.get("tool_targets") if isinstance(reply, dict) else None
    shapes = {"position": (horizon, 3), "rotation": (horizon, 3, 3), "gripper": (horizon,)}
    if not isinstance(targets, dict) or any(np.shape(targets.get(k)) != v for k, v in shapes.items()):
        got = {k: np.shape(v) for k, v in targets.items()} if isinstance(targets, dict) else type(targets).__name__
        raise PolicyServerError(f"policy server at {uri} announced tool_targets but sent {got}; expected arrays of "
                                f"shapes {shapes} beside its {horizon} actions")
    out = {k: np.asarray(targets[k], np.float64) for k in shapes}
    if not all(np.all(np.isfinite(v)) for v in out.values()):
        raise PolicyServerError(f"policy server at {uri} sent non-finite tool_targets")
    return out


class OpenPIClient:
    """A :class:`~policies.base.Policy` served by an openpi policy server (e.g. pi0-FAST-DROID).

    Connects on construction; the server's metadata is in :attr:`metadata`.  ``reset(instruction)``
    only stores the prompt (the openpi protocol has no reset message); ``infer`` sends the two views
    and the joint and gripper state and returns the server's chunk as float32 (H, 8).

    Args:
        host: server host (or a full ``ws://`` / ``wss://`` URI, then ``port`` may be None).
        port: server port.
        image_resolution: (height, width) to letterbox images to; default: the metadata's
            ``image_resolution`` if present, else 224 x 224.
        action_mode: what the server's joint commands are (``"joint_velocity"``, DROID's default, or
            ``"joint_position"`` for checkpoints that output positions); checked against the env.
            Default: the metadata's ``action_mode`` if present (our :mod:`policies.server` sends
            it), else ``"joint_velocity"``.
        binarize_gripper: map the gripper column to 0 / 1 at 0.5, as openpi's DROID robot runtime
            does before executing (off by default: the chunk is returned as the server sent it).
        connect_timeout, response_timeout, wait_for_server, api_key: see :class:`WebsocketConnection`.

    Attributes:
        tracks_targets: the server sends its chunks' goals (its metadata says ``"tool_targets": true``), so
            :meth:`track` can re-aim each step from the observed joints.

    Raises:
        PolicyConnectionError, PolicyTimeoutError: the server cannot be reached or went away.
        PolicyServerError: the server reported an error or sent a malformed reply.
        MissingDependencyError: ``websockets`` / ``msgpack`` missing (``pip install 'neuralsim[policies]'``).
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = DEFAULT_PORT, *,
                 image_resolution: tuple[int, int] | None = None, action_mode: str | None = None,
                 binarize_gripper: bool = False, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 response_timeout: float | None = DEFAULT_RESPONSE_TIMEOUT, wait_for_server: float = 0.0,
                 api_key: str | None = None):
        if action_mode is not None and action_mode not in ACTION_MODES:
            raise ValueError(f"action_mode must be one of {ACTION_MODES} or None, got {action_mode!r}")
        self.uri = server_uri(host, port)
        self.binarize_gripper = bool(binarize_gripper)
        self._conn = WebsocketConnection(self.uri, connect_timeout, response_timeout, wait_for_server, api_key)
        meta = self._conn.first_message
        if not isinstance(meta, dict):
            self.close()
            raise PolicyServerError(f"policy server at {self.uri} sent {type(meta).__name__} as its metadata; "
                                    "the openpi protocol starts with a msgpack map")
        self.metadata: dict = meta
        self.image_resolution = (parse_resolution(image_resolution, "image_resolution")
                                 or parse_resolution(meta.get("image_resolution"), f"{self.uri} metadata")
                                 or DEFAULT_IMAGE_RESOLUTION)
        self.action_mode = action_mode or meta.get("action_mode") or "joint_velocity"
        if self.action_mode not in ACTION_MODES:
            self.close()
            raise PolicyServerError(f"policy server at {self.uri} declares action_mode={self.action_mode!r}; "
                                    f"expected one of {ACTION_MODES}")
        self.tracks_targets = bool(meta.get("tool_targets", False))
        self._targets: dict[str, np.ndarray] | None = None
        self.prompt = ""

    def reset(self, instruction: str) -> None:
        self.prompt = str(instruction)
        self._targets = None

    def request(self, observation: dict) -> dict:
        """The message :meth:`infer` sends for ``observation`` (letterboxed images, state, prompt)."""
        msg: dict[str, Any] = {wire: observation_image(observation, key, self.image_resolution)
                               for wire, key in OPENPI_IMAGE_KEYS.items()}
        msg["observation/joint_position"] = observation_state(observation, "joint_position", 7)
        msg["observation/gripper_position"] = observation_state(observation, "gripper_position", 1)
        msg["prompt"] = self.prompt
        return msg

    def infer(self, observation: dict) -> np.ndarray:
        self._conn.send(self.request(observation))
        reply = self._conn.recv(what="an action chunk")
        chunk = actions_from_reply(reply, self.uri)
        self._targets = targets_from_reply(reply, len(chunk), self.uri) if self.tracks_targets else None
        if self.binarize_gripper:
            chunk[:, 7] = (chunk[:, 7] > 0.5).astype(np.float32)
        return chunk

    def track(self, observation: dict, k: int) -> np.ndarray:
        """The action (8,) for step ``k`` of the last chunk, re-aimed from this observation's joints at the goal the
        server sent (:func:`policies.visuomotor.cartesian.track_action`); as the served policy's own ``track``."""
        from .visuomotor.cartesian import track_action

        if self._targets is None:
            raise RuntimeError(f"no goals to track: the server at {self.uri} does not send tool_targets, or infer() "
                               "has not been called since reset()")
        if not 0 <= int(k) < len(self._targets["position"]):
            raise IndexError(f"step {k} is outside the chunk of {len(self._targets['position'])} actions")
        gripper = float(self._targets["gripper"][k])
        if self.binarize_gripper:
            gripper = float(gripper > 0.5)
        q = np.asarray(observation_state(observation, "joint_position", 7), np.float32)  # as the policy reads it
        return track_action(q, self._targets["position"][k],
                            self._targets["rotation"][k], gripper)

    def close(self) -> None:
        """Close the websocket (idempotent)."""
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()

    def __enter__(self) -> "OpenPIClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
