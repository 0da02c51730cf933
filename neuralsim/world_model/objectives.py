"""Training objectives for the causal DiT: Diffusion Forcing and Step Forcing (RoboWorld, Algorithm 1).

Shared conventions: ``x`` are clean normalised latents (B, T, V, C, h, w); frame 0 is the clean context
frame (noise level 0, never noised, not in the loss); frames 1..T-1 (N = T - 1 of them) are trained.
``cond`` (B, T, 7) is the per-frame conditioning vector (a^i in the paper).  Rectified flow:
``x_t = t * eps + (1 - t) * x``, the network predicts ``v = eps - x``.  ``||.||^2`` of the paper is
taken as a mean over elements (a constant factor).  Random numbers are drawn from ``generator`` in a
fixed order documented per objective, so fixed seeds give fixed losses.  Each objective returns
``(loss, metrics)``; the metrics are detached 0-dim tensors on the loss's device, read by the trainer
only when it writes a log line (a read makes the host wait for a GPU).  Besides ``loss`` they hold
``loss_view<i>``, the same mean over view ``i``'s elements alone (views in the data's order, e.g.
:data:`neuralsim.episode.VIEW_NAMES`): which camera the error comes from, and ``loss_ch<c>``, the mean
over latent channel ``c``'s elements alone: which channel it comes from.

Object state (a DiT with ``num_objects`` K > 0): ``objects`` (B, T, K, 7) are the clips' normalised object states.
Each frame's objects take the frame's noise level and their own noise (drawn after every other draw, so a run without
objects draws what it always did), run through the same passes, and the loss becomes
``image loss + object_loss_weight * object loss`` (the same error on the objects); the metrics then also hold
``loss_image`` and ``loss_object`` (``loss`` is the sum optimised).  :func:`object_reader_loss` is the object
reader's auxiliary loss, which the DiT stage adds.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from .sampler import euler_step

Objective = Callable[..., tuple[torch.Tensor, dict]]


def _noisy(x: torch.Tensor, eps: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """x_t = t * eps + (1 - t) * x with per-frame t (B, N) broadcast over (B, N, ...) (latents or objects)."""
    tt = t.reshape(*t.shape, *([1] * (x.ndim - t.ndim)))
    return tt * eps + (1 - tt) * x


def _velocities(model, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, objects: torch.Tensor | None):
    """(latent velocity, object velocity or None) of the model on a clip, with or without object states."""
    if objects is None:
        return model(x, t, cond), None
    return model(x, t, cond, objects=objects)


def _with_object_loss(loss: torch.Tensor, metrics: dict, object_err: torch.Tensor | None,
                      weight: float) -> tuple[torch.Tensor, dict]:
    """The image loss and metrics as they are, or with object state ``image + weight * object`` and both logged."""
    if object_err is None:
        return loss, metrics
    object_loss = object_err.mean()
    total = loss + weight * object_loss
    return total, {**metrics, "loss": total.detach(), "loss_image": loss.detach(), "loss_object": object_loss.detach()}


def object_reader_loss(reader, latents: torch.Tensor, objects: torch.Tensor) -> torch.Tensor:
    """The object reader's loss on clean frames: latents (B, V, C, h, w), normalised object states (B, K, 7).

    Mean squared error under the best assignment of the reader's K outputs to the K objects, per frame (the minimum
    over the K! permutations): which slot an object has in the data (SimDROID: the task's target first) is not in the
    pixels, only where the objects are.
    """
    import itertools

    pred = reader(latents).float()  # (B, K, 7)
    k = objects.shape[1]
    errs = torch.stack([(pred - objects[:, list(p)]).pow(2).mean(dim=(1, 2)) for p in itertools.permutations(range(k))])
    return errs.min(dim=0).values.mean()


def _with_context(context: torch.Tensor, frames: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's input: clean context frames (B, K, ...) before ``frames`` (B, N, ...), and their noise levels:
    0 for the context, ``t`` (B, N) for the frames."""
    return torch.cat([context, frames], dim=1), torch.cat([t.new_zeros(t.shape[0], context.shape[1]), t], dim=1)


def diffusion_forcing_loss(model, x: torch.Tensor, cond: torch.Tensor, schedule: Sequence[float],
                           generator: torch.Generator | None = None, discrete: bool = False,
                           objects: torch.Tensor | None = None,
                           object_loss_weight: float = 1.0) -> tuple[torch.Tensor, dict]:
    """Diffusion Forcing: independent per-frame noise, one causal forward, velocity MSE.

    Draws: t (B, N) -- ``U(0.001, 0.999)`` or, if ``discrete``, ``t_k`` with k ~ U{1..S}; then eps; with
    ``objects``, then the objects' eps.
    """
    b, n = x.shape[0], x.shape[1] - 1
    dev = x.device
    if discrete:
        sched = torch.tensor([float(s) for s in schedule], device=dev)
        k = torch.randint(1, len(sched) + 1, (b, n), generator=generator, device=_gdev(generator)).to(dev)
        t = sched[k - 1]
    else:
        t = (torch.rand((b, n), generator=generator, device=_gdev(generator)) * 0.998 + 0.001).to(dev)
    eps = torch.randn(x[:, 1:].shape, generator=generator, device=_gdev(generator)).to(dev)
    x_t = _noisy(x[:, 1:], eps, t)
    o_in = eps_o = None
    if objects is not None:
        eps_o = torch.randn(objects[:, 1:].shape, generator=generator, device=_gdev(generator)).to(dev)
        o_in = torch.cat([objects[:, :1], _noisy(objects[:, 1:], eps_o, t)], dim=1)
    v, vo = _velocities(model, *_with_context(x[:, :1], x_t, t), cond, o_in)
    err = (v[:, 1:].float() - (eps - x[:, 1:])).pow(2)
    loss = err.mean()
    object_err = None if objects is None else (vo[:, 1:].float() - (eps_o - objects[:, 1:])).pow(2)
    return _with_object_loss(loss, {"loss": loss.detach(), **_error_breakdown(err)}, object_err, object_loss_weight)


def step_forcing_loss(model, x: torch.Tensor, cond: torch.Tensor, schedule: Sequence[float],
                      generator: torch.Generator | None = None, anchor_prob: float = 0.5,
                      objects: torch.Tensor | None = None,
                      object_loss_weight: float = 1.0) -> tuple[torch.Tensor, dict]:
    """Step Forcing, Algorithm 1 of RoboWorld, with all frames in parallel.

    Draws, in order: k (B, N) ~ U{1..S}; eps (B, N, ...) ~ N(0, I); u (B, N) ~ U[0, 1), anchor = u < p; with
    ``objects``, then the objects' eps (B, N, K, 7), which go through steps 1-6 beside the latents.

    1. ``x_k = t_k eps + (1 - t_k) x``                                       (line 4, noisy frames)
    2. ``v1 = sg[v(x_k, t_k, h)]``, h = [x^0 clean, x_k of earlier frames]   (lines 5, 8; no grad)
    3. ``dt = 0`` if anchor else ``t_k - t_{k-1}``; ``t~ = t_k - dt``        (lines 6, 7)
    4. ``x_prior = x_k - dt * v1``                                           (line 8, self-forwarded prior)
    5. ``v2 = v(x_prior, t~, h^)``, h^ = [x^0, x_prior of earlier frames]      (lines 9, 10)
    6. ``x_hat = x_prior - t~ * v2``; loss = mean ||x - x_hat||^2            (lines 10, 11)

    ``anchor_prob = 1`` is the "no self-forward" ablation (it skips pass 2: every prior is the noisy
    ground truth); ``anchor_prob = 0`` is the "no anchor" ablation.
    """
    if not 0.0 <= anchor_prob <= 1.0:
        raise ValueError(f"anchor_prob must be in [0, 1], got {anchor_prob}")
    b, n = x.shape[0], x.shape[1] - 1
    dev, gdev = x.device, _gdev(generator)
    ts = torch.tensor([0.0] + [float(s) for s in schedule], device=dev)  # t_0 = 0, t_1..t_S
    k = torch.randint(1, len(ts), (b, n), generator=generator, device=gdev).to(dev)
    eps = torch.randn(x[:, 1:].shape, generator=generator, device=gdev).to(dev)
    anchor = (torch.rand((b, n), generator=generator, device=gdev) < anchor_prob).to(dev)
    context, target = x[:, :1], x[:, 1:]
    o_k = None
    if objects is not None:
        eps_o = torch.randn(objects[:, 1:].shape, generator=generator, device=gdev).to(dev)
        o_k = _noisy(objects[:, 1:], eps_o, ts[k])

    def with_objects(frames):  # the clip's objects: the context's clean, then ``frames`` (None without objects)
        return None if objects is None else torch.cat([objects[:, :1], frames], dim=1)

    t_k = ts[k]  # (B, N)
    x_k = _noisy(target, eps, t_k)
    dt = torch.where(anchor, torch.zeros_like(t_k), t_k - ts[k - 1])
    t_prior = t_k - dt
    first = context.shape[1]
    o_prior = o_k
    if anchor_prob < 1.0:
        with torch.no_grad():
            v1, vo1 = _velocities(model, *_with_context(context, x_k, t_k), cond, with_objects(o_k))
        x_prior = euler_step(x_k, v1[:, first:].float(), dt, 0.0)  # x_k - dt * v1
        if objects is not None:
            o_prior = euler_step(o_k, vo1[:, first:].float(), dt, 0.0)
    else:
        x_prior = x_k
    v2, vo2 = _velocities(model, *_with_context(context, x_prior, t_prior), cond, with_objects(o_prior))
    x_hat = euler_step(x_prior, v2[:, first:].float(), t_prior, 0.0)  # x_prior - t~ * v2
    err = (target - x_hat).pow(2)
    loss = err.mean()
    object_err = None
    if objects is not None:
        object_err = (objects[:, 1:] - euler_step(o_prior, vo2[:, first:].float(), t_prior, 0.0)).pow(2)
    metrics = {"loss": loss.detach(), "anchor_frac": anchor.float().mean(), **_error_breakdown(err)}
    return _with_object_loss(loss, metrics, object_err, object_loss_weight)


def _error_breakdown(err: torch.Tensor) -> dict:
    """``loss_view<i>`` and ``loss_ch<c>``: the mean of squared errors ``err`` (B, N, V, C, h, w) over
    view i's elements and over latent channel c's elements."""
    err = err.detach()
    per_view = err.mean(dim=(0, 1, 3, 4, 5))
    per_channel = err.mean(dim=(0, 1, 2, 4, 5))
    return {
        **{f"loss_view{i}": per_view[i] for i in range(per_view.shape[0])},
        **{f"loss_ch{c}": per_channel[c] for c in range(per_channel.shape[0])},
    }


def _gdev(generator: torch.Generator | None) -> torch.device:
    return generator.device if generator is not None else torch.device("cpu")


#: Objective name -> (function, keyword arguments).
OBJECTIVES: dict[str, tuple[Objective, dict]] = {
    "diffusion_forcing": (diffusion_forcing_loss, {"discrete": False}),
    "diffusion_forcing_discrete": (diffusion_forcing_loss, {"discrete": True}),
    "step_forcing": (step_forcing_loss, {"anchor_prob": 0.5}),
    "step_forcing_no_anchor": (step_forcing_loss, {"anchor_prob": 0.0}),
    "step_forcing_no_selfforward": (step_forcing_loss, {"anchor_prob": 1.0}),
}


def get_objective(name: str) -> tuple[Objective, dict]:
    """(loss function, its fixed keyword arguments) for an objective name."""
    try:
        return OBJECTIVES[name]
    except KeyError:
        raise ValueError(f"unknown objective {name!r}; choose one of {sorted(OBJECTIVES)}") from None
