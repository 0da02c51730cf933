"""Does the world model let a doomed action stream succeed?  One episode, every failure perturbation.

Usage: python examples/optimism_check.py [--episode put_in_bowl_1000000] [--severity 0.5]

MiraBench's optimism-bias test, in miniature.  SimDROID's scripted expert plans the episode; that plan
succeeds.  Each failure-perturbation wrapper (``neuralsim.wrappers``: weak grip, premature release,
carry slip, contact oscillation, wrist tilt, approach overshoot) then corrupts the same plan on its way
into the env.  The identical wrapped plan is played in both twins:

* SimDROID (physics, in the world model's scene: ``SimDROID-v0`` classic, ``SimDROID-v1`` legible) says what
  really happens: the perturbation makes the task fail;
* ``NeuralDROID-v0`` (the world model) is judged by the default judge at the end.

A faithful world model shows the failure too; an optimistic one "succeeds" anyway.  The wrappers read
only the policy's own actions and the observed joint positions, so they act identically in both envs.
``python -m benchmarks.optimism_bias`` is the full benchmark over many episodes.
"""

from __future__ import annotations

import argparse

from neuralsim.envs.neural_droid import NeuralDROIDEnv
from neuralsim.envs.sim_droid import SimDROIDEnv
from neuralsim.wrappers import PERTURBATIONS, apply_perturbation
from policies import make_policy, run_episode
from policies.evaluate import expert_plan


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episode", default="put_in_bowl_1000000", help="a name from the shipped episode set")
    p.add_argument("--severity", type=float, default=0.5, help="in [0, 1]; MiraBench uses 0.5")
    p.add_argument("--families", nargs="*", default=None, help=f"default: all of {sorted(PERTURBATIONS)}")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--checkpoint", default=None, help="world-model directory or hub id (default: shipped)")
    args = p.parse_args(argv)

    # one horizon for both twins: the env's horizon decides when the judge runs, and both must stop at the same step
    with NeuralDROIDEnv(checkpoint=args.checkpoint, max_episode_steps=args.steps) as world, \
            SimDROIDEnv(image_size=64, reward_fn=None, max_episode_steps=args.steps,
                        scene=world.world_model.config.scene) as sim:
        spec = world.episodes.resolve(args.episode)
        seed, task = spec.metadata["seed"], spec.metadata["task"]
        plan = expert_plan(sim, seed, task, args.steps)
        families = args.families or [f for f in PERTURBATIONS if task in PERTURBATIONS[f].task_families]
        print(f"{spec.name}: {spec.instruction!r}; the expert's plan has {len(plan)} actions")
        rows = []
        for family in [None] + families:
            wrap = (lambda env: env) if family is None else (
                lambda env: apply_perturbation(env, family, severity=args.severity))
            policy = make_policy("replay", actions=plan)
            truth = run_episode(wrap(sim), policy, seed=seed, options={"task": task})
            dream = run_episode(wrap(world), policy, seed=0, options={"episode": spec.name})
            rows.append((family or "none (clean plan)", int(truth.info["rubric_level"]), dream.reward))

    print(f"\n{'perturbation':<22} {'SimDROID level':>14} {'judged in world model':>22}  verdict")
    for name, level, judged in rows:
        if level == 5:
            verdict = ("task done in physics" if judged >= 4.5
                       else "pessimistic: done in physics, not in the world model")
        else:
            verdict = "optimistic: the world model let it succeed" if judged >= 4.5 else "failure preserved"
        print(f"{name:<22} {level:>14d} {judged:>22.1f}  {verdict}")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
