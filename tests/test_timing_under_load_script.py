"""benchmarks/timing_under_load.py: its loads as real processes, its usage errors as a real run, its table.

The timing rows below are FAKE: made up for the table's arithmetic, not measured anywhere (a CPU evaluation is
not timed)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "timing_under_load.py"
sys.path.insert(0, str(REPO / "benchmarks"))

import timing_under_load as tul  # noqa: E402


def test_loads_parse_and_run_as_processes_that_stop():
    assert tul.parse_load("none") == tul.Load("none")
    spin = tul.parse_load(" spin:2 ")
    assert (spin.kind, spin.processes, spin.name) == ("spin", 2, "spin:2")
    for bad in ("spin", "spin:0", "spin:x", "burn:3"):
        with pytest.raises(ValueError, match="KIND:N"):
            tul.parse_load(bad)
    assert tul.Load("none").start() == []
    for kind in tul.LOAD_KINDS:
        processes = tul.Load(kind, 2).start()
        try:
            assert len(processes) == 2 and all(p.poll() is None for p in processes)  # busy, not exited
        finally:
            tul.stop(processes)
        assert all(p.returncode is not None for p in processes)


def test_the_table_gives_each_load_against_the_first():
    rows = [{"candidate": "runs/5_gemm/candidates/1.py", "load": "none", "ms": ms, "iqr": 0.01,
             "clocks": [1980, 1980]} for ms in (1.0, 1.02)]
    rows += [{"candidate": "runs/5_gemm/candidates/1.py", "load": "spin:14", "ms": ms, "iqr": 0.03,
              "clocks": [1980]} for ms in (1.11, 1.13)]
    rows += [{"candidate": "runs/5_gemm/candidates/1.py", "load": "pycompile:2", "ms": None}]
    lines = tul.table(rows, [tul.parse_load(x) for x in ("none", "spin:14", "pycompile:2")]).splitlines()
    assert lines[1].split()[:3] == ["5_gemm/1.py", "none", "1.0100"] and "1.000x" in lines[1]
    assert lines[2].split()[:3] == ["5_gemm/1.py", "spin:14", "1.1200"] and "1.109x" in lines[2]
    assert "3.0%" in lines[2] and "1980" in lines[2]
    assert "not timed" in lines[3]


def test_bad_usage_is_exit_2_with_a_message(tmp_path):
    problem = tmp_path / "problem.py"
    problem.write_text("# not read\n")
    for args, says in (([str(problem), str(tmp_path / "missing.py")], "not a file"),
                       ([str(problem), str(problem), "--loads", "spin"], "KIND:N"),
                       ([str(problem), str(problem), "--rounds", "0"], "need a load and a round")):
        done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and says in done.stderr, done.stderr
