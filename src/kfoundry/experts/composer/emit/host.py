"""The host side of the generated forward: variable names for values, shapes as Python expressions of the
forward's inputs and the module's numbers (so a candidate works at any size, not only the sample's), dtypes that
follow the evaluated precision, the code of host steps (views and sizes), which PyTorch's guard allows: no
compute, and the check that stops a call at sizes the kernels were built around (`_composed_for`)."""

from __future__ import annotations

import builtins
import keyword
import math
import re

import torch

from kfoundry.experts.composer.emit.expr import literal
from kfoundry.experts.composer.ir.builder import aligned, norm_dim, norm_dims
from kfoundry.experts.composer.ir.graph import CONST, INPUT, PARAM, SHAPE_QUERIES, SYM, Value, category
from kfoundry.experts.composer.plan.steps import HostStep, Plan

RESERVED = frozenset({"self", "torch", "triton", "tl", "nn", "math", "F", "grid", "ModelNew", "Model"}) | \
    frozenset(keyword.kwlist) | frozenset(dir(builtins))
# the spatial dims of a convolution's tensors, by their number
SPATIAL_WORDS = {1: ["length"], 2: ["height", "width"], 3: ["depth", "height", "width"]}
ROLE_WORDS = frozenset({"batch", "channels", "in_channels", "out_channels", "in_channels_per_group",
                        "out_channels_per_group"} | {f"{p}{w}" for p in ("", "in_", "kernel_")
                                                     for w in ("length", "depth", "height", "width")})
# a host number's op -> (the word between its operands' names, the noun naming it where those are too long)
NUMBER_OPS = {"sym_add": ("plus", "total"), "sym_sub": ("minus", "difference"), "sym_mul": ("times", "product"),
              "sym_floordiv": ("div", "quotient"), "sym_mod": ("mod", "remainder"), "sym_truediv": ("over", "ratio"),
              "sym_pow": ("pow", "power"), "sym_neg": ("", "negated")}
MAX_NUMBER_NAME = 40


def attribute_expr(root: str, path: str, model: torch.nn.Module | None, index: tuple[int, str] | None = None) -> str:
    """'layers.0.weight' -> 'self.layers[0].weight' (indexing where a container holds the part); `index`
    (position of a part, an expression) puts the expression in that part's place: 'self.layers[step].weight'."""
    expr = root
    current = model
    for position, part in enumerate(path.split(".")):
        container = current is not None and isinstance(current, (torch.nn.ModuleList, torch.nn.Sequential,
                                                                 torch.nn.ParameterList))
        if index is not None and index[0] == position:
            expr += f"[{index[1]}]"
        elif container and part.isdigit():
            expr += f"[{part}]"
        elif (current is not None and isinstance(current, (torch.nn.ModuleDict, torch.nn.ParameterDict))) \
                or not part.isidentifier() or keyword.iskeyword(part):
            expr += f"[{part!r}]"
        else:
            expr += f".{part}"
        current = getattr(current, part, None) if current is not None else None
    return expr


def product(exprs: list[str]) -> str:
    exprs = [e for e in exprs if e != "1"]
    if not exprs:
        return "1"
    return " * ".join(exprs) if len(exprs) == 1 else " * ".join(_paren(e) for e in exprs)


def _paren(expr: str) -> str:
    simple = expr.replace("_", "").replace(".", "").replace("[", "").replace("]", "").replace("(", "").replace(")", "")
    return expr if simple.isalnum() else f"({expr})"


def conv_size_expr(size: str, kernel: int, stride: int, padding: int, dilation: int, transposed: bool,
                   output_padding: int = 0) -> str:
    if transposed:
        extra = -2 * padding + dilation * (kernel - 1) + output_padding + 1
        base = f"({size} - 1) * {stride}" if stride != 1 else f"({size} - 1)"
        return f"{base} + {extra}" if extra else base
    span = 2 * padding - dilation * (kernel - 1) - 1
    inner = f"{size} + {span}" if span > 0 else (f"{size} - {-span}" if span < 0 else size)
    return f"({inner}) // {stride} + 1" if stride != 1 else f"{inner} + 1"


