"""``neuralsim model info``: a checkpoint's summary read from its config and safetensors header."""

from __future__ import annotations

import json
import shutil

import pytest

from neuralsim.cli import main
from neuralsim.world_model.info import checkpoint_info, format_checkpoint_info, stage_options, stage_steps_run
from neuralsim.world_model.model import CheckpointError, WorldModel


def _sf(**kw):
    return {"stage": "dit", "objective": "step_forcing", "steps": 1000, **kw}


def test_steps_run_recorded_derived_or_unknown():
    recipe = {
        "dit_step_forcing_steps": 950, "decoder_reconstruction_steps": 300,
        "stages": [
            _sf(),                                               # next SF stage continues from 400 -> 400
            {"stage": "decoder", "objective": "reconstruction", "steps": 500},  # successor restarted -> ?
            _sf(continues_from_step=400, steps_run=250),         # recorded wins over any derivation
            {"stage": "decoder", "objective": "reconstruction", "steps": 500},  # last decoder: 300 - 0
            _sf(continues_from_step=650),                        # last SF: 950 - 650
        ]}
    assert stage_steps_run(recipe) == [(400, "derived"), (None, "unknown"), (250, "recorded"),
                                       (300, "derived"), (300, "derived")]
    # a total below the stage's start (an inconsistent recipe) is not turned into a negative count
    assert stage_steps_run({"dit_step_forcing_steps": 10, "stages": [_sf(continues_from_step=50)]}) == \
        [(None, "unknown")]
    # no total at all for the last stage of its kind
    assert stage_steps_run({"stages": [_sf()]}) == [(None, "unknown")]


def test_info_of_a_saved_model_matches_the_model(tiny_checkpoint, tmp_path):
    info = checkpoint_info(tiny_checkpoint)
    wm = WorldModel.from_pretrained(tiny_checkpoint)
    n = {k: sum(p.numel() for k2, p in wm.state_dict().items() if k2.startswith(k)) for k in ("dit.", "autoencoder.")}
    assert info["parameters"]["total"] == sum(p.numel() for p in wm.state_dict().values())
    assert info["parameters"]["DiT"] == n["dit."]
    assert info["parameters"]["autoencoder encoder"] + info["parameters"]["autoencoder decoder"] == n["autoencoder."]
    assert info["is_neuralsim_world_model"] and info["config_matches_weights"]
    assert info["architecture"]["dit_depth"] == wm.config.dit.depth
    assert info["inference"]["window"] == wm.config.window
    assert info["inference"]["schedule"] == list(wm.config.schedule)
    assert info["file_bytes"]["model.safetensors"] == (tiny_checkpoint / "model.safetensors").stat().st_size
    assert "format, config hash and weights hash OK" in format_checkpoint_info(info)
    assert info["architecture"]["gripper_conditioning"] == "measured"
    assert info["architecture"]["arm_conditioning"] == "measured"
    wm.config.gripper_conditioning = "command"
    wm.save_pretrained(tmp_path / "command")
    assert "(arm: measured, gripper: command)" in format_checkpoint_info(checkpoint_info(tmp_path / "command"))
    wm.config.arm_conditioning = "replay"
    wm.save_pretrained(tmp_path / "replay")
    assert "(arm: replay, gripper: command)" in format_checkpoint_info(checkpoint_info(tmp_path / "replay"))


def test_info_names_a_decoder_stage_trained_on_rollouts(tiny_checkpoint, tmp_path):
    wm = WorldModel.from_pretrained(tiny_checkpoint)
    wm.config.recipe = {**wm.config.recipe, "stages": [
        {"stage": "decoder", "objective": "reconstruction", "steps": 20, "steps_run": 20, "rollout_share": 0.75}]}
    wm.save_pretrained(tmp_path / "m")
    text = format_checkpoint_info(checkpoint_info(tmp_path / "m"))
    assert "reconstruction + rollouts 0.75" in text
    assert "rollouts" not in format_checkpoint_info(checkpoint_info(tiny_checkpoint))


