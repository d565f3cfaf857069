"""Our retry policy for the SDK providers, run by tenacity: exponential backoff with full jitter on rate limits,
5xx, connection errors and timeouts; Retry-After honoured, capped. The SDKs' own retries are off so that both
SDKs follow one policy (llm_retries), each retry is logged with its reason, and a reply records how many
attempts it took."""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import tenacity

from kfoundry.llm.errors import LLMError

log = logging.getLogger("kfoundry.llm")
T = TypeVar("T")

# Module-level so tests can record the waits instead of sleeping them.
sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True)
class Failure:
    """One failed attempt, classified: the LLMError reason it maps to and whether to try again."""

    reason: str
    retryable: bool
    detail: str  # already free of keys
    retry_after: float | None = None


@dataclass
class RetryPolicy:
    max_retries: int = 4
    base_s: float = 1.0
    cap_s: float = 60.0
    retry_after_cap_s: float = 60.0
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def wait_s(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number `retry` (1-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.retry_after_cap_s)
        return self.rng.uniform(0.0, min(self.cap_s, self.base_s * 2 ** (retry - 1)))


class _Failed(Exception):
    """An attempt's exception as `classify` read it; the SDK's own (which holds the request and its headers) is
    dropped here, so it is chained to nothing we raise."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.detail)
        self.failure = failure


def call_with_retries(attempt: Callable[[], T], classify: Callable[[Exception], Failure | None],
                      policy: RetryPolicy, label: str) -> tuple[T, int]:
    """(attempt's result, attempts made). Exceptions `classify` does not know propagate as they are."""
    def classified() -> T:
        try:
            return attempt()
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                raise
        raise _Failed(failure)  # outside the except block: not chained to the SDK's exception

    def failure_of(state: tenacity.RetryCallState) -> Failure:
        return state.outcome.exception().failure

    def warn(state: tenacity.RetryCallState) -> None:
        failure = failure_of(state)
        log.warning("%s: %s: %s; retry %d/%d in %.2f s", label, failure.reason, failure.detail,
                    state.attempt_number, policy.max_retries, state.next_action.sleep)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, _Failed) and exc.failure.retryable),
        stop=tenacity.stop_after_attempt(policy.max_retries + 1),
        wait=lambda state: policy.wait_s(state.attempt_number, failure_of(state).retry_after),
        before_sleep=warn,
        sleep=lambda seconds: sleep(seconds),  # the module's, looked up at each wait (tests record them)
        reraise=True)
    try:
        return retrying(classified), retrying.statistics["attempt_number"]
    except _Failed as failed:
        failure = failed.failure
    attempts = retrying.statistics["attempt_number"]
    tries = f" (after {attempts} attempts)" if attempts > 1 else ""
    raise LLMError(failure.reason, f"{label}: {failure.detail}{tries}")


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked us to wait: retry-after-ms, or Retry-After in seconds or as a date."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
