from tests.library.conftest import GEMM_SIG


def _record(lib, outcome, before, after, category="memory-bound", expert="fusion", device="H200"):
    return lib.record_step(GEMM_SIG, expert, "p = 0\n", f"c = {after}\n", [category], outcome, before, after, device)


def test_distil_counts_wins_and_median(lib):
    ids = [_record(lib, "ok", 1.0, 1.2), _record(lib, "ok", 1.0, 1.4), _record(lib, "ok", 2.0, 2.8),
           _record(lib, "wrong_output", 1.0, None)]
    _record(lib, "ok", 1.0, 1.1, category="compute-bound")  # a group of one: below min_support
    insights = lib.distil(min_support=2)
    assert len(insights) == 1
    text = insights[0]["text"]
    assert text == ("On gemm+pointwise problems the fusion expert improved memory-bound candidates 3 of 4 times, "
                    "median 1.40x (H200).")
    assert insights[0]["evidence"] == ids and insights[0]["origin"] == "rule"


def test_distil_reports_failures_and_updates_in_place(lib):
    _record(lib, "compile_error", 1.0, None, expert="tuner")
    _record(lib, "wrong_output", 1.0, None, expert="tuner")
    first = lib.distil()
    assert "did not improve" in first[0]["text"] and "compile_error 1" in first[0]["text"]
    _record(lib, "ok", 1.0, 1.5, expert="tuner")
    second = lib.distil()
    assert second[0]["id"] == first[0]["id"] and "1 of 3" in second[0]["text"]
    assert len(lib.list(type="insight")) == len([i for i in lib.list(type="insight")])  # no duplicate rows
    assert sum(1 for i in lib.list(type="insight") if i["origin"] == "rule") == 1


def test_distilled_insight_is_retrieved_for_the_same_kind(lib):
    _record(lib, "ok", 1.0, 1.3)
    _record(lib, "ok", 1.0, 1.5)
    insight = lib.distil()[0]
    results = lib.retrieve(GEMM_SIG, query_text="fusion memory-bound", k=5)
    assert insight["id"] in {r["id"] for r in results}


def test_steps_stored_under_an_older_kind_join_their_class(lib):
    ops = ["aten.max_pool2d_with_indices", "aten.relu"]
    old = {"kind": "reduction+pointwise", "ops": ops, "text": "maxpool relu"}  # as an earlier version labelled it
    new = {"kind": "pooling+pointwise", "ops": ops, "text": "maxpool relu"}
    for sig, after in ((old, 1.2), (new, 1.3)):
        lib.record_step(sig, "memory", "p = 0\n", f"c = {after}\n", ["memory-bound"], "ok", 1.0, after, "H200")
    insights = lib.distil(min_support=2)
    assert len(insights) == 1 and insights[0]["text"].startswith("On pooling+pointwise problems the memory expert "
                                                                  "improved memory-bound candidates 2 of 2 times")
