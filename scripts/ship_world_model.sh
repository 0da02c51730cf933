#!/usr/bin/env bash
# Ship a trained world model as the package default and re-measure it: every report benchmarks/results holds for
# the shipped model.
#   bash scripts/ship_world_model.sh runs/default/final                # copy it in, then every report
#   SKIP_EVAL=1 bash scripts/ship_world_model.sh runs/default/final    # copy only
#   REPORTS="fidelity dynamics" bash scripts/ship_world_model.sh runs/default/final   # copy, then those reports
#   DECODER_FROM=runs/dec/model bash scripts/ship_world_model.sh runs/sf/model   # that DiT + that decoder
# Writes neuralsim/assets/world_model/ in float16 (`neuralsim model edit --float16`; from_pretrained casts back to
# float32), then runs the reports named in REPORTS (default: all, in this order; about 6 hours on a 2-core CPU):
#   fidelity       held-out + OOD splits (one thread), beside optimism_bias (one thread; OB_EPISODES episodes)
#   throughput     alone (timing needs an idle machine); then the model it replaces (PREVIOUS), into
#                  throughput_previous.json, for the comparison side by side
#   dynamics       following from true context and open loop (20 held-out episodes)
#   mirabench      Levels 1-3 (Level 3 reads the optimism-bias report just written)
#   idm_turing     the IDM of the model's scene (trained first, ~25 min, when the scene has none)
#   judge          the judge's accuracy on the world model's replays of the judge's held-out split
#   roboarena      the graded set and the shipped learned policies (ARENA_POLICIES), 20 episodes each
#   rl             one `neuralsim rl` run from RL_POLICY (RL_ITERATIONS iterations)
# Every benchmark follows the model's scene (config.scene): its held-out and OOD splits (data/simdroid_* classic,
# data/legible_* legible, generated first with the README's commands when missing), probe, judge and IDM.
# Results go to benchmarks/results/, logs to $LOGS; the reports being replaced are first copied to
# $LOGS/previous/, so the old model's numbers stay at hand (git history keeps every committed report too).
# Environment: REPORTS, HELDOUT, OOD, OB_EPISODES (default 18), LOGS, SKIP_EVAL, DECODER_FROM (a decoder-stage run
# sharing the encoder bit for bit), WINDOW and DENOISING_STEPS (inference defaults written into the shipped
# config; default: the model's own), PREVIOUS (a world model to time beside it, e.g. the one being replaced, kept
# in $LOGS/previous_model), ARENA_POLICIES, RL_POLICY, RL_ITERATIONS.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
SRC="${1:?usage: ship_world_model.sh MODEL_DIR}"
DST=neuralsim/assets/world_model
SCENE="$(python -c 'import json, sys; print(json.load(open(sys.argv[1] + "/config.json")).get("scene", "classic"))' "$SRC")"
PREFIX=simdroid; [ "$SCENE" = classic ] || PREFIX="$SCENE"
HELDOUT="${HELDOUT:-data/${PREFIX}_heldout}"; OOD="${OOD:-data/${PREFIX}_ood}"
OB_EPISODES="${OB_EPISODES:-18}"; LOGS="${LOGS:-runs/ship}"
REPORTS="${REPORTS:-fidelity throughput dynamics mirabench idm_turing judge roboarena rl}"
ARENA_POLICIES="${ARENA_POLICIES:-expert noisy-0.3 noisy-0.6 noisy-0.9 expert+missed_grasp expert+early_release random zero flow-v4-s16000 visuomotor-cartesian-s3000}"
RL_POLICY="${RL_POLICY:-visuomotor-cartesian-s3000}"; RL_ITERATIONS="${RL_ITERATIONS:-10}"
for r in $REPORTS; do
  case "$r" in fidelity|throughput|dynamics|mirabench|idm_turing|judge|roboarena|rl) ;;
    *) echo "unknown report '$r' in REPORTS (fidelity throughput dynamics mirabench idm_turing judge roboarena rl)" >&2
       exit 2 ;;
  esac
done
wants() { [[ " $REPORTS " == *" $1 "* ]]; }
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
  for name in fidelity optimism_bias throughput dynamics mirabench idm_turing judge_accuracy roboarena rl; do
    if [ -e "$RESULTS/$name.json" ]; then cp "$RESULTS/$name.json" "$LOGS/previous/$name.json"; fi
  done
  if wants throughput && [ -z "${PREVIOUS:-}" ] && [ -e "$DST/config.json" ]; then  # time the model being replaced
    rm -rf "$LOGS/previous_model"; cp -r "$DST" "$LOGS/previous_model"; PREVIOUS="$LOGS/previous_model"
  fi
  echo "== the reports being replaced are copied to $LOGS/previous/"
