"""kfoundry.diagnose.cuda_errors: the first error of an nvcc / g++ build log, mapped to the line of
the candidate that holds it inside the source string given to load_inline.

The logs in tests/fixtures/diagnose/logs/ are real: torch's load_inline (ninja, nvcc 13.0, g++)
building error_nvcc.py and error_cpp_torch.py. The others below put compiler output captured from
nvcc 13.0 (and g++'s format, as in the real logs) inside the frame ninja and torch give it."""

import textwrap

import pytest

from kfoundry.diagnose.cuda_errors import (build_error_details, demangle, load_inline_calls, map_build_error,
                                           parse_build_log, undefined_symbol)
from kfoundry.diagnose.errors import error_findings
from kfoundry.types import Evaluation
from tests.helpers import marker_line

EXT_DIR = "/tmp/kfoundry-worker-a1b2c3/torch-extensions"


def _ninja(name: str, failed: str, output: str) -> str:
    """What torch raises: "Error building extension '<name>': " + ninja -v's output."""
    command = (f"/usr/local/cuda/bin/nvcc  -DTORCH_EXTENSION_NAME={name} -DTORCH_API_INCLUDE_EXTENSION_H "
               f"--compiler-options '-fPIC' -std=c++20 -c {EXT_DIR}/{name}/{failed} -o cuda.cuda.o ")
    return (f"Error building extension '{name}': [1/3] {command}\nFAILED: cuda.cuda.o \n{command}\n{output}"
            f"ninja: build stopped: subcommand failed.\n")


def _candidate(body: str) -> str:
    return textwrap.dedent(body).lstrip("\n")


def _line(source: str, marker: str) -> int:
    return next(n for n, line in enumerate(source.splitlines(), start=1) if marker in line)


# -- real logs ----------------------------------------------------------------------------------------

def test_real_nvcc_log_maps_into_the_cuda_source_string(fixtures_dir):
    path = fixtures_dir / "diagnose" / "error_nvcc.py"
    log = (fixtures_dir / "diagnose" / "logs" / "error_nvcc.log").read_text()
    parsed = parse_build_log(log)
    assert parsed["compiler"] == "nvcc"
    assert parsed["log_line"] == 7  # 3 lines of includes load_inline writes, then line 4 of the string
    assert parsed["message"] == 'identifier "shift_value" is undefined'
    assert parsed["extension"] == "kf_diag_error_nvcc"
    assert parsed["file"].endswith("/kf_diag_error_nvcc/cuda.cu")
    assert parsed["errors"] == 1
    assert parsed["column"] == 38  # the caret under shift_value
    mapped = map_build_error(parsed, path.read_text(), str(path))
    assert mapped["line"] == marker_line(path, "// BUG")
    assert (mapped["source_kind"], mapped["variable"], mapped["string_line"]) == ("cuda_sources", "CUDA_SOURCE", 4)
    assert mapped["function"] == "affine_kernel"
    assert mapped["text"].startswith("if (i < n) y[i] = x[i] * scale + shift_value;")
    assert mapped["file"] == str(path)


def test_real_gpp_log_maps_into_the_cpp_source_string(fixtures_dir):
    path = fixtures_dir / "diagnose" / "error_cpp_torch.py"
    log = (fixtures_dir / "diagnose" / "logs" / "error_cpp_torch.log").read_text()
    details = build_error_details(log, path.read_text(), str(path))
    assert details["compiler"] == "c++"
    assert (details["log_line"], details["column"]) == (5, 16)  # 1 line of include, then line 4 of the string
    assert details["message"] == "‘undefined_thing’ was not declared in this scope"
    assert details["line"] == marker_line(path, "// BUG")
    assert details["source_kind"] == "cpp_sources"
    assert details["function"] == "affine"
    assert details["context"][0].strip().startswith("5 |     return y + undefined_thing;")


