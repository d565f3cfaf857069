"""Assembling a candidate file from a plan: imports, helper functions, one kernel per group, and ModelNew
(the reference's constructor, a forward made of views, allocations and kernel launches only)."""

from __future__ import annotations

import torch

from kfoundry.experts.composer.emit import expr
from kfoundry.experts.composer.emit.dedup import canonical
from kfoundry.experts.composer.emit.host import (
    COMPOSED_FOR_HELPER,
    POOL_OUT_SIZE_HELPER,
    HostContext,
    python_literal,
    attribute_expr,
)
from kfoundry.experts.composer.emit.graphed import CUDA_GRAPHED_HELPER, graphed_methods
from kfoundry.experts.composer.emit.hoist import hoist
from kfoundry.experts.composer.emit.kernel import KernelCode, allocate, wrap_call
from kfoundry.experts.composer.ir.graph import SYM, Value, category
from kfoundry.experts.composer.plan.steps import Group, HostStep, Plan
from kfoundry.experts.composer.plan.rolling import LoopEnd, LoopStart, Rolled
from kfoundry.experts.composer.read.model_init import InitParts
from kfoundry.experts.composer.templates import conv, gemm, moments, pointwise, pool, recurrent, reduction, scan

TEMPLATES = {
    "pointwise": pointwise.pointwise_kernel,
    "row": reduction.row_kernel,
    "gemm": gemm.gemm_kernel,
    "conv": conv.conv_kernel,
    "moments": moments.moments_kernel,
    "pool": pool.pool_kernel,
    "scan": scan.scan_kernel,
    "recurrent": recurrent.recurrent_kernel,
}
BASE_IMPORTS = ["import torch", "import torch.nn as nn", "import triton", "import triton.language as tl"]
INDENT = "        "


def kernel_for(group: Group, host: HostContext, config: dict) -> KernelCode:
    return TEMPLATES[group.kind](group, host, config)


class ForwardWriter:
    def __init__(self, plan: Plan, host: HostContext) -> None:
        self.plan = plan
        self.host = host
        self.lines: list[str] = []
        self.emitted: set[Value] = set()
        self.loop_from: int | None = None  # the first line of a loop's body
        self.step = ""  # the loop's variable

    def open_loop(self, rolled: Rolled, model: torch.nn.Module | None) -> None:
        """The lines before a rolled loop (its states, the tensors it collects into) and its header."""
        host, loop = self.host, rolled.loop
        for value in rolled.before.outputs + [c.init for c in loop.carries]:
            self.ensure(value)
        self.lines.append(f"{INDENT}# one body the trace repeated, as a loop")
        for carry in loop.carries:
            self.lines.append(f"{INDENT}{host.name(carry.state)} = {host.name(carry.init)}")
        self.lines.extend(allocate(host, [slot.collected for slot in loop.slots], INDENT))
        step = self.step = host.fresh("step")
        self.lines.append(f"{INDENT}for {step} in range({host.trip(loop)}):")
        self.loop_from = len(self.lines)
        for index in loop.indices:
            expr = host.step_expr(index.start, index.stride, step, loop)
            if expr == step:
                host.names[index.value] = step
            else:
                self.lines.append(f"{INDENT}{host.name(index.value)} = {expr}")
        for layer in loop.layer_params + loop.layer_numbers:
            path = layer.value.path if layer.value.kind != SYM else layer.value.producer.attrs["path"]
            expr = attribute_expr("self", path, model, (layer.part, host.step_expr(layer.start, layer.stride, step,
                                                                                    loop)))
            self.lines.append(f"{INDENT}{host.name(layer.value)} = {expr}")
            if layer.value.assumed:  # a number the kernels were built around: each layer's must be the same
                self.lines.append(f"{INDENT}_composed_for(({expr!r}, {host.name(layer.value)}, "
                                  f"{python_literal(layer.value.concrete)}))")
        for slot in loop.slots:
            index = host.step_expr(loop.count - 1, -1, step, loop) if slot.reverse else step
            host.slots[slot.value] = (slot, index)

    def close_loop(self, rolled: Rolled) -> None:
        """The end of the loop's body: what the next step starts from; the body indented under its header."""
        for value in rolled.body.outputs:
            self.ensure(value)
        for carry in rolled.loop.carries:
            self.lines.append(f"{INDENT}{self.host.name(carry.state)} = {self.host.name(carry.next)}")
        written = {self.host.name(slot.collected) for slot in rolled.loop.slots}
        moved, kept = hoist(self.lines[self.loop_from:], self.step, written)
        header = self.lines[self.loop_from - 1]
        self.lines[self.loop_from - 1:] = moved + [header] + ["\n".join("    " + part for part in line.split("\n"))
                                                            for line in kept]
        self.loop_from = None

    def ensure(self, value: Value) -> None:
        """Emit the host view that produces `value` (and the views it stands on) if not done yet."""
        op = value.producer
        if op is None or value in self.emitted or category(op.name) != "view":
            return
        self.ensure(op.args[0])
        self.lines.append(INDENT + self.host.view_line(op))
        self.emitted.add(value)

    def group_inputs(self, group: Group) -> list[Value]:
        values = [v for v, _ in group.leaves()]
        if group.prologue is not None:
            values += [v for v, _ in group.prologue.leaves()]
        if group.kind == "moments":  # it reads the partial moments the convolution wrote, not the norm's input
            return []
        if group.windows is not None and group.kind == "pool":  # it reads the stored windows, not its input
            return values + [v for link in group.windows.chain for v, _ in link.group.leaves() if v is not link.entry]
        if group.anchor is not None:
            values += [a for a in group.anchor.args if isinstance(a, Value) and a.is_tensor]
        return values


