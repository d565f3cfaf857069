"""kfoundry.evaluate.parent.environment_faults: which failures are the environment's and which the code's under test.

The tracebacks are real: each comes from a Python process that ran the import in question (a broken
package, one that is not installed, one this Python finds and the process did not); only the Landlock
denial and an extension's undefined symbol are written out as those processes print them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kfoundry.evaluate.parent import environment_faults as faults
from kfoundry.evaluate.parent.process import WorkerOutcome
from kfoundry.gpu_usage import GpuMemory, GpuProcess, GpuUsage

GIB = 1 << 30


def _traceback(script: Path, source: str, path: list[Path] = (), flags: tuple[str, ...] = ()) -> str:
    """What `python script` prints when it fails (the script holds `source`), with `path` as PYTHONPATH."""
    script.write_text(source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))}
    done = subprocess.run([sys.executable, *flags, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode != 0, done.stdout
    return done.stderr


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder of installed packages on this process's import path (as a PYTHONPATH entry would be)."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def test_a_traceback_is_read_into_its_chain_of_exceptions(tmp_path):
    text = _traceback(tmp_path / "own.py", "try:\n    {}['x']\nexcept KeyError:\n    raise ValueError('bad value')\n")
    blocks = faults.parse_traceback(text)
    assert [(b.exception, b.message) for b in blocks] == [("KeyError", "'x'"), ("ValueError", "bad value")]
    assert blocks[-1].frames[-1].file == str(tmp_path / "own.py") and blocks[-1].frames[-1].line == 4
    assert faults.last_error_line(text) == "ValueError: bad value"


def test_the_codes_own_import_of_a_module_nobody_has_is_its_own_fault(tmp_path):
    text = _traceback(tmp_path / "own.py", "import kf_test_not_installed_anywhere\n")
    assert faults.import_failure(text, [str(tmp_path / "own.py")]) is None


def test_an_import_of_a_module_this_python_has_but_the_process_cannot_see_is_the_environments(tmp_path, site):
    (site / "kf_test_visible_here.py").write_text("VALUE = 1\n")
    text = _traceback(tmp_path / "own.py", "import kf_test_visible_here\n")  # run without the site folder
    failure = faults.import_failure(text, [str(tmp_path / "own.py")])
    assert failure is not None and failure.kind == "not_visible" and failure.module == "kf_test_visible_here"
    fault = failure.fault("a candidate's worker process")
    assert "cannot import kf_test_visible_here, which this Python finds" in fault.cause
    assert "pip install kf_test_visible_here" in fault.fix


def test_a_broken_installed_package_is_the_environments(tmp_path, site):
    (site / "kf_test_broken").mkdir()
    (site / "kf_test_broken" / "__init__.py").write_text("from kf_test_broken.missing_half import thing\n")
    text = _traceback(tmp_path / "own.py", "import kf_test_broken\n", [site])
    failure = faults.import_failure(text, [str(tmp_path / "own.py")])
    assert failure is not None and failure.kind == "broken" and failure.module == "kf_test_broken"
    assert failure.file == str(site / "kf_test_broken" / "__init__.py") and failure.folder == str(site)
    assert "No module named 'kf_test_broken.missing_half'" in failure.line
    assert "pip install --force-reinstall kf_test_broken" in failure.fault("the judge").fix


def test_a_syntax_error_in_an_installed_module_is_the_environments(tmp_path, site):
    (site / "kf_test_bad_syntax.py").write_text("def half(:\n    pass\n")
    text = _traceback(tmp_path / "own.py", "import kf_test_bad_syntax\n", [site])
    failure = faults.import_failure(text, [str(tmp_path / "own.py")])
    assert failure is not None and failure.kind == "broken" and failure.module == "kf_test_bad_syntax"
    # the same error in the code's own file is its own
    text = _traceback(tmp_path / "own.py", "def half(:\n    pass\n")
    assert faults.import_failure(text, [str(tmp_path / "own.py")]) is None


def test_an_optional_dependency_that_is_not_installed_is_the_codes_choice(tmp_path, site):
    """A library the code calls imports, inside a function, a package nobody installed (as torch.onnx needs
    onnx): the code chose that feature."""
    (site / "kf_test_wrapper.py").write_text("def use():\n    import kf_test_optional_dependency\n")
    text = _traceback(tmp_path / "own.py", "import kf_test_wrapper\nkf_test_wrapper.use()\n", [site])
    assert faults.import_failure(text, [str(tmp_path / "own.py")]) is None


def test_importlib_carries_the_import_back_to_the_code_that_asked(tmp_path):
    """importlib.import_module's frames are the import machinery's: a submodule that does not exist in this
    version of a package is the asking code's fault."""
    text = _traceback(tmp_path / "own.py", "import importlib\nimportlib.import_module('json.kf_test_no_such')\n")
    assert faults.import_failure(text, [str(tmp_path / "own.py")]) is None


