"""Each problem's floor (its speed of light) and the fraction of it ours, eager and torch.compile reach: computed
from recorded evaluation records, then in every bench output (bench.json, bench.csv, bench.html, the table, the
per-run report).

The records are the report fixture's (tests/runs/test_report_fixture.py: real Evaluation objects of an 8192 x 4096 x
4096 fp32 GEMM on an H200, with INVENTED timings: ours 5.2 ms, eager 9.0 ms, torch.compile 8.6 ms); the ceilings
are the bundled H200 datasheet's (4800 GB/s, 495 dense TF32 TFLOP/s, 67 FP32) or, where a record says they were
measured, the made-up measured ones below. Every expected value is worked out here by hand."""

import csv
import dataclasses
import json
from pathlib import Path

import pytest
from rich.console import Console

from kfoundry.bench import outputs
from kfoundry.bench.floor import (DATASHEET, FIELDS, MEASURED, Floor, ceilings, compute_roofs, floor_fields, floor_of,
                                  speed_of_light)
from kfoundry.bench.methods import first_floor
from kfoundry.bench.metrics import floor_metrics
from kfoundry.bench.runner import run_bench
from kfoundry.bench.settings import BenchSettings
from kfoundry.bench.suite import discover
from kfoundry.bench.table import print_report
from kfoundry.evaluate.parent.options import EvalOptions
from kfoundry.optimize.settings import OptimizeSettings
from kfoundry.run_config import RunConfig
from kfoundry.types import ReferenceRounding
from kfoundry.runs import RunStore
from kfoundry.runs.outputs import write_outputs
from tests.bench.helpers import write_suite
from tests.runs.test_report_fixture import COMPILE_MS, COST, EAGER_MS, H200, K, M, N, evaluation

FLOPS = 2 * M * N * K
BYTES = (M * K + M * N + N * K + N) * 4  # inputs, outputs and parameters (weight and bias) once
OURS_MS = 5.2
# the fp32 GEMM at tolerance 1e-4: three fp16 products per FLOP at the datasheet's 990 TFLOP/s (3xFP16, twice
# as fast as three TF32 products at 495)
GEMM_FLOOR_MS = 3 * FLOPS / 990e12 * 1e3
POINTWISE_FLOOR_MS = BYTES / 4800e9 * 1e3  # no FLOPs counted: the bytes at the datasheet's bandwidth
# FIXTURE: made-up measured ceilings, lower than the datasheet's, so that the two cannot be confused
MEASURED_FACTS = dataclasses.replace(H200, source="measured (fixture: made-up figures)", peak_bandwidth_gbs=4000.0,
                                     peak_tflops={"fp32": 50.0, "tf32": 400.0, "fp16": 700.0, "bf16": 700.0})
MEASURED_FLOOR_MS = 3 * FLOPS / 700e12 * 1e3


def record(status="ok", runtime_ms=OURS_MS, **changes):
    """The fixture's evaluation record (Evaluation.to_dict()), with its cost or device facts changed."""
    made = evaluation(status, runtime_ms if status == "ok" else None)
    for name, value in changes.items():
        setattr(made, name, value)
    return made.to_dict()


# -- the floor of one problem ---------------------------------------------------------------------

def test_an_fp32_gemm_at_1e_4_is_floored_by_three_fp16_products_per_flop():
    floor = floor_of(record())
    assert floor == Floor(pytest.approx(GEMM_FLOOR_MS), "compute: 3xFP16", DATASHEET)
    assert floor.roof == "3xFP16"
    assert floor.of(OURS_MS) == pytest.approx(GEMM_FLOOR_MS / OURS_MS)  # 16.0%: ours is at a sixth of the light
    assert floor.of(None) is None and floor.of(0.0) is None


def test_a_problem_without_counted_flops_is_floored_by_its_bytes():
    floor = floor_of(record(cost=dataclasses.replace(COST, flops=0)))
    assert floor == Floor(pytest.approx(POINTWISE_FLOOR_MS), "memory", DATASHEET)


def test_the_measured_ceilings_of_the_run_are_used_where_it_has_them():
    floor = floor_of(record(device_facts=MEASURED_FACTS))
    assert floor == Floor(pytest.approx(MEASURED_FLOOR_MS), "compute: 3xFP16", MEASURED)
    failed = dataclasses.replace(H200, source="measurement failed (RuntimeError: fixture); datasheet",
                                 peak_bandwidth_gbs=1.0, peak_tflops={"tf32": 1.0})
    assert floor_of(record(device_facts=failed)).source == DATASHEET  # the bundled table's, not these


