"""Settings from four places, in order of precedence: the command line, the environment
(KFOUNDRY_<OPTION>), a TOML config file (kfoundry.toml in the working directory, or --config PATH),
then the defaults. Each setting remembers where it came from, for `kfoundry config show`.

Every setting is a field of one section of a run's config (kfoundry.run_config.RunConfig: search,
eval, llm, bench, log), and its default is that field's: `Option` says which field it sets, and
`build_run_config` builds the whole config from the settings in force, so the command line,
the environment and the file reach every command the same way. What a command's own line does not
show (the environment's and the file's settings) it prints as one line (`Settings.line`).

What names one invocation's inputs and outputs is not a setting: the problem, candidate and suite
paths, -o/--out, --resume, --json, --quiet, generate's --expert, --parent, --attempts and
--show-prompt, optimize's seed kernels, diagnose's --max-chars, bench's --level and --problems.

API keys come only from the environment (the providers' own variables) or the config file's
[keys] table; they are masked wherever settings are shown.
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from kfoundry.errors import UsageError
from kfoundry.sandbox.secrets import register as register_secret

if TYPE_CHECKING:
    from kfoundry.run_config import RunConfig

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


def _gigabytes(value: Any) -> int:
    return int(float(value) * 1e9)


def _names(value: Any) -> tuple[str, ...]:
    return tuple(_list(value))


def _words(value: Any) -> list[str]:
    """A command: its words, or a string split as a shell would."""
    if isinstance(value, str):
        return shlex.split(value)
    return _list(value)


def _set_values(value: Any) -> dict[str, Any]:
    """--set's NAME=VALUE items: a TOML table {NAME = VALUE}, a list of "NAME=VALUE", or one string
    "NAME=VALUE,NAME=VALUE" (a comma inside a value, as in a tuple, stays with it)."""
    from kfoundry.problem import parse_set_values

    if isinstance(value, dict):
        bad = [str(name) for name in value if not str(name).isidentifier()]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a Python identifier")
        return dict(value)
    if isinstance(value, str):
        value = [item for item in re.split(r",\s*(?=[A-Za-z_]\w*\s*=)", value) if item.strip()]
    try:
        return parse_set_values([str(item) for item in _list(value)])
    except UsageError as exc:
        raise ValueError(str(exc)) from None


def _level(value: Any) -> str:
    from kfoundry.logs import LEVELS

    text = str(value).strip().lower()
    if text not in LEVELS:
        raise ValueError(f"use one of {', '.join(LEVELS)}")
    return text


def _gpu(value: Any) -> str:
    from kfoundry.evaluate.shared.gpu_table import known_names, lookup

    name = str(value).strip()
    if lookup(name) is None:
        raise ValueError(f"not a GPU of the bundled table ({', '.join(known_names())})")
    return name


@dataclass(frozen=True)
class Option:
    section: str  # of kfoundry.run_config.RunConfig: search, eval, llm, bench or log
    field: str  # the field of that section it sets; its default is the field's
    convert: Callable[[Any], Any]
    help: str


OPTIONS: dict[str, Option] = {
    # the LLM (its specs are kept with the search settings, as a run stores them)
    "llm": Option("search", "llm", _list, "LLM provider specs (openai:MODEL[@URL], anthropic:MODEL, cmd:COMMAND, "
                                          "replay:FILE)"),
    "llm_weights": Option("llm", "llm_weights", _floats, "weights of the --llm providers in an ensemble"),
    "llm_timeout": Option("llm", "llm_timeout", float, "seconds per LLM call (local models are slow)"),
    "llm_retries": Option("llm", "llm_retries", int, "retries on rate limits, 5xx, connection errors and timeouts"),
    "llm_concurrency": Option("llm", "llm_concurrency", int, "LLM calls in flight at once, per provider"),
    "budget_dollars": Option("llm", "budget_dollars", _optional(float), "stop when the LLM calls have cost this much "
                                                                        "(USD)"),
    "budget_tokens": Option("llm", "budget_tokens", _optional(int), "stop when the LLM calls have used this many "
                                                                    "tokens"),
    "pricing": Option("llm", "pricing", _optional(str), "a TOML file of model prices that extends the shipped table"),
    "record": Option("llm", "record", _optional(str), "append every LLM exchange to this JSONL file (replay:FILE "
                                                      "reads it)"),
    # the search
    "backend": Option("search", "backend", str, "what the experts write: triton or cuda"),
    "library": Option("search", "library", _optional(str), "the experience library's path (off: none)"),
    "islands": Option("search", "islands", int, "islands, each with its own population"),
    "migrate_every": Option("search", "migrate_every", int, "generations between migrations"),
    "topology": Option("search", "topology", str, "where migrants go: ring or all-to-all"),
    "selection": Option("search", "selection", str, "parent selection: tournament or proportional"),
    "concurrency": Option("search", "concurrency", int, "expert proposals (LLM calls) at once"),
    "max_evals": Option("search", "max_evals", _optional(int), "stop after this many evaluations (32 when no budget "
                                                               "is given)"),
    "max_cost": Option("search", "max_cost", _optional(float), "stop once LLM calls cost this many dollars"),
    "max_time": Option("search", "max_time_s", _optional(float), "stop after this many seconds"),
    "max_generations": Option("search", "max_generations", _optional(int), "stop after this many generations"),
    "target_speedup": Option("search", "target_speedup", _optional(float), "stop at this speedup vs eager"),
    "target_roofline": Option("search", "target_roofline", _optional(float), "stop at this fraction of the roofline"),
    "stagnation": Option("search", "stagnation", _optional(int), "stop after this many generations without a better "
                                                                 "candidate"),
    "reject_similar": Option("search", "reject_similar", _optional(float), "drop proposals this similar (cosine) to a "
                                                                           "candidate already seen"),
    "devices": Option("search", "devices", _optional(str), "evaluation workers, one per device (cuda:0,cuda:1, all, "
                                                           "cpu:N)"),
    "cluster": Option("search", "cluster", _optional(str), "ray or ray://HOST:PORT: evaluation workers are Ray "
                                                           "actors"),
    "rng_seed": Option("search", "seed", int, "deprecated (use seed): the search's random seed alone"),
    "target_gpu": Option("search", "target_gpu", _optional(_gpu), "on a CPU run, the GPU whose datasheet figures "
                                                                  "the prompts show (H100, H100 PCIe, H200, A100, "
                                                                  "L40S, RTX 4090; default: a typical H100); a GPU "
                                                                  "run shows its own and ignores this"),
    "check_sizes": Option("search", "check_sizes", _bool, "judge the final best again at a second size set of the "
                                                          "problem: does it hold at other sizes (default on)"),
    "time_again": Option("search", "time_again", _bool, "on a GPU, time generation 0's best and the final best "
                                                        "again once the search is over, one after the other: the "
                                                        "gain timed side by side (default on)"),
    # the evaluation
    "device": Option("eval", "device", _optional(str), "cpu, cuda or cuda:N (default: CUDA when available)"),
    "precision": Option("eval", "precision", str, "fp32, fp16 or bf16"),
    "tolerance": Option("eval", "tolerance", _optional(float), "atol = rtol (default: by precision)"),
    "policy": Option("eval", "policy", str, "anti-cheating policy: strict or permissive"),
    "sandbox": Option("eval", "sandbox", str, "the candidates' OS sandbox: on (warn where the kernel lacks a part), "
                                              "strict (refuse to run without all of it) or off"),
    "trials": Option("eval", "trials", int, "correctness trials per evaluation"),
    "timeout": Option("eval", "timeout_s", float, "seconds per candidate evaluation"),
    "seed": Option("eval", "seed", _optional(int), "the random seed: the trial seeds, and a search's too (default: "
                                                   "trial seeds drawn unpredictably, reported; search seed 0)"),
    "eval_mode": Option("eval", "eval_mode", _bool, "run both models in .eval() (default: training mode)"),
    "timing_trials": Option("eval", "timing_trials", int, "timed trials on a GPU"),
    "baselines": Option("eval", "baselines", _names, "baselines to time: eager, compile, compile-max-autotune, "
                                                     "compile-max-autotune-no-cudagraphs, compile-reduce-overhead"),
    "no_cache": Option("eval", "no_cache", _bool, "re-measure the baselines instead of using the cache"),
    "memory_limit": Option("eval", "memory_limit_bytes", _optional(_gigabytes), "GB of host memory an evaluation "
                                                                                "may plan for (default: what is free)"),
    "memory_tier": Option("eval", "memory_tier", str, "where the judge keeps the expected outputs: auto (the best "
                                                      "that fits), resident, host or per-set"),
    "workers": Option("eval", "workers", _optional(int), "candidates evaluated at once (default: by CPU cores and "
                                                         "free memory)"),
    "set": Option("eval", "set_values", _set_values, "NAME=VALUE overrides of a problem's module-level constants "
                                                     "(the file: a [set] table; the environment: "
                                                     "NAME=VALUE,NAME=VALUE)"),
    "wrapper": Option("eval", "wrapper", _optional(_words), "run the candidate's worker under this command (e.g. "
                                                            "compute-sanitizer --tool memcheck)"),
    "ncu": Option("eval", "ncu", _bool, "GPU: profile a working candidate with Nsight Compute for the diagnosis"),
    "sanitize": Option("eval", "sanitize", _bool, "GPU: re-run a crashing or wrong candidate under "
                                                  "compute-sanitizer memcheck"),
    # a bench
    "method": Option("bench", "method", str, "bench: optimize, solutions or reference"),
    "time_per_problem": Option("bench", "time_per_problem", _optional(float), "bench: seconds per problem"),
    "bench_devices": Option("bench", "devices", _optional(str), "bench: several problems at once, one per device"),
    # the run's log and progress
    "log_file": Option("log", "log_file", _optional(str), "append a full log of the run (timestamped) to this file"),
    "log_level": Option("log", "log_level", _level, "the log file's level: debug, info, warning or error"),
    "heartbeat": Option("log", "heartbeat_s", float, "seconds of silence before a 'still working' line when output "
                                                     "is not a terminal (0: none)"),
}


def default(option: Option) -> Any:
    """The option's default: its field's, in its section of the run config."""
    from kfoundry.run_config import SECTIONS

    found = {f.name: f for f in fields(SECTIONS[option.section])}[option.field]
    return found.default_factory() if found.default_factory is not MISSING else found.default


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


    def provenance(self, sections: tuple[str, ...] = (), names: tuple[str, ...] = (), *,
                   hidden: bool = True) -> list[tuple[str, Any, str]]:
        """(name, value, source) of the settings of these sections (or names; none given: all) that are not
        the defaults; `hidden`: only those the environment or the config file set, which change a
        command's work without being on its command line."""
        return [(name, self.values[name], _short(self.sources[name])) for name, option in OPTIONS.items()
                if (not (sections or names) or option.section in sections or name in names)
                and self.sources[name] != "default" and (not hidden or self.sources[name].startswith(HIDDEN))]

    def line(self, sections: tuple[str, ...] = (), names: tuple[str, ...] = ()) -> str | None:
        """One line such as "settings: trials=2 (KFOUNDRY_TRIALS), tolerance=0.01 (kfoundry.toml)", or None
        when every setting of these sections comes from the command line or the defaults."""
        found = self.provenance(sections, names)
        if not found:
            return None
        return "settings: " + ", ".join(f"{name}={_show(value, ',')} ({source})" for name, value, source in found)


