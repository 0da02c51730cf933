"""A rubric judge: samples an episode's frames, asks a VLM backend, validates, aggregates.

:class:`Judge` is usable directly as an env ``reward_fn``: ``judge(episode)`` returns a
:class:`~judges.judgement.Judgement` whose ``score`` is the reward.  It never raises out of a
judgement (a failure becomes a failed Judgement with ``score=None`` and ``error`` set, and is
logged), so a rollout is never lost to a flaky API.

Protocols (``rubric.protocol``):

* ``segments`` -- RoboWorld: 1 fps, up to two segments of <= 15 frames, each scored independently,
  per-rollout score = max over segments; later segments are skipped once a segment reaches the
  rubric's ``stop_score`` (a success).
* ``whole`` -- WoW-World-Eval: one call over frames sampled from the whole episode.
* ``pairwise_vote`` -- MiraBench: seven late-phase frames, nominal beside perturbed, one
  "Same"/"Different" vote each; optimism bias when more than ``bias_threshold`` votes say Same.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from judges.backends.base import Backend
from judges.cache import JudgeCache, cache_key
from judges.judgement import CallRecord, InvalidAnswerError, Judgement
from judges.retry import RetryPolicy, call_with_retries
from judges.rubric import Rubric, load_rubric
from judges.sampling import (
    images_digest,
    progress_indices,
    render_frames,
    sample_indices,
    side_by_side,
    split_segments,
)

logger = logging.getLogger(__name__)

#: Key under ``episode.metadata`` where a pairwise rubric looks for the nominal (baseline) episode
#: when used as a single-episode ``reward_fn``.
NOMINAL_KEY = "nominal_episode"


@dataclass
class Usage:
    """Running totals over everything a judge has done (cost accounting per run).

    ``cost_usd`` sums the calls with a known price; ``unpriced_calls`` counts those without one.
    """

    judgements: int = 0
    failed: int = 0
    calls: int = 0
    cached_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def segment_plan(num_frames: int, fps: float, rubric: Rubric) -> list[np.ndarray]:
    """Frame indices of each segment a ``segments``/``whole`` rubric shows (see :mod:`judges.sampling`)."""
    s = rubric.sampling
    idx = sample_indices(num_frames, fps, float(s.get("fps", 1.0)), bool(s.get("include_last", True)))
    return split_segments(idx, int(s.get("num_segments", 2)), int(s.get("max_frames_per_segment", 15)))


def aggregate(scores: Sequence[float], how: str) -> float:
    """Combine segment scores: ``max`` (RoboWorld) or ``mean``."""
    if not scores:
        raise ValueError("no segment scores to aggregate")
    if how == "max":
        return float(max(scores))
    if how == "mean":
        return float(sum(scores) / len(scores))
    raise ValueError(f"unknown aggregate {how!r}; valid: 'max', 'mean'")


def optimism_bias(votes: Sequence[str], threshold: int = 3) -> bool:
    """MiraBench's rule: bias when more than ``threshold`` votes say "Same" (default: > 3 of 7)."""
    return sum(v == "Same" for v in votes) > threshold


