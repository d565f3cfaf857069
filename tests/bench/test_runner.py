"""The bench runner with the optimize method through an injected optimize function: per-problem results,
outputs, resume, faults, --set; and once with the real kfoundry.optimize, on the CPU (tested apart too)."""

import csv
import json
from pathlib import Path

import pytest
from rich.console import Console

from kfoundry.bench.runner import run_bench
from kfoundry.bench.settings import BenchSettings
from kfoundry.bench.suite import discover
from kfoundry.bench.table import print_report
from kfoundry.errors import UsageError
from kfoundry.evaluate.parent.options import EvalOptions
from kfoundry.optimize.settings import OptimizeSettings
from kfoundry.run_config import RunConfig
from kfoundry.runs import RunStore
from kfoundry.runs.outputs import write_outputs
from tests.bench.helpers import TINY, write_suite

# FIXTURE: invented runtimes for a fake search (tests of bookkeeping, not of measuring)
FAKE_TIMINGS = {"1_a": (1.0, 2.0, 1.5), "2_b": None, "3_c": (4.0, 2.0, 3.0)}  # (ms, eager ms, compile ms)


def fake_evaluation(timing):
    if timing is None:
        return {"status": "wrong_output", "message": "fake: wrong", "timing": {}, "correctness": {}}
    ms, eager, compiled = timing
    return {"status": "ok", "message": "fake: ok",
            "timing": {"runtime_ms": ms, "eager_ms": eager, "compile_ms": compiled, "speedup_eager": eager / ms,
                       "speedup_compile": compiled / ms, "trials": 100, "statistic": "median",
                       "method": "fake timing", "device": "Fake GPU", "torch_version": "2.99",
                       "triton_version": "9.9"},
            "correctness": {"trials": 5, "trials_passed": 5, "tolerance": 1e-4, "precision": "fp32"}}


class FakeOptimize:
    """Stands in for kfoundry.optimize.optimize: makes a run store and returns its result.json. Like optimize it
    leaves a report.html in the run (here a stand-in page: the bench draws the real one, figures and all, only
    where a run has none; `writes_report=False` leaves that to the bench)."""

    def __init__(self, fail_on=(), interrupt_on=(), interrupt_after_one=(), writes_report=True):
        self.writes_report = writes_report
        self.calls = []
        self.fail_on, self.interrupt_on = set(fail_on), set(interrupt_on)
        self.interrupt_after_one = set(interrupt_after_one)

    def __call__(self, problem_path=None, *, out=None, options=None, llm=None, max_evals=None, max_time_s=None,
                 max_cost=None, target_speedup=None, quiet=True, resume=None, check_sizes=False):
        if resume is not None:  # optimize --resume: the run's first evaluation stays, one more is made
            self.calls.append({"name": resume.name, "resume": True, "max_evals": max_evals})
            with RunStore.open(resume) as store:
                cid = store.add_candidate("class ModelNew: pass  # 2\n", [], "tuner", 0, 1, "tuner")
                store.finish_evaluation(store.start_evaluation(cid), fake_evaluation(FAKE_TIMINGS[resume.name]))
                paths = write_outputs(store, {"kind": "cuda", "name": "Fake GPU"})
            self._report(resume)
            return json.loads(paths["result"].read_text())
        name = Path(problem_path).stem
        self.calls.append({"name": name, "out": out, "options": options, "llm": llm, "max_evals": max_evals,
                           "max_time_s": max_time_s, "quiet": quiet})
        if name in self.interrupt_on:
            out.mkdir(parents=True)
            (out / "run.sqlite").write_text("half made")  # killed mid-run: resuming starts it over
            raise KeyboardInterrupt
        if name in self.interrupt_after_one:  # killed after its first verdict: resuming keeps it
            with RunStore.create(out, problem_path, {"policy": "strict"}, seed=1) as store:
                cid = store.add_candidate("class ModelNew: pass\n", [], "initializer", 0, 0, "llm")
                store.finish_evaluation(store.start_evaluation(cid), fake_evaluation(FAKE_TIMINGS[name]))
            raise KeyboardInterrupt
        if name in self.fail_on:
            raise RuntimeError("the fake search broke")
        with RunStore.create(out, problem_path, {"policy": "strict"}, seed=1) as store:
            cid = store.add_candidate("class ModelNew: pass\n", [], "initializer", 0, 0, "llm")
            store.finish_evaluation(store.start_evaluation(cid), fake_evaluation(FAKE_TIMINGS[name]))
            if check_sizes:  # as the driver records its generalisation check: 3_c's best holds only at its sizes
                store.choose_best(cid)
                store.save_state("size_check", {"candidate_id": cid, "verified_at": {"n": 4}, "other": {"n": 3},
                                                "holds": name != "3_c", "status": "ok" if name != "3_c" else
                                                "runtime_error", "message": ""})
            paths = write_outputs(store, {"kind": "cuda", "name": "Fake GPU"})
        self._report(out)
        return json.loads(paths["result"].read_text())

    def _report(self, run_dir: Path) -> None:
        if self.writes_report:
            (run_dir / "report.html").write_text("<html><body>the fake search's report</body></html>\n")


