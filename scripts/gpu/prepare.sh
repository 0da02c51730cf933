#!/usr/bin/env bash
# Fill what a call of scripts/gpu/lease.sh carries to a lent GPU machine (run here, once per checkout).
#   bash scripts/gpu/prepare.sh        # then carry [".whl", ".gl", ".devsite"] (~21 MB of the 64 MiB)
# .whl/      wheels of what the device's image lacks (python 3.12, manylinux x86_64), at the versions
#            pinned by this machine's .venv: mujoco + mujoco-core, PyOpenGL, glfw, gymnasium,
#            Farama-Notifications, diffusers, importlib_metadata. Left out on purpose: gymnasium-robotics
#            (26 MB; only its Panda meshes are used, see .devsite), mujoco-studio (not imported),
#            imageio-ffmpeg (68 MB; the device writes raw .npy frames instead of mp4).
# .gl/       the EGL/GL loader .debs MuJoCo's EGL rendering needs there.
# .devsite/  gymnasium_robotics/ holding nothing but the Panda collision meshes SimDROID renders
#            (neuralsim.envs.scene.franka_mesh_dir finds the package without importing it).
set -euo pipefail
cd "$(dirname "$0")/../.."
PIP=.venv/bin/python
ver() { "$PIP" -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p'; }
mkdir -p .git/info
for d in /.whl/ /.gl/ /.devsite/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
mkdir -p .whl
pkgs=()
for p in mujoco mujoco-core pyopengl glfw gymnasium farama-notifications diffusers importlib_metadata; do
  v=$(ver "$p"); pkgs+=("$p${v:+==$v}")
done
"$PIP" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "${pkgs[@]}"
mkdir -p .gl /tmp/amd64/partial
o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
apt-get "${o[@]}" update -q >/dev/null
(cd .gl && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
src=$("$PIP" -c "from neuralsim.envs.scene import franka_mesh_dir; print(franka_mesh_dir())")
dst=.devsite/gymnasium_robotics/envs/assets/kitchen_franka/franka_assets/meshes/collision
rm -rf .devsite && mkdir -p "$(dirname "$dst")" && cp -r "$src" "$dst"
echo '"""Only the Panda meshes SimDROID renders (a device call carries these, not the 26 MB wheel)."""' \
  > .devsite/gymnasium_robotics/__init__.py
du -sh .whl .gl .devsite