def test_a_module_file_the_sandbox_denies_is_unreadable_and_a_link_names_its_target(tmp_path):
    target = tmp_path / "hidden" / "typing_extensions.py"
    target.parent.mkdir()
    target.write_text("")
    entry = tmp_path / "deps"
    entry.mkdir()
    (entry / "typing_extensions.py").symlink_to(target)
    text = ("Traceback (most recent call last):\n"
            '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
            f'  File "{faults.__file__}", line 1, in <module>\n'
            '    import torch\n'
            '  File "<frozen importlib._bootstrap_external>", line 1186, in get_data\n'
            f"PermissionError: [Errno 13] Permission denied: '{entry / 'typing_extensions.py'}'\n")
    failure = faults.import_failure(text, None)
    assert failure is not None and failure.kind == "unreadable" and failure.module == "typing_extensions"
    fault = failure.fault("a candidate's worker process")
    assert f"(a link to {target})" in fault.cause and f"make {target.parent} readable" in fault.fix
    # a data file the code asked a library to open is the code's business
    data = text.replace(str(entry / "typing_extensions.py"), str(tmp_path / "weights.pt"))
    assert faults.import_failure(data, [str(tmp_path / "own.py")]) is None


def test_an_undefined_symbol_in_the_codes_own_extension_is_its_own():
    import torch.utils.cpp_extension as cpp

    workdir = "/tmp/kfoundry-candidate-abc"
    text = ("Traceback (most recent call last):\n"
            f'  File "{workdir}/candidate.py", line 9, in <module>\n'
            '    ext = load_inline(name="ext", cpp_sources=src)\n'
            f'  File "{cpp.__file__}", line 2100, in _import_module_from_library\n'
            '    module = importlib.util.module_from_spec(spec)\n'
            f"ImportError: {workdir}/torch-extensions/ext/ext.so: undefined symbol: _Z3foov\n")
    assert faults.import_failure(text, [f"{workdir}/candidate.py", workdir]) is None


def test_before_any_code_under_test_ran_every_failing_import_is_the_environments(tmp_path):
    text = _traceback(tmp_path / "start.py", "import kf_test_not_installed_anywhere\n")
    failure = faults.import_failure(text, None)
    assert failure is not None and failure.kind == "missing"
    fault = faults.start_fault("a candidate's worker process", "exited with code 1", text)
    assert "which this Python environment lacks" in fault.cause
    assert "pip install kf_test_not_installed_anywhere" in fault.fix
    # a start that fails for a reason nobody can tell names its last line and the doctor
    fault = faults.start_fault("the judge process", "was killed by SIGKILL", "Killed\n")
    assert fault.cause == "the judge process was killed by SIGKILL before it ran any code under test: Killed"
    assert "kfoundry doctor" in fault.fix


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.",
    "RuntimeError: No CUDA GPUs are available",
    "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU",
    "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).",
    "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 304: OS call failed",
    "torch.AcceleratorError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
])
def test_cuda_that_cannot_start_is_recognized(line):
    assert faults.cuda_start_failure(f"Traceback ...\n{line}\n") == line
    assert "CUDA could not start in the judge" in faults.cuda_fault("the judge", line).cause


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "RuntimeError: CUDA error: unspecified launch failure",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
])
def test_a_kernels_own_cuda_errors_are_not_a_start_failure(line):
    assert faults.cuda_start_failure(line) is None


def _usage(*processes: GpuProcess, free: int = 1 * GIB) -> GpuUsage:
    return GpuUsage([GpuMemory(0, "NVIDIA H200", "GPU-0", 140 * GIB, free, tuple(processes))], "nvml")


OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 140 GiB"


def test_an_out_of_memory_while_another_process_holds_the_gpu_is_the_environments():
    ours = {os.getpid()}
    usage = _usage(GpuProcess(os.getpid(), 30 * GIB, "kfoundry judge"), GpuProcess(1, 100 * GIB, "python train.py"))
    verdict = faults.gpu_out_of_memory(OOM, "cuda:0", "the reference", usage, ours)
    assert verdict.fault is not None
    assert "the reference ran out of GPU memory (it asked for 20.00 GiB) while other processes hold 100.00 GiB" \
        in verdict.fault.cause
    assert "pid 1 (python train.py) holds 100.00 GiB" in verdict.fault.cause
    assert "--device cuda:N" in verdict.fault.fix
    assert f"pid {os.getpid()} (kfoundry judge) holds 30.00 GiB (kfoundry)" in verdict.holders


