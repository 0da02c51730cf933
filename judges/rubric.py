"""Rubrics as data: loading the YAML files in ``judges/rubrics/``, rendering prompts, checking answers.

A rubric file says *what* to ask (system text, prompt template, level definitions), *which frames*
to show (``protocol``, ``views``, ``sampling``) and *what a valid answer is* (``answer.fields``: the
JSON keys with their types and ranges).  :func:`parse_answer` turns a model's raw text into a
validated dict or raises :class:`~judges.judgement.InvalidAnswerError` -- an out-of-range or
unparseable answer is never turned into a score.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from judges.judgement import InvalidAnswerError

RUBRIC_DIR = Path(__file__).parent / "rubrics"
PROTOCOLS = ("segments", "whole", "pairwise_vote")
AGGREGATES = ("max", "mean")
FIELD_TYPES = ("integer", "number", "string", "enum")


@dataclass(frozen=True)
class AnswerField:
    """One key of the JSON answer.

    Attributes:
        name: JSON key.
        type: ``integer``, ``number``, ``string`` or ``enum``.
        min, max: inclusive range for numbers.
        values: allowed values for ``enum`` (matched case-insensitively, returned canonical).
        required: whether the key must be present.
    """

    name: str
    type: str
    min: float | None = None
    max: float | None = None
    values: tuple[str, ...] = ()
    required: bool = True

    def __post_init__(self) -> None:
        if self.type not in FIELD_TYPES:
            raise ValueError(f"answer field {self.name!r} has type {self.type!r}; valid types: {FIELD_TYPES}")
        if self.type == "enum" and not self.values:
            raise ValueError(f"enum answer field {self.name!r} needs 'values'")

    def json_schema(self) -> dict[str, Any]:
        if self.type == "enum":
            return {"type": "string", "enum": list(self.values)}
        schema: dict[str, Any] = {"type": self.type}
        # Range keywords are not accepted by every structured-output implementation; ranges are
        # enforced by parse_answer instead and stated in the prompt.
        return schema

    def coerce(self, value: Any) -> Any:
        """Validate and normalise one value; raises InvalidAnswerError."""
        if self.type == "string":
            if not isinstance(value, str):
                raise InvalidAnswerError(f"field {self.name!r} must be a string, got {value!r}")
            return value
        if self.type == "enum":
            if isinstance(value, str):
                for v in self.values:
                    if value.strip().strip(".").lower() == v.lower():
                        return v
            raise InvalidAnswerError(f"field {self.name!r} must be one of {list(self.values)}, got {value!r}")
        if isinstance(value, bool):
            raise InvalidAnswerError(f"field {self.name!r} must be a number, got {value!r}")
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise InvalidAnswerError(f"field {self.name!r} must be a number, got {value!r}") from None
        if not isinstance(value, (int, float)) or value != value:
            raise InvalidAnswerError(f"field {self.name!r} must be a number, got {value!r}")
        if self.type == "integer":
            if float(value) != int(value):
                raise InvalidAnswerError(f"field {self.name!r} must be an integer, got {value!r}")
            value = int(value)
        else:
            value = float(value)
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise InvalidAnswerError(f"field {self.name!r} = {value!r} is outside [{self.min}, {self.max}]")
        return value


@dataclass(frozen=True)
class Rubric:
    """A judging rubric loaded from a YAML file (see the files in ``judges/rubrics/``).

    Attributes:
        name: file stem, e.g. ``"roboworld_progress"``.
        title, source: human-readable name and the paper section it follows.
        protocol: ``segments`` (score segments, aggregate), ``whole`` (one call over the episode) or
            ``pairwise_vote`` (MiraBench: per-frame votes over a nominal/perturbed pair).
        views: ``"collage"`` (the 2x2 layout) or a list of view names tiled side by side.
        sampling: frame-sampling parameters (``fps``, ``include_last``, ``num_segments``,
            ``max_frames_per_segment``; or ``progress`` fractions for pairwise votes).
        aggregate: how segment scores combine (``max`` or ``mean``).
        stop_score: skip the remaining segments once a segment scores at least this.
        fields: the answer's JSON keys.
        score_key: the field that is the overall score, or ``"mean"`` of ``score_fields``.
        score_fields: fields averaged when ``score_key == "mean"``.
        rationale_key: the field holding the explanation, if any.
        system, prompt, rubric_text: the texts sent to the model (``prompt`` is a format template).
        bias_threshold: pairwise votes: bias when the number of "Same" votes exceeds this.
    """

    name: str
    title: str
    source: str
    protocol: str
    views: str | tuple[str, ...]
    sampling: dict[str, Any]
    aggregate: str
    stop_score: float | None
    fields: tuple[AnswerField, ...]
    score_key: str
    score_fields: tuple[str, ...]
    rationale_key: str | None
    system: str
    prompt: str
    rubric_text: str
    bias_threshold: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"rubric {self.name!r}: protocol {self.protocol!r} is not one of {PROTOCOLS}")
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"rubric {self.name!r}: aggregate {self.aggregate!r} is not one of {AGGREGATES}")
        names = {f.name for f in self.fields}
        if self.score_key == "mean":
            missing = [f for f in self.score_fields if f not in names]
            if not self.score_fields or missing:
                raise ValueError(f"rubric {self.name!r}: score 'mean' needs score_fields among {sorted(names)}")
        elif self.score_key not in names:
            raise ValueError(f"rubric {self.name!r}: score field {self.score_key!r} not among {sorted(names)}")
        if self.protocol == "pairwise_vote" and self.bias_threshold is None:
            raise ValueError(f"rubric {self.name!r}: pairwise_vote needs bias_threshold")

    # ---- ranges -----------------------------------------------------------------------------
    @property
    def score_range(self) -> tuple[float, float]:
        """(min, max) of the overall score."""
        if self.protocol == "pairwise_vote":
            return (0.0, 1.0)
        keys = self.score_fields if self.score_key == "mean" else (self.score_key,)
        fs = [f for f in self.fields if f.name in keys]
        return (min(f.min or 0 for f in fs), max(f.max or 0 for f in fs))

    @property
    def text_hash(self) -> str:
        """Content hash of everything that shapes the question (for the cache key)."""
        blob = json.dumps(
            [self.name, self.system, self.prompt, self.rubric_text, self.views, self.sampling,
             [(f.name, f.type, f.min, f.max, f.values) for f in self.fields]],
            sort_keys=True, default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    # ---- prompts ----------------------------------------------------------------------------
    def render_prompt(self, instruction: str, **context: Any) -> str:
        """Fill the prompt template (``{instruction}``, ``{rubric}``, ``{num_frames}``, ...)."""
        try:
            return self.prompt.format(instruction=instruction, rubric=self.rubric_text, **context).strip()
        except KeyError as e:
            raise ValueError(f"rubric {self.name!r}: prompt template needs {e} which was not supplied") from None

    def json_schema(self) -> dict[str, Any]:
        """JSON Schema of a valid answer, for APIs with structured output."""
        return {
            "type": "object",
            "properties": {f.name: f.json_schema() for f in self.fields},
            "required": [f.name for f in self.fields if f.required],
            "additionalProperties": False,
        }

    # ---- answers ----------------------------------------------------------------------------
    def parse_answer(self, text: str | None) -> dict[str, Any]:
        """Parse and validate a raw model answer; raises InvalidAnswerError (never guesses a score)."""
        if text is None or not str(text).strip():
            raise InvalidAnswerError("empty answer")
        obj = extract_json_object(str(text))
        if obj is None:
            obj = self._bare_answer(str(text))
        if obj is None:
            raise InvalidAnswerError(f"no JSON object in answer: {_clip(text)!r}")
        # Keys are matched case-insensitively; unknown keys are ignored.
        lowered = {str(k).strip().lower(): v for k, v in obj.items()}
        out: dict[str, Any] = {}
        for f in self.fields:
            if f.name.lower() in lowered:
                out[f.name] = f.coerce(lowered[f.name.lower()])
            elif f.required:
                raise InvalidAnswerError(f"answer lacks field {f.name!r}: {_clip(text)!r}")
        return out

    def _bare_answer(self, text: str) -> dict[str, Any] | None:
        """Accept a bare one-word answer for a single enum field ("Same" / "Different")."""
        enums = [f for f in self.fields if f.type == "enum"]
        if len(enums) != 1 or any(f.required and f.type != "enum" for f in self.fields):
            return None
        f = enums[0]
        words = set(re.findall(r"[a-z]+", text.lower()))
        hits = [v for v in f.values if v.lower() in words]
        return {f.name: hits[0]} if len(hits) == 1 else None

    def score_of(self, answer: dict[str, Any]) -> float:
        """The overall score of one validated answer."""
        if self.score_key == "mean":
            return float(sum(answer[k] for k in self.score_fields) / len(self.score_fields))
        return float(answer[self.score_key])

    def rationale_of(self, answer: dict[str, Any]) -> str:
        return str(answer.get(self.rationale_key, "")) if self.rationale_key else ""


def extract_json_object(text: str) -> dict[str, Any] | None:
    """Find the first JSON object in free text (plain, fenced in ```json, or embedded in prose)."""
    text = text.strip()
    candidates = [text]
    candidates += re.findall(r"```(?:json|JSON)?\s*(.*?)```", text, flags=re.S)
    decoder = json.JSONDecoder()
    for cand in candidates:
        try:
            obj = json.loads(cand)
            if isinstance(obj, dict):
                return obj
        except ValueError:
            pass
    for i, ch in enumerate(text):  # first decodable object starting at any '{'
        if ch == "{":
            try:
                obj, _ = decoder.raw_decode(text[i:])
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


def _clip(text: Any, n: int = 200) -> str:
    s = str(text)
    return s if len(s) <= n else s[:n] + "..."


def available_rubrics() -> list[str]:
    """Names of the rubric files shipped in ``judges/rubrics/``."""
    return sorted(p.stem for p in RUBRIC_DIR.glob("*.yaml"))


@lru_cache(maxsize=None)
def load_rubric(name_or_path: str) -> Rubric:
    """Load a rubric by name (``"roboworld_progress"``) or from a YAML file path."""
    import yaml

    path = Path(name_or_path)
    if not path.suffix:
        path = RUBRIC_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown rubric {name_or_path!r}; available: {available_rubrics()} "
                         "(or a path to a YAML file)")
    d = yaml.safe_load(path.read_text())
    ans = d["answer"]
    fields = tuple(
        AnswerField(
            name=k, type=v["type"], min=v.get("min"), max=v.get("max"),
            values=tuple(v.get("values", ())), required=v.get("required", True),
        )
        for k, v in ans["fields"].items()
    )
    views = d.get("views", "collage")
    return Rubric(
        name=d.get("name", path.stem),
        title=d.get("title", path.stem),
        source=d.get("source", ""),
        protocol=d["protocol"],
        views=views if isinstance(views, str) else tuple(views),
        sampling=dict(d.get("sampling", {})),
        aggregate=d.get("aggregate", "max"),
        stop_score=d.get("stop_score"),
        fields=fields,
        score_key=ans["score"],
        score_fields=tuple(ans.get("score_fields", ())),
        rationale_key=ans.get("rationale"),
        system=(d.get("system") or "").strip(),
        prompt=d["prompt"],
        rubric_text=d.get("rubric") or "",
        bias_threshold=d.get("bias_threshold"),
    )
