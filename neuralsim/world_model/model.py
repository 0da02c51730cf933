"""WorldModel: per-view autoencoder + causal DiT + the batched, KV-cached inference API.

Usage (what NeuralDROID-v0 calls)::

    wm = WorldModel.from_pretrained(path)                       # safetensors + JSON, never unpickles
    state = wm.new_state(batch_size, window=16, device="cpu")   # preallocated KV cache, O(window)
    wm.reset(state, env_ids, first_views_uint8, cond)           # (b, 3, H, W, 3), (b, 7): frame 0
    views = wm.step(state, cond, generator=g)                   # (B, 7) -> uint8 (B, 3, H, W, 3)

``cond`` is ``concat(cartesian_position, gripper_position)`` of the frame being produced (flange xyz,
extrinsic XYZ Euler, gripper in [0, 1]).  A model with object state (``config.dit.num_objects`` K > 0) also carries
each row's K object poses frame to frame: ``reset(..., objects=poses)`` starts them from known poses (b, K, 7: xyz
[m] + wxyz quaternion, world frame), else its object reader infers them from the first views;
``object_poses(state)`` is the model's belief about the latest frame.

Each ``step`` runs S = 4 denoising passes of the new frame against the cache -- the first one a two-frame pass that
also commits the row's previous frame, which stays *pending* until then (:class:`WorldModelState`) -- and decodes the
three views.  Same generator seed => bit-identical output on CPU.

Throughput: ``benchmarks/results/throughput.json`` and docs/FIDELITY.md.  On a CPU shared with another busy
process, batch-1 inference with several torch threads collapses (OpenMP threads wait on a descheduled peer for
every tiny op): use ``torch.set_num_threads(1)`` there.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .autoencoder import ViewAutoencoder
from .config import OBJECT_DIM, WorldModelConfig
from .dit import CausalDiT
from .kv_cache import KVCache
from .sampler import sample_frame_with_pending, sample_noise

log = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT_TAG = "neuralsim.world_model"
#: Metadata key of the weights' content hash (:func:`weights_digest`), written by ``save_pretrained`` (checkpoints
#: saved before it existed have none and still load).
WEIGHTS_HASH_KEY = "weights_sha256"


#: State-dict prefixes of the decoding half of the autoencoder (what ``neuralsim train --stage decoder`` trains).
DECODER_PREFIXES = ("autoencoder.vae.decoder.", "autoencoder.vae.post_quant_conv.", "autoencoder.ref_head.")


_UP_RESNET = re.compile(r"autoencoder\.vae\.decoder\.up_blocks\.\d+\.resnets\.(\d+)\.(\w+)\.")


class CheckpointError(ValueError):
    """A world-model checkpoint directory is missing, corrupt, or does not match its config."""


def config_digest(config_json: str) -> str:
    return hashlib.sha256(config_json.encode()).hexdigest()


def weights_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 of a state dict's content: each tensor's name, dtype, shape and bytes, in name order.

    Independent of the safetensors file's layout, so it is computed before the file is written and stored in its
    metadata (:data:`WEIGHTS_HASH_KEY`); any later change of a stored value changes it.
    """
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def nonfinite_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, int]:
    """Name -> number of NaN/inf values, for every floating-point tensor holding any (in name order)."""
    out = {}
    for name in sorted(tensors):
        t = tensors[name]
        if t.is_floating_point():
            bad = int((~torch.isfinite(t)).sum())
            if bad:
                out[name] = bad
    return out


def check_weights(tensors: dict[str, torch.Tensor], meta: dict[str, str], where: str) -> None:
    """Refuse weights holding NaN/inf, and weights whose content hash differs from the one saved with them.

    Raises :class:`CheckpointError` naming the non-finite tensors (and their counts) or quoting both hashes.  A file
    without a recorded hash (saved before ``save_pretrained`` wrote one) passes the hash check.
    """
    bad = nonfinite_tensors(tensors)
    if bad:
        listed = ", ".join(f"{k} ({n} of {tensors[k].numel()})" for k, n in list(bad.items())[:8])
        more = f" and {len(bad) - 8} more" if len(bad) > 8 else ""
        raise CheckpointError(f"{where}: {len(bad)} tensor(s) hold NaN or inf values: {listed}{more}; the weights "
                              f"are corrupt (a diverged training run or a damaged file)")
    saved = meta.get(WEIGHTS_HASH_KEY)
    if saved is not None:
        now = weights_digest(tensors)
        if now != saved:
            raise CheckpointError(f"{where}: the weights changed after they were saved ({WEIGHTS_HASH_KEY} "
                                  f"{saved[:16]}... recorded, {now[:16]}... now); the file is damaged or was edited")


