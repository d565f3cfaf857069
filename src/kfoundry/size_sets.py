"""A second size set for a problem, for the generalisation check (`kfoundry eval --check-sizes`).

A candidate verified at one set of sizes may hold only there (a group layout, a channel count or a tile
that fits only those sizes). The second set changes the problem's module-level integer constants by their
names' meaning: the batch one less, spatial sizes (height, width, depth, length, sequence) odd and smaller,
channel and feature counts three quarters (or half) of theirs; structural constants (kernel sizes, strides,
padding, groups, heads, layers) stay. Each proposal must build and run the reference on the meta device
(shapes only, instant at any size): where the constructor refuses one (a group count that no longer divides
the channels), a smaller change is tried. Every value is at most the verified one, so the second set fits
where the first did.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfoundry import problem as problems
from kfoundry import source_ast

_STRUCTURAL = ("kernel", "stride", "pad", "dilation", "group", "head", "layer", "block", "patch", "window",
               "pool", "step", "scale", "factor", "vocab", "class", "seed", "dim_", "axis", "rank", "order")
_BATCH = ("batch", "row")
_SPATIAL = ("height", "width", "depth", "length", "seq", "size", "time", "len", "spatial", "token", "col")
_FEATURES = ("channel", "feature", "hidden", "dim", "embed", "unit", "neuron", "input_size", "output_size")


@dataclass
class SizeSet:
    """The second set: `values`, the --set overrides that make it (the first set's and the changes), and
    `changes`, name -> (verified value, this set's value)."""

    values: dict[str, Any] = field(default_factory=dict)
    changes: dict[str, tuple[int, int]] = field(default_factory=dict)

    def text(self) -> str:
        return ", ".join(f"{name} {old}->{new}" for name, (old, new) in self.changes.items())


def size_constants(path: str | Path, overrides: dict[str, Any]) -> dict[str, int]:
    """The problem's module-level integer constants written as literals (what --set can change), with the
    overrides' values: the sizes a verdict was given at."""
    source = problems.read_problem(path, overrides)
    tree = source_ast.parse(source.text, filename=str(source.path))
    found: dict[str, int] = {}
    for name, (node, position) in problems.module_constants(tree).items():
        value = node.value
        if position is not None and isinstance(value, (ast.Tuple, ast.List)):
            value = value.elts[position]
        if isinstance(value, ast.Constant) and type(value.value) is int:
            found[name] = value.value
    for name, value in overrides.items():
        if type(value) is int:
            found[name] = value
        else:
            found.pop(name, None)
    return found


def _kind(name: str) -> str | None:
    lowered = name.lower()
    if any(word in lowered for word in _BATCH) or lowered in ("n", "b", "bs"):
        return "batch"
    if any(word in lowered for word in _STRUCTURAL):
        return None
    if any(word in lowered for word in _FEATURES) or lowered in ("c", "k", "d_model", "in_size", "out_size"):
        return "features"
    if any(word in lowered for word in _SPATIAL) or lowered in ("h", "w", "l", "t"):
        return "spatial"
    return None


def _smaller(kind: str, value: int, halve: bool) -> int:
    if kind == "batch":
        return value - 1 if value >= 2 else value
    if kind == "spatial":
        return value if value < 5 else value - 1 if value % 2 == 0 else value - 2
    if value < 8:
        return value
    return value // 2 if halve else value - value // 4


def _runs(path: str | Path, values: dict[str, Any], eval_mode: bool) -> bool:
    """The reference builds and runs at these sizes, on the meta device."""
    import torch

    try:
        source = problems.read_problem(path, values)
        with problems.on_host("meta"):
            module = problems.load_problem_module(source)
            with torch.device("meta"):
                model = problems.build_model(module.Model, problems.init_inputs_of(module), 0, None, "meta",
                                             eval_mode)
                inputs = problems.make_inputs(module, 0, None, "meta")
                with torch.no_grad():
                    model(*inputs)
    except Exception:  # noqa: BLE001 -- any refusal means these sizes do not suit this problem
        return False
    return True


def derive_other_sizes(path: str | Path, overrides: dict[str, Any], eval_mode: bool = False) -> SizeSet | str:
    """The second size set, or why there is none (no size constant that can change)."""
    sizes = size_constants(path, overrides)
    kinds = {name: kind for name, value in sizes.items() if (kind := _kind(name)) is not None}
    if not kinds:
        return ("no module-level size constant to change (batch, spatial, channel or feature counts); "
                "give the second set with --check-set NAME=VALUE")
    base_runs = _runs(path, overrides, eval_mode)
    tries = [("batch", "spatial", "features"), ("batch", "spatial", "features/2"), ("batch", "spatial"),
             ("batch",), ("spatial",)]
    for chosen in tries:
        changes = {}
        for name, kind in kinds.items():
            if kind in chosen or (kind == "features" and "features/2" in chosen):
                new = _smaller(kind, sizes[name], "features/2" in chosen)
                if new != sizes[name]:
                    changes[name] = (sizes[name], new)
        if not changes:
            continue
        values = {**overrides, **{name: new for name, (_, new) in changes.items()}}
        if not base_runs or _runs(path, values, eval_mode):  # unvalidated where the meta run itself fails
            return SizeSet(values, changes)
    return ("no smaller size set runs the reference (tried the batch, the spatial sizes and the channel "
            "counts); give the second set with --check-set NAME=VALUE")


def given_sizes(path: str | Path, overrides: dict[str, Any], second: dict[str, Any]) -> SizeSet:
    """The second set given by hand (--check-set)."""
    sizes = size_constants(path, overrides)
    changes = {name: (sizes.get(name), value) for name, value in second.items() if sizes.get(name) != value}
    return SizeSet({**overrides, **second}, changes)
