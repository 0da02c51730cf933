"""A content-addressed disk cache of validated judge answers, so re-scoring costs nothing.

The key is a SHA-256 over everything that determines the answer: rubric text, backend, model,
generation settings, the endpoint (a ``base_url`` other than the provider's default, normalised and
without credentials or query: two servers serving the same model name do not share answers), the
prompt (which contains the instruction) and the bytes of every image shown.  API keys and headers
never enter the key, and neither they nor the endpoint enter the stored entry.  Only answers that
passed validation are stored.  Entries are small JSON files written atomically (write + rename), so
concurrent workers can share one directory.

The default directory is ``$NEURALSIM_JUDGE_CACHE`` or ``~/.cache/neuralsim/judges``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

CACHE_ENV = "NEURALSIM_JUDGE_CACHE"


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "neuralsim" / "judges")


def cache_key(**parts: Any) -> str:
    """SHA-256 hex digest of the JSON encoding of ``parts`` (sorted keys)."""
    blob = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class JudgeCache:
    """Directory of ``<key[:2]>/<key>.json`` entries; ``get`` misses quietly on any read error."""

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            logger.warning("ignoring unreadable judge cache entry %s: %s", path, e)
            return None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.replace(tmp, path)
        except OSError as e:  # a cache that cannot be written must not fail the judgement
            logger.warning("could not write judge cache entry %s: %s", path, e)
