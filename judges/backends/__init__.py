"""Model backends a :class:`~judges.judge.Judge` sends its questions to, one file each.

``openai`` (chat completions, any ``base_url``), ``gemini`` (Google GenAI) and ``local`` (a
transformers VLM from a directory).  The offline learned judge is not a chat backend; it lives in
:mod:`judges.offline`.  Backends are imported lazily so ``import judges`` stays light.
"""

from __future__ import annotations

from typing import Any

from judges.backends.base import Backend, BackendReply

BACKENDS = {
    "openai": "judges.backends.openai_backend:OpenAIBackend",
    "gemini": "judges.backends.gemini_backend:GeminiBackend",
    "local": "judges.backends.transformers_backend:TransformersBackend",
}


def make_backend(name: str, model: str, **options: Any) -> Backend:
    """Instantiate backend ``name`` ("openai", "gemini", "local") for ``model``."""
    import importlib

    if name not in BACKENDS:
        raise ValueError(f"unknown judge backend {name!r}; valid: {sorted(BACKENDS)} (or 'offline')")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)(model, **options)


__all__ = ["Backend", "BackendReply", "BACKENDS", "make_backend"]
