"""Training runs end to end (CLI entry points), resumes on the same loss curve, stops on time."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest
import torch

from neuralsim.world_model import loop
from neuralsim.world_model.model import WorldModel
from neuralsim.world_model.train import TrainConfig, train


def _losses(out):
    return [(r["step"], r["loss"]) for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if "loss" in r]


def _cfg(out, **kw):
    base = dict(stage="dit", objective="step_forcing", data="synthetic:8", out=str(out), config="tiny", steps=6,
                batch_size=2, log_every=1, checkpoint_every=3, sample_every=-1, progress=False, warmup=2)
    base.update(kw)
    return TrainConfig(**base)


def test_resume_continues_the_same_loss_curve(tmp_path):
    straight = tmp_path / "a"
    train(_cfg(straight))
    resumed = tmp_path / "b"
    train(_cfg(resumed, steps=3))
    summary = train(_cfg(resumed, steps=6))  # finds b/checkpoint and continues
    assert summary["step"] == 6
    assert _losses(straight) == _losses(resumed)
    assert [s for s, _ in _losses(resumed)] == [1, 2, 3, 4, 5, 6]
    a, b = WorldModel.from_pretrained(straight / "model"), WorldModel.from_pretrained(resumed / "model")
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), k
    # the recipe names the budget of the resumed run, not the 3 steps of the first invocation
    assert b.config.recipe["stages"][-1]["steps"] == 6
    assert b.config.recipe["stages"][-1]["steps_run"] == 6
    assert b.config.recipe["dit_step_forcing_steps"] == 6
    assert len(b.config.recipe["stages"]) == len(a.config.recipe["stages"])


def test_more_of_a_stage_continues_its_step_count(tmp_path):
    """Step Forcing started from a model that already had 6 Step Forcing steps counts on from 6, also after a
    resume; the new stage entry says where it began."""
    first = tmp_path / "first"
    train(_cfg(first))
    more = tmp_path / "more"
    train(_cfg(more, steps=2, init_from=str(first / "model")))
    train(_cfg(more, steps=4, init_from=str(first / "model")))  # resumes more/checkpoint
    wm = WorldModel.from_pretrained(more / "model")
    assert wm.config.recipe["dit_step_forcing_steps"] == 10
    assert wm.config.recipe["stages"][-1]["continues_from_step"] == 6
    assert wm.config.recipe["stages"][-1]["steps"] == 4
    assert wm.config.recipe["stages"][-1]["steps_run"] == 4
    assert wm.config.recipe["stages"][-2]["steps_run"] == 6  # the first model's own stage keeps its count
    assert [s["objective"] for s in wm.config.recipe["stages"]][-2:] == ["step_forcing", "step_forcing"]


def test_compiled_run_matches_eager_and_resumes_without_compile(tmp_path):
    """--compile changes the kernels, not the training: the losses follow the eager run's to float rounding,
    and its checkpoint (the plain module's weights) resumes in an eager run."""
    eager, compiled = tmp_path / "eager", tmp_path / "compiled"
    train(_cfg(eager, steps=4))
    train(_cfg(compiled, steps=3, compile=True))
    train(_cfg(compiled, steps=4))  # resumes compiled/checkpoint without compiling
    got, want = _losses(compiled), _losses(eager)
    assert [s for s, _ in got] == [s for s, _ in want] == [1, 2, 3, 4]
    assert got[0][1] != 0.0
    assert [loss for _, loss in got] == pytest.approx([loss for _, loss in want], rel=1e-3)
    a, b = WorldModel.from_pretrained(eager / "model"), WorldModel.from_pretrained(compiled / "model")
    assert a.state_dict().keys() == b.state_dict().keys()  # no "_orig_mod." prefixes from the compiled wrapper
    for k, x in a.state_dict().items():
        torch.testing.assert_close(b.state_dict()[k], x, rtol=1e-3, atol=1e-4, msg=k)


def test_cli_autoencoder_then_dit_then_step_forcing(tmp_path):
    from neuralsim.cli import main

    common = ["--config", "tiny", "--data", "synthetic:6", "--batch-size", "2", "--no-progress", "--steps", "2",
              "--sample-every", "0"]
    assert main(["train", "--stage", "autoencoder", "--out", str(tmp_path / "ae"), *common]) == 0
    assert main(["train", "--stage", "dit", "--objective", "diffusion_forcing", "--init-from",
                 str(tmp_path / "ae" / "model"), "--out", str(tmp_path / "df"), *common]) == 0
    assert main(["train", "--stage", "dit", "--objective", "step_forcing", "--init-from",
                 str(tmp_path / "df" / "model"), "--out", str(tmp_path / "sf"), *common]) == 0
    wm = WorldModel.from_pretrained(tmp_path / "sf" / "model")
    stages = [s["objective"] for s in wm.config.recipe["stages"]]
    assert stages == ["reconstruction", "diffusion_forcing", "step_forcing"]
    assert wm.config.recipe["latent_stats_fitted"]
    assert list((tmp_path / "sf" / "samples").glob("*.mp4"))
    metric_lines = (tmp_path / "ae" / "metrics.jsonl").read_text().splitlines()
    assert any("sample_psnr_per_view" in json.loads(ln) for ln in metric_lines)


def test_a_deadline_as_a_duration_stops_cleanly_with_a_checkpoint(tmp_path):
    summary = train(_cfg(tmp_path / "t", steps=10**6, deadline="3s", objective="diffusion_forcing"))
    assert summary["stopped_early"] and 1 <= summary["step"] < 10**6
    trainer = json.loads((tmp_path / "t" / "checkpoint" / "trainer.json").read_text())
    assert trainer["step"] == summary["step"]


def test_deadline_stops_before_it_and_cools_the_learning_rate_down(tmp_path, capfd):
    """``--deadline``: the run ends, checkpoint and model written, before the wall-clock end (start-up included);
    ``--cool-down-secs`` anneals the rate towards that end, so the last logged rates fall below the base rate.
    The progress bar's total is the steps the deadline leaves room for, not the far larger step budget."""
    import time

    start = time.time()
    deadline = start + 6.0
    summary = train(_cfg(tmp_path / "d", steps=10**6, deadline=deadline, cool_down_secs=4.0, lr=1e-3,
                         checkpoint_every=10**6, num_threads=1, progress=True))
    ended = time.time()
    bar = capfd.readouterr().err.split("\r")[-1]
    assert f"{summary['step']}/" in bar and "/1000000" not in bar, bar
    assert summary["stopped_early"] and 1 <= summary["step"] < 10**6
    assert ended < deadline + 3.0  # the last step and the final write; nothing after the deadline starts a step
    trainer = json.loads((tmp_path / "d" / "checkpoint" / "trainer.json").read_text())
    assert trainer["step"] == summary["step"]
    rows = [json.loads(ln) for ln in (tmp_path / "d" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == summary["step"]
    views = [rows[-1][f"loss_view{i}"] for i in range(3)]  # the log says which camera the loss comes from
    assert sum(views) / 3 == pytest.approx(rows[-1]["loss"], rel=1e-5)
    lrs = [r["lr"] for r in rows if r["step"] > 2]  # after the 2-step warmup
    assert lrs[-1] < 0.5e-3 and all(a >= b for a, b in zip(lrs, lrs[1:]))
    wm = WorldModel.from_pretrained(tmp_path / "d" / "model")
    assert wm.config.recipe["stages"][-1]["cool_down_secs"] == 4.0
    assert wm.config.recipe["dit_step_forcing_steps"] == summary["step"]
    # the stage records the steps it ran beside the budget it was given
    assert wm.config.recipe["stages"][-1]["steps"] == 10**6
    assert wm.config.recipe["stages"][-1]["steps_run"] == summary["step"]


def test_a_deadline_already_past_runs_no_step_and_bad_values_are_refused(tmp_path):
    import time

    from neuralsim.world_model.train import learning_rate, parse_deadline

    first = tmp_path / "first"
    train(_cfg(first, steps=2))
    late = tmp_path / "late"
    summary = train(_cfg(late, steps=5, deadline=time.time() - 1, init_from=str(first / "model")))
    assert summary["step"] == 0 and summary["stopped_early"]
    assert not (late / "metrics.jsonl").exists() or not (late / "metrics.jsonl").read_text().strip()
    a, b = WorldModel.from_pretrained(first / "model"), WorldModel.from_pretrained(late / "model")
    assert all(torch.equal(x, b.state_dict()[k]) for k, x in a.state_dict().items())  # nothing trained
    assert b.config.recipe["stages"][-1]["steps_run"] == 0 and b.config.recipe["dit_step_forcing_steps"] == 2
    with pytest.raises(ValueError, match="give a deadline"):
        train(_cfg(tmp_path / "x", cool_down_secs=10.0))
    with pytest.raises(ValueError, match="cool_down_secs must be >= 0"):
        train(_cfg(tmp_path / "x", cool_down_secs=-1.0, deadline=time.time() + 60))
    # the rate: full until the cool-down, then linear to 0 at the deadline (and 0 after it)
    cfg = TrainConfig(lr=1e-3, warmup=1, steps=100, deadline=1000.0, cool_down_secs=100.0)
    assert learning_rate(cfg, 50, now=800.0) == pytest.approx(1e-3)
    assert learning_rate(cfg, 50, now=950.0) == pytest.approx(0.5e-3)
    assert learning_rate(cfg, 50, now=1200.0) == 0.0
    assert parse_deadline("1700000000") == 1700000000.0
    assert parse_deadline("2023-11-14T22:13:20+00:00") == 1700000000.0
    assert time.time() + 5399 < parse_deadline("90m") <= time.time() + 5400
    assert parse_deadline(" 2.5h ") == pytest.approx(time.time() + 9000, abs=5)
    for bad in ("tomorrow", "nan", "5 minutes"):
        with pytest.raises(argparse.ArgumentTypeError, match="deadline"):
            parse_deadline(bad)


def test_decoder_stage_trains_only_the_decoder(tmp_path):
    """``--stage decoder``: stored latents paired with their own frames; the encoder and the DiT stay put."""
    from neuralsim.world_model.train import LatentMemo, decoder_batch, open_dataset

    base = tmp_path / "ae"
    train(_cfg(base, stage="autoencoder", steps=2))
    dec = tmp_path / "dec"
    summary = train(_cfg(dec, stage="decoder", steps=12, init_from=str(base / "model"), lr=3e-3, warmup=1,
                         checkpoint_every=6))
    assert summary["step"] == 12
    a, b = WorldModel.from_pretrained(base / "model"), WorldModel.from_pretrained(dec / "model")
    changed = {k for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()) if not torch.equal(x, y)}
    assert changed and all(k.startswith(("autoencoder.vae.decoder.",
                                         "autoencoder.vae.post_quant_conv.")) for k in changed)
    assert b.config.recipe["decoder_reconstruction_steps"] == 12
    assert b.config.recipe["stages"][-1]["objective"] == "reconstruction"
    losses = [x for _, x in _losses(dec)]
    assert len(losses) == 12 and min(losses[-3:]) < losses[0]

    # the pairs it trains on: each stored latent is the encoding of the frame beside it
    ds = open_dataset("synthetic:8", a.config.clip_length, a.config.autoencoder.image_size, seed=0)
    z, frames = decoder_batch(LatentMemo(a, ds, a.config.autoencoder.image_size, 8), ds, [0, 3],
                              a.config.autoencoder.image_size, 2, torch.Generator().manual_seed(0), "cpu")
    assert z.shape[0] == frames.shape[0] == 4
    with torch.no_grad():
        torch.testing.assert_close(z, a.autoencoder.encode(frames).half().float())


def test_learning_rate_warmup_stable_decay():
    from neuralsim.world_model.train import TrainConfig, learning_rate

    cfg = TrainConfig(lr=1e-3, warmup=10, steps=100, decay_steps=40)
    lrs = [learning_rate(cfg, s) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)  # linear warmup
    assert all(v == pytest.approx(1e-3) for v in lrs[10:61])  # stable until the last 40 steps
    assert lrs[80] == pytest.approx(1e-3 * 20 / 40) and lrs[99] == pytest.approx(1e-3 / 40)  # linear to 0
    assert all(a >= b for a, b in zip(lrs[60:], lrs[61:]))
    assert learning_rate(TrainConfig(lr=1e-3, warmup=1, steps=100), 99) == pytest.approx(1e-3)  # no decay by default
    with pytest.raises(ValueError, match="decay_steps"):
        train(TrainConfig(decay_steps=-1, data="synthetic:4", progress=False))


def test_model_edit_prunes_the_decoder_and_a_decoder_stage_trains_it(tmp_path, capsys):
    """``neuralsim model edit --decoder-layers-per-block 0`` then ``--stage decoder``: the decoder is pruned, the
    rest kept bit for bit, and the stage records the depth it trained."""
    from neuralsim.cli import main

    base = tmp_path / "ae"
    train(_cfg(base, stage="autoencoder", steps=2))
    pruned = tmp_path / "pruned"
    assert main(["model", "edit", str(base / "model"), "--out", str(pruned), "--decoder-layers-per-block", "0"]) == 0
    dec = tmp_path / "dec"
    train(_cfg(dec, stage="decoder", steps=4, init_from=str(pruned), lr=3e-3, warmup=1, checkpoint_every=2))
    summary = train(_cfg(dec, stage="decoder", steps=6, init_from=str(pruned), lr=3e-3, warmup=1,
                         checkpoint_every=2))  # resumes the pruned run
    assert summary["step"] == 6
    a, b = WorldModel.from_pretrained(base / "model"), WorldModel.from_pretrained(dec / "model")
    assert b.config.autoencoder.decoder_depth == 0 and a.config.autoencoder.decoder_depth == 1
    assert b.config.recipe["stages"][-1]["decoder_layers_per_block"] == 0
    assert b.config.recipe["edits"] == [{"decoder_layers_per_block": 0}]
    assert sum(p.numel() for p in b.parameters()) < sum(p.numel() for p in a.parameters())
    shared = [k for k in b.state_dict() if not k.startswith(("autoencoder.vae.decoder.", "autoencoder.vae.post_quant"))]
    assert shared and all(torch.equal(b.state_dict()[k], a.state_dict()[k]) for k in shared)
    with pytest.raises(ValueError, match="decoder stage trains the decoder of a trained model"):
        train(_cfg(tmp_path / "x", stage="decoder"))


def test_torchrun_ddp_averages_gradients_over_ranks_and_stops_together(tmp_path):
    """Two CPU processes under ``torchrun`` (gloo): rank 0 sees the same first batch as a single-process run, the
    averaged gradients then move the weights elsewhere, the recipe records the global batch, and ``--deadline``
    stops every rank at the same step (a rank left behind would hang in the next all-reduce)."""
    single = tmp_path / "single"
    train(_cfg(single, steps=3, num_threads=1))

    def torchrun(out, *extra):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "neuralsim", "train", "--stage", "dit", "--objective", "step_forcing",
               "--config", "tiny", "--data", "synthetic:8", "--out", str(out), "--batch-size", "2", "--warmup", "2",
               "--log-every", "1", "--checkpoint-every", "3", "--sample-every", "-1", "--no-progress",
               "--num-threads", "1", *extra]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
        assert done.returncode == 0, done.stderr[-3000:]

    ddp = tmp_path / "ddp"
    torchrun(ddp, "--steps", "3")
    (s1, l1), (s_ddp, l_ddp) = _losses(single)[0], _losses(ddp)[0]
    assert s1 == s_ddp == 1 and l_ddp == pytest.approx(l1, rel=1e-5)  # same init, same rank-0 batch
    assert [s for s, _ in _losses(ddp)] == [1, 2, 3]
    a, b = WorldModel.from_pretrained(single / "model"), WorldModel.from_pretrained(ddp / "model")
    assert b.config.recipe["stages"][-1]["batch_size"] == 4 and a.config.recipe["stages"][-1]["batch_size"] == 2
    assert b.config.recipe["dit_step_forcing_steps"] == 3
    moved = [k for k in a.dit.state_dict() if not torch.equal(a.dit.state_dict()[k], b.dit.state_dict()[k])]
    assert moved  # rank 1's gradients took part in the update

    timed = tmp_path / "timed"
    torchrun(timed, "--steps", "100000", "--deadline", "20s")
    trainer = json.loads((timed / "checkpoint" / "trainer.json").read_text())
    assert 1 <= trainer["step"] < 100000
    assert _losses(timed)[-1][0] == trainer["step"]

    # a deadline with a time-based cool-down: rank 0's clock sets every rank's rate, and all stop together
    import time

    cooled = tmp_path / "cooled"
    torchrun(cooled, "--steps", "100000", "--deadline", str(time.time() + 35), "--cool-down-secs", "30")
    trainer = json.loads((cooled / "checkpoint" / "trainer.json").read_text())
    rows = [json.loads(ln) for ln in (cooled / "metrics.jsonl").read_text().splitlines()]
    assert 1 <= trainer["step"] < 100000 and rows[-1]["step"] == trainer["step"]
    assert rows[-1]["lr"] < 3e-4  # the trainer's default rate, cooled


@pytest.mark.parametrize("every_step", [True, False], ids=["cpu_checks_each_step", "gpu_style_deferred_check"])
def test_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, every_step):
    # The GPU path (no read-back inside a step) is exercised on the CPU by switching the per-step check off.
    from neuralsim.world_model import objectives

    real = objectives.get_objective
    calls = []

    def poisoned(name):
        fn, kw = real(name)

        def loss_fn(*a, **k):
            loss, metrics = fn(*a, **k)
            calls.append(1)
            return (loss * float("nan"), metrics) if len(calls) == 5 else (loss, metrics)  # the step with index 4

        return loss_fn, kw

    monkeypatch.setattr(objectives, "get_objective", poisoned)
    monkeypatch.setattr(loop, "checks_every_step", lambda device: every_step)
    out = tmp_path / "run"
    with pytest.raises(FloatingPointError, match="non-finite loss.* at step 4"):
        train(_cfg(out, steps=9, log_every=3, checkpoint_every=3))
    # the deferred check fires at step 6's log line and checkpoint, before either is written; the per-step one
    # before the bad update
    assert len(calls) == (5 if every_step else 6)
    assert json.loads((out / "checkpoint" / "trainer.json").read_text())["step"] == 3
    model = WorldModel.from_pretrained(out / "model")
    assert all(torch.isfinite(v).all() for v in model.state_dict().values() if v.is_floating_point())
    assert [s for s, _ in _losses(out)] == [3]  # nothing is logged from the bad step on


