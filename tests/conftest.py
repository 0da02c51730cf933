"""Fixtures shared by every test package."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test (fast on a small shared CPU); the previous count is restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """A saved tiny world model (16x16 views) whose DiT weights are random noise.

    AdaLN-Zero initialisation would make a fresh DiT predict zero velocity and generate constant frames,
    which hides bugs; N(0, 0.2) weights make every frame depend on the conditioning and the noise.
    """
    import torch

    from neuralsim.world_model.config import preset
    from neuralsim.world_model.model import WorldModel

    torch.manual_seed(0)
    wm = WorldModel(preset("tiny"))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in wm.dit.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return wm.save_pretrained(tmp_path_factory.mktemp("tiny_world_model"))