def test_real_log_as_a_finding(fixtures_dir):
    path = fixtures_dir / "diagnose" / "error_nvcc.py"
    log = (fixtures_dir / "diagnose" / "logs" / "error_nvcc.log").read_text()
    error = {"type": "RuntimeError", "message": log[:2000] + " ...", "phase": "load",
             "nvcc": build_error_details(log, path.read_text(), str(path))}
    evaluation = Evaluation(status="compile_error", message="RuntimeError while loading the candidate", phase="load",
                            candidate=str(path), error=error)
    (finding,) = error_findings(evaluation, path.read_text())
    assert (finding.category, finding.severity) == ("nvcc", "error")
    assert finding.location.line == marker_line(path, "// BUG")
    assert finding.location.function == "affine_kernel"
    assert "line 4 of CUDA_SOURCE" in finding.title and 'identifier "shift_value" is undefined' in finding.title
    assert "`shift_value` is not declared" in finding.direction
    assert finding.evidence[0].endswith('cuda.cu(7): error: identifier "shift_value" is undefined')


def test_the_log_is_found_in_the_traceback_when_the_worker_gave_no_details(fixtures_dir):
    """An error record without error["nvcc"]: the log is at the end of the traceback text."""
    path = fixtures_dir / "diagnose" / "error_cpp_torch.py"
    log = (fixtures_dir / "diagnose" / "logs" / "error_cpp_torch.log").read_text()
    error = {"type": "RuntimeError", "message": log[:2000], "phase": "load",
             "traceback": "Traceback (most recent call last):\n  ...\nRuntimeError: " + log}
    evaluation = Evaluation(status="compile_error", message="", phase="load", candidate=str(path), error=error)
    (finding,) = error_findings(evaluation, path.read_text())
    assert (finding.category, finding.location.line) == ("nvcc", marker_line(path, "// BUG"))


# -- compiler output in the frame torch gives it ------------------------------------------------------

TEMPLATE = _candidate('''
    from torch.utils.cpp_extension import load_inline

    CUDA = r"""
    template <typename T>
    __device__ T scaled(T v, T s) {
        return v * T::scale_factor + s;  // FAILS
    }

    __global__ void affine_kernel(const float* x, float* y, int n, float scale, float shift) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        int unused = 0;
        if (i < n) y[i] = scaled<float>(x[i], shift);  // INSTANTIATED
    }
    """
    ext = load_inline("kf_diag_tmpl", "void f();", cuda_sources=CUDA)
''')

# nvcc 13.0's own output for the cuda.cu load_inline writes from TEMPLATE's CUDA string
TEMPLATE_NVCC = f"""\
{EXT_DIR}/kf_diag_tmpl/cuda.cu(12): warning #177-D: variable "unused" was declared but never referenced
      int unused = 0;
          ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

{EXT_DIR}/kf_diag_tmpl/cuda.cu(7): error: name followed by "::" must be a class or namespace name
      return v * T::scale_factor + s;
                 ^
          detected during instantiation of "T scaled(T, T) [with T=float]" at line 13

1 error detected in the compilation of "{EXT_DIR}/kf_diag_tmpl/cuda.cu".
"""


def test_warnings_are_skipped_and_the_instantiation_is_mapped():
    details = build_error_details(_ninja("kf_diag_tmpl", "cuda.cu", TEMPLATE_NVCC), TEMPLATE, "cand.py")
    assert details["message"] == 'name followed by "::" must be a class or namespace name'
    assert details["line"] == _line(TEMPLATE, "// FAILS")
    assert details["instantiated_line"] == _line(TEMPLATE, "// INSTANTIATED")
    assert details["function"] == "scaled"


