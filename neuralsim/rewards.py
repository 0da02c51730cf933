"""Reward functions for the environments, resolved by name.

A reward function is any callable ``reward_fn(episode: Episode) -> float | Judgement`` called once
when an episode ends.  If it returns an object with a ``score`` attribute, that score is the reward
and the object goes to ``info["judgement"]``.

Names look like ``"roboworld:offline"`` or ``"roboworld:openai/gpt-4o"``: the part before the colon
names an entry point in the ``neuralsim.reward_functions`` group (the ``judges`` package registers
its rubrics there), which is called with the rest of the string and returns the reward function.
``neuralsim`` itself never imports ``judges``.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Callable

ENTRY_POINT_GROUP = "neuralsim.reward_functions"

RewardFn = Callable[[Any], Any]


def available_reward_functions() -> list[str]:
    """Names of the registered reward-function families (the part before the colon)."""
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def make_reward_fn(spec: str | RewardFn | None) -> RewardFn | None:
    """Turn a reward-function name into a callable; callables and None pass through."""
    if spec is None or callable(spec):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"reward_fn must be a callable, a name like 'roboworld:offline' or None, got {spec!r}")
    family, _, rest = spec.partition(":")
    eps = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if family not in eps:
        known = ", ".join(sorted(eps)) or "none registered (is the judges package installed?)"
        raise ValueError(f"unknown reward function {spec!r}: no family {family!r}; known families: {known}")
    factory = eps[family].load()
    return factory(rest)


def reward_from_result(result: Any) -> tuple[float, Any]:
    """Split a reward function's result into (reward, judgement-or-None)."""
    if hasattr(result, "score"):
        score = result.score
        return (float("nan") if score is None else float(score)), result
    return float(result), None
