"""The visuomotor policies' errors, importable without torch."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A visuomotor checkpoint that cannot be found or loaded (the message says which file or tensor, and how to
    train one)."""


class PolicyInputError(ValueError):
    """An observation a visuomotor policy cannot read (the message names the key and what was expected)."""
