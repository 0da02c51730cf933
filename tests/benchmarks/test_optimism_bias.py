"""benchmarks.optimism_bias: its arithmetic on hand-made rollouts, and a real run (SimDROID + a tiny world model,
the pairwise vote through a loopback OpenAI server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common.stats import mcnemar_exact, wilson_interval
from benchmarks.optimism_bias import optimism_bias as OB

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "judges"))
from judges_testing import openai_server  # noqa: E402,F401  (fixture: loopback /v1/chat/completions)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def row(seed, family, true_success, predicted, on_truth=None, true_level=None, **kw):
    return {"seed": seed, "task": "stack", "family": family, "true_success": true_success,
            "true_level": true_level if true_level is not None else (5 if true_success else 2),
            "predicted_level": predicted, "judge_on_truth_level": on_truth, "fired": family != "nominal",
            "action_stream_max_diff": 0.0, **kw}


def test_summary_counts_only_truly_failing_rollouts():
    rows = [
        row(1, "nominal", True, 5.0, on_truth=5.0), row(2, "nominal", True, 3.0, on_truth=5.0),
        row(3, "nominal", False, 5.0),  # a true failure of the nominal stream: not in success preservation
        row(1, "premature_release", False, 2.0, on_truth=1.0),  # preserved
        row(2, "premature_release", False, 5.0, on_truth=2.0),  # optimism: the world model shows success
        row(3, "premature_release", True, 5.0),  # did not truly fail: excluded from preservation
        row(1, "grip_force_weak", False, None),  # judge failed: counted as unjudged, not as preserved
        row(2, "grip_force_weak", False, 4.0, on_truth=5.0, pairwise_bias=False),
    ]
    s = OB.summarise(rows, ["premature_release", "grip_force_weak"])
    assert s["nominal"]["success_preservation"] == 0.5
    assert s["nominal"]["true_success_rate"] == pytest.approx(2 / 3)
    pr = s["per_family"]["premature_release"]
    assert pr["truly_failing"] == 2 and pr["failure_preservation"] == 0.5 and pr["optimism_bias"] == 0.5
    assert pr["judge_on_truth_failure_rate"] == 1.0
    assert pr["true_failure_rate"] == pytest.approx(2 / 3)
    assert pr["mean_predicted_level_drop"] == pytest.approx(((5 - 2) + (3 - 5) + (5 - 5)) / 3)
    gw = s["per_family"]["grip_force_weak"]
    assert gw["unjudged"] == 1 and gw["failure_preservation"] == 1.0 and gw["judge_on_truth_failure_rate"] == 0.0
    assert gw["pairwise_failure_preservation"] == 1.0
    assert s["overall"]["truly_failing"] == 4 and s["overall"]["failure_preservation"] == pytest.approx(2 / 3)
    assert s["passes"] is False
    jw = s["judge_on_world_model"]  # predicted vs true level over the 7 judged rollouts
    assert jw["rollouts"] == 7 and jw["exact"] == pytest.approx(3 / 7) and jw["within_1"] == pytest.approx(3 / 7)
    assert s["judge_on_truth"]["rollouts"] == 5 and s["judge_on_truth"]["exact"] == pytest.approx(3 / 5)
    assert s["judge_on_truth"]["within_1"] == pytest.approx(4 / 5)
    vt = s["world_model_vs_truth_frames"]  # the 5 rollouts the judge read in both worlds
    assert vt["judge_rollouts"] == 5 and vt["judge_success_agreement"] == pytest.approx(2 / 5)
    assert vt["judge_level_within_1"] == pytest.approx(3 / 5)
    assert vt["probe_rollouts"] == 0 and vt["probe_success_agreement"] is None
    perfect = OB.summarise([row(1, "nominal", True, 5.0), row(1, "premature_release", False, 1.0)],
                           ["premature_release"])
    assert perfect["passes"] is True
    table = OB.format_table({**perfect, "seconds": 1.0})
    assert "Bias Res." in table and "same verdict on the world model's video" in table


def test_wilson_intervals_and_the_exact_mcnemar_test():
    assert wilson_interval(0, 0) is None
    lo, hi = wilson_interval(0, 18)
    assert lo == 0.0 and hi == pytest.approx(0.1759, abs=1e-4)
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(1 - hi) and lo == pytest.approx(0.2366, abs=1e-4)
    lo, hi = wilson_interval(44, 76)
    assert lo < 44 / 76 < hi and hi == pytest.approx(1 - wilson_interval(32, 76)[0])
    with pytest.raises(ValueError, match="0 <= k <= n"):
        wilson_interval(3, 2)
    with pytest.raises(ValueError, match=">= 0"):
        mcnemar_exact(-1, 2)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(4, 0) == mcnemar_exact(0, 4) == pytest.approx(2 / 16)
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64) and mcnemar_exact(3, 3) == 1.0
    s = OB.summarise([row(1, "nominal", True, 5.0), row(2, "nominal", True, 3.0),
                      row(1, "premature_release", False, 2.0), row(2, "premature_release", False, 5.0)],
                     ["premature_release"])
    assert s["nominal"]["success_preservation_ci95"] == wilson_interval(1, 2)
    assert s["overall"]["failure_preservation_ci95"] == wilson_interval(1, 2)
    assert "TCR 50.0% [" in OB.format_table({**s, "seconds": 1.0})


def test_paired_compares_two_runs_rollout_by_rollout(tmp_path, capsys):
    truth = [(1, "nominal", True), (2, "nominal", True), (1, "premature_release", False),
             (2, "premature_release", False), (3, "premature_release", False), (4, "premature_release", False),
             (5, "premature_release", True)]
    a_levels = [5.0, 5.0, 2.0, 5.0, 5.0, 3.0, 5.0]  # A: Bias Res. 2/4, TCR 2/2
    b_levels = [5.0, 4.0, 5.0, 1.0, 2.0, 3.0, 1.0]  # B: Bias Res. 3/4, TCR 1/2
    a = {"rollouts": [row(sd, f, ok, lv, probe_predicted_success=lv >= 5) for (sd, f, ok), lv in zip(truth, a_levels)]}
    b = {"rollouts": [row(sd, f, ok, lv) for (sd, f, ok), lv in zip(truth, b_levels)]}
    res = OB.paired(a, b)
    br, tcr = res["judge"]["bias_res"], res["judge"]["tcr"]
    assert br["rollouts"] == 4 and (br["a"], br["b"]) == (0.5, 0.75) and br["difference"] == 0.25
    assert (br["both"], br["a_only"], br["b_only"], br["neither"]) == (1, 1, 2, 0)
    assert br["p"] == mcnemar_exact(1, 2) == 1.0
    assert (tcr["rollouts"], tcr["a"], tcr["b"], tcr["a_only"], tcr["b_only"]) == (2, 1.0, 0.5, 1, 0)
    assert "probe" not in res  # only A has the probe's reading
    b_probe = {"rollouts": [{**r, "probe_predicted_success": False} for r in b["rollouts"]]}
    pr = OB.paired(a, b_probe)["probe"]["bias_res"]
    assert (pr["a"], pr["b"], pr["a_only"], pr["b_only"]) == (0.5, 1.0, 0, 2)

    with pytest.raises(ValueError, match="different rollouts: 1 only in A"):
        OB.paired(a, {"rollouts": b["rollouts"][:-1]})
    with pytest.raises(ValueError, match="different SimDROID truth"):
        OB.paired(a, {"rollouts": [*b["rollouts"][:-1], {**b["rollouts"][-1], "true_success": False}]})
    with pytest.raises(ValueError, match="more than once"):
        OB.paired(a, {"rollouts": [*b["rollouts"], b["rollouts"][0]]})
    with pytest.raises(ValueError, match=r"lack \['predicted_level'\]"):
        last = {k: v for k, v in b["rollouts"][-1].items() if k != "predicted_level"}
        OB.paired(a, {"rollouts": [*b["rollouts"][:-1], last]})
    with pytest.raises(ValueError, match="no per-rollout list"):
        OB.paired(a, {"nominal": {}})

    pa, pb, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "paired.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    assert OB.main(["--paired", str(pa), str(pb), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Bias Res." in printed and "+25.0" in printed
    saved = json.loads(out.read_text())
    assert saved["a"] == str(pa) and saved["judge"]["bias_res"]["b_only"] == 2
    assert OB.main(["--paired", str(pa), str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().out


def _level_judge(episode):
    """A deterministic stand-in for a VLM: the level is the final exterior frame's mean brightness mod 6."""
    from types import SimpleNamespace

    return SimpleNamespace(score=float(int(episode.frames["exterior_image_1_left"][-1].mean()) % 6))


