"""The pointwise template: a chain with broadcasting as one flat kernel, passing the evaluator."""

import re

import pytest

from kfoundry.experts.composer.compose import capture
from kfoundry.experts.composer.emit.codegen import generate
from kfoundry.experts.composer.plan.fusion import plan
from kfoundry.experts.composer.plan.steps import Group
from kfoundry.experts.composer.read.model_init import init_parts
from kfoundry.experts.composer.read.trace import load_sample
from kfoundry.experts.composer.templates.pointwise import configs, plane_size
from tests.experts.composer.helpers import (
    EXAMPLE_SIZES,
    check_variants,
    compose_ok,
    example,
    first,
    fixture,
    submit,
    verdict,
)


PLANAR = {"mode": "planar", "BLOCK": 16, "num_warps": 1}
# planes of 6 x 7 = 42 elements (blocks of 16, the last partly filled; sizes not in fours: ALIGN 1), and of
# 4 x 5 = 20 (ALIGN 4)
PLANAR_SIZES = {"odd": {}, "fours": {"height": 4, "width": 5}}


def planar_source(set_values: dict) -> str:
    sample = load_sample(fixture("pointwise_broadcast"), set_values, eval_mode=True)
    the_plan = plan(capture(sample).graph)
    assert [g.kind for g in the_plan.groups] == ["pointwise"]
    return generate(the_plan, init_parts(sample.source.text), {the_plan.groups[0].name: PLANAR}, sample.model,
                    "planar")


@pytest.fixture(scope="module")
def planar():
    sources = {name: planar_source(sizes) for name, sizes in PLANAR_SIZES.items()}
    return {"sources": sources,
            "evaluations": {name: submit(fixture("pointwise_broadcast"), source, PLANAR_SIZES[name], eval_mode=True,
                                         label=f"pointwise_planar_{name}") for name, source in sources.items()}}


@pytest.mark.parametrize("name", sorted(PLANAR_SIZES))
def test_planar_candidates_pass_the_evaluator(planar, name):
    verdict(planar["evaluations"][name])


def test_a_planar_kernel_takes_its_plane_s_coordinates_once(planar):
    source = planar["sources"]["odd"]
    kernel = source.split("def _pointwise")[1].split("class ModelNew")[0]
    assert "plane = pid // blocks" in kernel and "mask = offs < (n_plane // ALIGN) * ALIGN" in kernel
    lanes = kernel.split("mask = offs <")[1].replace("// ALIGN", "")
    assert "offs //" not in lanes and "offs %" not in lanes  # no lane divides its index
    # the (C, 1, 1) bias runs along the channel alone: one load a program, without a mask
    assert re.search(r"= tl\.load\(bias_ptr \+ i1 \* bias_s0\)", kernel)
    assert re.search(r"align = _whole_fours\(\w+\.shape\[2\] \* \w+\.shape\[3\], ", source)


@pytest.fixture(scope="module")
def composed():
    chain = compose_ok(fixture("pointwise_broadcast"), eval_mode=True)
    ex = compose_ok(example("pointwise_chain"))  # composed at full size, evaluated small
    return {
        "broadcast": (chain, submit(fixture("pointwise_broadcast"), first(chain).source, eval_mode=True,
                                    label="pointwise_broadcast")),
        "example": (ex, submit(example("pointwise_chain"), first(ex).source, EXAMPLE_SIZES["pointwise_chain"],
                               label="pointwise_chain")),
    }


def test_the_whole_chain_is_one_kernel(composed):
    result, _ = composed["broadcast"]
    candidate = first(result)
    assert candidate.name == "pointwise_b1024_w4"
    assert candidate.source.count("@triton.jit\ndef _pointwise") == 1
    # the (C, 1, 1) bias is read through its own strides, broadcast over N, H, W: no copy of it is made
    assert "bias.stride(0)" in candidate.source and "expand" not in candidate.source
    # dropout in eval mode is the identity: nothing of it remains
    assert "drop" not in candidate.source.split("class ModelNew")[1].split("def forward")[1]
    check_variants(result)
    assert len(result.candidates) == 4


@pytest.mark.parametrize("name", ["broadcast", "example"])
def test_pointwise_candidates_pass_the_evaluator(composed, name):
    verdict(composed[name][1])


def test_configs_are_powers_of_two():
    for config in configs(Group("pointwise", 0, (4, 4))):
        assert config["BLOCK"] & (config["BLOCK"] - 1) == 0


def test_planar_configs_come_first_where_planes_are_long():
    def group(sizes):
        sample = load_sample(fixture("pointwise_broadcast"), sizes, eval_mode=True)
        return plan(capture(sample).graph).groups[0]

    long = group({"height": 32, "width": 32})  # planes of 1024
    assert plane_size(long) == 1024 and configs(long)[0]["mode"] == "planar"
    assert {c.get("mode") for c in configs(long)} == {"planar", None}
    short = group({"height": 16, "width": 16})
    assert plane_size(short) is None and all("mode" not in c for c in configs(short))
    assert plane_size(Group("pointwise", 0, (4, 4))) is None  # no ops: nothing to read

