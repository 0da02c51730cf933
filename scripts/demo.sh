#!/usr/bin/env bash
# The main job: sets up, then runs `neuralsim demo` (see `neuralsim demo --help`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec .venv/bin/neuralsim demo "$@"
