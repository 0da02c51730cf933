"""Residual latent channels (``AutoencoderConfig.residual_channels``): a second encoder for what the base latent
loses, added to a trained model without changing what it decodes or predicts."""

from __future__ import annotations

import pytest
import torch

from neuralsim.world_model.config import AutoencoderConfig
from neuralsim.world_model.info import checkpoint_info, format_checkpoint_info
from neuralsim.world_model.latents import autoencoder_fingerprint
from neuralsim.world_model.model import WorldModel

from .conftest import _tiny, conds, latents, randomise
from .test_train import _cfg


def _views(n: int, size: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, size, size, 3), generator=g, dtype=torch.uint8)


def _with_head() -> WorldModel:
    wm = _tiny()
    torch.manual_seed(1)
    wm.autoencoder.set_reference_head(8)
    randomise(wm.autoencoder.ref_head, seed=3, std=0.1)
    return wm.eval()


def test_config_checks_the_residual_channel_count():
    assert AutoencoderConfig(latent_channels=8, residual_channels=4).base_channels == 4
    for bad in (-1, 8, 9):
        with pytest.raises(ValueError, match="residual_channels"):
            AutoencoderConfig(latent_channels=8, residual_channels=bad)


def test_widened_model_keeps_base_latents_decoding_and_predictions_then_uses_the_new_channels():
    wm = _with_head()
    torch.manual_seed(2)
    w = wm.with_residual_channels(3)
    c0 = wm.config.autoencoder.latent_channels
    assert w.config.autoencoder.latent_channels == w.config.dit.latent_channels == c0 + 3
    assert w.config.autoencoder.residual_channels == 3 and w.config.recipe["residual_stats_fitted"] is False
    size = wm.config.autoencoder.image_size
    views = _views(2, size, seed=4)
    z, zw = wm.encode(views), w.encode(views)
    assert zw.shape[-3] == c0 + 3 and torch.equal(zw[..., :c0, :, :], z)  # base latents bit for bit
    assert torch.equal(w.latent_mean[:c0], wm.latent_mean) and torch.equal(w.latent_std[c0:], torch.ones(3))
    # decoding (with and without the reference head) reads nothing from the new channels until trained
    first = _views(2, size, seed=5)
    ref, ref_w = (first, wm.encode(first)), (first, w.encode(first))
    for r, rw in ((None, None), (ref, ref_w)):
        assert torch.equal(wm.decode(z, r), w.decode(zw, rw))
    # the DiT predicts the same velocity for the base channels and zero for the new ones
    x, t, c = latents(wm.config, 1, 2, seed=6), torch.rand(1, 2), conds(1, 2)
    xw = torch.cat([x, torch.randn(*x.shape[:3], 3, *x.shape[-2:])], 3)
    with torch.no_grad():
        v, vw = wm.dit(x, t, c), w.dit(xw, t, c)
    torch.testing.assert_close(vw[:, :, :, :c0], v, rtol=0, atol=1e-6)
    assert torch.count_nonzero(vw[:, :, :, c0:]) == 0
    # once the new weights move, the new channels change the image
    with torch.no_grad():
        w.autoencoder.vae.decoder.conv_in.weight[:, c0:].normal_(0, 0.5)
    assert not torch.equal(wm.decode(z), w.decode(zw))
    # the residual encoder is part of the latents' identity (the latent store re-encodes)
    assert autoencoder_fingerprint(w.autoencoder, size) != autoencoder_fingerprint(wm.autoencoder, size)
    with pytest.raises(ValueError, match="already has 3 residual"):
        w.with_residual_channels(2)


def test_save_and_load_a_model_with_residual_channels(tmp_path):
    torch.manual_seed(0)
    w = _tiny().with_residual_channels(2)
    randomise(w.autoencoder.res_encoder, seed=7, std=0.1)
    w.save_pretrained(tmp_path / "m")
    back = WorldModel.from_pretrained(tmp_path / "m")
    views = _views(2, w.config.autoencoder.image_size, seed=1)
    assert back.config.autoencoder.residual_channels == 2
    assert torch.equal(back.encode(views), w.encode(views))
    info = checkpoint_info(tmp_path / "m")
    assert info["architecture"]["residual_latent_channels"] == 2 and info["parameters"]["residual encoder"] > 0
    assert "2 of the channels from a residual encoder" in format_checkpoint_info(info)


def test_set_latent_stats_can_fit_only_some_channels():
    wm = _tiny()
    before = wm.latent_mean.clone(), wm.latent_std.clone()
    z = torch.randn(100, wm.config.autoencoder.latent_channels, 4, 4) * 3 + 2
    wm.set_latent_stats(z, channels=slice(2, None))
    assert torch.equal(wm.latent_mean[:2], before[0][:2]) and torch.equal(wm.latent_std[:2], before[1][:2])
    assert (wm.latent_mean[2:] - 2).abs().max() < 0.3 and (wm.latent_std[2:] - 3).abs().max() < 0.3


def test_train_residual_channels_then_the_dit_fits_only_their_stats(tmp_path):
    from neuralsim.world_model.train import train

    ae = tmp_path / "ae"
    train(_cfg(ae, stage="autoencoder", steps=2))
    base = tmp_path / "base"  # a trained DiT: its latent statistics are fitted
    train(_cfg(base, stage="dit", steps=1, init_from=str(ae / "model")))
    res = tmp_path / "res"
    summary = train(_cfg(res, stage="autoencoder", steps=6, init_from=str(base / "model"), residual_channels=2,
                         lr=3e-3, warmup=1))
    assert summary["step"] == 6
    a, b = WorldModel.from_pretrained(base / "model"), WorldModel.from_pretrained(res / "model")
    assert b.config.autoencoder.residual_channels == 2
    assert b.config.recipe["stages"][-1]["residual_channels"] == 2
    sa, sb = a.state_dict(), b.state_dict()
    changed = {k for k in sb if k not in sa or sa[k].shape != sb[k].shape or not torch.equal(sa[k], sb[k])}
    assert any(k.startswith("autoencoder.res_encoder.") for k in changed)
    assert all(k.startswith(("autoencoder.res_encoder.", "autoencoder.vae.decoder.", "autoencoder.vae.post_quant_conv.",
                             "dit.patch_embed.", "dit.final_out.", "latent_")) for k in changed), changed
    # resuming with another channel count is refused; so is the option outside the autoencoder stage
    with pytest.raises(ValueError, match="--residual-channels 2"):
        train(_cfg(res, stage="autoencoder", steps=8, init_from=str(base / "model"), residual_channels=3))
    with pytest.raises(ValueError, match="--stage autoencoder and --init-from"):
        train(_cfg(tmp_path / "x", stage="dit", init_from=str(base / "model"), residual_channels=2))
    with pytest.raises(ValueError, match="already has 2 residual"):
        train(_cfg(tmp_path / "y", stage="autoencoder", init_from=str(res / "model"), residual_channels=3))
    # the DiT stage fits the new channels' statistics and leaves the base ones alone
    dit = tmp_path / "dit"
    train(_cfg(dit, stage="dit", steps=2, init_from=str(res / "model")))
    d = WorldModel.from_pretrained(dit / "model")
    c0 = d.config.autoencoder.base_channels
    assert d.config.recipe["residual_stats_fitted"] is True
    assert torch.equal(d.latent_mean[:c0], b.latent_mean[:c0]) and torch.equal(d.latent_std[:c0], b.latent_std[:c0])
    assert not torch.equal(d.latent_std[c0:], torch.ones(2))
