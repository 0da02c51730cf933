"""Where a benchmark writes its JSON report.

Full runs write ``benchmarks/results/<name>.json``, which the repository commits as the reference numbers.
A ``--quick`` smoke run writes ``<name>_quick.json`` beside it (ignored by git), so trying a benchmark out never
replaces a full report. ``--out`` overrides both.
"""

from __future__ import annotations

from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


def results_path(name: str, quick: bool = False, out: str | Path | None = None) -> Path:
    """``out`` when given, else ``RESULTS_DIR / f"{name}.json"``, or ``f"{name}_quick.json"`` when ``quick``."""
    if out:
        return Path(out)
    if not name or "/" in name or name.endswith(".json"):
        raise ValueError(f"name must be a bare report name such as 'fidelity', got {name!r}")
    return RESULTS_DIR / f"{name}{'_quick' if quick else ''}.json"


def out_help(name: str) -> str:
    """The ``--out`` help text that says both defaults."""
    return f"JSON report (default benchmarks/results/{name}.json; with --quick {name}_quick.json)"
