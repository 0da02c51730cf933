"""Local transformers VLM backend: ``AutoModelForImageTextToText`` + ``AutoProcessor`` from a directory.

Selected as ``"roboworld:local//path/to/model"``.  Any image-text-to-text model whose processor
has a chat template works (Qwen2.5-VL, SmolVLM, LLaVA, Gemma 3, ...).  Decoding is greedy by
default; there is no constrained JSON decoding, so the answer is parsed robustly and retried like
any other.  Costs nothing; tokens are counted from the processor's input and the generated ids.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from judges.backends.base import Backend, BackendReply
from judges.judgement import MissingDependencyError, PermanentBackendError

logger = logging.getLogger(__name__)


class TransformersBackend(Backend):
    """A VLM loaded from a local directory (no network access is attempted).

    Args:
        model: directory holding the model's config, weights and processor files.
        device: torch device ("cpu", "cuda", "cuda:1", ...).
        dtype: torch dtype name ("float32", "bfloat16", "float16"); default: the checkpoint's.
        max_new_tokens: cap on the answer length.
        temperature: 0 = greedy decoding.
        max_image_side: downscale images whose longer side exceeds this (None = as is).
    """

    name = "local"
    price = (0.0, 0.0)

    def __init__(
        self,
        model: str,
        *,
        device: str = "cpu",
        dtype: str | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        max_image_side: int | None = None,
    ) -> None:
        try:
            import torch
            from transformers import AutoModelForImageTextToText, AutoProcessor
        except ImportError as e:
            raise MissingDependencyError("the local VLM judge backend needs transformers: pip install "
                                         "'neuralsim[local-vlm]'") from e
        path = Path(model).expanduser()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"local VLM directory {str(path)!r} has no config.json; "
                                    "pass a directory written by save_pretrained (model + processor)")
        self.model = str(path.resolve())
        self.device = device
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.max_image_side = max_image_side
        kw: dict[str, Any] = {"local_files_only": True}
        if dtype is not None:
            kw["dtype"] = getattr(torch, dtype)
        self._torch = torch
        self.processor = AutoProcessor.from_pretrained(self.model, local_files_only=True)
        self.vlm = AutoModelForImageTextToText.from_pretrained(self.model, **kw).to(device).eval()
        if getattr(self.processor, "chat_template", None) is None:
            raise ValueError(f"the processor in {self.model!r} has no chat template; a local judge needs one")
        self._lock = threading.Lock()  # generate() is not re-entrant on one model
        cfg = (path / "config.json").read_bytes()
        self._fingerprint = hashlib.sha256(cfg).hexdigest()[:16]

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model, "config_sha": self._fingerprint,
                "max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
                "max_image_side": self.max_image_side}

    def _pil(self, image: np.ndarray) -> Any:
        from PIL import Image

        im = Image.fromarray(np.asarray(image, dtype=np.uint8))
        if self.max_image_side and max(im.size) > self.max_image_side:
            im.thumbnail((self.max_image_side, self.max_image_side))
        return im

    def generate(self, *, system: str, prompt: str, images: Sequence[np.ndarray],
                 json_schema: dict[str, Any] | None, timeout_s: float) -> BackendReply:
        # The system text is folded into the user turn: not every chat template has a system role.
        text = f"{system}\n\n{prompt}" if system else prompt
        content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
        messages = [{"role": "user", "content": content}]
        try:
            chat = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            inputs = self.processor(text=chat, images=[self._pil(im) for im in images] or None, return_tensors="pt")
            inputs = inputs.to(self.device)
            gen: dict[str, Any] = {"max_new_tokens": self.max_new_tokens}
            sampling = {"do_sample": True, "temperature": self.temperature} if self.temperature > 0 else None
            gen.update(sampling or {"do_sample": False})
            with self._lock, self._torch.inference_mode():
                out = self.vlm.generate(**inputs, **gen)
        except Exception as e:  # a local model that cannot run this input will not recover on retry
            raise PermanentBackendError(f"local VLM {self.model!r} failed: {type(e).__name__}: {e}") from e
        n_in = int(inputs["input_ids"].shape[1])
        new = out[0, n_in:]
        answer = self.processor.batch_decode(new[None], skip_special_tokens=True)[0]
        return BackendReply(text=answer.strip(), input_tokens=n_in, output_tokens=int(new.shape[0]))
