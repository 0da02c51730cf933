#!/usr/bin/env bash
# The RoboWorld paper's objective diagnostic on our data: from one checkpoint, train the same DiT with each
# objective (neuralsim.world_model.objectives: Diffusion Forcing, Step Forcing and its two ablations) for the same
# number of steps, then compare their open-loop fidelity within the training horizon and beyond it.
# Resumable: re-run to continue unfinished branches.
#   bash scripts/objective_diagnostic.sh                                 # from runs/default/diffusion_forcing/model
#   SCRATCH=1 BASE=neuralsim/assets/world_model STEPS=1800 bash scripts/objective_diagnostic.sh   # the paper's
#                                     # setting: every branch a fresh DiT (seed 0) on BASE's frozen autoencoder
# Environment: BASE (the checkpoint every branch starts from; with SCRATCH, only its autoencoder), SCRATCH, STEPS (per
# branch), DATA, HELDOUT, RUNS (branches go to $RUNS/diag/<objective>), OUT (the comparison's JSON), THREADS,
# EVAL_EPISODES (held-out episodes compared).
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
BASE="${BASE:-runs/default/diffusion_forcing/model}"; STEPS="${STEPS:-300}"
DATA="${DATA:-data/simdroid}"; HELDOUT="${HELDOUT:-data/simdroid_heldout}"; RUNS="${RUNS:-runs}"
OUT="${OUT:-$RUNS/diag/fidelity.json}"; THREADS="${THREADS:-2}"
OBJECTIVES="${OBJECTIVES:-diffusion_forcing step_forcing step_forcing_no_anchor step_forcing_no_selfforward}"
START="$BASE"
if [ -n "${SCRATCH:-}" ]; then
    START="$RUNS/diag/fresh_dit"
    [ -f "$START/config.json" ] || neuralsim model edit "$BASE" --out "$START" --fresh-dit --seed 0
fi
dirs=()
for obj in $OBJECTIVES; do
    echo "== $(date -u +%FT%TZ) $obj: $STEPS steps from $START"
    neuralsim train --stage dit --objective "$obj" --init-from "$START" --data "$DATA" --out "$RUNS/diag/$obj" \
        --steps "$STEPS" --warmup 20 --checkpoint-every 100 --sample-every -1 --num-threads "$THREADS" --no-progress
    dirs+=("$RUNS/diag/$obj/model")
done
echo "== $(date -u +%FT%TZ) fidelity of the branches"
python -m benchmarks.fidelity --compare "${dirs[@]}" --data "$HELDOUT" --max-episodes "${EVAL_EPISODES:-12}" \
    --batch-size "${EVAL_EPISODES:-12}" --threads "$THREADS" --out "$OUT" --no-progress
echo "== $(date -u +%FT%TZ) done"
