"""Which reductions of a row group share a pass over the row, and which need none.

A looped or split row kernel reads the row once per level of dependent reductions. Two pairs of levels
merge into one pass because the later reduction can be carried along with the earlier one:

* online softmax: sum(exp(x - m)) with m = amax(x) keeps a running sum that is rescaled by exp(m_old - m_new)
  whenever the running max grows;
* shifted sums: mean((x - m) * (x - m)) with m = mean(x) comes from the sums of x - K and of (x - K)^2,
  K a value near the row's mean known before the pass (the mean of the row's first block), so the raw
  sums of squares' cancellation does not arise; partial sums (lanes, chunks of a split row) just add up.
  (Welford's update, one division per element, was measured slower than two passes on the H200.)

A gather needs no pass: sum(where(iota == t, v, 0)) along the row, with t constant along the row, is v at
column t (cross-entropy's pick of the target's log-probability).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kfoundry.experts.composer.ir.graph import CONST, Op, Value


@dataclass
class Pass:
    levels: list[int]  # the levels of reductions this pass completes (one, or two merged)
    scanned: list[Op]  # the reductions folded block by block
    online: dict[Op, Op] = field(default_factory=dict)  # sum of exp(x - max) -> its amax (in scanned)
    deviations: dict[Op, Op] = field(default_factory=dict)  # mean of squared deviations -> its mean (in scanned)

    @property
    def carried(self) -> list[Op]:
        """Reductions of the next level computed in this pass alongside their partner."""
        return [*self.online, *self.deviations]


def producer_of(value, name: str, vmap: dict) -> Op | None:
    """The op computing `value` inside the group when it is a `name`, else None."""
    if isinstance(value, Value) and value in vmap and value.producer is not None and value.producer.name == name:
        return value.producer
    return None


def online_partner(op: Op, scanned: list[Op], vmap: dict) -> Op | None:
    """The amax among `scanned` when op is sum(exp(x - amax(x))) of the same float x, else None."""
    if op.name != "sum" or not op.args[0].is_float:
        return None
    e = producer_of(op.args[0], "exp", vmap)
    d = producer_of(e.args[0], "sub", vmap) if e else None
    if d is None:
        return None
    x, top = d.args[0], d.args[1]
    for candidate in scanned:
        if candidate.name == "amax" and candidate.out is top and candidate.args[0] is x and x.is_float:
            return candidate
    return None


def deviation_partner(op: Op, scanned: list[Op], vmap: dict) -> Op | None:
    """The mean among `scanned` when op is mean((x - mean(x)) * (x - mean(x))) of the same float x (a
    variance, any correction), else None."""
    if op.name != "mean" or not op.args[0].is_float:
        return None
    square = producer_of(op.args[0], "mul", vmap)
    if square is None or square.args[0] is not square.args[1]:
        return None
    d = producer_of(square.args[0], "sub", vmap)
    if d is None:
        return None
    x, centre = d.args[0], d.args[1]
    for candidate in scanned:
        if (candidate.name == "mean" and candidate.out is centre and candidate.args[0] is x and x.is_float
                and not candidate.attrs.get("correction", 0)):
            return candidate
    return None


def gather_of(op: Op, vmap: dict, column_dim: int | None, along_row) -> tuple[int, Value] | None:
    """(position of t in the eq, v) when op sums where(iota == t, v, 0) along the row, whose one reduced
    coordinate is the space dim `column_dim`, with t an integer tensor that does not vary along the row
    (`along_row(op, position)` says whether an argument does) and v a float tensor; else None."""
    if op.name != "sum" or column_dim is None:
        return None
    w = producer_of(op.args[0], "where", vmap)
    if w is None or not op.args[0].is_float:
        return None
    hit, v, zero = w.args
    if not is_zero(zero) or not isinstance(v, Value) or not v.is_tensor or not v.is_float:
        return None
    eq = producer_of(hit, "eq", vmap)
    if eq is None:
        return None
    for k in (0, 1):
        index, t = eq.args[k], eq.args[1 - k]
        iota = producer_of(index, "iota", vmap)
        if iota is None or vmap[index][iota.attrs["dim"]] != column_dim:
            continue
        if isinstance(t, Value) and t.is_tensor and not t.is_float and not along_row(eq, 1 - k):
            return 1 - k, v
    return None


def is_zero(arg) -> bool:
    if isinstance(arg, Value):
        return arg.kind == CONST and arg.concrete == 0
    return isinstance(arg, (int, float)) and not isinstance(arg, bool) and arg == 0


def schedule(levels: list[list[Op]], vmap: dict, *, online: bool, gathered=lambda op: False) -> list[Pass]:
    """The passes over the row for reductions grouped by level (levels[0] is level 1): a level's reductions
    other than gathers are scanned; the next level joins the pass when every one of its reductions other
    than gathers is carried by a partner scanned in it (variances always, online softmax when `online`)."""
    passes = []
    level = 1
    while level <= len(levels):
        scanned = [op for op in levels[level - 1] if not gathered(op)]
        following = [op for op in (levels[level] if level < len(levels) else []) if not gathered(op)]
        online_pairs, deviation_pairs = {}, {}
        for op in following:
            partner = online_partner(op, scanned, vmap) if online else None
            if partner is not None:
                online_pairs[op] = partner
                continue
            partner = deviation_partner(op, scanned, vmap)
            if partner is not None:
                deviation_pairs[op] = partner
        merged = bool(following) and len(online_pairs) + len(deviation_pairs) == len(following)
        if merged:
            passes.append(Pass([level, level + 1], scanned, online_pairs, deviation_pairs))
        else:
            passes.append(Pass([level], scanned))
        level += 2 if merged else 1
    return passes
