"""cmd:COMMAND: the prompt on stdin and in files, stdout as the reply, failures and timeouts."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest

from kfoundry.llm import LLMError, Pricing, make_provider
from tests.helpers import alive

FAKE_LLM = Path(__file__).resolve().parents[1] / "fixtures" / "llm" / "fake_llm.py"
PYTHON = shlex.quote(sys.executable)


def command(*args: str) -> str:
    return f"cmd:{PYTHON} {shlex.quote(str(FAKE_LLM))} " + " ".join(shlex.quote(a) for a in args)


def seen(text: str) -> dict:
    return json.loads(text.split("SEEN ", 1)[1])


def test_prompt_goes_to_stdin_and_files_and_stdout_is_the_reply():
    provider = make_provider(command("reply"))
    reply = provider.complete("SYSTEM TEXT", "user text\nline two", max_tokens=512, temperature=0.5)
    assert reply.text.startswith("```python\nclass ModelNew:\n    pass\n```\n")
    got = seen(reply.text)
    assert got["stdin"] == "SYSTEM TEXT\n\nuser text\nline two"
    assert got["system_file"] == "SYSTEM TEXT" and got["user_file"] == "user text\nline two"
    assert (got["max_tokens"], got["temperature"]) == ("512", "0.5")
    assert reply.provider == command("reply") and reply.attempts == 1
    # A command reports no usage: tokens and cost unknown, and it counts as unpriced.
    assert (reply.input_tokens, reply.output_tokens, reply.cost_usd) == (None, None, None)
    assert not provider.is_priced(Pricing.load(None))


def test_without_a_system_prompt_stdin_is_the_user_text():
    got = seen(make_provider(command("reply")).complete("", "just this").text)
    assert got["stdin"] == "just this" and got["max_tokens"] is None


def test_shell_pipelines_work():
    reply = make_provider("cmd:tr a-z A-Z | sed 's/^/> /'").complete("sys", "hello")
    assert reply.text == "> SYS\n> \n> HELLO"


def test_nonzero_exit_is_command_failed_with_stderr_tail():
    secret = "fake-secret-4b1e77d02a93"
    provider = make_provider(command("fail"), env={"FAKE_SECRET": secret, "OPENAI_API_KEY": secret})
    with pytest.raises(LLMError) as caught:
        provider.complete("s", "u")
    message = str(caught.value)
    assert caught.value.reason == "command_failed" and "exited with status 3" in message
    assert message.rstrip().endswith("error: quota exceeded for key ***")
    assert secret not in message and len(message) < 2500  # the tail, not all of stderr


def test_command_not_found():
    with pytest.raises(LLMError) as caught:
        make_provider("cmd:kfoundry-no-such-llm-tool --flag").complete("s", "u")
    assert caught.value.reason == "command_failed" and "status 127" in str(caught.value)


def test_timeout_kills_the_process_group(tmp_path):
    pid_file = tmp_path / "child.pid"
    provider = make_provider(command("hang", str(pid_file)), timeout_s=1.5)
    started = time.monotonic()
    with pytest.raises(LLMError) as caught:
        provider.complete("s", "u")
    assert caught.value.reason == "timeout" and "killed" in str(caught.value)
    assert time.monotonic() - started < 10
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the command's child outlived the timeout"

