"""kfoundry.experts.strategies: each island's first kernel gets its own row of its class's table."""

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
