"""Writing one Triton kernel: its parameters (each with the host expression that feeds it), its body, its launch;
and what every template shares: index spaces, loads and stores of tensors through their maps, and the fused
pointwise ops of a group as Triton statements."""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from kfoundry.experts.composer.emit import expr
from kfoundry.experts.composer.emit.host import HostContext, product
from kfoundry.experts.composer.ir.graph import CONST, LAYOUTS, SYM, VIEWS as VIEW_NAMES, Op, Value, moved_dims
from kfoundry.experts.composer.plan.steps import Group, Map

KERNEL_RESERVED = frozenset({
    "pid", "offs", "mask", "rows", "cols", "row_ok", "col_ok", "rm", "rn", "rk", "m_ok", "n_ok", "acc", "tl",
    "oc", "ci", "k_total", "base", "v", "m_in", "n_in", "k_in", "num_m", "num_n", "tiles_in_group", "first_m",
    "rows_in_group", "k_stop",
    "triton", "c0", "kk", "k0", "a", "b", "rem", "pid_m", "pid_n", "pid_b", "pid_g", "float", "int", "range",
    # the GEMM template's split loop writes these literally: a value named so would rebind a kernel parameter
    # (tests/experts/composer/emit/test_kernel.py checks every composed kernel)
    "a_lo", "b_lo", "acc_hi", "acc_lo", "k_chunk", "row_inv", "col_inv",
    # and its split-K loop
    "k_span", "k_begin", "k_end", "part", "part_tile", "tile_ok", "a_desc", "b_desc", "a_lo_desc", "b_lo_desc",
})


@dataclass
class Param:
    name: str
    host: str  # the host expression passed for it
    constexpr: bool = False


@dataclass
class Space:
    """How a kernel indexes its group's space: one coordinate per (merged) dim and the mask of each."""

    dims: list[list[int]]  # each entry: the space dims merged into one coordinate, outer to inner
    coords: list[str]  # coordinate expression per entry
    masks: list[str | None]  # mask expression per entry (None: always in range)
    axes: list[str | None] = field(default_factory=list)  # the block axis each coordinate runs along
    # per block axis: a zero offset of that axis' shape, and its mask (a store of a value that spans an axis
    # its tensor does not run along: every lane of that axis writes the same element, the masked ones not)
    zeros: dict[str, str] = field(default_factory=dict)
    axis_masks: dict[str, str] = field(default_factory=dict)
    # entries whose strides are read as multiples of a constexpr (entry -> its name) by the tensors that also run
    # along the last (innermost) entry: (stride // Q) * Q, equal to the stride where the host passes Q = 4 only if
    # every such stride divides by 4 (else 1), tells Triton the offsets divide by 4 elements so that it may load
    # 16 bytes at a time; `quantized` gathers those strides' host expressions for the host's test
    quantum: dict[int, str] = field(default_factory=dict)
    quantized: list[str] = field(default_factory=list)

    def axis(self, entry: int) -> str | None:
        return self.axes[entry] if entry < len(self.axes) else None

    def entry_of(self, space_dim: int) -> int:
        for i, group in enumerate(self.dims):
            if space_dim in group:
                return i
        raise KeyError(space_dim)


