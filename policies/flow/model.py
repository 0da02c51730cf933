"""The flow policy's network: a ResNet-18-style trunk per view and a rectified-flow head over action chunks.

One self-contained file in the diffusers / nanoGPT manner: helpers -> trunk -> flow head -> network -> checkpoint
I/O.  The recipe is robomimic's image encoder with pi0's action head::

    per view  image (3, S, S) -> ResNet-18 (GroupNorm, FiLM(instruction) after each stage) -> 1x1 conv
              -> spatial softmax: K keypoints (x, y) -> linear -> one token
    state     normalised joints + gripper, tool pose by forward kinematics -> MLP -> one token
    words     family, target colour, base colour embeddings -> linear -> one token (the instruction token)
    head      H action tokens = MLP(noisy action, time)  -> [self-attention, cross-attention to the V + 2
              observation tokens (keys/values computed once per query), MLP] x layers -> H velocities

The trunk is torchvision's ``resnet18`` block structure (a BasicBlock pair per stage, widths w x (1, 2, 4, 8)) written
here with ``torch.nn`` because torchvision is not a dependency; as Diffusion Policy does, every BatchNorm is a
GroupNorm (groups = channels // 16), and as robomimic does, the global average pool is a spatial softmax.  For 64 px
views the stem's convolution is 3x3 (torchvision's: 7x7) and the last stage keeps its resolution (config ``strides``),
so the softmax reads a 4x4 map instead of torchvision's 2x2.  Weights start random: no pretrained weights can be
fetched.

What the head generates per action is the Cartesian head's target (:mod:`policies.visuomotor.cartesian`: the tool
point's scaled offset and the hand's rotation vector after the action, relative to the observed pose) and the
gripper command, normalised by the training labels' mean and std; the policy's fixed IK layer turns the first six
into DROID joint velocities.  :func:`sample` integrates the flow (the update's equation is in its docstring).

Checkpoints are ``config.json`` + ``model.safetensors`` (never a pickle); :meth:`FlowNet.from_pretrained` refuses
missing or unexpected tensors, NaN/inf weights and a config with unknown fields, by name.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint import load_folder, save_folder
from ..visuomotor.model import FiLM, spatial_softmax
from .config import ACTION_DIM, FlowConfig

#: The safetensors metadata ``format`` of a flow checkpoint.
WEIGHTS_FORMAT = "neuralsim-flow-1"


# ----------------------------------------------------------------------------- helpers
def group_norm(channels: int) -> nn.GroupNorm:
    """Diffusion Policy's replacement of BatchNorm: one group per 16 channels (at least one)."""
    return nn.GroupNorm(max(1, channels // 16), channels)


def time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding (B,) -> (B, dim) of flow times in [0, 1] (periods from 2e-3 to 4, pi0's range)."""
    half = dim // 2
    period = 4e-3 * (4.0 / 4e-3) ** torch.linspace(0, 1, half, device=t.device, dtype=torch.float32)
    angle = 2 * math.pi * t.float()[:, None] / period[None]
    return torch.cat([angle.sin(), angle.cos()], dim=-1)


def flow_target(actions: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rectified-flow training pair (openpi's convention, t = 1 is noise): ``x_t = t * noise + (1 - t) *
    actions`` and its velocity ``u = noise - actions``, for actions and noise (B, H, A) and times t (B,)."""
    tt = t[:, None, None]
    return tt * noise + (1 - tt) * actions, noise - actions


def sample_times(batch: int, generator: torch.Generator) -> torch.Tensor:
    """Training flow times (B,) from pi0's Beta(1.5, 1) (more weight on the noisy end), kept in [0.001, 1]: a
    Beta(a, 1) variable is U^(1/a)."""
    u = torch.rand(batch, generator=generator)
    return 0.001 + 0.999 * u.pow(1 / 1.5)


# ----------------------------------------------------------------------------- trunk
class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock with GroupNorm: two 3x3 convolutions and a (projected) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = group_norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = group_norm(cout)
        self.shortcut = (nn.Identity() if stride == 1 and cin == cout else
                         nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), group_norm(cout)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.norm1(self.conv1(x)))
        return F.relu(self.norm2(self.conv2(y)) + self.shortcut(x))


class ResNetTrunk(nn.Module):
    """One view's encoder: (B, 3, S, S) floats in [0, 1] and the instruction (B, C) -> keypoints (B, K, 2) in
    [-1, 1] (the spatial softmax of K channels of the last stage)."""

    def __init__(self, config: FlowConfig, condition_dim: int) -> None:
        super().__init__()
        widths = config.stage_widths
        stem = [nn.Conv2d(3, widths[0], 3, 2, 1, bias=False), group_norm(widths[0]), nn.ReLU()]
        self.stem = nn.Sequential(*stem, *([nn.MaxPool2d(3, 2, 1)] if config.stem_stride == 4 else []))
        stages, cin = [], widths[0]
        for cout, stride in zip(widths, config.strides):
            stages.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.stages = nn.ModuleList(stages)
        self.films = nn.ModuleList(FiLM(condition_dim, c) for c in widths) if config.film else None
        self.keypoint_conv = nn.Conv2d(widths[-1], config.keypoints, 1)

    def forward(self, image: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        x = self.stem(image * 2 - 1)                            # (B, w, S/stem, S/stem)
        for i, stage in enumerate(self.stages):
            x = stage(x)                                        # (B, w_i, ...): strided as config.strides
            if self.films is not None:
                x = self.films[i](x, condition)
        return spatial_softmax(self.keypoint_conv(x))          # (B, K, 2)


# ----------------------------------------------------------------------------- flow head
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(B, heads, N, D) queries against (B, heads, M, D) keys/values -> (B, N, heads * D); the one place the head's
    attention math lives."""
    out = F.scaled_dot_product_attention(q, k, v)              # (B, heads, N, D)
    return out.transpose(1, 2).flatten(2)


class HeadBlock(nn.Module):
    """Pre-norm transformer block of the flow head: self-attention over the action tokens, cross-attention to the
    observation tokens (keys/values from :meth:`context`, computed once per query), MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.cross_q = nn.Linear(dim, dim)
        self.cross_kv = nn.Linear(dim, 2 * dim)
        self.cross_proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.heads, -1).transpose(1, 2)    # (B, heads, N, D)

    def context(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.cross_kv(memory).chunk(2, dim=-1)          # (B, M, dim) each
        return self._split(k), self._split(v)

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, ks, vs = (self._split(y) for y in self.qkv(self.norm1(x)).chunk(3, dim=-1))
        x = x + self.proj(attention(q, ks, vs))
        x = x + self.cross_proj(attention(self._split(self.cross_q(self.norm2(x))), k, v))
        return x + self.mlp(self.norm3(x))


# ----------------------------------------------------------------------------- network
class FlowNet(nn.Module):
    """Observation -> tokens (:meth:`encode`) and noisy chunk + time + tokens -> velocity (:meth:`velocity`).

    ``encode(images, state, tool, tokens)``: ``images`` (B, V, 3, S, S) float in [0, 1] in ``config.views`` order,
    ``state`` (B, 8) raw joint positions and gripper, ``tool`` (B, 9) the
    :func:`~policies.visuomotor.model.tool_pose` of those joints, ``tokens`` (B, 3) long instruction tokens ->
    (B, V + 2, dim) observation tokens (views, state, instruction).
    """

    def __init__(self, config: FlowConfig) -> None:
        super().__init__()
        self.config = config
        e, d, h = config.embed, config.dim, config.chunk_size
        self.family_embed = nn.Embedding(len(config.families), e)
        self.colour_embed = nn.Embedding(len(config.colours) + 2, e)  # <none>, <unk>, colours
        self.trunks = nn.ModuleList(ResNetTrunk(config, 3 * e) for _ in config.views)
        self.view_proj = nn.ModuleList(nn.Linear(2 * config.keypoints, d) for _ in config.views)
        self.state_proj = nn.Sequential(nn.Linear(8 + 9, d), nn.SiLU(), nn.Linear(d, d))
        self.word_proj = nn.Linear(3 * e, d)
        self.obs_type = nn.Parameter(0.02 * torch.randn(len(config.views) + 2, d))
        self.action_in = nn.Linear(ACTION_DIM, d)
        self.action_time = nn.Sequential(nn.Linear(2 * d, d), nn.SiLU(), nn.Linear(d, d))  # pi0's action-time MLP
        self.action_pos = nn.Parameter(0.02 * torch.randn(h, d))
        self.blocks = nn.ModuleList(HeadBlock(d, config.heads) for _ in range(config.layers))
        self.out_norm = nn.LayerNorm(d)
        self.action_out = nn.Linear(d, ACTION_DIM)
        self.register_buffer("state_mean", torch.tensor(config.state_mean), persistent=False)
        self.register_buffer("state_std", torch.tensor(config.state_std), persistent=False)

    def encode(self, images: torch.Tensor, state: torch.Tensor, tool: torch.Tensor, tokens: torch.Tensor
               ) -> torch.Tensor:
        b, v = images.shape[:2]
        if v != len(self.trunks):
            raise ValueError(f"expected {len(self.trunks)} views {self.config.views}, got {v}")
        words = torch.cat([self.family_embed(tokens[:, 0]), self.colour_embed(tokens[:, 1]),
                           self.colour_embed(tokens[:, 2])], dim=1)                          # (B, 3e)
        views = [proj(trunk(images[:, i], words).flatten(1))
                 for i, (trunk, proj) in enumerate(zip(self.trunks, self.view_proj))]        # V x (B, d)
        s = (state - self.state_mean) / self.state_std
        own = self.state_proj(torch.cat([s, tool], dim=1))                                   # (B, d)
        return torch.stack([*views, own, self.word_proj(words)], dim=1) + self.obs_type      # (B, V + 2, d)

    def context(self, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each head block's cross-attention keys and values (B, heads, V + 2, dim / heads) of the observation
        tokens ``memory`` (B, V + 2, dim): computed once per query, read by every Euler step."""
        return [block.context(memory) for block in self.blocks]

    def velocity(self, x: torch.Tensor, t: torch.Tensor, context: list[tuple[torch.Tensor, torch.Tensor]]
                 ) -> torch.Tensor:
        """Velocity (B, H, A) of the noisy normalised chunk ``x`` (B, H, A) at flow times ``t`` (B,), given the
        observation's :meth:`context`."""
        time = time_embedding(t, self.config.dim).to(x.dtype)[:, None].expand(-1, x.shape[1], -1)  # (B, H, d)
        a = self.action_time(torch.cat([self.action_in(x), time], dim=-1)) + self.action_pos     # (B, H, d)
        for block, (k, v) in zip(self.blocks, context):
            a = block(a, k, v)
        return self.action_out(self.out_norm(a))                                                 # (B, H, A)

    # ------------------------------------------------------------------ checkpoints
    def save_pretrained(self, directory: str | Path) -> Path:
        """Write ``config.json`` and float32 ``model.safetensors`` to ``directory`` (created)."""
        return save_folder(self, self.config.to_json(), directory, WEIGHTS_FORMAT)

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str = "cpu") -> "FlowNet":
        """Load a directory written by :meth:`save_pretrained`; raises :class:`CheckpointError` naming what is
        wrong."""
        return load_folder(directory, "flow", FlowConfig.from_json, cls, device, weights_format=WEIGHTS_FORMAT,
                           format_hint=" (a visuomotor checkpoint loads with 'visuomotor:PATH')")


# ----------------------------------------------------------------------------- sampler
def sample(model: FlowNet, memory: torch.Tensor, noise: torch.Tensor, steps: int) -> torch.Tensor:
    """A normalised chunk (B, H, A) from ``noise`` (B, H, A) by ``steps`` Euler steps of the learned flow.

    With openpi's convention (t = 1 is noise, t = 0 the chunk) and v the network's velocity::

        x_1 = noise,    x_{t - 1/S} = x_t - (1/S) * v(x_t, t, memory),    t = 1, 1 - 1/S, ..., 1/S

    Deterministic given ``noise``: the policy draws it from its own seeded generator.
    """
    context = model.context(memory)
    x, dt = noise, 1.0 / steps
    for k in range(steps):
        t = torch.full((len(x),), 1.0 - k * dt, device=x.device)
        x = x - dt * model.velocity(x, t, context)
    return x
