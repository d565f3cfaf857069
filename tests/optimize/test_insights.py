from kfoundry.optimize.insights import insight_prompt, measured, parse_insights, summarize_run


def test_the_prompt_lists_the_steps_and_the_reply_gives_at_most_three_insights():
    steps = [{"expert": "tuner", "diagnosis": ["bound"], "outcome": "ok", "speedup_before": 1.0,
              "speedup_after": 1.4}]
    prompt = insight_prompt(steps, "affine", "pointwise", "NVIDIA H200")
    assert "expert `tuner`" in prompt and "1x -> 1.4x" in prompt and "NVIDIA H200" in prompt
    reply = "Here you go:\n- Doubling BLOCK_SIZE to 2048 gave 1.4x on H200 for the affine map.\n- short\n" \
            "* Fusing the epilogue into one kernel removed a launch and a round trip to memory.\n" \
            "- A third insight that is long enough to keep here.\n- A fourth one, which is one too many.\n"
    insights = parse_insights(reply)
    assert len(insights) == 3 and insights[0].startswith("Doubling") and "short" not in insights


def test_one_step_per_line_and_what_was_not_measured_is_never_a_speedup():
    steps = [{"expert": "tuner", "diagnosis": ["bound"], "outcome": "ok", "speedup_before": 1.0,
              "speedup_after": 1.4, "summary": "BLOCK 256 -> 1024"},
             {"expert": "memory", "outcome": "compile_error", "speedup_before": 1.4, "speedup_after": None},
             {"expert": "tuner", "outcome": "ok", "speedup_before": None, "speedup_after": 2.0}]
    prompt = insight_prompt(steps, "affine", "pointwise", "NVIDIA H200")
    lines = [line for line in prompt.splitlines() if line.startswith("- step ")]
    assert len(lines) == 3 and lines[0].endswith("speedup 1x -> 1.4x; change: BLOCK 256 -> 1024")
    assert lines[1].endswith("speedup none (the child failed)") and "2x (its parent was not timed)" in lines[2]
    assert "n/a" not in prompt and "\n\nWrite at most" in prompt
    assert measured(steps[0]) and measured(steps[1])
    assert not measured({"expert": "tuner", "outcome": "ok", "speedup_before": None, "speedup_after": None})


def test_a_run_that_timed_nothing_asks_the_llm_for_no_insight(tmp_path):
    """On CPU every step is 'ok' at no measured speed (or failed): no call, nothing stored."""
    from kfoundry.library import Library

    library = Library(tmp_path / "lib.sqlite")
    for outcome in ("ok", "runtime_error"):
        library.record_step({"kind": "pointwise"}, "tuner", "parent", f"child {outcome}", [], outcome, None, None,
                            run_id="run")
    titles = [s["title"] for s in library.list(type="step")]
    assert any("ok, speed not measured" in t for t in titles) and any("runtime_error, no speed" in t for t in titles)

    class NoCalls:
        def complete(self, system, user):
            raise AssertionError("the LLM was asked")

    assert summarize_run(NoCalls(), None, None, library, "run", {"kind": "pointwise"}, "affine", "cpu") == []
    assert library.list(type="insight") == [] or all(i["origin"] != "llm" for i in library.list(type="insight"))
