"""Fixtures shared by the benchmark tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def heldout_split(tmp_path_factory):
    """A one-episode held-out split (seed 1,000,000, the first episode of the split ``ship_world_model.sh`` makes),
    written to a temporary directory by the real data generator."""
    from neuralsim.data.generate import generate

    root = tmp_path_factory.mktemp("heldout")
    generate(root, episodes=1, seed=1_000_000, progress=False)
    return root


@pytest.fixture(scope="session")
def one_true_episode(heldout_split):
    """That episode, loaded as the benchmarks load it."""
    from benchmarks.common.heldout import load_split

    return load_split(heldout_split, 64, 1)[0]


@pytest.fixture(scope="session")
def legible_heldout_split(tmp_path_factory):
    """A one-episode held-out split of the legible scene (SimDROID-v1, seed 1,000,000)."""
    from neuralsim.data.generate import generate

    root = tmp_path_factory.mktemp("legible_heldout")
    generate(root, episodes=1, seed=1_000_000, progress=False, scene="legible")
    return root
