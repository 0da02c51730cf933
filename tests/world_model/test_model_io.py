"""WorldModel inference API, determinism, save/load round trip and checkpoint validation."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from neuralsim.world_model.config import preset
from neuralsim.world_model.model import CheckpointError, WorldModel

from .conftest import conds, latents, randomise


def _views(wm, b, seed=0):
    s = wm.config.autoencoder.image_size
    return torch.randint(0, 256, (b, 3, s, s, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def _rollout(wm, steps=8, seed=123):
    state = wm.new_state(2, window=4)
    wm.reset(state, [0, 1], _views(wm, 2), conds(2))
    g = torch.Generator().manual_seed(seed)
    return torch.stack([wm.step(state, conds(2, seed=10 + i), generator=g) for i in range(steps)])


def test_step_api_shapes_and_determinism(tiny_model):
    out = _rollout(tiny_model)
    s = tiny_model.config.autoencoder.image_size
    assert out.shape == (8, 2, 3, s, s, 3) and out.dtype == torch.uint8
    assert torch.equal(out, _rollout(tiny_model))
    assert not torch.equal(out, _rollout(tiny_model, seed=124))


def test_reset_subset_of_rows_and_bad_inputs(tiny_model):
    wm = tiny_model
    state = wm.new_state(3)
    wm.reset(state, None, _views(wm, 3), conds(3))
    wm.step(state, conds(3))
    wm.reset(state, [2], _views(wm, 1, seed=5), conds(1))
    # the cache holds every frame but the latest, which is pending (committed by the next step's first pass)
    assert state.cache.num_frames.tolist() == [1, 1, 0] and state.has_pending.tolist() == [True, True, True]
    fresh = wm.new_state(2)
    wm.reset(fresh, [0], _views(wm, 1), conds(1))
    with pytest.raises(RuntimeError, match=r"rows \[1\] have no context frame"):
        wm.step(fresh, conds(2))
    with pytest.raises(ValueError, match="cond must be"):
        wm.step(state, torch.zeros(3, 6))
    with pytest.raises(ValueError, match="first_views"):
        wm.reset(state, [0], _views(wm, 2), conds(1))


def test_encode_decode_shapes(tiny_model):
    v = _views(tiny_model, 2)
    z = tiny_model.encode(v)
    d = tiny_model.config.dit
    assert z.shape == (2, 3, d.latent_channels, d.latent_size, d.latent_size)
    assert tiny_model.decode(z).shape == v.shape


def test_save_load_round_trip_is_bit_exact(tiny_model, tmp_path):
    randomise(tiny_model.autoencoder, seed=3, std=0.05)
    tiny_model.latent_mean.fill_(0.1)
    tiny_model.config.recipe = {"note": "test"}
    tiny_model.save_pretrained(tmp_path / "m")
    loaded = WorldModel.from_pretrained(tmp_path / "m")
    assert loaded.config == tiny_model.config
    for (k, a), (k2, b) in zip(tiny_model.state_dict().items(), loaded.state_dict().items()):
        assert k == k2 and torch.equal(a, b)
    assert torch.equal(_rollout(tiny_model), _rollout(loaded))


def test_float16_checkpoint_halves_the_file_and_loads_as_float32(tiny_model, tmp_path):
    tiny_model.save_pretrained(tmp_path / "fp32")
    tiny_model.save_pretrained(tmp_path / "fp16", dtype=torch.float16)
    size = {n: (tmp_path / n / "model.safetensors").stat().st_size for n in ("fp32", "fp16")}
    assert size["fp16"] < 0.55 * size["fp32"]
    loaded = WorldModel.from_pretrained(tmp_path / "fp16")
    for k, a in tiny_model.state_dict().items():
        b = loaded.state_dict()[k]
        assert b.dtype == a.dtype
        assert torch.equal(b, a.half().to(a.dtype)) if a.is_floating_point() else torch.equal(a, b)
    again = WorldModel.from_pretrained(tmp_path / "fp16")  # deterministic: same file, same rollout
    assert torch.equal(_rollout(loaded), _rollout(again))
    with pytest.raises(ValueError, match="floating-point"):
        tiny_model.save_pretrained(tmp_path / "int", dtype=torch.int8)


def test_corrupt_and_mismatched_checkpoints_are_refused(tiny_model, tmp_path):
    d = tmp_path / "m"
    tiny_model.save_pretrained(d)
    weights = (d / "model.safetensors").read_bytes()
    cfg_text = (d / "config.json").read_text()

    (d / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    with pytest.raises(CheckpointError, match="corrupt"):
        WorldModel.from_pretrained(d)
    (d / "model.safetensors").write_bytes(b"\x80\x03garbage pickle")
    with pytest.raises(CheckpointError, match="corrupt"):
        WorldModel.from_pretrained(d)
    (d / "model.safetensors").write_bytes(weights)

    cfg = json.loads(cfg_text)
    cfg["dit"]["dim"] = 64
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="different config"):
        WorldModel.from_pretrained(d)
    (d / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="invalid world model config"):
        WorldModel.from_pretrained(d)
    cfg = json.loads(cfg_text)
    cfg["dit"]["bogus"] = 1
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="bogus"):
        WorldModel.from_pretrained(d)
    (d / "config.json").write_text(cfg_text)

    # right hash, wrong tensors
    from neuralsim.world_model.model import config_digest

    save_file({"dit.pos_embed": torch.zeros(3)}, str(d / "model.safetensors"),
              metadata={"format": "neuralsim.world_model", "config_sha256": config_digest(cfg_text)})
    with pytest.raises(CheckpointError, match="does not match the model"):
        WorldModel.from_pretrained(d)
    state = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    state["dit.pos_embed"] = torch.zeros(5, 5)
    save_file(state, str(d / "model.safetensors"),
              metadata={"format": "neuralsim.world_model", "config_sha256": config_digest(cfg_text)})
    with pytest.raises(CheckpointError, match="shapes"):
        WorldModel.from_pretrained(d)

    (d / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        WorldModel.from_pretrained(d)


def test_config_validation():
    with pytest.raises(ValueError, match="unknown world model config preset"):
        preset("huge")
    cfg = preset("tiny").to_dict()
    cfg["schedule"] = [0.5, 0.25, 1.0]
    from neuralsim.world_model.config import WorldModelConfig

    with pytest.raises(ValueError, match="strictly increasing"):
        WorldModelConfig.from_dict(cfg)
    cfg = preset("tiny").to_dict()
    cfg["gripper_conditioning"] = "closed"
    with pytest.raises(ValueError, match="gripper_conditioning must be one of"):
        WorldModelConfig.from_dict(cfg)
    # a config without the field: today's default (format-1 configs that predate it: the measured gripper,
    # test_checkpoint_format.py)
    del cfg["gripper_conditioning"]
    assert WorldModelConfig.from_dict(cfg).gripper_conditioning == "command"
    cfg["arm_conditioning"] = "commanded"
    with pytest.raises(ValueError, match="arm_conditioning must be one of"):
        WorldModelConfig.from_dict(cfg)
    cfg["arm_conditioning"] = "measured"
    assert WorldModelConfig.from_dict(cfg).arm_conditioning == "measured"
    cfg["arm_conditioning"] = "replay"
    assert WorldModelConfig.from_dict(cfg).arm_conditioning == "replay"


def test_import_neuralsim_world_model_is_light():
    import subprocess
    import sys

    code = "import sys, neuralsim.world_model; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_take_decoder_from_copies_only_the_decoder_and_checks_the_encoder(tiny_model):
    import copy

    from neuralsim.world_model.model import DECODER_PREFIXES, CheckpointError

    base = copy.deepcopy(tiny_model)
    base.config.recipe = {"stages": [{"stage": "dit", "objective": "step_forcing", "steps": 10}]}
    donor = copy.deepcopy(tiny_model)
    donor.config.recipe = {"stages": [{"stage": "dit", "steps": 5}, {"stage": "decoder", "steps": 7}],
                           "decoder_reconstruction_steps": 6, "dit_step_forcing_steps": 5}
    with torch.no_grad():
        for p in donor.parameters():
            p.add_(0.01)  # every weight differs, encoder and DiT included
    with pytest.raises(CheckpointError, match="different encoder"):
        copy.deepcopy(base).take_decoder_from(donor)
    with torch.no_grad():  # the donor now shares the encoder: only its decoder and DiT differ
        for name, t in donor.state_dict().items():
            if not name.startswith(DECODER_PREFIXES) and not name.startswith("dit."):
                t.copy_(base.state_dict()[name])
    before = {k: v.clone() for k, v in base.state_dict().items()}
    base.take_decoder_from(donor)
    after, theirs = base.state_dict(), donor.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed and all(k.startswith(DECODER_PREFIXES) for k in changed)
    assert all(torch.equal(after[k], theirs[k]) for k in after if k.startswith(DECODER_PREFIXES))
    assert [st["stage"] for st in base.config.recipe["stages"]] == ["dit", "decoder"]
    assert base.config.recipe["decoder_reconstruction_steps"] == 6
    assert "dit_step_forcing_steps" not in base.config.recipe
    # taking another decoder replaces the decoder history instead of appending to it
    donor.config.recipe["stages"] = [{"stage": "decoder", "steps": 7}, {"stage": "decoder", "steps": 9}]
    base.take_decoder_from(donor)
    assert [st.get("steps") for st in base.config.recipe["stages"]] == [10, 7, 9]


def test_with_decoder_layers_prunes_the_decoder_and_keeps_everything_else(tiny_model, tmp_path):
    """A shallower decoder: fewer decoder weights, same encoder/DiT/statistics; deepening back is the identity."""
    import copy

    base = copy.deepcopy(tiny_model)
    randomise(base.autoencoder, seed=3, std=0.1)  # the tiny model's decoder must do something
    assert base.config.autoencoder.decoder_depth == 1
    pruned = base.with_decoder_layers(0)
    assert pruned.config.autoencoder.decoder_layers_per_block == 0
    assert base.config.autoencoder.decoder_layers_per_block is None  # the source is untouched
    ours, theirs = pruned.state_dict(), base.state_dict()
    assert set(ours) < set(theirs)
    dropped = set(theirs) - set(ours)
    assert dropped and all(".resnets.1." in k and k.startswith("autoencoder.vae.decoder.up_blocks.") for k in dropped)
    assert all(torch.equal(t, theirs[k]) for k, t in ours.items())

    z = latents(base.config, 2, seed=1)
    with torch.inference_mode():
        full, short = base.decode(z), pruned.decode(z)
        # deepening adds ResNets whose output convolution is zero: the same function as the pruned one
        deep = pruned.with_decoder_layers(1)
        assert torch.equal(deep.decode(z), short)
        assert torch.equal(pruned.encode(full), base.encode(full))
    assert short.shape == full.shape and not torch.equal(short, full)

    # the depth is part of the checkpoint
    pruned.save_pretrained(tmp_path / "p")
    assert json.loads((tmp_path / "p" / "config.json").read_text())["autoencoder"]["decoder_layers_per_block"] == 0
    back = WorldModel.from_pretrained(tmp_path / "p")
    with torch.inference_mode():
        assert torch.equal(back.decode(z), short)
    with pytest.raises(ValueError, match="decoder_layers_per_block must be >= 0"):
        base.with_decoder_layers(-1)


def test_take_decoder_from_a_donor_with_another_decoder_depth(tiny_model):
    """The DiT of one run and the shallower decoder of another: the model adopts the donor's decoder shape."""
    import copy

    base = copy.deepcopy(tiny_model)
    donor = base.with_decoder_layers(0)
    with torch.no_grad():
        for name, p in donor.named_parameters():
            if name.startswith("autoencoder.vae.decoder."):
                p.add_(0.05)
    base.take_decoder_from(donor)
    assert base.config.autoencoder.decoder_depth == 0
    z = latents(base.config, 1, seed=2)
    with torch.inference_mode():
        assert torch.equal(base.decode(z), donor.decode(z))
    assert all(torch.equal(t, tiny_model.state_dict()[k]) for k, t in base.state_dict().items() if k.startswith("dit."))


