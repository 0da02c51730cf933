"""Per-view image autoencoder: uint8 views <-> latents, built on diffusers' ``AutoencoderKL``.

Each camera view is encoded on its own (64x64x3 -> 16x16x4 by default); the DiT sees the latents of
the three views of a time step together.  Encoding is deterministic (the posterior mode), so the same
views always give the same latents.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import AutoencoderConfig


def uint8_to_unit(images: torch.Tensor) -> torch.Tensor:
    """uint8 (..., H, W, 3) in [0, 255] -> float (..., 3, H, W) in [-1, 1]."""
    return images.permute(*range(images.ndim - 3), -1, -3, -2).float().div(127.5).sub(1.0)


def unit_to_uint8(images: torch.Tensor) -> torch.Tensor:
    """float (..., 3, H, W) in [-1, 1] -> uint8 (..., H, W, 3) (rounded, clamped)."""
    x = images.float().add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8)
    return x.permute(*range(x.ndim - 3), -2, -1, -3)


def psnr(a: torch.Tensor, b: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """PSNR in dB of images in [-1, 1], reduced over ``dims``."""
    mse = (a.float() - b.float()).pow(2).mean(dim=dims).clamp_min(1e-10)
    return 10.0 * torch.log10(4.0 / mse)


def fold_upsample_kernel(weight: torch.Tensor) -> torch.Tensor:
    """A 3x3 kernel (Co, Ci, 3, 3) applied after 2x nearest upsampling -> the equivalent 2x2 kernels
    (4 Co, Ci, 2, 2) at the input resolution, one group of Co per output parity (row, column).

    After nearest upsampling, output row ``2i`` reads input rows ``i-1, i, i`` through the kernel's
    rows 0, 1, 2, and row ``2i+1`` reads ``i, i, i+1``: each parity sees two distinct input rows,
    with the kernel rows that land on the same input row summed.  Columns likewise.
    """
    def pairs(w: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        w0, w1, w2 = w.unbind(dim)
        return torch.stack([w0, w1 + w2], dim), torch.stack([w0 + w1, w2], dim)  # even, odd parity

    return torch.cat([k for rows in pairs(weight, 2) for k in pairs(rows, 3)], 0)


class FoldedUpsample2D(nn.Module):
    """diffusers' ``Upsample2D`` (2x nearest, then a 3x3 convolution) computed without upsampling.

    The convolution runs on the low-resolution input with the 2x2 kernels of
    :func:`fold_upsample_kernel` and the four parities are interleaved into the output: 16 instead of
    36 multiply-adds per (output pixel / 4, input channel, output channel), and no 4x-sized
    intermediate.  Same result to float rounding (the kernel sums reorder additions).  Holds the
    original ``conv`` under the same name, so state dicts are unchanged.  While training or recording
    autograd, the original upsample-then-convolve path runs.
    """

    def __init__(self, upsample: nn.Module):
        super().__init__()
        self.conv = upsample.conv
        self._folded: tuple[tuple, torch.Tensor, torch.Tensor] | None = None

    @staticmethod
    def applies_to(module: nn.Module) -> bool:
        """Whether ``module`` is a plain 2x nearest + 3x3 convolution ``Upsample2D`` (what this replaces)."""
        conv = getattr(module, "conv", None)
        return (type(module).__name__ == "Upsample2D" and module.use_conv and not module.use_conv_transpose
                and module.norm is None and module.interpolate and isinstance(conv, nn.Conv2d)
                and conv.kernel_size == (3, 3) and conv.stride == (1, 1) and conv.padding == (1, 1)
                and conv.dilation == (1, 1) and conv.groups == 1 and conv.bias is not None)

    def folded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(4 Co, Ci, 2, 2) kernel and (4 Co,) bias, recomputed only when the weights changed."""
        w, b = self.conv.weight, self.conv.bias
        key = (w._version, w.data_ptr(), b._version, b.data_ptr(), w.dtype, w.device)
        if self._folded is None or self._folded[0] != key:
            self._folded = (key, fold_upsample_kernel(w.detach()), b.detach().repeat(4))
        return self._folded[1], self._folded[2]

    def forward(self, x: torch.Tensor, output_size=None) -> torch.Tensor:
        if output_size is not None or self.training or torch.is_grad_enabled() or self.conv.weight.is_inference():
            scale = 2.0 if output_size is None else None
            return self.conv(F.interpolate(x, size=output_size, scale_factor=scale, mode="nearest"))
        kernel, bias = self.folded()
        n, _, h, w = x.shape
        co = kernel.shape[0] // 4
        # output position (i, j) of parity (a, c) is window (i + a, j + c) of the 1-padded input
        y = F.conv2d(F.pad(x, (1, 1, 1, 1)), kernel, bias)  # (n, 4 Co, h+1, w+1)
        y = y.permute(0, 2, 3, 1).reshape(n, h + 1, w + 1, 2, 2, co)
        out = x.new_empty(n, h, 2, w, 2, co)  # channels-last, what the next convolution wants
        for a in range(2):
            for c in range(2):
                out[:, :, a, :, c] = y[:, a:a + h, c:c + w, a, c]
        return out.view(n, 2 * h, 2 * w, co).permute(0, 3, 1, 2)


