"""The flow policy's configuration: everything that shapes its network, saved as ``config.json`` beside the weights.

No torch import, so the CLI's ``--help`` and :func:`policies.available_policies` stay instant.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from neuralsim.episode import VIEW_NAMES  # the three DROID camera names

from ..checkpoint import CheckpointError
from ..visuomotor.tokens import COLOURS, FAMILIES

#: Numbers per action the flow head generates: the tool point's scaled offset (3) and rotation vector (3) after the
#: action, as :mod:`policies.visuomotor.cartesian` defines them, then the gripper command.
ACTION_DIM = 7
#: How the generated gripper value becomes DROID's command (FlowConfig.gripper).
GRIPPER_DECODINGS = ("binary", "continuous")


def _views() -> tuple[str, ...]:
    return ("exterior_image_1_left", "wrist_image_left")


@dataclass
class FlowConfig:
    """A flow-matching visuomotor policy: a ResNet-18-style trunk per view, a rectified-flow action head."""

    views: tuple[str, ...] = field(default_factory=_views)
    """Camera views the policy reads, distinct names from the three DROID views; the wrist view and at least one
    exterior view."""
    image_size: int = 64
    """Side of the square images the network reads; other sizes are letterboxed to it (openpi's rule)."""
    chunk_size: int = 12
    """Actions per generated chunk (H); :func:`policies.run_episode` executes the first 8."""
    width: int = 16
    """Channels of the trunk's first stage; the four stages have width x (1, 2, 4, 8) (torchvision's ResNet-18:
    64)."""
    stem_stride: int = 4
    """Downsampling of the stem: 4 is torchvision's (a stride-2 convolution, 3x3 here instead of 7x7, then a stride-2
    max-pool), 2 leaves out the max-pool (four times the first stages' cost)."""
    strides: tuple[int, int, int, int] = (1, 2, 2, 1)
    """Stride of each of the four ResNet stages (torchvision's: (1, 2, 2, 2)). With the stem's 4, (1, 2, 2, 1) leaves
    a 4x4 map of a 64 px view for the spatial softmax (robomimic's ResNet-18 leaves 3x3 of its 84 px views;
    torchvision's strides would leave 2x2)."""
    keypoints: int = 32
    """Spatial-softmax keypoints per view (a 1x1 convolution maps the last stage to this many channels)."""
    film: bool = True
    """Modulate each stage's output by the instruction (FiLM, starting as the identity), so a channel can fire on
    "the red cube" rather than on every cube."""
    dim: int = 128
    """Width of the flow head's tokens."""
    layers: int = 2
    """Transformer layers of the flow head (self-attention over the action tokens, cross-attention to the
    observation tokens, MLP)."""
    heads: int = 4
    """Attention heads of the flow head; must divide ``dim``."""
    flow_steps: int = 5
    """Euler steps from noise to a chunk at inference (pi0 takes 10); a policy may override it
    (``FlowPolicy(flow_steps=...)``) without retraining: the network is the same, only the integration changes. At 5
    the head costs about as much as the trunks at batch 1."""
    embed: int = 32
    """Width of each instruction token's embedding (family, target colour, base colour), concatenated into the
    instruction token."""
    families: tuple[str, ...] = FAMILIES
    """Task-family vocabulary (token order)."""
    colours: tuple[str, ...] = COLOURS
    """Colour vocabulary (token order after <none> and <unk>)."""
    state_mean: tuple[float, ...] = (0.0,) * 8
    """Mean of (7 joint positions, gripper position) over the training data, for normalisation."""
    state_std: tuple[float, ...] = (1.0,) * 8
    """Std of the same, for normalisation."""
    action_mean: tuple[float, ...] = (0.0,) * ACTION_DIM
    """Mean of each action number (6 scaled tool offsets, gripper) over the training labels: the flow runs in
    normalised units."""
    action_std: tuple[float, ...] = (1.0,) * ACTION_DIM
    """Std of the same."""
    gripper: str = "binary"
    """How the generated gripper value becomes DROID's command: ``binary`` (1 above 0.5, else 0: the demonstrations'
    two commands) or ``continuous`` (clipped to [0, 1])."""
    scene: str = "legible"
    """SimDROID scene of the training data (``classic`` = SimDROID-v0, ``legible`` = SimDROID-v1)."""
    training: dict = field(default_factory=dict)
    """How the weights were made (command options, steps, data, seed); informational."""

    def __post_init__(self) -> None:
        self.views = tuple(self.views)
        self.strides = tuple(int(s) for s in self.strides)
        self.families, self.colours = tuple(self.families), tuple(self.colours)
        for name, n in (("state_mean", 8), ("state_std", 8), ("action_mean", ACTION_DIM), ("action_std", ACTION_DIM)):
            value = tuple(float(v) for v in getattr(self, name))
            if len(value) != n:
                raise ValueError(f"{name} must be {n} numbers, got {value}")
            setattr(self, name, value)
        bad = [v for v in self.views if v not in VIEW_NAMES]
        if bad or len(set(self.views)) != len(self.views):
            raise ValueError(f"views must be distinct names from {VIEW_NAMES}, got {self.views}")
        if "wrist_image_left" not in self.views or not any(v.startswith("exterior") for v in self.views):
            raise ValueError(f"views must hold the wrist view and at least one exterior view, got {self.views}")
        if self.image_size < 16 or self.image_size % 8:
            raise ValueError(f"image_size must be a multiple of 8 and >= 16, got {self.image_size}")
        if not 1 <= self.chunk_size <= 64:
            raise ValueError(f"chunk_size must be in [1, 64], got {self.chunk_size}")
        if len(self.strides) != 4 or any(s not in (1, 2) for s in self.strides):
            raise ValueError(f"strides must be 4 values of 1 or 2, got {self.strides}")
        if self.stem_stride not in (2, 4):
            raise ValueError(f"stem_stride must be 2 or 4, got {self.stem_stride}")
        if self.feature_size < 2:
            raise ValueError(f"strides {self.strides} leave less than a 2x2 map of a {self.image_size} px view")
        for name in ("width", "keypoints", "dim", "layers", "heads", "flow_steps", "embed"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.dim % self.heads:
            raise ValueError(f"heads must divide dim, got dim={self.dim}, heads={self.heads}")
        if min(self.state_std) <= 0 or min(self.action_std) <= 0:
            raise ValueError(f"state_std and action_std must be > 0, got {self.state_std}, {self.action_std}")
        if self.gripper not in GRIPPER_DECODINGS:
            raise ValueError(f"gripper must be one of {GRIPPER_DECODINGS}, got {self.gripper!r}")
        if self.scene not in ("classic", "legible"):
            raise ValueError(f"scene must be 'classic' or 'legible', got {self.scene!r}")

    @property
    def total_stride(self) -> int:
        """Downsampling of the four stages together (the stem's not included)."""
        out = 1
        for s in self.strides:
            out *= s
        return out

    @property
    def feature_size(self) -> int:
        """Side of the last stage's map, where the spatial softmax runs."""
        return self.image_size // (self.stem_stride * self.total_stride)

    @property
    def stage_widths(self) -> tuple[int, int, int, int]:
        """Channels of the four ResNet stages."""
        return tuple(self.width * m for m in (1, 2, 4, 8))

    @property
    def action_mode(self) -> str:
        """What the arm part of the generated actions is (the Cartesian head's, :mod:`policies.visuomotor.cartesian`);
        the policy's IK layer turns it into DROID joint velocities."""
        return "tool_delta"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "FlowConfig":
        data = json.loads(text)
        if not isinstance(data, dict):
            raise CheckpointError(f"a flow config is a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise CheckpointError(f"config has unknown fields {unknown}; known: {sorted(known)}")
        return cls(**data)


def preset(name: str) -> FlowConfig:
    """A named size: ``default`` (the trained kind) or ``tiny`` (tests: seconds on a CPU)."""
    if name == "default":
        return FlowConfig()
    if name == "tiny":
        return FlowConfig(width=4, keypoints=8, dim=32, layers=1, heads=2, flow_steps=3, embed=8, chunk_size=4,
                          image_size=32)
    raise ValueError(f"unknown flow preset {name!r}; known: 'default', 'tiny'")
