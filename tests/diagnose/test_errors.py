"""kfoundry.diagnose.errors: a finding for each failing verdict, driven by real candidates evaluated
through the real evaluator on CPU (the session's shared affine evaluator), each asserting the
category, the exact line of the fixture and the key text."""

import os
import subprocess
import sys

import pytest

import kfoundry

from kfoundry.diagnose.errors import error_findings, triton_cause
from kfoundry.evaluate.worker.failures import describe_exception
from kfoundry.types import STATUSES, Evaluation
from tests.helpers import marker_line


@pytest.fixture(scope="module")
def diagnose_eval(affine_evaluator, fixtures_dir):
    """diagnose_eval("error_x.py") -> the Evaluation of tests/fixtures/diagnose/error_x.py, once."""
    results = {}

    def run(name: str):
        if name not in results:
            results[name] = affine_evaluator.evaluate(fixtures_dir / "diagnose" / name)
        return results[name]

    return run


def _findings(evaluation, path=None):
    path = path or evaluation.candidate
    return error_findings(evaluation, open(path).read())


def _main(findings):
    errors = [f for f in findings if f.severity == "error"]
    assert len(errors) == 1, [f.title for f in findings]
    return errors[0]


# -- compile_error ------------------------------------------------------------------------------------

def test_syntax_error(affine_eval, candidates_dir):
    evaluation = affine_eval("syntax_error.py")
    path = candidates_dir / "syntax_error.py"
    finding = _main(_findings(evaluation))
    assert finding.category == "syntax"
    assert finding.location.line == marker_line(path, "SYNTAX ERROR HERE")
    assert finding.location.column == 27
    assert finding.location.text == "def forward(self, x)  # SYNTAX ERROR HERE"
    assert finding.title == f"Python syntax error at line {finding.location.line}: expected ':'"
    assert finding.evidence == ["def forward(self, x)  # SYNTAX ERROR HERE", " " * 22 + "^"]  # under the comment
    assert "add the ':'" in finding.direction


def test_import_error(affine_eval, candidates_dir):
    evaluation = affine_eval("missing_module.py")
    path = candidates_dir / "missing_module.py"
    finding = _main(_findings(evaluation))
    assert finding.category == "import"
    assert finding.location.line == marker_line(path, "IMPORT ERROR HERE")
    assert finding.data["module"] == "kfoundry_test_missing_triton_helpers"
    assert finding.title == "cannot import `kfoundry_test_missing_triton_helpers`"
    assert "torch and Triton only" in finding.direction and "no third-party packages" in finding.direction


@pytest.mark.parametrize("name, marker, message, cause, direction", [
    ("triton_not_pow2.py", "KERNEL ERROR HERE", "arange's range must be a power of 2", "not-pow2",
     "triton.next_power_of_2(n)"),
    ("triton_not_constexpr.py", "KERNEL ERROR HERE", "arange's arguments must be of type tl.constexpr",
     "not-constexpr", "annotate `n: tl.constexpr`"),
])
def test_triton_compile_error(affine_eval, candidates_dir, name, marker, message, cause, direction):
    evaluation = affine_eval(name)
    path = candidates_dir / name
    findings = _findings(evaluation)
    finding = _main(findings)
    line = marker_line(path, marker)
    assert finding.category == "triton-compile"
    assert (finding.location.line, finding.location.function) == (line, "_affine_kernel")
    assert finding.title == f"Triton kernel `_affine_kernel` does not compile at line {line}: {message}"
    assert finding.data["cause"] == cause and finding.data["mode"] == "interpreter"
    assert direction in finding.direction
    assert evaluation.error["triton"]["line"] == line
    launch = marker_line(path, "_affine_kernel[(1,)]")
    assert f"launched at line {launch}" in " ".join(finding.evidence)


