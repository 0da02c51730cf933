"""Corrupt weights are refused: NaN/inf tensors at load, and a content hash saved with the weights that
``WorldModel.from_pretrained`` and ``neuralsim model info`` verify."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from neuralsim.cli import main
from neuralsim.world_model.info import checkpoint_info, checkpoint_is_loadable, format_checkpoint_info
from neuralsim.world_model.model import CheckpointError, WorldModel


def read(ckpt):
    with safe_open(str(ckpt / "model.safetensors"), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata())


def rewrite(ckpt, tensors, meta):
    """Replace the checkpoint's weights file, keeping the given metadata (as a damaged or hand-edited file would)."""
    save_file(tensors, str(ckpt / "model.safetensors"), metadata=meta)


@pytest.fixture
def saved(tiny_model, tmp_path):
    return tiny_model.save_pretrained(tmp_path / "model")


def test_nan_and_inf_weights_are_refused_naming_the_tensors(saved, tiny_model, capsys):
    tensors, meta = read(saved)
    names = sorted(k for k, t in tensors.items() if t.is_floating_point() and t.numel() > 4)[:2]
    tensors[names[0]].view(-1)[:3] = float("nan")
    tensors[names[1]].view(-1)[0] = float("inf")
    for kept in (meta, {k: v for k, v in meta.items() if k != "weights_sha256"}):  # with and without a saved hash
        rewrite(saved, tensors, kept)
        with pytest.raises(CheckpointError, match="NaN or inf") as err:
            WorldModel.from_pretrained(saved)
        assert f"{names[0]} (3 of" in str(err.value) and f"{names[1]} (1 of" in str(err.value)
        info = checkpoint_info(saved)
        assert info["nonfinite_tensors"] == {names[0]: 3, names[1]: 1} and not checkpoint_is_loadable(info)
        assert main(["model", "info", str(saved)]) == 1
        out = capsys.readouterr().out
        assert "2 tensor(s) hold NaN/inf" in out and names[0] in out and "will refuse it" in out
        assert "hash OK" not in out


def test_the_saved_weights_hash_catches_a_finite_change(saved, capsys):
    info = checkpoint_info(saved)
    assert info["weights_hash"] == "match" and checkpoint_is_loadable(info)
    assert "format, config hash and weights hash OK" in format_checkpoint_info(info)
    tensors, meta = read(saved)
    name = sorted(k for k, t in tensors.items() if t.is_floating_point())[0]
    tensors[name].view(-1)[0] += 0.5
    rewrite(saved, tensors, meta)
    with pytest.raises(CheckpointError, match="changed after they were saved"):
        WorldModel.from_pretrained(saved)
    assert checkpoint_info(saved)["weights_hash"] == "mismatch"
    assert main(["model", "info", str(saved)]) == 1
    assert "weights hash MISMATCH" in capsys.readouterr().out


def test_a_checkpoint_saved_without_a_hash_still_loads(saved, tiny_model, capsys):
    tensors, meta = read(saved)
    del meta["weights_sha256"]
    rewrite(saved, tensors, meta)
    loaded = WorldModel.from_pretrained(saved)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), tiny_model.state_dict().values()))
    assert checkpoint_info(saved)["weights_hash"] == "not recorded"
    assert main(["model", "info", str(saved)]) == 0
    assert "no weights hash recorded" in capsys.readouterr().out


def test_the_hash_covers_float16_files_and_the_shipped_model_has_one(tiny_model, tmp_path, capsys):
    half = tiny_model.save_pretrained(tmp_path / "fp16", dtype=torch.float16)
    assert checkpoint_info(half)["weights_hash"] == "match"
    WorldModel.from_pretrained(half)
    assert main(["model", "info"]) == 0
    assert "format, config hash and weights hash OK" in capsys.readouterr().out


def test_neuraldroid_refuses_a_checkpoint_with_nan_weights(tiny_checkpoint, tmp_path):
    from neuralsim.envs.neural_droid import NeuralDROIDEnv

    ckpt = tmp_path / "nan"
    shutil.copytree(tiny_checkpoint, ckpt)
    tensors, meta = read(ckpt)
    name = next(k for k in sorted(tensors) if k.startswith("dit.") and tensors[k].is_floating_point())
    tensors[name].fill_(float("nan"))
    rewrite(ckpt, tensors, meta)
    with pytest.raises(CheckpointError, match=name):
        NeuralDROIDEnv(checkpoint=ckpt, reward_fn=None)
