"""benchmarks/programmatic_suite.py: its rows, summary, table and JSON, from a fake bench (nothing runs), and the
optimize call it hands the bench, which must continue a run cut short (a real search on the CPU).

Every number below is FAKE: made up for the arithmetic, not measured anywhere."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "programmatic_suite.py"


@pytest.fixture(scope="module")
def ps():
    spec = importlib.util.spec_from_file_location("programmatic_suite_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _problem(number, name, status, **figures):
    record = {"name": name, "path": f"benchmarks/suite/{name}.py", "number": number, "status": status,
              "message": f"fake {status}", "method": "optimize", "fingerprint": "fake", "speedup_eager": None,
              "speedup_compile": None, "runtime_ms": None, "eager_ms": None, "compile_ms": None,
              "run_dir": f"runs/{name}", "candidate": None, "evaluations": 16, "set_values": {}, "labels": {},
              "duration_s": 1.0, "finished_at": 0.0}
    record.update(figures)
    return record


# FAKE numbers: A is 2x faster than eager, torch.compile 1.25x; B is correct but 2x slower, torch.compile failed
# (no time); C failed, its baselines come from the reference pass; D failed with no baseline; E's reference failed.
FAKE_GPU_PROBLEMS = [
    _problem(10, "10_fake_gemm", "ok", eager_ms=2.0, compile_ms=1.6, runtime_ms=1.0, speedup_eager=2.0,
             speedup_compile=1.6),
    _problem(11, "11_fake_conv", "ok", eager_ms=1.0, compile_ms=None, runtime_ms=2.0, speedup_eager=0.5),
    _problem(12, "12_fake_norm", "no_correct"),
    _problem(13, "13_fake_pool", "no_correct"),
    _problem(14, "14_fake_broken", "problem_error", evaluations=None),
]
FAKE_BASELINES = {"12_fake_norm": _problem(12, "12_fake_norm", "ok", method="reference", eager_ms=0.8,
                                           compile_ms=0.5, runtime_ms=0.8, speedup_eager=1.0, speedup_compile=0.625)}
FAKE_GPU_LABELS = {"device": "FAKE GPU", "torch": "0.0-fake", "triton": "0.0-fake", "precision": "fp32",
                   "tolerance": "0.0001", "trials": "5", "timing_trials": "100", "statistic": "median",
                   "policy": "strict", "timing": "fake events"}


def _bench(problems, labels):
    return {"format": "kfoundry-bench/1", "suite": "benchmarks/suite", "labels": labels, "metrics": {},
            "complete": True, "interrupted": False, "problems": problems, "pending": [], "kept": [],
            "settings": {"method": "optimize", "max_evals": 16, "time_per_problem_s": 600.0, "options": {}}}


def test_rows_fill_failed_problems_from_the_reference_pass(ps):
    rows = {r["name"]: r for r in ps.build_rows(FAKE_GPU_PROBLEMS, FAKE_BASELINES,
                                                {"10_fake_gemm": {"llm_calls": 0, "stop_reason": "budget"}})}
    assert rows["10_fake_gemm"]["compile_vs_eager"] == pytest.approx(1.25)
    assert rows["10_fake_gemm"]["baseline_source"] == "optimize"
    assert rows["10_fake_gemm"]["stop_reason"] == "budget"
    assert rows["11_fake_conv"]["compile_vs_eager"] is None
    norm = rows["12_fake_norm"]
    assert (norm["eager_ms"], norm["compile_ms"], norm["baseline_source"]) == (0.8, 0.5, "reference pass")
    assert norm["ours_ms"] is None and norm["speedup_eager"] is None and not norm["correct"]
    assert rows["13_fake_pool"]["eager_ms"] is None and rows["13_fake_pool"]["baseline_source"] is None
    assert not rows["14_fake_broken"]["judged"]


def test_summary_compares_ours_with_torch_compile_on_the_same_problems(ps):
    summary = ps.summarize(ps.build_rows(FAKE_GPU_PROBLEMS, FAKE_BASELINES))
    assert (summary["judged"], summary["correct"], summary["unjudged"]) == (4, 2, ["14_fake_broken"])
    assert summary["correct_fraction"] == 0.5 and summary["timed"]
    solved = summary["solved"]
    assert solved["timed"] == 2
    assert solved["ours_vs_eager"] == pytest.approx(1.0)  # sqrt(2.0 * 0.5)
    assert solved["compile_vs_eager"] == pytest.approx(math.sqrt(1.25))  # B: torch.compile failed, counts 1.0
    assert solved["ours_vs_compile"] == pytest.approx(1.6) and solved["ours_vs_compile_over"] == 1
    everything = summary["all"]
    assert everything["ours_vs_eager"] == pytest.approx(1.0)  # 2.0, 0.5 and two failures at 1.0
    assert everything["compile_vs_eager"] == pytest.approx(2 ** (1 / 3))  # 1.25, 1.0, 1.6 (D has no eager time)
    assert (everything["compile_over"], everything["without_eager_time"]) == (3, 1)
    assert summary["criteria"] == {"correct_fraction_at_least_0.9": False, "ours_at_least_compile_solved": False,
                                   "ours_at_least_compile_all": False}


def test_table_and_summary_text(ps):
    document = ps.build_document(_bench(FAKE_GPU_PROBLEMS, FAKE_GPU_LABELS),
                                 ps.build_rows(FAKE_GPU_PROBLEMS, FAKE_BASELINES),
                                 {"max_evals": 16, "time_per_problem_s": 600.0}, ["--resume"], "20000101T000000Z")
    text = ps.render(document)
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["#", "problem", "status", "eager"]
    gemm = next(line for line in lines if "10_fake_gemm" in line).split()
    assert gemm == ["10", "10_fake_gemm", "ok", "2", "1.6", "1", "2.000x", "1.600x", "1.250x", "16", "yes", "n/a"]
    norm = next(line for line in lines if "12_fake_norm" in line).split()
    assert norm == ["12", "12_fake_norm", "no_correct", "0.8*", "0.5*", "-", "-", "-", "1.600x*", "16", "no", "-"]
    assert "held at other sizes" not in text  # no run judged its best at other sizes
    assert "from the reference pass" in text
    assert "device: FAKE GPU; torch 0.0-fake" in text and "statistic median" in text
    assert "correct: 2 of 4 problems (50.0%); at least 90%: no" in text
    assert "ours vs eager 1.000x, torch.compile vs eager 1.118x; ours >= torch.compile: no" in text
    assert "no timings" not in text
    assert "eager at least 0.5 ms: yes for every timed problem" in text
    short = [dict(r, eager_ms=0.3) if r["name"] == "12_fake_norm" else r
             for r in ps.build_rows(FAKE_GPU_PROBLEMS, FAKE_BASELINES)]
    assert ps.summarize(short)["eager_under_min_ms"] == ["12_fake_norm"]  # the suite's size rule, checked


def test_the_table_says_which_bests_held_at_other_sizes(ps, tmp_path):
    """A run's result.json records its best judged at other sizes (FAKE records): the row, the column and the
    summary line carry it; a best that did not hold is named."""
    held = {"holds": True, "other": {"batch_size": 3}, "status": "ok", "message": ""}
    broke = {"holds": False, "other": {"batch_size": 3}, "status": "wrong_output", "message": "fake: values off"}
    for name, other in (("10_fake_gemm", held), ("11_fake_conv", broke)):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "result.json").write_text(json.dumps(
            {"stop_reason": "fake", "best": {"other_sizes": other}}))
    extras = ps.read_extras(tmp_path, FAKE_GPU_PROBLEMS)
    assert extras["11_fake_conv"]["other_sizes"]["holds"] is False
    rows = ps.build_rows(FAKE_GPU_PROBLEMS, FAKE_BASELINES, extras)
    summary = ps.summarize(rows)
    assert summary["other_sizes"] == {"checked": 2, "hold": 1, "fail": ["11_fake_conv"]}
    text = ps.render(ps.build_document(_bench(FAKE_GPU_PROBLEMS, FAKE_GPU_LABELS), rows, {"max_evals": 16}, [], "x"))
    lines = text.splitlines()
    assert next(line for line in lines if "10_fake_gemm" in line).split()[-1] == "yes"
    assert next(line for line in lines if "11_fake_conv" in line).split()[-1] == "no"
    assert "the best held at other sizes: 1 of 2 checked; not: 11_fake_conv" in text


def test_cpu_bench_reads_n_a_everywhere(ps):
    problems = [_problem(1, "1_fake_chain", "ok", evaluations=3), _problem(2, "2_fake_softmax", "no_correct")]
    labels = {**FAKE_GPU_LABELS, "device": "FAKE CPU", "timing_trials": "-", "statistic": "-"}
    rows = ps.build_rows(problems)
    summary = ps.summarize(rows)
    assert not summary["timed"] and summary["correct_fraction"] == 0.5
    assert summary["solved"]["ours_vs_eager"] is None and summary["all"]["ours_vs_eager"] is None
    assert summary["criteria"]["ours_at_least_compile_solved"] is None
    text = ps.render(ps.build_document(_bench(problems, labels), rows, {"max_evals": 16}, [], "20000101T000000Z"))
    assert "no timings" in text
    chain = next(line for line in text.splitlines() if "1_fake_chain" in line).split()
    assert chain[3:9] == ["n/a"] * 6
    assert "ours >= torch.compile: n/a" in text


def test_report_only_writes_the_json(ps, tmp_path, capsys):
    out = tmp_path / "bench"
    (out / "baselines").mkdir(parents=True)
    (out / "bench.json").write_text(json.dumps(_bench(FAKE_GPU_PROBLEMS, FAKE_GPU_LABELS)))
    (out / "baselines" / "bench.json").write_text(json.dumps(_bench(list(FAKE_BASELINES.values()), {})))
    run_dir = out / "runs" / "10_fake_gemm"
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_text(json.dumps({"llm": {"llm_calls": 0}, "stop_reason": "fake: budget"}))
    target = tmp_path / "results" / "programmatic_suite-fake.json"
    assert ps.main(["--report-only", "--out", str(out), "--json", str(target)]) == 0
    document = json.loads(target.read_text())
    assert document["format"] == ps.FORMAT and document["settings"]["llm"] == "none"
    assert document["settings"]["max_evals"] == 16 and document["settings"]["time_per_problem_s"] == 600.0
    assert [r["name"] for r in document["problems"]] == [p["name"] for p in FAKE_GPU_PROBLEMS]
    assert document["problems"][0]["stop_reason"] == "fake: budget"
    assert document["problems"][2]["baseline_source"] == "reference pass"
    assert document["summary"]["correct"] == 2 and document["notes"] == []
    assert f"written: {target}" in capsys.readouterr().out


def test_report_only_without_a_bench_is_bad_usage(ps, tmp_path, capsys):
    assert ps.main(["--report-only", "--out", str(tmp_path / "none"), "--json", str(tmp_path / "x.json")]) == 2
    assert "no bench.json" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_report_only_selection_takes_results_an_earlier_call_kept(ps, tmp_path):
    # a later call with --problems 12,13 left 10 and 11 (finished before) in "kept"
    bench = _bench(FAKE_GPU_PROBLEMS[2:4], FAKE_GPU_LABELS)
    bench["kept"] = FAKE_GPU_PROBLEMS[:2]
    suite = tmp_path / "suite"
    suite.mkdir()
    for record in FAKE_GPU_PROBLEMS:
        (suite / f"{record['name']}.py").write_text(
            "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
            "def get_inputs():\n    return [torch.ones(2)]\ndef get_init_inputs():\n    return []\n")
    out = tmp_path / "bench"
    out.mkdir()
    (out / "bench.json").write_text(json.dumps(bench))
    target = tmp_path / "selected.json"
    assert ps.main(["--report-only", "--suite", str(suite), "--problems", "10-14", "--out", str(out),
                    "--json", str(target)]) == 0
    document = json.loads(target.read_text())
    assert [r["name"] for r in document["problems"]] == [p["name"] for p in FAKE_GPU_PROBLEMS[:4]]
    assert document["pending"] == ["14_fake_broken"] and not document["bench_complete"]
    assert document["bench_metrics"]["problems"] == 4 and document["summary"]["correct"] == 2
    assert any("14_fake_broken" in note for note in document["notes"])


def test_report_only_also_joins_another_bench_of_the_same_settings(ps, tmp_path, capsys):
    # an earlier bench finished 10 and 11; a later one (another directory) reran 11 and ran 12 and 13
    earlier, later = tmp_path / "earlier", tmp_path / "later"
    for directory, problems in ((earlier, FAKE_GPU_PROBLEMS[:2]),
                                (later, [dict(FAKE_GPU_PROBLEMS[1], runtime_ms=0.5, speedup_eager=2.0)]
                                 + FAKE_GPU_PROBLEMS[2:4])):
        directory.mkdir()
        (directory / "bench.json").write_text(json.dumps(_bench(problems, FAKE_GPU_LABELS)))
    (earlier / "baselines").mkdir()
    (earlier / "baselines" / "bench.json").write_text(json.dumps(_bench(list(FAKE_BASELINES.values()), {})))
    (earlier / "runs" / "10_fake_gemm").mkdir(parents=True)
    (earlier / "runs" / "10_fake_gemm" / "result.json").write_text(json.dumps({"stop_reason": "fake: earlier"}))
    target = tmp_path / "joined.json"
    assert ps.main(["--report-only", "--out", str(later), "--also", str(earlier), "--json", str(target)]) == 0
    document = json.loads(target.read_text())
    rows = {r["name"]: r for r in document["problems"]}
    assert sorted(rows) == ["10_fake_gemm", "11_fake_conv", "12_fake_norm", "13_fake_pool"]
    assert rows["11_fake_conv"]["ours_ms"] == 0.5  # --out's own record wins over the other bench's
    assert rows["10_fake_gemm"]["stop_reason"] == "fake: earlier"  # read from the other bench's run directory
    assert rows["12_fake_norm"]["baseline_source"] == "reference pass"  # its reference pass too
    assert any("10_fake_gemm" in note and str(earlier) in note and "11_fake_conv" not in note
               for note in document["notes"])
    # a bench with other settings does not compare: bad usage, nothing written
    other = _bench(FAKE_GPU_PROBLEMS[:1], FAKE_GPU_LABELS)
    other["settings"]["max_evals"] = 32
    (earlier / "bench.json").write_text(json.dumps(other))
    assert ps.main(["--report-only", "--out", str(later), "--also", str(earlier),
                    "--json", str(tmp_path / "no.json")]) == 2
    assert "max_evals" in capsys.readouterr().err and not (tmp_path / "no.json").exists()


def test_a_run_gives_the_search_course_the_roofs_and_max_autotune(ps, tmp_path):
    """The made-up run of tests/runs/test_report_fixture.py (FIXTURE numbers: an 8192x4096x4096 fp32 GEMM, eager
    9.0 ms, the first candidate 14.0 ms, then compute 7.9 ms, tuner 6.1 and 5.2 ms) with a max-autotune baseline."""
    from kfoundry.runs.report_data import gather
    from tests.runs.test_report_fixture import EAGER_MS, build_run

    run_dir = tmp_path / "runs" / "10_fake_gemm"
    ids = build_run(run_dir)
    gathered = gather(run_dir)
    timing = gathered["best"]["evaluation"]["timing"]
    timing["baselines"][ps.AUTOTUNE] = {"median_ms": 6.5, "setup_s": 41.0}
    # the last tuner step's move, as result.json records it (the fixture's store records none)
    gathered["result"]["improvements"] = [{"candidate_id": ids["i"], "expert": "tuner", "move": {
        "kind": "config", "changed": {"gemm_0.persistent": [None, True], "gemm_0.tma": [None, True],
                                      "gemm_0.GROUP_M": [8, 16]}}}]
    figures = ps.run_figures(gathered)
    assert figures["gen0_speedup"] == pytest.approx(EAGER_MS / 14.0)
    assert figures["final_speedup"] == pytest.approx(EAGER_MS / 5.2)
    assert [(i["expert"], round(i["to"], 3)) for i in figures["improvements"]] == [
        ("compute", round(EAGER_MS / 7.9, 3)), ("tuner", round(EAGER_MS / 6.1, 3)), ("tuner", round(EAGER_MS / 5.2, 3))]
    flops = 2 * 8192 * 4096 * 4096
    assert figures["roof_key"] == "fp32" and figures["roofline"] == pytest.approx(flops / 67e12 * 1e3 / 5.2)
    assert figures["roof_3xtf32"] == pytest.approx(3 * flops / 495e12 * 1e3 / 5.2)  # the fixture's ceilings
    assert figures["roof_3xtf32_datasheet"] == pytest.approx(figures["roof_3xtf32"])  # are the datasheet's
    assert (figures["autotune_ms"], figures["autotune_compile_s"]) == (6.5, 41.0)

    record = _problem(10, "10_fake_gemm", "ok", eager_ms=EAGER_MS, compile_ms=8.6, runtime_ms=5.2,
                      speedup_eager=EAGER_MS / 5.2, speedup_compile=8.6 / 5.2)
    assert ps.read_extras(tmp_path, [record])["10_fake_gemm"]["final_speedup"] == pytest.approx(EAGER_MS / 5.2)
    slow = dict(figures, autotune_ms=4.0, autotune_compile_s=75.0)
    rows = ps.build_rows([record, dict(record, name="11_fake_gemm", number=11)],
                         extras={"10_fake_gemm": figures, "11_fake_gemm": slow})
    assert rows[0]["speedup_autotune"] == pytest.approx(6.5 / 5.2) and rows[0]["search_gain"] == pytest.approx(14 / 5.2)
    assert rows[1]["speedup_autotune"] is None  # compiled in 75 s: over the 60 s bar
    summary = ps.summarize(rows)
    assert {k: v for k, v in summary["search"].items() if k != "goal"} == {
        "median_gain_over_gen0": pytest.approx(14 / 5.2), "over": 2, "improved": 2}
    assert summary["autotune"]["over"] == 1 and summary["autotune"]["slow_compile"] == ["11_fake_gemm"]
    text = ps.render(ps.build_document(_bench([record], FAKE_GPU_LABELS), rows, {"max_evals": 12}, [], "x"))
    course = [line for line in text.splitlines() if "10_fake_gemm" in line][1]
    assert "compute 1.139x, tuner 1.475x, tuner 1.731x (config: gemm_0.persistent None\u2192True, gemm_0.tma " \
        "None\u2192True, +1 more)" in course and "78.9% fp32" in course and "32.0%" in course
    assert ">60 s" in [line for line in text.splitlines() if "11_fake_gemm" in line][1]
    assert "median gain 2.692x over 2 problem(s), 2 improved" in text
    assert summary["search"]["goal"]["below_floor"] == 2 and summary["search"]["goal"]["met"] is True
    assert "the search's goal, over the 2 problem(s) whose generation 0 reached under 70% of the floor: median gain " \
        "2.692x (goal 1.10x), >= 1.25x on 2 (goal a quarter); met: yes" in text
    assert "max-autotune-no-cudagraphs 1.250x (geomean over 1); compiled in 60 s or more, left out: 11_fake_gemm" in text


def test_a_best_replaying_a_cuda_graph_is_set_against_torch_compile_reduce_overhead(ps, tmp_path):
    from kfoundry.runs.report_data import gather
    from tests.runs.test_report_fixture import EAGER_MS, build_run

    run_dir = tmp_path / "runs" / "10_fake_gemm"
    build_run(run_dir)
    gathered = gather(run_dir)
    gathered["best"]["evaluation"]["timing"]["baselines"][ps.GRAPHS] = {"median_ms": 7.8}
    gathered["best"]["evaluation"].setdefault("guard", {})["graph_replays"] = 12
    figures = ps.run_figures(gathered)
    assert figures["reduce_overhead_ms"] == 7.8 and figures["graph_replays"] == 12
    record = _problem(10, "10_fake_gemm", "ok", eager_ms=EAGER_MS, compile_ms=8.6, runtime_ms=5.2,
                      speedup_eager=EAGER_MS / 5.2, speedup_compile=8.6 / 5.2)
    [row] = ps.build_rows([record], extras={"10_fake_gemm": figures})
    assert row["speedup_reduce_overhead"] == pytest.approx(7.8 / 5.2)
    text = ps.render(ps.build_document(_bench([record], FAKE_GPU_LABELS), [row], {"max_evals": 12}, [], "x"))
    course = [line for line in text.splitlines() if "10_fake_gemm" in line][1]
    assert "7.8 (graph)" in course and "1.500x" in course


def test_the_bench_continues_a_search_cut_short(ps, tmp_path):
    """A problem's run interrupted by the end of a device call is continued with --resume: the bench then calls
    the optimize it was handed with the run's folder alone (it failed at once, 'missing ... problem', on the
    H200 before)."""
    from kfoundry.evaluate.parent.options import EvalOptions
    from kfoundry.optimize import optimize

    run_dir = tmp_path / "run"
    first = optimize(REPO / "examples" / "pointwise_chain" / "problem.py", out=run_dir, llm=None, quiet=True,
                     options=EvalOptions(device="cpu", set_values={"batch_size": 4, "dim": 16}), max_evals=1,
                     preflight=False)
    assert first["evaluations"] == 1
    record = ps._optimize_fn("off")(resume=run_dir, quiet=True, max_evals=3, preflight=False)
    assert record["evaluations"] == 3 and record["correct"] == 3
    assert record["settings"]["eval"]["set_values"] == {"batch_size": 4, "dim": 16}  # the run's own settings


def test_the_search_goal_counts_the_problems_below_the_floor_and_names_those_near_it(ps):
    """Issue 41's goal: over the problems whose generation 0 reached under 70% of the floor, a median gain of
    1.10x and 1.25x on a quarter of them; those near the floor count as met; those without a floor are named."""
    def row(name, gen0_of_floor, gain):
        return {"name": name, "gen0_of_floor": gen0_of_floor, "search_gain": gain}
    rows = [row("a", 0.2, 1.0), row("b", 0.3, 1.12), row("c", 0.5, 1.3), row("d", 0.69, 1.05),
            row("near", 0.8, 1.0), row("untimed", None, 1.4)]
    goal = ps.search_goal(rows)
    assert goal == {"below_floor": 4, "timed_again": 0, "median_gain": pytest.approx((1.05 + 1.12) / 2),
                    "large_gains": 1, "near_floor": ["near"], "not_counted": ["untimed"], "met": False}  # 1.085x
    assert ps.search_goal(rows[1:])["met"] is True  # 1.12x median, 1 of 3 at >= 1.25x
    assert ps.search_goal([row("near", 0.9, 1.0)])["met"] is None  # nothing below the floor's 70%: no verdict
    # --confirm-gain: a gain timed again counts instead of the one found (c's 1.3x was 1.02x timed side by side)
    rows[2]["confirmed_gain"] = 1.02
    again = ps.search_goal(rows)
    assert again["timed_again"] == 1 and again["large_gains"] == 0
    assert again["median_gain"] == pytest.approx((1.02 + 1.05) / 2)


def test_confirm_gain_judges_each_runs_pair_again_once_and_the_report_reads_it(ps, tmp_path):
    """--confirm-gain: a correct problem whose final best is not generation 0's has both judged again, one after
    the other (on the CPU: correct, untimed); a problem already confirmed, a failed one and one whose best is
    generation 0's are left alone; --report-only shows what OUT/confirm/ holds (here a FAKE timed record)."""
    from kfoundry.bench.confirm import Confirmation, Timed, read_confirmations, write_confirmation
    from kfoundry.evaluate.parent.options import EvalOptions

    fixtures, out = REPO / "tests" / "fixtures", tmp_path / "bench"
    correct = (fixtures / "candidates" / "affine_ok.py").read_text()
    problem = str(fixtures / "problems" / "affine.py")
    for name, pair in (("1_pair", (1, 2)), ("2_same", (1, 1)), ("3_done", (1, 2)), ("4_failed", (1, 2))):
        run_dir = out / "runs" / name
        (run_dir / "candidates").mkdir(parents=True)
        (run_dir / "result.json").write_text(json.dumps({"generation0": {"candidate_id": pair[0]},
                                                         "best": {"candidate_id": pair[1]}}))
        for number in pair:
            (run_dir / "candidates" / f"{number}.py").write_text(correct + f"\n# candidate {number}\n")
    faked = Confirmation(Timed(1, "ok", 2.0), Timed(2, "ok", 1.6), "FAKE GPU")
    write_confirmation(out, "3_done", faked)
    # a run that optimize timed again itself (result.json's timed_again): taken as it is, nothing judged again
    by_run = Confirmation(Timed(1, "ok", 3.0), Timed(2, "ok", 2.0), "FAKE GPU")
    (out / "runs" / "5_by_run" / "candidates").mkdir(parents=True)
    (out / "runs" / "5_by_run" / "result.json").write_text(json.dumps({
        "generation0": {"candidate_id": 1}, "best": {"candidate_id": 2}, "timed_again": by_run.to_dict()}))
    names = ("1_pair", "2_same", "3_done", "4_failed", "5_by_run")
    bench = {"problems": [{"name": n, "status": "wrong_output" if n == "4_failed" else "ok", "path": problem,
                           "run_dir": f"runs/{n}"} for n in names]}
    said = []
    options = EvalOptions(device="cpu", trials=1, seed=5, timeout_s=120, guard=False)
    assert ps.confirm_gains(bench, out, options, said.append) is False
    found = read_confirmations(out)
    assert sorted(found) == ["1_pair", "3_done", "5_by_run"] and found["3_done"] == faked
    assert found["5_by_run"] == by_run and not any(line.startswith("confirming 5_by_run") for line in said)
    assert found["1_pair"].generation0.status == "ok" and found["1_pair"].gain is None  # the CPU times nothing
    assert any("1_pair: gain n/a timed again" in line for line in said)
    rows = ps.build_rows([{**p, "number": i} for i, p in enumerate(bench["problems"][:4], 1)], {}, {}, found)
    assert rows[2]["confirmed_gain"] == pytest.approx(1.25) and rows[0]["confirmed_gain"] is None
    assert rows[3]["confirmed_gain"] is None  # not correct: no gain counts
    assert "1.250x" in "\n".join(ps.course_lines(rows))
