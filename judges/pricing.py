"""USD prices per million tokens, for cost accounting of hosted judges.

Prices change; pass ``price=(input, output)`` to a backend to override, or extend
``PRICES_PER_MTOK``.  A model without a known price reports ``cost_usd = None`` (unknown), never 0;
local and offline judges cost 0.
"""

from __future__ import annotations

#: model-name prefix -> (USD per 1M input tokens, USD per 1M output tokens), list prices mid-2025.
PRICES_PER_MTOK: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "gemini-2.5-flash-lite": (0.10, 0.40),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-pro": (1.25, 10.00),
    "gemini-2.0-flash": (0.10, 0.40),
}


def price_for(model: str) -> tuple[float, float] | None:
    """The price of ``model``: the longest matching prefix in :data:`PRICES_PER_MTOK`, else None."""
    name = model.split("/")[-1].lower()
    best = None
    for prefix in PRICES_PER_MTOK:
        if name.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return PRICES_PER_MTOK[best] if best else None


def cost_usd(price: tuple[float, float] | None, input_tokens: int, output_tokens: int) -> float | None:
    if price is None:
        return None
    return (input_tokens * price[0] + output_tokens * price[1]) / 1e6
