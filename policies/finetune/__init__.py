"""Fine-tuning a learned policy inside the world model (docs/RL.md).

- :mod:`.grpo`: the algorithm in one file (group-relative advantages, PPO-clip over executed chunks, KL to the start);
- :mod:`.rl`: the run: rollouts in one batched world model, the SimDROID guard, resume, report
  (``neuralsim rl``, ``python -m policies.finetune.rl``).
"""
