"""benchmarks.roboarena: its statistics on hand-made rows, and real runs (SimDROID, a tiny world model, the offline
judge, an openpi server on loopback that dies, Ray on this machine, the report in headless Chromium)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common.policy_set import resolve_policy
from benchmarks.roboarena import roboarena as RA
from policies import UnknownPolicyError

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def cfg_for(checkpoint, out, **kw) -> RA.RoboArenaConfig:
    base = dict(policies=["expert", "zero"], episodes=2, steps=6, checkpoint=str(checkpoint), out=str(out),
                bootstrap=50, videos=1, progress=False)
    return RA.RoboArenaConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def arena(tiny_checkpoint, tmp_path_factory):
    """One in-process run: the expert and zero, 2 episodes of 6 steps each, on the tiny world model."""
    import torch

    torch.set_num_threads(1)
    cfg = cfg_for(tiny_checkpoint, tmp_path_factory.mktemp("arena"))
    return cfg, RA.run(cfg)


# ----------------------------------------------------------------------------- arithmetic on hand-made rows
def row(policy, episode, judged, true_level, sim_judged=None, binary=None, error=None):
    return {"policy": policy, "episode": episode, "seed": episode, "error": error, "judged": judged,
            "true_level": true_level, "true_success": true_level == 5, "sim_judged": sim_judged,
            "binary": binary, "sim_binary": None}


def test_summary_leaderboard_bias_decomposition_and_exclusions():
    cfg = RA.RoboArenaConfig(policies=["a", "b", "c"], episodes=2, bootstrap=100, progress=False)
    rows = [row("a", 0, 5.0, 5, 5.0, 1.0), row("a", 1, 4.0, 5, 5.0, 0.0),
            row("b", 0, 4.0, 2, 2.0, 0.0), row("b", 1, None, 2, 2.0, 0.0),  # judge failed: unjudged, kept
            row("c", 0, 5.0, 0, 0.0, 1.0), row("c", 1, 0.0, 0, 0.0, 0.0, error="SimDROID: PolicyConnectionError: x"),
            row("c", 5, 5.0, 5, 5.0)]  # an episode beyond cfg.episodes: not counted
    s = RA.summarise(cfg, rows)
    by = {t["policy"]: t for t in s["rows"]}
    assert by["a"]["judged_mean"] == 4.5 and by["a"]["true_success"] == 1.0 and by["a"]["judged_success"] == 0.5
    assert by["a"]["bias"] == -0.5 and by["a"]["bias_world_model"] == -0.5 and by["a"]["bias_judge"] == 0.0
    assert by["b"]["unjudged"] == 1 and by["b"]["judged_mean"] == 4.0 and by["b"]["true_mean_level"] == 2.0
    assert by["b"]["bias_world_model"] == 2.0 and by["b"]["bias_judge"] == 0.0
    assert by["c"]["failed"] == 1 and by["c"]["episodes"] == 2 and by["c"]["judged_mean"] == 5.0
    assert by["c"]["errors"] == ["SimDROID: PolicyConnectionError: x"]
    assert s["failed_episodes"] == 1 and s["unjudged_episodes"] == 1
    # the world model flatters c (5 vs 0): its ranking c > a > b against the truth a > b > c
    assert s["spearman"] == pytest.approx(-0.5) and s["comparisons"]["judge_on_sim"]["spearman"] == pytest.approx(1)
    assert s["decomposition"]["blames"] == "world model"
    assert s["decomposition"]["mean_abs_bias_judge"] == 0.0
    lo, hi = by["a"]["judged_mean_ci95"]
    assert 4.0 <= lo <= 4.5 <= hi <= 5.0
    # judged success a 50%, b 0%, c 100% against the truth 100%, 0%, 0%: a and c each mis-ordered by 100 points
    assert s["mmrv"] == pytest.approx((1 + 0 + 1) / 3)
    assert s["comparisons"]["world_model_success"]["predicted"] == {"a": 0.5, "b": 0.0, "c": 1.0}
    assert set(s) >= {"policies", "episodes_per_policy", "pearson", "spearman", "pearson_ci95", "spearman_ci95",
                      "mmrv", "judge", "world_model", "report", "rows"}


def test_the_truth_is_named_after_the_world_models_scene(tiny_legible_checkpoint, tmp_path):
    from benchmarks.roboarena.report import write_html

    cfg = RA.RoboArenaConfig(policies=["a", "c"], episodes=1, bootstrap=10, progress=False,
                             checkpoint=str(tiny_legible_checkpoint))
    s = RA.summarise(cfg, [row("a", 0, 4.0, 5), row("c", 0, 5.0, 0)])
    assert s["truth_env"] == "SimDROID-v1" and s["truth"].startswith("SimDROID-v1 rubric level")
    page = write_html(s, tmp_path, {}).read_text()
    assert "closed loop in SimDROID-v1, scored by ground truth" in page and "SimDROID-v0" not in page


def test_mmrv_of_the_summary_is_simplers_on_success_rates():
    cfg = RA.RoboArenaConfig(policies=["a", "c"], episodes=1, bootstrap=10, progress=False)
    s = RA.summarise(cfg, [row("a", 0, 4.0, 5), row("c", 0, 5.0, 0)])
    assert s["mmrv"] == pytest.approx(1.0)  # c judged above a, truly 0% against 100%


def test_bad_input_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        RA.RoboArenaConfig(episodes=0)
    with pytest.raises(ValueError, match="'roboworld:' or 'binary:'"):
        RA.RoboArenaConfig(judge="wow:offline")
    with pytest.raises(ValueError, match="repeat"):
        RA.RoboArenaConfig(policies=["zero", "zero"])
    with pytest.raises(UnknownPolicyError, match="unknown benchmark policy 'nope'"):
        RA.run(RA.RoboArenaConfig(policies=["zero", "nope"], out="/nonexistent/never", progress=False))
    with pytest.raises(UnknownPolicyError, match="recorded"):
        resolve_policy("replay")
    assert resolve_policy("expert+weak_grip").kwargs == {"failure": "weak_grip"}
    assert resolve_policy("noisy-0.45").privileged and resolve_policy("openpi:127.0.0.1:9").factory.startswith("openpi")
    assert RA.config_from_args(["--quick"]).policies == list(RA.QUICK_POLICIES)
    assert RA.config_from_args(["--policy", "zero", "--episodes", "3", "--binary-judge", "none"]).binary_judge is None


# ----------------------------------------------------------------------------- real runs
def test_run_records_every_episode_and_resumes_without_recomputing(arena, monkeypatch):
    cfg, summary = arena
    out = Path(cfg.out)
    rows = RA.read_rows(out / "episodes.jsonl")
    assert sorted((r["policy"], r["episode"]) for r in rows) == [("expert", 0), ("expert", 1), ("zero", 0),
                                                                  ("zero", 1)]
    for r in rows:
        assert r["error"] is None and r["judged"] is not None and 0 <= r["judged"] <= 5
        assert r["true_level"] in (0, 2, 4, 5) and r["sim_judged"] is not None and r["binary"] in (0.0, 1.0)
    assert (out / "videos" / "expert_0.mp4").stat().st_size > 0 and not (out / "videos" / "expert_1.mp4").exists()
    assert summary["rows"][0]["videos"] == ["videos/expert_0.mp4"]
    assert Path(summary["report"]).resolve() == (out / "index.html").resolve() and (out / "scatter.png").is_file()
    assert json.loads((out / "roboarena.json").read_text())["episodes"] == 4

    def no_work(*a, **k):
        raise AssertionError("a finished episode was recomputed")

    monkeypatch.setattr(RA, "run_unit", no_work)
    assert RA.run(cfg)["rows"] == summary["rows"]  # resumed: nothing to run, the same summary

    # an interrupted run: the last line torn mid-write and one episode missing -> only that one runs again
    lines = (out / "episodes.jsonl").read_text().splitlines()
    (out / "episodes.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    calls = []
    monkeypatch.setattr(RA, "run_unit", lambda c, name, idx, vd: calls.append((name, list(idx))) or
                        [json.loads(lines[-1])])
    RA.run(cfg)
    assert calls == [(json.loads(lines[-1])["policy"], [json.loads(lines[-1])["episode"]])]
    # --report-only: a summary of what is recorded, nothing run, the shortfall named
    partial = RA.run(replace(cfg, episodes=3, report_only=True))
    assert len(calls) == 1 and partial["incomplete"] == {"expert": 2, "zero": 2}
    with pytest.raises(ValueError, match="other options"):
        RA.run(replace(cfg, steps=7))


def test_same_config_gives_the_same_rows(arena):
    cfg, _ = arena
    first = {(r["policy"], r["episode"]): r for r in RA.read_rows(Path(cfg.out) / "episodes.jsonl")}
    again = RA.run_unit(cfg, "zero", [0, 1])
    strip = lambda r: {k: v for k, v in r.items() if k not in ("seconds", "video")}  # noqa: E731
    assert [strip(r) for r in again] == [strip(first[("zero", 0)]), strip(first[("zero", 1)])]


def test_a_dying_policy_server_fails_only_its_episodes(tiny_checkpoint, tmp_path):
    from policies.server import PolicyServer
    from policies.simple import ZeroPolicy

    class Dying(ZeroPolicy):
        """Answers 4 requests, then takes its server down (connections closed, port closed)."""

        calls = 0

        def infer(self, observation):
            Dying.calls += 1
            if Dying.calls == 4:
                threading.Thread(target=server.shutdown, daemon=True).start()
            return super().infer(observation)

    server = PolicyServer(Dying(), port=0).start()
    name = f"openpi:127.0.0.1:{server.port}"
    cfg = cfg_for(tiny_checkpoint, tmp_path, policies=[name, "zero"], videos=0)
    try:
        summary = RA.run(cfg)
    finally:
        server.shutdown()
    rows = RA.read_rows(tmp_path / "episodes.jsonl")
    served = [r for r in rows if r["policy"] == name]
    assert len(served) == 2 and all("PolicyConnectionError" in r["error"] for r in served)
    assert all(r["error"] is None for r in rows if r["policy"] == "zero")
    by = {t["policy"]: t for t in summary["rows"]}
    assert by[name]["failed"] == 2 and by[name]["judged_mean"] is None and by["zero"]["failed"] == 0
    assert summary["failed_episodes"] == 2
    assert "PolicyConnectionError" in (tmp_path / "index.html").read_text()
    assert all(r[k] is None for r in served for k in RA.SCORE_KEYS)  # no score of a rollout the policy did not finish


def test_a_failing_judge_keeps_the_rollout(tiny_checkpoint, tmp_path, monkeypatch):
    import neuralsim.rewards

    real = neuralsim.rewards.make_reward_fn

    def make(spec):
        judge = real(spec)

        def flaky(episode):  # fails on the world model's episodes only
            if episode.metadata.get("source") == "NeuralDROID-v0":
                raise TimeoutError("judge backend timed out")
            return judge(episode)
        return flaky

    monkeypatch.setattr(neuralsim.rewards, "make_reward_fn", make)
    summary = RA.run(cfg_for(tiny_checkpoint, tmp_path, policies=["zero"], episodes=1, videos=0,
                             binary_judge=None))
    (r,) = RA.read_rows(tmp_path / "episodes.jsonl")
    assert r["error"] is None and r["judged"] is None and "TimeoutError" in r["judge_error"]
    assert r["true_level"] == 0 and r["sim_judged"] is not None  # the rollouts and the other judgement are kept
    assert summary["unjudged_episodes"] == 1 and summary["rows"][0]["judged_mean"] is None


def test_a_policy_that_never_answers_leaves_its_rows_unscored(tiny_checkpoint, tmp_path):
    name = "openpi:127.0.0.1:9"  # nothing listens there: the connection is refused
    summary = RA.run(cfg_for(tiny_checkpoint, tmp_path, policies=[name, "zero"], episodes=1, videos=0))
    rows = {r["policy"]: r for r in RA.read_rows(tmp_path / "episodes.jsonl")}
    failed = rows[name]
    assert "PolicyConnectionError" in failed["error"]
    assert {k: failed[k] for k in RA.SCORE_KEYS} == dict.fromkeys(RA.SCORE_KEYS)  # null, not the still arm's 0.0
    assert failed["judge_error"] is None and failed["binary_error"] is None  # unscored, not misjudged
    assert rows["zero"]["judged"] is not None and rows["zero"]["true_level"] == 0
    by = {t["policy"]: t for t in summary["rows"]}
    assert by[name]["failed"] == 1 and by[name]["judged_mean"] is None and by[name]["true_mean_level"] is None
    assert all(c["policies"] == 1 for c in summary["comparisons"].values())  # only zero is compared


def test_summaries_skip_the_scores_of_a_failed_row():
    """A row recorded before failed rows were nulled still carries the still arm's 0.0: it counts nowhere."""
    cfg = RA.RoboArenaConfig(policies=["a", "b"], episodes=2, bootstrap=20, progress=False)
    rows = [row("a", 0, 5.0, 5, 5.0, 1.0), row("a", 1, 4.0, 4, 4.0, 0.0),
            row("b", 0, 0.0, 0, 0.0, 0.0, error="NeuralDROID: PolicyConnectionError: gone"),
            row("b", 1, 0.0, 0, 0.0, 0.0, error="NeuralDROID: PolicyConnectionError: gone")]
    s = RA.summarise(cfg, rows)
    b = s["rows"][1]
    assert b["failed"] == 2 and b["judged_mean"] is None and b["true_mean_level"] is None and b["bias"] is None
    assert all("b" not in c["predicted"] for c in s["comparisons"].values())


