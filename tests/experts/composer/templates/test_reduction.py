"""The row template: reductions along dims, softmax and log-softmax, in one block per row, looping over the
row in blocks (several passes) or splitting each row over several programs (a launch per pass), passing the
evaluator."""

import re

import pytest
import torch

from kfoundry.experts.composer.compose import capture, group_configs
from kfoundry.experts.composer.emit.codegen import generate
from kfoundry.experts.composer.ir.graph import TENSOR, Op, Value
from kfoundry.experts.composer.plan.fusion import plan
from kfoundry.experts.composer.plan.steps import Group
from kfoundry.experts.composer.read.model_init import init_parts
from kfoundry.experts.composer.read.trace import load_sample
from kfoundry.experts.composer.templates.reduction import (
    configs,
    nestable,
    reduced_entries,
    split_count,
    splittable,
)
from tests.experts.composer.helpers import (
    EXAMPLE_SIZES,
    check_variants,
    compose_ok,
    example,
    first,
    fixture,
    submit,
    submit_all,
    verdict,
)

LOOPED = {"mode": "looped", "BR": 2, "BC": 4, "num_warps": 1}
SPLIT = {"mode": "split", "BR": 4, "BC": 4, "num_warps": 1, "SPLIT": 2}
NESTED = {"mode": "nested", "BR": 2, "BC": 4, "num_warps": 1}
NESTED_SPLIT = {"mode": "nested_split", "BR": 2, "BC": 4, "num_warps": 1, "SPLIT": 2}
# the fixtures composed and judged at fewer rows and columns than their own (the interpreter runs every program
# and every block of columns in turn); each row is still several blocks of 4 columns, the last partly filled
SIZES = {
    "reductions": {"a": 2},  # x: 12 rows of 12 columns; y: 24 rows of 10 and 20 rows of 12
    "one_pass_rows": {"rows": 3, "classes": 13},  # two blocks of 2 rows (the last half empty); 4 blocks of columns
    "batchnorm_relu": {"batch": 2, "channels": 3, "height": 5, "width": 5},  # 3 rows of 50 columns
    "group_instance_norm": {"batch": 2, "height": 3, "width": 5},  # GroupNorm rows of 30 columns, InstanceNorm of 15
    "layer_rms_norm": {"batch": 3, "features": 3, "length": 10},  # LayerNorm rows of 30 columns, RMSNorm of 10
}


def looped_source(problem, set_values: dict | None = None) -> str:
    """A candidate whose row kernels walk each row in blocks of 4 columns: several blocks per row here."""
    sample = load_sample(problem, set_values)
    the_plan = plan(capture(sample).graph)
    choice = {g.name: LOOPED if g.kind == "row" else group_configs(g, "fp32", None)[0] for g in the_plan.groups}
    return generate(the_plan, init_parts(sample.source.text), choice, sample.model, "looped")


def split_source(problem, set_values: dict | None = None, **changes) -> str:
    """A candidate whose row kernels split each row over SPLIT programs walking blocks of 4 columns (several
    blocks per chunk); row kernels with an argmax / argmin loop. Few programs: the interpreter runs each
    one in turn, at every stage."""
    sample = load_sample(problem, set_values)
    the_plan = plan(capture(sample).graph)
    split = {**SPLIT, **changes}
    choice = {g.name: split if g.kind == "row" and splittable(g) else LOOPED for g in the_plan.groups}
    assert any(c is split for c in choice.values())
    return generate(the_plan, init_parts(sample.source.text), choice, sample.model, "split")


def nested_source(problem, set_values: dict | None = None, config: dict = NESTED) -> str:
    """A candidate whose row kernels over several reduced coordinates loop over the outer ones one at a time and
    the innermost in blocks of 4 (several, the last partly filled); the others as the composer picks."""
    sample = load_sample(problem, set_values)
    the_plan = plan(capture(sample).graph)
    choice = {g.name: config if g.kind == "row" and len(reduced_entries(g)) > 1
              else group_configs(g, "fp32", None)[0] for g in the_plan.groups}
    assert config in choice.values()
    return generate(the_plan, init_parts(sample.source.text), choice, sample.model, config["mode"])


# BatchNorm over 3 samples split in 2: runs of 2 samples and of 1
NESTED_SPLIT_SIZES = {"batchnorm_relu": {**SIZES["batchnorm_relu"], "batch": 3}}
# 4 x 5 positions: the strides along the outer coordinates and the innermost extent divide by 4 (ALIGN 4)
ALIGNED_SIZES = {"group_instance_norm": {**SIZES["group_instance_norm"], "height": 4},
                 "batchnorm_relu": {**SIZES["batchnorm_relu"], "height": 4, "width": 5}}


