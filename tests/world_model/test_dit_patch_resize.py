"""``WorldModel.with_dit_patch_size`` / ``neuralsim train --init-from M --dit-patch-size P``: a trained DiT cut
into finer tokens."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from neuralsim.world_model.model import WorldModel
from neuralsim.world_model.train import train

from .conftest import _tiny, conds, latents
from .test_train import _cfg as train_cfg


def _inputs(wm: WorldModel):
    return latents(wm.config, 1, 2), torch.full((1, 2), 0.5), conds(1, 2)


def _block_mean(x: torch.Tensor, p: int) -> torch.Tensor:
    """(B, T, V, C, h, w) -> the mean over each p x p patch, (B, T, V, C, h/p, w/p)."""
    lead = x.shape[:-2]
    return F.avg_pool2d(x.reshape(-1, *x.shape[-2:]), p).reshape(*lead, x.shape[-2] // p, x.shape[-1] // p)


@pytest.mark.parametrize("patch", [2, 1])
def test_finer_tokens_keep_the_patch_means_on_flat_patches(tiny_model, patch):
    """On latents flat within each old patch, every new token is an exact copy of its parent's hidden state, so the
    velocity averaged over each old patch is the old model's; on other latents it differs (the copy is a warm start,
    not the same function); everything but the token weights is copied bit for bit."""
    old = tiny_model.config.dit.patch_size  # 4: the tiny 8x8 latent in 2x2 tokens per view
    finer = tiny_model.with_dit_patch_size(patch)
    assert finer.config.dit.patch_size == patch and tiny_model.config.dit.patch_size == old
    assert finer.config.dit.tokens_per_frame == tiny_model.config.dit.tokens_per_frame * (old // patch) ** 2
    cfg = tiny_model.config
    coarse = latents(cfg, 2, 4, seed=5)[..., ::old, ::old]  # one value per old patch and channel
    flat = coarse.repeat_interleave(old, dim=-2).repeat_interleave(old, dim=-1)
    t = torch.rand(2, 4, generator=torch.Generator().manual_seed(2))
    c = conds(2, 4)
    with torch.no_grad():
        a, b = tiny_model.dit(flat, t, c), finer.dit(flat, t, c)
        assert b.shape == a.shape
        torch.testing.assert_close(_block_mean(b, old), _block_mean(a, old), rtol=1e-4, atol=1e-5)
        assert not torch.allclose(b, a)  # within a patch the finer model draws its own cells
        rough = latents(cfg, 2, 4, seed=6)
        assert not torch.allclose(_block_mean(finer.dit(rough, t, c), old),
                                  _block_mean(tiny_model.dit(rough, t, c), old), atol=1e-3)
    own, new = tiny_model.state_dict(), finer.state_dict()
    resized = {"dit.patch_embed.weight", "dit.pos_embed", "dit.final_out.weight", "dit.final_out.bias"}
    assert set(own) == set(new)
    assert all(torch.equal(own[k], new[k]) for k in own if k not in resized)
    assert all(own[k].shape != new[k].shape for k in resized - {"dit.final_out.bias"})


def test_finer_tokens_run_the_env_path_and_refuse_bad_sizes(tiny_model, tmp_path):
    """The resized model saves, loads and rolls out through the KV cache; a size that is not a smaller divisor is
    refused by name; a DiT's per-token geometry embeddings (wrist rays) follow the finer grid."""
    finer = tiny_model.with_dit_patch_size(2)
    finer.save_pretrained(tmp_path / "m")
    back = WorldModel.from_pretrained(tmp_path / "m")
    assert back.config.dit.patch_size == 2
    first, cond = latents(back.config, 1, seed=1), conds(1, 3)
    state = back.new_state(1, window=3)
    back.reset_latents(state, None, first, cond[:, 0])
    g = torch.Generator().manual_seed(0)
    frame = back.generate(state, torch.randn(first.shape, generator=g), cond[:, 1])
    assert frame.shape == first.shape and torch.isfinite(frame).all()
    for bad in (4, 8, 3, 0):
        with pytest.raises(ValueError, match=f"smaller than the DiT's 4 and divide it, got {bad}"):
            tiny_model.with_dit_patch_size(bad)
    rays = _tiny(wrist_rays=True).with_dit_patch_size(2)  # the ray embedding is a function of the grid: it carries
    assert rays.dit.ray_embed.grid == 4 and torch.isfinite(rays.dit(*_inputs(rays))).all()


def test_train_init_from_with_a_finer_patch_size_resizes_then_trains(tmp_path):
    """``--init-from M --dit-patch-size P`` resizes M's DiT before training (and only the patch size may be given
    with --init-from); the run then resumes at that size."""
    base = tmp_path / "base"
    train(train_cfg(base, objective="diffusion_forcing", steps=2))
    a = WorldModel.from_pretrained(base / "model")
    fine = tmp_path / "fine"
    train(train_cfg(fine, objective="step_forcing", steps=2, init_from=str(base / "model"), dit_patch_size=2))
    b = WorldModel.from_pretrained(fine / "model")
    assert (a.config.dit.patch_size, b.config.dit.patch_size) == (4, 2)
    assert b.config.recipe["stages"][-1]["dit_patch_size_from"] == 4
    assert "dit_patch_size_from" not in a.config.recipe["stages"][-1]
    ka, kb = a.state_dict(), b.state_dict()
    assert all(torch.equal(ka[k], kb[k]) for k in ka if not k.startswith("dit."))  # the autoencoder stays frozen
    assert not torch.equal(ka["dit.blocks.0.spatial_qkv.weight"], kb["dit.blocks.0.spatial_qkv.weight"])  # trained
    train(train_cfg(fine, objective="step_forcing", steps=3, init_from=str(base / "model"), dit_patch_size=2))
    resumed = WorldModel.from_pretrained(fine / "model").config.recipe
    assert resumed["dit_step_forcing_steps"] == 3 and resumed["stages"][-1]["dit_patch_size_from"] == 4
    with pytest.raises(ValueError, match="only --dit-patch-size applies"):
        train(train_cfg(tmp_path / "x", init_from=str(base / "model"), dit_dim=64))
    with pytest.raises(ValueError, match="need --stage dit"):
        train(train_cfg(tmp_path / "y", stage="decoder", init_from=str(base / "model"), dit_patch_size=2))
    with pytest.raises(ValueError, match="smaller than the DiT's 4"):
        train(train_cfg(tmp_path / "z", init_from=str(base / "model"), dit_patch_size=8))