def test_an_error_inside_a_header_is_mapped_to_the_line_that_reached_it():
    source = TEMPLATE.replace("T::scale_factor", "s")
    output = f"""\
/usr/local/lib/python3.12/dist-packages/torch/include/tile.cuh(4): error: name followed by "::" must be a class or namespace name
      return p[i] * T::scale;
                    ^
          detected during instantiation of "T load_tile(const T *, int) [with T=float]" at line 13 of {EXT_DIR}/kf_diag_tmpl/cuda.cu

1 error detected in the compilation of "{EXT_DIR}/kf_diag_tmpl/cuda.cu".
"""
    details = build_error_details(_ninja("kf_diag_tmpl", "cuda.cu", output), source, "cand.py")
    assert details["header"]["file"].endswith("tile.cuh") and details["header"]["line"] == 4
    assert details["log_line"] == 13
    assert details["line"] == _line(source, "// INSTANTIATED")


def test_ptxas_error_points_at_the_kernel_definition():
    source = _candidate('''
        from torch.utils.cpp_extension import load_inline
        CUDA = """
        __global__ void big(float* y) {  // KERNEL
            __shared__ float s[65536];
            y[threadIdx.x] = s[threadIdx.x + 1];
        }
        void launch(float* y) { big<<<1, 256>>>(y); }
        """
        ext = load_inline("kf_diag_shm", "void launch(float* y);", cuda_sources=CUDA)
    ''')
    output = "ptxas error   : Entry function '_Z3bigPf' uses too much shared data (0x40000 bytes, 0xc000 max)\n"
    details = build_error_details(_ninja("kf_diag_shm", "cuda.cu", output), source, "cand.py")
    assert (details["compiler"], details["function"]) == ("ptxas", "big")
    assert details["line"] == _line(source, "// KERNEL")
    evaluation = Evaluation(status="compile_error", message="", phase="load", candidate="cand.py",
                            error={"type": "RuntimeError", "message": "", "nvcc": details})
    assert "shared memory is over the limit" in error_findings(evaluation, source)[0].direction


def test_an_error_in_the_generated_bindings_points_at_functions():
    source = _candidate('''
        from torch.utils.cpp_extension import load_inline
        CPP = "torch::Tensor twice(torch::Tensor x) { return x * 2; }"
        ext = load_inline(name="kf_diag_bind", cpp_sources=CPP,
                          functions=["affine"])  # FUNCTIONS
    ''')
    # main.cpp: 1 include, 1 line of CPP, then PYBIND11_MODULE(...) { and one m.def per function
    output = (f"{EXT_DIR}/kf_diag_bind/main.cpp: In function ‘void pybind11_init_kf_diag_bind(pybind11::module_&)’:\n"
              f"{EXT_DIR}/kf_diag_bind/main.cpp:4:49: error: ‘affine’ was not declared in this scope\n"
              '    4 | m.def("affine", torch::wrap_pybind_function(affine), "affine");\n'
              "      |                                             ^~~~~~\n")
    details = build_error_details(_ninja("kf_diag_bind", "main.cpp", output), source, "cand.py")
    assert details["source_kind"] == "bindings"
    assert details["line"] == _line(source, "# FUNCTIONS")
    evaluation = Evaluation(status="compile_error", message="", phase="load", candidate="cand.py",
                            error={"type": "RuntimeError", "message": "", "nvcc": details})
    assert "functions=" in error_findings(evaluation, source)[0].direction


def test_several_sources_no_implicit_headers_and_strings_built_at_import():
    source = _candidate('''
        from torch.utils.cpp_extension import load_inline
        HEADER = "#include <cstdint>"
        BODY = "\\n".join([
            "int twice(int x) {",
            "    return x * two;",  # FAILS
            "}",
        ])
        other = load_inline(name="kf_other", cpp_sources="int f();")
        ext = load_inline(name="kf_diag_list", cpp_sources=[HEADER, BODY], no_implicit_headers=True)
    ''')
    calls = load_inline_calls(source)
    assert [c["name"] for c in calls] == ["kf_other", "kf_diag_list"]
    assert calls[1]["no_implicit_headers"] and not calls[1]["cpp_sources"][1]["exact"]
    output = (f"{EXT_DIR}/kf_diag_list/main.cpp: In function ‘int twice(int)’:\n"
              f"{EXT_DIR}/kf_diag_list/main.cpp:3:16: error: ‘two’ was not declared in this scope\n"
              "    3 |     return x * two;\n"
              "      |                ^~~\n")
    details = build_error_details(_ninja("kf_diag_list", "main.cpp", output), source, "cand.py")
    assert details["extension"] == "kf_diag_list"
    assert details["line"] == _line(source, "# FAILS")  # found by the text of line 2 of BODY
    assert (details["variable"], details["string_line"]) == ("BODY", 2)


