#!/usr/bin/env bash
# One self-contained call of the device tool: set up, run scripts/gpu/fine_line.sh, bring its model back.
#   PIPE_MIN=7 bash scripts/gpu/lease.sh                            # the fine line from nothing
#   INIT=runs/gpu_fine/model PIPE_MIN=7 bash scripts/gpu/lease.sh   # more Step Forcing on a carried model
#   AE_FROM=runs/gpu_fine/model DIT_DIM=320 DIT_HEADS=5 PIPE_MIN=8 bash scripts/gpu/lease.sh   # a fresh, wider DiT
#   INIT=neuralsim/assets/world_model ADD_BLOCKS=4 NOSKILL=1 DEC_STEPS=0 PIPE_MIN=8 bash ...   # the shipped model, deeper
#   INIT=neuralsim/assets/world_model INIT_B=runs/cand/model NOSKILL=1 DEC_STEPS=0 BS=128 LR=3e-4 LR_B=5e-4 \
#     COOL_SECS=150 PIPE_MIN=8 bash scripts/gpu/lease.sh      # two arms in one call
# Why one call does everything: a lent machine is given back 30 s after a call returns, and with it every
# process and file the call left (session 31 lost two half-trained pipelines that way, waiting to follow them
# with a second call). So each call regenerates its data (1,200 episodes in ~80 s on 16 cores), trains inside
# PIPE_MIN minutes, and leaves the float16 model under $OUT; the next call carries that model back as INIT.
# Keep PIPE_MIN * 60 + ~150 s (setup, data's latents, the final write) under the call's 600 s.
# The machine has PyTorch but not MuJoCo, gymnasium or diffusers and reaches no registry: their wheels travel
# in .whl/ (python 3.12, manylinux x86_64), the EGL loader's .debs in .gl/, and the Panda meshes SimDROID
# renders in .devsite/gymnasium_robotics/ (the meshes alone, not the 26 MB wheel); name all three in `carry`
# (and INIT's directory); `bash scripts/gpu/prepare.sh` fills all three here. SMOKE=1 first runs every training stage for two steps on CUDA (~50 s).
# COMPILE=1 trains the DiT under torch.compile (scripts/gpu/fine_line.sh; with SMOKE=1 the smoke test's Step
# Forcing compiles too).
# INIT_B=DIR runs a second arm beside the first (Step Forcing from DIR, the same flags, LR_B if given; its runs in
# ${RUNS}_b): the data is generated once, then both train to the same end, and the model comes back as $OUT/model_b.
# The arms share the GPU evenly, each at about half its speed alone: at batch 128 the default DiT's step keeps the
# H200 ~80% busy (session 61: 0.061 s/step alone, 0.118 s/step for each of two arms), so a second arm buys an
# A/B in one call, not free steps. Every log comes back in $OUT/logs.tgz. TCP_MARKS_B=1 gives arm B alone the
# exterior gripper marks (--tcp-marks; TCP_MARKS=1 gives them to both): INIT=M INIT_B=M TCP_MARKS_B=1 is the marks'
# A/B at GPU scale.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/out}"; RUNS="${RUNS:-runs/gpu}"; PIPE_MIN="${PIPE_MIN:-7}"; mkdir -p "$OUT" "$RUNS"
export PYTHONPATH="/tmp/site:$PWD/.devsite:$PWD" MUJOCO_GL=egl PYOPENGL_PLATFORM=egl PYTHONUNBUFFERED=1 PIPE_MIN
vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
[ -f "$vendor" ] && export __EGL_VENDOR_LIBRARY_FILENAMES="$vendor"

