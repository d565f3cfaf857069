"""Provider spec strings -> providers."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from kfoundry.errors import UsageError
from kfoundry.llm.errors import LLMError
from kfoundry.llm.pricing import Pricing
from kfoundry.llm.provider import Provider
from kfoundry.llm.retry import RetryPolicy
from kfoundry.redact import Redactor, scrub_url

ACCEPTED_FORMS = (
    "openai:MODEL                OpenAI's API (key: OPENAI_API_KEY or [keys] openai)",
    "openai:MODEL@BASE_URL       any OpenAI-compatible server, e.g. openai:qwen@http://localhost:8000/v1",
    "anthropic:MODEL             Anthropic's API (key: ANTHROPIC_API_KEY or [keys] anthropic)",
    "anthropic:MODEL@BASE_URL    an Anthropic-compatible server",
    "cmd:COMMAND                 a shell command: prompt on stdin, reply on stdout",
    "replay:FILE.jsonl           replies recorded earlier (--record FILE)",
)
KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
NO_KEY = "not-needed"  # what a keyless local server is sent as a key
# MODEL@URL splits only where an http(s) URL starts: model names may hold '@' (Vertex) or ':' (Ollama).
_MODEL_AT_URL = re.compile(r"^(?P<model>.+?)@(?P<url>https?://.*)$")


@dataclass(frozen=True)
class Spec:
    kind: str  # openai, anthropic, cmd, replay
    target: str  # the model, the command or the file
    base_url: str | None = None

    @property
    def display(self) -> str:
        """The spec as shown everywhere: no user:password@ or key=... in the URL."""
        url = f"@{scrub_url(self.base_url)}" if self.base_url else ""
        return f"{self.kind}:{self.target}{url}"


def _bad(spec: str, why: str) -> UsageError:
    forms = "\n  ".join(ACCEPTED_FORMS)
    kind, _, rest = spec.partition(":")
    match = _MODEL_AT_URL.match(rest)
    shown = f"{kind}:{match['model']}@{scrub_url(match['url'])}" if match else spec
    return UsageError(f"bad LLM provider {Redactor()(shown)!r}: {why}. Accepted forms:\n  {forms}")


def parse_spec(spec: str) -> Spec:
    kind, colon, rest = spec.strip().partition(":")
    if not colon or kind not in ("openai", "anthropic", "cmd", "replay"):
        raise _bad(spec, f"unknown kind {kind!r}" if colon else "no KIND: prefix")
    rest = rest.strip()
    if not rest:
        raise _bad(spec, f"nothing after {kind}:")
    if kind in ("cmd", "replay"):
        return Spec(kind, rest)
    match = _MODEL_AT_URL.match(rest)
    if not match:
        return Spec(kind, rest)
    model, url = match["model"].strip(), match["url"].strip()
    parts = urlsplit(url)
    if not parts.hostname:
        raise _bad(spec, f"{scrub_url(url)!r} is not a URL with a host")
    # The SDKs append their paths to the base URL, and HTTP libraries log it whole: credentials
    # (user:password@) and queries have no place there.
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise _bad(spec, f"the base URL {scrub_url(url)!r} may not hold a user, password or query "
                         "(the key goes in the environment or the config file's [keys])")
    return Spec(kind, model, url.rstrip("/"))


def _key(kind: str, env: Mapping[str, str], api_keys: Mapping[str, str]) -> str | None:
    return env.get(KEY_VARIABLES[kind]) or api_keys.get(kind) or None


def make_provider(spec: str, *, timeout_s: float = 600, max_retries: int = 4, concurrency: int = 4,
                  pricing: Pricing | None = None, env: Mapping[str, str] | None = None,
                  api_keys: Mapping[str, str] | None = None, record: Path | str | None = None) -> Provider:
    """The provider for a spec (see ACCEPTED_FORMS). Keys come from `env` (default: the process
    environment), then `api_keys` (the config file's [keys]). `record` wraps it in a recorder."""
    env = os.environ if env is None else env
    api_keys = api_keys or {}
    if not timeout_s > 0:
        raise UsageError(f"the LLM timeout must be above 0 s, not {timeout_s}")
    if max_retries < 0:
        raise UsageError(f"LLM retries must be 0 or more, not {max_retries}")
    if concurrency < 1:
        raise UsageError(f"LLM concurrency must be at least 1, not {concurrency}")
    parsed = parse_spec(spec)
    provider = _build(parsed, timeout_s, max_retries, concurrency, pricing, env, api_keys)
    if record is not None:
        from kfoundry.llm.record import record_provider

        provider = record_provider(provider, record)
    return provider


def _build(parsed: Spec, timeout_s: float, max_retries: int, concurrency: int, pricing: Pricing | None,
           env: Mapping[str, str], api_keys: Mapping[str, str]) -> Provider:
    if parsed.kind == "replay":
        from kfoundry.llm.replay import ReplayProvider

        return ReplayProvider(parsed.display, Path(parsed.target).expanduser(), concurrency=concurrency)
    if parsed.kind == "cmd":
        from kfoundry.llm.cmd_provider import CommandProvider

        secrets = [env.get(v) for v in KEY_VARIABLES.values()] + list(api_keys.values())
        redact = Redactor(secrets)
        return CommandProvider(redact(parsed.display), parsed.target, timeout_s=timeout_s,
                               env={**os.environ, **env}, redact=redact, concurrency=concurrency)
    key = _key(parsed.kind, env, api_keys)
    if key is None and parsed.base_url is None:
        variable = KEY_VARIABLES[parsed.kind]
        raise LLMError("refused", f"{parsed.display}: no API key. Set {variable}, or put it in the "
                                  f"config file's [keys] table as {parsed.kind} = \"...\"")
    options = {"api_key": key or NO_KEY, "base_url": parsed.base_url, "timeout_s": timeout_s,
               "retry": RetryPolicy(max_retries=max_retries), "concurrency": concurrency, "pricing": pricing}
    try:
        if parsed.kind == "openai":
            from kfoundry.llm.openai_provider import OpenAIProvider

            return OpenAIProvider(parsed.display, parsed.target, **options)
        from kfoundry.llm.anthropic_provider import AnthropicProvider

        return AnthropicProvider(parsed.display, parsed.target, **options)
    except ImportError as exc:
        raise UsageError(f"{parsed.display} needs the {parsed.kind} package ({exc}); "
                         f"pip install {parsed.kind}") from None
