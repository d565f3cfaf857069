"""Where a run's speed came from, on small synthetic run stores (invented speedups)."""

import pytest

from kfoundry.runs.credit import credit, move_text
from tests.runs.conftest import evaluation

TUNE = {"kind": "tune", "changed": {"BLOCK": {"from": 1024, "to": 2048}}}  # the tuner's record, as the driver stores it
TILES = {"kind": "tiles_up", "changed": {"BLOCK_M": [64, 128], "num_warps": [4, 8]}}


def build_credit_run(store) -> dict[str, int]:
    """gen 0: seed 1.2x, then an initializer 1.0x and a compile error; gen 1: a tuner child of the seed 1.5x
    (move tune), a genome child 1.4x; gen 2: a genome child of the tuner's 1.8x (move tiles_up), then a faster
    but wrong one. Returns candidate ids by name."""
    ids = {}

    def add(name, parents, expert, generation, result, move=None):
        ids[name] = store.add_candidate(f"{name} = 1\n", [ids[p] for p in parents], expert, 0, generation,
                                        "tuner" if expert == "tuner" else "llm")
        if move is not None:
            store.event("move", candidate_id=ids[name], expert=expert, move=move)
        store.finish_evaluation(store.start_evaluation(ids[name]), result)

    add("seed", [], "initializer", 0, evaluation("ok", 1.2, 1.0))
    add("slow", [], "initializer", 0, evaluation("ok", 1.0, 0.8))
    add("broken", [], "initializer", 0, evaluation("compile_error"))
    add("tuned", ["seed"], "tuner", 1, evaluation("ok", 1.5, 1.2), TUNE)
    add("sideways", ["seed"], "genome", 1, evaluation("ok", 1.4, 1.1), {"kind": "precision", "changed": {}})
    add("tiled", ["tuned"], "genome", 2, evaluation("ok", 1.8, 1.5), TILES)
    add("wrong", ["tiled"], "genome", 3, evaluation("wrong_output", 9.0, 9.0), TILES)
    return ids


def test_each_candidate_that_raised_the_best_is_credited_with_its_move(store):
    ids = build_credit_run(store)
    found = credit(store, 1.8)
    assert found["generation0"] == {"candidate_id": ids["seed"], "expert": "initializer", "speedup_eager": 1.2}
    steps = found["improvements"]
    assert [s["candidate_id"] for s in steps] == [ids["seed"], ids["tuned"], ids["tiled"]]
    assert [s["expert"] for s in steps] == ["initializer", "tuner", "genome"]
    assert [s["generation"] for s in steps] == [0, 1, 2]
    assert [s["parent_ids"] for s in steps] == [[], [ids["seed"]], [ids["tuned"]]]
    assert [s["move"] for s in steps] == [None, TUNE, TILES]
    assert [s["speedup_before"] for s in steps] == [None, 1.2, 1.5]
    assert [s["speedup_after"] for s in steps] == [1.2, 1.5, 1.8]
    assert [s["gain"] for s in steps] == [None, pytest.approx(1.25), pytest.approx(1.2)]
    assert found["gain_over_generation0"] == pytest.approx(1.5)


def test_an_untimed_run_credits_nothing_and_does_not_break(store):
    """On CPU every verdict is correct without a speedup: generation 0's best is its first verified candidate."""
    first = store.add_candidate("a = 1\n", [], "seed", 0, 0, "seed")
    store.finish_evaluation(store.start_evaluation(first), evaluation("ok"))
    child = store.add_candidate("b = 1\n", [first], "tuner", 0, 1, "tuner")
    store.event("move", candidate_id=child, expert="tuner", move=TUNE)
    store.finish_evaluation(store.start_evaluation(child), evaluation("ok"))
    assert credit(store, None) == {
        "generation0": {"candidate_id": first, "expert": "seed", "speedup_eager": None},
        "improvements": [], "gain_over_generation0": None}


def test_a_run_without_a_verified_first_generation_has_no_gain_over_it(store):
    broken = store.add_candidate("a = 1\n", [], "initializer", 0, 0, "llm")
    store.finish_evaluation(store.start_evaluation(broken), evaluation("compile_error"))
    repaired = store.add_candidate("b = 1\n", [broken], "repair", 0, 1, "llm")
    store.finish_evaluation(store.start_evaluation(repaired), evaluation("ok", 2.0, 1.0))
    found = credit(store, 2.0)
    assert found["generation0"] is None and found["gain_over_generation0"] is None
    steps = [(s["candidate_id"], s["speedup_before"], s["gain"]) for s in found["improvements"]]
    assert steps == [(repaired, None, None)]
    assert credit(store, None)["improvements"][0]["speedup_after"] == 2.0  # the list does not depend on the final best


def test_move_text_is_compact():
    assert move_text(TUNE) == "tune: BLOCK 1024\u21922048"
    assert move_text(TILES) == "tiles_up: BLOCK_M 64\u2192128, num_warps 4\u21928"
    assert move_text({"kind": "fuse", "changed": {"epilogue": "relu"}}) == "fuse: epilogue relu"
    many = {"kind": "crossover", "changed": {f"g{i}": [i, i + 1] for i in range(6)}}
    assert move_text(many) == "crossover: g0 0\u21921, g1 1\u21922, g2 2\u21923, g3 3\u21924, +2 more"
    assert move_text({"kind": "graph", "changed": {}}) == "graph"
    assert move_text(None) == ""
