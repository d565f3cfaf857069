"""Spec strings: the accepted forms, keys, bad specs, lazy SDK imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kfoundry.errors import UsageError
from kfoundry.llm import LLMError, make_provider, parse_spec
from kfoundry.llm.anthropic_provider import AnthropicProvider
from kfoundry.llm.cmd_provider import CommandProvider
from kfoundry.llm.openai_provider import OpenAIProvider
from kfoundry.llm.record import RecordingProvider
from kfoundry.llm.replay import ReplayProvider


@pytest.mark.parametrize("spec, kind, target, url", [
    ("openai:gpt-4o", "openai", "gpt-4o", None),
    ("openai:llama3:8b@http://localhost:11434/v1", "openai", "llama3:8b", "http://localhost:11434/v1"),
    ("openai:meta-llama/Llama-3.1-70B@http://gpu7:8000/v1/", "openai", "meta-llama/Llama-3.1-70B",
     "http://gpu7:8000/v1"),
    ("anthropic:claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5", None),
    ("anthropic:claude-x@https://proxy.example.com", "anthropic", "claude-x", "https://proxy.example.com"),
    ("anthropic:claude-3-5-sonnet@20240620", "anthropic", "claude-3-5-sonnet@20240620", None),
    ("cmd:llm -m gpt-4o --no-stream", "cmd", "llm -m gpt-4o --no-stream", None),
    ("cmd:a@http://b", "cmd", "a@http://b", None),
    ("replay:runs/llm.jsonl", "replay", "runs/llm.jsonl", None),
])
def test_accepted_forms(spec, kind, target, url):
    parsed = parse_spec(spec)
    assert (parsed.kind, parsed.target, parsed.base_url) == (kind, target, url)


@pytest.mark.parametrize("spec, why", [
    ("gpt-4o", "no KIND: prefix"), ("gemini:pro", "unknown kind 'gemini'"), ("openai:", "nothing after"),
    ("cmd:   ", "nothing after"), ("openai:m@http://", "not a URL with a host"),
])
def test_bad_specs_list_the_accepted_forms(spec, why):
    with pytest.raises(UsageError) as caught:
        make_provider(spec, env={})
    message = str(caught.value)
    assert why in message and "openai:MODEL@BASE_URL" in message and "replay:FILE.jsonl" in message


def test_kinds():
    env = {"OPENAI_API_KEY": "k-openai-1", "ANTHROPIC_API_KEY": "k-anthropic-1"}
    assert isinstance(make_provider("openai:gpt-4o", env=env), OpenAIProvider)
    assert isinstance(make_provider("anthropic:claude-sonnet-4", env=env), AnthropicProvider)
    assert isinstance(make_provider("cmd:cat", env=env), CommandProvider)


def test_replay_and_record_kinds(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("")
    assert isinstance(make_provider(f"replay:{path}"), ReplayProvider)
    recorded = make_provider("cmd:cat", record=tmp_path / "out.jsonl")
    assert isinstance(recorded, RecordingProvider) and recorded.spec == "cmd:cat"


@pytest.mark.parametrize("spec, variable", [("openai:gpt-4o", "OPENAI_API_KEY"),
                                             ("anthropic:claude-sonnet-4", "ANTHROPIC_API_KEY")])
def test_missing_key_is_refused_with_a_clear_message(spec, variable):
    with pytest.raises(LLMError) as caught:
        make_provider(spec, env={})
    assert caught.value.reason == "refused"
    assert variable in str(caught.value) and "[keys]" in str(caught.value)


def test_key_from_config_file_and_environment_first(openai_server, monkeypatch):
    from kfoundry.llm import openai_provider

    monkeypatch.setattr(openai_provider, "OPENAI_URL", openai_server.url)
    make_provider("openai:gpt-4o", env={}, api_keys={"openai": "from-config-111"}).complete("s", "u")
    make_provider("openai:gpt-4o", env={"OPENAI_API_KEY": "from-env-222"},
                  api_keys={"openai": "from-config-111"}).complete("s", "u")
    assert [r.headers["authorization"] for r in openai_server.received] == [
        "Bearer from-config-111", "Bearer from-env-222"]


def test_scrub_url():
    from kfoundry.llm.redact import scrub_url

    assert scrub_url("https://user:hunter2@host.example/v1?api_key=abc123&x=1") == \
        "https://host.example/v1?api_key=***&x=1"


@pytest.mark.parametrize("option", [{"timeout_s": 0}, {"max_retries": -1}, {"concurrency": 0}])
def test_bad_options(option):
    with pytest.raises(UsageError):
        make_provider("cmd:cat", **option)


def test_sdks_are_imported_only_when_needed():
    code = ("import sys, kfoundry.llm as llm\n"
            "p = llm.make_provider('cmd:cat')\n"
            "assert p.complete('s', 'u').text == 's\\n\\nu'\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'anthropic')))\n"
            "llm.make_provider('openai:m@http://127.0.0.1:9/v1', env={})\n"
            "print('openai' in sys.modules, 'anthropic' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "True False"]