@pytest.fixture(scope="module")
def nested():
    # GroupNorm rows: 2 channels (a scalar loop) of 15 positions (blocks of 4); BatchNorm in training mode:
    # each channel's row over 2 samples of 25 positions
    names = ("group_instance_norm", "batchnorm_relu")
    sources = {name: nested_source(fixture(name), SIZES[name]) for name in names}
    split = {name: nested_source(fixture(name), NESTED_SPLIT_SIZES.get(name, SIZES[name]), NESTED_SPLIT)
             for name in names}
    aligned = {name: nested_source(fixture(name), ALIGNED_SIZES[name], NESTED_SPLIT if name == "batchnorm_relu"
                                   else NESTED) for name in names}
    return {"sources": sources, "split": split, "aligned": aligned,
            "evaluations": {name: submit(fixture(name), source, SIZES[name], label=f"{name}_nested")
                            for name, source in sources.items()},
            "aligned_evaluations": {name: submit(fixture(name), source, ALIGNED_SIZES[name],
                                                 label=f"{name}_aligned", guard_runs=False)
                                    for name, source in aligned.items()},
            "split_evaluations": {name: submit(fixture(name), source, NESTED_SPLIT_SIZES.get(name, SIZES[name]),
                                               label=f"{name}_nested_split", guard_runs=False)
                                  for name, source in split.items()}}


@pytest.mark.parametrize("name", ["group_instance_norm", "batchnorm_relu"])
def test_nested_rows_pass_the_evaluator(nested, name):
    verdict(nested["evaluations"][name])


@pytest.mark.parametrize("name", ["group_instance_norm", "batchnorm_relu"])
def test_nested_split_rows_pass_the_evaluator(nested, name):
    verdict(nested["split_evaluations"][name])


@pytest.mark.parametrize("name", ["group_instance_norm", "batchnorm_relu"])
def test_nested_rows_in_whole_fours_pass_the_evaluator(nested, name):
    verdict(nested["aligned_evaluations"][name])


def test_nested_rows_read_strides_and_the_row_end_in_whole_fours(nested):
    gn = nested["sources"]["group_instance_norm"]
    kernel = gn.split("def _row_")[1]
    # the host passes ALIGN = 4 only where the innermost extent and the big tensors' outer strides divide by 4
    assert "def _whole_fours(*sizes):" in gn and re.search(r"align = _whole_fours\(\w+\.shape\[3\], ", gn)
    assert "ALIGN=align" in gn and "col_ok = cols < (n_inner // ALIGN) * ALIGN" in kernel
    assert "outer_col * ((grouped_s2 // ALIGN) * ALIGN)" in kernel
    # the weights run along the channel alone: their strides (1) are read as they are, and not tested
    assert re.search(r"gn_weight_grouped_ptr \+ o1 \* gn_weight_grouped_s0 \+ outer_col_2 \* gn_weight_grouped_s1,", kernel)
    assert "gn_weight_grouped.stride(1)" not in gn.split("align = _whole_fours(")[1].split(")")[0]
    assert "ALIGN" in nested["split"]["batchnorm_relu"].split("def _row_")[1]


def test_nested_split_rows_give_each_program_a_run_of_outer_coordinates(nested):
    bn = nested["split"]["batchnorm_relu"].split("def _row_")[1]
    assert "chunk = tl.cdiv(n_outer, SPLIT)" in bn and "col_hi = tl.minimum(col_lo + chunk, n_outer)" in bn
    assert len(re.findall(r"for outer_col(_\d)? in range\(col_lo, col_hi\):", bn)) == 2  # statistics, outputs
    stages = bn.split("if STAGE == 1")[1].replace("// ALIGN", "")
    assert "//" not in stages and "%" not in stages


