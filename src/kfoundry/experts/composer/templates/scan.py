"""The scan template: an inclusive cumulative sum or product along one dim, a kernel of its own.

Each program owns BR rows (the other dims, flattened) and walks the scanned dim in blocks of BLOCK: the block
is scanned in registers (tl.cumsum / tl.cumprod) and the total of the blocks before it, kept per row, is added
(or multiplied) in; the block's last element is the next carry. Every tensor is read through its own strides.
A pointwise kernel whose only product is the scan's input runs inside the block loop instead (a masked cumulative
sum applies its mask as the input is read, and the masked input is never written).
"""

from __future__ import annotations

from kfoundry.experts.composer.emit.host import HostContext, product
from kfoundry.experts.composer.emit.kernel import Access, Emitter, KernelCode, KernelWriter, Space, allocate
from kfoundry.experts.composer.plan.steps import Group, kernel_name
from kfoundry.experts.composer.templates.device_limits import DeviceLimits, fit_configs, tile_need
from kfoundry.types import DeviceFacts

CONFIGS = [{"BR": 4, "BLOCK": 1024, "num_warps": 4}, {"BR": 1, "BLOCK": 2048, "num_warps": 8},
           {"BR": 16, "BLOCK": 256, "num_warps": 4}, {"BR": 8, "BLOCK": 512, "num_warps": 4}]


def configs(group: Group, device: DeviceFacts | DeviceLimits | None = None) -> list[dict]:
    """The configurations that fit `device` (device_limits; None: the default target)."""
    return fit_configs([dict(c) for c in CONFIGS],
                       lambda c: tile_need(c["BR"] * c["BLOCK"], num_warps=c["num_warps"], rows=c["BR"]), device)


def scan_kernel(group: Group, host: HostContext, config: dict) -> KernelCode:
    op = group.anchor
    x, out = op.args[0], op.out
    dim = op.attrs["dim"]
    product_scan = op.name == "cumprod"
    kw = KernelWriter(kernel_name(group))
    lines = allocate(host, [out])
    on = host.name(out)
    shape = host.shape(out)
    outer = [d for d in range(out.rank) if d != dim]
    o_ptr = kw.arg("out_ptr", on)
    length = kw.arg("length", shape[dim])
    n_rows = product([shape[d] for d in outer]) if outer else "1"
    rows = kw.arg("n_rows", n_rows)
    # a short scanned dim takes a block of its own length, and the program more rows (BR x BLOCK elements kept)
    block_size = min(config["BLOCK"], 1 << max(0, out.shape[dim] - 1).bit_length())
    rows_size = max(config["BR"], config["BR"] * config["BLOCK"] // block_size)
    br, block = kw.constexpr("BR", str(rows_size)), kw.constexpr("BLOCK", str(block_size))
    kw.line("pid = tl.program_id(0)")
    # int64 offsets: a 32768 x 32768 scan's rows times its row stride pass 2^31
    kw.line(f"row = pid.to(tl.int64) * {br} + tl.arange(0, {br})")
    kw.line(f"row_ok = row < {rows}")
    # each row's coordinates along the other dims (innermost last)
    coords: dict[int, str] = {}
    rest = "row"
    for k, d in enumerate(reversed(outer)):
        size = kw.arg(f"size{d}", shape[d])
        coord = kw.local(f"c{d}")
        kw.line(f"{coord} = {rest} % {size}" if k < len(outer) - 1 else f"{coord} = {rest}")
        if k < len(outer) - 1:
            nxt = kw.local(f"rest{d}")
            kw.line(f"{nxt} = {rest} // {size}")
            rest = nxt
        coords[d] = coord
    o_row = [f"{coords[d]} * {kw.arg(f'stride_o{d}', f'{on}.stride({d})')}" for d in outer]
    kw.line(f"o_row = {' + '.join(o_row) or '0'}")
    so = kw.arg(f"stride_o{dim}", f"{on}.stride({dim})")
    if group.prologue is None:
        xn = host.name(x)
        x_ptr = kw.arg("x_ptr", xn)
        x_row = [f"{coords[d]} * {kw.arg(f'stride_x{d}', f'{xn}.stride({d})')}" for d in outer]
        kw.line(f"x_row = {' + '.join(x_row) or '0'}")
        sx = kw.arg(f"stride_x{dim}", f"{xn}.stride({dim})")
    accumulate = "tl.float32" if out.is_float else "tl.int64"
    identity = "1" if product_scan else "0"
    kw.line(f"carry = tl.full(({br},), {identity}, {accumulate})")
    reverse, exclusive = op.attrs.get("reverse", False), op.attrs.get("exclusive", False)
    kw.line(f"for start in range(0, {length}, {block}):")
    kw.indent += 1
    kw.line(f"col = start + tl.arange(0, {block}).to(tl.int64)")
    kw.line(f"ok = row_ok[:, None] & (col[None, :] < {length})")
    # the scan runs along col; a reversed one reads and writes element length - 1 - col, an exclusive one reads
    # one element behind (the identity in front): it is the inclusive scan shifted by one
    source = "(col - 1)" if exclusive else "col"
    where = f"({length} - 1 - col)" if reverse else "col"
    source = f"({length} - 1 - {source})" if reverse else source
    read_ok = "ok & (col[None, :] >= 1)" if exclusive else "ok"
    if group.prologue is None:
        kw.line(f"v = tl.load({x_ptr} + x_row[:, None] + {source}[None, :] * {sx}, mask={read_ok}, other={identity})"
                f".to({accumulate})")
    else:
        kw.line("# the pointwise ops before the scan, on each element as it is read")
        if exclusive:
            kw.line(f"read_ok = {read_ok}")
            read_ok = "read_ok"
        place = {d: f"{coords[d]}[:, None]" for d in outer} | {dim: f"{source}[None, :]"}
        kept = [d for d in range(x.rank) if x.shape[d] != 1]
        axes = ["cols" if d == dim else "rows" for d in kept]
        space = Space([[d] for d in kept], [place[d] for d in kept], [read_ok] * len(kept), axes,
                      {"rows": "row[:, None] * 0", "cols": "col[None, :] * 0"}, {"rows": "ok", "cols": "ok"})
        before = Emitter(kw, host, group.prologue, Access(kw, host, space))
        for fused in group.prologue.ops:
            before.pointwise(fused)
        kw.line(f"v = tl.where({read_ok}, {before.env[x]}, {identity}).to({accumulate})")
    if product_scan:
        kw.line("s = tl.cumprod(v, axis=1) * carry[:, None]")
    else:
        kw.line("s = tl.cumsum(v, axis=1) + carry[:, None]")
    kw.line(f"tl.store({o_ptr} + o_row[:, None] + {where}[None, :] * {so}, s.to({o_ptr}.dtype.element_ty), mask=ok)")
    kw.line(f"last = tl.minimum({length} - start, {block}) - 1")
    kw.line(f"carry = tl.sum(tl.where(tl.arange(0, {block})[None, :] == last, s, 0), axis=1)")
    kw.indent -= 1
    grid = f'lambda META: (triton.cdiv({n_rows}, META["BR"]),)'  # the launch's BR only: BLOCK may equal it
    lines.append(kw.launch(grid, {"num_warps": str(config["num_warps"])}))
    return KernelCode(kw.source(), lines, kw.helpers, kw.name)