def test_stage_options_name_what_each_stage_was_given():
    assert stage_options(_sf()) == []
    assert stage_options(_sf(arm_conditioning="replay", gripper_conditioning="command")) == \
        ["arm: replay", "gripper: command"]
    # an option of an older trainer that this version does not name: its key and value, as recorded
    assert stage_options(_sf(focus_weight=8.0, self_rollout=0, cool_down_secs=900.0)) == ["focus_weight 8.0"]
    dec = {"stage": "decoder", "objective": "reconstruction", "steps": 10, "decoder_layers_per_block": 0}
    assert stage_options({**dec, "rollout_share": 0.75, "rollout_seed": 0, "head_only": True, "change_weight": 10.0},
                         previous_decoder_depth=0) == ["rollouts 0.75", "reference head only", "change weight 10"]
    assert stage_options(dec, previous_decoder_depth=1) == ["decoder 1 -> 0 layer(s) per block"]
    assert stage_options(dec, previous_decoder_depth=None) == ["decoder 0 layer(s) per block"]


def test_info_tracks_the_decoder_depth_from_stage_to_stage(tiny_checkpoint, tmp_path):
    wm = WorldModel.from_pretrained(tiny_checkpoint)
    enc = wm.config.autoencoder.layers_per_block
    dec = {"stage": "decoder", "objective": "reconstruction", "steps": 10, "steps_run": 10}
    wm.config.recipe = {**wm.config.recipe, "stages": [
        {**dec, "decoder_layers_per_block": enc},              # as built: nothing to say
        _sf(steps_run=5, arm_conditioning="replay"),           # a DiT stage leaves the decoder's depth alone
        {**dec, "decoder_layers_per_block": enc + 1},          # deepened
        {**dec},                                               # from before the trainer recorded the depth
        {**dec, "decoder_layers_per_block": enc + 1}]}         # the depth before it is unknown
    wm.save_pretrained(tmp_path / "m")
    rows = [ln.split() for ln in format_checkpoint_info(checkpoint_info(tmp_path / "m")).splitlines()
            if ln.startswith("    ") and ln.split()[0].isdigit()]
    text = {r[0]: " ".join(r[2:]) for r in rows}
    assert "layer(s)" not in text["1"]
    assert "step_forcing + arm: replay" in text["2"]
    assert f"reconstruction + decoder {enc} -> {enc + 1} layer(s) per block" in text["3"]
    assert "layer(s)" not in text["4"]
    assert f"reconstruction + decoder {enc + 1} layer(s) per block" in text["5"]


def test_cli_prints_the_shipped_models_recipe(capsys):
    assert main(["model", "info"]) == 0
    out = capsys.readouterr().out
    assert "format, config hash and weights hash OK" in out and "training stages" in out and "step_forcing" in out
    assert main(["model", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    steps_sf = sum(s["steps_run"] for s in info["stages"] if s.get("objective") == "step_forcing")
    # every Step Forcing stage's steps run, recorded or derived, adds up to the recipe's total
    assert steps_sf == info["recipe_totals"]["dit_step_forcing_steps"]


def test_info_of_a_hub_id_reads_the_local_hub_cache(offline_hub, tiny_checkpoint, capsys):
    offline_hub("neuralsim/tiny-world-model", tiny_checkpoint)
    assert main(["model", "info", "neuralsim/tiny-world-model", "--json"]) == 0
    from_hub = json.loads(capsys.readouterr().out)
    assert from_hub["parameters"] == checkpoint_info(tiny_checkpoint)["parameters"]
    assert from_hub["config_matches_weights"] is True
    with pytest.raises(CheckpointError, match="could not be fetched"):
        checkpoint_info("neuralsim/not-cached")


def test_a_config_edited_by_hand_is_reported(tiny_checkpoint, tmp_path, capsys):
    ckpt = tmp_path / "edited"
    shutil.copytree(tiny_checkpoint, ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["window"] = cfg["window"] + 1
    (ckpt / "config.json").write_text(json.dumps(cfg))
    assert checkpoint_info(ckpt)["config_matches_weights"] is False
    assert main(["model", "info", str(ckpt)]) == 1
    assert "config hash MISMATCH" in capsys.readouterr().out


def test_missing_or_corrupt_files_are_clear_errors(tiny_checkpoint, tmp_path, capsys):
    with pytest.raises(CheckpointError, match="is not a directory"):
        checkpoint_info(tmp_path / "nowhere")
    ckpt = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, ckpt)
    (ckpt / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="corrupt or not a safetensors file"):
        checkpoint_info(ckpt)
    (ckpt / "config.json").unlink()
    assert main(["model", "info", str(ckpt)]) == 1
    assert "has no config.json" in capsys.readouterr().err
