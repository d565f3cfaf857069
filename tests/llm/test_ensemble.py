"""Ensemble: one Provider over several, picked by weight."""

from __future__ import annotations

from collections import Counter

import pytest

from kfoundry.errors import UsageError
from kfoundry.llm import Ensemble, LLMReply, Price, Pricing, Provider, parse_weights


class Named(Provider):
    def __init__(self, name: str) -> None:
        super().__init__(f"fake:{name}", name)

    def _complete(self, request):
        return LLMReply(self.model, self.spec, self.model, 1, 1, None, 0.0, 1, request.hash)


def test_parse_weights():
    assert parse_weights("2,1") == [2.0, 1.0]
    assert parse_weights(" 0.5 , 0 ,3") == [0.5, 0.0, 3.0]
    for bad in ("", "a,b", "1,-1", "0,0", "nan,1"):
        with pytest.raises(UsageError):
            parse_weights(bad)


def test_picks_by_weight_reproducibly():
    members = [Named("a"), Named("b"), Named("c")]
    ensemble = Ensemble(members, [3, 1, 0], seed=7)
    picks = [ensemble.complete("s", "u").text for _ in range(2000)]
    counts = Counter(picks)
    assert counts["c"] == 0 and 0.70 < counts["a"] / 2000 < 0.80
    again = Ensemble(members, [3, 1, 0], seed=7)
    assert [again.complete("s", "u").text for _ in range(2000)] == picks


def test_is_a_provider_whose_replies_name_the_member():
    ensemble = Ensemble([Named("a")])
    assert isinstance(ensemble, Provider) and ensemble.model == "ensemble"
    assert ensemble.spec == "ensemble(fake:a*1)"
    assert ensemble.complete("s", "u").provider == "fake:a"


def test_priced_only_if_every_used_member_is():
    pricing = Pricing({"a": Price(1, 1)})
    assert Ensemble([Named("a"), Named("b")], [1, 0]).is_priced(pricing)
    assert not Ensemble([Named("a"), Named("b")]).is_priced(pricing)


@pytest.mark.parametrize("providers, weights", [([], None), ([Named("a")], [1, 2]), ([Named("a")], [0])])
def test_bad_ensembles(providers, weights):
    with pytest.raises(UsageError):
        Ensemble(providers, weights)