def settings(options=None, max_cost=None, **bench):
    """A bench's run config: the optimize method with an LLM spec and 3 evaluations per problem."""
    return RunConfig(search=OptimizeSettings(llm=["replay:x.jsonl"], max_evals=3, max_cost=max_cost),
                     eval=options or EvalOptions(device="cpu"), bench=BenchSettings(method="optimize", **bench))


@pytest.fixture
def suite(tmp_path):
    return discover(write_suite(tmp_path / "suite", ["1_a.py", "2_b.py", "3_c.py"]))


def test_optimize_method(tmp_path, suite):
    fake = FakeOptimize(writes_report=False)
    report = run_bench(suite, settings(time_per_problem=60.0), tmp_path / "out", optimize_fn=fake)
    by_name = {r.name: r for r in report.results}
    assert by_name["1_a"].status == "ok" and by_name["1_a"].speedup_eager == 2.0
    assert by_name["1_a"].speedup_compile == 1.5 and by_name["1_a"].runtime_ms == 1.0
    assert by_name["2_b"].status == "no_correct" and "wrong_output 1" in by_name["2_b"].message
    assert by_name["3_c"].speedup_eager == 0.5
    assert by_name["1_a"].labels["device"] == "Fake GPU" and by_name["1_a"].labels["torch"] == "2.99"
    call = fake.calls[0]
    assert call["out"] == tmp_path / "out" / "runs" / "1_a" and call["max_time_s"] == 60.0
    assert call["llm"] == ["replay:x.jsonl"] and call["max_evals"] == 3 and call["quiet"] is True

    document = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert document["complete"] and [p["name"] for p in document["problems"]] == ["1_a", "2_b", "3_c"]
    metrics = document["metrics"]
    assert metrics["correctness_rate"] == pytest.approx(2 / 3)
    assert metrics["eager"]["fast_p"]["1"] == pytest.approx(1 / 3)  # only 1_a is correct and faster
    assert metrics["eager"]["geomean_all"] == pytest.approx(1.0)  # (2 * 0.5 * 1)^(1/3)
    assert document["labels"]["device"] == "Fake GPU" and document["labels"]["statistic"] == "median"
    rows = list(csv.DictReader((tmp_path / "out" / "bench.csv").open()))
    assert [r["status"] for r in rows] == ["ok", "no_correct", "ok"] and rows[0]["speedup_eager"] == "2.0"
    page = (tmp_path / "out" / "bench.html").read_text()
    assert "fast_1.5 vs eager" in page and 'src="data:image/svg+xml;base64,' in page
    assert (tmp_path / "out" / "runs" / "1_a" / "report.html").is_file()  # written by the bench when missing

    console = Console(record=True, width=200)
    print_report(report, console)
    text = console.export_text()
    assert "2x" in text and "no_correct" in text and "device: Fake GPU" in text and "66.7%" in text


