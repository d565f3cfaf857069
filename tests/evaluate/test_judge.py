"""The parent's handle on the baseline process: each baseline is reported as soon as it is measured
(or has failed), so a verdict can wait for eager alone. On this CPU machine every baseline fails (no
CUDA to time on), which exercises the same reports end to end."""

from __future__ import annotations

from pathlib import Path

from kfoundry.evaluate.judge import Baselines, baseline_worker

ROOT = Path(__file__).resolve().parents[2]


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
    from kfoundry.evaluate.judge import JudgeGone

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
