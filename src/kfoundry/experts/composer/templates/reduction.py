"""The row template: reductions along some dims (sum, mean, max, min, argmax, argmin) with any pointwise ops
before, between and after them, in one kernel. Softmax, log-softmax, logsumexp, variance and every norm are
this template (their decompositions are in `decompose` and `norm`).

Each program owns BR rows of the outer (kept) dims and walks the reduced dims in blocks of BC:

* ``single``: BC covers the whole reduced extent; everything is loaded once and stays in registers.
* ``looped``: one pass over the row per level of dependent reductions, then a last pass that writes the
  outputs; inputs are re-read in each pass instead of being held. Some reductions need no pass of their own
  (`row_passes`): the sum of exp(x - max(x)) and the mean of squared deviations from mean(x) ride in the
  pass of their max / mean (online softmax, shifted sums); a sum of where(index == t, v, 0) along the row
  (cross-entropy's pick of the target) is v read at column t of each row (a gather).
* ``nested``: ``looped`` where the reduced dims do not merge into one coordinate (a GroupNorm's channels of a
  group and their positions, weighed per channel): a scalar loop over the outer reduced coordinates around the
  loop over blocks of the innermost, so no lane divides its column index into coordinates and the affine
  weights are one scalar per channel. Not for argmax / argmin (their index is the row's flat column).
  ``nested_split`` is ``split`` so: each program takes a run of the outer coordinates (a BatchNorm's samples).
* ``split``: for few, very long rows (a BatchNorm's channels over N x H x W): each row's columns are cut into
  SPLIT chunks, one program each (grid: row blocks x SPLIT). The host launches the kernel once per pass and
  once more (constexpr STAGE = 1 .. passes + 1): at stage P each program reduces its chunk for the
  reductions of pass P and stores one partial per row into a float32 buffer; every later stage combines the
  partials of the passes before it into the row values, and the last stage writes the outputs (no gathers
  and no online softmax here: variances still ride with their mean).
"""

from __future__ import annotations

from kfoundry.experts.composer.emit.host import HostContext, product
from kfoundry.experts.composer.emit.kernel import (
    Access,
    Emitter,
    KernelCode,
    KernelWriter,
    Space,
    accesses_of,
    allocate,
    merge_dims,
    neutral_of,
    space_sizes,
    unravel,
    rounded_down,
    whole_fours_test,
    wrap_call,
)
from kfoundry.experts.composer.ir.graph import Op, Value, category
from kfoundry.experts.composer.plan.steps import Group, kernel_name
from kfoundry.experts.composer.templates.device_limits import DeviceLimits, fit_configs, next_power_of_2, tile_need
from kfoundry.experts.composer.templates.row_passes import Pass, gather_of, schedule
from kfoundry.types import DeviceFacts

SINGLE_MAX_COLS = 32768  # the widest row one program holds in registers (16 warps: 64 values a thread)
SPLIT_MIN_COLS = 65536  # rows at least this long, and fewer than SPLIT_MAX_ROWS of them, are split
SPLIT_MAX_ROWS = 2048
SPLIT_PROGRAMS = 1024  # the number of programs a split kernel aims for
SPLIT_MAX = 512
SPLIT_MIN_BLOCKS = 4  # each program walks at least this many blocks of its row
SPLITTABLE = ("sum", "mean", "amax", "amin")  # reductions whose partial results combine
NESTED_MIN_INNER = 1024  # the innermost reduced extent a nested loop needs (blocks of at least 1024 columns)


def splittable(group: Group) -> bool:
    """Every reduction of the group combines from partial results over chunks of a row (no argmax / argmin,
    no integer inputs)."""
    reductions = [op for op in group.ops if category(op.name) == "reduction"]
    return all(op.name in SPLITTABLE and op.args[0].is_float for op in reductions)


