"""DAgger data for the visuomotor policies: the expert that recovers from someone else's actions, the ``dagger``
actor of ``neuralsim data generate`` and behaviour cloning from its labels."""

from __future__ import annotations

import json

import numpy as np
import pytest

from neuralsim.envs.experts import ScriptedExpert
from neuralsim.envs.sim_droid import SimDROIDEnv

SEED = 2_000_000  # put_in_bowl, a held-out episode the expert completes


def _drop_after_lift(recover: bool):
    """The expert picks the cube up; then someone else opens the gripper for 15 steps; then the expert goes on."""
    env = SimDROIDEnv(scene="legible", reward_fn="ground_truth", max_episode_steps=None)
    obs, info = env.reset(seed=SEED, options={"task": "put_in_bowl"})
    expert = ScriptedExpert(env, recover=recover)
    expert.reset()
    steps = 0
    while expert._phase < 4 and steps < 150:  # lifted, about to carry
        obs, *_ = env.step(expert.act(obs))
        steps += 1
    assert expert._phase == 4
    for _ in range(15):
        a = expert.act(obs)
        a[:7], a[7] = 0.0, 0.0  # hold still, gripper open: the cube falls
        obs, *_ = env.step(a)
    phase_after_drop = expert._phase
    for _ in range(250):
        obs, _, _, _, info = env.step(expert.act(obs))
        if expert.done:
            break
    env.close()
    return phase_after_drop, info


def test_the_recovering_expert_picks_a_dropped_cube_up_again():
    phase, info = _drop_after_lift(recover=True)
    assert phase <= 1 and info["success"]  # started again (above the fallen cube: already descending)
    phase, info = _drop_after_lift(recover=False)  # the plain expert carries on with an empty hand
    assert phase >= 4 and not info["success"]


def test_recover_refuses_a_failure_mode():
    env = SimDROIDEnv(scene="legible")
    with pytest.raises(ValueError, match="recover undoes failure modes"):
        ScriptedExpert(env, failure="missed_grasp", recover=True)
    env.close()


@pytest.fixture(scope="module")
def dagger_set(tmp_path_factory):
    from neuralsim.data.generate import generate

    root = tmp_path_factory.mktemp("dagger")
    generate(root, episodes=2, seed=SEED, actor="dagger", policy="visuomotor-s250", beta=0.0, scene="legible",
             progress=False, frames_format="npy")
    return root


def test_dagger_episodes_record_the_executed_actions_and_the_experts_labels(dagger_set):
    import pyarrow.parquet as pq

    from neuralsim.data.reader import list_episodes
    from neuralsim.data.writer import DATA_PATH, read_info

    gen = read_info(dagger_set)["generation"]
    assert (gen["actor"], gen["policy"], gen["beta"]) == ("dagger", "visuomotor-s250", 0.0)
    recs = list_episodes(dagger_set)
    assert [r["actor"] for r in recs] == ["dagger", "dagger"] and all(r["failure"] is None for r in recs)
    table = pq.read_table(dagger_set / DATA_PATH.format(episode_index=0))
    acted = np.stack(table.column("action").to_numpy(zero_copy_only=False))
    labels = np.stack(table.column("ground_truth.expert_action").to_numpy(zero_copy_only=False))
    assert labels.shape == acted.shape == (recs[0]["steps"] + 1, 8)
    assert np.abs(acted - labels).mean() > 0.01  # the policy acted, not the expert
    assert np.all((labels[:, :7] >= -1) & (labels[:, :7] <= 1))


def test_behaviour_cloning_takes_every_dagger_episode_with_the_labels_as_targets(dagger_set):
    import pyarrow.parquet as pq

    from neuralsim.data.writer import DATA_PATH
    from policies.visuomotor.train import load_demonstrations

    demos = load_demonstrations([str(dagger_set)], ("exterior_image_1_left", "wrist_image_left"), 16,
                                scene="legible", progress=False)
    assert demos.episodes == 2  # failed or not
    labels = np.stack(pq.read_table(dagger_set / DATA_PATH.format(episode_index=0)).column(
        "ground_truth.expert_action").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(demos.chunks[0, :, :].numpy(), labels[:16], atol=1e-6)


def test_bad_dagger_requests_are_refused_by_name(tmp_path):
    from neuralsim.data.generate import generate

    with pytest.raises(ValueError, match="actor 'dagger' needs a policy"):
        generate(tmp_path / "a", episodes=1, actor="dagger", scene="legible", progress=False)
    with pytest.raises(ValueError, match="only it takes one"):
        generate(tmp_path / "b", episodes=1, policy="visuomotor-s250", scene="legible", progress=False)
    with pytest.raises(ValueError, match="trained on the 'legible' scene, not 'classic'"):
        generate(tmp_path / "c", episodes=1, actor="dagger", policy="visuomotor-s250", progress=False)
    with pytest.raises(ValueError, match="beta must be in"):
        generate(tmp_path / "d", episodes=1, actor="dagger", policy="visuomotor-s250", beta=2, scene="legible",
                 progress=False)
    assert not any((tmp_path / n).exists() for n in "abcd")  # nothing written for a refused request


def test_the_cli_takes_the_dagger_options(tmp_path):
    from neuralsim.cli import main

    out = tmp_path / "cli"
    assert main(["data", "generate", str(out), "--scene", "legible", "--episodes", "1", "--seed", str(SEED),
                 "--actor", "dagger", "--policy", "visuomotor-s250", "--beta", "1", "--no-progress",
                 "--frames-format", "npy"]) == 0
    gen = json.loads((out / "meta" / "info.json").read_text())["generation"]
    assert gen["beta"] == 1.0
