"""benchmarks.fidelity (and its object probe) on a tiny random world model (16x16 views) and 2 + 1 episode
SimDROID splits."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("pytorch_msssim")

from benchmarks.common import object_probe as P  # noqa: E402
from benchmarks.common.stats import wilson_interval  # noqa: E402
from benchmarks.fidelity import fidelity as F  # noqa: E402
from neuralsim.data.generate import generate  # noqa: E402
from neuralsim.data.reader import list_episodes  # noqa: E402
from neuralsim.episode import VIEW_NAMES  # noqa: E402
from neuralsim.world_model.model import CheckpointError, WorldModel  # noqa: E402

STEPS = 14  # frames per episode - 1: covers tiny's in-horizon (1..6) and beyond (7..12) windows


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def splits(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fidelity_data")
    generate(root / "heldout", 2, seed=1_000_000, max_steps=STEPS, progress=False)
    generate(root / "ood", 1, seed=2_000_000, max_steps=STEPS, progress=False, ood=True)
    return {"heldout": root / "heldout", "ood": root / "ood"}


@pytest.fixture(scope="module")
def probe_samples() -> dict[str, np.ndarray]:
    samples = P.collect_samples(2, max_steps=8, stride=4, progress=False)
    assert samples["views"].shape[1:] == (2, 64, 64, 3) and samples["xyz"].shape[1:] == (3, 3)
    return samples


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory, probe_samples) -> Path:
    probe, report = P.train(probe_samples, steps=3, batch_size=4, progress=False)
    assert "val_xy_error_m_mean" in report
    return P.save(probe, tmp_path_factory.mktemp("probe"), report)


def test_identical_frames_score_perfectly():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (5, 3, 16, 16, 3), dtype=np.uint8)
    np.testing.assert_array_equal(F.psnr_frames(a, a), F.PSNR_CAP_DB)
    np.testing.assert_allclose(F.ssim_frames(a, a), 1.0, atol=1e-6)
    b = a.copy()
    b[..., 0] = 255 - b[..., 0]
    assert (F.psnr_frames(a, b) < 20).all() and (F.ssim_frames(a, b) < 0.9).all()
    assert F.psnr_frames(a, b).shape == F.ssim_frames(a, b).shape == (5, 3)
    # a uniform error of 10/255 is 20 log10(255/10) dB
    c = np.full((16, 16, 3), 100, np.uint8)
    np.testing.assert_allclose(F.psnr_frames(c, c + 10), 20 * np.log10(25.5), rtol=1e-9)
    episodes = [a, a[:3]]
    m = F.frame_metrics(episodes, episodes, F.Windows(clip_length=2))
    assert m["psnr"]["in_horizon"]["mean"] == F.PSNR_CAP_DB and m["ssim"]["in_horizon"]["mean"] == pytest.approx(1.0)
    assert m["psnr"]["in_horizon"]["frames"] == 4 and m["psnr"]["beyond"]["frames"] == 2  # frame 0 excluded
    assert m["mse"]["beyond"]["mean"] == 0.0 and len(m["ssim"]["per_frame"]) == 4


def test_sharpness_tells_blur_from_noise():
    """1 for the truth itself, below 1 for a blurred copy (which a hedging model draws), above 1 for added noise."""
    rng = np.random.default_rng(2)
    truth = rng.integers(40, 216, (4, 3, 16, 16, 3)).astype(np.uint8)
    blurred = ((truth.astype(np.float64) + np.roll(truth, 1, -2) + np.roll(truth, 1, -3)
                + np.roll(truth, (1, 1), (-3, -2))) / 4).astype(np.uint8)
    np.testing.assert_allclose(F.sharpness_frames(truth, truth), 1.0)
    assert (F.sharpness_frames(blurred, truth) < 0.7).all() and F.sharpness_frames(blurred, truth).shape == (4, 3)
    assert (F.sharpness_frames(_noisy(truth, 30.0, 0), truth) > 1.05).all()
    flat = np.full((2, 16, 16, 3), 90, np.uint8)
    assert np.isfinite(F.sharpness_frames(truth[0, :2], flat)).all()  # a flat true frame does not divide by 0
    m = F.frame_metrics([blurred], [truth], F.Windows(clip_length=2))
    assert m["sharpness"]["in_horizon"]["mean"] < 0.7 and len(m["sharpness"]["per_frame"]) == 4


def test_paired_intervals_use_students_t():
    """A 95% interval from n differences is mean ± t(n - 1) * se: a few episodes give a wide one."""
    for df, table in ((1, 12.706), (3, 3.182), (10, 2.228), (59, 2.001)):  # printed t tables, 97.5%
        assert F.t_quantile_975(df) == pytest.approx(table, abs=5e-4)
    assert F.t_quantile_975(10**6) == pytest.approx(1.96, abs=1e-3)
    with pytest.raises(ValueError, match="df"):
        F.t_quantile_975(0)
    d = np.array([0.1, 0.3, 0.2, 0.6])
    s = F.difference_summary(d)
    se = d.std(ddof=1) / 2
    assert s["se"] == pytest.approx(se) and s["ci95"] == pytest.approx([d.mean() - 3.1824 * se, d.mean() + 3.1824 * se],
                                                                       abs=1e-4)
    assert "± 0.3" in F.format_paired({"a": "a", "b": "b", "split": "s", "episodes": 4,
                                       "frames": {"psnr_in_horizon": {v: s for v in (*VIEW_NAMES, "mean")}}})


def _noisy(frames: np.ndarray, sigma: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(frames + rng.normal(0.0, sigma, frames.shape), 0, 255).astype(np.uint8)


def test_per_episode_scores_and_paired_differences():
    """Each episode's window means are kept; B - A pairs them by episode index, so a B that is better on
    one episode only shows it there, and episodes only one side scored drop out."""
    rng = np.random.default_rng(1)
    truth = [rng.integers(0, 256, (5, 3, 16, 16, 3), dtype=np.uint8) for _ in range(3)]
    truth[2] = truth[2][:3]  # too short for the beyond window (frames 3..4)
    windows = F.Windows(clip_length=2)
    gen_a = [_noisy(y, 20.0, k) for k, y in enumerate(truth)]
    a = F.frame_metrics(gen_a, truth, windows)  # split A: episodes 7, 8, 9
    # split B: episodes 8 (rendered far better), 9 (as A did) and 11 (not in A), in that order
    b = F.frame_metrics([_noisy(truth[1], 5.0, 10), gen_a[2], gen_a[0]], [truth[1], truth[2], truth[0]], windows)
    per = a["psnr"]["per_episode"]
    assert set(per) == {"in_horizon", "beyond"} and set(per["in_horizon"]) == {*VIEW_NAMES, "mean"}
    assert per["beyond"]["mean"][2] is None and per["in_horizon"]["mean"][2] is not None
    # the headline weighs every (episode, frame) alike: here each episode has 2 in-horizon frames
    ep = per["in_horizon"][VIEW_NAMES[0]]
    assert np.mean(ep) == pytest.approx(a["psnr"]["in_horizon"][VIEW_NAMES[0]], abs=1e-4)
    expect = F.psnr_frames(gen_a[0][1:3], truth[0][1:3]).mean()
    assert per["in_horizon"]["mean"][0] == pytest.approx(expect, abs=1e-4)

    split_a = {**a, "episode_indices": [7, 8, 9], "position": {"per_episode_error_m": [0.04, 0.10, 0.20]}}
    split_b = {**b, "episode_indices": [8, 9, 11], "position": {"per_episode_error_m": [0.03, 0.30, 0.01]}}
    diff = F.paired_differences(split_a, split_b)
    assert diff["episodes"] == 2  # indices 8 and 9; 7 and 11 have no partner
    row = diff["frames"]["psnr_in_horizon"]["mean"]
    assert row["n"] == 2 and row["b_better"] == 1 and row["mean"] > 1.0  # all of it from episode 8
    assert row["ci95"][0] < row["mean"] < row["ci95"][1]
    assert diff["frames"]["psnr_beyond"]["mean"]["n"] == 1 and diff["frames"]["psnr_beyond"]["mean"]["se"] is None
    assert diff["frames"]["ssim_in_horizon"]["mean"]["mean"] > 0
    cube = diff["cube_end_error_m"]
    assert cube["mean"] == pytest.approx(((0.03 - 0.10) + (0.30 - 0.20)) / 2)
    assert cube["b_better"] == 1 and cube["into_5cm"] == 1 and cube["out_of_5cm"] == 0
    assert cube["share_below_5cm"] == {"a": 0.0, "b": 0.5, "mcnemar_p": 1.0}  # one discordant pair: p = 2 * 1/2
    assert "share 0% -> 50%, exact McNemar p = 1)" in F.format_paired({**diff, "a": "A", "b": "B", "split": "s"})
    assert diff["frames"]["sharpness_in_horizon"]["mean"]["mean"] < 0  # B's episode 8 has less noise: less "detail"
    # reports from before the sharpness metric still pair, on the other rows
    old = {k: v for k, v in split_a.items() if k != "sharpness"}
    assert "sharpness_in_horizon" not in F.paired_differences(old, split_b)["frames"]
    table = F.format_paired({"a": "a", "b": "b", "split": "heldout", **diff})
    assert "paired, b - a, heldout: 2 episodes" in table and "1/2" in table and "cube end error" in table

    with pytest.raises(ValueError, match="no per-episode scores"):
        F.paired_differences({k: v for k, v in split_a.items() if k != "episode_indices"}, split_b)
    with pytest.raises(ValueError, match="share no episode"):
        F.paired_differences(split_a, {**split_b, "episode_indices": [1, 2, 3]})


def test_autoencoder_round_trip_covers_the_two_windows(tiny_checkpoint, splits):
    from neuralsim.envs.neural_droid import load_world_model

    wm = load_world_model(tiny_checkpoint)
    eps = F.load_split(splits["heldout"], wm.config.autoencoder.image_size)
    rt = F.autoencoder_round_trip(wm, eps, last_frame=5, batch_frames=4)  # batches of 4 frames: 4 + 2
    assert [r.shape for r in rt] == [e.frames[:6].shape for e in eps] and rt[0].dtype == np.uint8
    whole = F.autoencoder_round_trip(wm, eps, last_frame=5, batch_frames=64)
    for r, w in zip(rt, whole):
        assert F.psnr_frames(r, w).min() > 40  # batching does not change the reconstruction
    assert F.psnr_frames(rt[0], eps[0].frames[:6]).max() < F.PSNR_CAP_DB  # an untrained autoencoder is lossy


def test_windows_follow_the_clip_length():
    w = F.Windows(16)
    assert list(w.in_horizon) == list(range(1, 17)) and list(w.beyond) == list(range(17, 33))


def test_open_loop_starts_from_the_episode_and_is_seeded(tiny_checkpoint, splits):
    from neuralsim.envs.neural_droid import load_world_model

    wm = load_world_model(tiny_checkpoint)
    eps = F.load_split(splits["heldout"], wm.config.autoencoder.image_size)
    assert len(eps) == 2 and eps[0].frames.shape[1:] == (3, 16, 16, 3)
    assert [len(e) for e in eps] == [r["length"] for r in list_episodes(splits["heldout"])]
    batched = F.open_loop(wm, eps, seed=3, batch_size=2)
    single = F.open_loop(wm, eps, seed=3, batch_size=1)
    for g, e in zip(batched, eps):
        assert g.shape == e.frames.shape and g.dtype == np.uint8
        np.testing.assert_array_equal(g[0], e.frames[0])  # frame 0 is the given first frame
    # the batching does not change the frames (each row's noise comes from seed + episode index)
    for g, s in zip(batched, single):
        assert F.psnr_frames(g, s).min() > 40


def test_recorded_conditioning_drives_the_model_exactly_as_the_env_does(tiny_checkpoint, splits):
    """``--conditioning recorded`` rolls the model out itself: fed the very states the env's adapter reaches, it must
    give the env's frames bit for bit (same noise, window, schedule, decoding); fed the simulator's, other frames."""
    from neuralsim import kinematics as K
    from neuralsim.envs import adapter as A
    from neuralsim.envs.neural_droid import load_world_model

    wm = load_world_model(tiny_checkpoint)
    eps = F.load_split(splits["heldout"], wm.config.autoencoder.image_size)
    assert eps[0].joint_position.shape == (len(eps[0]), 7) and eps[0].gripper_position.shape == (len(eps[0]), 1)
    np.testing.assert_allclose(F.recorded_conditioning(wm, eps[0])[:, :6], K.forward_kinematics(eps[0].joint_position),
                               atol=1e-6)
    as_replayed = []
    for e in eps:
        q, g = A.rollout(e.joint_position[:1], e.gripper_position[:1], e.actions[None, :len(e) - 1])
        as_replayed.append(dataclasses.replace(e, joint_position=q[0], gripper_position=g[0]))
    env = F.open_loop(wm, eps, seed=5, batch_size=2)
    mine = F.open_loop_recorded(wm, as_replayed, seed=5, batch_size=2)
    for a, b in zip(env, mine):
        np.testing.assert_array_equal(a, b)
    # the simulator's own states differ from the adapter's replay, and so do the frames
    recorded = F.open_loop_recorded(wm, eps, seed=5, batch_size=1)
    assert any((a != b).any() for a, b in zip(env, recorded))
    for g, e in zip(recorded, eps):
        assert g.shape == e.frames.shape
        np.testing.assert_array_equal(g[0], e.frames[0])


def test_command_models_are_conditioned_on_the_gripper_command(tiny_checkpoint, splits):
    from neuralsim.envs import adapter as A
    from neuralsim.envs.neural_droid import load_world_model

    wm = load_world_model(tiny_checkpoint)
    e = F.load_split(splits["heldout"], wm.config.autoencoder.image_size)[0]
    measured = F.recorded_conditioning(wm, e)
    np.testing.assert_allclose(measured[:, 6], e.gripper_position[:, 0], atol=1e-6)
    wm.config.gripper_conditioning = "command"
    try:
        command = F.recorded_conditioning(wm, e)
    finally:
        wm.config.gripper_conditioning = "measured"
    np.testing.assert_array_equal(command[:, :6], measured[:, :6])
    _, g = A.rollout(e.joint_position[:1], e.gripper_position[:1], e.actions[None, :len(e) - 1])
    np.testing.assert_allclose(command[:, 6], g[0, :, 0], atol=1e-6)  # what the env's adapter feeds the model
    wm.config.arm_conditioning = "replay"  # --conditioning recorded is the simulator's arm whatever the training
    try:
        np.testing.assert_array_equal(F.recorded_conditioning(wm, e), measured)
    finally:
        wm.config.arm_conditioning = "measured"


def test_end_frame_flags_rollouts_worse_than_holding_frame_0(splits):
    eps = F.load_split(splits["heldout"], 16)
    rng = np.random.default_rng(0)
    good = [e.frames.copy() for e in eps]
    lost = [e.frames.copy() for e in eps]
    lost[1][-1] = rng.integers(0, 256, lost[1][-1].shape, dtype=np.uint8)  # the scene dissolved into noise
    ok = F.end_frame_scores(good, eps)
    assert ok["share_lost"] == 0.0 and ok["psnr_mean"] == F.PSNR_CAP_DB
    bad = F.end_frame_scores(lost, eps)
    assert bad["share_lost"] == 0.5 and bad["lost_episode_indices"] == [eps[1].index]
    assert bad["per_episode_psnr"][1] < bad["hold_first_frame_psnr_mean"] <= F.PSNR_CAP_DB


def test_adapter_replay_drift_measures_the_replay_against_the_simulator(splits):
    eps = F.load_split(splits["heldout"], 16)
    drift = F.adapter_replay_drift(eps)
    assert len(drift["per_episode_m"]) == 2 and drift["end_flange_error_m_mean"] >= 0.0
    assert set(drift["by_task_m_mean"]) == {str(e.record["family"]) for e in eps}
    # an episode whose recorded joints are the adapter's own replay has no drift at all
    from neuralsim.envs import adapter as A

    e = eps[0]
    q, g = A.rollout(e.joint_position[:1], e.gripper_position[:1], e.actions[None, :len(e) - 1])
    assert F.adapter_replay_drift([dataclasses.replace(e, joint_position=q[0])])["end_flange_error_m_mean"] < 1e-9
    assert F.adapter_replay_drift([dataclasses.replace(e, joint_position=None)]) is None


def test_quick_run_writes_json_and_table(tiny_checkpoint, splits, probe_dir, tmp_path):
    out = tmp_path / "fidelity.json"
    cfg = F.Config(checkpoints=[str(tiny_checkpoint)], data=str(splits["heldout"]), ood_data=str(splits["ood"]),
                   quick=True, probe=str(probe_dir), out=str(out), progress=False)
    report = F.run(cfg)
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    (entry,) = report["results"]
    assert entry["clip_length"] == 6 and set(entry["splits"]) == {"heldout", "ood"}
    assert entry["window"] == WorldModel.from_pretrained(tiny_checkpoint).config.window  # the model's own
    held = entry["splits"]["heldout"]
    assert held["episodes"] == 2 and entry["splits"]["ood"]["episodes"] == 1
    for metric in ("psnr", "ssim", "mse"):
        for window in ("in_horizon", "beyond"):
            vals = held[metric][window]
            assert set(VIEW_NAMES) | {"mean", "frames"} == set(vals)
            assert vals["frames"] == 2 * 6
    assert -1.0 <= held["ssim"]["in_horizon"]["mean"] < 0.99  # random weights: far from the truth
    pos = held["position"]
    assert pos["episodes"] == 2 and 0.0 <= pos["share_below_5cm"] <= 1.0 and pos["end_error_m_mean"] >= 0.0
    assert pos["probe_on_round_trip_error_m_mean"] >= 0.0 and 0.0 <= pos["probe_on_round_trip_share_below_5cm"] <= 1.0
    assert set(held["targets_met"]) == set(F.TARGETS) and "targets_met" not in entry["splits"]["ood"]
    ceiling = held["autoencoder_ceiling"]
    assert set(ceiling) == {"psnr", "ssim", "sharpness"} and ceiling["ssim"]["in_horizon"]["frames"] == 2 * 6
    # the no-skill floor: frame 0 held still, scored like a generated video
    eps = F.load_split(splits["heldout"], 16, max_episodes=2)
    held_still = F.frame_metrics([np.repeat(e.frames[:1], len(e), 0) for e in eps], [e.frames for e in eps],
                                 F.Windows(6))
    assert held["hold_first_frame"]["psnr"]["in_horizon"] == held_still["psnr"]["in_horizon"]
    assert held["hold_first_frame"]["ssim"]["beyond"]["mean"] < 1.0
    # per task family and outcome: the group's episode means, which the per-episode scores give back
    groups = held["by_group"]
    records = list_episodes(splits["heldout"])[:2]
    assert sum(g["episodes"] for k, g in groups.items() if k.startswith("task ")) == 2
    assert sum(groups.get(k, {"episodes": 0})["episodes"] for k in ("succeeded", "failed")) == 2
    family = f"task {records[0]['family']}"
    members = [k for k, r in enumerate(records) if f"task {r['family']}" == family]
    assert groups[family]["psnr_in_horizon"] == pytest.approx(
        np.mean([held["psnr"]["per_episode"]["in_horizon"]["mean"][k] for k in members]))
    assert 0.0 <= groups[family]["share_below_5cm"] <= 1.0
    assert report["protocol"]["conditioning"] == "replay"
    assert 0.0 <= held["end_frame"]["share_lost"] <= 1.0 and len(held["end_frame"]["per_episode_psnr"]) == 2
    assert len(held["adapter_replay"]["per_episode_m"]) == 2
    table = F.format_table(report)
    assert "conditioning: replay" in table and "lost the scene" in table and "action adapter's replay" in table
    assert entry["label"] in table and "heldout" in table and "ood" in table and "autoencoder ceiling" in table
    assert "frame 0 held still" in table
    assert f"{family} " in table and "episode means" in table


def test_a_quick_run_without_out_leaves_the_full_report_alone(tiny_checkpoint, splits, tmp_path, monkeypatch):
    import benchmarks.common.results_path as R
    monkeypatch.setattr(R, "RESULTS_DIR", tmp_path)
    full = tmp_path / "fidelity.json"
    full.write_text('{"stands for": "the committed full report"}')
    assert F.main(["--checkpoint", str(tiny_checkpoint), "--data", str(splits["heldout"]), "--quick", "--no-probe",
                   "--max-episodes", "1", "--no-progress"]) == 0
    assert json.loads(full.read_text()) == {"stands for": "the committed full report"}
    assert json.loads((tmp_path / "fidelity_quick.json").read_text())["protocol"]["quick"] is True


def test_bad_inputs_fail_by_name_before_any_work(tiny_checkpoint, splits, tmp_path, capsys):
    # a missing split fails before the probe (25 minutes) is built and before any rollout
    with pytest.raises(FileNotFoundError, match="missing_split"):
        F.run(F.Config(checkpoints=[str(tiny_checkpoint)], data=str(tmp_path / "missing_split"),
                       probe=str(tmp_path / "probe"), out=str(tmp_path / "r.json"), progress=False))
    assert not (tmp_path / "probe").exists() and not (tmp_path / "r.json").exists()
    # so does the second model of a comparison, before the first one's rollouts
    with pytest.raises(CheckpointError, match="no_such_model"):
        F.run(F.Config(checkpoints=[str(tiny_checkpoint), str(tmp_path / "no_such_model")], data=str(splits["heldout"]),
                       probe=None, quick=True, out=str(tmp_path / "r.json"), progress=False))
    assert not (tmp_path / "r.json").exists()
    # a split of another SimDROID scene than the model's
    other = tmp_path / "legible_split"
    shutil.copytree(splits["heldout"], other)
    info = json.loads((other / "meta" / "info.json").read_text())
    info.setdefault("generation", {})["scene"] = "legible"
    (other / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="legible-scene episodes, the world model is trained on the classic scene"):
        F.run(F.Config(checkpoints=[str(tiny_checkpoint)], data=str(other), probe=None, quick=True,
                       out=str(tmp_path / "r.json"), progress=False))
    assert not (tmp_path / "r.json").exists()
    # on the command line: one line, no traceback
    with pytest.raises(SystemExit) as e:
        F.main(["--checkpoint", str(tmp_path / "no_such_model"), "--data", str(splits["heldout"]), "--quick"])
    assert e.value.code == 2 and "no_such_model" in capsys.readouterr().err


def test_autoencoder_only_reports_the_ceiling_and_floors_without_rollouts(tiny_checkpoint, splits, probe_dir, tmp_path,
                                                                           monkeypatch, capsys):
    common = dict(checkpoints=[str(tiny_checkpoint)], data=str(splits["heldout"]), quick=True, probe=str(probe_dir),
                  progress=False)
    full = F.run(F.Config(out=str(tmp_path / "full.json"), **common))["results"][0]["splits"]["heldout"]

    def no_rollouts(*args, **kwargs):
        raise AssertionError("--autoencoder-only must not roll the DiT out")

    monkeypatch.setattr(F, "open_loop", no_rollouts)
    report = F.run(F.Config(out=str(tmp_path / "ae.json"), autoencoder_only=True, **common))
    held = report["results"][0]["splits"]["heldout"]
    assert report["protocol"]["autoencoder_only"] and "psnr" not in held and "targets_met" not in held
    assert held["autoencoder_ceiling"] == full["autoencoder_ceiling"]
    floors = {k: v for k, v in full["position"].items() if k.startswith(("probe_on_true", "probe_on_round"))}
    assert len(floors) == 4 and held["position"] == {"episodes": 2, **floors}
    print(F.format_table(report))
    printed = capsys.readouterr().out
    assert "(autoencoder ceiling)" in printed and "perfect DiT" in printed and "--autoencoder-only" in printed
    row = next(line for line in printed.splitlines() if line.startswith(report["results"][0]["label"][:13]))
    assert f"{held['autoencoder_ceiling']['psnr']['in_horizon']['mean']:.2f}" in row  # the ceiling fills the row


def test_compare_mode_makes_one_table(tiny_checkpoint, splits, tmp_path, capsys):
    other = WorldModel.from_pretrained(tiny_checkpoint)
    with torch.no_grad():
        for p in other.dit.parameters():
            p.mul_(0.5)
    other_dir = other.save_pretrained(tmp_path / "half" / "model")
    out = tmp_path / "compare.json"
    assert F.main(["--compare", str(tiny_checkpoint), str(other_dir), "--data", str(splits["heldout"]), "--quick",
                   "--no-probe", "--out", str(out), "--no-progress"]) == 0
    report = json.loads(out.read_text())
    assert [r["label"] for r in report["results"]] == [Path(tiny_checkpoint).name, "half"]
    assert all(r["splits"]["heldout"]["position"] is None for r in report["results"])
    # the ceiling belongs to the autoencoder: a different DiT changes the frames but not the ceiling
    a, b = (r["splits"]["heldout"] for r in report["results"])
    assert a["autoencoder_ceiling"] == b["autoencoder_ceiling"]
    assert a["psnr"]["in_horizon"]["mean"] != b["psnr"]["in_horizon"]["mean"]
    printed = capsys.readouterr().out
    assert "half" in printed and "PSNR in" in printed
    # the later model against the first, episode by episode
    (paired,) = report["paired"]
    label = Path(tiny_checkpoint).name
    assert (paired["a"], paired["b"], paired["split"], paired["episodes"]) == (label, "half", "heldout", 2)
    per_a, per_b = a["psnr"]["per_episode"]["in_horizon"]["mean"], b["psnr"]["per_episode"]["in_horizon"]["mean"]
    assert paired["frames"]["psnr_in_horizon"]["mean"]["mean"] == pytest.approx(np.mean(np.subtract(per_b, per_a)))
    assert f"paired, half - {label}, heldout: 2 episodes" in printed

    # --paired reads the same back from JSON reports; one holding several models needs FILE:LABEL
    assert F.main(["--paired", f"{out}:{label}", f"{out}:half"]) == 0
    assert capsys.readouterr().out.strip() == F.format_paired(paired)
    with pytest.raises(SystemExit):
        F.main(["--paired", str(out), f"{out}:half"])
    assert "holds 2 models" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        F.main(["--paired", f"{out}:nope", f"{out}:half"])
    assert "no model labelled 'nope'" in capsys.readouterr().err
    other_split = json.loads(out.read_text())
    other_split["protocol"]["data"] = "data/simdroid_idle_heldout"
    (tmp_path / "idle.json").write_text(json.dumps(other_split))
    with pytest.raises(SystemExit):
        F.main(["--paired", f"{out}:half", f"{tmp_path / 'idle.json'}:half"])
    assert "different data splits" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        F.main(["--paired", str(tmp_path / "missing.json"), f"{out}:half"])
    assert "no fidelity report at" in capsys.readouterr().err


def test_probe_geometry_round_trip():
    """Projecting through the exterior cameras and triangulating back is the identity."""
    pts = np.random.default_rng(0).uniform([0.3, -0.3, 0.0], [0.75, 0.3, 0.2], (50, 3))
    uv = P.project(pts)
    assert uv.shape == (50, 2, 2) and (np.abs(uv) < 1).all()  # the workspace is in both views
    np.testing.assert_allclose(P.triangulate(uv), pts, atol=1e-9)


def test_probe_save_load_and_ood_records(probe_dir, splits):
    probe = P.load(probe_dir)
    rng = np.random.default_rng(1)
    views = rng.integers(0, 256, (3, 2, 32, 32, 3), dtype=np.uint8)  # resized to the probe's 64 px
    rgb = rng.random((3, 3)).astype(np.float32)
    xyz = P.locate(probe, views, rgb)
    assert xyz.shape == (3, 3) and np.isfinite(xyz).all()
    np.testing.assert_array_equal(xyz, P.locate(P.load(probe_dir), views, rgb))
    with pytest.raises(FileNotFoundError, match="object_probe"):
        P.load(probe_dir / "missing")
    from neuralsim.envs.sim_droid import OOD_COLORS

    (rec,) = list_episodes(splits["ood"])  # `generate(..., ood=True)` wrote an OOD episode
    assert rec["distribution"] == "ood" and all(c in OOD_COLORS for c in rec["colors"])
    assert P.colour_rgb(rec["target"]).shape == (3,)
    assert "distribution" not in list_episodes(splits["heldout"])[0]


def test_probe_learns_from_the_autoencoder_round_trip(probe_samples, tiny_checkpoint, tmp_path, monkeypatch):
    """Renders go through the model's autoencoder (at its 16 px and back to 64), and training reads them."""
    from neuralsim.envs.episodes import resize_image

    wm = WorldModel.from_pretrained(tiny_checkpoint)
    samples = P.add_round_trip(probe_samples, wm, batch_frames=2, progress=False)
    views, decoded = samples["views"], samples["decoded_views"]
    assert "decoded_views" not in probe_samples and decoded.shape == views.shape and decoded.dtype == np.uint8
    small = np.stack([resize_image(v, 16) for v in views[-1]])[None]  # the last frame, alone
    expected = np.stack([resize_image(v, 64) for v in F.round_trip_frames(wm, small)[0]])
    np.testing.assert_array_equal(decoded[-1], expected)
    assert np.abs(decoded.astype(int) - views).mean() > 5  # a random tiny autoencoder changes the frames

    def weights(share):
        probe, rep = P.train(samples, steps=2, batch_size=4, progress=False, decoded_share=share)
        return torch.cat([p.flatten() for p in probe.parameters()]), rep

    w_raw, rep = weights(0.0)
    w_dec, rep_dec = weights(1.0)
    assert not torch.equal(w_raw, w_dec)  # the decoded copies are what the probe reads
    assert rep_dec["decoded_share"] == 1.0 and "val_decoded_xy_error_m_mean" in rep_dec
    assert rep["val_decoded_xy_error_m_mean"] != rep["val_xy_error_m_mean"]
    with pytest.raises(ValueError, match="decoded_share"):
        P.train(samples, steps=1, decoded_share=1.5, progress=False)
    with pytest.raises(ValueError, match="decoded_views"):
        P.train({**samples, "decoded_views": decoded[:, :1]}, steps=1, progress=False)

    monkeypatch.setattr(P, "collect_samples", lambda *a, **k: probe_samples)
    _, report = P.build(tmp_path / "probe", episodes=2, steps=2, progress=False, decoded_from=tiny_checkpoint)
    saved = P.load(tmp_path / "probe").report
    assert saved["decoded_from"] == str(tiny_checkpoint) and "val_decoded_share_below_5cm" in saved
    assert saved["decoded_share"] == 0.5 == report["decoded_share"]


