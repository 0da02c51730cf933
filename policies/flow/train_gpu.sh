#!/usr/bin/env bash
# The flow policies' training run, prepared for a GPU machine: the legible demonstrations (generated where missing;
# `neuralsim data generate` resumes a partial dataset), then one resumable training run on CUDA (bf16, batch 256).
#
# Usage: bash policies/flow/train_gpu.sh [OUT]          # OUT defaults to runs/flow_legible
#        MAX_MINUTES=8 bash policies/flow/train_gpu.sh   # bound one call; run it again to resume
#        DEVICE=cpu NUM_THREADS=16 bash policies/flow/train_gpu.sh   # the same run on CPUs
# Then: python -m benchmarks.policy_success --policy flow:OUT/snapshots/flow-s20000 --out /tmp/flow_success.json
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/flow_legible}
PY=${PYTHON:-python}
WORKERS=${WORKERS:-$(nproc)}
export MUJOCO_GL=${MUJOCO_GL:-egl}
if [ "${DEVICE:-cuda}" = cuda ]; then "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" \
  || { echo "torch sees no CUDA device; set DEVICE=cpu to train on CPUs" >&2; exit 1; }; fi
G=("$PY" -m neuralsim.cli data generate --scene legible --workers "$WORKERS" --no-progress)
# the five legible datasets of the README's "Visuomotor baselines" (successful, failure-free episodes are cloned)
"${G[@]}" data/legible --episodes 720
"${G[@]}" data/legible_mix --episodes 400 --seed 3000 --failure-share 0.5 --noise 0 0.9
"${G[@]}" data/legible_full --episodes 360 --seed 7000 --failure-share 0.6 --noise 0 0.9 --full-horizon \
  --failure-modes missed_grasp,weak_grip,weak_grip,early_release,overshoot,overshoot,wrist_tilt,oscillation
"${G[@]}" data/legible_demos --episodes 1500 --seed 10000 --failure-share 0 --noise 0 0.3
"${G[@]}" data/legible_recovery --episodes 1500 --seed 30000 --failure-share 0 --noise 0 0.3 --recovery-share 1
"$PY" -m policies.flow.train --out "$OUT" \
  --device "${DEVICE:-cuda}" --num-threads "${NUM_THREADS:-8}" ${MAX_MINUTES:+--max-minutes "$MAX_MINUTES"}
