"""Learned visuomotor baselines: camera views + proprioception + instruction -> DROID action chunks.

One policy kind in one folder (LeRobot's layout): :mod:`.tokens` (the instruction as tokens), :mod:`.model` (config,
network, checkpoint I/O), :mod:`.policy` (the :class:`~policies.base.Policy` front, single and batched),
:mod:`.train` (behaviour cloning, ``neuralsim train-policy``) and ``weights/NAME`` (the shipped checkpoints, each
``config.json`` + ``model.safetensors``).  Importing this package does not import torch.
"""

from __future__ import annotations

from .errors import CheckpointError, PolicyInputError
from .policy import VisuomotorPolicy, resolve_checkpoint, shipped_checkpoints

__all__ = ["CheckpointError", "PolicyInputError", "VisuomotorPolicy", "resolve_checkpoint", "shipped_checkpoints"]
