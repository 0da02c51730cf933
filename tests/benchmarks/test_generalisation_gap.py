"""benchmarks.generalisation_gap on a tiny random world model and two small SimDROID datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import generalisation_gap as G
from neuralsim.data.generate import generate
from neuralsim.world_model.model import WorldModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gap_data")
    generate(root / "train", 2, seed=0, max_steps=14, progress=False)
    generate(root / "heldout", 2, seed=1_000_000, max_steps=14, progress=False)
    return {"train": root / "train", "heldout": root / "heldout"}


def test_same_clips_and_noise_give_no_gap_and_other_episodes_do(tiny_checkpoint, datasets):
    wm = WorldModel.from_pretrained(tiny_checkpoint).eval()
    a = G.objective_losses(wm, datasets["train"], clips=6, noise_draws=2, batch_size=4)
    again = G.objective_losses(wm, datasets["train"], clips=6, noise_draws=2, batch_size=4)
    assert a == again  # clips and noise depend only on the seed
    assert a["clips"] == 6 and a["step_forcing"]["batches"] == 4  # 2 batches (4 + 2 clips) x 2 draws
    assert a["step_forcing"]["mean"] > 0 and a["step_forcing"]["stderr"] >= 0
    # every view has the same number of elements, so the per-view means average to the whole mean
    from neuralsim.episode import VIEW_NAMES

    for name in G.OBJECTIVES:
        per_view = a[name]["per_view"]
        assert tuple(per_view) == VIEW_NAMES and len(set(per_view.values())) == 3
        assert sum(per_view.values()) / 3 == pytest.approx(a[name]["mean"], rel=1e-5)
    same = G.compare(a, again)
    assert all(v["relative_gap"] == 0.0 for v in same.values())
    b = G.objective_losses(wm, datasets["heldout"], clips=6, noise_draws=2, batch_size=4)
    other = G.compare(a, b)
    assert other["step_forcing"]["relative_gap"] == pytest.approx(
        b["step_forcing"]["mean"] / a["step_forcing"]["mean"] - 1)
    assert other["step_forcing"]["relative_gap"] != 0.0 and other["step_forcing"]["stderr"] > 0
    assert G.objective_losses(wm, datasets["train"], clips=6, noise_draws=2, batch_size=4, seed=1) != a
    # under another clip's poses the same clips and noise give another loss; one clip has no other to borrow
    swapped = G.objective_losses(wm, datasets["train"], clips=6, noise_draws=2, batch_size=4,
                                 objectives=("step_forcing", G.OTHER_POSES))
    assert swapped["step_forcing"] == a["step_forcing"]
    assert swapped[G.OTHER_POSES]["mean"] != a["step_forcing"]["mean"]
    with pytest.raises(ValueError, match="at least 2 clips"):
        G.objective_losses(wm, datasets["train"], clips=1, noise_draws=1, objectives=(G.OTHER_POSES,))


def test_cli_writes_the_report_and_refuses_a_missing_dataset(tiny_checkpoint, datasets, tmp_path, capsys):
    out = tmp_path / "gap.json"
    args = ["--checkpoint", str(tiny_checkpoint), "--train", str(datasets["train"]), "--heldout",
            str(datasets["heldout"]), "--clips", "4", "--noise-draws", "1", "--out", str(out), "--no-progress"]
    assert G.main(args) == 0
    report = json.loads(out.read_text())
    assert set(report["gap"]) == set(G.OBJECTIVES)
    assert report["train"]["clips"] == report["heldout"]["clips"] == 4
    printed = capsys.readouterr().out
    assert "held-out" in printed and "wrist_image_left" in printed
    assert set(report["heldout"]["step_forcing"]["per_view"]) == set(report["train"]["step_forcing"]["per_view"])
    with pytest.raises(FileNotFoundError, match="not a SimDROID dataset"):
        G.main([*args[:4], "--heldout", str(tmp_path / "nowhere"), "--out", str(out)])
    with pytest.raises(SystemExit):
        G.main([*args, "--clips", "0"])
    assert G.main([*args, "--quick"]) == 0
    assert G.main([*args, "--other-poses"]) == 0
    report = json.loads(out.read_text())
    assert set(report["gap"]) == {*G.OBJECTIVES, G.OTHER_POSES}
    sens = report["pose_sensitivity_heldout"]
    assert sens["all"] == pytest.approx(report["heldout"][G.OTHER_POSES]["mean"]
                                        / report["heldout"]["step_forcing"]["mean"])
    assert "follows its actions" in capsys.readouterr().out
    assert json.loads(out.read_text())["train"]["noise_draws"] == 1
