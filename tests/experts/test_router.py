"""kfoundry.experts.router: the expert for each step follows the parent's diagnosis; stalls change the
approach; exploration is a seeded Thompson sample over the experts' success rates."""

from collections import Counter

import pytest

from kfoundry.errors import UsageError
from kfoundry.experts.base import Proposal, Traits
from kfoundry.experts import EXPERTS, Router, registry
from kfoundry.types import Diagnosis


def _experts(*names):
    """The registry's experts of these names, in its order (an LLM that is never called)."""
    return registry.build(registry.Setup(llm=object(), composed=["x = 1\n"]), names)


def _name(router, *args, **kwargs):
    return router.choose_with_reason(*args, **kwargs)[0].name


def _ok(focus: str, bound: str | None = None) -> Diagnosis:
    return Diagnosis(status="ok", summary="ok", focus=focus, bound=bound)


def test_no_parent_means_initializer():
    expert, why = Router(seed=1).choose_with_reason(None, has_parent=False)
    assert expert.name == "initializer" and "no parent" in why


@pytest.mark.parametrize("status", ["compile_error", "runtime_error", "wrong_output", "cheating", "timeout", "crash"])
def test_a_failing_parent_means_repair(status):
    router = Router(seed=1, exploration=1.0)  # exploration never overrides a repair
    expert, why = router.choose_with_reason(Diagnosis(status=status, summary="", focus="repair"), has_parent=True,
                                            stalled_for=10)
    assert expert.name == "repair" and status in why


@pytest.mark.parametrize("focus,expert", [("memory", "memory"), ("fusion", "fusion"), ("launch", "fusion"),
                                          ("compute", "compute"), ("algorithm", "algorithm")])
def test_the_focus_picks_the_expert(focus, expert):
    router = Router(seed=3, exploration=0.0)
    chosen, why = router.choose_with_reason(_ok(focus, "memory"), has_parent=True)
    assert chosen.name == expert and f"focus is {focus}, memory-bound" in why


def test_no_focus_or_no_diagnosis_falls_back_to_the_sample():
    router = Router(seed=3, exploration=0.0)
    for diagnosis in (_ok("none"), None):
        expert, why = router.choose_with_reason(diagnosis, has_parent=True)
        assert expert.name in ("memory", "compute", "fusion", "algorithm") and "Thompson sample" in why


def test_a_stall_changes_the_approach():
    router = Router(seed=5, exploration=0.0, stall_limit=3)
    assert _name(router, _ok("memory"), has_parent=True, stalled_for=2) == "memory"
    assert _name(router, _ok("memory"), has_parent=True, stalled_for=3, parents_available=1) == "algorithm"
    picks = {_name(router, _ok("memory"), has_parent=True, stalled_for=4, parents_available=2) for _ in range(50)}
    assert picks == {"algorithm", "crossover"}
    _, why = router.choose_with_reason(_ok("memory"), has_parent=True, stalled_for=3)
    assert "no progress for 3 step(s)" in why


def test_crossover_needs_two_parents():
    router = Router(seed=9, exploration=1.0)
    one = Counter(_name(router, _ok("memory"), has_parent=True, parents_available=1) for _ in range(300))
    assert "crossover" not in one
    two = Counter(_name(router, _ok("memory"), has_parent=True, parents_available=2) for _ in range(300))
    assert two["crossover"] > 0


def test_exploration_is_seeded_and_reproducible():
    def run(seed):
        router = Router(seed=seed, exploration=0.5)
        return [_name(router, _ok("memory"), has_parent=True, parents_available=2) for _ in range(200)]

    assert run(11) == run(11)
    assert run(11) != run(12)


def test_exploration_rate_and_the_bandit_favour_what_worked():
    router = Router(seed=2024, exploration=0.1)
    for _ in range(30):
        router.record("fusion", True)
        for other in ("memory", "compute", "algorithm"):
            router.record(other, False)
    assert router.stats()["fusion"] == (30, 0)
    picks = [(e.name, why) for e, why in (router.choose_with_reason(_ok("memory"), has_parent=True)
                                          for _ in range(2000))]
    explored = [name for name, why in picks if why.startswith("exploring")]
    assert 0.08 < len(explored) / len(picks) < 0.12  # about `exploration`
    assert Counter(explored)["fusion"] / len(explored) > 0.9  # Thompson sampling follows the successes
    assert all(name == "memory" for name, why in picks if not why.startswith("exploring"))


