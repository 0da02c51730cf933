"""Where benchmarks write their JSON: a --quick smoke run never replaces a committed full report."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks.common import results_path as R


def test_full_and_quick_reports_have_their_own_files(tmp_path):
    assert R.results_path("fidelity") == R.RESULTS_DIR / "fidelity.json"
    assert R.results_path("fidelity", quick=True) == R.RESULTS_DIR / "fidelity_quick.json"
    assert R.results_path("fidelity", quick=True, out=tmp_path / "x.json") == tmp_path / "x.json"
    assert R.results_path("fidelity", quick=False, out=str(tmp_path / "y.json")) == tmp_path / "y.json"


@pytest.mark.parametrize("bad", ["", "results/fidelity", "fidelity.json"])
def test_a_report_name_must_be_bare(bad):
    with pytest.raises(ValueError, match="bare report name"):
        R.results_path(bad)


def test_quick_reports_are_ignored_by_git():
    root = Path(R.__file__).resolve().parent.parent
    if subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=root, capture_output=True).returncode:
        pytest.skip("not a git checkout")
    for name in ("fidelity", "throughput", "perturbation_guarantee", "expert_success", "optimism_bias"):
        quick = R.results_path(name, quick=True).relative_to(root)
        full = R.results_path(name).relative_to(root)
        assert subprocess.run(["git", "check-ignore", "-q", str(quick)], cwd=root).returncode == 0, quick
        assert subprocess.run(["git", "check-ignore", "-q", str(full)], cwd=root).returncode == 1, full
