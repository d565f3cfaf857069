"""random.Random state to JSON and back (getstate() holds tuples, which JSON turns into lists)."""

from __future__ import annotations

import random
from typing import Any


def random_state_to_json(rng: random.Random | None = None) -> list[Any]:
    version, internal, gauss_next = (rng or random).getstate()
    return [version, list(internal), gauss_next]


def random_state_from_json(value: list[Any]) -> tuple[Any, ...]:
    version, internal, gauss_next = value
    return (version, tuple(internal), gauss_next)
