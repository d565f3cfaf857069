"""Fixtures for the LLM tests: local API servers, recorded retry waits, fake keys."""

from __future__ import annotations

import socket

import pytest

import kfoundry.llm.retry as retry_module
from tests.llm.servers import AnthropicServer, OpenAIServer

# Not shaped like a real key, so only the explicit redaction of known keys can hide it.
FAKE_OPENAI_KEY = "fake-openai-7f3a9c2e51d04b6e"
FAKE_ANTHROPIC_KEY = "fake-anthropic-90c1d2e3f4a5b6c7"


@pytest.fixture
def openai_server():
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def anthropic_server():
    with AnthropicServer() as server:
        yield server


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """The retry waits, recorded instead of slept."""
    recorded: list[float] = []
    monkeypatch.setattr(retry_module, "sleep", recorded.append)
    return recorded


@pytest.fixture
def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
