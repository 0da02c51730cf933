"""OpenAI chat-completions backend (the official ``openai`` client, any ``base_url``).

Works with api.openai.com and with any OpenAI-compatible server (vLLM, Ollama, SGLang, LM Studio)
serving an open VLM: pass ``base_url`` or set ``OPENAI_BASE_URL``.  The key comes from ``api_key``
or ``OPENAI_API_KEY``; self-hosted servers that ignore keys get the placeholder ``"EMPTY"`` when no
key is set and a non-OpenAI ``base_url`` is used.  Images go as base64 data URLs; the answer is
requested as JSON (``response_format`` json_schema, or json_object, or nothing -- ``json_mode``).
The client's own retries are off: :mod:`judges.retry` owns retries and backoff.
"""

from __future__ import annotations

import base64
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

API_KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
#: The endpoint the official client talks to without a ``base_url``.
DEFAULT_BASE_URL = "https://api.openai.com/v1"
JSON_MODES = ("schema", "object", "none")
TRANSIENT_STATUS = (408, 409, 429)


class OpenAIBackend(Backend):
    """Chat completions with images.

    Args:
        model: model name as the server knows it ("gpt-4o", "Qwen/Qwen2.5-VL-7B-Instruct", ...).
        api_key: API key; default ``$OPENAI_API_KEY``.
        base_url: server URL including ``/v1``; default ``$OPENAI_BASE_URL`` or OpenAI's.
        temperature: sampling temperature (0 = greedy, what the papers use).
        max_tokens: cap on the answer length.
        image_detail: OpenAI's image ``detail`` ("auto", "low", "high").
        image_format: "png" (lossless, default) or "jpeg" (smaller requests).
        json_mode: "schema" (response_format json_schema), "object" (json_object) or "none".
        price: (USD per 1M input, per 1M output tokens); default from :mod:`judges.pricing`.
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 512,
        image_detail: str = "auto",
        image_format: str = "png",
        json_mode: str = "schema",
        price: tuple[float, float] | None = None,
    ) -> None:
        try:
            import openai
        except ImportError as e:
            raise MissingDependencyError("the OpenAI judge backend needs the openai client: pip install "
                                         "'neuralsim[openai]'") from e
        if json_mode not in JSON_MODES:
            raise ValueError(f"json_mode must be one of {JSON_MODES}, got {json_mode!r}")
        if image_detail not in ("auto", "low", "high"):
            raise ValueError(f"image_detail must be 'auto', 'low' or 'high', got {image_detail!r}")
        if not model:
            raise ValueError("OpenAI backend needs a model name, e.g. 'roboworld:openai/gpt-4o'")
        base_url = base_url or os.environ.get(BASE_URL_ENV) or None
        key = api_key or os.environ.get(API_KEY_ENV)
        if not key:
            if base_url and "api.openai.com" not in base_url:
                logger.info("no %s set; using a placeholder key for the self-hosted server", API_KEY_ENV)
                key = "EMPTY"
            else:
                raise MissingAPIKeyError(
                    f"the OpenAI judge backend needs an API key: set the {API_KEY_ENV} environment variable "
                    f"(or pass api_key=...); for a self-hosted OpenAI-compatible server set {BASE_URL_ENV}"
                )
        self.model = model
        self.base_url = base_url
        self.temperature = float(temperature)
        self.max_tokens = int(max_tokens)
        self.image_detail = image_detail
        self.image_format = image_format
        self.json_mode = json_mode
        self.price = price if price is not None else price_for(model)
        self._key = key
        self._openai = openai
        self._client = openai.OpenAI(api_key=key, base_url=base_url, max_retries=0)

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model, "temperature": self.temperature,
                "max_tokens": self.max_tokens, "image_detail": self.image_detail,
                "image_format": self.image_format, "json_mode": self.json_mode,
                **endpoint_identity(self.base_url, DEFAULT_BASE_URL)}

    def _image_part(self, image: np.ndarray) -> dict[str, Any]:
        mime = "image/png" if self.image_format == "png" else "image/jpeg"
        b64 = base64.b64encode(encode_image(image, self.image_format)).decode()
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{b64}", "detail": self.image_detail}}

    def generate(self, *, system: str, prompt: str, images: Sequence[np.ndarray],
                 json_schema: dict[str, Any] | None, timeout_s: float) -> BackendReply:
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": system})
        content = [{"type": "text", "text": prompt}] + [self._image_part(im) for im in images]
        messages.append({"role": "user", "content": content})
        kwargs: dict[str, Any] = {}
        if json_schema is not None and self.json_mode == "schema":
            kwargs["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "judgement", "schema": json_schema, "strict": True}}
        elif json_schema is not None and self.json_mode == "object":
            kwargs["response_format"] = {"type": "json_object"}
        oa = self._openai
        try:
            resp = self._client.chat.completions.create(
                model=self.model, messages=messages, temperature=self.temperature,
                max_tokens=self.max_tokens, timeout=timeout_s, **kwargs,
            )
        except (oa.APITimeoutError, oa.APIConnectionError) as e:
            raise TransientBackendError(f"OpenAI request failed: {type(e).__name__}: "
                                        f"{scrub(str(e), self._key)}") from None
        except oa.APIStatusError as e:
            msg = f"OpenAI request failed with HTTP {e.status_code}: {scrub(str(e), self._key)}"
            if e.status_code in TRANSIENT_STATUS or e.status_code >= 500:
                raise TransientBackendError(msg) from None
            raise PermanentBackendError(msg) from None
        except oa.OpenAIError as e:
            raise PermanentBackendError(f"OpenAI request failed: {type(e).__name__}: "
                                        f"{scrub(str(e), self._key)}") from None
        if not resp.choices:
            raise InvalidAnswerError("OpenAI response has no choices")
        text = resp.choices[0].message.content
        usage = resp.usage
        reply = BackendReply(
            text=text or "",
            input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        )
        return reply