def split_count(rows: int, cols: int, br: int, bc: int) -> int:
    """Chunks per row: a power of two giving about SPLIT_PROGRAMS programs in all, each chunk at least
    SPLIT_MIN_BLOCKS blocks of BC columns, within [2, SPLIT_MAX]."""
    row_blocks = -(-rows // br)
    split = 2
    while split < SPLIT_MAX and row_blocks * split < SPLIT_PROGRAMS:
        split *= 2
    while split > 2 and cols < split * SPLIT_MIN_BLOCKS * bc:
        split //= 2
    return split


def reduced_entries(group: Group) -> list[list[int]]:
    """The reduced dims merged into coordinates (outer to inner) as the row kernel indexes them."""
    reduced = [d for d in range(len(group.space)) if d in group.reduced]
    return merge_dims([reduced], accesses_of(group), group.space)[0]


def nestable(group: Group) -> int | None:
    """The innermost reduced extent where a nested loop fits the group: its reduced dims are several coordinates,
    the innermost at least NESTED_MIN_INNER long, and no reduction needs the flat column (argmax, argmin)."""
    if any(op.name in ("argmax", "argmin") for op in group.ops):
        return None
    entries = reduced_entries(group)
    if len(entries) < 2:
        return None
    inner = 1
    for d in entries[-1]:
        inner *= group.space[d]
    return inner if inner >= NESTED_MIN_INNER else None


def _floor_power_of_2(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def configs(group: Group, device: DeviceFacts | DeviceLimits | None = None) -> list[dict]:
    """The configurations that fit `device` (device_limits; None: the default target):
    a program keeps BR rows of BC columns, the whole row in the single mode."""
    cols = 1
    for d in group.reduced:
        cols *= group.space[d]

    def need(c: dict):
        return tile_need(c["BR"] * c.get("BC", next_power_of_2(cols)), num_warps=c["num_warps"], rows=c["BR"])
    return fit_configs(_configs(group), need, device)


def _configs(group: Group) -> list[dict]:
    cols = 1
    for d in group.reduced:
        cols *= group.space[d]
    rows = 1
    for d in group.outer:
        rows *= group.space[d]
    looped = [{"mode": "looped", "BR": 1, "BC": 1024, "num_warps": 4},
              {"mode": "looped", "BR": 1, "BC": 2048, "num_warps": 8},
              {"mode": "looped", "BR": 4, "BC": 256, "num_warps": 4}]
    inner = nestable(group) if cols > 8192 else None
    if inner is not None:  # before the flat loops: no lane divides its column index into coordinates
        looped = [{"mode": "nested", "BR": 1, "BC": bc, "num_warps": warps}
                  for bc, warps in ((2048, 8), (1024, 4), (4096, 16)) if bc <= inner] + looped
    if cols >= SPLIT_MIN_COLS and rows < SPLIT_MAX_ROWS and splittable(group):
        # few rows: one program per row would leave most of the GPU idle (128 BatchNorm channels of
        # 602112 values each: 128 programs); each row is split over several programs instead
        split = [{"mode": "split", "BR": 1, "BC": bc, "num_warps": warps,
                  "SPLIT": split_count(rows, cols, 1, bc)}
                 for bc, warps in ((2048, 8), (1024, 4), (4096, 8))]
        if inner is not None:  # the chunks as runs of the outer coordinates, where there are as many of them
            runs = [dict(c, mode="nested_split", SPLIT=min(c["SPLIT"], _floor_power_of_2(cols // inner)))
                    for c in split if c["BC"] <= inner and cols // inner >= 2]
            # first where a row keeps as many programs as the flat split gives it (not yet timed on a GPU: the
            # flat loop's lanes divide their index, these do not); after the flat ones where it would have fewer
            whole = [c for c in runs if c["SPLIT"] == split_count(rows, cols, 1, c["BC"])]
            split = whole + split + [c for c in runs if c not in whole]
        return split + looped
    if cols <= 8192:
        rows_per_program = 16 if cols <= 64 else 4 if cols <= 512 else 1
        warps = 4 if cols <= 2048 else 8
        single = [{"mode": "single", "BR": rows_per_program, "num_warps": warps},
                  {"mode": "single", "BR": rows_per_program * 2, "num_warps": warps * 2},
                  {"mode": "single", "BR": max(1, rows_per_program // 4), "num_warps": max(1, warps // 2)}]
        return single + looped[:1]
    if cols <= SINGLE_MAX_COLS:
        return looped + [{"mode": "single", "BR": 1, "num_warps": 16}]
    # a row held in registers at once would not fit (seen on the H200: a 524288-wide block compiled for 149 s
    # and ran 4x slower than the looped kernels)
    return looped + [{"mode": "looped", "BR": 1, "BC": 4096, "num_warps": 16}]


class RowKernel:
    def __init__(self, group: Group, host: HostContext, config: dict) -> None:
        self.group = group
        self.host = host
        self.config = config
        self.kw = KernelWriter(kernel_name(group))
        self.lines = allocate(host, group.exports)
        accesses = accesses_of(group)
        reduced = [d for d in range(len(group.space)) if d in group.reduced]
        self.outer_entries, merged = merge_dims([list(group.outer)], accesses, group.space)
        self.red_entries, merged_r = merge_dims([reduced], accesses, group.space)
        self.merged = (merged | merged_r) - set(group.exports)
        self.sizes = space_sizes(group, host)
        self.full: set[Value] = set()
        for value in group.vmap:  # in the order computed
            if self._depends_on_reduced(value):
                self.full.add(value)
        self.stage: dict[Value, int] = {}
        for op in group.ops:
            inside = [a for a in op.tensor_args if a in group.vmap]
            base = max((self.stage[a] for a in inside), default=0)
            self.stage[op.out] = base + 1 if category(op.name) == "reduction" else base

    def _depends_on_reduced(self, value: Value) -> bool:
        op = value.producer
        if category(op.name) == "reduction":
            return False
        for position, arg in enumerate(op.args):
            if not (isinstance(arg, Value) and arg.is_tensor):
                continue
            if arg in self.group.vmap:
                if arg in self.full:
                    return True
            elif any(d in self.group.reduced for d in self.group.leaf_map(op, position) if d is not None):
                return True
        return False

    def build(self) -> KernelCode:
        kw = self.kw
        n_rows = kw.arg("n_rows", product([product([self.sizes[d] for d in e]) for e in self.outer_entries]))
        n_cols = kw.arg("n_cols", product([product([self.sizes[d] for d in e]) for e in self.red_entries]))
        self.n_rows, self.n_cols = n_rows, n_cols
        rows_expr = product([product([self.sizes[d] for d in e]) for e in self.outer_entries])
        cols_expr = product([product([self.sizes[d] for d in e]) for e in self.red_entries])
        br = kw.constexpr("BR", str(self.config["BR"]))
        single = self.config["mode"] == "single"
        self.nested = self.config["mode"] in ("nested", "nested_split")
        bc = kw.constexpr("BC", f"triton.next_power_of_2({cols_expr})" if single else str(self.config["BC"]))
        kw.line("pid = tl.program_id(0)")
        kw.line(f"rows = pid * {br} + tl.arange(0, {br})[:, None]")
        kw.line(f"row_ok = rows < {n_rows}")
        outer_coords = unravel(kw, "rows", self.outer_entries, self.sizes, "o")
        self.outer_coords = outer_coords
        space = Space(self.outer_entries + self.red_entries, outer_coords + [""] * len(self.red_entries),
                      ["row_ok"] * len(self.outer_entries) + ["col_ok"] * len(self.red_entries),
                      ["row"] * len(self.outer_entries) + ["col"] * len(self.red_entries),
                      {"row": "rows * 0", "col": "cols * 0"}, {"row": "row_ok", "col": "col_ok"})
        self.space = space
        self.access = Access(kw, self.host, space, self.merged)
        self.emitter = Emitter(kw, self.host, self.group, self.access)
        # a loop over blocks of one contiguous coordinate (the innermost reduced one) reads in whole fours where
        # the host finds the sizes divide by 4: the other coordinates' strides and the block's end as multiples
        # of ALIGN (_align_test)
        self.aligned = self.nested or (self.config["mode"] in ("looped", "split") and len(self.red_entries) == 1)
        if self.aligned:
            self.align_host = self.host.fresh("align")
            self.align = kw.constexpr("ALIGN", self.align_host)
            self.extent_host = product([self.sizes[d] for d in self.red_entries[-1]])
            for entry in range(len(space.dims) - 1):
                space.quantum[entry] = self.align
        if self.nested:  # the outer reduced coordinates are scalars of a loop: no lane axis, always in range
            outer = len(self.outer_entries)
            for entry in range(outer, outer + len(self.red_entries) - 1):
                space.masks[entry] = None
                space.axes[entry] = None
            self.n_outer = kw.arg("n_outer", product([product([self.sizes[d] for d in e])
                                                      for e in self.red_entries[:-1]]))
            self.n_inner = kw.arg("n_inner", self.extent_host)
        if single:
            self._single(bc)
        elif self.config["mode"] in ("split", "nested_split"):
            self._split(bc, rows_expr)
            return KernelCode(kw.source(), self.lines, kw.helpers, kw.name)
        else:
            self._looped(bc)
            self._align_test()
        grid = f"(triton.cdiv({rows_expr}, {self.config['BR']}),)"
        self.lines.append(kw.launch(grid, {"num_warps": str(self.config["num_warps"])}))
        return KernelCode(kw.source(), self.lines, kw.helpers, kw.name)

    def _align_test(self) -> None:
        """The host's ALIGN: 4 where the innermost reduced extent and every stride read as a multiple of ALIGN
        divide by 4 (then offsets and the mask run in whole groups of 4 elements), else 1."""
        if self.aligned:
            whole_fours_test(self.kw, self.align_host, self.extent_host, self.space)

    def _columns(self, start: str | None, bc: str, end: str | None = None, outer: list[str] | None = None) -> None:
        """A block of columns from `start`; in the nested mode, of the innermost reduced coordinate, the outer
        ones being `outer` (scalars; None: the first, 0)."""
        kw = self.kw
        kw.line(f"cols = {start + ' + ' if start else ''}tl.arange(0, {bc})[None, :]")
        if self.nested:  # ALIGN divides n_inner: each run of ALIGN lanes is in range or out of it as one
            kw.line(f"col_ok = cols < {rounded_down(self.n_inner)}")
            coords = (outer or ["0"] * (len(self.red_entries) - 1)) + ["cols"]
        else:
            bound = end or self.n_cols
            kw.line(f"col_ok = cols < {rounded_down(bound) if self.aligned else bound}")
            coords = unravel(kw, "cols", self.red_entries, self.sizes, "r")
        self.space.coords[len(self.outer_entries):] = coords

    # -- one block per row --------------------------------------------------------------------------
    def _single(self, bc: str) -> None:
        self._columns(None, bc)
        for op in self.group.ops:
            if category(op.name) == "reduction":
                self._reduce_single(op)
            else:
                self.emitter.pointwise(op)
        for value in self.group.exports:
            self.emitter.store(value, self.group.vmap[value], extra_mask=self._mask(value), extra_span={"row"})

    def _mask(self, value: Value) -> str:
        return "row_ok & col_ok" if value in self.full else "row_ok"

    def _input(self, op: Op) -> str:
        return self.emitter.operand(op, 0, want_float=False)[0]

    def _neutral(self, op: Op, value: Value) -> str:
        return neutral_of(op.name, value.is_float)

    def _divisor(self, op: Op) -> str:
        correction = op.attrs.get("correction", 0)
        return self.n_cols if not correction else f"({self.n_cols} - {float(correction)!r})"

    def _reduce_single(self, op: Op) -> None:
        self.emitter.reduce(op, "col_ok", self.n_cols, "col")

    # -- several passes over each row ---------------------------------------------------------------
    def _row_values(self, limit: int) -> None:
        for op in self.group.ops:
            if category(op.name) == "reduction" or op.out in self.full or op.out in self.emitter.env:
                continue
            if self.stage[op.out] <= limit:
                self.emitter.pointwise(op)

    def _full_closure(self, values: list[Value]) -> list[Op]:
        needed: set[Value] = set()
        stack = [v for v in values if v in self.full]
        while stack:
            v = stack.pop()
            if v in needed:
                continue
            needed.add(v)
            stack.extend(a for a in v.producer.tensor_args if a in self.full)
        return [op for op in self.group.ops if op.out in needed]

    def _loop(self, bc: str, body, start: str = "0", end: str | None = None) -> None:
        """A loop over the row (or the columns [start, end) of it) in blocks of bc."""
        kw = self.kw
        if self.nested:  # the row's outer reduced coordinates one at a time, the innermost in blocks
            flat = kw.local("outer_col")
            kw.line(f"for {flat} in range({start}, {end or self.n_outer}):")
            kw.indent += 1
            outer = unravel(kw, flat, self.red_entries[:-1], self.sizes, "r")
            kw.line(f"for c0 in range(0, {self.n_inner}, {bc}):")
            kw.indent += 1
            self._columns("c0", bc, outer=outer)
            with self.emitter.scope():
                body()
            kw.indent -= 2
            return
        kw.line(f"for c0 in range({start}, {end or self.n_cols}, {bc}):")
        kw.indent += 1
        self._columns("c0", bc, end)
        with self.emitter.scope():
            body()
        kw.indent -= 1

    def _level(self, level: int) -> list[Op]:
        return [op for op in self.group.ops if category(op.name) == "reduction" and self.stage[op.out] == level]

    def _passes(self) -> int:
        return max((self.stage[op.out] for op in self.group.ops if category(op.name) == "reduction"), default=0)

    def _accumulators(self, reductions: list[Op], bc: str) -> dict[Op, tuple[str, str | None]]:
        kw = self.kw
        accs = {}
        for op in reductions:
            neutral = self._neutral(op, op.args[0])
            acc = kw.local(f"acc_{op.out.name}")
            fill = neutral if op.args[0].is_float else "0"
            kw.line(f"{acc} = tl.full((BR, {bc}), {fill}, tl.float32)")
            if op.name in ("argmax", "argmin"):
                at = kw.local(f"at_{op.out.name}")
                kw.line(f"{at} = tl.zeros((BR, {bc}), tl.int32)")
                accs[op] = (acc, at)
            else:
                accs[op] = (acc, None)
        return accs

    def _accumulate(self, step: Pass, accs: dict[Op, tuple[str, str | None]], shifts: dict[Op, str]) -> None:
        """The body of a pass: one block of columns folded into the accumulators of the reductions `step`
        scans, with those it carries updated beside their partners."""
        kw = self.kw
        for op in self._full_closure([r.args[0] for r in step.scanned]):
            self.emitter.pointwise(op)
        for op in step.scanned:
            acc, at = accs[op]
            x = self._input(op)
            masked = f"tl.where(col_ok, {x}, {self._neutral(op, op.args[0])})"
            sums = [s for s, top in step.online.items() if top is op]
            deviations = [d for d, mean in step.deviations.items() if mean is op]
            if sums:
                grown, base, scale, term = (kw.local(n) for n in ("grown", "base", "scale", "term"))
                kw.line(f"{grown} = tl.maximum({acc}, {masked})")
                # a lane that has seen only -inf keeps a zero sum: no exp(-inf - -inf)
                kw.line(f"{base} = tl.where({grown} == -float(\"inf\"), 0.0, {grown})")
                kw.line(f"{scale} = tl.exp({acc} - {base})")
                kw.line(f"{term} = tl.where(col_ok, tl.exp({x} - {base}), 0.0)")
                for s in sums:
                    kw.line(f"{accs[s][0]} = {accs[s][0]} * {scale} + {term}")
                kw.line(f"{acc} = {grown}")
            elif deviations:  # sums of x - shift, and of its squares
                delta = kw.local("delta")
                kw.line(f"{delta} = tl.where(col_ok, {x} - {shifts[op]}, 0.0)")
                kw.line(f"{acc} += {delta}")
                for d in deviations:
                    kw.line(f"{accs[d][0]} += {delta} * {delta}")
            elif op.name in ("sum", "mean"):
                kw.line(f"{acc} += {masked}")
            elif op.name in ("amax", "amin"):
                kw.line(f"{acc} = tl.{'maximum' if op.name == 'amax' else 'minimum'}({acc}, {masked})")
            else:
                better = kw.local("better")
                kw.line(f"{better} = {masked} {'>' if op.name == 'argmax' else '<'} {acc}")
                kw.line(f"{at} = tl.where({better}, cols, {at})")
                kw.line(f"{acc} = tl.where({better}, {masked}, {acc})")

    @staticmethod
    def _fold(op: Op, block: str) -> str:
        """A sum / max / min reduction of a 2-D block along its columns."""
        fold = "sum" if op.name in ("sum", "mean") else "max" if op.name == "amax" else "min"
        return f"tl.{fold}({block}, axis=1, keep_dims=True)"

    def _finish(self, op: Op, acc_at: tuple[str, str | None]) -> None:
        """A reduction's row value from its accumulators after a pass."""
        kw = self.kw
        acc, at = acc_at
        var = kw.local(op.out.name)
        if op.name in ("sum", "mean", "amax", "amin"):
            text = self._fold(op, acc)
            if op.name == "mean":
                text = f"{text} / {self._divisor(op)}"
        else:
            best = kw.local(f"best_{op.out.name}")
            kw.line(f"{best} = tl.{'max' if op.name == 'argmax' else 'min'}({acc}, axis=1, keep_dims=True)")
            # the first index holding the best value, like PyTorch
            first = f"tl.where({acc} == {best}, {at}, {self.n_cols})"
            text = f"tl.min({first}, axis=1, keep_dims=True).to(tl.int64)"
        kw.line(f"{var} = {text}")
        self.emitter.bind(op.out, var, {"row"})
        self.emitter.exprs[text] = var

    # -- carried reductions: computed in the pass of their partner (row_passes) --------------------------
    def _schedule(self, online: bool) -> list[Pass]:
        levels = [self._level(level) for level in range(1, self._passes() + 1)]
        gathered = self._gather if online else (lambda op: None)
        return schedule(levels, self.group.vmap, online=online, gathered=gathered)

    def _shifts(self, step: Pass, bc: str) -> dict[Op, str]:
        """For each mean whose squared deviations ride along: a shift near the row's mean (the mean of the row's
        first block), so that sums of x - shift and of its squares give the variance without the cancellation
        of raw sums of squares. Every program of a row computes the same shift."""
        kw, shifts = self.kw, {}
        for mean in dict.fromkeys(step.deviations.values()):
            with self.emitter.scope():
                self._columns(None, bc)
                for op in self._full_closure([mean.args[0]]):
                    self.emitter.pointwise(op)
                shifts[mean] = kw.local(f"shift_{mean.out.name}")
                first = self.n_inner if self.nested else self.n_cols
                kw.line(f"{shifts[mean]} = tl.sum(tl.where(col_ok, {self._input(mean)}, 0.0), axis=1, "
                        f"keep_dims=True) / tl.minimum({first}, {bc})")
        return shifts

    def _finish_online(self, op: Op, top: Op, acc: str, top_acc: str) -> None:
        """The row's sum of exp(x - max): each lane's sum rescaled from its own running max to the row's."""
        kw = self.kw
        row_top = self.emitter.env[top.out]
        base = kw.local("base")
        kw.line(f"{base} = tl.where({row_top} == -float(\"inf\"), 0.0, {row_top})")
        var = kw.local(op.out.name)
        kw.line(f"{var} = tl.sum({acc} * tl.exp({top_acc} - {base}), axis=1, keep_dims=True)")
        # a row of -inf: exp(-inf - -inf) is nan in the reference, so its sum is nan too
        kw.line(f"{var} = tl.where({row_top} == -float(\"inf\"), float(\"nan\"), {var})")
        self.emitter.bind(op.out, var, {"row"})

    def _finish_shifted(self, step: Pass, mean: Op, shift: str, blocks: dict[Op, str]) -> None:
        """A mean and the variances riding with it, from blocks (accumulators or partials) of the sums of
        x - shift (the mean's) and of its squares (each variance's): with t the row's sum of x - shift,
        mean = shift + t / n and variance = (sum of squares - t^2 / n) / (n - correction)."""
        kw = self.kw
        sums = {}
        for op, block in blocks.items():
            sums[op] = kw.local(f"sum_{op.out.name}")
            kw.line(f"{sums[op]} = {self._fold(op, block)}")
        total = sums[mean]
        var = kw.local(mean.out.name)
        kw.line(f"{var} = {shift} + {total} / {self._divisor(mean)}")
        self.emitter.bind(mean.out, var, {"row"})
        for op in [d for d, m in step.deviations.items() if m is mean]:
            out = kw.local(op.out.name)
            kw.line(f"{out} = tl.maximum({sums[op]} - {total} * {total} / {self.n_cols}, 0.0) / {self._divisor(op)}")
            self.emitter.bind(op.out, out, {"row"})

    # -- gathers: sum(where(index == t, v, 0)) along the row is v at column t ------------------------
    def _gather(self, op: Op) -> tuple[int, Value] | None:
        column = self.red_entries[0][0] if len(self.red_entries) == 1 and len(self.red_entries[0]) == 1 else None
        return gather_of(op, self.group.vmap, column, self._along_row)

    def _along_row(self, op: Op, position: int) -> bool:
        arg = op.args[position]
        if arg in self.group.vmap:
            return arg in self.full
        return any(d in self.group.reduced for d in self.group.leaf_map(op, position) if d is not None)

    def _emit_gather(self, op: Op) -> None:
        kw = self.kw
        position, v = self._gather(op)
        eq = op.args[0].producer.args[0].producer
        kw.line(f"# {op.out.name}: the sum of where({eq.args[0].name} == {eq.args[1].name}, ...) along the row "
                f"is one column's value")
        with self.emitter.scope():
            target, _, _ = self.emitter.operand(eq, position, want_float=False)
            kw.line(f"cols = {target}")
            kw.line(f"col_ok = (cols >= 0) & (cols < {self.n_cols})")
            self.space.coords[len(self.outer_entries):] = ["cols"]
            for producer in self._full_closure([v]):
                self.emitter.pointwise(producer)
            picked = self.emitter.env[v] if v in self.emitter.env else \
                self.emitter.operand(op.args[0].producer, 1, want_float=True)[0]
            text = f"tl.where(row_ok & col_ok, {picked}, 0.0)"
        var = kw.local(op.out.name)
        kw.line(f"{var} = {text}")
        self.emitter.bind(op.out, var, {"row"})

    def _write_full(self, full_exports: list[Value]) -> None:
        for op in self._full_closure(full_exports):
            self.emitter.pointwise(op)
        for value in full_exports:
            self.emitter.store(value, self.group.vmap[value], extra_mask=self._mask(value), extra_span={"row"})

    def _looped(self, bc: str) -> None:
        group = self.group
        self._row_values(0)
        for step in self._schedule(online=True):
            if step.scanned:
                accs = self._accumulators(step.scanned + step.carried, bc)
                shifts = self._shifts(step, bc)
                self._loop(bc, lambda step=step, accs=accs, shifts=shifts: self._accumulate(step, accs, shifts))
                for op in step.scanned:
                    if op in shifts:
                        self._finish_shifted(step, op, shifts[op], {o: accs[o][0] for o in [op, *step.deviations]})
                    else:
                        self._finish(op, accs[op])
                for op, top in step.online.items():
                    self._finish_online(op, top, accs[op][0], accs[top][0])
            for done in step.levels:
                for op in self._level(done):
                    if self._gather(op):
                        self._emit_gather(op)
                self._row_values(done)
        full_exports = [v for v in group.exports if v in self.full]
        if full_exports:
            self._loop(bc, lambda: self._write_full(full_exports))
        for value in group.exports:
            if value not in self.full:
                self.emitter.store(value, group.vmap[value], extra_mask="row_ok", extra_span={"row"})

    # -- each row split over several programs, one launch per pass ------------------------------------
    def _split(self, bc: str, rows_expr: str) -> None:
        kw = self.kw
        group = self.group
        if not splittable(group):
            raise ValueError(f"{group.name}: split rows need reductions that combine from partial results")
        # one host constant for the kernel, its grid and its partials' buffer: the tuner rewrites all three at once
        split_host = self.host.fresh("SPLIT")
        split = kw.constexpr("SPLIT", split_host)
        stage_var = self.host.fresh("stage")
        kw.constexpr("STAGE", stage_var)
        reductions = [op for op in group.ops if category(op.name) == "reduction"]
        slot = {op: k for k, op in enumerate(reductions)}  # where each reduction's partials lie in the buffer
        partials = self.host.fresh(f"{group.name}_partials")
        part = kw.arg("part_ptr", partials)
        pid_s, chunk, lo, hi = (kw.local(n) for n in ("pid_s", "chunk", "col_lo", "col_hi"))
        kw.line(f"{pid_s} = tl.program_id(1)")
        if self.nested:  # a run of the outer reduced coordinates, each walked whole
            kw.line(f"{chunk} = tl.cdiv({self.n_outer}, {split})")
            end = self.n_outer
        else:
            kw.line(f"{chunk} = tl.cdiv(tl.cdiv({self.n_cols}, {split}), {bc}) * {bc}  # whole blocks of columns")
            end = self.n_cols
        kw.line(f"{lo} = {pid_s} * {chunk}")
        kw.line(f"{hi} = tl.minimum({lo} + {chunk}, {end})")

        def row_base(op: Op) -> str:  # the offset of a row's partials of one reduction
            k = slot[op]
            first = "rows" if k == 0 else f"({self.n_rows} + rows)" if k == 1 else f"({k} * {self.n_rows} + rows)"
            return f"{first} * {split}"

        def load_partials(op: Op) -> str:
            loaded = kw.local(f"part_{op.out.name}")
            kw.line(f"{loaded} = tl.load({part} + {row_base(op)} + tl.arange(0, {split})[None, :], mask=row_ok, "
                    f"other={self._neutral(op, op.args[0])})")
            return loaded

        self._row_values(0)
        steps = self._schedule(online=False)
        for stage, step in enumerate(steps, start=1):
            shifts = self._shifts(step, bc)  # in every launch: the later ones need them for the mean
            named = " and ".join(str(level) for level in step.levels)
            kw.line(f"if STAGE == {stage}:  # this chunk's part of the level-{named} reductions")
            kw.indent += 1
            accs = self._accumulators(step.scanned + step.carried, bc)
            self._loop(bc, lambda step=step, accs=accs, shifts=shifts: self._accumulate(step, accs, shifts), lo, hi)
            for op in step.scanned + step.carried:
                kw.line(f"tl.store({part} + {row_base(op)} + {pid_s}, {self._fold(op, accs[op][0])}, mask=row_ok)")
            kw.indent -= 1
            # the row values from the partials of every chunk: valid from the next stage on, where they are used
            for op in step.scanned:
                if op in shifts:
                    self._finish_shifted(step, op, shifts[op], {o: load_partials(o) for o in [op, *step.deviations]})
                    continue
                text = self._fold(op, load_partials(op))
                if op.name == "mean":
                    text = f"{text} / {self._divisor(op)}"
                var = kw.local(op.out.name)
                kw.line(f"{var} = {text}")
                self.emitter.bind(op.out, var, {"row"})
                self.emitter.exprs[text] = var
            for done in step.levels:
                self._row_values(done)
        passes = len(steps)
        kw.line(f"if STAGE == {passes + 1}:  # the outputs")
        kw.indent += 1
        body_start = len(kw.lines)
        full_exports = [v for v in group.exports if v in self.full]
        if full_exports:
            self._loop(bc, lambda: self._write_full(full_exports), lo, hi)
        for value in group.exports:
            if value not in self.full:  # one program per row writes its row values
                self.emitter.store(value, group.vmap[value], extra_mask=f"row_ok & ({pid_s} == 0)",
                                   extra_span={"row"})
        if len(kw.lines) == body_start:
            kw.line("pass")
        kw.indent -= 1

        self._align_test()
        indent = "        "
        self.lines.append(f"{indent}{split_host} = {self.config['SPLIT']}")
        self.lines.append(wrap_call(f"{indent}{partials} = torch.empty(({len(reductions)}, {rows_expr}, "
                                    f"{split_host}), device={self.host.device()}, dtype=torch.float32)"))
        self.lines.extend(indent + line for line in kw.prelude)  # once, before the loop over stages
        self.lines.append(f"{indent}for {stage_var} in range(1, {passes + 2}):  # a launch per pass, then the outputs")
        grid = f"(triton.cdiv({rows_expr}, {self.config['BR']}), {split_host})"
        self.lines.append(kw.launch(grid, {"num_warps": str(self.config["num_warps"])}, indent=indent + "    ",
                                    with_prelude=False))


def row_kernel(group: Group, host: HostContext, config: dict) -> KernelCode:
    return RowKernel(group, host, config).build()
