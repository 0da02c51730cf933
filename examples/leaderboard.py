"""A small RoboArena-style leaderboard: rank policies by their judged score inside the world model.

Usage: python examples/leaderboard.py [--episodes 6] [--steps 150]

Each policy plays the first N shipped episodes in ONE batched world model
(``gym.make_vec("NeuralDROID-v0", num_envs=N)``: one DiT forward pass per step for all N episodes),
and the default judge scores every episode when it ends.  The same actions are then replayed in
SimDROID, in the scene the world model was trained on (``SimDROID-v0`` classic, ``SimDROID-v1`` legible),
for the true rubric level, so the table shows whether the world model's ranking is the simulator's.

The policies are baselines of graded skill.  The scripted expert reads the simulator's privileged
state, so it cannot act inside the world model directly; its actions are recorded in SimDROID
(closed loop, with 0 or 0.6 noise) and replayed, the way :mod:`policies.replay` is meant to be used.
A policy of your own is one more entry in ``players``: anything with ``reset(instruction)`` and
``infer(observation) -> (H, 8)``, including ``make_policy("openpi:HOST:PORT")``.

This is the idea in 100 lines.  The benchmark behind it is ``python -m benchmarks.roboarena`` (or
``neuralsim roboarena``): any :func:`policies.make_policy` name closed loop in both worlds, M episodes each,
bootstrap intervals, Pearson / Spearman / MMRV, the judge-vs-world-model decomposition and an HTML report
(docs/ROBOARENA.md).
"""

from __future__ import annotations

import argparse
from contextlib import closing
from typing import Callable

import gymnasium as gym
import numpy as np

import neuralsim  # noqa: F401  (registers the environments)
from neuralsim.envs.sim_droid import SimDROIDEnv
from policies import ChunkedController, Policy, make_policy, run_episode
from policies.evaluate import replay_in_sim


def recorded(sim: SimDROIDEnv, name: str, max_steps: int) -> Callable[[dict], Policy]:
    """A player that replays scripted policy ``name``'s closed-loop SimDROID actions for each episode."""
    def player(meta: dict) -> Policy:
        scripted = make_policy(name, env=sim, seed=meta["seed"])
        result = run_episode(sim, scripted, max_steps=max_steps, seed=meta["seed"], options={"task": meta["task"]})
        return make_policy("replay", actions=result.actions)
    return player


def play(env, players: list[Policy], steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Run row i of the vector env with players[i] for ``steps`` steps; (final rewards (N,), actions (N, T, 8))."""
    controllers = [ChunkedController(p) for p in players]
    obs, info = env.reset(seed=0, options={"episode": list(range(len(players)))})
    for c, instruction in zip(controllers, info["instruction"]):
        c.reset(str(instruction))
    actions, reward = [], np.zeros(len(players))
    for _ in range(steps):
        rows = [{k: v[i] for k, v in obs.items()} for i in range(len(players))]
        batch = np.stack([c.act(row) for c, row in zip(controllers, rows)])
        obs, reward, terminated, truncated, info = env.step(batch)
        actions.append(batch)
    if not np.all(truncated):
        raise RuntimeError("the episodes did not end together; use the env's own horizon as --steps")
    return reward, np.stack(actions, axis=1)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    def ranks(x):
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        for v in np.unique(x):  # ties share their mean rank
            r[x == v] = r[x == v].mean()
        return r
    ra, rb = ranks(np.asarray(a, float)), ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=6, help="first N shipped episodes, played in one batch")
    p.add_argument("--steps", type=int, default=150, help="episode length (the judge scores at the end)")
    p.add_argument("--checkpoint", default=None, help="world-model directory or hub id (default: shipped)")
    args = p.parse_args(argv)

    vector_env = gym.make_vec("NeuralDROID-v0", num_envs=args.episodes, checkpoint=args.checkpoint,
                              max_episode_steps=args.steps)
    scene = vector_env.unwrapped.world_model.config.scene  # the truth: the world model's own scene
    with closing(vector_env) as env, SimDROIDEnv(image_size=64, reward_fn=None, scene=scene) as sim:
        specs = [env.unwrapped.episodes.resolve(i) for i in range(args.episodes)]
        players: dict[str, Callable[[dict], Policy]] = {
            "expert (recorded)": recorded(sim, "expert", args.steps),
            "noisy-0.6 (recorded)": recorded(sim, "noisy-0.6", args.steps),
            "zero": lambda meta: make_policy("zero"),
            "random": lambda meta: make_policy("random", seed=meta["seed"], scale=0.5),
        }
        table = []
        for name, make in players.items():
            reward, actions = play(env, [make(s.metadata) for s in specs], args.steps)
            truth = [replay_in_sim(sim, s.metadata["seed"], s.metadata["task"], a)[0] for s, a in zip(specs, actions)]
            levels = np.array([t["rubric_level"] for t in truth], float)
            table.append((name, float(np.mean(reward)), float(levels.mean()), float(np.mean(levels == 5))))
            print(f"played {name}: judged {np.round(reward, 1).tolist()}, "
                  f"SimDROID levels {levels.astype(int).tolist()}")

    table.sort(key=lambda row: -row[1])
    print(f"\n{'rank':<5} {'policy':<22} {'judged (0-5)':>12} {'true level':>11} {'true success':>13}")
    for rank, (name, judged, level, success) in enumerate(table, 1):
        print(f"{rank:<5} {name:<22} {judged:>12.2f} {level:>11.2f} {success:>13.0%}")
    rho = spearman(np.array([r[1] for r in table]), np.array([r[2] for r in table]))
    print(f"\nrank correlation of judged score and true level over the {len(table)} policies: {rho:+.2f}")
    print("the full benchmark, closed loop in both worlds with intervals and a report: python -m benchmarks.roboarena")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
