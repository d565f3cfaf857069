"""record_provider / record= write JSONL; replay:FILE reads it back by request hash, then in order."""

from __future__ import annotations

import json
import threading

import pytest

from kfoundry.errors import UsageError
from kfoundry.llm import LLMError, Pricing, Request, make_provider, record_provider
from kfoundry.llm.record import RECORD_FORMAT
from tests.llm.conftest import FAKE_OPENAI_KEY
from tests.llm.servers import ok


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_record_format(openai_server, tmp_path):
    path = tmp_path / "runs" / "llm.jsonl"
    openai_server.queue(ok("first", 10, 5))
    provider = make_provider(f"openai:m@{openai_server.url}", env={"OPENAI_API_KEY": FAKE_OPENAI_KEY},
                             record=path)
    reply = provider.complete("sys", "user", max_tokens=64, temperature=0.3)
    [line] = lines(path)
    assert line["format"] == RECORD_FORMAT and line["timestamp"].endswith("+00:00")
    assert line["provider"] == f"openai:m@{openai_server.url}" and line["model"] == "m"
    assert line["request"] == {"system": "sys", "user": "user", "max_tokens": 64, "temperature": 0.3}
    assert line["request_hash"] == reply.request_hash == Request("sys", "user", 64, 0.3).hash
    assert line["text"] == "first" and line["usage"] == {"input_tokens": 10, "output_tokens": 5}
    assert line["cost_usd"] is None and line["attempts"] == 1 and line["latency_s"] >= 0
    assert FAKE_OPENAI_KEY not in path.read_text()


def test_replay_matches_by_hash_then_falls_back_to_order(tmp_path):
    path = tmp_path / "rec.jsonl"
    recorder = record_provider(make_provider("cmd:cat"), path)
    for user in ("a", "b", "c"):
        recorder.complete("s", user)
    replay = make_provider(f"replay:{path}")
    assert replay.model == "cat"
    assert replay.complete("s", "c").text == "s\n\nc"  # by hash, out of order
    assert replay.complete("s", "a").text == "s\n\na"
    fallback = replay.complete("s", "something never recorded")
    assert fallback.text == "s\n\nb"  # the next unused record
    assert fallback.provider == f"replay:{path}" and fallback.request_hash == Request(
        "s", "something never recorded").hash
    with pytest.raises(LLMError) as caught:
        replay.complete("s", "a")
    assert caught.value.reason == "replay_miss" and "3 recorded replies" in str(caught.value)


def test_same_request_twice_gets_both_records_in_order(tmp_path):
    path = tmp_path / "rec.jsonl"
    path.write_text("\n".join(json.dumps({"request_hash": Request("s", "u").hash, "text": t, "model": "m",
                                          "usage": {"input_tokens": 3, "output_tokens": 4},
                                          "cost_usd": 0.25}) for t in ("one", "two")) + "\n")
    replay = make_provider(f"replay:{path}")
    first, second = replay.complete("s", "u"), replay.complete("s", "u")
    assert (first.text, second.text) == ("one", "two")
    # Recorded usage and cost come back, so a replayed run spends its budget the same way.
    assert (first.input_tokens, first.output_tokens, first.cost_usd) == (3, 4, 0.25)
    assert replay.is_priced(Pricing({}))


def test_a_replay_with_unpriced_replies_is_unpriced(tmp_path):
    """A record of an unpriced model (`"cost_usd": null`, or none at all) replies with an unknown cost: the
    replay is unpriced, and a dollar budget is refused at the start as for any unpriced model."""
    from kfoundry.generate import make_llm
    from kfoundry.llm import Budget
    from kfoundry.llm.settings import LLMSettings

    usage = {"input_tokens": 3, "output_tokens": 4}
    priced = {"request_hash": Request("s", "a").hash, "text": "a", "model": "m", "usage": usage, "cost_usd": 0.25}
    unpriced = {"request_hash": Request("s", "b").hash, "text": "b", "model": "m", "usage": usage, "cost_usd": None}
    files = {}
    for name, records in {"priced": [priced], "null": [priced, unpriced],
                          "absent": [{k: v for k, v in unpriced.items() if k != "cost_usd"}]}.items():
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps(r) + "\n" for r in records))
    assert make_provider(f"replay:{files['priced']}").is_priced(Pricing({}))
    for name in ("null", "absent"):
        assert not make_provider(f"replay:{files[name]}").is_priced(Pricing({})), name
        with pytest.raises(UsageError, match="a dollar budget needs a price for every model"):
            make_llm([f"replay:{files[name]}"], LLMSettings(budget_dollars=1.0), {})
    # with a token budget too it runs, and the reply without a cost is counted as unpriced, not as $0 spent
    replay, budget = make_llm([f"replay:{files['null']}"], LLMSettings(budget_dollars=0.3, budget_tokens=100), {})
    assert isinstance(budget, Budget)
    for user in ("a", "b"):
        budget.charge(replay.complete("s", user))
    assert (budget.spent_usd, budget.unpriced_calls, budget.spent_tokens) == (0.25, 1, 14)
    assert not budget.exhausted


def test_replay_is_thread_safe(tmp_path):
    path = tmp_path / "rec.jsonl"
    path.write_text("".join(json.dumps({"text": str(i)}) + "\n" for i in range(40)))
    replay = make_provider(f"replay:{path}", concurrency=8)
    texts, lock = [], threading.Lock()

    def worker():
        for _ in range(5):
            text = replay.complete("s", "u").text
            with lock:
                texts.append(text)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(texts, key=int) == [str(i) for i in range(40)]


def test_recorder_is_thread_safe(tmp_path):
    path = tmp_path / "rec.jsonl"
    recorder = record_provider(make_provider("cmd:cat", concurrency=4), path)
    threads = [threading.Thread(target=recorder.complete, args=("s", f"u{i}")) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(line["request"]["user"] for line in lines(path)) == sorted(f"u{i}" for i in range(12))


def test_failed_calls_are_not_recorded(tmp_path):
    path = tmp_path / "rec.jsonl"
    with pytest.raises(LLMError):
        make_provider("cmd:exit 1", record=path).complete("s", "u")
    assert path.read_text() == ""


@pytest.mark.parametrize("content, where", [("{not json\n", ":1: not a JSON line"),
                                            ('{"text": "ok"}\n[1, 2]\n', ":2: not an LLM record")])
def test_bad_replay_files(tmp_path, content, where):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(UsageError, match=where):
        make_provider(f"replay:{path}")


def test_missing_replay_file(tmp_path):
    with pytest.raises(UsageError, match="cannot read the replay file"):
        make_provider(f"replay:{tmp_path / 'nope.jsonl'}")


def test_request_hash_ignores_the_model_and_sees_every_field():
    base = Request("s", "u", 100, 0.5)
    assert base.hash == Request("s", "u", 100, 0.5).hash
    others = [Request("S", "u", 100, 0.5), Request("s", "U", 100, 0.5), Request("s", "u", 101, 0.5),
              Request("s", "u", 100, None)]
    assert len({base.hash, *(r.hash for r in others)}) == 5