def test_nested_rows_take_coordinates_without_division(nested):
    gn = nested["sources"]["group_instance_norm"].split("def _row_")[1]
    # the statistics' pass and the writing pass, each a scalar loop over the group's channels around blocks of
    # their positions; the channel's weight and bias: one value per row, not per lane
    assert len(re.findall(r"for outer_col(_\d)? in range\(0, n_outer\):", gn)) == 2
    assert gn.count("for c0 in range(0, n_inner, BC):") == 2
    loops = gn.split("for outer_col")[1].replace("// ALIGN", "")  # a scalar's, by a constexpr
    assert "//" not in loops and "%" not in loops
    assert re.search(r"gn_weight_grouped_ptr \+ o1 \* gn_weight_grouped_s0 \+ outer_col_2 \* ", gn)
    assert "/ tl.minimum(n_inner, BC)" in gn  # the shift: the mean of the first block of the first channel
    instance = nested["sources"]["group_instance_norm"].split("def _row_")[2]
    assert "n_outer" not in instance  # InstanceNorm's positions merge into one coordinate: the flat kernel
    bn = nested["sources"]["batchnorm_relu"].split("def _row_")[1]
    assert "for c0 in range(0, n_inner, BC):" in bn and "relu_ptr + rows * ((relu_s1 // ALIGN) * ALIGN) + outer_col_2 * ((relu_s0 // ALIGN) * ALIGN)" in bn


def test_nested_configs_come_first_where_the_reduced_dims_do_not_merge():
    def row_groups(name, sizes):
        sample = load_sample(fixture(name), sizes)
        return [g for g in plan(capture(sample).graph).groups if g.kind == "row"]

    gn, instance = row_groups("group_instance_norm", {"batch": 2, "height": 96, "width": 96})
    assert nestable(gn) == 96 * 96 and configs(gn)[0]["mode"] == "nested"
    assert {c["BC"] for c in configs(gn) if c["mode"] == "nested"} == {1024, 2048, 4096}
    assert nestable(instance) is None and "nested" not in {c["mode"] for c in configs(instance)}
    short, _ = row_groups("group_instance_norm", {"batch": 2, "height": 20, "width": 20})  # 800 positions
    assert nestable(short) is None
    bn, = row_groups("batchnorm_relu", {"batch": 6, "channels": 3, "height": 128, "width": 128})
    # few long rows: split; 6 samples give runs of samples in 4 chunks at most: as many as the flat split of
    # 4096 columns gives (first), fewer than those of 2048 and 1024 (8, 16: after the flat ones); then nested
    # before the flat loops
    assert nestable(bn) == 128 * 128
    found = configs(bn)
    modes = [c["mode"] for c in found]
    assert modes.index("nested_split") < modes.index("nested") < modes.index("looped")
    flat = [i for i, m in enumerate(modes) if m == "split"]
    for i, c in enumerate(found):
        if c["mode"] == "nested_split":
            assert c["SPLIT"] == 4
            assert (i < min(flat)) if split_count(3, 6 * 128 * 128, 1, c["BC"]) == 4 else (i > max(flat)), c
    # 64 samples: as many chunks as the flat split's, runs of samples first
    many, = row_groups("batchnorm_relu", {"batch": 64, "channels": 3, "height": 64, "width": 64})
    first = configs(many)[0]
    assert first["mode"] == "nested_split" and first["SPLIT"] == split_count(3, 64 * 64 * 64, 1, first["BC"])
    assert nestable(_group((128, 64, 4096), (1, 2), "argmax")) is None


@pytest.fixture(scope="module")
def composed():
    sizes = SIZES["reductions"]
    result = compose_ok(fixture("reductions"), set_values=sizes)
    looped = looped_source(fixture("reductions"), sizes)
    split = split_source(fixture("reductions"), sizes)
    # the reductions fixture's three candidates (this file's longest evaluations): correctness, without the
    # guard's extra runs (helpers.py); the example and the norms below are judged with them
    both = submit_all(fixture("reductions"), [first(result).source, looped, split], sizes, label="reductions",
                      guard_runs=False)
    ex = compose_ok(example("row_softmax"))  # composed at full size, evaluated small
    # BatchNorm: 50 columns a row, chunks of 8 (two blocks): the 7th program of each row has 2, the 8th none
    norms = {"batchnorm_relu": split_source(fixture("batchnorm_relu"), SIZES["batchnorm_relu"], BR=2, SPLIT=8),
             "group_instance_norm": split_source(fixture("group_instance_norm"), SIZES["group_instance_norm"])}
    return {"reductions": result, "looped": looped, "split": split, "evaluations": both,
            "example": submit(example("row_softmax"), first(ex).source, EXAMPLE_SIZES["row_softmax"],
                              label="row_softmax"),
            "norms": norms,
            "norm_evaluations": {name: submit(fixture(name), source, SIZES[name], label=f"{name}_split")
                                 for name, source in norms.items()}}


