"""anthropic:MODEL[@URL] against a local Messages-API server, through the real anthropic SDK."""

from __future__ import annotations

import pytest

from kfoundry.llm import LLMError, anthropic_provider, make_provider
from tests.llm.conftest import FAKE_ANTHROPIC_KEY
from tests.llm.servers import FENCED_REPLY, error, hang, ok

SYSTEM, USER = "You write Triton kernels.", "Make this faster:\nclass Model: ..."
ENV = {"ANTHROPIC_API_KEY": FAKE_ANTHROPIC_KEY}


def provider_for(server, model="claude-sonnet-4-20250514", **options):
    options.setdefault("env", ENV)
    return make_provider(f"anthropic:{model}@{server.url}", **options)


@pytest.fixture
def official(anthropic_server, monkeypatch):
    """anthropic:MODEL without a URL, pointed at the local server (the shipped prices apply)."""
    monkeypatch.setattr(anthropic_provider, "ANTHROPIC_URL", anthropic_server.url)
    return anthropic_server


def test_reply_usage_cost_and_request(official):
    official.queue(ok(input_tokens=1000, output_tokens=200))
    reply = make_provider("anthropic:claude-sonnet-4-20250514", env=ENV).complete(
        SYSTEM, USER, max_tokens=4096, temperature=0.2)
    assert reply.text == FENCED_REPLY and reply.attempts == 1
    assert (reply.input_tokens, reply.output_tokens) == (1000, 200)
    assert reply.cost_usd == pytest.approx((1000 * 3.00 + 200 * 15.00) / 1e6)
    assert reply.provider == "anthropic:claude-sonnet-4-20250514"
    [received] = official.received
    assert received.path == "/v1/messages"
    # SDK 2.x sends the key as a bearer token, older ones as x-api-key.
    assert (received.headers.get("authorization") == f"Bearer {FAKE_ANTHROPIC_KEY}"
            or received.headers.get("x-api-key") == FAKE_ANTHROPIC_KEY)
    assert received.body["system"] == SYSTEM
    assert received.body["messages"] == [{"role": "user", "content": USER}]
    assert received.body["max_tokens"] == 4096
    # API version 2026-10-21 (anthropic SDK 2.x) has no sampling parameters: never sent.
    assert "temperature" not in received.body


def test_default_max_tokens_and_no_empty_system(anthropic_server):
    provider_for(anthropic_server).complete("", USER)
    body = anthropic_server.received[0].body
    # A compatible server gets the key both ways (proxies for older SDKs read x-api-key).
    assert anthropic_server.received[0].headers["x-api-key"] == FAKE_ANTHROPIC_KEY
    assert body["max_tokens"] == anthropic_provider.DEFAULT_MAX_TOKENS
    assert "system" not in body and "temperature" not in body


def test_text_blocks_are_joined(anthropic_server):
    content = [{"type": "thinking", "thinking": "hmm", "signature": "x"},
               {"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}]
    anthropic_server.queue(ok(content=content))
    assert provider_for(anthropic_server).complete(SYSTEM, USER).text == "part one, part two"


def test_compatible_server_is_unpriced(anthropic_server):
    assert provider_for(anthropic_server).complete(SYSTEM, USER).cost_usd is None


def test_rate_limit_with_retry_after(anthropic_server, waits):
    anthropic_server.queue(error(429, "rate limited", {"retry-after": "7"}))
    reply = provider_for(anthropic_server).complete(SYSTEM, USER)
    assert reply.attempts == 2 and waits == [7.0]


def test_overloaded_529_then_success(anthropic_server, waits):
    anthropic_server.queue(error(529, "Overloaded"), error(500))
    reply = provider_for(anthropic_server).complete(SYSTEM, USER)
    assert reply.attempts == 3 and len(waits) == 2
    assert 0 <= waits[0] <= 1 and 0 <= waits[1] <= 2


def test_hang_past_timeout(anthropic_server, waits):
    anthropic_server.queue(hang(), hang())
    with pytest.raises(LLMError) as caught:
        provider_for(anthropic_server, timeout_s=0.3, max_retries=1).complete(SYSTEM, USER)
    assert caught.value.reason == "timeout" and "after 2 attempts" in str(caught.value)
    assert len(waits) == 1


def test_bad_request_is_not_retried(anthropic_server, waits):
    anthropic_server.queue(error(400, "max_tokens: too large"))
    with pytest.raises(LLMError) as caught:
        provider_for(anthropic_server).complete(SYSTEM, USER)
    assert caught.value.reason == "client" and "max_tokens: too large" in str(caught.value)
    assert waits == [] and len(anthropic_server.received) == 1


def test_refusal(anthropic_server):
    anthropic_server.queue(ok(stop_reason="refusal", content=[]))
    with pytest.raises(LLMError) as caught:
        provider_for(anthropic_server).complete(SYSTEM, USER)
    assert caught.value.reason == "refused"


def test_connection_refused(closed_port_url, waits):
    provider = make_provider(f"anthropic:m@{closed_port_url}", env=ENV, max_retries=1)
    with pytest.raises(LLMError) as caught:
        provider.complete(SYSTEM, USER)
    assert caught.value.reason == "connection" and len(waits) == 1
