"""openai:MODEL[@URL] against a local OpenAI-compatible server, through the real openai SDK."""

from __future__ import annotations

import logging

import pytest

from kfoundry.llm import LLMError, Price, Pricing, make_provider, openai_provider
from tests.llm.conftest import FAKE_OPENAI_KEY
from tests.llm.servers import FENCED_REPLY, error, hang, ok

SYSTEM, USER = "You write Triton kernels.", "Make this faster:\nclass Model: ..."


def provider_for(server, model="qwen-coder", **options):
    options.setdefault("env", {"OPENAI_API_KEY": FAKE_OPENAI_KEY})
    return make_provider(f"openai:{model}@{server.url}", **options)


def test_reply_usage_and_request(openai_server):
    openai_server.queue(ok(input_tokens=321, output_tokens=54))
    provider = provider_for(openai_server)
    reply = provider.complete(SYSTEM, USER, max_tokens=2048, temperature=0.7)
    assert reply.text == FENCED_REPLY
    assert (reply.input_tokens, reply.output_tokens, reply.attempts) == (321, 54, 1)
    assert reply.provider == f"openai:qwen-coder@{openai_server.url}" and reply.model == "qwen-coder"
    assert reply.cost_usd is None  # a local server with no user price: unknown, not free
    assert len(reply.request_hash) == 64 and reply.latency_s > 0
    [received] = openai_server.received
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == f"Bearer {FAKE_OPENAI_KEY}"
    assert received.body["model"] == "qwen-coder"
    assert received.body["messages"] == [{"role": "system", "content": SYSTEM},
                                         {"role": "user", "content": USER}]
    # Compatible servers get max_tokens, the field they all know.
    assert received.body["max_tokens"] == 2048 and received.body["temperature"] == 0.7


def test_defaults_leave_fields_out_and_keyless_server_gets_placeholder(openai_server):
    provider = make_provider(f"openai:m@{openai_server.url}", env={})
    provider.complete("", "hi")
    [received] = openai_server.received
    assert received.headers["authorization"] == "Bearer not-needed"
    assert received.body["messages"] == [{"role": "user", "content": "hi"}]
    assert "max_tokens" not in received.body and "temperature" not in received.body


def test_cost_from_user_price_for_the_server(openai_server, tmp_path):
    pricing = Pricing({}, {f"*@{openai_server.url}": Price(0.0, 0.0)})
    reply = provider_for(openai_server, pricing=pricing).complete(SYSTEM, USER)
    assert reply.cost_usd == 0.0


def test_official_api_uses_shipped_price_and_max_completion_tokens(openai_server, monkeypatch):
    monkeypatch.setattr(openai_provider, "OPENAI_URL", openai_server.url)
    provider = make_provider("openai:gpt-4o-2024-08-06", env={"OPENAI_API_KEY": FAKE_OPENAI_KEY})
    reply = provider.complete(SYSTEM, USER, max_tokens=100)
    assert reply.provider == "openai:gpt-4o-2024-08-06"
    assert reply.cost_usd == pytest.approx((120 * 2.50 + 45 * 10.00) / 1e6)
    body = openai_server.received[0].body
    assert body["max_completion_tokens"] == 100 and "max_tokens" not in body


def test_missing_usage_means_unknown_tokens_and_cost(openai_server):
    openai_server.queue(ok(input_tokens=None))
    pricing = Pricing({}, {"m": Price(1.0, 1.0)})
    reply = make_provider(f"openai:m@{openai_server.url}", env={}, pricing=pricing).complete("s", "u")
    assert (reply.input_tokens, reply.output_tokens, reply.cost_usd) == (None, None, None)


