"""Per-view image autoencoder: uint8 views <-> latents, built on diffusers' ``AutoencoderKL``.

Each camera view is encoded on its own (64x64x3 -> 16x16x4 by default); the DiT sees the latents of
the three views of a time step together.  Encoding is deterministic (the posterior mode), so the same
views always give the same latents.
"""

from __future__ import annotations

import torch
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
            self.vae.decoder = self._make_decoder(config)

    def set_decoder_depth(self, layers_per_block: int | None) -> None:
        """Give the config a new ``decoder_layers_per_block`` and rebuild the decoder to match (fresh weights)."""
        self.config.decoder_layers_per_block = layers_per_block
        self.vae.decoder = self._make_decoder(self.config).to(self.vae.encoder.conv_in.weight.device)

    @staticmethod
    def _make_decoder(config: AutoencoderConfig) -> nn.Module:
        """diffusers' VAE ``Decoder`` as ``AutoencoderKL`` builds it, with ``config.decoder_depth`` layers per block."""
        from diffusers.models.autoencoders.vae import Decoder

        return Decoder(in_channels=config.latent_channels, out_channels=3,
                       up_block_types=("UpDecoderBlock2D",) * len(config.block_out_channels),
                       block_out_channels=config.block_out_channels, layers_per_block=config.decoder_depth,
                       norm_num_groups=config.norm_num_groups, act_fn="silu", mid_block_add_attention=False)

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

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """latents (..., C, h, w) -> uint8 views (..., H, W, 3).

        The latents go in channels-last: oneDNN's convolutions then skip a layout conversion per layer,
        and the images come out pixel-major, which the final (H, W, 3) permute wants anyway.
        """
        lead = latents.shape[:-3]
        z = latents.reshape(-1, *latents.shape[-3:]).contiguous(memory_format=torch.channels_last)
        x = self.decode_unit(z)  # (N, 3, H, W)
        return unit_to_uint8(x).reshape(*lead, *x.shape[2:], 3)

    def loss(self, images: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
        """Training loss on uint8 images (N, V, H, W, 3): MSE + L1 + kl_weight * KL; PSNR per view.

        Returns (loss, metrics) where metrics["psnr_view{v}"] is the mean reconstruction PSNR of view v.
        """
        self._check(images)
        n, v = images.shape[:2]
        x = uint8_to_unit(images.reshape(n * v, *images.shape[2:]))  # (N*V, 3, H, W)
        post = self.vae.encode(x).latent_dist
        z = post.mean + post.std * torch.randn(post.mean.shape, generator=generator, device=x.device)
        kl = post.kl().mean() / x[0].numel()
        loss, metrics = self._reconstruction_loss(self.decode_unit(z), x, v, self.config.kl_weight * kl)
        metrics["kl"] = float(kl.detach())
        return loss, metrics

    def decoder_loss(self, latents: torch.Tensor, images: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """Loss of the decoder alone: decode latents (N, V, C, h, w) vs uint8 images (N, V, H, W, 3).

        MSE + L1 (:meth:`loss` without the KL term, which only concerns the encoder); same metrics.
        """
        self._check(images)
        n, v = images.shape[:2]
        x = uint8_to_unit(images.reshape(n * v, *images.shape[2:]))  # (N*V, 3, H, W)
        return self._reconstruction_loss(self.decode_unit(latents.reshape(n * v, *latents.shape[2:])), x, v)

    @staticmethod
    def _reconstruction_loss(rec: torch.Tensor, x: torch.Tensor, v: int,
                             extra: torch.Tensor | float = 0.0) -> tuple[torch.Tensor, dict]:
        """MSE + L1 (+ ``extra``) of reconstructions ``rec`` vs ``x`` (N*V, 3, H, W); PSNR per view."""
        mse = (rec - x).pow(2).mean()
        l1 = (rec - x).abs().mean()
        loss = mse + l1 + extra
        with torch.no_grad():
            per_view = (-1, v, *x.shape[1:])
            p = psnr(rec.clamp(-1, 1).reshape(per_view), x.reshape(per_view), dims=(2, 3, 4))
        metrics = {"loss": float(loss.detach()), "mse": float(mse.detach())}
        for i in range(v):
            metrics[f"psnr_view{i}"] = float(p[:, i].mean())
        return loss, metrics
