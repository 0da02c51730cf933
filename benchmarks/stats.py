"""Small-sample statistics the benchmarks share: a rate's interval, a paired test of two rates, correlations.

Benchmarks here count successes over tens of episodes (18 optimism-bias episodes, 60 fidelity episodes),
where a normal-approximation interval misbehaves near 0 and 1; these need only the standard library.
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


def pearson(x, y) -> float | None:
    """Pearson's correlation of two equal-length sequences (None for fewer than 2 pairs or a constant side)."""
    x, y = [float(v) for v in x], [float(v) for v in y]
    if len(x) != len(y):
        raise ValueError(f"need sequences of equal length, got {len(x)} and {len(y)}")
    n = len(x)
    if n < 2:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx, syy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def ranks(x) -> list[float]:
    """Ranks 1..n of ``x``, ties sharing their average rank."""
    order = sorted(range(len(x)), key=lambda i: x[i])
    out = [0.0] * len(x)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x, y) -> float | None:
    """Spearman's rank correlation (Pearson's of the tie-averaged ranks; None as for :func:`pearson`)."""
    if len(x) != len(y):
        raise ValueError(f"need sequences of equal length, got {len(x)} and {len(y)}")
    return pearson(ranks(list(x)), ranks(list(y)))
