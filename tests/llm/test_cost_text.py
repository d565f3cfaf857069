"""kfoundry.llm.cost_text: one spelling of what LLM calls cost; an unpriced call is never $0."""

from kfoundry.llm.cost_text import cost_text


def test_nothing_to_pay_and_a_priced_sum():
    assert cost_text(None) == "$0"
    assert cost_text(0.0) == "$0"
    assert cost_text(0.01234) == "$0.0123"


def test_unpriced_calls_are_unknown_and_counted():
    assert cost_text(None, 1) == "unknown (1 unpriced call)"
    assert cost_text(None, 3) == "unknown (3 unpriced calls)"
    assert cost_text(0.168, 2) == "$0.1680 + unknown (2 unpriced calls)"
