"""benchmarks.train_speed: its step really trains the DiT, and a quick run reports every mode's median."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from benchmarks import train_speed as TS

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def test_step_updates_the_dit_like_a_training_step():
    step, dit = TS.make_step("tiny", 2, "step_forcing", torch.device("cpu"), compiled=False)
    before = {k: v.clone() for k, v in dit.state_dict().items()}
    step()
    step()
    changed = [k for k, v in dit.state_dict().items() if not torch.equal(v, before[k])]
    # AdaLN-Zero: the zero-initialised modulations and head are the first to move
    assert "final_out.weight" in changed and "blocks.0.ada.1.weight" in changed
    assert all(torch.isfinite(v).all() for v in dit.state_dict().values())


def test_quick_run_writes_a_row_per_mode_with_its_profile(tmp_path, capsys):
    out = tmp_path / "speed.json"
    assert TS.main(["--quick", "--modes", "eager", "--profile", "--objective", "diffusion_forcing",
                    "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (row,) = report["rows"]
    assert row["mode"] == "eager" and row["config"] == "tiny" and row["objective"] == "diffusion_forcing"
    assert len(row["ms_per_step_blocks"]) == len(row["steal_pct_blocks"]) == 2
    assert row["s_per_step"] * 1000 == pytest.approx(statistics.median(row["ms_per_step_blocks"]), abs=0.01)
    assert row["clips_per_s"] == pytest.approx(2 / row["s_per_step"], rel=1e-2)
    prof = row["profile"]
    assert prof["wall_s_per_step"] > 0 and prof["top_ops"]
    assert any(op["name"] in ("aten::mm", "aten::addmm") for op in prof["top_ops"])
    assert "s/step" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [["--batch-size", "0"], ["--config", "huge"], ["--objective", "magic"],
                                 ["--device", "cuda:7"] if not torch.cuda.is_available() else ["--steps", "0"]])
def test_bad_arguments_are_named(bad, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        TS.main([*bad, "--out", str(tmp_path / "x.json")])
    assert e.value.code == 2
    assert bad[0] in capsys.readouterr().err


def test_a_failing_mode_is_reported_and_the_others_kept(tmp_path, monkeypatch):
    real = TS.time_mode

    def flaky(mode, args, device):
        if mode == "compile":
            raise RuntimeError("no C++ compiler for inductor")
        return real(mode, args, device)

    monkeypatch.setattr(TS, "time_mode", flaky)
    out = tmp_path / "speed.json"
    assert TS.main(["--quick", "--out", str(out)]) == 1
    eager, compiled = json.loads(out.read_text())["rows"]
    assert eager["mode"] == "eager" and eager["s_per_step"] > 0
    assert compiled["mode"] == "compile" and "no C++ compiler" in compiled["error"] and "s_per_step" not in compiled


def test_patch_size_times_a_dit_with_finer_tokens(tmp_path):
    """``--patch-size``: the timed DiT reads smaller latent patches (more tokens per frame), and the row says so."""
    out = tmp_path / "speed.json"
    assert TS.main(["--quick", "--modes", "eager", "--patch-size", "2", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["patch_size"] == 2 and row["tokens_per_frame"] == 3 * 4 * 4  # tiny: 8x8 latent, 3 views
    step, dit = TS.make_step("tiny", 2, "step_forcing", torch.device("cpu"), compiled=False, patch_size=2)
    step()
    assert dit.config.patch_size == 2 and dit.patch_embed.weight.shape[1] == dit.config.latent_channels * 4
