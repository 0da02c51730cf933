"""The offline learned judge: architecture, save/load, training script, benchmark, reward-function use."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from judges.judge import segment_plan
from judges.judgement import OfflineJudgeNotTrainedError
from judges.offline.dataset import read_episode_index, iter_episodes
from judges.offline.evaluate import level_accuracy
from judges.offline.features import collate, episode_inputs, frame_indices
from judges.offline.judge import OfflineJudge
from judges.offline.model import OfflineJudgeConfig, OfflineJudgeModel
from judges.registry import make_binary, make_roboworld
from judges.rubric import load_rubric
from judges_testing import make_episode, write_synthetic_dataset

TINY = OfflineJudgeConfig(image_size=16, channels=(8, 16), dim=32, heads=2, layers=1, vocab_buckets=64)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_synthetic_dataset(tmp_path_factory.mktemp("simdroid"), num_episodes=8)


@pytest.fixture(scope="module")
def trained(dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("weights")
    cmd = [sys.executable, "-m", "judges.offline.train", "--data", str(dataset), "--out", str(out), "--epochs", "2",
           "--batch-size", "4", "--image-size", "32", "--dim", "32", "--layers", "1", "--val-fraction", "0.25"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return out


def test_model_sees_the_vlm_frames_and_ignores_padding():
    assert np.array_equal(frame_indices(451, 15.0, TINY), np.concatenate(segment_plan(451, 15.0, load_rubric("roboworld_progress"))))
    torch.manual_seed(0)
    model = OfflineJudgeModel(TINY).eval()
    short, long = make_episode(num_frames=61, size=16, seed=1), make_episode(num_frames=451, size=16, seed=2)
    a = episode_inputs(short, TINY)
    assert a[0].shape == (5, 3, 3, 16, 16) and a[0].dtype == torch.uint8
    alone = model(*collate([a], TINY.max_frames))
    batched = model(*collate([a, episode_inputs(long, TINY)], TINY.max_frames))
    assert batched.shape == (2, 6)
    torch.testing.assert_close(alone[0], batched[0], rtol=1e-4, atol=1e-5)  # padding is masked out


def test_save_load_roundtrip(tmp_path):
    torch.manual_seed(0)
    model = OfflineJudgeModel(TINY).eval()
    model.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    loaded = OfflineJudgeModel.from_pretrained(tmp_path)
    assert loaded.config == model.config
    x = collate([episode_inputs(make_episode(num_frames=31, size=16), TINY)], TINY.max_frames)
    torch.testing.assert_close(model(*x), loaded(*x))


def test_untrained_offline_judge_says_how_to_train(tmp_path):
    with pytest.raises(OfflineJudgeNotTrainedError, match="judges.offline.train"):
        OfflineJudge(tmp_path / "empty")
    with pytest.raises(OfflineJudgeNotTrainedError, match="judges.offline.train"):
        make_roboworld(f"offline/{tmp_path}/empty")


def test_dataset_reader(dataset):
    rows = read_episode_index(dataset)
    assert [r["rubric_level"] for r in rows][:4] == [0, 2, 4, 5] and rows[0]["instruction"].startswith("put")
    ep = next(iter_episodes(dataset, rows[:1]))
    assert ep.fps == 15.0 and ep.frames["wrist_image_left"].shape == (61, 32, 32, 3) and ep.label == 0


def test_train_script_and_reward_function(trained, dataset):
    assert {p.name for p in trained.iterdir()} >= {"model.safetensors", "config.json", "metrics.json"}
    metrics = json.loads((trained / "metrics.json").read_text())
    assert metrics["train_episodes"] == 6 and metrics["heldout_episodes"] == 2 and 0 <= metrics["heldout"]["exact"] <= 1
    ep = make_episode(num_frames=61, size=32)
    j = make_roboworld(f"offline/{trained}")(ep)
    assert j.ok and j.score in {0.0, 1.0, 2.0, 3.0, 4.0, 5.0} and j.backend == "offline" and j.cost_usd == 0.0
    assert len(j.criteria["level_probabilities"]) == 6
    json.dumps(j.to_dict())
    b = make_binary(f"offline/{trained}")(ep)
    assert b.ok and b.score in {0.0, 1.0} and b.rubric == "binary_success"
    bad = OfflineJudge(trained)(object())  # never raises
    assert not bad.ok and bad.score is None


def test_accuracy_benchmark(trained, dataset, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    from benchmarks.judge_accuracy import Args, run

    r = run(Args(data=str(dataset), judge=f"roboworld:offline/{trained}", group_by="family", out=str(tmp_path / "acc.json")))
    assert r["overall"]["n"] == 8 and r["overall"]["failed"] == 0
    assert set(r["by_family"]) == {"fam0", "fam1"}
    assert json.loads((tmp_path / "acc.json").read_text())["overall"]["within_1"] >= r["overall"]["exact"]


def test_level_accuracy():
    acc = level_accuracy([0, 2, 4, 5], [0, 3, 2, None])
    assert acc["exact"] == 0.25 and acc["within_1"] == 0.5 and acc["failed"] == 1
    assert acc["confusion"][2][3] == 1


def test_default_offline_name_resolves_to_shipped_weights():
    from judges.offline import DEFAULT_WEIGHTS_DIR

    if (DEFAULT_WEIGHTS_DIR / "model.safetensors").is_file():
        assert make_roboworld("offline").weights == DEFAULT_WEIGHTS_DIR and make_roboworld("").weights == DEFAULT_WEIGHTS_DIR
    else:
        with pytest.raises(OfflineJudgeNotTrainedError, match="python -m judges.offline.train"):
            make_roboworld("offline")
