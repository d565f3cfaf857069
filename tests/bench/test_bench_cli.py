"""`kfoundry bench` end to end on CPU (Triton's interpreter: verdicts, no timings), through a local
Typer app with the command registered: the reference method, the solutions method, resume, errors."""

import json
import shutil

import pytest
import typer
from typer.testing import CliRunner

from kfoundry.bench.cli import register as register_bench
from kfoundry.runs.report_cli import register as register_report
from tests.bench.helpers import EXAMPLES, NOT_A_PROBLEM, copy_examples

SMALL = ["--device", "cpu", "--trials", "1", "--set", "batch_size=4", "--set", "dim=64"]
CHEATING = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)  # PyTorch does the work: no kernel of its own
'''


@pytest.fixture(scope="module")
def app():
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """test app"""

    register_bench(app)
    register_report(app)
    return app


def invoke(app, *args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    suite = copy_examples(root / "suite", {"1_pointwise_chain": "pointwise_chain", "2_row_softmax": "row_softmax",
                                           "3_layernorm": "layernorm"})
    (suite / "4_notes.py").write_text(NOT_A_PROBLEM)
    return suite


def test_reference_method_and_resume(app, suite, tmp_path):
    out = tmp_path / "out"
    result = invoke(app, "bench", suite, "--method", "reference", "--problems", "1-4", "-o", out, *SMALL)
    assert result.exit_code == 0, result.output
    assert "4_notes.py" in result.output and "missing Model" in result.output  # skipped, with its reason
    assert "n/a (no GPU timing)" in result.output and "100.0% (3 of 3 problems)" in result.output
    # not a terminal: every step of every problem is a plain timestamped line
    assert "s] 1_pointwise_chain: reference: ready in" in result.output
    assert "s] 2_row_softmax: candidate 2_row_softmax_reference: correctness" in result.output
    document = json.loads((out / "bench.json").read_text())
    assert [p["status"] for p in document["problems"]] == ["ok", "ok", "ok"]
    assert document["metrics"]["eager"]["geomean_all"] is None  # not timed: never a made-up 0 or 1
    assert document["labels"]["policy"].startswith("none: guard skipped")
    assert document["labels"]["timing"].startswith("not measured")
    assert document["problems"][0]["set_values"] == {"batch_size": 4, "dim": 64}
    assert document["skipped"][0]["path"].endswith("4_notes.py")
    for name in ("1_pointwise_chain", "2_row_softmax", "3_layernorm"):
        run = out / "runs" / name
        assert (run / "run.sqlite").is_file() and (run / "result.json").is_file() and (run / "report.html").is_file()
    assert (out / "bench.csv").read_text().count("\n") == 4 and (out / "bench.html").is_file()

    again = invoke(app, "bench", suite, "--method", "reference", "--problems", "1-4", "-o", out, *SMALL)
    assert again.exit_code == 2 and "--resume" in again.output
    resumed = invoke(app, "bench", suite, "--method", "reference", "--problems", "1-4", "-o", out, "--resume", *SMALL)
    assert resumed.exit_code == 0 and "3 problem(s) kept from an earlier call" in resumed.output

    report = invoke(app, "report", out / "runs" / "2_row_softmax", "-o", tmp_path / "r.html")
    assert report.exit_code == 0 and "no roofline point" in (tmp_path / "r.html").read_text()


def test_solutions_method(app, suite, tmp_path):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    shutil.copy(EXAMPLES / "pointwise_chain" / "kernel.py", solutions / "1_pointwise_chain.py")
    (solutions / "2_row_softmax.py").write_text(CHEATING)
    out = tmp_path / "out"
    result = invoke(app, "bench", suite, "--method", "solutions", solutions, "--problems", "1-3", "-o", out, *SMALL)
    assert result.exit_code == 0, result.output
    problems = {p["name"]: p for p in json.loads((out / "bench.json").read_text())["problems"]}
    assert problems["1_pointwise_chain"]["status"] == "ok"
    assert problems["1_pointwise_chain"]["candidate"] == str(solutions / "1_pointwise_chain.py")
    assert problems["2_row_softmax"]["status"] == "cheating"  # the guard judges another tool's kernels too
    assert problems["3_layernorm"]["status"] == "no_solution"
    assert problems["3_layernorm"]["message"].startswith("no solution file")
    assert "33.3% (1 of 3 problems)" in result.output


@pytest.mark.parametrize("args, message", [
    (["--method", "reference"], "no problem files"),
    (["--method", "solutions"], "needs the directory of solution files"),
    (["--method", "reference", "--level", "1"], "no level1/"),
])
def test_bad_usage_exits_2_with_a_message(app, tmp_path, args, message):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke(app, "bench", empty, *args, "-o", tmp_path / "out")
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_report_of_a_directory_without_a_run(app, tmp_path):
    result = invoke(app, "report", tmp_path)
    assert result.exit_code == 2 and "no run store" in result.output
