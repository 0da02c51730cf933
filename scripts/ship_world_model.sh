#!/usr/bin/env bash
# Ship a trained world model as the package default and re-measure it.
#   bash scripts/ship_world_model.sh runs/default/final                # copy it in, then every benchmark
#   SKIP_EVAL=1 bash scripts/ship_world_model.sh runs/default/final    # copy only
#   DECODER_FROM=runs/dec/model bash scripts/ship_world_model.sh runs/sf/model   # that DiT + that decoder
# Writes neuralsim/assets/world_model/ in float16 (`neuralsim model edit --float16`; from_pretrained casts back to
# float32), then runs, one thread each so that two share a 2-core machine: the full fidelity benchmark (held-out +
# OOD) beside the optimism-bias benchmark, then the throughput benchmark alone (timing needs an idle machine).
# Results go to benchmarks/results/*.json, logs to $LOGS; the reports being replaced are first copied to
# $LOGS/previous/, so the old model's numbers stay at hand (git history keeps every committed report too).
# The held-out and OOD splits are the model's scene's (config.scene: data/simdroid_* for classic, data/legible_* for
# legible); a missing one is generated first with the README's command (seeds 1000000 held-out, 2000000 --ood).
# Environment: HELDOUT, OOD, OB_EPISODES (optimism-bias episodes, default 18), LOGS, SKIP_EVAL, DECODER_FROM (a
# decoder-stage run sharing the encoder bit for bit), WINDOW and DENOISING_STEPS (inference defaults written into the
# shipped config; default: the model's own).
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
SRC="${1:?usage: ship_world_model.sh MODEL_DIR}"
DST=neuralsim/assets/world_model
SCENE="$(python -c 'import json, sys; print(json.load(open(sys.argv[1] + "/config.json")).get("scene", "classic"))' "$SRC")"
PREFIX=simdroid; [ "$SCENE" = classic ] || PREFIX="$SCENE"
HELDOUT="${HELDOUT:-data/${PREFIX}_heldout}"; OOD="${OOD:-data/${PREFIX}_ood}"
OB_EPISODES="${OB_EPISODES:-18}"; LOGS="${LOGS:-runs/ship}"
export MUJOCO_GL="${MUJOCO_GL:-egl}"
mkdir -p "$LOGS"

RESULTS=benchmarks/results
if [ -z "${SKIP_EVAL:-}" ]; then
  [ -e "$HELDOUT/meta/info.json" ] || neuralsim data generate "$HELDOUT" --scene "$SCENE" --episodes 60 \
      --seed 1000000 --no-progress
  [ -e "$OOD/meta/info.json" ] || neuralsim data generate "$OOD" --scene "$SCENE" --episodes 30 --seed 2000000 \
      --ood --no-progress
fi
if [ -z "${SKIP_EVAL:-}" ]; then
  mkdir -p "$LOGS/previous"
  for name in fidelity optimism_bias throughput; do
    if [ -e "$RESULTS/$name.json" ]; then cp "$RESULTS/$name.json" "$LOGS/previous/$name.json"; fi
  done
  echo "== the reports being replaced are copied to $LOGS/previous/"
fi

echo "== $(date -u +%FT%TZ) $SRC -> $DST (float16)"
neuralsim model edit "$SRC" --out "$DST" --float16 ${DECODER_FROM:+--decoder-from "$DECODER_FROM"} \
    ${WINDOW:+--window "$WINDOW"} ${DENOISING_STEPS:+--denoising-steps "$DENOISING_STEPS"}
neuralsim model info "$DST" | sed -n 1,6p
[ -n "${SKIP_EVAL:-}" ] && exit 0

echo "== $(date -u +%FT%TZ) fidelity (full) beside optimism bias ($OB_EPISODES episodes)"
python -m benchmarks.fidelity --checkpoint "$DST" --data "$HELDOUT" --ood-data "$OOD" --threads 1 \
    --batch-size 30 --no-progress > "$LOGS/fidelity.log" 2>&1 &
fid=$!
python -m benchmarks.optimism_bias --episodes "$OB_EPISODES" --threads 1 --videos outputs/optimism \
    --no-progress > "$LOGS/optimism_bias.log" 2>&1 &
ob=$!
status=0
wait "$fid" || { echo "fidelity failed, see $LOGS/fidelity.log"; status=1; }
wait "$ob" || { echo "optimism bias failed, see $LOGS/optimism_bias.log"; status=1; }
echo "== $(date -u +%FT%TZ) throughput (idle machine)"
python -m benchmarks.throughput --shipped --env > "$LOGS/throughput.log" 2>&1 || { echo "throughput failed"; status=1; }
tail -n 25 "$LOGS"/fidelity.log "$LOGS"/optimism_bias.log "$LOGS"/throughput.log
echo "== $(date -u +%FT%TZ) done (status $status)"
exit "$status"
