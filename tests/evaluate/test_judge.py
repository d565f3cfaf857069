"""The parent's handle on the baseline process: each baseline is reported as soon as it is measured
(or has failed), so a verdict can wait for eager alone. On this CPU machine every baseline fails (no
CUDA to time on), which exercises the same reports end to end."""

from __future__ import annotations

from pathlib import Path

from kfoundry.evaluate.judge import Baselines

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


def test_a_baseline_process_that_fails_still_releases_waiters(tmp_path: Path) -> None:
    job = _job(tmp_path)
    job["problem_text"] = "raise SystemExit('not a problem')\n"
    baselines = Baselines("cpu", job, 120.0, None, {}, lambda message: None)
    try:
        record = baselines.available(["eager"])
    finally:
        baselines.close()
    assert record["stats"] == {} and "baselines" in record["errors"] and "pending" not in record
