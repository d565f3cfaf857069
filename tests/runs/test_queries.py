"""best, lineage, history and totals on a small synthetic run."""

import pytest

from tests.runs.conftest import evaluation


@pytest.fixture
def run(store):
    """gen 0: a (ok 1.0x), b (compile_error); gen 1: c <- a (ok 2.0x eager, 0.9x compile),
    d <- a (wrong_output); gen 2: e <- c + d (ok 1.5x eager, 1.2x compile, fastest), f (in flight)."""
    ids = {}

    def add(name, parents, generation, result=None, origin="llm"):
        ids[name] = store.add_candidate(f"{name} = 1\n", [ids[p] for p in parents], f"x-{name}",
                                        generation % 2, generation, origin)
        eid = store.start_evaluation(ids[name])
        if result is not None:
            store.finish_evaluation(eid, result)

    add("a", [], 0, evaluation("ok", 1.0, 0.5, runtime_ms=2.0), origin="seed")
    add("b", [], 0, evaluation("compile_error"), origin="seed")
    add("c", ["a"], 1, evaluation("ok", 2.0, 0.9, runtime_ms=1.0))
    add("d", ["a"], 1, evaluation("wrong_output", 9.0, 9.0))
    add("e", ["c", "d"], 2, evaluation("ok", 1.5, 1.2, runtime_ms=0.5))
    add("f", ["e"], 2)
    store.add_llm_call(ids["c"], "x-c", {"cost_usd": 0.25, "input_tokens": 100, "output_tokens": 20,
                                         "text": "t", "provider": "p", "model": "m", "latency_s": 1.0,
                                         "attempts": 1, "request_hash": "h"}, "ph", None)
    store.add_llm_call(ids["d"], "x-d", {"cost_usd": None, "input_tokens": 50, "output_tokens": None,
                                         "text": "t", "provider": "p", "model": "m", "latency_s": 1.0,
                                         "attempts": 1, "request_hash": "h"}, "ph", None)
    store.add_llm_call(None, "x-e", None, "ph", "timed out")
    return store, ids


def test_best_is_verified_and_per_metric(run):
    store, ids = run
    assert store.best()["candidate_id"] == ids["c"]  # d is faster but wrong
    assert store.best("speedup_compile")["candidate_id"] == ids["e"]
    assert store.best("runtime_ms")["candidate_id"] == ids["e"]
    assert store.best()["source"] == "c = 1\n"
    with pytest.raises(ValueError):
        store.best("bogus")


def test_best_is_none_without_a_verified_candidate(store):
    cid = store.add_candidate("q = 1\n", [], "e", 0, 0, "seed")
    store.finish_evaluation(store.start_evaluation(cid), evaluation("timeout"))
    assert store.best() is None


def test_verified_in_order_lists_the_verified_evaluations_as_their_verdicts_came(run):
    store, ids = run
    later = store.add_candidate("g = 1\n", [ids["e"]], "x-g", 1, 3, "llm")
    sooner = store.add_candidate("h = 1\n", [ids["e"]], "x-h", 0, 3, "llm")
    later_eval = store.start_evaluation(later)  # started first, finished second
    store.finish_evaluation(store.start_evaluation(sooner), evaluation("ok", None, None))
    store.finish_evaluation(later_eval, evaluation("ok", 3.0, 2.0))
    rows = store.verified_in_order()
    assert [r["candidate_id"] for r in rows] == [ids["a"], ids["c"], ids["e"], sooner, later]
    assert [r["speedup_eager"] for r in rows] == [1.0, 2.0, 1.5, None, 3.0]
    assert rows[2]["expert"] == "x-e" and rows[2]["generation"] == 2 and rows[2]["parent_ids"] == [ids["c"], ids["d"]]


def test_lineage_goes_back_to_the_roots(run):
    store, ids = run
    chain = store.lineage(ids["e"])
    assert [item["id"] for item in chain] == [ids["e"], ids["c"], ids["d"], ids["a"]]
    assert chain[0]["speedup_eager"] == 1.5 and chain[2]["status"] == "wrong_output"
    assert chain[2]["speedup_eager"] is None
    assert [item["id"] for item in store.lineage(ids["a"])] == [ids["a"]]
    with pytest.raises(KeyError):
        store.lineage(999)


def test_history_per_generation(run):
    store, _ = run
    history = store.history()
    assert [(h["generation"], h["candidates"], h["evaluations"], h["correct"]) for h in history] == [
        (0, 2, 2, 1), (1, 2, 2, 1), (2, 2, 1, 1)]
    assert [h["best_speedup_eager"] for h in history] == [1.0, 2.0, 1.5]
    assert [h["best_speedup_eager_so_far"] for h in history] == [1.0, 2.0, 2.0]
    assert [h["best_speedup_compile_so_far"] for h in history] == [0.5, 0.9, 1.2]


def test_totals(run):
    store, _ = run
    totals = store.totals()
    assert totals["candidates"] == 6 and totals["evaluations"] == 5 and totals["in_flight"] == 1
    assert totals["correct"] == 3 and totals["correctness_rate"] == pytest.approx(0.6)
    assert totals["statuses"] == {"ok": 3, "compile_error": 1, "wrong_output": 1}
    assert totals["llm_calls"] == 3 and totals["llm_failed_calls"] == 1
    assert totals["cost_usd"] == pytest.approx(0.25) and totals["unknown_cost_calls"] == 1
    assert totals["input_tokens"] == 150 and totals["output_tokens"] == 20
    assert totals["wall_time_s"] >= 0


def test_wall_time_leaves_out_the_gap_before_a_resume(store):
    import sqlite3

    from kfoundry.runs import RunStore

    store.event("work")
    store.close()
    conn = sqlite3.connect(store.path)  # move the first session a day into the past
    conn.execute("UPDATE events SET ts = ts - 86400")
    conn.commit()
    conn.close()
    with RunStore.open(store.run_dir) as again:
        again.event("more work")
        assert again.totals()["wall_time_s"] < 60