def test_triton_compile_error_points_at_unmasked_accesses(affine_eval, candidates_dir):
    path = candidates_dir / "triton_not_constexpr.py"
    support = [f for f in _findings(affine_eval("triton_not_constexpr.py")) if f.severity != "error"]
    line = marker_line(path, "KERNEL ERROR HERE")
    assert [(f.category, f.data["rule"], f.location.line) for f in support] == [
        ("lint", "load-without-mask", line + 1), ("lint", "store-without-mask", line + 2)]


def test_triton_error_in_a_helper(diagnose_eval, fixtures_dir):
    path = fixtures_dir / "diagnose" / "error_helper_pow2.py"
    evaluation = diagnose_eval("error_helper_pow2.py")
    assert evaluation.status == "compile_error"
    finding = _main(_findings(evaluation))
    assert (finding.category, finding.data["cause"]) == ("triton-compile", "not-pow2")
    assert (finding.location.line, finding.location.function) == (marker_line(path, "# BUG"), "_row_offsets")
    call = marker_line(path, "# CALL")
    assert any(e.startswith(f"called from `_affine_rows_kernel` at line {call}") for e in finding.evidence)
    # the message names the essential error, not the interpreter's wrapping of it
    assert evaluation.message.endswith(": ValueError: arange's range must be a power of 2")


def test_triton_type_error_at_store(diagnose_eval, fixtures_dir):
    path = fixtures_dir / "diagnose" / "error_store_pointer.py"
    evaluation = diagnose_eval("error_store_pointer.py")
    line = marker_line(path, "# BUG")
    assert evaluation.status == "compile_error"
    assert f"{path}:{line}" in evaluation.message
    assert evaluation.message.endswith("AssertionError: cannot cast [...] to <['256'], fp32>")
    finding = _main(_findings(evaluation))
    assert (finding.category, finding.location.line, finding.data["cause"]) == ("triton-compile", line, "store-value")
    assert finding.location.column == 5  # tl.store
    assert "not a pointer such as x_ptr + offs" in finding.direction


def test_cpp_build_error_through_load_inline(diagnose_eval, fixtures_dir):
    """A real g++ error from torch's load_inline, mapped from main.cpp to the candidate's line."""
    path = fixtures_dir / "diagnose" / "error_cpp_build.py"
    evaluation = diagnose_eval("error_cpp_build.py")
    line = marker_line(path, "// BUG")
    assert evaluation.status == "compile_error", evaluation.message
    nvcc = evaluation.error["nvcc"]
    assert (nvcc["compiler"], nvcc["line"], nvcc["source_kind"], nvcc["string_line"]) == ("c++", line, "cpp_sources", 6)
    assert nvcc["generated_file"].endswith("/kf_diag_error_cpp_build/main.cpp") and nvcc["log_line"] == 6
    assert evaluation.error["line"] == line
    assert f"{path}:{line}" in evaluation.message
    assert evaluation.message.endswith("c++ error: ‘shift_value’ was not declared in this scope")
    finding = _main(_findings(evaluation))
    assert (finding.category, finding.location.line, finding.location.function) == ("nvcc", line, "affine")
    assert "`shift_value` is not declared" in finding.direction


# -- runtime_error ------------------------------------------------------------------------------------

def test_runtime_error_in_forward(affine_eval, candidates_dir):
    path = candidates_dir / "forward_index_error.py"
    evaluation = affine_eval("forward_index_error.py")
    finding = _main(_findings(evaluation))
    line = marker_line(path, "RUNTIME ERROR HERE")
    assert finding.category == "runtime"
    assert (finding.location.line, finding.location.function) == (line, "forward")
    assert finding.title == f"IndexError in `forward` at line {line}: tuple index out of range"
    assert "get_inputs()" in finding.direction
    assert evaluation.error["frames"][-1]["line"] == line


def test_out_of_memory(problems_dir, candidates_dir):
    """A worker ended by its memory guard (no traceback: the kernel or the watchdog killed it)."""
    evaluation = kfoundry.evaluate(problems_dir / "affine.py", candidates_dir / "memory_hog.py", device="cpu",
                                   trials=1, guard=False, memory_limit_bytes=int(3e9))
    finding = _main(_findings(evaluation))
    assert finding.category == "out-of-memory"
    assert finding.title.startswith("out of host memory in phase compile: ")
    assert "size arithmetic" in finding.direction and finding.data["used_bytes"] >= 2e9


