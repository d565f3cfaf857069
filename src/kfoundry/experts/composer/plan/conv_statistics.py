"""A normalisation's statistics gathered in the epilogue of the convolution it follows.

A GroupNorm, InstanceNorm, LayerNorm or BatchNorm (training mode) after a convolution is a row kernel that reads
the conv output for its mean and variance, then again (or from registers) to normalise it. Here the convolution's
epilogue gathers them instead: each tile writes, per output channel, the count, mean and sum of squared
deviations of its rows, and a small kernel (templates/moments.py) combines those partial moments per row of the
norm by Chan's formula, which keeps the variance as exact as two passes would. The row kernel is left with the
pointwise normalisation: one read of the conv output instead of two.

A row of the norm must be a set of whole channels of one sample (GroupNorm: Cg consecutive channels of a sample;
InstanceNorm: one; LayerNorm over (C, *spatial): all of them) or one channel of every sample (BatchNorm): the
partial moments are then per (sample, tile of positions, channel), and the tiles of the conv never straddle two
samples (templates/conv.py pads each sample's rows to whole tiles).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

from kfoundry.experts.composer.ir.graph import Op, Value, category
from kfoundry.experts.composer.plan.fusion import computing, leaf_map_for, own_map, view_root
from kfoundry.experts.composer.plan.steps import Group, Plan, renumbered
from kfoundry.experts.composer.templates.row_passes import deviation_partner


@dataclass(eq=False)
class Statistics:
    """What a convolution's epilogue gathers for the norm after it, and the kernel that finishes them."""

    source: Value  # the conv group's export the norm reads (through views)
    mean: Op  # the norm's mean of it
    variances: list[Op]  # its means of squared deviations from that mean
    channels_per_row: int  # Cg: consecutive channels that make one row of the norm
    per_sample: bool  # rows (sample, channel group); else (channel group) over every sample (BatchNorm)


def with_conv_statistics(plan: Plan) -> Plan | None:
    """The plan with each convolution followed by a norm gathering the norm's statistics in its epilogue; None
    where no convolution is followed that way (or the plan has rolled loops). The given plan is left as it is."""
    if plan.loops:
        return None
    # the new plan's own steps (shallow copies): their indices and names change, the given plan's do not
    own = {id(step): copy.copy(step) for step in plan.steps}
    steps = [own[id(step)] for step in plan.steps]
    found = False
    for conv in [g for g in plan.groups if g.kind == "conv" and not g.reduced and g.prologue is None]:
        for row in [g for g in plan.groups if g.kind == "row" and g.index > conv.index]:
            statistics = _statistics(plan, conv, row)
            if statistics is None:
                continue
            own[id(conv)].statistics = statistics
            applied = _without_statistics(row, statistics)
            steps[steps.index(own[id(row)])] = applied
            _apply_in_next_row(plan, steps, applied)
            finish = Group("moments", 0, tuple(statistics.mean.out.shape), anchor=statistics.mean,
                           exports=[statistics.mean.out] + [v.out for v in statistics.variances],
                           shaped=statistics.mean.out, statistics=statistics)
            steps.insert(steps.index(own[id(conv)]) + 1, finish)
            found = True
            break
    return renumbered(plan, steps) if found else None


