"""The pointwise template: any chain of pointwise ops as one flat kernel over the broadcast shape.

Each program handles BLOCK elements of the (dim-merged) space; every tensor is read through its own strides,
with stride 0 where it broadcasts, so a (C, 1, 1) parameter against an (N, C, H, W) activation needs no copy.

``planar`` (where the space's innermost merged coordinate, the plane, holds at least PLANAR_MIN elements): each
program takes BLOCK elements of one plane, so the outer coordinates are scalars from one division a program,
not a division chain a lane, and what runs along them alone (a norm's mean and rstd, a channel's weight) is one
load a program; the plane is read in whole fours where the sizes allow (ALIGN, as the row template does).
"""

from __future__ import annotations

import math

from kfoundry.experts.composer.emit.host import HostContext, product
from kfoundry.experts.composer.ir.graph import LAYOUTS
from kfoundry.experts.composer.emit.kernel import (
    Access,
    Emitter,
    KernelCode,
    KernelWriter,
    Space,
    accesses_of,
    allocate,
    merge_dims,
    space_numel,
    space_sizes,
    unravel,
    rounded_down,
    whole_fours_test,
)
from kfoundry.experts.composer.plan.steps import Group, kernel_name
from kfoundry.experts.composer.templates.device_limits import DeviceLimits, fit_configs, tile_need
from kfoundry.types import DeviceFacts

CONFIGS = [
    {"BLOCK": 1024, "num_warps": 4},
    {"BLOCK": 2048, "num_warps": 8},
    {"BLOCK": 512, "num_warps": 4},
    {"BLOCK": 4096, "num_warps": 8},
]


PLANAR_MIN = 1024  # elements of the innermost merged coordinate a planar kernel needs


def plane_size(group: Group) -> int | None:
    """The innermost merged coordinate's extent where the planar layout fits the group: the space merges into
    several coordinates, the innermost of at least PLANAR_MIN elements, and no op moves dims (flip, roll, pad,
    cat: their coordinates are their own)."""
    if not group.ops or any(op.name in LAYOUTS for op in group.ops):
        return None
    entries = merge_dims([list(range(len(group.space)))], accesses_of(group), group.space)[0]
    if len(entries) < 2:
        return None
    inner = math.prod(group.space[d] for d in entries[-1])
    return inner if inner >= PLANAR_MIN else None


def configs(group: Group, device: DeviceFacts | DeviceLimits | None = None) -> list[dict]:
    """The configurations that fit `device` (device_limits; None: the default target); planar ones first where
    they fit the group (not yet timed on a GPU against the flat ones: the pooling kernels' planar layout took
    conv_suite 20's pooling kernel from 182 to 78 us)."""
    found = [dict(c) for c in CONFIGS]
    if plane_size(group) is not None:
        found = [dict(c, mode="planar") for c in CONFIGS[:2]] + found
    return fit_configs(found, lambda c: tile_need(c["BLOCK"], num_warps=c["num_warps"]), device)


def pointwise_kernel(group: Group, host: HostContext, config: dict) -> KernelCode:
    kw = KernelWriter(kernel_name(group))
    lines = allocate(host, group.exports)
    accesses = accesses_of(group)
    entries, merged = merge_dims([list(range(len(group.space)))], accesses, group.space)
    # a flip / roll / pad / cat gives the size of the dims it moves (its inputs do not run along them)
    sizes = space_sizes(group, host, [(op.out, group.vmap[op.out]) for op in group.ops if op.name in LAYOUTS])
    total = space_numel(group, host, [product([sizes[d] for d in e]) for e in entries])
    kw.line("pid = tl.program_id(0)")
    block = kw.constexpr("BLOCK", str(config["BLOCK"]))
    planar = config.get("mode") == "planar"
    if planar:  # BLOCK elements of one plane: the outer coordinates are the plane's, scalars
        plane_host = product([sizes[d] for d in entries[-1]])
        planes_host = product([product([sizes[d] for d in e]) for e in entries[:-1]])
        n = kw.arg("n_plane", plane_host)
        align_host = host.fresh("align")
        kw.constexpr("ALIGN", align_host)
        blocks = kw.local("blocks")
        kw.line(f"{blocks} = tl.cdiv({n}, {block})")
        kw.line(f"plane = pid // {blocks}")
        kw.line(f"offs = (pid % {blocks}) * {block} + tl.arange(0, {block})")
        kw.line(f"mask = offs < {rounded_down(n)}")
        coords = unravel(kw, "plane", entries[:-1], sizes, "i") + ["offs"]
        outer = len(entries) - 1
        space = Space(entries, coords, [None] * outer + ["mask"], [None] * outer + ["flat"], {"flat": "offs * 0"},
                      {"flat": "mask"}, quantum={entry: "ALIGN" for entry in range(outer)})
    else:
        n = kw.arg("n_elements", total)
        kw.line(f"offs = pid * {block} + tl.arange(0, {block})")
        kw.line(f"mask = offs < {n}")
        coords = unravel(kw, "offs", entries, sizes, "i")
        space = Space(entries, coords, ["mask"] * len(entries), ["flat"] * len(entries), {"flat": "offs * 0"},
                      {"flat": "mask"})
    access = Access(kw, host, space, {v for v in merged if v not in group.exports})
    emitter = Emitter(kw, host, group, access)
    for op in group.ops:
        emitter.pointwise(op)
    for value in group.exports:
        emitter.store(value, group.vmap[value], extra_mask="mask")
    if planar:
        whole_fours_test(kw, align_host, plane_host, space)
        grid = f"({planes_host} * triton.cdiv({plane_host}, {config['BLOCK']}),)"
    else:
        grid = f"(triton.cdiv({total}, {config['BLOCK']}),)"
    lines.append(kw.launch(grid, {"num_warps": str(config["num_warps"])}))
    return KernelCode(kw.source(), lines, kw.helpers, kw.name)