def test_cuda_fault_points_at_unmasked_loads(fixtures_dir, tmp_path):
    """The error record the worker writes for a CUDA fault (no GPU here: the exception is made)."""
    path = fixtures_dir / "diagnose" / "error_oob_segfault.py"
    described = describe_exception(RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel "
                                                "errors might be asynchronously reported"), str(path), "correctness")
    evaluation = Evaluation(status=described["status"], message=described["message"], phase="correctness",
                            candidate=str(path), error=described["error"])
    findings = _findings(evaluation)
    finding = _main(findings)
    assert (finding.category, finding.data["fault"]) == ("cuda-fault", "illegal-address")
    assert "mask every tl.load / tl.store" in finding.direction
    assert [(f.category, f.severity, f.location.line) for f in findings[1:]] == [
        ("lint", "warning", marker_line(path, "# BUG"))]


# -- timeout ------------------------------------------------------------------------------------------

def test_timeout_in_correctness(affine_evaluator, fixtures_dir, monkeypatch):
    path = fixtures_dir / "diagnose" / "error_timeout_loop.py"
    monkeypatch.setattr(affine_evaluator.options, "timeout_s", 4)
    evaluation = affine_evaluator.evaluate(path)
    assert (evaluation.status, evaluation.phase) == ("timeout", "correctness"), evaluation.message
    findings = _findings(evaluation)
    finding = _main(findings)
    assert (finding.category, finding.title) == ("timeout", "timed out after 4 s in phase correctness")
    assert "forward returned once but a later call did not" in finding.direction
    assert [(f.severity, f.location.line) for f in findings[1:]] == [("info", marker_line(path, "# BUG"))]


@pytest.mark.parametrize("phase, text", [("compile", "compilation is too slow"), ("load", "module-level code"),
                                         ("timing", "too slow to time")])
def test_timeout_direction_per_phase(candidates_dir, phase, text):
    path = candidates_dir / "forever.py"
    evaluation = Evaluation(status="timeout", message="the candidate did not finish", phase=phase,
                            candidate=str(path), settings={"timeout_s": 60})
    findings = _findings(evaluation)
    assert text in findings[0].direction
    if phase == "compile":
        assert findings[1].location.line == marker_line(path, "        while True:")


# -- crash --------------------------------------------------------------------------------------------

def test_crash_segfault(affine_eval):
    evaluation = affine_eval("crash_segfault.py")
    finding = _main(_findings(evaluation))
    assert finding.category == "crash"
    assert finding.title == f"the worker process killed by SIGSEGV in phase {evaluation.phase}"
    assert finding.data == {"phase": evaluation.phase, "signal": "SIGSEGV", "returncode": -11}
    assert "returncode -11" in finding.evidence


def test_segfault_of_an_unmasked_load_in_the_interpreter(diagnose_eval, fixtures_dir):
    path = fixtures_dir / "diagnose" / "error_oob_segfault.py"
    evaluation = diagnose_eval("error_oob_segfault.py")
    assert evaluation.status == "crash" and evaluation.error["signal"] == "SIGSEGV", evaluation.message
    findings = _findings(evaluation)
    assert "load or store out of bounds" in _main(findings).direction
    assert [(f.category, f.data.get("rule"), f.location.line) for f in findings[1:]] == [
        ("lint", "load-without-mask", marker_line(path, "# BUG"))]


@pytest.mark.gpu
def test_unmasked_load_on_gpu_is_a_cuda_fault(problems_dir, fixtures_dir):
    import kfoundry

    path = fixtures_dir / "diagnose" / "error_oob_segfault.py"
    evaluation = kfoundry.evaluate(problems_dir / "affine.py", path, device="cuda", trials=1, guard=False)
    assert evaluation.status in ("runtime_error", "crash"), evaluation.message
    findings = _findings(evaluation)
    assert _main(findings).category in ("cuda-fault", "crash")
    assert ("lint", marker_line(path, "# BUG")) in [(f.category, f.location.line) for f in findings if f.location]


