"""The pooling template: max / average pooling over the last 1-3 dims (stride, padding, dilation, ceil_mode,
count_include_pad, divisor_override) and adaptive pooling, one output element per lane, with the window
unrolled (`tl.static_range`) and the pointwise ops after it fused. Global pooling is a reduction (the row
template) instead.
"""

from __future__ import annotations

import math

from kfoundry.experts.composer.emit.host import HostContext, product
from kfoundry.experts.composer.emit.kernel import (
    Access,
    Emitter,
    KernelCode,
    KernelWriter,
    Space,
    allocate,
    space_numel,
    space_sizes,
    unravel,
)
from kfoundry.experts.composer.plan.steps import Group, kernel_name
from kfoundry.experts.composer.templates.device_limits import DeviceLimits, fit_configs, tile_need
from kfoundry.types import DeviceFacts

# planes (the leading dims' elements) at least this large get programs of their own: a lane's leading coordinates
# are then the program's (one scalar division) instead of a division chain per lane; smaller planes stay flat, where
# one program spans several planes and no lane idles
PLANAR_MIN = 1024

CONFIGS = [{"BLOCK": 256, "num_warps": 4}, {"BLOCK": 512, "num_warps": 4}, {"BLOCK": 128, "num_warps": 2},
           {"BLOCK": 1024, "num_warps": 8}]


def configs(group: Group, device: DeviceFacts | DeviceLimits | None = None) -> list[dict]:
    """The configurations that fit `device` (device_limits; None: the default target)."""
    return fit_configs([dict(c) for c in CONFIGS], lambda c: tile_need(c["BLOCK"], num_warps=c["num_warps"]), device)


def pool_kernel(group: Group, host: HostContext, config: dict) -> KernelCode:
    if group.windows is not None:
        return window_tail(group, host, config)
    op = group.anchor
    x = op.args[0]
    out = op.out
    attrs = op.attrs
    adaptive = op.name.startswith("adaptive")
    nd = len(attrs["output_size"]) if adaptive else len(attrs["kernel"])
    lead = out.rank - nd
    is_max = "max" in op.name
    kw, lines, sizes, coords, grid = _per_output(group, host, config, lead)
    xn = host.name(x)
    xs = host.formula(x) if group.prologue is not None else host.shape(x)  # with a prologue, x is never stored
    if group.prologue is None:
        x_ptr = kw.arg("x_ptr", xn)
        sx = [kw.arg(f"stride_x{i}", f"{xn}.stride({i})") for i in range(x.rank)]
    in_sizes = [kw.arg(f"in_size{d}", xs[lead + d]) for d in range(nd)]
    if group.prologue is None:
        base = " + ".join(f"{coords[d]} * {sx[d]}" for d in range(lead)) or "0"
        kw.line(f"base = {x_ptr} + {base}")
    fill = '-float("inf")' if is_max else "0.0"
    kw.line(f"acc = tl.full((BLOCK,), {fill}, tl.float32)")
    windows = []
    if adaptive:
        out_sizes = [kw.arg(f"out_size{d}", sizes[lead + d]) for d in range(nd)]
        for d in range(nd):
            start, end = kw.local(f"start{d}"), kw.local(f"end{d}")
            c = coords[lead + d]
            kw.line(f"{start} = ({c} * {in_sizes[d]}) // {out_sizes[d]}")
            kw.line(f"{end} = (({c} + 1) * {in_sizes[d]} + {out_sizes[d]} - 1) // {out_sizes[d]}")
            span = kw.constexpr(f"KMAX{d}", f"-(-{_p(xs[lead + d])} // {_p(sizes[lead + d])}) + 1")
            windows.append((start, end, span))
    positions, oks = [], []
    for d in range(nd):
        k = kw.local(f"k{d}")
        span = windows[d][2] if adaptive else str(attrs["kernel"][d])
        kw.line(f"for {k} in tl.static_range({span}):")
        kw.indent += 1
        c = coords[lead + d]
        i, ok = kw.local(f"i_in{d}"), kw.local(f"ok{d}")
        previous = oks[-1] if oks else "mask"
        if adaptive:
            kw.line(f"{i} = {windows[d][0]} + {k}")
            kw.line(f"{ok} = {previous} & ({i} < {windows[d][1]})")
        else:
            s, p = attrs["stride"][d], attrs["padding"][d]
            dil = attrs.get("dilation", (1,) * nd)[d]
            kw.line(f"{i} = {c} * {s} - {p} + {k}{f' * {dil}' if dil != 1 else ''}")
            kw.line(f"{ok} = {previous} & ({i} >= 0) & ({i} < {in_sizes[d]})")
        positions.append(i)
        oks.append(ok)
    if group.prologue is None:
        address = " + ".join(f"{positions[d]} * {sx[lead + d]}" for d in range(nd))
        kw.line(f"v = tl.load(base + {address}, mask={oks[-1]}, other={fill}).to(tl.float32)")
    else:
        kw.line("# the pointwise ops before the pooling, on each window element")
        window = [coords[d] for d in range(lead)] + positions
        kept = [d for d in range(x.rank) if x.shape[d] != 1]
        space_in = Space([[d] for d in kept], [window[d] for d in kept], [oks[-1]] * len(kept), ["flat"] * len(kept),
                         {"flat": "offs * 0"}, {"flat": "mask"})
        before = Emitter(kw, host, group.prologue, Access(kw, host, space_in))
        for fused in group.prologue.ops:
            before.pointwise(fused)
        kw.line(f"v = tl.where({oks[-1]}, {before.env[x]}, {fill})")
    kw.line("acc = tl.maximum(acc, v)" if is_max else "acc += v")
    kw.indent -= nd
    if not is_max:
        kw.line(f"acc = acc / {_divisor(kw, attrs, coords[lead:], in_sizes, windows, adaptive, nd)}")
    return _after_pooling(kw, host, group, coords, lines, grid, config)


