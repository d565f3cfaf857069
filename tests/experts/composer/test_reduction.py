"""The row template: reductions along dims, softmax and log-softmax, in one block per row or looping over the
row in blocks (several passes), passing the evaluator."""

import pytest

from kfoundry.experts.composer.codegen import generate
from kfoundry.experts.composer.compose import capture
from kfoundry.experts.composer.fusion import Group, plan
from kfoundry.experts.composer.model_init import init_parts
from kfoundry.experts.composer.reduction import configs
from kfoundry.experts.composer.trace import load_sample
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


def looped_source(problem) -> str:
    """A candidate whose row kernels walk each row in blocks of 4 columns: several blocks per row here."""
    sample = load_sample(problem)
    the_plan = plan(capture(sample).graph)
    choice = {g.name: {"mode": "looped", "BR": 2, "BC": 4, "num_warps": 1} for g in the_plan.groups}
    return generate(the_plan, init_parts(sample.source.text), choice, sample.model, "looped")


@pytest.fixture(scope="module")
def composed():
    result = compose_ok(fixture("reductions"))
    looped = looped_source(fixture("reductions"))
    both = submit_all(fixture("reductions"), [first(result).source, looped], label="reductions")
    ex = compose_ok(example("row_softmax"))  # composed at full size, evaluated small
    return {"reductions": result, "looped": looped, "evaluations": both,
            "example": submit(example("row_softmax"), first(ex).source, EXAMPLE_SIZES["row_softmax"],
                              label="row_softmax")}


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
    # full row is written: max; sum; the target pick (needs both) + softmax's writing pass
    loops = [k.count("for c0 in range(0, n_cols, BC):") for k in composed["looped"].split("def _row_")[1:]]
    assert loops == [1, 4, 3, 1]


@pytest.mark.parametrize("index", [0, 1], ids=["single", "looped"])
def test_row_candidates_pass_the_evaluator(composed, index):
    verdict(composed["evaluations"].result()[index])


def test_example_passes_the_evaluator(composed):
    verdict(composed["example"])


def test_configs_follow_the_row_length():
    short = configs(Group("row", 0, (64, 100), reduced=(1,)))
    long = configs(Group("row", 0, (64, 100000), reduced=(1,)))
    assert short[0]["mode"] == "single" and long[0]["mode"] == "looped"
    assert all(c["BR"] >= 1 for c in short + long)
    wide = configs(Group("row", 0, (64, 20000), reduced=(1,)))
    assert [c["mode"] for c in wide].count("single") == 1  # one variant holds a 20000-wide row in registers
    # a GroupNorm group of 16 channels x 160 x 160 (409600): no variant tries to hold it
    assert {c["mode"] for c in configs(Group("row", 0, (192, 16, 160, 160), reduced=(1, 2, 3)))} == {"looped"}