def test_with_no_record_every_improver_gets_explored():
    router = Router(seed=7, exploration=1.0)
    picks = Counter(_name(router, _ok("memory"), has_parent=True, parents_available=2) for _ in range(1000))
    assert set(picks) == {"memory", "compute", "fusion", "algorithm", "crossover"}
    assert min(picks.values()) > 120  # flat priors: about 200 each


def test_a_restricted_router_and_bad_input():
    router = Router(_experts("initializer", "repair", "memory"), seed=1, exploration=0.0)
    assert _name(router, _ok("compute"), has_parent=True) == "memory"  # compute not enabled: the sample
    with pytest.raises(UsageError, match="unknown expert"):
        _experts("memory", "composer2")
    with pytest.raises(UsageError, match="unknown expert 'tuner'"):
        router.record("tuner", True)  # a known expert, but not enabled in this router
    with pytest.raises(UsageError, match="exploration"):
        Router(exploration=1.5)
    with pytest.raises(UsageError, match="initializer expert"):
        _name(Router(_experts("memory")), None, has_parent=False)
    assert set(Router().stats()) == set(EXPERTS)


def test_without_llm_experts_the_tuner_improves_and_tries_to_repair():
    router = Router(_experts("tuner"), seed=0)
    assert _name(router, _ok("memory"), has_parent=True) == "tuner"
    expert, why = router.choose_with_reason(Diagnosis(status="compile_error", summary=""), has_parent=True)
    assert expert.name == "tuner" and "no LLM repair expert" in why
    assert _name(router, _ok("compute"), has_parent=True, stalled_for=10) == "tuner"


def test_the_tuner_joins_the_llm_experts_pool():
    router = Router(_experts(*EXPERTS, "tuner"), seed=2, exploration=1.0)
    picks = {_name(router, _ok("none"), has_parent=True, parents_available=2) for _ in range(200)}
    assert "tuner" in picks and "memory" in picks


def test_without_a_parent_the_composer_and_the_initializer_share_the_first_kernels():
    assert _name(Router(_experts("composer", "tuner")), None, has_parent=False) == "composer"
    router = Router(_experts(*EXPERTS, "composer"), seed=4)
    picks = Counter(_name(router, None, has_parent=False) for _ in range(100))
    assert set(picks) == {"initializer", "composer"}
    for _ in range(30):
        router.record("composer", False)
    assert Counter(_name(router, None, has_parent=False) for _ in range(100))["initializer"] > 80


def test_its_state_comes_back_and_it_reads_traits_not_names():
    router = Router(_experts(*EXPERTS, "tuner"), seed=3, exploration=0.5)
    for _ in range(5):
        router.record("memory", True)
        _name(router, _ok("memory"), has_parent=True)
    again = Router(_experts(*EXPERTS, "tuner"), seed=99, exploration=0.5)
    again.restore(router.state())
    assert again.stats() == router.stats()
    picks = [_name(router, _ok("memory"), has_parent=True) for _ in range(50)]
    assert [_name(again, _ok("memory"), has_parent=True) for _ in range(50)] == picks

    class Renamed:  # an expert under a new name, with the memory expert's traits: it answers that focus
        name, traits = "bandwidth", EXPERTS["memory"].traits

        async def propose(self, step):
            raise AssertionError("not called")

    assert _name(Router([Renamed()], seed=0, exploration=0.0), _ok("memory"), has_parent=True) == "bandwidth"


def test_an_expert_that_observes_its_children_is_shown_each_one():
    class Learner:
        name, traits = "learner", Traits()

        def __init__(self):
            self.seen = []

        def observe(self, child, parent):
            self.seen.append((child, parent))

        async def propose(self, step):
            return Proposal(None)

    learner = Learner()
    router = Router([learner], seed=0)
    router.record("learner", True, "child", "parent")
    router.record("learner", False)  # no child given: counted only
    assert learner.seen == [("child", "parent")] and router.stats()["learner"] == (1, 1)