class HostContext:
    """Names, shapes and dtypes of a plan's values on the host."""

    def __init__(self, plan: Plan, model: torch.nn.Module | None = None) -> None:
        self.plan = plan
        self.model = model
        self.names: dict[Value, str] = {}
        self._taken: set[str] = set(RESERVED)
        self.allocated: set[Value] = set()
        # plan/conv_statistics.Statistics -> templates/moments.Partials: the partial moments a convolution's
        # kernel wrote, for the moments kernel after it
        self.partials: dict = {}
        # plan/window_store.Windows -> {"max" | "min" | "mean": the tensor a convolution's kernel wrote them to}
        self.windows: dict = {}
        self._formulas: dict[Value, list[str]] = {}
        # a part of a concatenation its kernel writes in place -> (the concatenation, the parts before it)
        self.placements: dict[Value, tuple[Value, list[Value]]] = {}
        for step in plan.steps:
            if isinstance(step, HostStep) and step.op.name == "cat":
                for k, part in enumerate(step.op.args):
                    self.placements[part] = (step.op.out, list(step.op.args[:k]))
        for value in plan.graph.inputs:
            self.names[value] = self.fresh(value.name)
        for value in plan.graph.params.values():
            self.names[value] = self.fresh(value.name)
        # a rolled loop (plan/rolling.py): stand-ins name the values they stand for; a carried state has the shape
        # of its first value; each step's value of a collected tensor is written into its slot
        self.aliases: dict[Value, Value] = {}
        self.same_shape: dict[Value, Value] = {}
        self.slots: dict[Value, tuple] = {}  # value -> (Slot, the step's index expression)
        self.collected: dict[Value, tuple] = {}  # a tensor a loop collects its steps' values in -> (Slot, Loop)
        for rolled in plan.loops:
            self.aliases.update(rolled.aliases)
            self.same_shape.update({c.state: c.init for c in rolled.loop.carries})
            self.collected.update({slot.collected: (slot, rolled.loop) for slot in rolled.loop.slots})

    def fresh(self, base: str) -> str:
        name = base if base.isidentifier() else "v"
        if name in self._taken:
            n = 2
            while f"{base}_{n}" in self._taken:
                n += 1
            name = f"{base}_{n}"
        self._taken.add(name)
        return name

    def name(self, value: Value) -> str:
        if value in self.aliases:
            return self.name(self.aliases[value])
        if value not in self.names:
            self.names[value] = self._described(value) or self.fresh(value.name)
        return self.names[value]

    # -- names of host numbers -----------------------------------------------------------------------
    def _described(self, value: Value) -> str | None:
        """A host number the tracer named after its op (`sym_size3`, `sym_mul2`) named after what it is: a
        tensor's size along a dim (`batch`, `height` of a convolution's output, else `add_dim0`), or the
        arithmetic of the numbers it is made of (`head_dim_times_3`); None for any other value."""
        op = value.producer
        if value.kind != SYM or op is None or not re.fullmatch(rf"{op.name}\d*", value.name):
            return None
        if op.name in SHAPE_QUERIES:
            tensor = op.args[0]
            if op.name == "sym_numel":
                return self.fresh(f"{self.name(tensor)}_numel")
            dim = norm_dim(op.attrs["dim"], tensor.rank)
            word = self._dim_words(tensor)[dim]
            if word in self._taken:  # a second tensor of that role or name: its own host name says which one
                word = f"{self.name(tensor)}_{word if word in ROLE_WORDS else f'dim{dim}'}"
            return self.fresh(word)
        if op.name not in NUMBER_OPS:
            return None
        words = [self._number_word(a) for a in op.args]
        if op.name == "sym_neg":
            text = f"neg_{words[0]}"
        elif op.name == "sym_pow" and op.args[1] == 0.5:
            text = f"sqrt_{words[0]}"
        elif op.name == "sym_truediv" and op.args[0] == 1:
            text = f"inv_{words[1]}"
        else:
            if op.name in ("sym_add", "sym_mul") and not isinstance(op.args[0], Value):
                words.reverse()  # 4 * width: width_times_4
            text = f"_{NUMBER_OPS[op.name][0]}_".join(words)
        fits = text.isidentifier() and len(text) <= MAX_NUMBER_NAME
        return self.fresh(text if fits else NUMBER_OPS[op.name][1])

    def _number_word(self, arg) -> str:
        if isinstance(arg, Value):
            return self.name(arg)
        if isinstance(arg, float) and arg.is_integer():
            arg = int(arg)
        text = str(arg).replace("-", "neg").replace(".", "_")
        return text if text.replace("_", "").isalnum() else "n"

    def _dim_words(self, tensor: Value) -> list[str]:
        """A word for each dim of a tensor: its role's where it is a convolution's output (or a pointwise result
        of the same shape), input or weight, else `<tensor>_dim<i>`."""
        source = tensor
        while source.producer is not None and category(source.producer.name) == "pointwise":
            same = [a for a in source.producer.tensor_args if a.shape == source.shape]
            if not same:
                break
            source = same[0]
        spatial = SPATIAL_WORDS.get(tensor.rank - 2)
        if spatial is not None:
            if source.producer is not None and source.producer.name == "conv":
                return ["batch", "channels", *spatial]
            for op in self.plan.graph.ops:
                if op.name == "conv" and op.args[0] is tensor:
                    return ["batch", "in_channels", *(f"in_{w}" for w in spatial)]
                if op.name == "conv" and op.args[1] is tensor:
                    channels = ["in_channels", "out_channels_per_group"] if op.attrs["transposed"] else \
                        ["out_channels", "in_channels_per_group"]
                    return channels + [f"kernel_{w}" for w in spatial]
        # a parameter by its own name (`in_proj_weight`), not its whole path's
        base = tensor.path.rsplit(".", 1)[-1] if tensor.kind == PARAM and tensor.path else self.name(tensor)
        return [f"{base}_dim{d}" for d in range(tensor.rank)]

    # -- dtypes and device ---------------------------------------------------------------------------
    def reference_tensor(self, floating: bool = True) -> str:
        for value in list(self.plan.graph.inputs) + list(self.plan.graph.params.values()):
            if value.is_tensor and (value.is_float and not value.fixed_dtype or not floating):
                return self.name(value)
        for value in list(self.plan.graph.inputs) + list(self.plan.graph.params.values()):
            if value.is_tensor:
                return self.name(value)
        return ""

    def dtype(self, value: Value) -> str:
        if value.fixed_dtype or not value.is_float:
            return f"torch.{str(value.dtype).removeprefix('torch.')}"
        ref = self.reference_tensor()
        return f"{ref}.dtype" if ref else "torch.float32"

    def device(self) -> str:
        ref = self.reference_tensor(floating=False)
        return f"{ref}.device" if ref else '"cpu"'

    # -- shapes --------------------------------------------------------------------------------------
    def shape(self, value: Value) -> list[str]:
        """Per-dim size expressions, from the tensor itself once it exists on the host."""
        if value in self.allocated or value.kind in (INPUT, PARAM) or (
                value.producer is not None and category(value.producer.name) == "view"):
            name = self.name(value)
            return [f"{name}.shape[{i}]" for i in range(value.rank)]
        return self.formula(value)

    def shape_tuple(self, value: Value) -> str:
        dims = self.shape(value)
        if value.kind in (INPUT, PARAM) or value in self.allocated:
            return f"{self.name(value)}.shape"
        for other, name in self.names.items():  # the same shape as an existing tensor: say so
            if dims and other.rank == len(dims) and dims == [f"{name}.shape[{i}]" for i in range(len(dims))]:
                return f"{name}.shape"
        return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"

    def size(self, arg) -> str:
        if isinstance(arg, Value):
            return self.name(arg) if arg.kind == SYM else str(arg.concrete)
        return str(arg)

    def formula(self, value: Value) -> list[str]:
        """Per-dim size expressions in terms of the forward's inputs and parameters only."""
        if value not in self._formulas:
            self._formulas[value] = self._formula(value)
        return list(self._formulas[value])

    def _formula(self, value: Value) -> list[str]:
        if value in self.aliases:
            return self.formula(self.aliases[value])
        if value in self.same_shape:
            return self.formula(self.same_shape[value])
        if value in self.collected:
            slot, loop = self.collected[value]
            return self._collected_formula(slot, self.trip(loop))
        if value.kind in (INPUT, PARAM):
            name = self.name(value)
            return [f"{name}.shape[{i}]" for i in range(value.rank)]
        op = value.producer
        kind = category(op.name)
        if op.name == "full":
            return [self.size(s) for s in op.attrs["sizes"]]
        if kind == "layout":
            return self._layout_formula(op)
        if kind == "pointwise":
            dims = ["1"] * value.rank
            for arg in op.tensor_args:
                for i, j in enumerate(aligned(arg.rank, value.rank)):
                    if arg.shape[i] != 1 and dims[j] == "1":
                        dims[j] = self.formula(arg)[i]
            return dims
        x = op.args[0]
        xs = self.formula(x) if isinstance(x, Value) and x.is_tensor else []
        if kind == "scan":
            return xs
        if kind == "recurrent":
            return ["2" if op.attrs["kind"] == "LSTM" else "1"] + xs[:-1] + [self.formula(op.args[1])[1]]
        if kind == "reduction":
            dims = (op.attrs["dim"],) if op.name in ("argmax", "argmin") else op.attrs["dims"]
            dims = norm_dims(dims, x.rank)
            if op.attrs.get("keepdim"):
                return ["1" if i in dims else s for i, s in enumerate(xs)]
            return [s for i, s in enumerate(xs) if i not in dims]
        if op.name == "matmul":
            a, b = op.args
            fa, fb = self.formula(a), self.formula(b)
            batch = ["1"] * (value.rank - 2)
            for arg, f in ((a, fa), (b, fb)):
                for i, j in enumerate(aligned(arg.rank - 2, value.rank - 2)):
                    if arg.shape[i] != 1 and batch[j] == "1":
                        batch[j] = f[i]
            return batch + [fa[-2], fb[-1]]
        if op.name == "conv":
            fw = self.formula(op.args[1])
            a = op.attrs
            channels = f"{fw[1]} * {self.size(a['groups'])}" if a["transposed"] else fw[0]
            if a["transposed"] and a["groups"] == 1:
                channels = fw[1]
            spatial = [conv_size_expr(xs[2 + i], op.args[1].shape[2 + i], a["stride"][i], a["padding"][i],
                                      a["dilation"][i], a["transposed"], a["output_padding"][i])
                       for i in range(len(a["stride"]))]
            return [xs[0], channels] + spatial
        if op.name in ("adaptive_avg_pool", "adaptive_max_pool"):
            nd = len(op.attrs["output_size"])
            return xs[:x.rank - nd] + [self.size(s) for s in op.attrs["output_size"]]
        if kind == "pool":
            a = op.attrs
            nd = len(a["kernel"])
            dilation = a.get("dilation", (1,) * nd)
            spatial = [f"_pool_out_size({xs[x.rank - nd + i]}, {a['kernel'][i]}, {a['stride'][i]}, {a['padding'][i]}, "
                       f"{dilation[i]}, {a['ceil_mode']})" for i in range(nd)]
            return xs[:x.rank - nd] + spatial
        return self._view_formula(op, x, xs)

    # -- rolled loops --------------------------------------------------------------------------------
    def trip(self, loop) -> str:
        """How many steps the loop runs: the size of the input dim it walks, or the traced count."""
        if loop.along is None:
            return str(loop.count)
        x, dim = loop.along
        return self.formula(x)[dim]

    def step_expr(self, start: int, stride: int, step: str, loop) -> str:
        if (start, stride) == (0, 1):
            return step
        if loop.along is not None and (start, stride) == (loop.count - 1, -1):
            return f"{_paren(self.trip(loop))} - 1 - {step}"
        return f"{start} + {stride} * {step}" if start else f"{stride} * {step}"

    def slot_line(self, value: Value) -> str:
        """`value` made as its step's slice of the tensor the loop collects it in."""
        slot, index = self.slots[value]
        collected = self.name(slot.collected)
        if slot.stacked:
            return f"{self.name(value)} = {collected}.select({slot.dim}, {index})"
        length = self.formula(value)[slot.dim]
        return f"{self.name(value)} = {collected}.narrow({slot.dim}, {_paren(index)} * {_paren(length)}, {length})"

    def _collected_formula(self, slot, trip: str) -> list[str]:
        dims = self.formula(slot.value)
        if slot.stacked:
            return dims[:slot.dim] + [trip] + dims[slot.dim:]
        return dims[:slot.dim] + [product([trip, dims[slot.dim]])] + dims[slot.dim + 1:]

    def _layout_formula(self, op) -> list[str]:
        xs = self.formula(op.args[0])
        if op.name == "pad":
            for dim, before, after in op.attrs["moves"]:
                extra = before + after
                xs[dim] = xs[dim] if not extra else f"{xs[dim]} + {extra}" if extra > 0 else f"{xs[dim]} - {-extra}"
        elif op.name == "cat":
            dim = op.attrs["dim"]
            xs[dim] = " + ".join(_paren(self.formula(t)[dim]) for t in op.tensor_args)
        return xs

    def _view_formula(self, op, x: Value, xs: list[str]) -> list[str]:
        a = op.attrs
        if op.name == "reshape":
            sizes = [self.size(s) for s in a["sizes"]]
            if "-1" in sizes:
                known = [s for s in sizes if s != "-1"]
                whole = f"{self.name(x)}.numel()" if x.kind in (INPUT, PARAM) else product(xs)
                sizes[sizes.index("-1")] = f"{_paren(whole)} // {_paren(product(known))}" if known else whole
            return sizes
        if op.name == "expand":
            sizes = [self.size(s) for s in a["sizes"]]
            lead = len(sizes) - x.rank
            return [xs[i - lead] if s == "-1" else s for i, s in enumerate(sizes)]
        if op.name == "permute":
            return [xs[norm_dim(d, x.rank)] for d in a["dims"]]
        if op.name == "transpose":
            out = list(xs)
            d0, d1 = norm_dim(a["dim0"], x.rank), norm_dim(a["dim1"], x.rank)
            out[d0], out[d1] = out[d1], out[d0]
            return out
        if op.name == "unsqueeze":
            d = norm_dim(a["dim"], x.rank + 1)
            return xs[:d] + ["1"] + xs[d:]
        if op.name == "squeeze":
            dims = norm_dims(a["dims"], x.rank)
            return [s for i, s in enumerate(xs) if not (i in dims and x.shape[i] == 1)]
        if op.name == "flatten":
            s, e = a["start"], a["end"]
            return xs[:s] + [product(xs[s:e + 1])] + xs[e + 1:]
        if op.name == "slice":
            d = norm_dim(a["dim"], x.rank)
            bounds = ", ".join(self.size(a[k]) if a[k] is not None else "None" for k in ("start", "stop", "step"))
            length = f"len(range(*slice({bounds}).indices({xs[d]})))"
            return xs[:d] + [length] + xs[d + 1:]
        if op.name == "select":
            d = norm_dim(a["dim"], x.rank)
            return xs[:d] + xs[d + 1:]
        if op.name == "unfold":
            d = a["dim"]
            windows = f"({xs[d]} - {a['size']}) // {a['step']} + 1" if a["step"] != 1 else f"{xs[d]} - {a['size'] - 1}"
            return xs[:d] + [windows] + xs[d + 1:] + [str(a["size"])]
        raise KeyError(op.name)

    # -- host steps ----------------------------------------------------------------------------------
    def sym_line(self, op) -> str:
        return f"{self.name(op.out)} = {self.sym_expr(op)}"

    def sym_expr(self, op) -> str:
        a = op.args
        if op.name == "sym_size":
            return self.formula(a[0])[op.attrs["dim"]]
        if op.name == "sym_numel":
            return product(self.formula(a[0]))
        if op.name == "sym_attr":
            return attribute_expr("self", op.attrs["path"], self.model)
        operator = {"sym_add": "+", "sym_sub": "-", "sym_mul": "*", "sym_floordiv": "//", "sym_mod": "%",
                    "sym_truediv": "/", "sym_pow": "**"}
        if op.name == "sym_neg":
            return f"-{self.size(a[0])}"
        return f"{self.size(a[0])} {operator[op.name]} {self.size(a[1])}"

    def composed_for(self, assumed: list) -> str | None:
        """The call-time check that what the kernels were built around still holds: the host numbers `assumed`
        (ops computing them) and forward's arguments that are not tensors have their traced values, and the dims
        of size 1, which no kernel indexes, have size 1 (a size that happened to be 1 when composed)."""
        checks = [(self.sym_expr(op), self.name(op.out), op.out.concrete) for op in assumed]
        checks += [(self.name(v), self.name(v), v.concrete) for v in self.plan.graph.inputs
                   if v.kind == CONST and _plain(v.concrete)]
        checks += [(size, size, 1) for size in self.unit_dims() if size not in {what for what, _, _ in checks}]
        if not checks:
            return None
        return f"_composed_for({', '.join(f'({what!r}, {now}, {python_literal(then)})' for what, now, then in checks)})"

    def unit_dims(self) -> list[str]:
        """The size expressions, other than the literal 1, of the tensors' dims of size 1."""
        graph = self.plan.graph
        values = [v for v in graph.inputs if v.is_tensor] + [op.out for op in graph.ops if op.out.is_tensor]
        found = []
        for value in values:
            for size, formula in zip(value.shape, self.formula(value)):
                if size == 1 and formula != "1" and formula not in found:
                    found.append(formula)
        return found

    def _bound(self, value) -> str:
        """A slice bound on the host ('' where the slice leaves it out)."""
        return "" if value is None else self.size(value)

    def view_line(self, op) -> str:
        name = self.name(op.out)
        x = self.name(op.args[0])
        a = op.attrs
        if op.name == "reshape":
            return f"{name} = {x}.reshape({', '.join(self.size(s) for s in a['sizes'])})"
        if op.name == "expand":
            return f"{name} = {x}.expand({', '.join(self.size(s) for s in a['sizes'])})"
        if op.name == "permute":
            return f"{name} = {x}.permute({', '.join(str(d) for d in a['dims'])})"
        if op.name == "transpose":
            return f"{name} = {x}.transpose({a['dim0']}, {a['dim1']})"
        if op.name == "unsqueeze":
            return f"{name} = {x}.unsqueeze({a['dim']})"
        if op.name == "squeeze":
            dims = norm_dims(a["dims"], op.args[0].rank)
            dims = tuple(d for d in dims if op.args[0].shape[d] == 1)
            return f"{name} = {x}.squeeze({dims!r})" if dims else f"{name} = {x}"
        if op.name == "flatten":
            return f"{name} = {x}.flatten({a['start']}, {a['end']})"
        if op.name == "slice":
            d = norm_dim(a["dim"], op.args[0].rank)
            index = ", ".join([":"] * d + [":".join(self._bound(a[k]) for k in ("start", "stop", "step"))])
            return f"{name} = {x}[{index}]"
        if op.name == "select":
            return f"{name} = {x}.select({a['dim']}, {self.size(a['index'])})"
        if op.name == "unfold":
            return f"{name} = {x}.unfold({a['dim']}, {a['size']}, {a['step']})"
        raise KeyError(op.name)


POOL_OUT_SIZE_HELPER = '''def _pool_out_size(size, kernel, stride, padding, dilation, ceil_mode):
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1  # the last window must start inside the input or its left padding
    return out
'''


def python_literal(value) -> str:
    """A traced value as Python source (`float("inf")` for an infinity)."""
    if isinstance(value, (tuple, list)):
        inner = ", ".join(python_literal(v) for v in value) + ("," if len(value) == 1 and isinstance(value, tuple) else "")
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return literal(value) if isinstance(value, float) else repr(value)


def _plain(value) -> bool:
    """A value its repr writes back as Python source: a number, a string, None, or a tuple or list of them."""
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


COMPOSED_FOR_HELPER = '''def _composed_for(*checks):
    """Stops a call at sizes the kernels were not built for: checks are (what, its value now, its value then)."""
    wrong = [f"{what} = {now!r} (composed for {then!r})" for what, now, then in checks if now != then]
    if wrong:
        raise ValueError("this candidate only supports the sizes it was composed for: " + ", ".join(wrong))
'''


def is_const(value) -> bool:
    return isinstance(value, Value) and value.kind == CONST


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
