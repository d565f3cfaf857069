"""The backoff schedule, Retry-After parsing, and call_with_retries: which failures are tried again, how often, after
what wait, and the record of attempts."""

from __future__ import annotations

import random
import time
from email.utils import formatdate

import pytest

from kfoundry.llm.errors import LLMError
from kfoundry.llm.retry import Failure, RetryPolicy, call_with_retries, parse_retry_after


def test_full_jitter_bounds_grow_then_cap():
    policy = RetryPolicy(max_retries=10, base_s=1.0, cap_s=8.0, rng=random.Random(0))
    for retry in range(1, 10):
        bound = min(8.0, 2 ** (retry - 1))
        waits = [policy.wait_s(retry) for _ in range(200)]
        assert all(0 <= w <= bound for w in waits) and max(waits) > 0.8 * bound


def test_retry_after_wins_and_is_capped():
    policy = RetryPolicy(retry_after_cap_s=30.0)
    assert policy.wait_s(1, retry_after=12.5) == 12.5
    assert policy.wait_s(3, retry_after=999) == 30.0


@pytest.mark.parametrize("headers, expected", [
    ({}, None), (None, None), ({"retry-after": "3"}, 3.0), ({"retry-after": "0.5"}, 0.5),
    ({"retry-after-ms": "250", "retry-after": "9"}, 0.25), ({"retry-after": "soon"}, None),
])
def test_parse_retry_after(headers, expected):
    assert parse_retry_after(headers) == expected


def test_parse_retry_after_http_date():
    seconds = parse_retry_after({"retry-after": formatdate(time.time() + 30, usegmt=True)})
    assert 27 <= seconds <= 31


class Flaky:
    """Fails with the given exceptions in turn, then answers."""

    def __init__(self, *errors: Exception) -> None:
        self.errors, self.calls = list(errors), 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "answer"


class Busy(Exception):
    pass


class Refused(Exception):
    pass


def classify(exc: Exception) -> Failure | None:
    if isinstance(exc, Busy):
        return Failure("rate_limit", True, "HTTP 429", retry_after=float(str(exc)) if str(exc) else None)
    if isinstance(exc, Refused):
        return Failure("client", False, "HTTP 401 (check the API key)")
    return None


def test_retryable_failures_are_tried_again_and_the_attempts_counted(waits, caplog):
    flaky = Flaky(Busy("3"), Busy())
    policy = RetryPolicy(max_retries=4, rng=random.Random(1))
    assert call_with_retries(flaky, classify, policy, "openai:m") == ("answer", 3)
    assert waits[0] == 3.0 and 0 <= waits[1] <= 2.0  # Retry-After, then full jitter under 2 ** 1
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "openai:m: rate_limit: HTTP 429; retry 1/4 in 3.00 s" and "retry 2/4" in messages[1]


def test_retries_stop_after_max_retries_with_the_attempts_in_the_error(waits):
    flaky = Flaky(*[Busy() for _ in range(5)])
    with pytest.raises(LLMError) as caught:
        call_with_retries(flaky, classify, RetryPolicy(max_retries=2), "openai:m")
    assert caught.value.reason == "rate_limit" and str(caught.value) == "openai:m: HTTP 429 (after 3 attempts)"
    assert flaky.calls == 3 and len(waits) == 2
    assert caught.value.__cause__ is None and caught.value.__context__ is None  # no SDK exception chained


def test_a_failure_not_worth_retrying_is_raised_at_once(waits):
    flaky = Flaky(Refused())
    with pytest.raises(LLMError) as caught:
        call_with_retries(flaky, classify, RetryPolicy(), "anthropic:m")
    assert caught.value.reason == "client" and str(caught.value) == "anthropic:m: HTTP 401 (check the API key)"
    assert flaky.calls == 1 and waits == [] and caught.value.__context__ is None


def test_an_exception_classify_does_not_know_propagates_as_it_is(waits):
    flaky = Flaky(Busy(), KeyError("bug"))
    with pytest.raises(KeyError, match="bug"):
        call_with_retries(flaky, classify, RetryPolicy(), "openai:m")
    assert flaky.calls == 2 and len(waits) == 1


def test_no_retries_means_one_attempt(waits):
    with pytest.raises(LLMError, match=r"HTTP 429$"):
        call_with_retries(Flaky(Busy()), classify, RetryPolicy(max_retries=0), "openai:m")
    assert waits == []
