"""Settings from four places, in order of precedence: the command line, the environment
(KFOUNDRY_<OPTION>), a TOML config file (kfoundry.toml in the working directory, or --config PATH),
then the defaults. Each setting remembers where it came from, for `kfoundry config show`.

API keys come only from the environment (the providers' own variables) or the config file's
[keys] table; they are masked wherever settings are shown.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from kfoundry.errors import UsageError
from kfoundry.sandbox.secrets import register as register_secret

CONFIG_NAME = "kfoundry.toml"
ENV_PREFIX = "KFOUNDRY_"
# provider -> the environment variable its SDK reads
KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def _list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, (list, tuple)):
        return [str(item) for item in value]
    raise ValueError("expected a list or a comma-separated string")


def _floats(value: Any) -> list[float]:
    return [float(item) for item in _list(value)]


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None or value == "" else convert(value)


@dataclass(frozen=True)
class Option:
    convert: Callable[[Any], Any]
    default: Any
    help: str


OPTIONS: dict[str, Option] = {
    "llm": Option(_list, [], "LLM provider specs (openai:MODEL[@URL], anthropic:MODEL, cmd:COMMAND, replay:FILE)"),
    "llm_weights": Option(_floats, [], "weights of the --llm providers in an ensemble"),
    "llm_timeout": Option(float, 600.0, "seconds per LLM call (local models are slow)"),
    "llm_retries": Option(int, 4, "retries on rate limits, 5xx, connection errors and timeouts"),
    "llm_concurrency": Option(int, 4, "LLM calls in flight at once, per provider"),
    "budget_dollars": Option(_optional(float), None, "stop when the LLM calls have cost this much (USD)"),
    "budget_tokens": Option(_optional(int), None, "stop when the LLM calls have used this many tokens"),
    "pricing": Option(_optional(str), None, "a TOML file of model prices that extends the shipped table"),
    "record": Option(_optional(str), None, "append every LLM exchange to this JSONL file (replay:FILE reads it)"),
    "backend": Option(str, "triton", "what the experts write: triton or cuda"),
    "device": Option(_optional(str), None, "cpu, cuda or cuda:N (default: CUDA when available)"),
    "precision": Option(str, "fp32", "fp32, fp16 or bf16"),
    "tolerance": Option(_optional(float), None, "atol = rtol (default: by precision)"),
    "policy": Option(str, "strict", "anti-cheating policy: strict or permissive"),
    "sandbox": Option(str, "on", "the candidates' OS sandbox: on (warn where the kernel lacks a part), strict "
                                 "(refuse to run without all of it) or off"),
    "trials": Option(int, 5, "correctness trials per evaluation"),
    "timeout": Option(float, 300.0, "seconds per candidate evaluation"),
    "library": Option(_optional(str), None, "the experience library's path"),
}


LLM_OPTIONS = ("llm", "llm_weights", "llm_timeout", "llm_retries", "llm_concurrency", "budget_dollars",
               "budget_tokens", "pricing", "record")  # what builds the LLM of a run (no key among them)


def llm_options(settings: Settings) -> dict[str, Any]:
    """The LLM settings in force, as a run keeps them to build the same LLM on --resume."""
    return {name: settings[name] for name in LLM_OPTIONS}


def mask(key: str | None) -> str:
    if not key:
        return "(not set)"
    return f"{key[:3]}…{key[-2:]} (masked)" if len(key) > 12 else "(set, masked)"


@dataclass
class Settings:
    values: dict[str, Any]
    sources: dict[str, str]
    api_keys: dict[str, str] = field(default_factory=dict, repr=False)
    key_sources: dict[str, str] = field(default_factory=dict)
    config_path: Path | None = None

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def rows(self) -> list[tuple[str, str, str]]:
        """(name, value, source) for display; keys masked."""
        out = [(name, _show(self.values[name]), self.sources[name]) for name in OPTIONS]
        for provider, variable in KEY_VARIABLES.items():
            out.append((f"keys.{provider}", mask(self.api_keys.get(provider)),
                        self.key_sources.get(provider, f"not set (environment {variable} or [keys] {provider})")))
        return out


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) if value else "-"
    return str(value)


def _convert(name: str, value: Any, where: str) -> Any:
    try:
        return OPTIONS[name].convert(value)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: bad value {value!r} for {name}: {exc}") from None


def read_config(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read the config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"the config file {path} is not valid TOML: {exc}") from None
    unknown = [key for key in data if key not in OPTIONS and key != "keys"]
    if unknown:
        raise UsageError(f"the config file {path} has unknown key(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(OPTIONS)}, and a [keys] table")
    keys = data.get("keys", {})
    if not isinstance(keys, dict) or any(k not in KEY_VARIABLES for k in keys):
        raise UsageError(f"the config file {path}: [keys] may hold {', '.join(KEY_VARIABLES)}")
    return data


def load_settings(cli: Mapping[str, Any] | None = None, config: Path | None = None,
                  env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Settings:
    """The settings in force. `cli` holds the command-line values given (None means not given);
    `config` is --config (an explicit path must exist; kfoundry.toml in `cwd` is optional)."""
    env = os.environ if env is None else env
    cli = {k: v for k, v in (cli or {}).items() if v is not None and v != [] and v != ()}
    unknown = [k for k in cli if k not in OPTIONS]
    if unknown:
        raise UsageError(f"unknown setting(s) {', '.join(unknown)}")
    path = config
    if path is None:
        candidate = (cwd or Path.cwd()) / CONFIG_NAME
        path = candidate if candidate.is_file() else None
    elif not path.is_file():
        raise UsageError(f"--config {path}: no such file")
    data = read_config(path) if path else {}
    values, sources = {}, {}
    for name, option in OPTIONS.items():
        variable = ENV_PREFIX + name.upper()
        if name in cli:
            values[name], sources[name] = _convert(name, cli[name], "command line"), "command line"
        elif env.get(variable, "") != "":
            values[name] = _convert(name, env[variable], f"environment {variable}")
            sources[name] = f"environment {variable}"
        elif name in data:
            values[name] = _convert(name, data[name], f"config file {path}")
            sources[name] = f"config file {path}"
        else:
            values[name], sources[name] = option.default, "default"
    keys, key_sources = {}, {}
    for provider, variable in KEY_VARIABLES.items():
        if env.get(variable):
            keys[provider], key_sources[provider] = env[variable], f"environment {variable}"
        elif data.get("keys", {}).get(provider):
            keys[provider], key_sources[provider] = str(data["keys"][provider]), f"config file {path} [keys]"
            register_secret(keys[provider])  # scrubbed from whatever a candidate prints
    return Settings(values, sources, keys, key_sources, path)
