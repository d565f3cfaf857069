"""KernelBench's outputs on constructed records (CPU runs time nothing, so the timed arithmetic is
tested here): pass@k, best of k, the sample metrics, eval_results.json and the baseline file against
the layout KernelBench's scripts write and read."""

import json
import math

import pytest

from kfoundry.bench import kernelbench
from kfoundry.bench.metrics import compiled_from, pass_at_k, summarize
from kfoundry.bench.results import ProblemResult, SampleResult

# FIXTURE: invented timings (bookkeeping, not measurement)
STATS = {"median_ms": 0.5, "q1_ms": 0.45, "q3_ms": 0.55, "min_ms": 0.4, "max_ms": 0.9, "trials": 100}
EAGER = {"median_ms": 1.0, "q1_ms": 0.95, "q3_ms": 1.05, "min_ms": 0.9, "max_ms": 1.4, "trials": 100}
LABELS = {"device": "Fake GPU", "statistic": "median", "timing_trials": 100}


def sample(k, status, ms=None, warnings=(), compiled=None):
    timed = status == "ok" and ms is not None
    return SampleResult(sample_id=k, status=status, message=f"sample {k}: {status}", compiled=compiled,
                        runtime_ms=ms, eager_ms=1.0, speedup_eager=1.0 / ms if timed else None,
                        runtime_stats=dict(STATS, median_ms=ms) if timed else None, eager_stats=EAGER,
                        policy_warnings=list(warnings), candidate=f"level_1_problem_1_sample_{k}_kernel.py")


def problem(number, samples, name=None):
    result = ProblemResult(name=name or f"{number}_p", path=f"/s/{number}_p.py", number=number, status="error",
                           method="solutions", fingerprint="f", labels=dict(LABELS), samples=samples)
    result.choose_best_sample()
    return result


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 1, 0.4),  # c / n
    (5, 2, 2, 1 - 3 / 10),  # 1 - C(3, 2) / C(5, 2)
    (5, 2, 4, 1.0),  # n - c < k: some correct sample is always drawn
    (3, 0, 3, 0.0),
    (1, 1, 1, 1.0),
])
def test_pass_at_k_is_the_unbiased_estimator(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))
    with pytest.raises(ValueError):
        pass_at_k(n, c, n + 1)


def test_compiled_follows_the_verdict_and_the_phase():
    assert compiled_from("ok") and compiled_from("wrong_output") and compiled_from("runtime_error", "init")
    assert not compiled_from("compile_error", "compile")  # a kernel that failed to compile, at first launch
    assert not compiled_from("runtime_error", "load")  # an error while importing the candidate
    assert not compiled_from("no_solution") and not compiled_from("problem_error")


def test_the_best_of_k_is_the_fastest_correct_sample():
    result = problem(1, [sample(0, "compile_error"), sample(1, "ok", 0.8), sample(2, "ok", 0.5, ["aten-compute"]),
                         sample(3, "wrong_output")])
    assert result.best_sample == 2 and result.status == "ok" and result.runtime_ms == 0.5
    assert result.speedup_eager == 2.0 and result.calls_pytorch and result.compiled
    assert result.pass_at_k == {"pass@1": 0.5, "pass@4": 1.0}
    assert result.message.startswith("best of 4 samples: sample 2 (2 correct)")
    failed = problem(2, [sample(0, "compile_error"), sample(1, "wrong_output"), sample(2, "crash")])
    assert failed.best_sample == 1 and failed.compiled  # with none correct: the first that compiled
    assert failed.pass_at_k == {"pass@1": 0.0, "pass@3": 0.0}
    again = ProblemResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result and isinstance(again.samples[0], SampleResult)


def test_sample_metrics_over_the_suite():
    results = [problem(1, [sample(0, "compile_error"), sample(1, "ok", 0.5)]),  # best: 2x
               problem(2, [sample(0, "ok", 2.0, ["torch-compute"])]),  # 0.5x, calling PyTorch
               ProblemResult(name="3_p", path="/s/3_p.py", number=3, status="no_solution", method="solutions",
                             fingerprint="f")]
    metrics = summarize([r.to_dict() for r in results])
    assert metrics["compiled"] == 2 and metrics["compile_rate"] == pytest.approx(2 / 3)
    assert metrics["passed_calling_pytorch"] == 1
    assert metrics["eager"]["fast_p"]["0.5"] == pytest.approx(1 / 3)  # 2x; the 0.5x one is not more than 0.5
    assert metrics["eager"]["fast_p"]["0.8"] == pytest.approx(1 / 3)
    samples = metrics["samples"]
    assert samples["samples"] == 3 and samples["correct_samples"] == 2 and samples["most_per_problem"] == 2
    # pass@1: (1/2 + 1 + 0) / 3; pass@2: problem 1 certain, problem 2 capped at its one sample
    assert samples["pass_at_k"] == {"1": pytest.approx(0.5), "2": pytest.approx(2 / 3)}
    first = samples["sample_0"]  # KernelBench's analysis: sample 0 alone
    assert first["correct"] == 1 and first["compiled"] == 1 and first["eager"]["fast_p"]["0"] == pytest.approx(1 / 3)
    assert first["eager"]["fast_p"]["1"] == 0.0


