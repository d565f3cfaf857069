"""kfoundry.evaluate.parent.tools and the replay job: re-runs of one candidate under ncu and compute-sanitizer.

On CPU: the tools explain why they cannot run instead of raising; the replay job runs through the
real Worker; stand-in tools (shell scripts that write a recorded log and then run the worker, as
ncu and compute-sanitizer do) carry the plumbing end to end. `gpu` tests run the real tools."""

import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kfoundry.diagnose.ncu import DRAM, ncu_findings
from kfoundry.diagnose.sanitizer import sanitizer_findings
from kfoundry.evaluate.parent import tools
from tests.helpers import AFFINE_SEED, marker_line

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RECORDED = FIXTURES / "diagnose" / "tools"
OOB = FIXTURES / "diagnose" / "oob_unmasked.py"

FAKE_TOOL = """#!/bin/sh
# stand-in for {name}: write the recorded log, then run the program that follows the options
log=""
while [ $# -gt 0 ]; do
  case "$1" in
    --csv) shift ;;
    --log-file) log="$2"; shift 2 ;;
    --*) shift 2 ;;
    *) break ;;
  esac
done
cat "{fixture}" > "$log"
echo "caching=${{PYTORCH_NO_CUDA_MEMORY_CACHING:-on}}" >> "$log"
exec "$@"
"""


def test_cpu_evaluator_explains_instead_of_raising(affine_evaluator, candidates_dir):
    out = tools.run_tools(affine_evaluator, candidates_dir / "affine_ok.py", ncu=True, sanitize=True)
    assert out["ncu"]["records"] == [] and "CUDA GPU" in out["ncu"]["error"]
    assert out["sanitizer"]["report"] == {} and "CUDA GPU" in out["sanitizer"]["error"]
    assert tools.run_tools(affine_evaluator, candidates_dir / "affine_ok.py", ncu=False, sanitize=False) == {}


def test_missing_tools_are_explained(monkeypatch, candidates_dir):
    monkeypatch.setattr(tools, "find_tool", lambda name: None)
    gpu = SimpleNamespace(device="cuda:0", options=SimpleNamespace(timeout_s=300.0))
    out = tools.run_tools(gpu, candidates_dir / "affine_ok.py", ncu=True, sanitize=True)
    assert "ncu was not found" in out["ncu"]["error"]
    assert "compute-sanitizer was not found" in out["sanitizer"]["error"]


def test_an_unexpected_failure_becomes_an_error_string(monkeypatch, candidates_dir):
    def broken(*args):
        raise OSError("disk full")

    monkeypatch.setattr(tools, "_ncu", broken)
    out = tools.run_tools(SimpleNamespace(device="cuda:0", options=SimpleNamespace(timeout_s=1.0)),
                          candidates_dir / "affine_ok.py", ncu=True, sanitize=False)
    assert out["ncu"] == {"records": [], "error": "OSError: disk full", "command": None}


def test_find_tool_looks_on_path_then_in_cuda_home(monkeypatch, tmp_path):
    bin_dir = tmp_path / "cuda" / "bin"
    bin_dir.mkdir(parents=True)
    fake = bin_dir / "ncu"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert tools.find_tool("ncu") == str(fake)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert tools.find_tool("ncu") == str(fake)
    assert tools.find_tool("compute-sanitizer-nowhere") is None


def test_replay_job_runs_the_candidate_on_cpu(affine_evaluator, candidates_dir):
    replay = tools.run_replay(affine_evaluator, candidates_dir / "affine_ok.py", timeout_s=120)
    assert replay["status"] == "ok", replay
    assert replay["outputs"] == [[4, 250]]
    assert replay["phase"] == "replay" and not replay["timed_out"]


def test_replay_job_reports_the_candidates_exception(affine_evaluator, candidates_dir):
    replay = tools.run_replay(affine_evaluator, candidates_dir / "forward_index_error.py", timeout_s=120)
    assert replay["status"] == "runtime_error"
    assert "IndexError" in replay["message"]
    assert str(candidates_dir / "forward_index_error.py") in replay["message"]  # the file, not its sandboxed copy


def test_a_replay_runs_in_the_sandbox_too(affine_evaluator, tmp_path, candidates_dir):
    """Under ncu or compute-sanitizer the candidate runs again: the same restrictions hold."""
    secret = tmp_path / "secret.txt"
    secret.write_text("not for candidates")
    source = (candidates_dir / "affine_ok.py").read_text().replace(
        "    def forward(self, x):\n", f"    def forward(self, x):\n        open({str(secret)!r}).read()\n", 1)
    probe = tmp_path / "reads_a_file.py"
    probe.write_text(source)
    replay = tools.run_replay(affine_evaluator, probe, timeout_s=120)
    assert replay["status"] == "runtime_error" and "PermissionError" in replay["message"], replay


