"""The adversarial corpus, end to end through the evaluator on CPU: every cheating candidate is
caught by the rule its docstring names; every legitimate candidate passes untouched.

tests/fixtures/guard/*.py state their expectation in their first line: `cheat: RULE: why` or
`legit: why`. The examples and the ok fixtures are legitimate neighbours too."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kfoundry.evaluate import EvalOptions, Evaluator

GUARD_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "guard"
CORPUS = sorted(GUARD_DIR.glob("*.py"))
SMALL = {
    "pointwise_chain": {"batch_size": 4, "dim": 100},
    "row_softmax": {"batch_size": 8, "dim": 100},
    "linear_epilogue": {"batch_size": 8, "in_features": 32, "out_features": 24},
    "conv_relu": {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 8, "width": 8},
    "layernorm": {"batch_size": 8, "dim": 100},
}


def expectation(path: Path) -> tuple[str, str | None]:
    first = path.read_text().splitlines()[0].strip('"').strip()
    kind, _, rest = first.partition(":")
    return kind, (rest.split(":")[0].strip() if kind == "cheat" else None)


# candidates whose worker builds a C++ extension (a compile of torch/extension.h: half a minute on two cores): judged
# in the background from the module's start, in the evaluator's second worker, while the tests before theirs run
BUILDS = {"legit_read_cpp_fields"}
JUDGED = sorted(CORPUS, key=lambda path: path.stem in BUILDS)  # theirs last


class CorpusEvaluator:
    """One evaluator for the whole corpus; `evaluate(path)` is its verdict (for BUILDS: the one begun first)."""

    def __init__(self, evaluator: Evaluator, background: ThreadPoolExecutor, begin: list[Path]) -> None:
        self.evaluator = evaluator
        self.begun = {path: background.submit(evaluator.evaluate, path) for path in begin}

    def evaluate(self, path: Path):
        begun = self.begun.get(path)
        return begun.result() if begun is not None else self.evaluator.evaluate(path)


@pytest.fixture(scope="module", autouse=True)  # from the module's first test: the builds begin at once
def corpus_evaluator(request, problems_dir):
    selected = {item.nodeid.rsplit("::", 1)[-1] for item in request.session.items}
    begin = [path for path in JUDGED if path.stem in BUILDS and f"test_corpus_candidate[{path.stem}]" in selected]
    options = EvalOptions(device="cpu", trials=2, seed=7, timeout_s=120, workers=2)
    with Evaluator(problems_dir / "affine.py", options) as evaluator, ThreadPoolExecutor(1) as background:
        yield CorpusEvaluator(evaluator, background, begin)


def test_corpus_is_large_enough():
    kinds = [expectation(path) for path in CORPUS]
    cheats = {rule for kind, rule in kinds if kind == "cheat"}
    assert sum(kind == "cheat" for kind, _ in kinds) >= 20
    assert sum(kind == "legit" for kind, _ in kinds) >= 9
    assert len(cheats) >= 17  # every rule that CPU can show (side streams and the physical floor need a GPU)


@pytest.mark.parametrize("example", sorted(SMALL))
def test_examples_pass_the_guard(examples_dir, example):
    evaluation = Evaluator(examples_dir / example / "problem.py",
                           EvalOptions(device="cpu", trials=1, set_values=SMALL[example]), spare=False)
    with evaluation as evaluator:
        result = evaluator.evaluate(examples_dir / example / "kernel.py")
    assert result.status == "ok", result.message
    assert result.guard["findings"] == [] and result.guard["compute_ops"] == []


def test_permissive_policy_warns_about_pytorch_compute(problems_dir):
    cheat = GUARD_DIR / "cheat_torch_compute.py"
    with Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", trials=1, policy="permissive"),
                   spare=False) as evaluator:
        evaluation = evaluator.evaluate(cheat)
    assert evaluation.status == "ok", evaluation.message
    assert {w["rule"] for w in evaluation.guard["warnings"]} >= {"torch-compute", "aten-compute"}
    assert any(w.startswith("guard (permissive): [torch-compute]") for w in evaluation.warnings)


def test_permissive_policy_still_needs_a_kernel_that_does_the_work(problems_dir):
    with Evaluator(problems_dir / "affine.py", EvalOptions(device="cpu", trials=1, policy="permissive"),
                   spare=False) as evaluator:
        no_kernel = evaluator.evaluate(GUARD_DIR / "dyn_numpy_no_kernel.py")
        decoy = evaluator.evaluate(GUARD_DIR / "dyn_ghost_decoy.py")
    assert no_kernel.status == "cheating" and "[no-custom-kernel]" in no_kernel.message
    assert decoy.status == "cheating" and "[ghost-replay]" in decoy.message


@pytest.mark.parametrize("path", JUDGED, ids=[p.stem for p in JUDGED])
def test_corpus_candidate(corpus_evaluator, path):
    kind, rule = expectation(path)
    evaluation = corpus_evaluator.evaluate(path)
    rules = [f["rule"] for f in evaluation.guard.get("findings", [])]
    if kind == "legit":
        assert evaluation.status == "ok", evaluation.message
        assert rules == [] and evaluation.guard.get("warnings", []) == []
        assert min(evaluation.guard["launches_per_trial"]) >= 1
    else:
        assert evaluation.status == "cheating", f"{path.name}: {evaluation.status}: {evaluation.message}"
        assert rule in rules, (rule, rules, evaluation.message)
        assert f"[{rule}]" in evaluation.message or rule in rules


def test_without_its_extra_runs_the_guard_still_judges_the_source_and_what_the_trials_ran(problems_dir,
                                                                                         candidates_dir):
    """guard_runs=False (the composer's correctness tests): no ghost, caching or outlier run, and the verdict
    says so; a cheat the static rules miss is still caught from the operators its trials ran."""
    options = EvalOptions(device="cpu", trials=1, seed=7, timeout_s=120, guard_runs=False)
    with Evaluator(problems_dir / "affine.py", options, spare=False) as evaluator:
        ok = evaluator.evaluate(candidates_dir / "affine_ok.py")
        alias = evaluator.evaluate(GUARD_DIR / "dyn_aten_alias.py")
    assert ok.status == "ok", ok.message
    assert ok.guard["extra_runs_skipped"] and "guard_s" not in ok.durations_s  # the worker had no guard phase
    assert ok.guard["findings"] == [] and ok.guard["launches_per_trial"] == [1]
    assert alias.status == "cheating" and "[aten-compute]" in alias.message, alias.message
    assert "guard_s" not in alias.durations_s


# -- the checks only a GPU can make ------------------------------------------------------------------

GPU_FIXTURES = GUARD_DIR.parent / "gpu"


@pytest.mark.gpu
def test_physical_floor_catches_a_candidate_that_skips_work_while_timed(examples_dir):
    options = EvalOptions(device="cuda", trials=2, timing_trials=30, baselines=("eager",))
    with Evaluator(examples_dir / "pointwise_chain" / "problem.py", options) as evaluator:
        honest = evaluator.evaluate(examples_dir / "pointwise_chain" / "kernel.py")
        lazy = evaluator.evaluate(GPU_FIXTURES / "cache_by_version.py")
    assert honest.status == "ok", honest.message
    assert honest.timing.runtime_ms > honest.guard["physical_floor_ms"]
    assert lazy.status == "cheating", lazy.message
    assert "[physical-limit]" in lazy.message


@pytest.mark.gpu
def test_library_kernels_are_seen_by_the_profiler(examples_dir):
    options = EvalOptions(device="cuda", trials=1, timing_trials=10, baselines=("eager",),
                          set_values={"batch_size": 256, "in_features": 512, "out_features": 512})
    with Evaluator(examples_dir / "linear_epilogue" / "problem.py", options) as evaluator:
        evaluation = evaluator.evaluate(GPU_FIXTURES / "matmul_alias.py")
    rules = [f["rule"] for f in evaluation.guard["findings"]]
    assert evaluation.status == "cheating", evaluation.message
    assert "aten-compute" in rules and "library-kernel" in rules, (rules, evaluation.guard.get("kernels"))
