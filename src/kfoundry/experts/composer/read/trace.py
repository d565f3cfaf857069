"""Reading a problem's computation: the model and sample inputs built as the evaluator builds them (fixed
seed, on the CPU), a `torch.fx` symbolic trace of the model (or, where FX cannot trace it, a dispatch-level
trace with `make_fx`), and the concrete value of every node on the sample inputs."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.fx

from kfoundry.experts.composer.read.numbers import (
    NumberTracer,
    baked,
    kept_tensor_attributes,
    module_numbers,
    module_settings,
)
from kfoundry.experts.composer.read.rnn_meta import shapes_only_recurrence
from kfoundry.problem import (
    ProblemSource,
    build_model,
    init_inputs_of,
    load_problem_module,
    make_inputs,
    on_host,
    read_problem,
)

SAMPLE_SEED = 0


class TraceFailed(Exception):
    """Neither tracer could read the model's forward."""


@dataclass
class Sample:
    """The problem loaded and run once on the CPU."""

    source: ProblemSource
    module: ModuleType
    model: torch.nn.Module
    init_inputs: list
    inputs: list
    eval_mode: bool
    device: str = "cpu"


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass
class Trace:
    kind: str  # "fx" (torch-level nodes) or "aten" (dispatch-level nodes)
    graph_module: torch.fx.GraphModule
    values: dict[torch.fx.Node, Any]  # node -> TensorMeta, int, or nested tuples of them
    placeholders: dict[torch.fx.Node, tuple[str, Any]]  # node -> ("input", index) or ("param", path)
    model: torch.nn.Module
    inputs: list
    output_kind: str  # "tensor", "tuple" or "list"
    notes: list[str] = field(default_factory=list)
    baked: dict[str, Any] = field(default_factory=dict)  # the module's numbers taken as constants, by path
    fixed_dims: list = field(default_factory=list)  # (placeholder, dim, size): dims taken at the sample's size


def load_sample(problem_path: str | Path, set_values: dict | None = None, eval_mode: bool = False,
                device: str = "cpu") -> Sample:
    """The problem's model and inputs, built like the evaluator builds them, in fp32.

    On the "meta" device nothing is allocated or computed (tracing needs shapes, not values), so full-size
    problems trace instantly; a problem that needs real data falls back to "cpu" (see compose).
    Raises kfoundry.errors.ProblemError for a bad problem file."""
    source = read_problem(problem_path, set_values)
    with on_host(device):  # the main process never touches the GPU, whatever the problem asks
        module = load_problem_module(source)
        with torch.device(device):  # tensors created in __init__ and get_inputs() land there
            init_inputs = init_inputs_of(module)
            model = build_model(module.Model, init_inputs, SAMPLE_SEED, None, device, eval_mode)
            inputs = make_inputs(module, SAMPLE_SEED + 1, None, device)
    if device == "meta":
        shapes_only_recurrence(model)
    return Sample(source, module, model, init_inputs, inputs, eval_mode, device)