def _spy_on_conditioning(monkeypatch) -> list:
    """Make every objective record the conditioning tensor it is given; returns the (growing) list."""
    from neuralsim.world_model import objectives

    real = objectives.get_objective
    seen = []

    def spying(name):
        loss_fn, kw = real(name)

        def spy(model, x, cond, *a, **k):
            seen.append(cond.detach().clone())
            return loss_fn(model, x, cond, *a, **k)
        return spy, kw

    monkeypatch.setattr(objectives, "get_objective", spying)
    return seen


@pytest.mark.parametrize("option, value, changed", [("gripper_conditioning", "command", slice(6, 7)),
                                                    ("arm_conditioning", "replay", slice(0, 6))])
def test_model_edit_switches_the_conditioning_the_dit_stage_trains_on(tmp_path, monkeypatch, option, value, changed):
    """``neuralsim model edit --gripper-conditioning command`` / ``--arm-conditioning replay``: the config and recipe
    record the switch, and the DiT stage's objective gets the same clips with only the gripper (the command through
    the adapter's lag) or only the pose entries (the adapter's replay) changed; a resume keeps it."""
    from neuralsim.world_model.edit import EditConfig, edit_model

    base = tmp_path / "base"
    train(_cfg(base, steps=2))
    assert getattr(WorldModel.from_pretrained(base / "model").config, option) == "measured"
    edited = tmp_path / "edited"
    edit_model(EditConfig(checkpoint=str(base / "model"), out=str(edited), **{option: value}))
    seen = _spy_on_conditioning(monkeypatch)
    plain, switched = tmp_path / "plain", tmp_path / "switched"
    train(_cfg(plain, steps=3, init_from=str(base / "model")))
    n = len(seen)
    train(_cfg(switched, steps=3, init_from=str(edited)))
    assert len(seen) == 2 * n
    kept = torch.ones(7, dtype=torch.bool)
    kept[changed] = False
    for a, b in zip(seen[:n], seen[n:]):  # the same batches, another signal
        torch.testing.assert_close(b[..., kept], a[..., kept])
    assert any(not torch.allclose(a[..., changed], b[..., changed]) for a, b in zip(seen[:n], seen[n:]))
    monkeypatch.undo()
    m = WorldModel.from_pretrained(switched / "model")
    assert getattr(m.config, option) == value and m.config.recipe["edits"] == [{option: value}]
    train(_cfg(switched, steps=4, init_from=str(edited)))  # a resume keeps the run's signal
    assert getattr(WorldModel.from_pretrained(switched / "model").config, option) == value


