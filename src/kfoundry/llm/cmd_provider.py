"""cmd:COMMAND: any program as an LLM. The prompt goes to its stdin (system text, a blank line, the
user text); its stdout is the reply. For tools that take the parts separately, the environment
holds KFOUNDRY_SYSTEM_PROMPT_FILE and KFOUNDRY_USER_PROMPT_FILE (and KFOUNDRY_MAX_TOKENS,
KFOUNDRY_TEMPERATURE when the caller set them)."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from kfoundry.llm.errors import LLMError
from kfoundry.llm.provider import Provider
from kfoundry.llm.reply import LLMReply, Request
from kfoundry.redact import Redactor

_STDERR_TAIL = 2000


def prompt_text(request: Request) -> str:
    return f"{request.system}\n\n{request.user}" if request.system else request.user


class CommandProvider(Provider):
    def __init__(self, spec: str, command: str, *, timeout_s: float, env: Mapping[str, str],
                 redact: Redactor, concurrency: int = 4) -> None:
        super().__init__(spec, model=spec.partition(":")[2], concurrency=concurrency)
        self._command = command
        self._timeout_s = timeout_s
        self._env = dict(env)
        self._redact = redact

    def is_priced(self, pricing: object) -> bool:
        return False  # a command reports no tokens

    def _complete(self, request: Request) -> LLMReply:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="kfoundry-llm-") as tmp:
            system_file, user_file = Path(tmp) / "system.txt", Path(tmp) / "user.txt"
            system_file.write_text(request.system, encoding="utf-8")
            user_file.write_text(request.user, encoding="utf-8")
            env = {**self._env, "KFOUNDRY_SYSTEM_PROMPT_FILE": str(system_file),
                   "KFOUNDRY_USER_PROMPT_FILE": str(user_file)}
            if request.max_tokens is not None:
                env["KFOUNDRY_MAX_TOKENS"] = str(request.max_tokens)
            if request.temperature is not None:
                env["KFOUNDRY_TEMPERATURE"] = str(request.temperature)
            stdout, stderr, status = self._run(prompt_text(request).encode("utf-8"), env)
        if status != 0:
            how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
            tail = stderr.decode("utf-8", "replace").strip()[-_STDERR_TAIL:]
            tail = f"; stderr ends:\n{self._redact(tail)}" if tail else " (no stderr)"
            raise LLMError("command_failed", f"{self.spec}: the command {how}{tail}")
        return self._reply(request, stdout.decode("utf-8", "replace"), None, None, started, 1)

    def _run(self, stdin: bytes, env: dict[str, str]) -> tuple[bytes, bytes, int]:
        # Its own process group, so a timeout kills the shell and whatever it started.
        proc = subprocess.Popen(self._command, shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(stdin, timeout=self._timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise LLMError("timeout", f"{self.spec}: no reply within {self._timeout_s:g} s "
                                      "(the command was killed)") from None
        return stdout, stderr, proc.returncode


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        # Something outside the group still holds the pipes; do not wait on it.
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
