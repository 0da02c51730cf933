"""Google GenAI backend (the official ``google-genai`` client, Gemini API ``generateContent``).

The key comes from ``api_key``, ``$GEMINI_API_KEY`` or ``$GOOGLE_API_KEY``.  ``base_url`` (via the
client's ``http_options``) points it at a proxy or a test server.  Images are sent inline; the answer
is requested as JSON with ``response_mime_type="application/json"`` and the rubric's JSON schema.
The client's own retries are off: :mod:`judges.retry` owns retries and backoff.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Sequence

import numpy as np

from judges.backends.base import Backend, BackendReply, endpoint_identity, scrub
from judges.judgement import (
    InvalidAnswerError,
    MissingAPIKeyError,
    MissingDependencyError,
    PermanentBackendError,
    TransientBackendError,
)
from judges.pricing import price_for
from judges.sampling import encode_image

logger = logging.getLogger(__name__)

API_KEY_ENVS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
#: The endpoint google-genai talks to without a ``base_url``.
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
TRANSIENT_STATUS = (408, 409, 429)
_TRANSIENT_NAMES = ("Timeout", "Connect", "Network", "RemoteProtocol", "ReadError", "WriteError")


class GeminiBackend(Backend):
    """Gemini ``generateContent`` with inline images.

    Args:
        model: e.g. "gemini-2.5-flash".
        api_key: default ``$GEMINI_API_KEY`` (or ``$GOOGLE_API_KEY``).
        base_url: API endpoint override (proxies, tests); default Google's.
        temperature: sampling temperature (0 = greedy).
        max_output_tokens: cap on the answer (None = the model's default; thinking models need room).
        image_format: "png" (default) or "jpeg".
        json_mode: "schema" (mime type + JSON schema), "object" (mime type only) or "none".
        price: (USD per 1M input, per 1M output tokens); default from :mod:`judges.pricing`.
    """

    name = "gemini"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        temperature: float = 0.0,
        max_output_tokens: int | None = None,
        image_format: str = "png",
        json_mode: str = "schema",
        price: tuple[float, float] | None = None,
    ) -> None:
        try:
            from google import genai
            from google.genai import errors, types
        except ImportError as e:
            raise MissingDependencyError("the Gemini judge backend needs google-genai: pip install "
                                         "'neuralsim[gemini]'") from e
        if json_mode not in ("schema", "object", "none"):
            raise ValueError(f"json_mode must be 'schema', 'object' or 'none', got {json_mode!r}")
        if not model:
            raise ValueError("Gemini backend needs a model name, e.g. 'roboworld:gemini/gemini-2.5-flash'")
        key = api_key or next((os.environ[k] for k in API_KEY_ENVS if os.environ.get(k)), None)
        if not key:
            raise MissingAPIKeyError(
                f"the Gemini judge backend needs an API key: set the {API_KEY_ENVS[0]} environment variable "
                f"(or {API_KEY_ENVS[1]}, or pass api_key=...)"
            )
        self.model = model
        self.base_url = base_url
        self.temperature = float(temperature)
        self.max_output_tokens = max_output_tokens
        self.image_format = image_format
        self.json_mode = json_mode
        self.price = price if price is not None else price_for(model)
        self._key = key
        self._types = types
        self._errors = errors
        self._genai = genai
        self._clients: dict[float, Any] = {}

    def _client(self, timeout_s: float) -> Any:
        # The request timeout lives in the client's http_options, so keep one client per timeout.
        if timeout_s not in self._clients:
            t = self._types
            opts = t.HttpOptions(base_url=self.base_url, timeout=int(timeout_s * 1000),
                                 retry_options=t.HttpRetryOptions(attempts=1))
            self._clients[timeout_s] = self._genai.Client(api_key=self._key, http_options=opts)
        return self._clients[timeout_s]

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model, "temperature": self.temperature,
                "max_output_tokens": self.max_output_tokens, "image_format": self.image_format,
                "json_mode": self.json_mode, **endpoint_identity(self.base_url, DEFAULT_BASE_URL)}

    def generate(self, *, system: str, prompt: str, images: Sequence[np.ndarray],
                 json_schema: dict[str, Any] | None, timeout_s: float) -> BackendReply:
        t = self._types
        mime = "image/png" if self.image_format == "png" else "image/jpeg"
        parts = [t.Part.from_text(text=prompt)]
        parts += [t.Part.from_bytes(data=encode_image(im, self.image_format), mime_type=mime) for im in images]
        cfg: dict[str, Any] = {"temperature": self.temperature}
        if system:
            cfg["system_instruction"] = system
        if self.max_output_tokens:
            cfg["max_output_tokens"] = self.max_output_tokens
        if json_schema is not None and self.json_mode != "none":
            cfg["response_mime_type"] = "application/json"
            if self.json_mode == "schema":
                cfg["response_json_schema"] = json_schema
        try:
            resp = self._client(timeout_s).models.generate_content(
                model=self.model, contents=[t.Content(role="user", parts=parts)],
                config=t.GenerateContentConfig(**cfg),
            )
        except self._errors.APIError as e:
            code = int(getattr(e, "code", 0) or 0)
            msg = f"Gemini request failed with HTTP {code}: {scrub(str(e), self._key)}"
            if code in TRANSIENT_STATUS or code >= 500:
                raise TransientBackendError(msg) from None
            raise PermanentBackendError(msg) from None
        except Exception as e:  # transport errors of the client's HTTP stack
            msg = f"Gemini request failed: {type(e).__name__}: {scrub(str(e), self._key)}"
            if any(n in type(e).__name__ for n in _TRANSIENT_NAMES) or isinstance(e, (TimeoutError, ConnectionError)):
                raise TransientBackendError(msg) from None
            raise PermanentBackendError(msg) from None
        try:
            text = resp.text
        except Exception as e:  # blocked / empty candidates
            raise InvalidAnswerError(f"Gemini response has no text: {e}") from None
        um = resp.usage_metadata
        out_tokens = (int(getattr(um, "candidates_token_count", 0) or 0)
                      + int(getattr(um, "thoughts_token_count", 0) or 0))
        return BackendReply(text=text or "", input_tokens=int(getattr(um, "prompt_token_count", 0) or 0),
                            output_tokens=out_tokens)
