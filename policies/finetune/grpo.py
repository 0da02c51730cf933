"""Group-relative policy optimisation of a visuomotor policy's action chunks, in one file (cleanrl's manner).

The unit of action is the chunk the policy emits; the ``replan_every`` actions of it the env executes are what is
sampled and scored.  The policy is the network's mean plus Gaussian exploration noise of a fixed standard
deviation on every dimension the network predicts: for a joint-velocity checkpoint 7 normalised joint velocities
and the gripper command, clipped to DROID's action box on the way to the env; for a Cartesian (``tool_delta``)
checkpoint the 6 scaled tool offsets and the gripper command, which the policy's fixed IK layer turns into DROID
actions.  The log-probability is the unclipped sample's.

One iteration (World-Gymnast's and RLinf's recipe for sparse episode-end rewards):

1. **Rollouts**: ``groups`` initial states, each repeated ``group_size`` times in one vector env (one batched world
   model); every row acts with its own noise until the horizon, where the env's reward function (the judge) gives
   the episode its rubric level.  Reward = level / 5.
2. **Group-relative advantage**: each rollout's reward minus its group's mean, over the group's standard deviation
   (0 where a whole group scored alike: nothing to learn from it).  Every executed action of a rollout shares it.
3. **Update**: ``epochs`` passes of PPO's clipped surrogate over the executed actions (one ratio per action step),
   plus ``kl_coef`` times the KL divergence from the starting policy (closed form for two Gaussians of one standard
   deviation: the squared distance of their means over ``2 std^2``), which keeps the policy near what it learned
   from demonstrations.

Everything random draws from generators seeded by the caller, so the same seed and checkpoints give the same run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

#: DROID's action box: normalised joint velocities in [-1, 1], gripper command in [0, 1].
ACTION_LOW = np.array([-1.0] * 7 + [0.0], np.float32)
ACTION_HIGH = np.ones(8, np.float32)


@dataclass
class GRPOConfig:
    """The algorithm's knobs (the run's are in :class:`policies.finetune.rl.RLConfig`)."""

    action_std: float = 0.15
    """Exploration noise of each arm dimension the network predicts: a normalised joint velocity (the action box
    is [-1, 1]) or a scaled tool offset (0.15 of policies.visuomotor.cartesian's scales: 7.5 mm, 2 degrees)."""
    gripper_std: float = 0.1
    """Exploration noise of the gripper command (in [0, 1])."""
    clip: float = 0.2
    """PPO's ratio clip."""
    epochs: int = 2
    """Passes over an iteration's actions."""
    minibatch: int = 256
    """Action steps per gradient step."""
    lr: float = 3e-5
    kl_coef: float = 0.05
    """Weight of the KL divergence from the starting policy."""
    max_grad_norm: float = 1.0
    replan_every: int = 8
    """Actions of each chunk executed before the policy is asked again (openpi's DROID setting)."""

    def __post_init__(self) -> None:
        if self.action_std <= 0 or self.gripper_std <= 0:
            raise ValueError(f"action_std and gripper_std must be > 0, got {self.action_std}, {self.gripper_std}")
        if self.epochs < 1 or self.minibatch < 1 or self.replan_every < 1:
            raise ValueError("epochs, minibatch and replan_every must be >= 1, got "
                             f"{self.epochs}, {self.minibatch}, {self.replan_every}")

    def std(self, arm_dims: int = 7) -> torch.Tensor:
        """Per-dimension exploration noise: ``arm_dims`` arm dimensions, then the gripper."""
        return torch.tensor([self.action_std] * arm_dims + [self.gripper_std])


class ChunkPolicy:
    """A :class:`~policies.visuomotor.model.VisuomotorNet` as a stochastic policy over executed action chunks."""

    def __init__(self, policy, cfg: GRPOConfig) -> None:
        self.policy = policy          # a policies.visuomotor.VisuomotorPolicy (preprocessing, tokens, the net)
        self.net = policy.model
        self.cfg = cfg
        self.cartesian = policy.config.action_mode == "tool_delta"
        self.std = cfg.std(policy.config.action_dim)

    def inputs(self, observations: dict[str, Any], instructions: Sequence[str]) -> dict[str, torch.Tensor]:
        """The network's inputs for a batched observation dict (kept as the rollout's record)."""
        from policies.visuomotor.model import tool_pose
        from policies.visuomotor.tokens import instruction_tokens

        c = self.policy.config
        tokens = [instruction_tokens(t, c.families, c.colours) for t in instructions]
        images, state = self.policy.preprocess(observations, len(tokens))
        return {"images": torch.from_numpy(images), "state": torch.from_numpy(state),
                "tool": torch.from_numpy(tool_pose(state[:, :7].astype(np.float64))),
                "tokens": torch.tensor(tokens, dtype=torch.long)}

    def mean(self, inputs: dict[str, torch.Tensor], net=None) -> torch.Tensor:
        """(N, replan_every, A + 1) mean actions: the network's arm outputs (joint velocities or tool offsets) and
        gripper command."""
        net = self.net if net is None else net
        arm, grip = net(inputs["images"].float().div(255), inputs["state"], inputs["tool"], inputs["tokens"])[:2]
        chunk = torch.cat([arm, torch.sigmoid(grip)[..., None]], dim=-1)
        return chunk[:, :self.cfg.replan_every]

    def sample(self, inputs: dict[str, torch.Tensor], generator: torch.Generator) -> tuple[np.ndarray, torch.Tensor]:
        """Sampled actions (N, E, 8) (unclipped) and their log-probabilities (N, E) under the current policy."""
        with torch.no_grad():
            mu = self.mean(inputs)
            a = mu + self.std * torch.randn(mu.shape, generator=generator)
            return a.numpy().astype(np.float32), self.log_prob(mu, a)

    def env_actions(self, inputs: dict[str, torch.Tensor], actions: np.ndarray) -> np.ndarray:
        """DROID actions (N, E, 8) for sampled or mean actions (N, E, A + 1): the gripper decoded as the checkpoint
        says, through the IK layer for a Cartesian checkpoint (from the joint state the chunk was inferred at), clipped
        to the action box."""
        actions = np.array(actions, np.float32)
        actions[..., -1] = self.policy.config.gripper_command(actions[..., -1])  # binary checkpoints threshold it
        if self.cartesian:
            from policies.visuomotor.cartesian import joint_velocity_chunk

            actions = joint_velocity_chunk(inputs["state"][:, :7].numpy(), actions[..., :6], actions[..., 6])
        return np.clip(actions, ACTION_LOW, ACTION_HIGH)

    def tracked_actions(self, inputs: dict[str, torch.Tensor], actions: np.ndarray, joint_position: np.ndarray,
                        j: int) -> np.ndarray:
        """DROID actions (N, 8) for step ``j`` of sampled Cartesian chunks (N, E, A + 1), re-aimed from the measured
        joints (N, 7) at that step's goal, as :class:`policies.ChunkedController` executes a tracking policy."""
        from policies.visuomotor.cartesian import tool_targets, track_actions

        p_goal, R_goal = tool_targets(inputs["state"][:, :7].numpy(), actions[:, j:j + 1, :6])
        grip = self.policy.config.gripper_command(np.asarray(actions[:, j, -1], np.float32))
        return np.clip(track_actions(np.asarray(joint_position, np.float32), p_goal[:, 0], R_goal[:, 0], grip),
                       ACTION_LOW, ACTION_HIGH)

    def log_prob(self, mu: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """(N, E) log-density of ``actions`` under N(mu, std^2), summed over the action dimensions."""
        z = (actions - mu) / self.std
        return (-0.5 * z.pow(2) - torch.log(self.std) - 0.5 * math.log(2 * math.pi)).sum(-1)

    def kl(self, mu: torch.Tensor, mu_ref: torch.Tensor) -> torch.Tensor:
        """(N, E) KL(N(mu, std^2) || N(mu_ref, std^2))."""
        return ((mu - mu_ref) / self.std).pow(2).sum(-1) / 2


#: A group whose rewards spread less than this is flat: its rollouts scored alike.
FLAT_STD = 1e-8


def _group_rewards(rewards: np.ndarray) -> np.ndarray:
    r = np.asarray(rewards, np.float64)
    if r.ndim != 2:
        raise ValueError(f"rewards must be (groups, group_size), got shape {r.shape}")
    return r


def flat_groups(rewards: np.ndarray) -> np.ndarray:
    """(groups,) True where every rollout of a group scored alike: such a group gives no advantage, so no signal."""
    return _group_rewards(rewards).std(axis=1) <= FLAT_STD


def group_advantages(rewards: np.ndarray) -> np.ndarray:
    """(groups, group_size) rewards -> advantages: minus the group mean, over the group std (0 for a flat group)."""
    r = _group_rewards(rewards)
    std = r.std(axis=1, keepdims=True)
    return np.where(flat_groups(r)[:, None], 0.0, (r - r.mean(axis=1, keepdims=True)) / np.maximum(std, FLAT_STD))


@dataclass
class Rollouts:
    """One iteration's rollouts: per chunk the inputs, the sampled actions and their log-probabilities."""

    inputs: list[dict[str, torch.Tensor]]      # per chunk, batched over the N rows
    actions: list[torch.Tensor]                # per chunk, (N, E, A + 1) unclipped samples
    logp: list[torch.Tensor]                   # per chunk, (N, E)
    steps: list[int]                           # per chunk, actions the env executed (the last may be fewer)
    rewards: np.ndarray                        # (N,) episode rewards (level / 5; NaN where the judge failed)
    levels: np.ndarray                         # (N,) judged levels
    env_steps: int


def collect(env, policy: ChunkPolicy, specs: Sequence, seeds: Sequence[int], horizon: int,
            generator: torch.Generator) -> Rollouts:
    """Run ``len(specs)`` rows of a NeuralDROID vector env to ``horizon`` with sampled chunks."""
    n = len(specs)
    obs, info = env.reset(seed=[int(s) for s in seeds], options={"episode": list(specs)})
    instructions = [str(t) for t in info["instruction"]]
    e = policy.cfg.replan_every
    record = Rollouts([], [], [], [], np.zeros(n), np.zeros(n), 0)
    t, reward, infos = 0, np.zeros(n), {}
    while t < horizon:
        inputs = policy.inputs(obs, instructions)
        actions, logp = policy.sample(inputs, generator)
        executed = policy.env_actions(inputs, actions)
        k = min(e, horizon - t)
        for j in range(k):
            step = executed[:, j] if j == 0 or not policy.cartesian else policy.tracked_actions(
                inputs, actions, obs["joint_position"], j)  # a Cartesian chunk's goals, tracked as run_episode does
            obs, reward, terminated, truncated, infos = env.step(step)
        t += k
        record.inputs.append(inputs)
        record.actions.append(torch.from_numpy(actions))
        record.logp.append(logp)
        record.steps.append(k)
    ended = np.asarray(terminated) | np.asarray(truncated)
    if not ended.all():
        raise RuntimeError(f"the env did not end its episodes at the horizon {horizon} (ended {ended.tolist()}); "
                           "make it with max_episode_steps equal to the horizon")
    record.levels = np.asarray(reward, np.float64)
    record.rewards = record.levels / 5.0
    record.env_steps = n * horizon
    return record


def update(policy: ChunkPolicy, reference, optimizer: torch.optim.Optimizer, rollouts: Rollouts,
           advantages: np.ndarray, generator: torch.Generator) -> dict[str, float]:
    """PPO-clip epochs over the executed actions of ``rollouts`` with per-rollout ``advantages`` (N,)."""
    cfg = policy.cfg
    adv = torch.as_tensor(np.nan_to_num(advantages), dtype=torch.float32)
    # flat index over (chunk, row, step) of the actions the env executed
    index = [(c, r, s) for c, k in enumerate(rollouts.steps) for r in range(len(adv)) for s in range(k)]
    stats = {"loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "ratio_mean": 0.0}
    updates = 0
    for _ in range(cfg.epochs):
        order = torch.randperm(len(index), generator=generator).tolist()
        for start in range(0, len(order), cfg.minibatch):
            picked = [index[i] for i in order[start:start + cfg.minibatch]]
            by_chunk: dict[int, list[tuple[int, int]]] = {}
            for c, r, s in picked:
                by_chunk.setdefault(c, []).append((r, s))
            losses, kls, clipped, ratios = [], [], [], []
            for c, pairs in by_chunk.items():
                rows = sorted({r for r, _ in pairs})
                sub = {k: v[rows] for k, v in rollouts.inputs[c].items()}
                mu = policy.mean(sub)
                with torch.no_grad():
                    mu_ref = policy.mean(sub, net=reference)
                pos = {r: i for i, r in enumerate(rows)}
                ri = torch.tensor([pos[r] for r, _ in pairs])
                si = torch.tensor([s for _, s in pairs])
                a = rollouts.actions[c][torch.tensor([r for r, _ in pairs]), si]
                logp = policy.log_prob(mu[ri, si], a)
                old = rollouts.logp[c][torch.tensor([r for r, _ in pairs]), si]
                ratio = torch.exp(logp - old)
                A = adv[torch.tensor([r for r, _ in pairs])]
                surrogate = torch.min(ratio * A, torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip) * A)
                kl = policy.kl(mu[ri, si], mu_ref[ri, si])
                losses.append(-(surrogate - cfg.kl_coef * kl))
                kls.append(kl.detach())
                clipped.append(((ratio - 1).abs() > cfg.clip).float())
                ratios.append(ratio.detach())
            loss = torch.cat(losses).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.net.parameters(), cfg.max_grad_norm)
            optimizer.step()
            updates += 1
            stats["loss"] += float(loss.detach())
            stats["kl"] += float(torch.cat(kls).mean())
            stats["clip_fraction"] += float(torch.cat(clipped).mean())
            stats["ratio_mean"] += float(torch.cat(ratios).mean())
    return {k: v / max(updates, 1) for k, v in stats.items()} | {"updates": updates}
