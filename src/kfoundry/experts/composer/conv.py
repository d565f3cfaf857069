"""The convolution template: Conv1d/2d/3d and ConvTranspose1d/2d/3d as implicit GEMMs, with the same fused
epilogue as the GEMM template (the bias is the first epilogue op).

GEMM view: rows m = (sample, output position), columns = output channels of one group, reduction
k = (input channel of the group, kernel position). A convolution reads the input at
position * stride - padding + kernel offset * dilation; a transposed one gathers the inputs whose scatter
lands on the output position: (position + padding - kernel offset * dilation) divisible by the stride.
No im2col buffer is built: input tiles are loaded straight from the activation.
"""

from __future__ import annotations

import math

from kfoundry.experts.composer.fusion import Group
from kfoundry.experts.composer.gemm import (
    BASE_CONFIGS,
    TILE_MASKS,
    TILE_REDUCTION_CONFIGS,
    TILE_ZEROS,
    dot_precisions,
    dot_step,
    epilogue,
    grouped_tiles,
    tile_constexprs,
    tile_grid,
)
from kfoundry.experts.composer.host import HostContext, product
from kfoundry.experts.composer.kernel import (
    Access,
    Emitter,
    KernelCode,
    KernelWriter,
    Space,
    allocate,
    space_sizes,
    unravel,
)

MIN_CHANNELS_LAST = 8  # input channels per group: fewer (a depthwise conv) would leave most of a BK chunk empty


def channels_last_fits(group: Group) -> bool:
    """A convolution the channels-last loop takes: not transposed, enough input channels per group."""
    op = group.anchor
    return op is not None and not op.attrs["transposed"] and op.args[1].shape[1] >= MIN_CHANNELS_LAST


def configs(group: Group, precision: str = "fp32", tolerance: float | None = None) -> list[dict]:
    # cuDNN convolutions run in TF32 on GPUs by PyTorch's default: TF32 variants are fair there
    precisions = dot_precisions(precision, tolerance, tf32_fair=True)
    channels_last = channels_last_fits(group)
    out = []
    for i, base in enumerate(TILE_REDUCTION_CONFIGS if group.reduced else BASE_CONFIGS[:4]):
        config = dict(base, precision=precisions[0] if i == 0 else precisions[i % len(precisions)])
        # three of four variants read channels-last copies (K-contiguous tiles, which the tensor cores'
        # TF32 path needs; no index division in the loop); the third keeps the direct gather
        config["layout"] = "channels_last" if channels_last and i != 2 else "direct"
        out.append(config)
    return out


def conv_kernel(group: Group, host: HostContext, config: dict) -> KernelCode:
    op = group.anchor
    x, w = op.args
    out = op.out
    attrs = op.attrs
    nd = len(attrs["stride"])
    transposed = attrs["transposed"]
    groups = attrs["groups"]
    kw = KernelWriter(f"_{group.name}_kernel")
    lines = allocate(host, group.exports)
    sizes = space_sizes(group, host, [(out, tuple(range(out.rank)))])
    xn = host.name(x)
    xs = host.shape(x)
    in_sizes = [kw.arg(f"in_size{d}", xs[2 + d]) for d in range(nd)]
    cin_group = kw.arg("c_per_group", f"{xs[1]} // {groups}" if groups != 1 else xs[1])
    out_channels = sizes[1]
    cout_group_host = f"{out_channels} // {groups}" if groups != 1 else out_channels
    cout_group = kw.arg("oc_per_group", cout_group_host)
    m_total_host = product([sizes[0]] + [sizes[2 + d] for d in range(nd)])
    m_total = kw.arg("M", m_total_host)
    tile_constexprs(kw, config, xn, cout_group_host)
    grouped_tiles(kw, m_total, cout_group)
    kw.line("pid_g = tl.program_id(1)")
    kw.line("# rows: (sample, output position); columns: output channels of this group")
    spatial_entries = [[0]] + [[2 + d] for d in range(nd)]
    coords = unravel(kw, "rm", spatial_entries, sizes, "o")
    sample, positions = coords[0], coords[1:]
    kw.line(f"oc = pid_g * {cout_group} + rn")
    kw.line(f"m_in = rm < {m_total}")
    kw.line(f"n_in = rn < {cout_group}")
    kw.line("acc = tl.zeros((BM, BN), dtype=tl.float32)")
    if config.get("layout") == "channels_last" and not transposed:
        _channels_last_loop(kw, host, lines, group, config, sample, positions, cin_group, in_sizes)
    else:
        _direct_loop(kw, host, group, config, sample, positions, cin_group, in_sizes)
    kw.line("# epilogue: the ops after the convolution, on the accumulator tile")
    kw.line("m_ok = m_in[:, None]")
    kw.line("n_ok = n_in[None, :]")
    entries, ecoords, masks, axes = [], [], [], []
    for d, coord, mask in [(0, f"{sample}[:, None]", "m_ok"), (1, "oc[None, :]", "n_ok")] + \
            [(2 + d, f"{positions[d]}[:, None]", "m_ok") for d in range(nd)]:
        if group.space[d] != 1:
            entries.append([d])
            ecoords.append(coord)
            masks.append(mask)
            axes.append("n" if d == 1 else "m")
    access = Access(kw, host, Space(entries, ecoords, masks, axes, TILE_ZEROS, TILE_MASKS))
    emitter = Emitter(kw, host, group, access)
    emitter.bind(out, "acc", {"m", "n"})
    epilogue(emitter, access, group, 1, cout_group)
    tiles = tile_grid(m_total_host, cout_group_host, config)
    lines.append(kw.launch(f"({tiles}, {groups})",
                           {"num_warps": str(config["num_warps"]), "num_stages": str(config["num_stages"])}))
    return KernelCode(kw.source(), lines, kw.helpers, kw.name)


