"""The plain numbers a model's own modules hold (`self.scale = head_dim ** -0.5`, `self.heads = heads`): a size set
may change them as it changes the tensors' shapes, so a candidate reads them from its module when forward runs
instead of carrying the values the trace saw.

torch.fx takes such a number as a constant. Traced with `NumberTracer`, each is a `get_attr` node instead, which
the reader turns into a host number read at call time. Where that trace fails (a number steering Python control
flow) or its reading does, the plain trace bakes them in: `baked` names those forward's source reads, which the
candidate then checks.
torch.nn's own modules are not among them: the torch-level readers take their settings from the module objects,
while a dispatch-level trace bakes those in too (`module_settings`)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from contextlib import contextmanager
from typing import Any

import torch
import torch.fx


def module_numbers(model: torch.nn.Module) -> dict[str, tuple[torch.nn.Module, str]]:
    """Attribute path -> (module, name) of every int or float that a module of the model's own classes holds."""
    found = {}
    for prefix, module in model.named_modules():
        if type(module).__module__.startswith("torch."):
            continue
        for name, value in vars(module).items():
            if type(value) in (int, float) and not name.startswith("_"):
                found[f"{prefix}.{name}" if prefix else name] = (module, name)
    return found


@contextmanager
def kept_tensor_attributes(model: torch.nn.Module):
    """The tensors the modules hold as plain attributes, put back after a trace: a forward that assigns one
    (`self.h0 = self.h0.to(x.device)`) would leave a tracer's proxy or fake tensor there."""
    held = [(module, name, value) for module in model.modules() for name, value in vars(module).items()
            if isinstance(value, torch.Tensor)]
    try:
        yield
    finally:
        for module, name, value in held:
            module.__dict__[name] = value


class NumberTracer(torch.fx.Tracer):
    """A symbolic trace in which the modules' numbers are `get_attr` nodes (the modules hold proxies while it
    runs, and their values again after)."""

    def __init__(self, numbers: dict[str, tuple[torch.nn.Module, str]]) -> None:
        super().__init__()
        self.numbers = numbers

    def create_args_for_root(self, root_fn, is_module, concrete_args=None):
        args = super().create_args_for_root(root_fn, is_module, concrete_args)
        for path, (module, name) in self.numbers.items():
            module.__dict__[name] = self.create_proxy("get_attr", path, (), {})
        return args

    def trace_module(self, model: torch.nn.Module, concrete_args: dict | None) -> torch.fx.GraphModule:
        values = {path: getattr(module, name) for path, (module, name) in self.numbers.items()}
        try:
            with kept_tensor_attributes(model):
                graph = self.trace(model, concrete_args=concrete_args)
        finally:
            for path, (module, name) in self.numbers.items():
                module.__dict__[name] = values[path]
        return torch.fx.GraphModule(self.root, graph, type(model).__name__)


# torch.nn modules' sizes (their weights carry them too); their other settings shape the computation
SIZE_SETTINGS = frozenset({"in_channels", "out_channels", "in_features", "out_features", "in1_features", "in2_features",
                           "num_features", "num_channels", "normalized_shape", "input_size", "hidden_size",
                           "proj_size", "embedding_dim", "num_embeddings"})


def module_settings(model: torch.nn.Module) -> dict[str, Any]:
    """Path -> value of the settings of the model's torch.nn modules (stride, num_groups, eps, ...): what a
    dispatch-level trace takes as constants."""
    found = {}
    for prefix, module in model.named_modules():
        if not type(module).__module__.startswith("torch.nn"):
            continue
        for name, value in vars(module).items():
            if name.startswith("_") or name == "training" or name in SIZE_SETTINGS:
                continue
            if type(value) in (int, float, bool, str) or isinstance(value, tuple) and \
                    all(type(v) in (int, float) for v in value):
                found[f"{prefix}.{name}" if prefix else name] = value
    return found


def baked(model: torch.nn.Module, numbers: dict[str, tuple[torch.nn.Module, str]]) -> dict[str, Any]:
    """Path -> value of the numbers a trace took as constants: those the methods of their module's class read
    (every one of a class whose source cannot be read)."""
    reads: dict[type, set[str] | None] = {}
    found = {}
    for path, (module, name) in numbers.items():
        cls = type(module)
        if cls not in reads:
            reads[cls] = _read_by_methods(cls)
        if reads[cls] is None or name in reads[cls]:
            found[path] = getattr(module, name)
    return found


def _read_by_methods(cls: type) -> set[str] | None:
    """The `self.<name>` a class's methods other than __init__ read; None where its source is not available."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return None
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":
            names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                      and n.value.id == "self" and isinstance(n.ctx, ast.Load)}
    return names
