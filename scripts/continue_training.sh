#!/usr/bin/env bash
# Train the shipped world model further with Step Forcing, on this CPU or a lent GPU, from nothing but
# the repository: run directories do not survive between machines, the shipped weights do.
#   bash scripts/continue_training.sh              # (re)make the data, then SF_MIN minutes + a cool-down
#   SF_MIN=0 bash scripts/continue_training.sh     # only the cool-down of what RUNS/sf_more already has
# Phases, each resumable by re-running:
#   1. SimDROID training data (EPISODES, seed 0) and its decoded frame cache, skipped when complete;
#   2. Step Forcing from neuralsim/assets/world_model at a constant learning rate for SF_MIN minutes
#      (RUNS/sf_more; a re-run continues its checkpoint);
#   3. a linear cool-down of COOL_STEPS steps on a copy (RUNS/sf_more_cool), so phase 2 can go on later;
#   4. with DEC_STEPS > 0, that many decoder-stage steps on the cooled model with INIT's decoder
#      (RUNS/dec_more; the last 40% decaying): sharper frames through a better decoder, the DiT untouched
#      (docs/FIDELITY.md, the ceiling).
# COMPILE=1 runs the DiT stage under torch.compile (--compile; minutes of compilation per phase first).
# The model to evaluate and ship is RUNS/sf_more_cool/model, or RUNS/dec_more/model with DEC_STEPS
# (scripts/ship_world_model.sh); its recipe counts each stage's steps over the model's whole history.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export MUJOCO_GL="${MUJOCO_GL:-egl}"
DATA="${DATA:-data/simdroid}"
RUNS="${RUNS:-runs}"
EPISODES="${EPISODES:-720}"
INIT="${INIT:-neuralsim/assets/world_model}"
SF_MIN="${SF_MIN:-60}"; COOL_STEPS="${COOL_STEPS:-500}"; LR="${LR:-3e-4}"; DEC_STEPS="${DEC_STEPS:-0}"
THREADS="${THREADS:-2}"
RUN=(--data "$DATA" --lr "$LR" --warmup 20 --checkpoint-every 50 --sample-every -1 --num-threads "$THREADS" --no-progress)
COMMON=(--stage dit --objective step_forcing --init-from "$INIT" "${RUN[@]}" ${COMPILE:+--compile})

echo "== $(date -u +%FT%TZ) data: $EPISODES SimDROID episodes -> $DATA"
python -c "
import sys
from neuralsim.data.generate import generate
from neuralsim.data.reader import warm_frame_cache
print(generate(sys.argv[1], episodes=int(sys.argv[2]), workers=2, seed=0, progress=False).format())
print(warm_frame_cache(sys.argv[1], 64, workers=2, progress=False), 'episodes in the frame cache')
" "$DATA" "$EPISODES"

if [ "$SF_MIN" != 0 ]; then
  echo "== $(date -u +%FT%TZ) Step Forcing at a constant rate for $SF_MIN minutes -> $RUNS/sf_more"
  python -m neuralsim.world_model.train "${COMMON[@]}" --out "$RUNS/sf_more" --steps 1000000 --max-minutes "$SF_MIN"
fi

step_of() { python -c "import json,sys; print(json.load(open(sys.argv[1]))['step'])" "$1/checkpoint/trainer.json"; }
[ -f "$RUNS/sf_more/checkpoint/trainer.json" ] || { echo "no checkpoint in $RUNS/sf_more to cool down" >&2; exit 1; }
# The cool-down starts from a copy of phase 2's latest checkpoint; its end is fixed when it first starts, so a
# re-run finishes the same schedule, and more phase-2 training since then starts a fresh copy.
from=$(step_of "$RUNS/sf_more")
if [ "$(cat "$RUNS/sf_more_cool/cool_from" 2>/dev/null)" != "$from" ]; then
  rm -rf "$RUNS/sf_more_cool" && cp -r "$RUNS/sf_more" "$RUNS/sf_more_cool"
  echo "$from" > "$RUNS/sf_more_cool/cool_from"
fi
target=$(( from + COOL_STEPS ))
echo "== $(date -u +%FT%TZ) cool-down from step $from to $target -> $RUNS/sf_more_cool"
python -m neuralsim.world_model.train "${COMMON[@]}" --out "$RUNS/sf_more_cool" --steps "$target" \
    --decay-steps "$COOL_STEPS"
if [ "$DEC_STEPS" = 0 ]; then
  echo "== $(date -u +%FT%TZ) done: $RUNS/sf_more_cool/model"
  exit 0
fi
echo "== $(date -u +%FT%TZ) decoder stage, $DEC_STEPS steps -> $RUNS/dec_more"
# a decoder run on an older cool-down's model is stale: start it again
if [ "$(cat "$RUNS/dec_more/dec_from" 2>/dev/null)" != "$target" ]; then
  rm -rf "$RUNS/dec_more"; mkdir -p "$RUNS/dec_more"
  # The decoder goes on from INIT's (the shipped one, the furthest trained), not from the one the
  # constant-rate run started with: the stage sees only the frozen encoder's latents, so any DiT can take it.
  python - "$RUNS/sf_more_cool/model" "$INIT" "$RUNS/dec_more/init" <<'EOF'
import sys

from neuralsim.world_model.model import WorldModel

cooled, init, out = sys.argv[1:]
model = WorldModel.from_pretrained(cooled).take_decoder_from(WorldModel.from_pretrained(init))
model.save_pretrained(out)
print(f"decoder stage starts from {cooled}'s DiT with {init}'s decoder "
      f"({model.config.recipe.get('decoder_reconstruction_steps')} decoder steps so far)")
EOF
  echo "$target" > "$RUNS/dec_more/dec_from"
fi
python -m neuralsim.world_model.train --stage decoder --init-from "$RUNS/dec_more/init" "${RUN[@]}" \
    --out "$RUNS/dec_more" --steps "$DEC_STEPS" --decay-steps $(( DEC_STEPS * 2 / 5 ))
echo "== $(date -u +%FT%TZ) done: $RUNS/dec_more/model"
