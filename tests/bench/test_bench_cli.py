"""`kfoundry bench` end to end on CPU (Triton's interpreter: verdicts, no timings), through a local
Typer app with the command registered: the reference method, the solutions method, resume, errors."""

import csv
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


def calling_pytorch(kernel: str) -> str:
    """The example's kernel with a redundant torch.clamp after it: right, and PyTorch computes part of it."""
    assert "        return y\n" in kernel
    return kernel.replace("        return y\n", "        return torch.clamp(y, self.min_val, self.max_val)\n")


def test_kernelbench_samples_policy_marks_and_outputs(app, tmp_path):
    """A KernelBench run folder under --policy permissive, piped at 80 columns: every sample of a problem is
    judged and the best reported with pass@k; a pass that called PyTorch compute is marked everywhere;
    eval_results.json and the baseline file are written; the table cuts nothing."""
    suite = copy_examples(tmp_path / "level1", {"1_pointwise_chain": "pointwise_chain",
                                                "2_pointwise_again": "pointwise_chain", "3_layernorm": "layernorm"})
    kernel = (EXAMPLES / "pointwise_chain" / "kernel.py").read_text()
    run = tmp_path / "runs" / "my_run"
    run.mkdir(parents=True)
    (run / "level_1_problem_1_sample_0_kernel.py").write_text("def oops(:\n")
    (run / "level_1_problem_1_sample_1_kernel.py").write_text(kernel)
    (run / "level_1_problem_1_sample_2_kernel.py").write_text(calling_pytorch(kernel))
    (run / "level_1_problem_2_sample_0_kernel.py").write_text(calling_pytorch(kernel))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["bench", str(suite), "--method", "solutions", str(run), "-o", str(out),
                                      "--policy", "permissive", *SMALL], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output

    document = json.loads((out / "bench.json").read_text())
    assert document["level"] == 1
    first, second, third = document["problems"]
    assert [s["status"] for s in first["samples"]] == ["compile_error", "ok", "ok"]
    assert [s["compiled"] for s in first["samples"]] == [False, True, True]
    assert first["best_sample"] == 1 and first["policy_warnings"] == []  # untimed: the first correct one
    assert first["pass_at_k"] == {"pass@1": pytest.approx(2 / 3), "pass@3": 1.0}
    assert "torch-compute" in first["samples"][2]["policy_warnings"]
    assert second["status"] == "ok" and "torch-compute" in second["policy_warnings"]
    assert third["status"] == "no_solution" and third["compiled"] is False
    metrics = document["metrics"]
    assert metrics["compiled"] == 2 and metrics["passed_calling_pytorch"] == 1
    assert set(metrics["eager"]["fast_p"]) == {"0", "0.5", "0.8", "1", "1.2", "1.5", "2"}
    assert metrics["samples"]["pass_at_k"] == {"1": pytest.approx((2 / 3 + 1) / 3), "3": pytest.approx(2 / 3)}
    for sample in (0, 1, 2):
        assert (out / "runs" / "1_pointwise_chain" / f"sample_{sample}" / "run.sqlite").is_file()

    rows = {r["name"]: r for r in csv.DictReader((out / "bench.csv").open())}
    assert rows["2_pointwise_again"]["calls_pytorch"] == "True" and "torch-compute" in rows["2_pointwise_again"][
        "policy_warnings"]
    assert rows["1_pointwise_chain"]["calls_pytorch"] == "False" and rows["3_layernorm"]["compiled"] == "False"
    evals = json.loads((out / "eval_results.json").read_text())
    assert list(evals) == ["1", "2", "3"] and [e["sample_id"] for e in evals["1"]] == [0, 1, 2]
    assert evals["2"][0]["correctness"] and evals["2"][0]["runtime"] == -1.0  # CPU: not timed
    assert json.loads((out / "baseline_time_torch.json").read_text()) == {"level1": {}}
    page = (out / "bench.html").read_text()
    assert "To compare with published numbers, use --policy permissive --tolerance 1e-2" in page
    assert "1 of 1 correct problem(s) passed calling PyTorch compute" not in page  # 2 are correct
    assert "1 of 2 correct problem(s) passed calling PyTorch compute" in page and 'id="samples"' in page

    lines = result.output.splitlines()
    header = next(line for line in lines if line.startswith("#  problem"))
    for column in ("status", "compiled", "samples ok", "vs eager", "vs compile", "compile ms", "calls PyTorch"):
        assert column in header
    table = lines[lines.index(header) + 2: lines.index(header) + 5]
    assert [row.split()[0] for row in table] == ["1", "2", "3"]  # the '#' column filled
    assert "2/3" in table[0] and table[1].rstrip().endswith("yes")
    assert "1 of 2 passed" in result.output and "to compare with published numbers" in result.output
    assert any(len(line) > 80 for line in lines)  # piped: nothing cut to the 80 columns


def test_an_environment_fault_exits_2_with_its_cause_and_fix(app, suite, tmp_path, monkeypatch):
    """The judge cannot import an installed package (a broken copy of sympy shadows it on the workers'
    PYTHONPATH): the first problem is recorded as environment_error and the bench stops, exit code 2."""
    deps = tmp_path / "deps" / "sympy"
    deps.mkdir(parents=True)
    (deps / "__init__.py").write_text("from sympy.kf_missing_half import core  # a broken copy\n")
    monkeypatch.setenv("PYTHONPATH", str(deps.parent))
    out = tmp_path / "out"
    result = invoke(app, "bench", suite, "--method", "reference", *SMALL, "--problems", "1-2", "-o", out)
    assert result.exit_code == 2, result.output
    assert "error: environment fault: the judge process (it computes the expected outputs) failed while " \
           "importing sympy" in " ".join(result.output.split())
    assert "fix:" in result.output and "--resume" in result.output and "Traceback" not in result.output
    record = json.loads((out / "bench.json").read_text())
    assert [p["status"] for p in record["problems"]] == ["environment_error"]
    assert record["pending"] == ["2_row_softmax"]
