"""benchmarks/join_results.py: speedups and the search's goal over several result files, run as a real process on
files written here.

Every number below is FAKE: made up for the arithmetic, not measured anywhere."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "join_results.py"


def _file(tmp_path, name, suite, problems):
    # rows as programmatic_suite writes them (build_rows), with the fields its summary reads
    rows = [{"number": n, "name": f"{n}_fake", "judged": True, "correct": ok, "gen0_of_floor": of_floor,
             "search_gain": gain, "eager_ms": 4.0, "speedup_eager": 2.0 * n if ok else None,
             "speedup_compile": float(n) if ok else None, "compile_vs_eager": 2.0}
            for n, ok, of_floor, gain in problems]
    path = tmp_path / name
    path.write_text(json.dumps({"settings": {"suite": f"benchmarks/{suite}"}, "problems": rows}))
    return path


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def test_goal_joins_files_and_picks_problems(tmp_path):
    # conv: 1.30x and 1.20x below the floor; gemm: 1.00x below, 1.50x near the floor (met, not counted), 4 failed
    conv = _file(tmp_path, "conv.json", "conv_suite", [(1, True, 0.2, 1.3), (2, True, 0.1, 1.2), (3, True, 0.3, 1.0)])
    gemm = _file(tmp_path, "gemm.json", "gemm_suite", [(1, True, 0.5, 1.0), (2, True, 0.9, 1.5),
                                                      (4, False, None, None)])
    out = tmp_path / "goal.json"
    done = _run(f"{conv}@1-2", gemm, "--json", out)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert [(r["suite"], r["number"]) for r in result["rows"]] == [
        ("conv_suite", 1), ("conv_suite", 2), ("gemm_suite", 1), ("gemm_suite", 2), ("gemm_suite", 4)]
    assert result["suites"]["conv_suite"]["vs_eager"] == pytest.approx(8 ** 0.5)  # 2x and 4x
    assert result["all"]["vs_compile"] == pytest.approx((1 * 2 * 1 * 2) ** 0.25) and result["all"]["correct"] == 4
    everything = result["all"]["goal"]
    assert everything["below_floor"] == 3 and everything["large_gains"] == 1
    assert abs(everything["median_gain"] - 1.2) < 1e-9
    assert everything["near_floor"] == ["2_fake"] and everything["met"] is True  # 1.20x median, 1 of 3 >= 1.25x
    assert result["suites"]["gemm_suite"]["goal"]["met"] is False and result["suites"]["conv_suite"]["goal"]["met"]
    assert result["failed"] == ["gemm_suite/4_fake"]
    assert ("all: 4 of 5 correct; ours vs eager 2.828x (over 4), vs torch.compile 1.414x (over 4); the search's goal: "
            "3 below 70% of the floor, median gain 1.200x, >= 1.25x on 1; met: yes") in done.stdout
    assert "near the floor (met)" in done.stdout and "no (not correct)" in done.stdout


def test_bad_input_is_a_usage_error(tmp_path):
    conv = _file(tmp_path, "conv.json", "conv_suite", [(1, True, 0.2, 1.3)])
    again = _file(tmp_path, "again.json", "conv_suite", [(1, True, 0.2, 1.1)])
    for args, says in [((conv, again), "is in both"), ((f"{conv}@2",), "no problem numbered 2"),
                       ((tmp_path / "missing.json",), "not a programmatic_suite result file"),
                       ((f"{conv}@3-1",), "runs backwards")]:
        done = _run(*args)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)
