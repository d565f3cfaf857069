"""The one spelling of what LLM calls cost, for the progress panel, the summary line and the report:
a call whose model has no price is never counted as $0."""

from __future__ import annotations


def cost_text(cost_usd: float | None, unpriced_calls: int = 0) -> str:
    """`cost_usd`: the sum over the priced calls (None: none was priced); `unpriced_calls`: the
    replies whose cost is unknown. "$0.0123", "unknown (1 unpriced call)" or
    "$0.0123 + unknown (2 unpriced calls)"; "$0" when there was nothing to pay."""
    if not unpriced_calls:
        return "$0" if not cost_usd else f"${cost_usd:.4f}"
    unknown = f"unknown ({unpriced_calls} unpriced call{'s' if unpriced_calls != 1 else ''})"
    return unknown if cost_usd is None else f"${cost_usd:.4f} + {unknown}"
