"""benchmarks.policy_success: the report's shape on a baseline, the replanning option and --update's guard."""

from __future__ import annotations

import json

import pytest

from benchmarks.policy_success import policy_success as PS


def test_a_baseline_report_records_its_episodes_and_replanning(tmp_path, capsys):
    out = tmp_path / "ps.json"
    PS.main(["--scene", "legible", "--policy", "zero", "--episodes", "2", "--replan-every", "4", "--out", str(out),
             "--no-progress"])
    rep = json.loads(out.read_text())
    assert rep["replan_every"] == 4 and rep["episodes_per_policy"] == 2 and rep["scene"] == "legible"
    assert rep["track"] is True
    (zero,) = rep["policies"]
    assert zero["name"] == "zero" and zero["success_rate"] == 0.0 and len(rep["per_episode"]) == 2
    assert zero["tracked"] is False  # a baseline has no goals to track
    assert "zero" in capsys.readouterr().out
    # --update with other settings is refused and leaves the report as it was
    with pytest.raises(SystemExit, match="replan_every 4"):
        PS.main(["--scene", "legible", "--policy", "random", "--episodes", "2", "--update", "--out", str(out),
                 "--no-progress"])
    assert json.loads(out.read_text()) == rep


def test_update_keeps_a_report_to_one_way_of_executing_chunks(tmp_path):
    out = tmp_path / "ps.json"
    PS.main(["--scene", "legible", "--policy", "zero", "--episodes", "1", "--no-track", "--out", str(out),
             "--no-progress"])
    assert json.loads(out.read_text())["track"] is False
    with pytest.raises(SystemExit, match="track False"):
        PS.main(["--scene", "legible", "--policy", "random", "--episodes", "1", "--update", "--out", str(out),
                 "--no-progress"])
    PS.main(["--scene", "legible", "--policy", "random", "--episodes", "1", "--no-track", "--update", "--out",
             str(out), "--no-progress"])
    assert [p["name"] for p in json.loads(out.read_text())["policies"]] == ["zero", "random"]


def test_bad_counts_are_refused_by_name():
    with pytest.raises(ValueError, match="--replan-every must be >= 1"):
        PS.run(PS.Args(policies=["zero"], episodes=1, replan_every=0, progress=False))
    with pytest.raises(ValueError, match="--episodes must be >= 1"):
        PS.run(PS.Args(policies=["zero"], episodes=0, progress=False))


def test_the_default_set_holds_every_shipped_checkpoint_of_both_learned_kinds_and_times_them():
    from policies.flow.policy import shipped_checkpoints as shipped_flow
    from policies.visuomotor import shipped_checkpoints

    names = PS.default_policies()
    assert set(shipped_checkpoints()) | set(shipped_flow()) <= set(names)
    assert set(PS.BASELINES) <= set(names) and len(names) == len(set(names))
    assert PS.shipped_scene() == "legible"
    flow = shipped_flow()
    if not flow:
        pytest.skip("no flow checkpoint is shipped")
    policy, learned = PS.build(flow[0], env=None, seed=0)
    assert learned and type(policy).__name__ == "FlowPolicy"  # a learned entrant: timed, its checkpoint recorded


def test_grasp_geometry_reads_the_yaw_to_the_nearest_faces_in_real_mujoco():
    import gymnasium as gym
    import mujoco
    import numpy as np

    import neuralsim  # noqa: F401  (registers the envs)

    env = gym.make("SimDROID-v1")
    env.reset(seed=2_000_000, options={"task": "stack"})
    sim = env.unwrapped
    adr = sim.h.cube_qpos[sim.spec_task.target]

    def at(yaw: float) -> dict:
        sim.data.qpos[adr + 3:adr + 7] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
        mujoco.mj_forward(sim.model, sim.data)
        return PS.grasp_geometry(sim)

    base = at(0.0)
    assert 0 <= base["yaw_deg"] <= 45 and base["xy_cm"] > 1 and base["height_cm"] > 0
    assert at(np.pi / 2)["yaw_deg"] == pytest.approx(base["yaw_deg"], abs=0.2)  # a cube looks alike every 90 deg
    turned = at(np.radians(5.0))["yaw_deg"]
    assert abs(turned - base["yaw_deg"]) == pytest.approx(5.0, abs=0.2) or base["yaw_deg"] > 40
    env.close()


def test_the_grasp_measures_find_the_experts_hand_on_the_cube_and_none_for_a_policy_that_never_closes():
    rep = PS.run(PS.Args(policies=["expert", "zero"], episodes=3, progress=False))
    expert, zero = rep["policies"]
    g = expert["grasp"]
    assert g["pick_episodes"] == 2 and g["closed"] == 2 and g["aligned"] == 1.0, g
    assert g["yaw_deg"] < 5 and g["xy_cm"] < 1
    first = [r["grasp"] for r in rep["per_episode"] if r["policy"] == "expert" and r["family"] != "push_to_pad"]
    assert all(c["step"] > 0 and c["height_cm"] < 2 for c in first), first
    z = zero["grasp"]
    assert z["closed"] == 0 and z["yaw_deg"] is None and z["aligned"] == 0.0
    assert all(r["grasp"] is None for r in rep["per_episode"] if r["policy"] == "zero")