def test_a_killed_bench_resumes_with_finished_problems_kept(tmp_path, suite):
    out = tmp_path / "out"
    first = run_bench(suite, settings(), out, optimize_fn=FakeOptimize(interrupt_on={"2_b"}))
    assert first.interrupted and not first.complete and first.pending == ["2_b", "3_c"]
    saved = json.loads((out / "bench.json").read_text())
    assert [p["name"] for p in saved["problems"]] == ["1_a"] and saved["complete"] is False
    assert (out / "runs" / "2_b").exists()  # the interrupted problem's half-made run dir

    with pytest.raises(UsageError, match="--resume"):
        run_bench(suite, settings(), out, optimize_fn=FakeOptimize())

    again = FakeOptimize()
    second = run_bench(suite, settings(), out, resume=True, optimize_fn=again)
    assert [c["name"] for c in again.calls] == ["2_b", "3_c"] and second.reused == ["1_a"]
    assert second.complete and [r.name for r in second.results] == ["1_a", "2_b", "3_c"]

    changed = FakeOptimize()
    run_bench(suite, settings(max_cost=1.0), out, resume=True, optimize_fn=changed)
    assert len(changed.calls) == 3  # other settings: nothing is kept


def test_a_resumed_bench_goes_on_with_the_interrupted_search_keeping_its_evaluations(tmp_path, suite):
    out = tmp_path / "out"
    first = run_bench(suite, settings(), out, optimize_fn=FakeOptimize(interrupt_after_one={"2_b"}))
    assert first.interrupted and first.pending == ["2_b", "3_c"]
    again = FakeOptimize()
    second = run_bench(suite, settings(), out, resume=True, optimize_fn=again)
    assert again.calls[0] == {"name": "2_b", "resume": True, "max_evals": 3}  # not started over
    assert [c["name"] for c in again.calls] == ["2_b", "3_c"] and second.complete
    with RunStore.open(out / "runs" / "2_b", resume=False) as store:
        assert len(store.finished_evaluations()) == 2  # the first call's verdict and the resumed one's
    changed = FakeOptimize(interrupt_after_one={"2_b"})
    run_bench(suite, settings(), tmp_path / "other", optimize_fn=changed)
    later = FakeOptimize()
    run_bench(suite, settings(max_cost=1.0), tmp_path / "other", resume=True, optimize_fn=later)
    assert all("resume" not in call for call in later.calls)  # other settings: the search starts over