fi

echo "== $(date -u +%FT%TZ) $SRC -> $DST (float16)"
neuralsim model edit "$SRC" --out "$DST" --float16 ${DECODER_FROM:+--decoder-from "$DECODER_FROM"} \
    ${WINDOW:+--window "$WINDOW"} ${DENOISING_STEPS:+--denoising-steps "$DENOISING_STEPS"}
neuralsim model info "$DST" | sed -n 1,6p
[ -n "${SKIP_EVAL:-}" ] && exit 0

status=0
step() {  # step NAME COMMAND...: run it, log to $LOGS/NAME.log, remember a failure and go on
  local name="$1"; shift
  echo "== $(date -u +%FT%TZ) $name"
  "$@" > "$LOGS/$name.log" 2>&1 || { echo "$name failed, see $LOGS/$name.log"; status=1; }
  tail -n 12 "$LOGS/$name.log"
}
if wants fidelity; then
  echo "== $(date -u +%FT%TZ) fidelity (full) beside optimism bias ($OB_EPISODES episodes)"
  python -m benchmarks.fidelity --checkpoint "$DST" --data "$HELDOUT" --ood-data "$OOD" --threads 1 \
      --batch-size 30 --no-progress > "$LOGS/fidelity.log" 2>&1 &
  fid=$!
  python -m benchmarks.optimism_bias --episodes "$OB_EPISODES" --threads 1 --videos outputs/optimism \
      --no-progress > "$LOGS/optimism_bias.log" 2>&1 &
  ob=$!
  wait "$fid" || { echo "fidelity failed, see $LOGS/fidelity.log"; status=1; }
  wait "$ob" || { echo "optimism bias failed, see $LOGS/optimism_bias.log"; status=1; }
  tail -n 25 "$LOGS"/fidelity.log "$LOGS"/optimism_bias.log
fi
if wants throughput; then  # alone: timing needs an idle machine
  step throughput python -m benchmarks.throughput --shipped --env
  if [ -n "${PREVIOUS:-}" ]; then  # the model it replaces, on the same machine right after: side by side
    step throughput_previous python -m benchmarks.throughput --model "$PREVIOUS" --env \
        --out "$RESULTS/throughput_previous.json"
  fi
fi
wants dynamics && step dynamics python -m benchmarks.fidelity.dynamics --checkpoint "$DST" --data "$HELDOUT" --no-progress
wants mirabench && step mirabench python -m benchmarks.mirabench --data "$HELDOUT" --cache runs/mirabench/videos
if wants idm_turing; then
  IDM_DIR="$(python -c 'import sys; from benchmarks.common.idm import default_dir; print(default_dir(sys.argv[1]))' "$SCENE")"
  [ -e "$IDM_DIR/model.safetensors" ] || step idm python -m benchmarks.common.idm --scene "$SCENE"
  step idm_turing python -m benchmarks.mirabench.idm_turing --data "$HELDOUT" --cache runs/mirabench/videos
fi
if wants judge; then
  JUDGE_SPLIT="data/${PREFIX}_judge_heldout"; WM_SPLIT="data/wm_rollouts_${PREFIX}_judge_heldout"
  [ -e "$JUDGE_SPLIT/meta/info.json" ] || neuralsim data generate "$JUDGE_SPLIT" --scene "$SCENE" --episodes 60 \
      --seed 2000000 --no-progress
  rm -rf "$WM_SPLIT"  # the replays of the model just shipped
  step wm_rollouts python -m judges.offline.wm_rollouts --checkpoint "$DST" --data "$JUDGE_SPLIT" --out "$WM_SPLIT"
  step judge python -m benchmarks.judges.accuracy --data "$WM_SPLIT"
fi
if wants roboarena; then
  step roboarena python -m benchmarks.roboarena $(printf -- '--policy %s ' $ARENA_POLICIES) --episodes 20 --chunk 10
fi
if wants rl; then
  rm -rf runs/ship_rl
  step rl neuralsim rl --policy "$RL_POLICY" --out runs/ship_rl --iterations "$RL_ITERATIONS" \
      --results "$RESULTS/rl.json"
  [ -e runs/ship_rl/curves.png ] && cp runs/ship_rl/curves.png "$RESULTS/rl_curves.png"
fi
echo "== $(date -u +%FT%TZ) done (status $status)"
exit "$status"
