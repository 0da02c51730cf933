"""Step Forcing against a frame-by-frame transcription of Algorithm 1 (RoboWorld), and its ablations."""

from __future__ import annotations

import pytest
import torch

from neuralsim.world_model.objectives import OBJECTIVES, diffusion_forcing_loss, get_objective, step_forcing_loss

from .conftest import conds, latents


def _draws(cfg, B, N, p, seed):
    """The objective's random draws, in its documented order: k, eps, anchor."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(1, len(cfg.schedule) + 1, (B, N), generator=g)
    d = cfg.dit
    eps = torch.randn(B, N, d.num_views, d.latent_channels, d.latent_size, d.latent_size, generator=g)
    anchor = torch.rand((B, N), generator=g) < p
    return k, eps, anchor


def algorithm1(dit, x, a, schedule, k, eps, anchor):
    """Direct transcription of Algorithm 1, one frame i = 1..N at a time (frame 0 = clean context).

    v_theta(x_i, t_i, h_i, a_i) is the DiT's output for the last frame of the sequence [x^0, h^i, x_i].
    """
    ts = [0.0] + list(schedule)
    B, N = k.shape
    x0 = x[:, :1]

    def v_theta(frame, t, context, context_t, i):
        seq = torch.cat([x0, context, frame[:, None]], dim=1)
        tt = torch.cat([torch.zeros(B, 1), context_t, t[:, None]], dim=1)
        return dit(seq, tt, a[:, : i + 1])[:, -1]

    def bc(v):  # (B,) -> (B, 1, 1, 1, 1)
        return v[:, None, None, None, None]

    t_k = torch.tensor([[ts[int(k[b, i])] for i in range(N)] for b in range(B)])
    t_km1 = torch.tensor([[ts[int(k[b, i]) - 1] for i in range(N)] for b in range(B)])
    x_noisy = [bc(t_k[:, i]) * eps[:, i] + (1 - bc(t_k[:, i])) * x[:, i + 1] for i in range(N)]  # line 4
    priors, t_tilde = [], []
    for i in range(N):
        h = torch.stack(x_noisy[:i], 1) if i else x0[:, :0]  # line 5
        dt = torch.where(anchor[:, i], torch.zeros(B), t_k[:, i] - t_km1[:, i])  # line 6
        t_tilde.append(t_k[:, i] - dt)  # line 7
        with torch.no_grad():  # sg[.]
            v = v_theta(x_noisy[i], t_k[:, i], h, t_k[:, :i], i + 1)
        priors.append(x_noisy[i] - bc(dt) * v)  # line 8
    losses = []
    for i in range(N):
        h_hat = torch.stack(priors[:i], 1) if i else x0[:, :0]  # line 9
        ctx_t = torch.stack(t_tilde[:i], 1) if i else torch.zeros(B, 0)
        x_hat = priors[i] - bc(t_tilde[i]) * v_theta(priors[i], t_tilde[i], h_hat, ctx_t, i + 1)  # line 10
        losses.append((x[:, i + 1] - x_hat).pow(2).mean())  # line 11
    return torch.stack(losses).mean()


@pytest.mark.parametrize("p", [0.5, 0.0, 1.0])
def test_step_forcing_equals_algorithm_1(tiny_model, p):
    dit, cfg = tiny_model.dit, tiny_model.config
    B, T = 2, 5
    x, a = latents(cfg, B, T), conds(B, T)
    loss, _ = step_forcing_loss(dit, x, a, cfg.schedule, torch.Generator().manual_seed(7), anchor_prob=p)
    k, eps, anchor = _draws(cfg, B, T - 1, p, 7)
    if p == 0.5:
        assert anchor.any() and (~anchor).any()
    ref = algorithm1(dit, x, a, cfg.schedule, k, eps, anchor)
    assert torch.allclose(loss, ref, rtol=1e-5, atol=1e-6), (float(loss), float(ref))
    # same gradients: nothing flows through the self-forward pass
    g1 = torch.autograd.grad(loss, list(dit.parameters()))
    g2 = torch.autograd.grad(ref, list(dit.parameters()))
    for a1, a2 in zip(g1, g2):
        assert torch.allclose(a1, a2, rtol=1e-4, atol=1e-6)


class _Spy(torch.nn.Module):
    def __init__(self, dit):
        super().__init__()
        self.dit, self.calls = dit, []

    def forward(self, x, t, cond):
        self.calls.append({"grad": torch.is_grad_enabled(), "x": x.detach().clone(), "t": t.clone()})
        return self.dit(x, t, cond)


def test_self_forward_pass_has_no_gradient(tiny_model):
    cfg = tiny_model.config
    spy = _Spy(tiny_model.dit)
    loss, _ = step_forcing_loss(spy, latents(cfg, 2, 5), conds(2, 5), cfg.schedule, torch.Generator().manual_seed(1),
                                anchor_prob=0.0)
    assert [c["grad"] for c in spy.calls] == [False, True]
    loss.backward()


def test_p1_reduces_to_denoising_noisy_ground_truth(tiny_model):
    dit, cfg = tiny_model.dit, tiny_model.config
    B, T = 2, 5
    x, a = latents(cfg, B, T), conds(B, T)
    spy = _Spy(dit)
    loss, metrics = step_forcing_loss(spy, x, a, cfg.schedule, torch.Generator().manual_seed(3), anchor_prob=1.0)
    assert len(spy.calls) == 1  # no self-forward at all
    k, eps, _ = _draws(cfg, B, T - 1, 1.0, 3)
    t = torch.tensor([0.0] + list(cfg.schedule))[k]
    tt = t[..., None, None, None, None]
    x_k = tt * eps + (1 - tt) * x[:, 1:]
    assert torch.equal(spy.calls[0]["x"][:, 1:], x_k) and torch.equal(spy.calls[0]["x"][:, 0], x[:, 0])
    v = dit(torch.cat([x[:, :1], x_k], 1), torch.cat([torch.zeros(B, 1), t], 1), a)[:, 1:]
    err = (x[:, 1:] - (x_k - tt * v)).pow(2)
    assert torch.allclose(loss, err.mean(), rtol=1e-6)
    # the per-view metrics: the same error, averaged over one camera's elements
    views = cfg.dit.num_views
    assert sorted(k for k in metrics if k.startswith("loss_view")) == [f"loss_view{i}" for i in range(views)]
    for i in range(views):
        assert torch.allclose(metrics[f"loss_view{i}"], err[:, :, i].mean(), rtol=1e-6)
    assert len({float(metrics[f"loss_view{i}"]) for i in range(views)}) == views
    # and per latent channel: which channel the error comes from
    channels = err.shape[3]
    assert sorted(k for k in metrics if k.startswith("loss_ch")) == sorted(f"loss_ch{c}" for c in range(channels))
    for c in range(channels):
        assert torch.allclose(metrics[f"loss_ch{c}"], err[:, :, :, c].mean(), rtol=1e-6)


def test_diffusion_forcing_losses_and_registry(tiny_model):
    cfg = tiny_model.config
    for name in OBJECTIVES:
        fn, kw = get_objective(name)
        loss, m = fn(tiny_model.dit, latents(cfg, 2, 4), conds(2, 4), cfg.schedule, torch.Generator().manual_seed(0),
                     **kw)
        assert torch.isfinite(loss) and m["loss"] > 0
        per_view = torch.stack([m[f"loss_view{i}"] for i in range(cfg.dit.num_views)])
        assert torch.allclose(per_view.mean(), m["loss"], rtol=1e-5)  # views are equal in size
        per_channel = torch.stack([m[f"loss_ch{c}"] for c in range(cfg.autoencoder.latent_channels)])
        assert torch.allclose(per_channel.mean(), m["loss"], rtol=1e-5)  # and so are channels
    spy = _Spy(tiny_model.dit)
    diffusion_forcing_loss(spy, latents(cfg, 2, 4), conds(2, 4), cfg.schedule, torch.Generator().manual_seed(0),
                           discrete=True)
    t = spy.calls[0]["t"]
    assert (t[:, 0] == 0).all() and set(t[:, 1:].flatten().tolist()) <= set(cfg.schedule)
    with pytest.raises(ValueError, match="unknown objective"):
        get_objective("self_forcing")