#: The issue's judge: an OpenAI-compatible server that is not there (one attempt, no cache, to stay fast).
UNREACHABLE_JUDGE = "roboworld:openai/gpt-4o?base_url=http://127.0.0.1:9/v1&max_attempts=1&cache=false"


def test_an_unreachable_judge_is_named_in_the_rows_and_the_summary(tiny_checkpoint, tmp_path, monkeypatch,
                                                                    capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    cfg = cfg_for(tiny_checkpoint, tmp_path, policies=["zero", "random"], episodes=1, videos=0,
                  judge=UNREACHABLE_JUDGE, binary_judge=None)
    summary = RA.run(cfg)
    for r in RA.read_rows(tmp_path / "episodes.jsonl"):
        assert r["error"] is None and r["judged"] is None and r["sim_judged"] is None
        assert "Connection error" in r["judge_error"] and "Connection error" in r["sim_judge_error"], r
    d = summary["decomposition"]
    assert d["blames"] is None and "needs 2" in d["no_verdict"] and "Connection error" in d["no_verdict"]
    assert all("Connection error" in e for t in summary["rows"] for e in t["judge_errors"])
    RA.print_report(summary)
    printed = capsys.readouterr().out
    assert "blames the None" not in printed and "no verdict:" in printed and "Connection error" in printed
    page = (tmp_path / "index.html").read_text()
    assert "<b>None</b>" not in page and "Connection error" in page


# ----------------------------------------------------------------------------- the command line
def roboarena_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m benchmarks.roboarena ARGS`` in a subprocess, from the repository."""
    root = Path(RA.__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "benchmarks.roboarena", "--no-progress", *args], cwd=cwd or root,
                          env=env, capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("roboarena: error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_report_only_refuses_a_directory_that_holds_no_run(tmp_path):
    typo = tmp_path / "typo"
    assert_one_line_error(roboarena_cli("--report-only", "--out", str(typo)), "holds no RoboArena run")
    assert not typo.exists()  # created nothing
    (typo / "nested").mkdir(parents=True)  # an existing directory that is not a run: refused, left as it was
    assert_one_line_error(roboarena_cli("--report-only", "--out", str(typo)), str(typo))
    assert sorted(p.name for p in typo.iterdir()) == ["nested"]


def test_report_only_reads_the_runs_own_configuration(arena, tmp_path):
    cfg, summary = arena
    copy = tmp_path / "run"
    shutil.copytree(cfg.out, copy)
    done = roboarena_cli("--report-only", "--out", str(copy))
    assert done.returncode == 0, done.stderr[-3000:]
    again = json.loads((copy / "roboarena.json").read_text())
    assert again["policies"] == cfg.policies and again["episodes_per_policy"] == cfg.episodes
    assert again["incomplete"] == {} and again["config"]["steps"] == cfg.steps
    assert again["rows"] == summary["rows"]  # the same run's report, rebuilt
    assert "2 policies &times; 2 episodes" in (copy / "index.html").read_text()
    # a run recorded before run.json held its policies and episodes: they are read from its rows
    recorded = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({k: recorded[k] for k in RA.RESULT_KEYS}))
    (copy / "roboarena.json").unlink()
    again = RA.config_from_args(["--report-only", "--out", str(copy)])
    assert again.policies == cfg.policies and again.episodes == cfg.episodes and again.steps == cfg.steps
    # options given on the command line still win (the existing "--episodes 3" report names the shortfall)
    assert RA.config_from_args(["--report-only", "--out", str(copy), "--episodes", "3"]).episodes == 3


@pytest.mark.parametrize("args, needles", [
    (["--ray-workers", "0"], ["ray_workers must be >= 1", "--ray-workers", "got 0"]),
    (["--policy", "zero", "--policy", "nope"], ["unknown benchmark policy 'nope'"]),
    (["--policy", "zero", "--steps", "7"], ["other options", "--steps 6 then, 7 now", "new --out"]),
], ids=["ray-workers-0", "unknown-policy", "option-mismatch"])
def test_user_mistakes_get_one_line_and_exit_2(arena, tmp_path, args, needles):
    cfg, _ = arena
    copy = tmp_path / "run"
    shutil.copytree(cfg.out, copy)
    before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
    done = roboarena_cli("--out", str(copy), "--checkpoint", cfg.checkpoint, "--episodes", "2", *args)
    assert_one_line_error(done, *needles)
    assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()} == before  # nothing touched


@pytest.mark.slow
def test_ctrl_c_during_a_ray_run_says_what_was_saved(tiny_checkpoint, tmp_path):
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'neuralsim[ray]')")
    out = tmp_path / "ray"
    root = Path(RA.__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    cmd = [sys.executable, "-m", "benchmarks.roboarena", "--no-progress", "--ray", "--ray-workers", "1", "--policy",
           "zero", "--episodes", "40", "--chunk", "1", "--steps", "6", "--videos", "0", "--bootstrap", "20",
           "--binary-judge", "none", "--checkpoint", str(tiny_checkpoint), "--out", str(out)]
    # a terminal's Ctrl-C: SIGINT to the whole foreground process group
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if len(RA.read_rows(out / "episodes.jsonl")) >= 2:
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    saved = len(RA.read_rows(out / "episodes.jsonl"))
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last == (f"roboarena: interrupted; {saved} of 40 episodes are saved in {out / 'episodes.jsonl'}; rerun "
                    f"the same command to run the other {40 - saved}"), last


@pytest.mark.slow
def test_ray_workers_give_exactly_the_in_process_results(tiny_checkpoint, tmp_path):
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'neuralsim[ray]')")
    cfg = cfg_for(tiny_checkpoint, tmp_path / "local", policies=["random"], chunk=1, videos=0, binary_judge=None,
                  ray_workers=2)  # two units, one per worker
    local = RA.run(cfg)
    remote = RA.run(replace(cfg, out=str(tmp_path / "ray"), ray=True))

    def key(rows):
        return sorted((json.dumps({k: v for k, v in r.items() if k != "seconds"}, sort_keys=True) for r in rows))

    assert key(RA.read_rows(tmp_path / "ray" / "episodes.jsonl")) == key(RA.read_rows(tmp_path / "local" /
                                                                                      "episodes.jsonl"))
    assert remote["rows"] == local["rows"]


# ----------------------------------------------------------------------------- the page in a real browser
def chromium_dom(page: Path, profile: Path, width: int = 1280) -> str:
    """``chromium --headless --dump-dom`` of a local page in a ``width``-px window, after its load handlers ran."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("Debian's chromium is not installed; scripts/setup.sh installs it (apt-get install chromium)")
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
           f"--window-size={width},900", "--allow-file-access-from-files", "--virtual-time-budget=5000", "--dump-dom",
           page.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
def test_report_renders_in_headless_chromium(arena, tmp_path):
    cfg, summary = arena
    dom = chromium_dom(Path(summary["report"]), tmp_path / "profile")
    assert 'data-images-ok="2/2"' in dom  # both PNGs decoded by the browser
    assert 'data-videos="2"' in dom  # one side-by-side video per policy
    assert dom.count("<tr>") >= 1 + 2 + 1 + len(summary["comparisons"])  # leaderboard and comparison rows
    assert "expert" in dom and "zero" in dom and 'id="decomposition"' in dom
    assert np.isfinite(summary["spearman"] if summary["spearman"] is not None else 0.0)
    assert_fits(dom, 1280)


def assert_fits(dom: str, width: int) -> None:
    """The page, laid out by the browser in a ``width``-px window, reaches past no edge (no horizontal scroll)."""
    body = re.search(r"<body[^>]*>", dom).group(0)
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body))
    assert attrs.get("overflow") == "", f"past the right edge at {width} px: {attrs.get('overflow')!r} ({body})"
    assert int(attrs["page-width"]) <= int(attrs["view-width"]) <= width, body


