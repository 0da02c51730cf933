#!/usr/bin/env bash
# Set up everything neuralsim needs on a fresh Debian machine: the OpenGL libraries MuJoCo renders
# with off-screen, a virtual environment in .venv, and the package with its test extras.
# Idempotent: a second run only checks.  Source it (". scripts/setup.sh") to keep the venv active.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
need_apt=0
for lib in libEGL.so.1 libOSMesa.so.8 libGL.so.1; do
  ldconfig -p | grep -q "$lib" || need_apt=1
done
command -v chromium >/dev/null || need_apt=1  # the benchmark reports are checked in headless Chromium
command -v ffmpeg >/dev/null || true  # imageio-ffmpeg ships its own ffmpeg binary
if [ "$need_apt" = 1 ]; then
  echo "[setup] installing OpenGL libraries for off-screen MuJoCo rendering and chromium (apt-get)"
  SUDO=""; [ "$(id -u)" != 0 ] && SUDO="sudo"
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q libegl1 libgl1-mesa-dri libosmesa6 >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.neuralsim-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "[setup] installing neuralsim and its dependencies into .venv (torch CPU wheel pinned)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[dev,openai,gemini,policies,metrics,local-vlm,ray]"
  touch "$stamp"
fi
export MUJOCO_GL="${MUJOCO_GL:-egl}"
export PYOPENGL_PLATFORM="${PYOPENGL_PLATFORM:-$MUJOCO_GL}"