def fold_upsamplers(decoder: nn.Module) -> nn.Module:
    """Swap every plain ``Upsample2D`` of a diffusers VAE decoder for :class:`FoldedUpsample2D`, in place."""
    for block in getattr(decoder, "up_blocks", []):
        ups = getattr(block, "upsamplers", None)
        if ups is not None:
            for i, up in enumerate(ups):
                if FoldedUpsample2D.applies_to(up):
                    ups[i] = FoldedUpsample2D(up)
    return decoder


#: A pixel "changed" from the reference when a channel differs by more than this ([-1, 1] units: 0.1 = 12.75
#: grey levels), for :meth:`ViewAutoencoder.decoder_loss`'s ``change_weight``.
CHANGED_PIXEL = 0.1


class ReferenceHead(nn.Module):
    """Refines decoded views with the episode's first, true view: ``out = dec + g * (ref - dec) + r``.

    A 16x16x4 latent cannot carry a 64x64 view's fine detail, yet most of that detail sits still: the
    exterior cameras are fixed and the table, walls and robot base do not move.  The episode's first views
    are known exactly (the env resets from them), so where a region has not changed the head copies it
    from there (gate ``g`` near 1), and elsewhere it leaves the decoder's output, plus a small correction
    ``r``.  Whether a region changed it reads from the latents (the current latent and its difference to
    the first frame's, upsampled to pixels) and from the decoded and reference views themselves.

    Inputs per view (all (N, ., H, W) or (N, ., h, w)): the decoded view ``dec`` and the reference ``ref``
    in [-1, 1], the raw latents ``z`` and ``z_ref``, and the view's index (a one-hot, so the head can learn
    that a moving wrist camera's reference rarely lines up).  Five 3x3 convolutions at full resolution,
    dilated 1-2-4-1 for a 17-pixel field of view.  The last one starts at zero with the gate's bias at
    ``GATE_BIAS``, so a fresh head changes a view by at most ``2 * sigmoid(GATE_BIAS)`` (< 0.005 of the
    [-1, 1] range, under one grey level).
    """

    GATE_BIAS = -6.0

    def __init__(self, channels: int, latent_channels: int, num_views: int = 3):
        super().__init__()
        self.num_views = num_views
        c_in = 3 * 3 + 2 * latent_channels + num_views
        self.body = nn.Sequential(
            nn.Conv2d(c_in, channels, 3, padding=1), nn.SiLU(),
            nn.Conv2d(channels, channels, 3, padding=2, dilation=2), nn.SiLU(),
            nn.Conv2d(channels, channels, 3, padding=4, dilation=4), nn.SiLU(),
            nn.Conv2d(channels, channels, 3, padding=1), nn.SiLU(),
        )
        self.out = nn.Conv2d(channels, 4, 3, padding=1)  # gate logit + RGB correction
        nn.init.zeros_(self.out.weight)
        with torch.no_grad():
            self.out.bias.zero_()
            self.out.bias[0] = self.GATE_BIAS

    def forward(self, dec: torch.Tensor, ref: torch.Tensor, z: torch.Tensor, z_ref: torch.Tensor) -> torch.Tensor:
        """dec, ref (N, 3, H, W) in [-1, 1]; z, z_ref (N, C, h, w) raw latents; N = batch x views,
        views innermost.  Returns the refined views (N, 3, H, W)."""
        n, _, h, w = dec.shape
        if n % self.num_views:
            raise ValueError(f"the reference head takes whole frames of {self.num_views} views, got {n} views")
        up = F.interpolate(torch.cat([z, z - z_ref], 1), size=(h, w), mode="nearest")  # (N, 2C, H, W)
        view = torch.eye(self.num_views, dtype=dec.dtype, device=dec.device).repeat(n // self.num_views, 1)
        feats = torch.cat([dec, ref, ref - dec, up, view[:, :, None, None].expand(n, self.num_views, h, w)], 1)
        # channels-last input: oneDNN's full-resolution convolutions run faster on a CPU than from the default layout
        a = self.out(self.body(feats.contiguous(memory_format=torch.channels_last))).contiguous()  # (N, 4, H, W)
        gate = torch.sigmoid(a[:, :1])
        return dec + gate * (ref - dec) + a[:, 1:]


class ViewAutoencoder(nn.Module):
    """A small ``diffusers.AutoencoderKL`` applied independently to every view."""

    def __init__(self, config: AutoencoderConfig):
        super().__init__()
        from diffusers import AutoencoderKL

        self.config = config
        n = len(config.block_out_channels)
        self.vae = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * n,
            up_block_types=("UpDecoderBlock2D",) * n,
            block_out_channels=config.block_out_channels,
            layers_per_block=config.layers_per_block,
            latent_channels=config.latent_channels,
            norm_num_groups=config.norm_num_groups,
            sample_size=config.image_size,
            mid_block_add_attention=False,
        )
        if config.decoder_depth != config.layers_per_block:
            self.vae.decoder = self._make_decoder(config)  # folded there
        else:
            fold_upsamplers(self.vae.decoder)
        self.ref_head = (ReferenceHead(config.reference_head_channels, config.latent_channels)
                         if config.reference_head_channels else None)

    def set_reference_head(self, channels: int) -> None:
        """Give the autoencoder a fresh (zero-output) reference head of this width; 0 removes it."""
        self.config.reference_head_channels = int(channels)
        dev = self.vae.encoder.conv_in.weight.device
        self.ref_head = (ReferenceHead(int(channels), self.config.latent_channels).to(dev) if channels else None)

    def set_decoder_depth(self, layers_per_block: int | None) -> None:
        """Give the config a new ``decoder_layers_per_block`` and rebuild the decoder to match (fresh weights)."""
        self.config.decoder_layers_per_block = layers_per_block
        self.vae.decoder = self._make_decoder(self.config).to(self.vae.encoder.conv_in.weight.device)

    @staticmethod
    def _make_decoder(config: AutoencoderConfig) -> nn.Module:
        """diffusers' VAE ``Decoder`` as ``AutoencoderKL`` builds it, with ``config.decoder_depth`` layers per block."""
        from diffusers.models.autoencoders.vae import Decoder

        return fold_upsamplers(Decoder(
            in_channels=config.latent_channels, out_channels=3,
            up_block_types=("UpDecoderBlock2D",) * len(config.block_out_channels),
            block_out_channels=config.block_out_channels, layers_per_block=config.decoder_depth,
            norm_num_groups=config.norm_num_groups, act_fn="silu", mid_block_add_attention=False))

    def _check(self, images: torch.Tensor) -> None:
        s = self.config.image_size
        if images.shape[-3:] != (s, s, 3):
            raise ValueError(f"expected views (..., {s}, {s}, 3), got shape {tuple(images.shape)}")

    def encode_unit(self, x: torch.Tensor) -> torch.Tensor:
        """float images (N, 3, H, W) in [-1, 1] -> latent mode (N, C, h, w)."""
        return self.vae.encode(x).latent_dist.mode()

    def decode_unit(self, z: torch.Tensor) -> torch.Tensor:
        """latents (N, C, h, w) -> float images (N, 3, H, W), roughly in [-1, 1]."""
        return self.vae.decode(z).sample

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 views (..., H, W, 3) -> latents (..., C, h, w)."""
        self._check(images)
        lead = images.shape[:-3]
        x = uint8_to_unit(images.reshape(-1, *images.shape[-3:]))  # (N, 3, H, W)
        z = self.encode_unit(x)  # (N, C, h, w)
        return z.reshape(*lead, *z.shape[1:])

    def refine(self, x: torch.Tensor, z: torch.Tensor, reference: torch.Tensor,
               reference_latents: torch.Tensor) -> torch.Tensor:
        """Apply the reference head to decoded views ``x`` (N, 3, H, W) of latents ``z`` (N, C, h, w), with
        the uint8 reference views (N, H, W, 3) and their raw latents (N, C, h, w); N = frames x views."""
        if reference.dtype != torch.uint8 or tuple(reference.shape) != (x.shape[0], *x.shape[2:], 3):
            raise ValueError(f"reference must be uint8 views {(x.shape[0], *x.shape[2:], 3)} (one per decoded view), "
                             f"got {reference.dtype} {tuple(reference.shape)}")
        if tuple(reference_latents.shape) != tuple(z.shape):
            raise ValueError(f"reference_latents must be {tuple(z.shape)} like the latents, "
                             f"got {tuple(reference_latents.shape)}")
        ref = uint8_to_unit(reference.to(x.device))
        return self.ref_head(x, ref.to(x.dtype), z, reference_latents.to(z))

    def decode(self, latents: torch.Tensor, reference: torch.Tensor | None = None,
               reference_latents: torch.Tensor | None = None) -> torch.Tensor:
        """latents (..., C, h, w) -> uint8 views (..., H, W, 3).

        With a reference head and ``reference`` (uint8 (..., H, W, 3), the episode's first views, one per
        decoded view) and ``reference_latents`` (their raw latents, shaped like ``latents``), the head
        refines each view (:class:`ReferenceHead`); without them (or without a head) the decoder alone.
        The latents go in channels-last: oneDNN's convolutions then skip a layout conversion per layer,
        and the images come out pixel-major, which the final (H, W, 3) permute wants anyway.
        """
        if (reference is None) != (reference_latents is None):
            raise ValueError("pass both reference and reference_latents, or neither")
        lead = latents.shape[:-3]
        z = latents.reshape(-1, *latents.shape[-3:]).contiguous(memory_format=torch.channels_last)
        x = self.decode_unit(z)  # (N, 3, H, W)
        if self.ref_head is not None and reference is not None:
            x = self.refine(x, z, reference.reshape(-1, *reference.shape[-3:]),
                            reference_latents.reshape(-1, *reference_latents.shape[-3:]))
        return unit_to_uint8(x).reshape(*lead, *x.shape[2:], 3)

    def loss(self, images: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
        """Training loss on uint8 images (N, V, H, W, 3): MSE + L1 + kl_weight * KL; PSNR per view.

        Returns (loss, metrics) where metrics["psnr_view{v}"] is the mean reconstruction PSNR of view v;
        metric values are detached 0-dim tensors (``float()`` them; the trainer reads them when it logs).
        """
        self._check(images)
        n, v = images.shape[:2]
        x = uint8_to_unit(images.reshape(n * v, *images.shape[2:]))  # (N*V, 3, H, W)
        post = self.vae.encode(x).latent_dist
        # drawn where the generator lives (the trainer's are CPU generators), then moved: same noise on any device
        gdev = generator.device if generator is not None else x.device
        z = post.mean + post.std * torch.randn(post.mean.shape, generator=generator, device=gdev).to(x.device)
        kl = post.kl().mean() / x[0].numel()
        loss, metrics = self._reconstruction_loss(self.decode_unit(z), x, v, self.config.kl_weight * kl)
        metrics["kl"] = kl.detach()
        return loss, metrics

    def decoder_loss(self, latents: torch.Tensor, images: torch.Tensor, reference: torch.Tensor | None = None,
                     reference_latents: torch.Tensor | None = None,
                     change_weight: float = 0.0) -> tuple[torch.Tensor, dict]:
        """Loss of the decoder alone: decode latents (N, V, C, h, w) vs uint8 images (N, V, H, W, 3).

        MSE + L1 (:meth:`loss` without the KL term, which only concerns the encoder); same metrics.  With a
        reference head, ``reference`` (uint8 (N, V, H, W, 3), each pair's episode's first views) and
        ``reference_latents`` (their raw latents (N, V, C, h, w)) go through it (:meth:`decode`), and
        ``change_weight`` = w > 0 weighs each pixel that differs from the reference by more than
        :data:`CHANGED_PIXEL` by 1 + w instead of 1 (normalised to a mean weight of 1): what moved, a
        cube a few pixels wide included, must not be painted where it stood in the first frame.
        """
        self._check(images)
        if (reference is None) != (reference_latents is None):
            raise ValueError("pass both reference and reference_latents, or neither")
        if change_weight < 0 or (change_weight and reference is None):
            raise ValueError(f"change_weight must be >= 0 and needs a reference, got {change_weight}")
        n, v = images.shape[:2]
        x = uint8_to_unit(images.reshape(n * v, *images.shape[2:]))  # (N*V, 3, H, W)
        z = latents.reshape(n * v, *latents.shape[2:])
        rec = self.decode_unit(z)
        weight = None
        if self.ref_head is not None and reference is not None:
            ref = reference.reshape(n * v, *reference.shape[2:])
            rec = self.refine(rec, z, ref, reference_latents.reshape(n * v, *reference_latents.shape[2:]))
            if change_weight:
                changed = (x - uint8_to_unit(ref.to(x.device))).abs().amax(1, keepdim=True) > CHANGED_PIXEL
                weight = 1.0 + change_weight * changed.float()  # (N*V, 1, H, W)
                weight = weight / weight.mean()
        return self._reconstruction_loss(rec, x, v, weight=weight)

    @staticmethod
    def _reconstruction_loss(rec: torch.Tensor, x: torch.Tensor, v: int, extra: torch.Tensor | float = 0.0,
                             weight: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
        """MSE + L1 (+ ``extra``) of reconstructions ``rec`` vs ``x`` (N*V, 3, H, W), each pixel weighted by
        ``weight`` (N*V, 1, H, W) if given; PSNR per view (unweighted)."""
        err = rec - x
        if weight is None:
            mse, l1 = err.pow(2).mean(), err.abs().mean()
        else:
            mse, l1 = (weight * err.pow(2)).mean(), (weight * err.abs()).mean()
        loss = mse + l1 + extra
        with torch.no_grad():
            per_view = (-1, v, *x.shape[1:])
            p = psnr(rec.clamp(-1, 1).reshape(per_view), x.reshape(per_view), dims=(2, 3, 4))
        metrics = {"loss": loss.detach(), "mse": mse.detach()}
        for i in range(v):
            metrics[f"psnr_view{i}"] = p[:, i].mean()
        return loss, metrics
