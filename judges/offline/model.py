"""Offline judge architecture: per-view tiny CNN -> per-frame token -> temporal transformer -> level.

Input: the sampled frames of an episode (T <= 30 at 1 fps, the RoboWorld segments concatenated),
every frame as its three views, plus the instruction as hashed words.  Each view image, stacked
with its difference to the episode's first frame of that view (what moved since the start: the
cube in the bowl, the arm), goes through a shared small CNN, the three view features (with a learned view
embedding) are fused into one token per frame, a learned time embedding is added, an instruction token is prepended,
and a small transformer encoder mixes them.  The episode's level (6-way classification) is read
from the instruction token's output, the mean of the frame outputs and the last frame's output
(the episode's level is the level at its end); a second head reads every frame's output as the
level reached by that frame, which training supervises with the simulator's per-frame ground truth
(ten labels per episode instead of one).  Weights: safetensors + ``config.json``, loaded by
:meth:`OfflineJudgeModel.from_pretrained` (never ``torch.load``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn as nn

VIEW_NAMES = ("exterior_image_1_left", "exterior_image_2_left", "wrist_image_left")
#: Unit of the distance head's output (metres): the size of the task objects.
DISTANCE_UNIT_M = 0.05
#: Distances are clipped here (in units) before the loss: beyond 20 cm, "far" is all that matters.
DISTANCE_CLIP_UNITS = 4.0


@dataclass
class OfflineJudgeConfig:
    """Everything needed to rebuild the model; saved beside the weights as ``config.json``.

    Attributes:
        image_size: views are resized to image_size x image_size before the CNN.
        views: view names, in the order they are stacked.
        sample_fps: frames per second sampled from the episode (RoboWorld: 1).
        num_segments: segments the sampled frames are split into (RoboWorld: 2).
        max_frames_per_segment: frames per segment (RoboWorld: 15).
        channels: output channels of the CNN's stride-2 conv stages.
        frame_difference: also feed each view's difference to the first frame (6 input channels).
        dim: width of the frame tokens and the transformer.
        heads: attention heads of the transformer.
        layers: transformer encoder layers.
        vocab_buckets: hash buckets for instruction words (0 is padding).
        max_words: instruction words kept.
        num_levels: rubric levels (0..5 -> 6).
        dropout: dropout in the transformer and head.
        distance_head: add a per-frame regression head for the gripper-to-target-object distance
            (trained from the simulator's ``ground_truth.target_distance``): an auxiliary task that
            makes the frame features locate the gripper and the object.
        goal_head: add an episode-level regression head, on the last frame's features, for where
            the target object ended relative to its goal ((dx, dy), from the episode record's final
            poses): an auxiliary task aimed at what separates "touched or grasped" (level 4) from
            "done" (level 5).  Neither head feeds the rubric prediction; both only shape the features.
    """

    image_size: int = 64
    views: tuple[str, ...] = VIEW_NAMES
    sample_fps: float = 1.0
    num_segments: int = 2
    max_frames_per_segment: int = 15
    channels: tuple[int, ...] = (16, 32, 64, 96)
    frame_difference: bool = True
    dim: int = 128
    heads: int = 4
    layers: int = 2
    vocab_buckets: int = 1024
    max_words: int = 24
    num_levels: int = 6
    dropout: float = 0.1
    distance_head: bool = False
    goal_head: bool = False
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.views = tuple(self.views)
        self.channels = tuple(self.channels)
        if self.dim % self.heads:
            raise ValueError(f"dim ({self.dim}) must be divisible by heads ({self.heads})")
        if self.image_size < 2 ** len(self.channels):
            raise ValueError(f"image_size {self.image_size} too small for {len(self.channels)} stride-2 stages")
        unknown = [v for v in self.views if v not in VIEW_NAMES]
        if unknown:
            raise ValueError(f"unknown views {unknown}; valid: {VIEW_NAMES}")

    @property
    def max_frames(self) -> int:
        """Longest frame sequence the model sees (both segments)."""
        return self.num_segments * self.max_frames_per_segment

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "OfflineJudgeConfig":
        return cls(**json.loads(text))


class ViewEncoder(nn.Module):
    """Shared CNN: (N, in_channels, S, S) normalised images -> (N, 2 C) feature (mean and max pooled)."""

    def __init__(self, channels: tuple[int, ...], in_channels: int = 3) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = in_channels
        for c in channels:
            layers += [nn.Conv2d(c_in, c, 3, stride=2, padding=1), nn.GroupNorm(min(8, c), c), nn.SiLU(),
                       nn.Conv2d(c, c, 3, padding=1), nn.GroupNorm(min(8, c), c), nn.SiLU()]
            c_in = c
        self.net = nn.Sequential(*layers)
        self.out_dim = c_in * 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.net(x)  # (N, C, s, s)
        return torch.cat([h.mean(dim=(2, 3)), h.amax(dim=(2, 3))], dim=1)  # (N, 2C)


class JudgeOutputs(NamedTuple):
    """What :meth:`OfflineJudgeModel.forward_all` returns.

    Attributes:
        logits: (B, num_levels) episode rubric-level logits.
        frame_logits: (B, T, num_levels) level-so-far logits per sampled frame.
        distance: (B, T) gripper-to-target distance per frame (None without ``distance_head``).
        goal_offset: (B, 2) final target offset from its goal (None without ``goal_head``).
    """

    logits: torch.Tensor
    frame_logits: torch.Tensor
    distance: torch.Tensor | None
    goal_offset: torch.Tensor | None


class OfflineJudgeModel(nn.Module):
    """Predicts rubric-level logits from sampled multi-view frames and the instruction."""

    def __init__(self, config: OfflineJudgeConfig) -> None:
        super().__init__()
        self.config = cfg = config
        self.encoder = ViewEncoder(cfg.channels, 6 if cfg.frame_difference else 3)
        v = len(cfg.views)
        self.view_embed = nn.Parameter(torch.zeros(v, self.encoder.out_dim))
        self.fuse = nn.Sequential(nn.Linear(v * self.encoder.out_dim, cfg.dim), nn.SiLU(), nn.Linear(cfg.dim, cfg.dim))
        self.time_embed = nn.Embedding(cfg.max_frames, cfg.dim)
        self.words = nn.EmbeddingBag(cfg.vocab_buckets, cfg.dim, mode="mean", padding_idx=0)
        self.cls = nn.Parameter(torch.zeros(cfg.dim))
        layer = nn.TransformerEncoderLayer(cfg.dim, cfg.heads, 2 * cfg.dim, cfg.dropout, batch_first=True,
                                           norm_first=True)
        self.temporal = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Sequential(nn.Dropout(cfg.dropout), nn.Linear(3 * cfg.dim, cfg.num_levels))
        self.frame_head = nn.Linear(cfg.dim, cfg.num_levels)
        self.distance_head = nn.Linear(cfg.dim, 1) if cfg.distance_head else None
        self.goal_head = nn.Linear(cfg.dim, 2) if cfg.goal_head else None
        self.register_buffer("pixel_mean", torch.tensor([0.45, 0.45, 0.45]).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor([0.25, 0.25, 0.25]).view(1, 3, 1, 1), persistent=False)

    def forward(self, frames: torch.Tensor, mask: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
        """Episode logits over levels, (B, num_levels); arguments as :meth:`forward_with_frames`."""
        return self.forward_with_frames(frames, mask, words)[0]

    def forward_with_frames(self, frames: torch.Tensor, mask: torch.Tensor,
                            words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Episode logits and per-frame logits (the level reached by each frame)."""
        out = self.forward_all(frames, mask, words)
        return out.logits, out.frame_logits

    def forward_all(self, frames: torch.Tensor, mask: torch.Tensor, words: torch.Tensor) -> "JudgeOutputs":
        """Every output: episode and per-frame logits, and the auxiliary heads' predictions.

        Args:
            frames: (B, T, V, 3, S, S) uint8 or float in [0, 1]; padded frames are ignored via ``mask``.
            mask: (B, T) bool, True for real frames (real frames first, padding after them).
            words: (B, L) int64 hashed instruction words, 0 = padding.

        Returns:
            :class:`JudgeOutputs`; distances and offsets are in units of :data:`DISTANCE_UNIT_M`.
        """
        b, t, v, c, s, _ = frames.shape
        x = frames.float() / 255.0 if frames.dtype == torch.uint8 else frames.float()  # (B, T, V, 3, S, S)
        inputs = [(x.reshape(b * t * v, c, s, s) - self.pixel_mean) / self.pixel_std]
        if self.config.frame_difference:  # change since the episode's first frame (frame 0 is always real)
            inputs.append((x - x[:, :1]).reshape(b * t * v, c, s, s) / self.pixel_std)
        h = self.encoder(torch.cat(inputs, dim=1)).view(b, t, v, -1) + self.view_embed  # (B, T, V, E)
        h = self.fuse(h.reshape(b, t, -1))  # (B, T, D)
        h = h + self.time_embed(torch.arange(t, device=h.device))[None]
        instr = self.words(words) + self.cls  # (B, D)
        tokens = torch.cat([instr[:, None], h], dim=1)  # (B, 1 + T, D)
        pad = torch.cat([torch.zeros_like(mask[:, :1]), ~mask], dim=1)  # True = ignore
        out = self.norm(self.temporal(tokens, src_key_padding_mask=pad))
        per_frame = out[:, 1:]  # (B, T, D)
        m = mask.unsqueeze(-1).float()
        pooled = (per_frame * m).sum(1) / m.sum(1).clamp_min(1.0)  # mean over real frames
        last = (mask.long().sum(1) - 1).clamp_min(0)  # (B,) index of the last real frame
        final = per_frame[torch.arange(b, device=per_frame.device), last]  # (B, D)
        return JudgeOutputs(
            logits=self.head(torch.cat([out[:, 0], pooled, final], dim=-1)),
            frame_logits=self.frame_head(per_frame),
            distance=None if self.distance_head is None else self.distance_head(per_frame)[..., 0],
            goal_offset=None if self.goal_head is None else self.goal_head(final),
        )

    # ---- checkpoints -----------------------------------------------------------------------
    def save_pretrained(self, directory: str | Path, dtype: str | None = None) -> Path:
        """Write ``model.safetensors`` and ``config.json`` to ``directory``.

        Args:
            directory: created if missing.
            dtype: ``"float16"`` / ``"bfloat16"`` store the floating-point tensors at that precision
                (half the file; :meth:`from_pretrained` casts them back to float32); None keeps them.
        """
        from safetensors.torch import save_file

        cast = None
        if dtype is not None:
            if dtype not in ("float16", "bfloat16", "float32"):
                raise ValueError(f"dtype must be 'float16', 'bfloat16', 'float32' or None, got {dtype!r}")
            cast = getattr(torch, dtype)
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for k, v in self.state_dict().items():
            v = v.detach().cpu()
            tensors[k] = (v.to(cast) if cast is not None and v.is_floating_point() else v).contiguous()
        save_file(tensors, str(d / "model.safetensors"))
        (d / "config.json").write_text(self.config.to_json())
        return d

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str = "cpu") -> "OfflineJudgeModel":
        """Load a model written by :meth:`save_pretrained` (safetensors only, no pickle)."""
        from safetensors.torch import load_file

        d = Path(directory)
        if not (d / "model.safetensors").is_file() or not (d / "config.json").is_file():
            raise FileNotFoundError(f"{str(d)!r} has no model.safetensors + config.json")
        model = cls(OfflineJudgeConfig.from_json((d / "config.json").read_text()))
        # load_state_dict copies into the float32 parameters, so half-precision files are upcast here
        model.load_state_dict(load_file(str(d / "model.safetensors"), device="cpu"))
        return model.to(device).eval()
