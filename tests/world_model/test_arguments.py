"""Command-line options generated from a config dataclass's field docstrings."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Literal

import pytest

from neuralsim.world_model.arguments import add_arguments, field_docs, given, help_text


@dataclass
class Options:
    """A config."""

    path: str = field(metadata={"positional": True})
    """Where it is."""
    size: int = 3
    """How big it is, see :class:`~neuralsim.world_model.config.DiTConfig` and ``size``.

    A second paragraph stays out of --help."""
    mode: Literal["fast", "slow"] = "fast"
    """How it runs: 100% fast."""
    name: str | None = None
    """A name (not given: none)."""
    tidy: bool = True
    """Tidy up."""
    secret: float = field(default=1.0, metadata={"cli": False})
    """Only in files."""
    out: str = field(default="x", metadata={"type": str.upper, "metavar": "DIR"})
    """The output."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t")
    add_arguments(p, Options)
    return p


def test_fields_become_options_with_their_docstrings():
    docs = field_docs(Options)
    assert docs["size"].startswith("How big it is") and set(docs) == {"path", "size", "mode", "name", "tidy", "secret",
                                                                       "out"}
    assert help_text(docs["size"]) == "How big it is, see DiTConfig and size."
    text = parser().format_help()
    assert "How big it is, see DiTConfig and size. (default: 3)" in " ".join(text.split())
    assert "second paragraph" not in text and "--secret" not in text and "100% fast" in text
    assert "--tidy, --no-tidy" in text and "{fast,slow}" in text and "--out DIR" in text


def test_only_the_given_options_are_parsed():
    args = parser().parse_args(["here", "--size", "5", "--no-tidy", "--out", "o"])
    assert given(args) == {"path": "here", "size": 5, "tidy": False, "out": "O"}
    assert Options(**given(args, Options)) == Options(path="here", size=5, tidy=False, out="O")
    assert given(parser().parse_args(["here"])) == {"path": "here"}
    with pytest.raises(SystemExit):
        parser().parse_args(["here", "--mode", "medium"])
    with pytest.raises(SystemExit):
        parser().parse_args([])  # the positional field has no default