@pytest.mark.parametrize("where", ["header", "middle", "end"])
def test_a_damaged_bench_file_is_one_line_for_resume(tmp_path, suite, where):
    import random

    out = tmp_path / "out"
    run_bench(suite, settings(), out, optimize_fn=FakeOptimize())
    path = out / "bench.json"
    data = bytearray(path.read_bytes())
    start = {"header": 0, "middle": len(data) // 2, "end": max(0, len(data) - 64)}[where]
    rng = random.Random(7)
    for i in range(start, min(len(data), start + 64)):
        data[i] = rng.randrange(256)
    path.write_bytes(bytes(data))
    with pytest.raises(UsageError) as info:
        run_bench(suite, settings(), out, resume=True, optimize_fn=FakeOptimize())
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_resume_with_another_selection_keeps_the_other_results(tmp_path, suite):
    out = tmp_path / "out"
    run_bench(discover(suite.root, problems="1"), settings(), out, optimize_fn=FakeOptimize())
    report = run_bench(discover(suite.root, problems="2-3"), settings(), out, resume=True,
                       optimize_fn=FakeOptimize())
    assert [r.name for r in report.results] == ["2_b", "3_c"] and [r.name for r in report.kept] == ["1_a"]
    later = FakeOptimize()
    run_bench(suite, settings(), out, resume=True, optimize_fn=later)
    assert later.calls == []


def test_one_problem_failing_does_not_end_the_bench(tmp_path, suite):
    report = run_bench(suite, settings(), tmp_path / "out", optimize_fn=FakeOptimize(fail_on={"1_a"}))
    assert [r.status for r in report.results] == ["error", "no_correct", "ok"]
    assert "the fake search broke" in report.results[0].message
    # the harness's own failure is no verdict on the problem: a resumed bench runs it again, keeping the others
    again = FakeOptimize()
    resumed = run_bench(suite, settings(), tmp_path / "out", resume=True, optimize_fn=again)
    assert [c["name"] for c in again.calls] == ["1_a"] and resumed.reused == ["2_b", "3_c"]
    assert {r.name: r.status for r in resumed.results}["1_a"] != "error"


def test_set_values_go_to_the_problems_that_have_them(tmp_path):
    write_suite(tmp_path / "suite", ["1_a.py"])
    (tmp_path / "suite" / "2_b.py").write_text(TINY.replace("n = 8", "m = 8").replace("randn(n)", "randn(m)"))
    suite = discover(tmp_path / "suite")
    fake = FakeOptimize()
    report = run_bench(suite, settings(options=EvalOptions(device="cpu", set_values={"n": 4})), tmp_path / "out",
                       optimize_fn=fake)
    assert [c["options"].set_values for c in fake.calls] == [{"n": 4}, {}]
    assert report.results[0].set_values == {"n": 4}
    with pytest.raises(UsageError, match="--set q"):
        run_bench(suite, settings(options=EvalOptions(device="cpu", set_values={"q": 1})), tmp_path / "o2",
                  optimize_fn=fake)


def test_settings_are_checked():
    with pytest.raises(UsageError, match="unknown --method"):
        BenchSettings(method="magic").validate()
    with pytest.raises(UsageError, match="needs the directory"):
        BenchSettings(method="solutions").validate()
    with pytest.raises(UsageError, match="goes only with --method solutions"):
        BenchSettings(method="reference", solutions=Path(".")).validate()


def test_the_runner_calls_kfoundry_optimize(tmp_path, suite, monkeypatch):
    import kfoundry.optimize

    fake = FakeOptimize()
    monkeypatch.setattr(kfoundry.optimize, "optimize", fake)
    report = run_bench(suite, settings(), tmp_path / "out")
    assert [c["name"] for c in fake.calls] == ["1_a", "2_b", "3_c"] and report.results[0].speedup_eager == 2.0


def test_with_devices_problems_run_at_once_each_on_its_own_device(tmp_path, suite):
    fake = FakeOptimize()
    report = run_bench(suite, settings(options=EvalOptions(), devices="cpu:2"), tmp_path / "out", optimize_fn=fake)
    assert sorted(r.name for r in report.results) == ["1_a", "2_b", "3_c"] and not report.pending
    assert {call["options"].device for call in fake.calls} == {"cpu"}
    assert json.loads((tmp_path / "out" / "bench.json").read_text())["problems"]


def test_an_interrupt_with_devices_stops_the_running_searches_and_keeps_the_rest_for_resume(tmp_path, suite):
    """Ctrl-C reaches the main thread while the searches run in others: they are asked to stop (the real
    search stops at its next generation), problems not started are not started, nothing cut short counts."""
    import os
    import signal
    import threading
    import time

    from kfoundry.search.stop import stop_requested

    class StopsWhenAsked(FakeOptimize):
        def __call__(self, problem_path, **kw):
            name = Path(problem_path).stem
            if name == "1_a":
                return super().__call__(problem_path, **kw)  # finishes before the interrupt
            started.set()
            if name == "2_b":
                time.sleep(0.2)
                os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C: a real signal wakes the waiting main thread
            deadline = time.monotonic() + 20
            while not stop_requested() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert stop_requested()
            return super().__call__(problem_path, **kw)  # what a stopped search returns: a partial result

    started = threading.Event()
    fake = StopsWhenAsked()
    one_device = settings(options=EvalOptions(), devices="cpu:1,cpu:1")
    # Ctrl-C as a terminal delivers it: in the full suite an earlier test left SIGINT ignored in this worker
    # process at the OS level (Python's own record of the handler unchanged)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        report = run_bench(suite, one_device, tmp_path / "out", optimize_fn=fake)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert report.interrupted and not stop_requested()  # the request ends with the bench
    finished = [r.name for r in report.results]
    assert "2_b" not in finished and "2_b" in report.pending  # cut short: runs again with --resume
    assert set(finished) | set(report.pending) == {"1_a", "2_b", "3_c"}
    again = run_bench(suite, one_device, tmp_path / "out", resume=True, optimize_fn=FakeOptimize())
    assert sorted(r.name for r in again.results) == ["1_a", "2_b", "3_c"] and not again.pending


def test_a_too_large_problem_is_reported_and_the_bench_goes_on(tmp_path):
    """A real bench (the reference method: real evaluations, no search) over two small problems and one
    whose inputs alone (160 GB) exceed the machine: it is refused before anything runs, recorded as
    too large with the figures, and the others are judged."""
    directory = write_suite(tmp_path / "suite", ["1_a.py", "3_c.py"])
    (directory / "2_huge.py").write_text(TINY.replace("n = 8", "n = 40_000_000_000"))
    lines = []
    config = RunConfig(eval=EvalOptions(device="cpu", trials=1), bench=BenchSettings(method="reference"))
    report = run_bench(discover(directory), config, tmp_path / "out", progress=lines.append, write_html=False)
    statuses = {r.name: r.status for r in report.results}
    assert statuses == {"1_a": "ok", "2_huge": "too_large", "3_c": "ok"}
    huge = next(r for r in report.results if r.name == "2_huge")
    assert "too large for this machine" in huge.message and "--set" in huge.message
    assert report.complete
    saved = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert [p["status"] for p in saved["problems"]].count("too_large") == 1
    # a problem that did not fit counts, as a failure, and is told apart (unjudged): the suite's score must
    # not rise because a problem was refused
    metrics = report.metrics()
    assert (metrics["problems"], metrics["unjudged"], metrics["correct"]) == (3, 1, 2)
    assert metrics["correctness_rate"] == pytest.approx(2 / 3) and saved["metrics"] == json.loads(json.dumps(metrics))
    assert any("2_huge: too_large" in line for line in lines)


def test_the_table_uses_the_terminal_and_cuts_nothing_when_piped(tmp_path, suite):
    report = run_bench(suite, settings(), tmp_path / "out", optimize_fn=FakeOptimize(), write_html=False)
    piped = Console(record=True, width=60)  # not a terminal: plain text
    print_report(report, piped)
    lines = piped.export_text().splitlines()
    header = lines[1]
    assert header.split() == ["#", "problem", "status", "compiled", "vs", "eager", "vs", "compile", "ms", "eager",
                              "ms", "compile", "ms", "gen", "0", "->", "best", "(gain)"]
    assert [line.split()[0] for line in lines[3:6]] == ["1", "2", "3"] and len(header) > 60
    assert "  2_b: no correct candidate in 1 evaluations (wrong_output 1)" in lines
    wide = Console(record=True, width=220, force_terminal=True)  # a wide terminal: the whole width
    print_report(report, wide)
    text = wide.export_text()
    assert len(next(line for line in text.splitlines() if line.startswith("┏"))) == 220 and "┃ vs eager ┃" in text
    narrow = Console(record=True, width=70, force_terminal=True)  # too narrow for the table: plain text
    print_report(report, narrow)
    assert narrow.export_text().splitlines()[1] == header


def test_optimize_method_with_the_real_search(tmp_path):
    """No stand-in: kfoundry.optimize itself on one tiny problem, two evaluations on the CPU (Triton's
    interpreter), no LLM (the composer writes, the tuner evolves). The bench's result carries the run's own
    figures: its status, its evaluations, its best candidate's verdict."""
    suite = discover(write_suite(tmp_path / "suite", ["1_a.py"]))
    config = RunConfig(search=OptimizeSettings(max_evals=2), eval=EvalOptions(device="cpu", trials=1, timeout_s=120),
                       bench=BenchSettings(method="optimize"))
    report = run_bench(suite, config, tmp_path / "out", write_html=False, check=False)
    [result] = report.results
    run_dir = tmp_path / "out" / "runs" / "1_a"
    record = json.loads((run_dir / "result.json").read_text())  # what the search wrote of itself
    with RunStore.open(run_dir, resume=False) as store:
        finished = store.finished_evaluations()
        best = store.final_best()
    assert record["llm_used"] is False and record["timed"] is False and "evaluation budget spent" in record["stop_reason"]
    assert len(finished) == record["evaluations"] == result.evaluations == 2
    assert best is not None and best["status"] == "ok" and best["trials_passed"] == best["trials"] == 1
    assert record["best"]["candidate_id"] == best["candidate_id"] and record["correct"] >= 1
    assert result.status == "ok" and result.compiled and result.run_dir == "runs/1_a"
    assert result.message == f"{record['correct']} of 2 evaluations correct; not timed"
    assert result.speedup_eager is None and result.runtime_ms is None  # the CPU times nothing: none invented
    assert result.other_sizes == record["best"]["other_sizes"] and result.out_of_resource == 0
    assert result.labels["device"] == record["device"]["name"] and result.labels["trials"] == 1
    saved = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert saved["complete"] and saved["problems"] == [json.loads(json.dumps(result.to_dict()))]

def test_the_optimize_method_reports_its_best_candidates_policy_warnings(tmp_path, suite):
    class CallsPyTorch(FakeOptimize):
        def __call__(self, problem_path=None, **kw):
            name = Path(problem_path).stem
            with RunStore.create(kw["out"], problem_path, {"policy": "permissive"}, seed=1) as store:
                cid = store.add_candidate("class ModelNew: pass\n", [], "initializer", 0, 0, "llm")
                evaluation = fake_evaluation(FAKE_TIMINGS[name])
                evaluation["guard"] = {"policy": "permissive", "warnings": [{"rule": "aten-compute"}]}
                evaluation["timing"]["candidate"] = {"median_ms": 1.0, "q1_ms": 0.9, "q3_ms": 1.1, "min_ms": 0.8,
                                                     "max_ms": 1.5, "trials": 100}
                store.finish_evaluation(store.start_evaluation(cid), evaluation)
                paths = write_outputs(store, {"kind": "cuda", "name": "Fake GPU"})
            return json.loads(paths["result"].read_text())

    report = run_bench(suite, settings(), tmp_path / "out", optimize_fn=CallsPyTorch(), write_html=False)
    by_name = {r.name: r for r in report.results}
    assert by_name["1_a"].calls_pytorch and by_name["1_a"].policy_warnings == ["aten-compute"]
    assert by_name["1_a"].runtime_stats["max_ms"] == 1.5 and by_name["1_a"].compiled
    assert not by_name["2_b"].calls_pytorch and by_name["2_b"].compiled  # wrong output: it compiled
    assert report.metrics()["passed_calling_pytorch"] == 2


# -- environment faults ------------------------------------------------------------------------------

class MachineFails(FakeOptimize):
    """A search that meets an environment fault on the named problems (its evaluations would all fail)."""

    def __init__(self, on):
        super().__init__()
        self.on = set(on)

    def __call__(self, problem_path=None, preflight=True, **kw):
        assert not preflight  # the bench checked the machine once, as it started
        if problem_path is not None and Path(problem_path).stem in self.on:
            self.calls.append({"name": Path(problem_path).stem})
            from kfoundry.errors import EnvironmentFault

            raise EnvironmentFault("CUDA could not start in the judge process: RuntimeError: No CUDA GPUs are "
                                   "available", "check that the NVIDIA driver is loaded")
        return super().__call__(problem_path, **kw)


def test_an_environment_fault_stops_the_bench_records_the_problem_and_resume_runs_it_again(tmp_path, suite):
    from kfoundry.errors import EnvironmentFault

    out = tmp_path / "out"
    failing = MachineFails({"2_b"})
    with pytest.raises(EnvironmentFault, match="No CUDA GPUs are available"):
        run_bench(suite, settings(), out, optimize_fn=failing)
    assert [c["name"] for c in failing.calls] == ["1_a", "2_b"]  # the next problem would fail the same way
    record = json.loads((out / "bench.json").read_text())
    statuses = {p["name"]: p["status"] for p in record["problems"]}
    assert statuses == {"1_a": "ok", "2_b": "environment_error"} and record["pending"] == ["3_c"]
    faulty = next(p for p in record["problems"] if p["name"] == "2_b")
    assert faulty["message"].startswith("environment fault: CUDA could not start") and "fix:" in faulty["message"]
    assert not record["complete"] and record["environment_error"] == faulty["message"]
    assert record["metrics"]["problems"] == 1  # a problem the machine failed on says nothing of the method
    again = FakeOptimize()
    report = run_bench(suite, settings(), out, resume=True, optimize_fn=again)
    assert [c["name"] for c in again.calls] == ["2_b", "3_c"] and report.reused == ["1_a"]
    assert [r.status for r in report.results] == ["ok", "no_correct", "ok"] and report.complete


def test_with_devices_an_environment_fault_starts_no_more_problems(tmp_path, suite):
    from kfoundry.errors import EnvironmentFault

    failing = MachineFails({"1_a"})
    with pytest.raises(EnvironmentFault):
        run_bench(suite, settings(options=EvalOptions(), devices="cpu:1,cpu:1"), tmp_path / "out",
                  optimize_fn=failing)
    record = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert {p["name"]: p["status"] for p in record["problems"]}["1_a"] == "environment_error"
    assert "3_c" not in [c["name"] for c in failing.calls]  # none starts once the fault is known


def test_the_machine_is_checked_before_the_first_problem(tmp_path, suite, monkeypatch):
    import kfoundry.doctor as doctor
    from kfoundry.doctor.check import problem
    from kfoundry.errors import EnvironmentFault

    lines = []
    risk = problem("gpu 0", "other processes hold 60.0 GiB", "stop them")
    monkeypatch.setattr(doctor, "preflight", lambda device, sandbox: [risk])
    run_bench(suite, settings(), tmp_path / "out", optimize_fn=FakeOptimize(), progress=lines.append)
    assert lines[0] == "warning: environment: gpu 0: other processes hold 60.0 GiB (fix: stop them)"
    fatal = problem("import path", "a worker cannot import torch", "install torch", fatal=True)
    monkeypatch.setattr(doctor, "preflight", lambda device, sandbox: [fatal])
    fake = FakeOptimize()
    with pytest.raises(EnvironmentFault, match="import path: a worker cannot import torch"):
        run_bench(suite, settings(), tmp_path / "out2", optimize_fn=fake)
    assert fake.calls == [] and not (tmp_path / "out2").exists()


def test_each_problem_s_best_is_checked_at_other_sizes_with_a_column_and_a_count(tmp_path, suite):
    config = settings()
    config.search.check_sizes = True
    fake = FakeOptimize()
    report = run_bench(suite, config, tmp_path / "out", optimize_fn=fake)
    by_name = {r.name: r for r in report.results}
    assert [by_name[n].holds_at_other_sizes for n in ("1_a", "2_b", "3_c")] == [True, None, False]
    metrics = json.loads((tmp_path / "out" / "bench.json").read_text())["metrics"]
    assert metrics["size_checked"] == 2 and metrics["holds_at_other_sizes"] == 1
    console = Console(record=True, width=250)
    print_report(report, console)
    text = console.export_text()
    assert "other sizes" in text and "NO" in text
    assert "holds at other sizes (the correct candidate judged again at a second size set)" in text
    assert "1 of 2 checked" in text


def test_out_of_resource_errors_of_our_experts_are_counted(tmp_path, suite):
    """The composer's and the tuner's candidates that failed "out of resource", per problem and in total; an
    LLM's do not count (only our experts' kernels are checked against the device)."""
    oor = {"status": "compile_error", "message": "out of resource: shared memory, Required: 262144, Hardware "
           "limit: 232448.", "timing": {}, "correctness": {}}
    counts = {"1_a": {"composer": 1, "tuner": 2, "initializer": 1}, "2_b": {}, "3_c": {"initializer": 1}}

    def fake(problem_path=None, *, out=None, **_):
        name = Path(problem_path).stem
        with RunStore.create(out, problem_path, {"policy": "strict"}, seed=1) as store:
            cid = store.add_candidate("class ModelNew: pass\n", [], "composer", 0, 0, "template")
            store.finish_evaluation(store.start_evaluation(cid), fake_evaluation(FAKE_TIMINGS[name]))
            for expert, count in counts[name].items():
                origin = {"composer": "template", "tuner": "tuner"}.get(expert, "llm")
                for i in range(count):
                    cid = store.add_candidate(f"class ModelNew: pass  # {expert} {i}\n", [], expert, 0, 1, origin)
                    store.finish_evaluation(store.start_evaluation(cid), oor)
            paths = write_outputs(store, {"kind": "cuda", "name": "Fake GPU"})
        return json.loads(paths["result"].read_text())
    report = run_bench(suite, settings(), tmp_path / "out", optimize_fn=fake)
    assert [r.out_of_resource for r in report.results] == [3, 0, 0]
    document = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert document["metrics"]["out_of_resource"] == 3
    assert [r["out_of_resource"] for r in csv.DictReader((tmp_path / "out" / "bench.csv").open())] == ["3", "0", "0"]
    console = Console(record=True, width=250)
    print_report(report, console)
    text = console.export_text()
    assert "out of resource" in text and "3 evaluation(s)" in text


class CreditOptimize(FakeOptimize):
    """1_a: a search that went from 1.2x in generation 0 to 1.8x (tests.runs.test_credit); 2_b: none correct;
    3_c: a result.json written before the credit fields."""

    def __call__(self, problem_path=None, **kw):
        from tests.runs.test_credit import build_credit_run

        name = Path(problem_path).stem
        if name == "2_b":
            return super().__call__(problem_path, **kw)
        with RunStore.create(kw["out"], problem_path, {"policy": "strict"}, seed=1) as store:
            if name == "1_a":
                build_credit_run(store)
            else:
                cid = store.add_candidate("class ModelNew: pass\n", [], "initializer", 0, 0, "llm")
                store.finish_evaluation(store.start_evaluation(cid), fake_evaluation(FAKE_TIMINGS[name]))
            record = json.loads(write_outputs(store, {"kind": "cuda", "name": "Fake GPU"})["result"].read_text())
        if name == "3_c":
            for key in ("generation0", "improvements", "gain_over_generation0"):
                del record[key]
        return record


def test_the_bench_gives_each_problem_its_generation0_best_the_final_best_and_the_gain(tmp_path, suite):
    out = tmp_path / "out"
    report = run_bench(suite, settings(), out, optimize_fn=CreditOptimize())
    document = json.loads((out / "bench.json").read_text())
    problems = {p["name"]: p for p in document["problems"]}
    assert problems["1_a"]["generation0_speedup"] == 1.2 and problems["1_a"]["speedup_eager"] == 1.8
    assert problems["1_a"]["gain_over_generation0"] == pytest.approx(1.5)
    for name in ("2_b", "3_c"):  # none correct; an older result.json
        assert problems[name]["generation0_speedup"] is None and problems[name]["gain_over_generation0"] is None

    rows = {r["name"]: r for r in csv.DictReader((out / "bench.csv").open())}
    assert list(rows["1_a"])[-2:] == ["generation0_speedup", "gain_over_generation0"]
    assert float(rows["1_a"]["generation0_speedup"]) == 1.2 and float(rows["1_a"]["speedup_eager"]) == 1.8
    assert float(rows["1_a"]["gain_over_generation0"]) == pytest.approx(1.5)
    assert rows["3_c"]["generation0_speedup"] == "" and rows["3_c"]["gain_over_generation0"] == ""

    page = (out / "bench.html").read_text()
    assert '<th class="num">gen-0 best</th><th class="num">final best</th><th class="num">gain over gen 0</th>' in page
    assert '<td class="num">1.2x</td><td class="num">1.8x</td><td class="num">1.5x</td>' in page
    assert '<td class="num">-</td><td class="num">0.5x</td><td class="num">-</td>' in page  # 3_c: older result

    console = Console(record=True, width=60)
    print_report(report, console)
    lines = console.export_text().splitlines()
    assert lines[1].rstrip().endswith("gen 0 -> best (gain)")
    assert lines[3].rstrip().endswith("1.2x -> 1.8x (1.5x)") and lines[5].rstrip().endswith(" -")

    kept = run_bench(suite, settings(), out, resume=True, optimize_fn=CreditOptimize())  # read back from bench.json
    assert {r.name: r.gain_over_generation0 for r in kept.results}["1_a"] == pytest.approx(1.5)
