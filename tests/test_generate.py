"""kfoundry.generate: one expert step end to end on CPU, with every provider kind: a cmd: script,
the real OpenAI and Anthropic SDKs against local servers on 127.0.0.1, and replay files."""

import json
import shlex
import sys
from pathlib import Path


from kfoundry.evaluate import EvalOptions
from kfoundry.generate import generate
from kfoundry.llm import make_provider

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPLIES = FIXTURES / "llm" / "replies"
AFFINE = FIXTURES / "problems" / "affine.py"
MISSING_TAIL = FIXTURES / "candidates" / "missing_tail.py"
OPTIONS = dict(device="cpu", trials=2, seed=9, timeout_s=120)


def cmd_spec(log: Path, *replies: str) -> str:
    script = FIXTURES / "llm" / "reply_from_files.py"
    words = [sys.executable, str(script), str(log), *(str(REPLIES / name) for name in replies)]
    return "cmd:" + " ".join(shlex.quote(w) for w in words)


def prompts(log: Path) -> list[str]:
    return [p for p in log.read_text().split("\n\x00\n") if p.strip()]


def test_initializer_with_a_cmd_provider_writes_and_evaluates_a_candidate(tmp_path):
    log = tmp_path / "prompts.log"
    llm = make_provider(cmd_spec(log, "affine_correct.md"))
    out = tmp_path / "cand.py"
    result = generate(AFFINE, llm, options=EvalOptions(**OPTIONS), out=out)
    assert result.expert == "initializer" and "no parent" in result.reason
    assert result.candidate_path == str(out) and out.read_text().count("class ModelNew") == 1
    assert result.evaluation.status == "ok", result.evaluation.message
    assert result.evaluation.diagnosis is not None
    (prompt,) = prompts(log)
    assert AFFINE.read_text().strip().splitlines()[0] in prompt  # the problem source went in
    assert result.attempts[0].reply["provider"].startswith("cmd:")
    json.dumps(result.to_dict())


def test_router_picks_repair_for_a_failing_parent_and_applies_search_replace(tmp_path):
    log = tmp_path / "prompts.log"
    llm = make_provider(cmd_spec(log, "affine_search_replace.md"))
    result = generate(AFFINE, llm, parents=[MISSING_TAIL], options=EvalOptions(**OPTIONS), out=tmp_path / "fixed.py")
    assert result.expert == "repair"
    assert result.parents[0]["status"] == "wrong_output"
    assert result.attempts[0].reply_kind == "search_replace"
    assert result.evaluation.status == "ok", result.evaluation.message
    (prompt,) = prompts(log)
    assert "tail" in prompt  # the parent's diagnosis went into the prompt
    assert "n // BLOCK" in prompt  # and its source


def test_unusable_reply_is_fed_back_into_the_next_attempt(tmp_path):
    log = tmp_path / "prompts.log"
    llm = make_provider(cmd_spec(log, "affine_no_code.md", "affine_correct.md"))
    result = generate(AFFINE, llm, options=EvalOptions(**OPTIONS), out=tmp_path / "c.py", attempts=2)
    first, second = result.attempts
    assert "no code block" in first.failure and first.reply is not None
    assert second.failure is None and result.evaluation.status == "ok"
    assert "no code block" in prompts(log)[1]


def test_refusal_without_more_attempts_gives_no_candidate(tmp_path):
    llm = make_provider(cmd_spec(tmp_path / "p.log", "affine_refusal.md"))
    result = generate(AFFINE, llm, options=EvalOptions(**OPTIONS), out=tmp_path / "c.py")
    assert result.evaluation is None and result.candidate_path is None
    assert "refused" in result.attempts[0].failure


def test_a_cheating_reply_is_caught_by_the_guard(tmp_path):
    llm = make_provider(cmd_spec(tmp_path / "p.log", "affine_cheating.md"))
    result = generate(AFFINE, llm, options=EvalOptions(**OPTIONS), out=tmp_path / "c.py")
    assert result.evaluation.status == "cheating"
    assert result.evaluation.diagnosis.findings[0].category == "cheating"


