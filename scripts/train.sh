#!/usr/bin/env bash
# Train the shipped world model from nothing with its recipe: data, autoencoder, Diffusion Forcing, Step Forcing,
# decoder stages, then OUT/final (docs/TRAINING.md).  Re-run the same command to resume.
#   bash scripts/train.sh                                   # on this machine's CPU, into runs/default
#   OUT=runs/gpu bash scripts/train.sh --device cuda        # any `neuralsim train` option applies to every stage
#   GPUS=4 bash scripts/train.sh --device cuda              # torchrun: one process per GPU, batch size per GPU
# Then `bash scripts/ship_world_model.sh OUT/final` puts the model in the package and measures it.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export MUJOCO_GL="${MUJOCO_GL:-egl}" PYOPENGL_PLATFORM="${PYOPENGL_PLATFORM:-${MUJOCO_GL:-egl}}"
RECIPE="${RECIPE:-neuralsim/world_model/recipes/default.yaml}"
OUT="${OUT:-runs/default}"
if [ -n "${GPUS:-}" ]; then
  exec torchrun --standalone --nproc_per_node "$GPUS" -m neuralsim train --recipe "$RECIPE" --out "$OUT" "$@"
fi
exec neuralsim train --recipe "$RECIPE" --out "$OUT" "$@"
