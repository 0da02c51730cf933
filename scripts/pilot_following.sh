#!/usr/bin/env bash
# The following pilot (docs/EXPERIMENTS.md, "Following its actions"): two arms at equal samples on the legible data,
# each a fresh DiT on the legible recipe's trained autoencoder, Diffusion Forcing then Step Forcing, with snapshots,
# and each stage's learning curve of following (python -m benchmarks.fidelity.dynamics --curve).
#   control:  today's design;  grounded:  + geometry-grounded conditioning (neuralsim model edit --grounding projected)
#   normalised / fourier:  the condition standardised (and Fourier-featurised) (--condition-features ...)
#   grounded_fourier:  both (the design issue 83 trains)
#   fine:  grounded_fourier with tokens a quarter the size (--patch-size 2: 64 tokens a view instead of 16), the
#          design change its findings propose for the cube; compare it with grounded_fourier at equal samples
# The arms named in ARMS train at once (one process each on one device).  Every call stops by MINUTES and resumes where it stopped:
#   DEVICE=cuda BATCH=128 MINUTES=7 bash scripts/pilot_following.sh      # on a lent GPU, one call per device run
#   bash scripts/pilot_following.sh                                        # on this CPU (tiny budgets: a smoke run)
# Environment (defaults in brackets): OUT [runs/pilot_following], DEVICE [cpu], BATCH [8], LR [3e-4 x BATCH/8, at
# most 2e-3], DF_STEPS [2500], SF_STEPS [10000], SNAPSHOT [1000], MINUTES [8], DATA [data/legible: made from the
# recipe's seeds if missing], HELDOUT [data/legible_heldout], INIT [checkpoints/legible_default/decoder_final_2/model],
# ARMS [control grounded], CURVE_EPISODES [8], RESULTS [$OUT/results: the curves, copied to $COPY_TO when given, e.g. the device's $OUT].
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] && . .venv/bin/activate
export MUJOCO_GL="${MUJOCO_GL:-egl}" PYOPENGL_PLATFORM="${PYOPENGL_PLATFORM:-${MUJOCO_GL:-egl}}"
OUT="${OUT:-runs/pilot_following}"
DEVICE="${DEVICE:-cpu}"
BATCH="${BATCH:-8}"
LR="${LR:-$(python -c "print(min(2e-3, 3e-4 * $BATCH / 8))")}"
DF_STEPS="${DF_STEPS:-2500}"
SF_STEPS="${SF_STEPS:-10000}"
SNAPSHOT="${SNAPSHOT:-1000}"
MINUTES="${MINUTES:-8}"
DATA="${DATA:-data/legible}"
HELDOUT="${HELDOUT:-data/legible_heldout}"
INIT="${INIT:-checkpoints/legible_default/decoder_final_2/model}"
CURVE_EPISODES="${CURVE_EPISODES:-8}"
RESULTS="${RESULTS:-$OUT/results}"
ARMS="${ARMS:-control grounded}"
FORMAT="npy"; command -v ffmpeg >/dev/null && FORMAT="mp4"
deadline=$(python -c "import time; print(int(time.time() + 60 * $MINUTES))")

if [[ "$DATA" != synthetic:* ]] && [ ! -f "$DATA/meta/episodes.jsonl" ]; then
  neuralsim data generate --scene legible "$DATA" --episodes 720 --seed 0 --workers "$(nproc)" \
    --frames-format "$FORMAT" --no-progress
fi
if [ ! -f "$HELDOUT/meta/episodes.jsonl" ]; then
  neuralsim data generate --scene legible "$HELDOUT" --episodes 20 --seed 1000000 --frames-format "$FORMAT" --no-progress
fi

arm() {  # arm NAME [model edit options...]: fresh DiT, then Diffusion Forcing, then Step Forcing, until the deadline
  local name=$1; shift
  local dir="$OUT/$name"
  [ -f "$dir/init/config.json" ] || neuralsim model edit "$INIT" --fresh-dit "$@" --out "$dir/init" >/dev/null
  local common=(--stage dit --data "$DATA" --batch-size "$BATCH" --lr "$LR" --device "$DEVICE" --deadline "$deadline"
                --snapshot-every "$SNAPSHOT" --checkpoint-every "$SNAPSHOT" --sample-every -1 --no-progress)
  neuralsim train "${common[@]}" --objective diffusion_forcing --init-from "$dir/init" --out "$dir/df" \
    --steps "$DF_STEPS" --warmup 100
  if [ -f "$dir/df/model/config.json" ] && python - "$dir/df" "$DF_STEPS" <<'EOF'
import json, sys
from neuralsim.world_model.checkpoint import find_checkpoint, read_trainer
ck = find_checkpoint(__import__("pathlib").Path(sys.argv[1]))
sys.exit(0 if ck is not None and read_trainer(ck)["step"] >= int(sys.argv[2]) else 1)
EOF
  then
    neuralsim train "${common[@]}" --objective step_forcing --init-from "$dir/df/model" --out "$dir/sf" \
      --steps "$SF_STEPS" --warmup 50
  fi
}

edits() {  # the model edit options of an arm
  case "$1" in
    control) ;;
    grounded) echo --grounding projected ;;
    normalised) echo --condition-features normalised ;;
    fourier) echo --condition-features fourier ;;
    grounded_fourier) echo --grounding projected --condition-features fourier ;;
    fine) echo --grounding projected --condition-features fourier --patch-size 2 ;;
    *) echo "unknown arm $1 (control, grounded, normalised, fourier, grounded_fourier, fine)" >&2; return 2 ;;
  esac
}

mkdir -p "$OUT"
pids=()
for name in $ARMS; do
  opts=$(edits "$name")
  # shellcheck disable=SC2086
  arm "$name" $opts > "$OUT.$name.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
for name in $ARMS; do tail -n 3 "$OUT.$name.log"; done
[ "$status" = 0 ] || { echo "an arm failed (exit $status); see $OUT.*.log" >&2; exit "$status"; }

mkdir -p "$RESULTS"
for name in $ARMS; do
  for stage in df sf; do
    if [ -d "$OUT/$name/$stage/snapshots" ]; then
      python -m benchmarks.fidelity.dynamics --curve "$OUT/$name/$stage" --data "$HELDOUT" \
        --max-episodes "$CURVE_EPISODES" --no-progress --out "$RESULTS/curve_${name}_${stage}.json" | tail -n 8
    fi
  done
done
if [ -n "${COPY_TO:-}" ]; then
  mkdir -p "$COPY_TO"
  cp -r "$RESULTS" "$COPY_TO/"
  for name in $ARMS; do  # the latest weights of each arm (about 18 MB each), to resume or measure here
    for stage in sf df; do
      if [ -f "$OUT/$name/$stage/model/config.json" ]; then
        mkdir -p "$COPY_TO/$name" && cp -r "$OUT/$name/$stage/model" "$COPY_TO/$name/$stage" && break
      fi
    done
  done
fi