def committed_summary() -> dict:
    """The shipped run's summary (8 policies x 20 episodes): the leaderboard of a real run, crowded scatter points."""
    return json.loads((RA.RUN_DIR / "roboarena.json").read_text())


@pytest.mark.slow
def test_a_full_report_fits_1280px_and_names_the_policies_without_videos(tmp_path):
    from benchmarks.roboarena.report import write_report

    summary = committed_summary()
    (tmp_path / "videos").mkdir()
    shutil.copy(RA.RUN_DIR / "videos" / "zero_0.mp4", tmp_path / "videos")
    summary["rows"][0]["videos"] = []  # a policy whose run recorded none
    page = write_report(summary, tmp_path)
    dom = chromium_dom(page, tmp_path / "profile")
    assert 'data-images-ok="2/2"' in dom and 'data-videos="1"' in dom
    assert_fits(dom, 1280)
    note = re.search(r"<p id=\"videos-note\">(.*?)</p>", dom, re.S).group(1)
    assert "Videos of 1 of 8 policies" in note
    first, missing = summary["rows"][0]["policy"], [r["policy"] for r in summary["rows"][1:] if r["policy"] != "zero"]
    assert all(p in note for p in missing) and f"No video for {first}" in note, note


def test_scatter_names_every_point_without_overlap():
    from benchmarks.roboarena.report import scatter_figure

    fig = scatter_figure(committed_summary())
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    boxes = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts}
    assert sorted(boxes) == sorted(r["policy"] for r in committed_summary()["rows"])
    frame = ax.get_window_extent(renderer)
    for name, box in boxes.items():
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, name
    names = sorted(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not boxes[a].overlaps(boxes[b]), f"the names {a!r} and {b!r} overlap"


def test_plots_draw_every_label_inside_their_image():
    """Long judge specs and policy names (a VLM on a server, a remote policy) still fit: nothing is cut off."""
    import matplotlib.pyplot as plt

    from benchmarks.roboarena.report import bars_figure, scatter_figure

    summary = committed_summary()
    summary["judge"] = "roboworld:openai/Qwen/Qwen2.5-VL-72B-Instruct?base_url=http://gpu-box.example.org:8000/v1"
    summary["rows"][0]["policy"] = "roboarena:policy-server.example.org:8000"
    for make in (scatter_figure, bars_figure):
        fig = make(summary)
        drawn = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
        width, height = fig.get_size_inches()
        assert drawn.x0 >= -1e-6 and drawn.y0 >= -1e-6 and drawn.x1 <= width + 1e-6 and drawn.y1 <= height + 1e-6, (
            make.__name__, drawn, (width, height))
        for ax in fig.axes:
            assert ax.get_ylabel() and ax.yaxis.label.get_window_extent().y0 >= 0
        plt.close(fig)
