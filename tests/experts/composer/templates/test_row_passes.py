"""Which reductions of a row share a pass: online softmax and variance partners, gathers, and the schedule of
passes, on small hand-built graphs (the kernels they make are evaluated in test_reduction)."""

import torch

from kfoundry.experts.composer.ir.graph import CONST, INPUT, TENSOR, Op, Value
from kfoundry.experts.composer.templates.row_passes import (
    deviation_partner,
    gather_of,
    is_zero,
    online_partner,
    schedule,
)

ROW = (4, 8)


class Row:
    """Ops over (4, 8) rows reduced along dim 1; vmap holds every value computed in the group."""

    def __init__(self):
        self.vmap = {}
        self.count = 0

    def input(self, name, dtype=torch.float32, shape=ROW):
        return Value(name, INPUT, shape, dtype)

    def op(self, name, args, dtype=torch.float32, shape=ROW, **attrs):
        self.count += 1
        out = Value(f"{name}{self.count}", TENSOR, shape, dtype)
        op = Op(name, list(args), attrs, out)
        out.producer = op
        self.vmap[out] = tuple(d if s != 1 else None for d, s in enumerate(shape))
        return op

    def reduce(self, name, x, **attrs):
        return self.op(name, [x], shape=(4, 1), dims=(1,), keepdim=True, **attrs)


def softmax_sum(row, x, top):
    e = row.op("exp", [row.op("sub", [x, top.out]).out])
    return row.reduce("sum", e.out)


def variance(row, x, mean, correction=0):
    d = row.op("sub", [x, mean.out])
    return row.reduce("mean", row.op("mul", [d.out, d.out]).out, correction=correction)


def test_a_sum_of_exp_rides_with_the_max_of_the_same_input():
    row = Row()
    x, y = row.input("x"), row.input("y")
    top = row.reduce("amax", x)
    assert online_partner(softmax_sum(row, x, top), [top], row.vmap) is top
    other = row.reduce("amax", y)
    assert online_partner(softmax_sum(row, x, other), [top, other], row.vmap) is None  # max of another tensor
    assert online_partner(softmax_sum(row, x, top), [], row.vmap) is None  # the max is not in this pass
    plain = row.reduce("sum", row.op("exp", [x]).out)
    assert online_partner(plain, [top], row.vmap) is None


def test_squared_deviations_ride_with_the_mean_they_are_taken_about():
    row = Row()
    x, y = row.input("x"), row.input("y")
    mean = row.reduce("mean", x)
    assert deviation_partner(variance(row, x, mean), [mean], row.vmap) is mean
    assert deviation_partner(variance(row, x, mean, correction=1), [mean], row.vmap) is mean  # torch.var
    assert deviation_partner(variance(row, y, mean), [mean], row.vmap) is None  # about another tensor's mean
    d = row.op("sub", [x, mean.out])
    e = row.op("sub", [y, mean.out])
    product = row.reduce("mean", row.op("mul", [d.out, e.out]).out)
    assert deviation_partner(product, [mean], row.vmap) is None  # not a square
    unbiased_mean = row.reduce("mean", x, correction=1)
    assert deviation_partner(variance(row, x, unbiased_mean), [unbiased_mean], row.vmap) is None


def test_a_sum_of_one_matching_index_is_a_gather():
    row = Row()
    x = row.input("x")
    target = row.input("target", torch.int64, (4, 1))
    iota = row.op("iota", [x], torch.int64, dim=1)
    hit = row.op("eq", [iota.out, target], torch.bool)
    picked = row.reduce("sum", row.op("where", [hit.out, x, 0.0]).out)
    never = lambda op, position: False
    assert gather_of(picked, row.vmap, 1, never) == (1, x)
    assert gather_of(picked, row.vmap, 0, never) is None  # the index runs along another dim than the row
    assert gather_of(picked, row.vmap, None, never) is None  # the row spans several coordinates
    assert gather_of(picked, row.vmap, 1, lambda op, position: True) is None  # t varies along the row
    swapped = row.reduce("sum", row.op("where", [row.op("eq", [target, iota.out], torch.bool).out, x, 0.0]).out)
    assert gather_of(swapped, row.vmap, 1, never) == (0, x)
    one = row.reduce("sum", row.op("where", [hit.out, x, 1.0]).out)
    assert gather_of(one, row.vmap, 1, never) is None  # the other lanes add 1, not 0
    zero = Value("zero", CONST, (), torch.float32, concrete=0.0)
    assert is_zero(zero) and is_zero(0) and not is_zero(False) and not is_zero(1e-9)
    scores = row.input("scores", torch.float32, (4, 1))
    float_hit = row.op("eq", [iota.out, scores], torch.bool)
    assert gather_of(row.reduce("sum", row.op("where", [float_hit.out, x, 0.0]).out), row.vmap, 1, never) is None


def test_a_level_joins_the_previous_pass_only_when_all_of_it_rides_along():
    row = Row()
    x = row.input("x")
    top, mean = row.reduce("amax", x), row.reduce("mean", x)
    total, var = softmax_sum(row, x, top), variance(row, x, mean)
    steps = schedule([[top, mean], [total, var]], row.vmap, online=True)
    assert [s.levels for s in steps] == [[1, 2]]
    assert steps[0].online == {total: top} and steps[0].deviations == {var: mean}
    assert steps[0].carried == [total, var]
    # the split template has no online softmax: the sum waits for the max; the variance still rides
    steps = schedule([[top, mean], [total, var]], row.vmap, online=False)
    assert [s.levels for s in steps] == [[1], [2]]
    assert [s.levels for s in schedule([[mean], [var]], row.vmap, online=False)] == [[1, 2]]
    # a reduction of level 2 with no partner keeps its own pass (and so does the one riding beside it)
    centred = row.reduce("sum", row.op("sub", [x, top.out]).out)
    steps = schedule([[top], [total, centred]], row.vmap, online=True)
    assert [s.levels for s in steps] == [[1], [2]] and steps[1].scanned == [total, centred]
    # gathers are left out of the passes: a level of gathers alone is scanned by none
    steps = schedule([[top], [total], [centred]], row.vmap, online=True, gathered=lambda op: op is centred)
    assert [s.levels for s in steps] == [[1, 2], [3]] and steps[1].scanned == []
