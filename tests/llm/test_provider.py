"""The Provider base: argument checks and the per-provider concurrency limit."""

from __future__ import annotations

import threading

import pytest

from kfoundry.llm import make_provider
from tests.llm.servers import delay


def test_concurrency_limit_holds_callers_back(openai_server):
    openai_server.queue(*[delay(0.15)] * 6)
    provider = make_provider(f"openai:m@{openai_server.url}", env={}, concurrency=2)
    threads = [threading.Thread(target=provider.complete, args=("s", f"u{i}")) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(openai_server.received) == 6 and openai_server.max_in_flight == 2


@pytest.mark.parametrize("kwargs", [{"max_tokens": 0}, {"max_tokens": 1.5}, {"max_tokens": True},
                                    {"temperature": -0.1}, {"temperature": "hot"}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        make_provider("cmd:cat").complete("s", "u", **kwargs)
