"""The parent's handle on the baseline process: each baseline is reported as soon as it is measured
(or has failed), so a verdict can wait for eager alone. On this CPU machine every baseline fails (no
CUDA to time on), which exercises the same reports end to end."""

from __future__ import annotations

from pathlib import Path

from kfoundry.evaluate.parent.judge import Baselines, baseline_worker

ROOT = Path(__file__).resolve().parents[3]


def _job(tmp_path: Path) -> dict:
    problem = ROOT / "examples" / "pointwise_chain" / "problem.py"
    return {"kind": "baselines", "key": "test", "problem_path": str(problem), "problem_text": problem.read_text(),
            "overrides": {}, "device": "cpu", "precision": "fp32", "eval_mode": False, "init_seed": 0,
            "trial_seeds": [1], "cache_dir": str(tmp_path),
            "timing": {"trials": 10, "budget_s": 1.0, "baselines": ["eager", "compile"], "no_cache": True}}


def test_each_baseline_is_reported_as_it_is_done(tmp_path: Path) -> None:
    phases = []
    baselines = Baselines("cpu", _job(tmp_path), 120.0, None, {}, phases.append)
    try:
        early = baselines.available(["eager"])
        assert "eager" in early["errors"] or "eager" in early["stats"]
        assert set(early.get("pending", [])) <= {"compile"}
        record = baselines.result()
    finally:
        baselines.close()
    assert baselines.done and set(record["errors"]) == {"eager", "compile"}
    assert baselines.available(["eager", "compile"]) == record  # done: the whole record, nothing pending
    assert "reference: baselines (eager)" in phases and "reference: baselines (compile)" in phases


def test_a_worker_started_early_runs_the_baselines_eager_first(tmp_path: Path) -> None:
    """The evaluator starts the baseline process beside the judge; its job comes later, and eager (which
    the first verdicts wait for) is measured before the torch.compile ones whatever their order."""
    job = _job(tmp_path)
    job["timing"]["baselines"] = ["compile", "eager"]
    early = baseline_worker("cpu", None, {})
    assert early.wait_ready(120)  # its imports are done before it has a job
    phases = []
    baselines = Baselines("cpu", job, 120.0, None, {}, phases.append, worker=early)
    try:
        record = baselines.result()
    finally:
        baselines.close()
    assert set(record["errors"]) == {"eager", "compile"}
    assert phases.index("reference: baselines (eager)") < phases.index("reference: baselines (compile)")


def test_a_baseline_process_that_fails_still_releases_waiters(tmp_path: Path) -> None:
    job = _job(tmp_path)
    job["problem_text"] = "raise SystemExit('not a problem')\n"
    baselines = Baselines("cpu", job, 120.0, None, {}, lambda message: None)
    try:
        record = baselines.available(["eager"])
    finally:
        baselines.close()
    assert record["stats"] == {} and "baselines" in record["errors"] and "pending" not in record


def test_orders_from_many_threads_each_get_their_own_answer(tmp_path: Path, problems_dir: Path) -> None:
    """The judge is asked from every candidate's thread at once: each order's answer reaches the thread
    that asked, and once the judge is gone every asker hears so instead of waiting."""
    from concurrent.futures import ThreadPoolExecutor

    import pytest

    from kfoundry.evaluate import EvalOptions, Evaluator
    from kfoundry.evaluate.parent.judge import JudgeGone

    with Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", trials=2, timeout_s=120)) as evaluator:
        names = evaluator.prepare().names * 4
        for name in set(names):
            (tmp_path / name).mkdir()

        def ask(name: str) -> dict:
            return evaluator.judge.ask("inputs", set=name, folder=str(tmp_path / name), mode="file")

        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(ask, names))
        assert [a.get("file") for a in answers] == [f"inputs_{name}.pt" for name in names]
        assert all((tmp_path / name / f"inputs_{name}.pt").is_file() for name in names)
        evaluator.judge.worker.kill()
        with pytest.raises(JudgeGone):
            ask("0")


# -- the environment's faults ------------------------------------------------------------------------

def _broken_copy(folder: Path, package: str) -> Path:
    """A copy of `package` on a PYTHONPATH folder that shadows the installed one, half of it missing."""
    (folder / package).mkdir(parents=True)
    (folder / package / "__init__.py").write_text(f"from {package}.kf_missing_half import core  # a broken copy\n")
    return folder


