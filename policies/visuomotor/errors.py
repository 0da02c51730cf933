"""The visuomotor policies' errors, importable without torch."""

from __future__ import annotations

from ..checkpoint import CheckpointError  # noqa: F401  (one error for every learned kind's checkpoints)


class PolicyInputError(ValueError):
    """An observation a visuomotor policy cannot read (the message names the key and what was expected)."""
