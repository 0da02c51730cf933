"""The offline learned judge: architecture, save/load, training script, benchmark, reward-function use."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from judges.judge import segment_plan
from judges.judgement import OfflineJudgeNotTrainedError
from judges.offline.dataset import iter_episodes, read_episode_index
from judges.offline.evaluate import level_accuracy
from judges.offline.features import collate, episode_inputs, frame_indices
from judges.offline.judge import OfflineJudge
from judges.offline.model import VIEW_NAMES, OfflineJudgeConfig, OfflineJudgeModel
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
    plan = segment_plan(451, 15.0, load_rubric("roboworld_progress"))
    assert np.array_equal(frame_indices(451, 15.0, TINY), np.concatenate(plan))
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
    from benchmarks.judges.accuracy import Args, run

    r = run(Args(data=str(dataset), judge=f"roboworld:offline/{trained}", group_by="family",
                 out=str(tmp_path / "acc.json")))
    assert r["overall"]["n"] == 8 and r["overall"]["failed"] == 0
    assert set(r["by_family"]) == {"fam0", "fam1"}
    report = json.loads((tmp_path / "acc.json").read_text())
    assert list(report["runs"]) == [f"roboworld:offline/{trained} on {dataset}"]
    assert report["runs"][f"roboworld:offline/{trained} on {dataset}"]["overall"]["within_1"] >= r["overall"]["exact"]


def test_accuracy_report_keeps_one_entry_per_judge_and_dataset(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    from benchmarks.judges.accuracy import write_entry

    path = tmp_path / "judge_accuracy.json"
    write_entry(path, {"judge": "a", "data": "d1", "n": 1})
    write_entry(path, {"judge": "a", "data": "d2", "n": 2})
    write_entry(path, {"judge": "a", "data": "d1", "n": 3})  # the same judge on the same data: replaced
    runs = json.loads(path.read_text())["runs"]
    assert {k: v["n"] for k, v in runs.items()} == {"a on d1": 3, "a on d2": 2}
    path.write_text("{}")
    with pytest.raises(ValueError, match="not a judge-accuracy report"):
        write_entry(path, {"judge": "a", "data": "d1", "n": 1})


def test_level_accuracy():
    acc = level_accuracy([0, 2, 4, 5], [0, 3, 2, None])
    assert acc["exact"] == 0.25 and acc["within_1"] == 0.5 and acc["failed"] == 1
    assert acc["confusion"][2][3] == 1


def test_shipped_weights_are_the_default_reward():
    """The trained judge ships in the package, small, and is what NeuralDROID's default reward loads."""
    from judges.offline import DEFAULT_WEIGHTS_DIR
    from neuralsim.envs.neural_droid import DEFAULT_REWARD_FN
    from neuralsim.rewards import make_reward_fn

    assert {p.name for p in DEFAULT_WEIGHTS_DIR.iterdir()} >= {"model.safetensors", "config.json", "metrics.json"}
    assert (DEFAULT_WEIGHTS_DIR / "model.safetensors").stat().st_size < 4_000_000
    assert DEFAULT_REWARD_FN == "roboworld:offline"
    judge = make_reward_fn(DEFAULT_REWARD_FN)
    assert isinstance(judge, OfflineJudge) and judge.weights is None  # each scene's shipped judge
    assert judge.weights_for("classic") == DEFAULT_WEIGHTS_DIR
    assert make_roboworld("offline").weights is None and make_roboworld("").weights is None
    metrics = json.loads((DEFAULT_WEIGHTS_DIR / "metrics.json").read_text())
    assert metrics["heldout_episodes"] > 0 and not metrics["heldout_is_training_set"]


@pytest.fixture(scope="module")
def expert_rollout():
    """One clean (noise-free) scripted-expert episode in SimDROID, from a seed the training data never used."""
    from neuralsim.data.generate import run_expert
    from neuralsim.envs.experts import ScriptedExpert
    from neuralsim.envs.sim_droid import SimDROIDEnv

    env = SimDROIDEnv(image_size=64, reward_fn=None)
    try:
        seed = 3_000_001
        return run_expert(env, ScriptedExpert(env, noise=0.0, seed=seed), seed, "put_in_bowl")
    finally:
        env.close()


