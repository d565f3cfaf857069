"""kfoundry.diagnose.triton_errors: a Triton kernel error mapped to the candidate file's line.

Both shapes are real here: the interpreter's (TRITON_INTERPRET=1, this process) and the compiler's
(a GPU's CompilationError): Triton's front end (AST -> TTIR) runs without a GPU, so a subprocess
without the interpreter compiles the fixture kernels for an sm_90 target and fails where a GPU
build fails."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from kfoundry.diagnose.errors import error_findings
from kfoundry.diagnose.triton_errors import essential_message, triton_error_details
from kfoundry.types import Evaluation
from tests.helpers import marker_line

AFFINE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "scale": "fp32", "shift": "fp32"}

COMPILE = r"""
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kfoundry.diagnose.triton_errors import exception_chain, triton_error_details
from kfoundry.evaluate.worker.failures import describe_exception

out = []
for case in json.loads(sys.argv[1]):
    spec = importlib.util.spec_from_file_location(case["module"], case["path"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = getattr(module, case["kernel"])
    try:
        triton.compile(ASTSource(kernel, case["signature"], case["constants"]), target=GPUTarget("cuda", 90, 32))
        out.append(None)
        continue
    except Exception as exc:
        described = describe_exception(exc, case["path"], "compile")
        for link in exception_chain(exc):  # without frames: the def is found by name in the file
            link.__traceback__ = None
        out.append({"described": described, "without_frames": triton_error_details(exc, case["path"])})
print(json.dumps(out))
"""


def _cases(candidates_dir, fixtures_dir):
    diagnose = fixtures_dir / "diagnose"
    return {
        "not_constexpr": (candidates_dir / "triton_not_constexpr.py", "_affine_kernel", AFFINE, {}),
        "not_pow2": (candidates_dir / "triton_not_pow2.py", "_affine_kernel", {**AFFINE, "BLOCK": "constexpr"},
                     {"BLOCK": 1000}),
        "helper": (diagnose / "error_helper_pow2.py", "_affine_rows_kernel",
                   {"x_ptr": "*fp32", "y_ptr": "*fp32", "row_len": "i32", "scale": "fp32", "shift": "fp32",
                    "BLOCK": "constexpr"}, {"BLOCK": 250}),
        "store_pointer": (diagnose / "error_store_pointer.py", "_affine_kernel", {**AFFINE, "BLOCK": "constexpr"},
                          {"BLOCK": 256}),
        "dot_small": (diagnose / "error_dot_small.py", "_linear_silu_scale_kernel",
                      {"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32", "M": "i32",
                       "N": "i32", "K": "i32", "scale": "fp32", "BM": "constexpr", "BN": "constexpr",
                       "BK": "constexpr"}, {"BM": 16, "BN": 16, "BK": 8}),
    }


@pytest.fixture(scope="module")
def compiled(candidates_dir, fixtures_dir, tmp_path_factory):
    """name -> (path, what the compiler path gives), from one subprocess that compiles them all."""
    cases = _cases(candidates_dir, fixtures_dir)
    payload = [{"module": f"kf_compile_{name}", "path": str(path), "kernel": kernel, "signature": signature,
                "constants": constants} for name, (path, kernel, signature, constants) in cases.items()]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton-cache"))
    done = subprocess.run([sys.executable, "-c", COMPILE, json.dumps(payload)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: (cases[name][0], result) for name, result in zip(cases, results)}


@pytest.mark.parametrize("name, marker, message, cause", [
    ("not_constexpr", "KERNEL ERROR HERE", "arange's arguments must be of type tl.constexpr", "not-constexpr"),
    ("not_pow2", "KERNEL ERROR HERE", "arange's range must be a power of 2", "not-pow2"),
    ("store_pointer", "# BUG", "cannot cast pointer<fp32>[constexpr[256]] to <['256'], fp32>", "store-value"),
    ("dot_small", "# BUG", "Input shapes should have M >= 1, N >= 1 and K >= 16", "dot-shape"),
])
def test_compilation_error_is_mapped_to_the_file_line(compiled, name, marker, message, cause):
    path, result = compiled[name]
    line = marker_line(path, marker)
    described = result["described"]
    triton = described["error"]["triton"]
    assert triton["mode"] == "compiler"
    assert triton["type"] == "CompilationError"
    assert (triton["line"], triton["file"], triton["message"]) == (line, str(path), message)
    assert triton["text"] == path.read_text().splitlines()[line - 1].strip()
    assert result["without_frames"]["line"] == line  # the same line found from the source alone
    # the error record and the message point at the kernel's line, not the relative "at 2:11"
    assert described["status"] == "compile_error"
    assert described["error"]["line"] == line
    assert f"{path}:{line}" in described["message"] and message in described["message"]
    evaluation = Evaluation(status="compile_error", message=described["message"], phase="compile",
                            candidate=str(path), error=described["error"])
    finding = error_findings(evaluation, path.read_text())[0]
    assert (finding.category, finding.severity, finding.location.line) == ("triton-compile", "error", line)
    assert finding.data["cause"] == cause


def test_column_is_the_failing_expression(compiled):
    path, result = compiled["not_constexpr"]
    line = marker_line(path, "KERNEL ERROR HERE")
    text = path.read_text().splitlines()[line - 1]
    assert result["described"]["error"]["triton"]["column"] == text.index("tl.arange") + 1


def test_error_in_a_helper_names_the_helper_and_the_call(compiled):
    path, result = compiled["helper"]
    triton = result["described"]["error"]["triton"]
    assert (triton["kernel"], triton["line"]) == ("_row_offsets", marker_line(path, "# BUG"))
    assert triton["message"] == "arange's range must be a power of 2"
    assert [(c["kernel"], c["line"]) for c in triton["calls"]] == [("_affine_rows_kernel", marker_line(path, "# CALL"))]
    assert result["without_frames"]["calls"][0]["line"] == marker_line(path, "# CALL")


def _raise_in_interpreter(path):
    spec = importlib.util.spec_from_file_location(f"kf_interp_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(Exception) as info:
        module.ModelNew(2.0, 0.5)(torch.randn(4, 250))
    return info.value


def test_interpreter_error_is_located_with_its_launch(fixtures_dir):
    path = fixtures_dir / "diagnose" / "error_store_pointer.py"
    details = triton_error_details(_raise_in_interpreter(path), str(path))
    assert details["mode"] == "interpreter"
    assert (details["kernel"], details["line"]) == ("_affine_kernel", marker_line(path, "# BUG"))
    assert details["exception"] == "AssertionError"
    assert details["message"] == "cannot cast [...] to <['256'], fp32>"  # the pointer values are cut out
    assert details["launch"]["line"] == marker_line(path, "_affine_kernel[(")
    assert details["calls"] == []


def test_interpreter_error_in_a_helper(fixtures_dir):
    path = fixtures_dir / "diagnose" / "error_helper_pow2.py"
    details = triton_error_details(_raise_in_interpreter(path), str(path))
    assert (details["kernel"], details["line"]) == ("_row_offsets", marker_line(path, "# BUG"))
    assert details["message"] == "arange's range must be a power of 2"
    assert details["exception"] == "ValueError"
    call = marker_line(path, "# CALL")
    assert [(c["kernel"], c["line"]) for c in details["calls"]] == [("_affine_rows_kernel", call)]
    assert details["launch"]["line"] == marker_line(path, "# LAUNCH")


def test_other_errors_are_not_triton_errors(tmp_path):
    assert triton_error_details(ValueError("plain"), str(tmp_path / "candidate.py")) is None


def test_essential_message():
    text = "arange's range must be a power of 2"
    assert essential_message(f'ValueError("{text}")') == text
    assert essential_message("InterpreterError('ValueError(\"bad\")')") == "bad"
    numbers = " ".join(str(i) for i in range(1, 27))
    assert essential_message(f"cannot cast [{numbers}] to x") == "cannot cast [...] to x"
    assert essential_message("plain text") == "plain text"
