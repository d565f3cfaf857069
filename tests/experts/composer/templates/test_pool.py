"""The pooling template: max, average, adaptive and global pooling, passing the evaluator."""

import re

import pytest

from kfoundry.experts.composer.plan.steps import Group
from kfoundry.experts.composer.templates import pool
from kfoundry.experts.composer.templates.pool import configs
from tests.experts.composer.helpers import (
    check_variants,
    compose_ok,
    first,
    fixture,
    submit,
    verdict,
)


@pytest.fixture(scope="module")
def composed():
    result = compose_ok(fixture("pooling"))
    return result, submit(fixture("pooling"), first(result).source, label="pooling")


def test_pooling_kernels(composed):
    result, _ = composed
    source = first(result).source
    # max, avg, avg with a divisor, adaptive avg, adaptive max, 1-d max
    assert len(re.findall(r"def _(?!row_)\w*pool\w*_\d+_kernel", source)) == 6
    assert "tl.static_range(3)" in source  # the window is unrolled
    assert "def _row_" in source  # global average pooling is a reduction
    assert "_pool_out_size(" in source  # ceil_mode output sizes computed on the host, like PyTorch
    assert "relu fused into avg_pool" in result.message and "def _pointwise" not in source  # ReLU in the window
    check_variants(result)


def test_pooling_candidate_passes_the_evaluator(composed):
    verdict(composed[1])


def test_configs():
    assert all(c["BLOCK"] >= 128 for c in configs(Group("pool", 0, (2, 3, 4, 4))))


@pytest.fixture(scope="module")
def composed_planar():
    """Every pooling kernel one program per block of a plane (PLANAR_MIN 1): the fixtures' planes are smaller
    than the threshold the composer uses, so this is the only run of that layout on the CPU. The conv fixture's
    pooling reads the windows its conv stored (window_tail)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pool, "PLANAR_MIN", 1)
        results = {name: compose_ok(fixture(name)) for name in ("pooling", "conv_groupnorm_pool")}
    return {name: (result, submit(fixture(name), first(result).source, label=f"{name}_planar"))
            for name, result in results.items()}


@pytest.mark.parametrize("name", ["pooling", "conv_groupnorm_pool"])
def test_planar_pooling_passes_the_evaluator(composed_planar, name):
    result, future = composed_planar[name]
    source = first(result).source
    assert "plane = tl.program_id(0) // blocks" in source
    if name == "conv_groupnorm_pool":
        # the norm's operands are views of a reshape (the groups): their coordinates come from the flat index
        assert "of the stored windows" in result.message and "first = " in source
    verdict(future)
