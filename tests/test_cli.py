"""The ``neuralsim`` console script, driven through ``main(argv)``."""

from __future__ import annotations

import pytest

from neuralsim.cli import main


def test_help_lists_commands_and_examples(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for word in ("demo", "data", "model", "train", "examples:", "neuralsim data generate", "neuralsim model info"):
        assert word in out
    with pytest.raises(SystemExit):
        main(["data", "generate", "--help"])
    assert "--failure-share" in capsys.readouterr().out
    assert main([]) == 2


def test_data_generate_and_info(tmp_path, capsys):
    out = tmp_path / "ds"
    rc = main(["data", "generate", str(out), "--episodes", "1", "--max-steps", "12", "--families", "stack",
               "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "1 episodes" in text and "episodes/min" in text
    assert (out / "meta" / "episodes.jsonl").is_file()
    assert main(["data", "info", str(out)]) == 0
    assert "simdroid layout, 1 episodes" in capsys.readouterr().out
    # asking again with other parameters is a one-line error, not a traceback
    assert main(["data", "generate", str(out), "--episodes", "1", "--max-steps", "13", "--no-progress"]) == 1
    assert "other parameters" in capsys.readouterr().err


def test_demo_writes_a_video(tmp_path, capsys):
    assert main(["demo", "--seed", "1", "--task", "put_in_bowl", "--steps", "10", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "instruction:" in out and "rubric level:" in out
    videos = list(tmp_path.glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 0 and str(videos[0]) in out


def test_demo_runs_in_the_shipped_world_models_scene_unless_told(tmp_path, capsys, monkeypatch):
    from neuralsim.cli import build_parser
    from neuralsim.envs import neural_droid_core

    parser = build_parser(full_train=False)
    assert parser.parse_args(["demo"]).scene is None  # None: the shipped world model's scene, read when it runs
    assert parser.parse_args(["demo", "--scene", "classic"]).scene == "classic"
    with pytest.raises(SystemExit):
        parser.parse_args(["demo", "--scene", "moon"])
    capsys.readouterr()
    monkeypatch.setattr(neural_droid_core, "checkpoint_scene", lambda checkpoint=None: "legible")  # a legible model
    assert main(["demo", "--seed", "1", "--task", "stack", "--steps", "3", "--out", str(tmp_path)]) == 0
    assert "scene:        legible (SimDROID-v1)" in capsys.readouterr().out
    assert [p.name for p in tmp_path.glob("*.mp4")] == ["simdroid_legible_stack_seed1.mp4"]


def test_missing_dataset_is_a_clear_error(tmp_path, capsys):
    assert main(["data", "info", str(tmp_path / "nope")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_train_help_is_generated_from_the_config_docstrings(capsys):
    """Every ``neuralsim train`` option is a TrainConfig field (or --recipe), documented once: its help is the
    field's docstring; there are at most 30 of them."""
    import dataclasses
    import re

    from neuralsim.world_model.arguments import field_docs, help_text
    from neuralsim.world_model.train import TrainConfig

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    options = re.findall(r"^  (-[-\w]+)", out, flags=re.M)
    assert len(options) <= 30 and "--recipe" in options and "--help" not in options  # "-h, --help"
    docs = field_docs(TrainConfig)
    flat = " ".join(out.split())
    for f in dataclasses.fields(TrainConfig):
        if f.metadata.get("cli", True):
            assert "--" + f.name.replace("_", "-") in options, f.name
            assert " ".join(help_text(docs[f.name]).replace("%%", "%").split()) in flat, f.name
    assert "--weight-decay" not in options  # a recipe-file option


def test_train_refuses_a_deadline_already_past_before_it_makes_any_data(tmp_path, capsys):
    """A clock time that has passed (say ``date -d 00:40`` typed before midnight) is refused at once, not found out
    after the data and latents are made; the recipe form is refused the same way."""
    import time
    from pathlib import Path

    import neuralsim

    out = tmp_path / "run"
    recipe_file = Path(neuralsim.__file__).parent / "world_model" / "recipes" / "legible_grounded.yaml"
    for recipe in ([], ["--recipe", str(recipe_file)]):
        with pytest.raises(SystemExit) as exited:
            main(["train", *recipe, "--out", str(out), "--deadline", str(int(time.time() - 600))])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "--deadline" in err and "min in the past" in err and "duration such as 2h" in err
    assert not out.exists()


def test_model_edit_writes_an_edited_copy(tiny_checkpoint, tmp_path, capsys):
    from neuralsim.world_model.model import WorldModel

    out = tmp_path / "edited"
    assert main(["model", "edit", str(tiny_checkpoint), "--out", str(out), "--reference-head", "8", "--window", "4",
                 "--arm-conditioning", "replay", "--float16"]) == 0
    assert str(out) in capsys.readouterr().out
    a, b = WorldModel.from_pretrained(tiny_checkpoint), WorldModel.from_pretrained(out)
    assert (b.config.window, b.config.arm_conditioning) == (4, "replay")
    assert b.config.autoencoder.reference_head_channels == 8
    assert b.config.recipe["edits"] == [{"reference_head": 8, "arm_conditioning": "replay", "window": 4}]
    for k, t in a.state_dict().items():  # everything else kept (to float16 rounding)
        assert t.shape == b.state_dict()[k].shape and (t.half().float() == b.state_dict()[k]).all(), k
    assert main(["model", "edit", str(tiny_checkpoint), "--out", str(out), "--window", "0"]) == 1  # a bad value
