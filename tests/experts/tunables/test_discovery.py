"""Discovery as a whole: unique names, and nothing found where a source does not parse."""

from __future__ import annotations

import pytest

from kfoundry.experts.tunables import find_tunables
from tests.experts.tunables.helpers import EXAMPLES


def test_duplicate_names_are_qualified():
    source = (EXAMPLES / "pointwise_chain" / "kernel.py").read_text()
    launch = "        _affine_gelu_clamp_kernel[grid](x, y, n, 1.0, 0.0, 0.0, 1.0, BLOCK=BLOCK, num_warps=4)\n"
    twice = source.replace("        return y\n", launch + "        return y\n")
    names = [t.name for t in find_tunables(twice)]
    assert names == ["BLOCK", "num_warps@line35", "num_warps@line36"]


@pytest.mark.parametrize("garbage", ["", "def (:", "x = 1\x00", "(" * 5000 + ")" * 5000, "\ud800", None, 42,
                                     "BLOCK = 1024", "kernel[grid](BLOCK=)"])
def test_odd_input_finds_nothing(garbage):
    assert find_tunables(garbage) == []
