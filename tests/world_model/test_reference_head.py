"""The reference head: decoded views refined against the episode's first views (``reference_head_channels``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuralsim.world_model.autoencoder import ReferenceHead
from neuralsim.world_model.config import AutoencoderConfig
from neuralsim.world_model.model import WorldModel

from .conftest import _tiny, conds, latents, randomise


def _views(n: int, size: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, size, size, 3), generator=g, dtype=torch.uint8)


def _with_head(channels: int = 8, randomised: bool = True) -> WorldModel:
    wm = _tiny()
    torch.manual_seed(1)
    wm.autoencoder.set_reference_head(channels)
    if randomised:
        randomise(wm.autoencoder.ref_head, seed=3, std=0.1)
    return wm.eval()


def _set_gate(head: ReferenceHead, logit: float) -> None:
    with torch.no_grad():
        head.out.weight.zero_()
        head.out.bias.zero_()
        head.out.bias[0] = logit


def test_a_fresh_head_keeps_the_decoder_and_no_reference_means_the_decoder_alone():
    wm = _with_head(randomised=False)
    size = wm.config.autoencoder.image_size
    z, first = latents(wm.config, 4, seed=2), _views(4, size, seed=5)
    plain = wm.decode(z)
    refined = wm.decode(z, (first, wm.encode(first)))
    assert (plain.int() - refined.int()).abs().max() <= 1  # sigmoid(-6) of the reference: under one grey level
    randomise(wm.autoencoder.ref_head, seed=3, std=0.1)
    assert torch.equal(wm.decode(z), plain)  # no reference: the head is skipped
    assert not torch.equal(wm.decode(z, (first, wm.encode(first))), plain)


@pytest.mark.parametrize("logit, copies", [(30.0, True), (-30.0, False)])
def test_an_open_gate_copies_the_reference_and_a_closed_one_keeps_the_decoder(logit, copies):
    """out = dec + gate * (ref - dec) + r: with r = 0 the gate picks between the two, view by view."""
    wm = _with_head()
    _set_gate(wm.autoencoder.ref_head, logit)
    size = wm.config.autoencoder.image_size
    z, first = latents(wm.config, 2, seed=2), _views(2, size, seed=5)
    got = wm.decode(z, (first, wm.encode(first)))
    assert torch.equal(got, first) if copies else torch.equal(got, wm.decode(z))


def test_the_view_one_hot_follows_the_view_order():
    """Views are innermost: the head sees view v of every frame with the same one-hot."""
    head = ReferenceHead(4, latent_channels=4, num_views=3)
    seen = []
    head.body.register_forward_hook(lambda m, inp, out: seen.append(inp[0][:, -3:, 0, 0].clone()))
    dec = torch.zeros(6, 3, 8, 8)
    head(dec, dec, torch.zeros(6, 4, 2, 2), torch.zeros(6, 4, 2, 2))
    assert torch.equal(seen[0], torch.eye(3).repeat(2, 1))
    with pytest.raises(ValueError, match="whole frames of 3 views"):
        head(dec[:5], dec[:5], torch.zeros(5, 4, 2, 2), torch.zeros(5, 4, 2, 2))


def test_state_keeps_each_rows_reset_views_and_step_decodes_against_them():
    wm = _with_head()
    size = wm.config.autoencoder.image_size
    first = _views(3, size, seed=7)
    c0, c1 = conds(3, seed=1), conds(3, seed=2)

    def run(seed):
        state = wm.new_state(3)
        wm.reset(state, None, first, c0)
        return state, wm.step(state, c1, generator=torch.Generator().manual_seed(seed))

    state, views = run(0)
    assert torch.equal(state.reference_views, first)
    torch.testing.assert_close(state.reference_latents, wm.encode(first))
    assert torch.equal(views, run(0)[1])  # same seed, same frame
    # the step's views are the new latents decoded against each row's own reset frame
    again = wm.new_state(3)
    wm.reset(again, None, first, c0)
    z = wm.step_latents(again, c1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(views, wm.decode(z, again.reference()))
    assert not torch.equal(views, wm.decode(z))
    swapped = (first[[1, 0, 2]], again.reference_latents[[1, 0, 2]])
    assert not torch.equal(views, wm.decode(z, swapped))
    # rows: a subset's reference, and a reset of one row leaves the others' alone
    rv, rl = again.reference(torch.tensor([2, 0]))
    assert torch.equal(rv, first[[2, 0]]) and torch.equal(rl, again.reference_latents[[2, 0]])
    other = _views(1, size, seed=9)
    wm.reset(again, [1], other, c0[:1])
    assert torch.equal(again.reference_views[1:2], other) and torch.equal(again.reference_views[[0, 2]], first[[0, 2]])
    # from latents alone the reference is those latents decoded
    z0 = wm.encode(other)
    wm.reset_latents(again, [0], z0, c0[:1])
    assert torch.equal(again.reference_views[:1], wm.decode(z0))


def test_a_model_without_a_head_keeps_no_reference():
    wm = _tiny()
    state = wm.new_state(2)
    assert state.reference() is None and state.reference_views is None
    wm.reset(state, None, _views(2, wm.config.autoencoder.image_size, seed=1), conds(2))
    assert state.reference() is None


def test_save_load_and_take_decoder_from_carry_the_head(tmp_path):
    wm = _with_head(channels=6)
    wm.save_pretrained(tmp_path / "m")
    back = WorldModel.from_pretrained(tmp_path / "m")
    assert back.config.autoencoder.reference_head_channels == 6
    for (k, a), (_, b) in zip(wm.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), k
    plain = _tiny()
    plain.take_decoder_from(back)
    assert plain.config.autoencoder.reference_head_channels == 6
    assert torch.equal(plain.autoencoder.ref_head.out.weight, back.autoencoder.ref_head.out.weight)
    assert plain.config.autoencoder.encoder_fields() == _tiny().config.autoencoder.encoder_fields()


def test_bad_references_are_refused():
    wm = _with_head()
    size = wm.config.autoencoder.image_size
    z, first = latents(wm.config, 2, seed=2), _views(2, size, seed=5)
    ae = wm.autoencoder
    with pytest.raises(ValueError, match="both reference and reference_latents"):
        ae.decode(wm.denormalise(z), first, None)
    with pytest.raises(ValueError, match="reference must be uint8"):
        ae.decode(wm.denormalise(z), first.float(), wm.encode(first))
    with pytest.raises(ValueError, match="reference must be uint8"):
        ae.decode(wm.denormalise(z), first[:1], wm.encode(first))
    with pytest.raises(ValueError, match="reference_latents must be"):
        ae.decode(wm.denormalise(z), first, wm.encode(first)[..., :2])
    with pytest.raises(ValueError, match="reference_head_channels must be >= 0"):
        AutoencoderConfig(reference_head_channels=-1)


def test_decoder_loss_trains_the_head_towards_the_reference():
    """A few steps on pairs whose target is the reference itself: the loss falls and only the head moves."""
    wm = _with_head(randomised=False)
    ae = wm.autoencoder
    size = wm.config.autoencoder.image_size
    first = _views(2, size, seed=5)
    z = ae.encode(first).detach()
    wm.requires_grad_(False)
    ae.ref_head.requires_grad_(True)
    before = {k: v.clone() for k, v in ae.state_dict().items()}
    opt = torch.optim.Adam(ae.ref_head.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss, metrics = ae.decoder_loss(z + 0.5 * torch.randn_like(z), first, first, z)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert np.mean(losses[-5:]) < 0.5 * losses[0]
    moved = {k for k, v in ae.state_dict().items() if not torch.equal(v, before[k])}
    assert moved and all(k.startswith("ref_head.") for k in moved)


@torch.no_grad()
def test_change_weight_makes_painting_a_moved_object_where_it_stood_cost_more():
    """A head that copies the reference everywhere errs only where the frame changed; weighing the changed
    pixels by 1 + w raises its loss, and a decoder that errs only on still pixels is charged less."""
    wm = _with_head()
    _set_gate(wm.autoencoder.ref_head, 30.0)  # out = reference
    ae = wm.autoencoder
    size = wm.config.autoencoder.image_size
    first = _views(2, size, seed=5)
    frame = first.clone()
    frame[:, :, 2:5, 2:5] = 255 - frame[:, :, 2:5, 2:5]  # a small object moved away
    z, zr = ae.encode(frame), ae.encode(first)
    plain, _ = ae.decoder_loss(z, frame, first, zr)
    weighted, metrics = ae.decoder_loss(z, frame, first, zr, change_weight=10.0)
    assert float(weighted) > 3 * float(plain)
    assert metrics["psnr_view0"] == pytest.approx(float(ae.decoder_loss(z, frame, first, zr)[1]["psnr_view0"]))
    # the same frame as its own reference: nothing changed, so the weights are all 1 and the loss is the plain one
    same_plain, _ = ae.decoder_loss(z, frame, frame, z)
    same_weighted, _ = ae.decoder_loss(z, frame, frame, z, change_weight=10.0)
    assert float(same_weighted) == pytest.approx(float(same_plain))
    with pytest.raises(ValueError, match="change_weight must be >= 0"):
        ae.decoder_loss(z, frame, first, zr, change_weight=-1.0)
    with pytest.raises(ValueError, match="needs a reference"):
        ae.decoder_loss(z, frame, change_weight=1.0)
