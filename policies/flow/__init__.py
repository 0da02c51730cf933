"""Flow-matching visuomotor policies: the field's image-BC recipe with pi0's action head.

One policy kind in one folder (LeRobot's layout): :mod:`.config` (the saved configuration), :mod:`.model` (a
ResNet-18-style trunk per view with GroupNorm and a spatial-softmax pool, a rectified-flow transformer head over
action chunks, checkpoint I/O), :mod:`.policy` (the :class:`~policies.base.Policy` front, single and batched; the
visuomotor Cartesian head's IK layer turns the generated tool moves into DROID joint velocities) and :mod:`.train`
(``neuralsim train-flow-policy``, resumable).  Shipped checkpoints live in ``weights/NAME`` (``flow-v4-s2000``,
``flow-v4-s8000``, ``flow-v4-s16000``: three snapshots of one run, graded skill).
Importing this package does not import torch.
"""

from __future__ import annotations

from ..checkpoint import CheckpointError
from ..visuomotor.errors import PolicyInputError
from .config import FlowConfig
from .policy import FlowPolicy, resolve_checkpoint, shipped_checkpoints

__all__ = ["CheckpointError", "FlowConfig", "FlowPolicy", "PolicyInputError", "resolve_checkpoint",
           "shipped_checkpoints"]
