"""kfoundry.config: command line over environment over config file over defaults; keys masked."""

from pathlib import Path

import pytest

from kfoundry.config import OPTIONS, load_settings, mask
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
        assert settings[name] == option.default and settings.sources[name] == "default"


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
