"""Causal video DiT: spatial attention within a frame, frame-causal temporal attention, MLP.

A *frame* is one time step: the latents of the three camera views, patchified into
``tokens_per_frame = num_views * (latent_size / patch_size)**2`` tokens that attend jointly in the
spatial attention.  The temporal attention is factorised: each token position attends to the same
position in itself and earlier frames (frame-causal), with RoPE over the frame index on q and k.
Every sub-layer is AdaLN-Zero modulated by a per-frame condition
``c = noise_level_embedding(t) + MLP2(featurise(pose, gripper))``.  With ``grounding="projected"`` each token also
gets, added to its embedding, an MLP of where the hand projects in its own view (:mod:`.grounding`).  With
``num_objects = K > 0`` each frame also has K object tokens after its image tokens (:class:`ObjectEmbedding`): they
share the frame's noise level, attend with the image tokens in the spatial attention and with their own slot in the
temporal one, and a head of their own predicts their velocity.  An image token reads the object tokens through a
second softmax over them, added with a learned per-head gate that starts at zero (:meth:`DiTBlock.spatial`), so
object state added to a trained model changes none of its image predictions until it is trained.  Grounded, the image
tokens also get where each object (its state at the pass's noise level) projects in their view.  Every entry point
of such a DiT takes the object states beside the latents and returns ``(velocity, object velocity)``.

Entry points (one behaviour each):

* :meth:`CausalDiT.forward` -- training / reference: a whole clip, banded frame-causal mask.
* :meth:`CausalDiT.denoise` -- inference: the velocity of one new frame, reading a :class:`KVCache`.
* :meth:`CausalDiT.commit` -- inference: one pass over the finished (clean, t = 0) frame that writes its
  keys/values into the cache.

Order: helpers -> attention -> embeddings -> block -> model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .config import OBJECT_DIM, DiTConfig
from .grounding import FEATURES_PER_POINT, ViewProjector
from .kv_cache import KVCache, RowIndex

# ----------------------------------------------------------------------------- helpers
COND_FEATURES = 10  # what featurise_condition makes of one conditioning vector


def featurise_condition(cond: torch.Tensor) -> torch.Tensor:
    """(…, 7) [x, y, z, rx, ry, rz, gripper] -> (…, 10) [x, y, z, sin r, cos r, gripper].

    Euler angles go through sin/cos so that wrapping at +-pi changes nothing.
    """
    if cond.shape[-1] != 7:
        raise ValueError(f"conditioning vectors must have 7 numbers (xyz, Euler XYZ, gripper), got {cond.shape}")
    xyz, rot, grip = cond[..., :3], cond[..., 3:6], cond[..., 6:]
    return torch.cat([xyz, torch.sin(rot), torch.cos(rot), grip], dim=-1)


def temporal_mask(num_frames: int, window: int | None = None, num_sink: int = 0,
                  device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean (T, T) mask, True where frame i may attend to frame j.

    Full causal (``window=None``): j <= i.  Sliding window W with S sinks: j == i, or j < S (j < i),
    or 0 < i - j <= W - 1 - S -- exactly what :class:`KVCache` keeps.
    """
    i = torch.arange(num_frames, device=device)[:, None]
    j = torch.arange(num_frames, device=device)[None, :]
    causal = j <= i
    if window is None:
        return causal
    recent = (i - j) <= (window - 1 - num_sink)
    return causal & (recent | (j < num_sink))


