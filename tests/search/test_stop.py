"""kfoundry.search.stop: each rule, and the reason it gives."""

from kfoundry.search import SearchState, StopRules


def test_no_rules_never_stop():
    assert StopRules().should_stop(SearchState(evals=10**6, cost=1e9, elapsed_s=1e9, generation=10**6)) is None


def test_each_rule_and_its_reason():
    assert "evaluation budget" in StopRules(max_evals=5).should_stop(SearchState(evals=5))
    assert StopRules(max_evals=5).should_stop(SearchState(evals=4)) is None
    assert "cost" in StopRules(max_cost=1.0).should_stop(SearchState(cost=1.0))
    assert "time" in StopRules(max_time_s=2).should_stop(SearchState(elapsed_s=2.5))
    assert "target speedup" in StopRules(target_speedup=2).should_stop(SearchState(best_fitness=2.1))
    assert StopRules(target_speedup=2).should_stop(SearchState(best_fitness=None)) is None
    assert "no improvement" in StopRules(stagnation_generations=3).should_stop(SearchState(stalled_generations=3))
    assert "generation limit" in StopRules(max_generations=4).should_stop(SearchState(generation=4))


def test_evals_left():
    assert StopRules().evals_left(SearchState(evals=3)) is None
    assert StopRules(max_evals=5).evals_left(SearchState(evals=3)) == 2
