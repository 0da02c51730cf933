#!/usr/bin/env bash
# The fine world-model line from nothing, on one lent GPU, inside a fixed time budget (one lease).
#   PIPE_MIN=8 bash scripts/gpu/fine_line.sh                  # normally run by scripts/gpu/lease.sh
#   INIT=runs/gpu_fine/model PIPE_MIN=8 bash scripts/gpu/fine_line.sh   # more Step Forcing on a fine model
#   AE_FROM=runs/gpu_fine/model DIT_DIM=320 DIT_HEADS=5 PIPE_MIN=8 bash ...  # a fresh, wider DiT on a kept autoencoder
#   AE_FROM=runs/gpu_fine/model DIT_PATCH=4 PIPE_MIN=8 bash ...  # a fresh DiT with 8x8 tokens per view (8x8 pixels each)
#   INIT=runs/gpu_fine/model DIT_PATCH=4 DEC_STEPS=0 PIPE_MIN=8 bash ...  # the same tokens, its trained DiT cut into them
# Stages (logs and runs under $RUNS, the dataset under $DATA):
#   1. SimDROID data, seed 0, $EPISODES episodes, $WORKERS processes, raw .npy frames (no ffmpeg there);
#   2. the fine autoencoder (32x32x4 latent), batch $AE_BS clips x 2 frames x 3 views;
#      (skipped with AE_FROM: a trained fine model whose autoencoder and latent statistics are kept);
#   3. Diffusion Forcing on a fresh DiT (the fine preset's 4 blocks x 256, 4 heads, unless DIT_DIM, DIT_DEPTH,
#      DIT_HEADS or DIT_PATCH, its latent patch side, say otherwise), batch $BS clips of 16 frames;
#   4. Step Forcing until $FINAL_SECS s before the budget ends, its learning rate falling linearly to 0 over the
#      last $COOL_SECS s (the trainer's --deadline and --cool-down-secs: one run, no guess at its speed);
#   5. beside 3-4: the decoder pruned to one ResNet per level and trained on the frozen encoder's latents;
#   6. the cooled DiT + the pruned decoder, written in float16 to $RUNS/final (window: twice the clip).
# NOSKILL=1 adds no-skill episodes to the DiT stages' data (neuralsim data generate --actor idle|random, EPISODES/12
# idle and EPISODES/6 random, seeds 5,000,000+ / 5,100,000+; --data DATA,DATA_idle,DATA_random): the world model
# then sees actions no expert takes (docs/fidelity_history.md, "No-skill episodes in the world model").
# Every stage checkpoints (the trainer's own resumable checkpoints), so a re-run continues.
# WRIST_RAYS=1 gives the DiT per-token wrist camera rays (--wrist-rays, DiTConfig.wrist_rays; a model from INIT
# without them gains a zero-initialised ray embedding).
# TCP_MARKS=1 gives the DiT per-token gripper marks in the exterior views (--tcp-marks, DiTConfig.tcp_marks; a model
# from INIT without them gains a zero-initialised embedding).
# ADD_BLOCKS=n appends n blocks to the DiT before Step Forcing (--add-dit-blocks; they start as the identity), e.g.
# the shipped coarse model with more capacity: INIT=neuralsim/assets/world_model ADD_BLOCKS=4 NOSKILL=1 DEC_STEPS=0
# (DEC_STEPS=0 keeps its decoder and reference head; the stage below would prune the decoder).
# BLOCK_INIT (default copy) says what those blocks hold behind their closed gates (--dit-block-init): copies of
# the DiT's last ones, or fresh ones, which on v21 barely opened in 5,800 CPU steps (docs/fidelity_history.md, sessions 58-59).
# DATA_ONLY=1 stops after the data (expert and no-skill); SKIP_DATA=1 trusts that it is there and generates none
# (scripts/gpu/lease.sh runs both when two arms share one call). END_AT (epoch seconds) fixes the budget's end
# instead of PIPE_MIN minutes from this script's start.
# COMPILE=1 runs the DiT stages under torch.compile (--compile; untried on a GPU so far: compare the logged
# s_per_step with an earlier call's before keeping it).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PY:-python3}"; DEVICE="${DEVICE:-cuda}"
RUNS="${RUNS:-runs/gpu}"; DATA="${DATA:-data/simdroid_gpu}"
EPISODES="${EPISODES:-1200}"; WORKERS="${WORKERS:-16}"
PIPE_MIN="${PIPE_MIN:-21}"; COOL_SECS="${COOL_SECS:-100}"
# Seconds the final write (below) needs: every training stage ends by END - FINAL_SECS. The Step Forcing and
# decoder stages take that as their --deadline (start-up included); the autoencoder and Diffusion Forcing
# stages of a run from nothing have fixed minutes.
FINAL_SECS="${FINAL_SECS:-20}"
AE_STEPS="${AE_STEPS:-3000}"; AE_MIN="${AE_MIN:-3}"; AE_BS="${AE_BS:-32}"
DF_STEPS="${DF_STEPS:-2000}"; DF_MIN="${DF_MIN:-3}"
BS="${BS:-64}"; LR="${LR:-5e-4}"; DEC_STEPS="${DEC_STEPS:-3000}"
mkdir -p "$RUNS"
T0=$(date +%s); END="${END_AT:-$(( T0 + PIPE_MIN * 60 ))}"
log() { echo "== $(date -u +%T) +$(( $(date +%s) - T0 ))s $*"; }
COMMON=(--device "$DEVICE" --checkpoint-every 250 --sample-every -1 --no-progress)
DIT_EXTRA=(); [ -z "${COMPILE:-}" ] || DIT_EXTRA=(--compile)
[ -z "${WRIST_RAYS:-}" ] || DIT_EXTRA+=(--wrist-rays)
[ -z "${TCP_MARKS:-}" ] || DIT_EXTRA+=(--tcp-marks)

