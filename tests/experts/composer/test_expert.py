"""kfoundry.experts.composer.expert: the composer's left-over kernels, one a turn, those not seen first."""

import asyncio

from kfoundry.experts.base import Step
from kfoundry.experts.composer.expert import ComposerExpert


def test_the_left_over_kernels_come_one_a_turn_skipping_those_seen():
    composer = ComposerExpert(["a = 1\n", "b = 1\n", "c = 1\n"], is_known=lambda source: source == "b = 1\n")
    assert composer.traits.starts and composer.traits.min_parents == 0 and not composer.traits.needs_llm
    got = [asyncio.run(composer.propose(Step(None, [], "first kernels"))).source for _ in range(3)]
    assert got == ["a = 1\n", "c = 1\n", None]