def rope_cos_sin(pos: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (*pos.shape, head_dim / 2) for rotary embeddings at (float) positions ``pos``."""
    half = head_dim // 2
    freqs = theta ** (-torch.arange(half, device=pos.device, dtype=torch.float64) / half)
    ang = pos.to(torch.float64)[..., None] * freqs
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rotate the two halves of the last dim of ``x`` (…, L, Dh) by angles with cos/sin (…, L, Dh/2).

    ``out``: write the result there (any strides, shape of ``x``) instead of a new tensor -- how
    :meth:`CausalDiT.read_cache` fills its key buffers without an extra copy.
    """
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if out is None:
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    o1, o2 = out.chunk(2, dim=-1)
    torch.mul(x1, cos, out=o1).addcmul_(x2, sin, value=-1.0)
    torch.mul(x1, sin, out=o2).addcmul_(x2, cos)
    return out


# ----------------------------------------------------------------------------- attention
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax attention over the second-to-last dim; q (G, H, Lq, Dh), k/v (G, H, Lk, Dh).

    ``mask``: boolean (True = attend) or additive float (0 / -inf), broadcast to (G, H, Lq, Lk).
    The one place the attention math lives.  Callers fold every batch-like dim into G: with 4-D
    inputs PyTorch's fused CPU kernel applies, while 5-D inputs fall back to the slower unfused math path.
    """
    if q.shape[-2] == 1 and (mask is None or mask.is_floating_point()):
        # one query (cached inference): two small batched products beat the fused kernel's per-call setup
        scores, scale = torch.matmul(q, k.transpose(-1, -2)), q.shape[-1] ** -0.5
        scores = scores.mul_(scale) if mask is None else torch.add(mask, scores, alpha=scale)  # mask + scale * qk
        return torch.matmul(scores.softmax(dim=-1), v)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def additive_mask(valid: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Boolean mask (True = attend) -> additive float mask (0 where True, -inf where False).

    Converting once per generated frame, instead of inside every attention call, saves the
    per-call conversion.  Every query must see at least one key, or its softmax is NaN.
    """
    return torch.zeros(valid.shape, dtype=dtype, device=valid.device).masked_fill(~valid, float("-inf"))


# ----------------------------------------------------------------------------- layers
class Linear(nn.Linear):
    """``nn.Linear`` whose inference path uses a cached column-major copy of the weight.

    ``F.linear`` multiplies by ``weight.t()``; with the usual row-major (out, in) weight MKL gets a
    transposed operand, and at batch-1 shapes (tens of rows, hundreds of columns) that gemm is several
    times slower than with a row-major (in, out) matrix.  Storing the weight column-major makes
    ``weight.t()`` exactly that matrix: same call, same result (bit-identical; a test checks it).  The
    copy is rebuilt whenever the weight changes (in-place version, storage, dtype or device) and is
    not part of the state dict.  While training or recording autograd, the plain path runs.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._inference_weight: tuple[tuple, torch.Tensor] | None = None

    def inference_weight(self) -> torch.Tensor:
        """The weight, (out, in), stored column-major (a fresh copy only when the weight changed)."""
        w = self.weight
        key = (w._version, w.data_ptr(), w.dtype, w.device)
        if self._inference_weight is None or self._inference_weight[0] != key:
            self._inference_weight = (key, w.detach().t().contiguous().t())
        return self._inference_weight[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training or torch.is_grad_enabled() or self.weight.is_inference():
            # (an inference-mode weight has no version counter: a cached copy could go stale unseen)
            return F.linear(x, self.weight, self.bias)
        return F.linear(x, self.inference_weight(), self.bias)


# ----------------------------------------------------------------------------- embeddings
class NoiseLevelEmbedding(nn.Module):
    """Sinusoidal features of t * 1000 followed by a two-layer MLP."""

    def __init__(self, dim: int, freq_dim: int):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(Linear(freq_dim, dim), nn.SiLU(), Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:  # t (…,) -> (…, dim)
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
        ang = (t.float() * 1000.0)[..., None] * freqs
        return self.mlp(torch.cat([torch.cos(ang), torch.sin(ang)], dim=-1))


#: Fourier octaves of ``condition_features="fourier"``: angular frequencies pi/4 * 2^k, k = 0..4, of each
#: standardised feature (periods 8 down to 0.5 standard deviations; on SimDROID a hand coordinate's std is ~7 cm).
FOURIER_OCTAVES = 5


class ConditionEmbedding(nn.Module):
    """Two-layer MLP of the featurised (pose, gripper) conditioning vector (:func:`featurise_condition`).

    ``features``: ``"raw"`` feeds the 10 features as they are (metres, sin/cos, gripper);
    ``"normalised"`` standardises each by the training data's mean/std (the ``mean``/``std`` buffers,
    :meth:`set_stats`); ``"fourier"`` also appends sin/cos of each standardised feature at
    :data:`FOURIER_OCTAVES` octaves, so that a move of a few centimetres changes the MLP's input by O(1)."""

    def __init__(self, dim: int, features: str = "raw"):
        super().__init__()
        self.features = features
        width = COND_FEATURES * (1 + 2 * FOURIER_OCTAVES) if features == "fourier" else COND_FEATURES
        if features != "raw":
            self.register_buffer("mean", torch.zeros(COND_FEATURES))
            self.register_buffer("std", torch.ones(COND_FEATURES))
        if features == "fourier":
            self.register_buffer("freqs", (math.pi / 4) * 2.0 ** torch.arange(FOURIER_OCTAVES), persistent=False)
        self.mlp = nn.Sequential(Linear(width, dim), nn.SiLU(), Linear(dim, dim))

    def featurise(self, cond: torch.Tensor) -> torch.Tensor:  # (…, 7) -> (…, width)
        f = featurise_condition(cond.float())
        if self.features == "raw":
            return f
        z = (f - self.mean) / self.std
        if self.features == "normalised":
            return z
        ang = (z[..., None] * self.freqs).flatten(-2)
        return torch.cat([z, torch.sin(ang), torch.cos(ang)], dim=-1)

    @torch.no_grad()
    def set_stats(self, cond: torch.Tensor) -> None:
        """Fit ``mean``/``std`` to conditioning vectors (…, 7) of the training data; a feature's std is floored at
        0.01 (a feature constant in the data, e.g. the cosine of a fixed roll, is then ~0, not blown up)."""
        if self.features == "raw":
            raise ValueError("condition_features='raw' has no statistics to fit")
        f = featurise_condition(cond.float().to(self.mean.device)).reshape(-1, COND_FEATURES)
        self.mean.copy_(f.mean(0))
        self.std.copy_(f.std(0).clamp_min(0.01) if len(f) > 1 else torch.ones_like(self.std))

    def forward(self, cond: torch.Tensor) -> torch.Tensor:  # (…, 7) -> (…, dim)
        return self.mlp(self.featurise(cond))


