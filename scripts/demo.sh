#!/usr/bin/env bash
# The main job: sets up, then evaluates a policy inside NeuralDROID-v0 (the shipped world model) on the
# default episodes, judged by the default offline judge, each beside its SimDROID ground-truth replay.
# Writes side-by-side videos and results.json to outputs/eval and prints the scores.
# Options go to `python -m policies.evaluate` (see --help), e.g.  bash scripts/demo.sh --policy random --out outputs/eval_random
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec .venv/bin/python -m policies.evaluate "$@"
