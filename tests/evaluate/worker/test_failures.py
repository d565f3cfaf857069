"""kfoundry.evaluate.worker.failures: turning a candidate's exception into a verdict and a located message."""

import pytest

from kfoundry.evaluate.worker.failures import describe_exception, describe_syntax_error, is_compile_error
from tests.helpers import marker_line

CANDIDATE = "/tmp/kfoundry-test/candidate.py"


def _raise_from_candidate(tmp_path, source: str, call: str = "f()") -> tuple[BaseException, str]:
    """Run `source` from a candidate file in tmp_path; return what it raised and the file's path."""
    path = tmp_path / "candidate.py"
    path.write_text(source)
    namespace = {}
    exec(compile(source, str(path), "exec"), namespace)
    try:
        eval(call, namespace)
    except BaseException as exc:  # noqa: BLE001 - the point is to capture anything
        return exc, str(path)
    raise AssertionError("nothing was raised")


def test_syntax_error_is_located():
    with pytest.raises(SyntaxError) as info:
        compile("import torch\n\ndef forward(x)\n    return x\n", CANDIDATE, "exec")
    result = describe_syntax_error(info.value)
    assert result["status"] == "compile_error"
    assert result["message"].startswith(f"syntax error at {CANDIDATE}:3: expected ':'")
    assert result["error"]["line"] == 3
    assert result["error"]["text"] == "def forward(x)"


def test_runtime_error_names_the_candidate_line(tmp_path):
    exc, path = _raise_from_candidate(tmp_path, "def f():\n    xs = [1, 2]\n    return xs[5]\n")
    result = describe_exception(exc, path, "correctness")
    assert result["status"] == "runtime_error"
    assert result["message"] == f"IndexError while running forward at {path}:3 (return xs[5]): list index out of range"
    assert result["error"]["line"] == 3
    assert result["error"]["phase"] == "correctness"
    assert "Traceback" in result["error"]["traceback"]


def test_import_error_while_loading_is_a_compile_error(tmp_path):
    exc, path = _raise_from_candidate(tmp_path, "def f():\n    import kfoundry_test_no_such_module\n")
    result = describe_exception(exc, path, "load")
    assert result["status"] == "compile_error"
    assert f"ModuleNotFoundError while loading the candidate at {path}:2" in result["message"]
    # the same error while running forward is the candidate's run-time fault
    assert describe_exception(exc, path, "correctness")["status"] == "runtime_error"


def test_an_error_inside_the_triton_compiler_is_a_compile_error():
    class CompilationError(Exception):
        pass

    exc = CompilationError("at 3:4: unsupported tensor shape")
    assert is_compile_error(exc)
    result = describe_exception(exc, CANDIDATE, "correctness")
    assert result["status"] == "compile_error"
    assert result["message"].startswith("kernel compilation failed: at 3:4")


def test_a_wrapped_compile_error_is_found_in_the_chain():
    class CompilationError(Exception):
        pass

    try:
        try:
            raise CompilationError("bad kernel")
        except CompilationError as inner:
            raise RuntimeError("launch failed") from inner
    except RuntimeError as outer:
        assert is_compile_error(outer)
    assert not is_compile_error(ValueError("plain"))


def test_cuda_out_of_memory_is_tagged():
    exc = RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
    assert describe_exception(exc, CANDIDATE, "correctness")["message"].endswith("[out of memory]")
    assert describe_exception(MemoryError(), CANDIDATE, "correctness")["message"].endswith("[out of memory]")


def test_cpu_allocation_failure_is_tagged_out_of_memory():
    exc = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                       "you tried to allocate 21474836480 bytes. Error code 12 (Cannot allocate memory)")
    assert describe_exception(exc, CANDIDATE, "correctness")["message"].endswith("[out of memory]")


def test_illegal_memory_access_points_at_masks():
    exc = RuntimeError("CUDA error: an illegal memory access was encountered")
    message = describe_exception(exc, CANDIDATE, "correctness")["message"]
    assert "check the masks of loads and stores" in message


def test_long_messages_are_cut():
    exc = ValueError("x" * 5000)
    result = describe_exception(exc, CANDIDATE, "init")
    assert "ValueError while constructing ModelNew" in result["message"]
    assert len(result["error"]["message"]) < 2100
    assert result["error"]["message"].endswith(" ...")


def test_the_candidate_frames_are_listed_outermost_first(tmp_path):
    exc, path = _raise_from_candidate(tmp_path, "def g(xs):\n    return xs[5]\n\ndef f():\n    return g([1])\n")
    error = describe_exception(exc, path, "correctness")["error"]
    assert error["function"] == "g"
    assert [(f["function"], f["line"]) for f in error["frames"]] == [("f", 5), ("g", 2)]


def test_an_extension_build_error_is_located_in_the_source_string(fixtures_dir):
    path = fixtures_dir / "diagnose" / "error_cpp_torch.py"
    log = (fixtures_dir / "diagnose" / "logs" / "error_cpp_torch.log").read_text()  # torch's real message
    result = describe_exception(RuntimeError(log), str(path), "load")
    line = marker_line(path, "// BUG")
    assert result["status"] == "compile_error"
    assert result["error"]["nvcc"]["line"] == line and result["error"]["line"] == line
    assert result["message"] == (f"RuntimeError while loading the candidate at {path}:{line} "
                                 "(return y + undefined_thing;  // BUG: undefined_thing is not declared): "
                                 "Error building extension 'kf_diag_error_cpp_torch': "
                                 "c++ error: ‘undefined_thing’ was not declared in this scope")
    assert result["error"]["message"].startswith("Error building extension 'kf_diag_error_cpp_torch': [1/2] c++")


def test_a_verbose_build_log_is_read_from_the_workers_output(fixtures_dir, tmp_path, monkeypatch):
    """load_inline(verbose=True) prints the log to the worker's output, not into the exception."""
    path = fixtures_dir / "diagnose" / "error_cpp_torch.py"
    log = (fixtures_dir / "diagnose" / "logs" / "error_cpp_torch.log").read_text()
    (tmp_path / "stderr.log").write_text("loading...\n" + log.split(": ", 1)[1])
    monkeypatch.chdir(tmp_path)  # the worker's work directory
    result = describe_exception(RuntimeError("Error building extension 'kf_diag_error_cpp_torch'"), str(path), "load")
    assert result["error"]["nvcc"]["line"] == marker_line(path, "// BUG")
