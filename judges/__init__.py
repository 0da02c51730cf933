"""Rubric judges and reward functions for neuralsim episodes.

A judge maps a finished episode to a :class:`~judges.judgement.Judgement` (score, per-criterion
scores, rationale, raw responses, backend/model, tokens/cost, latency, error) and is usable
directly as an env ``reward_fn``.  Pick one by name::

    from judges import make_judge
    judge = make_judge("roboworld_progress", "openai/gpt-4o")   # or "gemini/gemini-2.5-flash",
    j = judge(episode)                                           # "local//path", "offline"

or through the env: ``gym.make("NeuralDROID-v0", reward_fn="roboworld:openai/gpt-4o")``.

Rubrics are YAML files in ``judges/rubrics/``; backends are in ``judges/backends/``; the offline
learned judge is in ``judges/offline/``.  Importing this package does not import torch, openai or
google-genai.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Judgement": "judges.judgement",
    "CallRecord": "judges.judgement",
    "JudgeError": "judges.judgement",
    "MissingAPIKeyError": "judges.judgement",
    "MissingDependencyError": "judges.judgement",
    "InvalidAnswerError": "judges.judgement",
    "OfflineJudgeNotTrainedError": "judges.judgement",
    "Rubric": "judges.rubric",
    "load_rubric": "judges.rubric",
    "available_rubrics": "judges.rubric",
    "Judge": "judges.judge",
    "JudgeCache": "judges.cache",
    "RetryPolicy": "judges.retry",
    "make_judge": "judges.registry",
    "parse_spec": "judges.registry",
    "OfflineJudge": "judges.offline.judge",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'judges' has no attribute {name!r}")
