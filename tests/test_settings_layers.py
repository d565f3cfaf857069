"""Every command takes its settings in layers: the command line over KFOUNDRY_* over kfoundry.toml over
the defaults. One test per command shows each layer taking effect in a real run on CPU (a tiny problem),
and that the settings the environment and the file set are named on stderr, never in --json's stdout."""

import json
import shlex
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

TESTS_DIR = Path(__file__).resolve().parent
PROBLEMS = TESTS_DIR / "fixtures" / "problems"
CANDIDATES = TESTS_DIR / "fixtures" / "candidates"


def invoke(*args, env: dict[str, str], app: typer.Typer | None = None):
    """The command in this process (its evaluations' workers fork from the suite's servers)."""
    from kfoundry import cli

    width = cli.err.width
    cli.err.width = 300  # one settings line, unwrapped, as a wide terminal shows it
    try:
        result = CliRunner().invoke(app or cli.app, [str(a) for a in args], env={"COLUMNS": "300", **env})
    finally:
        cli.err.width = width
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def one_json(stdout: str) -> dict:
    text = stdout.strip()
    data, end = json.JSONDecoder().raw_decode(text)
    assert not text[end:].strip(), f"more than one JSON value on stdout: {text[end:][:200]!r}"
    return data


def settings_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("settings: ")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working directory of its own: its kfoundry.toml is the file layer."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_eval(here):
    (here / "kfoundry.toml").write_text('device = "cpu"\ntrials = 3\npolicy = "permissive"\nseed = 11\n')
    env = {"KFOUNDRY_TRIALS": "2", "KFOUNDRY_SEED": "5"}  # over the file's 3 and 11
    result = invoke("eval", PROBLEMS / "affine.py", CANDIDATES / "affine_ok.py", "--seed", "7", "--json", env=env)
    assert result.exit_code == 0, result.stdout + result.stderr
    data = one_json(result.stdout)
    assert len(data["correctness"]["seeds"]) == 2  # the environment over the file
    assert data["settings"]["seed"] == 7  # the command line over the environment
    assert data["settings"]["policy"] == "permissive" and data["device"] == "cpu"  # the file
    assert data["settings"]["timeout_s"] == 300.0 and data["correctness"]["tolerance"] == 1e-4  # the defaults
    assert settings_line(result.stderr) == ("settings: device=cpu (kfoundry.toml), policy=permissive (kfoundry.toml), "
                                            "trials=2 (KFOUNDRY_TRIALS)")


def test_diagnose(here):
    (here / "kfoundry.toml").write_text('device = "cpu"\ntrials = 1\ntolerance = 0.001\n[set]\nbatch_size = 2\n')
    env = {"KFOUNDRY_TOLERANCE": "0.0005"}
    result = invoke("diagnose", PROBLEMS / "affine.py", CANDIDATES / "wrong_constant.py", "--set", "dim=50",
                    "--set", "batch_size=3", "--json", env=env)
    assert result.exit_code == 1, result.stdout + result.stderr
    data = one_json(result.stdout)
    values = data["findings"][0]
    assert values["data"]["tolerance"] == {"atol": 0.0005, "rtol": 0.0005}  # the environment over the file
    assert "output (3, 50) float32" in values["title"]  # the command line's --set over the file's; fp32 by default
    line = settings_line(result.stderr)
    assert "tolerance=0.0005 (KFOUNDRY_TOLERANCE)" in line and "trials=1 (kfoundry.toml)" in line
    assert "set=" not in line  # the command line's are on the command line


