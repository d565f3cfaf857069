"""kfoundry.diagnose.engine, end to end: real candidate files through the real evaluator (CPU,
Triton's interpreter), each producing one kind of result, and the diagnosis each must yield.

The error-side categories (syntax, import, Triton compile, runtime, timeout, crash, memory) are
covered in test_errors.py; the numeric patterns on tensors in test_numeric.py."""

import json

import pytest

from kfoundry.diagnose import diagnose, render_markdown
from kfoundry.types import Diagnosis
from tests.helpers import marker_line


def _patterns(evaluation) -> list[str]:
    return [p["kind"] for p in (evaluation.error_pattern or {}).get("patterns", [])]


def _categories(diagnosis) -> list[str]:
    return [f.category for f in diagnosis.findings]


@pytest.fixture(scope="module")
def results(affine_evaluator, candidates_dir, fixtures_dir):
    """Each candidate evaluated once (workers cost seconds): name -> Evaluation."""
    names = {
        "missing_tail": candidates_dir / "missing_tail.py",
        "wrong_constant": candidates_dir / "wrong_constant.py",
        "transposed_output": candidates_dir / "transposed_output.py",
        "bad_mask": candidates_dir / "bad_mask.py",
        "affine_ok": candidates_dir / "affine_ok.py",
        "syntax_error": candidates_dir / "syntax_error.py",
        "unseeded_noise": fixtures_dir / "diagnose" / "unseeded_noise.py",
    }
    return {name: affine_evaluator.evaluate(path) for name, path in names.items()}


def test_every_evaluation_carries_a_json_diagnosis(results):
    for name, evaluation in results.items():
        diagnosis = evaluation.diagnosis
        assert isinstance(diagnosis, Diagnosis), name
        assert diagnosis.status == evaluation.status
        assert diagnosis.findings, name
        data = json.loads(json.dumps(evaluation.to_dict()))["diagnosis"]
        assert Diagnosis.from_dict(data) == diagnosis
        severities = [f.severity for f in diagnosis.findings]
        assert severities == sorted(severities, key=["error", "warning", "info"].index), name


def test_missing_tail_is_a_tail_pattern(results):
    evaluation = results["missing_tail"]
    assert evaluation.status == "wrong_output"
    assert "tail" in _patterns(evaluation)
    diagnosis = evaluation.diagnosis
    assert diagnosis.focus == "repair"
    assert diagnosis.findings[0].severity == "error"
    tail = next(f for f in diagnosis.findings if f.category == "error-pattern" and "tail" in f.title.lower())
    assert "cdiv" in tail.direction or "mask" in tail.direction
    # 1000 elements, BLOCK 256, grid 1000 // 256 = 3: elements from 768 on are never written
    assert "768" in " ".join([tail.title, *tail.evidence, json.dumps(tail.data)])


def test_scale_error_names_the_factor(results):
    evaluation = results["wrong_constant"]
    assert "scale" in _patterns(evaluation)
    finding = next(f for f in evaluation.diagnosis.findings if f.category == "error-pattern")
    assert "1.001" in finding.title + " ".join(finding.evidence)


def test_transposed_result_is_a_shape_finding(results):
    evaluation = results["transposed_output"]
    assert evaluation.status == "wrong_output"
    finding = evaluation.diagnosis.findings[0]
    assert finding.category == "shape"
    assert "(250, 4)" in finding.title + " ".join(finding.evidence)


def test_unwritten_last_element_points_at_the_masks(results):
    evaluation = results["bad_mask"]  # mask offs < n - 1: element 999 of 1000 is never stored
    assert evaluation.status == "wrong_output"
    assert {"nonfinite", "tail", "untouched"} <= set(_patterns(evaluation))
    diagnosis = evaluation.diagnosis
    assert diagnosis.focus == "repair"
    patterns = {f.data.get("kind"): f for f in diagnosis.findings if f.category == "error-pattern"}
    tail, untouched = patterns["tail"], patterns["untouched"]
    assert (tail.data["start"], tail.data["count"], tail.data["size"]) == (999, 1, 1000)  # the last element alone
    assert untouched.data["fill"] == "nan" and "never written" in untouched.title  # the evaluator's poison, kept
    # both point at the masks (the grid, triton.cdiv(n, BLOCK), covers every element here)
    assert "mask" in tail.direction and "offs < n" in tail.direction
    assert "mask" in untouched.direction
    text = render_markdown(diagnosis)
    assert "never written" in text and "mask every load and store" in text