def test_measure_runs_both_worlds_on_the_same_action_stream(tiny_checkpoint, tmp_path, openai_server):  # noqa: F811
    openai_server.default = lambda rec: "Different"
    cfg = OB.Config(episodes=1, families=["premature_release", "wrist_tilt_grasp"], tasks=["put_in_bowl"],
                    steps=70, checkpoint=str(tiny_checkpoint), judge=_level_judge,
                    pairwise=f"mirabench:openai/gpt-4o?base_url={openai_server.url}&cache=false&json_mode=none",
                    videos=str(tmp_path / "videos"))
    res = OB.measure(cfg, progress=False)
    rows = res["rollouts"]
    assert [r["family"] for r in rows] == ["nominal", "premature_release", "wrist_tilt_grasp"]
    assert all(r["seed"] == OB.HELDOUT_SEED0 and r["task"] == "put_in_bowl" for r in rows)
    nominal, *perturbed = rows
    assert not nominal["fired"] and all(r["fired"] for r in perturbed)  # the expert grasps within 70 steps
    # the world model is fed the very stream the wrapper sent to SimDROID
    assert all(r["action_stream_max_diff"] == 0.0 for r in rows)
    assert all(r["predicted_level"] in range(6) and r["judge_on_truth_level"] in range(6) for r in rows)
    assert all(isinstance(r["probe_predicted_success"], bool) and isinstance(r["probe_on_truth_success"], bool)
               for r in rows)
    assert not any(r["true_success"] for r in perturbed)
    assert all(r["pairwise_bias"] is False and r["pairwise_votes"] == ["Different"] * 7 for r in perturbed)
    assert len(openai_server.requests) == 14  # 7 late-phase votes per perturbed rollout
    assert res["overall"]["pairwise_failure_preservation"] == 1.0
    assert len(list((tmp_path / "videos").glob("*.mp4"))) == 3
    assert res["scene"] == "classic"  # the world model's scene: what MiraBench's Level 3 checks
    json.dumps(res)  # the whole result is JSON