@dataclass
class WorldModelState:
    """Per-batch inference state: the KV cache of committed frames and each row's *pending* frame.

    The latest frame of a row (the reset frame, then each generated one) is not committed at once: the
    first denoising pass of the row's next frame commits it (:func:`sample_frame_with_pending`), which
    saves one DiT pass per time step.  ``pending`` (B, V, C, h, w) holds its normalised latents,
    ``pending_cond`` (B, 7) its conditioning, ``has_pending`` (B,) which rows have one (a row without
    one was never reset).  So the cache holds every frame of a row but its latest.
    """

    cache: KVCache
    pending: torch.Tensor
    pending_cond: torch.Tensor
    has_pending: torch.Tensor
    reference_views: torch.Tensor | None = None
    """uint8 (B, V, H, W, 3): each row's reset views, what a reference head refines against (None: no head)."""
    reference_latents: torch.Tensor | None = None
    """(B, V, C, h, w): their normalised latents."""
    pending_objects: torch.Tensor | None = None
    """With object state: (B, K, 7) the pending frame's normalised object states (None: a model without)."""

    @property
    def batch_size(self) -> int:
        return self.cache.batch_size

    def fork(self) -> "WorldModelState":
        """An independent copy (cache, pending frames, references): generating from it leaves this state as it was,
        so two continuations of one context (e.g. under two conditions) need one context pass, not two."""
        return copy.deepcopy(self)

    def reference(self, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(views, normalised latents) of ``rows``' reset frames (all rows if None), for
        :meth:`WorldModel.decode`; None when the model has no reference head."""
        if self.reference_views is None:
            return None
        if rows is None:
            return self.reference_views, self.reference_latents
        rows = torch.as_tensor(rows, dtype=torch.long).reshape(-1)
        return (self.reference_views[rows.to(self.reference_views.device)],
                self.reference_latents[rows.to(self.reference_latents.device)])


class WorldModel(nn.Module):
    """Autoencoder + causal DiT + latent normalisation, with KV-cached batched generation."""

    def __init__(self, config: WorldModelConfig):
        super().__init__()
        self.config = config
        self.autoencoder = ViewAutoencoder(config.autoencoder)
        self.dit = CausalDiT(config.dit)
        c = config.autoencoder.latent_channels
        self.register_buffer("latent_mean", torch.zeros(c))
        self.register_buffer("latent_std", torch.ones(c))

    @property
    def device(self) -> torch.device:
        return self.latent_mean.device

    # ------------------------------------------------------------------ latents
    def _stat(self, t: torch.Tensor) -> torch.Tensor:
        return t[:, None, None]  # (C, 1, 1)

    def normalise(self, z: torch.Tensor) -> torch.Tensor:
        return (z - self._stat(self.latent_mean)) / self._stat(self.latent_std)

    def denormalise(self, z: torch.Tensor) -> torch.Tensor:
        return z * self._stat(self.latent_std) + self._stat(self.latent_mean)

    @torch.no_grad()
    def set_latent_stats(self, latents: torch.Tensor) -> None:
        """Per-channel mean/std from raw autoencoder latents (..., C, h, w)."""
        c = latents.shape[-3]
        flat = latents.transpose(0, -3).reshape(c, -1) if latents.ndim > 3 else latents.reshape(c, -1)
        self.latent_mean.copy_(flat.mean(dim=1).to(self.latent_mean))
        self.latent_std.copy_(flat.std(dim=1).clamp_min(1e-4).to(self.latent_std))

    @torch.no_grad()
    def set_condition_stats(self, cond: torch.Tensor) -> None:
        """Fit the DiT's condition standardisation (``condition_features`` "normalised" or "fourier") to the
        training data's conditioning vectors (..., 7)."""
        self.dit.cond_embed.set_stats(cond)

    # ------------------------------------------------------------------ object states
    @property
    def num_objects(self) -> int:
        """K, the objects each frame carries (0: a model without object state)."""
        return self.config.dit.num_objects

    @property
    def object_mean(self) -> torch.Tensor:
        """(7,) the object states' mean, fitted on the training data like the latent statistics
        (:meth:`set_object_stats`); the DiT's buffer (it projects the objects' positions when grounded)."""
        return self.dit.object_mean

    @property
    def object_std(self) -> torch.Tensor:
        """(7,) the object states' std (:attr:`object_mean`)."""
        return self.dit.object_std

    def normalise_objects(self, poses: torch.Tensor) -> torch.Tensor:
        """Object poses (..., K, 7) [xyz m, wxyz quaternion] -> the DiT's normalised states: each quaternion with
        w >= 0 (q and -q are one rotation), then per number ``(p - object_mean) / object_std``."""
        poses = torch.as_tensor(poses, dtype=torch.float32, device=self.device)
        sign = torch.where(poses[..., 3:4] < 0, -1.0, 1.0)
        poses = torch.cat([poses[..., :3], poses[..., 3:] * sign], dim=-1)
        return (poses - self.object_mean) / self.object_std

    def denormalise_objects(self, states: torch.Tensor) -> torch.Tensor:
        """Normalised object states (..., K, 7) -> poses [xyz m, unit wxyz quaternion with w >= 0]."""
        poses = states * self.object_std + self.object_mean
        quat = F.normalize(poses[..., 3:], dim=-1)
        return torch.cat([poses[..., :3], quat * torch.where(quat[..., :1] < 0, -1.0, 1.0)], dim=-1)

    @torch.no_grad()
    def set_object_stats(self, poses: torch.Tensor) -> None:
        """Per-number mean/std of object poses (..., 7) from the training data (over frames and objects; quaternions
        taken with w >= 0).  The std is floored at 1 cm and 0.05, so a number that hardly varies in the data (a flat
        cube's x/y quaternion parts) is not blown up."""
        self.object_mean.zero_()
        self.object_std.fill_(1.0)
        flat = self.normalise_objects(poses).reshape(-1, OBJECT_DIM)
        self.object_mean.copy_(flat.mean(0))
        floor = torch.tensor([0.01] * 3 + [0.05] * 4, device=self.device)
        self.object_std.copy_(torch.maximum(flat.std(0), floor))

    @torch.no_grad()
    def read_objects(self, latents: torch.Tensor) -> torch.Tensor:
        """The object reader's normalised object states (b, K, 7) from clean normalised latents (b, V, C, h, w)."""
        if self.dit.object_reader is None:
            raise ValueError("this model has no object state (num_objects=0)")
        return self.dit.object_reader(latents.to(self.device))

    def object_poses(self, state: WorldModelState, rows=None) -> torch.Tensor | None:
        """The model's belief about the latest frame's object poses: (b, K, 7) [xyz m, unit wxyz quaternion, world
        frame] of ``rows`` (all if None); None for a model without object state."""
        if state.pending_objects is None:
            return None
        o = state.pending_objects if rows is None else state.pending_objects[torch.as_tensor(rows).reshape(-1)]
        return self.denormalise_objects(o)

    def _objects_of(self, objects, latents: torch.Tensor) -> torch.Tensor:
        """Normalised object states of a frame: of ``objects`` (poses (b, K, 7)) if given, else read from its
        ``latents``."""
        if objects is None:
            return self.read_objects(latents)
        k = self.num_objects
        objects = torch.as_tensor(objects, dtype=torch.float32)
        if tuple(objects.shape) != (latents.shape[0], k, OBJECT_DIM):
            raise ValueError(f"objects must be ({latents.shape[0]}, {k}, {OBJECT_DIM}) = (rows, objects, xyz + wxyz), "
                             f"got {tuple(objects.shape)}")
        return self.normalise_objects(objects)

    def _no_objects_unless_carried(self, objects) -> None:
        if objects is not None and not self.num_objects:
            raise ValueError("this model has no object state (num_objects=0); give no objects")

    @torch.no_grad()
    def encode(self, views: torch.Tensor) -> torch.Tensor:
        """uint8 views (..., V, H, W, 3) -> normalised latents (..., V, C, h, w)."""
        return self.normalise(self.autoencoder.encode(views.to(self.device)))

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, reference: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """normalised latents (..., V, C, h, w) -> uint8 views (..., V, H, W, 3).

        ``reference``: the episode's first frame as (uint8 views (..., V, H, W, 3), normalised latents
        (..., V, C, h, w)), one per decoded frame (:meth:`WorldModelState.reference` gives a state's).  A
        model with a reference head refines its views with it (``AutoencoderConfig.reference_head_channels``);
        without a reference, or without a head, the decoder alone.
        """
        if reference is None or self.autoencoder.ref_head is None:
            return self.autoencoder.decode(self.denormalise(latents))
        views, ref_latents = reference
        return self.autoencoder.decode(self.denormalise(latents), views, self.denormalise(ref_latents))

    # ------------------------------------------------------------------ inference
    def new_state(self, batch_size: int, window: int | None = None, num_sink: int | None = None,
                  device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> WorldModelState:
        """Preallocate the KV cache for ``batch_size`` rows (window/sinks default to the config's)."""
        cfg = self.config.dit
        window = self.config.window if window is None else int(window)
        num_sink = self.config.num_sink if num_sink is None else int(num_sink)
        device = device if device is not None else self.device
        cache = KVCache(cfg.depth, batch_size, window, num_sink, cfg.tokens_per_frame, cfg.num_heads, cfg.head_dim,
                        device=device, dtype=dtype)
        frame = (cfg.num_views, cfg.latent_channels, cfg.latent_size, cfg.latent_size)
        ref_views = ref_latents = None
        if self.autoencoder.ref_head is not None:
            s = self.config.autoencoder.image_size
            ref_views = torch.zeros(batch_size, cfg.num_views, s, s, 3, dtype=torch.uint8, device=device)
            ref_latents = torch.zeros(batch_size, *frame, device=device)
        objects = torch.zeros(batch_size, cfg.num_objects, OBJECT_DIM, device=device) if cfg.num_objects else None
        return WorldModelState(cache=cache, pending=torch.zeros(batch_size, *frame, device=device),
                               pending_cond=torch.zeros(batch_size, cfg.cond_dim, device=device),
                               has_pending=torch.zeros(batch_size, dtype=torch.bool),
                               reference_views=ref_views, reference_latents=ref_latents, pending_objects=objects)

    def _cond(self, cond: torch.Tensor, rows: int) -> torch.Tensor:
        cond = torch.as_tensor(cond, dtype=torch.float32, device=self.device)
        if cond.shape != (rows, self.config.dit.cond_dim):
            raise ValueError(f"cond must be ({rows}, {self.config.dit.cond_dim}) = (rows, xyz+Euler+gripper), "
                             f"got {tuple(cond.shape)}")
        return cond

    @torch.inference_mode()
    def reset(self, state: WorldModelState, env_ids, first_views: torch.Tensor, cond: torch.Tensor,
              generator: torch.Generator | None = None, objects: torch.Tensor | None = None) -> None:
        """Start new episodes in rows ``env_ids``: forget their cache, encode frame 0 (their pending frame).

        Args:
            env_ids: row indices (sequence / LongTensor / None for all rows).
            first_views: uint8 (b, V, H, W, 3), the initial views of those rows.
            cond: (b, 7), the conditioning vector of frame 0.
            generator: unused (frame 0 is given, not sampled); kept for a uniform signature.
            objects: a model with object state: frame 0's object poses (b, K, 7) [xyz m, wxyz quaternion, world
                frame] when known (a SimDROID spec's); None: the object reader infers them from the views.
        """
        rows = torch.arange(state.batch_size) if env_ids is None else torch.as_tensor(env_ids, dtype=torch.long)
        rows = rows.reshape(-1)
        first_views = torch.as_tensor(first_views)
        if first_views.dtype != torch.uint8 or first_views.shape[0] != rows.numel():
            raise ValueError(f"first_views must be uint8 ({rows.numel()}, V, H, W, 3), got {first_views.dtype} "
                             f"{tuple(first_views.shape)}")
        self.reset_latents(state, rows, self.encode(first_views), cond, views=first_views, objects=objects)

    @torch.inference_mode()
    def reset_latents(self, state: WorldModelState, env_ids, latents: torch.Tensor, cond: torch.Tensor,
                      views: torch.Tensor | None = None, objects: torch.Tensor | None = None) -> None:
        """:meth:`reset` from frame 0's normalised latents (b, V, C, h, w) instead of its views (e.g. latents
        already encoded into a :class:`~neuralsim.world_model.latents.LatentStore`).  ``views``: frame 0's
        uint8 views, the reference of a model with a reference head (None: the latents decoded, a blurrier
        reference).  ``objects``: as in :meth:`reset`."""
        self._no_objects_unless_carried(objects)
        rows = torch.arange(state.batch_size) if env_ids is None else torch.as_tensor(env_ids, dtype=torch.long)
        rows = rows.reshape(-1)
        cfg = self.config.dit
        want = (rows.numel(), cfg.num_views, cfg.latent_channels, cfg.latent_size, cfg.latent_size)
        if tuple(latents.shape) != want:
            raise ValueError(f"latents must be {want} (rows, V, C, h, w), got {tuple(latents.shape)}")
        cond = self._cond(cond, rows.numel())
        state.cache.reset(rows)
        state.pending[rows.to(state.pending.device)] = latents.to(state.pending.device, state.pending.dtype)
        state.pending_cond[rows.to(state.pending.device)] = cond
        state.has_pending[rows] = True
        if state.pending_objects is not None:
            state.pending_objects[rows.to(state.pending_objects.device)] = self._objects_of(objects, latents).to(
                state.pending_objects.device)
        if state.reference_views is not None:
            if views is None:
                views = self.decode(latents)
            rd = rows.to(state.reference_views.device)
            state.reference_views[rd] = torch.as_tensor(views).to(state.reference_views.device)
            state.reference_latents[rd] = latents.to(state.reference_latents.device, state.reference_latents.dtype)

    @torch.inference_mode()
    def step_latents(self, state: WorldModelState, cond: torch.Tensor,
                     generator: torch.Generator | None = None) -> torch.Tensor:
        """Generate one frame for every row; returns normalised latents (B, V, C, h, w)."""
        b = state.batch_size
        cond = self._cond(cond, b)
        cfg = self.config.dit
        noise = sample_noise((b, cfg.num_views, cfg.latent_channels, cfg.latent_size, cfg.latent_size), generator,
                             self.device)
        object_noise = sample_noise((b, cfg.num_objects, OBJECT_DIM), generator, self.device) if cfg.num_objects \
            else None
        return self.generate(state, noise, cond, object_noise=object_noise)

    @torch.inference_mode()
    def generate(self, state: WorldModelState, noise: torch.Tensor, cond: torch.Tensor,
                 rows: torch.Tensor | None = None, schedule: tuple[float, ...] | None = None,
                 object_noise: torch.Tensor | None = None) -> torch.Tensor:
        """Generate the next frame of ``rows`` (all if None) from their ``noise`` (b, V, C, h, w) and
        ``cond`` (b, 7); commits their pending frames, and the new frames become pending.  Returns the
        normalised latents (b, V, C, h, w).  ``schedule``: noise levels (default: the config's).  What
        :meth:`step_latents` and NeuralDROID's step call.

        With object state the frame's objects are denoised with it from ``object_noise`` (b, K, 7; None: zeros,
        the noise's mean) and kept in ``state`` (:meth:`object_poses`)."""
        r = torch.arange(state.batch_size) if rows is None else torch.as_tensor(rows, dtype=torch.long).reshape(-1)
        missing = r[~state.has_pending[r]]
        if missing.numel():
            raise RuntimeError(f"rows {missing.tolist()} have no context frame; call reset() for them first")
        cond = self._cond(cond, r.numel())
        if rows is None:
            pending, pending_cond, pending_objects = state.pending, state.pending_cond, state.pending_objects
        else:
            rd = r.to(state.pending.device)
            pending, pending_cond = state.pending[rd], state.pending_cond[rd]
            pending_objects = None if state.pending_objects is None else state.pending_objects[rd]
        schedule = self.config.schedule if schedule is None else schedule
        if pending_objects is not None and object_noise is None:
            object_noise = torch.zeros_like(pending_objects)
        self._no_objects_unless_carried(object_noise)
        x = sample_frame_with_pending(self.dit, noise.to(self.device), schedule, cond, state.cache,
                                      pending, pending_cond, rows=None if rows is None else r,
                                      object_noise=None if object_noise is None else object_noise.to(self.device),
                                      pending_objects=pending_objects)
        x, objects = x if isinstance(x, tuple) else (x, None)
        if rows is None:
            state.pending.copy_(x)
            state.pending_cond.copy_(cond)
        else:
            state.pending[rd] = x
            state.pending_cond[rd] = cond
        if objects is not None:
            state.pending_objects[slice(None) if rows is None else rd] = objects
        return x

    @torch.inference_mode()
    def observe(self, state: WorldModelState, latents: torch.Tensor, cond: torch.Tensor,
                rows: torch.Tensor | None = None, objects: torch.Tensor | None = None) -> None:
        """Teacher forcing: the next frame of ``rows`` (all if None) is *given*, not generated.

        Commits their pending frames into the cache (one DiT pass at t = 0) and makes ``latents`` (b, V, C, h, w),
        normalised (:meth:`encode`), with ``cond`` (b, 7) their new pending frames, exactly where :meth:`generate`
        would have put a generated frame.  So a rollout can start from several true context frames (the dynamics
        benchmark), and observing the frames a rollout generated reproduces that rollout's state.  ``objects``: with
        object state, the given frame's object poses (b, K, 7) (None: read from ``latents`` by the object reader)."""
        self._no_objects_unless_carried(objects)
        r = torch.arange(state.batch_size) if rows is None else torch.as_tensor(rows, dtype=torch.long).reshape(-1)
        missing = r[~state.has_pending[r]]
        if missing.numel():
            raise RuntimeError(f"rows {missing.tolist()} have no context frame; call reset() for them first")
        cfg = self.config.dit
        want = (r.numel(), cfg.num_views, cfg.latent_channels, cfg.latent_size, cfg.latent_size)
        if tuple(latents.shape) != want:
            raise ValueError(f"latents must be {want} (rows, V, C, h, w), got {tuple(latents.shape)}")
        cond = self._cond(cond, r.numel())
        rd = r.to(state.pending.device)
        context = self.dit.read_cache(state.cache, None if rows is None else r)
        pending_objects = None if state.pending_objects is None else state.pending_objects[rd]
        self.dit.commit(state.pending[rd], state.pending_cond[rd], context, state.cache, objects=pending_objects)
        state.pending[rd] = latents.to(state.pending.device, state.pending.dtype)
        state.pending_cond[rd] = cond
        if state.pending_objects is not None:
            state.pending_objects[rd] = self._objects_of(objects, latents.to(self.device))

    @torch.inference_mode()
    def step(self, state: WorldModelState, cond: torch.Tensor,
             generator: torch.Generator | None = None) -> torch.Tensor:
        """Generate the next time step of every row: uint8 views (B, V, H, W, 3)."""
        return self.decode(self.step_latents(state, cond, generator), state.reference())

    # ------------------------------------------------------------------ parts
    @torch.no_grad()
    def take_decoder_from(self, donor: "WorldModel") -> "WorldModel":
        """Copy ``donor``'s decoder (what ``--stage decoder`` trains) into this model, in place.

        For combining a DiT trained further with a decoder trained separately: both must share the
        encoder and latent normalisation bit for bit, or the DiT's latents would mean something else to
        the decoder (:class:`CheckpointError` otherwise).  The donor's ``decoder`` stages are appended
        to this model's recipe.  Returns ``self``.
        """
        from .latents import autoencoder_fingerprint

        if donor.config.autoencoder.encoder_fields() != self.config.autoencoder.encoder_fields():
            raise CheckpointError(f"autoencoder configs differ: {donor.config.autoencoder} vs "
                                  f"{self.config.autoencoder}")
        size = self.config.autoencoder.image_size
        same_stats = torch.equal(donor.latent_mean.cpu(), self.latent_mean.cpu()) and torch.equal(
            donor.latent_std.cpu(), self.latent_std.cpu())
        if autoencoder_fingerprint(donor.autoencoder, size) != autoencoder_fingerprint(self.autoencoder, size) \
                or not same_stats:
            raise CheckpointError("the decoder donor has a different encoder or latent normalisation; its decoder "
                                  "would not understand this model's latents")
        if donor.config.autoencoder.decoder_depth != self.config.autoencoder.decoder_depth:
            self.autoencoder.set_decoder_depth(donor.config.autoencoder.decoder_layers_per_block)
        if donor.config.autoencoder.reference_head_channels != self.config.autoencoder.reference_head_channels:
            self.autoencoder.set_reference_head(donor.config.autoencoder.reference_head_channels)
        own = self.state_dict()
        for name, t in donor.state_dict().items():
            if name.startswith(DECODER_PREFIXES):
                own[name].copy_(t)
        # the decoder's history is now the donor's: this model's own decoder stages no longer apply
        stages = [st for st in donor.config.recipe.get("stages", []) if st.get("stage") == "decoder"]
        own_stages = [st for st in self.config.recipe.get("stages", []) if st.get("stage") != "decoder"]
        counts = {k: v for k, v in donor.config.recipe.items() if k.startswith("decoder_")}  # steps done
        self.config.recipe = {**self.config.recipe, **counts, "stages": own_stages + stages}
        return self

    def set_scene(self, scene: str) -> None:
        """Make this a model of SimDROID scene ``scene`` (``config.scene``).  A grounded DiT whose cameras are its
        former scene's (``geometry["scene"]``) takes the new scene's; cameras given otherwise are kept."""
        from .grounding import scene_geometry

        geometry = self.config.dit.geometry
        if geometry is not None and geometry.get("scene") == self.config.scene and scene != self.config.scene:
            self.dit.set_geometry(scene_geometry(scene))
            self.config.dit.geometry = self.dit.config.geometry
        self.config.scene = scene

    @torch.no_grad()
    def with_decoder_layers(self, layers_per_block: int) -> "WorldModel":
        """A copy of this model whose decoder has ``layers_per_block + 1`` ResNets per up block.

        Fewer (e.g. 0 from the default 1): each up block keeps its first ResNet, the one that changes the
        channel count, and drops the later ones.  They are residual, so the pruned decoder stays close
        to the original and a short ``neuralsim train --stage decoder`` run recovers the quality.  More:
        the added ResNets start as the identity (output convolution zeroed).  The encoder, the latent
        statistics and the DiT are copied bit for bit, so the DiT's latents keep their meaning.
        """
        layers_per_block = int(layers_per_block)
        cfg = WorldModelConfig.from_dict(self.config.to_dict())
        cfg.autoencoder = dataclasses.replace(cfg.autoencoder, decoder_layers_per_block=layers_per_block)
        new = type(self)(cfg).to(self.device)
        old = self.state_dict()
        kept = self.config.autoencoder.decoder_depth + 1  # ResNets per up block in this model
        for name, t in new.state_dict().items():
            if name in old:
                if old[name].shape != t.shape:
                    raise CheckpointError(f"{name}: shape {tuple(old[name].shape)} cannot become {tuple(t.shape)}")
                t.copy_(old[name])
                continue
            match = _UP_RESNET.match(name)
            if match is None or int(match.group(1)) < kept:
                raise CheckpointError(f"{name} has no counterpart in the source model")
            if match.group(2) == "conv2":  # a new residual branch that adds nothing yet
                t.zero_()
        return new.eval()

    # ------------------------------------------------------------------ checkpoints
    def save_pretrained(self, directory: str | os.PathLike, dtype: torch.dtype | None = None) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory`` (atomically per file).

        The weights file's metadata holds the format tag, the config's hash and the weights' content hash
        (:func:`weights_digest`), all checked by :meth:`from_pretrained` and ``neuralsim model info``.

        ``dtype`` (e.g. ``torch.float16``) stores the floating-point tensors at that precision, halving the
        file; :meth:`from_pretrained` casts them back to the model's float32.  Default: exact float32.
        """
        from safetensors.torch import save_file

        if dtype is not None and not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point dtype (e.g. torch.float16), got {dtype}")
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        cfg_json = self.config.to_json()
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in self.state_dict().items()}
        if dtype is not None:
            tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}
        meta = {"format": FORMAT_TAG, "config_sha256": config_digest(cfg_json),
                WEIGHTS_HASH_KEY: weights_digest(tensors)}
        tmp_w, tmp_c = d / (WEIGHTS_NAME + ".tmp"), d / (CONFIG_NAME + ".tmp")
        save_file(tensors, str(tmp_w), metadata=meta)
        tmp_c.write_text(cfg_json)
        os.replace(tmp_w, d / WEIGHTS_NAME)
        os.replace(tmp_c, d / CONFIG_NAME)
        return d

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, device: torch.device | str = "cpu") -> "WorldModel":
        """Load a directory written by :meth:`save_pretrained`; raises :class:`CheckpointError` if anything is off
        (missing or unreadable files, another config, NaN/inf weights, weights that differ from their saved hash)."""
        cfg_path, w_path, cfg_json, config = read_checkpoint_config(directory)
        tensors, meta = load_safetensors(w_path)
        if meta.get("format") != FORMAT_TAG:
            raise CheckpointError(f"{w_path} is not a neuralsim world model (format tag {meta.get('format')!r})")
        if meta.get("config_sha256") != config_digest(cfg_json):
            raise CheckpointError(f"{w_path} was written with a different config than {cfg_path} (config hash "
                                  f"mismatch); do not mix files of different checkpoints")
        check_weights(tensors, meta, str(w_path))
        model = cls(config)
        load_state_strict(model, tensors, str(w_path))
        return model.to(device).eval()


def read_checkpoint_config(directory: str | os.PathLike) -> tuple[Path, Path, str, WorldModelConfig]:
    """The config and weights paths, the config's text and the parsed config of a checkpoint directory.

    Raises :class:`CheckpointError` if either file is missing or the config is invalid; reads no weights.
    """
    d = Path(directory)
    cfg_path, w_path = d / CONFIG_NAME, d / WEIGHTS_NAME
    for p in (cfg_path, w_path):
        if not p.is_file():
            raise CheckpointError(f"world model checkpoint {d} has no {p.name} (expected {CONFIG_NAME} and "
                                  f"{WEIGHTS_NAME})")
    cfg_json = cfg_path.read_text()
    try:
        config = WorldModelConfig.from_dict(json.loads(cfg_json))
    except (json.JSONDecodeError, TypeError, ValueError) as e:
        raise CheckpointError(f"invalid world model config {cfg_path}: {e}") from e
    return cfg_path, w_path, cfg_json, config


def load_safetensors(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read tensors and metadata of a safetensors file; CheckpointError if it is corrupt."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises SafetensorError / OSError / ValueError on bad files
        raise CheckpointError(f"cannot read {path}: corrupt or not a safetensors file ({e})") from e
    return tensors, meta


def load_state_strict(module: nn.Module, tensors: dict[str, torch.Tensor], where: str) -> None:
    """Load ``tensors`` into ``module`` requiring identical names, shapes and dtypes.

    A floating-point tensor stored at another floating-point precision (a float16 checkpoint) is cast to
    the module's dtype; any other dtype difference is refused.
    """
    own = module.state_dict()
    tensors = {k: t.to(own[k].dtype) if k in own and t.is_floating_point() and own[k].is_floating_point()
               and t.dtype != own[k].dtype else t for k, t in tensors.items()}
    missing, unexpected = sorted(set(own) - set(tensors)), sorted(set(tensors) - set(own))
    if missing or unexpected:
        raise CheckpointError(f"{where} does not match the model: missing "
                              f"{missing[:5]}{'...' if len(missing) > 5 else ''}, unexpected "
                              f"{unexpected[:5]}{'...' if len(unexpected) > 5 else ''}")
    bad = [(k, tuple(tensors[k].shape), tuple(v.shape)) for k, v in own.items()
           if tensors[k].shape != v.shape or tensors[k].dtype != v.dtype]
    if bad:
        raise CheckpointError(f"{where}: tensor shapes/dtypes do not match the config, e.g. {bad[:3]} "
                              f"(name, file shape, model shape)")
    module.load_state_dict(tensors, strict=True)
