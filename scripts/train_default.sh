#!/usr/bin/env bash
# Reproduce the shipped default world model on this CPU (resumable: re-run to continue).
#   bash scripts/train_default.sh            # data -> autoencoder -> Diffusion Forcing -> Step Forcing
#   CONFIG=fine RUNS=runs/fine bash scripts/train_default.sh   # the same on the finer 32x32 latent
# Environment knobs: EPISODES (SimDROID episodes), AE_MIN / DF_MIN / SF_MIN (minutes per stage this run),
# AE_STEPS / DF_STEPS / SF_STEPS (total steps per stage), CONFIG (a preset of neuralsim.world_model.config:
# default, fine), AE_EMA (the autoencoder's EMA decay), THREADS, DATA, RUNS.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export MUJOCO_GL="${MUJOCO_GL:-egl}"
DATA="${DATA:-data/simdroid}"
RUNS="${RUNS:-runs}"
EPISODES="${EPISODES:-900}"
AE_STEPS="${AE_STEPS:-3000}"; DF_STEPS="${DF_STEPS:-8000}"; SF_STEPS="${SF_STEPS:-2000}"
AE_MIN="${AE_MIN:-30}"; DF_MIN="${DF_MIN:-60}"; SF_MIN="${SF_MIN:-20}"
AE_FRAMES="${AE_FRAMES:-1}"; AE_LR="${AE_LR:-1e-3}"  # frames per clip per AE step (x 3 views x batch 8)
CONFIG="${CONFIG:-default}"; AE_EMA="${AE_EMA:-0.999}"; THREADS="${THREADS:-2}"

echo "== $(date -u +%FT%TZ) data: $EPISODES SimDROID episodes -> $DATA"
python -c "
import sys
from neuralsim.data.generate import generate
print(generate(sys.argv[1], episodes=int(sys.argv[2]), workers=2, seed=0, progress=False).format())
" "$DATA" "$EPISODES"
echo "== $(date -u +%FT%TZ) decoding the videos once into the dataset's frame cache"
python -c "
import sys
from neuralsim.data.reader import warm_frame_cache
print(warm_frame_cache(sys.argv[1], 64, workers=2, progress=False), 'episodes cached')
" "$DATA"
echo "== $(date -u +%FT%TZ) autoencoder"
python -m neuralsim.world_model.train --stage autoencoder --config "$CONFIG" --data "$DATA" --out "$RUNS/ae" \
    --steps "$AE_STEPS" --max-minutes "$AE_MIN" --frames-per-clip "$AE_FRAMES" --lr "$AE_LR" --warmup 50 \
    --ema-decay "$AE_EMA" --num-threads "$THREADS" --checkpoint-every 50 --no-progress
echo "== $(date -u +%FT%TZ) Diffusion Forcing"
python -m neuralsim.world_model.train --stage dit --objective diffusion_forcing --init-from "$RUNS/ae/model" \
    --data "$DATA" --out "$RUNS/df" --steps "$DF_STEPS" --max-minutes "$DF_MIN" --num-threads "$THREADS" \
    --checkpoint-every 50 --sample-every -1 --no-progress
echo "== $(date -u +%FT%TZ) Step Forcing"
python -m neuralsim.world_model.train --stage dit --objective step_forcing --init-from "$RUNS/df/model" \
    --data "$DATA" --out "$RUNS/sf" --steps "$SF_STEPS" --max-minutes "$SF_MIN" --num-threads "$THREADS" \
    --checkpoint-every 50 --sample-every -1 --no-progress
echo "== $(date -u +%FT%TZ) done"
