"""kfoundry.diagnose.cheating: a guard verdict becomes findings naming the rule, the evidence, the
line, and what to do instead."""

import pytest

from kfoundry.diagnose.cheating import cheating_findings
from kfoundry.evaluate import EvalOptions, Evaluator
from tests.helpers import marker_line


@pytest.fixture(scope="module")
def guarded_evaluator(problems_dir):
    evaluator = Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", trials=1, seed=3, timeout_s=120))
    yield evaluator
    evaluator.close()


def test_static_cheat_names_rule_line_and_direction(guarded_evaluator, fixtures_dir):
    path = fixtures_dir / "guard" / "cheat_torch_compute.py"
    evaluation = guarded_evaluator.evaluate(path)
    assert evaluation.status == "cheating"
    findings = cheating_findings(evaluation, path.read_text())
    top = findings[0]
    assert top.category == "cheating" and top.severity == "error"
    assert top.title.startswith("[torch-compute]")
    assert top.location.line == marker_line(path, "guard: torch-compute")
    assert "torch.add" in top.location.text
    assert "own Triton/CUDA kernel" in top.direction and "epilogue" in top.direction
    assert top.data == {"rule": "torch-compute", "policy": "strict"}
    # the evaluator attached the same findings to its diagnosis
    assert evaluation.diagnosis.findings[0].title == top.title
    assert evaluation.diagnosis.focus == "repair"


def test_permissive_warnings_become_warning_findings(problems_dir, fixtures_dir):
    path = fixtures_dir / "guard" / "cheat_torch_compute.py"
    options = EvalOptions(device="cpu", trials=1, seed=3, timeout_s=120, policy="permissive")
    with Evaluator(problems_dir / "affine.py", options) as evaluator:
        evaluation = evaluator.evaluate(path)
    assert evaluation.status == "ok", evaluation.message
    warnings = [f for f in evaluation.diagnosis.findings if f.category == "guard-warning"]
    assert warnings and warnings[0].severity == "warning" and "[torch-compute]" in warnings[0].title