HIDDEN = ("environment ", "config file ")  # the sources a command line does not show


def _short(source: str) -> str:
    """"environment KFOUNDRY_TRIALS" -> "KFOUNDRY_TRIALS"; "config file /here/kfoundry.toml" -> "kfoundry.toml"."""
    if not source.startswith(HIDDEN):
        return source
    if source.startswith("environment "):
        return source.removeprefix("environment ")
    path = Path(source.removeprefix("config file "))
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _show(value: Any, separator: str = ", ") -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return separator.join(f"{k}={v!r}" for k, v in value.items()) if value else "-"
    if isinstance(value, (list, tuple)):
        return separator.join(str(v) for v in value) if value else "-"
    return str(value)


def _convert(name: str, value: Any, where: str) -> Any:
    try:
        return OPTIONS[name].convert(value)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: bad value {value!r} for {name}: {exc}") from None


# keys a user may try from a flag's spelling or a field's name, and the setting they mean
_ALIASES = {"max_time_s": "max_time", "timeout_s": "timeout", "set_values": "set", "no_library": 'library = "off"',
            "memory_limit_bytes": "memory_limit (GB)", "heartbeat_s": "heartbeat", "devices_per_problem":
            "bench_devices"}


def read_config(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read the config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"the config file {path} is not valid TOML: {exc}") from None
    unknown = [key for key in data if key not in OPTIONS and key != "keys"]
    if unknown:
        hint = "; ".join(f"{key} is {_ALIASES[key]}" for key in unknown if key in _ALIASES)
        raise UsageError(f"the config file {path} has unknown key(s) {', '.join(sorted(unknown))}"
                         + (f" ({hint})" if hint else "") + f"; known: {', '.join(OPTIONS)}, and a [keys] table")
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
            values[name], sources[name] = default(option), "default"
    keys, key_sources = {}, {}
    for provider, variable in KEY_VARIABLES.items():
        if env.get(variable):
            keys[provider], key_sources[provider] = env[variable], f"environment {variable}"
        elif data.get("keys", {}).get(provider):
            keys[provider], key_sources[provider] = str(data["keys"][provider]), f"config file {path} [keys]"
            register_secret(keys[provider])  # scrubbed from whatever a candidate prints
    return Settings(values, sources, keys, key_sources, path)