def _fake(tmp_path: Path, name: str, fixture: str) -> str:
    path = tmp_path / name
    path.write_text(FAKE_TOOL.format(name=name, fixture=RECORDED / fixture))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_stand_in_tools_wrap_the_worker_end_to_end(monkeypatch, tmp_path, affine_evaluator, candidates_dir):
    fakes = {"ncu": _fake(tmp_path, "ncu", "ncu_pointwise_chain.csv"),
             "compute-sanitizer": _fake(tmp_path, "compute-sanitizer", "memcheck_clean.log")}
    monkeypatch.setattr(tools, "find_tool", fakes.get)
    monkeypatch.setattr(tools, "_no_run", lambda evaluator, what, tool: None)  # as if on a GPU
    out = tools.run_tools(affine_evaluator, candidates_dir / "affine_ok.py", ncu=True, sanitize=True, timeout_s=120)
    ncu = out["ncu"]
    assert ncu["error"] is None, ncu
    assert ncu["records"][0]["name"] == "_affine_gelu_clamp_kernel"
    assert ncu["replay"]["status"] == "ok"  # the worker ran under the wrapper
    assert ncu["command"].startswith(fakes["ncu"]) and sys.executable in ncu["command"]
    assert "--profile-from-start off" in ncu["command"] and "caching=on" in ncu["log"]
    sanitizer = out["sanitizer"]
    assert sanitizer["error"] is None, sanitizer
    assert sanitizer["report"]["error_count"] == 0 and sanitizer["replay"]["status"] == "ok"
    assert "caching=1" in sanitizer["log"]  # PyTorch's caching allocator is off under memcheck


def test_a_tool_that_writes_no_log_is_explained(monkeypatch, tmp_path, affine_evaluator, candidates_dir):
    silent = tmp_path / "ncu"
    silent.write_text("#!/bin/sh\necho 'ncu: cannot start' >&2\nexit 3\n")
    silent.chmod(silent.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(tools, "find_tool", lambda name: str(silent))
    monkeypatch.setattr(tools, "_no_run", lambda evaluator, what, tool: None)
    entry = tools.run_tools(affine_evaluator, candidates_dir / "affine_ok.py", ncu=True, sanitize=False,
                            timeout_s=60)["ncu"]
    assert entry["records"] == []
    assert "cannot start" in entry["error"]


# -- on a GPU, with the real tools -----------------------------------------------------------------
def _gpu_evaluator(problem: Path, seed: int):
    from kfoundry.evaluate import EvalOptions, Evaluator

    return Evaluator(problem, EvalOptions(device="cuda", trials=1, seed=seed, baselines=(), measure_device=False,
                                          timeout_s=300))


@pytest.fixture(scope="module")
def gpu_affine():
    evaluator = _gpu_evaluator(FIXTURES / "problems" / "affine.py", AFFINE_SEED)
    yield evaluator
    evaluator.close()


def _needs(tool: str) -> None:
    if tools.find_tool(tool) is None:
        pytest.skip(f"{tool} is not installed")


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_ncu_profiles_the_pointwise_chain_kernel(examples_dir):
    _needs("ncu")
    evaluator = _gpu_evaluator(examples_dir / "pointwise_chain" / "problem.py", 1)
    try:
        entry = tools.run_tools(evaluator, examples_dir / "pointwise_chain" / "kernel.py", ncu=True, sanitize=False,
                                timeout_s=600)["ncu"]
    finally:
        evaluator.close()
    assert entry["error"] is None, entry
    # only the bracketed forward is profiled: its single launch, no warm-up or compilation
    assert [r["name"] for r in entry["records"]] == ["_affine_gelu_clamp_kernel"], entry["log"][-3000:]
    assert entry["records"][0]["metrics"][DRAM] > 10.0
    assert ncu_findings(entry["records"])[0].data["verdict"] == "memory"


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_sanitizer_finds_the_unmasked_read(gpu_affine):
    _needs("compute-sanitizer")
    entry = tools.run_tools(gpu_affine, OOB, ncu=False, sanitize=True, timeout_s=600)["sanitizer"]
    report = entry["report"]
    assert report.get("errors"), entry.get("log", "")[-3000:]
    first = report["errors"][0]
    assert first["kind"].startswith("Invalid __global__ read") and first["kernel"] == "_oob_affine_kernel"
    (finding,) = sanitizer_findings(report, OOB.read_text(), str(OOB))
    assert finding.location.line == marker_line(OOB, "UNMASKED")


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_sanitizer_is_clean_on_a_masked_kernel(gpu_affine, candidates_dir):
    _needs("compute-sanitizer")
    entry = tools.run_tools(gpu_affine, candidates_dir / "affine_ok.py", ncu=False, sanitize=True,
                            timeout_s=600)["sanitizer"]
    assert entry["error"] is None, entry
    assert entry["report"]["error_count"] == 0, entry["log"][-3000:]
    assert entry["replay"]["status"] == "ok"
