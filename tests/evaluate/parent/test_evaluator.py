"""kfoundry.evaluate.parent.evaluator: every verdict, through real worker processes, on fixture files.

Evaluations are costly (worker processes that import torch), so most candidates share one prepared
reference: the session's `affine_eval` (conftest) or one Evaluator per problem here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kfoundry
from kfoundry.errors import CandidateFileError, ProblemError, UsageError
from kfoundry.evaluate import EvalOptions, Evaluator
from kfoundry.evaluate.parent import process as process_module
from kfoundry.types import STATUSES
from tests.helpers import AFFINE_SEED, marker_line

FORWARD_PHASES = ("compile", "correctness")  # forward's first call, or a later one


@pytest.fixture(scope="module")
def argmax_evaluator(problems_dir):
    with Evaluator(problems_dir / "argmax.py", EvalOptions(device="cpu", trials=2, timeout_s=120)) as evaluator:
        yield evaluator


@pytest.fixture(scope="module")
def dropout_evaluation(problems_dir, candidates_dir):
    return kfoundry.evaluate(problems_dir / "weak_dropout.py", candidates_dir / "dropout_copy.py",
                             device="cpu", trials=2)


# -- ok ----------------------------------------------------------------------------------------------

def test_ok(affine_eval, affine_evaluator):
    evaluation = affine_eval("affine_ok.py")
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.ok
    assert evaluation.message.startswith("correct on 2 trials (fp32, atol=rtol=0.0001")
    assert "not timed (no GPU" in evaluation.message
    c = evaluation.correctness
    assert (c.trials, c.trials_passed) == (2, 2)
    assert c.ground_truth == "float64"
    assert c.max_abs_error is not None and c.max_abs_error <= 1e-6
    assert c.error_ratio_candidate is not None and c.error_ratio_candidate < 1
    assert evaluation.timing.runtime_ms is None and "no GPU" in evaluation.timing.reason
    assert evaluation.device == "cpu" and evaluation.device_facts.kind == "cpu"
    assert evaluation.cost.input_bytes == evaluation.cost.output_bytes == 4 * 250 * 4
    assert evaluation.candidate.endswith("affine_ok.py")
    assert evaluation.settings["seed"] == AFFINE_SEED
    assert evaluation.durations_s["reference_s"] > 0 and evaluation.durations_s["candidate_total_s"] > 0
    assert 0 <= evaluation.durations_s["worker_wait_s"] < evaluation.durations_s["candidate_total_s"]
    assert 0 <= evaluation.durations_s["worker_exit_s"] < evaluation.durations_s["candidate_total_s"]
    # where the worker's time went: its runs and its waits on the judge, each within the candidate's total
    assert 0 < evaluation.durations_s["worker_run_s"] < evaluation.durations_s["candidate_total_s"]
    assert 0 < evaluation.durations_s["worker_judge_check_s"] < evaluation.durations_s["candidate_total_s"]
    assert 0 < evaluation.durations_s["worker_judge_inputs_s"] < evaluation.durations_s["candidate_total_s"]
    assert evaluation.durations_s["worker_gpu_lock_wait_s"] == 0  # a CPU worker has no GPU lock
    assert evaluation.warnings == []


EXAMPLE_SIZES = {
    "conv_relu": {"batch_size": 1, "in_channels": 4, "out_channels": 8, "height": 8, "width": 8},
    "layernorm": {"batch_size": 4, "dim": 100},
    "linear_epilogue": {"batch_size": 16, "in_features": 32, "out_features": 48},
    "pointwise_chain": {"batch_size": 4, "dim": 300},
    "row_softmax": {"batch_size": 4, "dim": 100},
}


@pytest.mark.parametrize("example", sorted(EXAMPLE_SIZES))
def test_examples_are_ok_at_small_sizes(examples_dir, example):
    evaluation = kfoundry.evaluate(examples_dir / example / "problem.py", examples_dir / example / "kernel.py",
                                   device="cpu", trials=1, set_values=EXAMPLE_SIZES[example])
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.settings["set"] == EXAMPLE_SIZES[example]


# -- compile_error -----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "name, marker, expected, phase",
    [
        ("syntax_error.py", "SYNTAX ERROR HERE", "expected ':'", "load"),
        ("triton_not_constexpr.py", "KERNEL ERROR HERE", "arange's arguments must be of type tl.constexpr", None),
        ("triton_not_pow2.py", "KERNEL ERROR HERE", "arange's range must be a power of 2", None),
        ("missing_module.py", "IMPORT ERROR HERE", "No module named 'kfoundry_test_missing_triton_helpers'", "load"),
    ],
)
def test_compile_error_is_located(affine_eval, candidates_dir, name, marker, expected, phase):
    evaluation = affine_eval(name)
    path = candidates_dir / name
    line = marker_line(path, marker)
    assert evaluation.status == "compile_error", evaluation.message
    assert f"{path}:{line}" in evaluation.message
    assert expected in evaluation.message
    assert evaluation.error["line"] == line
    assert evaluation.phase == phase if phase else evaluation.phase in FORWARD_PHASES
    assert evaluation.correctness.trials == 0


def test_compile_error_without_modelnew(affine_eval):
    evaluation = affine_eval("no_modelnew.py")
    assert evaluation.status == "compile_error"
    assert "defines no ModelNew" in evaluation.message
    assert "class ModelNew(nn.Module)" in evaluation.message
    assert evaluation.phase == "load"


# -- runtime_error -----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "name, expected",
    [
        ("forward_assert.py", "AssertionError while running forward"),
        ("forward_index_error.py", "IndexError while running forward"),
    ],
)
def test_runtime_error_in_forward_is_located(affine_eval, candidates_dir, name, expected):
    evaluation = affine_eval(name)
    path = candidates_dir / name
    line = marker_line(path, "RUNTIME ERROR HERE")
    assert evaluation.status == "runtime_error", evaluation.message
    assert expected in evaluation.message
    assert f"{path}:{line}" in evaluation.message
    assert evaluation.error["line"] == line
    assert evaluation.phase in FORWARD_PHASES


def test_runtime_error_message_carries_the_exception_text(affine_eval):
    evaluation = affine_eval("forward_assert.py")
    assert "expected (batch, seq, dim), got (4, 250)" in evaluation.message
    assert evaluation.error["type"] == "AssertionError"


def test_cuda_candidate_on_cpu_needs_a_gpu(affine_eval):
    evaluation = affine_eval("cuda_inline.py")
    assert evaluation.status == "runtime_error"
    assert "CUDA candidates need a GPU" in evaluation.message
    assert "--device cuda" in evaluation.message
    assert evaluation.phase == "load"


# -- wrong_output ------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "name, fragments, first_bad",
    [
        ("bad_mask.py", ["first at [3, 249]"], [3, 249]),  # the last element is never written
        ("missing_tail.py", ["first at [3, 18]"], [3, 18]),  # element 768 = 3 * 256 starts the tail
        ("wrong_constant.py", ["values off", "e(candidate)="], [0, 0]),
        ("fp16_compute.py", ["values off", "outside atol=rtol=0.0001"], None),
        ("transposed_output.py", ["shape (250, 4) but the reference's is (4, 250)"], None),
        ("two_outputs.py", ["forward returned 2 output(s) but the reference returns 1"], None),
        ("inplace_input.py", ["forward changed its input 0 in place"], None),
    ],
)
def test_wrong_output(affine_eval, name, fragments, first_bad):
    evaluation = affine_eval(name)
    assert evaluation.status == "wrong_output", evaluation.message
    assert evaluation.message.startswith("trial 0: ")
    for fragment in fragments:
        assert fragment in evaluation.message
    assert evaluation.message.endswith(f"[reproduce with --seed {AFFINE_SEED}]")
    assert evaluation.correctness.failed_trial == 0
    assert evaluation.correctness.trials_passed == 0
    if first_bad is not None:
        assert evaluation.correctness.first_bad_index == first_bad


def test_wrong_constant_numbers(affine_eval):
    c = affine_eval("wrong_constant.py").correctness
    # scale off by 0.1%: the error is 2 * 0.001 * |x|, over 1000 standard normal samples
    assert 2e-3 < c.max_abs_error < 2e-2
    assert c.max_rel_error is not None and c.max_rel_error > 1e-4
    assert c.error_ratio_candidate > 1 > c.error_ratio_reference
    assert 0.5 < c.mismatch_fraction <= 1.0


def test_fp16_arithmetic_fails_the_fp32_tolerance(affine_eval):
    c = affine_eval("fp16_compute.py").correctness
    assert 1e-4 < c.max_abs_error < 1e-2  # fp16 rounding, not garbage
    assert c.error_ratio_candidate > 1


def test_inplace_candidate_had_right_values(affine_eval):
    # its output is right: only the input check catches it (wrong_output here, without the guard;
    # the guard names it cheating: tests/guard/test_corpus.py, dyn_inplace_input.py)
    evaluation = affine_eval("inplace_input.py")
    assert "values off" not in evaluation.message


# -- crash, timeout --------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "name, died, signal_name, returncode",
    [
        ("crash_abort.py", "killed by SIGABRT", "SIGABRT", -6),
        ("crash_segfault.py", "killed by SIGSEGV", "SIGSEGV", -11),
        ("crash_exit.py", "exited with code 3", None, 3),
    ],
)
def test_crash(affine_eval, name, died, signal_name, returncode):
    evaluation = affine_eval(name)
    assert evaluation.status == "crash", evaluation.message
    assert f"the candidate's worker process {died} in phase {evaluation.phase}" in evaluation.message
    assert evaluation.phase in FORWARD_PHASES
    assert evaluation.error["signal"] == signal_name
    assert evaluation.error["returncode"] == returncode


def test_timeout(problems_dir, candidates_dir):
    evaluation = kfoundry.evaluate(problems_dir / "affine.py", candidates_dir / "forever.py", device="cpu",
                                   trials=1, timeout_s=4)
    assert evaluation.status == "timeout"
    assert evaluation.phase in FORWARD_PHASES  # it was looping in forward
    assert evaluation.message == f"the candidate did not finish within 4 s (it was in phase {evaluation.phase})"
    assert 4 <= evaluation.durations_s["candidate_total_s"] < 15


# -- isolation -------------------------------------------------------------------------------------

def test_secret_probe_sees_a_secret_when_one_is_there(monkeypatch, candidates_dir):
    """Control for the next test: the probe does detect a secret in its environment."""
    import importlib.util

    monkeypatch.setenv("KF_TEST_API_KEY", "sk-test-123")
    spec = importlib.util.spec_from_file_location("kf_secret_probe", candidates_dir / "secret_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(RuntimeError, match="saw secret: .*KF_TEST_API_KEY"):
        module.ModelNew(2.0, 0.5)(torch.randn(4, 250))


def test_candidate_does_not_see_secrets(monkeypatch, problems_dir, candidates_dir):
    monkeypatch.setenv("KF_TEST_API_KEY", "sk-test-123")
    monkeypatch.setenv("KF_TEST_ACCESS_TOKEN", "tok-123")
    monkeypatch.setenv("LC_KF_TEST_VISIBLE", "1")  # a harmless, allowed variable: it must get through
    # a fresh evaluation: its workers start now, with this environment
    evaluation = kfoundry.evaluate(problems_dir / "affine.py", candidates_dir / "secret_probe.py",
                                   device="cpu", trials=1, guard=False)  # it reads os.environ on purpose
    assert evaluation.status == "ok", evaluation.message
    assert os.environ["KF_TEST_API_KEY"] == "sk-test-123"  # the parent keeps its own


def test_monkey_patching_torch_in_the_candidate_cannot_bend_the_verdict(examples_dir, candidates_dir):
    problem = examples_dir / "row_softmax" / "problem.py"
    options = EvalOptions(device="cpu", trials=2, set_values={"batch_size": 8, "dim": 100})
    with Evaluator(problem, options) as evaluator:
        patched = evaluator.evaluate(candidates_dir / "patches_softmax.py")
        honest = evaluator.evaluate(examples_dir / "row_softmax" / "kernel.py")
    assert patched.status == "cheating", patched.message  # the guard reads its source: it never runs
    assert [f["rule"] for f in patched.guard["findings"]][:1] == ["monkey-patch"]
    assert honest.status == "ok", honest.message
    # the parent never imported the candidate
    assert not torch.allclose(torch.zeros(2), torch.ones(2))
    assert torch.softmax(torch.tensor([0.0, 1.0]), dim=0)[1] > 0.7


# -- argmax: index outputs ---------------------------------------------------------------------------

def test_argmax_candidate_ok(argmax_evaluator, candidates_dir):
    evaluation = argmax_evaluator.evaluate(candidates_dir / "argmax_ok.py")
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.correctness.trials_passed == 2


def test_argmax_candidate_picking_the_minimum_fails(argmax_evaluator, candidates_dir):
    evaluation = argmax_evaluator.evaluate(candidates_dir / "argmax_picks_min.py")
    assert evaluation.status == "wrong_output"
    assert "index output points at values that differ from the reference's" in evaluation.message
    assert evaluation.correctness.mismatch_fraction == 1.0


# -- --eval-mode -------------------------------------------------------------------------------------

def test_eval_mode_decides_batchnorm(problems_dir, candidates_dir):
    problem, candidate = problems_dir / "batchnorm.py", candidates_dir / "batchnorm_running_stats.py"
    training = kfoundry.evaluate(problem, candidate, device="cpu", trials=2)
    assert training.status == "wrong_output"  # the reference normalizes with batch statistics
    assert "values off" in training.message
    assert training.settings["eval_mode"] is False
    inference = kfoundry.evaluate(problem, candidate, device="cpu", trials=2, eval_mode=True)
    assert inference.status == "ok", inference.message
    assert inference.settings["eval_mode"] is True


# -- weak problems -----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "problem, candidate, warning",
    [
        ("weak_tiny.py", "tiny_zeros.py", "every reference output is within the tolerance (0.0001) of zero"),
        ("weak_constant.py", "constant_bias.py", "the reference's output does not depend on its inputs"),
    ],
)
def test_weak_problem_warns_and_a_lazy_kernel_passes(problems_dir, candidates_dir, problem, candidate, warning):
    evaluation = kfoundry.evaluate(problems_dir / problem, candidates_dir / candidate, device="cpu", trials=2)
    assert evaluation.status == "ok", evaluation.message  # the verdict stands: the problem is what is weak
    assert any(w.startswith("weak problem: ") and warning in w for w in evaluation.warnings), evaluation.warnings


def test_dropout_problem_warns_that_runs_differ(dropout_evaluation):
    warnings = [w for w in dropout_evaluation.warnings if w.startswith("weak problem")]
    assert any("differs between two identical runs" in w and "--eval-mode" in w for w in warnings), warnings


def test_dropout_problem_does_not_pass_a_copy(dropout_evaluation):
    assert dropout_evaluation.status == "wrong_output"


# -- bad input ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "name, expected",
    [
        ("does_not_exist.py", "problem file not found"),
        ("syntax_error.py", "line 9: expected ':'"),
        ("no_model.py", "missing Model"),
        ("no_get_inputs.py", "missing get_inputs"),
        ("no_get_init_inputs.py", "missing get_init_inputs"),
        ("get_inputs_raises.py", "get_inputs() of the problem raised RuntimeError"),
        ("top_level_raises.py", "failed to load: ModuleNotFoundError"),
        ("forward_returns_none.py", "the problem's forward returns no tensor (None)"),
    ],
)
def test_bad_problem_raises_problem_error(problems_dir, candidates_dir, name, expected):
    with pytest.raises(ProblemError) as info:
        kfoundry.evaluate(problems_dir / "bad" / name, candidates_dir / "affine_ok.py", device="cpu", trials=1)
    assert expected in str(info.value)


def test_missing_candidate_file(affine_evaluator, candidates_dir):
    with pytest.raises(CandidateFileError, match="candidate file not found"):
        affine_evaluator.evaluate(candidates_dir / "does_not_exist.py")


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"precision": "bf16", "device": "cpu"}, "bf16 on CPU is refused"),
        ({"precision": "fp8"}, "unknown precision 'fp8'"),
        ({"trials": 0}, "--trials must be at least 1"),
        ({"tolerance": -1.0}, "--tolerance must be a positive number"),
        ({"timeout_s": 0}, "--timeout must be a positive number"),
        ({"baselines": ("eager", "tvm")}, "unknown baseline(s) tvm"),
        ({"device": "tpu"}, "unknown device 'tpu'"),
        ({"set_values": {"no_such_constant": 1}}, "has no module-level constant 'no_such_constant'"),
    ],
)
def test_bad_options_raise_usage_error(problems_dir, options, expected):
    with pytest.raises(UsageError) as info:
        Evaluator(problems_dir / "affine.py", EvalOptions(**{"device": "cpu", **options}))
    assert expected in str(info.value)


def test_options_and_settings_together_are_refused(problems_dir, candidates_dir):
    with pytest.raises(TypeError, match="either options or keyword settings"):
        kfoundry.evaluate(problems_dir / "affine.py", candidates_dir / "affine_ok.py", EvalOptions(), trials=2)


# -- seeds, reuse, results -----------------------------------------------------------------------------

def test_same_seed_gives_the_same_seeds(problems_dir):
    a = Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", seed=7, trials=3))
    b = Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", seed=7, trials=3))
    c = Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", seed=8, trials=3))
    try:
        assert a.base_seed == b.base_seed == 7
        assert a.trial_seeds == b.trial_seeds and a.init_seed == b.init_seed
        assert len(a.trial_seeds) == 3 and len(set(a.trial_seeds)) == 3
        assert c.trial_seeds != a.trial_seeds
    finally:
        for evaluator in (a, b, c):
            evaluator.close()


def test_without_a_seed_seeds_differ_and_are_recorded(problems_dir):
    a = Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", trials=3))
    b = Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", trials=3))
    try:
        assert a.base_seed != b.base_seed
        assert a.trial_seeds != b.trial_seeds
        again = Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", trials=3, seed=a.base_seed))
        assert again.trial_seeds == a.trial_seeds  # the recorded seed reproduces the run
        again.close()
    finally:
        a.close()
        b.close()


def test_evaluation_records_its_seeds(affine_eval, problems_dir):
    evaluation = affine_eval("wrong_constant.py")
    expected = Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", seed=AFFINE_SEED, trials=2))
    try:
        assert evaluation.settings["seed"] == AFFINE_SEED
        assert evaluation.correctness.seeds == expected.trial_seeds
        assert evaluation.correctness.init_seed == expected.init_seed
    finally:
        expected.close()


def test_evaluator_prepares_the_reference_once_and_gives_each_candidate_a_fresh_process(
        monkeypatch, problems_dir, candidates_dir):
    runs = []
    real_run = process_module.Worker.run

    def spy(self, job, timeout_s, **kwargs):
        runs.append((job.get("kind"), self.process.pid))
        return real_run(self, job, timeout_s, **kwargs)

    monkeypatch.setattr(process_module.Worker, "run", spy)
    progress = []
    options = EvalOptions(device="cpu", trials=1)
    with Evaluator(problems_dir / "affine.py", options, progress=progress.append) as evaluator:
        first = evaluator.evaluate(candidates_dir / "affine_ok.py")
        prepared = evaluator.prepared
        judge_pid = evaluator.judge.worker.process.pid
        second = evaluator.evaluate(candidates_dir / "wrong_constant.py")
        third = evaluator.evaluate(candidates_dir / "affine_ok.py")
        assert evaluator.prepare() is prepared
        assert evaluator.judge.worker.process.pid == judge_pid  # one judge serves every candidate
    # the fp32 reference's own error against the float64 truth, as a verdict's e(reference): small on a CPU,
    # where no convolution runs TF32
    rounding = prepared.reference_rounding
    assert rounding.error_ratio is not None and 0.0 <= rounding.error_ratio < 0.1 and not rounding.conv_tf32
    assert not rounding.tf32_level()
    assert [s.status for s in (first, second, third)] == ["ok", "wrong_output", "ok"]
    kinds = [kind for kind, _ in runs]
    assert kinds == ["candidate", "candidate", "candidate"]
    candidate_pids = [pid for kind, pid in runs if kind == "candidate"]
    assert len(set(candidate_pids)) == 3 and judge_pid not in candidate_pids  # one fresh process per candidate
    assert first.durations_s["reference_s"] == third.durations_s["reference_s"]
    assert sum(message.startswith("reference: ready") for message in progress) == 1
    assert sum(message.endswith(": starting") for message in progress) == 3
    # the wrong candidate was stopped at its first wrong trial: no guard runs
    assert not any(message == "candidate wrong_constant: guard" for message in progress)


def test_evaluation_is_json_serializable(affine_eval):
    evaluation = affine_eval("bad_mask.py")
    data = json.loads(json.dumps(evaluation.to_dict()))
    assert data["status"] == "wrong_output" and data["status"] in STATUSES
    assert data["correctness"]["first_bad_index"] == [3, 249]
    assert data["settings"]["seed"] == AFFINE_SEED
    assert set(data) >= {"status", "message", "phase", "correctness", "timing", "warnings", "cost", "settings"}


# -- on a GPU ------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_cuda_load_inline_candidate_is_ok_on_gpu(examples_dir, fixtures_dir):
    evaluation = kfoundry.evaluate(
        examples_dir / "pointwise_chain" / "problem.py", fixtures_dir / "gpu" / "cuda_pointwise_chain.py",
        device="cuda", trials=2, timing_trials=20, baselines=("eager",), set_values={"batch_size": 1024, "dim": 4096},
    )
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.timing.runtime_ms is not None and evaluation.timing.speedup_eager is not None


@pytest.mark.gpu
def test_work_on_a_side_stream_is_caught(examples_dir, fixtures_dir):
    problem = examples_dir / "pointwise_chain" / "problem.py"
    options = dict(device="cuda", trials=2, timing_trials=30, baselines=("eager",), set_values={"batch_size": 4096, "dim": 4096})
    honest = kfoundry.evaluate(problem, examples_dir / "pointwise_chain" / "kernel.py", **options)
    hidden = kfoundry.evaluate(problem, fixtures_dir / "gpu" / "side_stream_chain.py", **options)
    assert honest.status == "ok", honest.message
    assert hidden.status == "cheating", hidden.message
    assert any(f["rule"] == "side-stream" for f in hidden.guard["findings"]), hidden.guard


@pytest.mark.gpu
@pytest.mark.parametrize("example", ["pointwise_chain", "row_softmax", "linear_epilogue", "conv_relu", "layernorm"])
def test_examples_are_ok_on_gpu_at_full_size(examples_dir, example):
    evaluation = kfoundry.evaluate(examples_dir / example / "problem.py", examples_dir / example / "kernel.py",
                                   device="cuda", trials=2, timing_trials=20, baselines=("eager",))
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.timing.eager_ms > 0.1  # GPU-sized by default: at least 100 us in eager


@pytest.mark.parametrize("guard", ["cgroup", "watchdog"])
def test_a_worker_over_its_memory_budget_is_ended_and_the_next_candidate_runs(guard, monkeypatch, tmp_path,
                                                                            problems_dir, candidates_dir):
    from kfoundry.evaluate.parent.memory_guard import MemoryGuard

    if guard == "watchdog":
        monkeypatch.setenv("KFOUNDRY_MEMORY_GUARD", "watchdog")
    else:
        probe = MemoryGuard.create(1 << 30, tmp_path, "probe")
        kind = probe.kind
        probe.close()
        if kind == "watchdog":
            pytest.skip(f"no memory cgroup can be made here: {probe.reason}")
    options = EvalOptions(device="cpu", trials=1, memory_limit_bytes=int(3e9), guard=False)  # a plain hog
    with Evaluator(problems_dir / "affine.py", options) as evaluator:
        hog = evaluator.evaluate(candidates_dir / "memory_hog.py")
        after = evaluator.evaluate(candidates_dir / "affine_ok.py")
    assert hog.status == "crash", hog.message
    assert hog.message.startswith("out of host memory (") and "budget of 2.2 GB" in hog.message, hog.message
    assert guard in hog.error["memory_guard"]
    assert hog.error["out_of_memory_bytes"] >= 2e9
    assert after.status == "ok", after.message  # the run goes on


def test_complete_fills_in_the_baselines_a_verdict_was_given_without(examples_dir):
    """A pipeline's verdict waits for eager only; complete() adds torch.compile's figures once measured."""
    from types import SimpleNamespace

    from kfoundry.types import Evaluation, TimingReport, TimingStats

    def stats(ms):
        return {"median_ms": ms, "q1_ms": ms, "q3_ms": ms, "min_ms": ms, "max_ms": ms, "trials": 100}

    evaluator = Evaluator(examples_dir / "pointwise_chain" / "problem.py", EvalOptions(device="cpu"))
    report = TimingReport(candidate=TimingStats(**stats(2.0)), runtime_ms=2.0)
    evaluator._attach_baselines(report, {"stats": {"eager": stats(3.0)}, "errors": {}, "pending": ["compile"]})
    assert report.speedup_eager == 1.5 and report.speedup_compile is None and report.baselines_pending == ["compile"]
    evaluation = Evaluation(status="ok", message="", timing=report)
    evaluator.prepared = SimpleNamespace(baselines={"stats": {"eager": stats(3.0), "compile": stats(2.5)},
                                                    "errors": {}, "cached": False})
    assert evaluator.complete(evaluation)
    assert report.speedup_compile == 1.25 and report.compile_ms == 2.5 and report.baselines_pending == []
    assert not evaluator.complete(evaluation)  # nothing left to fill in


def test_every_evaluation_records_its_sandbox_and_strict_runs_where_all_of_it_holds(problems_dir, candidates_dir):
    with Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", trials=1, sandbox="strict"),
                   spare=False) as evaluator:
        evaluation = evaluator.evaluate(candidates_dir / "affine_ok.py")
    assert evaluation.status == "ok", evaluation.message
    sandbox = evaluation.to_dict()["sandbox"]
    assert sandbox["filesystem"].startswith("landlock ABI") and sandbox["network"].startswith("seccomp")
    assert sandbox["missing"] == [] and not any(w.startswith("sandbox:") for w in evaluation.warnings)
    with pytest.raises(UsageError, match="unknown sandbox mode"):
        EvalOptions(sandbox="loose").validate()


def test_a_missing_part_of_the_sandbox_warns_once_per_run_and_strict_refuses(monkeypatch, problems_dir,
                                                                             candidates_dir):
    monkeypatch.setenv("KFOUNDRY_SANDBOX_WITHOUT", "landlock")  # as on a kernel without Landlock (gVisor)
    lines = []
    options = EvalOptions(device="cpu", trials=1)
    with Evaluator(problems_dir / "affine.py", options, progress=lines.append) as evaluator:
        first = evaluator.evaluate(candidates_dir / "affine_ok.py")
        second = evaluator.evaluate(candidates_dir / "affine_ok.py")
    for evaluation in (first, second):
        assert evaluation.status == "ok", evaluation.message  # it still runs
        assert evaluation.sandbox["filesystem"] is None and evaluation.sandbox["network"].startswith("seccomp")
        assert any(w.startswith("sandbox: filesystem: Landlock is not available") for w in evaluation.warnings)
    warned = [line for line in lines if line.startswith("warning: the candidates' sandbox is incomplete")]
    assert len(warned) == 1 and "not protected" in warned[0]
    with Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", trials=1, sandbox="strict"),
                   spare=False) as evaluator:
        with pytest.raises(UsageError, match="--sandbox strict: .*Landlock is not available"):
            evaluator.evaluate(candidates_dir / "affine_ok.py")


def test_a_worker_asks_for_its_trials_budget_before_timing(affine_evaluator, tmp_path):
    """Asked right before a timing, so that eager's median, once measured, bounds a slow candidate's trials;
    with no eager figure (here: the CPU) there is no bound beyond the timing budget."""
    from kfoundry.evaluate.parent.evaluator import CandidateChecks

    affine_evaluator.prepare()
    assert affine_evaluator._serve({"request": "trials budget"}, tmp_path, CandidateChecks()) == {
        "trials_budget_s": None}


# -- the user's code: modules beside the problem, on PYTHONPATH, in a user site ----------------------------

USER_LAYERS = '''import triton
import triton.language as tl

SCALE = 2.0


@triton.jit
def affine_kernel(x_ptr, y_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, x * scale + shift, mask=mask)
'''
USER_PROBLEM = '''import torch
import torch.nn as nn
{imports}

class Model(nn.Module):
    def forward(self, x):
        return x * SCALE + SHIFT


def get_inputs():
    return [torch.randn(4, 100)]


def get_init_inputs():
    return []
'''
USER_CANDIDATE = '''import torch
import torch.nn as nn
import triton
{imports}


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        affine_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), SCALE, SHIFT, BLOCK=256)
        return y
'''
# a candidate that tries what the sandbox must stop, and says what it got in its exception
USER_PROBE = '''import json
import os
from pathlib import Path

import torch.nn as nn
from kf_user_layers import SCALE

PROJECT, CACHE, WORK = Path({project!r}), Path({cache!r}), Path({work!r})


def attempt(action):
    try:
        return "got: " + str(action())[:100]
    except Exception as exc:
        return "blocked: " + type(exc).__name__


def another_workers_file():
    own = os.path.realpath(os.getcwd())
    for folder in sorted(WORK.iterdir()):  # names are listable: the problem's folder is
        if folder.name.startswith("kfoundry-") and os.path.realpath(folder) != own:
            for entry in sorted(folder.iterdir()):
                if entry.is_file():
                    return entry.read_text()
    raise LookupError("no other worker's file to try")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        outcomes = {{
            "import beside the problem": attempt(lambda: SCALE),
            "read kfoundry.toml": attempt(lambda: (PROJECT / "kfoundry.toml").read_text()),
            "read the cache": attempt(lambda: (CACHE / ".signing-key").read_text()),
            "read the run folder": attempt(lambda: (PROJECT / "runs" / "r1" / "best.py").read_text()),
            "read another worker's folder": attempt(another_workers_file),
            "write the problem's folder": attempt(lambda: (PROJECT / "planted.py").write_text("x")),
        }}
        raise RuntimeError("OUTCOMES " + json.dumps(outcomes))

    def forward(self, x):
        return x
'''
# each run: problem, candidate, guard or not, and whether its workers fork from a server ("1") or start as processes
# of their own ("0"): KFOUNDRY_FORK_SERVER is read as each worker starts, so one process serves both ways
USER_RUNNER = r"""
import json, os, sys
import kfoundry
out, *runs = sys.argv[1:]
results = {}
for problem, candidate, guard, fork_server in zip(runs[::4], runs[1::4], runs[2::4], runs[3::4]):
    os.environ["KFOUNDRY_FORK_SERVER"] = fork_server
    r = kfoundry.evaluate(problem, candidate, device="cpu", trials=1, seed=5, guard=guard == "guard")
    results[candidate + " " + fork_server] = {"status": r.status, "message": r.message, "sandbox": r.sandbox}