def test_an_episode_measures_the_same_alone_or_in_a_longer_run(tiny_checkpoint):
    """Every rollout is seeded by its episode, so runs over disjoint seed ranges pool into one larger run."""
    kw = dict(families=["premature_release"], tasks=["put_in_bowl"], steps=30, checkpoint=str(tiny_checkpoint),
              judge=_level_judge, probe=None)
    both = OB.measure(OB.Config(episodes=2, **kw), progress=False)["rollouts"]
    second = OB.measure(OB.Config(episodes=1, seed0=OB.HELDOUT_SEED0 + 1, **kw), progress=False)["rollouts"]
    assert [r["seed"] for r in both] == [OB.HELDOUT_SEED0] * 2 + [OB.HELDOUT_SEED0 + 1] * 2
    assert both[2:] == second


# The legible probe is 91% within 5 cm on held-out renders; where the gripper hovers over the cube in the bowl at the
# end it can read one view's fingers instead (seed 1e6: 6.5 cm off), so its case is a layout it reads.
@pytest.mark.parametrize("scene, seed", [("classic", OB.HELDOUT_SEED0), ("legible", OB.HELDOUT_SEED0 + 3)])
def test_probe_reads_the_outcome_of_a_true_episode(scene, seed):
    """Each scene's shipped object probe sees the cube in the bowl at the end of a clean expert episode, not at its
    start (with that scene's bowl)."""
    from benchmarks.common.object_probe import default_dir, load
    from neuralsim.envs.episodes import EpisodeSpec
    from neuralsim.envs.experts import ScriptedExpert
    from neuralsim.envs.sim_droid import SimDROIDEnv

    probe = load(default_dir(scene))
    assert probe.config.scene == scene
    sim = SimDROIDEnv(image_size=64, reward_fn=None, max_episode_steps=150, scene=scene)
    try:
        spec = EpisodeSpec.from_simdroid(seed, "put_in_bowl", env=sim)
        obs, _ = sim.reset(seed=seed, options={"task": "put_in_bowl"})
        expert = ScriptedExpert(sim, seed=seed)
        expert.reset()
        info = {}
        for _ in range(150):
            obs, _, _, truncated, info = sim.step(expert.act(obs))
            if truncated:
                break
        episode = sim.episode()
    finally:
        sim.close()
    assert info["success"]
    assert OB.probe_success(probe, episode, spec.metadata)
    from types import SimpleNamespace

    start = SimpleNamespace(frames={k: v[:1] for k, v in episode.frames.items()})  # the reset frame only
    assert not OB.probe_success(probe, start, spec.metadata)


def test_cli_quick_writes_json_and_rejects_bad_names(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "ob.json"
    assert OB.main(["--families", "no_such_family", "--checkpoint", str(tiny_checkpoint), "--out", str(out),
                    "--no-progress"]) == 2
    assert "unknown perturbation families" in capsys.readouterr().out and not out.exists()
    assert OB.main(["--quick", "--steps", "12", "--checkpoint", str(tiny_checkpoint), "--out", str(out),
                    "--no-progress"]) == 0
    res = json.loads(out.read_text())
    assert res["config"]["families"] == ["premature_release"] and len(res["rollouts"]) == 2
    assert np.isfinite(res["seconds"])
