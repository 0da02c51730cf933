"""Step Forcing with ``self_rollout``: frames 1..K of a clip become the model's own rollout, as in the env."""

from __future__ import annotations

import json

import pytest
import torch

from neuralsim.world_model.model import WorldModel
from neuralsim.world_model.objectives import step_forcing_loss
from neuralsim.world_model.sampler import rollout_latents, sample_noise
from neuralsim.world_model.train import train

from .conftest import conds, latents
from .test_train import _cfg as train_cfg


def test_rollout_latents_are_the_frames_the_env_path_generates(tiny_model):
    """The training rollout (a fresh cache, frame 0 committed, then sample_frame) gives the frames that
    WorldModel.reset_latents + generate (NeuralDROID's path, with its fused pending commit) give from the same noise."""
    cfg = tiny_model.config
    b, k = 2, 4
    first, cond = latents(cfg, b), conds(b, k + 1)
    own = rollout_latents(tiny_model.dit, first, cond, cfg.schedule, torch.Generator().manual_seed(5))
    assert own.shape == (b, k, *first.shape[1:])

    g = torch.Generator().manual_seed(5)
    state = tiny_model.new_state(b, window=k + 1)
    tiny_model.reset_latents(state, None, first, cond[:, 0])
    env = [tiny_model.generate(state, sample_noise(first.shape, g, "cpu"), cond[:, j]) for j in range(1, k + 1)]
    assert torch.allclose(own, torch.stack(env, dim=1), atol=1e-4, rtol=1e-4)
    # each frame is new (not the context copied on) and depends on its noise
    assert not torch.allclose(own[:, 0], own[:, 1])
    other = rollout_latents(tiny_model.dit, first, cond, cfg.schedule, torch.Generator().manual_seed(6))
    assert not torch.allclose(own, other)
    with pytest.raises(ValueError, match="cond must be"):
        rollout_latents(tiny_model.dit, first, cond[:, :1], cfg.schedule)


def _drawn_rollout(dit, cfg, x, a, rollout, want_rolled):
    """The first seed whose batch draws a rollout of ``want_rolled`` frames (0 or > 0), its loss and metrics."""
    for seed in range(50):
        loss, m = step_forcing_loss(dit, x, a, cfg.schedule, torch.Generator().manual_seed(seed), self_rollout=rollout)
        if (int(m["rollout_frames"]) > 0) == want_rolled:
            return seed, loss, m
    raise AssertionError("no seed drew the wanted rollout length")


def test_rolled_out_frames_replace_the_true_ones_as_context(tiny_model):
    dit, cfg = tiny_model.dit, tiny_model.config
    B, T, R = 2, 6, 3
    x, a = latents(cfg, B, T), conds(B, T)
    seed, loss, m = _drawn_rollout(dit, cfg, x, a, R, want_rolled=True)
    rolled = int(m["rollout_frames"])
    assert 1 <= rolled <= R
    # frames 1..K are the model's own: what the data holds there does not change the loss ...
    y = x.clone()
    y[:, 1:rolled + 1] += 3.0
    again, _ = step_forcing_loss(dit, y, a, cfg.schedule, torch.Generator().manual_seed(seed), self_rollout=R)
    assert torch.equal(loss, again)
    # ... while the frames after them are trained, and frame 0 seeds the rollout
    for lo, hi in ((rolled + 1, T), (0, 1)):
        z = x.clone()
        z[:, lo:hi] += 3.0
        moved, _ = step_forcing_loss(dit, z, a, cfg.schedule, torch.Generator().manual_seed(seed), self_rollout=R)
        assert not torch.allclose(loss, moved)
    # the loss's gradient reaches the weights through the trained frames' pass (the rollout has none)
    grads = torch.autograd.grad(loss, list(dit.parameters()), allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in grads)


def test_a_batch_drawn_without_rollout_is_plain_step_forcing(tiny_model):
    """K = 0 leaves the objective as it was, and self_rollout = 0 draws exactly what it always drew."""
    dit, cfg = tiny_model.dit, tiny_model.config
    B, T = 2, 6
    x, a = latents(cfg, B, T), conds(B, T)
    seed, loss, m = _drawn_rollout(dit, cfg, x, a, 2, want_rolled=False)
    plain, pm = step_forcing_loss(dit, x, a, cfg.schedule, torch.Generator().manual_seed(seed))
    assert torch.equal(loss, plain) and "rollout_frames" not in pm
    with pytest.raises(ValueError, match="self_rollout must be in"):
        step_forcing_loss(dit, x, a, cfg.schedule, torch.Generator().manual_seed(0), self_rollout=T - 1)


def _cfg(out, **kw):
    return train_cfg(out, **{"steps": 4, "checkpoint_every": 2, **kw})


def test_trainer_runs_self_rollout_records_it_and_refuses_misuse(tmp_path):
    out = tmp_path / "run"
    train(_cfg(out, self_rollout=3))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    drawn = [r["rollout_frames"] for r in rows if "rollout_frames" in r]
    assert len(drawn) == 4 and all(0 <= k <= 3 for k in drawn)
    assert WorldModel.from_pretrained(out / "model").config.recipe["stages"][-1]["self_rollout"] == 3
    with pytest.raises(ValueError, match="refusing to resume it with 2"):
        train(_cfg(out, steps=6, self_rollout=2))
    with pytest.raises(ValueError, match="needs --stage dit and a step_forcing objective"):
        train(_cfg(tmp_path / "df", objective="diffusion_forcing", self_rollout=2))
    with pytest.raises(ValueError, match="a number of frames"):
        train(_cfg(tmp_path / "neg", self_rollout=-1))
    with pytest.raises(ValueError, match="leaves no frame to train"):
        train(_cfg(tmp_path / "long", self_rollout=99))