open(out, "w").write(json.dumps(results))
"""


def _write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _run_user_code(world, cwd, env: dict, *runs, python=sys.executable) -> dict:
    """kfoundry.evaluate(problem, candidate) for each run (problem, candidate, "guard" or not), with the fork
    server and then without it, in one process of its own (`python`) started from `cwd` with `env`: its import
    path as a user's would be, not this test process's. Results by (candidate, fork server or not)."""
    out = world / "results.json"
    args = [str(part) for fork_server in ("1", "0") for run in runs for part in (*run, fork_server)]
    done = subprocess.run([str(python), "-c", USER_RUNNER, str(out), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {(key.rsplit(" ", 1)[0], key.endswith(" 1")): value for key, value in json.loads(out.read_text()).items()}


@pytest.fixture(scope="module")
def user_project(tmp_path_factory):
    """A project whose problem imports a package and a module beside it and a package from a PYTHONPATH
    folder outside the venv; beside them what is private: a kfoundry.toml with a key, a run folder, the
    cache, and the evaluations' own folders (KFOUNDRY_WORK_DIR), all inside the problem's folder, so that
    it is granted entry by entry."""
    world = tmp_path_factory.mktemp("user-code")
    project, deps = world / "project", world / "deps"
    imports = "from kf_user_layers import SCALE, affine_kernel\nfrom kf_user_sibling import SHIFT\nimport kf_user_dep"
    _write(project / "kf_user_layers" / "__init__.py", USER_LAYERS)
    _write(project / "kf_user_sibling.py", "SHIFT = 0.5\n")
    _write(deps / "kf_user_dep" / "__init__.py", "ANSWER = 42\n")
    problem = _write(project / "problem.py", USER_PROBLEM.format(imports=imports))
    _write(project / "kfoundry.toml", '[keys]\nopenai = "sk-kfoundry-user-code-test-0123456789"\n')
    _write(project / "runs" / "r1" / "run.sqlite", "")
    _write(project / "runs" / "r1" / "best.py", "# a run's best\n")
    _write(project / "cache" / ".signing-key", "0123456789abcdef\n")
    (project / "work").mkdir()
    candidates = world / "candidates"
    candidate = _write(candidates / "ok.py", USER_CANDIDATE.format(imports=imports))
    probe = _write(candidates / "probe.py", USER_PROBE.format(project=str(project), cache=str(project / "cache"),
                                                             work=str(project / "work")))
    (world / "elsewhere").mkdir()
    env = {**os.environ, "PYTHONPATH": str(deps), "KFOUNDRY_CACHE_DIR": str(project / "cache"),
           "KFOUNDRY_WORK_DIR": str(project / "work")}
    return {"world": world, "project": project, "problem": problem, "candidate": candidate, "probe": probe,
            "env": env}


@pytest.fixture(scope="module")
def user_code_results(user_project):
    """The candidate and the probe of `user_project` evaluated with the fork server and without it, in one process
    (evaluated from another folder): the tests below read their part."""
    p = user_project
    return _run_user_code(p["world"], p["world"] / "elsewhere", p["env"], (p["problem"], p["candidate"], "guard"),
                          (p["problem"], p["probe"], "no-guard"))


@pytest.mark.parametrize("fork_server", [True, False], ids=["fork-server", "own-process"])
def test_the_problem_and_candidates_import_the_users_code_and_nothing_private(user_project, user_code_results,
                                                                             fork_server):
    """(a) a package and a module beside problem.py, evaluated from another folder; (b) a package in a
    PYTHONPATH folder outside the venv: the reference and the candidate import them alike. And the sandbox
    still keeps the candidate out of what is private in the folders it now reads."""
    p = user_project
    ok = user_code_results[str(p["candidate"]), fork_server]
    assert ok["status"] == "ok", ok["message"]
    probe = user_code_results[str(p["probe"]), fork_server]
    assert probe["status"] == "runtime_error" and "OUTCOMES " in probe["message"], probe["message"]
    outcomes = json.loads(probe["message"].rsplit("OUTCOMES ", 1)[1])
    assert outcomes.pop("import beside the problem") == "got: 2.0"
    assert not (p["project"] / "planted.py").exists() or not probe["sandbox"]["filesystem"]
    if not (probe["sandbox"] or {}).get("filesystem"):
        pytest.skip("Landlock is not enforced here: what stays closed is not checked (tests/sandbox covers the rules)")
    assert outcomes == {"read kfoundry.toml": "blocked: PermissionError", "read the cache": "blocked: PermissionError",
                        "read the run folder": "blocked: PermissionError",
                        "read another worker's folder": "blocked: PermissionError",
                        "write the problem's folder": "blocked: PermissionError"}
    assert probe["sandbox"]["unreadable"] == []


def _venv_with_user_site(world):
    """A venv made with --system-site-packages (user site on, as for the system Python that a `pip install
    --user` serves) whose site-packages holds a .pth file that adds this venv's site-packages, outside its
    prefix: torch and kfoundry come from there."""
    import sysconfig

    venv = world / "venv"
    made = subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip",
                           "--system-site-packages", str(venv)], capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        pytest.skip(f"no venv can be made here: {made.stderr[-300:]}")
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
    here = sysconfig.get_paths()["purelib"]
    _write(Path(purelib) / "kf_outside.pth", f"import site; site.addsitedir({here!r})\n")
    return python


def test_a_user_site_package_and_the_folders_its_pth_adds_are_imported_by_every_worker(tmp_path):
    """(c) `pip install --user`: in a venv the user site is off, so the user's own Python is modeled by a venv
    made with --system-site-packages (user site on), with PYTHONUSERBASE standing for the ~/.local of the
    user's HOME. The user site holds a package and a .pth file that adds another folder holding one more.
    The parent has both on its sys.path; a worker has a HOME of its own and no PYTHONUSERBASE, so it lacks
    them unless given them (the user site as a site folder: its .pth counts). The venv itself reaches torch
    and kfoundry only through a .pth file naming a folder outside its prefix, which the sandbox must open
    too: the report's `PermissionError: .../tenacity/__init__.py`. With and without the fork server."""
    world = tmp_path
    python = _venv_with_user_site(world)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    user_site = world / "userbase" / "lib" / version / "site-packages"
    _write(user_site / "kf_user_site_pkg" / "__init__.py", USER_LAYERS)
    _write(world / "pth-target" / "kf_user_pth_pkg.py", "SHIFT = 0.5\n")
    _write(user_site / "kf_more.pth", str(world / "pth-target") + "\n")
    imports = "from kf_user_site_pkg import SCALE, affine_kernel\nfrom kf_user_pth_pkg import SHIFT"
    problem = _write(world / "project" / "problem.py", USER_PROBLEM.format(imports=imports))
    candidate = _write(world / "candidates" / "ok.py", USER_CANDIDATE.format(imports=imports))
    (world / "elsewhere").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PYTHONUSERBASE"] = str(world / "userbase")
    results = _run_user_code(world, world / "elsewhere", env, (problem, candidate, "guard"), python=python)
    for fork_server in (True, False):
        result = results[str(candidate), fork_server]
        assert result["status"] == "ok", (fork_server, result["message"])


