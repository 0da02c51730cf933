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


@pytest.fixture(scope="session")
def tiny_legible_checkpoint(tiny_checkpoint, tmp_path_factory) -> Path:
    """The tiny world model as a model of the legible scene (``config.scene == "legible"``, SimDROID-v1): what
    every default that follows the model's scene (episodes, held-out split, probe, judge, ground truth) sees
    when a legible model is the one given or shipped."""
    from neuralsim.world_model.model import WorldModel

    wm = WorldModel.from_pretrained(tiny_checkpoint)
    wm.set_scene("legible")
    return wm.save_pretrained(tmp_path_factory.mktemp("tiny_legible_world_model"))


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """A Hugging Face hub cache in ``tmp_path`` with ``huggingface_hub`` in offline mode (as on an air-gapped
    machine): ``offline_hub(repo_id, checkpoint_dir)`` puts a checkpoint's files in the cache at ``main``, laid
    out as ``huggingface_hub`` writes them, and returns the snapshot directory.  The working directory moves to
    ``tmp_path`` so that no local directory shadows an id."""
    import shutil

    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)

    def add(repo_id: str, checkpoint: Path) -> Path:
        commit = "0123456789abcdef0123456789abcdef01234567"
        repo = cache / ("models--" + repo_id.replace("/", "--"))
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(commit)
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True)
        for name in ("config.json", "model.safetensors"):
            shutil.copy(Path(checkpoint) / name, snapshot / name)
        return snapshot

    return add