def test_one_kernel_per_input_and_reduced_dims(composed):
    source = first(composed["reductions"]).source
    kernels = source.split("def _row_")[1:]
    # x along dim 1; y along dim 1 (softmax, and cross-entropy's log-softmax and target pick); y along dim 2
    # (log-softmax, logsumexp); the cross-entropy's mean over the positions
    assert len(kernels) == 4
    for reduction in ("tl.sum(", "tl.max(", "tl.min(", "tl.argmax(", "tl.argmin("):
        assert reduction in kernels[0]  # the sibling reductions of x share one kernel
    assert "tl.log(" in kernels[2] and "tl.exp(" in kernels[2]
    assert "(cols)" in kernels[1]  # the class index of each column, compared with the target
    check_variants(composed["reductions"])
    # looping over blocks of a row: one pass per level of dependent reductions, and a writing pass where a
    # full row is written; the sum of exp(x - max) joins the max's pass, and the target pick reads one column
    loops = [k.count("for c0 in range(0, n_cols, BC):") for k in composed["looped"].split("def _row_")[1:]]
    assert loops == [1, 2, 2, 1]
    # rows of one contiguous reduced coordinate read in whole fours where the sizes allow (x's 12 columns do:
    # the looped candidate judged below runs that way)
    assert "align = _whole_fours(x.shape[1], x.stride(0), x.stride(2))" in composed["looped"]
    assert all("col_ok = cols < (n_cols // ALIGN) * ALIGN" in k for k in composed["looped"].split("def _row_")[1:])


@pytest.fixture(scope="module")
def one_pass():
    problem = fixture("one_pass_rows")
    sizes = SIZES["one_pass_rows"]
    result = compose_ok(problem, set_values=sizes)
    looped = looped_source(problem, sizes)
    norms = {name: looped_source(fixture(name), SIZES[name]) for name in ("batchnorm_relu", "layer_rms_norm")}
    return {"looped": looped, "norms": norms,
            # correctness, without the guard's extra runs (helpers.py); the looped norms below are judged with them
            "evaluations": submit_all(problem, [first(result).source, looped], sizes, label="one_pass_rows",
                                      guard_runs=False),
            "norm_evaluations": {name: submit(fixture(name), source, SIZES[name], label=f"{name}_looped")
                                 for name, source in norms.items()}}


def test_carried_reductions_join_their_partners_pass_and_picks_read_one_column(one_pass):
    kernels = one_pass["looped"].split("def _row_")[1:]
    loops = [k.count("for c0 in range(0, n_cols, BC):") for k in kernels]
    # a kernel per tensor's rows (z, w, the logits, logp and u have equal sizes here only). The softmaxes of z
    # and of w: their maxes and sums in one pass, then the writing pass; the cross-entropy's scaled logits: the
    # same pass, and its target's pick reads one column. nll_loss's pick (its target is computed by another
    # kernel, its index beside it) reads one column, and its sum is one pass. u's LayerNorm and variance: their
    # mean and squared deviations in one pass, then the writing pass
    assert loops == [2, 2, 1, 0, 1, 2], loops
    assert all(len(re.findall(r"grown(_\d)? = tl.maximum\(", k)) == 1 for k in kernels[:3])  # running maxes
    assert "acc_row_sum = acc_row_sum * scale + term" in kernels[0]
    picks = [k for k in kernels if "is one column's value" in k]
    assert len(picks) == 2 and all("col_ok = (cols >= 0) & (cols < n_cols)" in k for k in picks)
    assert "iota2_ptr" not in one_pass["looped"]  # no index tensor is written to memory and read back
    assert "delta = tl.where(col_ok, u_2 - shift_mean, 0.0)" in kernels[5] and "acc_var += delta * delta" in kernels[5]
    assert "/ (n_cols - 1.0)" in kernels[5]  # torch.var's correction
    for name, source in one_pass["norms"].items():  # the norm layers: statistics in one pass, then the outputs
        first_row_kernel = source.split("def _row_")[1]
        assert first_row_kernel.count("for c0 in range(0, n_cols, BC):") == 2, name


@pytest.mark.parametrize("index", [0, 1], ids=["first", "looped"])
def test_one_pass_candidates_pass_the_evaluator(one_pass, index):
    verdict(one_pass["evaluations"].result()[index])


@pytest.mark.parametrize("name", ["batchnorm_relu", "layer_rms_norm"])
def test_looped_norms_pass_the_evaluator(one_pass, name):
    verdict(one_pass["norm_evaluations"][name])


