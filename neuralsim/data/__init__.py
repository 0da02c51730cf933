"""Datasets: generate SimDROID episodes, write them LeRobot-style, read them (and real DROID) as clips.

* :mod:`~neuralsim.data.generate` -- ``generate(out, episodes, ...)``: scripted expert episodes with
  failure modes, resumable, multi-process (``neuralsim data generate``).
* :mod:`~neuralsim.data.writer` -- the on-disk layout (parquet + one mp4 per view + ``meta/``).
* :mod:`~neuralsim.data.reader` -- ``ClipDataset`` (fixed training windows), ``read_episode``,
  ``list_episodes``; reads the SimDROID layout and the real DROID sample.

Names are imported lazily, so ``import neuralsim.data`` stays cheap.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "generate": "generate",
    "GenerationMismatchError": "generate",
    "ClipDataset": "reader",
    "DatasetError": "reader",
    "list_episodes": "reader",
    "read_episode": "reader",
    "detect_layout": "reader",
    "save_episode": "writer",
    "write_episode": "writer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
