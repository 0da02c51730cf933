"""Retries with exponential backoff for judge calls.

Transient failures (timeouts, connection errors, HTTP 408/409/429/5xx -- backends raise
:class:`~judges.judgement.TransientBackendError` for these) and invalid answers
(:class:`~judges.judgement.InvalidAnswerError`) are retried; anything else fails at once.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from judges.judgement import InvalidAnswerError, TransientBackendError

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try.

    Attributes:
        max_attempts: total attempts per call (first try included).
        initial_backoff_s: sleep before the 2nd attempt; doubled each time (``multiplier``).
        max_backoff_s: cap on one sleep.
        multiplier: growth factor of the sleep.
        jitter: each sleep is scaled by a uniform factor in [1 - jitter, 1 + jitter].
        timeout_s: per-request timeout handed to the backend client.
    """

    max_attempts: int = 4
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.2
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff_s < 0 or self.max_backoff_s < 0 or self.timeout_s <= 0:
            raise ValueError(f"backoff times must be >= 0 and timeout_s > 0, got {self}")

    def backoff(self, attempt: int) -> float:
        """Seconds to sleep after failed attempt number ``attempt`` (1-based)."""
        base = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (attempt - 1))
        return base * random.uniform(1 - self.jitter, 1 + self.jitter)


def call_with_retries(fn: Callable[[], T], policy: RetryPolicy, what: str = "judge call") -> tuple[T, int]:
    """Run ``fn`` until it succeeds or attempts run out; returns (result, attempts used).

    Re-raises the last retryable error when all attempts fail, and any other error at once.
    """
    for attempt in range(1, policy.max_attempts + 1):
        try:
            return fn(), attempt
        except (TransientBackendError, InvalidAnswerError) as e:
            if attempt == policy.max_attempts:
                raise
            delay = policy.backoff(attempt)
            logger.warning("%s failed (attempt %d/%d): %s; retrying in %.2fs",
                           what, attempt, policy.max_attempts, e, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")
