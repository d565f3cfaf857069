"""kfoundry.doctor.worker_check: one real sandboxed worker, started as an evaluation starts one."""

from __future__ import annotations

from kfoundry.doctor.worker_check import check_worker, sandbox_line


def test_a_worker_on_this_machine_reads_its_import_path_and_imports_what_a_job_needs():
    sandbox, worker = check_worker("cpu")
    assert sandbox.name == "sandbox" and worker.name == "worker"
    assert worker.ok and "imports kfoundry's worker modules, torch" in worker.detail, worker.text()


def test_a_sandbox_the_kernel_offers_only_in_part_is_a_problem(monkeypatch):
    monkeypatch.setenv("KFOUNDRY_SANDBOX_WITHOUT", "seccomp")  # as a kernel without seccomp would have it
    sandbox, worker = check_worker("cpu")
    assert not sandbox.ok and "seccomp is not available" in sandbox.detail and "Landlock" in sandbox.fix
    assert worker.ok


def test_the_sandbox_line_reads_the_workers_report():
    line = sandbox_line({"filesystem": "landlock ABI 7", "network": "seccomp", "processes": "own session",
                         "missing": []})
    assert line.ok and line.detail == "landlock ABI 7; seccomp; own session"
    assert not sandbox_line({}).ok
