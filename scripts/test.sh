#!/usr/bin/env bash
# Run the whole test suite from a fresh clone: sets up, then runs pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
