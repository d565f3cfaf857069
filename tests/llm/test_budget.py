"""Budget: refused at start when a dollar limit cannot be enforced; charged per reply."""

from __future__ import annotations

import pytest

from kfoundry.errors import UsageError
from kfoundry.llm import Budget, Ensemble, LLMReply, Price, Pricing, make_provider

PRICING = Pricing({"priced": Price(1.0, 2.0)})


def reply(cost, tokens=(100, 50)):
    return LLMReply("t", "p", "m", tokens[0], tokens[1], cost, 0.1, 1, "h")


def providers():
    priced = make_provider("openai:priced", env={"OPENAI_API_KEY": "k-123456"})
    local = make_provider("openai:llama@http://127.0.0.1:1/v1", env={})
    return priced, local


def test_dollar_budget_needs_prices_unless_tokens_are_limited_too():
    priced, local = providers()
    Budget(dollars=5).check_start([priced], PRICING)
    with pytest.raises(UsageError, match=r"no\s+price|have none: openai:llama@http://127.0.0.1:1/v1"):
        Budget(dollars=5).check_start([priced, local], PRICING)
    Budget(dollars=5, tokens=10_000).check_start([priced, local], PRICING)
    Budget(tokens=10_000).check_start([local], PRICING)
    with pytest.raises(UsageError):
        Budget(dollars=5).check_start([Ensemble([priced, local])], PRICING)
    with pytest.raises(UsageError):
        Budget(dollars=1).check_start([make_provider("cmd:cat")], PRICING)


def test_charge_and_exhausted():
    budget = Budget(dollars=1.0)
    budget.charge(reply(0.6))
    assert not budget.exhausted
    budget.charge(reply(0.4))
    assert budget.exhausted and budget.spent_usd == pytest.approx(1.0) and budget.spent_tokens == 300


def test_token_budget_and_unknown_costs():
    budget = Budget(tokens=400)
    budget.charge(reply(None))
    budget.charge(reply(None, tokens=(None, None)))
    assert not budget.exhausted
    assert budget.to_dict() == {"dollars": None, "tokens": 400, "spent_usd": 0.0, "spent_tokens": 150,
                                "calls": 2, "unpriced_calls": 2}
    budget.charge(reply(None, tokens=(200, 50)))
    assert budget.exhausted


def test_no_limits_never_exhausted():
    budget = Budget()
    budget.charge(reply(100.0))
    assert not budget.exhausted


@pytest.mark.parametrize("kwargs", [{"dollars": 0}, {"dollars": -1}, {"tokens": 0}])
def test_bad_budgets(kwargs):
    with pytest.raises(UsageError):
        Budget(**kwargs)