def test_model_edit_fresh_dit_keeps_the_autoencoder_and_forgets_the_dit(tiny_model, tmp_path):
    """``neuralsim model edit --fresh-dit``: the autoencoder and latent statistics bit for bit, a DiT drawn afresh
    from the seed (the same for the same seed), and a recipe without the DiT's stages."""
    import torch

    from neuralsim.world_model.edit import EditConfig, edit_model
    from neuralsim.world_model.model import WorldModel

    tiny_model.config.recipe = {"autoencoder_reconstruction_steps": 5, "dit_step_forcing_steps": 7,
                                "latent_stats_fitted": True,
                                "stages": [{"stage": "autoencoder", "objective": "reconstruction", "steps": 5},
                                           {"stage": "dit", "objective": "step_forcing", "steps": 7}]}
    src = tiny_model.save_pretrained(tmp_path / "src")
    a = edit_model(EditConfig(checkpoint=str(src), out=str(tmp_path / "a"), fresh_dit=True, seed=3))
    edit_model(EditConfig(checkpoint=str(src), out=str(tmp_path / "b"), fresh_dit=True, seed=3))
    b = WorldModel.from_pretrained(tmp_path / "b")
    old, new = tiny_model.state_dict(), a.state_dict()
    assert all(torch.equal(old[k], new[k]) for k in old if not k.startswith("dit."))
    assert not torch.equal(old["dit.patch_embed.weight"], new["dit.patch_embed.weight"])
    assert all(torch.equal(new[k], b.state_dict()[k]) for k in new)
    assert a.config.recipe == {"autoencoder_reconstruction_steps": 5, "latent_stats_fitted": True,
                               "stages": [{"stage": "autoencoder", "objective": "reconstruction", "steps": 5}],
                               "edits": [{"fresh_dit": 3}]}