@dataclass
class KernelWriter:
    name: str
    params: list[Param] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    helpers: set[str] = field(default_factory=set)
    _taken: set[str] = field(default_factory=lambda: set(KERNEL_RESERVED))
    _by_host: dict[tuple[str, bool], str] = field(default_factory=dict)
    indent: int = 1
    prelude: list[str] = field(default_factory=list)  # host lines the launch needs first
    host_locals: dict[str, str] = field(default_factory=dict)  # host expression -> local holding it

    def arg(self, base: str, host: str, constexpr: bool = False) -> str:
        """A kernel parameter fed by `host` (one parameter per distinct host expression)."""
        key = (host, constexpr)
        if key in self._by_host:
            return self._by_host[key]
        name = self.local(base)
        self.params.append(Param(name, host, constexpr))
        self._by_host[key] = name
        return name

    def constexpr(self, name: str, host: str) -> str:
        self._taken.add(name)
        self.params.append(Param(name, host, True))
        return name

    def local(self, base: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in base) or "v"
        if base[0].isdigit():
            base = "v" + base
        name, n = base, 2
        while name in self._taken:
            name, n = f"{base}_{n}", n + 1
        self._taken.add(name)
        return name

    def line(self, text: str = "") -> None:
        self.lines.append(wrap_call(("    " * self.indent + text) if text else ""))

    def source(self) -> str:
        plain = [p.name for p in self.params if not p.constexpr]
        consts = [f"{p.name}: tl.constexpr" for p in self.params if p.constexpr]
        signature = _wrap(plain + consts, f"def {self.name}(", 4 + len(self.name) + 1)
        return "@triton.jit\n" + signature + ":\n" + "\n".join(self.lines) + "\n"

    def launch(self, grid: str, options: dict[str, str] | None = None, indent: str = "        ",
               with_prelude: bool = True, constants: dict[str, str] | None = None) -> str:
        """The launch line, after the prelude's host lines unless the caller placed those itself; `constants`: host
        values of constexprs for this launch instead of their own (a kernel launched twice, in two phases)."""
        constants = constants or {}
        args = [p.host for p in self.params if not p.constexpr]
        args += [f"{p.name}={constants.get(p.name, p.host)}" for p in self.params if p.constexpr]
        args += [f"{k}={v}" for k, v in (options or {}).items()]
        launch = f"{indent}{self.name}[{grid}](\n" + _wrap(args, indent + "    ", len(indent) + 4)
        return "\n".join([indent + line for line in (self.prelude if with_prelude else [])] + [launch])


def rounded_down(expr: str, quantum: str = "ALIGN") -> str:
    """`expr` as a multiple of the constexpr `quantum` (Space.quantum): equal to it where the host set the quantum
    to a divisor of it, and then known to Triton to divide by it."""
    return f"({expr} // {quantum}) * {quantum}"


def whole_fours_test(kw: KernelWriter, align_host: str, extent_host: str, space: Space) -> None:
    """The host line that sets a kernel's ALIGN (Space.quantum) before its launch: 4 where `extent_host` (the
    innermost coordinate's extent) and every stride the kernel reads as a multiple of ALIGN divide by 4, else 1."""
    kw.helpers.add("_whole_fours")
    sizes = ", ".join([extent_host, *space.quantized])
    kw.prelude.extend(wrap_call(f"{align_host} = _whole_fours({sizes})", width=108).split("\n"))