SEGFAULT = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("kf_crash", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.ModelNew(2.0, 0.5)(torch.randn(4, 250))
"""


def test_crash_located_from_faulthandler_output(fixtures_dir):
    """With faulthandler on, the stderr tail names the candidate's frame: the kernel's line."""
    path = fixtures_dir / "diagnose" / "error_oob_segfault.py"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", SEGFAULT, str(path)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == -11, done.stderr[-2000:]
    evaluation = Evaluation(status="crash", message="", phase="compile", candidate=str(path),
                            error={"returncode": -11, "signal": "SIGSEGV", "phase": "compile",
                                   "stderr_tail": done.stderr[-4000:]})
    finding = _main(_findings(evaluation))
    assert (finding.location.line, finding.location.function) == (marker_line(path, "# BUG"), "_affine_kernel")
    assert finding.evidence[0] == "Fatal Python error: Segmentation fault"


def test_exit_code_crash(candidates_dir):
    evaluation = Evaluation(status="crash", message="", phase="correctness",
                            candidate=str(candidates_dir / "crash_exit.py"),
                            error={"returncode": 3, "signal": None, "phase": "correctness", "stderr_tail": ""})
    finding = _main(_findings(evaluation))
    assert finding.title == "the worker process exited with code 3 in phase correctness"
    assert "never end the process" in finding.direction


# -- the rest -----------------------------------------------------------------------------------------

def test_other_statuses_give_nothing(candidates_dir):
    for status in set(STATUSES) - {"compile_error", "runtime_error", "timeout", "crash"}:
        assert error_findings(Evaluation(status=status, message=""), None) == []


def test_cpu_evaluation_of_a_cuda_candidate_and_missing_modelnew():
    needs_gpu = Evaluation(status="runtime_error", message="CUDA candidates need a GPU: ...", phase="load",
                           error={"type": "NeedsGPU", "phase": "load"})
    assert [f.category for f in error_findings(needs_gpu, None)] == ["device"]
    missing = Evaluation(status="compile_error", message="the candidate defines no ModelNew", phase="load",
                         error={"type": "MissingModelNew", "phase": "load"})
    assert "class ModelNew(nn.Module)" in error_findings(missing, None)[0].direction


def test_missing_import_of_triton_language():
    evaluation = Evaluation(status="compile_error", message="", phase="load", candidate="c.py",
                            error={"type": "NameError", "message": "name 'tl' is not defined", "line": 5})
    finding = _main(error_findings(evaluation, "import triton\n\n\n@triton.jit\ndef k(BLOCK: tl.constexpr):\n"))
    assert (finding.category, finding.location.line) == ("import", 5)
    assert finding.direction == "add `import triton.language as tl` at the top of the file"


@pytest.mark.parametrize("message, cause", [
    ("Shape element 0 must be a power of 2", "not-pow2"),
    ("Shape element 1 must have type `constexpr[int]`, got `constexpr[<class 'triton.language.core.tensor'>]",
     "not-constexpr"),
    ("numel (2097152) exceeds triton maximum tensor numel (1048576)", "block-too-large"),
    ("First input shape (['16', '32']) and second input shape ['16', '32'] are not compatible for matmul",
     "dot-operands"),
    ("Cannot broadcast, rank mismatch: ['128'], ['16', '16']", "shape-mismatch"),
    ("invalid operands of type pointer<fp32> and triton.language.float32", "dtype-mismatch"),
    ("out of resource: shared memory, Required: 262144, Hardware limit: 232448.", "out-of-resources"),
    ("Mask argument cannot be block type if pointer argument is not a block", "load-arguments"),
    ("something new", "other"),
])
def test_triton_causes(message, cause):
    assert triton_cause(message)[0] == cause