def _per_output(group: Group, host: HostContext, config: dict, lead: int
                ) -> tuple[KernelWriter, list[str], list[str], list[str], str]:
    """The start of a kernel with one lane per output element: (writer, host lines, space sizes, each lane's
    coordinates, the launch grid). `lead`: the output's dims before the pooled ones. Where a plane (the pooled
    dims) holds PLANAR_MIN elements or more, each program takes a block of one plane: `offs` is still the flat
    index, `mask` the block's lanes inside the plane."""
    out = group.anchor.out
    kw = KernelWriter(kernel_name(group))
    lines = allocate(host, group.exports)
    sizes = space_sizes(group, host, [(out, tuple(range(out.rank)))])
    block = kw.constexpr("BLOCK", str(config["BLOCK"]))
    inner_dims = list(range(lead, out.rank))
    if 0 < lead and math.prod(int(out.shape[d]) for d in inner_dims) >= PLANAR_MIN:
        planes_host, plane_host = product(sizes[:lead]), product([sizes[d] for d in inner_dims])
        plane_size = kw.arg("plane_size", plane_host)
        kw.line(f"blocks = tl.cdiv({plane_size}, {block})")
        kw.line("plane = tl.program_id(0) // blocks")
        kw.line(f"inner = (tl.program_id(0) % blocks) * {block} + tl.arange(0, {block})")
        kw.line(f"offs = plane * {plane_size} + inner")
        kw.line(f"mask = inner < {plane_size}")
        coords = []
        for d, scalar in enumerate(unravel(kw, "plane", [[d] for d in range(lead)], sizes, "p")):
            lanes = kw.local(f"lane_i{d}")  # the program's coordinate in every lane (a masked load needs a block)
            kw.line(f"{lanes} = tl.zeros_like(inner) + {scalar}")
            coords.append(lanes)
        coords += unravel(kw, "inner", [[d] for d in inner_dims], sizes, "i")
        return kw, lines, sizes, coords, f"({planes_host} * triton.cdiv({plane_host}, {config['BLOCK']}),)"
    total = space_numel(group, host, sizes)
    kw.line("pid = tl.program_id(0)")
    n = kw.arg("n_elements", total)
    kw.line(f"offs = pid * {block} + tl.arange(0, {block})")
    kw.line(f"mask = offs < {n}")
    coords = unravel(kw, "offs", [[d] for d in range(out.rank)], sizes, "i")
    return kw, lines, sizes, coords, f"(triton.cdiv({total}, {config['BLOCK']}),)"


def _after_pooling(kw: KernelWriter, host: HostContext, group: Group, coords: list[str], lines: list[str],
                   grid: str, config: dict) -> KernelCode:
    """The pointwise ops after the pooling on `acc`, the stores and the launch."""
    out = group.anchor.out
    space = _flat_space(group.space, coords)
    emitter = Emitter(kw, host, group, Access(kw, host, space))
    emitter.bind(out, "acc", {"flat"})
    for fused in group.ops:
        emitter.pointwise(fused)
    for value in group.exports:
        emitter.store(value, group.vmap[value], extra_mask="mask")
    lines.append(kw.launch(grid, {"num_warps": str(config["num_warps"])}))
    return KernelCode(kw.source(), lines, kw.helpers, kw.name)


