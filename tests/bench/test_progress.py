"""A bench's progress: bars for problems and evaluations on a terminal, timestamped lines and a
heartbeat otherwise, and a --set that a problem lacks said before that problem runs."""

import io
import time

from rich.console import Console

from kfoundry.bench.progress import BenchProgress, evaluations_per_problem
from kfoundry.bench.runner import run_bench
from kfoundry.bench.settings import BenchSettings
from kfoundry.bench.suite import discover
from kfoundry.evaluate import EvalOptions
from kfoundry.optimize.settings import OptimizeSettings
from kfoundry.run_config import RunConfig
from tests.bench.helpers import TINY, write_suite

LINES = ["  [1/2] 1_a: reference", "  1_a: candidate 1_a_reference: correctness", "  1_a: candidate 1_a_reference: ok",
         "[1/2] 1_a: ok (0.5 s)", "[2/2] 2_b: kept from an earlier call (ok)"]


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=160, force_terminal=terminal, color_system=None), out


def test_on_a_terminal_bars_count_problems_and_evaluations():
    console, out = _console(terminal=True)
    with BenchProgress(console, problems=2, per_problem=1) as display:
        for line in LINES:
            display(line)
            if line.startswith("["):
                display.finished(line.split()[1].rstrip(":"))
            else:
                time.sleep(0.15)  # a refresh: the step shows beneath the bars
    text = out.getvalue()
    assert "problems" in text and "2/2" in text
    assert "evaluations" in text and "1/1" in text  # the kept problem took none: the total shrank
    assert "[1/2] 1_a: ok (0.5 s)" in text and "now: 1_a: candidate 1_a_reference: correctness" in text
    assert display.evaluations == 1 and display.done == 2 and display.total == 1


def test_without_a_terminal_every_line_is_timestamped_and_the_heartbeat_has_the_counts(monkeypatch):
    monkeypatch.setattr("kfoundry.logs._heartbeat_s", 0.2)
    console, out = _console(terminal=False)
    with BenchProgress(console, problems=2, per_problem=None) as display:
        for line in LINES[:3]:
            display(line)
        time.sleep(0.45)
    said = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert said[:3] == [line.strip() for line in LINES[:3]]
    assert "still working: problems 0 of 2 done; evaluations 1; now: 1_a: candidate 1_a_reference: ok" in said


def test_the_evaluations_a_problem_may_take():
    config = RunConfig(search=OptimizeSettings(), bench=BenchSettings(method="optimize"))
    assert evaluations_per_problem(config) == 32  # optimize's default budget
    config.search.max_evals = 5
    assert evaluations_per_problem(config) == 5
    config.search.max_evals, config.bench.time_per_problem = None, 60.0
    assert evaluations_per_problem(config) is None  # only the time bounds it
    assert evaluations_per_problem(RunConfig(bench=BenchSettings(method="reference"))) == 1


def test_a_set_name_a_problem_lacks_is_said_before_it_runs_without_it(tmp_path):
    suite = write_suite(tmp_path / "suite", ["1_with_n.py"])
    (suite / "2_without_n.py").write_text(TINY.replace("n = 8", "m = 8").replace("randn(n)", "randn(m)"))
    config = RunConfig(eval=EvalOptions(device="cpu", trials=1, set_values={"n": 4}),
                       bench=BenchSettings(method="reference"))
    said, finished = [], []
    report = run_bench(discover(suite), config, tmp_path / "out", progress=said.append, finished=finished.append,
                       write_html=False)
    note = "[2/2] 2_without_n: --set n not applied: the problem has no module-level constant 'n'; it runs without it"
    assert note in said and said.index(note) < said.index("  [2/2] 2_without_n: reference")
    assert not any("1_with_n: --set" in line for line in said)
    results = {r.name: r for r in report.results}
    assert results["1_with_n"].set_values == {"n": 4} and results["2_without_n"].set_values == {}
    assert all(r.status == "ok" for r in report.results) and finished == ["1_with_n", "2_without_n"]
