"""What a kernel writer may be told of a problem's inputs: the shapes at which correctness is checked (the
--set values applied), and what every draw of `get_inputs()` had in common: dtype, layout, range, and
structure such as a triangle. The inputs are drawn as the judge draws them (seeded, floats cast to the run's
precision) from the trusted reference, on the CPU.

Only what held in every draw is reported, and it is reported as observed: whether a kernel may rely on it
depends on whether `get_inputs()` makes it so by construction, which the prompt says in words."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfoundry import source_ast

DRAW_SEEDS = (0, 1)
MAX_DRAW_BYTES = 512 << 20  # larger inputs are described by shape and dtype alone (host memory)


@dataclass
class InputFact:
    """One value `get_inputs()` returns."""

    position: int
    shape: list[int] | None = None  # None: not a tensor
    dtype: str | None = None
    contiguous: bool | None = None
    low: float | None = None  # the smallest and largest values seen over the draws
    high: float | None = None
    properties: list[str] = field(default_factory=list)  # held in every draw
    value: str | None = None  # a non-tensor input, as written

    def line(self) -> str:
        if self.shape is None:
            return f"input {self.position}: {self.value}"
        parts = [f"input {self.position}: {self.dtype} {list(self.shape)}"]
        if self.contiguous is not None:
            parts.append("contiguous" if self.contiguous else "NOT contiguous")
        if self.low is not None and self.high is not None:
            parts.append(f"values seen in [{_short(self.low)}, {_short(self.high)}]")
        parts += self.properties
        return ", ".join(parts)


@dataclass
class ProblemFacts:
    inputs: list[InputFact]
    overrides: dict[str, Any] = field(default_factory=dict)  # the --set values
    file_values: dict[str, str] = field(default_factory=dict)  # what the problem file itself says for them
    draws: int = 0  # draws examined; 0: values not examined (inputs too large), only shapes
    outputs: list[dict[str, Any]] = field(default_factory=list)  # {"shape", "dtype"} of the reference's outputs
    why_not_drawn: str = ""


def _short(value: float) -> str:
    return f"{value:.4g}"


def _tensor_properties(tensor) -> tuple[float | None, float | None, set[str]]:
    import torch

    found: set[str] = set()
    if tensor.numel() == 0:
        return None, None, found
    if tensor.dtype == torch.bool:
        return None, None, found
    values = tensor.detach()
    if values.is_floating_point():
        finite = torch.isfinite(values)
        if bool(finite.all()):
            found.add("all finite")
        values = values[finite] if not bool(finite.all()) else values
        if values.numel() == 0:
            return None, None, found
        if bool((values == values.round()).all()):
            found.add("integer-valued")
    low, high = float(values.min()), float(values.max())
    if low >= 0:
        found.add("non-negative")
    if tensor.dim() >= 2 and tensor.shape[-1] > 1 and tensor.shape[-2] > 1 and bool((tensor != 0).any()):
        if not bool(torch.tril(tensor, diagonal=-1).any()):
            found.add("upper-triangular (zero below the diagonal of the last two dimensions)")
        if not bool(torch.triu(tensor, diagonal=1).any()):
            found.add("lower-triangular (zero above the diagonal of the last two dimensions)")
    return low, high, found


def describe(draws: list[list[Any]]) -> list[InputFact]:
    """The facts of each input position over `draws` (each one call of get_inputs()): properties kept only
    where every draw had them; ranges over all draws."""
    import torch

    facts: list[InputFact] = []
    for position, first in enumerate(draws[0]):
        same = [draw[position] for draw in draws if position < len(draw)]
        if not isinstance(first, torch.Tensor):
            facts.append(InputFact(position, value=f"{type(first).__name__} {first!r}"[:200]))
            continue
        fact = InputFact(position, shape=list(first.shape), dtype=str(first.dtype).removeprefix("torch."),
                         contiguous=all(t.is_contiguous() for t in same))
        common: set[str] | None = None
        lows, highs = [], []
        for tensor in same:
            low, high, found = _tensor_properties(tensor)
            common = found if common is None else common & found
            if low is not None:
                lows.append(low)
                highs.append(high)
        fact.low, fact.high = (min(lows), max(highs)) if lows else (None, None)
        fact.properties = sorted(common or set())
        facts.append(fact)
    return facts


def _shape_only(inputs: list[Any]) -> list[InputFact]:
    import torch

    return [InputFact(i, shape=list(v.shape), dtype=str(v.dtype).removeprefix("torch."))
            if isinstance(v, torch.Tensor) else InputFact(i, value=f"{type(v).__name__} {v!r}"[:200])
            for i, v in enumerate(inputs)]


def file_values(path: str | Path, names: list[str]) -> dict[str, str]:
    """The problem file's own text for these module-level constants (before --set)."""
    import ast

    from kfoundry.problem import module_constants

    tree = source_ast.parse(Path(path).read_text(encoding="utf-8"))
    constants = module_constants(tree)
    out = {}
    for name in names:
        if name not in constants:
            continue
        node, position = constants[name]
        value = node.value
        if position is not None and isinstance(value, (ast.Tuple, ast.List)):
            value = value.elts[position]
        out[name] = ast.unparse(value)
    return out


def problem_facts(problem_path: str | Path, set_values: dict[str, Any] | None = None, precision: str = "fp32",
                  outputs: list[dict[str, Any]] | None = None) -> ProblemFacts:
    """Draw the inputs (DRAW_SEEDS) at the run's sizes and describe them. Inputs above MAX_DRAW_BYTES are
    described from one draw on the meta device (shapes and dtypes, no values)."""
    from kfoundry.problem import on_host, read_problem

    problem = read_problem(problem_path, set_values)
    with on_host():  # the main process never touches the GPU, whatever the problem asks
        return _facts(problem, precision, outputs)


def _facts(problem, precision: str, outputs: list[dict[str, Any]] | None) -> ProblemFacts:
    import torch

    from kfoundry.problem import load_problem_module, make_inputs, tensor_bytes, torch_dtype

    module = load_problem_module(problem)
    dtype = torch_dtype(precision)
    overrides = dict(problem.overrides)
    base = ProblemFacts(inputs=[], overrides=overrides, file_values=file_values(problem.path, list(overrides)),
                        outputs=list(outputs or []))
    try:
        with torch.device("meta"):
            planned = make_inputs(module, DRAW_SEEDS[0], dtype, "meta")
        size = tensor_bytes(planned)
    except Exception:  # noqa: BLE001 -- get_inputs may use what the meta device lacks: draw for real
        planned, size = None, None
    if planned is not None and size is not None and size > MAX_DRAW_BYTES:
        base.inputs = _shape_only(planned)
        base.why_not_drawn = f"the inputs take {size / 1e9:.2g} GB: values not examined, shapes only"
        return base
    draws = [make_inputs(module, seed, dtype, "cpu") for seed in DRAW_SEEDS]
    base.inputs, base.draws = describe(draws), len(draws)
    return base

