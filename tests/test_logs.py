"""kfoundry.logs: --log-file and --log-level write a full, timestamped log of a run."""

import logging
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kfoundry import logs
from kfoundry.errors import UsageError
from kfoundry.logs import LogSettings, run_log

TESTS_DIR = Path(__file__).resolve().parent
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} "


def test_a_run_log_has_the_header_progress_and_result_at_its_level(tmp_path):
    path = tmp_path / "logs" / "run.log"
    logger = logging.getLogger("kfoundry")
    level, handlers = logger.level, list(logger.handlers)
    with run_log(LogSettings(log_file=str(path), log_level="info", heartbeat_s=7.0), ["setting trials = 2 (x)"]):
        assert logs.heartbeat_s() == 7.0
        logs.progress("reference: computing expected outputs")
        logs.outcome("ok: correct", {"status": "ok"})
        logging.getLogger("kfoundry.llm").warning("retry 1/4")
    assert logs.heartbeat_s() == logs.DEFAULT_HEARTBEAT_S
    assert logger.level == level and logger.handlers == handlers  # as it was
    lines = path.read_text().splitlines()
    assert all(re.match(STAMP, line) for line in lines), lines
    said = [line.split(": ", 1)[1] for line in lines]
    assert said[0].startswith("command: kfoundry") and said[1] == "setting trials = 2 (x)"  # argv: pytest's
    assert said[2:] == ["reference: computing expected outputs", "result: ok: correct", "retry 1/4"]
    logs.progress("after the run")  # nothing is written once the run's log is closed
    assert "after the run" not in path.read_text()


def test_debug_adds_the_record_and_a_second_run_appends(tmp_path):
    path = tmp_path / "run.log"
    for _ in range(2):
        with run_log(LogSettings(log_file=str(path), log_level="debug")):
            logs.outcome("ok: correct", {"status": "ok"})
    text = path.read_text()
    assert text.count('result record: {"status": "ok"}') == 2


def test_secrets_never_reach_the_log_and_an_error_is_written(tmp_path):
    from kfoundry.sandbox.secrets import register

    secret = "sk-log-test-0123456789abcdef"
    register(secret)
    path = tmp_path / "run.log"
    with pytest.raises(RuntimeError):
        with run_log(LogSettings(log_file=str(path))):
            logs.progress(f"calling with {secret}")
            raise RuntimeError("it broke")
    text = path.read_text()
    assert secret not in text and "calling with" in text
    assert "ended by RuntimeError: it broke" in text


def test_an_unwritable_log_file_and_a_bad_level_are_usage_errors(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError, match="--log-file"):
        with run_log(LogSettings(log_file=str(blocker / "run.log"))):
            pass
    with pytest.raises(UsageError, match="log-level"):
        LogSettings(log_level="loud").validate()


def test_eval_writes_its_log_file(tmp_path):
    from kfoundry import cli

    path = tmp_path / "eval.log"
    result = CliRunner().invoke(cli.app, ["eval", str(TESTS_DIR / "fixtures" / "problems" / "affine.py"),
                                          str(TESTS_DIR / "fixtures" / "candidates" / "affine_ok.py"), "--device",
                                          "cpu", "--trials", "1", "--log-file", str(path), "--log-level", "debug",
                                          "--json"], env={"KFOUNDRY_TIMEOUT": "120"})
    assert result.exit_code == 0, result.stdout + result.stderr
    text = path.read_text()
    assert "setting timeout = 120.0 (KFOUNDRY_TIMEOUT)" in text and "setting trials = 1 (command line)" in text
    assert re.search(STAMP + r"INFO +kfoundry\.progress: candidate affine_ok: correctness", text), text
    assert "result: ok: " in text and 'result record: {"status": "ok"' in text