def test_shipped_judge_scores_a_simdroid_episode(expert_rollout):
    from neuralsim.rewards import make_reward_fn

    j = make_reward_fn("roboworld:offline")(expert_rollout.episode)
    assert j.ok and j.backend == "offline" and j.score in {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}
    assert abs(sum(j.criteria["level_probabilities"]) - 1) < 1e-4
    # a clean expert success: every one of the 32 clean successes of the held-out benchmark set was
    # judged 4 or 5 (27 of them 5), so "at least 4" is a property of the judge, not luck
    assert expert_rollout.info["success"] and expert_rollout.info["rubric_level"] == 5
    assert j.score >= 4


def test_half_precision_weights_load_as_float32(tmp_path):
    from safetensors.torch import load_file

    torch.manual_seed(0)
    model = OfflineJudgeModel(TINY).eval()
    model.save_pretrained(tmp_path / "fp32")
    model.save_pretrained(tmp_path / "fp16", dtype="float16")
    stored = load_file(str(tmp_path / "fp16" / "model.safetensors"))
    assert all(v.dtype == torch.float16 for v in stored.values() if v.is_floating_point())
    size = lambda d: (tmp_path / d / "model.safetensors").stat().st_size  # noqa: E731
    assert size("fp16") < 0.6 * size("fp32")
    loaded = OfflineJudgeModel.from_pretrained(tmp_path / "fp16")
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    x = collate([episode_inputs(make_episode(num_frames=31, size=16), TINY)], TINY.max_frames)
    torch.testing.assert_close(loaded(*x), model(*x), rtol=0, atol=1e-2)
    with pytest.raises(ValueError, match="float16"):
        model.save_pretrained(tmp_path / "bad", dtype="int8")


def test_split_keeps_a_replay_with_its_source_episode():
    from judges.offline.dataset import heldout_keys, split_key, split_rows

    sim = [{"episode_index": i} for i in range(40)]
    wm = [{"episode_index": i, "source_episode_index": i} for i in range(0, 40, 3)]
    held = heldout_keys([split_key(r) for r in sim + wm], 0.25, seed=3)
    assert len(held) == 10
    (_, sim_val), (wm_train, wm_val) = split_rows(sim, 0.25, 3, heldout=held), split_rows(wm, 0.25, 3, heldout=held)
    assert {r["episode_index"] for r in wm_val} <= {r["episode_index"] for r in sim_val}
    assert not {r["episode_index"] for r in wm_train} & held
    assert split_rows(sim, 0.25, 3) == split_rows(sim, 0.25, 3, heldout=heldout_keys(range(40), 0.25, 3))


# ---- world-model replays -------------------------------------------------------------------------
def _write_source_dataset(root, lengths=(5, 8, 3), size=16):
    """SimDROID-layout episodes (random views, DROID reset pose, small random actions) with labels.

    Per-frame levels (``ground_truth.rubric_level``) climb to the final level over the episode.
    """
    from neuralsim import kinematics as K
    from neuralsim.data import writer as W
    from neuralsim.episode import Episode

    rng = np.random.default_rng(0)
    W.write_info(root, W.new_info(size))
    records = []
    for i, n in enumerate(lengths):
        q = np.repeat(K.RESET_JOINT_POSITION[None], n, 0).astype(np.float32)
        ep = Episode(frames={v: rng.integers(0, 255, (n, size, size, 3), dtype=np.uint8) for v in VIEW_NAMES},
                     joint_position=q, gripper_position=np.zeros((n, 1), np.float32),
                     cartesian_position=K.forward_kinematics(q).astype(np.float32),
                     actions=np.concatenate([rng.uniform(-0.3, 0.3, (n - 1, 7)), rng.uniform(0, 1, (n - 1, 1))],
                                            1).astype(np.float32),
                     instruction="put the red cube in the blue bowl")
        level = [5, 4, 0][i]
        W.write_episode(root, ep, i, extra_columns={"rubric_level": np.minimum(np.arange(n), level).astype(np.int8),
                                                    "target_distance": np.linspace(0.3, 0.01 * i, n, dtype=np.float32)})
        rec = W.episode_record(ep, i, task="put_in_bowl", family="put_in_bowl", seed=100 + i, success=i == 0,
                               rubric_level=level, failure=None)
        W.append_record(root, rec)
        records.append(rec)
    W.update_totals(root, records)
    return root


