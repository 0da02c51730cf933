"""The backend interface: one multimodal question in, the model's text (and token usage) out."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Sequence
from urllib.parse import urlsplit

import numpy as np

from judges.pricing import cost_usd


@dataclass
class BackendReply:
    """A model's answer to one request.

    Attributes:
        text: the answer text (JSON when structured output was requested).
        input_tokens, output_tokens: usage as reported by the API (0 when not reported).
    """

    text: str
    input_tokens: int = 0
    output_tokens: int = 0


class Backend(abc.ABC):
    """A vision-language model reachable by one call per question.

    Subclasses raise :class:`~judges.judgement.TransientBackendError` for failures worth retrying
    (timeouts, connection errors, 408/409/429/5xx) and
    :class:`~judges.judgement.PermanentBackendError` for the rest; they never put API keys in
    exception messages or logs.
    """

    #: short backend name ("openai", "gemini", "local").
    name: str = ""
    #: model name or directory.
    model: str = ""
    #: (USD per 1M input tokens, USD per 1M output tokens), or None when unknown.
    price: tuple[float, float] | None = None

    @abc.abstractmethod
    def generate(
        self,
        *,
        system: str,
        prompt: str,
        images: Sequence[np.ndarray],
        json_schema: dict[str, Any] | None,
        timeout_s: float,
    ) -> BackendReply:
        """Ask one question: ``system`` text, ``prompt`` text, then ``images`` in order."""

    def identity(self) -> dict[str, Any]:
        """What determines the answer besides the question (cache key part; never secrets)."""
        return {"backend": self.name, "model": self.model}

    def cost(self, reply: BackendReply) -> float | None:
        return cost_usd(self.price, reply.input_tokens, reply.output_tokens)


def endpoint_identity(base_url: str | None, default: str) -> dict[str, str]:
    """The endpoint's part of a backend's cache identity: ``{"endpoint": url}``, or ``{}`` for the provider's
    ``default`` endpoint (so answers cached from the official API keep their keys).

    The URL is normalised (scheme and host lower-cased, trailing ``/`` dropped) and loses its credentials, query
    and fragment, which never enter a cache key: two servers serving the same model name under different
    endpoints get different keys, two spellings of one endpoint the same.
    """
    def norm(url: str) -> str:
        u = urlsplit(url.strip())
        host = (u.hostname or "") + (f":{u.port}" if u.port is not None else "")
        return f"{u.scheme.lower()}://{host}{u.path.rstrip('/')}"

    if base_url is None or norm(base_url) == norm(default):
        return {}
    return {"endpoint": norm(base_url)}


def scrub(message: str, *secrets: str | None) -> str:
    """Remove secrets (API keys) from a message before it is raised or logged."""
    for s in secrets:
        if s and len(s) >= 4:
            message = message.replace(s, "***")
    return message
