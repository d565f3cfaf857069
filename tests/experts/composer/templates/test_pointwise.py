"""The pointwise template: a chain with broadcasting as one flat kernel, passing the evaluator."""

import pytest

from kfoundry.experts.composer.plan.steps import Group
from kfoundry.experts.composer.templates.pointwise import configs
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