def test_world_model_replays_keep_the_simdroid_label(tmp_path, tiny_checkpoint):
    from judges.offline.wm_rollouts import ReplayConfig, replay
    from neuralsim.data.reader import load_episode

    src = _write_source_dataset(tmp_path / "sim")
    cfg = ReplayConfig(checkpoint=str(tiny_checkpoint), data=str(src), out=str(tmp_path / "wm"), batch_size=2,
                       num_threads=1, progress=False)
    s = replay(cfg)
    assert (s["written"], s["skipped"], s["total"], s["frames"]) == (3, 0, 3, 5 + 8 + 3)
    rows = read_episode_index(tmp_path / "wm")
    assert [r["rubric_level"] for r in rows] == [5, 4, 0] and {r["source"] for r in rows} == {"world_model"}
    assert [r["source_episode_index"] for r in rows] == [0, 1, 2] and rows[1]["family"] == "put_in_bowl"
    for r in rows:  # same actions, same first state; frames are the world model's
        a = load_episode(src, r).to_episode()
        b = load_episode(tmp_path / "wm", r).to_episode()
        assert b.num_frames == a.num_frames
        np.testing.assert_allclose(b.actions, a.actions, atol=1e-6)
        np.testing.assert_allclose(b.joint_position[0], a.joint_position[0], atol=1e-6)
        assert not np.array_equal(b.frames["exterior_image_1_left"][1:], a.frames["exterior_image_1_left"][1:])
    ep = next(iter_episodes(tmp_path / "wm", rows[:1]))
    assert ep.label == 5 and ep.frames["wrist_image_left"].shape == (5, 16, 16, 3)
    assert ep.frame_levels.tolist() == [0, 1, 2, 3, 4]  # the source's per-frame truth, copied
    from judges.offline.dataset import read_ground_truth

    for r in rows:  # every ground_truth column, frame for frame
        a, b = read_ground_truth(src, r["episode_index"]), read_ground_truth(tmp_path / "wm", r["episode_index"])
        assert set(b) == {"rubric_level", "target_distance"}
        for k in a:
            np.testing.assert_array_equal(b[k], a[k])
    part = replay(ReplayConfig(checkpoint=str(tiny_checkpoint), data=str(src), out=str(tmp_path / "wm_part"),
                               first=1, episodes=1, num_threads=1, progress=False))
    assert part["written"] == 1 and [r["episode_index"] for r in read_episode_index(tmp_path / "wm_part")] == [1]
    again = replay(cfg)  # resumes: nothing left to do
    assert (again["written"], again["skipped"], again["total"]) == (0, 3, 3)
    other = shutil.copytree(tiny_checkpoint, tmp_path / "other_world_model")
    with pytest.raises(ValueError, match="other settings"):
        replay(ReplayConfig(checkpoint=str(other), data=str(src), out=cfg.out, progress=False))


