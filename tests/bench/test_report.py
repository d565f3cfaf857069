"""kfoundry.bench.report: a bench's report, what it judges and what it saves."""

import json

from kfoundry.bench.outputs import load_results
from kfoundry.bench.report import BenchReport
from kfoundry.bench.results import ENVIRONMENT_ERROR, ProblemResult
from kfoundry.bench.settings import BenchSettings
from kfoundry.bench.suite import Suite
from kfoundry.evaluate.parent.options import EvalOptions
from kfoundry.run_config import RunConfig


def result(name, status, **figures):
    return ProblemResult(name=name, path=f"{name}.py", number=None, method="reference", fingerprint="f",
                         status=status, **figures)


def test_a_problem_the_machine_failed_is_kept_but_not_judged_and_the_report_saves_it(tmp_path):
    config = RunConfig(eval=EvalOptions(device="cpu"), bench=BenchSettings(method="reference"))
    report = BenchReport(suite=Suite(root=tmp_path, directory=tmp_path, level=None), config=config, out=tmp_path,
                         results=[result("a", "ok", speedup_eager=2.0), result("b", ENVIRONMENT_ERROR)],
                         pending=["c"])
    assert [r.name for r in report.judged()] == ["a"] and not report.complete
    assert report.metrics()["problems"] == 1
    assert report.labels()["policy"] == "guard skipped (reference)"
    report.pending = []
    assert report.complete
    report.save()
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["complete"] and [p["name"] for p in saved["problems"]] == ["a", "b"]
    assert saved["settings"]["method"] == "reference"
    assert sorted(load_results(tmp_path)) == ["a", "b"]