def meta_of(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return TensorMeta(tuple(value.shape), value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(meta_of(v) for v in value)
    if isinstance(value, torch.Size):
        return tuple(int(s) for s in value)
    return value


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.values: dict[torch.fx.Node, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        self.values[n] = meta_of(result)
        return result


def _output_kind(result: Any) -> str:
    if isinstance(result, torch.Tensor):
        return "tensor"
    if isinstance(result, tuple):
        return "tuple"
    if isinstance(result, list):
        return "list"
    raise TraceFailed(f"forward returns a {type(result).__name__}, not tensors")


def _record(gm: torch.fx.GraphModule, args: list) -> tuple[dict, Any]:
    recorder = _Recorder(gm)
    with torch.no_grad():
        result = recorder.run(*args)
    return recorder.values, result


def trace_fx(model: torch.nn.Module, inputs: list, numbers: bool = True) -> Trace:
    with kept_tensor_attributes(model):
        return _trace_fx(model, inputs, numbers)


def _trace_fx(model: torch.nn.Module, inputs: list, numbers: bool = True) -> Trace:
    """Symbolic trace of the whole forward; non-tensor arguments are specialized to the sample's values. The
    module's numbers are get_attr nodes (read/numbers.py) where they can be, unless `numbers` is False: then
    constants, named in the trace's `baked`."""
    try:
        names = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        names = []
    concrete = {names[i]: v for i, v in enumerate(inputs) if i < len(names) and not isinstance(v, torch.Tensor)}
    found = module_numbers(model)
    if found and numbers:
        try:
            return _fx_trace(model, inputs, NumberTracer(found).trace_module(model, concrete or None), {})
        except Exception:  # noqa: BLE001 -- a number steering control flow: the plain trace takes them as constants
            pass
    try:
        gm = _symbolic_trace(model, concrete or None)
    except Exception as exc:  # noqa: BLE001 -- FX raises many kinds: control flow on proxies, untraceable calls
        raise TraceFailed(f"torch.fx cannot trace the forward: {type(exc).__name__}: {exc}") from None
    return _fx_trace(model, inputs, gm, baked(model, found))


def _symbolic_trace(model: torch.nn.Module, concrete: dict | None) -> torch.fx.GraphModule:
    """torch.fx.symbolic_trace, with the model's tensor attributes put back before the graph module copies them."""
    tracer = torch.fx.Tracer()
    with kept_tensor_attributes(model):
        graph = tracer.trace(model, concrete_args=concrete)
    name = model.__class__.__name__ if isinstance(model, torch.nn.Module) else model.__name__
    return torch.fx.GraphModule(tracer.root, graph, name)


def _fx_trace(model: torch.nn.Module, inputs: list, gm: torch.fx.GraphModule, numbers: dict[str, Any]) -> Trace:
    placeholders = {}
    for n, node in enumerate(node for node in gm.graph.nodes if node.op == "placeholder"):
        if n >= len(inputs):
            raise TraceFailed(f"forward takes more arguments than the {len(inputs)} get_inputs() gives")
        placeholders[node] = ("input", n)
    try:
        values, result = _record(gm, list(inputs))
    except Exception as exc:  # noqa: BLE001 -- any failure means this trace cannot be used
        raise TraceFailed(f"the traced forward failed on the sample inputs: {type(exc).__name__}: {exc}") from None
    return Trace("fx", gm, values, placeholders, model, inputs, _output_kind(result), baked=numbers)


def trace_dispatch(model: torch.nn.Module, inputs: list) -> Trace:
    """A dispatch-level (ATen) trace through make_fx, with shapes kept symbolic where it can."""
    with kept_tensor_attributes(model):
        return _trace_dispatch(model, inputs)


def _trace_dispatch(model: torch.nn.Module, inputs: list) -> Trace:
    from torch.func import functional_call
    from torch.fx.experimental.proxy_tensor import make_fx

    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers(remove_duplicate=False))
    state_names = list(params) + list(buffers)
    state = [*params.values(), *buffers.values()]
    tensor_positions = [i for i, v in enumerate(inputs) if isinstance(v, torch.Tensor)]

    def run(*flat: Any) -> Any:
        args = list(inputs)
        for position, value in zip(tensor_positions, flat[len(state_names):]):
            args[position] = value
        return functional_call(model, dict(zip(state_names, flat[:len(state_names)])), tuple(args))

    flat_args = state + [inputs[i] for i in tensor_positions]
    gm = None
    errors = []
    for mode in ("symbolic", "real"):
        try:
            with torch.no_grad():
                gm = make_fx(run, tracing_mode=mode)(*flat_args)
            break
        except Exception as exc:  # noqa: BLE001 -- make_fx raises many kinds; the next mode may work
            errors.append(f"{mode}: {type(exc).__name__}: {str(exc)[:200]}")
    if gm is None:
        raise TraceFailed("the dispatch-level trace failed (" + "; ".join(errors) + ")")
    placeholders = {}
    for n, node in enumerate(node for node in gm.graph.nodes if node.op == "placeholder"):
        if n < len(state_names):
            placeholders[node] = ("param", state_names[n])
        else:
            placeholders[node] = ("input", tensor_positions[n - len(state_names)])
    try:
        values, _ = _record(gm, flat_args)
        with torch.no_grad():
            result = model(*inputs)
    except Exception as exc:  # noqa: BLE001 -- any failure means this trace cannot be used
        raise TraceFailed(f"the dispatch-level trace failed on the sample inputs: {type(exc).__name__}: {exc}") \
            from None
    return Trace("aten", gm, values, placeholders, model, inputs, _output_kind(result),
                 baked=baked(model, module_numbers(model)) | module_settings(model), fixed_dims=_fixed_dims(gm))


def _fixed_dims(gm: torch.fx.GraphModule) -> list[tuple[torch.fx.Node, int, int]]:
    """(placeholder, dim, size) of every dim the dispatch-level trace took at its sample size: those a symbolic
    trace specialized (a Python loop over a size, a size that met a constant), every dim of a real one."""
    found = []
    for node in gm.graph.nodes:
        example = node.meta.get("val") if node.op == "placeholder" else None
        for dim, size in enumerate(example.shape if isinstance(example, torch.Tensor) else ()):
            fixed = size.node.maybe_as_int() if isinstance(size, torch.SymInt) else int(size)
            if fixed is not None:
                found.append((node, dim, fixed))
    return found
