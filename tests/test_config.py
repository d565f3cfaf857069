"""kfoundry.config: command line over environment over config file over defaults; keys masked."""

from pathlib import Path

import pytest

from kfoundry.config import OPTIONS, build_run_config, default, load_run_config, load_settings, mask
from kfoundry.errors import UsageError

KEY = "sk-test-0123456789abcdef-secret"


def write(tmp_path: Path, text: str, name: str = "kfoundry.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_without_any_source(tmp_path):
    settings = load_settings({}, env={}, cwd=tmp_path)
    assert settings.config_path is None
    for name, option in OPTIONS.items():
        assert settings[name] == default(option) and settings.sources[name] == "default"
    assert settings["trials"] == 5 and settings["islands"] == 4 and settings["llm_timeout"] == 600.0
    assert settings["baselines"] == ("eager", "compile") and settings["method"] == "optimize"


def test_precedence_cli_env_file_default(tmp_path):
    write(tmp_path, 'llm = ["replay:a.jsonl"]\nllm_timeout = 30\ntrials = 3\npolicy = "permissive"\n')
    env = {"KFOUNDRY_LLM_TIMEOUT": "45", "KFOUNDRY_TRIALS": "4"}
    settings = load_settings({"trials": 7}, env=env, cwd=tmp_path)
    assert settings["trials"] == 7 and settings.sources["trials"] == "command line"
    assert settings["llm_timeout"] == 45.0 and settings.sources["llm_timeout"] == "environment KFOUNDRY_LLM_TIMEOUT"
    assert settings["policy"] == "permissive" and settings.sources["policy"].startswith("config file ")
    assert settings["llm"] == ["replay:a.jsonl"]
    assert settings["backend"] == "triton" and settings.sources["backend"] == "default"


def test_environment_lists_are_comma_separated(tmp_path):
    env = {"KFOUNDRY_LLM": "openai:m1@http://127.0.0.1:1/v1, cmd:cat", "KFOUNDRY_LLM_WEIGHTS": "2,1"}
    settings = load_settings({}, env=env, cwd=tmp_path)
    assert settings["llm"] == ["openai:m1@http://127.0.0.1:1/v1", "cmd:cat"]
    assert settings["llm_weights"] == [2.0, 1.0]


def test_explicit_config_path_and_keys(tmp_path):
    path = write(tmp_path, f'[keys]\nopenai = "{KEY}"\n', name="other.toml")
    settings = load_settings({}, config=path, env={"ANTHROPIC_API_KEY": KEY}, cwd=tmp_path / "nowhere")
    assert settings.api_keys == {"openai": KEY, "anthropic": KEY}
    assert settings.key_sources["anthropic"] == "environment ANTHROPIC_API_KEY"
    shown = "\n".join(" ".join(row) for row in settings.rows())
    assert KEY not in shown and "masked" in shown
    assert KEY not in repr(settings)


def test_environment_key_wins_over_the_file(tmp_path):
    write(tmp_path, '[keys]\nopenai = "from-file-0123456789"\n')
    settings = load_settings({}, env={"OPENAI_API_KEY": KEY}, cwd=tmp_path)
    assert settings.api_keys["openai"] == KEY


@pytest.mark.parametrize("text, expected", [
    ("llm = [", "not valid TOML"),
    ("colour = 'red'", "unknown key(s) colour"),
    ("trials = 'many'", "bad value 'many' for trials"),
    ("[keys]\ngoogle = 'x'", "[keys] may hold"),
])
def test_bad_config_is_a_clear_error(tmp_path, text, expected):
    write(tmp_path, text)
    with pytest.raises(UsageError, match=None) as info:
        load_settings({}, env={}, cwd=tmp_path)
    assert expected in str(info.value)


def test_missing_explicit_config_and_bad_env(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        load_settings({}, config=tmp_path / "absent.toml", env={})
    with pytest.raises(UsageError, match="environment KFOUNDRY_LLM_RETRIES"):
        load_settings({}, env={"KFOUNDRY_LLM_RETRIES": "lots"}, cwd=tmp_path)


def test_mask():
    assert mask(None) == "(not set)"
    assert mask("short") == "(set, masked)"
    assert KEY not in mask(KEY) and mask(KEY).startswith("sk-")


def test_every_option_names_a_field_of_its_section():
    from dataclasses import fields

    from kfoundry.run_config import SECTIONS

    for name, option in OPTIONS.items():
        assert option.field in {f.name for f in fields(SECTIONS[option.section])}, name


def test_the_defaults_in_force_are_the_sections_own(tmp_path):
    from kfoundry.bench.settings import BenchSettings
    from kfoundry.evaluate import EvalOptions
    from kfoundry.llm.settings import LLMSettings
    from kfoundry.logs import LogSettings
    from kfoundry.optimize.settings import OptimizeSettings

    built = build_run_config(load_settings({}, env={}, cwd=tmp_path))
    assert built.search == OptimizeSettings() and built.llm == LLMSettings() and built.bench == BenchSettings()
    assert built.eval == EvalOptions() and built.log == LogSettings()


def test_a_command_s_parameters_and_the_sources_give_one_run_config(tmp_path):
    """The file may hold any setting (search ones too), the environment reaches every section, and a
    command's parameters count only where given: a flag left off is not given, a path is its text."""
    write(tmp_path, 'islands = 2\nmax_evals = 9\ntrials = 3\nllm_retries = 1\nmethod = "reference"\n'
                    'baselines = ["eager"]\n')
    env = {"KFOUNDRY_TRIALS": "4", "KFOUNDRY_MEMORY_LIMIT": "2.5", "KFOUNDRY_RNG_SEED": "7"}
    values = {"trials": None, "eval_mode": False, "no_cache": True, "record": tmp_path / "rec.jsonl",
              "set_": ["n=8"], "timeout": 30.0, "out": tmp_path / "elsewhere", "islands": None}
    run, settings = load_run_config(values, env=env, cwd=tmp_path)
    assert run.search.islands == 2 and run.search.max_evals == 9 and run.search.seed == 7
    assert run.eval.trials == 4 and run.eval.timeout_s == 30.0 and run.eval.eval_mode is False
    assert run.eval.no_cache is True and run.eval.memory_limit_bytes == 2_500_000_000
    assert run.eval.baselines == ("eager",) and run.eval.set_values == {"n": 8}
    assert run.llm.llm_retries == 1 and run.llm.record == str(tmp_path / "rec.jsonl")
    assert run.bench.method == "reference"
    assert settings.sources["islands"].startswith("config file") and settings.sources["timeout"] == "command line"
    run.validate()


def test_every_option_of_the_commands_is_a_setting_set_included(tmp_path):
    """--set, --wrapper, --ncu, --sanitize and the log's options come from the file and the environment too."""
    write(tmp_path, 'ncu = true\nwrapper = "compute-sanitizer --tool memcheck"\nlog_level = "DEBUG"\n'
                    '[set]\nbatch_size = 2\nshape = [4, 8]\n')
    run, settings = load_run_config({}, env={"KFOUNDRY_HEARTBEAT": "5", "KFOUNDRY_LOG_FILE": "run.log"}, cwd=tmp_path)
    assert run.eval.set_values == {"batch_size": 2, "shape": [4, 8]} and run.eval.ncu is True
    assert run.eval.wrapper == ["compute-sanitizer", "--tool", "memcheck"] and run.eval.sanitize is False
    assert run.log.log_level == "debug" and run.log.heartbeat_s == 5.0 and run.log.log_file == "run.log"
    env = {"KFOUNDRY_SET": "dims=(2, 3),n=4"}  # a comma inside a value stays with it
    assert load_run_config({}, env=env, cwd=tmp_path)[0].eval.set_values == {"dims": (2, 3), "n": 4}
    # the command line's --set items replace the file's table, as any setting's value does
    assert load_run_config({"set_": ["n=8"]}, env={}, cwd=tmp_path)[0].eval.set_values == {"n": 8}
    with pytest.raises(UsageError, match="bad value .* for log_level"):
        load_settings({}, env={"KFOUNDRY_LOG_LEVEL": "loud"}, cwd=tmp_path)
    with pytest.raises(UsageError, match="for set: .*NAME=VALUE"):
        load_settings({"set": ["8"]}, env={}, cwd=tmp_path)


def test_the_settings_line_names_what_the_environment_and_the_file_set(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "tolerance = 0.01\nislands = 2\nbaselines = ['eager', 'compile-max-autotune']\n")
    settings = load_settings({"seed": 3}, env={"KFOUNDRY_TRIALS": "2"})
    assert settings.line(("eval",)) == ("settings: tolerance=0.01 (kfoundry.toml), trials=2 (KFOUNDRY_TRIALS), "
                                        "baselines=eager,compile-max-autotune (kfoundry.toml)")
    assert settings.line(("bench",)) is None  # nothing of the bench's own came from them
    assert settings.line((), ("islands",)) == "settings: islands=2 (kfoundry.toml)"
    everything = {name: source for name, _, source in settings.provenance(hidden=False)}
    assert everything == {"tolerance": "kfoundry.toml", "islands": "kfoundry.toml", "baselines": "kfoundry.toml",
                          "trials": "KFOUNDRY_TRIALS", "seed": "command line"}


def test_a_field_s_or_a_flag_s_spelling_in_the_file_says_the_setting_s_name(tmp_path):
    write(tmp_path, "max_time_s = 60\n")
    with pytest.raises(UsageError, match="max_time_s is max_time"):
        load_settings({}, env={}, cwd=tmp_path)
