"""A flow checkpoint behind the :class:`~policies.base.Policy` protocol, single or batched.

::

    from policies import make_policy, run_episode
    policy = make_policy("flow:runs/flow_legible/snapshots/flow-s20000")   # a checkpoint directory
    policy = FlowPolicy.from_pretrained("runs/flow_legible/snapshots/flow-s20000", seed=0)
    result = run_episode(gym.make("SimDROID-v1"), policy, seed=2_000_000)

It reads what a visuomotor policy reads and refuses what it refuses, by name (the same checks:
:meth:`~policies.visuomotor.policy.VisuomotorPolicy.preprocess`): the views of its config, ``joint_position``,
``gripper_position`` and the instruction.  Each query draws the flow's noise from the policy's own generator,
re-seeded with ``seed`` at every :meth:`~FlowPolicy.reset`, so an episode's actions are a function of its
observations and the seed (a served copy answers exactly as an in-process one).  The generated Cartesian targets go
through the visuomotor Cartesian head's fixed IK layer (:func:`policies.visuomotor.cartesian.joint_velocity_chunk`),
so what reaches the env is DROID's 8-d action: 7 normalised joint velocities and the gripper.  The chunk's goals are
kept, so :class:`~policies.base.ChunkedController` tracks them from the measured joints step by step
(:meth:`~policies.visuomotor.policy.VisuomotorPolicy.track`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint import resolve_folder, shipped_names
from ..visuomotor.policy import VisuomotorPolicy

log = logging.getLogger(__name__)

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
#: make_policy name forms of this kind: a shipped name and a directory.
PREFIX, PATH_PREFIX = "flow-", "flow:"
TRAIN_HINT = ("train one with `neuralsim train-flow-policy --data DATA --out runs/flow_legible` on data from "
              "`neuralsim data generate DATA --scene legible --episodes 720` (README, 'Visuomotor baselines'), then "
              "load it with make_policy('flow:runs/flow_legible/snapshots/NAME')")


def shipped_checkpoints() -> list[str]:
    """Names of the flow checkpoints shipped in the package (``policies/flow/weights/NAME``); no torch import."""
    return shipped_names(WEIGHTS_DIR)


def resolve_checkpoint(name_or_path: str | Path) -> Path:
    """A checkpoint directory from a shipped name (``flow-...``) or a local directory.

    Raises:
        CheckpointError: neither (the message lists the shipped names and the training command).
    """
    return resolve_folder(name_or_path, WEIGHTS_DIR, "flow", TRAIN_HINT)


class FlowPolicy(VisuomotorPolicy):
    """A trained :class:`~policies.flow.model.FlowNet` as a :class:`~policies.base.Policy`.

    Args:
        model: a :class:`~policies.flow.model.FlowNet`.
        device: torch device for inference.
        num_threads: torch CPU threads to set (None: leave torch's setting alone).
        seed: seed of the flow's noise, restarted at every :meth:`reset`.
        flow_steps: Euler steps per query (None: the config's ``flow_steps``).

    Attributes:
        config: the checkpoint's :class:`~policies.flow.config.FlowConfig`.
        server_metadata: what :class:`~policies.server.PolicyServer` sends first (image resolution, cameras, action
            mode, chunk size).
    """

    def __init__(self, model, device: str = "cpu", num_threads: int | None = None, seed: int = 0,
                 flow_steps: int | None = None):
        import torch

        super().__init__(model, device=device, num_threads=num_threads)
        self.seed = int(seed)
        self.flow_steps = int(flow_steps or self.config.flow_steps)
        if self.flow_steps < 1:
            raise ValueError(f"flow_steps must be >= 1, got {flow_steps}")
        self._generator = torch.Generator().manual_seed(self.seed)
        self._mean = torch.tensor(self.config.action_mean, device=device)
        self._std = torch.tensor(self.config.action_std, device=device)

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, device: str = "cpu", num_threads: int | None = None,
                        seed: int = 0, flow_steps: int | None = None) -> "FlowPolicy":
        """Load a shipped name (:func:`shipped_checkpoints`) or a checkpoint directory."""
        from .model import FlowNet

        model = FlowNet.from_pretrained(resolve_checkpoint(name_or_path))
        model.name = str(name_or_path)
        return cls(model, device=device, num_threads=num_threads, seed=seed, flow_steps=flow_steps)

    def reset(self, instruction: str) -> None:
        """Tokenise the instruction (InstructionError for one the policy cannot read) and restart the noise."""
        super().reset(instruction)
        self._generator.manual_seed(self.seed)

    def _forward(self, observations: dict[str, Any], tokens: list[tuple[int, int, int]]) -> np.ndarray:
        import torch

        from ..visuomotor.model import tool_pose
        from .config import ACTION_DIM
        from .model import sample

        n = len(tokens)
        images, state = self.preprocess(observations, n)
        tool = tool_pose(state[:, :7].astype(np.float64))
        noise = torch.randn((n, self.config.chunk_size, ACTION_DIM), generator=self._generator)
        with torch.inference_mode():
            dev = self.device
            memory = self.model.encode(torch.from_numpy(images).to(dev).float().div_(255),
                                       torch.from_numpy(state).to(dev), torch.from_numpy(tool).to(dev),
                                       torch.tensor(tokens, dtype=torch.long, device=dev))
            chunk = sample(self.model, memory, noise.to(dev), self.flow_steps) * self._std + self._mean  # (N, H, 7)
            chunk = chunk.float().cpu().numpy()
        grip = chunk[..., 6]
        grip = (grip > 0.5).astype(np.float32) if self.config.gripper == "binary" else np.clip(grip, 0.0, 1.0)
        return self._cartesian_actions(state, chunk[..., :6], grip)  # the IK layer: (N, H, 8) DROID actions