def _apply_in_next_row(plan: Plan, steps: list, applied: Group) -> None:
    """Where the norm's apply (a pointwise kernel once its moments come from the conv) computes one tensor that only
    a later row kernel of the same space reads, element for element, the apply's ops run in that row kernel instead
    (BatchNorm then a max over channels; GroupNorm then a mean over all but the batch, which reads the grouped view):
    the normalised tensor is never written and read back."""
    if applied.kind != "pointwise" or len(applied.exports) != 1:
        return
    x = applied.exports[0]
    users = plan.graph.users().get(x, [])
    if x in plan.graph.outputs or not users:
        return
    rows = [s for s in steps if isinstance(s, Group) and s.kind == "row" and s.index > applied.index
            and any(op in s.ops for op in users)]
    if len(rows) != 1:
        return
    row = rows[0]
    reads = [(op, i) for op in row.ops for i, arg in enumerate(op.args) if arg is x]
    if row.space != applied.space or x in row.vmap or any(op not in row.ops for op in users) or \
            any(row.leaf_map(op, i) != applied.vmap[x] for op, i in reads):
        return
    merged = copy.copy(row)
    merged.ops = list(applied.ops) + list(row.ops)
    merged.vmap = {**applied.vmap, **row.vmap}
    computed_here = {(id(op), i) for op, i in reads}  # x is no longer read from memory
    merged.leaf_maps = {**applied.leaf_maps,
                        **{key: m for key, m in row.leaf_maps.items() if key not in computed_here}}
    steps[steps.index(row)] = merged
    steps.remove(applied)


def _statistics(plan: Plan, conv: Group, row: Group) -> Statistics | None:
    reductions = [op for op in row.ops if category(op.name) == "reduction"]
    means = [op for op in reductions if op.name == "mean" and not op.attrs.get("correction")]
    for mean in means:
        x = mean.args[0]
        if x in row.vmap or view_root(x) not in conv.exports or not x.is_float:
            continue
        variances = [op for op in reductions if op is not mean and deviation_partner(op, [mean], row.vmap)]
        if len(variances) + 1 != len(reductions):
            continue  # another reduction in the row kernel: it keeps its own pass
        if any(v in row.exports or v in plan.graph.outputs for v in [mean.out] + [op.out for op in variances]):
            continue
        source = view_root(x)
        if conv.vmap.get(source) != own_map(source) or source.shape != conv.space or \
                row.leaf_map(mean, 0) != own_map(x):
            continue
        rows = _rows(source, x, row)
        if rows is not None:
            return Statistics(source, mean, variances, *rows)
    return None


def _rows(source: Value, x: Value, row: Group) -> tuple[int, bool] | None:
    """(channels per row, per sample) when each row of the norm over `x` (a view of the conv output `source`,
    shaped (N, C, *spatial)) is whole channels of one sample, or one channel of every sample; else None."""
    reduced = {d for d in row.reduced if row.space[d] != 1}
    outer = [d for d in range(len(row.space)) if d not in reduced and row.space[d] != 1]
    n, c = int(source.shape[0]), int(source.shape[1])
    positions = math.prod(int(s) for s in source.shape[2:])
    if x.shape == source.shape and outer == [1]:  # BatchNorm: one channel over every sample and position
        return 1, False
    if not reduced or outer and max(outer) > min(reduced):
        return None  # the rows must be runs of the flat conv output: x's reduced dims after its others
    columns = math.prod(int(s) for s in x.shape[max(outer) + 1:]) if outer else n * c * positions
    if positions == 0 or columns % positions or c % (columns // positions) or n * c * positions % columns:
        return None
    return columns // positions, True


def _without_statistics(row: Group, statistics: Statistics) -> Group:
    """The row kernel with the mean and variances read from memory (the moments kernel's): a pointwise kernel when
    no reduction is left; the ops only the variances needed are gone."""
    read = frozenset(op.out for op in [statistics.mean, *statistics.variances])
    needed = computing(row, row.exports, read)
    out = Group("pointwise", row.index, row.space, shaped=row.shaped, name=row.name)
    for op in row.ops:
        if op not in needed:
            continue
        out.ops.append(op)
        out.vmap[op.out] = row.vmap[op.out]
        for position, arg in enumerate(op.args):
            if not (isinstance(arg, Value) and arg.is_tensor):
                continue
            if arg in read:
                out.leaf_maps[(id(op), position)] = leaf_map_for(arg, op.out, row.vmap[op.out])
            elif (id(op), position) in row.leaf_maps:
                out.leaf_maps[(id(op), position)] = row.leaf_maps[(id(op), position)]
    out.exports = list(row.exports)
    return out
