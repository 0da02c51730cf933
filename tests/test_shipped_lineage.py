"""scripts/shipped_lineage.py: the shipped world model's versions from git's history, as a run's snapshots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_latest_versions_become_snapshots_named_by_their_dit_steps(tmp_path):
    out = tmp_path / "lineage"
    proc = subprocess.run([sys.executable, "scripts/shipped_lineage.py", str(out), "--latest", "3"], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode == 2 and "no version" in proc.stderr:
        pytest.skip("a clone without the model's history")
    assert proc.returncode == 0, proc.stderr
    snaps = sorted((out / "snapshots").iterdir())
    assert 1 <= len(snaps) <= 3
    for snap in snaps:
        recipe = json.loads((snap / "config.json").read_text())["recipe"]
        steps = (recipe.get("dit_diffusion_forcing_steps") or 0) + (recipe.get("dit_step_forcing_steps") or 0)
        assert snap.name == f"step_{steps:07d}"
        assert (snap / "model.safetensors").stat().st_size > 1_000_000
    # the shipped DiT is the last snapshot's (decoder-only versions share their DiT's step)
    shipped = json.loads((ROOT / "neuralsim/assets/world_model/config.json").read_text())["recipe"]
    assert snaps[-1].name == f"step_{shipped['dit_diffusion_forcing_steps'] + shipped['dit_step_forcing_steps']:07d}"
