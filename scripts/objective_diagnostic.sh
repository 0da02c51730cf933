#!/usr/bin/env bash
# The RoboWorld paper's objective diagnostic on our data (issue 4): from one Diffusion Forcing checkpoint,
# train the same backbone with each objective for the same number of steps, then compare open-loop
# fidelity in-horizon and beyond it (S = 4).  Resumable: re-run to continue unfinished branches.
#   bash scripts/objective_diagnostic.sh                       # from runs/df/model, 300 steps per branch
#   SCRATCH=default BASE=neuralsim/assets/world_model STEPS=1800 MAX_MIN=60 \
#     bash scripts/objective_diagnostic.sh                     # the paper's setting: every branch a fresh
#                                                              # 'default' DiT on BASE's frozen autoencoder
# Environment knobs: BASE (init checkpoint; with SCRATCH, only its autoencoder), SCRATCH (a preset name:
# each branch starts from the same fresh DiT of that preset, seed 0), STEPS (per branch), MAX_MIN (safety stop per branch),
# DATA, HELDOUT, RUNS (branches go to $RUNS/diag/<objective>), OUT (fidelity JSON), THREADS,
# EVAL_EPISODES (held-out episodes in the comparison, generated as one batch).
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
BASE="${BASE:-runs/df/model}"; STEPS="${STEPS:-300}"; MAX_MIN="${MAX_MIN:-30}"
DATA="${DATA:-data/simdroid}"; HELDOUT="${HELDOUT:-data/simdroid_heldout}"; RUNS="${RUNS:-runs}"
OUT="${OUT:-$RUNS/diag/fidelity.json}"; THREADS="${THREADS:-2}"
OBJECTIVES="${OBJECTIVES:-diffusion_forcing step_forcing step_forcing_no_anchor step_forcing_no_selfforward}"
if [ -n "${SCRATCH:-}" ]; then START=(--autoencoder-from "$BASE" --config "$SCRATCH" --seed 0); FROM="a fresh $SCRATCH DiT on $BASE's autoencoder"
else START=(--init-from "$BASE"); FROM="$BASE"; fi
dirs=()
for obj in $OBJECTIVES; do
    echo "== $(date -u +%FT%TZ) $obj: $STEPS steps from $FROM"
    python -m neuralsim.world_model.train --stage dit --objective "$obj" "${START[@]}" --data "$DATA" \
        --out "$RUNS/diag/$obj" --steps "$STEPS" --warmup 20 --max-minutes "$MAX_MIN" --checkpoint-every 100 \
        --sample-every -1 --num-threads "$THREADS" --no-progress
    dirs+=("$RUNS/diag/$obj/model")
done
echo "== $(date -u +%FT%TZ) fidelity of the branches"
python -m benchmarks.fidelity --compare "${dirs[@]}" --data "$HELDOUT" --max-episodes "${EVAL_EPISODES:-12}" \
    --batch-size "${EVAL_EPISODES:-12}" --threads "$THREADS" --out "$OUT" --no-progress
echo "== $(date -u +%FT%TZ) done"
