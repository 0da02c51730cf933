"""The held-out SimDROID initial states a policy is measured on.

Episode ``i`` starts from SimDROID seed ``seed0 + i`` (default :data:`HELDOUT_SEED0`: no training set uses these
seeds; datasets start at 0 and the world model's held-out split at 1,000,000) with task family
``TASK_FAMILIES[i % 3]``, so every policy meets the same initial states and every family equally.  The policy
benchmarks (``benchmarks.policy_success``, ``benchmarks.roboarena``, ``benchmarks.judges.ranking``) and the
fine-tuning guard (:mod:`policies.finetune.rl`) all start from them.

    >>> heldout_starts(4)
    [(2000000, 'put_in_bowl'), (2000001, 'push_to_pad'), (2000002, 'stack'), (2000003, 'put_in_bowl')]
"""

from __future__ import annotations

#: First seed of the held-out initial states.
HELDOUT_SEED0 = 2_000_000


def heldout_starts(episodes: int, seed0: int = HELDOUT_SEED0) -> list[tuple[int, str]]:
    """(SimDROID seed, task family) of episodes 0..episodes-1: seeds ``seed0 + i``, families in turn."""
    from neuralsim.envs.sim_droid import TASK_FAMILIES

    return [(seed0 + i, TASK_FAMILIES[i % len(TASK_FAMILIES)]) for i in range(episodes)]
