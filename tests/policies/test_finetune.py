"""RL fine-tuning inside the world model (policies.finetune.rl, policies.finetune.grpo): the algorithm's pieces on
known cases, a tiny run on a tiny world model, its resume, the guard's divergence flag and Ray workers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from policies.finetune import rl as RL
from policies.finetune.grpo import ChunkPolicy, GRPOConfig, flat_groups, group_advantages


def small_checkpoint(directory, action_mode: str = "joint_velocity"):
    """A small untrained visuomotor checkpoint of the classic scene (the tiny world model's)."""
    from policies.visuomotor.model import VisuomotorConfig, VisuomotorNet

    torch.manual_seed(0)
    net = VisuomotorNet(VisuomotorConfig(channels=(4, 8, 8, 8), hidden=32, embed=8, scene="classic",
                                         action_mode=action_mode))
    return net.save_pretrained(directory)


@pytest.fixture(scope="module")
def start_policy(tmp_path_factory):
    return small_checkpoint(tmp_path_factory.mktemp("start_policy"))


@pytest.fixture(scope="module", params=["joint_velocity", "tool_delta"])
def any_head_policy(request, tmp_path_factory):
    """A small checkpoint of either action head (joint velocities or Cartesian tool offsets)."""
    return small_checkpoint(tmp_path_factory.mktemp(request.param), request.param)


def tiny(tmp_path, checkpoint, policy, **kw) -> RL.RLConfig:
    cfg = dict(policy=f"visuomotor:{policy}", checkpoint=str(checkpoint), judge="roboworld:offline",
               out=str(tmp_path / "run"), iterations=2, groups=1, group_size=2, horizon=10, eval_every=1,
               heldout=2, videos=1, threads=1, progress=False,
               grpo=GRPOConfig(lr=1e-3, minibatch=8))
    return RL.RLConfig(**{**cfg, **kw})


def test_group_advantages_are_relative_to_the_group():
    adv = group_advantages(np.array([[0.0, 1.0], [0.4, 0.4], [0.2, 0.6]]))
    np.testing.assert_allclose(adv, [[-1, 1], [0, 0], [-1, 1]])  # a flat group teaches nothing
    with pytest.raises(ValueError, match="groups, group_size"):
        group_advantages(np.zeros(4))


def test_flat_groups_are_the_ones_that_give_no_advantage():
    rewards = np.array([[0.8, 0.8, 0.8], [0.8, 1.0, 0.8], [1.0, 1.0, 1.0]])
    assert flat_groups(rewards).tolist() == [True, False, True]
    assert np.all(group_advantages(rewards)[flat_groups(rewards)] == 0)
    assert RL.flat_group_share([{"flat_groups": 1.0}, {"flat_groups": 0.5}]) == 0.75
    assert RL.flat_group_share([]) is None
    with pytest.raises(ValueError, match="groups, group_size"):
        flat_groups(np.zeros(3))


def test_log_prob_and_kl_are_the_gaussians():
    cfg = GRPOConfig(action_std=0.2, gripper_std=0.1)
    chunks = ChunkPolicy.__new__(ChunkPolicy)
    for dims in (7, 6):  # joint velocities or tool offsets, then the gripper
        chunks.cfg, chunks.std = cfg, cfg.std(dims)
        g = torch.Generator().manual_seed(0)
        mu, a, ref = (torch.randn(3, 8, dims + 1, generator=g) for _ in range(3))
        expected = torch.distributions.Normal(mu, chunks.std).log_prob(a).sum(-1)
        torch.testing.assert_close(chunks.log_prob(mu, a), expected)
        kl = torch.distributions.kl_divergence(torch.distributions.Normal(mu, chunks.std),
                                               torch.distributions.Normal(ref, chunks.std)).sum(-1)
        torch.testing.assert_close(chunks.kl(mu, ref), kl)


def _one_chunk(policy_dir, seed=0):
    """A ChunkPolicy of ``policy_dir`` and one recorded chunk of two rows on a real SimDROID observation."""
    from neuralsim.envs.sim_droid import SimDROIDEnv
    from policies.finetune.grpo import Rollouts
    from policies.visuomotor import VisuomotorPolicy

    env = SimDROIDEnv()
    obs, info = env.reset(seed=3)
    env.close()
    batched = {k: np.stack([v, v]) for k, v in obs.items()}
    chunks = ChunkPolicy(VisuomotorPolicy.from_pretrained(policy_dir), GRPOConfig(lr=1e-2, epochs=4, minibatch=64))
    inputs = chunks.inputs(batched, [info["instruction"]] * 2)
    actions, logp = chunks.sample(inputs, torch.Generator().manual_seed(seed))
    return chunks, Rollouts([inputs], [torch.from_numpy(actions)], [logp], [actions.shape[1]], np.zeros(2),
                            np.zeros(2), 2 * actions.shape[1])


@pytest.mark.parametrize("advantages", [[1.0, -1.0], [0.0, 0.0]])
def test_the_update_makes_the_better_rollouts_actions_likelier(any_head_policy, advantages):
    import copy

    from policies.finetune.grpo import update

    chunks, rollouts = _one_chunk(any_head_policy)
    reference = copy.deepcopy(chunks.net)
    before = {k: v.clone() for k, v in chunks.net.state_dict().items()}
    old = rollouts.logp[0].sum(-1)
    optimizer = torch.optim.AdamW(chunks.net.parameters(), lr=chunks.cfg.lr, weight_decay=0.0)
    stats = update(chunks, reference, optimizer, rollouts, np.array(advantages), torch.Generator().manual_seed(0))
    assert stats["updates"] == chunks.cfg.epochs and math.isfinite(stats["loss"])
    with torch.no_grad():
        new = chunks.log_prob(chunks.mean(rollouts.inputs[0]), rollouts.actions[0]).sum(-1)
    moved = any(not torch.equal(before[k], v) for k, v in chunks.net.state_dict().items())
    if advantages[0] == 0:  # a flat group and no drift from the reference: nothing to learn, nothing changes
        assert not moved and torch.equal(new, old)
    else:
        assert moved and new[0] > old[0] and new[1] < old[1]


def test_samples_reach_the_env_as_droid_actions(any_head_policy):
    chunks, rollouts = _one_chunk(any_head_policy)
    sampled = rollouts.actions[0].numpy()
    assert sampled.shape[-1] == chunks.net.config.action_dim + 1
    executed = chunks.env_actions(rollouts.inputs[0], sampled)
    assert executed.shape == sampled.shape[:2] + (8,) and executed.dtype == np.float32
    assert np.all(np.abs(executed[..., :7]) <= 1) and np.all((executed[..., 7] >= 0) & (executed[..., 7] <= 1))
    if chunks.cartesian:  # the IK layer's actions differ with the sampled tool offsets
        assert not np.allclose(executed[0], executed[1])
        np.testing.assert_allclose(executed[..., 7], np.clip(sampled[..., 6], 0, 1), rtol=1e-6)
        # rollouts track the chunk's goals from the measured joints, as run_episode does: from the query pose,
        # step 0 is the plan's and a later step aims straight at its own goal
        q = rollouts.inputs[0]["state"][:, :7].numpy()
        np.testing.assert_allclose(chunks.tracked_actions(rollouts.inputs[0], sampled, q, 0), executed[:, 0],
                                   atol=1e-5)
        later = chunks.tracked_actions(rollouts.inputs[0], sampled, q, 3)
        assert later.shape == (len(q), 8) and not np.allclose(later[:, :7], executed[:, 3, :7], atol=1e-4)


def test_divergence_is_flagged_when_the_world_model_reward_rises_and_the_truth_falls():
    def p(sim, wm):
        return {"simdroid_success": sim, "simdroid_level": 5 * sim, "wm_reward": wm}

    assert not RL.diverged([p(0.3, 0.5)], 0.1)
    assert not RL.diverged([p(0.3, 0.5), p(0.4, 0.7)], 0.1)           # both rise: learning
    assert not RL.diverged([p(0.3, 0.5), p(0.25, 0.7)], 0.1)          # truth within the margin
    assert RL.diverged([p(0.3, 0.5), p(0.4, 0.55), p(0.2, 0.8)], 0.1)  # hacking the judge
    assert not RL.diverged([p(0.3, 0.5), p(0.1, 0.5)], 0.1)           # worse, but not in the model's eyes


def test_a_tiny_run_writes_the_report_and_resumes_to_the_same_policy(tiny_checkpoint, start_policy, tmp_path):
    report = RL.run(tiny(tmp_path / "a", tiny_checkpoint, start_policy))
    assert report["budget"]["iterations"] == 2 and report["budget"]["env_steps"] == 2 * 2 * 10
    for key in ("simdroid_success_before", "simdroid_success_after", "wm_reward_before", "wm_reward_after"):
        assert 0.0 <= report[key] <= 1.0
    assert report["heldout_episodes"] == 2 and [c["iteration"] for c in report["curves"]] == [0, 1, 2]
    run = tmp_path / "a" / "run"
    assert json.loads((run / "report.json").read_text())["policy"] == report["policy"]  # the report is the run's
    assert (run / "curves.png").stat().st_size > 0 and (run / "best" / "model.safetensors").is_file()
    assert sorted(p.name.split("_")[0] for p in (run / "videos").iterdir()) == ["after", "before"]
    train = report["train_curve"]
    assert all(math.isfinite(t["loss"]) and t["updates"] > 0 for t in train)
    assert all(t["flat_groups"] in (0.0, 1.0) for t in train)  # one group per iteration: flat or not
    assert report["flat_group_share"] == np.mean([t["flat_groups"] for t in train])

    # the same run in two invocations (stopped after one iteration, then resumed) ends with the same weights
    first = RL.run(tiny(tmp_path / "b", tiny_checkpoint, start_policy, max_minutes=0.0))
    assert first["budget"]["iterations"] == 1 and first["stopped"] == "max_minutes"
    assert first["simdroid_success_after"] is None
    resumed = RL.run(tiny(tmp_path / "b", tiny_checkpoint, start_policy))
    assert resumed["budget"]["iterations"] == 2
    from safetensors.torch import load_file

    a, b = load_file(run / "policy" / "model.safetensors"), load_file(tmp_path / "b" / "run" / "policy" /
                                                                      "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [t["reward"] for t in resumed["train_curve"]] == [t["reward"] for t in train]
    # other settings in the same directory are refused, not mixed in
    with pytest.raises(ValueError, match="holds a run with other settings"):
        RL.run(tiny(tmp_path / "b", tiny_checkpoint, start_policy, group_size=3))


def test_bad_inputs_are_refused_by_name(tiny_checkpoint, start_policy, tmp_path, capsys):
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        tiny(tmp_path, tiny_checkpoint, start_policy, group_size=1)
    with pytest.raises(ValueError, match="action_std and gripper_std must be > 0"):
        GRPOConfig(action_std=0)
    from policies.visuomotor.model import VisuomotorConfig, VisuomotorNet

    legible = VisuomotorNet(VisuomotorConfig(channels=(4, 8, 8, 8), hidden=32, embed=8, scene="legible"))
    path = legible.save_pretrained(tmp_path / "legible_policy")
    with pytest.raises(ValueError, match="trained on the legible scene and the world model on the classic"):
        RL.run(tiny(tmp_path, tiny_checkpoint, path))
    assert RL.main(["--policy", "visuomotor:" + str(tmp_path / "nothing"), "--out", str(tmp_path / "x"),
                    "--no-progress"]) == 2
    assert "no visuomotor checkpoint" in capsys.readouterr().out


def test_guard_episodes_on_ray_workers_equal_the_in_process_ones(start_policy):
    pytest.importorskip("ray")
    starts = RL.heldout_starts(2)
    local = RL.sim_episodes(str(start_policy), starts, "classic", horizon=12)
    cfg = RL.RLConfig(policy=str(start_policy), horizon=12, heldout=2, ray=True, ray_workers=2)
    remote = RL._ray_sim_episodes(cfg, str(start_policy), starts, "classic", keep=0)
    assert [(r["seed"], r["level"], r["success"]) for r in remote] == [(r["seed"], r["level"], r["success"])
                                                                        for r in local]