def test_a_string_with_escaped_newlines_is_mapped_by_its_text():
    source = _candidate('''
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="kf_diag_esc", cpp_sources="int f() {\\n    return g();\\n}")  # HERE
    ''')
    output = (f"{EXT_DIR}/kf_diag_esc/main.cpp:3:12: error: ‘g’ was not declared in this scope\n"
              "    3 |     return g();\n")
    details = build_error_details(_ninja("kf_diag_esc", "main.cpp", output), source, "cand.py")
    assert details["line"] == _line(source, "# HERE")


def test_undefined_symbol_points_at_the_declaration():
    source = _candidate('''
        from torch.utils.cpp_extension import load_inline
        CUDA = r"""
        torch::Tensor affine(torch::Tensor x, float scale, float shift) { return x; }
        """
        CPP = "torch::Tensor affine(torch::Tensor x, double scale, double shift);"  # DECLARED
        ext = load_inline(name="kf_diag_sym", cpp_sources=CPP, cuda_sources=CUDA, functions=["affine"])
    ''')
    message = f"{EXT_DIR}/kf_diag_sym/kf_diag_sym.so: undefined symbol: _Z6affineN2at6TensorEdd"
    details = undefined_symbol(message, source, "cand.py")
    assert (details["symbol"], details["function"]) == ("_Z6affineN2at6TensorEdd", "affine")
    assert details["line"] == _line(source, "# DECLARED")
    evaluation = Evaluation(status="compile_error", message="", phase="load", candidate="cand.py",
                            error={"type": "ImportError", "message": message})
    (finding,) = error_findings(evaluation, source)
    assert finding.category == "nvcc" and finding.location.line == _line(source, "# DECLARED")
    assert "`affine` is declared" in finding.direction


def test_toolchain_and_unparsable_logs():
    assert parse_build_log("CUDA_HOME environment variable is not set. Please set it")["compiler"] == "toolchain"
    assert parse_build_log("all good") is None
    assert parse_build_log("") is None


@pytest.mark.parametrize("symbol, name", [("_Z6affineN2at6TensorEdd", "affine"), ("_Z3bigPf", "big"),
                                          ("_ZN2ns3fooEv", "foo"), ("_ZNK3Foo3barEv", "bar"), ("main", None)])
def test_demangle(symbol, name):
    assert demangle(symbol) == name


@pytest.mark.gpu
def test_real_nvcc_error_through_the_evaluator_on_gpu(problems_dir, fixtures_dir):
    import kfoundry

    path = fixtures_dir / "diagnose" / "error_nvcc.py"
    evaluation = kfoundry.evaluate(problems_dir / "affine.py", path, device="cuda", trials=1, timeout_s=600)
    line = marker_line(path, "// BUG")
    assert evaluation.status == "compile_error", evaluation.message
    assert evaluation.error["nvcc"]["compiler"] == "nvcc"
    assert evaluation.error["nvcc"]["line"] == line
    assert evaluation.error["line"] == line
    assert f"{path}:{line}" in evaluation.message and "shift_value" in evaluation.message
    finding = error_findings(evaluation, path.read_text())[0]
    assert (finding.category, finding.location.line) == ("nvcc", line)
