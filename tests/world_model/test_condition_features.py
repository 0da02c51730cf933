"""What the DiT's condition MLP reads (``DiTConfig.condition_features``): raw metres by default (old configs load and
write as before), or the condition standardised by the training data's statistics, optionally with Fourier features;
the statistics are fitted by the first DiT stage, kept through save/load and through ``model edit``."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from neuralsim.world_model.config import DiTConfig, WorldModelConfig, preset
from neuralsim.world_model.dit import FOURIER_OCTAVES, ConditionEmbedding, featurise_condition
from neuralsim.world_model.model import WorldModel

from .conftest import conds, latents, randomise


def _model(features: str, seed: int = 0) -> WorldModel:
    cfg = preset("tiny")
    cfg.dit = dataclasses.replace(cfg.dit, condition_features=features)
    torch.manual_seed(seed)
    return WorldModel(WorldModelConfig.from_dict(cfg.to_dict())).eval()


def _poses(n: int, seed: int = 0) -> torch.Tensor:
    """SimDROID-like conditioning: the hand within ~10 cm of a point, moderate angles, a gripper in [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    xyz = torch.tensor([0.5, 0.0, 0.25]) + 0.08 * torch.randn(n, 3, generator=g)
    rot = torch.tensor([3.1, 0.0, 0.3]) + 0.2 * torch.randn(n, 3, generator=g)
    return torch.cat([xyz, rot, torch.rand(n, 1, generator=g)], dim=1)


def test_an_unknown_choice_is_refused_and_raw_configs_are_written_as_before():
    with pytest.raises(ValueError, match="condition_features"):
        DiTConfig(condition_features="metres")
    assert "condition_features" not in preset("tiny").to_dict()["dit"]
    assert _model("fourier").config.to_dict()["dit"]["condition_features"] == "fourier"


def test_standardised_features_make_a_centimetre_of_motion_visible():
    emb = ConditionEmbedding(8, "fourier")
    data = _poses(512)
    emb.set_stats(data)
    f = featurise_condition(data)
    assert torch.allclose(emb.mean, f.mean(0), atol=1e-5)
    z = emb.featurise(data)[:, :10]
    moving = f.std(0) > 0.05
    assert torch.allclose(z[:, moving].std(0), torch.ones(int(moving.sum())), atol=1e-3)
    assert emb.featurise(data).shape == (512, 10 * (1 + 2 * FOURIER_OCTAVES))
    moved = data.clone()
    moved[:, 0] += 0.01  # one centimetre along x
    raw_change = (featurise_condition(moved) - f).norm(dim=-1).mean()
    fourier_change = (emb.featurise(moved) - emb.featurise(data)).norm(dim=-1).mean()
    assert raw_change == pytest.approx(0.01, rel=1e-3)
    assert fourier_change > 30 * raw_change
    with pytest.raises(ValueError, match="raw"):
        ConditionEmbedding(8, "raw").set_stats(data)


def test_the_statistics_round_trip_through_save_and_load_and_change_the_output(tmp_path):
    wm = _model("normalised")
    wm.set_condition_stats(_poses(256))
    wm.save_pretrained(tmp_path / "m")
    back = WorldModel.from_pretrained(tmp_path / "m").eval()
    assert torch.equal(back.dit.cond_embed.mean, wm.dit.cond_embed.mean)
    assert torch.equal(back.dit.cond_embed.std, wm.dit.cond_embed.std)
    randomise(wm.dit, 0)  # no zero-initialised modulation or head: the output shows the condition
    randomise(back.dit, 0)
    back.dit.cond_embed.load_state_dict(wm.dit.cond_embed.state_dict())
    x, t, c = latents(wm.config, 1, 3), torch.full((1, 3), 0.5), _poses(3)[None]
    with torch.no_grad():
        assert torch.equal(back.dit(x, t, c), wm.dit(x, t, c))
        back.dit.cond_embed.std.mul_(2.0)
        assert not torch.equal(back.dit(x, t, c), wm.dit(x, t, c))


def test_the_first_dit_stage_fits_the_statistics_and_resuming_keeps_them(tmp_path):
    from neuralsim.world_model.train import TrainConfig, train

    wm = _model("fourier")
    wm.save_pretrained(tmp_path / "init")
    base = dict(stage="dit", objective="diffusion_forcing", data="synthetic:8", config="tiny", steps=3, batch_size=2,
                log_every=1, checkpoint_every=100, sample_every=-1, progress=False, warmup=1)
    train(TrainConfig(out=str(tmp_path / "a"), init_from=str(tmp_path / "init"), **base))
    fitted = WorldModel.from_pretrained(tmp_path / "a" / "model")
    assert fitted.config.recipe["condition_stats_fitted"] is True
    assert not torch.equal(fitted.dit.cond_embed.std, torch.ones(10))
    mean = fitted.dit.cond_embed.mean.clone()
    train(TrainConfig(out=str(tmp_path / "b"), init_from=str(tmp_path / "a" / "model"),
                      **{**base, "data": "synthetic:9"}))
    assert torch.equal(WorldModel.from_pretrained(tmp_path / "b" / "model").dit.cond_embed.mean, mean)


def test_model_edit_switches_the_features_keeping_every_other_weight(tmp_path):
    from neuralsim.world_model.edit import EditConfig, edit_model

    wm = _model("raw")
    wm.save_pretrained(tmp_path / "raw")
    out = edit_model(EditConfig(checkpoint=str(tmp_path / "raw"), out=str(tmp_path / "f"),
                                condition_features="fourier"))
    assert out.config.dit.condition_features == "fourier"
    assert out.config.recipe["edits"][-1] == {"condition_features": "fourier"}
    before, after = wm.state_dict(), out.state_dict()
    changed = {k for k in after if k not in before or after[k].shape != before[k].shape
               or not torch.equal(after[k], before[k])}
    assert changed == {"dit.cond_embed.mlp.0.weight", "dit.cond_embed.mean", "dit.cond_embed.std"}
    with torch.no_grad():  # runs, with conditioning vectors of any scale
        out.dit(latents(out.config, 1, 2), torch.rand(1, 2), conds(1, 2))
