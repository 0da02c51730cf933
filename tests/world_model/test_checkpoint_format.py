"""The checkpoint format: version 2, and version-1 checkpoints (the format before the retired options left)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from neuralsim.world_model.config import FORMAT_VERSION, WorldModelConfig, preset
from neuralsim.world_model.model import CheckpointError, WorldModel, config_digest

SHIPPED = Path(__file__).resolve().parents[2] / "neuralsim" / "assets" / "world_model"


def as_format_1(src, dst, **changes):
    """Write ``src``'s checkpoint into ``dst`` as the format-1 code wrote it: the config with the retired options
    at their off values (or ``changes``), ``format_version`` 1 and no ``denoising_steps`` (a key format 1 added
    late), and the weights file signed with that config's hash and no weights hash."""
    cfg = json.loads((src / "config.json").read_text())
    cfg["format_version"] = 1
    cfg.pop("denoising_steps")
    cfg.pop("scene", None)
    cfg["autoencoder"]["residual_channels"] = 0
    cfg["dit"].update(wrist_rays=False, tcp_marks=False)
    for key, value in changes.items():
        section, _, name = key.rpartition(".")
        (cfg[section] if section else cfg)[name] = value
    text = json.dumps(cfg, indent=2, sort_keys=True)
    dst.mkdir(parents=True)
    (dst / "config.json").write_text(text)
    with safe_open(str(src / "model.safetensors"), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors, str(dst / "model.safetensors"),
              metadata={"format": "neuralsim.world_model", "config_sha256": config_digest(text)})
    return dst


def first_frames(checkpoint, n: int = 8) -> torch.Tensor:
    """The first ``n`` frames a checkpoint generates from the shipped episode set's first scene, seed 0, its arm
    moving along a fixed path."""
    import numpy as np

    from neuralsim import kinematics as K
    from neuralsim.envs.episodes import DEFAULT_EPISODES_PATH

    with np.load(DEFAULT_EPISODES_PATH, allow_pickle=False) as f:
        views, q0 = f["views"][:1], f["joint_position"][0]  # (1, V, H, W, 3), (7,)
    wm = WorldModel.from_pretrained(checkpoint)

    def cond(i: int) -> torch.Tensor:
        q = q0 + 0.02 * i * np.array([1, -1, 1, 0.5, -0.5, 1, 0])
        return torch.tensor(np.concatenate([K.forward_kinematics(q), [min(1.0, 0.1 * i)]])[None], dtype=torch.float32)

    state = wm.new_state(1)
    wm.reset(state, [0], torch.from_numpy(views), cond(0))
    g = torch.Generator().manual_seed(0)
    return torch.stack([wm.step(state, cond(i), g)[0] for i in range(1, n + 1)])


def test_the_shipped_checkpoint_is_format_2_without_retired_keys():
    cfg = json.loads((SHIPPED / "config.json").read_text())
    assert cfg["format_version"] == FORMAT_VERSION == 2
    assert "residual_channels" not in cfg["autoencoder"] and not {"wrist_rays", "tcp_marks"} & set(cfg["dit"])


def test_a_format_1_checkpoint_loads_and_generates_the_same_frames(tmp_path):
    """The shipped weights under their format-1 config (as shipped before the format changed) load, with the same
    config, and generate the re-saved checkpoint's first 8 frames bit for bit."""
    old = as_format_1(SHIPPED, tmp_path / "v1")
    a, b = WorldModel.from_pretrained(old), WorldModel.from_pretrained(SHIPPED)
    assert a.config == b.config and a.config.format_version == FORMAT_VERSION
    assert torch.equal(first_frames(old), first_frames(SHIPPED))
    resaved = a.save_pretrained(tmp_path / "v2", dtype=torch.float16)  # the conversion the shipped model went through
    shipped = json.loads((SHIPPED / "config.json").read_text())
    # the shipped config predates the `scene` field, which a re-save writes: the classic scene it was trained on
    assert json.loads((resaved / "config.json").read_text()) == {"scene": "classic", **shipped}


@pytest.mark.parametrize("key, value", [("dit.wrist_rays", True), ("dit.tcp_marks", True),
                                        ("autoencoder.residual_channels", 4)])