def wrap_call(line: str, width: int = 116) -> str:
    """A long `... = f(a, b, c)` line broken after the top-level commas of its first call, the arguments
    lined up under its opening parenthesis."""
    if len(line) <= width or "(" not in line:
        return line
    start = line.index("(")
    depth, pieces, last = 0, [], start + 1
    for i in range(start, len(line)):
        c = line[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                pieces.append(line[last:i].strip())
                tail = line[i:]
                break
        elif c == "," and depth == 1:
            pieces.append(line[last:i].strip())
            last = i + 1
    else:
        return line
    hang = " " * (start + 1)
    out, current = [], line[:start + 1]
    for k, piece in enumerate(pieces):
        piece += "," if k < len(pieces) - 1 else ""
        if len(current) + len(piece) + 1 > width and current.strip() and not current.endswith("("):
            out.append(current.rstrip())
            current = hang + piece
        else:
            current += ("" if current.endswith("(") else " ") + piece
    out.append(current + tail)
    return "\n".join(out)


def _wrap(items: list[str], head: str, hang: int, width: int = 116) -> str:
    lines, current = [], head
    for i, item in enumerate(items):
        piece = item + (", " if i < len(items) - 1 else ")")
        if len(current) + len(piece) > width and current.strip() != head.strip():
            lines.append(current.rstrip())
            current = " " * hang
        current += piece
    if not items:
        current += ")"
    lines.append(current)
    return "\n".join(lines)


def mask_of(parts: list[str | None]) -> str | None:
    unique: list[str] = []
    for part in parts:
        for p in (part or "").split(" & "):
            if p and p not in unique:
                unique.append(p)
    return " & ".join(unique) if unique else None


class Access:
    """Loads and stores of tensors in a kernel over a space."""

    def __init__(self, kw: KernelWriter, host: HostContext, space: Space, contiguous: set[Value] | None = None):
        self.kw = kw
        self.host = host
        self.space = space
        self.contiguous = contiguous if contiguous is not None else set()

    def offset(self, value: Value, vmap: Map, host_name: str) -> tuple[str, str | None, frozenset]:
        """(offset expression, mask, block axes) of a tensor whose dim i runs along space dim vmap[i]."""
        terms, masks, axes = [], [], set()
        base = value.name
        along_last = bool(self.space.dims) and any(d in self.space.dims[-1] for d in vmap)
        for entry, dims in enumerate(self.space.dims):
            inside = [i for i, d in enumerate(vmap) if d in dims]
            if not inside:
                continue
            stride = self.kw.arg(f"{base}_s{inside[-1]}", f"{host_name}.stride({inside[-1]})")
            quantum = self.space.quantum.get(entry) if along_last else None
            if quantum:
                stride = f"({rounded_down(stride, quantum)})"
                if f"{host_name}.stride({inside[-1]})" not in self.space.quantized:
                    self.space.quantized.append(f"{host_name}.stride({inside[-1]})")
            terms.append(f"{self.space.coords[entry]} * {stride}")
            masks.append(self.space.masks[entry])
            if self.space.axis(entry):
                axes.add(self.space.axis(entry))
        return " + ".join(terms), mask_of(masks), frozenset(axes)

    def pointer(self, value: Value, vmap: Map) -> tuple[str, str]:
        host_name = self.host.name(value)
        if value in self.contiguous:
            expression = f"{host_name}.contiguous()"
            if expression not in self.kw.host_locals:
                local = self.host.fresh(f"{host_name}_c")
                self.kw.prelude.append(f"{local} = {expression}  # merged dims are read as one")
                self.kw.host_locals[expression] = local
            host_name = self.kw.host_locals[expression]
        return self.kw.arg(f"{value.name}_ptr", host_name), host_name

    def load(self, value: Value, vmap: Map, extra_mask: str | None = None, other: str = "0.0") -> tuple[str, frozenset]:
        """(variable, block axes it spans) of a tensor loaded through its map."""
        ptr, host_name = self.pointer(value, vmap)
        offset, mask, axes = self.offset(value, vmap, host_name)
        mask = mask_of([mask, extra_mask])
        var = self.kw.local(value.name)
        address = f"{ptr} + {offset}" if offset else ptr
        convert = ".to(tl.float32)" if value.is_float else ""
        if mask:
            self.kw.line(f"{var} = tl.load({address}, mask={mask}, other={other}){convert}")
        else:
            self.kw.line(f"{var} = tl.load({address}){convert}")
        return var, axes

    def store(self, value: Value, vmap: Map, var: str, extra_mask: str | None = None,
              span: frozenset = frozenset()) -> None:
        """Store `var` (spanning the block axes `span`) through the tensor's map."""
        ptr, host_name = self.pointer(value, vmap)
        offset, mask, axes = self.offset(value, vmap, host_name)
        missing = sorted(span - axes)
        terms = [offset] if offset else []
        terms += [self.space.zeros[a] for a in missing]
        mask = mask_of([mask, extra_mask] + [self.space.axis_masks.get(a) for a in missing])
        offset = " + ".join(terms)
        address = f"{ptr} + {offset}" if offset else ptr
        data = f"{var}.to({ptr}.dtype.element_ty)"
        self.kw.line(f"tl.store({address}, {data}, mask={mask})" if mask else f"tl.store({address}, {data})")


def neutral_of(reduction: str, is_float: bool) -> str:
    """The value masked lanes hold so that they do not change a reduction."""
    if reduction in ("amax", "argmax"):
        return '-float("inf")' if is_float else "-2147483648"
    if reduction in ("amin", "argmin"):
        return 'float("inf")' if is_float else "2147483647"
    return "0.0" if is_float else "0"


class Emitter:
    """The fused ops of a group as Triton statements; `env` holds the variable of each value computed."""

    def __init__(self, kw: KernelWriter, host: HostContext, group: Group, access: Access):
        self.kw = kw
        self.host = host
        self.group = group
        self.access = access
        self.env: dict[Value, str] = {}
        self.spans: dict[Value, frozenset] = {}  # the block axes each computed value spans
        self.loaded: dict[tuple[int, Map], tuple[str, frozenset]] = {}
        self.exprs: dict[str, str] = {}  # expression -> the variable holding it: nothing is computed twice

    def reset_loads(self) -> None:
        self.loaded = {}

    @contextmanager
    def scope(self):
        """Values computed inside (one block of a row, one gathered column) do not outlive it."""
        env, exprs = dict(self.env), dict(self.exprs)
        yield
        self.env, self.exprs = env, exprs
        self.reset_loads()

    def bind(self, value: Value, var: str, span) -> None:
        self.env[value] = var
        self.spans[value] = frozenset(span)

    def store(self, value: Value, vmap: Map, extra_mask: str | None = None, extra_span=()) -> None:
        span = self.spans.get(value, frozenset()) | frozenset(extra_span)
        self.access.store(value, vmap, self.env[value], extra_mask, span)

    def assign(self, value: Value, text: str, span=frozenset()) -> str:
        self.spans[value] = frozenset(span)
        if text in self.exprs:
            var = self.exprs[text]
        else:
            var = self.kw.local(value.name)
            self.kw.line(f"{var} = {text}")
            self.exprs[text] = var
        self.env[value] = var
        return var

    def operand(self, op: Op, position: int, want_float: bool) -> tuple[str, bool, frozenset]:
        """(expression, is a Python constant, block axes it spans) of op's argument."""
        arg = op.args[position]
        if isinstance(arg, Value):
            if arg.kind == SYM:
                return self.kw.arg(self.host.name(arg), self.host.name(arg)), False, frozenset()
            if arg.kind == CONST:
                return expr.literal(arg.concrete), True, frozenset()
            if arg in self.env:
                var, span = self.env[arg], self.spans.get(arg, frozenset())
            else:
                vmap = self.group.leaf_map(op, position)
                key = (id(arg), vmap)
                if key not in self.loaded:
                    self.loaded[key] = self.access.load(arg, vmap)
                var, span = self.loaded[key]
            if want_float and not arg.is_float:
                var = f"{var}.to(tl.float32)"
            return var, False, span
        if arg is None:
            return "None", True, frozenset()
        return expr.literal(arg), True, frozenset()

    def reduce(self, op: Op, mask: str, count: str, axis: str) -> str:
        """A reduction along axis 1 of a 2-D block (a row of the row template, the columns of a GEMM tile),
        the block axis named `axis`: lanes outside `mask` hold the reduction's neutral value; `count` is the
        number of reduced elements."""
        x, _, span = self.operand(op, 0, want_float=False)
        neutral = neutral_of(op.name, op.args[0].is_float)
        masked = f"tl.where({mask}, {x}, {neutral})"
        if op.name in ("sum", "mean"):
            text = f"tl.sum({masked}, axis=1, keep_dims=True)"
            if op.name == "mean":
                correction = op.attrs.get("correction", 0)
                text += f" / {count}" if not correction else f" / ({count} - {float(correction)!r})"
        elif op.name in ("amax", "amin"):
            text = f"tl.{'max' if op.name == 'amax' else 'min'}({masked}, axis=1, keep_dims=True)"
        else:
            text = f"tl.{op.name}({masked}, axis=1, keep_dims=True).to(tl.int64)"
        return self.assign(op.out, text, (span | {axis}) - {axis})

    def iota(self, op: Op) -> str:
        """Each element's index along a dim: the coordinate of the space dim it runs along (kept unmerged)."""
        space_dim = self.group.vmap[op.out][op.attrs["dim"]]
        if space_dim is None:
            return self.assign(op.out, "0")
        entry = self.access.space.entry_of(space_dim)
        if len(self.access.space.dims[entry]) != 1:
            raise ValueError("iota along a merged dim")
        axis = self.access.space.axis(entry)
        return self.assign(op.out, f"({self.access.space.coords[entry]})", {axis} if axis else ())

    def full(self, op: Op) -> str:
        value, dtype = op.attrs["value"], op.out.dtype
        if dtype == torch.bool:
            return self.assign(op.out, f"tl.full((1,), {expr.literal(bool(value))}, tl.int1)")
        if not dtype.is_floating_point:
            return self.assign(op.out, f"tl.full((1,), {expr.literal(int(value))}, tl.int64)")
        return self.assign(op.out, f"tl.full((1,), {expr.literal(float(value))}, tl.float32)")

    def coordinate(self, op: Op, dim: int) -> tuple[str, str | None, frozenset]:
        """(coordinate, mask, block axes) of op's result along its dim `dim`, a coordinate of its own."""
        space_dim = self.group.vmap[op.out][dim]
        if space_dim is None:
            return "0", None, frozenset()
        space = self.access.space
        entry = space.entry_of(space_dim)
        if len(space.dims[entry]) != 1:
            raise ValueError(f"{op.name} along a merged dim")
        axis = space.axis(entry)
        return f"({space.coords[entry]})", space.masks[entry], frozenset({axis} if axis else ())

    def gather(self, op: Op, position: int, sources: dict[int, str], valid: str | None, other: str
               ) -> tuple[str, frozenset]:
        """op's argument loaded with its moved dims at `sources` (coordinates of its own), where `valid` holds."""
        arg = op.args[position]
        vmap = self.group.leaf_map(op, position)
        ptr, host_name = self.access.pointer(arg, vmap)
        offset, mask, axes = self.access.offset(arg, vmap, host_name)
        terms = [offset] if offset else []
        for dim, source in sources.items():
            if arg.shape[dim] != 1:
                terms.append(f"{source} * {self.kw.arg(f'{arg.name}_s{dim}', f'{host_name}.stride({dim})')}")
        mask = mask_of([mask, valid])
        address = f"{ptr} + {' + '.join(terms)}" if terms else ptr
        convert = ".to(tl.float32)" if op.out.is_float else ""
        var = self.kw.local(arg.name)
        self.kw.line(f"{var} = tl.load({address}, mask={mask}, other={other}){convert}" if mask else
                     f"{var} = tl.load({address}){convert}")
        return var, axes

    def host_size(self, value: Value, dim: int) -> str:
        """The host expression of value's size along dim (of the tensor the kernel is handed)."""
        return f"{self.access.pointer(value, ())[1]}.shape[{dim}]"

    def size_arg(self, value: Value, dim: int) -> str:
        """A kernel parameter holding value's size along dim."""
        return self.kw.arg(f"{value.name}_n{dim}", self.host_size(value, dim))

    def layout(self, op: Op) -> str:
        """A flip, roll, pad or cat: each element read from its input at the moved coordinate."""
        coords = {dim: self.coordinate(op, dim) for dim in moved_dims(op)}
        span = frozenset().union(*(c[2] for c in coords.values()))
        x = op.args[0]
        if op.name == "flip":
            sources = {d: f"({self.size_arg(x, d)} - 1 - {c[0]})" for d, c in coords.items()}
            var, axes = self.gather(op, 0, sources, mask_of([c[1] for c in coords.values()]), "0")
            self.bind(op.out, var, span | axes)
            return var
        if op.name == "roll":
            sources = {}
            for dim, shift in op.attrs["moves"]:
                n = self.size_arg(x, dim)
                # the host gives the shift in [0, n): every term stays non-negative, whatever % does with signs
                s = self.kw.arg(f"shift{dim}", f"({self.host.size(shift)}) % {self.host_size(x, dim)}")
                sources[dim] = f"(({coords[dim][0]} + {n} - {s}) % {n})"
            var, axes = self.gather(op, 0, sources, mask_of([c[1] for c in coords.values()]), "0")
            self.bind(op.out, var, span | axes)
            return var
        if op.name == "pad":
            return self._pad(op, coords, span)
        return self._cat(op, coords[op.attrs["dim"]], span)

    def _pad(self, op: Op, coords: dict, span: frozenset) -> str:
        x, mode = op.args[0], op.attrs["mode"]
        sources, valid = {}, [c[1] for c in coords.values()]
        for dim, before, _ in op.attrs["moves"]:
            n = self.size_arg(x, dim)
            shifted = f"({coords[dim][0]} - {before})" if before else coords[dim][0]
            if mode == "constant":
                sources[dim] = shifted
                valid.append(f"({shifted} >= 0) & ({shifted} < {n})")
            elif mode == "replicate":
                sources[dim] = f"tl.minimum(tl.maximum({shifted}, 0), {n} - 1)"
            elif mode == "reflect":  # one reflection at either end (torch asks the padding be shorter than the dim)
                sources[dim] = f"(({n} - 1) - tl.abs(({n} - 1) - tl.abs({shifted})))"
            else:  # circular: the padding is at most the dim's size, so shifted + n is never negative
                sources[dim] = f"(({shifted} + {n}) % {n})"
        value = op.attrs["value"]
        other = expr.literal(float(value) if x.is_float else int(value))
        var, axes = self.gather(op, 0, sources, mask_of(valid), other)
        self.bind(op.out, var, span | axes)
        return var

    def _cat(self, op: Op, coordinate: tuple, span: frozenset) -> str:
        """Each element from the input whose range along dim holds it: a masked load per input (only one loads)."""
        dim = op.attrs["dim"]
        c, mask, _ = coordinate
        sizes: list[str] = []  # host expressions of the sizes of the inputs before this one
        result, axes = None, frozenset()
        for position, arg in enumerate(op.args):
            n = self.size_arg(arg, dim)
            if sizes:
                start = self.kw.arg(f"start{position}", " + ".join(sizes))
                inside, source = f"({c} >= {start}) & ({c} < {start} + {n})", f"({c} - {start})"
            else:
                inside, source = f"({c} < {n})", c
            sizes.append(self.host_size(arg, dim))
            var, found = self.gather(op, position, {dim: source}, mask_of([mask, inside]), "0")
            axes |= found
            if result is not None:
                merged = self.kw.local(op.out.name)
                self.kw.line(f"{merged} = tl.where({inside}, {var}, {result})")
                var = merged
            result = var
        self.bind(op.out, result, span | axes)
        return result

    def pointwise(self, op: Op) -> str:
        if op.name == "iota":
            return self.iota(op)
        if op.name == "full":
            return self.full(op)
        if op.name in LAYOUTS:
            return self.layout(op)
        want_float = op.out.is_float and op.name not in ("where",)
        parts = [self.operand(op, i, want_float if not (op.name == "where" and i == 0) else False)
                 for i in range(len(op.args))]
        args = [p[0] for p in parts]
        span = frozenset().union(*(p[2] for p in parts))
        if op.name == "where" and op.args[0].dtype != torch.bool:
            args[0] = f"({args[0]} != 0)"
        text = expr.pointwise(op.name, args, op.attrs, [p[1] for p in parts], self.kw.helpers)
        if len(args) and all(p[1] for p in parts):
            text = f"{text} + tl.zeros((1,), tl.float32)"
        if text in self.env.values() or text == args[0] and op.name == "identity":
            self.bind(op.out, text, span)  # an identity: the same variable
            return text
        return self.assign(op.out, text, span)


def merge_dims(domains: list[list[int]], accesses: list[tuple[Value, Map]], space: tuple[int, ...]
               ) -> tuple[list[list[int]], set[Value]]:
    """Space dims merged into fewer coordinates where every tensor reads them the same way.

    Dims of size 1 are dropped (their coordinate is 0). Two neighbouring dims of a domain merge when each
    tensor either runs along neither or along both through neighbouring dims of its own (size-1 dims between
    them aside). Tensors read through a merged coordinate must be contiguous: the leaves among them are
    returned so the host can pass `.contiguous()` (a no-op when they already are)."""
    entries: list[list[int]] = []
    merged_users: set[Value] = set()
    for domain in domains:
        dims = [d for d in domain if space[d] != 1]
        current: list[int] = []
        for d in dims:
            if current and all(_mergeable(value, vmap, current[-1], d) for value, vmap in accesses):
                current.append(d)
            else:
                if current:
                    entries.append(current)
                current = [d]
        if current:
            entries.append(current)
    for value, vmap in accesses:
        for entry in entries:
            if len(entry) > 1 and any(d in entry for d in vmap):
                merged_users.add(value)
    return entries, merged_users


def _mergeable(value: Value, vmap: Map, d0: int, d1: int) -> bool:
    i = [k for k, d in enumerate(vmap) if d == d0]
    j = [k for k, d in enumerate(vmap) if d == d1]
    if not i and not j:
        return True
    if not i or not j or _unfolded(value):
        return False
    if value.placed_dim is not None and i[0] < value.placed_dim <= j[0]:
        return False  # a slice of a concatenation along placed_dim is not contiguous across it
    return j[0] > i[0] and all(value.shape[k] == 1 for k in range(i[0] + 1, j[0]))


def _unfolded(value: Value) -> bool:
    """A view of overlapping windows: merging its dims would make the host copy it (`.contiguous()`)."""
    while value.producer is not None and value.producer.name in VIEW_NAMES:
        if value.producer.name == "unfold":
            return True
        value = value.producer.args[0]
    return False


def accesses_of(group: Group) -> list[tuple[Value, Map]]:
    """How the group reads and writes memory (exports, leaves), and the dims iota needs as coordinates of
    their own (they must not merge with a neighbour), as do the moved dims of a flip, roll, pad or cat."""
    accesses = [(v, group.vmap[v]) for v in group.exports] + group.leaves()
    for op in group.ops:
        own = (op.attrs["dim"],) if op.name == "iota" else moved_dims(op) if op.name in LAYOUTS else ()
        for dim in own:
            d = group.vmap[op.out][dim]
            if d is not None:
                accesses.append((op.out, tuple(d if i == dim else None for i in range(op.out.rank))))
    return accesses


def space_numel(group: Group, host: HostContext, sizes: list[str]) -> str:
    """The number of elements of the space: an export's numel() when one covers it all."""
    for value in group.exports:
        if value.shape == group.space and group.vmap[value] == tuple(range(len(group.space))):
            return f"{host.name(value)}.numel()"
    return product(sizes)


def space_sizes(group: Group, host: HostContext, extra: list[tuple[Value, Map]] = ()) -> list[str]:
    """Host expressions of each space dim's size, read from a tensor that runs along it."""
    sizes = ["1"] * len(group.space)
    accesses = [(v, group.vmap[v]) for v in group.exports] + list(extra) + group.leaves()
    for value, vmap in accesses:
        shape = host.shape(value)
        for i, d in enumerate(vmap):
            if d is not None and sizes[d] == "1" and value.shape[i] != 1:
                sizes[d] = shape[i]
    return sizes


def unravel(kw: KernelWriter, flat: str, entries: list[list[int]], sizes: list[str], prefix: str) -> list[str]:
    """Coordinates of a flat index over merged entries (last entry innermost); one variable per entry."""
    if not entries:
        return []
    if len(entries) == 1:
        return [flat]
    coords = [""] * len(entries)
    rem = flat
    for k in range(len(entries) - 1, 0, -1):
        host = product([sizes[d] for d in entries[k]])
        size = kw.arg(size_param(host, f"size_{prefix}{k}"), host)
        coords[k] = kw.local(f"{prefix}{k}")
        kw.line(f"{coords[k]} = {rem} % {size}")
        nxt = kw.local(rest_after(prefix, k)) if k > 1 else None
        if nxt:
            kw.line(f"{nxt} = {rem} // {size}")
            rem = nxt
        else:
            coords[0] = kw.local(f"{prefix}0")
            kw.line(f"{coords[0]} = {rem} // {size}")
    return coords


def rest_after(prefix: str, k: int) -> str:
    """The name of what is left of a flat index once the coordinates from `prefix`k on are taken out of it."""
    return f"{prefix.rstrip('_')}_rest_after_dim{k}"


def size_param(host: str, fallback: str) -> str:
    """A kernel parameter's name for a size the host passes: `clamp.shape[3]` -> `clamp_size3`, a host number's
    own name, else `fallback`."""
    shape = re.fullmatch(r"(\w+)\.shape\[(\d+)\]", host)
    if shape:
        return f"{shape[1]}_size{shape[2]}"
    return host if host.isidentifier() else fallback


@dataclass
class KernelCode:
    """One kernel and the host code that launches it."""

    source: str
    host_lines: list[str]  # allocations and the launch, indented for forward's body
    helpers: set[str]
    name: str


def allocate(host: HostContext, values: list[Value], indent: str = "        ") -> list[str]:
    """Host lines making the tensors kernels write: new ones, or a part's slice of the concatenation it is in."""
    lines = []
    for value in values:
        if value in host.allocated:
            continue
        if value in host.slots:
            lines.append(wrap_call(indent + host.slot_line(value)))
            host.allocated.add(value)
            continue
        if value in host.placements:
            joined, before = host.placements[value]
            lines += allocate(host, [joined], indent)
            dim = value.placed_dim
            start = " + ".join(host.formula(p)[dim] for p in before) or "0"
            lines.append(wrap_call(f"{indent}{host.name(value)} = {host.name(joined)}.narrow({dim}, {start}, "
                                   f"{host.formula(value)[dim]})"))
            host.allocated.add(value)
            continue
        lines.append(wrap_call(f"{indent}{host.name(value)} = torch.empty({host.shape_tuple(value)}, "
                               f"device={host.device()}, dtype={host.dtype(value)})"))
        host.allocated.add(value)
    return lines