def test_fetch_clips_can_give_the_gripper_command():
    import numpy as np

    from neuralsim.envs.adapter import gripper_trajectory
    from neuralsim.world_model.synthetic import SyntheticClipDataset
    from neuralsim.world_model.train import fetch_clips

    ds = SyntheticClipDataset(4, clip_length=6, image_size=16)
    _, measured = fetch_clips(ds, [0, 1], 16)
    _, command = fetch_clips(ds, [0, 1], 16, gripper="command")
    torch.testing.assert_close(command[..., :6], measured[..., :6])
    for j in range(2):
        item = ds[j]
        want = gripper_trajectory(float(item["gripper_position"][0, 0]), item["actions"][:-1, 7].numpy())
        np.testing.assert_allclose(command[j, :, 6].numpy(), want, atol=1e-6)
    assert not torch.equal(command[..., 6], measured[..., 6])


def test_fetch_clips_can_give_the_arm_replay():
    import numpy as np

    from neuralsim import kinematics as K
    from neuralsim.envs.adapter import arm_trajectory
    from neuralsim.world_model.synthetic import SyntheticClipDataset
    from neuralsim.world_model.train import fetch_clips

    ds = SyntheticClipDataset(4, clip_length=6, image_size=16)
    _, measured = fetch_clips(ds, [0, 1], 16)
    _, replay = fetch_clips(ds, [0, 1], 16, arm="replay")
    torch.testing.assert_close(replay[..., 6], measured[..., 6])
    for j in range(2):
        item = ds[j]
        want = K.forward_kinematics(arm_trajectory(item["joint_position"][0].numpy(), item["actions"][:-1, :7].numpy()))
        np.testing.assert_allclose(replay[j, :, :6].numpy(), want, atol=1e-5)
    assert not torch.allclose(replay[..., :6], measured[..., :6], atol=1e-4)


