"""`kfoundry doctor` as a user runs it (a subprocess on this CPU machine; its --json and bad usage through typer's
runner in this process, where its worker and tiny evaluation are processes of their own all the same), and its
cheap part, which optimize and bench run as they start (kfoundry.doctor.preflight, stop_or_warn)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kfoundry.doctor import preflight, stop_or_warn
from kfoundry.doctor.check import passed, problem
from kfoundry.errors import EnvironmentFault

KFOUNDRY = Path(sys.executable).with_name("kfoundry")
NAMES = ["versions", "gpus", "jax", "import path", "sandbox", "worker", "eval"]


def doctor(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(KFOUNDRY), "doctor", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def test_doctor_says_what_holds_line_by_line_and_exits_0():
    result = doctor()
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "all ok"
    checks = [line for line in lines[:-1] if not line.startswith(" ")]
    assert [line.split(":")[0].split(None, 1)[1] for line in checks] == NAMES
    assert all(line.startswith("ok ") for line in checks), result.stdout
    text = result.stdout
    assert "versions: torch " in text and "Triton " in text and "Python " in text
    assert "gpus: no GPU: evaluations run on the CPU" in text  # this machine has none
    assert "worker: a sandboxed worker reads all" in text
    assert "eval: the bundled problem and candidate: ok on cpu" in text
    assert "checking: " in result.stderr  # progress on stderr, the lines on stdout


def test_doctor_json_is_one_object_with_every_check():
    from tests.test_cli import in_process

    result = in_process("doctor", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["ok"] is True and [c["name"] for c in record["checks"]] == NAMES
    assert set(record["checks"][0]) == {"name", "ok", "detail", "fix", "fatal"}


@pytest.mark.skipif(not __import__("kfoundry.sandbox.landlock", fromlist=["x"]).abi_version(),
                    reason="the kernel enforces no Landlock: nothing is denied")
def test_a_dependency_a_worker_cannot_read_is_a_problem_with_its_fix_and_exit_1(tmp_path):
    from tests.helpers import linked_unreadable_dependency

    entry = linked_unreadable_dependency(tmp_path)
    result = doctor(env={"PYTHONPATH": str(entry)})
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    worker = next(i for i, line in enumerate(lines) if line.startswith("problem  worker: "))
    assert f"cannot read {entry / 'typing_extensions.py'}" in lines[worker]
    assert lines[worker + 1].strip().startswith(f"fix: make {tmp_path / 'hidden'} readable")
    assert lines[-1].endswith("problem(s)")


def test_doctor_on_a_gpu_that_is_not_there_is_bad_usage():
    from tests.test_cli import in_process

    result = in_process("doctor", "--device", "cuda:7")
    assert result.returncode == 2 and "error:" in result.stderr and "Traceback" not in result.stderr


def test_the_cheap_part_needs_no_worker_and_says_what_may_still_work():
    checks = preflight("cpu")
    assert [c.name for c in checks] == ["versions", "jax", "import path"]  # on the CPU the GPUs are left out
    assert all(c.ok for c in checks), [c.text() for c in checks]
    assert stop_or_warn(checks) == []
    risk = problem("jax", "JAX is installed", "export XLA_PYTHON_CLIENT_PREALLOCATE=false")
    assert stop_or_warn([passed("versions", "torch"), risk]) == [
        "jax: JAX is installed (fix: export XLA_PYTHON_CLIENT_PREALLOCATE=false)"]


def test_a_certain_failure_is_an_environment_fault():
    fatal = problem("import path", "a worker cannot import torch", "install torch", fatal=True)
    with pytest.raises(EnvironmentFault) as caught:
        stop_or_warn([passed("versions", "torch"), fatal])
    assert caught.value.cause == "import path: a worker cannot import torch" and caught.value.fix == "install torch"