@pytest.mark.parametrize("precision, tolerance, roofs", [
    ("fp32", 1e-4, {"FP32": 67.0, "3xTF32": 165.0, "3xFP16": 330.0}),  # TF32 alone (~1e-3 error) would fail 1e-4
    # a tolerance that admits TF32's error admits one fp16 product of the same 11 bits
    ("fp32", 1e-2, {"FP32": 67.0, "3xTF32": 165.0, "TF32": 495.0, "3xFP16": 330.0, "FP16": 990.0}),
    ("fp32", None, {"FP32": 67.0, "3xTF32": 165.0, "3xFP16": 330.0}),
    ("bf16", 1e-2, {"BF16": 990.0}),
    ("fp16", 1e-2, {"FP16": 990.0}),
])
def test_the_compute_roofs_that_honour_a_precision(precision, tolerance, roofs):
    assert compute_roofs(precision, tolerance, {"fp32": 67.0, "tf32": 495.0, "fp16": 990.0, "bf16": 990.0}) == \
        pytest.approx(roofs)


def test_the_fastest_honest_roof_sets_the_floor():
    # an RTX 4090's TF32 rate is its FP32 rate: three TF32 products are slower than FP32 FMAs there
    assert speed_of_light(FLOPS, BYTES, {"FP32": 82.6, "3xTF32": 82.6 / 3}, 1008.0, DATASHEET) == \
        Floor(pytest.approx(FLOPS / 82.6e12 * 1e3), "compute: FP32", DATASHEET)
    loose = record()
    loose["correctness"]["tolerance"] = 1e-2
    assert floor_of(loose) == Floor(pytest.approx(FLOPS / 990e12 * 1e3), "compute: FP16", DATASHEET)
    assert speed_of_light(None, None, {}, 4800.0, DATASHEET) is None


def test_a_reference_that_rounds_like_tf32_admits_one_product_per_flop():
    # cuDNN's TF32 convolutions: a verdict then allows a TF32 main loop's error at 1e-4 too
    assert compute_roofs("fp32", 1e-4, {"tf32": 495.0, "fp16": 990.0}, ReferenceRounding(conv_tf32=True)) == \
        pytest.approx({"3xTF32": 165.0, "TF32": 495.0, "3xFP16": 330.0, "FP16": 990.0})
    assert "FP16" in compute_roofs("fp32", 1e-4, {"fp16": 990.0}, ReferenceRounding(error_ratio=7.6))
    assert "FP16" not in compute_roofs("fp32", 1e-4, {"fp16": 990.0}, ReferenceRounding(error_ratio=0.02))
    tf32_conv = record(reference_rounding=ReferenceRounding(error_ratio=12.0, conv_tf32=True))
    assert floor_of(tf32_conv) == Floor(pytest.approx(FLOPS / 990e12 * 1e3), "compute: FP16", DATASHEET)
    assert floor_of(record(reference_rounding=ReferenceRounding(error_ratio=0.02))) == floor_of(record())


def test_no_floor_on_a_cpu_an_unknown_gpu_or_without_a_cost():
    cpu = dataclasses.replace(H200, kind="cpu", name="Fixture CPU (8 cores)", source="none: no ceilings on CPU")
    assert floor_of(record(device_facts=cpu)) is None
    assert ceilings({"kind": "cuda", "name": "Fixture GPU 9000", "source": "datasheet"}) is None
    assert floor_of(record(cost=None)) is None and floor_of(None) is None


def test_the_floor_of_a_problem_is_the_first_of_its_evaluations_that_has_one():
    cpu = dataclasses.replace(H200, kind="cpu", name="Fixture CPU (8 cores)")
    found = first_floor([None, record(device_facts=cpu), record("wrong_output")])
    assert found == Floor(pytest.approx(GEMM_FLOOR_MS), "compute: 3xFP16", DATASHEET)