def _direct_loop(kw: KernelWriter, host: HostContext, group: Group, config: dict, sample: str, positions: list[str],
                 cin_group: str, in_sizes: list[str]) -> None:
    """The reduction read straight from the (N, C, *spatial) input: k = (input channel, kernel position)."""
    op = group.anchor
    x, w = op.args
    attrs = op.attrs
    nd = len(attrs["stride"])
    transposed = attrs["transposed"]
    kernel = w.shape[2:]
    xn, wn = host.name(x), host.name(w)
    x_ptr, w_ptr = kw.arg("x_ptr", xn), kw.arg("w_ptr", wn)
    sx = [kw.arg(f"stride_x{i}", f"{xn}.stride({i})") for i in range(nd + 2)]
    sw = [kw.arg(f"stride_w{i}", f"{wn}.stride({i})") for i in range(nd + 2)]
    k_total = "k_total"
    kw.line(f"k_total = {cin_group} * {math.prod(kernel)}")
    kw.line(f"for k0 in range(0, {k_total}, BK):")
    kw.indent += 1
    kw.line("kk = k0 + rk")
    kw.line(f"k_in = kk < {k_total}")
    volume = math.prod(kernel)
    kw.line(f"ci = kk // {volume}")
    koffs = unravel(kw, f"(kk % {volume})", [[d] for d in range(nd)], [str(s) for s in kernel], "kd") \
        if nd > 1 else [f"(kk % {volume})"]
    a_mask = ["m_in[:, None]", "k_in[None, :]"]
    a_terms = [f"{sample}[:, None] * {sx[0]}", f"(pid_g * {cin_group} + ci)[None, :] * {sx[1]}"]
    for d in range(nd):
        s, p, dil = attrs["stride"][d], attrs["padding"][d], attrs["dilation"][d]
        pos, koff = positions[d], koffs[d]
        i = kw.local(f"i{d}")
        if not transposed:
            kw.line(f"{i} = {pos}[:, None] * {s} - {p} + {koff}[None, :] * {dil}")
            a_mask.append(f"({i} >= 0) & ({i} < {in_sizes[d]})")
        else:
            t = kw.local(f"t{d}")
            kw.line(f"{t} = {pos}[:, None] + {p} - {koff}[None, :] * {dil}")
            kw.line(f"{i} = {t} // {s}")
            a_mask.append(f"({t} >= 0) & ({t} % {s} == 0) & ({i} < {in_sizes[d]})" if s != 1 else
                          f"({t} >= 0) & ({i} < {in_sizes[d]})")
        a_terms.append(f"{i} * {sx[2 + d]}")
    kw.line(f"a = tl.load({x_ptr} + {' + '.join(a_terms)},")
    kw.line(f"            mask={' & '.join(a_mask)}, other=0.0)")
    if not transposed:
        b_terms = [f"oc[None, :] * {sw[0]}", f"ci[:, None] * {sw[1]}"]
    else:
        b_terms = [f"(pid_g * {cin_group} + ci)[:, None] * {sw[0]}", f"rn[None, :] * {sw[1]}"]
    b_terms += [f"{koffs[d]}[:, None] * {sw[2 + d]}" for d in range(nd)]
    kw.line(f"b = tl.load({w_ptr} + {' + '.join(b_terms)}, mask=k_in[:, None] & n_in[None, :], other=0.0)")
    dot_step(kw, config, x, w)
    kw.indent -= 1