def generate(plan: Plan, init: InitParts, configs: dict[str, dict], model: torch.nn.Module | None = None,
             title: str = "", graphed: bool = False, launches: dict[str, str] | None = None) -> str:
    """The source of a complete candidate file for one choice of tile configuration per group; `graphed`: its
    forward replays the kernels from a CUDA graph (emit/graphed.py). `launches`, when given, is filled with the
    name of the kernel function each group launches (groups whose kernels are the same launch one function)."""
    host = HostContext(plan, model)
    for value in plan.graph.inputs:
        if value.index is not None and value.index < len(init.forward_args):
            host.names[value] = init.forward_args[value.index]
            host._taken.add(value.name)
    writer = ForwardWriter(plan, host)
    used_params = {v for op in plan.graph.ops for v in op.inputs if v.kind == "param"} | \
        {v for v in plan.graph.outputs if v.kind == "param"}
    for path, value in plan.graph.params.items():
        if value in used_params:
            writer.lines.append(f"{INDENT}{host.name(value)} = {attribute_expr('self', path, model)}")
    # a rolled loop's first layer is read here too, and each layer again in the loop (the sizes are all the same)
    syms = [step.op for step in plan.steps if isinstance(step, HostStep) and step.op.out.kind == SYM]
    writer.lines.extend(INDENT + host.sym_line(op) for op in syms)
    check = host.composed_for([op for op in syms if op.out.assumed])
    if check:
        writer.lines.append(wrap_call(INDENT + check))
    kernels: list[KernelCode] = []
    first_of: dict[str, KernelCode] = {}  # canonical source -> the kernel first emitted with it
    for step in plan.steps:
        if isinstance(step, HostStep):
            continue
        if isinstance(step, LoopStart):
            writer.open_loop(step.rolled, model)
            continue
        if isinstance(step, LoopEnd):
            writer.close_loop(step.rolled)
            continue
        for value in writer.group_inputs(step):
            writer.ensure(value)
        code = kernel_for(step, host, configs[step.name])
        same = first_of.setdefault(canonical(code.source, code.name), code)
        host_lines = code.host_lines
        if same is code:
            kernels.append(code)
        else:  # launch the kernel already written
            host_lines = [line.replace(f"{code.name}[", f"{same.name}[") for line in host_lines]
        if launches is not None:
            launches[step.name] = same.name
        writer.lines.append(f"{INDENT}# {_summary(step)}")
        writer.lines.extend(host_lines)
    for value in plan.graph.outputs:
        writer.ensure(value)
    names = [host.name(v) for v in plan.graph.outputs]
    if plan.graph.output_kind == "tensor":
        writer.lines.append(f"{INDENT}return {names[0]}")
    elif plan.graph.output_kind == "list":
        writer.lines.append(f"{INDENT}return [{', '.join(names)}]")
    else:
        writer.lines.append(f"{INDENT}return ({', '.join(names)}{',' if len(names) == 1 else ''})")
    helpers = set().union(*(k.helpers for k in kernels)) if kernels else set()
    body = "\n".join(writer.lines)
    parts = [f'"""{title}"""' if title else None]
    imports = list(BASE_IMPORTS) + [i for i in init.imports if i not in BASE_IMPORTS]
    parts.append("\n".join(dict.fromkeys(imports)))
    parts.extend(init.definitions)
    parts.extend(expr.HELPERS[name] for name in sorted(helpers))
    if "_pool_out_size(" in body:
        parts.append(POOL_OUT_SIZE_HELPER)
    if "_composed_for(" in body:
        parts.append(COMPOSED_FOR_HELPER)
    if graphed:
        parts.append(CUDA_GRAPHED_HELPER)
    parts.extend(k.source for k in kernels)
    cls = [f"class ModelNew({init.bases}):"]
    cls.extend(init.class_body or ["    def __init__(self):\n        super().__init__()"])
    if graphed:
        cls.extend(graphed_methods(init.forward_signature, init.forward_args, body))
    else:
        cls.append(f"    def forward({init.forward_signature}):\n{body}")
    parts.append("\n\n".join(cls))
    return "\n\n\n".join(p.rstrip("\n") for p in parts if p) + "\n"


def _summary(group: Group) -> str:
    before = [op.name for op in group.prologue.ops] if group.prologue else []
    ops = before + ([group.anchor.name] if group.anchor else []) + [op.name for op in group.ops]
    shown = ", ".join(ops[:8]) + (f", ... ({len(ops)} ops)" if len(ops) > 8 else "")
    return f"{group.kind} kernel: {shown}"
