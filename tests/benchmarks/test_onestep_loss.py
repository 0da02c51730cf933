"""benchmarks.onestep_loss: two tiny world models scored on the same clips and noise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import generalisation_gap as G
from benchmarks import onestep_loss as O
from neuralsim.data.generate import generate
from neuralsim.world_model.model import WorldModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("onestep_data") / "heldout"
    generate(root, 2, seed=1_000_000, max_steps=14, progress=False)
    return root


@pytest.fixture(scope="module")
def models(tiny_checkpoint, tmp_path_factory) -> dict[str, Path]:
    """The tiny model, a copy with one DiT weight moved (same autoencoder), and one with another encoder."""
    import torch

    root = tmp_path_factory.mktemp("onestep_models")
    out = {"a": Path(tiny_checkpoint)}
    for name, prefix in (("dit", "dit."), ("encoder", "autoencoder.vae.encoder.")):
        wm = WorldModel.from_pretrained(tiny_checkpoint)
        params = [(k, v) for k, v in wm.named_parameters() if k.startswith(prefix) and v.ndim > 1]
        with torch.no_grad():
            params[0][1].add_(0.5 * torch.randn_like(params[0][1]))
        wm.save_pretrained(root / name)
        out[name] = root / name
    return out


def test_a_model_against_itself_differs_by_nothing_and_a_changed_dit_shows(models, data):
    a = WorldModel.from_pretrained(models["a"]).eval()
    b = WorldModel.from_pretrained(models["dit"]).eval()
    la = G.objective_losses(a, data, clips=6, noise_draws=2, batch_size=4)
    same = O.paired(la, G.objective_losses(a, data, clips=6, noise_draws=2, batch_size=4))
    for r in same.values():
        assert r["relative"] == 0.0 and r["b_lower"] == 0 and r["batches"] == 4
    lb = G.objective_losses(b, data, clips=6, noise_draws=2, batch_size=4)
    moved = O.paired(la, lb)["step_forcing"]
    assert moved["relative"] != 0.0 and moved["relative_stderr"] > 0
    assert moved["relative"] == pytest.approx(moved["b"] / moved["a"] - 1)  # equal batch sizes within a draw
    with pytest.raises(ValueError, match="not on the same batches"):
        O.paired(la, G.objective_losses(b, data, clips=4, noise_draws=2, batch_size=4))


def test_cli_writes_the_report_and_refuses_models_that_encode_differently(models, data, tmp_path, capsys):
    out = tmp_path / "onestep.json"
    common = ["--data", str(data), "--clips", "4", "--noise-draws", "1", "--batch-size", "2", "--no-progress"]
    assert O.main([str(models["a"]), str(models["dit"]), *common, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["clips"] == 4 and set(report["paired"]) == set(G.OBJECTIVES)
    assert report["paired"]["step_forcing"]["batches"] == 2
    assert "B / A - 1" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="encode frames differently"):
        O.main([str(models["a"]), str(models["encoder"]), *common, "--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()