def build_run_config(settings: Settings) -> RunConfig:
    """Every section of the run config from the settings in force (`load_settings`): each option sets
    the field it names, and a section's other fields keep their defaults."""
    from kfoundry.run_config import SECTIONS, RunConfig  # torch comes with the sections: at call time

    parts: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for name, option in OPTIONS.items():
        parts[option.section][option.field] = settings[name]
    made = {name: SECTIONS[name](**values) for name, values in parts.items()}
    # `seed` is the random seed everywhere: a search's as well as the trial seeds, unless the
    # deprecated `rng_seed` sets the search's apart
    if settings["seed"] is not None and settings.sources["rng_seed"] == "default":
        made["search"].seed = settings["seed"]
    return RunConfig(**made)


def load_run_config(values: Mapping[str, Any], config: Path | None = None, env: Mapping[str, str] | None = None,
                    cwd: Path | None = None) -> tuple[RunConfig, Settings]:
    """The run config (kfoundry.run_config.RunConfig) and the settings it was built from, for a command
    whose parameters are `values`: those named like a setting are the command line's (a flag left off,
    False, is not given; a path is its text), and `set_`, if any, holds the --set items."""
    given = {name: str(value) if isinstance(value, Path) else value for name, value in values.items()
             if name in OPTIONS and value is not None and value is not False}
    if values.get("set_"):
        given["set"] = values["set_"]
    settings = load_settings(given, config, env, cwd)
    return build_run_config(settings), settings
