"""benchmarks.throughput on a tiny saved model: every row is the median of its timed blocks, and the JSON
records what was timed."""

from __future__ import annotations

import json
import statistics

import pytest

from benchmarks import throughput as TP

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def test_median_time_is_the_median_block():
    calls = []
    per, blocks = TP._median_time(lambda: calls.append(1), steps=4, repeats=3)
    assert len(calls) == 12 and len(blocks) == 3
    assert per * 1000 == pytest.approx(statistics.median(blocks), abs=0.01)


def test_throughput_run_writes_rows_for_each_thread_count_and_batch(tiny_checkpoint, tmp_path):
    out = tmp_path / "tp.json"
    assert TP.main(["--model", str(tiny_checkpoint), "--batch-sizes", "1", "2", "--steps", "2", "--repeats", "2",
                    "--threads", "1", "--env", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["threads"] == [1] and res["repeats"] == 2 and res["steps_per_block"] == 2
    assert [r["batch_size"] for r in res["results"]] == [1, 2]
    for r in res["results"]:
        assert len(r["cached_ms_per_step_blocks"]) == 2
        assert r["cached_frames_per_s"] == pytest.approx(r["batch_size"] * r["cached_time_steps_per_s"])
        assert r["cached_time_steps_per_s"] > 0 and r["recompute_time_steps_per_s"] > 0
        assert 1000 / r["cached_time_steps_per_s"] == pytest.approx(statistics.median(r["cached_ms_per_step_blocks"]),
                                                                    abs=0.02)
    assert [r["num_envs"] for r in res["env"]] == [1, 2]
    for r in res["env"]:
        assert len(r["ms_per_call_blocks"]) == 2
        assert r["env_steps_per_s"] == pytest.approx(r["num_envs"] * r["step_calls_per_s"])
    with pytest.raises(SystemExit, match="--repeats"):
        TP.main(["--model", str(tiny_checkpoint), "--repeats", "0", "--threads", "1", "--out", str(out)])