def test_snapshot_every_keeps_the_models_a_learning_curve_reads(tmp_path):
    """``snapshot_every`` keeps a copy of the exported model at those steps, bit-identical to what model/ held then,
    and the dynamics benchmark's --curve finds them in step order."""
    from benchmarks.fidelity.dynamics import curve_checkpoints
    from neuralsim.world_model.checkpoint import list_snapshots

    out = tmp_path / "run"
    train(_cfg(out, steps=6, snapshot_every=2))
    snaps = list_snapshots(out)
    assert [s for s, _ in snaps] == [2, 4, 6]
    last = WorldModel.from_pretrained(snaps[-1][1])
    model = WorldModel.from_pretrained(out / "model")
    for (k, x), (_, y) in zip(last.state_dict().items(), model.state_dict().items()):
        assert torch.equal(x, y), k
    first = WorldModel.from_pretrained(snaps[0][1])
    assert any(not torch.equal(x, y) for x, y in zip(first.state_dict().values(), last.state_dict().values()))
    assert [(label, step) for label, step, _ in curve_checkpoints(out)] == [("step_2", 2), ("step_4", 4),
                                                                           ("step_6", 6)]
    with pytest.raises(ValueError, match="snapshot_every"):
        TrainConfig(snapshot_every=-1)


def test_a_curve_over_a_recipes_stages_puts_each_model_at_its_total_dit_steps(tmp_path):
    """A recipe's output holds one run per stage, each counting its own steps from 1; the curve places every kept
    model at the DiT steps of its whole history, so Step Forcing's points follow Diffusion Forcing's."""
    from benchmarks.fidelity.dynamics import curve_checkpoints

    root = tmp_path / "recipe_out"
    train(_cfg(root / "autoencoder", stage="autoencoder", objective="reconstruction", steps=2, snapshot_every=2))
    (root / "autoencoder" / "done.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="whose DiT has trained"):
        curve_checkpoints(root)  # an autoencoder's DiT is as drawn: nothing to follow
    train(_cfg(root / "diffusion_forcing", objective="diffusion_forcing", steps=4, snapshot_every=2,
               init_from=str(root / "autoencoder" / "model")))
    (root / "diffusion_forcing" / "done.json").write_text("{}")  # the recipe marks a finished stage
    train(_cfg(root / "step_forcing", steps=4, snapshot_every=2, init_from=str(root / "diffusion_forcing" / "model")))
    got = [(label, step) for label, step, _ in curve_checkpoints(root)]
    assert got == [("diffusion_forcing/step_2", 2), ("diffusion_forcing/step_4", 4), ("step_forcing/step_2", 6),
                   ("step_forcing/step_4", 8)]
