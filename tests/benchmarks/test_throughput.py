"""benchmarks.throughput on a tiny saved model: every row is the median of its timed blocks, and the JSON
records what was timed."""

from __future__ import annotations

import json
import statistics

import pytest

from benchmarks.throughput import throughput as TP

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def test_median_time_is_the_median_block():
    calls = []
    per, blocks, steal = TP._median_time(lambda: calls.append(1), steps=4, repeats=3)
    assert len(calls) == 12 and len(blocks) == 3 and len(steal) == 3
    assert per * 1000 == pytest.approx(statistics.median(blocks), abs=0.01)


def test_steal_share_reads_the_steal_column_of_proc_stat(tmp_path):
    # /proc/stat's first line: cpu user nice system idle iowait irq softirq steal guest guest_nice
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 50 0 25 400 5 0 0 20 0 0\n")
    before = TP.cpu_times(str(stat))
    assert before == (40, 1000)
    stat.write_text("cpu  160 0 60 880 10 0 0 90 0 0\n")  # +200 jiffies, 50 of them stolen
    assert TP.steal_share(before, TP.cpu_times(str(stat))) == 25.0
    assert TP.cpu_times(str(tmp_path / "missing")) is None
    stat.write_text("intr 1 2 3\n")
    assert TP.cpu_times(str(stat)) is None
    assert TP.steal_share(None, before) is None and TP.steal_share(before, before) is None


def test_throughput_run_writes_rows_for_each_thread_count_and_batch(tiny_checkpoint, tmp_path):
    out = tmp_path / "tp.json"
    assert TP.main(["--model", str(tiny_checkpoint), "--batch-sizes", "1", "2", "--steps", "2", "--repeats", "2",
                    "--threads", "1", "--env", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["threads"] == [1] and res["repeats"] == 2 and res["steps_per_block"] == 2
    assert [r["batch_size"] for r in res["results"]] == [1, 2]
    for r in res["results"]:
        assert len(r["cached_ms_per_step_blocks"]) == 2 and len(r["steal_pct_blocks"]) == 2
        assert r["cached_frames_per_s"] == pytest.approx(r["batch_size"] * r["cached_time_steps_per_s"])
        assert r["cached_time_steps_per_s"] > 0 and r["recompute_time_steps_per_s"] > 0
        assert 1000 / r["cached_time_steps_per_s"] == pytest.approx(statistics.median(r["cached_ms_per_step_blocks"]),
                                                                    abs=0.02)
    assert [r["num_envs"] for r in res["env"]] == [1, 2]
    for r in res["env"]:
        assert len(r["ms_per_call_blocks"]) == 2 and len(r["steal_pct_blocks"]) == 2
        assert all(x is None or 0.0 <= x <= 100.0 for x in r["steal_pct_blocks"])
        assert r["env_steps_per_s"] == pytest.approx(r["num_envs"] * r["step_calls_per_s"])
    with pytest.raises(SystemExit, match="--repeats"):
        TP.main(["--model", str(tiny_checkpoint), "--repeats", "0", "--threads", "1", "--out", str(out)])


def test_throughput_times_fewer_denoising_passes_on_the_trained_levels(tiny_checkpoint, tmp_path, monkeypatch):
    from neuralsim.world_model.model import WorldModel

    out = tmp_path / "tp.json"
    schedules = []
    real_generate = WorldModel.generate

    def spy(self, state, noise, cond, rows=None, schedule=None, **kw):
        schedules.append(tuple(self.config.schedule if schedule is None else schedule))
        return real_generate(self, state, noise, cond, rows=rows, schedule=schedule, **kw)

    monkeypatch.setattr(WorldModel, "generate", spy)
    assert TP.main(["--model", str(tiny_checkpoint), "--batch-sizes", "1", "--steps", "1", "--repeats", "1",
                    "--threads", "1", "--env", "--denoising-steps", "2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["denoising_steps"] == 2 and res["schedule"] == [0.5, 1.0]
    assert schedules and set(schedules) == {(0.5, 1.0)}  # the model's own steps and env.step's
    with pytest.raises(SystemExit, match="more than the 4 noise levels"):
        TP.main(["--model", str(tiny_checkpoint), "--denoising-steps", "5", "--threads", "1", "--out", str(out)])
