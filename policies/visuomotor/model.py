"""The visuomotor network: camera views + joint and gripper state + instruction tokens -> an action chunk.

One self-contained file in the diffusers / nanoGPT manner: config, helpers, view encoder, network, checkpoint
I/O.  Per view (each its own small CNN)::

    image (3, 64, 64) -> conv s2 -> (C0, 32, 32) -> conv -> FiLM(instruction) -> conv s2 -> (C2, 16, 16)
      -> conv -> FiLM(instruction) -> spatial softmax: one (x, y) keypoint per channel  + max-pooled activations

FiLM from the instruction lets a channel fire on "the red cube" rather than on every cube, and the spatial
softmax (Levine et al. 2016; Diffusion Policy's image encoder) turns where it fires into coordinates.  Two
colour queries (linear maps of the target and base colour embeddings) are also matched against the half-resolution
features pixel by pixel, and the spatial softmax of each match map is where that colour is in the view (training
supervises that softmax with the pixel the cube projects to in the fixed exterior views).  From the
keypoints of every view and the instruction a small head estimates where the target cube and the goal (bowl, pad
or base cube) lie on the table (trained on the episodes' recorded poses).  The tool point follows from the joint
positions by forward kinematics, so the policy also sees where those objects are *relative to its gripper*: without
that, behaviour cloning from a few hundred demonstrations learns the mean trajectory and ignores where the cube
is.  Keypoints, estimates, relative positions, tool pose, normalised joint and gripper state and the instruction
embedding go through an MLP to ``chunk_size`` actions and a gripper logit each (sigmoid at inference).  What an
action is, ``action_mode`` says: ``joint_velocity``, DROID's 7 normalised joint velocities (tanh, in [-1, 1]), or
``tool_delta``, the tool point's offset and the hand's rotation after that action relative to the observed pose (6
numbers, scaled as :mod:`policies.visuomotor.cartesian` says), which the policy's fixed IK layer turns into joint
velocities.

Checkpoints are ``config.json`` + ``model.safetensors`` (never a pickle); :meth:`VisuomotorNet.from_pretrained`
refuses missing or unexpected tensors, NaN/inf weights and a config with unknown fields, by name.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from neuralsim.kinematics import TCP_OFFSET  # SimDROID's tool point along the flange's z axis [m]

from ..checkpoint import CheckpointError, load_folder, save_folder
from .tokens import COLOURS, FAMILIES

#: The three DROID camera names a config may choose from.
VIEW_NAMES = ("exterior_image_1_left", "exterior_image_2_left", "wrist_image_left")
#: What the arm part of an action is -> numbers per action: DROID's joint velocities, or the Cartesian head's
#: tool-point offset and rotation vector (policies.visuomotor.cartesian).
ACTION_MODES = {"joint_velocity": 7, "tool_delta": 6}
#: How the gripper logit becomes a command (VisuomotorConfig.gripper).
GRIPPER_DECODINGS = ("probability", "binary")
#: Table positions [m] as the object head predicts them: ``(xy - centre) * scale`` for target xy, goal xy.
POSITION_CENTRE, POSITION_SCALE = (0.5, 0.0, 0.5, 0.0), 5.0


@dataclass
class VisuomotorConfig:
    """Everything that shapes a visuomotor network; saved as ``config.json`` beside its weights."""

    views: tuple[str, ...] = ("exterior_image_1_left", "wrist_image_left")
    """Camera views the policy reads, a non-empty subset of the three DROID views."""
    image_size: int = 64
    """Side of the square images the network reads; other sizes are letterboxed to it (openpi's rule)."""
    chunk_size: int = 12
    """Actions per chunk (H); the :class:`~policies.base.ChunkedController` executes the first 8."""
    channels: tuple[int, int, int, int] = (16, 32, 32, 32)
    """Channels of the four convolutions of each view's encoder; the last is the number of keypoints."""
    hidden: int = 256
    """Width of the MLP from features to the action chunk."""
    embed: int = 32
    """Width of each instruction token's embedding (family, target colour, base colour)."""
    families: tuple[str, ...] = FAMILIES
    """Task-family vocabulary (token order)."""
    colours: tuple[str, ...] = COLOURS
    """Colour vocabulary (token order after <none> and <unk>)."""
    state_mean: tuple[float, ...] = (0.0,) * 8
    """Mean of (7 joint positions, gripper position) over the training data, for normalisation."""
    state_std: tuple[float, ...] = (1.0,) * 8
    """Std of the same, for normalisation."""
    scene: str = "classic"
    """SimDROID scene of the training data (``classic`` = SimDROID-v0, ``legible`` = SimDROID-v1)."""
    action_mode: str = "joint_velocity"
    """What the network predicts per action besides the gripper: ``joint_velocity`` (DROID's 7 normalised joint
    velocities) or ``tool_delta`` (the tool point's offset and the hand's rotation after the action, relative to the
    observed pose; the policy turns them into joint velocities by IK).  Either way the policy emits DROID actions."""
    gripper: str = "probability"
    """How the gripper logit becomes DROID's gripper command: ``probability`` (its sigmoid, a position in [0, 1]) or
    ``binary`` (1 where that probability exceeds 0.5, else 0: the more likely of the demonstrations' two commands)."""
    training: dict = field(default_factory=dict)
    """How the weights were made (command options, steps, data, seed); informational."""

    def __post_init__(self) -> None:
        self.views = tuple(self.views)
        self.channels = tuple(int(c) for c in self.channels)
        self.families, self.colours = tuple(self.families), tuple(self.colours)
        self.state_mean, self.state_std = tuple(map(float, self.state_mean)), tuple(map(float, self.state_std))
        bad = [v for v in self.views if v not in VIEW_NAMES]
        if not self.views or bad or len(set(self.views)) != len(self.views):
            raise ValueError(f"views must be distinct names from {VIEW_NAMES}, got {self.views}")
        if self.image_size < 16 or self.image_size % 4:
            raise ValueError(f"image_size must be a multiple of 4 and >= 16, got {self.image_size}")
        if not 1 <= self.chunk_size <= 64:
            raise ValueError(f"chunk_size must be in [1, 64], got {self.chunk_size}")
        if len(self.channels) != 4 or min(self.channels) < 1:
            raise ValueError(f"channels must be 4 positive ints, got {self.channels}")
        if len(self.state_mean) != 8 or len(self.state_std) != 8 or min(self.state_std) <= 0:
            raise ValueError(f"state_mean/state_std must be 8 numbers (std > 0), got {self.state_mean}, "
                             f"{self.state_std}")
        if self.gripper not in GRIPPER_DECODINGS:
            raise ValueError(f"gripper must be one of {GRIPPER_DECODINGS}, got {self.gripper!r}")
        if self.action_mode not in ACTION_MODES:
            raise ValueError(f"action_mode must be one of {sorted(ACTION_MODES)}, got {self.action_mode!r}")

    @property
    def action_dim(self) -> int:
        """Numbers the network predicts per action before the gripper (7 joint velocities or 6 tool offsets)."""
        return ACTION_MODES[self.action_mode]

    def gripper_command(self, probability):
        """DROID gripper commands from the gripper head's probabilities (numpy or torch), as ``gripper`` says."""
        return (probability > 0.5) * 1.0 if self.gripper == "binary" else probability

    @property
    def keypoints(self) -> int:
        """Keypoints per view (the last convolution's channels)."""
        return self.channels[-1]

    @property
    def feature_dim(self) -> int:
        """Features per view: (x, y) per keypoint plus one max-pooled activation per channel, then (x, y) and peak
        of the target-colour and base-colour attention maps."""
        return 3 * self.keypoints + 6

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "VisuomotorConfig":
        data = json.loads(text)
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise CheckpointError(f"config has unknown fields {unknown}; known: "
                                  f"{[f.name for f in dataclasses.fields(cls)]}")
        return cls(**data)


# ----------------------------------------------------------------------------- helpers
def spatial_softmax(features: torch.Tensor) -> torch.Tensor:
    """Expected (x, y) in [-1, 1] of each channel's softmax over positions: (B, C, H, W) -> (B, C, 2)."""
    b, c, h, w = features.shape
    attention = features.flatten(2).softmax(-1).view(b, c, h, w)
    ys = torch.linspace(-1.0, 1.0, h, device=features.device, dtype=features.dtype)
    xs = torch.linspace(-1.0, 1.0, w, device=features.device, dtype=features.dtype)
    x = (attention.sum(2) * xs).sum(-1)  # (B, C)
    y = (attention.sum(3) * ys).sum(-1)  # (B, C)
    return torch.stack([x, y], dim=-1)


class FiLM(nn.Module):
    """Feature-wise affine modulation ``x * (1 + gamma(c)) + beta(c)``, starting as the identity."""

    def __init__(self, condition_dim: int, channels: int) -> None:
        super().__init__()
        self.proj = nn.Linear(condition_dim, 2 * channels)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        gamma, beta = self.proj(condition)[:, :, None, None].chunk(2, dim=1)  # (B, C, 1, 1) each
        return x * (1 + gamma) + beta


# ----------------------------------------------------------------------------- view encoder
class ViewEncoder(nn.Module):
    """One view's CNN: (B, 3, S, S) floats in [0, 1] -> (B, feature_dim) features.

    Besides the keypoints, two colour queries (from the target and base colour tokens) are matched against the
    half-resolution features at every pixel; the spatial softmax of each match says where that colour is.
    """

    def __init__(self, channels: tuple[int, int, int, int], condition_dim: int) -> None:
        super().__init__()
        c0, c1, c2, c3 = channels
        self.conv0 = nn.Conv2d(3, c0, 3, stride=2, padding=1)
        self.conv1 = nn.Conv2d(c0, c1, 3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, 3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(c2, c3, 3, padding=1)
        self.film1, self.film3 = FiLM(condition_dim, c1), FiLM(condition_dim, c3)

    def forward(self, image: torch.Tensor, condition: torch.Tensor, queries: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Features (B, feature_dim) and the colour-match logits (B, 2, S/2, S/2): target, base colour."""
        x = F.relu(self.conv0(image * 2 - 1))                  # (B, c0, S/2, S/2)
        x = F.relu(self.film1(self.conv1(x), condition))       # (B, c1, S/2, S/2)
        match = torch.einsum("bqc,bchw->bqhw", queries, x)     # (B, 2, S/2, S/2): target, base colour
        colour = torch.cat([spatial_softmax(match).flatten(1), match.flatten(2).amax(-1)], dim=1)  # (B, 6)
        x = F.relu(self.conv2(x))                              # (B, c2, S/4, S/4)
        x = self.film3(self.conv3(x), condition)               # (B, c3, S/4, S/4)
        points = spatial_softmax(x).flatten(1)                 # (B, 2 * c3)
        peak = x.flatten(2).amax(-1)                           # (B, c3)
        return torch.cat([points, peak, colour], dim=1), match


# ----------------------------------------------------------------------------- network
def tool_pose(q):
    """(B, 7) joint positions -> (B, 9) float32: tool point xyz [m] and the first two columns of the flange rotation.

    Forward kinematics (:func:`neuralsim.kinematics.flange_transforms`) of a numpy array or a torch tensor, returned
    as the same type; the policy computes it in numpy (0.1 ms at batch 1, against 3.5 ms for torch's small ops).
    """
    from neuralsim.kinematics import flange_transforms

    T = flange_transforms(q)                                   # (B, 4, 4)
    tcp = T[:, :3, 3] + TCP_OFFSET * T[:, :3, 2]
    rot = T[:, :3, :2].reshape(len(T), 6)
    if isinstance(q, torch.Tensor):
        return torch.cat([tcp, rot], dim=1).float()
    return np.concatenate([tcp, rot], axis=1).astype(np.float32)


class VisuomotorNet(nn.Module):
    """Views + state + instruction tokens -> (arm chunk, gripper logits, object positions).

    ``forward(images, state, tool, tokens)``: ``images`` (B, V, 3, S, S) float in [0, 1] in ``config.views``
    order, ``state`` (B, 8) raw joint positions and gripper, ``tool`` (B, 9) the :func:`tool_pose` of those joint
    positions, ``tokens`` (B, 3) long.  Returns ``arm`` (B, H, A): 7 joint velocities in [-1, 1] or 6 scaled tool
    offsets, as ``config.action_mode`` says; ``gripper_logits`` (B, H); ``positions`` (B, 4): the estimated target
    cube xy and goal xy, scaled as :data:`POSITION_CENTRE` / :data:`POSITION_SCALE` say; and ``match`` (B, V, 2,
    S/2, S/2): each view's target- and base-colour match logits, whose softmax over pixels training supervises with
    where those cubes project in the exterior views.
    """

    def __init__(self, config: VisuomotorConfig) -> None:
        super().__init__()
        self.config = config
        e = config.embed
        self.family_embed = nn.Embedding(len(config.families), e)
        self.colour_embed = nn.Embedding(len(config.colours) + 2, e)  # <none>, <unk>, colours
        self.encoders = nn.ModuleList(ViewEncoder(config.channels, 3 * e) for _ in config.views)
        self.colour_query = nn.Linear(e, config.channels[1])
        self.register_buffer("state_mean", torch.tensor(config.state_mean), persistent=False)
        self.register_buffer("state_std", torch.tensor(config.state_std), persistent=False)
        self.register_buffer("position_centre", torch.tensor(POSITION_CENTRE), persistent=False)
        visual = len(config.views) * config.feature_dim + 3 * e
        self.object_head = nn.Sequential(nn.Linear(visual, 128), nn.GELU(), nn.Linear(128, 4))
        width = visual + 8 + 4 + 4 + 9  # + state, positions, positions relative to the tool, tool pose
        self.trunk = nn.Sequential(nn.Linear(width, config.hidden), nn.GELU(),
                                   nn.Linear(config.hidden, config.hidden), nn.GELU())
        self.action_head = nn.Linear(config.hidden, config.chunk_size * (config.action_dim + 1))

    def instruction_embedding(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, 3) tokens -> (B, 3 * embed): family, target colour and base colour embeddings side by side."""
        return torch.cat([self.family_embed(tokens[:, 0]), self.colour_embed(tokens[:, 1]),
                          self.colour_embed(tokens[:, 2])], dim=1)

    def forward(self, images: torch.Tensor, state: torch.Tensor, tool: torch.Tensor, tokens: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        b, v = images.shape[:2]
        if v != len(self.encoders):
            raise ValueError(f"expected {len(self.encoders)} views {self.config.views}, got {v}")
        words = self.instruction_embedding(tokens)
        queries = self.colour_query(self.colour_embed(tokens[:, 1:]))  # (B, 2, c1): target, base colour
        features, match = zip(*(enc(images[:, i], words, queries) for i, enc in enumerate(self.encoders)))
        visual = torch.cat([*features, words], dim=1)
        positions = self.object_head(visual)                   # (B, 4) scaled target xy, goal xy
        tool_xy = (tool[:, :2] - self.position_centre[:2]) * POSITION_SCALE
        relative = positions - tool_xy.repeat(1, 2)            # (B, 4) target and goal relative to the tool
        s = (state - self.state_mean) / self.state_std
        h = self.trunk(torch.cat([visual, s, positions, relative, tool], dim=1))
        out = self.action_head(h).view(b, self.config.chunk_size, self.config.action_dim + 1)  # (B, H, A + 1)
        arm = torch.tanh(out[..., :-1]) if self.config.action_mode == "joint_velocity" else out[..., :-1]
        return arm, out[..., -1], positions, torch.stack(match, dim=1)

    # ------------------------------------------------------------------ checkpoints
    def save_pretrained(self, directory: str | Path) -> Path:
        """Write ``config.json`` and float32 ``model.safetensors`` to ``directory`` (created)."""
        return save_folder(self, self.config.to_json(), directory, "neuralsim-visuomotor-1")

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str = "cpu") -> "VisuomotorNet":
        """Load a directory written by :meth:`save_pretrained`; raises :class:`CheckpointError` naming what is
        wrong."""
        return load_folder(directory, "visuomotor", VisuomotorConfig.from_json, cls, device)