def _channels_last_loop(kw: KernelWriter, host: HostContext, lines: list[str], group: Group, config: dict,
                        sample: str, positions: list[str], cin_group: str, in_sizes: list[str]) -> None:
    """The reduction over channels-last copies of the input (N, *spatial, C) and the weight (Cout, *kernel, Cin),
    made by a copy kernel before the launch: one loop over (kernel position, chunk of BK input channels), so
    each tile is contiguous along k and its row offsets are computed once per kernel position."""
    op = group.anchor
    x, w = op.args
    attrs = op.attrs
    nd = len(attrs["stride"])
    kernel = [int(s) for s in w.shape[2:]]
    volume = math.prod(kernel)
    kw.helpers.add("_channels_last")
    x_cl, w_cl = host.fresh(f"{host.name(x)}_cl"), host.fresh(f"{host.name(w)}_cl")
    lines.append(f"        {x_cl} = _channels_last({host.name(x)})")
    lines.append(f"        {w_cl} = _channels_last({host.name(w)})")
    xc_ptr, wc_ptr = kw.arg("xc_ptr", x_cl), kw.arg("wc_ptr", w_cl)
    sxc = [kw.arg(f"stride_xc{i}", f"{x_cl}.stride({i})") for i in range(nd + 1)]  # sample, then spatial
    swc = [kw.arg(f"stride_wc{i}", f"{w_cl}.stride({i})") for i in range(nd + 1)]  # out channel, then kernel
    chunks = kw.local("chunks")
    kw.line(f"{chunks} = tl.cdiv({cin_group}, BK)")
    it, tap, kc = kw.local("it"), kw.local("tap"), kw.local("kc")
    kw.line(f"for {it} in range(0, {volume} * {chunks}):")
    kw.indent += 1
    kw.line(f"{tap} = {it} // {chunks}")
    kw.line(f"{kc} = ({it} % {chunks}) * BK + rk")
    koffs = [tap]
    if nd > 1:
        koffs = [""] * nd
        rest = tap
        for d in range(nd - 1, -1, -1):
            koffs[d] = kw.local(f"kd{d}")
            if d == 0:
                kw.line(f"{koffs[d]} = {rest}")
            else:
                kw.line(f"{koffs[d]} = {rest} % {kernel[d]}")
                nxt = kw.local("tap_rest")
                kw.line(f"{nxt} = {rest} // {kernel[d]}")
                rest = nxt
    row_ok = kw.local("row_ok")
    row_off = kw.local("row_off")
    ok_terms, off_terms = ["m_in"], [f"{sample} * {sxc[0]}"]
    for d in range(nd):
        s, p, dil = attrs["stride"][d], attrs["padding"][d], attrs["dilation"][d]
        i = kw.local(f"i{d}")
        kw.line(f"{i} = {positions[d]} * {s} - {p} + {koffs[d]} * {dil}")
        ok_terms.append(f"({i} >= 0) & ({i} < {in_sizes[d]})")
        off_terms.append(f"{i} * {sxc[1 + d]}")
    kw.line(f"{row_ok} = {' & '.join(ok_terms)}")
    kw.line(f"{row_off} = {' + '.join(off_terms)}")
    channel = f"(pid_g * {cin_group} + {kc})" if attrs["groups"] != 1 else kc
    kw.line(f"k_in = {kc} < {cin_group}")
    kw.line(f"a = tl.load({xc_ptr} + {row_off}[:, None] + {channel}[None, :], "
            f"mask={row_ok}[:, None] & k_in[None, :], other=0.0)")
    tap_terms = " + ".join(f"{koffs[d]} * {swc[1 + d]}" for d in range(nd))
    kw.line(f"b = tl.load({wc_ptr} + oc[None, :] * {swc[0]} + {tap_terms} + {kc}[:, None], "
            f"mask=k_in[:, None] & n_in[None, :], other=0.0)")
    dot_step(kw, config, x, w)
    kw.indent -= 1