class GroundingEmbedding(nn.Module):
    """Per-token embedding of where the hand projects in the token's view: the projector's features
    (:class:`~neuralsim.world_model.grounding.ViewProjector`) through a two-layer MLP whose last layer starts at
    zero, so a freshly grounded model computes what the ungrounded one does.  With object state, a second such MLP
    embeds where each object's centre projects (:meth:`objects`)."""

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        if cfg.geometry is None:
            raise ValueError("grounding='projected' needs the cameras in DiTConfig.geometry (WorldModelConfig fills "
                             "them from its scene; grounding.scene_geometry(scene) makes them)")
        self.grid = cfg.latent_size // cfg.patch_size
        self.projector = ViewProjector(cfg.geometry, self.grid)
        self.mlp = nn.Sequential(Linear(self.projector.num_features, cfg.dim), nn.SiLU(), Linear(cfg.dim, cfg.dim))
        nn.init.zeros_(self.mlp[2].weight)
        nn.init.zeros_(self.mlp[2].bias)
        self.object_mlp = None
        if cfg.num_objects:
            width = cfg.num_objects * FEATURES_PER_POINT
            self.object_mlp = nn.Sequential(Linear(width, cfg.dim), nn.SiLU(), Linear(cfg.dim, cfg.dim))
            nn.init.zeros_(self.object_mlp[2].weight)
            nn.init.zeros_(self.object_mlp[2].bias)

    def objects(self, cond: torch.Tensor, xyz: torch.Tensor) -> torch.Tensor:  # (…, 7), (…, K, 3) -> (…, N, dim)
        """Per-image-token embedding of where the objects' centres ``xyz`` [m, world] project, the hand at ``cond``."""
        return self.object_mlp(self.projector.object_features(cond, xyz))

    def set_geometry(self, geometry: dict) -> None:
        """Project through other cameras from now on (the weights are kept)."""
        self.projector = ViewProjector(geometry, self.grid).to(self.mlp[0].weight.device)

    def forward(self, cond: torch.Tensor) -> torch.Tensor:  # (…, 7) -> (…, N, dim)
        return self.mlp(self.projector(cond))


class ObjectEmbedding(nn.Module):
    """The K object tokens of a frame: a two-layer MLP of each object's normalised state (xyz, wxyz quaternion; 7
    numbers) plus a learned embedding of its slot, so the tokens of different objects differ."""

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.mlp = nn.Sequential(Linear(OBJECT_DIM, cfg.dim), nn.SiLU(), Linear(cfg.dim, cfg.dim))
        self.slot = nn.Parameter(torch.randn(cfg.num_objects, cfg.dim) * 0.02)

    def forward(self, objects: torch.Tensor) -> torch.Tensor:  # (…, K, 7) -> (…, K, dim)
        return self.mlp(objects.float()) + self.slot


class ObjectReader(nn.Module):
    """Reads the K objects' normalised states from a clean frame's normalised latents (V, C, h, w): the reset of an
    episode whose spec has no poses (images only).  Per view a strided convolution and a ReLU, then an MLP of all
    views' features; trained beside the DiT on each clip's first frame (:func:`~.objectives.object_reader_loss`)."""

    def __init__(self, cfg: DiTConfig, width: int = 32):
        super().__init__()
        self.num_objects = cfg.num_objects
        self.conv = nn.Sequential(nn.Conv2d(cfg.latent_channels, width, 3, padding=1), nn.SiLU(),
                                  nn.Conv2d(width, width, 3, stride=2, padding=1), nn.SiLU())
        side = (cfg.latent_size + 1) // 2
        self.mlp = nn.Sequential(nn.Linear(cfg.num_views * width * side * side, 4 * width), nn.SiLU(),
                                 nn.Linear(4 * width, cfg.num_objects * OBJECT_DIM))

    def forward(self, latents: torch.Tensor) -> torch.Tensor:  # (b, V, C, h, w) -> (b, K, 7)
        b, v = latents.shape[:2]
        feats = self.conv(latents.flatten(0, 1).float()).reshape(b, -1)  # (b, V * width * h/2 * w/2)
        return self.mlp(feats).view(b, self.num_objects, OBJECT_DIM)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale_plus_one: torch.Tensor) -> torch.Tensor:
    """AdaLN: ``x * (1 + scale) + shift``, given ``1 + scale`` (see :meth:`CausalDiT.conditioning`)."""
    return torch.addcmul(shift, x, scale_plus_one)


def norm_modulate(norm: nn.LayerNorm, x: torch.Tensor, shift: torch.Tensor,
                  scale_plus_one: torch.Tensor) -> torch.Tensor:
    """``modulate(norm(x), shift, 1 + scale)`` for x (B, T, N, D) and per-frame shift/scale (B, T, 1, D),
    or one (D,) pair for every token.

    The (D,) form is what a single frame (B = T = 1, batch-1 inference) reduces to: LayerNorm then
    applies the modulation itself as its affine weight and bias, one op instead of two.
    """
    if shift.ndim == 1:
        return F.layer_norm(x, (x.shape[-1],), scale_plus_one, shift, norm.eps)
    return modulate(norm(x), shift, scale_plus_one)