DIT_DATA="$DATA"; [ -z "${NOSKILL:-}" ] || DIT_DATA="$DATA,${DATA}_idle,${DATA}_random"
if [ -z "${SKIP_DATA:-}" ]; then
log "data: $EPISODES episodes -> $DATA"
$PY -m neuralsim.cli data generate "$DATA" --episodes "$EPISODES" --workers "$WORKERS" --frames-format npy \
    --no-progress | tail -4
if [ -n "${NOSKILL:-}" ]; then
  idle=$(( EPISODES / 12 > 0 ? EPISODES / 12 : 1 )); random=$(( EPISODES / 6 > 0 ? EPISODES / 6 : 1 ))
  log "no-skill data: $idle idle -> ${DATA}_idle, $random random -> ${DATA}_random"
  $PY -m neuralsim.cli data generate "${DATA}_idle" --actor idle --seed 5000000 --episodes "$idle" \
      --workers "$WORKERS" --frames-format npy --no-progress | tail -1
  $PY -m neuralsim.cli data generate "${DATA}_random" --actor random --seed 5100000 --episodes "$random" \
      --workers "$WORKERS" --frames-format npy --no-progress | tail -1
fi
fi
[ -z "${DATA_ONLY:-}" ] || { log "data only: done"; exit 0; }

if [ -n "${INIT:-}" ]; then  # continue a fine model (e.g. the last call's snapshot): Step Forcing only
  mkdir -p "$RUNS/df" && rm -rf "$RUNS/df/model" && cp -r "$INIT" "$RUNS/df/model"
  log "continuing $INIT: Step Forcing only (its own decoder is kept unless DEC_STEPS > 0)"
  [ "$DEC_STEPS" = 0 ] || log "the decoder stage runs beside it"
else
SHAPE=(); [ -z "${DIT_DIM:-}" ] || SHAPE+=(--dit-dim "$DIT_DIM")
[ -z "${DIT_DEPTH:-}" ] || SHAPE+=(--dit-depth "$DIT_DEPTH"); [ -z "${DIT_HEADS:-}" ] || SHAPE+=(--dit-heads "$DIT_HEADS")
[ -z "${DIT_PATCH:-}" ] || SHAPE+=(--dit-patch-size "$DIT_PATCH")
if [ -n "${AE_FROM:-}" ]; then
log "autoencoder kept from $AE_FROM"
else
log "autoencoder -> $RUNS/ae"
$PY -m neuralsim.world_model.train --stage autoencoder --config fine --data "$DATA" --out "$RUNS/ae" \
    --steps "$AE_STEPS" --decay-steps $(( AE_STEPS / 5 )) --max-minutes "$AE_MIN" --batch-size "$AE_BS" \
    --frames-per-clip 2 --lr 1e-3 --warmup 50 --ema-decay 0.995 "${COMMON[@]}"