def test_fields_round_trip_and_geomeans_over_the_problems_that_have_each_fraction():
    floor = Floor(2.0, "memory", MEASURED)
    fields = floor_fields(floor, 4.0, 8.0, None)
    assert fields == {"floor_ms": 2.0, "floor_bound": "memory", "floor_source": MEASURED, "ours_of_floor": 0.5,
                      "eager_of_floor": 0.25, "compile_of_floor": None}
    assert Floor.from_fields(fields) == floor
    assert floor_fields(None, 4.0, 8.0, 2.0) == dict.fromkeys(FIELDS)
    summary = floor_metrics([fields, floor_fields(floor, 1.0, 2.0, 2.0), floor_fields(None, 1.0, 1.0, 1.0)])
    assert summary["problems"] == 2 and summary["sources"] == [MEASURED]
    assert summary["ours_of_floor"] == {"geomean": pytest.approx(1.0), "problems": 2}  # sqrt(0.5 * 2.0)
    assert summary["eager_of_floor"] == {"geomean": pytest.approx(0.5), "problems": 2}  # sqrt(0.25 * 1.0)
    assert summary["compile_of_floor"] == {"geomean": pytest.approx(1.0), "problems": 1}


# -- a bench made from the recorded evaluations -------------------------------------------------------

# problem -> the evaluations its (fake) search recorded, in order
GPU_RUNS = {
    "1_gemm": lambda: [record("wrong_output"), record()],
    "2_pointwise": lambda: [record(cost=dataclasses.replace(COST, flops=0))],
    "3_broken": lambda: [record("wrong_output")],  # no correct kernel: a floor, and no time of ours
    "4_measured": lambda: [record(device_facts=MEASURED_FACTS)],
}


class RecordedSearch:
    """Stands in for kfoundry.optimize.optimize: a run store holding the recorded evaluations, and its result.json."""

    def __init__(self, runs):
        self.runs = runs

    def __call__(self, problem_path=None, *, out=None, **_):
        name = Path(problem_path).stem
        with RunStore.create(out, problem_path, {"policy": "strict"}, seed=1) as store:
            for index, made in enumerate(self.runs[name]()):
                cid = store.add_candidate(f"class ModelNew: pass  # {index}\n", [], "tuner", 0, index, "tuner")
                store.finish_evaluation(store.start_evaluation(cid), made)
            paths = write_outputs(store, {"kind": "cuda", "name": "NVIDIA H200"})
        return json.loads(paths["result"].read_text())


def bench(tmp_path, runs):
    suite = discover(write_suite(tmp_path / "suite", [f"{name}.py" for name in runs]))
    config = RunConfig(search=OptimizeSettings(max_evals=2), eval=EvalOptions(device="cpu"),
                       bench=BenchSettings(method="optimize"))
    return run_bench(suite, config, tmp_path / "out", optimize_fn=RecordedSearch(runs))


@pytest.fixture(scope="module")
def gpu_bench(tmp_path_factory):
    return bench(tmp_path_factory.mktemp("floor"), GPU_RUNS)


def test_bench_json_gives_each_problem_s_floor_and_the_fractions_of_it(gpu_bench):
    document = json.loads((gpu_bench.out / "bench.json").read_text())
    problems = {p["name"]: p for p in document["problems"]}
    gemm = problems["1_gemm"]
    assert (gemm["floor_bound"], gemm["floor_source"]) == ("compute: 3xFP16", "datasheet")
    assert gemm["floor_ms"] == pytest.approx(GEMM_FLOOR_MS)
    assert gemm["ours_of_floor"] == pytest.approx(GEMM_FLOOR_MS / OURS_MS)
    assert gemm["eager_of_floor"] == pytest.approx(GEMM_FLOOR_MS / EAGER_MS)
    assert gemm["compile_of_floor"] == pytest.approx(GEMM_FLOOR_MS / COMPILE_MS)
    pointwise = problems["2_pointwise"]
    assert (pointwise["floor_bound"], pointwise["floor_ms"]) == ("memory", pytest.approx(POINTWISE_FLOOR_MS))
    broken = problems["3_broken"]
    assert broken["status"] == "no_correct" and broken["floor_ms"] == pytest.approx(GEMM_FLOOR_MS)
    assert broken["ours_of_floor"] is None and broken["eager_of_floor"] is None  # nothing of it was timed
    measured = problems["4_measured"]
    assert (measured["floor_source"], measured["floor_ms"]) == ("measured", pytest.approx(MEASURED_FLOOR_MS))

    summary = document["metrics"]["floor"]
    assert summary["problems"] == 4 and summary["sources"] == ["datasheet", "measured"]
    timed = (GEMM_FLOOR_MS, POINTWISE_FLOOR_MS, MEASURED_FLOOR_MS)
    expected = (timed[0] * timed[1] * timed[2]) ** (1 / 3)
    assert summary["ours_of_floor"] == {"geomean": pytest.approx(expected / OURS_MS), "problems": 3}
    assert summary["eager_of_floor"] == {"geomean": pytest.approx(expected / EAGER_MS), "problems": 3}
    assert summary["compile_of_floor"] == {"geomean": pytest.approx(expected / COMPILE_MS), "problems": 3}

    kept = outputs.load_results(gpu_bench.out)  # what --resume reads back
    assert kept["4_measured"].floor == Floor(pytest.approx(MEASURED_FLOOR_MS), "compute: 3xFP16", MEASURED)


