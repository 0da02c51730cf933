"""The autoencoder's inference fast path: folded upsampling equals diffusers' upsample-then-convolve."""

from __future__ import annotations

import pytest
import torch
from diffusers.models.upsampling import Upsample2D

from neuralsim.world_model.autoencoder import FoldedUpsample2D, fold_upsample_kernel


def _pair(channels: int, out_channels: int, seed: int = 0) -> tuple[Upsample2D, FoldedUpsample2D]:
    torch.manual_seed(seed)
    ref = Upsample2D(channels, use_conv=True, out_channels=out_channels)
    with torch.no_grad():
        ref.conv.bias.normal_()
    return ref.eval(), FoldedUpsample2D(ref).eval()


@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize("shape", [(3, 8, 16, 16), (2, 8, 5, 7)])
def test_folded_upsample_equals_upsample_then_convolve(shape, channels_last):
    ref, fast = _pair(shape[1], 6)
    x = torch.randn(shape)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        want, got = ref(x), fast(x)
    assert got.shape == want.shape == (shape[0], 6, 2 * shape[2], 2 * shape[3])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got.is_contiguous(memory_format=torch.channels_last)  # what the next convolution wants


def test_fold_upsample_kernel_puts_each_tap_on_the_input_pixel_it_reads():
    """A single non-zero tap lands in exactly the parities/positions nearest upsampling maps it to."""
    w = torch.zeros(1, 1, 3, 3)
    w[0, 0, 0, 2] = 1.0  # top-right tap: reads output (y-1, x+1)
    k = fold_upsample_kernel(w).view(2, 2, 2, 2)  # (row parity, column parity, ky, kx)
    # even output rows read input rows (i-1, i): the top tap is row i-1 -> ky 0; odd rows read (i, i+1): ky 0
    # even output columns read (j-1, j): the right tap is column j -> kx 1; odd columns read (j, j+1): kx 1
    want = torch.zeros(2, 2, 2, 2)
    want[:, :, 0, 1] = 1.0
    assert torch.equal(k, want)


def test_folded_upsample_trains_through_the_original_path_and_refolds_after_an_update():
    ref, fast = _pair(4, 4, seed=1)
    x = torch.randn(1, 4, 6, 6)
    fast.train()
    y = fast(x)
    y.square().sum().backward()
    assert fast.conv.weight.grad is not None and fast.conv.weight.grad.abs().sum() > 0
    fast.eval()
    with torch.no_grad():
        before = fast(x)
        fast.conv.weight.add_(0.5)  # an in-place update (as an optimiser makes) invalidates the folded kernel
        after = fast(x)
        want = ref(x)  # ref shares the conv, so it sees the update too
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, want, rtol=1e-5, atol=1e-5)


def test_world_model_decoder_uses_the_folded_upsamplers_and_keeps_its_state_dict_keys(tiny_model):
    decoder = tiny_model.autoencoder.vae.decoder
    folded = [m for m in decoder.modules() if isinstance(m, FoldedUpsample2D)]
    assert len(folded) == len(decoder.up_blocks) - 1  # every up block but the last upsamples
    keys = [k for k in tiny_model.state_dict() if ".upsamplers." in k]
    assert keys and all(k.endswith(("upsamplers.0.conv.weight", "upsamplers.0.conv.bias")) for k in keys)
    rebuilt = tiny_model.with_decoder_layers(0)  # a rebuilt decoder is folded too
    assert sum(isinstance(m, FoldedUpsample2D) for m in rebuilt.modules()) == len(folded)
