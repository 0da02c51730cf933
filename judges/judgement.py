"""The typed result of judging one episode, and the errors judges raise.

A :class:`Judgement` is what every judge returns and what a reward function hands to the env: its
``score`` becomes the episode-end reward and the whole object goes to ``info["judgement"]``.  A
judgement that could not be made has ``score = None`` and ``error`` set -- never a silent 0.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


class JudgeError(Exception):
    """Base class of the errors raised by the judges package."""


class MissingAPIKeyError(JudgeError, ValueError):
    """A hosted backend was selected but its API key is not set (names the environment variable).

    Also a ValueError, as the configuration errors of ``neuralsim`` are (a bad checkpoint, action or episode), so a
    command line that reports those as one line reports this one too without importing ``judges``."""


class MissingDependencyError(JudgeError, ImportError):
    """An optional dependency of a backend is not installed (says which extra to install)."""


class InvalidAnswerError(JudgeError):
    """The model answered, but the answer is not valid JSON for the rubric or is out of range."""


class TransientBackendError(JudgeError):
    """A call failed in a way worth retrying: timeout, connection error, HTTP 408/409/429 or 5xx."""


class PermanentBackendError(JudgeError):
    """A call failed in a way retrying will not fix (bad request, authentication, unknown model)."""


class OfflineJudgeNotTrainedError(JudgeError, FileNotFoundError):
    """The offline judge has no trained weights at the requested location."""


@dataclass
class CallRecord:
    """One model call (one segment, one vote frame) that went into a judgement.

    Attributes:
        name: what was judged, e.g. ``"segment 0"`` or ``"vote 3 @ 87%"``.
        frame_indices: indices into the episode's frames that were shown.
        answer: the validated, parsed answer (``None`` if the call failed).
        raw: the model's raw text of the last attempt.
        attempts: how many attempts were made (1 = first try succeeded).
        cached: the answer came from the disk cache (no request, no cost).
        input_tokens, output_tokens: token usage reported by the API (0 when cached or unknown).
        cost_usd: the call's cost from the price table (``None`` when the model has no price).
        latency_s: wall-clock seconds spent on the call including retries.
        error: why the call failed, or ``None``.
    """

    name: str
    frame_indices: list[int]
    answer: dict[str, Any] | None = None
    raw: str | None = None
    attempts: int = 0
    cached: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    latency_s: float = 0.0
    error: str | None = None


@dataclass
class Judgement:
    """A judge's verdict on one episode (or one pair of episodes for pairwise rubrics).

    Attributes:
        score: the rubric's overall score (RoboWorld: 0..5, binary: 0/1, WoW: 1..5, MiraBench: 1.0
            when optimism bias is detected, else 0.0); ``None`` when the judgement failed.
        rubric: rubric name, e.g. ``"roboworld_progress"``.
        backend: ``"openai"``, ``"gemini"``, ``"local"`` or ``"offline"``.
        model: model name (or directory for local models).
        criteria: per-criterion scores (WoW's four dimensions, per-segment scores, vote counts ...).
        rationale: the model's explanation(s), joined.
        raw_responses: raw text of every call, in order.
        calls: details of every call (see :class:`CallRecord`).
        input_tokens, output_tokens: totals over all calls.
        cost_usd: total cost in USD; ``None`` if any call's model had no known price.
        latency_s: wall-clock seconds for the whole judgement.
        cached: every call was answered from the disk cache.
        error: why the judgement failed, or ``None``.
    """

    score: float | None
    rubric: str
    backend: str
    model: str
    criteria: dict[str, Any] = field(default_factory=dict)
    rationale: str = ""
    raw_responses: list[str] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    latency_s: float = 0.0
    cached: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the judgement produced a finite score."""
        return self.error is None and self.score is not None and math.isfinite(self.score)

    @property
    def reward(self) -> float:
        """The score as an env reward: NaN (not 0) when the judgement failed."""
        return float(self.score) if self.ok else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (for results files and ``info["judgement"]`` logging)."""
        d = asdict(self)
        d["ok"] = self.ok
        return d

    @classmethod
    def failed(cls, error: str, *, rubric: str, backend: str, model: str, **kw: Any) -> "Judgement":
        """A judgement that could not be made: score ``None`` and ``error`` set."""
        return cls(score=None, rubric=rubric, backend=backend, model=model, error=error, **kw)

    def __repr__(self) -> str:
        state = f"score={self.score}" if self.ok else f"FAILED error={self.error!r}"
        return f"Judgement({self.rubric} {self.backend}/{self.model} {state} cost_usd={self.cost_usd})"