def test_position_errors_have_the_never_moving_reference(splits, probe_dir):
    eps = F.load_split(splits["heldout"], 64)
    probe = P.load(probe_dir)
    # the true frames as the "generated" video: the error is the probe's own floor
    pos = F.position_errors(probe, eps, [e.frames for e in eps])
    assert pos["end_error_m_mean"] == pytest.approx(pos["probe_on_true_frames_error_m_mean"])
    lo, hi = pos["share_below_5cm_ci95"]
    assert lo <= pos["share_below_5cm"] <= hi and pos["share_below_5cm_ci95"] == wilson_interval(
        round(pos["share_below_5cm"] * len(eps)), len(eps))
    moved = [np.linalg.norm(np.subtract(r["final_poses"][r["target"]][:2], r["initial_poses"][r["target"]][:2]))
             for r in list_episodes(splits["heldout"])]
    assert pos["cube_left_at_start_error_m_mean"] == pytest.approx(np.mean(moved))
    assert pos["cube_left_at_start_share_below_5cm"] == np.mean(np.array(moved) < F.POSITION_TOLERANCE_M)
    # a video frozen at frame 0 ends where the probe puts the cube at the start
    frozen = F.position_errors(probe, eps, [np.repeat(e.frames[:1], len(e), axis=0) for e in eps])
    ext = [VIEW_NAMES.index(v) for v in P.EXTERIOR_VIEWS]
    at_start = P.locate(probe, np.stack([e.frames[0][ext] for e in eps]), F.target_rgb(eps))
    starts = np.stack([e.target_start_xy for e in eps])
    assert frozen["generated_end_from_start_m_mean"] == pytest.approx(
        np.linalg.norm(at_start[:, :2] - starts, axis=1).mean())
    # the round-trip floor: true last frames passed as the "decoded" ones give the probe's own floor
    floor = F.position_errors(probe, eps, [e.frames for e in eps], decoded_last=np.stack([e.frames[-1] for e in eps]))
    assert floor["probe_on_round_trip_error_m_mean"] == pytest.approx(pos["probe_on_true_frames_error_m_mean"])
    assert "probe_on_round_trip_error_m_mean" not in pos
    # records written before initial_poses existed: no reference, the rest unchanged
    old = [F.EvalEpisode(e.index, {k: v for k, v in e.record.items() if k != "initial_poses"}, e.frames, e.actions,
                         e.spec) for e in eps]
    legacy = F.position_errors(probe, old, [e.frames for e in eps])
    assert "cube_left_at_start_error_m_mean" not in legacy and legacy["end_error_m_mean"] == pos["end_error_m_mean"]


