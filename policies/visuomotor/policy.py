"""A visuomotor checkpoint behind the :class:`~policies.base.Policy` protocol, single or batched.

::

    from policies import make_policy, run_episode
    policy = make_policy("visuomotor-s4000")                 # a shipped checkpoint (available_policies())
    policy = VisuomotorPolicy.from_pretrained("runs/visuomotor_legible/snapshots/visuomotor-s4000")  # any directory
    result = run_episode(gym.make("SimDROID-v1"), policy, seed=2_000_000)    # the scene of its config.scene

The policy reads only what a real DROID policy gets: the camera views named in its config, ``joint_position``,
``gripper_position`` and the instruction (tokenised by :mod:`policies.visuomotor.tokens`).  Images of another
size are letterboxed to the checkpoint's (openpi's resize with pad); images that are not (H, W, 3) uint8 (or float
in [0, 1]; a float image in 0-255 is refused quoting its range, never clipped to white) are refused by name, as are
missing keys and states of the wrong size.  ``infer`` returns a chunk of ``chunk_size`` DROID actions;
:func:`~policies.base.run_episode` executes the first 8 (openpi's DROID setting).  A Cartesian checkpoint
(``config.action_mode == "tool_delta"``) predicts tool poses, and its fixed IK layer
(:func:`policies.visuomotor.cartesian.joint_velocity_chunk`) turns them into those joint-velocity actions from the
observed joint state.  Such a policy also keeps the chunk's goals (``tracks_targets``): :meth:`VisuomotorPolicy.track`
re-aims each later step from the measured joints, which :class:`~policies.base.ChunkedController` does by default.
:meth:`VisuomotorPolicy.infer_batch` answers N observations (a vector env's batch) in one forward pass.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..checkpoint import resolve_folder, shipped_names
from .errors import PolicyInputError

log = logging.getLogger(__name__)

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
TRAIN_HINT = ("train them with `neuralsim train-policy --data DATA --out runs/visuomotor_legible --ship` on data from "
              "`neuralsim data generate DATA --scene legible --episodes 720` (README, 'Visuomotor baselines')")


def shipped_checkpoints() -> list[str]:
    """Names of the checkpoints shipped in the package (``policies/visuomotor/weights/NAME``); no torch import."""
    return shipped_names(WEIGHTS_DIR)


def resolve_checkpoint(name_or_path: str | Path) -> Path:
    """A checkpoint directory from a shipped name, a local directory, or a Hugging Face hub id in the local cache.

    Raises:
        CheckpointError: none of these (the message lists the shipped names and the training command).
    """
    return resolve_folder(name_or_path, WEIGHTS_DIR, "visuomotor", TRAIN_HINT, hub=True)


def _image(observation: dict, key: str, size: int) -> np.ndarray:
    from ..openpi_client import letterbox

    if key not in observation:
        raise PolicyInputError(f"observation has no {key!r} (keys {sorted(observation)}); this policy reads "
                               f"{key!r}")
    img = np.asarray(observation[key])
    if img.ndim != 3 or img.shape[2] != 3 or not (img.dtype == np.uint8 or np.issubdtype(img.dtype, np.floating)):
        raise PolicyInputError(f"observation[{key!r}] must be an (H, W, 3) uint8 image (or float in [0, 1]), got "
                               f"shape {img.shape} dtype {img.dtype}")
    try:
        return letterbox(img, size, size, name=f"observation[{key!r}]")
    except ValueError as e:  # a float image outside [0, 1]: refused by name, never clipped
        raise PolicyInputError(str(e)) from None


def _state(observation: dict, key: str, size: int) -> np.ndarray:
    if key not in observation:
        raise PolicyInputError(f"observation has no {key!r} (keys {sorted(observation)})")
    arr = np.asarray(observation[key], dtype=np.float32)
    if arr.size != size or not np.all(np.isfinite(arr)):
        raise PolicyInputError(f"observation[{key!r}] must be {size} finite numbers, got shape {arr.shape}")
    return arr.reshape(size)


class VisuomotorPolicy:
    """A trained visuomotor network as a :class:`~policies.base.Policy`.

    Args:
        model: a :class:`~policies.visuomotor.model.VisuomotorNet`.
        device: torch device for inference.
        num_threads: torch CPU threads to set (None: leave torch's setting alone).

    Attributes:
        config: the checkpoint's :class:`~policies.visuomotor.model.VisuomotorConfig`.
        server_metadata: what :class:`~policies.server.PolicyServer` sends first (the image resolution the model
            reads, so openpi clients send the views at that size, the cameras and the action mode).
    """

    action_mode = "joint_velocity"

    def __init__(self, model, device: str = "cpu", num_threads: int | None = None):
        import torch

        if num_threads is not None:
            torch.set_num_threads(int(num_threads))
        self.model = model.to(device).eval()
        self.config = model.config
        self.device = device
        self.name = getattr(model, "name", None)
        self._tokens: tuple[int, int, int] | None = None
        self._targets: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # the last single query's goals
        self._batch_targets: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        s = self.config.image_size
        self.server_metadata = {"action_mode": self.action_mode, "image_resolution": [s, s],
                                "cameras": list(self.config.views), "chunk_size": self.config.chunk_size,
                                "tool_targets": self.tracks_targets}

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, device: str = "cpu",
                        num_threads: int | None = None) -> "VisuomotorPolicy":
        """Load a shipped name (:func:`shipped_checkpoints`), a checkpoint directory or a cached hub id."""
        from .model import VisuomotorNet

        path = resolve_checkpoint(name_or_path)
        model = VisuomotorNet.from_pretrained(path)
        model.name = str(name_or_path)
        return cls(model, device=device, num_threads=num_threads)

    # ------------------------------------------------------------------ Policy protocol
    def reset(self, instruction: str) -> None:
        """Tokenise the episode's instruction (raises InstructionError for one the policy cannot read)."""
        from .tokens import instruction_tokens

        self._tokens = instruction_tokens(instruction, self.config.families, self.config.colours)
        self._targets = None

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        """The action chunk (chunk_size, 8) float32 for one observation (after :meth:`reset`)."""
        if self._tokens is None:
            raise RuntimeError("call reset(instruction) before infer(observation)")
        batch = {k: np.asarray(v)[None] for k, v in observation.items()}
        self._batch_targets = None
        chunk = self._forward(batch, [self._tokens])[0]
        self._targets = None if self._batch_targets is None else tuple(t[0] for t in self._batch_targets)
        return chunk

    def infer_batch(self, observations: dict[str, Any], instructions: Sequence[str]) -> np.ndarray:
        """Chunks (N, chunk_size, 8) for N observations at once (a vector env's batched dict) in one pass."""
        from .tokens import instruction_tokens

        tokens = [instruction_tokens(t, self.config.families, self.config.colours) for t in instructions]
        self._targets = None
        return self._forward(observations, tokens)

    # ------------------------------------------------------------------ tracking the chunk's goals
    @property
    def tracks_targets(self) -> bool:
        """Whether :meth:`track` can re-aim the steps of a chunk: a Cartesian (``tool_delta``) checkpoint."""
        return self.config.action_mode == "tool_delta"

    @property
    def last_targets(self) -> dict[str, np.ndarray] | None:
        """The goals of the last :meth:`infer`'s chunk (None if there are none): ``position`` (H, 3) of the tool point
        [m] and ``rotation`` (H, 3, 3) of the hand in the robot base frame, ``gripper`` (H,) commands; what
        :class:`~policies.server.PolicyServer` adds to its reply so that a client can track them too."""
        if self._targets is None:
            return None
        return dict(zip(("position", "rotation", "gripper"), self._targets))

    def track(self, observation: dict[str, Any], k: int) -> np.ndarray:
        """The action (8,) float32 for step ``k`` of the last :meth:`infer`'s chunk, from this observation's joints.

        One IK step (:func:`~policies.visuomotor.cartesian.track_action`) from the measured arm towards the tool goal
        the network generated for action ``k``, with its gripper command: the chunk's goals stay those of the query,
        only the way to them is re-planned, so the arm does not drift off the path as the open-loop plan does.

        Raises:
            RuntimeError: no Cartesian chunk to track (a joint-velocity checkpoint, or no :meth:`infer` since
                :meth:`reset`).
            IndexError: ``k`` outside the chunk.
            PolicyInputError: the observation has no valid ``joint_position``.
        """
        from .cartesian import track_action

        if self._targets is None:
            raise RuntimeError("track(observation, k) follows infer(observation) of a Cartesian (tool_delta) "
                               f"checkpoint; this one is {self.config.action_mode!r}" if not self.tracks_targets
                               else "call infer(observation) before track(observation, k)")
        p_goal, R_goal, grip = self._targets
        if not 0 <= int(k) < len(p_goal):
            raise IndexError(f"step {k} is outside the chunk of {len(p_goal)} actions")
        q = _state(observation, "joint_position", 7)
        return track_action(q, p_goal[k], R_goal[k], float(grip[k]))

    def _cartesian_actions(self, state: np.ndarray, offsets: np.ndarray, grip: np.ndarray) -> np.ndarray:
        """DROID actions (N, H, 8) of generated scaled offsets (the IK layer), keeping their goals for :meth:`track`."""
        from .cartesian import joint_velocity_chunk, tool_targets

        p_goal, R_goal = tool_targets(state[:, :7], offsets)
        self._batch_targets = (p_goal, R_goal, np.clip(np.asarray(grip, np.float32), 0.0, 1.0))
        return joint_velocity_chunk(state[:, :7], offsets, grip)

    # ------------------------------------------------------------------ inference
    def preprocess(self, observations: dict[str, Any], n: int) -> tuple[np.ndarray, np.ndarray]:
        """Batched images (N, V, 3, S, S) uint8 and states (N, 8) float32 from a batched observation dict."""
        s = self.config.image_size
        images = np.empty((n, len(self.config.views), 3, s, s), np.uint8)
        state = np.empty((n, 8), np.float32)
        for key in (*self.config.views, "joint_position", "gripper_position"):
            if key not in observations:
                raise PolicyInputError(f"observation has no {key!r} (keys {sorted(observations)}); this policy "
                                       f"reads {list(self.config.views)}, joint_position and gripper_position")
            if len(observations[key]) != n:
                raise PolicyInputError(f"observation[{key!r}] has {len(observations[key])} rows, expected {n}")
        for i in range(n):
            row = {k: observations[k][i] for k in (*self.config.views, "joint_position", "gripper_position")}
            for v, key in enumerate(self.config.views):
                images[i, v] = _image(row, key, s).transpose(2, 0, 1)
            state[i, :7] = _state(row, "joint_position", 7)
            state[i, 7:] = _state(row, "gripper_position", 1)
        return images, state

    def _forward(self, observations: dict[str, Any], tokens: list[tuple[int, int, int]]) -> np.ndarray:
        import torch

        from .model import tool_pose

        images, state = self.preprocess(observations, len(tokens))
        tool = tool_pose(state[:, :7].astype(np.float64))
        with torch.inference_mode():
            x = torch.from_numpy(images).to(self.device).float().div_(255)
            arm, grip, _, _ = self.model(x, torch.from_numpy(state).to(self.device),
                                      torch.from_numpy(tool).to(self.device),
                                      torch.tensor(tokens, dtype=torch.long, device=self.device))
            grip = self.config.gripper_command(torch.sigmoid(grip)).float()
            if self.config.action_mode == "joint_velocity":
                return torch.cat([arm, grip[..., None]], dim=-1).cpu().numpy().astype(np.float32)  # (N, H, 8)
        return self._cartesian_actions(state, arm.cpu().numpy(), grip.cpu().numpy())  # the IK layer