def test_generate(here):
    script = TESTS_DIR / "fixtures" / "llm" / "reply_from_files.py"
    reply = TESTS_DIR / "fixtures" / "llm" / "replies" / "affine_correct.md"
    spec = "cmd:" + shlex.join([sys.executable, str(script), str(here / "prompts.log"), str(reply)])
    (here / "kfoundry.toml").write_text(f"llm = [{json.dumps(spec)}]\ndevice = \"cpu\"\ntrials = 3\n"
                                        "llm_timeout = 100\n")
    env = {"KFOUNDRY_TRIALS": "2"}
    result = invoke("generate", PROBLEMS / "affine.py", "-o", here / "cand.py", "--seed", "9", "--json", env=env)
    assert result.exit_code == 0, result.stdout + result.stderr
    evaluation = one_json(result.stdout)["evaluation"]
    assert (here / "prompts.log").is_file()  # the file's LLM answered
    assert len(evaluation["correctness"]["seeds"]) == 2 and evaluation["settings"]["seed"] == 9
    assert evaluation["settings"]["policy"] == "strict"  # the default
    line = settings_line(result.stderr)
    assert "trials=2 (KFOUNDRY_TRIALS)" in line and "llm_timeout=100.0 (kfoundry.toml)" in line
    assert "llm=cmd:" in line
    # the environment's LLM over the file's: an unpriced model with a dollar budget is refused before any call
    refused = invoke("generate", PROBLEMS / "affine.py", "--json", env={
        "KFOUNDRY_LLM": "openai:my-model@http://127.0.0.1:9/v1", "KFOUNDRY_BUDGET_DOLLARS": "1"})
    assert refused.exit_code == 2 and "token" in refused.stderr


def test_optimize(here):
    (here / "kfoundry.toml").write_text('device = "cpu"\nislands = 1\nmax_evals = 5\nlibrary = "off"\ntrials = 3\n')
    env = {"KFOUNDRY_MAX_EVALS": "1"}
    run = here / "run"
    result = invoke("optimize", PROBLEMS / "affine.py", "--seed-kernel", CANDIDATES / "affine_ok.py", "--trials", "1",
                    "-o", run, "--json", env=env)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert one_json(result.stdout)["evaluations"] == 1  # the environment's budget over the file's
    from kfoundry.runs import RunStore

    with RunStore.open(run) as store:
        kept = store.settings
    assert kept["search"]["islands"] == 1 and kept["search"]["library"] == "off"  # the file
    assert kept["eval"]["trials"] == 1  # the command line over the file
    assert kept["search"]["migrate_every"] == 3 and kept["eval"]["policy"] == "strict"  # the defaults
    line = settings_line(result.stderr)
    assert "max_evals=1 (KFOUNDRY_MAX_EVALS)" in line and "islands=1 (kfoundry.toml)" in line
    assert "trials" not in line


def test_bench(here):
    from kfoundry.bench.cli import register

    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """test app"""

    register(app)
    suite = here / "suite"
    suite.mkdir()
    (suite / "1_tiny.py").write_text("import torch\nimport torch.nn as nn\n\nn = 64\n\n\nclass Model(nn.Module):\n"
                                     "    def forward(self, x):\n        return x * 2\n\n\n"
                                     "def get_inputs():\n    return [torch.randn(n)]\n\n\n"
                                     "def get_init_inputs():\n    return []\n")
    (here / "kfoundry.toml").write_text('method = "reference"\ndevice = "cpu"\ntrials = 3\n[set]\nn = 4\n')
    env = {"KFOUNDRY_TRIALS": "2"}
    result = invoke("bench", suite, "--set", "n=8", "-o", here / "out", app=app, env=env)
    assert result.exit_code == 0, result.stdout + result.stderr
    data = json.loads((here / "out" / "bench.json").read_text())
    options = data["settings"]["options"]
    assert data["settings"]["method"] == "reference" and options["device"] == "cpu"  # the file
    assert options["trials"] == 2  # the environment over the file
    assert options["set"] == {"n": 8}  # the command line over the file
    assert options["timing_trials"] == 100 and data["problems"][0]["status"] == "ok"  # the defaults
    line = settings_line(result.stderr)
    assert line == ("settings: device=cpu (kfoundry.toml), trials=2 (KFOUNDRY_TRIALS), "
                    "method=reference (kfoundry.toml)")
