"""The benchmarks' small statistics against numpy's and hand-worked values."""

import numpy as np
import pytest

from benchmarks.stats import pearson, ranks, spearman


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