def test_model_edit_fresh_dit_at_another_patch_size_generates_frames_of_the_same_latent(tiny_model, tmp_path):
    """``--fresh-dit --patch-size P``: a DiT of (latent / P)^2 tokens a view on the same autoencoder, which rolls out
    latents of the same shape and records the edit; a patch size alone, or one not dividing the latent, is refused."""
    from neuralsim.world_model.edit import EditConfig, edit_model
    from neuralsim.world_model.model import WorldModel

    src = tiny_model.save_pretrained(tmp_path / "src")
    old = tiny_model.config.dit
    assert old.patch_size == 4
    edit_model(EditConfig(checkpoint=str(src), out=str(tmp_path / "p2"), fresh_dit=True, patch_size=2, seed=1))
    fine = WorldModel.from_pretrained(tmp_path / "p2")
    assert fine.config.dit.patch_size == 2
    assert fine.config.dit.tokens_per_view == 4 * old.tokens_per_view
    assert fine.config.recipe["edits"] == [{"fresh_dit": 1, "patch_size": 2}]
    assert all(torch.equal(t, tiny_model.state_dict()[k]) for k, t in fine.state_dict().items()
               if not k.startswith("dit."))
    cfg = fine.config
    views = torch.randint(0, 255, (1, cfg.dit.num_views, cfg.autoencoder.image_size, cfg.autoencoder.image_size, 3),
                          dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    state = fine.new_state(1)
    fine.reset(state, None, views, conds(1))
    with torch.inference_mode():
        x = fine.generate(state, latents(cfg, 1), conds(1, seed=2))
    assert x.shape == latents(cfg, 1).shape and torch.isfinite(x).all()

    with pytest.raises(ValueError, match="needs fresh_dit"):
        edit_model(EditConfig(checkpoint=str(src), out=str(tmp_path / "bad"), patch_size=2))
    with pytest.raises(ValueError, match="patch_size=3 must"):
        edit_model(EditConfig(checkpoint=str(src), out=str(tmp_path / "bad"), fresh_dit=True, patch_size=3))
    assert not (tmp_path / "bad").exists()


def test_observe_teacher_forces_the_next_frame_exactly_where_generate_puts_it(tiny_model):
    """Observing the frames a rollout generated reproduces that rollout's state: the next frame is the same."""
    wm, cfg = tiny_model, tiny_model.config
    views = torch.randint(0, 255, (2, cfg.dit.num_views, wm.config.autoencoder.image_size,
                                   wm.config.autoencoder.image_size, 3), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(0))
    c = conds(4, 2)
    noise = latents(cfg, 4, 2)
    a = wm.new_state(2)
    wm.reset(a, None, views, c[0])
    xs = [wm.generate(a, noise[t], c[t]) for t in (1, 2, 3)]
    b = wm.new_state(2)
    wm.reset(b, None, views, c[0])
    wm.observe(b, xs[0], c[1])
    wm.observe(b, xs[1], c[2])
    torch.testing.assert_close(wm.generate(b, noise[3], c[3]), xs[2], atol=1e-4, rtol=0)
    # a different observed frame changes what comes next
    other = wm.new_state(2)
    wm.reset(other, None, views, c[0])
    wm.observe(other, xs[0] + 1.0, c[1])
    wm.observe(other, xs[1], c[2])
    assert (wm.generate(other, noise[3], c[3]) - xs[2]).abs().max() > 1e-3
    with pytest.raises(ValueError, match="latents must be"):
        wm.observe(b, xs[0][:1], c[1])
    with pytest.raises(RuntimeError, match="no context frame"):
        wm.observe(wm.new_state(2), xs[0], c[1])
