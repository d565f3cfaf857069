"""The ghost run on problems whose output barely depends on their inputs, end to end through the
evaluator on CPU (tests/fixtures/ghost): there an earlier call's right answer is also this call's, so
the ghost run is only sound because it poisons every tensor forward allocates uninitialised.

Legitimate kernels are `ok` and the problem is called weak; a kernel that never stores into the output
leaves NaN (`wrong_output`, the trials poison what forward allocates too); an output computed once and
returned again is `cheating` by ghost-replay, whether it is kept in a module global or held by the model.
The candidates share their kernels through a module beside the problem (pool_lse_kernels.py,
deep_mlp_kernels.py), imported as a user's candidate imports the user's own code."""

from pathlib import Path

import pytest

from kfoundry.evaluate import EvalOptions, Evaluator

GHOST_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "ghost"
INDEPENDENT = "the reference's output does not depend on its inputs"


def _evaluator(problem: str) -> Evaluator:
    return Evaluator(GHOST_DIR / problem, EvalOptions(device="cpu", trials=2, seed=11, timeout_s=120))


@pytest.fixture(scope="module")
def pool_lse():
    with _evaluator("pool_lse.py") as evaluator:
        yield evaluator


@pytest.fixture(scope="module")
def deep_mlp():
    with _evaluator("deep_mlp.py") as evaluator:
        yield evaluator


def _rules(evaluation) -> list[str]:
    return [f["rule"] for f in evaluation.guard.get("findings", [])]


def _called_weak(evaluation) -> bool:
    return any(w.startswith("weak problem: ") and INDEPENDENT in w for w in evaluation.warnings)


@pytest.mark.parametrize("name", ["pool_lse_ok", "pool_lse_buffer"])
def test_legitimate_kernels_pass_on_a_pooled_logsumexp(pool_lse, name):
    # pool_lse_buffer returns a buffer made in __init__: the ghost run leaves the last trial's (right) answer
    # in it, and only the second look (poisoned, then a run with its kernels) tells it from a kept value
    evaluation = pool_lse.evaluate(GHOST_DIR / f"{name}.py")
    assert evaluation.status == "ok", evaluation.message
    assert _rules(evaluation) == [] and _called_weak(evaluation)


def test_legitimate_kernels_pass_on_a_deep_random_network(deep_mlp):
    evaluation = deep_mlp.evaluate(GHOST_DIR / "deep_mlp_ok.py")
    assert evaluation.status == "ok", evaluation.message
    assert _rules(evaluation) == [] and _called_weak(evaluation)


@pytest.mark.parametrize("problem, name", [("pool_lse", "pool_lse_unwritten"), ("deep_mlp", "deep_mlp_unwritten")])
def test_an_output_no_kernel_writes_reads_as_poison(request, problem, name):
    evaluation = request.getfixturevalue(problem).evaluate(GHOST_DIR / f"{name}.py")
    assert evaluation.status == "wrong_output", evaluation.message
    assert "NaN" in evaluation.message and "trial 0" in evaluation.message


@pytest.mark.parametrize("problem, name", [("pool_lse", "pool_lse_kept"), ("deep_mlp", "deep_mlp_kept")])
def test_an_output_computed_once_and_returned_again_is_a_ghost(request, problem, name):
    evaluation = request.getfixturevalue(problem).evaluate(GHOST_DIR / f"{name}.py")
    assert evaluation.status == "cheating", evaluation.message
    assert _rules(evaluation) == ["ghost-replay"] and _called_weak(evaluation)


def test_an_output_the_model_holds_and_no_kernel_rewrites_is_a_ghost(pool_lse):
    evaluation = pool_lse.evaluate(GHOST_DIR / "pool_lse_init_kept.py")
    assert evaluation.status == "cheating", evaluation.message
    # the held tensor is put back after the second look: no other check sees the guard's own poison
    assert _rules(evaluation) == ["ghost-replay"]
    assert "keeps between calls" in evaluation.message
