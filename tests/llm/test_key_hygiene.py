"""A fake key through every path: it reaches the server, and nothing else (replies, records, logs
at every level, exception messages, reprs)."""

from __future__ import annotations

import json
import logging

import pytest

from kfoundry.errors import UsageError
from kfoundry.llm import LLMError, anthropic_provider, make_provider, openai_provider
from tests.llm.conftest import FAKE_ANTHROPIC_KEY, FAKE_OPENAI_KEY
from tests.llm.servers import error, hang

ENV = {"OPENAI_API_KEY": FAKE_OPENAI_KEY, "ANTHROPIC_API_KEY": FAKE_ANTHROPIC_KEY}


@pytest.fixture
def all_logs(caplog):
    caplog.set_level(logging.DEBUG)  # the root: the SDKs' and httpx's debug logs too
    return caplog


def everything_said(caplog, record_path, *objects) -> str:
    said = [r.getMessage() for r in caplog.records] + [record_path.read_text()]
    for obj in objects:
        said += [str(obj), repr(obj)]
        if hasattr(obj, "to_dict"):
            said.append(json.dumps(obj.to_dict()))
    return "\n".join(said)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_key_goes_to_the_server_only(kind, openai_server, anthropic_server, waits, all_logs, tmp_path,
                                     monkeypatch):
    server, key, module, constant = {
        "openai": (openai_server, FAKE_OPENAI_KEY, openai_provider, "OPENAI_URL"),
        "anthropic": (anthropic_server, FAKE_ANTHROPIC_KEY, anthropic_provider, "ANTHROPIC_URL"),
    }[kind]
    monkeypatch.setattr(module, constant, server.url)
    record = tmp_path / "rec.jsonl"
    provider = make_provider(f"{kind}:some-model", env=ENV, record=record, timeout_s=5, max_retries=2)
    server.queue(error(429, f"Rate limit for key {key}"), error(500, f"oops {key}"))
    reply = provider.complete("s", "u")
    server.queue(error(401, f"Incorrect API key provided: {key}."))
    with pytest.raises(LLMError) as refused:
        provider.complete("s", "u")
    server.queue(hang())
    with pytest.raises(LLMError) as timed_out:
        make_provider(f"{kind}:some-model", env=ENV, timeout_s=0.3, max_retries=0).complete("s", "u")

    assert refused.value.reason == "client" and "Incorrect API key provided: ***." in str(refused.value)
    assert timed_out.value.reason == "timeout"
    # The SDK's exception (holding the request and its headers) is not chained to ours.
    assert refused.value.__cause__ is None and refused.value.__context__ is None
    auth = [r.headers.get("authorization", "") + r.headers.get("x-api-key", "") for r in server.received]
    assert all(key in a for a in auth) and len(auth) == 3 + 1 + 1
    assert any("retry 1/2" in r.getMessage() for r in all_logs.records)
    said = everything_said(all_logs, record, reply, provider, refused.value, timed_out.value,
                           provider.inner)
    assert key not in said
    assert reply.to_dict()["provider"] == f"{kind}:some-model"


@pytest.mark.parametrize("url", [f"http://user:{FAKE_OPENAI_KEY}@127.0.0.1:8000/v1",
                                 f"http://127.0.0.1:8000/v1?api_key={FAKE_OPENAI_KEY}"])
def test_credentials_in_a_base_url_are_refused_without_echoing_them(url):
    with pytest.raises(UsageError) as caught:
        make_provider(f"openai:m@{url}", env={})
    assert "may not hold a user, password or query" in str(caught.value)
    assert FAKE_OPENAI_KEY not in str(caught.value)


def test_key_in_a_command(all_logs, tmp_path):
    record = tmp_path / "rec.jsonl"
    cmd = make_provider(f"cmd:OPENAI_API_KEY={FAKE_OPENAI_KEY} cat", env=ENV, record=record)
    cmd_reply = cmd.complete("s", "u")
    assert cmd_reply.text == "s\n\nu"
    assert cmd_reply.provider == "cmd:OPENAI_API_KEY=*** cat"
    assert FAKE_OPENAI_KEY not in everything_said(all_logs, record, cmd_reply, cmd)


def test_key_shaped_strings_are_masked_even_when_not_ours(openai_server):
    openai_server.queue(error(401, "Incorrect API key provided: sk-proj-abcdefghijklmnop1234."))
    with pytest.raises(LLMError) as caught:
        make_provider(f"openai:m@{openai_server.url}", env={}).complete("s", "u")
    assert "sk-proj" not in str(caught.value) and "***" in str(caught.value)
