"""The pointwise template: any chain of pointwise ops as one flat kernel over the broadcast shape.

Each program handles BLOCK elements of the (dim-merged) space; every tensor is read through its own strides,
with stride 0 where it broadcasts, so a (C, 1, 1) parameter against an (N, C, H, W) activation needs no copy.
"""

from __future__ import annotations

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


def configs(group: Group, device: DeviceFacts | DeviceLimits | None = None) -> list[dict]:
    """The configurations that fit `device` (device_limits; None: the default target)."""
    return fit_configs([dict(c) for c in CONFIGS], lambda c: tile_need(c["BLOCK"], num_warps=c["num_warps"]), device)


def pointwise_kernel(group: Group, host: HostContext, config: dict) -> KernelCode:
    kw = KernelWriter(kernel_name(group))
    lines = allocate(host, group.exports)
    accesses = accesses_of(group)
    entries, merged = merge_dims([list(range(len(group.space)))], accesses, group.space)
    # a flip / roll / pad / cat gives the size of the dims it moves (its inputs do not run along them)
    sizes = space_sizes(group, host, [(op.out, group.vmap[op.out]) for op in group.ops if op.name in LAYOUTS])
    total = space_numel(group, host, [product([sizes[d] for d in e]) for e in entries])
    kw.line("pid = tl.program_id(0)")
    n = kw.arg("n_elements", total)
    block = kw.constexpr("BLOCK", str(config["BLOCK"]))
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
    grid = f"(triton.cdiv({total}, {config['BLOCK']}),)"
    lines.append(kw.launch(grid, {"num_warps": str(config["num_warps"])}))
    return KernelCode(kw.source(), lines, kw.helpers, kw.name)
