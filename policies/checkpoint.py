"""A learned policy's checkpoint folder: ``config.json`` + float32 ``model.safetensors``, shipped under a kind's
``weights/NAME`` or anywhere on disk.  One implementation of saving, loading (with errors that name the file or
tensor) and resolving a name for every learned kind (:mod:`policies.visuomotor`, :mod:`policies.flow`).  No torch
import at module level, so listing the shipped names stays instant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


class CheckpointError(ValueError):
    """A policy checkpoint that cannot be found or loaded (the message says which file or tensor, and how to train
    one)."""


def shipped_names(weights_dir: Path) -> list[str]:
    """Names of the checkpoints shipped in ``weights_dir`` (each a folder with a ``config.json``)."""
    if not weights_dir.is_dir():
        return []
    return sorted(p.name for p in weights_dir.iterdir() if (p / CONFIG_FILE).is_file())


def resolve_folder(name_or_path: str | Path, weights_dir: Path, kind: str, train_hint: str,
                   hub: bool = False) -> Path:
    """A checkpoint folder from a shipped name in ``weights_dir``, a local directory, or (``hub``) a Hugging Face
    hub id already in the local cache.

    Raises:
        CheckpointError: none of these; the message lists the shipped names and ends with ``train_hint``.
    """
    text = str(name_or_path)
    shipped = weights_dir / text
    if "/" not in text and (shipped / CONFIG_FILE).is_file():
        if not (shipped / WEIGHTS_FILE).is_file():
            raise CheckpointError(f"the shipped {kind} checkpoint {text!r} has no weights ({shipped}/{WEIGHTS_FILE});"
                                  f" {train_hint}")
        return shipped
    path = Path(text).expanduser()
    if path.is_dir():
        missing = [f for f in (CONFIG_FILE, WEIGHTS_FILE) if not (path / f).is_file()]
        if missing:
            raise CheckpointError(f"{text!r} is a directory without {' and '.join(missing)}, so it holds no trained "
                                  f"{kind} checkpoint; {train_hint}")
        return path
    names = ", ".join(shipped_names(weights_dir)) or "none shipped"
    if hub and text.count("/") == 1 and not text.startswith((".", "/", "~")):  # "org/name": a hub id
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(text, local_files_only=True))
        except ImportError:
            reason = "huggingface_hub is not installed"
        except Exception as e:  # noqa: BLE001 -- any hub failure becomes one clear error
            reason = f"it is not in the local Hugging Face cache ({type(e).__name__})"
        raise CheckpointError(f"{text!r} is not a local directory and looks like a hub id, but {reason}; this "
                              f"machine cannot download: put the checkpoint ({CONFIG_FILE} + {WEIGHTS_FILE}) in a "
                              f"directory and pass its path. Shipped {kind} checkpoints: {names}")
    raise CheckpointError(f"no {kind} checkpoint {text!r}: not a shipped name ({names}) and not a directory; "
                          + train_hint)


def save_folder(model, config_json: str, directory: str | Path, weights_format: str) -> Path:
    """Write ``model``'s state dict (float32, on the CPU) and its config to ``directory`` (created); the weights
    file's metadata records ``weights_format``."""
    import torch
    from safetensors.torch import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tensors = {k: t.detach().to("cpu", torch.float32).contiguous() for k, t in model.state_dict().items()}
    save_file(tensors, str(d / WEIGHTS_FILE), metadata={"format": weights_format})
    (d / CONFIG_FILE).write_text(config_json + "\n")
    return d


def load_folder(directory: str | Path, kind: str, config_from_json: Callable, build: Callable,
                device: str = "cpu", weights_format: str | None = None, format_hint: str = ""):
    """The model of a folder written by :func:`save_folder`: ``build(config_from_json(text))`` with the weights
    loaded, on ``device``, in eval mode.  With ``weights_format``, a weights file of another format is refused
    (``format_hint`` says what loads it instead).

    Raises:
        CheckpointError: a missing file, an unreadable config, another format, weights that do not match the
            config (the first missing and unexpected names), or NaN/inf tensors (their names).
    """
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    d = Path(directory)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (d / name).is_file():
            raise CheckpointError(f"{str(d)!r} has no {name}; a {kind} checkpoint is {CONFIG_FILE} + {WEIGHTS_FILE}")
    try:
        config = config_from_json((d / CONFIG_FILE).read_text())
    except (json.JSONDecodeError, TypeError, ValueError) as e:
        raise CheckpointError(f"{str(d / CONFIG_FILE)!r} is not a valid {kind} config: {e}") from e
    if weights_format is not None:
        with safe_open(str(d / WEIGHTS_FILE), framework="pt") as f:
            fmt = (f.metadata() or {}).get("format")
        if fmt != weights_format:
            raise CheckpointError(f"{str(d / WEIGHTS_FILE)!r} has format {fmt!r}, not a {kind} policy's "
                                  f"{weights_format!r}{format_hint}")
    model = build(config)
    tensors = load_file(str(d / WEIGHTS_FILE), device="cpu")
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
    if missing or unexpected:
        raise CheckpointError(f"{str(d / WEIGHTS_FILE)!r} does not match its config: missing {missing[:5]}, "
                              f"unexpected {unexpected[:5]}")
    bad = [k for k, t in tensors.items() if not torch.isfinite(t).all()]
    if bad:
        raise CheckpointError(f"{str(d / WEIGHTS_FILE)!r} holds NaN/inf in {bad[:5]}")
    model.load_state_dict(tensors)
    return model.to(device).eval()
