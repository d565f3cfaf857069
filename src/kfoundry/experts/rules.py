"""The rules of the game as prompts state them, generated from the guard's own rule table so that
the prompt and the judge never disagree."""

from __future__ import annotations

from dataclasses import dataclass

from kfoundry.guard.findings import PERMISSIVE_WARNINGS, RULES


@dataclass(frozen=True)
class GameRule:
    rule: str  # the guard's rule id, as a cheating verdict names it
    catches: str
    instead: str


# what the guard lets through; written for the model, which otherwise tends to avoid legal things too
ALLOWED = (
    "allocating outputs and scratch buffers (torch.empty, torch.empty_like, torch.zeros; fill_)",
    "views, reshapes, .contiguous(), transposes and dtype casts",
    "shape and stride arithmetic in Python (x.shape, x.stride(), x.numel(), math{extra_math})",
    "keeping nn layers in __init__ for their parameters and reading .weight / .bias in forward",
    ("folding constants from parameters in __init__ with any torch ops (e.g. a pre-transposed or "
     "pre-scaled weight stored as a buffer), as long as forward recomputes from its inputs every call"),
    "{several}",
    "asserts on shapes and a try/except around imports only",
)
BACKEND_ALLOWED = {
    "triton": {"extra_math": ", triton.cdiv, triton.next_power_of_2",
               "several": "several kernels, helper @triton.jit functions, triton.autotune / triton.heuristics"},
    "cuda": {"extra_math": "",
             "several": "several kernels and __device__ helpers in one extension, built once at import"},
}


def allowed(backend: str) -> list[str]:
    return [item.format(**BACKEND_ALLOWED[backend]) for item in ALLOWED]


def rejected_rules(policy: str) -> list[GameRule]:
    """Every guard rule that fails a candidate under `policy`, in the guard's order."""
    return [GameRule(name, catches, instead) for name, (catches, instead) in RULES.items()
            if policy == "strict" or name not in PERMISSIVE_WARNINGS]


def warned_rules(policy: str) -> list[GameRule]:
    """Rules that only warn under `policy` (PyTorch compute under `permissive`)."""
    if policy == "strict":
        return []
    return [GameRule(name, *RULES[name]) for name in RULES if name in PERMISSIVE_WARNINGS]
