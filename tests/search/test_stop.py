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


def test_generations_that_evaluate_nothing_new_end_the_search():
    rules = StopRules(max_empty_generations=3)
    assert rules.should_stop(SearchState(empty_generations=2)) is None
    assert "nothing new for 3" in rules.should_stop(SearchState(empty_generations=3))


def test_a_roofline_target_and_the_budget_question():
    rules = StopRules(target_roofline=0.8)
    assert rules.should_stop(SearchState(best_roofline=0.5)) is None
    assert "80% of the roofline" in rules.should_stop(SearchState(best_roofline=0.85))
    assert not rules.budgeted() and StopRules(max_time_s=5).budgeted()


def test_a_requested_stop_ends_every_search_until_it_is_cleared():
    from kfoundry.search.stop import INTERRUPTED, clear_stop_request, request_stop

    rules = StopRules(max_evals=100)
    request_stop()
    try:
        assert rules.should_stop(SearchState()) == INTERRUPTED
    finally:
        clear_stop_request()
    assert rules.should_stop(SearchState()) is None