class Judge:
    """Score episodes with a rubric and a VLM backend.

    Args:
        rubric: a :class:`~judges.rubric.Rubric` or the name of a file in ``judges/rubrics/``.
        backend: a :class:`~judges.backends.base.Backend` (OpenAI, Gemini, local transformers).
        cache: a :class:`~judges.cache.JudgeCache`, a directory, ``None`` for the default
            directory, or ``False`` to disable caching.
        retry: retry/backoff/timeout policy.

    Example::

        judge = Judge("roboworld_progress", OpenAIBackend("gpt-4o"))
        j = judge(episode)            # Judgement; j.score in 0..5, or None with j.error set
        env = gym.make("NeuralDROID-v0", reward_fn=judge)
    """

    def __init__(self, rubric: str | Rubric, backend: Backend, *,
                 cache: JudgeCache | str | os.PathLike | None | bool = None,
                 retry: RetryPolicy | None = None) -> None:
        self.rubric = load_rubric(rubric) if isinstance(rubric, str) else rubric
        self.backend = backend
        if cache is False:
            self.cache: JudgeCache | None = None
        elif isinstance(cache, JudgeCache):
            self.cache = cache
        else:
            self.cache = JudgeCache(None if cache in (None, True) else cache)
        self.retry = retry or RetryPolicy()
        self.usage = Usage()
        self._usage_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Judge(rubric={self.rubric.name!r}, backend={self.backend.name!r}, model={self.backend.model!r})"

    # ---- public entry points ----------------------------------------------------------------
    def __call__(self, episode: Any) -> Judgement:
        """Judge one episode (the ``reward_fn`` interface); never raises."""
        if self.rubric.protocol == "pairwise_vote":
            nominal = getattr(episode, "metadata", {}).get(NOMINAL_KEY)
            if nominal is None:
                return self._fail(f"rubric {self.rubric.name!r} compares two episodes: call judge_pair(nominal, "
                                  f"perturbed) or put the nominal episode in episode.metadata[{NOMINAL_KEY!r}]")
            return self.judge_pair(nominal, episode)
        return self._guarded(self._judge_single, episode)

    def judge(self, episode: Any) -> Judgement:
        """Same as calling the judge: ``judge.judge(episode) == judge(episode)``."""
        return self(episode)

    def judge_pair(self, nominal: Any, perturbed: Any) -> Judgement:
        """MiraBench pairwise vote of a nominal rollout against a perturbed one; never raises."""
        if self.rubric.protocol != "pairwise_vote":
            return self._fail(f"rubric {self.rubric.name!r} judges single episodes; use judge(episode)")
        return self._guarded(self._judge_pair, nominal, perturbed)

    # ---- protocols --------------------------------------------------------------------------
    def _judge_single(self, episode: Any) -> Judgement:
        r = self.rubric
        fps = float(getattr(episode, "fps", 15.0))
        n = _num_frames(episode)
        segments = segment_plan(n, fps, r)
        calls: list[CallRecord] = []
        scores: list[float] = []
        answers: list[dict[str, Any]] = []
        for k, idx in enumerate(segments):
            if r.protocol == "segments" and r.stop_score is not None and scores and max(scores) >= r.stop_score:
                break  # RoboWorld: skip the remaining segments once a segment is a success
            prompt = r.render_prompt(
                episode.instruction, num_frames=len(idx), sample_fps=float(r.sampling.get("fps", 1.0)),
                segment=k + 1, num_segments=len(segments), t_start=idx[0] / fps, t_end=idx[-1] / fps,
            )
            images = render_frames(episode.frames, idx, r.views)
            call = self._ask(f"segment {k}", prompt, images, idx.tolist())
            calls.append(call)
            if call.answer is None:
                return self._finish(None, calls, error=f"segment {k}: {call.error}",
                                    criteria={"segment_scores": scores, "num_segments": len(segments)})
            answers.append(call.answer)
            scores.append(r.score_of(call.answer))
        criteria: dict[str, Any] = {"segment_scores": scores, "num_segments": len(segments),
                                    "skipped_segments": len(segments) - len(scores)}
        if r.protocol == "whole":  # per-criterion scores (WoW's dimensions)
            for f in r.fields:
                if f.type in ("integer", "number"):
                    vals = [a[f.name] for a in answers if f.name in a]
                    if vals:
                        criteria[f.name] = aggregate(vals, "mean")
        rationale = "\n".join(f"[segment {i}] {r.rationale_of(a)}" if len(answers) > 1 else r.rationale_of(a)
                              for i, a in enumerate(answers))
        return self._finish(aggregate(scores, r.aggregate), calls, criteria=criteria, rationale=rationale)

    def _judge_pair(self, nominal: Any, perturbed: Any) -> Judgement:
        r = self.rubric
        progress = r.sampling.get("progress", [0.81, 0.83, 0.85, 0.87, 0.90, 0.95, 0.97])
        idx_n = progress_indices(_num_frames(nominal), progress)
        idx_p = progress_indices(_num_frames(perturbed), progress)
        left = render_frames(nominal.frames, idx_n, r.views)
        right = render_frames(perturbed.frames, idx_p, r.views)
        instruction = getattr(perturbed, "instruction", "") or getattr(nominal, "instruction", "")
        prompt = r.render_prompt(instruction)
        calls, votes = [], []
        for k, (p, a, b, i) in enumerate(zip(progress, left, right, idx_p)):
            call = self._ask(f"vote {k} @ {p:.0%}", prompt, [side_by_side(a, b)], [int(i)])
            calls.append(call)
            if call.answer is None:
                return self._finish(None, calls, error=f"vote {k}: {call.error}", criteria={"votes": votes})
            votes.append(call.answer[r.score_key])
        same = sum(v == "Same" for v in votes)
        bias = optimism_bias(votes, int(r.bias_threshold or 3))
        criteria = {"votes": votes, "same_votes": same, "different_votes": len(votes) - same, "optimism_bias": bias,
                    "progress": list(progress)}
        rationale = f"{same} of {len(votes)} late-phase frames judged Same -> {'optimism bias' if bias else 'no bias'}"
        return self._finish(1.0 if bias else 0.0, calls, criteria=criteria, rationale=rationale)

    # ---- one model call: cache, retries, validation -------------------------------------------
    def _ask(self, name: str, prompt: str, images: list[np.ndarray], frame_indices: list[int]) -> CallRecord:
        r, b = self.rubric, self.backend
        rec = CallRecord(name=name, frame_indices=frame_indices)
        key = cache_key(rubric=r.name, rubric_hash=r.text_hash, system=r.system, prompt=prompt,
                        images=images_digest(images), **b.identity())
        t0 = time.perf_counter()
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                try:
                    rec.answer = r.parse_answer(hit.get("raw"))
                    rec.raw, rec.cached, rec.cost_usd = hit.get("raw"), True, 0.0
                    rec.latency_s = time.perf_counter() - t0
                    return rec
                except InvalidAnswerError:
                    logger.warning("ignoring invalid cached answer %s", key)
        schema = r.json_schema()
        costs: list[float | None] = []
        attempts = [0]

        def attempt() -> dict[str, Any]:
            attempts[0] += 1
            reply = b.generate(system=r.system, prompt=prompt, images=images, json_schema=schema,
                               timeout_s=self.retry.timeout_s)
            rec.raw = reply.text
            rec.input_tokens += reply.input_tokens
            rec.output_tokens += reply.output_tokens
            costs.append(b.cost(reply))
            return r.parse_answer(reply.text)

        try:
            rec.answer, rec.attempts = call_with_retries(attempt, self.retry, what=f"{b.name}/{b.model} {name}")
        except Exception as e:  # noqa: BLE001 -- any failure becomes a failed call, reported upstream
            rec.attempts = attempts[0]
            rec.error = f"{type(e).__name__}: {e}"
        rec.cost_usd = None if any(c is None for c in costs) else float(sum(costs))
        rec.latency_s = time.perf_counter() - t0
        if rec.answer is not None and self.cache is not None:
            self.cache.put(key, {"raw": rec.raw, "rubric": r.name, "backend": b.name, "model": b.model,
                                 "input_tokens": rec.input_tokens, "output_tokens": rec.output_tokens,
                                 "created": time.time()})
        return rec

    # ---- bookkeeping ------------------------------------------------------------------------
    def _guarded(self, fn: Any, *args: Any) -> Judgement:
        t0 = time.perf_counter()
        try:
            j = fn(*args)
        except Exception as e:  # noqa: BLE001 -- a judge failure must never lose the rollout
            logger.exception("judge %r failed", self)
            j = self._fail(f"{type(e).__name__}: {e}")
        j.latency_s = time.perf_counter() - t0
        if not j.ok:
            logger.error("judgement failed (%s %s/%s): %s", self.rubric.name, self.backend.name, self.backend.model,
                         j.error)
        return j

    def _fail(self, error: str) -> Judgement:
        j = Judgement.failed(error, rubric=self.rubric.name, backend=self.backend.name, model=self.backend.model)
        self._account(j)
        return j

    def _finish(self, score: float | None, calls: list[CallRecord], *, error: str | None = None,
                criteria: dict[str, Any] | None = None, rationale: str = "") -> Judgement:
        costs = [c.cost_usd for c in calls]
        j = Judgement(
            score=score, rubric=self.rubric.name, backend=self.backend.name, model=self.backend.model,
            criteria=criteria or {}, rationale=rationale, raw_responses=[c.raw for c in calls if c.raw is not None],
            calls=calls, input_tokens=sum(c.input_tokens for c in calls),
            output_tokens=sum(c.output_tokens for c in calls),
            cost_usd=None if any(c is None for c in costs) else float(sum(costs)),
            cached=bool(calls) and all(c.cached for c in calls), error=error,
        )
        self._account(j)
        return j

    def _account(self, j: Judgement) -> None:
        with self._usage_lock:
            u = self.usage
            u.judgements += 1
            u.failed += 0 if (j.error is None and j.score is not None) else 1
            for c in j.calls:
                u.calls += 1
                u.cached_calls += int(c.cached)
                u.input_tokens += c.input_tokens
                u.output_tokens += c.output_tokens
                if c.cost_usd is None:
                    u.unpriced_calls += 1
                else:
                    u.cost_usd += c.cost_usd


def _num_frames(episode: Any) -> int:
    frames = episode.frames
    n = len(next(iter(frames.values())))
    if n == 0:
        raise ValueError("episode has no frames")
    return n