def test_training_prefixes_carry_the_level_at_their_end():
    from judges.offline.train import TrainConfig, _Stored

    cfg = TrainConfig(data=["unused"], model=TINY, prefix_prob=1.0)
    ep = make_episode(num_frames=61, size=16, seed=3)
    ep.frame_levels = np.minimum(np.arange(61) // 10, 5)
    ep.label = 5
    stored = _Stored.from_episode(ep, "src", cfg)
    frames, _, label, targets, dist, goal = stored.sample(None, cfg)  # the whole episode
    idx = frame_indices(61, 15.0, TINY)
    assert label == 5 and targets.tolist() == np.minimum(idx // 10, 5).tolist()
    assert torch.isnan(dist).all() and torch.isnan(goal).all()  # not recorded: ignored by the loss
    torch.testing.assert_close(frames, episode_inputs(ep, TINY)[0])
    rng = np.random.default_rng(0)
    for _ in range(20):
        frames, _, label, targets, *_ = stored.sample(rng, cfg)
        n = len(targets)
        assert frames.shape[0] == n and label == targets[-1] and 1 <= n <= 5
    plain = make_episode(num_frames=61, size=16)
    plain.label = 2  # a LabelledEpisode without per-frame levels: whole episodes only
    no_levels = _Stored.from_episode(plain, "src", cfg)
    assert no_levels.kept.tolist() == idx.tolist() and (no_levels.sample(rng, cfg)[3] == -100).all()
    torch.manual_seed(0)
    model = OfflineJudgeModel(TINY).eval()
    x = collate([episode_inputs(ep, TINY), episode_inputs(make_episode(num_frames=31, size=16), TINY)], TINY.max_frames)
    logits, frame_logits = model.forward_with_frames(*x)
    assert logits.shape == (2, 6) and frame_logits.shape == (2, len(idx), 6)
    torch.testing.assert_close(model(*x), logits)


def test_hold_extends_whole_episodes_with_their_last_frame():
    """Hold episodes: the last frame repeats up to a random length <= hold_to, labels unchanged."""
    from judges.offline.train import TrainConfig, _Stored

    cfg = TrainConfig(data=["unused"], model=TINY, prefix_prob=0.0, hold_prob=1.0, hold_to=151)
    ep = make_episode(num_frames=61, size=16, seed=5)
    ep.frame_levels = np.minimum(np.arange(61) // 10, 5)
    ep.label = 5
    ep.frame_distances = np.linspace(0.2, 0.0, 61).astype(np.float32)
    stored = _Stored.from_episode(ep, "src", cfg)
    last = episode_inputs(ep, TINY)[0][-1]
    rng, lengths = np.random.default_rng(0), set()
    for _ in range(30):
        frames, _, label, targets, dist, goal = stored.sample(rng, cfg)
        n = len(targets)
        lengths.add(n)
        whole = len(frame_indices(61, 15.0, TINY))
        assert label == 5 and n == frames.shape[0] and n >= whole
        torch.testing.assert_close(frames[: whole - 1], episode_inputs(ep, TINY)[0][:-1])
        assert all(torch.equal(f, last) for f in frames[whole - 1:])  # only the held last frame after that
        assert (targets[whole - 1:] == 5).all() and (dist[whole - 1:] == 0).all()
    assert len(lengths) > 1 and max(lengths) <= len(frame_indices(151, 15.0, TINY))
    assert stored.sample(None, cfg)[3].shape[0] == len(frame_indices(61, 15.0, TINY))  # evaluation: never held
    long_ep = make_episode(num_frames=151, size=16)
    long_ep.label = 1
    long = _Stored.from_episode(long_ep, "src", cfg)
    assert len(long.sample(rng, cfg)[3]) == len(frame_indices(151, 15.0, TINY))  # already at the horizon
    with pytest.raises(ValueError, match="hold_prob"):
        TrainConfig(data=["unused"], hold_prob=1.5)


def test_final_goal_offset_from_the_record():
    from judges.offline.dataset import final_goal_offset

    poses = {"red_cube": [0.62, -0.1, 0.03], "blue_cube": [0.6, -0.12, 0.03], "bowl": [0.5, 0.1, 0], "pad": [0.4, 0, 0]}
    row = {"family": "put_in_bowl", "target": "red_cube", "base": None, "final_poses": poses}
    np.testing.assert_allclose(final_goal_offset(row), [0.12, -0.2], atol=1e-6)
    np.testing.assert_allclose(final_goal_offset({**row, "family": "push_to_pad"}), [0.22, -0.1], atol=1e-6)
    np.testing.assert_allclose(final_goal_offset({**row, "family": "stack", "base": "blue_cube"}), [0.02, 0.02],
                               atol=1e-6)
    assert final_goal_offset({**row, "final_poses": None}) is None  # e.g. real DROID records
    assert final_goal_offset({**row, "family": "stack", "base": "green_cube"}) is None


def test_auxiliary_heads_targets_and_learning(tmp_path):
    """Distance and goal heads: targets in 5 cm units clipped at 20 cm, off by default, and they learn."""
    from judges.offline.model import DISTANCE_CLIP_UNITS, DISTANCE_UNIT_M
    from judges.offline.train import TrainConfig, _Stored

    cfg = TrainConfig(data=["unused"], model=TINY, prefix_prob=0.0)
    ep = make_episode(num_frames=61, size=16, seed=4)
    ep.frame_distances = np.linspace(0.5, 0.0, 61).astype(np.float32)
    ep.label = 5
    ep.metadata = {"family": "put_in_bowl", "target": "red_cube", "final_poses": {"red_cube": [0.53, 0.5, 0.03],
                                                                                  "bowl": [0.5, 0.0, 0.0]}}
    stored = _Stored.from_episode(ep, "src", cfg)
    dist, goal = stored.sample(None, cfg)[4:]
    np.testing.assert_allclose(goal.numpy(), [0.6, DISTANCE_CLIP_UNITS], rtol=1e-5)  # 3 cm, 50 cm clipped
    prefix, rng = TrainConfig(data=["unused"], model=TINY, prefix_prob=1.0), np.random.default_rng(0)
    ep.frame_levels = np.minimum(np.arange(61) // 10, 5)
    samples = [_Stored.from_episode(ep, "src", prefix).sample(rng, prefix) for _ in range(20)]
    whole = len(frame_indices(61, 15.0, TINY))
    assert all(len(s[3]) == whole for s in samples if not torch.isnan(s[5]).any())  # a prefix has no final pose
    assert any(torch.isnan(s[5]).all() for s in samples)
    idx = frame_indices(61, 15.0, TINY)
    expect = np.clip(ep.frame_distances[idx] / DISTANCE_UNIT_M, 0, DISTANCE_CLIP_UNITS)
    np.testing.assert_allclose(dist.numpy(), expect, rtol=1e-5)
    assert dist.max() == DISTANCE_CLIP_UNITS and dist[-1] == 0.0

    x = collate([episode_inputs(ep, TINY)], TINY.max_frames)
    plain = OfflineJudgeModel(TINY).forward_all(*x)
    assert plain.distance is None and plain.goal_offset is None  # off by default: old checkpoints load unchanged
    torch.manual_seed(0)
    with_heads = OfflineJudgeConfig(**{**TINY.__dict__, "distance_head": True, "goal_head": True})
    model = OfflineJudgeModel(with_heads)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(60):
        out = model.forward_all(*x)
        loss = (torch.nn.functional.smooth_l1_loss(out.distance[0], dist)
                + torch.nn.functional.smooth_l1_loss(out.goal_offset[0], goal))
        first = float(loss.detach()) if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.1 * first
    model.save_pretrained(tmp_path)
    loaded = OfflineJudgeModel.from_pretrained(tmp_path)
    assert loaded.config.distance_head and loaded.config.goal_head
    torch.testing.assert_close(loaded.eval().forward_all(*x).goal_offset, model.eval().forward_all(*x).goal_offset)


def test_train_script_with_auxiliary_heads(tmp_path):
    data = write_synthetic_dataset(tmp_path / "sim", num_episodes=6, ground_truth=True)
    ep = next(iter_episodes(data, read_episode_index(data)[3:4]))  # level 5
    assert ep.frame_levels[-1] == 5 and ep.frame_distances.shape == (61,) and ep.frame_distances[-1] < 0.05
    out = tmp_path / "weights"
    cmd = [sys.executable, "-m", "judges.offline.train", "--data", str(data), "--out", str(out), "--epochs", "2",
           "--batch-size", "3", "--image-size", "32", "--dim", "32", "--layers", "1", "--val-fraction", "0.34",
           "--distance-head", "--goal-head"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    model = OfflineJudgeModel.from_pretrained(out)
    assert model.config.distance_head and model.config.goal_head and model.goal_head is not None
    j = make_roboworld(f"offline/{out}")(make_episode(num_frames=61, size=32))
    assert j.ok and j.score in {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}


def test_the_default_judge_reads_each_episode_with_its_scenes_weights():
    import dataclasses

    from judges.offline import default_weights_dir

    judge = OfflineJudge()
    classic = make_episode(num_frames=31, size=64, seed=3)
    legible = dataclasses.replace(classic, metadata={"source": "NeuralDROID-v0", "scene": "legible"})
    assert judge(classic).model == str(default_weights_dir("classic"))
    assert judge(legible).model == str(default_weights_dir("legible"))
    # a mixed batch answers each row with its own scene's judge
    alone = OfflineJudge(default_weights_dir("legible")).predict_proba([legible])[0]
    mixed = judge.predict_proba([classic, legible])
    np.testing.assert_allclose(mixed[0], judge.predict_proba([classic])[0], atol=1e-5)
    np.testing.assert_allclose(mixed[1], alone, atol=1e-5)
    assert not np.allclose(mixed[0], mixed[1], atol=1e-3)  # two different judges
    # an explicit directory judges every episode, whatever its scene
    assert OfflineJudge(default_weights_dir("classic"))(legible).model == str(default_weights_dir("classic"))
    with pytest.raises(ValueError, match="unknown scene 'moon'"):
        default_weights_dir("moon")


@pytest.fixture(scope="module")
def legible_dataset(tmp_path_factory):
    """A one-episode dataset of the legible scene (SimDROID-v1), 8 steps: its records name no scene, its
    meta/info.json does."""
    from neuralsim.data.generate import generate

    root = tmp_path_factory.mktemp("legible_data")
    generate(root, episodes=1, seed=5_000_000, max_steps=8, families=["stack"], progress=False, scene="legible")
    return root


def test_a_legible_dataset_episode_is_judged_by_the_legible_judge(legible_dataset, dataset):
    from judges.offline import default_weights_dir
    from judges.offline.train import default_out
    from neuralsim.data.reader import read_episode

    legible = default_weights_dir("legible")
    judge = OfflineJudge()
    assert judge._models == {}  # nothing loaded until an episode of a scene arrives
    (labelled,) = iter_episodes(legible_dataset)  # what the judge is trained and benchmarked on
    episode = read_episode(legible_dataset, 0)  # what the world model trains on
    assert labelled.metadata["scene"] == episode.metadata["scene"] == "legible"
    for ep in (labelled, episode):
        j = judge(ep)
        assert j.ok and j.model == str(legible)
    assert list(judge._models) == [legible]  # the classic judge was never loaded
    assert read_episode_index(dataset)[0]["scene"] == "classic"  # a dataset that records no scene is classic
    broken = judge(type("Broken", (), {"metadata": {"scene": "legible"}})())
    assert not broken.ok and broken.model == str(legible)  # a failure names the weights it was for
    # a judge trained on the dataset goes where the legible judge ships
    assert default_out([str(legible_dataset)]) == legible and default_out([str(dataset)]) == default_weights_dir()
    with pytest.raises(ValueError, match="mixes SimDROID scenes.*--out"):
        default_out([str(dataset), str(legible_dataset)])


def test_world_model_replays_are_of_the_models_scene(tmp_path, legible_dataset, tiny_legible_checkpoint):
    from judges.offline.wm_rollouts import ReplayConfig, replay

    def cfg(data, out):
        return ReplayConfig(checkpoint=str(tiny_legible_checkpoint), data=str(data), out=str(tmp_path / out),
                            batch_size=1, num_threads=1, progress=False)

    with pytest.raises(ValueError, match="'classic' scene but the world model .* was trained on 'legible'"):
        replay(cfg(_write_source_dataset(tmp_path / "classic"), "refused"))
    assert replay(cfg(legible_dataset, "wm"))["written"] == 1
    assert read_episode_index(tmp_path / "wm")[0]["scene"] == "legible"  # read, and judged, as a legible episode