def test_a_judge_that_cannot_import_an_installed_package_is_an_environment_fault(tmp_path, monkeypatch,
                                                                                  problems_dir):
    """sympy, shadowed on the workers' PYTHONPATH by a broken copy: torch imports it while the reference runs
    (the failing frame is sympy's, not the problem's), so the fault is the environment's, not the problem's."""
    import pytest

    from kfoundry.errors import EnvironmentFault
    from kfoundry.evaluate import EvalOptions, Evaluator

    monkeypatch.setenv("PYTHONPATH", str(_broken_copy(tmp_path / "deps", "sympy")))
    with Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", trials=1, timeout_s=120)) as evaluator:
        with pytest.raises(EnvironmentFault) as caught:
            evaluator.prepare()
    fault = caught.value
    assert fault.cause.startswith("the judge process (it computes the expected outputs) failed while importing "
                                  f"sympy ({tmp_path / 'deps' / 'sympy' / '__init__.py'})")
    assert "No module named 'sympy.kf_missing_half'" in fault.cause
    assert f"sympy in {tmp_path / 'deps'} is broken" in fault.fix and "off PYTHONPATH" in fault.fix


def test_a_baseline_process_that_dies_before_it_is_ready_is_an_environment_fault(tmp_path: Path) -> None:
    """torch itself broken on the baseline process's import path: it dies importing it, before any of the
    problem's code ran; a verdict that waits for its figures gets the fault, a candidate's request does not."""
    import os

    import pytest

    import kfoundry
    from kfoundry.errors import EnvironmentFault

    shadow = _broken_copy(tmp_path / "shadow", "torch")
    root = str(Path(kfoundry.__file__).resolve().parent.parent)
    worker = baseline_worker("cpu", None, {"PYTHONPATH": f"{shadow}{os.pathsep}{root}"})
    baselines = Baselines("cpu", _job(tmp_path), 120.0, None, {}, lambda message: None, worker=worker)
    try:
        with pytest.raises(EnvironmentFault) as caught:
            baselines.result()
        with pytest.raises(EnvironmentFault):
            baselines.available(["eager"])
        assert "baselines" in baselines.so_far()["errors"]  # a candidate's request for eager's median: no raise
    finally:
        baselines.close()
    fault = caught.value
    assert fault.cause.startswith("the baseline process (it times eager and torch.compile) failed while importing "
                                  "torch")
    assert "No module named 'torch.kf_missing_half'" in fault.cause


def _gpu(monkeypatch, *processes):
    from kfoundry import gpu_usage
    from kfoundry.gpu_usage import GpuMemory, GpuUsage

    usage = GpuUsage([GpuMemory(0, "NVIDIA H200", "GPU-0", 140 << 30, 1 << 30, tuple(processes))], "nvml")
    monkeypatch.setattr(gpu_usage, "gpu_usage", lambda: usage)


REFERENCE_OOM = {"problem_error": "the problem's Model raised OutOfMemoryError: CUDA out of memory. Tried to "
                                  "allocate 40.00 GiB. GPU 0 has a total capacity of 139.81 GiB",
                 "traceback": ""}


def test_a_reference_out_of_memory_names_who_holds_the_gpu(monkeypatch) -> None:
    """Another process holds most of the GPU: an environment fault naming it and how much it holds."""
    import os

    from kfoundry.errors import EnvironmentFault
    from kfoundry.evaluate.parent.judge import environment_fault
    from kfoundry.gpu_usage import GpuProcess

    _gpu(monkeypatch, GpuProcess(os.getpid(), 2 << 30, "kfoundry judge"), GpuProcess(1, 120 << 30, "python train.py"))
    fault = environment_fault(REFERENCE_OOM, "cuda:0", "/p/problem.py", "the judge process", "the reference")
    assert isinstance(fault, EnvironmentFault)
    assert fault.cause == ("the reference ran out of GPU memory (it asked for 40.00 GiB) while other processes hold "
                           "120.00 GiB of it: GPU 0: pid 1 (python train.py) holds 120.00 GiB")
    assert "stop those processes" in fault.fix


def test_a_reference_out_of_memory_on_a_gpu_of_its_own_is_the_problems_with_the_figures(monkeypatch) -> None:
    import os

    from kfoundry.evaluate.parent.judge import environment_fault
    from kfoundry.gpu_usage import GpuProcess

    _gpu(monkeypatch, GpuProcess(os.getpid(), 138 << 30, "kfoundry judge"))
    holders = environment_fault(REFERENCE_OOM, "cuda:0", "/p/problem.py", "the judge process", "the reference")
    assert holders == (f"GPU 0 (NVIDIA H200): 1.0 of 140.0 GiB free; pid {os.getpid()} (kfoundry judge) holds "
                       "138.00 GiB (kfoundry)")
