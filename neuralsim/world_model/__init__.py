"""The Step Forcing world model: per-view autoencoder + causal video DiT + KV-cached sampler.

Importing this package is light (no torch); the names below load their modules on first use::

    from neuralsim.world_model import WorldModel
    wm = WorldModel.from_pretrained("runs/sf/model")

Modules: ``config`` (dataclasses, presets; the defaults are the shipped model), ``autoencoder``, ``dit``,
``kv_cache``, ``sampler`` (the rectified-flow update), ``model`` (:class:`WorldModel`, checkpoints), ``info``
(``neuralsim model info``), ``edit`` (``neuralsim model edit``); training: ``objectives`` (Diffusion Forcing, Step
Forcing and its ablations), ``latents`` and ``rollouts`` (stored latents), ``batches``, ``loop``, ``checkpoint``,
``train`` (``neuralsim train``), ``recipe`` and ``recipes/`` (``neuralsim train --recipe``), ``arguments`` (options
from config docstrings), ``synthetic`` (a toy clip source).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "WorldModel": "model",
    "WorldModelState": "model",
    "CheckpointError": "model",
    "WorldModelConfig": "config",
    "AutoencoderConfig": "config",
    "DiTConfig": "config",
    "preset": "config",
    "KVCache": "kv_cache",
    "CausalDiT": "dit",
    "sample_frame": "sampler",
    "euler_step": "sampler",
    "SyntheticClipDataset": "synthetic",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
