"""Small-sample statistics the benchmarks share: a rate's interval and a paired test of two rates.

Benchmarks here count successes over tens of episodes (18 optimism-bias episodes, 60 fidelity episodes),
where a normal-approximation interval misbehaves near 0 and 1; these two need only the standard library.
"""

from __future__ import annotations

import math


def wilson_interval(k: int, n: int, z: float = 1.96) -> list[float] | None:
    """Wilson score interval [low, high] of the rate ``k / n`` (95% for ``z`` = 1.96; None when ``n`` = 0)."""
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: the binomial(n, 1/2) chance of a split of the ``n = a_only + b_only``
    discordant pairs at least as lopsided as this one (1.0 when there are none)."""
    if a_only < 0 or b_only < 0:
        raise ValueError(f"counts must be >= 0, got {a_only}, {b_only}")
    n, k = a_only + b_only, min(a_only, b_only)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)
