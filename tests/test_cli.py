"""The ``neuralsim`` console script, driven through ``main(argv)``."""

from __future__ import annotations

import pytest

from neuralsim.cli import main


def test_help_lists_commands_and_examples(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for word in ("demo", "data", "model", "train", "examples:", "neuralsim data generate", "neuralsim model info"):
        assert word in out
    with pytest.raises(SystemExit):
        main(["data", "generate", "--help"])
    assert "--failure-share" in capsys.readouterr().out
    assert main([]) == 2


def test_data_generate_and_info(tmp_path, capsys):
    out = tmp_path / "ds"
    rc = main(["data", "generate", str(out), "--episodes", "1", "--max-steps", "12", "--families", "stack",
               "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "1 episodes" in text and "episodes/min" in text
    assert (out / "meta" / "episodes.jsonl").is_file()
    assert main(["data", "info", str(out)]) == 0
    assert "simdroid layout, 1 episodes" in capsys.readouterr().out
    # asking again with other parameters is a one-line error, not a traceback
    assert main(["data", "generate", str(out), "--episodes", "1", "--max-steps", "13", "--no-progress"]) == 1
    assert "other parameters" in capsys.readouterr().err


def test_demo_writes_a_video(tmp_path, capsys):
    assert main(["demo", "--seed", "1", "--task", "put_in_bowl", "--steps", "10", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "instruction:" in out and "rubric level:" in out
    videos = list(tmp_path.glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 0 and str(videos[0]) in out


def test_missing_dataset_is_a_clear_error(tmp_path, capsys):
    assert main(["data", "info", str(tmp_path / "nope")]) == 1
    assert "does not exist" in capsys.readouterr().err