# -- environment faults ------------------------------------------------------------------------------

needs_landlock = pytest.mark.skipif(not __import__("kfoundry.sandbox.landlock", fromlist=["x"]).abi_version(),
                                    reason="the kernel enforces no Landlock: nothing is denied")


@needs_landlock
def test_a_worker_that_cannot_import_a_dependency_is_an_environment_fault_not_a_crash(
        tmp_path, monkeypatch, problems_dir, candidates_dir):
    from kfoundry.errors import EnvironmentFault
    from tests.helpers import linked_unreadable_dependency

    entry = linked_unreadable_dependency(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(entry))
    monkeypatch.setenv("KFOUNDRY_FORK_SERVER", "0")  # workers import torch themselves, as on a GPU
    with Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", trials=1, timeout_s=120),
                   spare=False) as evaluator:
        with pytest.raises(EnvironmentFault) as caught:
            evaluator.evaluate(candidates_dir / "affine_ok.py")
        fault = caught.value
        assert fault.cause.startswith(f"a candidate's worker process cannot read {entry / 'typing_extensions.py'} "
                                      f"(a link to {tmp_path / 'hidden' / 'typing_extensions.py'})")
        assert "PermissionError: [Errno 13] Permission denied" in fault.cause
        assert f"make {tmp_path / 'hidden'} readable to kfoundry's workers" in fault.fix
        # every later evaluation of this evaluator raises it at once, without a worker
        taken = []
        monkeypatch.setattr(evaluator.pool, "take", lambda: taken.append(1))
        with pytest.raises(EnvironmentFault):
            evaluator.evaluate(candidates_dir / "affine_ok.py")
        assert taken == []


def test_an_import_error_inside_the_candidate_stays_its_compile_error(affine_eval):
    """The environment's faults are told apart by where the failing import is: the candidate's own import
    of a module that nobody installed is its own."""
    evaluation = affine_eval("missing_module.py")
    assert evaluation.status == "compile_error" and evaluation.phase == "load"
    assert "No module named 'kfoundry_test_missing_triton_helpers'" in evaluation.message