if [ -z "${NO_INSTALL:-}" ]; then  # NO_INSTALL=1: a dry run here (DEVICE=cpu), with the .venv's packages
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ -n "${SMOKE:-}" ]; then
  sm=(--data synthetic:8 --steps 2 --batch-size 2 --device cuda --sample-every -1 --no-progress)
  python3 -m neuralsim.world_model.train --stage autoencoder --config tiny --out /tmp/smoke/ae "${sm[@]}" \
  && python3 -m neuralsim.world_model.train --stage dit --objective diffusion_forcing --init-from /tmp/smoke/ae/model \
       --out /tmp/smoke/df "${sm[@]}" \
  && python3 -m neuralsim.world_model.train --stage dit --objective step_forcing --init-from /tmp/smoke/df/model \
       --out /tmp/smoke/sf "${sm[@]}" ${COMPILE:+--compile} \
  && python3 -m neuralsim.world_model.train --stage decoder --init-from /tmp/smoke/df/model \
       --decoder-layers-per-block 0 --out /tmp/smoke/dec "${sm[@]}" \
  || { echo "SMOKE TEST FAILED"; exit 1; }
  echo "smoke test passed: every stage ran on cuda"
fi

# the pipeline's own budget plus a minute's grace; whatever it has by then is brought back
if [ -z "${INIT_B:-}" ]; then
  timeout $(( PIPE_MIN * 60 + 60 )) bash scripts/gpu/fine_line.sh > "$RUNS/pipeline.log" 2>&1
  echo "pipeline exit $?"
  arms=("$RUNS:model")
else  # two arms in one call: the data once, then both pipelines side by side to one end
  export END_AT=$(( $(date +%s) + PIPE_MIN * 60 ))
  DATA_ONLY=1 timeout $(( PIPE_MIN * 60 )) bash scripts/gpu/fine_line.sh > "$RUNS/data.log" 2>&1
  echo "data exit $?"; grep "^== " "$RUNS/data.log"
  SKIP_DATA=1 timeout $(( PIPE_MIN * 60 + 60 )) bash scripts/gpu/fine_line.sh > "$RUNS/pipeline.log" 2>&1 &
  a=$!
  mkdir -p "${RUNS}_b"
  SKIP_DATA=1 INIT="$INIT_B" LR="${LR_B:-${LR:-5e-4}}" RUNS="${RUNS}_b" TCP_MARKS="${TCP_MARKS_B:-${TCP_MARKS:-}}" \
    timeout $(( PIPE_MIN * 60 + 60 )) bash scripts/gpu/fine_line.sh > "${RUNS}_b/pipeline.log" 2>&1 &
  b=$!
  wait $a; echo "arm A (${INIT:-from nothing}) exit $?"; wait $b; echo "arm B ($INIT_B) exit $?"
  arms=("$RUNS:model" "${RUNS}_b:model_b")
fi
logs=()
for arm in "${arms[@]}"; do
  r=${arm%%:*}; echo "-- $r"; grep "^== " "$r/pipeline.log" | tail -12
  for s in ae df sf dec; do
    f="$r/$s/metrics.jsonl"; [ -f "$f" ] && echo "$s: $(tail -1 "$f" | cut -c1-300)" && logs+=("$f")
  done
  logs+=("$r/pipeline.log")
done
# one archive of every log (at most 8 files come back)
[ -f "$RUNS/data.log" ] && logs+=("$RUNS/data.log")
tar czf "$OUT/logs.tgz" "${logs[@]}"; tar tzf "$OUT/logs.tgz"
python3 - "$OUT" "${arms[@]}" <<'EOF'
import sys
from pathlib import Path
import torch
from neuralsim.world_model.model import WorldModel
out = Path(sys.argv[1])
for arm in sys.argv[2:]:
    runs, dest = arm.split(":")
    runs = Path(runs)
    for name in ("final", "sf/model", "df/model", "ae/model"):
        if (runs / name / "config.json").is_file():
            try:
                WorldModel.from_pretrained(runs / name).save_pretrained(out / dest, dtype=torch.float16)
                print("brought back:", runs / name, "->", dest)
            except Exception as e:  # a checkpoint being replaced right now: try the next one
                print("snapshot of", runs / name, "failed:", e)
                continue
            break
EOF
ls -la "$OUT" "$OUT"/model* 2>/dev/null
