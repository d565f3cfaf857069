"""The backoff schedule and Retry-After parsing."""

from __future__ import annotations

import random
import time
from email.utils import formatdate

import pytest

from kfoundry.llm.retry import RetryPolicy, parse_retry_after


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
