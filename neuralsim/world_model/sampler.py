"""Rectified-flow sampler on the fixed discrete schedule (the one place the update lives).

Path: ``x_t = t * eps + (1 - t) * x`` with t = 1 pure noise and t = 0 clean; the network predicts the
velocity ``v = dx_t/dt = eps - x``.  Inference walks t_S = 1 -> t_{S-1} -> ... -> t_0 = 0 with Euler
steps (:func:`euler_step`), then commits the clean frame into the KV cache.  A DiT with object state denoises each
frame's objects jointly with its latents (same levels, same steps): give ``object_noise`` (b, K, 7) and get
``(latents, objects)`` back.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .dit import CausalDiT
from .kv_cache import KVCache, RowIndex


def euler_step(x_t: torch.Tensor, v: torch.Tensor, t_from: torch.Tensor | float,
               t_to: torch.Tensor | float) -> torch.Tensor:
    """One rectified-flow Euler step:  ``x_{t_to} = x_{t_from} - (t_from - t_to) * v``.

    ``t_from``/``t_to`` are floats or per-row tensors broadcast over the trailing dims of ``x_t``.
    With ``t_to = 0`` this is the clean prediction ``x_hat = x_t - t * v``.  Used by the sampler and by
    Step Forcing's self-forward (eq. 1) and clean prediction (Algorithm 1, lines 8 and 10).
    """
    dt = torch.as_tensor(t_from, dtype=x_t.dtype, device=x_t.device) - torch.as_tensor(
        t_to, dtype=x_t.dtype, device=x_t.device)
    while dt.ndim and dt.ndim < x_t.ndim:
        dt = dt[..., None]
    return x_t - dt * v


def sample_noise(shape: Sequence[int], generator: torch.Generator | None, device: torch.device | str,
                 dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal noise drawn on the generator's device, then moved to ``device``."""
    gen_device = generator.device if generator is not None else torch.device("cpu")
    return torch.randn(tuple(shape), generator=generator, device=gen_device, dtype=dtype).to(device)


def _euler_frame(x: torch.Tensor, objects: torch.Tensor | None, v, t_from: float, t_to: float):
    """:func:`euler_step` of a frame's latents and, with object state (``v`` a pair), its objects."""
    if objects is None:
        return euler_step(x, v, t_from, t_to), None
    return euler_step(x, v[0], t_from, t_to), euler_step(objects, v[1], t_from, t_to)


@torch.no_grad()
def sample_frame(model: CausalDiT, noise: torch.Tensor, schedule: Sequence[float], cond: torch.Tensor,
                 cache: KVCache, rows: RowIndex = None, commit: bool = True,
                 object_noise: torch.Tensor | None = None):
    """Generate one frame per row: S denoising passes reading ``cache``, then (optionally) commit it.

    Args:
        model: the DiT.
        noise: (b, V, C, h, w) standard normal, the frame at t = 1.
        schedule: t_1 < ... < t_S = 1 (t_0 = 0 implicit).
        cond: (b, 7) conditioning vector of the new frame.
        cache: the KV cache of the rows; read by every pass, written once by the commit pass.
        object_noise: with object state, the objects at t = 1 (b, K, 7); None without.
    Returns:
        the clean latent frame (b, V, C, h, w) (normalised latent space); with object state (latents, objects).
    """
    ts = [0.0] + [float(t) for t in schedule]
    context = model.read_cache(cache, rows)
    conditioning = model.frame_conditioning(ts, cond)  # entry k: noise level ts[k]; 0 is the commit pass's
    x, o = noise, object_noise
    for k in range(len(ts) - 1, 0, -1):
        t = torch.full((x.shape[0],), ts[k], device=x.device)
        v = model.denoise(x, t, cond, context, conditioning[k], objects=o)
        x, o = _euler_frame(x, o, v, ts[k], ts[k - 1])
    if commit:
        model.commit(x, cond, context, cache, conditioning[0], objects=o)
    return x if o is None else (x, o)


@torch.no_grad()
def sample_frame_with_pending(model: CausalDiT, noise: torch.Tensor, schedule: Sequence[float], cond: torch.Tensor,
                              cache: KVCache, pending: torch.Tensor, pending_cond: torch.Tensor,
                              rows: RowIndex = None, object_noise: torch.Tensor | None = None,
                              pending_objects: torch.Tensor | None = None):
    """:func:`sample_frame` for rows whose previous frame is still pending (generated, not yet committed).

    The first denoising pass also commits the pending frame (``pending`` (b, V, C, h, w) with its
    ``pending_cond`` (b, 7)) into ``cache`` (:meth:`CausalDiT.denoise_with_pending`); the new frame is
    *not* committed -- it becomes the caller's next pending frame.  Same frames as :func:`sample_frame`
    with ``commit=True`` (to float rounding) with one DiT pass fewer per frame.  With object state also the
    new frame's ``object_noise`` (b, K, 7) and the pending frame's ``pending_objects``; returns (latents, objects).
    """
    ts = [0.0] + [float(t) for t in schedule]
    context = model.read_cache(cache, rows, pending=True)
    # one conditioning product for every pass: entry 0 is the pending frame (t = 0, its own cond),
    # entry k the new frame at ts[k]
    conds = torch.cat([pending_cond[:, None], cond[:, None].expand(-1, len(ts) - 1, -1)], dim=1)
    conditioning = model.frame_conditioning(ts, conds)
    pending_conditioning = conditioning[0]
    x, o = noise, object_noise
    for k in range(len(ts) - 1, 0, -1):
        t = torch.full((x.shape[0],), ts[k], device=x.device)
        if k == len(ts) - 1:
            v = model.denoise_with_pending(x, t, cond, pending, pending_cond, context, cache, conditioning[k],
                                           pending_conditioning, objects=o, pending_objects=pending_objects)
        else:
            v = model.denoise(x, t, cond, context, conditioning[k], objects=o)
        x, o = _euler_frame(x, o, v, ts[k], ts[k - 1])
    return x if o is None else (x, o)
