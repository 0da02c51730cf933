"""benchmarks.paired_loss on real (tiny, synthetic-data) training runs."""

from __future__ import annotations

import json

import pytest

from benchmarks import paired_loss as PL
from neuralsim.world_model.train import TrainConfig, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def _run(out, **kw):
    cfg = dict(stage="dit", objective="step_forcing", data="synthetic:8", out=str(out), config="tiny", steps=8,
               batch_size=2, log_every=1, checkpoint_every=100, sample_every=-1, progress=False, warmup=2, seed=3)
    cfg.update(kw)
    train(TrainConfig(**cfg))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("paired_loss")
    return {"a": _run(root / "a"), "same": _run(root / "same"), "frozen": _run(root / "frozen", lr=1e-12),
            "decay": _run(root / "decay", decay_steps=4)}


def test_identical_runs_differ_by_nothing_and_a_changed_run_shows_where(runs, capsys):
    same = PL.paired_blocks(PL.read_losses(runs["a"]), PL.read_losses(runs["same"]), block=4)
    assert same["common_steps"] == 8 and same["keys"] == list(PL.KEYS)
    assert [(r["first_step"], r["last_step"], r["logged_steps"]) for r in same["blocks"]] == [(1, 4, 4), (5, 8, 4)]
    assert all(r[k]["mean"] == 0.0 for r in same["blocks"] for k in PL.KEYS)  # same seed, same batches, same loss
    # a run that cannot learn (lr ~ 0) saw the same batches: its first loss is A's, then it stays behind
    a, frozen = PL.read_losses(runs["a"]), PL.read_losses(runs["frozen"])
    assert frozen[1]["loss"] == a[1]["loss"]
    diff = PL.paired_blocks(a, frozen, block=4)
    assert diff["blocks"][1]["loss"]["mean"] > 0 and diff["blocks"][1]["loss"]["ci95"] > 0
    assert PL.main([str(runs["a"]), str(runs["frozen"]), "--block", "4", "--out", str(runs["a"] / "pl.json")]) == 0
    printed = capsys.readouterr().out
    assert "frozen / a - 1 over 8 common logged steps" in printed and "loss_view2" in printed
    assert json.loads((runs["a"] / "pl.json").read_text())["blocks"] == json.loads(json.dumps(diff["blocks"]))


def test_bad_input_is_named(runs, tmp_path, capsys):
    with pytest.raises(SystemExit):
        PL.main([str(runs["a"]), str(tmp_path)])
    assert "has no metrics.jsonl" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\nnot json\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2 is not a JSON line"):
        PL.read_losses(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 99, "loss": 0.5}\n')
    with pytest.raises(ValueError, match="share no logged step"):
        PL.paired_blocks(PL.read_losses(runs["a"]), PL.read_losses(tmp_path))
    with pytest.raises(ValueError, match="block must be"):
        PL.paired_blocks(PL.read_losses(runs["a"]), PL.read_losses(runs["a"]), block=0)


def test_until_lr_drop_cuts_where_a_run_starts_to_anneal(runs, capsys):
    a, decay = PL.read_losses(runs["a"]), PL.read_losses(runs["decay"])
    assert PL.first_lr_drop(a) is None  # warmup rises, then constant: no drop
    drop = PL.first_lr_drop(decay)
    assert drop is not None and 2 < drop <= 8
    assert decay[drop]["lr"] < decay[drop - 1]["lr"] and all(decay[t]["lr"] == a[t]["lr"] for t in range(1, drop))
    # the whole log shows the annealed run pulling away; before the drop both drew the same batches at the same rate
    cut = PL.paired_blocks(a, decay, block=100, before=drop)
    assert cut["common_steps"] == cut["last_step"] == cut["blocks"][-1]["last_step"] == drop - 1
    assert cut["only_in_a"] == cut["only_in_b"] == 0  # the steps past the cut are not counted as unpaired
    assert all(r[k]["mean"] == 0.0 for r in cut["blocks"] for k in PL.KEYS)
    assert PL.main([str(runs["a"]), str(runs["decay"]), "--block", "100", "--until-lr-drop"]) == 0
    printed = capsys.readouterr().out
    assert f"over {drop - 1} common logged steps" in printed
    assert f"(cut before step {drop}, where decay's learning rate first falls)" in printed
    # without the flag nothing is cut and the note is absent
    assert PL.main([str(runs["a"]), str(runs["decay"]), "--block", "100"]) == 0
    assert "cut before" not in capsys.readouterr().out
    with pytest.raises(ValueError, match="share no logged step before step 1"):
        PL.paired_blocks(a, decay, before=1)
