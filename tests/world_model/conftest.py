"""Shared fixtures: a tiny world model with non-trivial (randomised) weights."""

from __future__ import annotations

import pytest
import torch

from neuralsim.world_model.config import preset
from neuralsim.world_model.model import WorldModel


def randomise(module: torch.nn.Module, seed: int = 0, std: float = 0.2) -> None:
    """Overwrite every parameter with noise (AdaLN-Zero init would make the DiT output 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)
    yield


def _tiny() -> WorldModel:
    torch.manual_seed(0)
    wm = WorldModel(preset("tiny"))
    randomise(wm.dit)
    return wm.eval()


@pytest.fixture
def tiny_model() -> WorldModel:
    return _tiny()


def latents(cfg, *lead: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    d = cfg.dit
    return torch.randn(*lead, d.num_views, d.latent_channels, d.latent_size, d.latent_size, generator=g)


def conds(*lead: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*lead, 7, generator=g)
