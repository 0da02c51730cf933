#!/usr/bin/env bash
# Drive scripts/gpu/fine_line.sh on a lent GPU machine through short calls of the device tool.
#   bash scripts/gpu/lease.sh start 480     # set up, start the pipeline detached, follow it for 480 s
#   bash scripts/gpu/lease.sh collect 540   # follow it for up to 540 s more (ends early once it is done)
# The machine has PyTorch but not MuJoCo, gymnasium or diffusers and reaches no registry: their wheels travel
# in .whl/ (python 3.12, manylinux x86_64), the EGL loader's .debs in .gl/, and the Panda meshes SimDROID
# renders in .devsite/gymnasium_robotics/ (the meshes alone, not the 26 MB wheel); name all three in `carry`.
# Every call leaves under $OUT (what the tool brings back): the pipeline log, each stage's metrics.jsonl and
# the newest model in float16 (the final one once written, else the newest Step Forcing or DF EMA weights).
set -uo pipefail
cd "$(dirname "$0")/../.."
mode="${1:?usage: lease.sh start|collect SECONDS}"; secs="${2:-500}"
OUT="${OUT:-/tmp/out}"; RUNS="${RUNS:-runs/gpu}"; mkdir -p "$OUT" "$RUNS"
export PYTHONPATH="/tmp/site:$PWD/.devsite:$PWD" MUJOCO_GL=egl PYOPENGL_PLATFORM=egl PYTHONUNBUFFERED=1
vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
[ -f "$vendor" ] && export __EGL_VENDOR_LIBRARY_FILENAMES="$vendor"
t0=$(date +%s)

if [ "$mode" = start ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  python3 - <<'EOF' || exit 1
import time, torch, gymnasium as gym
import neuralsim  # registers the envs
t = time.time()
env = gym.make("SimDROID-v0")
obs, _ = env.reset(seed=0)
print("SimDROID renders", {k: v.shape for k, v in obs.items() if hasattr(v, "shape") and v.ndim == 3},
      f"{time.time() - t:.1f} s; torch {torch.__version__}, cuda {torch.cuda.is_available()}")
EOF
  # every stage, two steps each on synthetic clips with the tiny preset: a CUDA-only bug shows here in seconds
  sm=(--data synthetic:8 --steps 2 --batch-size 2 --device cuda --sample-every -1 --no-progress)
  python3 -m neuralsim.world_model.train --stage autoencoder --config tiny --out /tmp/smoke/ae "${sm[@]}" \
  && python3 -m neuralsim.world_model.train --stage dit --objective diffusion_forcing --init-from /tmp/smoke/ae/model \
       --out /tmp/smoke/df "${sm[@]}" \
  && python3 -m neuralsim.world_model.train --stage dit --objective step_forcing --init-from /tmp/smoke/df/model \
       --out /tmp/smoke/sf "${sm[@]}" \
  && python3 -m neuralsim.world_model.train --stage decoder --init-from /tmp/smoke/df/model \
       --decoder-layers-per-block 0 --out /tmp/smoke/dec "${sm[@]}" \
  || { echo "SMOKE TEST FAILED"; exit 1; }
  echo "smoke test passed: every stage ran on cuda"
  setsid nohup bash scripts/gpu/fine_line.sh > "$RUNS/pipeline.log" 2>&1 < /dev/null &
  echo "pipeline started (pid $!)"
fi

snapshot() {
  cp "$RUNS/pipeline.log" "$OUT/" 2>/dev/null
  for s in ae df sf dec; do cp "$RUNS/$s/metrics.jsonl" "$OUT/${s}_metrics.jsonl" 2>/dev/null; done
  cp "$RUNS/dec.log" "$OUT/" 2>/dev/null
  python3 - "$RUNS" "$OUT" <<'EOF'
import sys
from pathlib import Path
import torch
from neuralsim.world_model.model import WorldModel
runs, out = Path(sys.argv[1]), Path(sys.argv[2])
for name in ("final", "sf/model", "df/model"):
    if (runs / name / "config.json").is_file():
        try:
            WorldModel.from_pretrained(runs / name).save_pretrained(out / "model", dtype=torch.float16)
            print("snapshot of", name)
        except Exception as e:  # a checkpoint being replaced right now: try the next one
            print("snapshot of", name, "failed:", e)
            continue
        break
EOF
}

while :; do
  done_=0; grep -q "^== .* done: " "$RUNS/pipeline.log" 2>/dev/null && done_=1
  pgrep -f scripts/gpu/fine_line.sh >/dev/null || done_=1
  if [ "$done_" = 1 ] || [ $(( $(date +%s) - t0 )) -ge "$secs" ]; then break; fi
  sleep 15
done
grep "^== " "$RUNS/pipeline.log" | tail -12
for s in ae df sf dec; do
  f="$RUNS/$s/metrics.jsonl"; [ -f "$f" ] && echo "$s: $(tail -1 "$f" | cut -c1-300)"
done
tail -5 "$RUNS/pipeline.log"
snapshot
ls -la "$OUT" "$OUT/model" 2>/dev/null
