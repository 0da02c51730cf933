"""The dynamics benchmark: its readers, its ratios and its runs, on episodes the real generator writes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.fidelity import dynamics as D


@pytest.fixture(scope="module")
def legible_split(tmp_path_factory):
    """Two clean put-in-bowl episodes of the legible scene (reach, grasp, carry, release), with object state."""
    from neuralsim.data.generate import generate

    root = tmp_path_factory.mktemp("legible")
    generate(root, episodes=2, seed=1_000_000, failure_share=0.0, noise=(0.0, 0.0), families=["put_in_bowl"],
             scene="legible", progress=False)
    return root


@pytest.fixture(scope="module")
def legible_episodes(legible_split):
    from benchmarks.common.heldout import load_split

    return load_split(legible_split, 64)


def square_video(path: list[tuple[int, int]], size: int = 32) -> np.ndarray:
    """A bright 5x5 square at each (column, row) of ``path`` on a textured background: (T, size, size, 3)."""
    rng = np.random.default_rng(0)
    background = rng.integers(0, 60, (size, size, 3))
    frames = []
    for c, r in path:
        f = background.copy()
        f[r - 2:r + 3, c - 2:c + 3] = [250, 200, 30]
        frames.append(f)
    return np.asarray(frames, np.uint8)


def test_track_point_follows_a_moving_square_and_reads_a_still_one_as_zero():
    path = [(10, 12), (11, 12), (13, 13), (15, 15), (16, 17)]
    d = D.track_point(square_video(path), np.array(path[0], float))
    np.testing.assert_allclose(d, np.asarray(path) - path[0], atol=0.35)
    still = D.track_point(square_video([path[0]] * 4), np.array(path[0], float))
    assert np.array_equal(still, np.zeros((4, 2)))


def test_follow_ratio_is_one_for_the_truth_half_for_half_the_motion_and_zero_when_still():
    true = np.array([[1.0, 0.0], [2.0, 1.0], [3.0, 1.0]])
    assert D.follow_pairs(true, true) == (16.0, 16.0)
    num, den = D.follow_pairs(true / 2, true)
    assert num / den == pytest.approx(0.5)
    assert D.follow_pairs(np.zeros_like(true), true)[0] == 0.0
    assert D.follow_pairs(-true, true)[0] == -16.0


def test_phases_read_the_recorded_object_state(legible_episodes):
    e = legible_episodes[0]
    onset = D.onset_frame(e)
    assert onset is not None and e.objects.held[onset] >= 0 and (e.objects.held[:onset] < 0).all()
    assert D.window_phase(e, onset, 8) == "carry"
    assert D.window_phase(e, 2, 8) in ("reach", "idle")
    assert D.manipulated_object(e, onset) == e.objects.held[onset]
    assert e.objects.names[D.manipulated_object(e, 0)] == e.record["target"]


def test_the_true_frames_follow_a_held_frame_does_not_and_half_speed_reads_about_half(legible_episodes):
    """The readers on true frames score ~1 (arm and cube), the last frame held scores 0 exactly, and a video that
    moves at half the speed (frame j shows true frame start + j // 2) scores well below 1 and above 0."""
    from benchmarks.common.object_probe import default_dir, load

    probe = load(default_dir("legible"))
    eps = legible_episodes
    wins = [w for w in D.plan_windows(eps)["rollout"] + D.plan_windows(eps)["onset"]]
    truth = D.source_videos("truth", None, eps, wins, [], {})
    still = D.source_videos("repeat_last", None, eps, wins, [], {})
    half = [eps[w.episode].frames[[w.start + j // 2 for j in range(w.length + 1)]] for w in wins]
    phases = [D.window_phase(eps[w.episode], w.start, w.length) for w in wins]
    scores = {name: D.aggregate(wins, phases, D.measure_windows(eps, wins, videos, probe, "legible"), 200)
              for name, videos in (("truth", truth), ("still", still), ("half", half))}
    for view in ("arm_exterior_image_1", "arm_exterior_image_2"):
        assert 0.85 < scores["truth"]["all"][view]["ratio"] < 1.15, (view, scores["truth"]["all"][view])
        assert scores["still"]["all"][view]["ratio"] == 0.0
        assert 0.3 < scores["half"]["all"][view]["ratio"] < 0.8, (view, scores["half"]["all"][view])
    assert scores["truth"]["carry"]["object"]["ratio"] > 0.6, scores["truth"]["carry"]["object"]
    assert scores["still"]["carry"]["object"]["ratio"] == 0.0
    assert scores["half"]["carry"]["object"]["ratio"] < 0.85 * scores["truth"]["carry"]["object"]["ratio"]
    for view in ("object_exterior_image_1", "object_exterior_image_2"):  # the cube in each view's pixels
        truth_view = scores["truth"]["carry"][view]
        assert truth_view["ratio"] > 0.6 and truth_view["true_motion_px"] > 1.0, (view, truth_view)
        assert scores["still"]["carry"][view]["ratio"] == 0.0
        assert scores["half"]["carry"][view]["ratio"] < 0.85 * truth_view["ratio"], (view, scores["half"]["carry"])
    lo, hi = scores["truth"]["all"]["arm_mean"]["ci95"]
    assert lo <= scores["truth"]["all"]["arm_mean"]["ratio"] <= hi


def test_rollouts_start_from_the_true_frame_and_do_not_depend_on_the_batching(tiny_checkpoint, legible_split):
    from benchmarks.common.heldout import load_split
    from neuralsim.envs.neural_droid import load_world_model

    wm = load_world_model(tiny_checkpoint)
    eps = load_split(legible_split, wm.config.autoencoder.image_size)
    wins = D.plan_windows(eps)["rollout"][:5]
    a = D.rollouts_from_truth(wm, eps, wins, seed=3, batch_size=8)
    b = D.rollouts_from_truth(wm, eps, wins, seed=3, batch_size=2)
    c = D.rollouts_from_truth(wm, eps, wins, seed=4, batch_size=8)
    for w, x, y, z in zip(wins, a, b, c):
        assert x.shape == (w.length + 1, *eps[0].frames.shape[1:])
        assert np.array_equal(x[0], eps[w.episode].frames[w.start])
        # the same noise per window whatever the batch; a batch's size may still change a float's last bit in the
        # CPU's kernels (it does on some), which can turn a pixel's rounding by one level
        diff = np.abs(x.astype(int) - y)
        assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, (diff.max(), (diff > 0).mean())
    assert any(np.abs(x.astype(int) - z).max() > 8 for x, z in zip(a, c))


def test_a_model_with_object_state_reports_its_belief_and_one_without_reports_none(tiny_checkpoint, legible_split):
    from benchmarks.common.heldout import load_split
    from neuralsim.envs.neural_droid import load_world_model
    from neuralsim.world_model.edit import with_dit

    plain = load_world_model(tiny_checkpoint)
    eps = load_split(legible_split, plain.config.autoencoder.image_size)
    wins = D.plan_windows(eps)["rollout"][:3]
    none: list = []
    D.rollouts_from_truth(plain, eps, wins, seed=0, beliefs=none)
    assert none == []
    wm = with_dit(plain, num_objects=2)
    beliefs: list = []
    videos = D.rollouts_from_truth(wm, eps, wins, seed=0, beliefs=beliefs)
    assert len(beliefs) == len(wins)
    for w, b in zip(wins, beliefs):
        assert b.shape == (w.length + 1, 2, 3) and np.isfinite(b).all()
    # the belief does not change what is generated: the same frames as a run that does not ask for it
    again = D.rollouts_from_truth(wm, eps, wins, seed=0)
    assert all(np.array_equal(x, y) for x, y in zip(videos, again))
    report = D.evaluate(wm, eps, None, "legible", resamples=20, open_loop=False, sources=("generated",))
    assert {"carry", "all"} <= set(report["rollout_8"]["belief"]) and "belief" in report["onset"]
    assert D.headline(report)["object_belief_carry_8"] == report["rollout_8"]["belief"]["carry"]["ratio"]
    assert "belief" not in D.evaluate(plain, eps, None, "legible", resamples=20, open_loop=False,
                                      sources=("generated",))["rollout_8"]


def test_the_belief_ratio_is_one_for_the_recorded_poses_and_zero_for_a_belief_that_stays_put(legible_episodes):
    eps = legible_episodes
    wins = D.plan_windows(eps)["rollout"]
    recorded = [eps[w.episode].objects.position[w.start:w.start + w.length + 1] for w in wins]  # (k+1, K, 3)
    exact = D.belief_ratios(eps, wins, recorded, resamples=50)
    assert exact["carry"]["ratio"] == pytest.approx(1.0, abs=1e-4) and exact["carry"]["windows"] > 0
    still = D.belief_ratios(eps, wins, [np.repeat(r[:1], len(r), 0) for r in recorded], resamples=50)
    assert still["carry"]["ratio"] == 0.0
    # slots in either order: the belief's slot is the one nearest the manipulated cube at the window's start
    swapped = D.belief_ratios(eps, wins, [r[:, ::-1] for r in recorded], resamples=50)
    assert swapped["carry"]["ratio"] == pytest.approx(1.0, abs=1e-4)


def test_action_response_is_zero_when_the_condition_changes_nothing_and_one_for_the_true_change(legible_episodes):
    eps = legible_episodes
    wins = [D.Window(0, t, 1, "rollout") for t in range(8, len(eps[0]) - D.RESPONSE_JUMP, 8)]
    phases = [D.window_phase(eps[0], w.start, D.RESPONSE_JUMP) for w in wins]
    truth_next = [eps[0].frames[w.start:w.start + 2] for w in wins]
    truth_far = [np.stack([eps[0].frames[w.start], eps[0].frames[w.start + D.RESPONSE_JUMP]]) for w in wins]
    still = D.action_response(eps, wins, truth_next, truth_next, phases, resamples=50)
    assert still["all"]["ratio"] == 0.0 and still["all"]["windows"] == len(wins)
    faithful = D.action_response(eps, wins, truth_next, truth_far, phases, resamples=50)
    assert faithful["all"]["ratio"] == pytest.approx(1.0, abs=1e-6)
    assert set(faithful) - {"all"} <= set(D.PHASES)


def test_the_counterfactual_rollout_is_conditioned_on_the_later_state(tiny_checkpoint, legible_split):
    import torch

    from benchmarks.common.heldout import load_split
    from neuralsim.envs.neural_droid import load_world_model

    wm = load_world_model(tiny_checkpoint)
    eps = load_split(legible_split, wm.config.autoencoder.image_size)
    wins = [D.Window(w.episode, w.start, 1, w.protocol) for w in D.plan_windows(eps)["rollout"][:3]]
    same = D.rollouts_from_truth(wm, eps, wins, seed=1)
    again = D.rollouts_from_truth(wm, eps, wins, seed=1, cond_shift=0)
    jumped = D.rollouts_from_truth(wm, eps, wins, seed=1, cond_shift=D.RESPONSE_JUMP - 1)
    assert all(np.array_equal(a, b) for a, b in zip(same, again))
    assert any(not np.array_equal(a[1], j[1]) for a, j in zip(same, jumped))
    assert all(np.array_equal(a[0], j[0]) for a, j in zip(same, jumped))
    # one pass: the counterfactual from a fork of the context state is the second pass's frame, and the fork
    # leaves the true continuation as it was
    longer = [D.Window(w.episode, w.start, 3, w.protocol) for w in wins]
    videos, responses, latent = D.rollouts_from_truth(wm, eps, longer, seed=1, response_shift=D.RESPONSE_JUMP - 1)
    assert all(np.array_equal(r, j) for r, j in zip(responses, jumped))
    assert all(np.array_equal(v, x) for v, x in zip(videos, D.rollouts_from_truth(wm, eps, longer, seed=1)))
    # the latent terms: the true change and repeat-last come from the encoded true frames, the generated frames'
    # from the DiT; a response in pixels needs one in latents
    for w, t in zip(longer, latent):
        e = eps[w.episode]
        z = wm.encode(torch.from_numpy(e.frames[[w.start, w.start + 1, w.start + D.RESPONSE_JUMP]])).float()
        assert t["true_change"] == pytest.approx(float((z[2] - z[1]).pow(2).sum()), rel=1e-4)
        assert t["repeat_last"] == pytest.approx(float((z[0] - z[1]).pow(2).sum()), rel=1e-4)
        assert t["generated"] > 0
    assert any(t["response"] > 0 for t in latent)


def test_latent_measures_read_a_copying_dit_as_one_and_a_blind_one_as_zero(legible_episodes):
    wins = [D.Window(0, t, 1, "rollout") for t in (8, 16, 24)] + [D.Window(1, t, 1, "rollout") for t in (8, 16)]
    phases = ["reach", "carry", "carry", "reach", "idle"]
    copying = [{"response": 0.0, "true_change": 2.0, "generated": 3.0, "repeat_last": 3.0} for _ in wins]
    m = D.latent_measures(wins, copying, phases, resamples=50)
    assert m["response"]["all"]["ratio"] == 0.0
    assert m["one_step_vs_repeat_last"]["all"]["ratio"] == pytest.approx(1.0)
    assert m["response"]["carry"]["windows"] == 2 and m["response"]["all"]["episodes"] == 2
    following = [{"response": 2.0, "true_change": 2.0, "generated": 0.3, "repeat_last": 3.0} for _ in wins]
    m = D.latent_measures(wins, following, phases, resamples=50)
    assert m["response"]["all"]["ratio"] == pytest.approx(1.0)
    assert m["one_step_vs_repeat_last"]["idle"]["ratio"] == pytest.approx(0.1)


def test_a_quick_run_writes_the_report_and_its_plot(tiny_checkpoint, heldout_split, tmp_path, capsys):
    out = tmp_path / "dynamics.json"
    assert D.main(["--checkpoint", str(tiny_checkpoint), "--data", str(heldout_split), "--quick", "--no-probe",
                   "--no-progress", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 5000
    protos = report["protocols"]
    assert set(protos) >= {"one_step", "rollout_4", "rollout_8"}
    assert set(protos["rollout_8"]) == set(D.SOURCES)
    assert protos["rollout_8"]["repeat_last"]["all"]["arm_mean"]["ratio"] in (0.0, None)
    assert protos["one_step"]["all"]["mse_repeat_last"] >= 0
    assert "arm_carry_8" in report["headline"]
    assert report["headline"]["action_response"] >= 0
    assert report["headline"]["latent_response"] >= 0 and report["headline"]["latent_one_step_vs_repeat_last"] > 0
    assert protos["latent"]["response"]["all"]["windows"] == protos["response"]["all"]["windows"]
    assert protos["response"]["all"]["windows"] == protos["one_step"]["all"]["frames"]
    assert "rollout_8" in capsys.readouterr().out


def test_bad_inputs_are_refused_by_name(tiny_checkpoint, heldout_split, tmp_path, capsys):
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from neuralsim.data.reader import OBJECT_STATE_COLUMNS

    old = tmp_path / "old"
    shutil.copytree(heldout_split, old)
    for path in (old / "data").glob("*.parquet"):
        table = pq.read_table(path)
        pq.write_table(pa.table({c: table.column(c) for c in table.column_names if c not in OBJECT_STATE_COLUMNS}),
                       path)
    assert D.main(["--checkpoint", str(tiny_checkpoint), "--data", str(old), "--quick", "--no-probe",
                   "--out", str(tmp_path / "x.json")]) == 2
    assert "no recorded object state" in capsys.readouterr().err
    assert D.main(["--curve", str(tmp_path / "nowhere"), "--data", str(heldout_split)]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_a_curve_measures_every_snapshot_once(heldout_split, tmp_path, monkeypatch, capsys):
    """--curve measures each kept model of a run; run again, it re-measures no snapshot (they never change)."""
    from neuralsim.world_model.train import TrainConfig, train

    run = tmp_path / "run"
    train(TrainConfig(stage="dit", objective="step_forcing", data="synthetic:8", out=str(run), config="tiny", steps=4,
                      batch_size=2, snapshot_every=2, checkpoint_every=2, sample_every=-1, progress=False, warmup=1))
    out = tmp_path / "curve.json"
    args = ["--curve", str(run), "--data", str(heldout_split), "--max-episodes", "1", "--no-probe", "--no-progress",
            "--resamples", "50", "--out", str(out)]
    assert D.main(args) == 0
    first = json.loads(out.read_text())["curve"]
    assert [p["step"] for p in first] == [2, 4]
    assert all("arm_carry_8" in p for p in first)
    assert out.with_suffix(".png").is_file()
    calls = []
    real = D.evaluate
    monkeypatch.setattr(D, "evaluate", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert D.main(args) == 0
    assert calls == [] and json.loads(out.read_text())["curve"] == first
    # the run moves to another machine with its last model only: the earlier points stay, nothing is re-measured
    import shutil

    shutil.rmtree(run / "snapshots" / "step_0000002")
    assert D.main(args) == 0
    assert calls == [] and json.loads(out.read_text())["curve"] == first
    # the last snapshot gone too, the run's model/ is measured at its step; when the run goes on past it (its model/
    # now at step 6, snapshot step_6), the point the old model/ gave stays
    shutil.rmtree(run / "snapshots" / "step_0000004")
    assert D.main(args) == 0
    assert len(calls) == 1
    middle = json.loads(out.read_text())["curve"]
    assert [(p["step"], Path(p["checkpoint"]).name) for p in middle] == [(2, "step_0000002"), (4, "model")]
    train(TrainConfig(stage="dit", objective="step_forcing", data="synthetic:8", out=str(run), config="tiny", steps=6,
                      batch_size=2, snapshot_every=2, checkpoint_every=2, sample_every=-1, progress=False, warmup=1))
    assert D.main(args) == 0
    last = json.loads(out.read_text())["curve"]
    assert len(calls) == 2 and [p["step"] for p in last] == [2, 4, 6] and last[:2] == middle
    # measured another way (another protocol), an earlier point is not kept
    assert D.main([a if a != "50" else "60" for a in args]) == 0
    assert [p["step"] for p in json.loads(out.read_text())["curve"]] == [6]


def test_a_response_only_curve_measures_the_first_frame_of_every_kept_model(tiny_checkpoint, heldout_split, tmp_path,
                                                                             capsys):
    import shutil

    run = tmp_path / "run"
    for step in (250, 500):
        shutil.copytree(tiny_checkpoint, run / "snapshots" / f"step_{step:07d}")
    out = tmp_path / "curve.json"
    assert D.main(["--curve", str(run), "--data", str(heldout_split), "--max-episodes", "2", "--response-only",
                   "--no-progress", "--resamples", "50", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [p["step"] for p in report["curve"]] == [250, 500]
    for p in report["curve"]:
        assert p["latent_response"] >= 0 and p["latent_one_step_vs_repeat_last"] > 0 and p["action_response"] >= 0
        assert p["arm_carry_8"] is None  # no rollouts beyond the first frame
    assert report["protocol"]["response_only"] is True
    assert "latent response" in capsys.readouterr().out
    single = tmp_path / "single.json"
    assert D.main(["--checkpoint", str(tiny_checkpoint), "--data", str(heldout_split), "--max-episodes", "2",
                   "--response-only", "--no-progress", "--resamples", "50", "--out", str(single)]) == 0
    protos = json.loads(single.read_text())["protocols"]
    assert set(protos) == {"one_step", "response", "latent"}


def test_without_data_the_split_is_the_held_out_one_of_the_models_scene(tiny_legible_checkpoint, legible_split,
                                                                         tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "legible_heldout").symlink_to(legible_split)
    report = D.run(D.Config(checkpoint=str(tiny_legible_checkpoint), max_episodes=1, quick=True, probe=None,
                            response_only=True, progress=False, out=str(tmp_path / "d.json")))
    assert report["data"] == "data/legible_heldout" and report["scene"] == "legible" and report["episodes"] == 1


def test_the_curve_marks_where_a_stage_starts():
    """A recipe's repeats of one stage (step_forcing_17, _18) are one stage; the mix after them is a new one."""
    labels = ["diffusion_forcing/step_0000500", "step_forcing_01/step_500", "step_forcing_18/step_2000",
              "step_forcing_mix_01/step_500", "step_forcing_mix_02/step_500", "step_forcing_anneal/model"]
    pts = [{"label": lab} for lab in labels]
    assert D.stage_starts(pts, [500, 3000, 38500, 39000, 41000, 90500]) == [
        (500, "step_forcing"), (38500, "step_forcing_mix"), (41000, "step_forcing_anneal")]
    assert D.stage_starts(pts[1:3], [1, 2]) == []
