"""The shipped world model's line as a training run: every version of ``neuralsim/assets/world_model`` in git's
history, written as ``OUT/snapshots/step_N`` (N: the DiT steps its recipe records, Diffusion plus Step Forcing), so
that ``python -m benchmarks.fidelity.dynamics --curve OUT`` measures how the shipped line learned, e.g. when its DiT
began to read its condition:

    python scripts/shipped_lineage.py runs/shipped_lineage
    python -m benchmarks.fidelity.dynamics --curve runs/shipped_lineage --data data/simdroid_heldout \\
        --max-episodes 8 --response-only

Versions whose DiT did not change (decoder-only stages) share a step; the first of them is kept.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from neuralsim.world_model.checkpoint import recorded_dit_steps

ASSET = "neuralsim/assets/world_model"


def git(*args: str, binary: bool = False):
    out = subprocess.run(["git", *args], check=True, capture_output=True)
    return out.stdout if binary else out.stdout.decode()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="run directory to write (its snapshots/ is filled)")
    p.add_argument("--latest", type=int, help="only the N latest versions")
    args = p.parse_args(argv)
    commits = git("log", "--reverse", "--format=%h", "--", f"{ASSET}/model.safetensors").split()
    commits = commits[-args.latest:] if args.latest else commits
    if not commits:
        print(f"error: no version of {ASSET} in this repository's history", file=sys.stderr)
        return 2
    seen: set[int] = set()
    for commit in commits:
        files = git("ls-tree", "--name-only", commit, f"{ASSET}/").split()
        if f"{ASSET}/config.json" not in files:
            continue
        config = json.loads(git("show", f"{commit}:{ASSET}/config.json"))
        step = recorded_dit_steps(config)
        if step is None or step in seen:
            continue
        seen.add(step)
        dest = Path(args.out) / "snapshots" / f"step_{step:07d}"
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "model.safetensors"):
            (dest / name).write_bytes(git("show", f"{commit}:{ASSET}/{name}", binary=True))
        print(f"{commit} -> {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
