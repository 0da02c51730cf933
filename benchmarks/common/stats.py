"""Small-sample statistics the benchmarks share: a rate's interval, a paired test of two rates, correlations,
bootstrap intervals and SIMPLER's mean maximum rank violation.

Benchmarks here count successes over tens of episodes (18 optimism-bias episodes, 60 fidelity episodes),
where a normal-approximation interval misbehaves near 0 and 1; these need only the standard library.
"""

from __future__ import annotations

import math
import random
from typing import Callable, Sequence


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


def _percentile_interval(values: list[float], level: float) -> list[float] | None:
    """The central ``level`` interval [low, high] of ``values`` by the percentile method (None if empty)."""
    if not values:
        return None
    values = sorted(values)
    lo_q, hi_q = (1 - level) / 2, 1 - (1 - level) / 2

    def at(q: float) -> float:  # linear interpolation between order statistics (numpy's default)
        pos = q * (len(values) - 1)
        i = int(math.floor(pos))
        j = min(i + 1, len(values) - 1)
        return values[i] + (values[j] - values[i]) * (pos - i)

    return [at(lo_q), at(hi_q)]


def bootstrap_mean_ci(x: Sequence[float], resamples: int = 2000, level: float = 0.95,
                      seed: int = 0) -> list[float] | None:
    """Percentile bootstrap interval of the mean of ``x`` (resampling its items with replacement; None if empty).

    Deterministic given ``seed``.  A constant ``x`` gives the degenerate interval [x, x].
    """
    x = [float(v) for v in x]
    _check_bootstrap(resamples, level)
    if not x:
        return None
    rng, n = random.Random(seed), len(x)
    means = [sum(x[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples)]
    return _percentile_interval(means, level)


def ratio_of_sums(pairs: Sequence[tuple[float, float]]) -> float | None:
    """sum(a) / sum(b) of (a, b) pairs; None when there are none or sum(b) is 0."""
    den = sum(float(b) for _, b in pairs)
    return None if not pairs or den == 0 else sum(float(a) for a, _ in pairs) / den


def bootstrap_ratio_ci(pairs: Sequence[tuple[float, float]], resamples: int = 2000, level: float = 0.95,
                       seed: int = 0) -> list[float] | None:
    """Percentile bootstrap interval of :func:`ratio_of_sums`, resampling the (a, b) pairs (e.g. one per episode)
    with replacement; resamples whose sum(b) is 0 are dropped.  None if empty.  Deterministic given ``seed``."""
    _check_bootstrap(resamples, level)
    pairs = [(float(a), float(b)) for a, b in pairs]
    if not pairs:
        return None
    rng, n, values = random.Random(seed), len(pairs), []
    for _ in range(resamples):
        v = ratio_of_sums([pairs[rng.randrange(n)] for _ in range(n)])
        if v is not None:
            values.append(v)
    return _percentile_interval(values, level)


def bootstrap_grouped_ci(groups: Sequence[Sequence[tuple[float, float]]],
                         statistic: Callable[[list[float], list[float]], float | None], resamples: int = 2000,
                         level: float = 0.95, seed: int = 0) -> list[float] | None:
    """Percentile bootstrap interval of a statistic of group means, resampling within each group.

    ``groups[g]`` holds the (a, b) pairs of group g (a policy's episodes: judged score, true level).  Each
    resample draws every group's pairs with replacement, takes the group means of a and of b, and evaluates
    ``statistic(means_a, means_b)`` (e.g. :func:`pearson`); resamples where it is undefined (None) are dropped.
    None if no resample gives a value.  Deterministic given ``seed``.
    """
    _check_bootstrap(resamples, level)
    groups = [[(float(a), float(b)) for a, b in g] for g in groups]
    if any(not g for g in groups):
        raise ValueError("every group needs at least one pair")
    rng, values = random.Random(seed), []
    for _ in range(resamples):
        ma, mb = [], []
        for g in groups:
            draw = [g[rng.randrange(len(g))] for _ in range(len(g))]
            ma.append(sum(a for a, _ in draw) / len(draw))
            mb.append(sum(b for _, b in draw) / len(draw))
        v = statistic(ma, mb)
        if v is not None:
            values.append(v)
    return _percentile_interval(values, level)


def _check_bootstrap(resamples: int, level: float) -> None:
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")


def mmrv(predicted: Sequence[float], real: Sequence[float]) -> float | None:
    """SIMPLER's mean maximum rank violation (Li et al. 2024, eq. 1) of ``predicted`` scores against ``real`` ones.

    For policies i, j the rank violation is ``|real_i - real_j|`` when the two orders disagree
    (``predicted_i < predicted_j`` differs from ``real_i < real_j``) and 0 otherwise; MMRV is the mean over i of
    the worst violation i takes part in.  0 means the predicted ranking is the real one; with real success rates
    it is in success-rate units (0.2: on average each policy is mis-ordered against one that truly differs from it
    by 20 points).  ``predicted`` only contributes its order, so it may be on any scale.  None for no policies.
    """
    p, r = [float(v) for v in predicted], [float(v) for v in real]
    if len(p) != len(r):
        raise ValueError(f"need sequences of equal length, got {len(p)} and {len(r)}")
    if not p:
        return None
    worst = [max((abs(r[i] - r[j]) for j in range(len(p)) if (p[i] < p[j]) != (r[i] < r[j])), default=0.0)
             for i in range(len(p))]
    return sum(worst) / len(p)