def _flat_space(space: tuple[int, ...], coords: list[str]) -> Space:
    """One lane per element of `space` at coordinates `coords` (the dims of size 1 not indexed)."""
    kept = [d for d in range(len(space)) if space[d] != 1]
    return Space([[d] for d in kept], [coords[d] for d in kept], ["mask"] * len(kept), ["flat"] * len(kept),
                 {"flat": "offs * 0"}, {"flat": "mask"})


def window_tail(group: Group, host: HostContext, config: dict) -> KernelCode:
    """The pooling of a convolution that stored each window's extrema or mean (plan/window_store.py): per output
    element, the ops between the convolution and the pooling on each of those (the operands they share over the
    window read at its first element), the larger of the results (or the one mean), then the ops after."""
    windows = group.windows
    out = group.anchor.out
    kernel = (1,) * (out.rank - len(windows.kernel)) + tuple(windows.kernel)
    kw, lines, sizes, coords, grid = _per_output(group, host, config, out.rank - len(windows.kernel))
    source_sizes = host.shape(windows.source)
    # the coordinates of the window's first element in the conv output; a value of the chain shaped otherwise (a
    # reshape of it) takes them from the flat index
    corners = [f"{coords[d]} * {kernel[d]}" if kernel[d] > 1 else coords[d] for d in range(out.rank)]
    first = None
    places = []
    for k, link in enumerate(windows.chain):
        # sizes from the export's shape formula: the entry is a view of a tensor never written
        link_sizes = space_sizes(link.group, host, [(link.export, link.group.vmap[link.export])])
        if list(link_sizes) == list(source_sizes):
            places.append(_flat_space(link.group.space, [f"({c})" for c in corners]))
            continue
        if first is None:
            first = corners[0]
            for d in range(1, out.rank):
                first = f"({first}) * {kw.arg(f'source_size{d}', source_sizes[d])} + {corners[d]}"
            kw.line(f"first = {first}")
            first = "first"
        entries = [[d] for d in range(len(link.group.space))]
        places.append(_flat_space(link.group.space, unravel(kw, first, entries, link_sizes, f"l{k}_")))
    buffers = host.windows[windows]
    for kind in windows.kinds:
        value = kw.local(f"window_{kind}")
        kw.line(f"{value} = tl.load({kw.arg(f'{kind}_ptr', buffers[kind])} + offs, mask=mask, other=0.0)")
        for link, place in zip(windows.chain, places):
            emitter = Emitter(kw, host, link.group, Access(kw, host, place))
            emitter.bind(link.entry, value, {"flat"})
            for op in link.group.ops:
                emitter.pointwise(op)
            value = emitter.env[link.export]
        kw.line(f"acc = {value}" if kind == windows.kinds[0] else f"acc = tl.maximum(acc, {value})")
    return _after_pooling(kw, host, group, coords, lines, grid, config)


def _p(expr: str) -> str:
    return expr if expr.replace(".", "").replace("_", "").replace("[", "").replace("]", "").isalnum() else f"({expr})"


def _divisor(kw: KernelWriter, attrs: dict, coords: list[str], in_sizes: list[str], windows: list, adaptive: bool,
             nd: int) -> str:
    """The element count of each window, as PyTorch's avg_pool counts it."""
    if adaptive:
        return "(" + " * ".join(f"({end} - {start})" for start, end, _ in windows) + ")"
    if attrs.get("divisor_override"):
        return str(float(attrs["divisor_override"]))
    parts = []
    for d in range(nd):
        s, p, k = attrs["stride"][d], attrs["padding"][d], attrs["kernel"][d]
        lo, hi = kw.local(f"lo{d}"), kw.local(f"hi{d}")
        kw.line(f"{lo} = {coords[d]} * {s} - {p}")
        kw.line(f"{hi} = tl.minimum({lo} + {k}, {in_sizes[d]} + {p})")
        if attrs["count_include_pad"]:
            parts.append(f"({hi} - {lo})")
        else:
            parts.append(f"(tl.minimum({hi}, {in_sizes[d]}) - tl.maximum({lo}, 0))")
    return "(" + " * ".join(parts) + ")"
