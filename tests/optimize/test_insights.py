from kfoundry.optimize.insights import insight_prompt, parse_insights


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
