"""A plan's steps, as the planner (plan/fusion.py) makes them and the emitters and templates read them: groups (a
kernel each, over an index space, with the map of every value it computes and the values it exports), host steps
(views, sizes), the plan of them over a graph, and the names and descriptions of its kernels."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kfoundry.experts.composer.ir.graph import LAYOUTS, Graph, Op, Value

Map = tuple  # tuple[int | None, ...]
KERNEL_WORDS = 32  # the most characters of the words naming a kernel (kernel_words)


@dataclass(eq=False)
class Group:
    kind: str
    index: int
    space: tuple[int, ...]
    reduced: tuple[int, ...] = ()
    anchor: Op | None = None
    ops: list[Op] = field(default_factory=list)
    vmap: dict[Value, Map] = field(default_factory=dict)  # values computed here -> their map
    leaf_maps: dict[tuple[int, int], Map] = field(default_factory=dict)  # (op id, arg position) -> map of a leaf
    exports: list[Value] = field(default_factory=list)
    name: str = ""  # kind and place (conv_0): the key of its tile configuration
    kernel: str = ""  # its kernel's name in the candidate, which says what it does (_conv2d_group_norm_stats_0_kernel)
    prologue: Group | None = None  # a pointwise group computed on the anchor's input as it is read (pool, scan)
    shaped: Value | None = None  # a value whose shape is the space (at every size)
    # a conv's: plan/conv_statistics.Statistics, the norm's moments its epilogue gathers (Any: that module
    # builds on this one)
    statistics: Any = None
    # a conv's and the pooling's after it: plan/window_store.Windows, the conv storing each pooling window's
    # extrema (or mean) and the pooling applying the ops between them to those
    windows: Any = None

    @property
    def moves(self) -> bool:
        """The kernel reads some tensor at moved coordinates (a flip, roll, pad or cat): only pointwise ops join it."""
        return any(op.name in LAYOUTS for op in self.ops)

    @property
    def outer(self) -> tuple[int, ...]:
        return tuple(d for d in range(len(self.space)) if d not in self.reduced)

    def leaf_map(self, op: Op, position: int) -> Map:
        return self.leaf_maps[(id(op), position)]

    def leaves(self) -> list[tuple[Value, Map]]:
        """(value, map) of every tensor read from memory by the group's fused ops (not the anchor's operands)."""
        seen: dict[tuple[int, Map], tuple[Value, Map]] = {}
        for op in self.ops:
            for position, arg in enumerate(op.args):
                if isinstance(arg, Value) and arg.is_tensor and arg not in self.vmap:
                    m = self.leaf_map(op, position)
                    seen.setdefault((id(arg), m), (arg, m))
        return list(seen.values())


@dataclass(eq=False)
class HostStep:
    op: Op
    index: int


@dataclass
class Plan:
    graph: Graph
    steps: list  # Groups and HostSteps; a rolled loop's between a LoopStart and a LoopEnd (plan/rolling.py)
    loops: list[Any] = field(default_factory=list)  # plan/rolling.Rolled: how the graph was cut around each loop

    @property
    def groups(self) -> list[Group]:
        return [s for s in self.steps if isinstance(s, Group)]

    def describe(self) -> str:
        lines = []
        for step in self.steps:
            if isinstance(step, HostStep):
                lines.append(f"host: {step.op!r}")
            elif not isinstance(step, Group):
                lines.append(type(step).__name__)
            else:
                ops = ", ".join(op.name for op in ([step.anchor] if step.anchor else []) + step.ops)
                lines.append(f"{step.kind} {step.name} space={list(step.space)} reduced={list(step.reduced)}: {ops}; "
                             f"exports {step.exports}")
        return "\n".join(lines)


def name_groups(steps: list) -> None:
    """Each group named after its kind and its place among that kind's groups (gemm_0, pointwise_2, ...), and its
    kernel after what it does and that place (_gemm_linear_gelu_0_kernel)."""
    counts: dict[str, int] = {}
    kernels: set[str] = set()
    for group in (s for s in steps if isinstance(s, Group)):
        counts[group.kind] = counts.get(group.kind, 0) + 1
        group.name = f"{group.kind}_{counts[group.kind] - 1}"
        kernel = f"_{kernel_words(group)}_{counts[group.kind] - 1}_kernel"
        group.kernel = kernel if kernel not in kernels else f"_{group.name}_kernel"
        kernels.add(group.kernel)


def kernel_name(group: Group) -> str:
    return group.kernel or f"_{group.name}_kernel"


def kernel_words(group: Group) -> str:
    """What a group's kernel does, in a few words: its kind (or its anchor's op, where that names the kind:
    `conv2d`, `max_pool2d`), then the ops the traced program ran that it computes, in order, and what it gathers
    for the kernels after it; at most KERNEL_WORDS characters."""
    anchor = origin_word(group.anchor.origin) if group.anchor is not None else ""
    words = [anchor if group.kind in anchor else group.kind]
    ops = [op for link in group.windows.chain for op in link.group.ops] \
        if group.windows is not None and group.kind == "pool" else []  # applied to the stored windows
    ops += (group.prologue.ops if group.prologue is not None else []) + \
        ([group.anchor] if group.anchor is not None else []) + group.ops
    found = [origin_word(op.origin) for op in ops]
    if group.statistics is not None:
        found.append(f"{origin_word(group.statistics.mean.origin) or 'norm'}_stats")
    if group.windows is not None and group.kind == "conv":
        found.append(f"{origin_word(group.windows.pool.origin) or 'pool'}_windows")
    for word in found:
        if not word or word in words or word in words[0]:
            continue
        if len("_".join(words + [word])) > KERNEL_WORDS:
            break
        words.append(word)
    return "_".join(words)


def origin_word(origin: str) -> str:
    """The op a traced node ran as one lowercase word: 'nn.GroupNorm' -> 'group_norm', 'F.layer_norm' ->
    'layer_norm', 'aten._softmax' -> 'softmax'; '' where the origin names no op (an attribute, a copy)."""
    if "." not in origin:
        return ""
    word = re.sub(r"(?<=[a-z0-9])(?=[A-Z][a-z])", "_", origin.rsplit(".", 1)[1]).lower()  # ReLU: relu
    word = re.sub(r"[^a-z0-9]+", "_", word).strip("_").removeprefix("native_")
    return "div" if word == "truediv" else word


def renumbered(plan: Plan, steps: list) -> Plan:
    """A plan of `plan`'s graph made of `steps` (rewritten copies of its own), each numbered by its place and its
    groups named again."""
    for index, step in enumerate(steps):
        step.index = index
    name_groups(steps)
    return Plan(plan.graph, steps, plan.loops)


def describe_groups(groups: list[Group]) -> str:
    parts = []
    for g in groups:
        ops = [op.name for op in g.ops]
        if g.kind == "recurrent":
            a = g.anchor.attrs
            text = f"{a['kind'].split('_')[0]} layer ({g.anchor.args[0].shape[a['time']]} steps)"
        elif g.kind in ("gemm", "conv", "pool", "scan"):
            flags = [flag for flag in ("reversed", "exclusive") if g.anchor.attrs.get(flag.removesuffix("d"))]
            text = " ".join(flags + [g.anchor.name]) + (f" with {', '.join(ops)} fused" if ops else "")
            if g.prologue is not None:
                text = f"{', '.join(op.name for op in g.prologue.ops)} fused into " + text
            if g.statistics is not None:
                text += " gathering the norm's moments"
            if g.windows is not None and g.kind == "conv":
                text += f" storing each {g.windows.pool.name} window's {' and '.join(g.windows.kinds)}"
            elif g.windows is not None:
                between = [op.name for link in g.windows.chain for op in link.group.ops]
                text = f"{g.anchor.name} of the stored windows" + \
                    (f" after {', '.join(dict.fromkeys(between))}" if between else "") + \
                    (f" with {', '.join(ops)} fused" if ops else "")
        elif g.kind == "moments":
            text = "moments kernel (" + ", ".join(op.out.name for op in [g.anchor, *g.statistics.variances]) + ")"
        elif g.kind == "row":
            text = f"row kernel ({', '.join(dict.fromkeys(ops))})"
        else:
            text = f"pointwise kernel ({', '.join(dict.fromkeys(ops))})"
        parts.append(text)
    return "; ".join(parts)