# the layout KernelBench's scripts write (eval_from_generations.py) and read (benchmark_eval_analysis.py)
ENTRY = {"sample_id": int, "compiled": bool, "correctness": bool, "metadata": dict, "runtime": float,
         "runtime_stats": dict}
RUNTIME_STATS = {"mean": float, "std": (float, type(None)), "min": float, "max": float, "num_trials": int}


def check_stats(stats):
    for key, kind in RUNTIME_STATS.items():
        assert key in stats and isinstance(stats[key], kind), (key, stats)


def check_eval_results(document):
    assert isinstance(document, dict)
    for problem_id, entries in document.items():
        assert isinstance(problem_id, str) and isinstance(entries, list) and entries
        for entry in entries:
            assert set(entry) == set(ENTRY)
            for key, kind in ENTRY.items():
                assert isinstance(entry[key], kind), (problem_id, key, entry[key])
            assert not isinstance(entry["sample_id"], bool)
            json.dumps(entry["metadata"])  # serializable, as KernelBench checks
            if entry["runtime_stats"]:
                check_stats(entry["runtime_stats"])
                assert entry["runtime"] == entry["runtime_stats"]["mean"] and entry["correctness"]
            else:
                assert entry["runtime"] == -1.0
        assert sorted(e["sample_id"] for e in entries) == [e["sample_id"] for e in entries]


def check_baseline(document):
    assert isinstance(document, dict) and len(document) == 1
    (level, problems), = document.items()
    assert level == "level_unknown" or (level.startswith("level") and level[5:].isdigit())
    for name, stats in problems.items():
        assert name.endswith(".py")
        check_stats(stats)


def test_eval_results_and_baseline_files_in_kernelbench_layout(tmp_path):
    results = [problem(2, [sample(0, "ok", 2.0, ["torch-compute"])], name="2_Conv"),
               problem(1, [sample(0, "compile_error"), sample(1, "ok", 0.5), sample(2, "wrong_output")],
                       name="1_Square_matmul_"),
               ProblemResult(name="relu", path="/s/relu/problem.py", number=None, status="ok", method="reference",
                             fingerprint="f", labels=dict(LABELS))]  # untimed, no samples, no number
    paths = kernelbench.write(tmp_path, results, 2)
    assert [p.name for p in paths] == ["eval_results.json", "baseline_time_torch.json"]
    evals = json.loads((tmp_path / "eval_results.json").read_text())
    check_eval_results(evals)
    assert list(evals) == ["1", "2", "relu"]  # by KernelBench's problem id; a name where there is none
    first = evals["1"]
    assert [e["compiled"] for e in first] == [False, True, True]
    assert [e["correctness"] for e in first] == [False, True, False]
    assert first[1]["runtime"] == 0.5 and first[1]["runtime_stats"]["num_trials"] == 100
    assert first[1]["runtime_stats"]["statistic"] == "median" and first[1]["runtime_stats"]["std"] is None
    assert "compilation_error" in first[0]["metadata"] and "correctness_issue" in first[2]["metadata"]
    assert evals["2"][0]["metadata"]["policy_warnings"] == ["torch-compute"]
    assert evals["relu"] == [{"sample_id": 0, "compiled": True, "correctness": True, "metadata": evals["relu"][0][
        "metadata"], "runtime": -1.0, "runtime_stats": {}}]

    baseline = json.loads((tmp_path / "baseline_time_torch.json").read_text())
    check_baseline(baseline)
    assert set(baseline["level2"]) == {"1_Square_matmul_.py", "2_Conv.py"}  # relu was not timed
    assert baseline["level2"]["1_Square_matmul_.py"]["mean"] == 1.0
    # KernelBench's analysis: speedup = baseline mean / runtime, the figure bench.json reports
    assert baseline["level2"]["1_Square_matmul_.py"]["mean"] / first[1]["runtime"] == results[1].speedup_eager
    check_baseline(kernelbench.baseline_times(results, None))
    assert list(kernelbench.baseline_times(results, None)) == ["level_unknown"]


def test_the_schema_checks_catch_a_wrong_layout():
    with pytest.raises(AssertionError):
        check_eval_results({"1": [{"sample_id": 0, "compiled": True, "correctness": True, "metadata": {},
                                   "runtime": 1.0, "runtime_stats": {"mean": 1.0}}]})
    with pytest.raises(AssertionError):
        check_baseline({"level1": {"1_a.py": {"median": 1.0}}})