def split_modulation(mod: torch.Tensor, chunks: int) -> tuple[torch.Tensor, ...]:
    """A (B, T, chunks * D) modulation -> ``chunks`` tensors (B, T, 1, D) that broadcast over tokens,
    or ``chunks`` (D,) vectors when B = T = 1 (see :func:`norm_modulate`)."""
    b, t, cd = mod.shape
    if b * t == 1:
        return mod.view(chunks, cd // chunks).unbind(0)
    return mod[:, :, None, :].chunk(chunks, dim=-1)


def scale_offset(chunks: int, scale_chunks: tuple[int, ...], dim: int) -> torch.Tensor:
    """(chunks * dim,) vector with 1 on the ``scale_chunks`` and 0 elsewhere: turns an AdaLN projection's
    raw output (shift, scale, gate, ...) into (shift, 1 + scale, gate, ...) with one addition."""
    offset = torch.zeros(chunks, dim)
    offset[list(scale_chunks)] = 1.0
    return offset.reshape(-1)


class TanhGELU(nn.Module):
    """GELU, tanh approximation (``nn.GELU(approximate="tanh")``), with a faster inference path.

    ``0.5 x (1 + tanh(u))`` equals ``x sigmoid(2u)`` (u = sqrt(2/pi) (x + 0.044715 x^3)), and on x86 CPUs
    (AVX2) ``sigmoid`` is several times faster than ``tanh``, so that form with in-place arithmetic beats
    PyTorch's tanh-approximation kernel; it equals that kernel to float rounding.  While autograd records, the
    library kernel is used (in-place ops would break the graph).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            return F.gelu(x, approximate="tanh")
        c2 = 2.0 * math.sqrt(2.0 / math.pi)
        u = (x * x).mul_(0.044715 * c2).add_(c2).mul_(x)  # 2 sqrt(2/pi) (x + 0.044715 x^3)
        return u.sigmoid_().mul_(x)


# ----------------------------------------------------------------------------- block
TemporalCore = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], "torch.Tensor | None"]


class DiTBlock(nn.Module):
    """Spatial attention (within a frame) -> temporal attention (frame-causal) -> MLP, AdaLN-Zero each."""

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        d, self.h, self.dh = cfg.dim, cfg.num_heads, cfg.head_dim
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.norm3 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.spatial_qkv = Linear(d, 3 * d)
        self.spatial_out = Linear(d, d)
        self.temporal_qkv = Linear(d, 3 * d)
        self.temporal_out = Linear(d, d)
        hidden = int(d * cfg.mlp_ratio)
        self.mlp = nn.Sequential(Linear(d, hidden), TanhGELU(), Linear(hidden, d))
        self.ada = nn.Sequential(nn.SiLU(), Linear(d, 9 * d))
        nn.init.zeros_(self.ada[1].weight)
        nn.init.zeros_(self.ada[1].bias)
        # (shift, scale, gate) x 3 -> (shift, 1 + scale, gate) x 3; not saved (a constant)
        self.register_buffer("ada_offset", scale_offset(9, self.SCALE_CHUNKS, d), persistent=False)
        self.image_tokens = cfg.image_tokens_per_frame
        #: with object state: tanh(gate) per head weighs what the image tokens read from the object tokens
        self.object_gate = nn.Parameter(torch.zeros(cfg.num_heads)) if cfg.num_objects else None

    def spatial(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention among one frame's tokens, q, k, v (B*T, H, N, Dh).  With object state (the last K of the N
        tokens) an object token attends to every token; an image token attends to the image tokens, plus
        ``tanh(object_gate)`` times its attention over the object tokens alone (zero at first: a model given object
        state keeps its image predictions until trained)."""
        if self.object_gate is None:
            return attention(q, k, v)
        n = self.image_tokens
        image = attention(q[:, :, :n], k[:, :, :n], v[:, :, :n])
        objects = attention(q[:, :, :n], k[:, :, n:], v[:, :, n:])
        image = torch.addcmul(image, torch.tanh(self.object_gate)[:, None, None], objects)
        return torch.cat([image, attention(q[:, :, n:], k, v)], dim=2)

    # the modulation's nine chunks are (shift, scale, gate) for each sub-layer in turn (see :meth:`forward`)
    SCALE_CHUNKS = (1, 4, 7)

    def modulation(self, c: torch.Tensor) -> torch.Tensor:
        """Frame condition c (B, T, D) -> (shift, 1 + scale, gate) for the three sub-layers, (B, T, 9D)."""
        return self.ada(c) + self.ada_offset

    def forward(self, x: torch.Tensor, mod: torch.Tensor, temporal_core: TemporalCore,
                kv_only: bool = False) -> torch.Tensor | None:
        """x (B, T, N, D); ``mod`` (B, T, 9D) = :meth:`modulation` of the frame condition (see
        :meth:`CausalDiT.conditioning`); ``temporal_core(q, k, v)`` maps (B*N, H, T, Dh) -> same.

        ``kv_only``: stop once the temporal keys/values are handed to ``temporal_core`` (which must then
        accept them without attending) and return None -- all a commit pass needs from the last block.
        """
        b, t, n, d = x.shape
        sh1, sc1, g1, sh2, sc2, g2, sh3, sc3, g3 = split_modulation(mod, 9)

        # spatial: all tokens of one frame
        y = norm_modulate(self.norm1, x, sh1, sc1)
        q, k, v = self.spatial_qkv(y).view(b * t, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)  # (B*T, H, N, Dh)
        y = self.spatial(q, k, v).permute(0, 2, 1, 3).reshape(b, t, n, d)
        x = torch.addcmul(x, g1, self.spatial_out(y))

        # temporal: same token position across frames
        y = norm_modulate(self.norm2, x, sh2, sc2)
        qkv = self.temporal_qkv(y)
        if t == 1:  # one frame (cached inference): strided views, no copy
            q, k, v = qkv.view(b * n, 3, self.h, 1, self.dh).unbind(1)  # 3 x (B*N, H, 1, Dh)
        else:
            qkv = qkv.view(b, t, n, 3, self.h, self.dh).permute(3, 0, 2, 4, 1, 5)  # (3, B, N, H, T, Dh)
            q, k, v = qkv.reshape(3, b * n, self.h, t, self.dh)
        y = temporal_core(q, k, v)
        if kv_only:
            return None
        if t == 1:
            y = y.reshape(b, 1, n, d)
        else:
            y = y.view(b, n, self.h, t, self.dh).permute(0, 3, 1, 2, 4).reshape(b, t, n, d)
        x = torch.addcmul(x, g2, self.temporal_out(y))

        y = norm_modulate(self.norm3, x, sh3, sc3)
        return torch.addcmul(x, g3, self.mlp(y))


# ----------------------------------------------------------------------------- model
class CausalDiT(nn.Module):
    """Velocity network v_theta(x_t, t, context, cond) over per-view latents."""

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.config = cfg
        d = cfg.dim
        self.patch_embed = Linear(cfg.patch_dim, d)
        self.pos_embed = nn.Parameter(torch.randn(cfg.image_tokens_per_frame, d) * 0.02)
        self.noise_embed = NoiseLevelEmbedding(d, cfg.freq_dim)
        self.cond_embed = ConditionEmbedding(d, cfg.condition_features)
        self.grounding_embed = GroundingEmbedding(cfg) if cfg.grounding == "projected" else None
        self.blocks = nn.ModuleList(DiTBlock(cfg) for _ in range(cfg.depth))
        self.final_norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.final_ada = nn.Sequential(nn.SiLU(), Linear(d, 2 * d))
        self.final_out = Linear(d, cfg.patch_dim)
        for m in (self.final_ada[1], self.final_out):
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)
        self.register_buffer("final_offset", scale_offset(2, (1,), d), persistent=False)
        # object state (num_objects > 0), drawn after every other part: the image part's initial weights are those
        # of the same DiT without objects
        self.object_embed = self.object_out = self.object_reader = None
        if cfg.num_objects:
            # the states' normalisation, (pose - mean) / std per number (WorldModel.set_object_stats fits it)
            self.register_buffer("object_mean", torch.zeros(OBJECT_DIM))
            self.register_buffer("object_std", torch.ones(OBJECT_DIM))
            self.object_embed = ObjectEmbedding(cfg)
            self.object_out = Linear(d, OBJECT_DIM)  # zero: a fresh object head predicts no motion
            nn.init.zeros_(self.object_out.weight)
            nn.init.zeros_(self.object_out.bias)
            self.object_reader = ObjectReader(cfg)

    # -- patchify ---------------------------------------------------------------
    def patchify(self, x: torch.Tensor) -> torch.Tensor:
        """latents (B, T, V, C, h, w) -> tokens (B, T, N, C*p*p)."""
        b, t, v, c, hh, ww = x.shape
        p = self.config.patch_size
        x = x.reshape(b, t, v, c, hh // p, p, ww // p, p).permute(0, 1, 2, 4, 6, 3, 5, 7)  # (B,T,V,h/p,w/p,C,p,p)
        return x.reshape(b, t, v * (hh // p) * (ww // p), c * p * p)

    def unpatchify(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T, N, C*p*p) -> latents (B, T, V, C, h, w)."""
        cfg = self.config
        b, t = tokens.shape[:2]
        p, g, c = cfg.patch_size, cfg.latent_size // cfg.patch_size, cfg.latent_channels
        x = tokens.reshape(b, t, cfg.num_views, g, g, c, p, p).permute(0, 1, 2, 5, 3, 6, 4, 7)  # (B,T,V,C,g,p,g,p)
        return x.reshape(b, t, cfg.num_views, c, g * p, g * p)

    def _check_latents(self, x: torch.Tensor, frame_dims: int) -> None:
        cfg = self.config
        want = (cfg.num_views, cfg.latent_channels, cfg.latent_size, cfg.latent_size)
        if x.ndim != frame_dims + 4 or tuple(x.shape[-4:]) != want:
            raise ValueError(f"expected latents (..., {', '.join(map(str, want))}) with {frame_dims} leading dims, "
                             f"got {tuple(x.shape)}")

    def _check_objects(self, objects: torch.Tensor | None, lead: tuple[int, ...]) -> None:
        """Objects (*lead, K, 7) are required by a DiT with object state and refused by one without."""
        k = self.config.num_objects
        if k == 0:
            if objects is not None:
                raise ValueError("this DiT has no object state (num_objects=0); give no objects")
            return
        if objects is None or tuple(objects.shape) != (*lead, k, OBJECT_DIM):
            got = None if objects is None else tuple(objects.shape)
            raise ValueError(f"this DiT carries {k} objects: give objects of shape {(*lead, k, OBJECT_DIM)} "
                             f"(normalised xyz + wxyz quaternion per object), got {got}")

    def set_geometry(self, geometry: dict) -> None:
        """A grounded DiT's cameras (a :func:`~neuralsim.world_model.grounding.scene_geometry` dict), in its config
        and its projector."""
        if self.grounding_embed is None:
            raise ValueError("this DiT is not grounded (grounding='none'); it has no cameras to set")
        self.grounding_embed.set_geometry(geometry)  # validates it
        self.config.geometry = geometry

    def conditioning(self, t: torch.Tensor, cond: torch.Tensor) -> "Conditioning":
        """What a pass derives from (noise level, condition) alone: c = embed(t) + MLP(cond) (B, T, D) and
        from it every block's AdaLN modulation (B, T, 9D) and the head's (shift, 1 + scale) (B, T, 2D); with
        grounding, the per-token embedding of where the hand projects (B, T, N, D)."""
        c = self.noise_embed(t) + self.cond_embed(cond)
        tokens = None if self.grounding_embed is None else self.grounding_embed(cond)
        grounds_objects = tokens is not None and self.object_embed is not None
        return Conditioning([block.modulation(c) for block in self.blocks], self.final_ada(c) + self.final_offset,
                            tokens, cond if grounds_objects else None)

    def _run(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, temporal_cores: list[TemporalCore],
             kv_only: bool = False, conditioning: "Conditioning | None" = None,
             objects: torch.Tensor | None = None) -> "Velocity | None":
        """Shared trunk: x (B, T, V, C, h, w), t (B, T), cond (B, T, 7) [, objects (B, T, K, 7)] -> velocity
        (B, T, V, C, h, w) [and the objects' (B, T, K, 7)].

        ``kv_only``: a commit pass -- every block's temporal keys/values go to its core, and the pass stops
        after the last block's (its attention, MLP and the head would be thrown away); returns None.
        ``conditioning``: :meth:`conditioning` of (t, cond) if already computed (t and cond are then unused).
        """
        h = self.patch_embed(self.patchify(x)) + self.pos_embed  # (B, T, N, D)
        mods = self.conditioning(t, cond) if conditioning is None else conditioning
        if mods.tokens is not None:
            h = h + mods.tokens
        if mods.cond is not None:  # grounded with object state: where the objects project in each view
            xyz = objects[..., :3] * self.object_std[:3] + self.object_mean[:3]
            h = h + self.grounding_embed.objects(mods.cond, xyz)
        if self.object_embed is not None:
            h = torch.cat([h, self.object_embed(objects)], dim=2)  # (B, T, N + K, D): image tokens, then objects
        last = len(self.blocks) - 1
        for i, (block, core) in enumerate(zip(self.blocks, temporal_cores)):
            h = block(h, mods.blocks[i], core, kv_only=kv_only and i == last)
        if kv_only:
            return None
        shift, scale = split_modulation(mods.final, 2)
        h = norm_modulate(self.final_norm, h, shift, scale)
        if self.object_out is None:
            return self.unpatchify(self.final_out(h))
        n = self.config.image_tokens_per_frame
        return self.unpatchify(self.final_out(h[:, :, :n])), self.object_out(h[:, :, n:])

    # -- training / reference ------------------------------------------------------
    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, window: int | None = None,
                num_sink: int = 0, objects: torch.Tensor | None = None) -> "Velocity":
        """Velocity for every frame of a clip.

        Args:
            x: noisy latents (B, T, V, C, h, w), each frame at its own noise level.
            t: noise levels (B, T) in [0, 1] (0 = clean).
            cond: conditioning vectors (B, T, 7).
            window, num_sink: optional sliding-window mask (see :func:`temporal_mask`); None = full causal.
            objects: with object state (``num_objects`` K > 0), the noisy normalised object states (B, T, K, 7) at
                their frame's level; None without.
        Returns:
            velocity (B, T, V, C, h, w) -- with object state, (velocity, object velocity (B, T, K, 7)); frame i
            depends only on frames j allowed by the mask (j <= i).
        """
        self._check_latents(x, 2)
        b, t_len = x.shape[:2]
        self._check_objects(objects, (b, t_len))
        if t.shape != (b, t_len) or cond.shape != (b, t_len, self.config.cond_dim):
            raise ValueError(f"t must be (B, T)=({b}, {t_len}) and cond (B, T, 7); got {tuple(t.shape)}, "
                             f"{tuple(cond.shape)}")
        mask = temporal_mask(t_len, window, num_sink, device=x.device)  # (T, T)
        cos, sin = rope_cos_sin(torch.arange(t_len, device=x.device), self.config.head_dim, self.config.rope_theta)

        def core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v, mask)

        return self._run(x, t, cond, [core] * len(self.blocks), objects=objects)

    # -- cached inference -----------------------------------------------------------
    def read_cache(self, cache: KVCache, rows: RowIndex = None, pending: bool = False) -> "CachedContext":
        """Snapshot the cache of ``rows`` for one generated frame: keys rotated once, shared by all passes.

        ``pending``: each row also holds one finished frame that is not in the cache yet; the first
        denoising pass of the new frame commits it (:meth:`denoise_with_pending`), which saves the
        separate commit pass.  The snapshot then has one more slot, before the new frame's, for that
        frame, and positions count from the new frame (the pending frame at -1).  The new frame sees
        exactly what it would had the pending frame been committed first: not the cache slot the
        commit will overwrite, and not the pending frame if the cache will not keep it.
        """
        keys, values = [], []
        mask = pair_mask = None
        extra = 2 if pending else 1
        for layer in range(len(self.blocks)):
            ck, cv, valid, rel = cache.context(layer, rows)  # (b, N, H, C, Dh), (b, C)
            b, n, h, c, dh = ck.shape
            if mask is None:
                if pending:
                    rel = rel - 1.0
                cos, sin = rope_cos_sin(rel, self.config.head_dim, self.config.rope_theta)  # (b, C, Dh/2)
                cos, sin = cos[:, None, None], sin[:, None, None]
                ones = valid.new_ones(b, 1)
                if pending:
                    slot, kept, evicts = cache.next_slot(rows)
                    after = valid.clone()
                    if c:
                        after[torch.arange(b, device=valid.device), slot.clamp_max(c - 1)] &= ~evicts
                    visible = torch.cat([after, kept[:, None], ones], dim=1)  # the new frame's view
                    own = torch.cat([valid, ones, ~ones], dim=1)  # the pending frame's: the cache and itself
                    pair = additive_mask(torch.stack([own, visible], dim=1), ck.dtype)  # (b, 2, C+2)
                    pair_mask = pair[:, None, None].expand(b, n, 1, 2, c + extra).reshape(b * n, 1, 2, c + extra)
                else:
                    visible = torch.cat([valid, ones], dim=1)  # the new frame always sees itself
                # (b*N, 1, 1, C+extra): one row per (batch row, token position), like the queries
                mask = additive_mask(visible, ck.dtype)[:, None, None, None, :].expand(b, n, 1, 1, c + extra)
                mask = mask.reshape(b * n, 1, 1, c + extra)
            # (b, N, H, C+extra, Dh): cached frames, [the pending frame,] then the slot the new frame
            # writes on every pass
            kbuf, vbuf = ck.new_empty(b, n, h, c + extra, dh), cv.new_empty(b, n, h, c + extra, dh)
            apply_rope(ck, cos, sin, out=kbuf[:, :, :, :c])
            vbuf[:, :, :, :c] = cv
            keys.append(kbuf.view(b * n, h, c + extra, dh))
            values.append(vbuf.view(b * n, h, c + extra, dh))
        return CachedContext(keys, values, mask, rows, pair_mask)

    def _cached_cores(self, context: "CachedContext", store: list | None) -> list[TemporalCore]:
        """Temporal cores reading ``context``; with ``store``, a commit pass's: each hands its (k, v) to
        ``store``, and the last layer's skips its attention (see ``kv_only`` in :meth:`_run`)."""
        last = len(self.blocks) - 1
        cores = []
        for layer in range(len(self.blocks)):
            def core(q, k, v, layer=layer):  # q, k, v (b*N, H, 1, Dh); the new frame sits at position 0
                if store is not None:
                    store.append((k[:, :, 0], v[:, :, 0]))
                    if layer == last:
                        return None
                keys, vals = context.keys[layer], context.values[layer]
                keys[:, :, -1:] = k
                vals[:, :, -1:] = v
                return attention(q, keys, vals, context.mask)
            cores.append(core)
        return cores

    def _pending_cores(self, context: "CachedContext", store: list) -> list[TemporalCore]:
        """Temporal cores of :meth:`denoise_with_pending`: q, k, v (b*N, H, 2, Dh) = [pending, new frame].

        Each hands the pending frame's un-rotated (k, v) to ``store`` (for the cache), writes its rotated
        key (position -1) and the new frame's into the context, and attends with the pair mask.
        """
        cos, sin = rope_cos_sin(torch.tensor([-1.0], device=context.mask.device), self.config.head_dim,
                                self.config.rope_theta)  # (1, Dh/2)
        cores = []
        for layer in range(len(self.blocks)):
            def core(q, k, v, layer=layer):
                store.append((k[:, :, 0], v[:, :, 0]))
                keys, vals = context.keys[layer], context.values[layer]
                apply_rope(k[:, :, :1], cos, sin, out=keys[:, :, -2:-1])
                vals[:, :, -2:] = v
                keys[:, :, -1:] = k[:, :, 1:]
                q = torch.cat([apply_rope(q[:, :, :1], cos, sin), q[:, :, 1:]], dim=2)
                return attention(q, keys, vals, context.pair_mask)
            cores.append(core)
        return cores

    def denoise_with_pending(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, pending: torch.Tensor,
                             pending_cond: torch.Tensor, context: "CachedContext", cache: KVCache,
                             conditioning: "Conditioning | None" = None,
                             pending_conditioning: "Conditioning | None" = None, objects: torch.Tensor | None = None,
                             pending_objects: torch.Tensor | None = None) -> "Velocity":
        """The first denoising pass of a new frame, fused with the commit of the row's pending frame.

        One forward over two frames -- the pending frame (clean, t = 0) and the new one at level t --
        instead of a commit pass and then a denoising pass: the same attention pattern, about half the
        per-pass overhead (which dominates at batch 1 on a CPU).  The pending frame's keys/values are
        written into ``cache`` (for ``context.rows``) before returning, so later passes and frames see
        it; ``context`` must come from :meth:`read_cache` with ``pending=True``.

        x: (b, V, C, h, w) at level t (b,), cond (b, 7); pending (b, V, C, h, w), pending_cond (b, 7); with object
        state the new frame's objects (b, K, 7) at level t and the pending frame's (clean).
        Returns the new frame's velocity (b, V, C, h, w) (with object state: and its objects').
        """
        self._check_latents(x, 1)
        self._check_latents(pending, 1)
        self._check_objects(objects, (x.shape[0],))
        self._check_objects(pending_objects, (x.shape[0],))
        if context.pair_mask is None:
            raise ValueError("denoise_with_pending needs a context from read_cache(..., pending=True)")
        b = x.shape[0]
        if conditioning is None:
            conditioning = self.conditioning(t[:, None], cond[:, None])
        if pending_conditioning is None:
            pending_conditioning = self.conditioning(torch.zeros(b, 1, device=x.device), pending_cond[:, None])
        pairs = zip(pending_conditioning.blocks, conditioning.blocks)
        tokens = None if conditioning.tokens is None else torch.cat([pending_conditioning.tokens,
                                                                     conditioning.tokens], dim=1)
        conds = None if conditioning.cond is None else torch.cat([pending_conditioning.cond, conditioning.cond], dim=1)
        both = Conditioning([torch.cat([p, c], dim=1) for p, c in pairs],
                            torch.cat([pending_conditioning.final, conditioning.final], dim=1), tokens, conds)
        store: list = []
        both_objects = None if objects is None else torch.stack([pending_objects, objects], dim=1)
        v = self._run(torch.stack([pending, x], dim=1), None, None, self._pending_cores(context, store),
                      conditioning=both, objects=both_objects)
        self._write_store(store, cache, context.rows, b)
        return frame_of(v, 1)

    def _write_store(self, store: list, cache: KVCache, rows: RowIndex, b: int) -> None:
        """Append one committed frame's per-layer (k, v) (b*N, H, Dh) from ``store`` to ``cache`` rows."""
        n, h, dh = self.config.tokens_per_frame, self.config.num_heads, self.config.head_dim
        for layer, (k, v) in enumerate(store):
            cache.append(layer, rows, k.reshape(b, n, h, dh), v.reshape(b, n, h, dh))
        cache.advance(rows)

    def frame_conditioning(self, levels: Sequence[float], cond: torch.Tensor) -> list["Conditioning"]:
        """:meth:`conditioning` at each noise level in ``levels``, for :meth:`denoise` / :meth:`commit` /
        :meth:`denoise_with_pending`: one batched product per block instead of one per pass.

        cond: (b, 7), one frame's condition at every level, or (b, P, 7), one per level.
        """
        t = torch.tensor([float(x) for x in levels], device=cond.device).expand(cond.shape[0], -1)  # (b, P)
        if cond.ndim == 2:
            cond = cond[:, None].expand(-1, t.shape[1], -1)
        mods = self.conditioning(t, cond)
        return [mods.select(p) for p in range(t.shape[1])]

    def denoise(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, context: "CachedContext",
                conditioning: "Conditioning | None" = None, objects: torch.Tensor | None = None) -> "Velocity":
        """Velocity of one new frame per row, attending to a cache snapshot from :meth:`read_cache`.

        x: (b, V, C, h, w) at noise level t (b,); cond (b, 7); ``conditioning``: optional precomputed
        :meth:`frame_conditioning` entry of this (t, cond); ``objects``: with object state, the frame's (b, K, 7)
        at level t (then the objects' velocity is returned too).
        """
        self._check_latents(x, 1)
        self._check_objects(objects, (x.shape[0],))
        return frame_of(self._run(x[:, None], t[:, None], cond[:, None], self._cached_cores(context, None),
                                  conditioning=conditioning, objects=None if objects is None else objects[:, None]), 0)

    def commit(self, x: torch.Tensor, cond: torch.Tensor, context: "CachedContext", cache: KVCache,
               conditioning: "Conditioning | None" = None, objects: torch.Tensor | None = None) -> None:
        """Write the finished frame x (b, V, C, h, w) (clean, t = 0) into ``cache`` for ``context.rows``.

        ``conditioning``: optional precomputed :meth:`frame_conditioning` entry of (t = 0, cond); ``objects``: with
        object state, the frame's clean objects (b, K, 7)."""
        self._check_latents(x, 1)
        self._check_objects(objects, (x.shape[0],))
        store: list = []
        b = x.shape[0]
        t0 = torch.zeros(b, 1, device=x.device)
        self._run(x[:, None], t0, cond[:, None], self._cached_cores(context, store), kv_only=True,
                  conditioning=conditioning, objects=None if objects is None else objects[:, None])
        self._write_store(store, cache, context.rows, b)


#: What the DiT predicts: the latents' velocity, or with object state (velocity, the objects' velocity).
Velocity = "torch.Tensor | tuple[torch.Tensor, torch.Tensor]"


def frame_of(v, index: int):
    """Frame ``index`` (along T, dim 1) of a :data:`Velocity`."""
    if isinstance(v, tuple):
        return v[0][:, index], v[1][:, index]
    return v[:, index]


@dataclass
class Conditioning:
    """Per-block AdaLN modulations (B, T, 9D) and the head's (B, T, 2D) of some (noise level, cond) frames,
    scales already as ``1 + scale``; with grounding, the per-token embeddings (B, T, N, D) added to the tokens, and
    with grounding and object state the conditions themselves (B, T, 7), which the objects' projection needs."""

    blocks: list[torch.Tensor]
    final: torch.Tensor
    tokens: torch.Tensor | None = None
    cond: torch.Tensor | None = None

    def select(self, index: int) -> "Conditioning":
        """Frame ``index`` along T only (T becomes 1)."""
        tokens = None if self.tokens is None else self.tokens[:, index:index + 1]
        cond = None if self.cond is None else self.cond[:, index:index + 1]
        return Conditioning([m[:, index:index + 1] for m in self.blocks], self.final[:, index:index + 1], tokens,
                            cond)


@dataclass
class CachedContext:
    """Read-only view of the cache for one generated frame (RoPE already applied to cached keys).

    keys/values[layer]: (b*N, H, C+1, Dh), the last slot is overwritten by the new frame on each pass
    (C+2 with a pending frame, whose slot comes second to last);
    mask: (b*N, 1, 1, C+1) additive, 0 where a slot holds a visible frame and -inf elsewhere;
    rows: the cache rows it came from.
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    mask: torch.Tensor
    rows: RowIndex
    pair_mask: torch.Tensor | None = None
    """With a pending frame (``read_cache(..., pending=True)``): (b*N, 1, 2, C+2), the masks of the
    pending frame's and the new frame's queries in the fused first pass; None otherwise."""
