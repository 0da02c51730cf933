"""Fixtures for judge tests (helpers live in judges_testing.py)."""

from __future__ import annotations

from judges_testing import episode, gemini_server, openai_server  # noqa: F401  (fixtures)
