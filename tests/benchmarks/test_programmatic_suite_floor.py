"""benchmarks/programmatic_suite.py --report-only on a bench made from recorded evaluations (tests/bench/test_floor.py:
the report fixture's fp32 GEMM records on an H200, INVENTED timings: ours 5.2 ms, eager 9.0, torch.compile 8.6):
each problem's floor and the fraction of it ours, eager and torch.compile reach, in the JSON rows, the summary's
geomeans and the text, also for a bench.json written before the floor was recorded."""

import importlib.util
import json
from pathlib import Path

import pytest

from kfoundry.bench.floor import FIELDS
from tests.bench.test_floor import (COMPILE_MS, EAGER_MS, GEMM_FLOOR_MS, GPU_RUNS, MEASURED_FLOOR_MS, OURS_MS,
                                    POINTWISE_FLOOR_MS, bench)

REPO = Path(__file__).resolve().parent.parent.parent
SCRIPT = REPO / "benchmarks" / "programmatic_suite.py"
TIMED = (GEMM_FLOOR_MS * POINTWISE_FLOOR_MS * MEASURED_FLOOR_MS) ** (1 / 3)  # the floors of the 3 timed problems


@pytest.fixture(scope="module")
def ps():
    spec = importlib.util.spec_from_file_location("programmatic_suite_floor_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return bench(tmp_path_factory.mktemp("suite_floor"), GPU_RUNS).out


def report_only(ps, out, target, capsys):
    assert ps.main(["--report-only", "--out", str(out), "--json", str(target)]) == 0
    return json.loads(target.read_text()), capsys.readouterr().out


def test_rows_summary_and_text_give_the_floor(ps, recorded, tmp_path, capsys):
    document, text = report_only(ps, recorded, tmp_path / "suite.json", capsys)
    rows = {r["name"]: r for r in document["problems"]}
    gemm = rows["1_gemm"]
    assert (gemm["floor_bound"], gemm["floor_source"]) == ("compute: 3xFP16", "datasheet")
    assert gemm["floor_ms"] == pytest.approx(GEMM_FLOOR_MS)
    assert gemm["ours_of_floor"] == pytest.approx(GEMM_FLOOR_MS / OURS_MS)
    assert gemm["eager_of_floor"] == pytest.approx(GEMM_FLOOR_MS / EAGER_MS)
    assert gemm["compile_of_floor"] == pytest.approx(GEMM_FLOOR_MS / COMPILE_MS)
    # the floor's 3xFP16 roof (990 / 3 TFLOP/s) is twice as fast as the 3xTF32 column's (495 / 3)
    assert gemm["ours_of_floor"] == pytest.approx(gemm["roof_3xtf32"] / 2)
    assert rows["2_pointwise"]["floor_bound"] == "memory" and rows["4_measured"]["floor_source"] == "measured"
    assert rows["3_broken"]["ours_of_floor"] is None and rows["3_broken"]["floor_ms"] == pytest.approx(GEMM_FLOOR_MS)

    floor = document["summary"]["floor"]
    assert floor["problems"] == 4 and floor["sources"] == ["datasheet", "measured"]
    assert floor["ours_of_floor"] == {"geomean": pytest.approx(TIMED / OURS_MS), "problems": 3}
    assert floor["eager_of_floor"] == {"geomean": pytest.approx(TIMED / EAGER_MS), "problems": 3}
    assert floor["compile_of_floor"] == {"geomean": pytest.approx(TIMED / COMPILE_MS), "problems": 3}

    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("#") and "gen 0" in line)
    assert "floor ms" in header and "ours/eager/compile of floor" in header
    course = [line for line in lines if " 1_gemm " in line][1]
    assert f"{GEMM_FLOOR_MS:.4g} 3xFP16" in course and "16%/9.3%/9.7%" in course  # 0.833 / 5.2, / 9.0, / 8.6 ms
    assert "-/-/-" in [line for line in lines if " 3_broken " in line][1]
    assert "at the datasheet and measured ceilings" in text
    assert ("of the floor (speed of light), geomeans: ours 7.9% (over 3), eager 4.5% (over 3), "
            "torch.compile 4.8% (over 3)") in text


def test_a_bench_json_without_floor_fields_takes_them_from_the_runs_and_the_reference_pass(ps, recorded, tmp_path,
                                                                                          capsys):
    old = json.loads((recorded / "bench.json").read_text())
    for record in old["problems"]:
        for name in FIELDS:
            record.pop(name)
    out = tmp_path / "old"
    out.mkdir()
    (out / "bench.json").write_text(json.dumps(old))
    (out / "runs").symlink_to(recorded / "runs")
    # the reference pass timed eager for the problem ours did not solve: its record carries the floor, 3x longer
    reference = dict(next(p for p in old["problems"] if p["name"] == "3_broken"), status="ok", method="reference",
                     eager_ms=4.0, compile_ms=2.0, runtime_ms=4.0, floor_ms=3.0, floor_bound="memory",
                     floor_source="measured")
    (out / "baselines").mkdir()
    (out / "baselines" / "bench.json").write_text(json.dumps(dict(old, problems=[reference])))

    document, _ = report_only(ps, out, tmp_path / "old.json", capsys)
    rows = {r["name"]: r for r in document["problems"]}
    assert rows["1_gemm"]["floor_ms"] == pytest.approx(GEMM_FLOOR_MS)  # the run's best evaluation
    assert rows["1_gemm"]["ours_of_floor"] == pytest.approx(GEMM_FLOOR_MS / OURS_MS)
    assert rows["4_measured"]["floor_source"] == "measured"
    broken = rows["3_broken"]  # its run has no best: the reference pass's floor, against the reference pass's times
    assert (broken["floor_ms"], broken["floor_bound"], broken["baseline_source"]) == (3.0, "memory", "reference pass")
    assert (broken["eager_of_floor"], broken["compile_of_floor"], broken["ours_of_floor"]) == (0.75, 1.5, None)
    assert document["summary"]["floor"]["eager_of_floor"]["problems"] == 4


def test_a_cpu_bench_has_no_floor_column_values_nor_summary_line(ps):
    problems = [{"name": "1_fake_chain", "number": 1, "status": "ok", "evaluations": 3},
                {"name": "2_fake_softmax", "number": 2, "status": "no_correct", "evaluations": 3}]
    rows = ps.build_rows(problems)
    assert all(row[name] is None for row in rows for name in FIELDS)
    summary = ps.summarize(rows)
    assert summary["floor"]["problems"] == 0 and summary["floor"]["ours_of_floor"]["geomean"] is None
    bench = {"labels": {}, "problems": problems, "pending": [], "complete": True}
    text = ps.render(ps.build_document(bench, rows, {"max_evals": 3}, [], "x"))
    assert "of the floor (speed of light)" not in text and "ceilings" in text  # the roof note stays as it was
    course = [line for line in text.splitlines() if "1_fake_chain" in line][1].split()
    assert course[6:11] == ["n/a", "n/a", "n/a", "-", "-"]  # roof, 3xTF32 roof and sheet, floor ms, of floor
