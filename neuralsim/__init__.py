"""neuralsim: evaluate and fine-tune DROID robot policies inside a learned video world model.

Importing the package registers the Gymnasium environments ``SimDROID-v0`` (MuJoCo ground truth)
and ``NeuralDROID-v0`` (the world model); ``gym.make("neuralsim:NeuralDROID-v0")`` imports it for you.
"""

from __future__ import annotations

import logging
import os

# MuJoCo picks its OpenGL backend when first imported: default to off-screen EGL (works on a
# CPU through Mesa) unless the user chose one.  Import neuralsim before mujoco for this to apply.
os.environ.setdefault("MUJOCO_GL", "egl")
# PyOpenGL (loaded by MuJoCo's EGL and OSMesa backends) says at INFO that its optional C accelerator is missing,
# a line every script that logs at INFO printed; only that logger is quietened, and only below WARNING.
logging.getLogger("OpenGL.acceleratesupport").setLevel(logging.WARNING)

__version__ = "0.1.0"

from .envs import register_envs  # noqa: E402  (after MUJOCO_GL is set, above)

register_envs()

__all__ = ["__version__", "register_envs"]
