"""The moments kernel: a norm's mean and variances from the partial moments a convolution's epilogue gathered
(plan/conv_statistics.py).

Each entry of the partials is (count, mean, sum of squared deviations from that mean) of one output channel over
one tile of one sample's positions (and one output phase of a transposed convolution), a channel's entries in one
run (sample, tile, phase): the lanes of a program read neighbouring entries. One program per row of
the norm combines its entries by Chan's formula: mean = sum(n_i * m_i) / n, and the squared deviations
M2 = sum(M2_i + n_i * (m_i - mean)^2), as exact as a second pass over the conv output would be.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kfoundry.experts.composer.emit.host import HostContext
from kfoundry.experts.composer.emit.kernel import KernelCode, KernelWriter, allocate
from kfoundry.experts.composer.plan.steps import Group, kernel_name
from kfoundry.experts.composer.templates.device_limits import DeviceLimits, fit_configs, tile_need
from kfoundry.types import DeviceFacts

CONFIGS = [{"BLOCK": 512, "num_warps": 4}, {"BLOCK": 128, "num_warps": 2}]
# few rows (a BatchNorm's channels) leave most SMs idle with one program each: each program then reads its long
# runs of entries with many more lanes in flight (conv_suite 15: 64 rows of 16384 entries took 165 us at BLOCK 512,
# 6% occupancy, on an H100)
WIDE = {"BLOCK": 4096, "num_warps": 16}
FEW_ROWS = 512


@dataclass(frozen=True)
class Partials:
    """Host names of a convolution's partial moments: the (channels * samples * tiles * phases, 3) buffer and
    the expressions of its sizes."""

    buffer: str
    samples: str
    tiles: str
    phases: int
    channels: str


def configs(group: Group, device: DeviceFacts | DeviceLimits | None = None) -> list[dict]:
    """The configurations that fit `device`; the wide one first where the norm has fewer than FEW_ROWS rows."""
    rows = math.prod(int(d) for d in group.statistics.mean.out.shape) if group.statistics is not None else None
    ordered = ([WIDE] if rows is not None and rows < FEW_ROWS else []) + CONFIGS
    return fit_configs([dict(c) for c in ordered], lambda c: tile_need(c["BLOCK"], num_warps=c["num_warps"]), device)


def moments_kernel(group: Group, host: HostContext, config: dict) -> KernelCode:
    statistics = group.statistics
    partials: Partials = host.partials[statistics]
    kw = KernelWriter(kernel_name(group))
    lines = allocate(host, group.exports)
    part = kw.arg("moments_ptr", partials.buffer)
    mean_out = statistics.mean.out
    rows_host = f"{host.name(mean_out)}.numel()"
    # channels in a row: the norm's rows of a sample split its channels (GroupNorm's channels per group, read from
    # the row count at call time: a candidate holds at other channel and group counts); one for BatchNorm
    per_row = f"{partials.channels} * {partials.samples} // {rows_host}" if statistics.per_sample else \
        str(statistics.channels_per_row)
    cg = kw.arg("channels_per_row", per_row)
    span = kw.arg("span", f"{partials.tiles} * {partials.phases}")  # entries of one channel of one sample
    samples = kw.arg("n_samples", partials.samples)
    block = kw.constexpr("BLOCK", str(config["BLOCK"]))
    kw.line("r = tl.program_id(0)")
    if statistics.per_sample:  # a row: some channels of one sample
        kw.line(f"rows_per_sample = {kw.arg('channels', partials.channels)} // {cg}")
        kw.line("n0 = r // rows_per_sample")
        kw.line(f"c0 = (r % rows_per_sample) * {cg}")
        kw.line(f"run = {span}")  # a channel's entries in the row
    else:  # one row per channel group, over every sample
        kw.line("n0 = 0")
        kw.line(f"c0 = r * {cg}")
        kw.line(f"run = {samples} * {span}")
    kw.line(f"entries = run * {cg}")
    kw.line(f"lanes = tl.arange(0, {block})")

    def entry_loop(body: list[str]) -> None:
        kw.line(f"for e0 in range(0, entries, {block}):")
        kw.indent += 1
        kw.line("e = e0 + lanes")
        kw.line("ok = e < entries")
        kw.line(f"slot = ((c0 + e // run) * {samples} * {span} + n0 * {span} + e % run) * 3")
        kw.line(f"cnt = tl.load({part} + slot, mask=ok, other=0.0)")
        kw.line(f"mu = tl.load({part} + slot + 1, mask=ok, other=0.0)")
        for line in body:
            kw.line(line)
        kw.indent -= 1

    kw.line(f"acc_n = tl.zeros(({block},), tl.float32)")
    kw.line(f"acc_s = tl.zeros(({block},), tl.float32)")
    entry_loop(["acc_n += cnt", "acc_s += cnt * mu"])
    kw.line("total = tl.sum(acc_n, axis=0)")
    kw.line("mean = tl.sum(acc_s, axis=0) / total")
    kw.line(f"acc_q = tl.zeros(({block},), tl.float32)")
    entry_loop([f"acc_q += tl.load({part} + slot + 2, mask=ok, other=0.0) + cnt * (mu - mean) * (mu - mean)"])
    kw.line("squares = tl.sum(acc_q, axis=0)")
    kw.line(f"tl.store({kw.arg('mean_ptr', host.name(mean_out))} + r, mean)")
    for k, variance in enumerate(statistics.variances):
        correction = float(variance.attrs.get("correction", 0) or 0)
        divisor = f"(total - {correction!r})" if correction else "total"
        kw.line(f"tl.store({kw.arg(f'var{k}_ptr', host.name(variance.out))} + r, squares / {divisor})")
    lines.append(kw.launch(f"({rows_host},)", {"num_warps": str(config["num_warps"])}))
    return KernelCode(kw.source(), lines, kw.helpers, kw.name)