fi

log "Diffusion Forcing -> $RUNS/df ${SHAPE[*]}"
$PY -m neuralsim.world_model.train --stage dit --objective diffusion_forcing --autoencoder-from "${AE_FROM:-$RUNS/ae/model}" \
    --config fine "${SHAPE[@]}" --data "$DIT_DATA" --out "$RUNS/df" --steps "$DF_STEPS" --max-minutes "$DF_MIN" \
    --batch-size "$BS" --lr "$LR" --warmup 200 "${COMMON[@]}" "${DIT_EXTRA[@]}"
fi

dec=""
if [ "$DEC_STEPS" != 0 ]; then
log "decoder stage (pruned) in the background -> $RUNS/dec"
# from df/model: the same encoder as the DiT's and its fitted latent statistics (take_decoder_from checks both)
$PY -m neuralsim.world_model.train --stage decoder --init-from "$RUNS/df/model" --decoder-layers-per-block 0 \
    --data "$DATA" --out "$RUNS/dec" --steps "$DEC_STEPS" --decay-steps $(( DEC_STEPS * 2 / 5 )) \
    --deadline $(( END - FINAL_SECS )) --cool-down-secs "$COOL_SECS" --batch-size 16 --frames-per-clip 4 --lr 3e-4 --warmup 20 \
    "${COMMON[@]}" > "$RUNS/dec.log" 2>&1 &
dec=$!
fi

SF_EXTRA=(); [ -z "${ADD_BLOCKS:-}" ] || SF_EXTRA=(--add-dit-blocks "$ADD_BLOCKS" --dit-block-init "${BLOCK_INIT:-copy}")
# with INIT, DIT_PATCH cuts the carried DiT into finer tokens before Step Forcing (WorldModel.with_dit_patch_size);
# on a fresh DiT it is already that size, and the flag is a no-op
[ -z "${DIT_PATCH:-}" ] || SF_EXTRA+=(--dit-patch-size "$DIT_PATCH")
log "Step Forcing to $(date -u -d @$(( END - FINAL_SECS )) +%T), the last $COOL_SECS s cooling down -> $RUNS/sf"
$PY -m neuralsim.world_model.train --stage dit --objective step_forcing --init-from "$RUNS/df/model" --data "$DIT_DATA" \
    --out "$RUNS/sf" --batch-size "$BS" --lr "$LR" --warmup 100 --steps 10000000 --deadline $(( END - FINAL_SECS )) \
    --cool-down-secs "$COOL_SECS" "${COMMON[@]}" "${DIT_EXTRA[@]}" "${SF_EXTRA[@]}"

log "waiting for the decoder stage"
[ -z "$dec" ] || wait "$dec" || log "decoder stage failed (see $RUNS/dec.log); shipping the autoencoder's own decoder"
$PY - "$RUNS" <<'EOF'
import dataclasses, sys
from pathlib import Path

import torch

from neuralsim.world_model.model import WorldModel

runs = Path(sys.argv[1])
m = WorldModel.from_pretrained(runs / "sf" / "model")
if (runs / "dec" / "model" / "config.json").is_file() and (runs / "dec" / "model").stat().st_mtime >= \
        (runs / "df" / "model").stat().st_mtime:  # a decoder run of this pipeline, not a stale one
    m.take_decoder_from(WorldModel.from_pretrained(runs / "dec" / "model"))
m.config = dataclasses.replace(m.config, window=2 * m.config.clip_length)
m.save_pretrained(runs / "final", dtype=torch.float16)
print("final:", {k: v for k, v in m.config.recipe.items() if k.endswith("_steps")})
EOF
log "done: $RUNS/final"