def test_a_retired_option_in_use_is_refused_by_name(tiny_checkpoint, tmp_path, key, value):
    old = as_format_1(tiny_checkpoint, tmp_path / "v1", **{key: value})
    with pytest.raises(CheckpointError, match=f"{key}: this checkpoint uses the retired option '{key.split('.')[1]}'"):
        WorldModel.from_pretrained(old)


def test_a_format_1_config_lacking_a_key_takes_format_1s_default():
    """A key a format-1 config lacks means what it meant in format 1, though format 2's default differs."""
    d = preset("tiny").to_dict()
    d["format_version"] = 1
    for key in ("window", "gripper_conditioning", "arm_conditioning"):
        del d[key]
    del d["autoencoder"]["reference_head_channels"], d["autoencoder"]["decoder_layers_per_block"]
    cfg = WorldModelConfig.from_dict(d)
    assert (cfg.window, cfg.gripper_conditioning, cfg.arm_conditioning) == (16, "measured", "measured")
    assert (cfg.autoencoder.reference_head_channels, cfg.autoencoder.decoder_layers_per_block) == (0, None)
    with pytest.raises(ValueError, match="format_version 3 is not supported"):
        WorldModelConfig.from_dict({**preset("tiny").to_dict(), "format_version": 3})
    with pytest.raises(ValueError, match="unknown dit config fields \\['wrist_rays'\\]"):  # format 2 has no such key
        WorldModelConfig.from_dict({**preset("tiny").to_dict(), "dit": {**preset("tiny").to_dict()["dit"],
                                                                         "wrist_rays": False}})


def test_a_format_1_training_run_resumes(tmp_path):
    """A run whose checkpoint a format-1 trainer wrote (its config with the retired keys, its trainer.json with
    the retired options at their off values) resumes on the same loss curve as a run that never stopped."""
    from neuralsim.world_model.train import TrainConfig, train

    def cfg(out, steps):
        return TrainConfig(stage="autoencoder", data="synthetic:8", out=str(out), config="tiny", steps=steps,
                           batch_size=2, log_every=1, checkpoint_every=2, sample_every=-1, progress=False, warmup=2)

    straight, old = tmp_path / "straight", tmp_path / "old"
    train(cfg(straight, 4))
    train(cfg(old, 2))
    raw = old / "checkpoint" / "raw"
    shutil.move(raw, tmp_path / "raw_v2")
    as_format_1(tmp_path / "raw_v2", raw)
    trainer = json.loads((old / "checkpoint" / "trainer.json").read_text())
    trainer["train_config"].update(wrist_rays=False, tcp_marks=False, residual_channels=0, focus_weight=0.0,
                                   self_rollout=0, add_dit_blocks=0, dit_block_init="fresh", autoencoder_from=None,
                                   max_minutes=None, reference_head=0, gripper_conditioning=None,
                                   arm_conditioning=None, rollout_seed=None, latent_disk_cache=True)
    (old / "checkpoint" / "trainer.json").write_text(json.dumps(trainer))
    assert train(cfg(old, 4))["step"] == 4

    def losses(out):
        return [r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]

    assert losses(old) == losses(straight)
    assert json.loads((old / "model" / "config.json").read_text())["format_version"] == FORMAT_VERSION


def test_the_config_defaults_are_the_shipped_model():
    """``WorldModelConfig()`` (the ``default`` preset) is the shipped model's config, its training record aside."""
    shipped = WorldModel.from_pretrained(SHIPPED).config.to_dict()
    default = preset("default").to_dict()
    shipped.pop("recipe"), default.pop("recipe")
    assert default == shipped
    assert preset("default") == WorldModelConfig()


def test_the_scene_defaults_to_classic_and_an_unknown_one_is_refused():
    d = WorldModelConfig().to_dict()
    d.pop("scene")  # a checkpoint written before the field existed
    assert WorldModelConfig.from_dict(d).scene == "classic"
    with pytest.raises(ValueError, match="scene must be one of \\['classic', 'legible'\\], got 'kitchen'"):
        WorldModelConfig.from_dict({**d, "scene": "kitchen"})