def test_rate_limit_honours_retry_after(openai_server, waits, caplog):
    openai_server.queue(error(429, "slow down", {"retry-after": "2"}), error(429, "slow down", {"retry-after-ms": "1500"}))
    with caplog.at_level(logging.WARNING, logger="kfoundry.llm"):
        reply = provider_for(openai_server).complete(SYSTEM, USER)
    assert reply.attempts == 3 and len(openai_server.received) == 3
    assert waits == [2.0, 1.5]
    messages = [r.getMessage() for r in caplog.records if r.name == "kfoundry.llm"]
    assert len(messages) == 2 and all(r.levelno == logging.WARNING for r in caplog.records)
    assert "rate_limit" in messages[0] and "retry 1/4 in 2.00 s" in messages[0]


def test_retry_after_is_capped(openai_server, waits):
    openai_server.queue(error(429, headers={"retry-after": "3600"}))
    provider_for(openai_server).complete(SYSTEM, USER)
    assert waits == [60.0]


def test_server_error_then_success_backs_off_with_jitter(openai_server, waits):
    openai_server.queue(error(500), error(502), error(503))
    reply = provider_for(openai_server).complete(SYSTEM, USER)
    assert reply.attempts == 4
    # Full jitter: retry n waits uniform(0, min(60, 1 * 2**(n-1))).
    assert len(waits) == 3 and all(0 <= w <= 2 ** i for i, w in enumerate(waits))


def test_rate_limit_exhausted(openai_server, waits):
    openai_server.queue(*[error(429, "quota")] * 3)
    with pytest.raises(LLMError) as caught:
        provider_for(openai_server, max_retries=2).complete(SYSTEM, USER)
    assert caught.value.reason == "rate_limit"
    assert "HTTP 429: quota" in str(caught.value) and "after 3 attempts" in str(caught.value)
    assert len(waits) == 2 and len(openai_server.received) == 3


def test_hang_past_timeout_is_retried_then_timeout(openai_server, waits):
    openai_server.queue(hang(), hang())
    with pytest.raises(LLMError) as caught:
        provider_for(openai_server, timeout_s=0.3, max_retries=1).complete(SYSTEM, USER)
    assert caught.value.reason == "timeout" and "0.3 s" in str(caught.value)
    assert len(waits) == 1 and len(openai_server.received) == 2


def test_timeout_then_success(openai_server, waits):
    openai_server.queue(hang())
    reply = provider_for(openai_server, timeout_s=0.3).complete(SYSTEM, USER)
    assert reply.attempts == 2 and reply.text == FENCED_REPLY


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_client_errors_are_not_retried(openai_server, waits, status):
    openai_server.queue(error(status, "bad request: unknown field"))
    with pytest.raises(LLMError) as caught:
        provider_for(openai_server).complete(SYSTEM, USER)
    assert caught.value.reason == "client" and f"HTTP {status}" in str(caught.value)
    assert waits == [] and len(openai_server.received) == 1


def test_408_is_a_timeout_and_retried(openai_server, waits):
    openai_server.queue(error(408))
    assert provider_for(openai_server).complete(SYSTEM, USER).attempts == 2


def test_connection_refused(closed_port_url, waits):
    provider = make_provider(f"openai:m@{closed_port_url}", env={}, max_retries=2)
    with pytest.raises(LLMError) as caught:
        provider.complete(SYSTEM, USER)
    assert caught.value.reason == "connection" and "after 3 attempts" in str(caught.value)
    assert len(waits) == 2


def test_refusal(openai_server):
    choice = {"index": 0, "finish_reason": "stop",
              "message": {"role": "assistant", "content": None, "refusal": "I can't help with that."}}
    openai_server.queue(ok(choices=[choice]))
    with pytest.raises(LLMError) as caught:
        provider_for(openai_server).complete(SYSTEM, USER)
    assert caught.value.reason == "refused" and "can't help" in str(caught.value)


def test_sdk_is_not_retrying_behind_our_back(openai_server, waits):
    openai_server.queue(error(500), error(500))
    with pytest.raises(LLMError):
        provider_for(openai_server, max_retries=0).complete(SYSTEM, USER)
    assert len(openai_server.received) == 1 and waits == []