def test_split_rows_launch_once_per_level(composed):
    kernels = composed["split"].split("def _row_")[1:]
    assert "tl.argmax(" not in kernels[0] and "pid_s" not in kernels[0]  # argmax and argmin: not split
    # a stage per level of reductions (each over its chunk of the row) and a last one for the outputs
    assert [k.count("if STAGE == ") for k in kernels[1:]] == [4, 3, 2]
    assert [k.count("for c0 in range(col_lo, col_hi, BC):") for k in kernels[1:]] == [4, 3, 1]
    assert "for stage in range(1, 5):" in composed["split"]
    assert "mask=row_ok & (pid_s == 0)" in kernels[3]  # the cross-entropy's mean: written once
    # BatchNorm in training mode: the sums of x - shift and of its squares in one stage, then the outputs
    bn = composed["norms"]["batchnorm_relu"]
    assert bn.count("if STAGE == ") == 2 and "SPLIT = 8" in bn and "torch.empty((2, relu.shape[1], SPLIT)" in bn
    assert "shift_mean = " in bn and "for stage in range(1, 3):" in bn


@pytest.mark.parametrize("index", [0, 1, 2], ids=["single", "looped", "split"])
def test_row_candidates_pass_the_evaluator(composed, index):
    verdict(composed["evaluations"].result()[index])


@pytest.mark.parametrize("name", ["batchnorm_relu", "group_instance_norm"])
def test_split_norms_pass_the_evaluator(composed, name):
    verdict(composed["norm_evaluations"][name])


def test_example_passes_the_evaluator(composed):
    verdict(composed["example"])


def test_configs_follow_the_row_length():
    short = configs(Group("row", 0, (64, 100), reduced=(1,)))
    long = configs(Group("row", 0, (4096, 100000), reduced=(1,)))
    assert short[0]["mode"] == "single" and long[0]["mode"] == "looped"
    few = configs(Group("row", 0, (64, 100000), reduced=(1,)))  # 64 programs would not fill a GPU
    assert few[0]["mode"] == "split" and "looped" in {c["mode"] for c in few}
    assert all(c["BR"] >= 1 for c in short + long)
    wide = configs(Group("row", 0, (64, 20000), reduced=(1,)))
    assert [c["mode"] for c in wide].count("single") == 1  # one variant holds a 20000-wide row in registers
    # a GroupNorm group of 16 channels x 160 x 160 (409600) per row, 192 rows: no variant tries to hold it
    assert {c["mode"] for c in configs(Group("row", 0, (192, 16, 160, 160), reduced=(1, 2, 3)))} == \
        {"looped", "split"}
    assert {c["mode"] for c in configs(Group("row", 0, (8192, 409600), reduced=(1,)))} == {"looped"}  # many rows


def _group(space, reduced, reduction: str) -> Group:
    x = Value("x", TENSOR, space, torch.float32)
    out = Value("r", TENSOR, tuple(s for i, s in enumerate(space) if i not in reduced), torch.float32)
    attrs = {"dim": reduced[0], "keepdim": False} if reduction.startswith("arg") else \
        {"dims": reduced, "keepdim": False}
    op = Op(reduction, [x], attrs, out)
    out.producer = op
    group = Group("row", 0, space, reduced=reduced, ops=[op], vmap={out: (0,)})
    group.leaf_maps[(id(op), 0)] = tuple(range(len(space)))
    return group


def test_few_long_rows_are_split():
    # BatchNorm2d in training mode after a convolution: 128 channels, each over N x H x W = 602112 values
    bn = configs(_group((128, 602112), (1,), "mean"))
    split = [c for c in bn if c["mode"] == "split"]
    assert len(split) >= 2 and bn[:len(split)] == split and bn[len(split)]["mode"] == "looped"
    for c in split:
        assert c["SPLIT"] & (c["SPLIT"] - 1) == 0 and 2 <= c["SPLIT"] <= 512
        assert 512 <= 128 * c["SPLIT"] <= 2048  # about 1024 programs
        assert 602112 // c["SPLIT"] >= 4 * c["BC"]
    assert len({(c["BC"], c["num_warps"]) for c in split}) == len(split)
    # one row: as many chunks as there are runs of 4 blocks
    one = [c for c in configs(_group((1, 262144), (1,), "sum")) if c["mode"] == "split"]
    assert one and all(c["SPLIT"] == 262144 // (4 * c["BC"]) for c in one)
    assert "split" not in {c["mode"] for c in configs(_group((128, 4096), (1,), "sum"))}  # short rows
    assert "split" not in {c["mode"] for c in configs(_group((128, 602112), (1,), "argmax"))}
