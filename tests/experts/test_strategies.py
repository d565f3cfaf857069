"""kfoundry.experts.strategies: each island's first kernel gets its own row of its class's table."""

import re

from kfoundry.experts.strategies import STRATEGIES, assignment, table_for


def test_the_islands_of_a_search_are_asked_for_different_strategies():
    for problem_class, table in STRATEGIES.items():
        assert len({s.name for s in table}) == len(table) >= 3
        mine = [assignment(problem_class, island, 4)[0] for island in range(4)]
        assert len({s.name for s in mine}) == min(4, len(table))
        for island in range(4):
            own, others = assignment(problem_class, island, 4)
            assert own not in others and len(others) == min(4, len(table)) - 1


def test_more_islands_than_strategies_start_the_table_over_and_an_unknown_class_gets_the_general_table():
    table = table_for("gemm")
    assert assignment("gemm", len(table), len(table) + 1)[0] == table[0]
    assert table_for("no such class") == STRATEGIES["other"]
    own, others = assignment("softmax", 0, 1)
    assert own == STRATEGIES["softmax"][0] and others == []


def test_every_problem_class_has_a_table_and_advice():
    from pathlib import Path

    from kfoundry.problem_signature import CLASSES

    advice = Path(__file__).resolve().parents[2] / "src" / "kfoundry" / "experts" / "prompts" / "advice"
    assert set(STRATEGIES) == set(CLASSES)
    assert {p.stem for p in advice.glob("*.j2")} == set(CLASSES)


def _facts(overrides, file_values, sequence):
    from kfoundry.input_facts import InputFact, ProblemFacts

    shape = [2, 8, sequence, 64]
    return ProblemFacts(inputs=[InputFact(i, shape=shape, dtype="float32", contiguous=True) for i in range(3)],
                        overrides=overrides, file_values=file_values,
                        outputs=[{"shape": shape, "dtype": "float32"}])


def test_the_sizes_a_strategy_suits_are_said_only_at_the_problem_files_own_sizes():
    heads = "one program per (batch, head) pair looping over query blocks"
    suited = heads + ", for short sequences, where blocks per head are few"
    # tested at a sequence of 32, the file's 512: nothing on sizes, which the test's shapes would answer
    tested_smaller = _facts({"seq_len": 32}, {"seq_len": "512"}, 32)
    for facts in (None, tested_smaller):
        own, others = assignment("attention", 3, 4, facts)
        assert (own.name, own.plan) == ("heads per program", heads)
        assert all("for " not in s.plan for s in others if s.suits)
    # the shapes under test are the file's own: no override, or one that repeats the file's value
    for facts in (_facts({}, {}, 512), _facts({"seq_len": 512}, {"seq_len": "512"}, 512)):
        own, others = assignment("attention", 3, 4, facts)
        assert (own.name, own.plan) == ("heads per program", suited)
        assert [s.name for s in others] == ["online softmax", "two passes", "scores materialized"]
    # the choice is the class's and the island's alone, whatever the sizes
    for island in range(4):
        assert (assignment("attention", island, 4, tested_smaller)[0].name
                == assignment("attention", island, 4, _facts({}, {}, 512))[0].name
                == assignment("attention", island, 4)[0].name)
    own, others = assignment("gemm", 0, 2, _facts({}, {}, 512))
    assert others[0].plan == ("split the K dimension across programs (or a second grid axis) and reduce the "
                              "partial tiles, for shapes where M x N alone gives too few tiles to fill the SMs")


def test_no_plan_states_sizes_of_its_own():
    from kfoundry.experts.strategies import at_file_sizes

    for table in STRATEGIES.values():
        for strategy in table:
            assert not re.search(r"\b(short|long rows?|few rows|many rows|sequences|very)\b", strategy.plan), \
                strategy.name
            assert strategy.described(False) == strategy
            assert strategy.described(True).plan == (f"{strategy.plan}, for {strategy.suits}" if strategy.suits
                                                      else strategy.plan)
    assert not at_file_sizes(None)
    assert not at_file_sizes(_facts({"seq_len": 32, "batch": 2}, {"seq_len": "512", "batch": "2"}, 32))
    assert at_file_sizes(_facts({"batch": 2}, {"batch": "2"}, 512))


def test_the_advice_names_the_class_with_its_article():
    from tests.experts.helpers import context

    from kfoundry.experts import render

    def heading(problem_class):
        user = render("compute", context(problem_class=problem_class))[1]
        return [line for line in user.splitlines() if line.startswith("For ")]

    assert heading("attention") == ["For an attention problem:"]
    assert heading("gemm") == ["For a gemm problem:"]
    assert heading("other") == ["For a problem of no particular class:"]