def test_record_then_replay_gives_the_same_candidate(tmp_path):
    from kfoundry.llm import record_provider

    record = tmp_path / "rec.jsonl"
    llm = record_provider(make_provider(cmd_spec(tmp_path / "p.log", "affine_correct.md")), record)
    first = generate(AFFINE, llm, options=EvalOptions(**OPTIONS), out=tmp_path / "a.py")
    replayed = generate(AFFINE, make_provider(f"replay:{record}"), options=EvalOptions(**OPTIONS),
                        out=tmp_path / "b.py")
    assert (tmp_path / "a.py").read_text() == (tmp_path / "b.py").read_text()
    assert first.evaluation.status == replayed.evaluation.status == "ok"


def test_openai_compatible_server_with_a_rate_limit_then_a_reply(tmp_path, monkeypatch):
    import kfoundry.llm.retry as retry_module
    from tests.llm.servers import OpenAIServer, error, ok

    waits = []
    monkeypatch.setattr(retry_module, "sleep", waits.append)
    reply = (REPLIES / "affine_correct.md").read_text()
    with OpenAIServer() as server:
        server.queue(error(429, "slow down", {"Retry-After": "2"}), error(500), ok(reply, 900, 400))
        llm = make_provider(f"openai:local-model@{server.url}", timeout_s=30)
        result = generate(AFFINE, llm, options=EvalOptions(**OPTIONS), out=tmp_path / "c.py")
        assert len(server.received) == 3
        assert server.received[-1].body["messages"][-1]["content"] == result.prompt["user"]
    assert waits[0] == 2.0 and len(waits) == 2  # Retry-After honoured, then a jittered wait
    reply_record = result.attempts[0].reply
    assert reply_record["attempts"] == 3 and reply_record["input_tokens"] == 900
    assert reply_record["cost_usd"] is None  # a local model nobody priced: unknown, not zero
    assert result.evaluation.status == "ok", result.evaluation.message


def test_anthropic_messages_server_through_the_real_sdk(tmp_path):
    from tests.llm.servers import AnthropicServer, ok

    reply = (REPLIES / "affine_two_fences.md").read_text()
    with AnthropicServer() as server:
        server.queue(ok(reply, 1000, 500))
        llm = make_provider(f"anthropic:claude-test@{server.url}", api_keys={"anthropic": "test-key-not-real-123"},
                            env={})
        result = generate(AFFINE, llm, options=EvalOptions(**OPTIONS), out=tmp_path / "c.py")
        (request,) = server.received
        assert request.body["system"] and request.body["messages"][0]["content"] == result.prompt["user"]
    assert result.attempts[0].reply["output_tokens"] == 500
    assert result.evaluation.status == "ok", result.evaluation.message


def test_replay_file_of_unusable_replies_then_a_correct_one(tmp_path):
    # written by hand from tests/fixtures/llm/replies: no request matches, so replay goes in file order
    llm = make_provider(f"replay:{FIXTURES / 'llm' / 'affine_unusable_then_correct.jsonl'}")
    result = generate(AFFINE, llm, options=EvalOptions(**OPTIONS), out=tmp_path / "c.py", attempts=4)
    failures = [a.failure for a in result.attempts]
    assert "refused" in failures[0] and "no code block" in failures[1] and "does not parse" in failures[2]
    assert failures[3] is None and result.evaluation.status == "ok"
    assert all(f in result.prompt["user"] for f in ("no code block", "does not parse"))  # fed back


def test_replayed_cheating_kernel_is_rejected(tmp_path):
    llm = make_provider(f"replay:{FIXTURES / 'llm' / 'affine_cheating.jsonl'}")
    result = generate(AFFINE, llm, options=EvalOptions(**OPTIONS), out=tmp_path / "c.py")
    assert result.evaluation.status == "cheating"
    assert "torch-compute" in result.evaluation.message