def test_an_out_of_memory_with_only_our_processes_on_the_gpu_names_them_and_is_no_fault():
    usage = _usage(GpuProcess(os.getpid(), 130 * GIB, "kfoundry judge"))
    verdict = faults.gpu_out_of_memory(OOM, "cuda:0", "the reference", usage, {os.getpid()})
    assert verdict.fault is None
    assert "GPU 0 (NVIDIA H200): 1.0 of 140.0 GiB free" in verdict.holders and "holds 130.00 GiB" in verdict.holders


def test_what_cannot_be_told_apart_stays_the_codes():
    # an allocation that would not have fit even without the other process
    usage = _usage(GpuProcess(1, 1 * GIB, "python train.py"))
    assert faults.gpu_out_of_memory(OOM, "cuda:0", "x", usage, {os.getpid()}).fault is None
    # a candidate's out-of-memory that does not say how much it asked for
    usage = _usage(GpuProcess(1, 100 * GIB, "python train.py"))
    assert faults.gpu_out_of_memory("CUDA out of memory", "cuda:0", "x", usage, {os.getpid()},
                                    need_known=True).fault is None
    # a process not visible from here (another container: NVML may give the host's pids, ours among them)
    hidden = next(pid for pid in range(4_000_000, 4_000_100) if not os.path.exists(f"/proc/{pid}"))
    usage = _usage(GpuProcess(hidden, 100 * GIB, ""))
    assert faults.gpu_out_of_memory(OOM, "cuda:0", "x", usage, {os.getpid()}).fault is None
    # no driver to ask
    verdict = faults.gpu_out_of_memory(OOM, "cuda:0", "x", GpuUsage(reason="no nvidia-smi on PATH"), set())
    assert verdict.fault is None and "unknown (no nvidia-smi on PATH)" in verdict.holders


def test_cuda_visible_devices_maps_a_device_to_the_gpu_nvml_numbers(monkeypatch):
    usage = GpuUsage([GpuMemory(i, "G", f"GPU-{i}", 1, 1) for i in range(4)], "nvml")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert [g.index for g in faults.gpus_of("cuda:1", usage)] == [3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1")
    assert [g.index for g in faults.gpus_of("cuda", usage)] == [1]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert [g.index for g in faults.gpus_of("cuda:2", usage)] == [2]


def test_our_processes_are_this_one_and_all_it_started():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ours = faults.our_pids()
        assert os.getpid() in ours and child.pid in ours and 1 not in ours
    finally:
        child.kill()
        child.wait()


def _outcome(result, phase="load", stderr="", returncode=0):
    return WorkerOutcome(result=result, phase=phase, returncode=returncode, timed_out=False, stderr_tail=stderr,
                         elapsed_s=1.0)


def test_a_candidate_worker_that_died_before_running_the_candidate_is_the_environments(tmp_path):
    text = _traceback(tmp_path / "start.py", "import kf_test_not_installed_anywhere\n")
    fault = faults.candidate_fault(_outcome(None, "start", text, 1), "cpu", [])
    assert fault is not None
    assert "a candidate's worker process cannot import kf_test_not_installed_anywhere" in fault.cause
    # the same death once the candidate's code runs is the candidate's crash
    assert faults.candidate_fault(_outcome(None, "correctness", text, 1), "cpu", []) is None
    # and a timeout or an overrun memory budget stay the candidate's
    timed_out = _outcome(None, "start", text, -9)
    timed_out.timed_out = True
    assert faults.candidate_fault(timed_out, "cpu", []) is None


def test_a_candidates_own_errors_stay_its_own(tmp_path):
    own = tmp_path / "candidate.py"
    text = _traceback(own, "import kf_test_not_installed_anywhere\n")
    result = {"status": "compile_error", "message": "ModuleNotFoundError while loading the candidate",
              "error": {"type": "ModuleNotFoundError", "traceback": text}}
    assert faults.candidate_fault(_outcome(result), "cpu", [str(own), str(tmp_path)]) is None
    result = {"status": "runtime_error", "message": "RuntimeError: CUDA error: an illegal memory access was "
              "encountered [CUDA memory fault: check the masks of loads and stores]", "error": {}}
    assert faults.candidate_fault(_outcome(result, "correctness"), "cuda:0", [str(own)]) is None