def test_position_track_compares_generated_and_true_frames_over_time(splits, probe_dir):
    eps = F.load_split(splits["heldout"], 64)
    probe = P.load(probe_dir)
    same = F.position_errors(probe, eps, [e.frames for e in eps], track_every=4)
    frames = [k["frame"] for k in same["track"]]
    assert frames == list(range(4, max(len(e) for e in eps), 4))
    assert all(k["error_m_mean"] == 0.0 and k["share_below_5cm"] == 1.0 for k in same["track"])
    assert [k["episodes"] for k in same["track"]] == [sum(len(e) > t for e in eps) for t in frames]
    # a video frozen at frame 0: its track error at frame t is the probe's distance between frames 0 and t
    frozen = F.position_errors(probe, eps, [np.repeat(e.frames[:1], len(e), axis=0) for e in eps], track_every=4)
    ext = [VIEW_NAMES.index(v) for v in P.EXTERIOR_VIEWS]
    rgb = F.target_rgb(eps)
    first = P.locate(probe, np.stack([e.frames[0][ext] for e in eps]), rgb)[:, :2]
    last = P.locate(probe, np.stack([e.frames[frames[-1]][ext] for e in eps]), rgb)[:, :2]
    assert frozen["track"][-1]["error_m_mean"] == pytest.approx(np.linalg.norm(first - last, axis=1).mean())


def test_without_data_the_split_is_the_held_out_one_of_the_models_scene(tiny_checkpoint, tiny_legible_checkpoint,
                                                                         legible_heldout_split, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common = dict(probe=None, quick=True, max_episodes=1, out=str(tmp_path / "r.json"), progress=False)
    # where the README's commands write them; a missing one is named in the error, before any work
    with pytest.raises(FileNotFoundError, match="data/simdroid_heldout"):
        F.run(F.Config(checkpoints=[str(tiny_checkpoint)], **common))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "legible_heldout").symlink_to(legible_heldout_split)
    report = F.run(F.Config(checkpoints=[str(tiny_legible_checkpoint)], **common))
    assert report["protocol"]["data"] == "data/legible_heldout"
    assert report["results"][0]["splits"]["heldout"]["episodes"] == 1
