"""``neuralsim train --recipe``: the shipped recipe end to end at a tiny budget, resumable stage by stage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from neuralsim.cli import main
from neuralsim.world_model.model import WorldModel
from neuralsim.world_model.recipe import load_recipe

DEFAULT = Path(__file__).resolve().parents[2] / "neuralsim" / "world_model" / "recipes" / "default.yaml"
LEGIBLE = DEFAULT.with_name("legible.yaml")
GROUNDED = DEFAULT.with_name("legible_grounded.yaml")


def tiny_recipe(tmp_path: Path) -> Path:
    """The shipped recipe, every section kept, at a tiny budget: the tests' model with the shipped model's parts
    (a pruned decoder, a reference head, its conditioning), one short episode per data set, two steps per stage."""
    recipe = load_recipe(DEFAULT)
    recipe["model"] = {"preset": "tiny", "autoencoder": {"decoder_layers_per_block": 0, "reference_head_channels": 8},
                       "gripper_conditioning": "command", "arm_conditioning": "replay"}
    recipe["data"] = {**recipe["data"], "root": str(tmp_path / "data"), "workers": 1,
                      "sets": {name: {**spec, "episodes": 1, "max_steps": 14}
                               for name, spec in recipe["data"]["sets"].items()}}
    for spec in recipe["stages"].values():
        spec.update(steps=2, batch_size=2, warmup=1, checkpoint_every=2, log_every=1, sample_every=-1,
                    **({"decay_steps": 1} if spec.get("decay_steps") else {}))
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def test_the_shipped_recipe_runs_every_stage_then_resumes_by_skipping_them(tmp_path, caplog):
    recipe, out = tiny_recipe(tmp_path), tmp_path / "run"
    args = ["train", "--recipe", str(recipe), "--out", str(out), "--no-progress", "--num-threads", "1"]
    assert main(args) == 0
    stages = list(load_recipe(DEFAULT)["stages"])
    assert stages == ["autoencoder", "diffusion_forcing", "step_forcing", "step_forcing_mix", "decoder",
                      "reference_head", "decoder_final"]
    for name in stages:
        assert json.loads((out / name / "done.json").read_text())["steps"] == 2
    final = WorldModel.from_pretrained(out / "final")
    assert final.config.window == 32 and final.config.autoencoder.reference_head_channels == 8
    with open(out / "final" / "model.safetensors", "rb") as f:  # float16, as shipped
        header = f.read(int.from_bytes(f.read(8), "little"))
    assert b'"F16"' in header and b'"F32"' not in header
    recorded = [(s["stage"], s["objective"], s.get("head_only", False), s.get("rollout_share", 0))
                for s in final.config.recipe["stages"]]
    assert recorded == [("autoencoder", "reconstruction", False, 0), ("dit", "diffusion_forcing", False, 0),
                        ("dit", "step_forcing", False, 0), ("dit", "step_forcing", False, 0),
                        ("decoder", "reconstruction", False, 0.75), ("decoder", "reconstruction", True, 0.75),
                        ("decoder", "reconstruction", False, 0.75)]
    assert final.config.recipe["dit_step_forcing_steps"] == 4 and final.config.recipe["edits"] == [{"window": 32}]
    head = WorldModel.from_pretrained(out / "decoder" / "model").state_dict()
    trained = WorldModel.from_pretrained(out / "reference_head" / "model").state_dict()
    moved = {k for k in head if not torch.equal(head[k], trained[k])}
    assert moved and all(k.startswith("autoencoder.ref_head.") for k in moved)  # head_only trains the head alone

    shipped = load_file(out / "final" / "model.safetensors")
    shutil.rmtree(tmp_path / "data")  # a finished run carried to another machine has no data there
    shutil.rmtree(out / "final")
    caplog.clear()
    with caplog.at_level("INFO"):
        assert main(args) == 0  # everything finished: every stage skipped, the same model shipped
    assert sum("skipped" in r.getMessage() for r in caplog.records) == len(stages)
    assert not (tmp_path / "data").exists(), "a finished run made its data again"
    again = load_file(out / "final" / "model.safetensors")
    assert again.keys() == shipped.keys() and all(torch.equal(again[k], shipped[k]) for k in shipped)
    spec = yaml.safe_load(recipe.read_text())
    spec["stages"]["decoder_final"]["lr"] = 1.0
    recipe.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(ValueError, match="stage 'decoder_final' finished with other settings \\(lr differ\\)"):
        main(["--verbose", *args])


def test_a_recipe_is_checked_before_anything_runs(tmp_path):
    recipe = yaml.safe_load(DEFAULT.read_text())
    recipe["stages"]["autoencoder"]["focus_weight"] = 8.0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(ValueError, match="stage 'autoencoder': unknown options \\['focus_weight'\\]"):
        load_recipe(path)
    recipe["stages"]["autoencoder"].pop("focus_weight")
    recipe["stages"]["autoencoder"]["data"] = ["simdroid_heldout"]
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(ValueError, match="data must list data sets of the data section"):
        load_recipe(path)
    assert main(["train", "--recipe", str(DEFAULT), "--stage", "dit", "--out", str(tmp_path / "x")]) == 1
    assert not (tmp_path / "x").exists()


def test_a_repeated_stage_runs_as_parts_that_continue_one_another(tmp_path):
    recipe = yaml.safe_load(tiny_recipe(tmp_path).read_text())
    recipe["stages"] = {"autoencoder": recipe["stages"]["autoencoder"],
                        "step_forcing": {**recipe["stages"]["step_forcing"], "repeat": 3}}
    path = tmp_path / "repeat.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    assert list(load_recipe(path)["stages"]) == ["autoencoder", "step_forcing_1", "step_forcing_2", "step_forcing_3"]
    out = tmp_path / "run"
    assert main(["train", "--recipe", str(path), "--out", str(out), "--no-progress", "--num-threads", "1"]) == 0
    final = WorldModel.from_pretrained(out / "final")
    assert final.config.recipe["dit_step_forcing_steps"] == 6  # three parts of 2 steps, each from the one before
    first = WorldModel.from_pretrained(out / "step_forcing_1" / "model").state_dict()
    last = WorldModel.from_pretrained(out / "step_forcing_3" / "model").state_dict()
    assert any(not torch.equal(first[k], last[k]) for k in first if k.startswith("dit."))
    for bad in (0, 1.5, True, "2"):
        recipe["stages"]["step_forcing"]["repeat"] = bad
        path.write_text(yaml.safe_dump(recipe, sort_keys=False))
        with pytest.raises(ValueError, match="stage 'step_forcing': repeat must be a whole number >= 1"):
            load_recipe(path)
    recipe["stages"]["step_forcing"]["repeat"] = 2
    recipe["stages"]["step_forcing_2"] = dict(recipe["stages"]["autoencoder"])
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    with pytest.raises(ValueError, match="stage 'step_forcing_2' is named twice"):
        load_recipe(path)


def test_the_legible_recipe_trains_the_same_stages_on_legible_data(tmp_path):
    from neuralsim.world_model.recipe import make_data

    recipe = load_recipe(LEGIBLE)
    # the default's stages, Step Forcing and the decoder split into session-sized parts that continue one another:
    # each `X_2` follows X and trains what X trains
    names = list(recipe["stages"])
    assert [name for name in names if not name.endswith("_2")] == list(load_recipe(DEFAULT)["stages"])
    for i, name in enumerate(names):
        if name.endswith("_2"):
            first, part = recipe["stages"][names[i - 1]], recipe["stages"][name]
            assert names[i - 1] == name[:-2]
            assert {k: part[k] for k in ("stage", "data")} == {k: first[k] for k in ("stage", "data")}
            assert part.get("objective") == first.get("objective")
    sets = recipe["data"]["sets"]
    assert {spec["scene"] for spec in sets.values()} == {"legible"}
    recipe["data"] = {"root": str(tmp_path), "workers": 1,
                      "sets": {"legible_idle": {**sets["legible_idle"], "episodes": 1, "max_steps": 8}}}
    make_data(recipe, progress=False)  # a set's scene reaches `neuralsim data generate`
    data = tmp_path / "legible_idle"
    info = json.loads((data / "meta" / "info.json").read_text())
    assert info["source"] == "SimDROID-v1" and info["generation"]["scene"] == "legible"

    # a model trained on it is a legible model, and NeuralDROID starts it from the legible layouts
    from neuralsim.envs.episodes import default_episodes
    from neuralsim.envs.neural_droid import NeuralDROIDEnv

    out = tmp_path / "ae"
    assert main(["train", "--stage", "autoencoder", "--config", "tiny", "--data", str(data), "--out", str(out),
                 "--steps", "1", "--batch-size", "1", "--num-threads", "1", "--no-progress"]) == 0
    assert WorldModel.from_pretrained(out / "model").config.scene == "legible"
    env = NeuralDROIDEnv(checkpoint=out / "model", reward_fn=None)
    _, info = env.reset(seed=0)
    assert env.episodes is default_episodes("legible")
    assert info["episode_name"] in {s.name for s in default_episodes("legible")}
    # its rollouts say so, and the default judge reads them with the legible scene's weights
    from judges.offline import default_weights_dir
    from judges.offline.judge import OfflineJudge

    env.step(env.action_space.sample() * 0)
    rollout = env.unwrapped.episode()
    assert rollout.metadata["scene"] == "legible" and rollout.metadata["spec_source"] == "SimDROID-v1"
    assert OfflineJudge()(rollout).model == str(default_weights_dir("legible"))
    classic = tmp_path / "classic"
    main(["data", "generate", str(classic), "--episodes", "1", "--actor", "idle", "--max-steps", "8", "--no-progress"])
    with pytest.raises(ValueError, match="mixes SimDROID scenes"):
        main(["--verbose", "train", "--stage", "autoencoder", "--config", "tiny", "--data", f"{data},{classic}",
              "--out", str(tmp_path / "mixed"), "--steps", "1", "--no-progress"])


def test_the_grounded_recipe_trains_the_chosen_design_on_the_legible_data_at_the_shipped_budget(tmp_path):
    recipe, legible, default = load_recipe(GROUNDED), load_recipe(LEGIBLE), load_recipe(DEFAULT)
    assert recipe["data"] == legible["data"]

    def steps(r: dict, objective: str, sets: int) -> int:  # Step Forcing on the expert (1 set) or the mix (3)
        return sum(s["steps"] for s in r["stages"].values()
                   if s.get("objective") == objective and len(s["data"]) == sets)

    for objective, sets in (("diffusion_forcing", 1), ("step_forcing", 1), ("step_forcing", 3)):
        assert steps(recipe, objective, sets) == steps(default, objective, sets) > 0, (objective, sets)
    names = list(recipe["stages"])
    assert names[:3] == ["autoencoder", "diffusion_forcing", "step_forcing_01"]
    assert [n for n in names if n.startswith("decoder") or n == "reference_head"] == \
        [n for n in legible["stages"] if n.startswith("decoder") or n == "reference_head"]

    # its model section from scratch: grounded through the legible cameras, Fourier features fitted by the first
    # DiT stage
    sets = recipe["data"]["sets"]
    recipe["model"] = {**recipe["model"], "preset": "tiny"}
    recipe["data"] = {"root": str(tmp_path / "data"), "workers": 1,
                      "sets": {name: {**spec, "episodes": 1, "max_steps": 14} for name, spec in sets.items()}}
    recipe["stages"] = {name: {**recipe["stages"][name], "steps": 2, "batch_size": 2, "warmup": 1,
                               "checkpoint_every": 2} for name in names[:3]}
    path = tmp_path / "grounded.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    assert main(["train", "--recipe", str(path), "--out", str(tmp_path / "run"), "--no-progress",
                 "--num-threads", "1"]) == 0
    config = WorldModel.from_pretrained(tmp_path / "run" / "final").config
    assert config.scene == "legible" and config.dit.grounding == "projected"
    assert config.dit.geometry["scene"] == "legible" and config.dit.condition_features == "fourier"
    assert config.recipe["condition_stats_fitted"] and config.recipe["dit_step_forcing_steps"] == 2


@pytest.mark.slow
def test_the_recipe_runs_under_torchrun(tmp_path):
    """Two CPU ranks (gloo): rank 0 makes the data and the first model while rank 1 waits, every stage trains
    under DDP (the recipe records the global batch) and rank 0 ships."""
    import os
    import subprocess
    import sys

    recipe, out = tiny_recipe(tmp_path), tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "neuralsim", "train", "--recipe", str(recipe), "--out", str(out), "--no-progress",
           "--num-threads", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    final = WorldModel.from_pretrained(out / "final")
    assert [s["batch_size"] for s in final.config.recipe["stages"]] == [4] * 7  # 2 ranks x 2 clips
    assert all(s["steps_run"] == 2 for s in final.config.recipe["stages"])
