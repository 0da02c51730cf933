"""``scripts/contact_replay.py``: SimDROID replays with collisions switched off, against the env's adapter."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from neuralsim.data.generate import generate
from neuralsim.world_model.model import WorldModel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def contact_replay():
    spec = importlib.util.spec_from_file_location("contact_replay", ROOT / "scripts" / "contact_replay.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def episodes(tmp_path_factory) -> Path:
    # the held-out split's first two episodes: seed 1000000 puts a cube in the bowl, 1000001 pushes one to the pad
    root = tmp_path_factory.mktemp("contact") / "heldout"
    generate(root, 2, seed=1_000_000, progress=False)
    return root


def test_replays_reproduce_the_recording_and_the_adapter_is_the_contact_free_arm(contact_replay, episodes, tmp_path):
    out = tmp_path / "r.json"
    assert contact_replay.main(["--data", str(episodes), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = {r["task"]: r for r in report["per_episode"]}
    assert set(rows) == {"put_in_bowl", "push_to_pad"}
    for r in rows.values():
        assert r["full"] < 1e-5  # SimDROID from the same seed and task replays the recording exactly
        assert abs(r["no_contacts"] - r["adapter"]) < 1e-3  # the adapter is SimDROID's arm touching nothing
    # pushing, the cube holds the simulator's arm back: without it the arm ends far from the recorded one
    assert rows["push_to_pad"]["no_cubes"] > 0.05 > rows["put_in_bowl"]["no_cubes"]
    assert report["by_task"]["push_to_pad"]["full"]["within_5cm"] == 1


def test_a_world_model_is_driven_with_each_arm_on_the_same_noise(contact_replay, episodes, tiny_checkpoint):
    from benchmarks import fidelity as F

    report = contact_replay.measure_world_model(str(tiny_checkpoint), episodes, task="push_to_pad")
    assert report["episode_indices"] == [1]  # the push episode only
    scores = report["psnr_db"]
    assert set(scores) == set(contact_replay.WORLD_MODEL_ARMS)
    for arm in scores.values():
        assert all(np.isfinite(arm[w][0]) for w in ("frames_1_16", "frames_33_on", "last_frame"))
    # the recorded arm is fidelity's own recorded conditioning, noise included
    wm = WorldModel.from_pretrained(tiny_checkpoint)
    (e,) = [e for e in F.load_split(episodes, wm.config.autoencoder.image_size) if e.record["task"] == "push_to_pad"]
    (g,) = F.open_loop_recorded(wm, [e], seed=0)
    assert scores["recorded"]["last_frame"][0] == pytest.approx(float(F.psnr_frames(g[-1:], e.frames[-1:]).mean()))
    d = report["paired_against_adapter"]["recorded"]["last_frame"]
    gain = scores["recorded"]["last_frame"][0] - scores["adapter"]["last_frame"][0]
    assert d["n"] == 1 and d["mean"] == pytest.approx(gain)
    with pytest.raises(FileNotFoundError, match="no 'no_such_task' episodes"):
        contact_replay.measure_world_model(str(tiny_checkpoint), episodes, task="no_such_task")


def test_bad_input_is_refused_by_name(contact_replay, tmp_path, capsys):
    with pytest.raises(ValueError, match="mode must be one of"):
        contact_replay.replay(None, {}, [], "no_table")
    with pytest.raises(SystemExit):
        contact_replay.main(["--data", str(tmp_path / "missing")])
    assert "missing" in capsys.readouterr().err
