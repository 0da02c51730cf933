"""The benchmarks' small statistics against numpy's and hand-worked values."""

import numpy as np
import pytest

from benchmarks.common.stats import bootstrap_grouped_ci, bootstrap_mean_ci, mmrv, pearson, ranks, spearman


def test_pearson_matches_numpy():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=20), rng.normal(size=20)
    assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_correlations_undefined_for_constant_or_short_input():
    assert pearson([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1], [2]) is None
    with pytest.raises(ValueError, match="equal length"):
        pearson([1, 2], [1, 2, 3])


def test_ranks_average_ties():
    assert ranks([10, 20, 20, 5]) == [2.0, 3.5, 3.5, 1.0]


def test_spearman_is_rank_based_and_handles_ties():
    x = [1, 2, 3, 4, 5]
    assert spearman(x, [v**3 for v in x]) == pytest.approx(1.0)  # monotone, not linear
    # hand-worked: ranks of y = [1.5, 1.5, 3, 4, 5]
    r = spearman(x, [0, 0, 1, 2, 3])
    assert r == pytest.approx(np.corrcoef([1, 2, 3, 4, 5], [1.5, 1.5, 3, 4, 5])[0, 1])
    assert r < 1.0


def test_bootstrap_mean_ci_covers_the_mean_and_is_deterministic():
    x = [0, 1, 1, 0, 1, 1, 1, 0, 1, 1]
    lo, hi = bootstrap_mean_ci(x, seed=3)
    assert lo < 0.7 < hi and 0.3 < lo and hi <= 1.0
    assert bootstrap_mean_ci(x, seed=3) == [lo, hi]
    y = [0.1, 0.7, 0.3, 0.9, 0.4, 0.2, 0.8]
    assert bootstrap_mean_ci(y, resamples=20, seed=4) != bootstrap_mean_ci(y, resamples=20, seed=5)
    assert bootstrap_mean_ci([2.0, 2.0, 2.0]) == [2.0, 2.0]
    assert bootstrap_mean_ci([]) is None
    with pytest.raises(ValueError, match="level"):
        bootstrap_mean_ci(x, level=1.5)


def test_bootstrap_mean_ci_matches_normal_theory_on_a_large_sample():
    x = np.random.default_rng(0).normal(size=400)
    lo, hi = bootstrap_mean_ci(x, resamples=1000)
    half = 1.96 * x.std(ddof=1) / np.sqrt(len(x))
    assert lo == pytest.approx(x.mean() - half, abs=0.03) and hi == pytest.approx(x.mean() + half, abs=0.03)


def test_bootstrap_grouped_ci_of_a_correlation():
    rng = np.random.default_rng(1)
    # five policies whose judged scores follow the truth closely: a tight interval near 1
    groups = [[(t + rng.normal(0, 0.3), t + rng.normal(0, 0.3)) for _ in range(20)] for t in range(5)]
    lo, hi = bootstrap_grouped_ci(groups, pearson, resamples=300)
    assert 0.9 < lo <= hi <= 1.0
    # judged scores unrelated to the truth: the interval spans zero
    noise = [[(rng.normal(), t) for _ in range(20)] for t in range(5)]
    lo, hi = bootstrap_grouped_ci(noise, spearman, resamples=300)
    assert lo < 0 < hi
    # constant truth: every resample undefined
    assert bootstrap_grouped_ci([[(1, 0)], [(2, 0)]], pearson, resamples=10) is None
    with pytest.raises(ValueError, match="at least one pair"):
        bootstrap_grouped_ci([[(1, 2)], []], pearson)


def test_mmrv_is_simplers_definition():
    real = [0.9, 0.5, 0.1]
    assert mmrv([3, 2, 1], real) == 0.0  # same order, any scale
    assert mmrv([30, 20, 10], real) == 0.0
    # swapping the two best: each of them suffers |0.9 - 0.5|, the third none -> 0.8 / 3
    assert mmrv([2, 3, 1], real) == pytest.approx(0.8 / 3)
    # fully reversed: 0.9 and 0.1 each worst against the other (0.8), 0.5 worst 0.4
    assert mmrv([1, 2, 3], real) == pytest.approx((0.8 + 0.4 + 0.8) / 3)
    assert mmrv([], []) is None
    with pytest.raises(ValueError, match="equal length"):
        mmrv([1], [1, 2])