def test_bench_csv_has_the_same_columns(gpu_bench):
    rows = {r["name"]: r for r in csv.DictReader((gpu_bench.out / "bench.csv").open())}
    columns = list(rows["1_gemm"])  # new columns go at the end: the floor's after out_of_resource, before later ones
    assert columns[columns.index("out_of_resource") + 1:][:len(FIELDS)] == list(FIELDS)
    gemm = rows["1_gemm"]
    assert float(gemm["floor_ms"]) == pytest.approx(GEMM_FLOOR_MS) and gemm["floor_bound"] == "compute: 3xFP16"
    assert gemm["floor_source"] == "datasheet"
    assert float(gemm["ours_of_floor"]) == pytest.approx(GEMM_FLOOR_MS / OURS_MS)
    assert float(gemm["compile_of_floor"]) == pytest.approx(GEMM_FLOOR_MS / COMPILE_MS)
    assert rows["3_broken"]["ours_of_floor"] == "" and rows["4_measured"]["floor_source"] == "measured"


def test_the_table_page_and_report_show_the_floor(gpu_bench):
    console = Console(record=True, width=100)  # narrow: the plain table, nothing cut
    print_report(gpu_bench, console)
    text = console.export_text()
    lines = text.splitlines()
    assert "floor ms" in lines[1] and "ours/eager/compile of floor" in lines[1]
    gemm = next(line for line in lines if " 1_gemm " in line)
    # 0.833 / 5.2, / 9.0, / 8.6 ms
    assert f"{GEMM_FLOOR_MS:.4g} 3xFP16" in gemm and "16%/9.3%/9.7%" in gemm
    assert f"{POINTWISE_FLOOR_MS:.4g} memory" in next(line for line in lines if "2_pointwise" in line)
    assert "-/-/-" in next(line for line in lines if "3_broken" in line)
    assert "ours of the floor (floor / median time), geomean over the 3 problem(s) with one" in text
    assert "4 problem(s), at datasheet and measured ceilings" in text

    page = (gpu_bench.out / "bench.html").read_text()
    assert "floor ms (roof)" in page and "ours of floor" in page and "compile of floor" in page
    assert f"{GEMM_FLOOR_MS:.4g} 3xFP16" in page and "(measured)" in page and "(datasheet)" in page
    assert "torch.compile of the floor (floor / median time), geomean over the 3 problem(s) with one" in page

    report = (gpu_bench.out / "runs" / "1_gemm" / "report.html").read_text()  # the bench wrote it
    assert "Speed of light" in report and "set by the 3xFP16 roof" in report


def test_a_cpu_bench_shows_nothing_new_and_does_not_break(tmp_path):
    cpu = dataclasses.replace(H200, kind="cpu", name="Fixture CPU (8 cores)", source="none: no ceilings on CPU",
                              peak_bandwidth_gbs=None, peak_tflops={})

    def untimed():
        made = record(device_facts=cpu)
        made["timing"] = {"runtime_ms": None, "reason": "no GPU: the interpreter is not a performance measurement"}
        return [made]

    report = bench(tmp_path, {"1_chain": untimed})
    [problem] = json.loads((report.out / "bench.json").read_text())["problems"]
    assert all(problem[name] is None for name in FIELDS)
    assert report.metrics()["floor"]["problems"] == 0
    console = Console(record=True, width=100)
    print_report(report, console)
    text = console.export_text()
    assert "floor" not in text
    assert "of floor" not in (report.out / "bench.html").read_text()
    assert "Speed of light" not in (report.out / "runs" / "1_chain" / "report.html").read_text()