def test_results_that_differ_between_identical_runs_are_a_race(results):
    evaluation = results["unseeded_noise"]
    assert evaluation.status == "wrong_output"
    assert evaluation.repeat and evaluation.repeat["count"] > 0
    race = next(f for f in evaluation.diagnosis.findings if f.category == "race")
    assert race.severity == "error"  # the two runs differ by more than the tolerance
    assert evaluation.diagnosis.findings[1] is race  # right after the summary: it explains the rest


def test_a_working_candidate_on_cpu_says_speed_is_not_measured(results):
    evaluation = results["affine_ok"]
    assert evaluation.status == "ok"
    diagnosis = evaluation.diagnosis
    assert diagnosis.bound is None and diagnosis.focus == "none"
    assert all(f.severity == "info" for f in diagnosis.findings)
    assert "CPU" in " ".join(f.title for f in diagnosis.findings)
    assert evaluation.repeat is None  # deterministic: the repeated run matched bit for bit


def test_syntax_error_is_located(results, candidates_dir):
    evaluation = results["syntax_error"]
    finding = evaluation.diagnosis.findings[0]
    assert finding.category == "syntax"
    assert finding.location.line == marker_line(candidates_dir / "syntax_error.py", "SYNTAX ERROR HERE")


def test_diagnose_reads_the_source_itself_and_is_pure(results):
    evaluation = results["missing_tail"]
    again = diagnose(evaluation)
    assert again == evaluation.diagnosis


@pytest.mark.gpu
def test_a_race_between_programs_is_diagnosed_on_gpu(problems_dir, fixtures_dir):
    from kfoundry.evaluate import evaluate

    evaluation = evaluate(problems_dir / "row_sum.py", fixtures_dir / "diagnose" / "race_row_sum.py",
                          device="cuda", trials=2, seed=11, baselines=("eager",), timing_trials=10)
    assert evaluation.status == "wrong_output", evaluation.message
    assert evaluation.repeat is not None, "the same inputs gave the same wrong result twice"
    race = next(f for f in evaluation.diagnosis.findings if f.category == "race")
    assert race.severity == "error"


@pytest.mark.gpu
def test_a_working_kernel_on_gpu_gets_roofline_breakdown_and_metadata(examples_dir):
    from kfoundry.evaluate import evaluate

    evaluation = evaluate(examples_dir / "pointwise_chain" / "problem.py", examples_dir / "pointwise_chain" / "kernel.py",
                          device="cuda", trials=2, seed=5, baselines=("eager",), timing_trials=30, no_cache=True)
    assert evaluation.status == "ok", evaluation.message
    diagnosis = evaluation.diagnosis
    categories = _categories(diagnosis)
    assert "roofline" in categories and "kernels" in categories and "triton-metadata" in categories
    assert diagnosis.bound in ("memory", "launch", "latency", "compute")
    assert diagnosis.focus != "repair"
    kernels = evaluation.profile["kernels"]
    assert kernels and all(k["duration_us"] and k["duration_us"] > 0 for k in kernels)
    triton_meta = evaluation.profile["triton"]
    assert triton_meta and triton_meta[0]["n_regs"] and triton_meta[0]["num_warps"]
    text = render_markdown(diagnosis)
    assert "roofline" in text


@pytest.mark.gpu
def test_dot_operands_under_16_fail_to_compile_on_gpu_with_the_line(examples_dir, fixtures_dir):
    from kfoundry.evaluate import evaluate

    candidate = fixtures_dir / "diagnose" / "error_dot_small.py"
    evaluation = evaluate(examples_dir / "linear_epilogue" / "problem.py", candidate, device="cuda", trials=1,
                          seed=2, baselines=("eager",), set_values={"batch_size": 64, "in_features": 64,
                                                                    "out_features": 64})
    assert evaluation.status == "compile_error", evaluation.message
    finding = evaluation.diagnosis.findings[0]
    assert finding.category == "triton-compile" and finding.data["cause"] == "dot-shape"
    assert finding.location.line == marker_line(candidate, "# BUG")
